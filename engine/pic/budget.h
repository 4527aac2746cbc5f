/*
 * budget.h — one byte budget for the engine's caches (issue #10 item 4):
 * the prefix tree (blocks' KV, checkpoints, session ends) and the public
 * pool of PIC entries share it, and eviction goes across them by recency:
 * while their bytes together exceed the budget, whichever part's least
 * recently used item was used longer ago is evicted (a pool entry's
 * eviction is announced through the pool's callback: the Redis index).
 *
 * Each part keeps its own LRU and a budget of its own (set to the total,
 * so neither alone ever exceeds it); pic_cache_budget_enforce is called
 * after every insert into either.
 *
 * Thread safety: enforce takes each part's lock in turn, never both; any
 * thread may call it.  Concurrent inserts may overshoot until the next
 * enforce.
 */
#ifndef PIC_BUDGET_H
#define PIC_BUDGET_H

#include <stddef.h>

#include "pool.h"
#include "prefix_cache.h"

typedef struct {
    pic_pool         *pool;             /* NULL: none */
    pic_prefix_cache *tree;             /* NULL: none */
    size_t            budget;           /* bytes for both together */
    unsigned long     cross_evictions;  /* items evicted by enforce (atomic) */
} pic_cache_budget;

/* Bytes the parts hold now (pool + tree). */
size_t pic_cache_budget_used(const pic_cache_budget *b);

/* Evict least recently used items across the parts until they fit the
 * budget (b NULL: nothing). */
void pic_cache_budget_enforce(pic_cache_budget *b);

#endif /* PIC_BUDGET_H */
