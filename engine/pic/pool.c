/*
 * pool.c — the public pool of segment entries (pool.h) over one LRU map:
 * chained hash on xxh64(key, len), a recency list, a byte budget;
 * evicted items are unlinked under the lock and announced / freed after it.
 */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "gds.h"
#include "pic_time.h"
#include "pool.h"

/* --- the LRU map --- */

typedef struct pic_lru_item {
    struct pic_lru_item *hnext;         /* hash chain, then the eviction list */
    struct pic_lru_item *prev, *next;   /* recency: head = most recent */
    uint64_t             h, len;
    size_t               bytes;
    int64_t              used;          /* pic_now_ns of the last put or get */
    double               cost;          /* FLOPs to rebuild it (cost-aware eviction) */
    pic_gds_node         gn;            /* its place in the cost heap */
    void                *val;           /* pic_entry * */
    char                 key[PIC_POOL_KEY_MAX + 1];
} pic_lru_item;

typedef struct {
    pthread_mutex_t    mu;
    pic_lru_item     **buckets;         /* (nb) */
    size_t             nb;
    pic_lru_item      *head, *tail;
    pic_pool_stats     st;
    uint64_t           fingerprint;
    pic_pool_evict_fn  cb;
    void              *user;
    void             (*free_val)(void *);
    /* cost-aware eviction (gds.h): on when per_token > 0 */
    double             per_token;       /* FLOPs per token of the model */
    double             own_clock;
    double            *clock;           /* the shared L (own_clock or the budget's) */
    pic_gds_heap       heap;
} pic_lru;

static uint64_t
pic_lru_hash(const char *key, uint64_t len)
{
    return XXH64(key, strlen(key), len);
}

static int
pic_lru_init(pic_lru *L, size_t budget, uint64_t fp, void (*free_val)(void *))
{
    memset(L, 0, sizeof(*L));
    L->nb = 256;
    L->buckets = calloc(L->nb, sizeof(*L->buckets));
    if (L->buckets == NULL) {
        return -1;
    }
    pthread_mutex_init(&L->mu, NULL);
    L->st.budget = budget;
    L->fingerprint = fp;
    L->free_val = free_val;
    L->clock = &L->own_clock;
    return 0;
}

static void
pic_lru_item_free(pic_lru *L, pic_lru_item *it)
{
    L->free_val(it->val);
    free(it);
}

static void
pic_lru_destroy(pic_lru *L)
{
    for (pic_lru_item *it = L->head, *nx; it != NULL; it = nx) {
        nx = it->next;
        pic_lru_item_free(L, it);
    }
    free(L->buckets);
    pic_gds_free(&L->heap);
    pthread_mutex_destroy(&L->mu);
}

static pic_lru_item *
pic_lru_find_locked(pic_lru *L, const char *key, uint64_t len, uint64_t h)
{
    for (pic_lru_item *it = L->buckets[h & (L->nb - 1)]; it != NULL; it = it->hnext) {
        if (it->h == h && it->len == len && !strcmp(it->key, key)) {
            return it;
        }
    }
    return NULL;
}

static void
pic_lru_list_unlink(pic_lru *L, pic_lru_item *it)
{
    if (it->prev) it->prev->next = it->next; else L->head = it->next;
    if (it->next) it->next->prev = it->prev; else L->tail = it->prev;
    it->prev = it->next = NULL;
}

static void
pic_lru_list_push(pic_lru *L, pic_lru_item *it)
{
    it->prev = NULL;
    it->next = L->head;
    if (L->head) L->head->prev = it; else L->tail = it;
    L->head = it;
}

/* Cost-aware: it was just stored or used: H = L + cost / bytes. */
static void
pic_lru_prioritize_locked(pic_lru *L, pic_lru_item *it)
{
    if (L->per_token <= 0.0) {
        return;
    }
    it->gn.key = pic_gds_clock(L->clock) + it->cost / (double) it->bytes;
    if (it->gn.idx != 0) {
        pic_gds_update(&L->heap, &it->gn);
    } else {
        pic_gds_push(&L->heap, &it->gn);
    }
}

