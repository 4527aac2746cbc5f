/*
 * server.c — pic-engine's HTTP server on libevent: start-up, request dispatch,
 * model loading, shutdown; the rest of engine/serve/ lies below it: the
 * endpoints (http_openai.c, http_peer.c, status.c), the requests in flight
 * (inflight.c), the fetches from peers (remote.c) and the replies (reply.c).
 *
 * The event loop never computes: model work runs on the scheduler's worker
 * threads (scheduler.h), which wake the loop through one event (event_active is
 * thread-safe after evthread_use_pthreads); the Redis registration is
 * registry.c's.
 *
 * Start-up: the socket is bound first, then a loader thread loads the
 * model (progress lines on stderr, counters in srv->load) while the loop
 * answers /healthz and /status with 503 "loading" and everything else with
 * an OpenAI-shaped 503 model_loading; once it is done the loop joins it,
 * registers in Redis, writes the port file and serves.
 *
 * Routes:
 *   POST /v1/chat/completions, POST /v1/completions, GET /v1/models
 *   GET  /healthz   {"status":"ok"} once ready, 503 {"status":"loading"} before
 *   GET  /status    JSON: model, scheduler, HTTP counters, registration
 *   GET  /metrics   Prometheus text
 *   GET  /v1/pic/segments/{key}, POST /v1/pic/prefill   engine to engine (http_peer.c)
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>

#include <cjson/cJSON.h>
#include <xxhash.h>

#include "checkpoint.h"
#include "forward.h"
#include "pic_kernels.h"
#include "calibrate.h"
#include "model_config.h"
#include "pic_time.h"
#include "http_openai.h"
#include "http_peer.h"
#include "inflight.h"
#include "reply.h"
#include "status.h"

/* --- dispatch --- */

static void
pic_dispatch(struct evhttp_request *req, void *arg)
{
    pic_server          *srv = arg;
    const char          *uri = evhttp_request_get_uri(req);
    struct evhttp_uri   *u = evhttp_uri_parse(uri);
    const char          *path = u ? evhttp_uri_get_path(u) : NULL;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    int                  get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;

    srv->hs.requests++;
    if (path == NULL) {
        pic_reply_error(srv, req, 400, NULL, "malformed request URI");
    } else if (!strcmp(path, "/healthz") && get) {
        pic_endpoint_healthz(srv, req);
    } else if (!strcmp(path, "/status") && get) {
        pic_endpoint_status(srv, req);
    } else if (!strcmp(path, "/metrics") && get) {
        pic_endpoint_metrics(srv, req);
    } else if (srv->loading) {
        pic_count_error(srv, 503);
        pic_reply_json(req, 503, pic_error_doc(503, "server_error", NULL, "model_loading",
                                               "the model is still loading; retry when "
                                               "/healthz answers 200"));
    } else if (!strcmp(path, "/v1/models") && get) {
        pic_oai_models(srv, req);
    } else if (!strcmp(path, "/v1/chat/completions") && cmd == EVHTTP_REQ_POST) {
        pic_oai_handle(srv, req, PIC_REQ_CHAT);
    } else if (!strcmp(path, "/v1/completions") && cmd == EVHTTP_REQ_POST) {
        pic_oai_handle(srv, req, PIC_REQ_COMPLETION);
    } else if ((!strcmp(path, "/v1/pic/prefill") && cmd == EVHTTP_REQ_POST)
               || (!strncmp(path, "/v1/pic/segments/", 17) && get)) {
        int status = 403;

        pic_peer_log(srv, req, "arrived, %zu bytes",
                     evbuffer_get_length(evhttp_request_get_input_buffer(req)));
        if (pic_peer_authorized(srv, req)) {
            status = path[8] == 'p' ? pic_peer_prefill(srv, req)
                                    : pic_peer_segment(srv, req, path + 17);
        }
        if (status != 0) {
            pic_peer_log(srv, req, "answered %d", status);
        }
    } else if (!strcmp(path, "/v1/chat/completions") || !strcmp(path, "/v1/completions")
               || !strcmp(path, "/v1/models") || !strcmp(path, "/status")
               || !strcmp(path, "/healthz") || !strcmp(path, "/metrics")) {
        pic_reply_error(srv, req, 405, NULL, "method not allowed on this endpoint");
    } else {
        pic_reply_error(srv, req, 404, NULL, "unknown endpoint");
    }
    if (u) {
        evhttp_uri_free(u);
    }
}

