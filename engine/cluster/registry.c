/*
 * registry.c — Redis registration over async hiredis on libevent
 * (registry.h has the key layout and the failure handling).
 */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <arpa/inet.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>

#include "pic_buf.h"
#include "pic_key.h"
#include "pic_time.h"
#include "registry.h"

#define PIC_REG_BACKOFF_MIN_MS   100
#define PIC_REG_BACKOFF_MAX_MS   5000
#define PIC_REG_RESYNC_SLICE     1024
#define PIC_REG_PENDING_MAX      65536
#define PIC_REG_GOODBYE_MS       300

typedef enum {
    PIC_REG_DOWN = 0,           /* waiting for the reconnect timer */
    PIC_REG_CONNECTING,
    PIC_REG_UP,
} pic_reg_state;

/* open-addressing set of segment keys */
typedef struct {
    char   (*keys)[PIC_KEY_HEX + 1];    /* [cap]; "" empty, "-" tombstone */
    size_t   cap, n, used;                  /* used = n + tombstones */
} pic_keyset;

struct pic_registry {
    pic_registry_opts    o;
    char                 id[128];
    char                 addr[128];
    char                 version[32];
    char                 ip[64];            /* resolved once at init */
    int                  port;
    char                 unix_path[256];
    struct event_base   *base;
    redisAsyncContext   *ac;
    pic_reg_state        state;
    int                  closing;
    struct event        *hb;                /* heartbeat / watchdog, persistent */
    struct event        *retry;             /* reconnect after backoff */
    struct event        *resync_ev;         /* next re-registration slice */
    int                  backoff_ms;
    int64_t              state_since_ms;    /* when the state last changed */
    int64_t              last_progress_ms;  /* last reply, or first in flight */
    int64_t              last_ok_ms;        /* last heartbeat reply OK */
    int                  inflight;
    size_t               resync_pos;        /* next keyset slot to re-send */
    int                  resyncing;
    int                  err_logged;        /* one error line per connection */
    int                  auth_logged;       /* one refusal line until AUTH succeeds */
    char                 user[128];         /* AUTH user; "" none */
    char                 password[513];     /* AUTH password; "" none; never logged */
    time_t               started;
    pic_keyset           segs;
    char               (*pending)[PIC_KEY_HEX + 1];    /* evictions to replay */
    size_t               n_pending;

    /* changes posted by other threads, applied on the loop */
    pthread_mutex_t      post_mu;
    struct event        *post_ev;
    char                *posts;             /* (n_posts) records: op byte + key */
    size_t               n_posts, cap_posts;

    /* counters */
    uint64_t             connects, connect_failures, disconnects, stalls;
    uint64_t             heartbeats, heartbeats_ok, replies_error, resyncs;
    uint64_t             seg_adds, seg_evicts, evictions_dropped, auth_failures;
};

/* --- time and logging --- */

