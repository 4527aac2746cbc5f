/*
 * server_impl.h — what the server's parts share: the server object, reply
 * helpers (server.c) and the OpenAI endpoints (http_openai.c).  Everything
 * here runs on the event-loop thread unless it says otherwise.
 */
#ifndef PIC_SERVER_IMPL_H
#define PIC_SERVER_IMPL_H

#include <stdint.h>
#include <time.h>

#include <event2/event.h>
#include <event2/http.h>

#include <cjson/cJSON.h>

#include "model.h"
#include "pic_error.h"
#include "pic_key.h"
#include "plan_exec.h"
#include "pool.h"
#include "pic_marker.h"
#include "pic_template.h"
#include "registry.h"
#include "scheduler.h"
#include "server.h"
#include "tokenizer.h"

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
    uint64_t plans_ignored;     /* plans that did not fit the prompt: standalone used */
    double   ttft_sum_s;        /* submit → first token, over answered requests */
    uint64_t ttft_n;
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

    pic_model             *model;           /* NULL: no model (503 for inference) */
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

    pic_sched             *sched;
    struct event          *wake;            /* job news from the workers */
    pic_oai_ctx           *live;            /* requests in flight (list) */
    int                    n_live;

    pic_registry          *reg;             /* NULL: no Redis */
    pic_http_stats         hs;
} pic_server;

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

/* The OpenAI error object for status/type/message (caller owns it). */
cJSON *pic_error_doc(int status, const char *type, const char *param,
                     const char *code, const char *message);

/* --- OpenAI endpoints (http_openai.c) --- */

/* POST /v1/chat/completions (kind CHAT) or /v1/completions. */
void pic_oai_handle(pic_server *srv, struct evhttp_request *req, pic_req_kind kind);

/* GET /v1/models. */
void pic_oai_models(pic_server *srv, struct evhttp_request *req);

/* The workers have news: move it to the clients. */
void pic_oai_on_wake(pic_server *srv);

/* Shutdown: cancel every request in flight and drop its context (after the
 * scheduler has stopped); requests are left to evhttp_free. */
void pic_oai_shutdown(pic_server *srv);

#endif /* PIC_SERVER_IMPL_H */
