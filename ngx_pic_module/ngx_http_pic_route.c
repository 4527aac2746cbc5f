/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: planning and the plan request (see
 * ngx_http_pic_route.h).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <xxhash.h>

#include "pic_buf.h"
#include "pic_error.h"
#include "pic_lpt.h"
#include "pic_plan.h"
#include "pic_route.h"
#include "pic_segment.h"

#include "ngx_http_pic_module.h"
#include "ngx_http_pic_index.h"
#include "ngx_http_pic_engine.h"
#include "ngx_http_pic_error.h"
#include "ngx_http_pic_redis.h"
#include "ngx_http_pic_route.h"
#include "ngx_http_pic_segment.h"


/* the candidates of one request: what routing scores (pic_route.h) and
 * which configured engine each is */
typedef struct {
    pic_route_cand              *rc;       /* (n) */
    ngx_http_pic_engine_conf_t **conf;     /* (n) */
    ngx_uint_t                  *slot;     /* (n) */
    ngx_uint_t                   n;
} ngx_http_pic_cand_t;


static ngx_uint_t ngx_http_pic_route_exact_end(ngx_http_pic_ctx_t *ctx,
    ngx_uint_t cache);
static ngx_int_t ngx_http_pic_route_misses(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx, ngx_http_pic_cand_t *cs, ngx_uint_t imbalance,
    size_t unit);
static ngx_int_t ngx_http_pic_route_rewrite(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx, ngx_http_pic_cand_t *cs);
static ngx_int_t ngx_http_pic_route_sign(ngx_http_request_t *r);
static void ngx_http_pic_route_done(void *data);
static void ngx_http_pic_route_prefix(ngx_http_pic_ctx_t *ctx,
    ngx_http_pic_zone_ctx_t *zc, ngx_int_t slot);
static void ngx_http_pic_route_account(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_ctx_t *ctx);


static ngx_atomic_uint_t  ngx_http_pic_plan_seq;


