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
 * Admission (pic_cache_budget_admit) uses the same priorities: an entry
 * that would only displace items worth more per byte than it is not kept,
 * so short segments get in while memory allows and leave first.
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
    double            per_token;        /* FLOPs per token (cost-aware) */
    unsigned long     refused;          /* entries pic_cache_budget_admit turned away (atomic) */
} pic_cache_budget;

/* Bytes the parts hold now (pool + tree). */
size_t pic_cache_budget_used(const pic_cache_budget *b);

/* Evict least recently used items (or, cost-aware, those of smallest
 * priority) across the parts until they fit the budget (b NULL: nothing). */
void pic_cache_budget_enforce(pic_cache_budget *b);

/* Admission by value: 1 if an entry of `bytes` that saves `tokens` of
 * recompute at each of `reuses` predicted reuses earns its place: it fits
 * beside what is held, or (cost-aware) its priority clock + saving / bytes
 * beats the lowest priority it would displace; LRU and b NULL: always 1.
 * A refusal is counted in b->refused. */
int pic_cache_budget_admit(pic_cache_budget *b, int tokens, double reuses, size_t bytes);

/* Switch b's parts (set before) to cost-aware eviction with per_token
 * FLOPs per token (the model's; > 0) and one clock; 0: LRU. */
void pic_cache_budget_set_cost(pic_cache_budget *b, double per_token);

#endif /* PIC_BUDGET_H */
