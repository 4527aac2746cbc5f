/*
 * budget.h — one byte budget for the engine's caches:
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
 * Cost-aware (pic_cache_budget_set_cost, `--cache-evict cost`): instead of
 * recency, GreedyDual-Size (gds.h) over both parts with one clock: a PIC
 * entry costs its tokens to rebuild, a tree leaf the tokens a request
 * would recompute without it, each times the model's FLOPs per token; the
 * item of smallest clock + cost / bytes goes first, whichever part holds
 * it.
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
    int               cost_aware;       /* GreedyDual-Size, not LRU */
    double            clock;            /* its shared L (atomic: gds.h) */
} pic_cache_budget;

/* Bytes the parts hold now (pool + tree). */
size_t pic_cache_budget_used(const pic_cache_budget *b);

/* Evict least recently used items (or, cost-aware, those of smallest
 * priority) across the parts until they fit the budget (b NULL: nothing). */
void pic_cache_budget_enforce(pic_cache_budget *b);

/* Switch b's parts (set before) to cost-aware eviction with per_token
 * FLOPs per token (the model's; > 0) and one clock; 0: LRU. */
void pic_cache_budget_set_cost(pic_cache_budget *b, double per_token);

#endif /* PIC_BUDGET_H */