ngx_int_t
ngx_http_pic_route(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx)
{
    uint64_t                     eligible;
    ngx_uint_t                   best, plain;
    u_char                      *first;
    ngx_uint_t                   i, j, k, n;
    pic_error                    err;
    XXH64_hash_t                 h;
    ngx_http_pic_segment_t      *s;
    ngx_http_pic_pool_t         *pool;
    ngx_http_pic_cand_t         *cs, cands;
    ngx_http_pic_zone_ctx_t     *zc;
    ngx_http_pic_loc_conf_t     *plcf;
    ngx_http_pic_main_conf_t    *pmcf;
    ngx_http_pic_engine_sh_t    *e;
    ngx_http_pic_engine_conf_t  *ec;
    ngx_pool_cleanup_t          *cln;
    ngx_int_t                   *seen;
    uint64_t                     seed[4];

    zc = ngx_http_pic_zone(r);
    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pic_module);
    pmcf = ngx_http_get_module_main_conf(r, ngx_http_pic_module);

    pool = plcf->pool ? plcf->pool : pmcf->default_pool;

    eligible = ngx_http_pic_engine_eligible(zc, pmcf, pool);

    if (eligible == 0) {
        pic_error_set(&err, NGX_HTTP_SERVICE_UNAVAILABLE, "server_error",
                      NULL, "no_healthy_engine",
                      "no healthy engine in \"%.*s\"",
                      (int) pool->name.len, pool->name.data);
        (void) ngx_atomic_fetch_add(&zc->sh->stats.no_engine, 1);
        return ngx_http_pic_error(r, ctx, &err, NGX_LOG_ERR);
    }

    /* the candidates: eligible engines of the pool with their load */

    cs = &cands;
    cs->rc = ngx_pcalloc(r->pool, pool->engines.nelts * sizeof(pic_route_cand));
    cs->conf = ngx_pcalloc(r->pool,
                           pool->engines.nelts * sizeof(ngx_http_pic_engine_conf_t *));
    cs->slot = ngx_pcalloc(r->pool, pool->engines.nelts * sizeof(ngx_uint_t));

    if (cs->rc == NULL || cs->conf == NULL || cs->slot == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    n = 0;
    ec = pool->engines.elts;

    for (i = 0; i < pool->engines.nelts; i++) {
        if (ec[i].slot >= NGX_HTTP_PIC_MAX_ENGINES
            || !(eligible & ((uint64_t) 1 << ec[i].slot)))
        {
            continue;
        }

        e = &zc->sh->engines[ec[i].slot];

        cs->conf[n] = &ec[i];
        cs->slot[n] = ec[i].slot;
        cs->rc[n].seed = ec[i].seed;
        cs->rc[n].load = e->inflight + e->load;
        n++;
    }

    cs->n = n;

    /* exact prefixes: the deepest prefix chain each candidate served */

    for (i = 0; i < ctx->nsegs; i++) {
        s = &ctx->chains[i];
        s->holders &= eligible;

        if (s->holders == 0 || (s->flags & NGX_HTTP_PIC_SEG_DYNAMIC)) {
            continue;
        }

        if (s->flags & NGX_HTTP_PIC_SEG_REDIS) {
            ctx->redis_hits++;
        }

        for (j = 0; j < n; j++) {
            if (s->holders & ((uint64_t) 1 << cs->slot[j])) {
                cs->rc[j].depth = i + 1;
                cs->rc[j].exact = s->len;
            }
        }
    }

    /* first sightings: where each segment was seen, not pooled */

    seen = ngx_palloc(r->pool, (ctx->nsegs ? ctx->nsegs : 1) * sizeof(ngx_int_t));
    if (seen == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_pic_index_seen_lookup(zc, ctx->segs, ctx->nsegs, seen);

    /* hits: segments some eligible engine of the pool holds */

    for (i = 0; i < ctx->nsegs; i++) {
        s = &ctx->segs[i];
        s->holders &= eligible;

        if (s->holders == 0 || (s->flags & NGX_HTTP_PIC_SEG_DYNAMIC)) {
            s->holders = 0;

            k = n;

            for (j = 0; j < n && !(s->flags & NGX_HTTP_PIC_SEG_DYNAMIC); j++) {
                if ((ngx_int_t) cs->slot[j] == seen[i]) {
                    cs->rc[j].seen += s->len;
                    k = j;
                }
            }

            /* a miss some engine saw first lives there, not at its home */

            if (ctx->fallback && k == n && !(s->flags & NGX_HTTP_PIC_SEG_DYNAMIC)) {
                cs->rc[pic_route_home(s->key, cs->rc, n)].home += s->len;
            }

            continue;
        }

        s->flags |= NGX_HTTP_PIC_SEG_HIT;
        ctx->hits++;

        if (s->flags & NGX_HTTP_PIC_SEG_REDIS) {
            ctx->redis_hits++;
        }

        ctx->hit_bytes += s->len;

        for (j = 0; j < n; j++) {
            if (!(s->holders & ((uint64_t) 1 << cs->slot[j]))) {
                continue;
            }

            if (i >= cs->rc[j].depth) {
                cs->rc[j].local += s->len;

            } else {
                cs->rc[j].held += s->len;
            }
        }
    }

    /* S1: windows of the misses found elsewhere still say where similar
     * content lives */

    if (ngx_http_pic_segment_windows(r, ctx, plcf) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->nwins) {
        ngx_http_pic_index_lookup(zc, ctx->wins, ctx->nwins);

        for (i = 0; i < ctx->nwins; i++) {
            s = &ctx->wins[i];
            s->holders &= eligible;

            if (s->holders == 0) {
                continue;
            }

            ctx->s1_hits++;
            ctx->s1_bytes += s->len;

            for (j = 0; j < n; j++) {
                if (s->holders & ((uint64_t) 1 << cs->slot[j])) {
                    cs->rc[j].local += s->len;
                }
            }
        }
    }

    first = ctx->nsegs ? ctx->segs[0].key : NULL;
    best = pic_route_pick(cs->rc, n, plcf->imbalance, plcf->exact_weight, 1,
                          first);

    if (cs->rc[best].seen) {
        (void) ngx_atomic_fetch_add(&zc->sh->stats.seen_routed, 1);

        if (pic_route_pick(cs->rc, n, plcf->imbalance, plcf->exact_weight, 0,
                           first)
            != best)
        {
            (void) ngx_atomic_fetch_add(&zc->sh->stats.seen_decided, 1);
        }
    }

    ctx->combine = cs->slot[best];
    ctx->exact_bytes = cs->rc[best].exact;
    ctx->exact_segs = cs->rc[best].depth;

    if (ctx->exact_bytes) {
        plain = pic_route_pick(cs->rc, n, plcf->imbalance,
                               PIC_ROUTE_INDEX_ONLY, 1, first);

        if (plain != best) {
            /* the exact prefix decided: the segment index alone (PIC
             * bytes) would have chosen another engine */
            (void) ngx_atomic_fetch_add(&zc->sh->stats.exact_decided, 1);
        }
    }

    /* under exact first the combine recomputes [exact prefix, first
     * composed segment) itself: no remote prefill there */

    ctx->exact_end = ngx_http_pic_route_exact_end(ctx,
                                          zc->sh->engines[ctx->combine].cache);

    for (i = 0; i < ctx->exact_end; i++) {
        if (!(ctx->segs[i].flags & (NGX_HTTP_PIC_SEG_HIT
                                    |NGX_HTTP_PIC_SEG_FIRST
                                    |NGX_HTTP_PIC_SEG_DYNAMIC)))
        {
            (void) ngx_atomic_fetch_add(&zc->sh->stats.seg_exact_local, 1);
        }
    }

    if (pool != pmcf->default_pool) {
        ctx->combine_name = cs->conf[best]->name;
    }

    if (ctx->fallback
        && ngx_http_pic_route_misses(r, ctx, cs, plcf->imbalance,
                                     ctx->cdc_avg)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* a plan id: unique enough to find one request in the logs */

    seed[0] = (uint64_t) ngx_pid;
    seed[1] = (uint64_t) ngx_current_msec;
    seed[2] = (uint64_t) ngx_atomic_fetch_add(&ngx_http_pic_plan_seq, 1);
    seed[3] = (uint64_t) (uintptr_t) r;
    h = XXH3_64bits(seed, sizeof(seed));
    ngx_sprintf(ctx->plan_id, "%016xL", (uint64_t) h);

    /* what redis said warms the shm index (no lookup next time); what the
     * engines will compute is learned when they confirm it
     * (ngx_http_pic_route_confirmed) */

    if (ctx->redis_hits) {
        ngx_http_pic_index_learn(zc, ctx->segs, ctx->nsegs, -1);
        (void) ngx_http_pic_index_learn_prefix(zc, ctx->chains, ctx->nsegs,
                                               -1);
    }

    ctx->prefix_bytes = ngx_http_pic_index_prefix(zc, ctx->segs, ctx->chains,
                                                  ctx->nsegs, 0);

    if (ctx->prefix_bytes > ctx->hit_bytes) {
        ctx->prefix_bytes = ctx->hit_bytes;
    }

    if (ngx_http_pic_route_rewrite(r, ctx, cs) != NGX_OK
        || ngx_http_pic_route_sign(r) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the in-flight count is given back by a pool cleanup: the log phase
     * does not see this ctx after an internal redirect (error_page) */

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_pic_route_done;
    cln->data = ctx;

    ctx->planned = 1;
    ctx->inflight = 1;
    ctx->zc = zc;

    e = &zc->sh->engines[ctx->combine];
    ctx->combine_gen = ngx_http_pic_engine_acquire(zc, ctx->combine);
    (void) ngx_atomic_fetch_add(&e->requests, 1);
    (void) ngx_atomic_fetch_add(&e->hit_bytes, cs->rc[best].local);

    if (ctx->exact_bytes) {
        (void) ngx_atomic_fetch_add(&e->exact_requests, 1);
        (void) ngx_atomic_fetch_add(&e->exact_bytes, ctx->exact_bytes);
        (void) ngx_atomic_fetch_add(&zc->sh->stats.exact_routed, 1);
        (void) ngx_atomic_fetch_add(&zc->sh->stats.bytes_exact_routed,
                                    ctx->exact_bytes);
    }

    (void) ngx_atomic_fetch_add(&zc->sh->stats.planned, 1);

    if (ctx->fallback) {
        (void) ngx_atomic_fetch_add(&zc->sh->stats.fallback, 1);
    }

    ngx_http_pic_route_account(zc, ctx);

    ngx_log_debug5(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "pic plan %s: %ui segments, %uz hit bytes of %uz, "
                   "combine %V", ctx->plan_id, ctx->nsegs, ctx->hit_bytes,
                   ctx->total_bytes, &cs->conf[best]->name);

    return NGX_DECLINED;
}


/*
 * The first segment the combine node may compose, given its cache mode (as
 * its /status says) and the exact prefix the gateway knows it holds.  An
 * exact-first engine serves [0, exact_segs) from its prefix tree and
 * recomputes exactly up to the first segment whose entry it already has or
 * pulls from a holder (a hit past segment 0); a worker's fresh entry before
 * that could only be composed at the cost of exactness, so it would be
 * wasted; it keeps [0, that segment) in its tree (ngx_http_pic_route_prefix).
 * An engine that composes nothing (prefix, full) wastes them all; a PIC-only
 * engine (or one that does not say) composes from segment 0.
 */

static ngx_uint_t
ngx_http_pic_route_exact_end(ngx_http_pic_ctx_t *ctx, ngx_uint_t cache)
{
    ngx_uint_t  i;

    switch (cache) {

    case NGX_HTTP_PIC_CACHE_EXACT:
        for (i = ctx->exact_segs; i < ctx->nsegs; i++) {
            if ((ctx->segs[i].flags & NGX_HTTP_PIC_SEG_HIT)
                && !(ctx->segs[i].flags & (NGX_HTTP_PIC_SEG_FIRST
                                           |NGX_HTTP_PIC_SEG_DYNAMIC)))
            {
                break;
            }
        }

        return i;

    case NGX_HTTP_PIC_CACHE_PREFIX:
    case NGX_HTTP_PIC_CACHE_FULL:
        return ctx->nsegs;

    default:
        return 0;
    }
}


/* without redis: LPT over the misses (pic_lpt.h: token estimates, a queued
 * request weighs one average chunk), each pinned to its rendezvous home
 * unless that engine is overloaded; the sink and the query stay on the
 * combine node, hits are pulled */

static ngx_int_t
ngx_http_pic_route_misses(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx,
    ngx_http_pic_cand_t *cs, ngx_uint_t imbalance, size_t unit)
{
    size_t                  *home;
    uint32_t                *assign;
    uint64_t                *w;
    pic_error                err;
    ngx_uint_t               i, k, m, *order;
    ngx_http_pic_segment_t  *s;

    order = ngx_palloc(r->pool, (ctx->nsegs + 1) * sizeof(ngx_uint_t));
    w = ngx_palloc(r->pool, (ctx->nsegs + 1) * sizeof(uint64_t));
    home = ngx_palloc(r->pool, (ctx->nsegs + 1) * sizeof(size_t));
    assign = ngx_palloc(r->pool, (ctx->nsegs + 1) * sizeof(uint32_t));

    if (order == NULL || w == NULL || home == NULL || assign == NULL) {
        return NGX_ERROR;
    }

    m = 0;

    for (i = 0; i < ctx->nsegs; i++) {
        s = &ctx->segs[i];
        s->worker = -1;

        if (s->flags & (NGX_HTTP_PIC_SEG_HIT|NGX_HTTP_PIC_SEG_DYNAMIC
                        |NGX_HTTP_PIC_SEG_FIRST))
        {
            continue;
        }

        if (i < ctx->exact_end) {
            /* extends the combine's exact prefix: recomputed there */
            continue;
        }

        order[m] = i;
        w[m] = pic_segment_token_estimate(s->len);
        home[m] = pic_route_home(s->key, cs->rc, cs->n);
        m++;
    }

    if (pic_route_misses(cs->rc, cs->n, w, home, m, imbalance,
                         pic_segment_token_estimate(unit), assign, &err)
        != 0)
    {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "pic: %s", err.message);
        return NGX_ERROR;
    }

    for (k = 0; k < m; k++) {
        ctx->segs[order[k]].worker = cs->slot[assign[k]];
    }

    return NGX_OK;
}


/* --- the plan request --- */


static void
ngx_http_pic_plan_cleanup(void *data)
{
    pic_plan_free(data);
}


static ngx_int_t
ngx_http_pic_route_rewrite(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx,
    ngx_http_pic_cand_t *cs)
{
    u_char              *p, *end, *q;
    size_t               len;
    int32_t             *eng, w;
    uint64_t            *loads;
    pic_buf              json;
    ngx_buf_t           *b;
    pic_plan            *plan;
    pic_error            err;
    ngx_uint_t           i, j, first;
    ngx_chain_t         *cl;
    pic_plan_segment    *ps;
    ngx_pool_cleanup_t  *cln;
    ngx_http_pic_segment_t *s;
    char                 scope[sizeof(ctx->scope) + 1];

    cln = ngx_pool_cleanup_add(r->pool, sizeof(pic_plan));
    if (cln == NULL) {
        return NGX_ERROR;
    }

    plan = cln->data;
    pic_plan_init(plan);
    cln->handler = ngx_http_pic_plan_cleanup;

    ngx_memcpy(scope, ctx->scope, ctx->scope_len);
    scope[ctx->scope_len] = '\0';

    if (pic_plan_from_segmentation(plan, ctx->segmentation,
                                   (char *) ctx->plan_id, scope, &err)
        != 0)
    {
        goto failed;
    }

    eng = ngx_palloc(r->pool, cs->n * sizeof(int32_t));
    loads = ngx_palloc(r->pool, cs->n * sizeof(uint64_t));

    if (eng == NULL || loads == NULL) {
        return NGX_ERROR;
    }

    for (j = 0; j < cs->n; j++) {
        q = ngx_pnalloc(r->pool, cs->conf[j]->name.len + 1);
        if (q == NULL) {
            return NGX_ERROR;
        }

        *ngx_cpymem(q, cs->conf[j]->name.data, cs->conf[j]->name.len) = '\0';

        eng[j] = pic_plan_engine(plan, (char *) q, &err);
        if (eng[j] < 0) {
            goto failed;
        }

        /* a queued request weighs about one average chunk */
        loads[j] = (uint64_t) cs->rc[j].load * pic_segment_token_estimate(
                                                 ctx->cdc_avg);

        if (cs->slot[j] == (ngx_uint_t) ctx->combine) {
            plan->combine = eng[j];
        }
    }

    for (i = 0; i < ctx->nsegs; i++) {
        s = &ctx->segs[i];
        ps = &plan->segs[i];

        for (j = 0; j < cs->n && ps->n_holders < PIC_PLAN_HOLDERS_MAX; j++) {
            if (s->holders & ((uint64_t) 1 << cs->slot[j])) {
                ps->holders[ps->n_holders++] = (uint16_t) eng[j];
            }
        }

        if (ctx->fallback && s->worker >= 0) {
            for (j = 0; j < cs->n; j++) {
                if (cs->slot[j] == (ngx_uint_t) s->worker) {
                    ps->worker = eng[j];
                }
            }
        }
    }

    if (!ctx->fallback) {
        if (pic_plan_assign_lpt(plan, eng, loads, cs->n, ctx->exact_end, &err)
            != 0)
        {
            goto failed;
        }

        for (i = 0; i < ctx->nsegs; i++) {
            w = plan->segs[i].worker;
            ctx->segs[i].worker = -1;

            for (j = 0; w >= 0 && j < cs->n; j++) {
                if (eng[j] == w) {
                    ctx->segs[i].worker = cs->slot[j];
                }
            }
        }
    }

    pic_buf_init(&json);

    if (pic_plan_encode(plan, &json, &err) != 0) {
        pic_buf_free(&json);
        goto failed;
    }

    /* the client body ends with "}" (a validated JSON object), maybe
     * followed by white space */

    end = ctx->body.data + ctx->body.len;

    while (end > ctx->body.data
           && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'
               || end[-1] == '\n'))
    {
        end--;
    }

    if (end == ctx->body.data || end[-1] != '}') {
        pic_buf_free(&json);
        return NGX_ERROR;
    }

    end--;

    for (q = end;
         q > ctx->body.data
         && (q[-1] == ' ' || q[-1] == '\t' || q[-1] == '\r' || q[-1] == '\n');
         q--)
    {
        /* void */
    }

    first = (q > ctx->body.data && q[-1] == '{');

    len = (end - ctx->body.data) + sizeof(",\"pic\":}") + json.len;

    b = ngx_create_temp_buf(r->pool, len);
    if (b == NULL) {
        pic_buf_free(&json);
        return NGX_ERROR;
    }

    p = ngx_cpymem(b->pos, ctx->body.data, end - ctx->body.data);
    p = ngx_cpymem(p, ",\"pic\":" + first, sizeof(",\"pic\":") - 1 - first);
    p = ngx_cpymem(p, json.data, json.len);
    *p++ = '}';

    pic_buf_free(&json);

    b->last = p;
    b->last_buf = 1;
    b->last_in_chain = 1;

    cl = ngx_alloc_chain_link(r->pool);
    if (cl == NULL) {
        return NGX_ERROR;
    }

    cl->buf = b;
    cl->next = NULL;

    r->request_body->bufs = cl;
    r->headers_in.content_length_n = b->last - b->pos;

    if (r->headers_in.content_length) {
        q = ngx_pnalloc(r->pool, NGX_OFF_T_LEN);
        if (q == NULL) {
            return NGX_ERROR;
        }

        r->headers_in.content_length->value.data = q;
        r->headers_in.content_length->value.len =
                    ngx_sprintf(q, "%O", r->headers_in.content_length_n) - q;
    }

    return NGX_OK;

failed:

    ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                  "pic: cannot build the plan: %s", err.message);

    return NGX_ERROR;
}


