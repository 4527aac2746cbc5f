/*
 * transport_tcp.c — the TCP transport (transport.h): evhttp client requests
 * on the server's loop, one connection per operation, a millisecond
 * deadline of our own, records parsed as the chunks arrive.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <sys/ioctl.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include <cjson/cJSON.h>

#include "transport.h"

struct pic_transport_op {
    pic_transport            *t;
    struct pic_transport_op  *prev, *next;  /* every op not yet freed (t->priv) */
    struct evhttp_connection *evcon;
    struct evhttp_request    *req;          /* NULL once evhttp is done with it */
    struct event             *timer;
    char                      peer[96];
    pic_transport_frame_fn    on_frame;
    pic_transport_done_fn     on_done;
    void                     *arg;
    int                       pull;         /* 1: the body is one frame for pull_index */
    int                       pull_index;
    int                       over;         /* finished: evhttp callbacks ignored */
    int                       cancelled;    /* the caller let go: no on_done */
    int                       ok;           /* the outcome, for on_done */
    const char               *why;
    struct evbuffer          *acc;          /* record bytes not yet parsed */
};

/* --- teardown --- */

static void
pic_op_free_cb(evutil_socket_t fd, short what, void *arg)
{
    pic_transport_op *op = arg;

    (void) fd;
    (void) what;

    if (op->prev) {
        op->prev->next = op->next;
    } else if (op->t->priv == op) {
        op->t->priv = op->next;
    }
    if (op->next) {
        op->next->prev = op->prev;
    }
    if (op->evcon) {
        evhttp_connection_free(op->evcon);
    }
    if (op->timer) {
        event_free(op->timer);
    }
    if (op->acc) {
        evbuffer_free(op->acc);
    }
    free(op);
}

/* Next loop turn: report the end (unless cancelled), then free.  The end
 * is always reported from here, never from inside pull/prefill/cancel or
 * evhttp's own callbacks, so the caller's state is never freed under it. */
static void
pic_op_done_cb(evutil_socket_t fd, short what, void *arg)
{
    pic_transport_op *op = arg;

    if (!op->cancelled) {
        op->on_done(op->arg, op->ok, op->why);
    }
    pic_op_free_cb(fd, what, op);
}

static void
pic_op_schedule_end(pic_transport_op *op)
{
    struct timeval zero = { 0, 0 };

    if (op->timer) {
        event_del(op->timer);
    }
    if (event_base_once(op->t->base, -1, EV_TIMEOUT, pic_op_done_cb, op, &zero) != 0) {
        op->cancelled = 1;          /* cannot defer (out of memory): drop it */
    }
}

/* Finish once: the outcome is reported from the loop's next turn. */
static void
pic_op_finish(pic_transport_op *op, int ok, const char *why)
{
    if (op->over) {
        return;
    }
    op->over = 1;
    op->ok = ok;
    op->why = why;
    pic_op_schedule_end(op);
}

/* --- the pool credential --- */

static size_t
pic_op_tag_len(const pic_transport_op *op)
{
    return op->t->auth != NULL && op->t->auth->len > 0 ? PIC_AUTH_TAG : 0;
}

/* Check and strip the frame tag of buf (*len bytes with the tag); 0 or -1. */
static int
pic_op_verify(const pic_transport_op *op, const void *buf, size_t *len)
{
    size_t tl = pic_op_tag_len(op);

    if (tl == 0) {
        return 0;
    }
    if (*len <= tl || !pic_auth_check(op->t->auth, "pic-frame-v1", NULL, 0, buf, *len - tl,
                                      (const unsigned char *) buf + *len - tl)) {
        return -1;
    }
    *len -= tl;
    return 0;
}

/* --- records --- */

static uint32_t
pic_le32(const unsigned char *p)
{
    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16
           | (uint32_t) p[3] << 24;
}