static int64_t
pic_reg_wall_ms(void)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return (int64_t) tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static void
pic_reg_log(const pic_registry *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
pic_reg_log(const pic_registry *r, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "pic-engine[%s]: redis: ", r->id);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* --- the key set --- */

static int
pic_key_valid(const char *k)
{
    pic_key parsed;

    return pic_key_parse_hex(&parsed, k, strnlen(k, PIC_KEY_HEX + 1)) == 0;
}

static uint64_t
pic_key_hash(const char *k)
{
    uint64_t h = 1469598103934665603ull;

    for (int i = 0; i < PIC_KEY_HEX; i++) {
        h = (h ^ (unsigned char) k[i]) * 1099511628211ull;
    }
    return h;
}

/* Slot of k, or of the first free slot on its probe path (*found says). */
static size_t
pic_keyset_find(const pic_keyset *s, const char *k, int *found)
{
    size_t i = pic_key_hash(k) & (s->cap - 1), tomb = (size_t) -1;

    for (;;) {
        const char *slot = s->keys[i];
        if (slot[0] == '\0') {
            *found = 0;
            return tomb != (size_t) -1 ? tomb : i;
        }
        if (slot[0] == '-') {
            if (tomb == (size_t) -1) {
                tomb = i;
            }
        } else if (memcmp(slot, k, PIC_KEY_HEX) == 0) {
            *found = 1;
            return i;
        }
        i = (i + 1) & (s->cap - 1);
    }
}

static int
pic_keyset_grow(pic_keyset *s)
{
    pic_keyset ns = { 0 };

    ns.cap = s->cap ? s->cap * 2 : 256;
    while (s->n * 2 >= ns.cap) {
        ns.cap *= 2;
    }
    ns.keys = calloc(ns.cap, sizeof(*ns.keys));
    if (ns.keys == NULL) {
        return -1;
    }
    for (size_t i = 0; i < s->cap; i++) {
        int found;
        if (s->keys[i][0] != '\0' && s->keys[i][0] != '-') {
            size_t j = pic_keyset_find(&ns, s->keys[i], &found);
            memcpy(ns.keys[j], s->keys[i], PIC_KEY_HEX + 1);
            ns.n++;
            ns.used++;
        }
    }
    free(s->keys);
    *s = ns;
    return 0;
}

/* 1 added, 0 already there, -1 ENOMEM. */
static int
pic_keyset_add(pic_keyset *s, const char *k)
{
    size_t i;
    int    found;

    if ((s->used + 1) * 2 > s->cap && pic_keyset_grow(s) != 0) {
        return -1;
    }
    i = pic_keyset_find(s, k, &found);
    if (found) {
        return 0;
    }
    if (s->keys[i][0] == '\0') {
        s->used++;
    }
    memcpy(s->keys[i], k, PIC_KEY_HEX + 1);
    s->n++;
    return 1;
}

/* 1 removed, 0 absent. */
static int
pic_keyset_del(pic_keyset *s, const char *k)
{
    size_t i;
    int    found;

    if (s->cap == 0) {
        return 0;
    }
    i = pic_keyset_find(s, k, &found);
    if (!found) {
        return 0;
    }
    strcpy(s->keys[i], "-");
    s->n--;
    return 1;
}

/* --- commands --- */

static void pic_reg_drop(pic_registry *r, const char *why);

/* privdata of a command: NULL, &pic_reg_tag_hb (heartbeat EXPIRE), or an
 * eviction record (SREM) that goes back to the pending list if the
 * connection dies before the reply */
static char pic_reg_tag_hb;

typedef struct {
    char key[PIC_KEY_HEX + 1];
} pic_reg_evict_rec;

static void
pic_reg_requeue_evict(pic_registry *r, const char *key)
{
    if (r->n_pending < PIC_REG_PENDING_MAX) {
        memcpy(r->pending[r->n_pending++], key, PIC_KEY_HEX + 1);
    } else {
        r->evictions_dropped++;     /* the gateway's fetch will miss and recover */
    }
}

static void
pic_reg_on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    pic_registry *r = ac->data;
    redisReply   *rep = reply;
    int           is_evict = priv != NULL && priv != &pic_reg_tag_hb;

    if (r == NULL) {                /* shutting down */
        if (is_evict) {
            free(priv);
        }
        return;
    }
    if (r->inflight > 0) {
        r->inflight--;
    }
    if (rep == NULL) {
        /* the connection is going away: an eviction must be said again */
        if (is_evict) {
            pic_reg_requeue_evict(r, ((pic_reg_evict_rec *) priv)->key);
            free(priv);
        }
        return;
    }
    if (is_evict) {
        free(priv);
    }
    r->last_progress_ms = pic_now_ns() / 1000000;
    if (rep->type == REDIS_REPLY_ERROR) {
        r->replies_error++;
        if (!r->err_logged) {
            r->err_logged = 1;
            pic_reg_log(r, "command failed: %s", rep->str ? rep->str : "?");
        }
    } else if (priv == &pic_reg_tag_hb) {
        r->heartbeats_ok++;
        r->last_ok_ms = r->last_progress_ms;
    }
}

/* Queue one command (printf-style, hiredis format); 0 or -1. */
static int
pic_reg_cmd(pic_registry *r, void *priv, const char *fmt, ...)
{
    va_list ap;
    int     rc;

    if (r->ac == NULL || r->state != PIC_REG_UP) {
        return -1;
    }
    va_start(ap, fmt);
    rc = redisvAsyncCommand(r->ac, pic_reg_on_reply, priv, fmt, ap);
    va_end(ap);
    if (rc != REDIS_OK) {
        return -1;
    }
    if (r->inflight++ == 0) {
        r->last_progress_ms = pic_now_ns() / 1000000;
    }
    return 0;
}