/*
 * The pool credential on the planned request: client X-PIC-* headers are
 * renamed out of the way (a client never sets an engine deadline nor a
 * credential), then X-PIC-Auth = HMAC "pic-plan-v1" over the rewritten
 * body (pic_auth.h; no X-PIC-Timeout-Ms is sent, so its part is empty).
 */

static ngx_int_t
ngx_http_pic_route_sign(ngx_http_request_t *r)
{
    u_char                    *hex;
    ngx_buf_t                 *b;
    ngx_uint_t                 i;
    ngx_list_part_t           *part;
    ngx_table_elt_t           *h;
    ngx_http_pic_main_conf_t  *pmcf;

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len > sizeof("X-PIC-") - 1
            && ngx_strncasecmp(h[i].key.data, (u_char *) "X-PIC-",
                               sizeof("X-PIC-") - 1) == 0)
        {
            ngx_str_set(&h[i].key, "X-PIC-Client-Header");
            h[i].lowcase_key = (u_char *) "x-pic-client-header";
        }
    }

    pmcf = ngx_http_get_module_main_conf(r, ngx_http_pic_module);

    if (pmcf->secret == NULL) {
        return NGX_OK;
    }

    b = r->request_body->bufs->buf;

    hex = ngx_pnalloc(r->pool, PIC_AUTH_HEX + 1);
    if (hex == NULL) {
        return NGX_ERROR;
    }

    if (pic_auth_mac_hex(pmcf->secret, "pic-plan-v1", NULL, 0, b->pos,
                         b->last - b->pos, (char *) hex)
        != 0)
    {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "pic: cannot sign the plan");
        return NGX_ERROR;
    }

    h = ngx_list_push(&r->headers_in.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(h, sizeof(ngx_table_elt_t));

    h->hash = 1;
    ngx_str_set(&h->key, PIC_AUTH_HEADER);
    h->lowcase_key = (u_char *) "x-pic-auth";
    h->value.data = hex;
    h->value.len = PIC_AUTH_HEX;

    return NGX_OK;
}