/* Hand over every complete record in acc; -1 on a malformed one. */
static int
pic_op_parse(pic_transport_op *op, const char **why)
{
    unsigned char hdr[PIC_RECORD_HDR];

    while (evbuffer_get_length(op->acc) >= PIC_RECORD_HDR) {
        uint64_t len;
        uint32_t index;
        void    *buf;

        evbuffer_copyout(op->acc, hdr, PIC_RECORD_HDR);
        if (pic_le32(hdr) != PIC_RECORD_MAGIC) {
            *why = "bad record magic";
            return -1;
        }
        index = pic_le32(hdr + 4);
        len = (uint64_t) pic_le32(hdr + 8) | (uint64_t) pic_le32(hdr + 12) << 32;
        if (len > op->t->max_frame + pic_op_tag_len(op) || index > 0x7fffffff) {
            *why = "record too large";
            return -1;
        }
        if (evbuffer_get_length(op->acc) < PIC_RECORD_HDR + len) {
            break;
        }
        evbuffer_drain(op->acc, PIC_RECORD_HDR);
        if (len == 0) {
            continue;               /* the worker could not build it */
        }
        buf = malloc(len);
        if (buf == NULL) {
            *why = "out of memory";
            return -1;
        }
        evbuffer_remove(op->acc, buf, len);
        if (pic_op_verify(op, buf, &len) != 0) {
            free(buf);
            *why = "frame without a valid pool credential";
            return -1;
        }
        op->on_frame(op->arg, (int) index, buf, len);
        if (op->over) {
            return 0;
        }
    }
    return 0;
}

/* --- evhttp callbacks --- */

static void
pic_op_on_chunk(struct evhttp_request *req, void *arg)
{
    pic_transport_op *op = arg;
    const char       *why = NULL;

    if (op->over || evhttp_request_get_response_code(req) != 200) {
        return;
    }
    evbuffer_add_buffer(op->acc, evhttp_request_get_input_buffer(req));
    if (pic_op_parse(op, &why) != 0) {
        /* the rest of the response is ignored; the connection goes with
         * the op (cancelling inside evhttp's read callback is not allowed) */
        pic_op_finish(op, 0, why);
    }
}

static void
pic_op_on_complete(struct evhttp_request *req, void *arg)
{
    pic_transport_op *op = arg;
    const char       *why = NULL;
    int               code = req ? evhttp_request_get_response_code(req) : 0;

    op->req = NULL;                 /* evhttp frees it after this callback */
    if (op->over) {
        return;
    }
    if (req == NULL || code == 0) {
        pic_op_finish(op, 0, "connection failed");
        return;
    }
    if (code != 200) {
        pic_op_finish(op, 0, code == 404 ? "not held" : "peer answered an error");
        return;
    }
    if (op->pull) {
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t           len = evbuffer_get_length(in);
        void            *buf = len ? malloc(len) : NULL;

        if (buf == NULL) {
            pic_op_finish(op, 0, len ? "out of memory" : "empty body");
            return;
        }
        evbuffer_remove(in, buf, len);
        if (len > op->t->max_frame + pic_op_tag_len(op)) {
            free(buf);
            pic_op_finish(op, 0, "frame too large");
            return;
        }
        if (pic_op_verify(op, buf, &len) != 0) {
            free(buf);
            pic_op_finish(op, 0, "frame without a valid pool credential");
            return;
        }
        op->on_frame(op->arg, op->pull_index, buf, len);
        pic_op_finish(op, 1, NULL);
        return;
    }
    evbuffer_add_buffer(op->acc, evhttp_request_get_input_buffer(req));
    if (pic_op_parse(op, &why) != 0) {
        pic_op_finish(op, 0, why);
        return;
    }
    if (evbuffer_get_length(op->acc) != 0) {
        pic_op_finish(op, 0, "truncated record");
        return;
    }
    pic_op_finish(op, 1, NULL);
}

static void
pic_op_on_error(enum evhttp_request_error e, void *arg)
{
    pic_transport_op *op = arg;

    op->req = NULL;
    if (!op->over) {
        pic_op_finish(op, 0, e == EVREQ_HTTP_TIMEOUT ? "timeout" : "connection error");
    }
}

static void
pic_op_on_timer(evutil_socket_t fd, short what, void *arg)
{
    pic_transport_op      *op = arg;
    struct evhttp_request *r = op->req;

    (void) fd;
    (void) what;

    if (op->over) {
        return;
    }
    if (op->evcon != NULL) {
        /* where the answer stands: in the socket, in TLS, in the input */
        struct bufferevent *bev = evhttp_connection_get_bufferevent(op->evcon);
        int                 sock = bev ? (int) bufferevent_getfd(bev) : -1, kernel = -1;

        if (sock >= 0 && ioctl(sock, FIONREAD, &kernel) != 0) {
            kernel = -1;
        }
        fprintf(stderr, "pic-engine: peer %s: at the deadline %d byte(s) in the socket, "
                "%d TLS byte(s) unread by libevent, %zu in the connection's input, %zu "
                "record byte(s) unparsed, reading %s\n", op->peer, kernel,
                pic_tls_unread(bev), bev ? evbuffer_get_length(bufferevent_get_input(bev)) : 0,
                evbuffer_get_length(op->acc),
                bev && (bufferevent_get_enabled(bev) & EV_READ) ? "on" : "off");
    }
    op->req = NULL;
    pic_op_finish(op, 0, "deadline passed");        /* over: no callback after */
    if (r != NULL) {
        evhttp_cancel_request(r);                   /* resets the connection */
    }
}