static void
pic_on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void) fd;
    (void) what;
    pic_inflight_on_wake(arg);
}

/* Called by worker threads. */
static void
pic_notify(void *arg)
{
    pic_server *srv = arg;

    event_active(srv->wake, EV_READ, 0);
}

static void
pic_on_signal(evutil_socket_t sig, short events, void *arg)
{
    pic_server *srv = arg;

    (void) events;

    fprintf(stderr, "pic-engine[%s]: signal %d, shutting down\n", srv->opts->id, (int) sig);
    srv->stopping = 1;
    event_base_loopexit(srv->base, NULL);
}

/* Bound port of the evhttp socket, or -1. */
static int
pic_bound_port(struct evhttp_bound_socket *bs)
{
    struct sockaddr_storage ss;
    socklen_t               len = sizeof(ss);
    evutil_socket_t         fd = evhttp_bound_socket_get_fd(bs);

    if (getsockname(fd, (struct sockaddr *) &ss, &len) != 0) {
        return -1;
    }
    if (ss.ss_family == AF_INET) {
        return ntohs(((struct sockaddr_in *) &ss)->sin_port);
    }
    return ntohs(((struct sockaddr_in6 *) &ss)->sin6_port);
}

/* --- model --- */

/* Pool evictions reach the index (called on a worker thread). */
static void
pic_server_on_evict(void *user, const char *key, uint64_t len, size_t bytes)
{
    pic_server *srv = user;

    (void) len;
    (void) bytes;

    if (srv->reg != NULL) {
        pic_registry_post_evict(srv->reg, key);
    }
}

/* Width w of a class into *width and *recompute: a width, or none (its
 * segments recomputed) for PIC_SEAM_OFF / PIC_CALIB_RECOMPUTE. */
static void
pic_server_seam_set(int w, int *width, int *recompute)
{
    *recompute = w == PIC_SEAM_OFF || w == PIC_CALIB_RECOMPUTE;
    *width = *recompute ? 0 : w;
}

/* The seam widths: --seam, else the calibration file's choice (--calibration,
 * or the checkpoint's, pic_checkpoint_calibration_path, when present), else 8; the
 * documents' (PIC_SEG_FLAG_DOC) --seam-doc, else the same source's.  A class
 * may be recomputed instead (--seam off, or a calibration that met its bound
 * at no width).  A --calibration file that cannot be used stops the start;
 * the model directory's is then skipped with a warning.  0 or -1. */
static int
pic_server_choose_seam(pic_server *srv)
{
    const pic_server_opts *o = srv->opts;
    pic_plan_ctx          *p = &srv->plan;
    char                   err[512];
    int                    w, w_doc;

    p->seam.w = p->seam_doc.w = 8;
    srv->seam_source = srv->seam_doc_source = "default";
    if (o->seam_doc != -1) {
        pic_server_seam_set(o->seam_doc, &p->seam_doc.w, &p->recompute_doc);
        srv->seam_doc_source = "--seam-doc";
    }
    if (o->seam != -1) {
        pic_server_seam_set(o->seam, &p->seam.w, &p->recompute);
        srv->seam_source = "--seam";
        if (o->seam_doc == -1) {
            pic_server_seam_set(o->seam, &p->seam_doc.w, &p->recompute_doc);
            srv->seam_doc_source = "--seam";
        }
        return 0;
    }
    if (o->calibration != NULL) {
        snprintf(srv->calibration_path, sizeof(srv->calibration_path), "%s", o->calibration);
    } else {
        pic_checkpoint_calibration_path(o->model_dir, srv->calibration_path,
                                        sizeof(srv->calibration_path));
        if (access(srv->calibration_path, F_OK) != 0) {
            srv->calibration_path[0] = '\0';
            return 0;
        }
    }
    if (pic_calib_load(srv->calibration_path, srv->model, &w, &w_doc, &srv->calibration, err,
                       sizeof(err)) != 0) {
        fprintf(stderr, "pic-engine[%s]: %s%s\n", o->id, err,
                o->calibration != NULL ? "" : "; seam width 8");
        srv->calibration_path[0] = '\0';
        return o->calibration != NULL ? -1 : 0;
    }
    pic_server_seam_set(w, &p->seam.w, &p->recompute);
    srv->seam_source = "calibration";
    if (o->seam_doc == -1) {
        pic_server_seam_set(w_doc, &p->seam_doc.w, &p->recompute_doc);
        srv->seam_doc_source = "calibration";
    }
    return 0;
}