ngx_table_elt_t *
ngx_http_pic_route_held(ngx_http_request_t *r)
{
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h, *held;

    held = NULL;
    part = &r->headers_out.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].hash == 0
            || h[i].key.len != sizeof(PIC_PLAN_HELD_HEADER) - 1
            || ngx_strncasecmp(h[i].key.data, (u_char *) PIC_PLAN_HELD_HEADER,
                               sizeof(PIC_PLAN_HELD_HEADER) - 1)
               != 0)
        {
            continue;
        }

        /* engine-internal: never passed on */
        h[i].hash = 0;

        if (held == NULL) {
            held = &h[i];
        }
    }

    return held;
}


/*
 * The engine that answered the plan with 200 (a stream's header leaves once
 * the prompt is assembled), before the client can see a byte of the answer,
 * so that a client sending its next turn at once finds it recorded: the
 * segments its X-PIC-Held lists and the S1 windows, and the exact part of
 * the prompt it keeps in its prefix tree.  The prefix chains it covers go
 * to the shm index, and to redis (pic:pfx:{chain}) for the other gateways,
 * only what was news.  An exact-first engine keeps the prompt up to the
 * first segment it composed (a hit past its exact prefix: the plan's
 * exact_end for its combine node; from 0 for another engine that took the
 * request over), a prefix-only engine all of it, a PIC-only or cacheless
 * engine none; an engine that does not say is believed to keep all of it.
 */

