/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: the shared core's pipeline (pic_segment_request:
 * render, split at markers and structural edges, CDC, keys) run on the
 * request, its result kept for the plan, its cost and shape counted.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "pic_cdc.h"
#include "pic_key.h"
#include "pic_marker.h"
#include "pic_plan.h"
#include "pic_segment.h"
#include "pic_time.h"

#include <xxhash.h>

#include "ngx_http_pic_module.h"
#include "ngx_http_pic_index.h"
#include "ngx_http_pic_error.h"
#include "ngx_http_pic_segment.h"


static void ngx_http_pic_segmentation_cleanup(void *data);
static void ngx_http_pic_key_ctx_cleanup(void *data);


ngx_int_t
ngx_http_pic_segment_alloc(ngx_http_request_t *r, pic_key_ctx **kcp,
    pic_segmentation **sgp)
{
    pic_key_ctx         *kc;
    pic_segmentation    *sg;
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(r->pool, sizeof(pic_key_ctx));
    if (cln == NULL) {
        return NGX_ERROR;
    }

    kc = cln->data;
    kc->base = NULL;
    cln->handler = ngx_http_pic_key_ctx_cleanup;

    cln = ngx_pool_cleanup_add(r->pool, sizeof(pic_segmentation));
    if (cln == NULL) {
        return NGX_ERROR;
    }

    sg = cln->data;
    pic_segmentation_init(sg);
    cln->handler = ngx_http_pic_segmentation_cleanup;

    *kcp = kc;
    *sgp = sg;

    return NGX_OK;
}


/* gear tables of the derived CDC sizes, by log2 of the average; made on
 * first use by the worker's event loop in its cycle's pool, so they go with
 * the cycle (worker exit, or a reload without a master process), and the
 * table forgets them then */
static pic_cdc  *ngx_http_pic_auto_cdc[32];


static void
ngx_http_pic_auto_cdc_forget(void *data)
{
    ngx_memzero(ngx_http_pic_auto_cdc, sizeof(ngx_http_pic_auto_cdc));
}


static pic_cdc *
ngx_http_pic_auto_cdc_get(ngx_uint_t bits)
{
    size_t               avg;
    pic_cdc             *cdc;
    pic_error            err;
    pic_cdc_params       params;
    ngx_pool_cleanup_t  *cln;

    if (ngx_http_pic_auto_cdc[bits]) {
        return ngx_http_pic_auto_cdc[bits];
    }

    avg = (size_t) 1 << bits;

    cdc = ngx_palloc(ngx_cycle->pool, sizeof(pic_cdc));
    if (cdc == NULL) {
        return NULL;
    }

    pic_cdc_params_default(&params);
    params.min_size = avg / 2;
    params.avg_size = avg;
    params.max_size = avg * 4;

    if (pic_cdc_init(cdc, &params, &err) != 0) {
        ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                      "pic: cdc %uz: %s", avg, err.message);
        return NULL;
    }

    cln = ngx_pool_cleanup_add(ngx_cycle->pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_pic_auto_cdc_forget;
    ngx_http_pic_auto_cdc[bits] = cdc;

    return cdc;
}


void
ngx_http_pic_segment_sizes(ngx_http_pic_ctx_t *ctx,
    ngx_http_pic_loc_conf_t *plcf, ngx_uint_t break_even)
{
    size_t       lstar, avg;
    pic_cdc     *cdc;
    ngx_uint_t   bits;

    ctx->cdc = plcf->cdc;
    ctx->cdc_min = plcf->cdc_min;
    ctx->cdc_avg = plcf->cdc_avg;
    ctx->min_segment = plcf->min_segment;

    if (break_even == 0 || break_even > (1 << 20)) {
        return;
    }

    lstar = break_even * NGX_HTTP_PIC_BYTES_PER_TOKEN;

    if (plcf->min_segment_auto) {
        /* the value floor, not L* / 2: a segment under L* / 2 costs more
         * bytes per token, but what an entry buys is recompute time, and
         * the engines' budget already evicts by time saved per byte */
        ctx->min_segment = ngx_max(ngx_min(lstar / 2, NGX_HTTP_PIC_VALUE_FLOOR
                                           * NGX_HTTP_PIC_BYTES_PER_TOKEN), 16);
    }

    if (!plcf->cdc_auto) {
        return;
    }

    for (bits = 6, avg = 64; avg * 2 <= 2 * lstar && bits < 22; bits++) {
        avg *= 2;
    }

    cdc = ngx_http_pic_auto_cdc_get(bits);
    if (cdc == NULL) {
        return;
    }

    ctx->cdc = cdc;
    ctx->cdc_min = avg / 2;
    ctx->cdc_avg = avg;
}


