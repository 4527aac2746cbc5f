/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: the request path.  A precontent-phase handler (like
 * ngx_http_mirror_module's) reads the body, has the shared core parse,
 * render, mark, chunk and key it, resolves segment holders (shm index, then
 * one pipelined redis round trip), plans, rewrites the body into the
 * engine's plan request and lets the location's proxy_pass send it on.
 * A header/body filter pair answers every error nginx makes in a pic
 * location as OpenAI-shaped JSON and takes the TTFT sample.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <xxhash.h>
#if (NGX_THREADS)
#include <ngx_thread_pool.h>
#endif

#include "pic_error.h"
#include "pic_request.h"
#include "pic_template.h"
#include "pic_time.h"

#include "ngx_http_pic_module.h"
#include "ngx_http_pic_index.h"
#include "ngx_http_pic_engine.h"
#include "ngx_http_pic_redis.h"
#include "ngx_http_pic_route.h"
#include "ngx_http_pic_segment.h"
#include "ngx_http_pic_error.h"
#include "ngx_http_pic_affinity.h"


/*
 * The CPU part of a request (parse, model, render, mark, CDC, keys): on the
 * event loop, or for bodies of pic_thread_pool's min size and more on one of
 * its threads.  Nothing here touches an nginx object but the read-only
 * location conf: the inputs are taken before, the outputs used after.
 */
typedef struct {
    ngx_http_pic_loc_conf_t     *plcf;
    ngx_uint_t                   kind;         /* pic_req_kind */
    ngx_str_t                    body;
    u_char                      *scope;
    size_t                       scope_len;
    ngx_str_t                    learned_fp;   /* from the probes, or empty */
    ngx_int_t                    learned_dialect;
    pic_cdc                     *cdc;          /* the request's sizes */
    size_t                       min_segment;

    pic_request                 *req;
    pic_key_ctx                 *kc;
    pic_segmentation            *sg;

    ngx_str_t                    fingerprint;  /* out */
    ngx_uint_t                   dialect;
    ngx_uint_t                   failed;       /* err and level are set */
    ngx_uint_t                   level;
    pic_error                    err;
    uint64_t                     usec;
} ngx_http_pic_work_t;


static ngx_int_t ngx_http_pic_handler(ngx_http_request_t *r);
static void ngx_http_pic_body_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_pic_prepare(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx);
static ngx_int_t ngx_http_pic_body_text(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx, size_t max);
static void ngx_http_pic_work(ngx_http_pic_work_t *w);
static ngx_int_t ngx_http_pic_prepared(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx, ngx_http_pic_work_t *w);
#if (NGX_THREADS)
static void ngx_http_pic_thread_handler(void *data, ngx_log_t *log);
static void ngx_http_pic_thread_event_handler(ngx_event_t *ev);
#endif
static void ngx_http_pic_learned_model(ngx_http_request_t *r,
    ngx_http_pic_loc_conf_t *plcf, ngx_str_t *fp, ngx_int_t *dialect,
    ngx_uint_t *break_even);
static ngx_int_t ngx_http_pic_scope(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx, ngx_http_pic_loc_conf_t *plcf);
static ngx_int_t ngx_http_pic_choose(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx);
static void ngx_http_pic_lookup_handler(ngx_event_t *ev);
static void ngx_http_pic_cleanup(void *data);
static void ngx_http_pic_request_cleanup(void *data);
static ngx_int_t ngx_http_pic_endpoint(ngx_http_request_t *r);
static ngx_uint_t ngx_http_pic_internal(ngx_http_request_t *r);

static ngx_int_t ngx_http_pic_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_pic_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static void ngx_http_pic_default_error(ngx_http_request_t *r,
    ngx_uint_t status, pic_error *err);
static void ngx_http_pic_usage_scan(ngx_http_pic_ctx_t *ctx, u_char *p,
    u_char *last);
static void ngx_http_pic_history(ngx_http_request_t *r,
    ngx_http_pic_zone_ctx_t *zc, ngx_http_pic_ctx_t *ctx);
static void ngx_http_pic_finish(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx);

static ngx_int_t ngx_http_pic_variable_combine(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_pic_variable_number(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_pic_variable_plan_id(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


#define NGX_HTTP_PIC_VAR_SEGMENTS      0
#define NGX_HTTP_PIC_VAR_HIT_BYTES     1
#define NGX_HTTP_PIC_VAR_PREFIX_BYTES  2
#define NGX_HTTP_PIC_VAR_TOTAL_BYTES   3
#define NGX_HTTP_PIC_VAR_EXACT_BYTES   4
#define NGX_HTTP_PIC_VAR_EXACT_END     5


/*
 * The engine's usage.pic as cJSON prints it ('#' stands for a number); it
 * cannot occur inside a JSON string (the quotes would be escaped), so a
 * match anywhere in a JSON answer, an SSE data line or the engine's
 * ": usage" comment line is the real thing.
 */
static u_char  ngx_http_pic_usage_pattern[] =
    "\"pic\":{\"exact_tokens\":#,\"pic_tokens\":#,\"recomputed_tokens\":#}";


static ngx_http_variable_t  ngx_http_pic_vars[] = {

    { ngx_string("pic_combine_node"), NULL, ngx_http_pic_variable_combine,
      0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("pic_segments"), NULL, ngx_http_pic_variable_number,
      NGX_HTTP_PIC_VAR_SEGMENTS, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("pic_hit_bytes"), NULL, ngx_http_pic_variable_number,
      NGX_HTTP_PIC_VAR_HIT_BYTES, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("pic_prefix_bytes"), NULL, ngx_http_pic_variable_number,
      NGX_HTTP_PIC_VAR_PREFIX_BYTES, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("pic_prompt_bytes"), NULL, ngx_http_pic_variable_number,
      NGX_HTTP_PIC_VAR_TOTAL_BYTES, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("pic_exact_bytes"), NULL, ngx_http_pic_variable_number,
      NGX_HTTP_PIC_VAR_EXACT_BYTES, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("pic_exact_end"), NULL, ngx_http_pic_variable_number,
      NGX_HTTP_PIC_VAR_EXACT_END, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("pic_plan_id"), NULL, ngx_http_pic_variable_plan_id,
      0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;


ngx_int_t
ngx_http_pic_handler_init(ngx_conf_t *cf)
{
    ngx_http_handler_pt        *h;
    ngx_http_core_main_conf_t  *cmcf;

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PRECONTENT_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_pic_handler;

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    /* the first log handler: a request's access log line is written once
     * the status location counts it */

    h = cmcf->phases[NGX_HTTP_LOG_PHASE].handlers.elts;
    ngx_memmove(&h[1], &h[0], (cmcf->phases[NGX_HTTP_LOG_PHASE].handlers.nelts
                               - 1) * sizeof(ngx_http_handler_pt));
    h[0] = ngx_http_pic_log_handler;

    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_pic_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_pic_body_filter;

    return NGX_OK;
}


/* --- the precontent handler --- */


static ngx_int_t
ngx_http_pic_handler(ngx_http_request_t *r)
{
    ngx_int_t                 rc, kind;
    pic_error                 err;
    ngx_uint_t                internal;
    ngx_http_cleanup_t       *cln;
    ngx_http_pic_ctx_t       *ctx;
    ngx_http_pic_zone_ctx_t  *zc;
    ngx_http_pic_loc_conf_t  *plcf;

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pic_module);

    if (plcf->mode == NGX_HTTP_PIC_OFF || r != r->main) {
        return NGX_DECLINED;
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_pic_module);

    if (ctx == NULL && r->internal) {
        /* after error_page & co: a planned body is never planned again */
        ctx = ngx_http_pic_route_planned(r);

        if (ctx) {
            ngx_http_set_ctx(r, ctx, ngx_http_pic_module);
        }
    }

    if (ctx) {
        return ctx->status;
    }

    kind = ngx_http_pic_endpoint(r);
    internal = ngx_http_pic_internal(r);

    zc = ngx_http_pic_zone(r);

    if (kind == NGX_DECLINED && !internal) {
        /* not a completions request: passed untouched */
        if (zc) {
            (void) ngx_atomic_fetch_add(&zc->sh->stats.passed, 1);
        }

        return NGX_DECLINED;
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_pic_ctx_t));
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->request = r;
    ctx->status = NGX_DONE;
    ctx->mode = plcf->mode;
    ctx->kind = kind;
    ctx->combine = -1;

    ngx_http_set_ctx(r, ctx, ngx_http_pic_module);

    cln = ngx_http_cleanup_add(r, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_pic_cleanup;
    cln->data = ctx;

    if (internal) {
        /* engine to engine only (DESIGN 4.5): never proxied for a client */
        pic_error_set(&err, NGX_HTTP_NOT_FOUND, "invalid_request_error",
                      NULL, "not_found",
                      "%.*s is an engine-internal endpoint",
                      (int) ngx_min(r->uri.len, 128), r->uri.data);
        return ngx_http_pic_error(r, ctx, &err, NGX_LOG_INFO);
    }

    if (!(r->method & NGX_HTTP_POST)) {
        pic_error_set(&err, NGX_HTTP_NOT_ALLOWED, "invalid_request_error",
                      NULL, "method_not_allowed",
                      "%.*s needs POST", (int) r->uri.len, r->uri.data);
        return ngx_http_pic_error(r, ctx, &err, NGX_LOG_INFO);
    }

    if (r->headers_in.content_length_n > (off_t) plcf->body_max) {
        pic_error_set(&err, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                      "invalid_request_error", NULL, "request_too_large",
                      "request body of %lld bytes is over the limit of "
                      "%zu bytes",
                      (long long) r->headers_in.content_length_n,
                      plcf->body_max);
        return ngx_http_pic_error(r, ctx, &err, NGX_LOG_INFO);
    }

    rc = ngx_http_read_client_request_body(r, ngx_http_pic_body_handler);

    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        return rc;
    }

    ngx_http_finalize_request(r, NGX_DONE);

    return NGX_DONE;
}


/* 1 if the URI names an engine-internal endpoint (segment pull, remote
 * prefill) wherever it sits in the path, so a rewriting proxy_pass cannot
 * reach one either. */

static ngx_uint_t
ngx_http_pic_internal(ngx_http_request_t *r)
{
    static ngx_str_t  names[] = {
        ngx_string("/pic/segments"),
        ngx_string("/pic/prefill"),
    };

    ngx_uint_t  i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (ngx_strlcasestrn(r->uri.data, r->uri.data + r->uri.len,
                             names[i].data, names[i].len - 1)
            != NULL)
        {
            return 1;
        }
    }

    return 0;
}


static ngx_int_t
ngx_http_pic_endpoint(ngx_http_request_t *r)
{
    u_char  *p;
    size_t   len;

    p = r->uri.data;
    len = r->uri.len;

    while (len > 1 && p[len - 1] == '/') {
        len--;
    }

    if (len >= sizeof("/chat/completions") - 1
        && ngx_strncmp(p + len - (sizeof("/chat/completions") - 1),
                       "/chat/completions",
                       sizeof("/chat/completions") - 1) == 0)
    {
        return PIC_REQ_CHAT;
    }

    if (len >= sizeof("/completions") - 1
        && ngx_strncmp(p + len - (sizeof("/completions") - 1),
                       "/completions", sizeof("/completions") - 1) == 0)
    {
        return PIC_REQ_COMPLETION;
    }

    return NGX_DECLINED;
}


static void
ngx_http_pic_body_handler(ngx_http_request_t *r)
{
    ngx_int_t            rc;
    ngx_http_pic_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_pic_module);

    rc = ngx_http_pic_prepare(r, ctx);

    if (rc == NGX_AGAIN) {
        /* waiting for redis: ngx_http_pic_lookup_handler resumes */
        r->main->count++;
        return;
    }

    ctx->status = rc;

    r->preserve_body = 1;

    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);
}


static void
ngx_http_pic_lookup_handler(ngx_event_t *ev)
{
    ngx_connection_t         *c;
    ngx_http_request_t       *r;
    ngx_http_pic_ctx_t       *ctx;
    ngx_http_pic_zone_ctx_t  *zc;

    r = ev->data;
    c = r->connection;
    ctx = ngx_http_get_module_ctx(r, ngx_http_pic_module);

    if (ev->timer_set) {
        ngx_del_timer(ev);
    }

    if (ev->posted) {
        ngx_delete_posted_event(ev);
    }

    if (ctx->lookup) {
        if (!ngx_http_pic_redis_complete(ctx->lookup)) {
            zc = ngx_http_pic_zone(r);
            (void) ngx_atomic_fetch_add(&zc->sh->stats.redis_timeouts, 1);

            ngx_log_error(NGX_LOG_INFO, c->log, 0,
                          "pic: redis lookup timed out, "
                          "unanswered segments treated as unknown");

            ngx_http_pic_redis_stalled(c->log);

            ctx->fallback = 1;
        }

        ngx_http_pic_redis_detach(ctx->lookup);
        ctx->lookup = NULL;
    }

    ngx_http_set_log_request(c->log, r);

    if (c->error) {
        /* the client went away while redis answered: as on the thread
         * pool (ngx_http_pic_thread_event_handler) */
        ngx_http_finalize_request(r, NGX_HTTP_CLIENT_CLOSED_REQUEST);
        ngx_http_run_posted_requests(c);
        return;
    }

    ctx->status = ngx_http_pic_choose(r, ctx);

    r->preserve_body = 1;

    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);

    /* the reference taken while waiting */
    ngx_http_finalize_request(r, NGX_DONE);

    ngx_http_run_posted_requests(c);
}