void
ngx_http_pic_route_confirmed(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx,
    ngx_table_elt_t *held)
{
    u_char                   *bits;
    ngx_int_t                 slot;
    ngx_uint_t                i, j;
    ngx_http_pic_zone_ctx_t  *zc;

    zc = ctx->zc;

    if (ctx->confirmed || zc == NULL || ctx->combine < 0) {
        return;
    }

    ctx->confirmed = 1;

    ngx_http_pic_index_learn(zc, ctx->wins, ctx->nwins, ctx->combine);

    /* the engine that answered: the combine node, or the one nginx passed
     * the request on to (proxy_next_upstream) */

    slot = -1;

    if (r->upstream && r->upstream->peer.name) {
        ngx_shmtx_lock(&zc->shpool->mutex);
        slot = ngx_http_pic_engine_slot_locked(zc->sh, r->upstream->peer.name,
                                               0);
        ngx_shmtx_unlock(&zc->shpool->mutex);
    }

    if (slot >= 0) {
        ngx_http_pic_route_prefix(ctx, zc, slot);
    }

    if (held == NULL || ctx->nsegs == 0) {
        return;
    }

    bits = ngx_palloc(r->pool, ctx->nsegs);
    if (bits == NULL) {
        return;
    }

    if (pic_plan_held_parse((const char *) held->value.data, held->value.len,
                            ctx->nsegs, bits)
        != 0)
    {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "pic: engine \"%V\" sent a malformed "
                      PIC_PLAN_HELD_HEADER " header", &ctx->combine_name);
        return;
    }

    /* each run of held segments in one pass under the lock */

    for (i = 0; i < ctx->nsegs; i = j) {

        if (!bits[i]) {
            j = i + 1;
            continue;
        }

        for (j = i + 1; j < ctx->nsegs && bits[j]; j++) { /* void */ }

        ngx_http_pic_index_learn(zc, &ctx->segs[i], j - i, ctx->combine);
    }

    /* what it saw past the exact prefix and did not pool: a hint for the
     * next request with it (an exact-first engine pools on the second
     * sighting) */

    if (slot >= 0 && ctx->exact_segs < ctx->nsegs) {
        ngx_http_pic_index_seen_record(zc, &ctx->segs[ctx->exact_segs],
                                       ctx->nsegs - ctx->exact_segs,
                                       &bits[ctx->exact_segs], slot);
    }
}


