/*
 * test_lpt.c — LPT against brute force: on every small instance the
 * assignment is the greedy one (checked by replaying the rule), its
 * makespan is within Graham's 4/3 - 1/(3m) of the exhaustive optimum
 * (equal initial loads) and within 3/2 - 1/(2m) with unequal initial loads
 * (Lee 1991), and it is optimal where LPT is known to be (n <= m).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pic_lpt.h"

static uint64_t rng_state = 42;

static uint64_t
rnd(uint64_t mod)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (rng_state >> 33) % mod;
}

/* Exhaustive optimum over all m^n assignments. */
static uint64_t
brute_opt(const uint64_t *w, size_t n, const uint64_t *l0, size_t m)
{
    uint32_t a[16] = { 0 };
    uint64_t best = UINT64_MAX;
    for (;;) {
        uint64_t span = pic_lpt_makespan(w, n, l0, m, a);
        if (span < best) {
            best = span;
        }
        size_t i = 0;
        while (i < n && ++a[i] == m) {
            a[i++] = 0;
        }
        if (i == n) {
            return best;
        }
    }
}

/* Replays the rule and checks a and loads against it: heaviest (then
 * lowest index) job to the least loaded (then lowest index) worker, or to
 * its pinned worker (pin NULL: none). */
static void
check_replay(const uint64_t *w, size_t n, const uint64_t *l0, size_t m,
             const uint32_t *pin, const uint32_t *a, const uint64_t *loads)
{
    uint64_t cur[8];
    int      done[16] = { 0 };
    memcpy(cur, l0, m * sizeof(uint64_t));
    for (size_t step = 0; step < n; step++) {
        size_t j = SIZE_MAX;
        for (size_t i = 0; i < n; i++) {
            if (!done[i] && (j == SIZE_MAX || w[i] > w[j])) {
                j = i;
            }
        }
        size_t best = 0;
        if (pin && pin[j] != PIC_LPT_FREE) {
            best = pin[j];
        } else {
            for (size_t k = 1; k < m; k++) {
                if (cur[k] < cur[best]) {
                    best = k;
                }
            }
        }
        assert_int_equal(a[j], best);
        cur[best] += w[j];
        done[j] = 1;
    }
    assert_memory_equal(cur, loads, m * sizeof(uint64_t));
}

static void
run_instances(int with_loads)
{
    for (int t = 0; t < 400; t++) {
        size_t   m = 1 + rnd(4), n = rnd(8);
        uint64_t w[16], l0[8], loads[8];
        uint32_t a[16];
        for (size_t i = 0; i < n; i++) {
            w[i] = 1 + rnd(t % 2 ? 10 : 1000);
        }
        for (size_t k = 0; k < m; k++) {
            l0[k] = with_loads ? rnd(500) : 0;
        }
        assert_int_equal(pic_lpt_assign(w, n, l0, m, NULL, a, loads, NULL), 0);
        check_replay(w, n, l0, m, NULL, a, loads);

        uint64_t span = pic_lpt_makespan(w, n, l0, m, a);
        uint64_t opt = brute_opt(w, n, l0, m);
        assert_true(span >= opt);
        /* span <= (4/3 - 1/(3m)) opt  <=>  3m span <= (4m - 1) opt */
        if (!with_loads) {
            assert_true(3 * m * span <= (4 * m - 1) * opt);
            if (n <= m) {
                assert_int_equal(span, opt);
            }
        } else {
            /* span <= (3/2 - 1/(2m)) opt  <=>  2m span <= (3m - 1) opt */
            assert_true(2 * m * span <= (3 * m - 1) * opt || m == 1);
        }
    }
}

static void
test_lpt_vs_brute_force_equal_loads(void **state)
{
    (void) state;
    run_instances(0);
}

static void
test_lpt_vs_brute_force_initial_loads(void **state)
{
    (void) state;
    run_instances(1);
}

/* The classic instance where LPT is not optimal: 3,3,2,2,2 on 2 workers
 * gives 7 against 6, exactly Graham's bound 7/6 for m = 2. */
static void
test_lpt_graham_tight_instance(void **state)
{
    (void) state;
    uint64_t w[5] = { 3, 3, 2, 2, 2 };
    uint32_t a[5];
    uint64_t loads[2];
    assert_int_equal(pic_lpt_assign(w, 5, NULL, 2, NULL, a, loads, NULL), 0);
    assert_int_equal(pic_lpt_makespan(w, 5, NULL, 2, a), 7);
    assert_int_equal(brute_opt(w, 5, NULL, 2), 6);
    assert_int_equal(a[0], 0);
    assert_int_equal(a[1], 1);
}

/* A busy worker receives nothing while idle ones can absorb the work. */
static void
test_lpt_avoids_loaded_worker(void **state)
{
    (void) state;
    uint64_t w[4] = { 10, 10, 10, 10 }, l0[3] = { 1000, 0, 0 };
    uint32_t a[4];
    assert_int_equal(pic_lpt_assign(w, 4, l0, 3, NULL, a, NULL, NULL), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_not_equal(a[i], 0);
    }
}

/* Pinned jobs (the gateway's rendezvous homes) take their turn in weight
 * order on their own worker; the free ones see the load they added. */
static void
test_lpt_pinned_jobs_take_their_turn(void **state)
{
    (void) state;
    for (int t = 0; t < 400; t++) {
        size_t   m = 1 + rnd(4), n = rnd(10);
        uint64_t w[16], l0[8], loads[8];
        uint32_t a[16], pin[16];
        for (size_t i = 0; i < n; i++) {
            w[i] = 1 + rnd(100);
            pin[i] = rnd(2) ? (uint32_t) rnd(m) : PIC_LPT_FREE;
        }
        for (size_t k = 0; k < m; k++) {
            l0[k] = rnd(200);
        }
        assert_int_equal(pic_lpt_assign(w, n, l0, m, pin, a, loads, NULL), 0);
        check_replay(w, n, l0, m, pin, a, loads);
    }
}

static void
test_lpt_edge_cases(void **state)
{
    (void) state;
    pic_error err;
    uint32_t  a[2];
    uint64_t  loads[2] = { 7, 7 }, w[2] = { 1, UINT64_MAX };
    assert_int_equal(pic_lpt_assign(NULL, 0, NULL, 2, NULL, a, loads, NULL), 0);
    assert_int_equal(loads[0], 0);
    assert_int_equal(pic_lpt_assign(w, 2, NULL, 0, NULL, a, NULL, &err), -1);  /* no worker */
    assert_int_equal(err.status, 400);
    uint64_t l0 = 5;
    assert_int_equal(pic_lpt_assign(w, 2, &l0, 1, NULL, a, NULL, &err), -1);   /* overflow */
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lpt_vs_brute_force_equal_loads),
        cmocka_unit_test(test_lpt_vs_brute_force_initial_loads),
        cmocka_unit_test(test_lpt_graham_tight_instance),
        cmocka_unit_test(test_lpt_avoids_loaded_worker),
        cmocka_unit_test(test_lpt_pinned_jobs_take_their_turn),
        cmocka_unit_test(test_lpt_edge_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