/* Holders resolved: plan (pic on) or choose a replica (pic affinity). */
static ngx_int_t
ngx_http_pic_choose(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx)
{
    if (ctx->mode == NGX_HTTP_PIC_AFFINITY) {
        return ngx_http_pic_affinity_route(r, ctx);
    }

    return ngx_http_pic_route(r, ctx);
}


static void
ngx_http_pic_cleanup(void *data)
{
    ngx_http_pic_ctx_t  *ctx = data;

    if (ctx->lookup) {
        ngx_http_pic_redis_detach(ctx->lookup);
        ctx->lookup = NULL;
    }

    if (ctx->lookup_event.timer_set) {
        ngx_del_timer(&ctx->lookup_event);
    }

    if (ctx->lookup_event.posted) {
        ngx_delete_posted_event(&ctx->lookup_event);
    }
}


/*
 * Parse, render, segment and key the body (ngx_http_pic_work, maybe on a
 * thread); in observe mode account it; in pic mode look the segments up.
 * Returns NGX_DECLINED when the request may go on, NGX_AGAIN while a thread
 * or redis works, or an HTTP status.
 */

static ngx_int_t
ngx_http_pic_prepare(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx)
{
    ngx_int_t                  rc;
    ngx_uint_t                 break_even;
    ngx_pool_cleanup_t        *cln;
    ngx_http_pic_work_t       *w;
    ngx_http_pic_loc_conf_t   *plcf;
#if (NGX_THREADS)
    ngx_thread_task_t         *task;
    ngx_http_pic_zone_ctx_t   *zc;
#endif

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pic_module);

    rc = ngx_http_pic_body_text(r, ctx, plcf->body_max);
    if (rc != NGX_OK) {
        return rc;
    }

    w = ngx_pcalloc(r->pool, sizeof(ngx_http_pic_work_t));
    if (w == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the cJSON tree, the keys and the segmentation are freed with r */

    cln = ngx_pool_cleanup_add(r->pool, sizeof(pic_request));
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    w->req = cln->data;
    ngx_memzero(w->req, sizeof(pic_request));
    cln->handler = ngx_http_pic_request_cleanup;

    if (ngx_http_pic_segment_alloc(r, &w->kc, &w->sg) != NGX_OK
        || ngx_http_pic_scope(r, ctx, plcf) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    w->plcf = plcf;
    w->kind = ctx->kind;
    w->body = ctx->body;
    w->scope = ctx->scope;
    w->scope_len = ctx->scope_len;

    ngx_http_pic_learned_model(r, plcf, &w->learned_fp, &w->learned_dialect,
                               &break_even);

    ngx_http_pic_segment_sizes(ctx, plcf, break_even);

    w->cdc = ctx->cdc;
    w->min_segment = ctx->min_segment;

#if (NGX_THREADS)

    if (plcf->thread_pool && ctx->body.len >= plcf->thread_min) {
        task = ngx_thread_task_alloc(r->pool, 0);
        if (task == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        task->ctx = w;
        task->handler = ngx_http_pic_thread_handler;
        task->event.handler = ngx_http_pic_thread_event_handler;
        task->event.data = r;

        if (ngx_thread_task_post(plcf->thread_pool, task) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        /* like nginx's own thread reads: r outlives the task */
        r->main->blocked++;
        r->aio = 1;

        ctx->work = w;

        zc = ngx_http_pic_zone(r);

        if (zc) {
            (void) ngx_atomic_fetch_add(&zc->sh->stats.offloaded, 1);
        }

        return NGX_AGAIN;
    }

#endif

    ngx_http_pic_work(w);

    return ngx_http_pic_prepared(r, ctx, w);
}


static void
ngx_http_pic_work(ngx_http_pic_work_t *w)
{
    ngx_int_t                  d;
    uint64_t                   t0;
    ngx_uint_t                 i;
    pic_request_limits         lim;
    ngx_http_pic_model_t      *m;
    ngx_http_pic_loc_conf_t   *plcf;

    t0 = (uint64_t) (pic_now_ns() / 1000);
    plcf = w->plcf;
    w->level = NGX_LOG_INFO;

    pic_request_limits_default(&lim);
    lim.foreign = (plcf->mode == NGX_HTTP_PIC_AFFINITY);

    if (pic_request_parse(w->req, (pic_req_kind) w->kind,
                          (const char *) w->body.data, w->body.len, &lim,
                          &w->err)
        != 0)
    {
        w->failed = 1;
        return;
    }

    if (plcf->mode != NGX_HTTP_PIC_AFFINITY
        && cJSON_GetObjectItemCaseSensitive(w->req->root, "pic") != NULL)
    {
        pic_error_invalid(&w->err, "pic", "reserved_field",
                          "the field 'pic' is reserved for the gateway's "
                          "plan");
        w->failed = 1;
        return;
    }

    /* the model: pic_model's fingerprint and template, else what the
     * engines reported, else its name and the location's template */

    ngx_str_null(&w->fingerprint);
    d = (plcf->dialect == NGX_CONF_UNSET_UINT) ? -1 : (ngx_int_t) plcf->dialect;

    if (plcf->models) {
        m = plcf->models->elts;

        /* no model named: the first one configured */
        for (i = 0; i < plcf->models->nelts && w->req->model.len > 0; i++) {
            if (m[i].name.len == w->req->model.len
                && ngx_strncmp(m[i].name.data, w->req->model.ptr,
                               w->req->model.len) == 0)
            {
                break;
            }
        }

        if (i == plcf->models->nelts) {
            pic_error_set(&w->err, NGX_HTTP_NOT_FOUND,
                          "invalid_request_error", "model", "model_not_found",
                          "The model '%.*s' does not exist",
                          (int) ngx_min(w->req->model.len, 128),
                          w->req->model.ptr);
            w->failed = 1;
            return;
        }

        w->fingerprint = m[i].fingerprint;

        if (m[i].dialect >= 0) {
            d = m[i].dialect;
        }
    }

    if (w->fingerprint.len == 0) {
        w->fingerprint = w->learned_fp;
    }

    if (d < 0) {
        d = w->learned_dialect;
    }

    if (w->fingerprint.len == 0) {
        /* no engine told yet: the model's name keys the segments */
        w->fingerprint.data = (u_char *) w->req->model.ptr;
        w->fingerprint.len = w->req->model.len;
    }

    w->dialect = (d < 0) ? PIC_TEMPLATE_QWEN3_5 : (ngx_uint_t) d;

    if (ngx_http_pic_segment_run(plcf, w->cdc, w->min_segment, w->dialect,
                                 &w->fingerprint, w->scope, w->scope_len,
                                 w->req, w->kc, w->sg, &w->err)
        != 0)
    {
        w->failed = 1;
        w->level = (w->err.status >= 500) ? NGX_LOG_ERR : NGX_LOG_INFO;
        return;
    }

    w->usec = (uint64_t) (pic_now_ns() / 1000) - t0;
}


#if (NGX_THREADS)

static void
ngx_http_pic_thread_handler(void *data, ngx_log_t *log)
{
    ngx_http_pic_work(data);
}


static void
ngx_http_pic_thread_event_handler(ngx_event_t *ev)
{
    ngx_int_t            rc;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;
    ngx_http_pic_ctx_t  *ctx;

    r = ev->data;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    r->main->blocked--;
    r->aio = 0;

    if (c->error) {
        /*
         * the client went away meanwhile: an HTTP/2 connection that ended
         * marks each stream's connection failed without terminating the
         * stream (its read handler blocks reading), and a terminate that
         * found r blocked left it to us; end r now (terminating drops
         * every reference, the one taken while waiting included)
         */
        ngx_http_finalize_request(r, NGX_HTTP_CLIENT_CLOSED_REQUEST);
        ngx_http_run_posted_requests(c);
        return;
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_pic_module);

    rc = ngx_http_pic_prepared(r, ctx, ctx->work);

    if (rc == NGX_AGAIN) {
        /* redis: ngx_http_pic_lookup_handler resumes with our reference */
        return;
    }

    ctx->status = rc;

    r->preserve_body = 1;

    r->write_event_handler = ngx_http_core_run_phases;
    ngx_http_core_run_phases(r);

    /* the reference taken while waiting */
    ngx_http_finalize_request(r, NGX_DONE);

    ngx_http_run_posted_requests(c);
}

#endif


/* After ngx_http_pic_work, on the event loop: the error, or the segments
 * accounted (observe) or looked up (pic). */

static ngx_int_t
ngx_http_pic_prepared(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx,
    ngx_http_pic_work_t *w)
{
    ngx_int_t                  rc;
    ngx_uint_t                 i, n, *idx;
    ngx_http_pic_zone_ctx_t   *zc;
    ngx_http_pic_loc_conf_t   *plcf;

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pic_module);
    zc = ngx_http_pic_zone(r);

    if (w->failed && ctx->mode == NGX_HTTP_PIC_AFFINITY
        && w->err.status < 500 && zc)
    {
        /* the replica judges what it accepts: routed unkeyed, as it came */
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "pic affinity: request passed unkeyed: %s",
                      w->err.message);
        return ngx_http_pic_choose(r, ctx);
    }

    if (w->failed) {
        return ngx_http_pic_error(r, ctx, &w->err, w->level);
    }

    ctx->model.data = (u_char *) w->req->model.ptr;
    ctx->model.len = w->req->model.len;
    ctx->fingerprint = w->fingerprint;
    ctx->dialect = w->dialect;

    rc = ngx_http_pic_segment_finish(r, ctx, plcf, w->kc, w->sg, w->usec);
    if (rc != NGX_OK) {
        return rc;
    }

    if (zc == NULL) {
        return NGX_DECLINED;
    }

    if (ctx->mode == NGX_HTTP_PIC_OBSERVE) {
        ngx_http_pic_route_observe(r, ctx);
        return NGX_DECLINED;
    }

    /* the shm index first, redis for what it does not know */

    ngx_http_pic_index_lookup(zc, ctx->segs, ctx->nsegs);

    if (ctx->mode == NGX_HTTP_PIC_AFFINITY) {

        if (plcf->pool == NULL) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "pic affinity: no \"pic_upstream\" here");
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        /* the prefixes recorded per replica, under its LRU */
        ngx_http_pic_affinity_lookup(zc, ctx->chains, ctx->nsegs,
                                     plcf->pool->mask);

    } else {
        ngx_http_pic_index_lookup_prefix(zc, ctx->chains, ctx->nsegs);
    }

    if (!ngx_http_pic_redis_ready()) {
        ctx->fallback = 1;
        return ngx_http_pic_choose(r, ctx);
    }

    /* segments nobody is known to hold, then prefixes likewise (index
     * nsegs + i: chain i) */

    idx = ngx_palloc(r->pool, 2 * ctx->nsegs * sizeof(ngx_uint_t) + 1);
    if (idx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = 0;

    for (i = 0; i < ctx->nsegs; i++) {
        if (ctx->segs[i].holders == 0
            && !(ctx->segs[i].flags & NGX_HTTP_PIC_SEG_DYNAMIC)
            && ctx->mode != NGX_HTTP_PIC_AFFINITY)
        {
            /* (foreign replicas register no segments: prefixes only) */
            idx[n++] = i;
        }
    }

    for (i = 0; i < ctx->nsegs; i++) {
        if (ctx->chains[i].holders == 0
            && !(ctx->chains[i].flags & NGX_HTTP_PIC_SEG_DYNAMIC))
        {
            idx[n++] = ctx->nsegs + i;
        }
    }

    if (n == 0) {
        return ngx_http_pic_choose(r, ctx);
    }

    ctx->lookup_event.handler = ngx_http_pic_lookup_handler;
    ctx->lookup_event.data = r;
    ctx->lookup_event.log = r->connection->log;

    rc = ngx_http_pic_redis_lookup(r, ctx, idx, n, &ctx->lookup_event);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        ctx->fallback = 1;
        return ngx_http_pic_choose(r, ctx);
    }

    ngx_add_timer(&ctx->lookup_event, plcf->redis_timeout);

    return NGX_AGAIN;
}


