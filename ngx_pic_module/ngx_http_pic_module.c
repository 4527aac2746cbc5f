/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: directives, configuration, the shared zone and the
 * per-worker start (redis connection, health probes).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#if (NGX_THREADS)
#include <ngx_thread_pool.h>
#endif

#include "ngx_http_pic_module.h"
#include "ngx_http_pic_index.h"
#include "ngx_http_pic_engine.h"
#include "ngx_http_pic_redis.h"


static ngx_int_t ngx_http_pic_preconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_pic_postconfiguration(ngx_conf_t *cf);
static void *ngx_http_pic_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_pic_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_pic_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_pic_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_pic_init_process(ngx_cycle_t *cycle);
static void ngx_http_pic_exit_process(ngx_cycle_t *cycle);

static char *ngx_http_pic_zone_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_pic_status(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_pic_read_secret(ngx_conf_t *cf, ngx_str_t *name,
    ngx_str_t *secret);
static char *ngx_http_pic_redis_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_pic_secret(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_pic_probe_ssl_init(ngx_conf_t *cf,
    ngx_http_pic_main_conf_t *pmcf);
static char *ngx_http_pic_health_check(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_pic_marker(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_pic_cdc(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_pic_scope(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_pic_template(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_pic_thread_pool(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_pic_model(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


static ngx_conf_enum_t  ngx_http_pic_modes[] = {
    { ngx_string("off"), NGX_HTTP_PIC_OFF },
    { ngx_string("on"), NGX_HTTP_PIC_ON },
    { ngx_string("observe"), NGX_HTTP_PIC_OBSERVE },
    { ngx_string("affinity"), NGX_HTTP_PIC_AFFINITY },
    { ngx_null_string, 0 }
};


static ngx_conf_num_bounds_t  ngx_http_pic_imbalance_bounds = {
    ngx_conf_check_num_bounds, 0, 1000000
};


static ngx_conf_num_bounds_t  ngx_http_pic_exact_weight_bounds = {
    ngx_conf_check_num_bounds, 0, 1000
};


static ngx_command_t  ngx_http_pic_commands[] = {

    { ngx_string("pic"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_enum_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_pic_loc_conf_t, mode),
      &ngx_http_pic_modes },

    { ngx_string("pic_zone"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE2,
      ngx_http_pic_zone_directive,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pic_status"),
      NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_pic_status,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pic_upstream"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_pic_upstream,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pic_engine"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_pic_engine,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pic_balancer"),
      NGX_HTTP_UPS_CONF|NGX_CONF_NOARGS,
      ngx_http_pic_balancer,
      0,
      0,
      NULL },

    { ngx_string("pic_redis"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE123,
      ngx_http_pic_redis_directive,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pic_pool_secret_file"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_pic_secret,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pic_redis_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_pic_loc_conf_t, redis_timeout),
      NULL },

    { ngx_string("pic_health_check"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_http_pic_health_check,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pic_probe_ssl"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_pic_main_conf_t, probe_ssl),
      NULL },

    { ngx_string("pic_probe_ssl_certificate"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_pic_main_conf_t, probe_ssl_certificate),
      NULL },

    { ngx_string("pic_probe_ssl_certificate_key"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_pic_main_conf_t, probe_ssl_certificate_key),
      NULL },

    { ngx_string("pic_probe_ssl_trusted_certificate"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_pic_main_conf_t, probe_ssl_trusted_certificate),
      NULL },

    { ngx_string("pic_marker"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_pic_marker,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pic_split_documents"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_pic_loc_conf_t, split),
      NULL },

    { ngx_string("pic_cdc"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE3,
      ngx_http_pic_cdc,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pic_min_segment"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_pic_loc_conf_t, min_segment),
      NULL },

    { ngx_string("pic_s1_fallback"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_pic_loc_conf_t, s1),
      NULL },

    { ngx_string("pic_scope"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_pic_scope,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pic_body_max"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_pic_loc_conf_t, body_max),
      NULL },

    { ngx_string("pic_thread_pool"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE12,
      ngx_http_pic_thread_pool,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pic_imbalance"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_pic_loc_conf_t, imbalance),
      &ngx_http_pic_imbalance_bounds },

    { ngx_string("pic_exact_weight"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_pic_loc_conf_t, exact_weight),
      &ngx_http_pic_exact_weight_bounds },

    { ngx_string("pic_replica_cache"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_pic_loc_conf_t, replica_cache),
      NULL },

    { ngx_string("pic_template"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_pic_template,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("pic_model"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_1MORE,
      ngx_http_pic_model,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_pic_module_ctx = {
    ngx_http_pic_preconfiguration,         /* preconfiguration */
    ngx_http_pic_postconfiguration,        /* postconfiguration */

    ngx_http_pic_create_main_conf,         /* create main configuration */
    ngx_http_pic_init_main_conf,           /* init main configuration */

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
    ngx_http_pic_init_process,             /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_pic_exit_process,             /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_int_t
ngx_http_pic_preconfiguration(ngx_conf_t *cf)
{
    return ngx_http_pic_add_variables(cf);
}


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
     *     pmcf->redis = NULL;
     *     pmcf->redis_name = { 0, NULL };
     *     pmcf->redis_user = { 0, NULL };
     *     pmcf->redis_password = { 0, NULL };
     *     pmcf->probe_uri = { 0, NULL };
     *     pmcf->default_pool = NULL;
     *     pmcf->enabled = 0;
     */

    if (ngx_array_init(&pmcf->pools, cf->pool, 4,
                       sizeof(ngx_http_pic_pool_t *))
        != NGX_OK)
    {
        return NULL;
    }

    pmcf->redis_connect_timeout = NGX_CONF_UNSET_MSEC;
    pmcf->probe_interval = NGX_CONF_UNSET_MSEC;
    pmcf->probe_timeout = NGX_CONF_UNSET_MSEC;
    pmcf->max_fails = NGX_CONF_UNSET_UINT;
    pmcf->probe_fails = NGX_CONF_UNSET_UINT;
    pmcf->probe_passes = NGX_CONF_UNSET_UINT;
    pmcf->fail_timeout = NGX_CONF_UNSET;
    pmcf->probe_ssl = NGX_CONF_UNSET;

    return pmcf;
}


static char *
ngx_http_pic_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_pic_main_conf_t  *pmcf = conf;

    ngx_conf_init_msec_value(pmcf->redis_connect_timeout, 1000);
    ngx_conf_init_msec_value(pmcf->probe_interval, 2000);
    ngx_conf_init_msec_value(pmcf->probe_timeout, 1000);
    ngx_conf_init_uint_value(pmcf->max_fails, 1);
    ngx_conf_init_uint_value(pmcf->probe_fails, 1);
    ngx_conf_init_uint_value(pmcf->probe_passes, 1);
    ngx_conf_init_value(pmcf->fail_timeout, 10);

    if (pmcf->probe_uri.len == 0) {
        ngx_str_set(&pmcf->probe_uri, "/status");
    }

    ngx_conf_init_value(pmcf->probe_ssl, 0);

    return ngx_http_pic_probe_ssl_init(cf, pmcf);
}


/*
 * pic_probe_ssl on: the health probes speak TLS to the engines (which then
 * serve --tls-cert), presenting pic_probe_ssl_certificate (the pool
 * certificate the engines' --tls-client-ca asks for) and, with
 * pic_probe_ssl_trusted_certificate, accepting only an engine whose
 * certificate chains to it (names are not checked: the pool CA is the
 * membership, as for the engines).
 */

static char *
ngx_http_pic_probe_ssl_init(ngx_conf_t *cf, ngx_http_pic_main_conf_t *pmcf)
{
#if (NGX_HTTP_SSL)
    ngx_ssl_t           *ssl;
    ngx_pool_cleanup_t  *cln;

    if (!pmcf->probe_ssl) {
        if (pmcf->probe_ssl_certificate.len
            || pmcf->probe_ssl_trusted_certificate.len)
        {
            ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                               "pic_probe_ssl_* are ignored without "
                               "\"pic_probe_ssl on\"");
        }

        return NGX_CONF_OK;
    }

    if ((pmcf->probe_ssl_certificate.len == 0)
        != (pmcf->probe_ssl_certificate_key.len == 0))
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "pic_probe_ssl_certificate and "
                           "pic_probe_ssl_certificate_key go together");
        return NGX_CONF_ERROR;
    }

    ssl = ngx_pcalloc(cf->pool, sizeof(ngx_ssl_t));
    if (ssl == NULL) {
        return NGX_CONF_ERROR;
    }

    ssl->log = cf->log;

    if (ngx_ssl_create(ssl, NGX_SSL_TLSv1_2|NGX_SSL_TLSv1_3, NULL) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        ngx_ssl_cleanup_ctx(ssl);
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_ssl_cleanup_ctx;
    cln->data = ssl;

    if (pmcf->probe_ssl_certificate.len
        && ngx_ssl_certificate(cf, ssl, &pmcf->probe_ssl_certificate,
                               &pmcf->probe_ssl_certificate_key, NULL)
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (pmcf->probe_ssl_trusted_certificate.len
        && ngx_ssl_trusted_certificate(cf, ssl,
                                       &pmcf->probe_ssl_trusted_certificate, 2)
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    pmcf->probe_ssl_ctx = ssl;

    return NGX_CONF_OK;

#else

    if (pmcf->probe_ssl) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "pic_probe_ssl needs nginx built with "
                           "ngx_http_ssl_module");
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
#endif
}


static void *
ngx_http_pic_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_pic_loc_conf_t  *plcf;

    plcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_pic_loc_conf_t));
    if (plcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     plcf->marker_str = { 0, NULL };
     */

    plcf->mode = NGX_CONF_UNSET_UINT;
    plcf->status = NGX_CONF_UNSET;
    plcf->pool = NGX_CONF_UNSET_PTR;
    plcf->split = NGX_CONF_UNSET;
    plcf->cdc_min = NGX_CONF_UNSET_SIZE;
    plcf->cdc_avg = NGX_CONF_UNSET_SIZE;
    plcf->cdc_max = NGX_CONF_UNSET_SIZE;
    plcf->min_segment = NGX_CONF_UNSET_SIZE;
    plcf->cdc_auto = NGX_CONF_UNSET;
    plcf->min_segment_auto = NGX_CONF_UNSET;
    plcf->s1 = NGX_CONF_UNSET;
    plcf->scope = NGX_CONF_UNSET_PTR;
    plcf->body_max = NGX_CONF_UNSET_SIZE;
    plcf->thread_pool = NGX_CONF_UNSET_PTR;
    plcf->thread_min = NGX_CONF_UNSET_SIZE;
    plcf->redis_timeout = NGX_CONF_UNSET_MSEC;
    plcf->imbalance = NGX_CONF_UNSET_UINT;
    plcf->exact_weight = NGX_CONF_UNSET_UINT;
    plcf->replica_cache = NGX_CONF_UNSET_SIZE;
    plcf->dialect = NGX_CONF_UNSET_UINT;
    plcf->models = NGX_CONF_UNSET_PTR;

    return plcf;
}


/* Whether a size sized from the engines' break-even length stays automatic:
 * not when configured here; as the enclosing level when configured there. */
static ngx_uint_t
ngx_http_pic_merge_auto(size_t value, size_t prev_value, ngx_uint_t prev_auto)
{
    if (value != NGX_CONF_UNSET_SIZE) {
        return 0;
    }

    if (prev_value != NGX_CONF_UNSET_SIZE) {
        return prev_auto == 1;
    }

    return 1;
}


static char *
ngx_http_pic_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_pic_loc_conf_t  *prev = parent;
    ngx_http_pic_loc_conf_t  *conf = child;

    pic_error                  err;
    pic_cdc_params             params;
    ngx_http_pic_main_conf_t  *pmcf;
    ngx_http_core_loc_conf_t  *clcf;

    ngx_conf_merge_uint_value(conf->mode, prev->mode, NGX_HTTP_PIC_OFF);
    ngx_conf_merge_value(conf->status, prev->status, 0);
    ngx_conf_merge_ptr_value(conf->pool, prev->pool, NULL);
    ngx_conf_merge_value(conf->split, prev->split, 1);
    /* not configured here nor above: sized from the engines' break-even
     * length at request time (ngx_http_pic_segment_sizes) */

    conf->cdc_auto = ngx_http_pic_merge_auto(conf->cdc_avg, prev->cdc_avg,
                                             prev->cdc_auto);
    conf->min_segment_auto = ngx_http_pic_merge_auto(conf->min_segment,
                                                     prev->min_segment,
                                                     prev->min_segment_auto);

    ngx_conf_merge_size_value(conf->cdc_min, prev->cdc_min,
                              NGX_HTTP_PIC_CDC_MIN);
    ngx_conf_merge_size_value(conf->cdc_avg, prev->cdc_avg,
                              NGX_HTTP_PIC_CDC_AVG);
    ngx_conf_merge_size_value(conf->cdc_max, prev->cdc_max,
                              NGX_HTTP_PIC_CDC_MAX);
    ngx_conf_merge_size_value(conf->min_segment, prev->min_segment,
                              NGX_HTTP_PIC_MIN_SEGMENT);
    ngx_conf_merge_value(conf->s1, prev->s1, 1);
    ngx_conf_merge_ptr_value(conf->scope, prev->scope, NULL);
    ngx_conf_merge_size_value(conf->body_max, prev->body_max,
                              8 * 1024 * 1024);
    ngx_conf_merge_ptr_value(conf->thread_pool, prev->thread_pool, NULL);
    ngx_conf_merge_size_value(conf->thread_min, prev->thread_min, 64 * 1024);
    ngx_conf_merge_msec_value(conf->redis_timeout, prev->redis_timeout, 50);
    ngx_conf_merge_uint_value(conf->imbalance, prev->imbalance, 4);
    ngx_conf_merge_uint_value(conf->exact_weight, prev->exact_weight,
                              NGX_HTTP_PIC_EXACT_WEIGHT);
    ngx_conf_merge_size_value(conf->replica_cache, prev->replica_cache, 0);
    ngx_conf_merge_uint_value(conf->dialect, prev->dialect,
                              NGX_CONF_UNSET_UINT);
    ngx_conf_merge_ptr_value(conf->models, prev->models, NULL);

    if (conf->cdc_min == prev->cdc_min && conf->cdc_avg == prev->cdc_avg
        && conf->cdc_max == prev->cdc_max && prev->cdc)
    {
        conf->cdc = prev->cdc;

    } else {
        conf->cdc = ngx_palloc(cf->pool, sizeof(pic_cdc));
        if (conf->cdc == NULL) {
            return NGX_CONF_ERROR;
        }

        pic_cdc_params_default(&params);
        params.min_size = conf->cdc_min;
        params.avg_size = conf->cdc_avg;
        params.max_size = conf->cdc_max;

        if (pic_cdc_init(conf->cdc, &params, &err) != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid \"pic_cdc\": %s", err.message);
            return NGX_CONF_ERROR;
        }
    }

    if (conf->marker_str.data == NULL) {
        conf->marker_str = prev->marker_str;
        conf->marker = prev->marker;
    }

    if (conf->marker_str.data == NULL) {
        ngx_str_set(&conf->marker_str, PIC_MARKER_DEFAULT);

        if (pic_marker_init(&conf->marker, PIC_MARKER_DEFAULT,
                            sizeof(PIC_MARKER_DEFAULT) - 1, &err)
            != 0)
        {
            return NGX_CONF_ERROR;
        }
    }

    if (conf->mode == NGX_HTTP_PIC_OFF) {
        return NGX_CONF_OK;
    }

    pmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_pic_module);
    pmcf->enabled = 1;

    if (conf->mode == NGX_HTTP_PIC_ON && conf->pool == NULL) {
        /* its engine is whatever proxy_pass names */
        pmcf->poolless = 1;
    }

    /*
     * pic_body_max is this location's body limit, announced or chunked:
     * nginx enforces it as it reads, and the error filter answers its 413
     * as OpenAI JSON.
     */

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->client_max_body_size = conf->body_max;

    if (conf->mode == NGX_HTTP_PIC_AFFINITY && conf->pool == NULL
        && clcf->handler)
    {
        /* a location that proxies: its replicas must be known */
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"pic affinity\" needs its replicas: "
                           "\"pic_upstream\" naming an upstream with "
                           "\"pic_balancer\"");
        return NGX_CONF_ERROR;
    }

    /*
     * ... and every body it admits stays in memory: nginx never writes it
     * to a temp file that the worker would have to read back with a
     * blocking read (an announced body gets a buffer of its own length, a
     * chunked one the whole buffer).
     */

    if ((size_t) clcf->client_body_buffer_size < conf->body_max) {
        clcf->client_body_buffer_size = conf->body_max;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_pic_zone_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
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

    ctx->pmcf = pmcf;

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

    pmcf->shm_zone->init = ngx_http_pic_index_init_zone;
    pmcf->shm_zone->data = ctx;

    return NGX_CONF_OK;
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


/* pic_pool_secret_file PATH: the pool credential, read once at
 * configuration time (by the master, before it drops privileges). */

static char *
ngx_http_pic_secret(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pic_main_conf_t  *pmcf = conf;

    char        err[256];
    ngx_str_t  *value, name;

    if (pmcf->secret) {
        return "is duplicate";
    }

    value = cf->args->elts;
    name = value[1];

    if (ngx_conf_full_name(cf->cycle, &name, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    pmcf->secret = ngx_pcalloc(cf->pool, sizeof(pic_auth));
    if (pmcf->secret == NULL) {
        return NGX_CONF_ERROR;
    }

    if (pic_auth_load(pmcf->secret, (char *) name.data, err, sizeof(err))
        != 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", err);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_pic_redis_directive(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pic_main_conf_t  *pmcf = conf;

    ngx_str_t   *value, name;
    ngx_url_t    u;
    ngx_uint_t   i;

    if (pmcf->redis) {
        return "is duplicate";
    }

    value = cf->args->elts;

    ngx_memzero(&u, sizeof(ngx_url_t));

    u.url = value[1];
    u.default_port = 6379;
    u.no_resolve = 1;

    if (ngx_parse_url(cf->pool, &u) != NGX_OK) {
        if (u.err) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "%s in \"%V\"", u.err, &u.url);
        }

        return NGX_CONF_ERROR;
    }

    if (u.naddrs != 1) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must be an IP address and port or "
                           "\"unix:PATH\" (names are not resolved: hiredis "
                           "would block the worker)", &u.url);
        return NGX_CONF_ERROR;
    }

    pmcf->redis = &u.addrs[0];
    pmcf->redis_name = value[1];

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "user=", 5) == 0) {
            pmcf->redis_user.data = value[i].data + 5;
            pmcf->redis_user.len = value[i].len - 5;

            if (pmcf->redis_user.len == 0) {
                goto invalid;
            }

            continue;
        }

        if (pmcf->redis_password.data) {
            return "has two passwords";
        }

        if (ngx_strncmp(value[i].data, "password=", 9) == 0) {
            pmcf->redis_password.data = value[i].data + 9;
            pmcf->redis_password.len = value[i].len - 9;

            if (pmcf->redis_password.len == 0) {
                goto invalid;
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "password_file=", 14) == 0) {
            name.data = value[i].data + 14;
            name.len = value[i].len - 14;

            if (ngx_http_pic_read_secret(cf, &name, &pmcf->redis_password)
                != NGX_OK)
            {
                return NGX_CONF_ERROR;
            }

            continue;
        }

        goto invalid;
    }

    if (pmcf->redis_user.len && pmcf->redis_password.len == 0) {
        return "has a user= but no password";
    }

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\"", &value[i]);

    return NGX_CONF_ERROR;
}


/*
 * A secret from a file (read by the master at start-up, so the file may be
 * readable by root only): the first line, at most 512 bytes, not empty.
 */

static ngx_int_t
ngx_http_pic_read_secret(ngx_conf_t *cf, ngx_str_t *name, ngx_str_t *secret)
{
    u_char           *p, *last;
    ssize_t           n;
    ngx_fd_t          fd;
    ngx_file_info_t   fi;
    u_char            buf[514];

    if (name->len == 0 || ngx_conf_full_name(cf->cycle, name, 1) != NGX_OK) {
        return NGX_ERROR;
    }

    fd = ngx_open_file(name->data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           ngx_open_file_n " \"%V\" failed", name);
        return NGX_ERROR;
    }

    n = -1;

    if (ngx_fd_info(fd, &fi) != NGX_FILE_ERROR
        && ngx_file_size(&fi) < (off_t) sizeof(buf))
    {
        n = ngx_read_fd(fd, buf, sizeof(buf));
    }

    (void) ngx_close_file(fd);

    last = (n > 0) ? ngx_strlchr(buf, buf + n, '\n') : NULL;
    last = (last == NULL && n > 0) ? buf + n : last;

    while (last && last > buf && (last[-1] == '\r' || last[-1] == ' ')) {
        last--;
    }

    if (last == NULL || last == buf || last - buf > 512) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must hold a secret of 1 to 512 bytes "
                           "on its first line", name);
        ngx_explicit_memzero(buf, sizeof(buf));
        return NGX_ERROR;
    }

    p = ngx_pnalloc(cf->pool, last - buf);
    if (p == NULL) {
        ngx_explicit_memzero(buf, sizeof(buf));
        return NGX_ERROR;
    }

    secret->len = ngx_cpymem(p, buf, last - buf) - p;
    secret->data = p;

    ngx_explicit_memzero(buf, sizeof(buf));

    return NGX_OK;
}


static char *
ngx_http_pic_health_check(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pic_main_conf_t  *pmcf = conf;

    time_t       t;
    size_t       len;
    ngx_int_t    n;
    ngx_str_t   *value, s;
    ngx_msec_t   ms;
    ngx_uint_t   i, c;

    struct {
        char        *key;
        ngx_uint_t  *to;
    } counts[] = {
        { "fails=", &pmcf->max_fails },
        { "probe_fails=", &pmcf->probe_fails },
        { "probe_passes=", &pmcf->probe_passes }
    };

    if (pmcf->probe_interval != NGX_CONF_UNSET_MSEC) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (cf->args->nelts == 2 && ngx_strcmp(value[1].data, "off") == 0) {
        pmcf->probe_interval = 0;
        return NGX_CONF_OK;
    }

    for (i = 1; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "interval=", 9) == 0) {
            s.data = value[i].data + 9;
            s.len = value[i].len - 9;

            ms = ngx_parse_time(&s, 0);
            if (ms == (ngx_msec_t) NGX_ERROR || ms == 0) {
                goto invalid;
            }

            pmcf->probe_interval = ms;
            continue;
        }

        if (ngx_strncmp(value[i].data, "timeout=", 8) == 0) {
            s.data = value[i].data + 8;
            s.len = value[i].len - 8;

            ms = ngx_parse_time(&s, 0);
            if (ms == (ngx_msec_t) NGX_ERROR || ms == 0) {
                goto invalid;
            }

            pmcf->probe_timeout = ms;
            continue;
        }

        if (ngx_strncmp(value[i].data, "uri=", 4) == 0) {
            if (value[i].len < 5 || value[i].data[4] != '/') {
                goto invalid;
            }

            pmcf->probe_uri.data = value[i].data + 4;
            pmcf->probe_uri.len = value[i].len - 4;
            continue;
        }

        /* the counts: fails=N, probe_fails=N, probe_passes=N (N >= 1) */

        for (c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
            len = ngx_strlen(counts[c].key);

            if (value[i].len > len
                && ngx_strncmp(value[i].data, counts[c].key, len) == 0)
            {
                break;
            }
        }

        if (c < sizeof(counts) / sizeof(counts[0])) {
            n = ngx_atoi(value[i].data + len, value[i].len - len);
            if (n == NGX_ERROR || n == 0) {
                goto invalid;
            }

            *counts[c].to = n;
            continue;
        }

        if (ngx_strncmp(value[i].data, "fail_timeout=", 13) == 0) {
            s.data = value[i].data + 13;
            s.len = value[i].len - 13;

            t = ngx_parse_time(&s, 1);
            if (t == (time_t) NGX_ERROR) {
                goto invalid;
            }

            pmcf->fail_timeout = t;
            continue;
        }

        goto invalid;
    }

    if (pmcf->probe_interval == NGX_CONF_UNSET_MSEC) {
        pmcf->probe_interval = 2000;
    }

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid parameter \"%V\"", &value[i]);

    return NGX_CONF_ERROR;
}


static char *
ngx_http_pic_marker(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pic_loc_conf_t  *plcf = conf;

    pic_error   err;
    ngx_str_t  *value;

    if (plcf->marker_str.data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (pic_marker_init(&plcf->marker, (char *) value[1].data, value[1].len,
                        &err)
        != 0)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid marker \"%V\": %s", &value[1],
                           err.message);
        return NGX_CONF_ERROR;
    }

    plcf->marker_str = value[1];

    return NGX_CONF_OK;
}


static char *
ngx_http_pic_cdc(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pic_loc_conf_t  *plcf = conf;

    ssize_t     size[3];
    ngx_str_t  *value;
    ngx_uint_t  i;

    if (plcf->cdc_avg != NGX_CONF_UNSET_SIZE) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (i = 0; i < 3; i++) {
        size[i] = ngx_parse_size(&value[i + 1]);

        if (size[i] == NGX_ERROR || size[i] == 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid size \"%V\"", &value[i + 1]);
            return NGX_CONF_ERROR;
        }
    }

    if (!(size[0] <= size[1] && size[1] <= size[2])) {
        return "needs MIN < AVG < MAX";
    }

    if (size[1] & (size[1] - 1)) {
        return "needs AVG to be a power of two";
    }

    if (size[0] < 16 || size[0] == size[1] || size[1] == size[2]
        || size[2] > 16 * 1024 * 1024)
    {
        return "needs 16 <= MIN < AVG < MAX <= 16m";
    }

    plcf->cdc_min = size[0];
    plcf->cdc_avg = size[1];
    plcf->cdc_max = size[2];

    return NGX_CONF_OK;
}


static char *
ngx_http_pic_scope(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pic_loc_conf_t  *plcf = conf;

    ngx_str_t                         *value;
    ngx_http_compile_complex_value_t   ccv;

    if (plcf->scope != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "global") == 0) {
        plcf->scope = NULL;
        return NGX_CONF_OK;
    }

    plcf->scope = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (plcf->scope == NULL) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = plcf->scope;

    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_pic_template(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pic_loc_conf_t  *plcf = conf;

    ngx_str_t             *value;
    pic_template_dialect   d;

    if (plcf->dialect != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (pic_template_dialect_parse((char *) value[1].data, &d) != 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "unknown chat template \"%V\" "
                           "(qwen3, qwen3-next, qwen3.5, chatml, smollm2)", &value[1]);
        return NGX_CONF_ERROR;
    }

    plcf->dialect = d;

    return NGX_CONF_OK;
}


static char *
ngx_http_pic_model(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pic_loc_conf_t  *plcf = conf;

    ngx_str_t              *value, s;
    ngx_uint_t              i;
    pic_template_dialect    d;
    ngx_http_pic_model_t   *m;

    if (plcf->models == NGX_CONF_UNSET_PTR) {
        plcf->models = ngx_array_create(cf->pool, 4,
                                        sizeof(ngx_http_pic_model_t));
        if (plcf->models == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    value = cf->args->elts;

    m = ngx_array_push(plcf->models);
    if (m == NULL) {
        return NGX_CONF_ERROR;
    }

    m->name = value[1];
    ngx_str_null(&m->fingerprint);
    m->dialect = -1;

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "fingerprint=", 12) == 0
            && value[i].len > 12)
        {
            m->fingerprint.data = value[i].data + 12;
            m->fingerprint.len = value[i].len - 12;
            continue;
        }

        if (ngx_strncmp(value[i].data, "template=", 9) == 0) {
            s.data = value[i].data + 9;
            s.len = value[i].len - 9;

            if (pic_template_dialect_parse((char *) s.data, &d) != 0) {
                ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                                   "unknown chat template \"%V\"", &s);
                return NGX_CONF_ERROR;
            }

            m->dialect = d;
            continue;
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\"", &value[i]);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_pic_postconfiguration(ngx_conf_t *cf)
{
    ngx_http_pic_main_conf_t  *pmcf;

    pmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_pic_module);

    if (pmcf->enabled && pmcf->shm_zone == NULL) {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "\"pic\" needs a \"pic_zone\" in the http block");
        return NGX_ERROR;
    }

    if (ngx_http_pic_engine_init_pools(cf) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_pic_handler_init(cf);
}


