/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: pic affinity, cache-aware routing for foreign
 * OpenAI-compatible replicas (vLLM, SGLang, llama-server), which keep an
 * exact-prefix cache each and know nothing of plans.  The request is parsed,
 * rendered, segmented and keyed as for pic on, its body forwarded byte for
 * byte, and the replica chosen by the longest exact prefix the gateway has
 * recorded there, then the most segment bytes, within pic_imbalance of the
 * least loaded (core/plan/pic_route.h).  The gateway records a prompt's
 * prefix chains on the replica it routes to (and on the one that answered,
 * when nginx passed the request on), in the shm zone and in redis
 * (pic:pfx:{chain}) for the other gateways; each replica's records form an
 * LRU bounded by pic_replica_cache, deepest prefixes forgotten first, as a
 * radix-tree cache evicts.  The answer's cached tokens (usage.
 * prompt_tokens_details.cached_tokens, or llama-server's timings.cache_n)
 * confirm a record; an answer that says the replica kept less than half of
 * what was recorded means it evicted (or restarted): whatever the replica
 * used before that prefix is forgotten too.
 */


#ifndef _NGX_HTTP_PIC_AFFINITY_H_INCLUDED_
#define _NGX_HTTP_PIC_AFFINITY_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_pic_module.h"
#include "ngx_http_pic_index.h"


#define NGX_HTTP_PIC_AFFINITY_BPT     4000     /* prompt bytes per 1000
                                                * tokens until a replica
                                                * reports its own */


/* chains[i].holders |= the replicas (slots in mask) that have the prefix
 * ending with segment i recorded. */
void ngx_http_pic_affinity_lookup(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *chains, ngx_uint_t n, uint64_t mask);

/* Choose ctx's replica (holders resolved), record the prompt there and
 * count.  The body is left as the client sent it.  NGX_DECLINED (go on to
 * proxy_pass) or an HTTP status. */
ngx_int_t ngx_http_pic_affinity_route(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx);

/* Header filter, a 200 from the upstream: the replica that answered (nginx
 * may have passed the request on) has the prompt now. */
void ngx_http_pic_affinity_answered(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx);

/* The answer is over: what it said it reused, counted and checked against
 * the record. */
void ngx_http_pic_affinity_finish(ngx_http_request_t *r,
    ngx_http_pic_zone_ctx_t *zc, ngx_http_pic_ctx_t *ctx);


#endif /* _NGX_HTTP_PIC_AFFINITY_H_INCLUDED_ */