static void
ngx_http_pic_request_cleanup(void *data)
{
    pic_request_free(data);
}


/* The client body in one piece of memory (nginx keeps it in memory: see
 * client_body_buffer_size in the merge of the location's conf). */

static ngx_int_t
ngx_http_pic_body_text(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx,
    size_t max)
{
    u_char        *p;
    off_t          len;
    ngx_buf_t     *b;
    pic_error      err;
    ngx_chain_t   *cl;

    if (r->request_body == NULL || r->request_body->bufs == NULL) {
        pic_error_invalid(&err, NULL, "empty_body",
                          "the request body is empty");
        return ngx_http_pic_error(r, ctx, &err, NGX_LOG_INFO);
    }

    len = 0;

    for (cl = r->request_body->bufs; cl; cl = cl->next) {
        len += ngx_buf_size(cl->buf);
    }

    if (len > (off_t) max) {
        /* a chunked body: its size is known only now */
        pic_error_set(&err, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                      "invalid_request_error", NULL, "request_too_large",
                      "request body of %lld bytes is over the limit of "
                      "%zu bytes", (long long) len, max);
        return ngx_http_pic_error(r, ctx, &err, NGX_LOG_INFO);
    }

    cl = r->request_body->bufs;

    if (cl->next == NULL && !cl->buf->in_file) {
        ctx->body.data = cl->buf->pos;
        ctx->body.len = cl->buf->last - cl->buf->pos;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, (size_t) len + 1);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->body.data = p;

    for ( /* void */ ; cl; cl = cl->next) {
        b = cl->buf;

        if (ngx_buf_special(b)) {
            continue;               /* the end of a chunked body: no bytes */
        }

        if (!ngx_buf_in_memory(b)) {
            /* client_body_buffer_size is raised to pic_body_max, so only
             * client_body_in_file_only gets here: never a blocking read */
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "pic: the request body is in \"%V\" "
                          "(client_body_in_file_only is not supported in a "
                          "pic location)", &b->file->name);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        p = ngx_cpymem(p, b->pos, b->last - b->pos);
    }

    ctx->body.len = p - ctx->body.data;

    return NGX_OK;
}


