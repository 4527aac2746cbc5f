/*
 * server.c — pic-engine's HTTP server on libevent: routing, health, status.
 *
 * The event loop never computes: model work runs on worker threads (see the
 * scheduler) and results come back through the loop.
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
#include <event2/listener.h>

#include <cjson/cJSON.h>

#include "server.h"

#define PIC_ENGINE_VERSION "0.1.0"

typedef struct {
    const pic_server_opts *opts;
    struct event_base     *base;
    struct evhttp         *http;
    time_t                 started;
    int                    port;
    unsigned long          n_requests;
    unsigned long          n_errors;
} pic_server;

/* --- responses --- */

/* Send body with content type and status code. */
static void
pic_reply(struct evhttp_request *req, int code, const char *ctype,
          const char *body, size_t len)
{
    struct evbuffer *buf = evbuffer_new();

    if (buf == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
    evbuffer_add(buf, body, len);
    evhttp_send_reply(req, code, NULL, buf);
    evbuffer_free(buf);
}

/* Send a cJSON document (consumed). */
static void
pic_reply_json(struct evhttp_request *req, int code, cJSON *doc)
{
    char *s = cJSON_PrintUnformatted(doc);

    cJSON_Delete(doc);
    if (s == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    pic_reply(req, code, "application/json", s, strlen(s));
    free(s);
}

/* Send an OpenAI-shaped error: {"error":{"message","type","param","code"}}. */
static void
pic_reply_error(pic_server *srv, struct evhttp_request *req, int code,
                const char *type, const char *message)
{
    cJSON *doc = cJSON_CreateObject();
    cJSON *err = cJSON_AddObjectToObject(doc, "error");

    srv->n_errors++;
    cJSON_AddStringToObject(err, "message", message);
    cJSON_AddStringToObject(err, "type", type);
    cJSON_AddNullToObject(err, "param");
    cJSON_AddNullToObject(err, "code");
    pic_reply_json(req, code, doc);
}

/* --- routes --- */

static void
pic_route_healthz(pic_server *srv, struct evhttp_request *req)
{
    cJSON *doc = cJSON_CreateObject();

    cJSON_AddStringToObject(doc, "status", "ok");
    cJSON_AddStringToObject(doc, "id", srv->opts->id);
    pic_reply_json(req, 200, doc);
}

static void
pic_route_status(pic_server *srv, struct evhttp_request *req)
{
    cJSON *doc = cJSON_CreateObject();

    cJSON_AddStringToObject(doc, "engine", "pic-engine");
    cJSON_AddStringToObject(doc, "version", PIC_ENGINE_VERSION);
    cJSON_AddStringToObject(doc, "id", srv->opts->id);
    cJSON_AddNumberToObject(doc, "port", srv->port);
    cJSON_AddNumberToObject(doc, "uptime_s", (double) (time(NULL) - srv->started));
    if (srv->opts->model_dir) {
        cJSON_AddStringToObject(doc, "model_dir", srv->opts->model_dir);
    } else {
        cJSON_AddNullToObject(doc, "model_dir");
    }
    cJSON_AddNumberToObject(doc, "requests", (double) srv->n_requests);
    cJSON_AddNumberToObject(doc, "errors", (double) srv->n_errors);
    pic_reply_json(req, 200, doc);
}

static void
pic_route_metrics(pic_server *srv, struct evhttp_request *req)
{
    char body[1024];
    int  n;

    n = snprintf(body, sizeof(body),
                 "# HELP pic_engine_requests_total HTTP requests served.\n"
                 "# TYPE pic_engine_requests_total counter\n"
                 "pic_engine_requests_total %lu\n"
                 "# HELP pic_engine_errors_total Requests answered with an error.\n"
                 "# TYPE pic_engine_errors_total counter\n"
                 "pic_engine_errors_total %lu\n"
                 "# HELP pic_engine_uptime_seconds Seconds since start.\n"
                 "# TYPE pic_engine_uptime_seconds gauge\n"
                 "pic_engine_uptime_seconds %ld\n",
                 srv->n_requests, srv->n_errors, (long) (time(NULL) - srv->started));
    pic_reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", body, (size_t) n);
}

static void
pic_dispatch(struct evhttp_request *req, void *arg)
{
    pic_server *srv = arg;
    const char *uri = evhttp_request_get_uri(req);
    struct evhttp_uri *u = evhttp_uri_parse(uri);
    const char *path = u ? evhttp_uri_get_path(u) : NULL;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);

    srv->n_requests++;
    if (path == NULL) {
        pic_reply_error(srv, req, 400, "invalid_request_error", "malformed request URI");
    } else if (!strcmp(path, "/healthz") && (cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD)) {
        pic_route_healthz(srv, req);
    } else if (!strcmp(path, "/status") && cmd == EVHTTP_REQ_GET) {
        pic_route_status(srv, req);
    } else if (!strcmp(path, "/metrics") && cmd == EVHTTP_REQ_GET) {
        pic_route_metrics(srv, req);
    } else {
        pic_reply_error(srv, req, 404, "invalid_request_error", "unknown endpoint");
    }
    if (u) {
        evhttp_uri_free(u);
    }
}

static void
pic_on_signal(evutil_socket_t sig, short events, void *arg)
{
    pic_server *srv = arg;

    fprintf(stderr, "pic-engine[%s]: signal %d, shutting down\n", srv->opts->id, (int) sig);
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

int
pic_server_run(const pic_server_opts *opts)
{
    pic_server                  srv;
    struct evhttp_bound_socket *bs;
    struct event               *sigint, *sigterm;
    int                         rc = 1;

    memset(&srv, 0, sizeof(srv));
    srv.opts = opts;
    srv.started = time(NULL);
    signal(SIGPIPE, SIG_IGN);

    srv.base = event_base_new();
    srv.http = srv.base ? evhttp_new(srv.base) : NULL;
    if (srv.http == NULL) {
        fprintf(stderr, "%s: cannot create the event loop\n", __func__);
        goto done;
    }
    evhttp_set_allowed_methods(srv.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD);
    evhttp_set_max_body_size(srv.http, 64 * 1024 * 1024);
    evhttp_set_gencb(srv.http, pic_dispatch, &srv);

    bs = evhttp_bind_socket_with_handle(srv.http, opts->host, (ev_uint16_t) opts->port);
    if (bs == NULL) {
        fprintf(stderr, "%s: cannot listen on %s:%d: %s\n", __func__, opts->host,
                opts->port, strerror(errno));
        goto done;
    }
    srv.port = pic_bound_port(bs);

    if (opts->port_file) {
        FILE *f = fopen(opts->port_file, "w");
        if (f == NULL || fprintf(f, "%d\n", srv.port) < 0 || fclose(f) != 0) {
            fprintf(stderr, "%s: cannot write %s\n", __func__, opts->port_file);
            goto done;
        }
    }

    sigint = evsignal_new(srv.base, SIGINT, pic_on_signal, &srv);
    sigterm = evsignal_new(srv.base, SIGTERM, pic_on_signal, &srv);
    event_add(sigint, NULL);
    event_add(sigterm, NULL);

    fprintf(stderr, "pic-engine[%s]: listening on http://%s:%d\n", opts->id, opts->host,
            srv.port);
    event_base_dispatch(srv.base);
    event_free(sigint);
    event_free(sigterm);
    rc = 0;

done:
    if (srv.http) {
        evhttp_free(srv.http);
    }
    if (srv.base) {
        event_base_free(srv.base);
    }
    return rc;
}
