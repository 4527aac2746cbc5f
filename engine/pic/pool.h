/*
 * pool.h — the engine's public pool of segment entries (DESIGN.md §2.3).
 * (Session states live in the prefix tree, prefix_cache.h.)
 *
 * Public pool: segment entries (entry.h) shared by all requests, keyed by
 * the segment key of DESIGN §4.1 (32 hex chars) plus the segment's byte
 * length; every entry must carry the pool's model fingerprint.  get()
 * hands out a new reference, so an entry evicted while a request composes
 * it stays alive until that request drops it.
 *
 * A byte budget with LRU (or cost-aware, gds.h) eviction, counters (hits, misses,
 * insertions, evictions, rejects, bytes), and an eviction callback (for the
 * Redis index) called after the pool's lock is released, once per evicted
 * key, from the thread whose insert caused it.
 *
 * Thread safety: every call locks the pool's own mutex; any number of
 * worker threads may use one pool.  Callbacks must not block for long.
 */
#ifndef PIC_POOL_H
#define PIC_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "entry.h"

#define PIC_POOL_KEY_MAX 64         /* longest key accepted (DESIGN keys are 32 hex) */

typedef struct {
    uint64_t hits, misses;
    uint64_t insertions, evictions;
    uint64_t rejected;              /* puts refused: wrong model, too big, bad key */
    size_t   bytes, budget;
    size_t   items;
} pic_pool_stats;

/* Eviction announcement: key (NUL-terminated), its length tag, bytes freed. */
typedef void (*pic_pool_evict_fn)(void *user, const char *key, uint64_t len,
                                  size_t bytes);

/* --- public pool: segment entries --- */

typedef struct pic_pool pic_pool;

/* New pool of budget bytes for entries of the model with fingerprint;
 * NULL + err on OOM. */
pic_pool *pic_pool_init(size_t budget, uint64_t fingerprint, char *err,
                        size_t errlen);

/* Free the pool and drop its references (NULL is fine); no callbacks. */
void pic_pool_free(pic_pool *p);

/* Install the eviction callback (NULL: none). */
void pic_pool_set_evict_cb(pic_pool *p, pic_pool_evict_fn fn, void *user);

/* Store e under (key, len), taking one more reference; replaces an older
 * entry under the same key.  Evicts least recently used entries until the
 * budget holds.  -1 (counted as rejected) if e is for another model, is
 * larger than the budget, or the key is empty or too long. */
int pic_pool_put(pic_pool *p, const char *key, uint64_t len, pic_entry *e);

/* The entry under (key, len) as a new reference (pic_entry_unref it), or
 * NULL; a hit makes it most recently used.  An entry stored under the same
 * key with another length, or for another model, is a miss. */
pic_entry *pic_pool_get(pic_pool *p, const char *key, uint64_t len);

/* 1 if (key, len) is held (no counters, no LRU change). */
int pic_pool_contains(pic_pool *p, const char *key, uint64_t len);

/* Drop (key, len) if held (callback fired); returns 1 if it was. */
int pic_pool_remove(pic_pool *p, const char *key, uint64_t len);

/* Change the budget (evicting down to it). */
void pic_pool_set_budget(pic_pool *p, size_t budget);

/* Snapshot of the counters. */
void pic_pool_stats_get(pic_pool *p, pic_pool_stats *st);

/* When the least recently used entry was last put or got (pic_now_ns);
 * 0 when the pool is empty. */
int64_t pic_pool_oldest(pic_pool *p);

/* Evict the least recently used entry, or under cost-aware eviction the
 * one of smallest priority (callback fired); bytes freed, 0 when the pool
 * is empty. */
size_t pic_pool_evict_one(pic_pool *p);

/* Cost-aware eviction (gds.h) when per_token > 0 (the model's FLOPs per
 * token: an entry costs n_tokens·per_token to rebuild), over the shared
 * clock *clock (NULL: the pool's own); per_token 0: LRU again. */
void pic_pool_set_cost(pic_pool *p, double per_token, double *clock);

/* Under cost-aware eviction the priority H of the entry evict_one would
 * take; INFINITY when empty (-INFINITY for an entry the heap lost to OOM:
 * it goes first). */
double pic_pool_victim_priority(pic_pool *p);

#endif /* PIC_POOL_H */
