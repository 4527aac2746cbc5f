/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: shared declarations of the module's .c files.
 */


#ifndef _NGX_HTTP_PIC_MODULE_H_INCLUDED_
#define _NGX_HTTP_PIC_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


#define NGX_HTTP_PIC_VERSION  "0.1.0"


/* counters kept in the shared zone, one copy for all workers */
typedef struct {
    ngx_atomic_t                 requests;       /* requests seen in pic locations */
    ngx_atomic_t                 errors;         /* answered with an error status */
    ngx_atomic_t                 status_requests;
    time_t                       started;        /* zone creation time (msec / 1000) */
    ngx_uint_t                   generation;     /* reloads survived */
} ngx_http_pic_shctx_t;


typedef struct {
    ngx_http_pic_shctx_t        *sh;
    ngx_slab_pool_t             *shpool;
} ngx_http_pic_zone_ctx_t;


typedef struct {
    ngx_shm_zone_t              *shm_zone;       /* pic_zone, NULL when unset */
} ngx_http_pic_main_conf_t;


typedef struct {
    ngx_flag_t                   enable;         /* pic on|off */
    ngx_flag_t                   status;         /* pic_status in this location */
} ngx_http_pic_loc_conf_t;


extern ngx_module_t  ngx_http_pic_module;


/* status location content handler (ngx_http_pic_status.c) */
ngx_int_t ngx_http_pic_status_handler(ngx_http_request_t *r);


#endif /* _NGX_HTTP_PIC_MODULE_H_INCLUDED_ */
