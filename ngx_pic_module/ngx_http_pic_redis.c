/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: hiredis on nginx's event loop, and the pipelined
 * segment lookup.  The adapter has the shape of hiredis' own
 * adapters/libevent.h: one attach function fills ac->ev.*, add/del
 * read/write register level-triggered events, cleanup unregisters them and
 * frees the nginx connection object but leaves the fd to hiredis, which
 * closes it right after.  Cleanup can run inside our own event handler (a
 * read that ends in a disconnect): the "entered/deleted" guard then defers
 * the free until the handler returns.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "pic_key.h"

#include "ngx_http_pic_module.h"
#include "ngx_http_pic_index.h"
#include "ngx_http_pic_redis.h"


#define NGX_HTTP_PIC_REDIS_BACKOFF_MIN   100
#define NGX_HTTP_PIC_REDIS_BACKOFF_MAX   2000
#define NGX_HTTP_PIC_REDIS_STALLS        3       /* timeouts in a row */
#define NGX_HTTP_PIC_REDIS_PAUSE_MAX     30000
#define NGX_HTTP_PIC_REDIS_LEASE_TICK    1000    /* subscriber lease renewal */
#define NGX_HTTP_PIC_REDIS_LEASE         3000    /* ... and its length */


typedef struct {
    redisAsyncContext           *context;
    ngx_connection_t            *connection;
    unsigned                     entered:1;
    unsigned                     deleted:1;
} ngx_http_pic_redis_events_t;


typedef struct {
    redisAsyncContext           *ac;
    ngx_event_t                  reconnect;    /* back-off, connect timeout */
    ngx_msec_t                   backoff;
    ngx_uint_t                   stalls;       /* lookups timed out in a row */
    ngx_msec_t                   pause;        /* skip lookups this long */
    ngx_msec_t                   paused_at;
    ngx_log_t                   *log;
    ngx_http_pic_main_conf_t    *pmcf;
    ngx_http_pic_zone_ctx_t     *zc;
    unsigned                     events:1;     /* the pic:events subscriber */
    unsigned                     connected:1;
    unsigned                     connecting:1;
    unsigned                     down_logged:1;
    unsigned                     exiting:1;
    unsigned                     hello:1;      /* AUTH or PING in flight */
    unsigned                     auth_logged:1;
} ngx_http_pic_redis_t;


typedef struct {
    ngx_http_pic_lookup_t       *lookup;
    ngx_uint_t                   seg;          /* index in ctx->segs */
} ngx_http_pic_redis_cmd_t;


struct ngx_http_pic_lookup_s {
    ngx_http_pic_ctx_t          *ctx;          /* NULL once detached */
    ngx_event_t                 *done;
    ngx_uint_t                   pending;
    ngx_uint_t                   ncmds;
    ngx_http_pic_redis_cmd_t    *cmds;
};


static void ngx_http_pic_redis_close(ngx_http_pic_redis_t *rd);
static void ngx_http_pic_redis_connect(ngx_http_pic_redis_t *rd);
static void ngx_http_pic_redis_schedule(ngx_http_pic_redis_t *rd);
static void ngx_http_pic_redis_reconnect_handler(ngx_event_t *ev);
static void ngx_http_pic_redis_on_connect(const redisAsyncContext *ac,
    int status);
static void ngx_http_pic_redis_on_disconnect(const redisAsyncContext *ac,
    int status);
static void ngx_http_pic_redis_hello(redisAsyncContext *ac, void *r,
    void *privdata);
static void ngx_http_pic_redis_up(ngx_http_pic_redis_t *rd);
static void ngx_http_pic_redis_down(ngx_http_pic_redis_t *rd,
    const char *what, const char *err);
static void ngx_http_pic_redis_reply(redisAsyncContext *ac, void *r,
    void *privdata);
static void ngx_http_pic_redis_event(redisAsyncContext *ac, void *r,
    void *privdata);
static ngx_int_t ngx_http_pic_redis_slot(ngx_http_pic_shctx_t *sh,
    u_char *id, size_t len);
static void ngx_http_pic_redis_lease_handler(ngx_event_t *ev);

static ngx_int_t ngx_http_pic_redis_attach(redisAsyncContext *ac,
    ngx_log_t *log);
static void ngx_http_pic_redis_read_event(ngx_event_t *ev);
static void ngx_http_pic_redis_write_event(ngx_event_t *ev);
static void ngx_http_pic_redis_add_read(void *privdata);
static void ngx_http_pic_redis_del_read(void *privdata);
static void ngx_http_pic_redis_add_write(void *privdata);
static void ngx_http_pic_redis_del_write(void *privdata);
static void ngx_http_pic_redis_cleanup(void *privdata);
static void ngx_http_pic_redis_free_events(ngx_http_pic_redis_events_t *e);


