/*
 * test_route.c — the gateway's picks (core/plan/pic_route.h) on hand-made
 * candidates whose right answer is computed here from the rule: an exact
 * prefix byte weighs `weight`, the load bound excludes an engine however
 * much it holds, a first-sighting byte weighs half of a held one, ties go
 * to the least load and then to the first segment's rendezvous home, and
 * the misses without Redis go to their homes unless those are overloaded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <xxhash.h>

#include "pic_route.h"

static const unsigned char KEY[PIC_ROUTE_KEY_LEN] = "0123456789abcdef";

static void
cands(pic_route_cand *c, size_t n)
{
    memset(c, 0, n * sizeof(*c));
    for (size_t i = 0; i < n; i++) {
        c[i].seed = 1000 + 77 * i;
    }
}

/* The exact prefix weighs `weight` times a PIC hit byte; INDEX_ONLY counts
 * the bytes held inside the prefix once instead. */
static void
test_exact_prefix_weight(void **state)
{
    pic_route_cand c[2];

    cands(c, 2);
    c[0].exact = 1000;
    c[0].held = 1000;
    c[1].local = 2500;
    assert_int_equal(pic_route_pick(c, 2, 100, 3, 1, KEY), 0);     /* 3000 > 2500 */
    assert_int_equal(pic_route_pick(c, 2, 100, 2, 1, KEY), 1);     /* 2000 < 2500 */
    assert_int_equal(pic_route_pick(c, 2, 100, PIC_ROUTE_INDEX_ONLY, 1, KEY), 1);
    c[0].held = 2600;
    assert_int_equal(pic_route_pick(c, 2, 100, PIC_ROUTE_INDEX_ONLY, 1, KEY), 0);
}

/* An engine past the least load + imbalance is not a candidate, whatever
 * it holds; at the bound it still is. */
static void
test_load_bound(void **state)
{
    pic_route_cand c[3];

    cands(c, 3);
    c[0].local = 10000;
    c[0].load = 9;
    c[1].local = 10;
    c[1].load = 2;
    c[2].load = 1;
    assert_int_equal(pic_route_pick(c, 3, 7, 1, 1, KEY), 1);       /* 9 - 1 > 7 */
    assert_int_equal(pic_route_pick(c, 3, 8, 1, 1, KEY), 0);       /* 9 - 1 = 8 */
    /* no overflow at a huge bound */
    assert_int_equal(pic_route_pick(c, 3, UINT64_MAX, 1, 1, KEY), 0);
}

/* A byte the engine saw first counts half, a home byte a quarter; seen = 0
 * leaves the seen bytes out. */
static void
test_seen_hint(void **state)
{
    pic_route_cand c[2];

    cands(c, 2);
    c[0].seen = 1000;           /* 500 */
    c[1].local = 400;
    assert_int_equal(pic_route_pick(c, 2, 10, 1, 1, KEY), 0);
    assert_int_equal(pic_route_pick(c, 2, 10, 1, 0, KEY), 1);
    c[1].local = 600;
    assert_int_equal(pic_route_pick(c, 2, 10, 1, 1, KEY), 1);
    /* home bytes (no Redis) count a quarter: a guess, below a seen byte */
    c[0].home = 400;
    assert_int_equal(pic_route_pick(c, 2, 10, 1, 1, KEY), 0);      /* 600 = 600: */
    c[1].home = 1000;                                               /* ... then the tie */
    assert_int_equal(pic_route_pick(c, 2, 10, 1, 1, KEY), 1);      /* 850 > 600 */
    c[1].home = 0;
    c[1].seen = 200;
    c[0].home = 0;
    c[1].home = 1600;                                               /* 600+100+400 > 500 */
    assert_int_equal(pic_route_pick(c, 2, 10, 1, 1, KEY), 1);
}

/* Equal scores: the least load, then the first key's rendezvous home. */
static void
test_ties(void **state)
{
    pic_route_cand c[4];
    size_t         home;

    cands(c, 4);
    for (int i = 0; i < 4; i++) {
        c[i].local = 50;
        c[i].load = 3;
    }
    c[2].load = 2;
    assert_int_equal(pic_route_pick(c, 4, 10, 1, 1, KEY), 2);
    c[2].load = 3;
    home = pic_route_home(KEY, c, 4);
    assert_int_equal(pic_route_pick(c, 4, 10, 1, 1, KEY), home);
    assert_int_equal(pic_route_pick(c, 4, 10, 1, 1, NULL), 0);
}

/* The home is the highest seeded hash (the oracle: xxh3 here), the same
 * engine in any order of the candidates, and it stays when another engine
 * leaves (rendezvous hashing). */
static void
test_home_is_rendezvous(void **state)
{
    pic_route_cand c[5], r[5], d[4];
    size_t         h, want = 0, j = 0;
    uint64_t       best = 0;

    cands(c, 5);
    for (size_t i = 0; i < 5; i++) {
        uint64_t w = XXH3_64bits_withSeed(KEY, PIC_ROUTE_KEY_LEN, c[i].seed);
        if (i == 0 || w > best) {
            best = w;
            want = i;
        }
    }
    h = pic_route_home(KEY, c, 5);
    assert_int_equal(h, want);
    for (size_t i = 0; i < 5; i++) {
        r[i] = c[4 - i];
    }
    assert_int_equal(r[pic_route_home(KEY, r, 5)].seed, c[h].seed);
    for (size_t i = 0; i < 5; i++) {
        if (i != (h + 1) % 5) {
            d[j++] = c[i];
        }
    }
    assert_int_equal(d[pic_route_home(KEY, d, 4)].seed, c[h].seed);
}

