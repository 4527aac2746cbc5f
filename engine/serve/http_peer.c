/*
 * http_peer.c — engine-to-engine: the endpoints a peer calls (segment pull,
 * remote prefill) and the combine node's side that calls them for a
 * gateway plan (DESIGN.md §3.5, items 3–5 of the server issue).
 *
 * Combine node.  For every segment of the plan that can come from a pool
 * and is not in the local one: pull it from a holder (the first that is
 * not this engine), else ask its assigned worker to prefill it (one
 * request per worker with all its segments, in prompt order, so the
 * worker streams each entry as soon as it is built).  Those segments are
 * marked PENDING before the job is submitted; frames land in the segment
 * (ARRIVED) and wake the workers; an error, a deadline (--peer-timeout-ms)
 * or a segment without a record marks it FAILED, and the combine node
 * computes it itself (plan_exec.h): the request completes whatever the
 * peers do, and /status counts the failures.  One request opens at most
 * PIC_REMOTE_OPS_MAX connections (pulls + prefills); segments past the cap
 * are computed here, and nothing is dispatched for a request the scheduler
 * would refuse (429).  Engine ids in a plan are
 * "host:port" addresses (what the gateway uses); an id that is not one,
 * or names this engine, is not contacted.
 *
 * Holder and worker.  GET /v1/pic/segments/{key}?bytes=N&fingerprint=F
 * answers the pooled entry's frame (404 when not held, or held for another
 * key fingerprint).  POST /v1/pic/prefill takes
 *   {"fingerprint": F, "segments": [{"key", "bytes", "kind", "text", "doc"}]}
 * ("doc": true for a client-delimited document, built with the document
 * seam; optional) and runs as a scheduler job (build_only) that frames
 * each segment's entry into a record as soon as it is built (transport.h).  The entries
 * stay in the worker's pool and are registered in Redis: the worker now
 * holds them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <sys/queue.h>

#include <event2/keyvalq_struct.h>

#include <cjson/cJSON.h>

#include "frame.h"
#include "pic_time.h"
#include "server_impl.h"

#define PIC_REMOTE_OPS_MAX 16     /* connections one request opens to peers */

typedef struct pic_fetch {
    pic_oai_ctx      *c;
    pic_transport_op *op;
    struct pic_fetch *next;
    char              peer[PIC_ENGINE_ID_MAX + 1];
    int               n;
    int               idx[];        /* (n) plan segment of each position */
} pic_fetch;

/* --- the log of the peer endpoints --- */

void
pic_peer_log(pic_server *srv, struct evhttp_request *req, const char *fmt, ...)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    char                     *addr = NULL;
    ev_uint16_t               port = 0;
    char                      what[256];
    va_list                   ap;

    if (conn != NULL) {
        evhttp_connection_get_peer(conn, &addr, &port);
    }
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    fprintf(stderr, "pic-engine[%s]: peer %s:%u %s %.80s: %s\n", srv->opts->id,
            addr ? addr : "?", (unsigned) port,
            evhttp_request_get_command(req) == EVHTTP_REQ_POST ? "POST" : "GET",
            evhttp_request_get_uri(req), what);
}

/* --- the pool credential (pic_auth.h) --- */

/* The X-PIC-Auth tag of req checked against label, head, body. */
static int
pic_auth_header_ok(pic_server *srv, struct evhttp_request *req, const char *label,
                   const char *head, const void *body, size_t len)
{
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    struct evkeyval  *kv;
    const char       *tag = NULL;
    int               n = 0;

    TAILQ_FOREACH(kv, h, next) {
        if (evutil_ascii_strcasecmp(kv->key, PIC_AUTH_HEADER) == 0) {
            tag = kv->value;
            n++;
        }
    }
    return n == 1 && pic_auth_check_hex(&srv->auth, label, head, strlen(head), body, len,
                                        tag, strlen(tag));
}

