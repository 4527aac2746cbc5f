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

#include "pic_request.h"
#include "ngx_http_pic_module.h"


/* Render req, cut it into segments, key them (model fingerprint, scope,
 * bytes) and fill ctx->segs / nsegs / total_bytes / segmentation; counts
 * the CDC statistics.  Returns NGX_OK or an HTTP status. */
ngx_int_t ngx_http_pic_segment(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx,
    ngx_http_pic_loc_conf_t *plcf, pic_request *req);


/* The prefix chain of segs[0..n): chains[i].key = xxh3_128 (canonical) of
 * chains[i-1].key || segs[i].key (16 zero bytes before segment 0), .len =
 * the bytes of segments 0..i (every kind: the engine keeps the whole
 * prompt, its dynamic segments included).  Names "the rendered
 * prompt up to the end of segment i" for exact-prefix routing. */
void ngx_http_pic_segment_chains(ngx_http_pic_segment_t *segs,
    ngx_http_pic_segment_t *chains, ngx_uint_t n);


/* S1 fallback: the keys of fixed windows (pic_cdc_min bytes) at content-
 * defined anchors inside every PIC segment not flagged NGX_HTTP_PIC_SEG_HIT,
 * into ctx->wins / nwins. */
ngx_int_t ngx_http_pic_segment_windows(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx, ngx_http_pic_loc_conf_t *plcf);


#endif /* _NGX_HTTP_PIC_SEGMENT_H_INCLUDED_ */