static ngx_http_pic_redis_t  *ngx_http_pic_redis;        /* lookups */
static ngx_http_pic_redis_t  *ngx_http_pic_redis_sub;    /* pic:events */
static ngx_event_t            ngx_http_pic_redis_lease;  /* who subscribes */
static ngx_uint_t             ngx_http_pic_redis_gen;    /* our generation */


/* --- the adapter --- */


static ngx_int_t
ngx_http_pic_redis_attach(redisAsyncContext *ac, ngx_log_t *log)
{
    ngx_connection_t             *c;
    ngx_http_pic_redis_events_t  *e;

    if (ac->ev.data != NULL) {
        return NGX_ERROR;
    }

    e = ngx_calloc(sizeof(ngx_http_pic_redis_events_t), log);
    if (e == NULL) {
        return NGX_ERROR;
    }

    c = ngx_get_connection(ac->c.fd, log);
    if (c == NULL) {
        ngx_free(e);
        return NGX_ERROR;
    }

    c->data = e;
    c->read->handler = ngx_http_pic_redis_read_event;
    c->write->handler = ngx_http_pic_redis_write_event;
    c->read->log = log;
    c->write->log = log;

    e->context = ac;
    e->connection = c;

    ac->ev.addRead = ngx_http_pic_redis_add_read;
    ac->ev.delRead = ngx_http_pic_redis_del_read;
    ac->ev.addWrite = ngx_http_pic_redis_add_write;
    ac->ev.delWrite = ngx_http_pic_redis_del_write;
    ac->ev.cleanup = ngx_http_pic_redis_cleanup;
    ac->ev.data = e;

    /* the first writable event completes the non-blocking connect */
    ngx_http_pic_redis_add_read(e);
    ngx_http_pic_redis_add_write(e);

    return NGX_OK;
}


static void
ngx_http_pic_redis_read_event(ngx_event_t *ev)
{
    ngx_connection_t             *c = ev->data;
    ngx_http_pic_redis_events_t  *e = c->data;

    e->entered = 1;
    redisAsyncHandleRead(e->context);
    e->entered = 0;

    if (e->deleted) {
        ngx_http_pic_redis_free_events(e);
    }
}


static void
ngx_http_pic_redis_write_event(ngx_event_t *ev)
{
    ngx_connection_t             *c = ev->data;
    ngx_http_pic_redis_events_t  *e = c->data;

    e->entered = 1;
    redisAsyncHandleWrite(e->context);
    e->entered = 0;

    if (e->deleted) {
        ngx_http_pic_redis_free_events(e);
    }
}


static void
ngx_http_pic_redis_add_read(void *privdata)
{
    ngx_http_pic_redis_events_t  *e = privdata;

    ngx_event_t  *rev;

    rev = e->connection->read;

    if (!rev->active) {
        (void) ngx_add_event(rev, NGX_READ_EVENT, NGX_LEVEL_EVENT);
    }
}


static void
ngx_http_pic_redis_del_read(void *privdata)
{
    ngx_http_pic_redis_events_t  *e = privdata;

    ngx_event_t  *rev;

    rev = e->connection->read;

    if (rev->active) {
        (void) ngx_del_event(rev, NGX_READ_EVENT, 0);
    }
}


static void
ngx_http_pic_redis_add_write(void *privdata)
{
    ngx_http_pic_redis_events_t  *e = privdata;

    ngx_event_t  *wev;

    wev = e->connection->write;

    if (!wev->active) {
        (void) ngx_add_event(wev, NGX_WRITE_EVENT, NGX_LEVEL_EVENT);
    }
}


static void
ngx_http_pic_redis_del_write(void *privdata)
{
    ngx_http_pic_redis_events_t  *e = privdata;

    ngx_event_t  *wev;

    wev = e->connection->write;

    if (wev->active) {
        (void) ngx_del_event(wev, NGX_WRITE_EVENT, 0);
    }
}


static void
ngx_http_pic_redis_cleanup(void *privdata)
{
    ngx_http_pic_redis_events_t  *e = privdata;

    ngx_http_pic_redis_del_read(e);
    ngx_http_pic_redis_del_write(e);

    e->context->ev.data = NULL;

    if (e->entered) {
        e->deleted = 1;
        return;
    }

    ngx_http_pic_redis_free_events(e);
}