int
pic_peer_authorized(pic_server *srv, struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t           len = evbuffer_get_length(in);
    const char      *body = len ? (const char *) evbuffer_pullup(in, -1) : "";
    const char      *uri = evhttp_request_get_uri(req);
    char            *head;
    int              ok;

    if (srv->auth.len == 0) {
        if (srv->opts->insecure_pool) {
            return 1;
        }
        pic_error err;

        srv->hs.auth_failures++;
        pic_error_set(&err, 403, "permission_error", NULL, "pool_auth_failed",
                      "engine-internal endpoint: this engine has no pool credential "
                      "(--pool-secret-file), so its pool is closed");
        pic_reply_pic_error(srv, req, &err);
        return 0;
    }
    head = malloc(strlen(uri) + 8);
    if (head == NULL) {
        pic_reply_error(srv, req, 500, NULL, "out of memory");
        return 0;
    }
    sprintf(head, "%s %s", evhttp_request_get_command(req) == EVHTTP_REQ_POST ? "POST" : "GET",
            uri);
    ok = len <= srv->opts->max_body
         && pic_auth_header_ok(srv, req, "pic-peer-v1", head, body, len);
    free(head);
    if (!ok) {
        pic_error err;

        srv->hs.auth_failures++;
        pic_error_set(&err, 403, "permission_error", NULL, "pool_auth_failed",
                      "engine-internal endpoint: a valid pool credential (X-PIC-Auth) "
                      "is required");
        pic_reply_pic_error(srv, req, &err);
        return 0;
    }
    return 1;
}

int
pic_plan_authorized(pic_server *srv, struct evhttp_request *req, const char *body,
                    size_t len)
{
    const char *t;

    if (srv->auth.len == 0) {
        return srv->opts->insecure_pool;
    }
    t = evhttp_find_header(evhttp_request_get_input_headers(req), "X-PIC-Timeout-Ms");
    if (pic_auth_header_ok(srv, req, "pic-plan-v1", t ? t : "", body, len)) {
        return 1;
    }
    srv->hs.auth_failures++;
    return 0;
}

/* --- holder: segment pull --- */

static void
pic_free_ref(const void *data, size_t len, void *extra)
{
    (void) len;
    (void) extra;
    free((void *) data);
}

int
pic_peer_segment(pic_server *srv, struct evhttp_request *req, const char *key)
{
    struct evkeyvalq q;
    const char      *uri = evhttp_request_get_uri(req), *qs = strchr(uri, '?');
    const char      *bytes, *fp;
    unsigned long long len;
    char            *end;
    pic_entry       *e;
    void            *frame;
    size_t           flen;
    struct evbuffer *b;

    if (srv->pool == NULL) {
        pic_reply_error(srv, req, 404, NULL, "this engine keeps no entries");
        return 404;
    }
    memset(&q, 0, sizeof(q));
    if (qs == NULL || evhttp_parse_query_str(qs + 1, &q) != 0
        || (bytes = evhttp_find_header(&q, "bytes")) == NULL
        || strlen(key) != PIC_KEY_HEX) {
        evhttp_clear_headers(&q);
        pic_reply_error(srv, req, 400, NULL, "want /v1/pic/segments/{32 hex}?bytes=N");
        return 400;
    }
    len = strtoull(bytes, &end, 10);
    fp = evhttp_find_header(&q, "fingerprint");
    if (*end != '\0' || len == 0 || (fp != NULL && strcmp(fp, srv->key_fp) != 0)) {
        evhttp_clear_headers(&q);
        pic_reply_error(srv, req, 404, NULL, "not held (length or key fingerprint differ)");
        return 404;
    }
    evhttp_clear_headers(&q);
    e = pic_pool_get(srv->pool, key, len);
    if (e == NULL) {
        pic_reply_error(srv, req, 404, NULL, "segment not held");
        return 404;
    }
    frame = pic_frame_from_entry(e, key, len, &flen);
    pic_entry_unref(e);
    b = evbuffer_new();
    if (frame == NULL || b == NULL) {
        free(frame);
        if (b) {
            evbuffer_free(b);
        }
        pic_reply_error(srv, req, 500, NULL, "cannot frame the entry");
        return 500;
    }
    evbuffer_add_reference(b, frame, flen, pic_free_ref, NULL);
    if (srv->auth.len > 0) {
        unsigned char tag[PIC_AUTH_TAG];

        if (pic_auth_mac(&srv->auth, "pic-frame-v1", NULL, 0, frame, flen, tag) != 0) {
            evbuffer_free(b);
            pic_reply_error(srv, req, 500, NULL, "cannot sign the frame");
            return 500;
        }
        evbuffer_add(b, tag, sizeof(tag));
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "application/x-pic-frame");
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
    srv->hs.segments_served++;
    return 200;
}

/* --- worker: remote prefill --- */