/* The model fingerprint, chat template and break-even length of the first
 * engine of this location's pool that reported them (empty, -1 and 0 when
 * none has). */

static void
ngx_http_pic_learned_model(ngx_http_request_t *r,
    ngx_http_pic_loc_conf_t *plcf, ngx_str_t *fp, ngx_int_t *dialect,
    ngx_uint_t *break_even)
{
    u_char                      *p;
    ngx_uint_t                   i;
    ngx_http_pic_zone_ctx_t     *zc;
    ngx_http_pic_engine_sh_t    *e;
    ngx_http_pic_engine_conf_t  *ec;

    ngx_str_null(fp);
    *dialect = -1;
    *break_even = 0;

    zc = ngx_http_pic_zone(r);

    if (zc == NULL || plcf->pool == NULL) {
        return;
    }

    ec = plcf->pool->engines.elts;

    ngx_shmtx_lock(&zc->shpool->mutex);

    for (i = 0; i < plcf->pool->engines.nelts; i++) {
        if (ec[i].slot >= NGX_HTTP_PIC_MAX_ENGINES) {
            continue;
        }

        e = &zc->sh->engines[ec[i].slot];

        if (e->fp_len == 0 || !e->healthy) {
            continue;
        }

        p = ngx_pnalloc(r->pool, e->fp_len);

        if (p) {
            ngx_memcpy(p, e->fingerprint, e->fp_len);
            fp->data = p;
            fp->len = e->fp_len;
        }

        *dialect = e->dialect;
        *break_even = e->break_even;

        break;
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);
}