static void
ngx_http_pic_redis_free_events(ngx_http_pic_redis_events_t *e)
{
    ngx_connection_t  *c;

    c = e->connection;

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }

    /* hiredis closes the fd itself after this cleanup */
    ngx_free_connection(c);
    c->fd = (ngx_socket_t) -1;

    ngx_free(e);
}


/* --- the connection of this worker --- */


ngx_int_t
ngx_http_pic_redis_init_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                 i;
    ngx_http_pic_redis_t      *rd;
    ngx_http_pic_main_conf_t  *pmcf;

    pmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_pic_module);

    if (pmcf == NULL || pmcf->redis == NULL || pmcf->shm_zone == NULL) {
        return NGX_OK;
    }

    for (i = 0; i < 2; i++) {
        rd = ngx_pcalloc(cycle->pool, sizeof(ngx_http_pic_redis_t));
        if (rd == NULL) {
            return NGX_ERROR;
        }

        rd->log = cycle->log;
        rd->pmcf = pmcf;
        rd->zc = pmcf->shm_zone->data;
        rd->backoff = NGX_HTTP_PIC_REDIS_BACKOFF_MIN;
        rd->events = i;

        rd->reconnect.handler = ngx_http_pic_redis_reconnect_handler;
        rd->reconnect.data = rd;
        rd->reconnect.log = cycle->log;
        rd->reconnect.cancelable = 1;

        if (i == 0) {
            ngx_http_pic_redis = rd;
            ngx_http_pic_redis_connect(rd);

        } else {
            /* subscribed only while this worker holds the zone's lease */
            ngx_http_pic_redis_sub = rd;
        }
    }

    ngx_http_pic_redis_gen = rd->zc->sh->generation;

    ngx_http_pic_redis_lease.handler = ngx_http_pic_redis_lease_handler;
    ngx_http_pic_redis_lease.data = ngx_http_pic_redis_sub;
    ngx_http_pic_redis_lease.log = cycle->log;
    ngx_http_pic_redis_lease.cancelable = 1;

    ngx_add_timer(&ngx_http_pic_redis_lease, 1 + ngx_random() % 50);

    return NGX_OK;
}


/*
 * One subscriber to pic:events per zone (DESIGN 4.2): every worker would
 * apply every event to the same shared index.  The worker holding the
 * zone's lease subscribes and renews it every second; another takes it when
 * it lapses (its holder died) or when it is of a newer configuration (a
 * reload: the old worker unsubscribes at its next tick).  Events sent while
 * nobody is subscribed are lost: the index is a hint, lookups fill gaps.
 */

static void
ngx_http_pic_redis_lease_handler(ngx_event_t *ev)
{
    ngx_http_pic_redis_t *rd = ev->data;

    ngx_uint_t             own;
    ngx_http_pic_shctx_t  *sh;

    sh = rd->zc->sh;
    own = 0;

    ngx_shmtx_lock(&rd->zc->shpool->mutex);

    if (ngx_exiting || ngx_quit || ngx_terminate) {
        if (sh->sub_pid == ngx_pid) {
            sh->sub_pid = 0;
        }

    } else if (sh->sub_pid == ngx_pid
               || sh->sub_pid == 0
               || (ngx_msec_int_t) (ngx_current_msec - sh->sub_until) > 0
               || sh->sub_generation < ngx_http_pic_redis_gen)
    {
        sh->sub_pid = ngx_pid;
        sh->sub_generation = ngx_http_pic_redis_gen;
        sh->sub_until = ngx_current_msec + NGX_HTTP_PIC_REDIS_LEASE;
        own = 1;
    }

    ngx_shmtx_unlock(&rd->zc->shpool->mutex);

    if (own) {
        if (rd->exiting) {
            rd->exiting = 0;
            rd->backoff = NGX_HTTP_PIC_REDIS_BACKOFF_MIN;
        }

        if (rd->ac == NULL && !rd->reconnect.timer_set) {
            ngx_http_pic_redis_connect(rd);
        }

    } else if (!rd->exiting) {
        /* the lease went to another worker, or we are shutting down */
        ngx_http_pic_redis_close(rd);
    }

    if (ngx_exiting || ngx_quit || ngx_terminate) {
        return;
    }

    ngx_add_timer(ev, NGX_HTTP_PIC_REDIS_LEASE_TICK);
}