/* Cache mode, seam entries, the public pool and the keying context; 0 or -1. */
static int
pic_server_init_cache(pic_server *srv)
{
    const pic_server_opts *o = srv->opts;
    pic_error              perr;
    char                   err[256];
    XXH64_state_t         *h;
    uint32_t               w;

    memset(&srv->plan, 0, sizeof(srv->plan));
    srv->mode_name = o->cache_mode ? o->cache_mode : "exact";
    if (strcmp(srv->mode_name, "exact") == 0) {
        srv->plan.mode = PIC_MODE_PIC;          /* with the tree: exact first */
    } else if (pic_mode_parse(srv->mode_name, &srv->plan.mode) != 0) {
        fprintf(stderr, "pic-engine[%s]: unknown --cache-mode '%s'\n", o->id, o->cache_mode);
        return -1;
    }
    if (pic_server_choose_seam(srv) != 0) {
        return -1;
    }
    if (srv->plan.seam.w > PIC_ENTRY_MAX_W || srv->plan.seam_doc.w > PIC_ENTRY_MAX_W) {
        fprintf(stderr, "pic-engine[%s]: --seam %d or --seam-doc %d is above %d\n", o->id,
                srv->plan.seam.w, srv->plan.seam_doc.w, PIC_ENTRY_MAX_W);
        return -1;
    }
    if (o->entry_dtype == NULL || strcmp(o->entry_dtype, "bf16") == 0) {
        srv->plan.seam.dtype = PIC_DTYPE_BF16;
    } else if (strcmp(o->entry_dtype, "f32") == 0) {
        srv->plan.seam.dtype = PIC_DTYPE_F32;
    } else {
        fprintf(stderr, "pic-engine[%s]: --entry-dtype must be bf16 or f32\n", o->id);
        return -1;
    }
    srv->plan.seam_doc.dtype = srv->plan.seam.dtype;
    if (srv->calibration != NULL) {
        const cJSON *cd = cJSON_GetObjectItemCaseSensitive(srv->calibration, "entry_dtype");
        const char  *dn = srv->plan.seam.dtype == PIC_DTYPE_BF16 ? "bf16" : "f32";

        if (cJSON_IsString(cd) && strcmp(cd->valuestring, dn) != 0) {
            fprintf(stderr, "pic-engine[%s]: %s was measured with %s entries, these are %s\n",
                    o->id, srv->calibration_path, cd->valuestring, dn);
        }
    }
    /* keys change with the weights, the tokenizer, the seam widths and the
     * entry storage (DESIGN §4.1); the documents' width only where it is
     * another (so an engine of one width keys as before) */
    h = XXH64_createState();
    XXH64_reset(h, 0);
    XXH64_update(h, &srv->model->fingerprint, sizeof(srv->model->fingerprint));
    w = (uint32_t) srv->plan.seam.w;
    XXH64_update(h, &w, sizeof(w));
    w = (uint32_t) srv->plan.seam.dtype;
    XXH64_update(h, &w, sizeof(w));
    if (srv->plan.seam_doc.w != srv->plan.seam.w) {
        w = 0x646f6300u | (uint32_t) srv->plan.seam_doc.w;     /* "doc" + w */
        XXH64_update(h, &w, sizeof(w));
    }
    /* a recomputed class builds no entries: it keys apart from one that
     * serves them, so the two never count each other's segments as held */
    if (srv->plan.recompute || srv->plan.recompute_doc) {
        w = 0x6f666600u | (uint32_t) (srv->plan.recompute | srv->plan.recompute_doc << 1);
        XXH64_update(h, &w, sizeof(w));
    }
    snprintf(srv->key_fp, sizeof(srv->key_fp), "%016llx",
             (unsigned long long) XXH64_digest(h));
    XXH64_freeState(h);
    if (pic_key_ctx_init(&srv->keys, srv->key_fp, strlen(srv->key_fp), "", 0, &perr) != 0) {
        fprintf(stderr, "pic-engine[%s]: %s\n", o->id, perr.message);
        return -1;
    }
    srv->have_keys = 1;
    if (srv->plan.mode == PIC_MODE_FULL) {
        return 0;
    }
    srv->pool = pic_pool_init(o->cache_bytes, srv->model->fingerprint, err, sizeof(err));
    if (srv->pool == NULL) {
        fprintf(stderr, "pic-engine[%s]: %s\n", o->id, err);
        return -1;
    }
    pic_pool_set_evict_cb(srv->pool, pic_server_on_evict, srv);
    srv->plan.pool = srv->pool;
    if (strcmp(srv->mode_name, "exact") == 0 || srv->plan.mode == PIC_MODE_PREFIX) {
        pic_prefix_opts po = { .budget = o->cache_bytes,
                               .ckpt = { .block = o->prefix_block, .m = o->checkpoints,
                                         .max_tokens = srv->max_ctx } };

        srv->prefix = pic_prefix_cache_init(srv->model, &po, err, sizeof(err));
        if (srv->prefix == NULL) {
            fprintf(stderr, "pic-engine[%s]: prefix tree: %s\n", o->id, err);
            return -1;
        }
        pthread_mutex_init(&srv->door.mu, NULL);
        srv->door.model = srv->model;   /* client documents: built by the keeper */
        srv->plan.prefix = srv->prefix;
        srv->plan.door = &srv->door;
    }
    srv->budget.pool = srv->pool;
    srv->budget.tree = srv->prefix;
    srv->budget.budget = o->cache_bytes;
    srv->plan.budget = &srv->budget;
    if (o->cache_evict == NULL || strcmp(o->cache_evict, "cost") == 0) {
        /* the default (bench/checkpoints.py eviction: fewer tokens recomputed
         * than LRU on the agent + RAG trace); a token's recompute cost: the
         * model's FLOPs per prompt token */
        pic_cache_budget_set_cost(&srv->budget,
                                  pic_forward_flops(&srv->model->cfg, 64, 0,
                                                    PIC_LOGITS_NONE) / 64.0);
    } else if (strcmp(o->cache_evict, "lru") != 0) {
        fprintf(stderr, "pic-engine[%s]: unknown --cache-evict '%s' (lru or cost)\n", o->id,
                o->cache_evict);
        return -1;
    }
    return 0;
}