/* The cache scope: "" (global) or, of pic_scope's value, the first 16 bytes
 * of its HMAC-SHA256 under the pool secret (the hex xxh3-128 without one),
 * so that a tenant's key never appears in the index. */

static ngx_int_t
ngx_http_pic_scope(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx,
    ngx_http_pic_loc_conf_t *plcf)
{
    u_char                    *p;
    ngx_str_t                  value;
    XXH128_hash_t              h;
    u_char                     bin[16], tag[PIC_AUTH_TAG];
    ngx_http_pic_main_conf_t  *pmcf;

    ctx->scope_len = 0;

    if (plcf->scope == NULL) {
        return NGX_OK;
    }

    if (ngx_http_complex_value(r, plcf->scope, &value) != NGX_OK) {
        return NGX_ERROR;
    }

    pmcf = ngx_http_get_module_main_conf(r, ngx_http_pic_module);

    if (pmcf->secret) {
        /* keyed: without the pool secret no one can name a tenant's scope */
        if (pic_auth_mac(pmcf->secret, "pic-scope-v1", NULL, 0, value.data,
                         value.len, tag)
            != 0)
        {
            return NGX_ERROR;
        }

        p = ngx_hex_dump(ctx->scope, tag, 16);
        ctx->scope_len = p - ctx->scope;

        return NGX_OK;
    }

    h = XXH3_128bits_withSeed(value.data, value.len, 0x706963);

    ngx_memcpy(bin, &h.high64, 8);
    ngx_memcpy(bin + 8, &h.low64, 8);

    p = ngx_hex_dump(ctx->scope, bin, 16);
    ctx->scope_len = p - ctx->scope;

    return NGX_OK;
}