void
ngx_http_pic_redis_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t             i;
    ngx_http_pic_redis_t  *rd;

    rd = ngx_http_pic_redis_sub;

    if (rd) {
        ngx_shmtx_lock(&rd->zc->shpool->mutex);

        if (rd->zc->sh->sub_pid == ngx_pid) {
            rd->zc->sh->sub_pid = 0;
        }

        ngx_shmtx_unlock(&rd->zc->shpool->mutex);
    }

    if (ngx_http_pic_redis_lease.timer_set) {
        ngx_del_timer(&ngx_http_pic_redis_lease);
    }

    for (i = 0; i < 2; i++) {
        rd = (i == 0) ? ngx_http_pic_redis : ngx_http_pic_redis_sub;

        if (rd) {
            ngx_http_pic_redis_close(rd);
        }
    }

    ngx_http_pic_redis = NULL;
    ngx_http_pic_redis_sub = NULL;
}


static void
ngx_http_pic_redis_close(ngx_http_pic_redis_t *rd)
{

    rd->exiting = 1;

    if (rd->reconnect.timer_set) {
        ngx_del_timer(&rd->reconnect);
    }

    if (rd->ac) {
        if (rd->connected && !rd->events) {
            (void) ngx_atomic_fetch_add(&rd->zc->sh->stats.redis_up, -1);
        }

        rd->connected = 0;

        redisAsyncFree(rd->ac);
        rd->ac = NULL;
    }
}


ngx_uint_t
ngx_http_pic_redis_ready(void)
{
    ngx_http_pic_redis_t  *rd;

    rd = ngx_http_pic_redis;

    if (rd == NULL || !rd->connected) {
        return 0;
    }

    /* a connected redis that stopped answering: every lookup would cost a
     * full timeout, so skip them for a while, then try one again */

    if (rd->stalls >= NGX_HTTP_PIC_REDIS_STALLS
        && ngx_current_msec - rd->paused_at < rd->pause)
    {
        return 0;
    }

    return 1;
}


void
ngx_http_pic_redis_stalled(ngx_log_t *log)
{
    ngx_http_pic_redis_t  *rd;

    rd = ngx_http_pic_redis;

    if (rd == NULL || ++rd->stalls < NGX_HTTP_PIC_REDIS_STALLS) {
        return;
    }

    rd->pause = (rd->stalls == NGX_HTTP_PIC_REDIS_STALLS)
                ? 1000 : ngx_min(rd->pause * 2, NGX_HTTP_PIC_REDIS_PAUSE_MAX);
    rd->paused_at = ngx_current_msec;

    ngx_log_error(NGX_LOG_WARN, log, 0,
                  "pic: redis %V answered no lookup %ui times in a row, "
                  "lookups paused for %M ms",
                  &rd->pmcf->redis_name, rd->stalls, rd->pause);
}


static void
ngx_http_pic_redis_connect(ngx_http_pic_redis_t *rd)
{
    size_t                len;
    struct sockaddr      *sa;
    redisAsyncContext    *ac;
    struct sockaddr_un   *saun;
    u_char                ip[NGX_SOCKADDR_STRLEN + 1];

    sa = rd->pmcf->redis->sockaddr;

#if (NGX_HAVE_UNIX_DOMAIN)
    if (sa->sa_family == AF_UNIX) {
        saun = (struct sockaddr_un *) sa;
        ac = redisAsyncConnectUnix(saun->sun_path);

    } else
#endif
    {
        (void) saun;
        len = ngx_sock_ntop(sa, rd->pmcf->redis->socklen, ip,
                            NGX_SOCKADDR_STRLEN, 0);
        ip[len] = '\0';

        ac = redisAsyncConnect((char *) ip, ngx_inet_get_port(sa));
    }

    if (ac == NULL) {
        ngx_http_pic_redis_down(rd, "connect", "out of memory");
        ngx_http_pic_redis_schedule(rd);
        return;
    }

    if (ac->err) {
        ngx_http_pic_redis_down(rd, "connect", ac->errstr);
        redisAsyncFree(ac);
        ngx_http_pic_redis_schedule(rd);
        return;
    }

    ac->data = rd;

    if (ngx_http_pic_redis_attach(ac, rd->log) != NGX_OK) {
        ngx_http_pic_redis_down(rd, "attach", "no free connection");
        redisAsyncFree(ac);
        ngx_http_pic_redis_schedule(rd);
        return;
    }

    (void) redisAsyncSetConnectCallback(ac, ngx_http_pic_redis_on_connect);
    (void) redisAsyncSetDisconnectCallback(ac,
                                           ngx_http_pic_redis_on_disconnect);

    rd->ac = ac;
    rd->connecting = 1;

    /* hiredis has no connect timeout: the reconnect timer is ours */
    ngx_add_timer(&rd->reconnect, rd->pmcf->redis_connect_timeout);
}