/* --script FILE: [{"when": S, "reply": T}, ...] into srv->script; 0 or -1. */
static int
pic_server_load_script(pic_server *srv)
{
    const char *path = srv->opts->script;
    FILE       *f = fopen(path, "rb");
    char       *buf = NULL;
    long        n = -1;
    cJSON      *doc, *r;

    if (f != NULL && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n < (1 << 24)
        && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t) n + 1)) != NULL
        && fread(buf, 1, (size_t) n, f) != (size_t) n) {
        n = -1;
    }
    if (f != NULL) {
        fclose(f);
    }
    doc = buf != NULL && n >= 0 ? cJSON_ParseWithLength(buf, (size_t) n) : NULL;
    free(buf);
    if (!cJSON_IsArray(doc)) {
        fprintf(stderr, "pic-engine[%s]: --script %s: not a readable JSON array\n",
                srv->opts->id, path);
        cJSON_Delete(doc);
        return -1;
    }
    cJSON_ArrayForEach(r, doc) {
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r, "when"))
            || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r, "reply"))) {
            fprintf(stderr, "pic-engine[%s]: --script %s: every rule needs string "
                    "\"when\" and \"reply\"\n", srv->opts->id, path);
            cJSON_Delete(doc);
            return -1;
        }
    }
    srv->script = doc;
    return 0;
}

