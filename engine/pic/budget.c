/*
 * budget.c — one byte budget across the prefix tree and the pool
 * (budget.h).
 */
#include <math.h>

#include "budget.h"
#include "gds.h"

size_t
pic_cache_budget_used(const pic_cache_budget *b)
{
    pic_pool_stats   ps;
    pic_prefix_stats ts;
    size_t           used = 0;

    if (b->pool != NULL) {
        pic_pool_stats_get(b->pool, &ps);
        used += ps.bytes;
    }
    if (b->tree != NULL) {
        pic_prefix_cache_stats_get(b->tree, &ts);
        used += ts.bytes;
    }
    return used;
}

void
pic_cache_budget_enforce(pic_cache_budget *b)
{
    if (b == NULL) {
        return;
    }
    while (b->cost_aware && pic_cache_budget_used(b) > b->budget) {
        double hp = b->pool != NULL ? pic_pool_victim_priority(b->pool) : INFINITY;
        double ht = b->tree != NULL ? pic_prefix_cache_victim_priority(b->tree) : INFINITY;
        size_t freed;

        if (hp == INFINITY && ht == INFINITY) {
            return;
        }
        /* the part evicting raises the shared clock to the victim's H */
        freed = hp <= ht ? pic_pool_evict_one(b->pool) : pic_prefix_cache_evict_one(b->tree);
        if (freed == 0) {
            return;
        }
        __atomic_add_fetch(&b->cross_evictions, 1, __ATOMIC_RELAXED);
    }
    while (!b->cost_aware && pic_cache_budget_used(b) > b->budget) {
        int64_t tp = b->pool != NULL ? pic_pool_oldest(b->pool) : 0;
        int64_t tt = b->tree != NULL ? pic_prefix_cache_oldest(b->tree) : 0;
        size_t  freed;

        if (tp == 0 && tt == 0) {
            break;
        }
        if (tt == 0 || (tp != 0 && tp <= tt)) {
            freed = pic_pool_evict_one(b->pool);
        } else {
            freed = pic_prefix_cache_evict_one(b->tree);
        }
        if (freed == 0) {
            break;
        }
        __atomic_add_fetch(&b->cross_evictions, 1, __ATOMIC_RELAXED);
    }
}

int
pic_cache_budget_admit(pic_cache_budget *b, int tokens, double reuses, size_t bytes)
{
    double h, hp, ht;

    if (b == NULL || !b->cost_aware || bytes == 0
        || pic_cache_budget_used(b) + bytes <= b->budget) {
        return 1;
    }
    if (bytes > b->budget) {
        __atomic_add_fetch(&b->refused, 1, __ATOMIC_RELAXED);
        return 0;
    }
    h = pic_gds_clock(&b->clock) + (double) tokens * b->per_token * reuses / (double) bytes;
    hp = b->pool != NULL ? pic_pool_victim_priority(b->pool) : INFINITY;
    ht = b->tree != NULL ? pic_prefix_cache_victim_priority(b->tree) : INFINITY;
    if (h > fmin(hp, ht)) {
        return 1;
    }
    __atomic_add_fetch(&b->refused, 1, __ATOMIC_RELAXED);
    return 0;
}

void
pic_cache_budget_set_cost(pic_cache_budget *b, double per_token)
{
    b->cost_aware = per_token > 0.0;
    b->per_token = per_token > 0.0 ? per_token : 0.0;
    if (b->pool != NULL) {
        pic_pool_set_cost(b->pool, per_token, &b->clock);
    }
    if (b->tree != NULL) {
        pic_prefix_cache_set_cost(b->tree, per_token, &b->clock);
    }
}
