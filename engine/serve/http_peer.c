/*
 * http_peer.c — engine-to-engine: the endpoints a peer calls (segment pull,
 * remote prefill; the combine node's side that calls them is remote.c).
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
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <sys/queue.h>

#include <event2/keyvalq_struct.h>

#include <cjson/cJSON.h>

#include "frame.h"
#include "pic_time.h"
#include "http_peer.h"
#include "inflight.h"
#include "reply.h"



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

/* Records (whole: the scheduler appends each at once) into b, each frame
 * followed by its pool-credential tag and its length field counting it. */
static void
pic_peer_sign_records(pic_server *srv, struct evbuffer *b, const unsigned char *p, size_t n)
{
    while (n >= PIC_RECORD_HDR) {
        unsigned char hdr[PIC_RECORD_HDR], tag[PIC_AUTH_TAG];
        uint64_t      fl;

        memcpy(hdr, p, PIC_RECORD_HDR);
        memcpy(&fl, hdr + 8, 8);                /* little-endian hosts */
        if (fl > n - PIC_RECORD_HDR) {
            break;
        }
        if (fl > 0 && pic_auth_mac(&srv->auth, "pic-frame-v1", NULL, 0, p + PIC_RECORD_HDR,
                                   fl, tag) != 0) {
            fl = 0;                             /* unsigned: the peer computes it */
            memset(hdr + 8, 0, 8);
        } else if (fl > 0) {
            uint64_t tl = fl + PIC_AUTH_TAG;
            memcpy(hdr + 8, &tl, 8);
        }
        evbuffer_add(b, hdr, PIC_RECORD_HDR);
        if (fl > 0) {
            evbuffer_add(b, p + PIC_RECORD_HDR, fl);
            evbuffer_add(b, tag, PIC_AUTH_TAG);
        }
        memcpy(&fl, p + 8, 8);
        p += PIC_RECORD_HDR + fl;
        n -= PIC_RECORD_HDR + fl;
    }
}

/* A peer's prefill: records out as they come, then the end. */
static void
pic_peer_answer(pic_inflight *c, const pic_job_update *u)
{
    pic_server *srv = c->srv;

    if (c->gone) {
        if (u->done) {
            fprintf(stderr, "pic-engine[%s]: peer prefill %s: the combine node went away "
                    "after %zu bytes of records, %.1f ms\n", srv->opts->id, c->id,
                    c->binary_sent, (double) (pic_now_ns() - c->t0_ns) * 1e-6);
            pic_inflight_drop_http(c);
        }
        return;
    }
    if (u->len > 0) {
        struct evbuffer *b = evbuffer_new();

        if (!c->headers_sent) {
            c->headers_sent = 1;
            evhttp_add_header(evhttp_request_get_output_headers(c->req), "Content-Type",
                              "application/x-pic-frames");
            evhttp_send_reply_start(c->req, 200, "OK");
        }
        if (b != NULL) {
            if (srv->auth.len > 0) {
                pic_peer_sign_records(srv, b, (const unsigned char *) u->text, u->len);
            } else {
                evbuffer_add(b, u->text, u->len);
            }
            c->binary_sent += evbuffer_get_length(b);
            evhttp_send_reply_chunk(c->req, b);
            evbuffer_free(b);
        }
    }
    if (!u->done) {
        return;
    }
    struct evhttp_connection *conn = evhttp_request_get_connection(c->req);
    struct bufferevent       *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;

    pic_peer_log(srv, c->req, "answered %s, %zu bytes of records in %.1f ms, %zu to write",
                 !c->headers_sent && (u->finish == PIC_FINISH_ERROR
                                      || u->finish == PIC_FINISH_CANCELLED)
                 ? "an error" : "200",
                 c->binary_sent, (double) (pic_now_ns() - c->t0_ns) * 1e-6,
                 bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0);
    pic_inflight_release_conn(c);
    if (c->headers_sent) {
        evhttp_send_reply_end(c->req);      /* missing records mean failed segments */
    } else if (u->finish == PIC_FINISH_ERROR || u->finish == PIC_FINISH_CANCELLED) {
        pic_reply_error(srv, c->req, u->finish == PIC_FINISH_CANCELLED
                                     ? 503 : pic_job_error_status(u->error),
                        NULL, u->finish == PIC_FINISH_CANCELLED ? "the server is shutting down"
                                                                : u->err_msg);
    } else {
        evhttp_add_header(evhttp_request_get_output_headers(c->req), "Content-Type",
                          "application/x-pic-frames");
        evhttp_send_reply(c->req, 200, "OK", NULL);
    }
    c->req = NULL;
}

/* The job's news to the combine node: c->progress of a peer's prefill. */
static int
pic_peer_progress(pic_inflight *c)
{
    pic_job_update u;

    if (!pic_job_take(c->job, &u)) {
        free(u.text);
        free(u.lp);
        return 0;
    }
    pic_peer_answer(c, &u);
    free(u.text);
    free(u.lp);
    return u.done;
}


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
    pic_inflight     *c;
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

    c = pic_inflight_new(srv, req, PIC_REQ_COMPLETION);
    if (c == NULL) {
        free(text);
        pic_plan_job_free(pj);
        return 500;
    }
    c->binary = 1;
    c->progress = pic_peer_progress;
    c->job->plan = pj;
    c->job->build_only = 1;
    c->job->text = text;
    c->job->text_len = total;
    c->job->deadline_ns = srv->opts->request_timeout_ms > 0
                          ? pic_now_ns() + srv->opts->request_timeout_ms * 1000000 : 0;
    pic_peer_log(srv, req, "%d segment(s), %zu bytes of text: building", n, total);
    if (pic_inflight_start(srv, c) != 0) {
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