/* the prefix chains of ctx that the engine in slot keeps in its tree */

static void
ngx_http_pic_route_prefix(ngx_http_pic_ctx_t *ctx,
    ngx_http_pic_zone_ctx_t *zc, ngx_int_t slot)
{
    ngx_uint_t  n;

    if (ctx->chains == NULL) {
        return;
    }

    switch (zc->sh->engines[slot].cache) {

    case NGX_HTTP_PIC_CACHE_EXACT:
        if (slot != ctx->combine) {
            ctx->exact_segs = 0;
            ctx->exact_end = ngx_http_pic_route_exact_end(ctx,
                                                   NGX_HTTP_PIC_CACHE_EXACT);
        }

        n = ctx->exact_end;
        break;

    case NGX_HTTP_PIC_CACHE_PIC:
    case NGX_HTTP_PIC_CACHE_FULL:
        n = 0;
        break;

    default:
        n = ctx->nsegs;
    }

    if (ngx_http_pic_index_learn_prefix(zc, ctx->chains, n, slot)) {
        ngx_http_pic_redis_record_prefix(zc, ctx->chains, n, slot);
    }
}


/* Pool cleanup of a planned request: its engine's in-flight count back. */

static void
ngx_http_pic_route_done(void *data)
{
    ngx_http_pic_ctx_t  *ctx = data;

    if (ctx->inflight) {
        ngx_http_pic_engine_release(ctx->zc, ctx->combine, ctx->combine_gen);
        ctx->inflight = 0;
    }
}


