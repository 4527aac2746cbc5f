/*
 * inflight.c — a request in flight, from intake to its job's last news: an
 * OpenAI completion (http_openai.c) or a peer's prefill (http_peer.c).  It
 * owns the scheduler job, watches the client's connection, and on every
 * wake of the loop hands the job's news to the endpoint that made it
 * (c->progress).  The credential checks of requests that carry a plan or
 * call a peer endpoint are here too.
 *
 * Client gone.  evhttp only notices a dead client when a write fails, so
 * every request also watches its socket for EOF (a MSG_PEEK read); either
 * way the job is cancelled and the worker drops it before its next step.
 * The context lives until the scheduler reports the job done.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "inflight.h"
#include "pic_time.h"
#include "reply.h"

static void pic_inflight_on_conn_close(struct evhttp_connection *evcon, void *arg);
static void pic_inflight_on_readable(evutil_socket_t fd, short what, void *arg);

/* --- life --- */

static void
pic_inflight_unwatch(pic_inflight *c)
{
    if (c->watch) {
        event_free(c->watch);
        c->watch = NULL;
    }
}

void
pic_inflight_free(pic_inflight *c)
{
    pic_server *srv = c->srv;

    pic_remote_cancel(&c->remote);
    if (c->linked) {
        if (c->prev) {
            c->prev->next = c->next;
        } else {
            srv->live = c->next;
        }
        if (c->next) {
            c->next->prev = c->prev;
        }
        srv->n_live--;
    }
    pic_inflight_unwatch(c);
    pic_job_free(c->job);
    pic_toolstream_free(&c->ts);
    pic_buf_free(&c->content);
    pic_think_free(&c->think);
    pic_buf_free(&c->reasoning);
    free(c->lps);
    for (int i = 0; i < c->n_calls; i++) {
        pic_toolcall_clear(&c->calls[i]);
    }
    free(c->calls);
    cJSON_Delete(c->tools);
    free(c);
}

/* The client is gone: stop computing, stop writing. */
static void
pic_inflight_mark_gone(pic_inflight *c)
{
    if (!c->gone) {
        c->gone = 1;
        c->srv->hs.disconnects++;
        pic_job_cancel(c->job);
    }
    pic_inflight_unwatch(c);
}

static void
pic_inflight_on_conn_close(struct evhttp_connection *evcon, void *arg)
{
    pic_inflight *c = arg;

    (void) evcon;

    /* evhttp has detached our request from the dying connection (we had not
     * finished it): from now on the request is ours to free */
    c->detached = 1;
    pic_inflight_mark_gone(c);
}

static void
pic_inflight_on_readable(evutil_socket_t fd, short what, void *arg)
{
    pic_inflight *c = arg;
    char         b;
    ssize_t      n;

    if (what & EV_CLOSED) {
        pic_inflight_mark_gone(c);       /* the peer closed (TLS: EV_CLOSED only) */
        return;
    }
    n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        pic_inflight_mark_gone(c);
    } else if (n > 0) {
        /* a pipelined request: evhttp reads it later; stop watching */
        pic_inflight_unwatch(c);
    }
}

/* Release the HTTP side of a request whose answer will not be sent. */
void
pic_inflight_drop_http(pic_inflight *c)
{
    if (c->detached) {
        evhttp_send_reply_end(c->req);      /* no connection: frees the request */
    } else {
        evhttp_connection_set_closecb(c->evcon, NULL, NULL);
        evhttp_connection_free(c->evcon);   /* frees the request with it */
    }
    c->req = NULL;
}

/* Stop watching before the answer's last bytes (the connection may be
 * reused or freed right after). */
void
pic_inflight_release_conn(pic_inflight *c)
{
    pic_inflight_unwatch(c);
    if (!c->detached && c->evcon) {
        evhttp_connection_set_closecb(c->evcon, NULL, NULL);
    }
}

void
pic_inflight_on_wake(pic_server *srv)
{
    pic_inflight *c = srv->live, *next;

    for (; c != NULL; c = next) {
        next = c->next;
        if (c->progress(c)) {
            pic_inflight_free(c);
        }
    }
}

void
pic_inflight_shutdown(pic_server *srv)
{
    while (srv->live != NULL) {
        pic_inflight *c = srv->live;

        pic_inflight_unwatch(c);
        if (c->req != NULL) {
            if (c->detached) {
                evhttp_request_free(c->req);    /* nobody else owns it */
            } else {
                evhttp_connection_set_closecb(c->evcon, NULL, NULL);
            }
        }
        pic_inflight_free(c);
    }
}

pic_inflight *
pic_inflight_new(pic_server *srv, struct evhttp_request *req, pic_req_kind kind)
{
    pic_inflight *c = calloc(1, sizeof(*c));

    if (c == NULL || (c->job = pic_job_new()) == NULL) {
        free(c);
        pic_reply_error(srv, req, 500, "server_error", "out of memory");
        return NULL;
    }
    c->srv = srv;
    c->req = req;
    c->evcon = evhttp_request_get_connection(req);
    c->kind = kind;
    c->created = time(NULL);
    c->t0_ns = pic_now_ns();
    c->job->user = c;
    c->remote.srv = srv;
    c->remote.job = c->job;
    pic_buf_init(&c->content);
    pic_buf_init(&c->reasoning);
    pic_think_init(&c->think, 0);
    pic_toolstream_init(&c->ts, NULL, PIC_TOOLSYN_TAGS);
    return c;
}

int
pic_inflight_start(pic_server *srv, pic_inflight *c)
{
    struct evhttp_request *req = c->req;
    int                    rc = pic_sched_submit(srv->sched, c->job);

    if (rc != 0) {
        if (rc == -1) {
            srv->hs.rejected_429++;
            evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
            pic_reply_error(srv, req, 429, "rate_limit_error",
                            "the engine is at capacity (batch and queue full); retry later");
        } else {
            pic_reply_error(srv, req, 503, "server_error", "the server is shutting down");
        }
        pic_inflight_free(c);
        return -1;
    }

    /* in flight: link, watch the client */
    c->next = srv->live;
    if (srv->live) {
        srv->live->prev = c;
    }
    srv->live = c;
    srv->n_live++;
    c->linked = 1;
    if (c->evcon != NULL) {
        struct bufferevent *bev = evhttp_connection_get_bufferevent(c->evcon);
        evutil_socket_t     fd = bev ? bufferevent_getfd(bev) : -1;

        evhttp_connection_set_closecb(c->evcon, pic_inflight_on_conn_close, c);
        if (fd >= 0) {
            short ev = EV_READ | EV_PERSIST;

            if (srv->tls_server != NULL
                && (event_base_get_features(srv->base) & EV_FEATURE_EARLY_CLOSE)) {
                /* TLS: a client's close_notify is a record like any other;
                 * only its FIN (EPOLLRDHUP) says it is gone */
                ev = EV_CLOSED | EV_PERSIST;
            }
            c->watch = event_new(srv->base, fd, ev, pic_inflight_on_readable, c);
            if (c->watch) {
                event_add(c->watch, NULL);
            }
        }
    }
    return 0;
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
