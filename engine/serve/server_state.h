/*
 * server_state.h — the server object every part of the engine's HTTP side
 * reads: options, the loaded model, caches, scheduler, the requests in
 * flight (inflight.h) and the HTTP counters.  Everything here runs on the
 * event-loop thread unless it says otherwise.
 */
#ifndef PIC_SERVER_STATE_H
#define PIC_SERVER_STATE_H

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

typedef struct pic_inflight pic_inflight;

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
    pic_inflight          *live;            /* requests in flight (list) */
    int                    n_live;

    pic_registry          *reg;             /* NULL: no Redis */
    pic_transport         *transport;       /* entries between engines */
    pic_auth               auth;            /* pool credential; auth.len 0: none */
    SSL_CTX               *tls_server;      /* the listener's TLS (tls.h); NULL: plain */
    SSL_CTX               *tls_client;      /* pulls and remote prefills; NULL: plain */
    cJSON                 *script;          /* --script rules, or NULL */
    pic_http_stats         hs;
} pic_server;

#endif /* PIC_SERVER_STATE_H */