/* Misses go to their homes while those are within the bound; an
 * overloaded home's miss goes by LPT to the least loaded engine. */
static void
test_misses_pinned_home_unless_overloaded(void **state)
{
    pic_route_cand c[3];
    uint64_t       w[3] = { 300, 200, 100 };
    size_t         home[3] = { 0, 0, 1 };
    uint32_t       a[3];
    pic_error      err;

    cands(c, 3);
    assert_int_equal(pic_route_misses(c, 3, w, home, 3, 2, 64, a, &err), 0);
    assert_int_equal(a[0], 0);
    assert_int_equal(a[1], 0);
    assert_int_equal(a[2], 1);
    c[0].load = 5;              /* past 0 + 2: free */
    assert_int_equal(pic_route_misses(c, 3, w, home, 3, 2, 64, a, &err), 0);
    /* heaviest first: 300 to the first of the empty engines 1 and 2, 200 to
     * the still empty 2, and the pinned 100 takes its turn last on 1 */
    assert_int_equal(a[0], 1);
    assert_int_equal(a[1], 2);
    assert_int_equal(a[2], 1);
    assert_int_equal(pic_route_misses(c, 3, w, home, 0, 2, 64, a, &err), 0);
    assert_int_equal(pic_route_misses(c, 0, w, home, 3, 2, 64, a, &err), -1);
}

/* Affinity (foreign replicas): the longest exact prefix wins whatever the
 * segment bytes elsewhere, then the most segment bytes, then the least
 * load; the load bound still excludes the best holder. */
static void
test_affinity_longest_prefix_then_segments(void **state)
{
    pic_route_cand c[3];

    cands(c, 3);
    c[0].exact = 900;
    c[1].exact = 1000;
    c[2].local = 50000;
    assert_int_equal(pic_route_affinity(c, 3, 4, 0, KEY), 1);
    c[0].exact = 1000;
    c[0].local = 10;
    assert_int_equal(pic_route_affinity(c, 3, 4, 0, KEY), 0);    /* segment bytes */
    c[1].local = 10;
    c[1].load = 1;
    c[0].load = 2;
    assert_int_equal(pic_route_affinity(c, 3, 4, 0, KEY), 1);    /* then load */
    c[1].load = 7;                                              /* 7 - 0 > 4 */
    assert_int_equal(pic_route_affinity(c, 3, 4, 0, KEY), 0);
    c[0].load = 6;                                              /* both out */
    assert_int_equal(pic_route_affinity(c, 3, 4, 0, KEY), 2);
    assert_int_equal(pic_route_affinity(c, 3, UINT64_MAX, 0, KEY), 0);
}

/* A recorded prefix shorter than the floor is no prefix: a few shared
 * template bytes do not pull every cold session onto one replica. */
static void
test_affinity_floor(void **state)
{
    pic_route_cand c[2];

    cands(c, 2);
    c[0].exact = 40;
    c[1].load = 0;
    c[0].load = 1;
    assert_int_equal(pic_route_affinity(c, 2, 4, 0, KEY), 0);     /* 40 > 0 */
    assert_int_equal(pic_route_affinity(c, 2, 4, 64, KEY), 1);    /* then load */
    c[0].exact = 64;
    assert_int_equal(pic_route_affinity(c, 2, 4, 64, KEY), 0);    /* at the floor */
    c[1].exact = 63;
    c[1].local = 1000;
    assert_int_equal(pic_route_affinity(c, 2, 4, 64, KEY), 0);
}

/* Cold requests (nothing recorded, equal load) go to the rendezvous home
 * of their first segment: equal first segments land together, others
 * spread; without a key, the first candidate. */
static void
test_affinity_cold_goes_home(void **state)
{
    pic_route_cand c[4];
    unsigned char  key[PIC_ROUTE_KEY_LEN];
    size_t         hits[4] = { 0, 0, 0, 0 };
    int            k;

    cands(c, 4);
    for (k = 0; k < 400; k++) {
        memset(key, 0, sizeof(key));
        memcpy(key, &k, sizeof(k));
        assert_int_equal(pic_route_affinity(c, 4, 4, 0, key), pic_route_home(key, c, 4));
        hits[pic_route_affinity(c, 4, 4, 0, key)]++;
    }
    for (k = 0; k < 4; k++) {
        assert_true(hits[k] > 50);      /* 100 expected each */
    }
    assert_int_equal(pic_route_affinity(c, 4, 4, 0, NULL), 0);
    c[0].load = 1;                      /* the least load before the home */
    assert_int_not_equal(pic_route_affinity(c, 4, 4, 0, NULL), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_prefix_weight),
        cmocka_unit_test(test_load_bound),
        cmocka_unit_test(test_seen_hint),
        cmocka_unit_test(test_ties),
        cmocka_unit_test(test_home_is_rendezvous),
        cmocka_unit_test(test_misses_pinned_home_unless_overloaded),
        cmocka_unit_test(test_affinity_longest_prefix_then_segments),
        cmocka_unit_test(test_affinity_cold_goes_home),
        cmocka_unit_test(test_affinity_floor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