static void
ngx_http_pic_redis_schedule(ngx_http_pic_redis_t *rd)
{
    if (rd->exiting || ngx_exiting || ngx_quit || ngx_terminate) {
        return;
    }

    if (rd->reconnect.timer_set) {
        ngx_del_timer(&rd->reconnect);
    }

    ngx_add_timer(&rd->reconnect, rd->backoff);

    rd->backoff = ngx_min(rd->backoff * 2, NGX_HTTP_PIC_REDIS_BACKOFF_MAX);
}


static void
ngx_http_pic_redis_reconnect_handler(ngx_event_t *ev)
{
    ngx_http_pic_redis_t  *rd = ev->data;

    if (rd->hello && rd->ac) {
        /* connected, but AUTH / PING got no answer in time: the disconnect
         * callback (inside redisAsyncFree) schedules the next try */
        ngx_http_pic_redis_down(rd, "handshake", "timed out");
        rd->hello = 0;
        redisAsyncFree(rd->ac);
        return;
    }

    if (rd->connecting && rd->ac) {
        /* the connect did not finish in time */
        ngx_http_pic_redis_down(rd, "connect", "timed out");
        rd->connecting = 0;

        /* not connected yet: hiredis calls no disconnect callback */
        redisAsyncFree(rd->ac);
        rd->ac = NULL;

        ngx_http_pic_redis_schedule(rd);
        return;
    }

    if (rd->ac == NULL) {
        ngx_http_pic_redis_connect(rd);
    }
}


static void
ngx_http_pic_redis_on_connect(const redisAsyncContext *ac, int status)
{
    ngx_http_pic_redis_t  *rd = ac->data;

    rd->connecting = 0;

    if (rd->reconnect.timer_set) {
        ngx_del_timer(&rd->reconnect);
    }

    if (status != REDIS_OK) {
        /* hiredis frees ac after this callback */
        ngx_http_pic_redis_down(rd, "connect", ac->errstr);
        rd->ac = NULL;
        ngx_http_pic_redis_schedule(rd);
        return;
    }

    /* the first command says whether this connection may be used: AUTH
     * with the configured credentials, else PING (a server that wants a
     * password answers NOAUTH); replies come in order, nothing else is
     * sent before the answer */

    rd->hello = 1;
    ngx_add_timer(&rd->reconnect, rd->pmcf->redis_connect_timeout);

    if (rd->pmcf->redis_user.len) {
        (void) redisAsyncCommand(rd->ac, ngx_http_pic_redis_hello, rd,
                                 "AUTH %b %b", rd->pmcf->redis_user.data,
                                 rd->pmcf->redis_user.len,
                                 rd->pmcf->redis_password.data,
                                 rd->pmcf->redis_password.len);

    } else if (rd->pmcf->redis_password.len) {
        (void) redisAsyncCommand(rd->ac, ngx_http_pic_redis_hello, rd,
                                 "AUTH %b", rd->pmcf->redis_password.data,
                                 rd->pmcf->redis_password.len);

    } else {
        (void) redisAsyncCommand(rd->ac, ngx_http_pic_redis_hello, rd, "PING");
    }
}


static void
ngx_http_pic_redis_hello(redisAsyncContext *ac, void *r, void *privdata)
{
    redisReply            *reply = r;
    ngx_http_pic_redis_t  *rd = privdata;

    if (reply == NULL || !rd->hello) {
        /* the connection is going away */
        return;
    }

    rd->hello = 0;

    if (rd->reconnect.timer_set) {
        ngx_del_timer(&rd->reconnect);
    }

    if (reply->type != REDIS_REPLY_ERROR) {
        rd->auth_logged = 0;
        ngx_http_pic_redis_up(rd);
        return;
    }

    /* wrong or missing credentials: a configuration error, said once per
     * worker (redis' own message, never the password), retried with
     * back-off; requests are routed without redis meanwhile */

    if (!rd->events) {
        (void) ngx_atomic_fetch_add(&rd->zc->sh->stats.redis_errors, 1);

        if (!rd->auth_logged) {
            ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                          rd->pmcf->redis_password.len
                          ? "pic: redis %V refused the credentials of "
                            "pic_redis: %s; routing without redis"
                          : "pic: redis %V wants a password (%s): set "
                            "password_file= on pic_redis; routing without "
                            "redis",
                          &rd->pmcf->redis_name,
                          reply->str ? reply->str : "error");
        }
    }

    rd->auth_logged = 1;
    rd->down_logged = 1;

    redisAsyncDisconnect(ac);
}


