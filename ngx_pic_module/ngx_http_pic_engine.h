/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: the engine pool.  A pool is an nginx upstream block
 * named by pic_upstream, or a list of pic_engine addresses.  Engine health
 * comes from two sources: failed requests (upstream status 502/504 seen in
 * the log phase) and periodic probes (GET /healthz over a non-blocking
 * nginx connection, made by one worker at a time).  The pic_balancer
 * upstream method sends each request to the combine node of its plan.
 */


#ifndef _NGX_HTTP_PIC_ENGINE_H_INCLUDED_
#define _NGX_HTTP_PIC_ENGINE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_pic_module.h"
#include "ngx_http_pic_index.h"


/* pic_upstream NAME */
char *ngx_http_pic_upstream(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

/* pic_engine ADDRESS */
char *ngx_http_pic_engine(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

/* pic_balancer (upstream context) */
char *ngx_http_pic_balancer(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

/* Fill the engines of upstream pools once every upstream is parsed. */
ngx_int_t ngx_http_pic_engine_init_pools(ngx_conf_t *cf);

/* Start this worker's probe timer. */
ngx_int_t ngx_http_pic_engine_init_process(ngx_cycle_t *cycle);

/* Slots of pool that may take traffic now. */
uint64_t ngx_http_pic_engine_eligible(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_main_conf_t *pmcf, ngx_http_pic_pool_t *pool);

/* Passive health: account the upstream states of a finished request. */
void ngx_http_pic_engine_account(ngx_http_request_t *r,
    ngx_http_pic_zone_ctx_t *zc, ngx_http_pic_ctx_t *ctx);


#endif /* _NGX_HTTP_PIC_ENGINE_H_INCLUDED_ */
