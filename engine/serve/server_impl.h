/*
 * server_impl.h — what the server's parts share: the server object, reply
 * helpers (server.c) and the OpenAI endpoints (http_openai.c).  Everything
 * here runs on the event-loop thread unless it says otherwise.
 */
#ifndef PIC_SERVER_IMPL_H
#define PIC_SERVER_IMPL_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include <event2/event.h>
#include <event2/http.h>

#include <cjson/cJSON.h>

#include "model.h"
#include "pic_auth.h"
#include "pic_error.h"
#include "pic_key.h"
#include "plan_exec.h"
#include "pool.h"
#include "pic_marker.h"
#include "pic_plan.h"
#include "pic_template.h"
#include "pic_time.h"
#include "reasoning.h"
#include "registry.h"
#include "scheduler.h"
#include "server.h"
#include "tokenizer.h"
#include "toolcall.h"
#include "transport.h"

#define PIC_ENGINE_VERSION "0.2.0"

typedef struct pic_oai_ctx pic_oai_ctx;

/* HTTP counters (loop thread only). */
typedef struct {
    uint64_t requests;          /* every HTTP request */
    uint64_t errors;            /* answered with status >= 400 */
    uint64_t completions;       /* accepted /v1/(chat/)completions */
    uint64_t streams;           /* of which streamed */
    uint64_t status_4xx, status_5xx;
    uint64_t rejected_429, expired_504, too_large_413, too_long_422;
    uint64_t disconnects;       /* clients gone before their answer ended */
    uint64_t tool_calls;        /* tool calls parsed out of model output */
    uint64_t plans_received;    /* requests that carried a gateway plan */
    uint64_t plans_ignored;     /* plans that did not fit the prompt: served uncached */
    uint64_t peer_fetches;      /* pulls and remote prefills started */
    uint64_t peer_failures;     /* ... that failed (error, timeout, bad record) */
    uint64_t peer_frames;       /* frames received from peers */
    uint64_t segments_served;   /* entries sent to peers (pull endpoint) */
    uint64_t prefills_served;   /* remote prefill requests accepted */
    uint64_t auth_failures;     /* peer requests, plans or frames without a valid credential */
    double   ttft_sum_s;        /* submit → first token, over answered requests */
    uint64_t ttft_n;
    uint64_t ttft_hist[PIC_TTFT_BUCKETS];   /* ... by pic_ttft_bucket */
    double   latency_sum_s;     /* submit → done */
    uint64_t latency_n;
} pic_http_stats;

typedef struct pic_server {
    const pic_server_opts *opts;
    struct event_base     *base;
    struct evhttp         *http;
    time_t                 started;
    int                    port;
    int                    stopping;
    char                   addr[128];       /* advertised host:port */

    int                    loading;         /* the loader thread runs: only health,
                                             * status and metrics answer (503) */
    pic_load_progress      load;            /* its progress (any thread reads) */
    pthread_t              loader;
    int                    loader_started;  /* not yet joined */
    int                    load_rc;         /* the loader's result, after the join */
    int                    failed;          /* the load or start-up failed: exit 1 */
    struct event          *loaded;          /* the loader finished */
    pic_model             *dev_model;       /* model's weights on the --device
                                             * backend (NULL: CPU, model itself) */
    pic_model             *model;           /* NULL: no model (503 for inference); the
                                             * loader fills this and what follows
                                             * until ready, read only once loaded */
    pic_tokenizer         *tok;
    char                   model_name[256]; /* served model id */
    pic_template_dialect   dialect;
    pic_marker             marker;          /* document delimiter in prompts */
    int                    max_ctx;
    char                   key_fp[24];      /* fingerprint string of segment keys */
    pic_key_ctx            keys;            /* keying for standalone segmentation */
    int                    have_keys;
    pic_pool              *pool;            /* public pool of segment entries */
    pic_plan_ctx           plan;            /* how plan jobs use it */
    pic_prefix_cache      *prefix;          /* exact prefix tree (exact, prefix modes) */
    pic_plan_door          door;            /* second sightings (exact mode) */
    pic_cache_budget       budget;          /* one byte budget over pool and tree */
    const char            *mode_name;       /* --cache-mode as given */
    const char            *seam_source;     /* "--seam", "calibration" or "default" */
    const char            *seam_doc_source; /* the same, or "--seam-doc", for documents */
    cJSON                 *calibration;     /* the calibration file read (calibrate.h), or NULL */
    char                   calibration_path[4200];

    pic_sched             *sched;
    struct event          *wake;            /* job news from the workers */
    pic_oai_ctx           *live;            /* requests in flight (list) */
    int                    n_live;

    pic_registry          *reg;             /* NULL: no Redis */
    pic_transport         *transport;       /* entries between engines */
    pic_auth               auth;            /* pool credential; auth.len 0: none */
    SSL_CTX               *tls_server;      /* the listener's TLS (tls.h); NULL: plain */
    SSL_CTX               *tls_client;      /* pulls and remote prefills; NULL: plain */
    cJSON                 *script;          /* --script rules, or NULL */
    pic_http_stats         hs;
} pic_server;