/* --- errors --- */


static void
ngx_http_pic_default_error(ngx_http_request_t *r, ngx_uint_t status,
    pic_error *err)
{
    switch (status) {

    case NGX_HTTP_BAD_REQUEST:
        pic_error_invalid(err, NULL, NULL, "bad request");
        break;

    case NGX_HTTP_FORBIDDEN:
        pic_error_set(err, status, "permission_error", NULL, NULL,
                      "forbidden");
        break;

    case NGX_HTTP_NOT_FOUND:
        pic_error_set(err, status, "invalid_request_error", NULL, NULL,
                      "unknown endpoint");
        break;

    case NGX_HTTP_REQUEST_ENTITY_TOO_LARGE:
        pic_error_set(err, status, "invalid_request_error", NULL,
                      "request_too_large", "the request body is too large");
        break;

    case NGX_HTTP_TOO_MANY_REQUESTS:
        pic_error_set(err, status, "rate_limit_error", NULL, NULL,
                      "too many requests");
        break;

    case NGX_HTTP_BAD_GATEWAY:
        pic_error_set(err, status, "server_error", NULL, "engine_unavailable",
                      "the engine failed or closed the connection");
        break;

    case NGX_HTTP_SERVICE_UNAVAILABLE:
        pic_error_set(err, status, "server_error", NULL, "no_healthy_engine",
                      "no healthy engine");
        break;

    case NGX_HTTP_GATEWAY_TIME_OUT:
        pic_error_set(err, status, "server_error", NULL, "timeout",
                      "the engine did not answer in time");
        break;

    default:
        pic_error_set(err, status,
                      status >= 500 ? "server_error"
                                    : "invalid_request_error",
                      NULL, NULL, "request failed with status %d",
                      (int) status);
    }
}


static ngx_int_t
ngx_http_pic_header_filter(ngx_http_request_t *r)
{
    size_t                    len;
    ngx_buf_t                *b;
    pic_error                 err;
    ngx_table_elt_t          *held;
    ngx_http_pic_ctx_t       *ctx;
    ngx_http_pic_loc_conf_t  *plcf;

    if (r->upstream) {
        held = ngx_http_pic_route_held(r);

        if (r == r->main && r->headers_out.status == NGX_HTTP_OK) {
            ctx = ngx_http_get_module_ctx(r, ngx_http_pic_module);

            if (ctx && ctx->affinity) {
                /* the replica that answered has the prompt */
                ngx_http_pic_affinity_answered(r, ctx);

            } else if (ctx && ctx->planned) {
                /* the combine node ran the plan: what it holds now */
                ngx_http_pic_route_confirmed(r, ctx, held);
            }
        }
    }

    if (r != r->main || r->err_status < NGX_HTTP_BAD_REQUEST
        || r->headers_out.status != r->err_status)
    {
        return ngx_http_next_header_filter(r);
    }

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pic_module);

    if (plcf->mode == NGX_HTTP_PIC_OFF) {
        return ngx_http_next_header_filter(r);
    }

    /* an error nginx made in a pic location: answer it as OpenAI JSON */

    ctx = ngx_http_get_module_ctx(r, ngx_http_pic_module);

    if (ctx == NULL) {
        ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_pic_ctx_t));
        if (ctx == NULL) {
            return NGX_ERROR;
        }

        ctx->request = r;
        ctx->status = NGX_DECLINED;
        ctx->combine = -1;
        ctx->mode = NGX_HTTP_PIC_OFF;

        ngx_http_set_ctx(r, ctx, ngx_http_pic_module);
    }

    if ((ngx_uint_t) ctx->err.status == r->err_status) {
        err = ctx->err;

    } else {
        ngx_http_pic_default_error(r, r->err_status, &err);
    }

    len = pic_error_json(&err, NULL, 0);

    b = ngx_create_temp_buf(r->pool, len + 2);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->last += pic_error_json(&err, (char *) b->pos, len + 1);
    *b->last++ = '\n';

    b->last_buf = 1;
    b->last_in_chain = 1;

    ctx->err_body = b;
    ctx->replace_body = 1;

    r->headers_out.content_length_n = b->last - b->pos;

    if (r->headers_out.content_length) {
        r->headers_out.content_length->hash = 0;
        r->headers_out.content_length = NULL;
    }

    ngx_str_set(&r->headers_out.content_type, "application/json");
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;
    r->headers_out.charset.len = 0;

    return ngx_http_next_header_filter(r);
}


