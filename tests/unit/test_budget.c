/*
 * test_budget.c — one byte budget over the prefix tree and the pool
 * (engine/pic/budget.h) with cost-aware eviction (GreedyDual-Size,
 * engine/pic/gds.h) on the tiny-qwen35 fixture: under a tight budget a
 * cheap-to-recompute big item (a short PIC entry: its T and S for a few
 * tokens) goes before an expensive small one (a tree block with its
 * checkpoint, which saves a request tens of tokens) although it was used
 * more recently, where LRU takes the older tree block; the clock ages
 * items, so the expensive one goes too once enough cheap ones have; the
 * budget holds after every enforce; admission by value turns away what
 * would only displace items worth more per byte.  And the heap itself against a sorted
 * oracle.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "budget.h"
#include "fixture_models.h"
#include "forward.h"
#include "gds.h"
#include "prefix_cache.h"
#include "state.h"

/* The heap against a brute-force minimum over random pushes, removals
 * and key changes. */
static void
test_heap_keeps_the_minimum(void **unused)
{
    enum { N = 300 };
    pic_gds_node node[N];
    pic_gds_heap h = { 0 };
    unsigned     x = 99;

    memset(node, 0, sizeof(node));
    for (int step = 0; step < 20000; step++) {
        x = x * 1103515245u + 12345u;
        pic_gds_node *g = &node[(x >> 8) % N];
        int           op = (int) ((x >> 20) % 3);

        if (op == 0 && g->idx == 0) {
            g->key = (double) ((x >> 4) % 1000);
            assert_int_equal(pic_gds_push(&h, g), 0);
        } else if (op == 1) {
            pic_gds_remove(&h, g);
        } else if (g->idx != 0) {
            g->key = (double) ((x >> 3) % 1000);
            pic_gds_update(&h, g);
        }
        double best = INFINITY;
        size_t in = 0;
        for (int i = 0; i < N; i++) {
            if (node[i].idx != 0) {
                best = fmin(best, node[i].key);
                in++;
                assert_ptr_equal(h.a[node[i].idx - 1], &node[i]);
            }
        }
        assert_int_equal(in, h.n);
        if (in > 0) {
            assert_true(pic_gds_min(&h)->key == best);
        } else {
            assert_null(pic_gds_min(&h));
        }
    }
    pic_gds_free(&h);
    double L = 1.0;
    pic_gds_raise(&L, 0.5);
    assert_true(pic_gds_clock(&L) == 1.0);
    pic_gds_raise(&L, 2.5);
    assert_true(pic_gds_clock(&L) == 2.5);
}

typedef struct {
    pic_model        *m;
    pic_pool         *pool;
    pic_prefix_cache *tree;
    pic_cache_budget  b;
    pic_entry        *cheap;            /* a short seam entry */
    pic_state        *s;
} fx;

static int
fx_init(fx *f, int cost)
{
    char err[256];

    memset(f, 0, sizeof(*f));
    f->m = fixture_load("tiny-qwen35");
    if (f->m == NULL) {
        return -1;
    }
    pic_prefix_opts po = { .budget = 1u << 30, .ckpt = { .block = 16, .m = 2 } };
    f->tree = pic_prefix_cache_init(f->m, &po, err, sizeof(err));
    f->pool = pic_pool_init(1u << 30, f->m->fingerprint, err, sizeof(err));
    f->s = pic_state_init(&f->m->cfg, 0, err, sizeof(err));
    assert_non_null(f->tree);
    assert_non_null(f->pool);
    f->b.pool = f->pool;
    f->b.tree = f->tree;
    f->b.budget = 1u << 30;
    if (cost) {
        pic_cache_budget_set_cost(&f->b, pic_forward_flops(&f->m->cfg, 64, 0,
                                                           PIC_LOGITS_NONE) / 64.0);
    }
    /* the expensive small item: a 64-token prompt in the tree (blocks of
     * 16, checkpoints at 32 and 64: its leaf saves 32 tokens) */
    int *p = fixture_tokens(64, f->m->cfg.vocab, 5);
    assert_int_equal(pic_prefix_cache_prefill(f->tree, NULL, f->s, p, 64, NULL, NULL, err,
                                              sizeof(err)), 0);
    free(p);
    /* the cheap big one: a seam entry of 24 tokens (T and S for 24 tokens) */
    pic_entry_opts o = { .w = 4, .dtype = PIC_DTYPE_F32 };
    int           *q = fixture_tokens(24, f->m->cfg.vocab, 6);
    assert_int_equal(pic_entry_build(f->m, NULL, q, 24, &o, &f->cheap, NULL, err,
                                     sizeof(err)), 0);
    assert_non_null(f->cheap);
    free(q);
    return 0;
}

static void
fx_free(fx *f)
{
    pic_entry_unref(f->cheap);
    pic_state_free(f->s);
    pic_pool_free(f->pool);
    pic_prefix_cache_free(f->tree);
    pic_model_free(f->m);
}