/* Load the checkpoint and tokenizer, start the scheduler; 0 or -1. */
static int
pic_server_load_model(pic_server *srv)
{
    const pic_server_opts *o = srv->opts;
    pic_sched_opts         so;
    pic_error              perr;
    char                   err[512];
    int                    cores = (int) sysconf(_SC_NPROCESSORS_ONLN);

    pic_weights_format     wf;
    const pic_backend     *be = pic_backend_load(o->device, err, sizeof(err));

    if (be == NULL) {
        fprintf(stderr, "pic-engine[%s]: %s\n", o->id, err);
        return -1;
    }
    if (pic_weights_choose(o->weights, be->host, &wf, err, sizeof(err)) != 0) {
        if (o->weights != NULL && o->weights[0] != '\0') {
            fprintf(stderr, "pic-engine[%s]: %s\n", o->id, err);
            return -1;
        }
        fprintf(stderr, "pic-engine[%s]: %s; using auto\n", o->id, err);
        wf = PIC_WEIGHTS_AUTO;
    }
    srv->load.hold = o->load_hold;
    srv->model = pic_model_load_progress(o->model_dir, wf, &srv->load, err, sizeof(err));
    if (srv->model == NULL) {
        fprintf(stderr, "pic-engine[%s]: %s\n", o->id, err);
        return -1;
    }
    __atomic_store_n(&srv->load.phase, PIC_LOAD_SETUP, __ATOMIC_RELAXED);
    if (!be->host) {
        srv->dev_model = pic_model_to_backend(srv->model, be, err, sizeof(err));
        if (srv->dev_model == NULL) {
            fprintf(stderr, "pic-engine[%s]: %s\n", o->id, err);
            return -1;
        }
    }
    srv->tok = pic_checkpoint_tokenizer(o->model_dir, err, sizeof(err));
    if (srv->tok == NULL) {
        fprintf(stderr, "pic-engine[%s]: %s\n", o->id, err);
        return -1;
    }
    if (o->model_name) {
        snprintf(srv->model_name, sizeof(srv->model_name), "%s", o->model_name);
    } else {
        pic_model_dir_name(o->model_dir, srv->model_name, sizeof(srv->model_name));
    }
    if (o->template_name) {
        if (pic_template_dialect_parse(o->template_name, &srv->dialect) != 0) {
            fprintf(stderr, "pic-engine[%s]: unknown chat template '%s'\n", o->id,
                    o->template_name);
            return -1;
        }
    } else if (pic_checkpoint_dialect(o->model_dir, &srv->dialect, err, sizeof(err)) != 0) {
        fprintf(stderr, "pic-engine[%s]: %s\n", o->id, err);
        return -1;
    }
    if (pic_marker_init(&srv->marker, o->marker, o->marker ? strlen(o->marker) : 0,
                        &perr) != 0) {
        fprintf(stderr, "pic-engine[%s]: --marker: %s\n", o->id, perr.message);
        return -1;
    }
    srv->max_ctx = o->ctx;
    if (srv->max_ctx <= 0) {
        int mp = srv->model->cfg.max_position;
        srv->max_ctx = mp > 0 && mp < 32768 ? mp : 32768;
    }
    if (pic_server_init_cache(srv) != 0) {
        return -1;
    }
    if (o->script != NULL && pic_server_load_script(srv) != 0) {
        return -1;
    }

    memset(&so, 0, sizeof(so));
    so.model = srv->dev_model != NULL ? srv->dev_model : srv->model;
    so.be = be;
    so.tok = srv->tok;
    so.workers = o->workers > 0 ? o->workers : 1;
    so.threads = o->threads > 0 ? o->threads : (cores > so.workers ? cores / so.workers : 1);
    so.max_batch = o->max_batch > 0 ? o->max_batch : 8;
    so.max_queue = o->max_queue >= 0 ? o->max_queue : 64;
    so.max_ctx = srv->max_ctx;
    srv->plan.max_ctx = srv->max_ctx;
    so.notify = pic_notify;
    so.notify_arg = srv;
    so.plan_ctx = srv->pool ? &srv->plan : NULL;
    so.no_batch_decode = o->no_batch_decode;
    srv->sched = pic_sched_init(&so, err, sizeof(err));
    if (srv->sched == NULL) {
        fprintf(stderr, "pic-engine[%s]: %s\n", o->id, err);
        return -1;
    }
    char ws[16], wd[16];

    snprintf(ws, sizeof(ws), srv->plan.recompute ? "off" : "%d", srv->plan.seam.w);
    snprintf(wd, sizeof(wd), srv->plan.recompute_doc ? "off" : "%d", srv->plan.seam_doc.w);
    fprintf(stderr, "pic-engine[%s]: model %s (%s, template %s), context %d, "
            "%d worker(s) x %d thread(s), batch %d, queue %d, cache %s (w=%s from %s, "
            "documents w=%s from %s, %s), device %s\n", o->id,
            srv->model_name, srv->model->cfg.model_type,
            pic_template_dialect_name(srv->dialect), srv->max_ctx, so.workers, so.threads,
            so.max_batch, so.max_queue, srv->mode_name, ws, srv->seam_source,
            wd, srv->seam_doc_source,
            srv->plan.seam.dtype == PIC_DTYPE_BF16 ? "bf16" : "f32", be->name);
    return 0;
}