static ngx_int_t
ngx_http_pic_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_uint_t           last;
    ngx_time_t          *tp;
    ngx_chain_t         *cl, out;
    ngx_http_pic_ctx_t  *ctx;

    if (in == NULL || r != r->main) {
        return ngx_http_next_body_filter(r, in);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_pic_module);

    if (ctx == NULL) {
        return ngx_http_next_body_filter(r, in);
    }

    if (ctx->replace_body) {
        last = 0;

        for (cl = in; cl; cl = cl->next) {
            if (cl->buf->last_buf || cl->buf->last_in_chain) {
                last = 1;
            }

            cl->buf->pos = cl->buf->last;
            cl->buf->file_pos = cl->buf->file_last;
        }

        if (!last || ctx->err_body == NULL) {
            return NGX_OK;
        }

        out.buf = ctx->err_body;
        out.next = NULL;
        ctx->err_body = NULL;

        ngx_http_pic_finish(r, ctx);

        return ngx_http_next_body_filter(r, &out);
    }

    if (!ctx->first_byte && (ctx->planned || ctx->observed)) {

        for (cl = in; cl; cl = cl->next) {
            if (ngx_buf_size(cl->buf) > 0) {
                ctx->first_byte = 1;

                tp = ngx_timeofday();
                ctx->ttft = (ngx_msec_t)
                            ((tp->sec - r->start_sec) * 1000
                             + (tp->msec - r->start_msec));
                break;
            }
        }
    }

    if (ctx->affinity) {

        for (cl = in; cl; cl = cl->next) {
            if (ngx_buf_in_memory(cl->buf)) {
                pic_usage_scan(&ctx->reuse, cl->buf->pos,
                               cl->buf->last - cl->buf->pos);
            }
        }

    } else if (ctx->planned || ctx->observed) {

        for (cl = in; cl; cl = cl->next) {
            if (ngx_buf_in_memory(cl->buf)) {
                ngx_http_pic_usage_scan(ctx, cl->buf->pos, cl->buf->last);
            }
        }
    }

    /* counted before the client can have the whole answer: its last
     * buffer, or the last byte of a Content-Length (the client is done with
     * it before nginx sends the empty last buffer) */

    for (cl = in; cl && !ctx->finished; cl = cl->next) {
        ctx->body_sent += ngx_buf_size(cl->buf);

        if (cl->buf->last_buf
            || (r->headers_out.content_length_n >= 0
                && ctx->body_sent >= r->headers_out.content_length_n))
        {
            ngx_http_pic_finish(r, ctx);
        }
    }

    return ngx_http_next_body_filter(r, in);
}


/* Find usage.pic in the answer, whatever buffers cut it; the last wins. */
static void
ngx_http_pic_usage_scan(ngx_http_pic_ctx_t *ctx, u_char *p, u_char *last)
{
    u_char  c, want;

    for ( /* void */ ; p < last; p++) {

        if (ctx->usage_pos == 0) {
            /* outside the pattern: on to its first byte, the next quote
             * (libc's memchr, many bytes a step) */
            p = memchr(p, '"', last - p);

            if (p == NULL) {
                return;
            }
        }

        c = *p;
        want = ngx_http_pic_usage_pattern[ctx->usage_pos];

        if (want == '#') {

            if (c >= '0' && c <= '9') {
                if (ctx->usage_val[ctx->usage_field] < 1000000000) {
                    ctx->usage_val[ctx->usage_field] =
                        ctx->usage_val[ctx->usage_field] * 10 + (c - '0');
                }

                ctx->usage_digits = 1;
                continue;
            }

            if (ctx->usage_digits) {
                ctx->usage_field++;
                ctx->usage_digits = 0;
                want = ngx_http_pic_usage_pattern[++ctx->usage_pos];
            }
        }

        if (c == want && want != '#') {
            if (ngx_http_pic_usage_pattern[++ctx->usage_pos] != '\0') {
                continue;
            }

            ngx_memcpy(ctx->usage, ctx->usage_val, sizeof(ctx->usage));
            ctx->usage_seen = 1;
            c = '\0';
        }

        /* start over; this byte may open the pattern again */

        ctx->usage_pos = (c == ngx_http_pic_usage_pattern[0]);
        ctx->usage_field = 0;
        ctx->usage_digits = 0;
        ngx_memzero(ctx->usage_val, sizeof(ctx->usage_val));
    }
}


/* --- the log phase: counters, TTFT, engine load and health --- */


ngx_int_t
ngx_http_pic_log_handler(ngx_http_request_t *r)
{
    ngx_http_pic_ctx_t        *ctx;
    ngx_http_pic_zone_ctx_t   *zc;
    ngx_http_pic_loc_conf_t   *plcf;

    if (r != r->main) {
        return NGX_OK;
    }

    zc = ngx_http_pic_zone(r);

    if (zc == NULL) {
        return NGX_OK;
    }

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pic_module);

    if (plcf->status) {
        (void) ngx_atomic_fetch_add(&zc->sh->stats.status_requests, 1);
        return NGX_OK;
    }

    if (plcf->mode == NGX_HTTP_PIC_OFF) {
        return NGX_OK;
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_pic_module);

    if (ctx == NULL) {
        (void) ngx_atomic_fetch_add(&zc->sh->stats.requests, 1);

        if (r->headers_out.status >= NGX_HTTP_BAD_REQUEST) {
            (void) ngx_atomic_fetch_add(&zc->sh->stats.errors, 1);
        }

        return NGX_OK;
    }

    ngx_http_pic_finish(r, ctx);

    return NGX_OK;
}