static void
pic_reg_heartbeat(pic_registry *r)
{
    pic_registry_load ld = { 0 };
    char              load[32];

    if (r->o.load) {
        r->o.load(r->o.load_arg, &ld);
    }
    snprintf(load, sizeof(load), "%.4f",
             ld.capacity > 0 ? (double) (ld.running + ld.queued) / ld.capacity : 0.0);
    r->heartbeats++;
    pic_reg_cmd(r, NULL, "HSET pic:eng:%s addr %s load %s capacity %d running %d "
                "queued %d free_bytes %llu started %lld version %s model %016llx "
                "heartbeat %lld",
                r->id, r->addr, load, ld.capacity, ld.running, ld.queued,
                (unsigned long long) ld.free_bytes, (long long) r->started,
                r->version, (unsigned long long) r->o.model_fp,
                (long long) pic_reg_wall_ms());
    pic_reg_cmd(r, &pic_reg_tag_hb, "EXPIRE pic:eng:%s %d", r->id, r->o.ttl_s);
}

static void
pic_reg_seg_send_add(pic_registry *r, const char *key)
{
    pic_reg_cmd(r, NULL, "SADD pic:seg:%s %s", key, r->id);
    pic_reg_cmd(r, NULL, "EXPIRE pic:seg:%s %d", key, r->o.seg_ttl_s);
}

static void
pic_reg_publish(pic_registry *r, const char *what, const char *arg)
{
    char msg[256];
    int  n = snprintf(msg, sizeof(msg), "%s %s%s%s", what, r->id, arg ? " " : "",
                      arg ? arg : "");

    pic_reg_cmd(r, NULL, "PUBLISH pic:events %b", msg, (size_t) n);
}

/* SREM with a record that survives a dropped connection. */
static void
pic_reg_send_evict(pic_registry *r, const char *key)
{
    pic_reg_evict_rec *rec = malloc(sizeof(*rec));

    if (rec == NULL) {
        pic_reg_requeue_evict(r, key);
        return;
    }
    memcpy(rec->key, key, PIC_KEY_HEX + 1);
    if (pic_reg_cmd(r, rec, "SREM pic:seg:%s %s", key, r->id) != 0) {
        free(rec);
        pic_reg_requeue_evict(r, key);
    }
}

/* Re-send one slice of the live segment set; reschedules itself. */
static void
pic_reg_resync_slice(evutil_socket_t fd, short what, void *arg)
{
    pic_registry *r = arg;
    int           sent = 0;

    (void) fd;
    (void) what;

    if (r->state != PIC_REG_UP || !r->resyncing) {
        return;
    }
    while (r->resync_pos < r->segs.cap && sent < PIC_REG_RESYNC_SLICE) {
        const char *k = r->segs.keys[r->resync_pos++];
        if (k[0] != '\0' && k[0] != '-') {
            pic_reg_seg_send_add(r, k);
            sent++;
        }
    }
    if (r->resync_pos < r->segs.cap) {
        struct timeval now = { 0, 0 };
        event_add(r->resync_ev, &now);
    } else {
        r->resyncing = 0;
    }
}

/* Everything a fresh connection must say. */
static void
pic_reg_register(pic_registry *r)
{
    struct timeval now = { 0, 0 };

    pic_reg_heartbeat(r);
    pic_reg_cmd(r, NULL, "SADD pic:engines %s", r->id);
    pic_reg_publish(r, "up", r->addr);
    /* replay: take the list first, a failure re-queues into it */
    size_t n = r->n_pending;
    r->n_pending = 0;
    for (size_t i = 0; i < n; i++) {
        char key[PIC_KEY_HEX + 1];
        memcpy(key, r->pending[i], sizeof(key));
        pic_reg_send_evict(r, key);
    }
    r->resync_pos = 0;
    r->resyncing = 1;
    r->resyncs++;
    event_add(r->resync_ev, &now);
}

/* --- connection --- */

static void pic_reg_connect(pic_registry *r);
static void pic_reg_up(pic_registry *r);
static void pic_reg_on_auth(redisAsyncContext *ac, void *reply, void *priv);

static void
pic_reg_set_state(pic_registry *r, pic_reg_state st)
{
    r->state = st;
    r->state_since_ms = pic_now_ns() / 1000000;
}

