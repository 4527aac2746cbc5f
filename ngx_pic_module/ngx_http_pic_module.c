/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: directives, configuration and the shared zone.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_pic_module.h"


static ngx_int_t ngx_http_pic_init(ngx_conf_t *cf);
static void *ngx_http_pic_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_pic_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_pic_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static char *ngx_http_pic_zone(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_pic_status(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_pic_init_zone(ngx_shm_zone_t *shm_zone, void *data);
static ngx_int_t ngx_http_pic_log_handler(ngx_http_request_t *r);


static ngx_command_t  ngx_http_pic_commands[] = {

    { ngx_string("pic"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_pic_loc_conf_t, enable),
      NULL },

    { ngx_string("pic_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_pic_zone,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pic_status"),
      NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_pic_status,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_pic_module_ctx = {
    NULL,                                  /* preconfiguration */
    ngx_http_pic_init,                     /* postconfiguration */

    ngx_http_pic_create_main_conf,         /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_pic_create_loc_conf,          /* create location configuration */
    ngx_http_pic_merge_loc_conf            /* merge location configuration */
};


ngx_module_t  ngx_http_pic_module = {
    NGX_MODULE_V1,
    &ngx_http_pic_module_ctx,              /* module context */
    ngx_http_pic_commands,                 /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    NULL,                                  /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static void *
ngx_http_pic_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_pic_main_conf_t  *pmcf;

    pmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_pic_main_conf_t));
    if (pmcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     pmcf->shm_zone = NULL;
     */

    return pmcf;
}


static void *
ngx_http_pic_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_pic_loc_conf_t  *plcf;

    plcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_pic_loc_conf_t));
    if (plcf == NULL) {
        return NULL;
    }

    plcf->enable = NGX_CONF_UNSET;
    plcf->status = NGX_CONF_UNSET;

    return plcf;
}


static char *
ngx_http_pic_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_pic_loc_conf_t  *prev = parent;
    ngx_http_pic_loc_conf_t  *conf = child;

    ngx_conf_merge_value(conf->enable, prev->enable, 0);
    ngx_conf_merge_value(conf->status, prev->status, 0);

    return NGX_CONF_OK;
}


static char *
ngx_http_pic_zone(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pic_main_conf_t  *pmcf = conf;

    ssize_t                    size;
    ngx_str_t                 *value;
    ngx_http_pic_zone_ctx_t   *ctx;

    if (pmcf->shm_zone) {
        return "is duplicate";
    }

    value = cf->args->elts;

    size = ngx_parse_size(&value[2]);

    if (size == NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid zone size \"%V\"", &value[2]);
        return NGX_CONF_ERROR;
    }

    if (size < (ssize_t) (8 * ngx_pagesize)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "zone \"%V\" is too small", &value[1]);
        return NGX_CONF_ERROR;
    }

    ctx = ngx_pcalloc(cf->pool, sizeof(ngx_http_pic_zone_ctx_t));
    if (ctx == NULL) {
        return NGX_CONF_ERROR;
    }

    pmcf->shm_zone = ngx_shared_memory_add(cf, &value[1], size,
                                           &ngx_http_pic_module);
    if (pmcf->shm_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    if (pmcf->shm_zone->data) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "zone \"%V\" is already used", &value[1]);
        return NGX_CONF_ERROR;
    }

    pmcf->shm_zone->init = ngx_http_pic_init_zone;
    pmcf->shm_zone->data = ctx;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_pic_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_http_pic_zone_ctx_t  *octx = data;

    size_t                    len;
    ngx_http_pic_zone_ctx_t  *ctx;

    ctx = shm_zone->data;

    if (octx) {
        /* reload: keep the old zone and what it holds */
        ctx->sh = octx->sh;
        ctx->shpool = octx->shpool;
        ctx->sh->generation++;
        return NGX_OK;
    }

    ctx->shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        ctx->sh = ctx->shpool->data;
        return NGX_OK;
    }

    ctx->sh = ngx_slab_calloc(ctx->shpool, sizeof(ngx_http_pic_shctx_t));
    if (ctx->sh == NULL) {
        return NGX_ERROR;
    }

    ctx->shpool->data = ctx->sh;
    ctx->sh->started = ngx_time();

    len = sizeof(" in pic zone \"\"") + shm_zone->shm.name.len;

    ctx->shpool->log_ctx = ngx_slab_alloc(ctx->shpool, len);
    if (ctx->shpool->log_ctx == NULL) {
        return NGX_ERROR;
    }

    ngx_sprintf(ctx->shpool->log_ctx, " in pic zone \"%V\"%Z",
                &shm_zone->shm.name);

    return NGX_OK;
}


static char *
ngx_http_pic_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pic_loc_conf_t  *plcf = conf;

    ngx_http_core_loc_conf_t  *clcf;

    if (plcf->status != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    plcf->status = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_pic_status_handler;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_pic_log_handler(ngx_http_request_t *r)
{
    ngx_http_pic_loc_conf_t   *plcf;
    ngx_http_pic_main_conf_t  *pmcf;
    ngx_http_pic_zone_ctx_t   *ctx;

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pic_module);
    pmcf = ngx_http_get_module_main_conf(r, ngx_http_pic_module);

    if (pmcf->shm_zone == NULL || r != r->main) {
        return NGX_OK;
    }

    ctx = pmcf->shm_zone->data;

    if (plcf->status) {
        (void) ngx_atomic_fetch_add(&ctx->sh->status_requests, 1);
        return NGX_OK;
    }

    if (!plcf->enable) {
        return NGX_OK;
    }

    (void) ngx_atomic_fetch_add(&ctx->sh->requests, 1);

    if (r->headers_out.status >= NGX_HTTP_BAD_REQUEST) {
        (void) ngx_atomic_fetch_add(&ctx->sh->errors, 1);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_pic_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt        *h;
    ngx_http_core_main_conf_t  *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_pic_log_handler;

    return NGX_OK;
}