void
ngx_http_pic_route_cleanup(ngx_pool_cleanup_t *cln, ngx_http_pic_ctx_t *ctx)
{
    cln->handler = ngx_http_pic_route_done;
    cln->data = ctx;
}


ngx_http_pic_ctx_t *
ngx_http_pic_route_planned(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t  *cln;

    for (cln = r->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_pic_route_done) {
            return cln->data;
        }
    }

    return NULL;
}


/* --- accounting --- */


static void
ngx_http_pic_route_account(ngx_http_pic_zone_ctx_t *zc, ngx_http_pic_ctx_t *ctx)
{
    ngx_uint_t             i, dynamic;
    ngx_http_pic_stats_t  *st;

    dynamic = 0;

    st = &zc->sh->stats;

    (void) ngx_atomic_fetch_add(&st->segments, ctx->nsegs);
    (void) ngx_atomic_fetch_add(&st->seg_hits, ctx->hits);
    for (i = 0; i < ctx->nsegs; i++) {
        if (ctx->segs[i].flags & NGX_HTTP_PIC_SEG_DYNAMIC) {
            dynamic++;
        }
    }

    (void) ngx_atomic_fetch_add(&st->seg_misses, ctx->nsegs - ctx->hits - dynamic);
    (void) ngx_atomic_fetch_add(&st->seg_dynamic, dynamic);
    (void) ngx_atomic_fetch_add(&st->bytes_total, ctx->total_bytes);
    (void) ngx_atomic_fetch_add(&st->bytes_hit, ctx->hit_bytes);
    (void) ngx_atomic_fetch_add(&st->bytes_prefix, ctx->prefix_bytes);
    (void) ngx_atomic_fetch_add(&st->bytes_novel,
                                ctx->total_bytes - ctx->hit_bytes);

    if (ctx->hit_bytes > ctx->prefix_bytes) {
        (void) ngx_atomic_fetch_add(&st->bytes_above_prefix,
                                    ctx->hit_bytes - ctx->prefix_bytes);
    }

    (void) ngx_atomic_fetch_add(&st->s1_hits, ctx->s1_hits);
    (void) ngx_atomic_fetch_add(&st->s1_bytes, ctx->s1_bytes);
}


