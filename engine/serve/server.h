/*
 * server.h — pic-engine's HTTP server (libevent evhttp).
 */
#ifndef PIC_SERVER_H
#define PIC_SERVER_H

#include <stddef.h>
#include <stdint.h>

/* --seam off: the class's segments are recomputed (never served from entries). */
#define PIC_SEAM_OFF (-2)

typedef struct {
    const char *host;           /* listen address (IP), default 127.0.0.1 */
    int         port;           /* listen port; 0 picks a free one */
    const char *id;             /* engine id announced in /status and Redis */
    const char *model_dir;      /* checkpoint directory, NULL: none loaded */
    const char *model_name;     /* served model id; NULL: the directory's name */
    const char *template_name;  /* chat template dialect; NULL: from the model */
    const char *marker;         /* document delimiter in prompts; NULL: default */
    int         no_split_documents; /* markers are plain text, unmarked text is cut
                                 * by CDC only (the gateway's pic_split_documents
                                 * off); 0: split */
    const char *port_file;      /* write the bound port here once ready (model
                                 * loaded) when set */
    int         threads;        /* OpenMP threads per worker; 0: cores / workers */
    int         workers;        /* compute threads; 0: 1 */
    int         max_batch;      /* running sequences per worker; 0: 8 */
    int         max_queue;      /* waiting requests before 429; -1: 64 */
    int         ctx;            /* positions per sequence; 0: min(model, 32768) */
    int         default_max_tokens; /* when a request sets none; 0: up to the context */
    int         reasoning_budget;   /* reasoning tokens before a constrained answer
                                     * (thinking on); 0: none */
    int64_t     request_timeout_ms; /* per-request deadline; 0: none */
    size_t      max_body;       /* request body limit in bytes (413 above) */
    const char *redis;          /* "IP:PORT" or "unix:/path"; NULL: no registration */
    const char *redis_user;     /* AUTH user (Redis ACL); NULL: none */
    const char *redis_password_file; /* AUTH password's file; NULL: no AUTH */
    const char *advertise;      /* host:port announced in Redis; NULL: host:bound port */
    int         heartbeat_ms;   /* Redis heartbeat period */
    int         registry_ttl_s; /* pic:eng:{id} expiry */
    uint64_t    cache_bytes;    /* one budget: prefix tree + public pool (bytes) */
    const char *cache_evict;    /* "cost" (default: GreedyDual-Size, gds.h) or "lru" */
    uint64_t    pool_bytes;     /* deprecated (cmd_serve folds it into cache_bytes) */
    const char *cache_mode;     /* "exact" (default), "prefix", "pic", "naive" or "full" */
    uint64_t    prefix_bytes;   /* deprecated (cmd_serve folds it into cache_bytes) */
    int         prefix_block;   /* prefix tree block (tokens); 0: 64 */
    int         checkpoints;    /* checkpoints planned per request (M); 0: 4 */
    int         seam;           /* seam width w of PIC entries; PIC_SEAM_OFF: PIC
                                 * segments recomputed; -1: the calibration's, else 8 */
    int         seam_doc;       /* that of client-delimited documents; -1: the
                                 * calibration's (with seam -1), else seam's */
    const char *calibration;    /* calibration file (calibrate.h); NULL: the model
                                 * directory's pic_calibration.json when there is one */
    const char *entry_dtype;    /* "bf16" (default) or "f32" for PIC entries */
    const char *weights;        /* --weights: auto/f32/bf16/q8; NULL: $PIC_WEIGHTS or auto */
    const char *device;         /* --device: cpu (NULL) or cuda (pic_backend_load) */
    size_t      min_segment;    /* shorter non-prefix segments are recomputed */
    int         peer_timeout_ms;/* deadline of a pull / remote prefill */
    int         no_batch_decode;/* one forward per decode token (comparison) */
    const char *pool_secret_file; /* pool credential (pic_auth.h); NULL: none */
    int         insecure_pool;  /* without a credential, open peer endpoints and
                                 * plans to anyone who can connect (else refused) */
    uint64_t    max_frame_bytes;/* largest entry frame accepted from a peer */
    const char *tls_cert;       /* PEM certificate (chain): the listener serves TLS and
                                 * peers are reached over TLS with it; NULL: plain HTTP */
    const char *tls_key;        /* its PEM private key */
    const char *tls_client_ca;  /* the pool CA: clients must present a certificate it
                                 * signed, and peers' certificates are checked against
                                 * it; NULL: neither */
    const char *script;         /* scripted replies (JSON file, tests and demos of
                                 * random-weight models); NULL: none */
    const char *load_hold;      /* tests: the model load waits after its first
                                 * tensor while this file exists; NULL: never */
} pic_server_opts;

/* Run the server until SIGINT/SIGTERM; returns a process exit status. */
int pic_server_run(const pic_server_opts *opts);

#endif