/* The next victim: the least recently used item, or under cost-aware
 * eviction the smallest H (an item the heap lacks, after ENOMEM, goes by
 * recency). */
static pic_lru_item *
pic_lru_victim_locked(pic_lru *L)
{
    pic_gds_node *g = L->per_token > 0.0 ? pic_gds_min(&L->heap) : NULL;

    if (g == NULL || L->heap.n < L->st.items) {
        return L->tail;
    }
    return (pic_lru_item *) ((char *) g - offsetof(pic_lru_item, gn));
}

/* Unlink it from hash and list (stats adjusted). */
static void
pic_lru_detach_locked(pic_lru *L, pic_lru_item *it)
{
    pic_lru_item **pp = &L->buckets[it->h & (L->nb - 1)];

    while (*pp != it) {
        pp = &(*pp)->hnext;
    }
    *pp = it->hnext;
    it->hnext = NULL;
    pic_lru_list_unlink(L, it);
    pic_gds_remove(&L->heap, &it->gn);
    L->st.bytes -= it->bytes;
    L->st.items--;
}

/* Double the buckets when the load passes 1 (failure just keeps chains long). */
static void
pic_lru_grow_locked(pic_lru *L)
{
    if (L->st.items < L->nb) {
        return;
    }
    size_t         nb = L->nb * 2;
    pic_lru_item **b = calloc(nb, sizeof(*b));
    if (b == NULL) {
        return;
    }
    for (size_t i = 0; i < L->nb; i++) {
        for (pic_lru_item *it = L->buckets[i], *nx; it != NULL; it = nx) {
            nx = it->hnext;
            it->hnext = b[it->h & (nb - 1)];
            b[it->h & (nb - 1)] = it;
        }
    }
    free(L->buckets);
    L->buckets = b;
    L->nb = nb;
}

/* Evict from the tail until bytes + extra fits the budget; the victims go
 * onto *dead (linked by hnext). */
static void
pic_lru_shrink_locked(pic_lru *L, size_t extra, pic_lru_item **dead)
{
    while (L->tail != NULL && L->st.bytes + extra > L->st.budget) {
        pic_lru_item *it = pic_lru_victim_locked(L);
        if (L->per_token > 0.0 && it->gn.idx != 0) {
            pic_gds_raise(L->clock, it->gn.key);
        }
        pic_lru_detach_locked(L, it);
        L->st.evictions++;
        it->hnext = *dead;
        *dead = it;
    }
}

/* After the lock: announce and free the victims. */
static void
pic_lru_bury(pic_lru *L, pic_lru_item *dead, pic_pool_evict_fn cb, void *user)
{
    for (pic_lru_item *it = dead, *nx; it != NULL; it = nx) {
        nx = it->hnext;
        if (cb != NULL) {
            cb(user, it->key, it->len, it->bytes);
        }
        pic_lru_item_free(L, it);
    }
}