/* One request in flight (an OpenAI completion, or a peer's prefill). */
struct pic_oai_ctx {
    pic_server               *srv;
    pic_oai_ctx              *prev, *next;      /* srv->live */
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
    void                     *fetches;          /* remote entry fetches (http_peer.c) */
};

/* --- replies (server.c) --- */

/* Send body with content type and status code. */
void pic_reply(struct evhttp_request *req, int code, const char *ctype,
               const char *body, size_t len);

/* Send a cJSON document (consumed) as application/json. */
void pic_reply_json(struct evhttp_request *req, int code, cJSON *doc);

/* Send an OpenAI-shaped error {"error":{message,type,param,code}} and count
 * it; type NULL picks one from the status. */
void pic_reply_error(pic_server *srv, struct evhttp_request *req, int code,
                     const char *type, const char *message);

/* Same from a pic_error (status, message, type, param, code). */
void pic_reply_pic_error(pic_server *srv, struct evhttp_request *req,
                         const pic_error *err);

/* The HTTP status that answers a job failed for reason why (400 input, 422
 * too long, 503 unavailable, 504 timeout, 500 otherwise). */
int pic_job_error_status(pic_job_error why);

/* The OpenAI error object for status/type/message (caller owns it). */
cJSON *pic_error_doc(int status, const char *type, const char *param,
                     const char *code, const char *message);

/* --- OpenAI endpoints (http_openai.c) --- */

/* A context for req (job allocated, not submitted); NULL after replying 500. */
pic_oai_ctx *pic_oai_ctx_new(pic_server *srv, struct evhttp_request *req, pic_req_kind kind);

/* Free a context whose job is done or was never submitted. */
void pic_oai_ctx_free(pic_oai_ctx *c);

/* Submit c's job and put c in flight (linked, client watched); 0, or -1
 * after answering 429/503 and freeing c. */
int pic_oai_start(pic_server *srv, pic_oai_ctx *c);

/* POST /v1/chat/completions (kind CHAT) or /v1/completions. */
void pic_oai_handle(pic_server *srv, struct evhttp_request *req, pic_req_kind kind);

/* GET /v1/models. */
void pic_oai_models(pic_server *srv, struct evhttp_request *req);

/* The workers have news: move it to the clients. */
void pic_oai_on_wake(pic_server *srv);

/* Shutdown: cancel every request in flight and drop its context (after the
 * scheduler has stopped); requests are left to evhttp_free. */
void pic_oai_shutdown(pic_server *srv);

/* --- engine-to-engine (http_peer.c) --- */

/* 1 if req carries the pool credential (or none is configured); else
 * answers 403 pool_auth_failed, counts it and returns 0. */
int pic_peer_authorized(pic_server *srv, struct evhttp_request *req);

/* 1 if the plan-carrying request req (body[0..len)) has the gateway's
 * credential (or none is configured), else 0. */
int pic_plan_authorized(pic_server *srv, struct evhttp_request *req, const char *body,
                        size_t len);

/* GET /v1/pic/segments/{key}?bytes=N&fingerprint=F: a pooled entry's frame;
 * returns the status it answered. */
int pic_peer_segment(pic_server *srv, struct evhttp_request *req, const char *key);

/* POST /v1/pic/prefill: prefill segments for a combine node, stream frames;
 * returns the status it answered, or 0 when the job answers later. */
int pic_peer_prefill(pic_server *srv, struct evhttp_request *req);

/* One stderr line about a peer-endpoint request (its caller's address, the
 * method and path, then what printf(fmt, ...) says): every peer request is
 * logged when it arrives and when it is answered, on the serving engine, so
 * a remote prefill that stalls can be placed from both engines' logs. */
void pic_peer_log(pic_server *srv, struct evhttp_request *req, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Start fetching c's plan segments from holders and workers (loop). */
void pic_remote_dispatch(pic_server *srv, pic_oai_ctx *c, const pic_plan *plan);

/* Cancel c's fetches (before its job is freed). */
void pic_remote_cancel(pic_oai_ctx *c);

#endif /* PIC_SERVER_IMPL_H */