/* Arm the reconnect timer with the current backoff, then grow it. */
static void
pic_reg_schedule_retry(pic_registry *r)
{
    struct timeval tv;
    int            ms = r->backoff_ms, jitter;

    if (r->closing) {
        return;
    }
    jitter = ms / 4 > 0 ? (int) (random() % (ms / 2 + 1)) - ms / 4 : 0;
    ms += jitter;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    pic_reg_set_state(r, PIC_REG_DOWN);
    event_add(r->retry, &tv);
    r->backoff_ms = r->backoff_ms * 2 > PIC_REG_BACKOFF_MAX_MS ? PIC_REG_BACKOFF_MAX_MS
                                                                : r->backoff_ms * 2;
}

static void
pic_reg_on_connect(const redisAsyncContext *ac, int status)
{
    pic_registry *r = ac->data;

    if (r == NULL) {
        return;
    }
    if (status != REDIS_OK) {
        /* hiredis frees the context after this callback */
        if (r->connect_failures++ == 0 || r->connects > 0) {
            pic_reg_log(r, "cannot connect to %s:%d: %s (retrying)", r->ip, r->port,
                        ac->errstr);
        }
        r->ac = NULL;
        r->inflight = 0;
        pic_reg_schedule_retry(r);
        return;
    }
    /* first AUTH (or PING: a server that wants a password answers NOAUTH);
     * the rest waits for the answer (still CONNECTING: the watchdog drops a
     * silent server) */
    int rc;
    if (r->password[0] == '\0') {
        rc = redisAsyncCommand((redisAsyncContext *) ac, pic_reg_on_auth, NULL, "PING");
    } else if (r->user[0] != '\0') {
        rc = redisAsyncCommand((redisAsyncContext *) ac, pic_reg_on_auth, NULL,
                               "AUTH %s %s", r->user, r->password);
    } else {
        rc = redisAsyncCommand((redisAsyncContext *) ac, pic_reg_on_auth, NULL,
                               "AUTH %s", r->password);
    }
    if (rc != REDIS_OK) {
        pic_reg_drop(r, "cannot send the first command");
    }
}

/* The connection may be used now: register. */
static void
pic_reg_up(pic_registry *r)
{
    r->connects++;
    r->backoff_ms = PIC_REG_BACKOFF_MIN_MS;
    r->err_logged = 0;
    pic_reg_set_state(r, PIC_REG_UP);
    pic_reg_log(r, "connected to %s%s%d; registering as %s with %zu segments",
                r->unix_path[0] ? r->unix_path : r->ip, r->unix_path[0] ? "" : ":",
                r->unix_path[0] ? 0 : r->port, r->id, r->segs.n);
    pic_reg_register(r);
}

/* Redis' answer to the first command (AUTH, or PING without a password). */
static void
pic_reg_on_auth(redisAsyncContext *ac, void *reply, void *priv)
{
    pic_registry *r = ac->data;
    redisReply   *rep = reply;

    (void) priv;
    if (r == NULL || rep == NULL || r->ac != ac || r->state != PIC_REG_CONNECTING) {
        return;                     /* the connection is going away */
    }
    if (rep->type != REDIS_REPLY_ERROR) {
        r->auth_logged = 0;
        pic_reg_up(r);
        return;
    }
    r->auth_failures++;
    if (!r->auth_logged) {
        r->auth_logged = 1;
        if (r->password[0] != '\0') {
            pic_reg_log(r, "Redis refused the credentials (%s); serving without the "
                        "registry, retrying", rep->str ? rep->str : "error");
        } else {
            pic_reg_log(r, "Redis wants a password (%s): start the engine with "
                        "--redis-password-file; serving without the registry, retrying",
                        rep->str ? rep->str : "error");
        }
    }
    /* not registered: drop it quietly (freed after this callback) */
    ac->data = NULL;
    r->ac = NULL;
    r->inflight = 0;
    redisAsyncFree(ac);
    pic_reg_schedule_retry(r);
}

static void
pic_reg_on_disconnect(const redisAsyncContext *ac, int status)
{
    pic_registry *r = ac->data;

    if (r == NULL) {
        return;
    }
    /* hiredis frees the context after this callback */
    r->ac = NULL;
    r->inflight = 0;
    r->resyncing = 0;
    if (r->closing) {
        return;
    }
    r->disconnects++;
    pic_reg_log(r, "connection lost (%s); retrying", status == REDIS_OK ? "closed"
                : (ac->errstr[0] ? ac->errstr : "error"));
    pic_reg_schedule_retry(r);
}