int
ngx_http_pic_segment_run(ngx_http_pic_loc_conf_t *plcf, pic_cdc *cdc,
    size_t min_segment, ngx_uint_t dialect, ngx_str_t *fingerprint,
    u_char *scope, size_t scope_len, pic_request *req, pic_key_ctx *kc,
    pic_segmentation *sg, pic_error *err)
{
    pic_segment_cfg  cfg;

    if (pic_key_ctx_init(kc, (char *) fingerprint->data, fingerprint->len,
                         (char *) scope, scope_len, err)
        != 0)
    {
        return -1;
    }

    ngx_memzero(&cfg, sizeof(pic_segment_cfg));
    cfg.dialect = (pic_template_dialect) dialect;
    cfg.marker = plcf->split ? &plcf->marker : NULL;
    cfg.split_parts = plcf->split;
    cfg.cdc = cdc;
    cfg.keys = kc;
    cfg.min_pic_bytes = min_segment;
    cfg.unmarked_docs = plcf->split;

    return pic_segment_request(&cfg, req, sg, err);
}


ngx_int_t
ngx_http_pic_segment_finish(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx,
    ngx_http_pic_loc_conf_t *plcf, pic_key_ctx *kc, pic_segmentation *sg,
    uint64_t usec)
{
    size_t                     i, at;
    pic_segment               *ps;
    pic_error                  err;
    ngx_uint_t                 markers, escapes;
    ngx_http_pic_segment_t    *s;
    ngx_http_pic_zone_ctx_t   *zc;

    ctx->segmentation = sg;
    ctx->key_ctx = kc;

    if (sg->n_segs > PIC_PLAN_SEGS_MAX) {
        /* more than a plan may carry: the client's request, not our bug */
        pic_error_set(&err, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                      "invalid_request_error", NULL, "too_many_segments",
                      "the prompt has %zu segments (documents, messages, "
                      "chunks); at most %d are served", sg->n_segs,
                      PIC_PLAN_SEGS_MAX);
        return ngx_http_pic_error(r, ctx, &err, NGX_LOG_INFO);
    }

    ctx->segs = ngx_pcalloc(r->pool,
                            (sg->n_segs + 1) * sizeof(ngx_http_pic_segment_t));
    if (ctx->segs == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    markers = 0;
    escapes = 0;

    for (i = 0; i < sg->n_segs; i++) {
        ps = &sg->segs[i];
        s = &ctx->segs[i];

        /* XXH128's canonical (big-endian) bytes: hex-dumped, the key's hex */
        pic_key_to_bytes(&ps->key, s->key);

        s->off = (uint32_t) ps->start;
        s->len = (uint32_t) ps->len;
        s->worker = -1;

        if (ps->kind == PIC_SEG_PREFIX) {
            s->flags |= NGX_HTTP_PIC_SEG_FIRST;

        } else if (ps->kind == PIC_SEG_DYNAMIC) {
            s->flags |= NGX_HTTP_PIC_SEG_DYNAMIC;
        }

        if (i > 0 && !(ps->flags & PIC_SEG_FLAG_CDC)) {
            markers++;
        }

        if (!plcf->split && !(ps->flags & PIC_SEG_FLAG_GLUE)) {
            /* marker strings in client text: escaped on the wire, never
             * a boundary */
            at = 0;

            for ( ;; ) {
                at = pic_marker_find(&plcf->marker,
                                     sg->render.text.data + ps->start,
                                     ps->len, at);
                if (at >= ps->len) {
                    break;
                }

                escapes++;
                at++;
            }
        }

        ctx->total_bytes += s->len;
    }

    ctx->nsegs = sg->n_segs;

    ctx->chains = ngx_pcalloc(r->pool, (sg->n_segs + 1)
                                       * sizeof(ngx_http_pic_segment_t));
    if (ctx->chains == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_pic_segment_chains(ctx->segs, ctx->chains, ctx->nsegs);

    zc = ngx_http_pic_zone(r);

    if (zc) {
        (void) ngx_atomic_fetch_add(&zc->sh->stats.cdc_bytes,
                                    sg->render.text.len);
        (void) ngx_atomic_fetch_add(&zc->sh->stats.cdc_chunks, sg->n_segs);
        (void) ngx_atomic_fetch_add(&zc->sh->stats.cdc_usec, usec);
        (void) ngx_atomic_fetch_add(&zc->sh->stats.markers, markers);
        (void) ngx_atomic_fetch_add(&zc->sh->stats.escapes, escapes);
    }

    return NGX_OK;
}


void
ngx_http_pic_segment_chains(ngx_http_pic_segment_t *segs,
    ngx_http_pic_segment_t *chains, ngx_uint_t n)
{
    size_t              off;
    ngx_uint_t          i;
    XXH128_hash_t       h;
    XXH128_canonical_t  c;
    u_char              buf[2 * NGX_HTTP_PIC_KEY_LEN];

    off = 0;
    ngx_memzero(buf, NGX_HTTP_PIC_KEY_LEN);

    for (i = 0; i < n; i++) {

        /* chain_i = xxh3_128(chain_{i-1} || key_i), canonical bytes, from
         * 16 zero bytes: the whole prefix up to segment i, keyed as its
         * segments are (model, scope), without tokenizing anything */

        ngx_memcpy(buf + NGX_HTTP_PIC_KEY_LEN, segs[i].key,
                   NGX_HTTP_PIC_KEY_LEN);
        h = XXH3_128bits(buf, sizeof(buf));
        XXH128_canonicalFromHash(&c, h);

        off += segs[i].len;

        ngx_memcpy(chains[i].key, c.digest, NGX_HTTP_PIC_KEY_LEN);
        chains[i].off = 0;
        chains[i].len = (uint32_t) off;
        chains[i].flags = 0;        /* a dynamic segment ends a prefix
                                       the engine holds all the same */
        chains[i].worker = -1;
        chains[i].holders = 0;

        ngx_memcpy(buf, c.digest, NGX_HTTP_PIC_KEY_LEN);
    }
}


ngx_int_t
ngx_http_pic_segment_windows(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx,
    ngx_http_pic_loc_conf_t *plcf)
{
    size_t               i, j, n, cap, win;
    u_char              *text;
    pic_cdc_window      *out;
    ngx_http_pic_segment_t *s, *w;

    ctx->nwins = 0;

    if (!plcf->s1 || ctx->segmentation == NULL) {
        return NGX_OK;
    }

    win = ctx->cdc_min;
    text = (u_char *) ctx->segmentation->render.text.data;

    /* non-overlapping windows: at most len / win per segment */

    cap = 0;

    for (i = 0; i < ctx->nsegs; i++) {
        s = &ctx->segs[i];

        if (!(s->flags & (NGX_HTTP_PIC_SEG_HIT|NGX_HTTP_PIC_SEG_DYNAMIC
                          |NGX_HTTP_PIC_SEG_FIRST))
            && s->len >= 64 + win)
        {
            cap += s->len / win + 1;
        }
    }

    if (cap == 0) {
        return NGX_OK;
    }

    out = ngx_palloc(r->pool, cap * sizeof(pic_cdc_window));
    ctx->wins = ngx_pcalloc(r->pool, cap * sizeof(ngx_http_pic_segment_t));

    if (out == NULL || ctx->wins == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < ctx->nsegs; i++) {
        s = &ctx->segs[i];

        if ((s->flags & (NGX_HTTP_PIC_SEG_HIT|NGX_HTTP_PIC_SEG_DYNAMIC
                         |NGX_HTTP_PIC_SEG_FIRST))
            || s->len < 64 + win)
        {
            continue;
        }

        n = pic_cdc_windows(ctx->cdc, ctx->key_ctx, (char *) text + s->off,
                            s->len, (uint32_t) win, out,
                            cap - ctx->nwins);

        n = ngx_min(n, cap - ctx->nwins);

        for (j = 0; j < n; j++) {
            w = &ctx->wins[ctx->nwins++];

            pic_key_to_bytes(&out[j].key, w->key);
            w->off = s->off + out[j].off;
            w->len = out[j].len;
            w->flags = NGX_HTTP_PIC_SEG_S1;
            w->worker = -1;
        }
    }

    return NGX_OK;
}


static void
ngx_http_pic_segmentation_cleanup(void *data)
{
    pic_segmentation_free(data);
}


static void
ngx_http_pic_key_ctx_cleanup(void *data)
{
    pic_key_ctx  *kc = data;

    if (kc->base) {
        pic_key_ctx_free(kc);
    }
}