void
ngx_http_pic_route_observe(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx)
{
    ngx_uint_t                i;
    ngx_http_pic_zone_ctx_t  *zc;
    ngx_http_pic_loc_conf_t  *plcf;

    zc = ngx_http_pic_zone(r);

    ctx->prefix_bytes = ngx_http_pic_index_prefix(zc, ctx->segs, ctx->chains,
                                                  ctx->nsegs, 1);

    for (i = 0; i < ctx->nsegs; i++) {
        if (ctx->segs[i].flags & NGX_HTTP_PIC_SEG_HIT) {
            ctx->hits++;
            ctx->hit_bytes += ctx->segs[i].len;
        }
    }

    plcf = ngx_http_get_module_loc_conf(r, ngx_http_pic_module);

    if (ngx_http_pic_segment_windows(r, ctx, plcf) == NGX_OK && ctx->nwins) {
        ngx_http_pic_index_seen(zc, ctx->wins, ctx->nwins);

        for (i = 0; i < ctx->nwins; i++) {
            if (ctx->wins[i].flags & NGX_HTTP_PIC_SEG_HIT) {
                ctx->s1_hits++;
                ctx->s1_bytes += ctx->wins[i].len;
            }
        }
    }

    if (ctx->prefix_bytes > ctx->hit_bytes) {
        ctx->prefix_bytes = ctx->hit_bytes;
    }

    ctx->observed = 1;

    (void) ngx_atomic_fetch_add(&zc->sh->stats.observed, 1);

    ngx_http_pic_route_account(zc, ctx);
}