/* --- run --- */

/* Ready to serve (model loaded or none asked for): register in Redis, write
 * the port file; 0 or -1. */
static int
pic_server_ready(pic_server *srv)
{
    const pic_server_opts *opts = srv->opts;

    if (opts->redis) {
        pic_registry_opts ro;
        char              err[256];

        memset(&ro, 0, sizeof(ro));
        ro.redis = opts->redis;
        ro.user = opts->redis_user;
        ro.password_file = opts->redis_password_file;
        ro.id = opts->id;
        ro.addr = srv->addr;
        ro.version = PIC_ENGINE_VERSION;
        ro.model_fp = srv->model ? strtoull(srv->key_fp, NULL, 16) : 0;
        ro.heartbeat_ms = opts->heartbeat_ms;
        ro.ttl_s = opts->registry_ttl_s;
        ro.load = pic_server_load;
        ro.load_arg = srv;
        srv->reg = pic_registry_init(srv->base, &ro, err, sizeof(err));
        if (srv->reg == NULL) {
            fprintf(stderr, "pic-engine[%s]: %s\n", opts->id, err);
            return -1;
        }
        srv->plan.reg = srv->reg;   /* before any request: workers read it */
    }

    if (opts->port_file) {
        FILE *f = fopen(opts->port_file, "w");
        if (f == NULL || fprintf(f, "%d\n", srv->port) < 0 || fclose(f) != 0) {
            fprintf(stderr, "%s: cannot write %s\n", __func__, opts->port_file);
            return -1;
        }
    }
    fprintf(stderr, "pic-engine[%s]: ready on %s://%s:%d\n", opts->id,
            srv->tls_server ? "https" : "http", opts->host, srv->port);
    return 0;
}

/* The loader thread: the model, then the loop's wake-up. */
static void *
pic_server_loader(void *arg)
{
    pic_server *srv = arg;

    srv->load_rc = pic_server_load_model(srv);
    event_active(srv->loaded, EV_READ, 0);
    return NULL;
}