/* Drop the connection now (stall or failure) and schedule a retry. */
static void
pic_reg_drop(pic_registry *r, const char *why)
{
    redisAsyncContext *ac = r->ac;

    pic_reg_log(r, "%s; reconnecting", why);
    if (ac == NULL) {
        pic_reg_schedule_retry(r);
        return;
    }
    if (r->state == PIC_REG_UP) {
        /* the disconnect callback runs inside redisAsyncFree and retries */
        redisAsyncFree(ac);
    } else {
        /* a pending connect: no callback will come */
        ac->data = NULL;
        r->ac = NULL;
        redisAsyncFree(ac);
        r->inflight = 0;
        pic_reg_schedule_retry(r);
    }
}

static void
pic_reg_connect(pic_registry *r)
{
    redisAsyncContext *ac;

    ac = r->unix_path[0] ? redisAsyncConnectUnix(r->unix_path)
                         : redisAsyncConnect(r->ip, r->port);
    if (ac == NULL) {
        r->connect_failures++;
        pic_reg_schedule_retry(r);
        return;
    }
    if (ac->err) {
        if (r->connect_failures++ == 0) {
            pic_reg_log(r, "cannot connect: %s (retrying)", ac->errstr);
        }
        redisAsyncFree(ac);
        pic_reg_schedule_retry(r);
        return;
    }
    ac->data = r;
    if (redisLibeventAttach(ac, r->base) != REDIS_OK) {
        redisAsyncFree(ac);
        r->connect_failures++;
        pic_reg_schedule_retry(r);
        return;
    }
    redisAsyncSetConnectCallback(ac, pic_reg_on_connect);
    redisAsyncSetDisconnectCallback(ac, pic_reg_on_disconnect);
    r->ac = ac;
    r->inflight = 0;
    pic_reg_set_state(r, PIC_REG_CONNECTING);
}

static void
pic_reg_on_retry(evutil_socket_t fd, short what, void *arg)
{
    pic_registry *r = arg;

    (void) fd;
    (void) what;

    if (!r->closing && r->ac == NULL) {
        pic_reg_connect(r);
    }
}

/* Heartbeat and watchdog. */
static void
pic_reg_on_tick(evutil_socket_t fd, short what, void *arg)
{
    pic_registry *r = arg;
    int64_t       now = pic_now_ns() / 1000000;

    (void) fd;
    (void) what;

    if (r->closing) {
        return;
    }
    if (r->state == PIC_REG_CONNECTING && now - r->state_since_ms > r->o.timeout_ms) {
        r->connect_failures++;
        pic_reg_drop(r, "connect timed out");
        return;
    }
    if (r->state != PIC_REG_UP) {
        return;
    }
    if (r->inflight > 0 && now - r->last_progress_ms > r->o.timeout_ms) {
        r->stalls++;
        pic_reg_drop(r, "replies stalled");
        return;
    }
    pic_reg_heartbeat(r);
}

/* --- address --- */

static int
pic_reg_parse_addr(pic_registry *r, const char *s, char *err, size_t errlen)
{
    const char      *colon;
    char             host[256];
    char            *end;
    long             port;
    struct addrinfo  hints, *res = NULL;
    int              rc;

    if (strncmp(s, "unix:", 5) == 0) {
        if (strlen(s + 5) == 0 || strlen(s + 5) >= sizeof(r->unix_path)) {
            snprintf(err, errlen, "%s: bad unix socket path in '%s'", __func__, s);
            return -1;
        }
        snprintf(r->unix_path, sizeof(r->unix_path), "%s", s + 5);
        return 0;
    }
    if (s[0] == '[') {              /* [v6]:port */
        const char *rb = strchr(s, ']');
        if (rb == NULL || rb[1] != ':' || (size_t) (rb - s - 1) >= sizeof(host)) {
            snprintf(err, errlen, "%s: bad address '%s' (want IP:PORT)", __func__, s);
            return -1;
        }
        memcpy(host, s + 1, (size_t) (rb - s - 1));
        host[rb - s - 1] = '\0';
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL || (size_t) (colon - s) >= sizeof(host) || colon == s) {
            snprintf(err, errlen, "%s: bad address '%s' (want IP:PORT)", __func__, s);
            return -1;
        }
        memcpy(host, s, (size_t) (colon - s));
        host[colon - s] = '\0';
    }
    port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || port < 1 || port > 65535) {
        snprintf(err, errlen, "%s: bad port in '%s'", __func__, s);
        return -1;
    }
    /* hiredis resolves names with a blocking call: resolve once, now */
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || res == NULL) {
        snprintf(err, errlen, "%s: cannot resolve '%s': %s", __func__, host,
                 gai_strerror(rc));
        return -1;
    }
    if (res->ai_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *) res->ai_addr)->sin_addr, r->ip,
                  sizeof(r->ip));
    } else {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *) res->ai_addr)->sin6_addr, r->ip,
                  sizeof(r->ip));
    }
    freeaddrinfo(res);
    r->port = (int) port;
    return 0;
}