int
pic_peer_prefill(pic_server *srv, struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t           len = evbuffer_get_length(in), total = 0;
    const char      *body = (const char *) evbuffer_pullup(in, -1);
    cJSON           *doc = NULL;
    const cJSON     *segs, *s, *fp, *scope;
    pic_key_ctx      kc = { NULL };
    pic_key          want;
    pic_error        perr;
    pic_plan_job    *pj = NULL;
    pic_oai_ctx     *c;
    char            *text = NULL;
    int              n, i = 0;
    const char      *bad = NULL;

    if (srv->pool == NULL || srv->sched == NULL) {
        pic_reply_error(srv, req, 503, NULL, "this engine does not build entries");
        return 503;
    }
    if (len > srv->opts->max_body) {
        pic_reply_error(srv, req, 413, NULL, "prefill request too large");
        return 413;
    }
    doc = cJSON_ParseWithLength(body ? body : "", len);
    segs = cJSON_GetObjectItemCaseSensitive(doc, "segments");
    fp = cJSON_GetObjectItemCaseSensitive(doc, "fingerprint");
    scope = cJSON_GetObjectItemCaseSensitive(doc, "scope");
    n = cJSON_GetArraySize(segs);
    if (!cJSON_IsObject(doc) || !cJSON_IsArray(segs) || n < 1 || n > PIC_PLAN_SEGS_MAX
        || !cJSON_IsString(fp) || (scope != NULL && !cJSON_IsString(scope))) {
        bad = "want {\"fingerprint\", \"scope\", \"segments\": [{\"key\", \"bytes\", "
              "\"kind\", \"text\"}]}";
        goto fail;
    }
    if (strcmp(fp->valuestring, srv->key_fp) != 0) {
        cJSON_Delete(doc);
        pic_reply_error(srv, req, 409, NULL, "another key fingerprint (model, seam or dtype)");
        return 409;
    }
    /* keys are recomputed from the text: a peer names no entry it did not send */
    if (pic_key_ctx_init(&kc, srv->key_fp, strlen(srv->key_fp),
                         scope ? scope->valuestring : "", scope ? strlen(scope->valuestring) : 0,
                         &perr) != 0) {
        bad = "'scope' is too long";
        goto fail;
    }
    pj = pic_plan_job_new(n);
    if (pj == NULL) {
        bad = "out of memory";
        goto fail;
    }
    cJSON_ArrayForEach(s, segs) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(s, "key");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(s, "bytes");
        const cJSON *kd = cJSON_GetObjectItemCaseSensitive(s, "kind");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "text");
        const cJSON *dc = cJSON_GetObjectItemCaseSensitive(s, "doc");
        pic_seg_kind kind;

        if (!cJSON_IsString(k) || strlen(k->valuestring) != PIC_KEY_HEX || !cJSON_IsString(t)
            || !cJSON_IsNumber(b) || !cJSON_IsString(kd)
            || pic_seg_kind_parse(kd->valuestring, &kind) != 0 || kind == PIC_SEG_DYNAMIC
            || b->valuedouble != (double) strlen(t->valuestring) || strlen(t->valuestring) == 0
            || (dc != NULL && !cJSON_IsBool(dc))) {
            bad = "a segment needs key (32 hex), kind (pic|prefix), text and its byte length "
                  "(doc, when given, a boolean)";
            goto fail;
        }
        pic_key_compute(&kc, t->valuestring, strlen(t->valuestring), &want);
        if (strcmp(want.hex, k->valuestring) != 0) {
            bad = "a segment's key is not the key of its text under this fingerprint and scope";
            goto fail;
        }
        pj->segs[i].offset = total;
        pj->segs[i].len = strlen(t->valuestring);
        pj->segs[i].kind = kind;
        pj->segs[i].flags = cJSON_IsTrue(dc) ? PIC_SEG_FLAG_DOC : 0;
        snprintf(pj->segs[i].key, sizeof(pj->segs[i].key), "%s", k->valuestring);
        total += pj->segs[i].len;
        i++;
    }
    text = malloc(total + 1);
    if (text == NULL) {
        bad = "out of memory";
        goto fail;
    }
    i = 0;
    cJSON_ArrayForEach(s, segs) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "text");
        memcpy(text + pj->segs[i].offset, t->valuestring, pj->segs[i].len);
        i++;
    }
    text[total] = '\0';
    cJSON_Delete(doc);
    doc = NULL;
    pic_key_ctx_free(&kc);

    c = pic_oai_ctx_new(srv, req, PIC_REQ_COMPLETION);
    if (c == NULL) {
        free(text);
        pic_plan_job_free(pj);
        return 500;
    }
    c->binary = 1;
    c->job->plan = pj;
    c->job->build_only = 1;
    c->job->text = text;
    c->job->text_len = total;
    c->job->deadline_ns = srv->opts->request_timeout_ms > 0
                          ? pic_now_ns() + srv->opts->request_timeout_ms * 1000000 : 0;
    pic_peer_log(srv, req, "%d segment(s), %zu bytes of text: building", n, total);
    if (pic_oai_start(srv, c) != 0) {
        return 429;         /* answered 429 or 503: the log says which */
    }
    srv->hs.prefills_served++;
    return 0;