/* Insert val under (key, len): 0, or -1 when it cannot fit (val untouched). */
static int
pic_lru_put(pic_lru *L, const char *key, uint64_t len, void *val, size_t bytes, int tokens)
{
    pic_lru_item     *it, *old, *dead = NULL;
    pic_pool_evict_fn cb;
    void             *user;
    size_t            kl = key != NULL ? strlen(key) : 0;

    if (kl == 0 || kl > PIC_POOL_KEY_MAX) {
        pthread_mutex_lock(&L->mu);
        L->st.rejected++;
        pthread_mutex_unlock(&L->mu);
        return -1;
    }
    it = calloc(1, sizeof(*it));
    if (it == NULL) {
        return -1;
    }
    memcpy(it->key, key, kl + 1);
    it->len = len;
    it->h = pic_lru_hash(key, len);
    it->val = val;
    it->bytes = bytes + sizeof(*it);
    it->used = pic_now_ns();

    pthread_mutex_lock(&L->mu);
    if (it->bytes > L->st.budget) {
        L->st.rejected++;
        pthread_mutex_unlock(&L->mu);
        free(it);
        return -1;
    }
    old = pic_lru_find_locked(L, key, len, it->h);
    if (old != NULL) {                  /* replaced: freed, not announced */
        pic_lru_detach_locked(L, old);
    }
    pic_lru_shrink_locked(L, it->bytes, &dead);
    pic_lru_grow_locked(L);
    it->hnext = L->buckets[it->h & (L->nb - 1)];
    L->buckets[it->h & (L->nb - 1)] = it;
    pic_lru_list_push(L, it);
    it->cost = (double) tokens * L->per_token;
    pic_lru_prioritize_locked(L, it);
    L->st.bytes += it->bytes;
    L->st.items++;
    L->st.insertions++;
    cb = L->cb;
    user = L->user;
    pthread_mutex_unlock(&L->mu);
    if (old != NULL) {
        pic_lru_item_free(L, old);
    }
    pic_lru_bury(L, dead, cb, user);
    return 0;
}

static void
pic_lru_set_budget(pic_lru *L, size_t budget)
{
    pic_lru_item     *dead = NULL;
    pic_pool_evict_fn cb;
    void             *user;

    pthread_mutex_lock(&L->mu);
    L->st.budget = budget;
    pic_lru_shrink_locked(L, 0, &dead);
    cb = L->cb;
    user = L->user;
    pthread_mutex_unlock(&L->mu);
    pic_lru_bury(L, dead, cb, user);
}

static int
pic_lru_remove(pic_lru *L, const char *key, uint64_t len)
{
    pic_lru_item     *it;
    pic_pool_evict_fn cb;
    void             *user;

    if (key == NULL) {
        return 0;
    }
    pthread_mutex_lock(&L->mu);
    it = pic_lru_find_locked(L, key, len, pic_lru_hash(key, len));
    if (it != NULL) {
        pic_lru_detach_locked(L, it);
        L->st.evictions++;
    }
    cb = L->cb;
    user = L->user;
    pthread_mutex_unlock(&L->mu);
    pic_lru_bury(L, it, cb, user);
    return it != NULL;
}

/* --- public pool --- */

struct pic_pool {
    pic_lru lru;
};

static void
pic_pool_free_entry(void *v)
{
    pic_entry_unref(v);
}

pic_pool *
pic_pool_init(size_t budget, uint64_t fingerprint, char *err, size_t errlen)
{
    pic_pool *p = calloc(1, sizeof(*p));

    if (p == NULL || pic_lru_init(&p->lru, budget, fingerprint, pic_pool_free_entry) != 0) {
        free(p);
        snprintf(err, errlen, "%s: out of memory", __func__);
        return NULL;
    }
    return p;
}

void
pic_pool_free(pic_pool *p)
{
    if (p != NULL) {
        pic_lru_destroy(&p->lru);
        free(p);
    }
}

void
pic_pool_set_evict_cb(pic_pool *p, pic_pool_evict_fn fn, void *user)
{
    pthread_mutex_lock(&p->lru.mu);
    p->lru.cb = fn;
    p->lru.user = user;
    pthread_mutex_unlock(&p->lru.mu);
}

int
pic_pool_put(pic_pool *p, const char *key, uint64_t len, pic_entry *e)
{
    if (e == NULL || e->fingerprint != p->lru.fingerprint) {
        pthread_mutex_lock(&p->lru.mu);
        p->lru.st.rejected++;
        pthread_mutex_unlock(&p->lru.mu);
        return -1;
    }
    pic_entry_ref(e);
    if (pic_lru_put(&p->lru, key, len, e, e->bytes, e->n_tokens) != 0) {
        pic_entry_unref(e);
        return -1;
    }
    return 0;
}