/*
 * A request of a pic location is over for its client: its TTFT, history,
 * engine load and health, and last requests.total (a test or a dashboard
 * that sees the count sees the rest).  Called once, from the body filter
 * with the last buffer, before the client can have it (an agent loop may
 * send its next turn at once, to another worker), or from the log phase
 * when no last buffer went out (a hang-up, a header-only answer).
 */

static void
ngx_http_pic_finish(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx)
{
    ngx_http_pic_zone_ctx_t   *zc;
    ngx_http_pic_loc_conf_t   *plcf;

    if (ctx->finished) {
        return;
    }

    ctx->finished = 1;

    zc = ngx_http_pic_zone(r);
    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pic_module);

    if (zc == NULL || plcf->status || plcf->mode == NGX_HTTP_PIC_OFF) {
        return;
    }

    if (ctx->first_byte && r->headers_out.status < NGX_HTTP_BAD_REQUEST) {
        ngx_http_pic_index_ttft(zc, ctx->ttft);
    }

    if (ctx->affinity) {
        ngx_http_pic_affinity_finish(r, zc, ctx);
    }

    if (ctx->planned || ctx->observed) {
        ngx_http_pic_history(r, zc, ctx);
    }

    if (ctx->inflight) {
        ngx_http_pic_engine_release(zc, ctx->combine, ctx->combine_gen);
        ctx->inflight = 0;
    }

    if (ctx->planned) {
        ngx_http_pic_engine_account(r, zc, ctx);
    }

    if (r->headers_out.status >= NGX_HTTP_BAD_REQUEST) {
        (void) ngx_atomic_fetch_add(&zc->sh->stats.errors, 1);
    }

    (void) ngx_atomic_fetch_add(&zc->sh->stats.requests, 1);
}


static void
ngx_http_pic_history(ngx_http_request_t *r, ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_ctx_t *ctx)
{
    int64_t                  cached, prompt;
    ngx_time_t              *tp;
    ngx_http_pic_history_t   h;

    ngx_memzero(&h, sizeof(ngx_http_pic_history_t));

    tp = ngx_timeofday();

    h.start_ms = (uint64_t) r->start_sec * 1000 + r->start_msec;
    h.at_ms = (uint64_t) tp->sec * 1000 + tp->msec;
    h.status = (uint16_t) r->headers_out.status;
    h.planned = ctx->planned;
    h.engine = ctx->planned ? (int16_t) ctx->combine : -1;
    h.prompt_bytes = (uint32_t) ngx_min(ctx->total_bytes, 0xffffffff);

    if (ctx->first_byte && r->headers_out.status < NGX_HTTP_BAD_REQUEST) {
        h.has_ttft = 1;
        h.ttft_ms = (uint32_t) ngx_min(ctx->ttft, 0xffffffff);
    }

    if (ctx->affinity && pic_usage_cached(&ctx->reuse) >= 0) {
        /* a foreign replica: its cached tokens are exact reuse, the rest
         * of its prompt computed */
        cached = pic_usage_cached(&ctx->reuse);
        prompt = pic_usage_prompt(&ctx->reuse);

        h.exact = (int32_t) ngx_min(cached, 0x7fffffff);
        h.pic = 0;
        h.recomputed = (prompt >= cached)
                       ? (int32_t) ngx_min(prompt - cached, 0x7fffffff) : 0;

    } else if (ctx->usage_seen) {
        h.exact = (int32_t) ctx->usage[0];
        h.pic = (int32_t) ctx->usage[1];
        h.recomputed = (int32_t) ctx->usage[2];

    } else {
        h.exact = -1;
        h.pic = -1;
        h.recomputed = -1;
    }

    ngx_http_pic_index_history(zc, &h);
}


/* --- variables --- */


ngx_int_t
ngx_http_pic_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_pic_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_pic_variable_combine(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_pic_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r->main, ngx_http_pic_module);

    if (ctx == NULL || ctx->combine_name.len == 0) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->len = ctx->combine_name.len;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = ctx->combine_name.data;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pic_variable_number(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char              *p;
    size_t               n;
    ngx_http_pic_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r->main, ngx_http_pic_module);

    if (ctx == NULL || !(ctx->planned || ctx->observed)) {
        v->not_found = 1;
        return NGX_OK;
    }

    switch (data) {

    case NGX_HTTP_PIC_VAR_SEGMENTS:
        n = ctx->nsegs;
        break;

    case NGX_HTTP_PIC_VAR_HIT_BYTES:
        n = ctx->hit_bytes;
        break;

    case NGX_HTTP_PIC_VAR_PREFIX_BYTES:
        n = ctx->prefix_bytes;
        break;

    case NGX_HTTP_PIC_VAR_EXACT_BYTES:
        n = ctx->exact_bytes;
        break;

    case NGX_HTTP_PIC_VAR_EXACT_END:
        n = ctx->exact_end;
        break;

    default: /* NGX_HTTP_PIC_VAR_TOTAL_BYTES */
        n = ctx->total_bytes;
        break;
    }

    p = ngx_pnalloc(r->pool, NGX_SIZE_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    v->len = ngx_sprintf(p, "%uz", n) - p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = p;

    return NGX_OK;
}


static ngx_int_t
ngx_http_pic_variable_plan_id(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_pic_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r->main, ngx_http_pic_module);

    if (ctx == NULL || !ctx->planned) {
        v->not_found = 1;
        return NGX_OK;
    }

    v->len = 16;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = ctx->plan_id;

    return NGX_OK;
}
