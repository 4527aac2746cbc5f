/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: planning.  The policy itself, over plain arrays, is
 * core/plan/pic_route.h; this file fills its candidates from the shm index
 * and the engine table, counts, and writes the plan.  The combine node is
 * the eligible engine with the most hit bytes already local, then the least
 * load, among the engines whose load is within pic_imbalance of the least
 * loaded one (cache affinity never sends a request to an overloaded
 * engine).  Misses go to workers longest first to the least loaded (LPT);
 * while redis is absent or down, each miss goes to its rendezvous-hash home
 * instead, so that the same content keeps landing on the same engine.  The
 * plan is appended to the client body as a "pic" object and Content-Length
 * fixed.
 */


#ifndef _NGX_HTTP_PIC_ROUTE_H_INCLUDED_
#define _NGX_HTTP_PIC_ROUTE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_pic_module.h"


/* Plan ctx (holders resolved) and rewrite the body.  Returns NGX_DECLINED
 * (go on to proxy_pass) or an HTTP status. */
ngx_int_t ngx_http_pic_route(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx);

/* The engine's X-PIC-Held answer header (pic_plan.h), hidden from the
 * client (every copy); NULL when the answer has none.  Header filter. */
ngx_table_elt_t *ngx_http_pic_route_held(ngx_http_request_t *r);

/* The combine node answered the plan (a 200 header: a stream's leaves once
 * the prompt is assembled, before the client sees the answer): record as
 * held there exactly the segments its X-PIC-Held lists (none when held is
 * NULL or malformed), its S1 windows, and the exact prefix the engine that
 * answered keeps in its tree (shm index, redis) (DESIGN 4.2: on the
 * engine's confirmation, never when a plan names it; workers confirm with
 * their redis "add" events). */
void ngx_http_pic_route_confirmed(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx, ngx_table_elt_t *held);

/* Make cln (a cleanup of r's pool) give ctx's in-flight count back when r
 * ends, and mark r as planned for ngx_http_pic_route_planned. */
void ngx_http_pic_route_cleanup(ngx_pool_cleanup_t *cln,
    ngx_http_pic_ctx_t *ctx);

/* The ctx of r's plan when r was planned before an internal redirect
 * (its module ctx is gone then, its pool cleanup is not), else NULL. */
ngx_http_pic_ctx_t *ngx_http_pic_route_planned(ngx_http_request_t *r);

/* Observe mode: account what an exact-prefix cache and PIC would serve. */
void ngx_http_pic_route_observe(ngx_http_request_t *r,
    ngx_http_pic_ctx_t *ctx);


#endif /* _NGX_HTTP_PIC_ROUTE_H_INCLUDED_ */
