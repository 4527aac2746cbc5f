/*
 * inflight.h — a request in flight (inflight.c): its state, its life and
 * the pool credential checks.
 */
#ifndef PIC_INFLIGHT_H
#define PIC_INFLIGHT_H

#include <stddef.h>
#include <time.h>

#include <event2/event.h>
#include <event2/http.h>

#include <cjson/cJSON.h>

#include "reasoning.h"
#include "remote.h"
#include "scheduler.h"
#include "server_state.h"
#include "toolcall.h"

/* One request in flight: an OpenAI completion (http_openai.c) or a peer's
 * prefill (http_peer.c), from its intake to its job's last news.  The
 * endpoint that made it says how news reaches its client (progress). */
struct pic_inflight {
    pic_server               *srv;
    pic_inflight             *prev, *next;      /* srv->live */
    struct evhttp_request    *req;
    struct evhttp_connection *evcon;
    struct event             *watch;            /* client socket EOF */
    pic_job                  *job;
    pic_req_kind              kind;
    int                       stream;
    int                       include_usage;
    int                       from_gateway;     /* the body carried a "pic" plan: a
                                                 * stream without usage still ends
                                                 * with a ": usage" SSE comment */
    int                       headers_sent;
    const char               *held;             /* from_gateway: X-PIC-Held (the
                                                 * job's), once assembled */
    int                       gone;             /* the client went away */
    int                       detached;         /* evhttp dropped the connection */
    int                       linked;           /* in srv->live */
    int                       parse_tools;
    cJSON                    *tools;            /* owned copy of the request's tools */
    pic_toolstream            ts;
    pic_buf                   content;          /* non-stream: the answer so far */
    pic_toolcall_out         *calls;            /* non-stream: parsed calls */
    int                       n_calls;
    size_t                    cap_calls;
    int                       n_stream_calls;   /* stream: calls sent */
    int                       split_think;      /* chat: <think> → reasoning_content */
    pic_thinkstream           think;
    pic_buf                   reasoning;        /* non-stream: the reasoning so far */
    int                       logprobs;         /* answer with logprobs */
    pic_token_logprob        *lps;              /* (n_lps) not yet sent */
    int                       n_lps;
    size_t                    cap_lps;
    int                       one_call;         /* parallel_tool_calls: false */
    int                       header_open;      /* stream: the pending call's id +
                                                 * name went out already */
    char                      open_id[32];      /* ... with this id */
    size_t                    args_sent;        /* ... and these argument bytes */
    char                      id[48];
    time_t                    created;
    int64_t                   t0_ns;
    int                       binary;           /* peer prefill: raw records out */
    size_t                    binary_sent;      /* ... record bytes so far */
    int                       authenticated;    /* carried the gateway's credential */
    pic_remote                remote;           /* entries fetched from peers (remote.h) */
    int                     (*progress)(pic_inflight *c);   /* move the job's news to
                                                 * the client; 1 when c is done */
};

/* A request in flight for req (job allocated, not submitted; progress unset);
 * NULL after replying 500. */
pic_inflight *pic_inflight_new(pic_server *srv, struct evhttp_request *req, pic_req_kind kind);

/* Free a request whose job is done or was never submitted. */
void pic_inflight_free(pic_inflight *c);

/* Submit c's job and put c in flight (linked, client watched); 0, or -1
 * after answering 429/503 and freeing c. */
int pic_inflight_start(pic_server *srv, pic_inflight *c);

/* The workers have news: each request in flight moves its own to its client. */
void pic_inflight_on_wake(pic_server *srv);

/* Shutdown: cancel every request in flight and drop its context (after the
 * scheduler has stopped); requests are left to evhttp_free. */
void pic_inflight_shutdown(pic_server *srv);

/* Release the HTTP side of a request whose answer will not be sent. */
void pic_inflight_drop_http(pic_inflight *c);

/* Stop watching before the answer's last bytes (the connection may be
 * reused or freed right after). */
void pic_inflight_release_conn(pic_inflight *c);

/* 1 if req carries the pool credential (or none is configured); else
 * answers 403 pool_auth_failed, counts it and returns 0. */
int pic_peer_authorized(pic_server *srv, struct evhttp_request *req);

/* 1 if the plan-carrying request req (body[0..len)) has the gateway's
 * credential (or none is configured), else 0. */
int pic_plan_authorized(pic_server *srv, struct evhttp_request *req, const char *body,
                        size_t len);

#endif /* PIC_INFLIGHT_H */
