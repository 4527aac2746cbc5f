/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: the cluster index in Redis, read through hiredis'
 * async API on nginx's event loop.  One connection per worker, connected
 * to an IP:port or a unix socket (never a name: hiredis would resolve it
 * with a blocking call), reconnected with back-off.  A lookup sends one
 * SMEMBERS per segment in a single pipelined write; its deadline is an
 * nginx timer owned by the request (hiredis 0.14 has no command timeout).
 *
 * Layout read:
 *   pic:seg:{32 hex key}   set of engine ids holding the segment (written
 *                          by the engines)
 *   pic:pfx:{32 hex chain} set of engine ids holding the exact prefix that
 *                          ends at a segment boundary (chain: see
 *                          ngx_http_pic_segment_chains), written by the
 *                          gateways when an engine served it, expiring
 *                          NGX_HTTP_PIC_PREFIX_TTL after the last write
 * An id is matched against the ids engines report to health probes, or
 * against the engine's address as configured.
 */


#ifndef _NGX_HTTP_PIC_REDIS_H_INCLUDED_
#define _NGX_HTTP_PIC_REDIS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_pic_module.h"


/* Connect this worker to pic_redis (when configured). */
ngx_int_t ngx_http_pic_redis_init_process(ngx_cycle_t *cycle);

/* Close this worker's connection; pending lookups see a NULL reply. */
void ngx_http_pic_redis_exit_process(ngx_cycle_t *cycle);

/* Whether this worker's connection is up and answering. */
ngx_uint_t ngx_http_pic_redis_ready(void);

/* A lookup timed out: after a few in a row, lookups pause (1 s, doubling
 * to 30 s) until one is answered again. */
void ngx_http_pic_redis_stalled(ngx_log_t *log);

/* Start one pipelined lookup of segs[idx[i]] (chains[idx[i] - nsegs] when
 * idx[i] >= nsegs), i < n; when every reply has come back, ev is posted.
 * NGX_DECLINED when not connected. */
ngx_int_t ngx_http_pic_redis_lookup(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx, ngx_uint_t *idx, ngx_uint_t n, ngx_event_t *ev);

/* Engine slot holds the prefixes of chains flagged NGX_HTTP_PIC_SEG_NEW:
 * SADD + EXPIRE each, replies ignored (nothing waits for them). */
void ngx_http_pic_redis_record_prefix(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *chains, ngx_uint_t n, ngx_uint_t slot);

/* The replica in slot no longer holds the prefix chains keys[0..n)
 * (NGX_HTTP_PIC_KEY_LEN bytes each, pic affinity's LRU forgot them): SREM
 * it from pic:pfx:{chain}, so that a gateway asking later does not learn
 * them (what another gateway already recorded, its own LRU forgets). */
void ngx_http_pic_redis_forget_prefix(ngx_http_pic_zone_ctx_t *zc,
    u_char *keys, ngx_uint_t n, ngx_uint_t slot);

/* The request no longer waits: later replies are dropped. */
void ngx_http_pic_redis_detach(ngx_http_pic_lookup_t *lk);

/* Whether every reply of lk has come back. */
ngx_uint_t ngx_http_pic_redis_complete(ngx_http_pic_lookup_t *lk);


#endif /* _NGX_HTTP_PIC_REDIS_H_INCLUDED_ */