static void
ngx_http_pic_redis_up(ngx_http_pic_redis_t *rd)
{
    rd->connected = 1;
    rd->backoff = NGX_HTTP_PIC_REDIS_BACKOFF_MIN;

    if (rd->events) {
        /* add/evict/up/down announcements keep the shm index warm */
        (void) redisAsyncCommand(rd->ac, ngx_http_pic_redis_event, rd,
                                 "SUBSCRIBE pic:events");
        return;
    }

    (void) ngx_atomic_fetch_add(&rd->zc->sh->stats.redis_up, 1);
    (void) ngx_atomic_fetch_add(&rd->zc->sh->stats.redis_connects, 1);
    rd->zc->sh->stats.redis_ok_at = ngx_current_msec;

    if (rd->down_logged) {
        ngx_log_error(NGX_LOG_NOTICE, rd->log, 0,
                      "pic: redis %V is up again", &rd->pmcf->redis_name);
        rd->down_logged = 0;
    }
}


/* --- pic:events --- */


static void
ngx_http_pic_redis_event(redisAsyncContext *ac, void *r, void *privdata)
{
    redisReply            *reply = r;
    ngx_http_pic_redis_t  *rd = privdata;

    u_char                *p, *end, *id, *arg;
    size_t                 verb, id_len, arg_len;
    pic_key                pk;
    ngx_int_t              slot;
    ngx_uint_t             add;
    u_char                 key[NGX_HTTP_PIC_KEY_LEN];

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 3
        || reply->element[0]->type != REDIS_REPLY_STRING
        || reply->element[2]->type != REDIS_REPLY_STRING
        || ngx_strcmp(reply->element[0]->str, "message") != 0)
    {
        /* the subscription's confirmation, or the connection going away */
        return;
    }

    /* "add ID KEY", "evict ID KEY", "up ID ADDR", "down ID" */

    p = (u_char *) reply->element[2]->str;
    end = p + reply->element[2]->len;

    id = ngx_strlchr(p, end, ' ');
    if (id == NULL) {
        return;
    }

    verb = id - p;
    add = (verb == 3 && ngx_strncmp(p, "add", 3) == 0);

    id++;
    arg = ngx_strlchr(id, end, ' ');
    id_len = (arg ? arg : end) - id;
    arg = arg ? arg + 1 : end;
    arg_len = end - arg;

    ngx_shmtx_lock(&rd->zc->shpool->mutex);
    slot = ngx_http_pic_redis_slot(rd->zc->sh, id, id_len);
    ngx_shmtx_unlock(&rd->zc->shpool->mutex);

    if (slot < 0) {
        return;
    }

    if (verb == 4 && ngx_strncmp(p, "down", 4) == 0) {
        ngx_http_pic_index_forget_engine(rd->zc, slot);
        (void) ngx_atomic_fetch_add(&rd->zc->sh->stats.redis_events, 1);
        return;
    }

    if (!(add || (verb == 5 && ngx_strncmp(p, "evict", 5) == 0))
        || arg_len != 2 * NGX_HTTP_PIC_KEY_LEN)
    {
        return;
    }

    if (pic_key_parse_hex(&pk, (char *) arg, arg_len) != 0) {
        return;
    }

    pic_key_to_bytes(&pk, key);

    ngx_http_pic_index_holder(rd->zc, key, slot, add);

    (void) ngx_atomic_fetch_add(&rd->zc->sh->stats.redis_events, 1);
}


/* the engine slot whose probed id (or configured address) is id */

static ngx_int_t
ngx_http_pic_redis_slot(ngx_http_pic_shctx_t *sh, u_char *id, size_t len)
{
    ngx_uint_t                 s;
    ngx_http_pic_engine_sh_t  *e;

    for (s = 0; s < sh->nengines; s++) {
        e = &sh->engines[s];

        if ((e->id_len == len && ngx_strncmp(e->id, id, len) == 0)
            || (e->name_len == len && ngx_strncmp(e->name, id, len) == 0))
        {
            return s;
        }
    }

    return -1;
}


static void
ngx_http_pic_redis_on_disconnect(const redisAsyncContext *ac, int status)
{
    ngx_http_pic_redis_t  *rd = ac->data;

    if (rd->connected && !rd->events) {
        (void) ngx_atomic_fetch_add(&rd->zc->sh->stats.redis_up, -1);
    }

    rd->connected = 0;
    rd->connecting = 0;
    rd->hello = 0;
    rd->ac = NULL;

    if (rd->reconnect.timer_set) {
        ngx_del_timer(&rd->reconnect);
    }

    if (rd->exiting) {
        return;
    }

    if (status != REDIS_OK) {
        ngx_http_pic_redis_down(rd, "connection", ac->errstr);
    }

    ngx_http_pic_redis_schedule(rd);
}