/* The first line of path (1-512 bytes) as the AUTH
 * password; 0, or -1 with err (which never holds the password). */
static int
pic_reg_read_password(pic_registry *r, const char *path, char *err, size_t errlen)
{
    char   buf[sizeof(r->password) + 2];
    FILE  *f = fopen(path, "r");
    size_t n;

    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot open %s: %s", __func__, path, strerror(errno));
        return -1;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    n = strlen(buf);
    if (n == 0 || n >= sizeof(r->password)) {
        memset(buf, 0, sizeof(buf));
        snprintf(err, errlen, "%s: %s must hold a password of 1 to 512 bytes on its "
                 "first line", __func__, path);
        return -1;
    }
    memcpy(r->password, buf, n + 1);
    memset(buf, 0, sizeof(buf));
    return 0;
}

/* --- public --- */

static void pic_reg_on_posts(evutil_socket_t fd, short what, void *arg);

pic_registry *
pic_registry_init(struct event_base *base, const pic_registry_opts *o, char *err,
                  size_t errlen)
{
    pic_registry *r = calloc(1, sizeof(*r));

    if (r == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        return NULL;
    }
    r->o = *o;
    r->base = base;
    r->o.heartbeat_ms = o->heartbeat_ms > 0 ? o->heartbeat_ms : 1000;
    r->o.ttl_s = o->ttl_s > 0 ? o->ttl_s : 5;
    r->o.seg_ttl_s = o->seg_ttl_s > 0 ? o->seg_ttl_s : 3600;
    r->o.timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 2000;
    snprintf(r->id, sizeof(r->id), "%s", o->id ? o->id : "engine");
    snprintf(r->addr, sizeof(r->addr), "%s", o->addr ? o->addr : "");
    snprintf(r->version, sizeof(r->version), "%s", o->version ? o->version : "");
    if (strpbrk(r->id, " \t\r\n") != NULL || r->id[0] == '\0') {
        snprintf(err, errlen, "%s: engine id '%s' must be non-empty without blanks",
                 __func__, r->id);
        free(r);
        return NULL;
    }
    if (o->redis == NULL || pic_reg_parse_addr(r, o->redis, err, errlen) != 0) {
        if (o->redis == NULL) {
            snprintf(err, errlen, "%s: no Redis address", __func__);
        }
        free(r);
        return NULL;
    }
    snprintf(r->user, sizeof(r->user), "%s", o->user ? o->user : "");
    if (strpbrk(r->user, " \t\r\n") != NULL
        || (o->user != NULL && (o->user[0] == '\0' || strlen(o->user) >= sizeof(r->user)))) {
        snprintf(err, errlen, "%s: bad Redis user name", __func__);
        free(r);
        return NULL;
    }
    if (o->password_file != NULL && pic_reg_read_password(r, o->password_file, err,
                                                          errlen) != 0) {
        free(r);
        return NULL;
    }
    if (r->user[0] != '\0' && r->password[0] == '\0') {
        snprintf(err, errlen, "%s: a Redis user needs --redis-password-file", __func__);
        free(r);
        return NULL;
    }
    r->o.user = r->o.password_file = NULL;
    r->started = time(NULL);
    r->backoff_ms = PIC_REG_BACKOFF_MIN_MS;
    r->pending = calloc(PIC_REG_PENDING_MAX, sizeof(*r->pending));
    r->hb = event_new(base, -1, EV_PERSIST, pic_reg_on_tick, r);
    r->retry = evtimer_new(base, pic_reg_on_retry, r);
    r->resync_ev = evtimer_new(base, pic_reg_resync_slice, r);
    r->post_ev = event_new(base, -1, 0, pic_reg_on_posts, r);
    pthread_mutex_init(&r->post_mu, NULL);
    if (r->pending == NULL || r->hb == NULL || r->retry == NULL || r->resync_ev == NULL
        || r->post_ev == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        pic_registry_free(r);
        return NULL;
    }
    struct timeval tv = { r->o.heartbeat_ms / 1000, (r->o.heartbeat_ms % 1000) * 1000 };
    event_add(r->hb, &tv);
    pic_reg_connect(r);
    return r;
}