fail:
    if (kc.base != NULL) {
        pic_key_ctx_free(&kc);
    }
    cJSON_Delete(doc);
    pic_plan_job_free(pj);
    free(text);
    pic_reply_error(srv, req, strcmp(bad, "out of memory") ? 400 : 500, NULL, bad);
    return strcmp(bad, "out of memory") ? 400 : 500;
}

/* --- combine node: fetching from peers --- */

static void
pic_fetch_unlink(pic_fetch *f)
{
    pic_fetch **pp = (pic_fetch **) &f->c->fetches;

    while (*pp != NULL && *pp != f) {
        pp = &(*pp)->next;
    }
    if (*pp == f) {
        *pp = f->next;
    }
}

static void
pic_fetch_on_frame(void *arg, int pos, void *buf, size_t len)
{
    pic_fetch    *f = arg;
    pic_server   *srv = f->c->srv;
    pic_plan_job *pj = f->c->job->plan;
    pic_job_segment *g;

    if (pos < 0 || pos >= f->n || pj == NULL) {
        free(buf);
        return;
    }
    g = &pj->segs[f->idx[pos]];
    if (__atomic_load_n(&g->remote, __ATOMIC_ACQUIRE) != PIC_REMOTE_PENDING) {
        free(buf);
        return;
    }
    g->frame = buf;
    g->frame_len = len;
    __atomic_store_n(&g->remote, PIC_REMOTE_ARRIVED, __ATOMIC_RELEASE);
    srv->hs.peer_frames++;
    pic_sched_wake(srv->sched);
}