static void
ngx_http_pic_redis_down(ngx_http_pic_redis_t *rd, const char *what,
    const char *err)
{
    if (rd->events) {
        /* the lookup connection reports the outage */
        rd->down_logged = 1;
        return;
    }

    (void) ngx_atomic_fetch_add(&rd->zc->sh->stats.redis_errors, 1);

    if (rd->down_logged) {
        return;
    }

    rd->down_logged = 1;

    ngx_log_error(NGX_LOG_WARN, rd->log, 0,
                  "pic: redis %V %s failed: %s; routing by rendezvous "
                  "hashing until it is back",
                  &rd->pmcf->redis_name, what, err ? err : "unknown error");
}


/* --- lookups --- */


ngx_int_t
ngx_http_pic_redis_lookup(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx,
    ngx_uint_t *idx, ngx_uint_t n, ngx_event_t *ev)
{
    u_char                 *p, *key;
    ngx_uint_t              i, j, chain;
    ngx_http_pic_lookup_t  *lk;
    ngx_http_pic_redis_t   *rd;
    u_char                  hex[2 * NGX_HTTP_PIC_KEY_LEN];

    rd = ngx_http_pic_redis;

    if (rd == NULL || !rd->connected || rd->ac == NULL || n == 0) {
        return NGX_DECLINED;
    }

    /* outlives the request when replies come after its deadline */
    lk = ngx_alloc(sizeof(ngx_http_pic_lookup_t)
                   + n * sizeof(ngx_http_pic_redis_cmd_t),
                   r->connection->log);
    if (lk == NULL) {
        return NGX_ERROR;
    }

    lk->ctx = ctx;
    lk->done = ev;
    lk->pending = 0;
    lk->ncmds = n;
    lk->cmds = (ngx_http_pic_redis_cmd_t *) (lk + 1);

    for (i = 0; i < n; i++) {
        lk->cmds[i].lookup = lk;
        lk->cmds[i].seg = idx[i];

        chain = (idx[i] >= ctx->nsegs);
        key = chain ? ctx->chains[idx[i] - ctx->nsegs].key
                    : ctx->segs[idx[i]].key;

        p = ngx_hex_dump(hex, key, NGX_HTTP_PIC_KEY_LEN);

        if (redisAsyncCommand(rd->ac, ngx_http_pic_redis_reply, &lk->cmds[i],
                              chain ? "SMEMBERS pic:pfx:%b"
                                    : "SMEMBERS pic:seg:%b",
                              hex, (size_t) (p - hex))
            != REDIS_OK)
        {
            break;
        }

        lk->pending++;
    }

    if (lk->pending == 0) {
        ngx_free(lk);
        return NGX_DECLINED;
    }

    (void) ngx_atomic_fetch_add(&rd->zc->sh->stats.redis_lookups, 1);
    (void) ngx_atomic_fetch_add(&rd->zc->sh->stats.redis_keys, lk->pending);

    for (j = i; j < n; j++) {
        /* not sent: unknown */
        lk->cmds[j].lookup = NULL;
    }

    ctx->lookup = lk;

    return NGX_OK;
}


static void
ngx_http_pic_redis_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    redisReply                *reply = r;
    ngx_http_pic_redis_cmd_t  *cmd = privdata;

    uint64_t                   mask;
    ngx_int_t                  s;
    ngx_uint_t                 i;
    ngx_http_pic_segment_t    *seg;
    ngx_http_pic_lookup_t     *lk;
    ngx_http_pic_redis_t      *rd;
    ngx_http_pic_shctx_t      *sh;

    lk = cmd->lookup;
    rd = ac->data;

    lk->pending--;

    if (lk->ctx == NULL) {
        goto done;
    }

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        if (reply && reply->type == REDIS_REPLY_ERROR) {
            (void) ngx_atomic_fetch_add(&rd->zc->sh->stats.redis_errors, 1);
        }

        goto done;
    }

    rd->zc->sh->stats.redis_ok_at = ngx_current_msec;
    rd->stalls = 0;

    if (reply->elements == 0) {
        goto done;
    }

    sh = rd->zc->sh;
    mask = 0;

    ngx_shmtx_lock(&rd->zc->shpool->mutex);

    for (i = 0; i < reply->elements; i++) {

        if (reply->element[i]->type != REDIS_REPLY_STRING) {
            continue;
        }

        s = ngx_http_pic_redis_slot(sh, (u_char *) reply->element[i]->str,
                                    reply->element[i]->len);
        if (s >= 0) {
            mask |= (uint64_t) 1 << s;
        }
    }

    ngx_shmtx_unlock(&rd->zc->shpool->mutex);

    if (mask) {
        seg = (cmd->seg >= lk->ctx->nsegs)
              ? &lk->ctx->chains[cmd->seg - lk->ctx->nsegs]
              : &lk->ctx->segs[cmd->seg];
        seg->holders |= mask;
        seg->flags |= NGX_HTTP_PIC_SEG_REDIS;
        (void) ngx_atomic_fetch_add(&sh->stats.redis_hits, 1);
    }