/* Blocking goodbye on a short-lived sync connection (the loop is over). */
static void
pic_reg_goodbye(pic_registry *r)
{
    struct timeval tv = { 0, PIC_REG_GOODBYE_MS * 1000 };
    redisContext  *c;
    redisReply    *rep;
    size_t         n = 0;

    if (r->state != PIC_REG_UP) {
        return;                 /* Redis is away: the TTL will clean up */
    }
    c = r->unix_path[0] ? redisConnectUnixWithTimeout(r->unix_path, tv)
                        : redisConnectWithTimeout(r->ip, r->port, tv);
    if (c == NULL || c->err) {
        if (c) {
            redisFree(c);
        }
        return;
    }
    redisSetTimeout(c, tv);
    if (r->password[0] != '\0') {
        if (r->user[0] != '\0') {
            redisAppendCommand(c, "AUTH %s %s", r->user, r->password);
        } else {
            redisAppendCommand(c, "AUTH %s", r->password);
        }
        n++;
    }
    redisAppendCommand(c, "DEL pic:eng:%s", r->id);
    n++;
    for (size_t i = 0; i < r->segs.cap; i++) {
        const char *k = r->segs.keys[i];
        if (k[0] != '\0' && k[0] != '-') {
            redisAppendCommand(c, "SREM pic:seg:%s %s", k, r->id);
            n++;
        }
    }
    {
        char msg[160];
        int  len = snprintf(msg, sizeof(msg), "down %s", r->id);
        redisAppendCommand(c, "PUBLISH pic:events %b", msg, (size_t) len);
    }
    n++;
    while (n-- > 0 && redisGetReply(c, (void **) &rep) == REDIS_OK) {
        freeReplyObject(rep);
    }
    redisFree(c);
}

void
pic_registry_free(pic_registry *r)
{
    if (r == NULL) {
        return;
    }
    r->closing = 1;
    pic_reg_goodbye(r);
    if (r->ac != NULL) {
        redisAsyncContext *ac = r->ac;
        r->ac = NULL;
        ac->data = NULL;
        redisAsyncFree(ac);
    }
    if (r->hb) {
        event_free(r->hb);
    }
    if (r->retry) {
        event_free(r->retry);
    }
    if (r->resync_ev) {
        event_free(r->resync_ev);
    }
    if (r->post_ev) {
        event_free(r->post_ev);
        pthread_mutex_destroy(&r->post_mu);
    }
    free(r->posts);
    free(r->segs.keys);
    free(r->pending);
    memset(r->password, 0, sizeof(r->password));
    free(r);
}

int
pic_registry_seg_add(pic_registry *r, const char *key)
{
    if (!pic_key_valid(key)) {
        return -1;
    }
    if (pic_keyset_add(&r->segs, key) < 0) {
        return -1;
    }
    r->seg_adds++;
    if (r->state == PIC_REG_UP) {
        pic_reg_seg_send_add(r, key);
        pic_reg_publish(r, "add", key);
    }
    return 0;
}

int
pic_registry_seg_evict(pic_registry *r, const char *key)
{
    if (!pic_key_valid(key) || !pic_keyset_del(&r->segs, key)) {
        return -1;
    }
    r->seg_evicts++;
    if (r->state == PIC_REG_UP) {
        pic_reg_send_evict(r, key);
        pic_reg_publish(r, "evict", key);
    } else {
        pic_reg_requeue_evict(r, key);
    }
    return 0;
}

#define PIC_REG_POST_REC (1 + PIC_KEY_HEX)

static int
pic_registry_post(pic_registry *r, char op, const char *key)
{
    int rc = 0;

    if (!pic_key_valid(key)) {
        return -1;
    }
    pthread_mutex_lock(&r->post_mu);
    if (pic_grow((void **) &r->posts, &r->cap_posts, r->n_posts + 1, PIC_REG_POST_REC) != 0) {
        rc = -1;
    }
    if (rc == 0) {
        char *rec = r->posts + r->n_posts++ * PIC_REG_POST_REC;
        rec[0] = op;
        memcpy(rec + 1, key, PIC_KEY_HEX);
    }
    pthread_mutex_unlock(&r->post_mu);
    if (rc == 0) {
        event_active(r->post_ev, EV_READ, 0);
    }
    return rc;
}