/* The loader finished (loop thread): serve, or stop on failure. */
static void
pic_on_loaded(evutil_socket_t fd, short what, void *arg)
{
    pic_server *srv = arg;

    (void) fd;
    (void) what;
    pthread_join(srv->loader, NULL);
    srv->loader_started = 0;
    srv->loading = 0;
    if (srv->load_rc != 0 || pic_server_ready(srv) != 0) {
        srv->failed = 1;
        event_base_loopexit(srv->base, NULL);
    }
}

/* With --tls-cert/--tls-key: the listener serves TLS (clients verified
 * against --tls-client-ca when given) and the transport reaches peers over
 * TLS with the same certificate; 0 or -1 (said on stderr). */
static int
pic_server_init_tls(pic_server *srv)
{
    const pic_server_opts *o = srv->opts;
    char                   err[320];

    if (o->tls_cert == NULL && o->tls_key == NULL) {
        if (o->tls_client_ca != NULL) {
            fprintf(stderr, "pic-engine[%s]: --tls-client-ca needs --tls-cert and "
                    "--tls-key\n", o->id);
            return -1;
        }
        return 0;
    }
    srv->tls_server = pic_tls_server_ctx(o->tls_cert, o->tls_key, o->tls_client_ca, err,
                                         sizeof(err));
    if (srv->tls_server != NULL) {
        srv->tls_client = pic_tls_client_ctx(o->tls_cert, o->tls_key, o->tls_client_ca,
                                             err, sizeof(err));
    }
    if (srv->tls_server == NULL || srv->tls_client == NULL || srv->transport == NULL) {
        fprintf(stderr, "pic-engine[%s]: %s\n", o->id,
                srv->transport ? err : "cannot create the transport");
        return -1;
    }
    evhttp_set_bevcb(srv->http, pic_tls_accept_bev, srv->tls_server);
    srv->transport->tls = srv->tls_client;
    if (o->tls_client_ca == NULL) {
        fprintf(stderr, "pic-engine[%s]: TLS without --tls-client-ca: any client is "
                "accepted and peers' certificates are not checked\n", o->id);
    }
    return 0;
}