static ngx_int_t
ngx_http_pic_init_process(ngx_cycle_t *cycle)
{
    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    if (ngx_http_pic_redis_init_process(cycle) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_pic_engine_init_process(cycle);
}


static void
ngx_http_pic_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_pic_redis_exit_process(cycle);
}


/* pic_thread_pool NAME [min=SIZE] | off: parse, render, cut and key bodies
 * of at least min bytes (64k) on nginx's thread pool NAME ("default" needs no
 * thread_pool directive), off the event loop */

static char *
ngx_http_pic_thread_pool(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_pic_loc_conf_t  *plcf = conf;

    ngx_str_t  *value, s;

    if (plcf->thread_pool != NGX_CONF_UNSET_PTR) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        if (cf->args->nelts > 2) {
            return "takes no min= with \"off\"";
        }

        plcf->thread_pool = NULL;
        return NGX_CONF_OK;
    }

#if (NGX_THREADS)

    plcf->thread_pool = ngx_thread_pool_add(cf, &value[1]);
    if (plcf->thread_pool == NULL) {
        return NGX_CONF_ERROR;
    }

    if (cf->args->nelts > 2) {
        if (ngx_strncmp(value[2].data, "min=", 4) != 0) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid parameter \"%V\"", &value[2]);
            return NGX_CONF_ERROR;
        }

        s.data = value[2].data + 4;
        s.len = value[2].len - 4;

        plcf->thread_min = ngx_parse_size(&s);
        if (plcf->thread_min == (size_t) NGX_ERROR) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid value \"%V\"", &value[2]);
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;

#else

    (void) s;
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"pic_thread_pool\" needs nginx built --with-threads");
    return NGX_CONF_ERROR;

#endif
}
