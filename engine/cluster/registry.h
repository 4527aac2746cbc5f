/*
 * registry.h — the engine's entry in the Redis index (DESIGN.md §4.2), kept
 * with async hiredis on the server's libevent loop: nothing here blocks the
 * loop, and the engine serves on whatever Redis does.
 *
 * Layout built here (the gateway reads the same keys):
 *
 *   pic:eng:{id}   HASH  addr        "host:port" of the engine's HTTP server
 *                        load        (running + queued) / capacity, decimal
 *                        capacity    batch slots (workers × max_batch)
 *                        running     sequences computing now
 *                        queued      requests waiting
 *                        free_bytes  cache bytes the engine can still take
 *                        started     unix seconds of the engine's start
 *                        version     engine version
 *                        model       model fingerprint, 16 hex
 *                        heartbeat   unix milliseconds of this write
 *                  EXPIRE ttl_s, rewritten by every heartbeat (heartbeat_ms);
 *                  an engine whose hash has expired is dead.
 *   pic:engines    SET   every engine id that registered (discovery); an id
 *                        without a live pic:eng:{id} is ignored.
 *   pic:seg:{key}  SET   ids of the engines holding segment entry {key}
 *                        (32 hex chars, DESIGN.md §4.1); SADD on insert,
 *                        SREM on evict; EXPIRE seg_ttl_s refreshed on every
 *                        add / touch and on re-registration.
 *   pic:events     PUBLISH channel: "up {id} {addr}", "down {id}",
 *                  "add {id} {key}", "evict {id} {key}" — lets gateways
 *                  keep their shared-memory index warm.
 *
 * Threads: everything runs on the loop thread except the pic_registry_post_*
 * calls, which any thread may make.
 *
 * Credentials.  With password_file every connection starts with AUTH
 * [user] password (nothing else is sent before Redis accepts it); a refusal
 * is logged once (Redis' reason, never the password), counted
 * (auth_failures) and retried with the backoff below; a server that wants a
 * password the engine lacks answers NOAUTH, logged once.  The password is
 * read at init and never appears in /status or a log line.
 *
 * Failure handling.  Redis unreachable → retry with exponential backoff
 * (100 ms doubling to 5 s, ±25 % jitter); a connection whose replies stall
 * past timeout_ms is dropped and re-made (hiredis 0.14 has no command
 * timeouts: the heartbeat timer is the deadline).  The live segment set is
 * kept locally, so when Redis returns the engine re-registers its hash and
 * every live segment (in slices of 1024 per loop turn), and replays the
 * evictions it could not send.  A clean shutdown deletes pic:eng:{id} and
 * the engine's segment memberships with one short blocking exchange (the
 * loop has stopped by then).
 */
#ifndef PIC_REGISTRY_H
#define PIC_REGISTRY_H

#include <stdint.h>

#include <event2/event.h>

#include <cjson/cJSON.h>

#include "pic_key.h"

typedef struct pic_registry pic_registry;

/* Gauges written by each heartbeat. */
typedef struct {
    int      capacity;
    int      running;
    int      queued;
    uint64_t free_bytes;
} pic_registry_load;

typedef struct {
    const char *redis;          /* "IP:PORT" or "unix:/path" */
    const char *id;             /* engine id */
    const char *addr;           /* advertised host:port */
    const char *version;
    const char *user;           /* AUTH user (Redis ACL), or NULL */
    const char *password_file;  /* AUTH password: the file's first line; NULL: none */
    uint64_t    model_fp;       /* model fingerprint */
    int         heartbeat_ms;   /* default 1000 */
    int         ttl_s;          /* pic:eng:{id} expiry; default 5 */
    int         seg_ttl_s;      /* pic:seg:{key} expiry; default 3600 */
    int         timeout_ms;     /* stalled replies → reconnect; default 2000 */
    void      (*load)(void *arg, pic_registry_load *out);   /* loop thread */
    void       *load_arg;
} pic_registry_opts;

/* Start registering (connects asynchronously; Redis may be down).  NULL +
 * err on a bad address or allocation failure. */
pic_registry *pic_registry_init(struct event_base *base, const pic_registry_opts *o,
                                char *err, size_t errlen);

/* Say goodbye (best effort, bounded wait) and free everything (NULL ok). */
void pic_registry_free(pic_registry *r);

/* The engine now holds segment key (32 hex); 0, or -1 on a malformed key
 * or out of memory.  Re-adding refreshes the expiry. */
int pic_registry_seg_add(pic_registry *r, const char *key);

/* The engine evicted key; 0, or -1 if it was not registered. */
int pic_registry_seg_evict(pic_registry *r, const char *key);

/* Thread-safe forms for worker threads (the pool's insert and eviction
 * callbacks): queue the change and wake the loop, which applies it with
 * pic_registry_seg_add / _evict.  0, or -1 on a malformed key or ENOMEM. */
int pic_registry_post_add(pic_registry *r, const char *key);
int pic_registry_post_evict(pic_registry *r, const char *key);

/* Segments currently registered locally. */
size_t pic_registry_seg_count(const pic_registry *r);

/* Registration health and counters as a JSON object (caller owns it). */
cJSON *pic_registry_status(const pic_registry *r);

/* 1 while a connection to Redis is up and answering. */
int pic_registry_connected(const pic_registry *r);

#endif /* PIC_REGISTRY_H */