/* --- starting an operation --- */

static pic_transport_op *
pic_op_start(pic_transport *t, const char *peer, enum evhttp_cmd_type cmd, const char *uri,
             const char *body, size_t body_len, int timeout_ms,
             pic_transport_frame_fn on_frame, pic_transport_done_fn on_done, void *arg)
{
    pic_transport_op *op;
    char              host[64], hostport[96];
    const char       *colon = strrchr(peer, ':');
    long              port;
    char             *end;
    struct in_addr    a4;
    struct in6_addr   a6;
    struct timeval    tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };

    if (colon == NULL || (size_t) (colon - peer) >= sizeof(host)) {
        return NULL;
    }
    memcpy(host, peer, (size_t) (colon - peer));
    host[colon - peer] = '\0';
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host) - 2);
        host[strlen(host) - 2] = '\0';
    }
    if (strcmp(host, "localhost") == 0) {
        strcpy(host, "127.0.0.1");
    }
    port = strtol(colon + 1, &end, 10);
    /* an IP only: evhttp would resolve a name with a blocking call */
    if (*end != '\0' || port < 1 || port > 65535
        || (inet_pton(AF_INET, host, &a4) != 1 && inet_pton(AF_INET6, host, &a6) != 1)) {
        return NULL;
    }
    op = calloc(1, sizeof(*op));
    if (op == NULL) {
        return NULL;
    }
    op->t = t;
    op->next = t->priv;
    if (op->next) {
        op->next->prev = op;
    }
    t->priv = op;
    op->on_frame = on_frame;
    op->on_done = on_done;
    op->arg = arg;
    op->acc = evbuffer_new();
    op->timer = evtimer_new(t->base, pic_op_on_timer, op);
    snprintf(op->peer, sizeof(op->peer), "%s", peer);
    if (t->tls != NULL) {
        struct bufferevent *bev = pic_tls_connect_bev(t->base, t->tls);

        op->evcon = bev ? evhttp_connection_base_bufferevent_new(t->base, NULL, bev, host,
                                                                 (unsigned short) port)
                        : NULL;
        if (bev != NULL && op->evcon == NULL) {
            bufferevent_free(bev);
        }
    } else {
        op->evcon = evhttp_connection_base_new(t->base, NULL, host, (unsigned short) port);
    }
    op->req = evhttp_request_new(pic_op_on_complete, op);
    if (op->acc == NULL || op->timer == NULL || op->evcon == NULL || op->req == NULL) {
        if (op->req) {
            evhttp_request_free(op->req);
        }
        pic_op_free_cb(-1, 0, op);
        return NULL;
    }
    evhttp_connection_set_timeout(op->evcon, timeout_ms / 1000 + 1);
    /* a frame is bounded: a peer cannot make us buffer without end */
    evhttp_connection_set_max_body_size(op->evcon,
                                        (ev_ssize_t) (t->max_frame + PIC_AUTH_TAG
                                                      + PIC_RECORD_HDR));
    evhttp_request_set_error_cb(op->req, pic_op_on_error);
    snprintf(hostport, sizeof(hostport), "%s", peer);
    evhttp_add_header(evhttp_request_get_output_headers(op->req), "Host", hostport);
    if (body != NULL) {
        evhttp_add_header(evhttp_request_get_output_headers(op->req), "Content-Type",
                          "application/json");
        evbuffer_add(evhttp_request_get_output_buffer(op->req), body, body_len);
    }
    if (pic_op_tag_len(op) > 0) {
        char  tag[PIC_AUTH_HEX + 1];
        char *head = malloc(strlen(uri) + 8);

        if (head == NULL
            || (sprintf(head, "%s %s", cmd == EVHTTP_REQ_POST ? "POST" : "GET", uri),
                pic_auth_mac_hex(t->auth, "pic-peer-v1", head, strlen(head), body,
                                 body ? body_len : 0, tag)) != 0) {
            free(head);
            evhttp_request_free(op->req);
            op->req = NULL;
            pic_op_free_cb(-1, 0, op);
            return NULL;
        }
        free(head);
        evhttp_add_header(evhttp_request_get_output_headers(op->req), PIC_AUTH_HEADER, tag);
    }
    if (cmd == EVHTTP_REQ_POST) {
        evhttp_request_set_chunked_cb(op->req, pic_op_on_chunk);
    }
    if (evhttp_make_request(op->evcon, op->req, cmd, uri) != 0) {
        op->req = NULL;             /* freed by evhttp on failure */
        if (op->over) {
            op->cancelled = 1;      /* an end is pending: it frees, silently */
        } else {
            pic_op_free_cb(-1, 0, op);
        }
        return NULL;
    }
    evtimer_add(op->timer, &tv);
    return op;
}