/* Put the cheap entry under key k (more recent than the tree), then
 * tighten the budget by one byte: which part gives something up? */
static void
tighten(fx *f, uint64_t *tree_ev, int *entry_kept)
{
    pic_prefix_stats ts;

    assert_int_equal(pic_pool_put(f->pool, "0123456789abcdef0123456789abcdef", 100, f->cheap), 0);
    f->b.budget = pic_cache_budget_used(&f->b) - 1;
    pic_cache_budget_enforce(&f->b);
    assert_true(pic_cache_budget_used(&f->b) <= f->b.budget);
    pic_prefix_cache_stats_get(f->tree, &ts);
    *tree_ev = ts.evictions;
    *entry_kept = pic_pool_contains(f->pool, "0123456789abcdef0123456789abcdef", 100);
    assert_true(pic_prefix_cache_check(f->tree));
}

static void
test_cheap_big_item_goes_before_expensive_small_one(void **unused)
{
    fx       f;
    uint64_t tree_ev;
    int      kept;

    /* LRU: the tree was used first, so its least recent leaf goes */
    if (fx_init(&f, 0) != 0) {
        skip();
    }
    print_message("  cheap entry: %d tokens in %zu bytes; tree: %zu bytes\n",
                  f.cheap->n_tokens, f.cheap->bytes, pic_cache_budget_used(&f.b));
    tighten(&f, &tree_ev, &kept);
    print_message("  lru:  tree evictions %llu, entry kept %d\n",
                  (unsigned long long) tree_ev, kept);
    assert_true(tree_ev >= 1 && kept);
    fx_free(&f);

    /* cost-aware: the entry is cheaper per byte to recompute, it goes
     * although it is the more recent; the tree is untouched */
    assert_int_equal(fx_init(&f, 1), 0);
    assert_true(pic_pool_victim_priority(f.pool) == INFINITY);
    tighten(&f, &tree_ev, &kept);
    print_message("  cost: tree evictions %llu, entry kept %d\n",
                  (unsigned long long) tree_ev, kept);
    assert_true(tree_ev == 0 && !kept);

    /* aging: cheap entries keep coming, each evicting the previous one and
     * raising the clock by its cost per byte, until the clock passes the
     * tree leaf's priority and the leaf goes (no item stays forever) */
    int puts = 0;
    for (; puts < 200 && tree_ev == 0; puts++) {
        char key[40];
        pic_prefix_stats ts;
        snprintf(key, sizeof(key), "%032x", 0x5000 + puts);
        assert_int_equal(pic_pool_put(f.pool, key, 100, f.cheap), 0);
        pic_cache_budget_enforce(&f.b);
        assert_true(pic_cache_budget_used(&f.b) <= f.b.budget);
        pic_prefix_cache_stats_get(f.tree, &ts);
        tree_ev = ts.evictions;
    }
    print_message("  aging: the tree's leaf went after %d more cheap entries (clock %.3g)\n",
                  puts, f.b.clock);
    assert_true(tree_ev >= 1 && puts >= 2);
    assert_true(pic_prefix_cache_check(f.tree));
    fx_free(&f);
}

/* Admission by value: an entry that fits is kept; one that would have to
 * displace something is kept only when its saving per byte beats the
 * lowest priority held (the tree leaf that saves tens of tokens in a few
 * bytes outbids a short seam entry's T and S, unless that entry is
 * predicted to be reused often enough); LRU admits everything. */
static void
test_admission_by_value(void **unused)
{
    fx  f;
    int saves;

    if (fx_init(&f, 1) != 0) {
        skip();
    }
    saves = f.cheap->i1 - f.cheap->i0;
    f.b.budget = pic_cache_budget_used(&f.b) + f.cheap->bytes;
    assert_true(pic_cache_budget_admit(&f.b, saves, 1.0, f.cheap->bytes));
    f.b.budget = pic_cache_budget_used(&f.b) + f.cheap->bytes - 1;
    assert_false(pic_cache_budget_admit(&f.b, saves, 1.0, f.cheap->bytes));
    assert_int_equal(f.b.refused, 1);
    /* worth it when reused often enough, and a zero saving never is */
    assert_true(pic_cache_budget_admit(&f.b, saves, 1e6, f.cheap->bytes));
    assert_false(pic_cache_budget_admit(&f.b, 0, 1.0, f.cheap->bytes));
    /* an entry larger than the whole budget never gets in */
    f.b.budget = f.cheap->bytes - 1;
    assert_false(pic_cache_budget_admit(&f.b, saves, 1e6, f.cheap->bytes));
    fx_free(&f);

    assert_int_equal(fx_init(&f, 0), 0);
    f.b.budget = 1;
    assert_true(pic_cache_budget_admit(&f.b, 1, 1.0, f.cheap->bytes));
    assert_true(pic_cache_budget_admit(NULL, 1, 1.0, 1));
    fx_free(&f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heap_keeps_the_minimum),
        cmocka_unit_test(test_cheap_big_item_goes_before_expensive_small_one),
        cmocka_unit_test(test_admission_by_value),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