done:

    if (lk->pending) {
        return;
    }

    if (lk->ctx) {
        /* resume the request outside of hiredis' callback */
        ngx_post_event(lk->done, &ngx_posted_events);
        return;
    }

    ngx_free(lk);
}


static size_t
ngx_http_pic_redis_engine_id(ngx_http_pic_zone_ctx_t *zc, ngx_uint_t slot,
    u_char *id)
{
    size_t                     len;
    ngx_http_pic_engine_sh_t  *e;

    /* the id the engine reports to probes, else its address */

    ngx_shmtx_lock(&zc->shpool->mutex);

    e = &zc->sh->engines[slot];

    if (e->id_len) {
        len = e->id_len;
        ngx_memcpy(id, e->id, len);

    } else {
        len = e->name_len;
        ngx_memcpy(id, e->name, len);
    }

    ngx_shmtx_unlock(&zc->shpool->mutex);

    return len;
}


void
ngx_http_pic_redis_record_prefix(ngx_http_pic_zone_ctx_t *zc,
    ngx_http_pic_segment_t *chains, ngx_uint_t n, ngx_uint_t slot)
{
    u_char                    *p;
    size_t                     len;
    ngx_uint_t                 i;
    ngx_http_pic_redis_t      *rd;
    u_char                     hex[2 * NGX_HTTP_PIC_KEY_LEN];
    u_char                     id[NGX_SOCKADDR_STRLEN];

    rd = ngx_http_pic_redis;

    if (rd == NULL || !rd->connected || rd->ac == NULL
        || slot >= NGX_HTTP_PIC_MAX_ENGINES)
    {
        return;
    }

    len = ngx_http_pic_redis_engine_id(zc, slot, id);

    for (i = 0; i < n; i++) {

        if (!(chains[i].flags & NGX_HTTP_PIC_SEG_NEW)) {
            continue;
        }

        p = ngx_hex_dump(hex, chains[i].key, NGX_HTTP_PIC_KEY_LEN);

        if (redisAsyncCommand(rd->ac, NULL, NULL, "SADD pic:pfx:%b %b",
                              hex, (size_t) (p - hex), id, len)
            != REDIS_OK
            || redisAsyncCommand(rd->ac, NULL, NULL, "EXPIRE pic:pfx:%b %d",
                                 hex, (size_t) (p - hex),
                                 NGX_HTTP_PIC_PREFIX_TTL)
               != REDIS_OK)
        {
            return;
        }
    }
}



void
ngx_http_pic_redis_forget_prefix(ngx_http_pic_zone_ctx_t *zc, u_char *keys,
    ngx_uint_t n, ngx_uint_t slot)
{
    u_char                *p;
    size_t                 len;
    ngx_uint_t             i;
    ngx_http_pic_redis_t  *rd;
    u_char                 hex[2 * NGX_HTTP_PIC_KEY_LEN];
    u_char                 id[NGX_SOCKADDR_STRLEN];

    rd = ngx_http_pic_redis;

    if (rd == NULL || !rd->connected || rd->ac == NULL || n == 0
        || slot >= NGX_HTTP_PIC_MAX_ENGINES)
    {
        return;
    }

    len = ngx_http_pic_redis_engine_id(zc, slot, id);

    for (i = 0; i < n; i++) {
        p = ngx_hex_dump(hex, keys + i * NGX_HTTP_PIC_KEY_LEN,
                         NGX_HTTP_PIC_KEY_LEN);

        if (redisAsyncCommand(rd->ac, NULL, NULL, "SREM pic:pfx:%b %b",
                              hex, (size_t) (p - hex), id, len)
            != REDIS_OK)
        {
            return;
        }
    }
}


void
ngx_http_pic_redis_detach(ngx_http_pic_lookup_t *lk)
{
    if (lk->pending == 0) {
        ngx_free(lk);
        return;
    }

    lk->ctx = NULL;
}


ngx_uint_t
ngx_http_pic_redis_complete(ngx_http_pic_lookup_t *lk)
{
    return lk->pending == 0;
}
