/*
 * budget.c — one byte budget across the prefix tree and the pool
 * (budget.h).
 */
#include "budget.h"

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
    while (pic_cache_budget_used(b) > b->budget) {
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