static void
pic_fetch_on_done(void *arg, int ok, const char *why)
{
    pic_fetch    *f = arg;
    pic_server   *srv = f->c->srv;
    pic_plan_job *pj = f->c->job->plan;
    int           missing = 0;

    for (int i = 0; pj != NULL && i < f->n; i++) {
        pic_job_segment *g = &pj->segs[f->idx[i]];
        int       want = PIC_REMOTE_PENDING;

        if (__atomic_compare_exchange_n(&g->remote, &want, PIC_REMOTE_FAILED, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            missing++;
        }
    }
    if (!ok || missing > 0) {
        srv->hs.peer_failures++;
        fprintf(stderr, "pic-engine[%s]: peer %s: %s; computing %d segment(s) here\n",
                srv->opts->id, f->peer, ok ? "segments missing" : why, missing);
    }
    f->op = NULL;               /* the transport lets go of it after this */
    pic_fetch_unlink(f);
    free(f);
    pic_sched_wake(srv->sched);
}

/* 1 if engine id names this engine. */
static int
pic_remote_is_self(pic_server *srv, const char *id)
{
    return strcmp(id, srv->opts->id) == 0 || strcmp(id, srv->addr) == 0;
}

static pic_fetch *
pic_fetch_new(pic_oai_ctx *c, const char *peer, int n)
{
    pic_fetch *f = calloc(1, sizeof(*f) + (size_t) n * sizeof(int));

    if (f != NULL) {
        f->c = c;
        snprintf(f->peer, sizeof(f->peer), "%s", peer);
    }
    return f;
}

void
pic_remote_dispatch(pic_server *srv, pic_oai_ctx *c, const pic_plan *plan)
{
    pic_plan_job *pj = c->job->plan;
    const char   *text = c->job->text;
    int           timeout = srv->opts->peer_timeout_ms > 0 ? srv->opts->peer_timeout_ms
                                                           : 30000;
    int          *worker_of, ops = 0;

    if (srv->transport == NULL || pj == NULL || (size_t) pj->n_segs != plan->n_segs
        || srv->plan.mode == PIC_MODE_FULL) {
        return;
    }
    worker_of = malloc(plan->n_segs * sizeof(int));
    if (worker_of == NULL) {
        return;
    }
    for (size_t i = 0; i < plan->n_segs; i++) {
        const pic_plan_segment *ps = &plan->segs[i];
        pic_job_segment    *g = &pj->segs[i];
        const char         *holder = NULL;

        worker_of[i] = -1;
        if (ps->kind == PIC_SEG_DYNAMIC || (ps->kind == PIC_SEG_PREFIX && i != 0)
            || (srv->plan.mode == PIC_MODE_PREFIX && ps->kind != PIC_SEG_PREFIX)
            || pic_pool_contains(srv->pool, g->key, g->len)) {
            continue;
        }
        for (int h = 0; h < ps->n_holders; h++) {
            const char *id = plan->engines[ps->holders[h]].id;
            if (!pic_remote_is_self(srv, id)) {
                holder = id;
                break;
            }
        }
        if (holder != NULL && ops >= PIC_REMOTE_OPS_MAX) {
            continue;           /* over the cap: computed here */
        }
        if (holder != NULL) {
            pic_fetch *f = pic_fetch_new(c, holder, 1);
            if (f == NULL) {
                continue;
            }
            f->n = 1;
            f->idx[0] = (int) i;
            g->remote_cached = 1;
            __atomic_store_n(&g->remote, PIC_REMOTE_PENDING, __ATOMIC_RELEASE);
            f->next = c->fetches;
            c->fetches = f;
            srv->hs.peer_fetches++;
            ops++;
            f->op = srv->transport->ops->pull(srv->transport, holder, g->key, g->len,
                                              srv->key_fp, timeout, pic_fetch_on_frame,
                                              pic_fetch_on_done, f);
            if (f->op == NULL) {
                __atomic_store_n(&g->remote, PIC_REMOTE_NONE, __ATOMIC_RELEASE);
                pic_fetch_unlink(f);
                free(f);
                srv->hs.peer_failures++;
            }
            continue;
        }
        if (ps->worker >= 0 && !pic_remote_is_self(srv, plan->engines[ps->worker].id)) {
            worker_of[i] = ps->worker;
        }
    }
    /* one remote prefill per worker, its segments in prompt order */
    for (size_t w = 0; w < plan->n_engines; w++) {
        pic_remote_segment *ts;
        pic_fetch         *f;
        char             **texts;
        int                n = 0;

        for (size_t i = 0; i < plan->n_segs; i++) {
            n += worker_of[i] == (int) w;
        }
        if (n == 0 || ops >= PIC_REMOTE_OPS_MAX) {
            continue;
        }
        ops++;
        f = pic_fetch_new(c, plan->engines[w].id, n);
        ts = calloc((size_t) n, sizeof(*ts));
        texts = calloc((size_t) n, sizeof(char *));
        if (f == NULL || ts == NULL || texts == NULL) {
            free(f);
            free(ts);
            free(texts);
            continue;
        }
        for (size_t i = 0; i < plan->n_segs; i++) {
            pic_job_segment *g = &pj->segs[i];
            if (worker_of[i] != (int) w) {
                continue;
            }
            texts[f->n] = strndup(text + g->offset, g->len);
            ts[f->n].index = (int) i;
            ts[f->n].key = g->key;
            ts[f->n].bytes = g->len;
            ts[f->n].kind = pic_seg_kind_name(g->kind);
            ts[f->n].doc = (g->flags & PIC_SEG_FLAG_DOC) != 0;
            ts[f->n].text = texts[f->n] ? texts[f->n] : "";
            f->idx[f->n++] = (int) i;
        }
        for (int k = 0; k < f->n; k++) {
            __atomic_store_n(&pj->segs[f->idx[k]].remote, PIC_REMOTE_PENDING,
                             __ATOMIC_RELEASE);
        }
        f->next = c->fetches;
        c->fetches = f;
        srv->hs.peer_fetches++;
        f->op = srv->transport->ops->prefill(srv->transport, f->peer, ts, f->n, srv->key_fp,
                                             plan->scope, timeout, pic_fetch_on_frame,
                                             pic_fetch_on_done, f);
        if (f->op == NULL) {
            for (int k = 0; k < f->n; k++) {
                __atomic_store_n(&pj->segs[f->idx[k]].remote, PIC_REMOTE_NONE,
                                 __ATOMIC_RELEASE);
            }
            pic_fetch_unlink(f);
            free(f);
            srv->hs.peer_failures++;
        }
        for (int k = 0; k < n; k++) {
            free(texts[k]);
        }
        free(texts);
        free(ts);
    }
    free(worker_of);
}

void
pic_remote_cancel(pic_oai_ctx *c)
{
    pic_fetch *f = c->fetches, *next;

    for (; f != NULL; f = next) {
        next = f->next;
        if (f->op != NULL) {
            c->srv->transport->ops->cancel(f->op);
        }
        free(f);
    }
    c->fetches = NULL;
}