int
pic_server_run(const pic_server_opts *opts)
{
    pic_server                  srv;
    struct evhttp_bound_socket *bs;
    struct event               *sigint = NULL, *sigterm = NULL;
    int                         rc = 1;

    memset(&srv, 0, sizeof(srv));
    srv.opts = opts;
    srv.started = time(NULL);
    signal(SIGPIPE, SIG_IGN);

    if (evthread_use_pthreads() != 0) {
        fprintf(stderr, "%s: libevent has no pthreads support\n", __func__);
        return 1;
    }
    srv.base = event_base_new();
    srv.http = srv.base ? evhttp_new(srv.base) : NULL;
    srv.wake = srv.base ? event_new(srv.base, -1, 0, pic_on_wake, &srv) : NULL;
    if (srv.http == NULL || srv.wake == NULL) {
        fprintf(stderr, "%s: cannot create the event loop\n", __func__);
        goto done;
    }
    evhttp_set_allowed_methods(srv.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD);
    /* bodies up to 4x the limit are read and answered with a JSON 413; larger
     * ones get evhttp's own 413 */
    evhttp_set_max_body_size(srv.http, (ev_ssize_t) (opts->max_body * 4 + 65536));
    evhttp_set_gencb(srv.http, pic_dispatch, &srv);

    if (opts->pool_secret_file != NULL && opts->insecure_pool) {
        fprintf(stderr, "pic-engine[%s]: --insecure-pool contradicts --pool-secret-file\n",
                opts->id);
        goto done;
    }
    if (opts->pool_secret_file != NULL) {
        char err[256];

        if (pic_auth_load(&srv.auth, opts->pool_secret_file, err, sizeof(err)) != 0) {
            fprintf(stderr, "pic-engine[%s]: %s\n", opts->id, err);
            goto done;
        }
    } else if (opts->insecure_pool) {
        fprintf(stderr, "pic-engine[%s]: --insecure-pool: peer endpoints and plans "
                "are unauthenticated (trusted network only)\n", opts->id);
    } else {
        /* secure by default (DESIGN 4.5): no credential, no pool */
        fprintf(stderr, "pic-engine[%s]: no --pool-secret-file: peer endpoints and plans "
                "are refused (standalone OpenAI serving only; --insecure-pool opens "
                "them on a trusted network)\n", opts->id);
    }
    srv.transport = pic_transport_tcp_new(srv.base, &srv.auth, opts->max_frame_bytes);
    if (pic_server_init_tls(&srv) != 0) {
        goto done;
    }

    bs = evhttp_bind_socket_with_handle(srv.http, opts->host, (ev_uint16_t) opts->port);
    if (bs == NULL) {
        fprintf(stderr, "%s: cannot listen on %s:%d: %s\n", __func__, opts->host,
                opts->port, strerror(errno));
        goto done;
    }
    srv.port = pic_bound_port(bs);
    if (opts->advertise) {
        snprintf(srv.addr, sizeof(srv.addr), "%s", opts->advertise);
    } else {
        snprintf(srv.addr, sizeof(srv.addr), "%s:%d", opts->host, srv.port);
    }

    sigint = evsignal_new(srv.base, SIGINT, pic_on_signal, &srv);
    sigterm = evsignal_new(srv.base, SIGTERM, pic_on_signal, &srv);
    event_add(sigint, NULL);
    event_add(sigterm, NULL);

    fprintf(stderr, "pic-engine[%s]: listening on %s://%s:%d\n", opts->id,
            srv.tls_server ? "https" : "http", opts->host, srv.port);
    if (opts->model_dir != NULL) {
        srv.loaded = event_new(srv.base, -1, 0, pic_on_loaded, &srv);
        srv.loading = 1;
        if (srv.loaded == NULL
            || pthread_create(&srv.loader, NULL, pic_server_loader, &srv) != 0) {
            fprintf(stderr, "%s: cannot start the model loader\n", __func__);
            srv.loading = 0;
            goto done;
        }
        srv.loader_started = 1;
    } else if (pic_server_ready(&srv) != 0) {
        goto done;
    }
    event_base_dispatch(srv.base);
    rc = srv.failed;

done:
    if (srv.loader_started) {
        /* stopped while loading: the load fails at its next tensor */
        __atomic_store_n(&srv.load.cancel, 1, __ATOMIC_RELAXED);
        pthread_join(srv.loader, NULL);
        srv.loading = 0;
    }
    srv.stopping = 1;
    pic_sched_free(srv.sched);          /* every job ends (cancelled) */
    srv.sched = NULL;
    pic_inflight_shutdown(&srv);
    if (srv.transport) {
        srv.transport->ops->free(srv.transport);
    }
    pic_registry_free(srv.reg);
    pic_plan_door_free(&srv.door);
    pic_pool_free(srv.pool);
    pic_prefix_cache_free(srv.prefix);
    if (srv.have_keys) {
        pic_key_ctx_free(&srv.keys);
    }
    cJSON_Delete(srv.calibration);
    if (sigint) {
        event_free(sigint);
    }
    if (sigterm) {
        event_free(sigterm);
    }
    if (srv.http) {
        evhttp_free(srv.http);
    }
    if (srv.wake) {
        event_free(srv.wake);
    }
    if (srv.loaded) {
        event_free(srv.loaded);
    }
    if (srv.base) {
        event_base_free(srv.base);
    }
    pic_tokenizer_free(srv.tok);
    pic_model_free(srv.dev_model);
    pic_model_free(srv.model);
    pic_auth_clear(&srv.auth);
    pic_tls_ctx_free(srv.tls_server);
    pic_tls_ctx_free(srv.tls_client);
    cJSON_Delete(srv.script);
    return rc;
}