pic_entry *
pic_pool_get(pic_pool *p, const char *key, uint64_t len)
{
    pic_lru_item *it;
    pic_entry    *e = NULL;

    if (key == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&p->lru.mu);
    it = pic_lru_find_locked(&p->lru, key, len, pic_lru_hash(key, len));
    if (it != NULL && ((pic_entry *) it->val)->fingerprint == p->lru.fingerprint) {
        e = pic_entry_ref(it->val);
        it->used = pic_now_ns();
        pic_lru_list_unlink(&p->lru, it);
        pic_lru_list_push(&p->lru, it);
        pic_lru_prioritize_locked(&p->lru, it);
        p->lru.st.hits++;
    } else {
        p->lru.st.misses++;
    }
    pthread_mutex_unlock(&p->lru.mu);
    return e;
}

int
pic_pool_contains(pic_pool *p, const char *key, uint64_t len)
{
    int found;

    if (key == NULL) {
        return 0;
    }
    pthread_mutex_lock(&p->lru.mu);
    found = pic_lru_find_locked(&p->lru, key, len, pic_lru_hash(key, len)) != NULL;
    pthread_mutex_unlock(&p->lru.mu);
    return found;
}

int
pic_pool_remove(pic_pool *p, const char *key, uint64_t len)
{
    return pic_lru_remove(&p->lru, key, len);
}

void
pic_pool_set_budget(pic_pool *p, size_t budget)
{
    pic_lru_set_budget(&p->lru, budget);
}

void
pic_pool_stats_get(pic_pool *p, pic_pool_stats *st)
{
    pthread_mutex_lock(&p->lru.mu);
    *st = p->lru.st;
    pthread_mutex_unlock(&p->lru.mu);
}

int64_t
pic_pool_oldest(pic_pool *p)
{
    int64_t t;

    pthread_mutex_lock(&p->lru.mu);
    t = p->lru.tail != NULL ? p->lru.tail->used : 0;
    pthread_mutex_unlock(&p->lru.mu);
    return t;
}

size_t
pic_pool_evict_one(pic_pool *p)
{
    pic_lru          *L = &p->lru;
    pic_lru_item     *it;
    pic_pool_evict_fn cb;
    void             *user;
    size_t            freed = 0;

    pthread_mutex_lock(&L->mu);
    it = pic_lru_victim_locked(L);
    if (it != NULL) {
        if (L->per_token > 0.0 && it->gn.idx != 0) {
            pic_gds_raise(L->clock, it->gn.key);
        }
        pic_lru_detach_locked(L, it);
        L->st.evictions++;
        freed = it->bytes;
    }
    cb = L->cb;
    user = L->user;
    pthread_mutex_unlock(&L->mu);
    pic_lru_bury(L, it, cb, user);
    return freed;
}

void
pic_pool_set_cost(pic_pool *p, double per_token, double *clock)
{
    pic_lru *L = &p->lru;

    pthread_mutex_lock(&L->mu);
    L->per_token = per_token > 0.0 ? per_token : 0.0;
    L->clock = clock != NULL ? clock : &L->own_clock;
    for (pic_lru_item *it = L->tail; it != NULL; it = it->prev) {
        it->cost = L->per_token * (double) ((pic_entry *) it->val)->n_tokens;
        if (L->per_token > 0.0) {
            pic_lru_prioritize_locked(L, it);
        } else {
            pic_gds_remove(&L->heap, &it->gn);
        }
    }
    pthread_mutex_unlock(&L->mu);
}

double
pic_pool_victim_priority(pic_pool *p)
{
    pic_lru_item *it;
    double        h;

    pthread_mutex_lock(&p->lru.mu);
    it = pic_lru_victim_locked(&p->lru);
    h = it == NULL ? INFINITY : it->gn.idx != 0 ? it->gn.key : -INFINITY;
    pthread_mutex_unlock(&p->lru.mu);
    return h;
}
