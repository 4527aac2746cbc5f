/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: from the rendered prompt to keyed segments, with
 * the shared core's marker, CDC and key functions.
 */


#ifndef _NGX_HTTP_PIC_SEGMENT_H_INCLUDED_
#define _NGX_HTTP_PIC_SEGMENT_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "pic_cdc.h"
#include "pic_request.h"
#include "ngx_http_pic_module.h"


/* A key context and a segmentation freed with r's pool. */
ngx_int_t ngx_http_pic_segment_alloc(ngx_http_request_t *r,
    pic_key_ctx **kc, pic_segmentation **sg);

/* The segment sizes of a request into ctx->cdc, cdc_min, cdc_avg,
 * min_segment (docs/SIZING.md): pic_cdc and pic_min_segment where
 * configured; else, when the engines told their break-even length L*
 * (break_even tokens, 0: unknown), CDC average the power of two at or below
 * 2 L* (NGX_HTTP_PIC_BYTES_PER_TOKEN bytes a token), minimum half of it,
 * maximum four times it, and a minimum PIC segment of the value floor
 * (NGX_HTTP_PIC_VALUE_FLOOR tokens, or L* / 2 when smaller: every longer
 * segment is admitted, and the engines' budget decides by value which
 * entries stay); else the built-in defaults. */
void ngx_http_pic_segment_sizes(ngx_http_pic_ctx_t *ctx,
    ngx_http_pic_loc_conf_t *plcf, ngx_uint_t break_even);

/* Render req, cut it into segments (cdc, min_segment: the request's sizes)
 * and key them (fingerprint, scope, bytes) into sg: 0, or -1 and err.
 * Touches no nginx object but the read-only location conf: safe on a
 * thread of pic_thread_pool. */
int ngx_http_pic_segment_run(ngx_http_pic_loc_conf_t *plcf, pic_cdc *cdc,
    size_t min_segment, ngx_uint_t dialect, ngx_str_t *fingerprint,
    u_char *scope, size_t scope_len, pic_request *req, pic_key_ctx *kc,
    pic_segmentation *sg, pic_error *err);

/* Fill ctx->segs / nsegs / total_bytes / segmentation from sg and count
 * the CDC statistics (usec: what the pipeline took).  Returns NGX_OK or an
 * HTTP status. */
ngx_int_t ngx_http_pic_segment_finish(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx, ngx_http_pic_loc_conf_t *plcf, pic_key_ctx *kc,
    pic_segmentation *sg, uint64_t usec);


/* The prefix chain of segs[0..n): chains[i].key = xxh3_128 (canonical) of
 * chains[i-1].key || segs[i].key (16 zero bytes before segment 0), .len =
 * the bytes of segments 0..i (every kind: the engine keeps the whole
 * prompt, its dynamic segments included).  Names "the rendered
 * prompt up to the end of segment i" for exact-prefix routing. */
void ngx_http_pic_segment_chains(ngx_http_pic_segment_t *segs,
    ngx_http_pic_segment_t *chains, ngx_uint_t n);


/* S1 fallback: the keys of fixed windows (ctx->cdc_min bytes) at content-
 * defined anchors inside every PIC segment not flagged NGX_HTTP_PIC_SEG_HIT,
 * into ctx->wins / nwins. */
ngx_int_t ngx_http_pic_segment_windows(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx, ngx_http_pic_loc_conf_t *plcf);


#endif /* _NGX_HTTP_PIC_SEGMENT_H_INCLUDED_ */