static pic_transport_op *
pic_tcp_pull(pic_transport *t, const char *peer, const char *key, uint64_t bytes,
             const char *fingerprint, int timeout_ms, pic_transport_frame_fn on_frame,
             pic_transport_done_fn on_done, void *arg)
{
    char              uri[256];
    pic_transport_op *op;

    snprintf(uri, sizeof(uri), "/v1/pic/segments/%s?bytes=%llu&fingerprint=%s", key,
             (unsigned long long) bytes, fingerprint);
    op = pic_op_start(t, peer, EVHTTP_REQ_GET, uri, NULL, 0, timeout_ms, on_frame, on_done,
                      arg);
    if (op != NULL) {
        op->pull = 1;
    }
    return op;
}

static pic_transport_op *
pic_tcp_prefill(pic_transport *t, const char *peer, const pic_remote_segment *segs, int n,
                const char *fingerprint, const char *scope, int timeout_ms,
                pic_transport_frame_fn on_frame, pic_transport_done_fn on_done, void *arg)
{
    cJSON            *doc = cJSON_CreateObject(), *arr;
    char             *body;
    pic_transport_op *op;

    cJSON_AddStringToObject(doc, "fingerprint", fingerprint);
    cJSON_AddStringToObject(doc, "scope", scope ? scope : "");
    arr = cJSON_AddArrayToObject(doc, "segments");
    for (int i = 0; i < n; i++) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "index", segs[i].index);
        cJSON_AddStringToObject(s, "key", segs[i].key);
        cJSON_AddNumberToObject(s, "bytes", (double) segs[i].bytes);
        cJSON_AddStringToObject(s, "kind", segs[i].kind);
        if (segs[i].doc) {
            cJSON_AddTrueToObject(s, "doc");
        }
        cJSON_AddStringToObject(s, "text", segs[i].text);
        cJSON_AddItemToArray(arr, s);
    }
    body = cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    if (body == NULL) {
        return NULL;
    }
    op = pic_op_start(t, peer, EVHTTP_REQ_POST, "/v1/pic/prefill", body, strlen(body),
                      timeout_ms, on_frame, on_done, arg);
    free(body);
    return op;
}

static void
pic_tcp_cancel(pic_transport_op *op)
{
    struct evhttp_request *r;

    if (op == NULL || op->cancelled) {
        return;
    }
    op->cancelled = 1;
    if (op->over) {
        return;                     /* the pending end frees it, silently */
    }
    op->over = 1;
    r = op->req;
    op->req = NULL;
    pic_op_schedule_end(op);
    if (r != NULL) {
        evhttp_cancel_request(r);
    }
}

static void
pic_tcp_free(pic_transport *t)
{
    /* ops cancelled or finished whose deferred free has not run (the loop
     * has stopped): free them now */
    while (t->priv != NULL) {
        pic_transport_op *op = t->priv;

        if (op->req != NULL && !op->over) {
            op->over = 1;
            evhttp_cancel_request(op->req);
            op->req = NULL;
        }
        pic_op_free_cb(-1, 0, op);      /* its pending end, if any, never runs */
    }
    free(t);
}

static const pic_transport_ops pic_tcp_ops = {
    .name = "tcp",
    .pull = pic_tcp_pull,
    .prefill = pic_tcp_prefill,
    .cancel = pic_tcp_cancel,
    .free = pic_tcp_free,
};

pic_transport *
pic_transport_tcp_new(struct event_base *base, const pic_auth *auth, uint64_t max_frame)
{
    pic_transport *t = calloc(1, sizeof(*t));

    if (t != NULL) {
        t->ops = &pic_tcp_ops;
        t->base = base;
        t->auth = auth;
        t->max_frame = max_frame > 0 && max_frame <= PIC_FRAME_MAX_BYTES ? max_frame
                                                                         : 256u << 20;
    }
    return t;
}