int
pic_registry_post_add(pic_registry *r, const char *key)
{
    return pic_registry_post(r, 'a', key);
}

int
pic_registry_post_evict(pic_registry *r, const char *key)
{
    return pic_registry_post(r, 'e', key);
}

/* Loop side: apply the posted changes in order. */
static void
pic_reg_on_posts(evutil_socket_t fd, short what, void *arg)
{
    pic_registry *r = arg;
    char         *recs;
    size_t        n;
    char          key[PIC_KEY_HEX + 1];

    (void) fd;
    (void) what;

    pthread_mutex_lock(&r->post_mu);
    recs = r->posts;
    n = r->n_posts;
    r->posts = NULL;
    r->n_posts = r->cap_posts = 0;
    pthread_mutex_unlock(&r->post_mu);
    for (size_t i = 0; i < n; i++) {
        const char *rec = recs + i * PIC_REG_POST_REC;
        memcpy(key, rec + 1, PIC_KEY_HEX);
        key[PIC_KEY_HEX] = '\0';
        if (rec[0] == 'a') {
            pic_registry_seg_add(r, key);
        } else {
            pic_registry_seg_evict(r, key);
        }
    }
    free(recs);
}

size_t
pic_registry_seg_count(const pic_registry *r)
{
    return r->segs.n;
}

int
pic_registry_connected(const pic_registry *r)
{
    return r != NULL && r->state == PIC_REG_UP;
}

cJSON *
pic_registry_status(const pic_registry *r)
{
    static const char *names[] = { "down", "connecting", "up" };
    cJSON             *o = cJSON_CreateObject();
    char               where[320];
    int64_t            now = pic_now_ns() / 1000000;

    if (r->unix_path[0]) {
        snprintf(where, sizeof(where), "unix:%s", r->unix_path);
    } else {
        snprintf(where, sizeof(where), "%s:%d", r->ip, r->port);
    }
    cJSON_AddBoolToObject(o, "enabled", 1);
    cJSON_AddStringToObject(o, "redis", where);
    cJSON_AddStringToObject(o, "state", names[r->state]);
    cJSON_AddBoolToObject(o, "connected", r->state == PIC_REG_UP);
    cJSON_AddNumberToObject(o, "state_for_ms", (double) (now - r->state_since_ms));
    if (r->last_ok_ms > 0) {
        cJSON_AddNumberToObject(o, "last_heartbeat_ok_ms_ago", (double) (now - r->last_ok_ms));
    } else {
        cJSON_AddNullToObject(o, "last_heartbeat_ok_ms_ago");
    }
    cJSON_AddNumberToObject(o, "backoff_ms", r->backoff_ms);
    cJSON_AddNumberToObject(o, "heartbeat_ms", r->o.heartbeat_ms);
    cJSON_AddNumberToObject(o, "ttl_s", r->o.ttl_s);
    cJSON_AddNumberToObject(o, "connects", (double) r->connects);
    cJSON_AddNumberToObject(o, "connect_failures", (double) r->connect_failures);
    cJSON_AddBoolToObject(o, "auth", r->password[0] != '\0');
    cJSON_AddNumberToObject(o, "auth_failures", (double) r->auth_failures);
    cJSON_AddNumberToObject(o, "disconnects", (double) r->disconnects);
    cJSON_AddNumberToObject(o, "stalls", (double) r->stalls);
    cJSON_AddNumberToObject(o, "heartbeats", (double) r->heartbeats);
    cJSON_AddNumberToObject(o, "heartbeats_ok", (double) r->heartbeats_ok);
    cJSON_AddNumberToObject(o, "reply_errors", (double) r->replies_error);
    cJSON_AddNumberToObject(o, "resyncs", (double) r->resyncs);
    cJSON_AddNumberToObject(o, "inflight", r->inflight);
    cJSON_AddNumberToObject(o, "segments", (double) r->segs.n);
    cJSON_AddNumberToObject(o, "segment_adds", (double) r->seg_adds);
    cJSON_AddNumberToObject(o, "segment_evicts", (double) r->seg_evicts);
    cJSON_AddNumberToObject(o, "pending_evictions", (double) r->n_pending);
    cJSON_AddNumberToObject(o, "evictions_dropped", (double) r->evictions_dropped);
    return o;
}
