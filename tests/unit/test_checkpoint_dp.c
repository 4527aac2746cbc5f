/*
 * test_checkpoint_dp.c — checkpoint placement (engine/pic/checkpoint_dp.h):
 * the DP against brute force over every subset on small random cases
 * (waste recomputed token by token from the raw depths), the live policy
 * (balanced before enough history, re-solved every N, exponential decay),
 * the fixed placements, and concurrent observers.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "checkpoint_dp.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t) (rng >> 32);
}

/* waste Σ w_i (d_i − c(d_i)) with c = deepest checkpoint ≤ d, straight from
 * the depth list */
static double
direct_waste(const int *d, const double *w, int nd, const int *pos, int cnt)
{
    double s = 0.0;
    for (int i = 0; i < nd; i++) {
        int c = 0;
        for (int k = 0; k < cnt; k++) {
            c = pos[k] <= d[i] && pos[k] > c ? pos[k] : c;
        }
        s += w[i] * (d[i] - c);
    }
    return s;
}

static void
test_dp_matches_brute_force(void **unused)
{
    int block = 8;

    for (int trial = 0; trial < 300; trial++) {
        int    B = 1 + (int) (rnd() % 10), m = 1 + (int) (rnd() % 4);
        int    n = B * block + (int) (rnd() % block);          /* entry length */
        int    nd = 1 + (int) (rnd() % 30), d[32];
        double w[32], mass[16] = { 0 }, mass_d[16] = { 0 };

        for (int i = 0; i < nd; i++) {
            d[i] = (int) (rnd() % (unsigned) (n + 1));
            w[i] = (trial % 3 == 0) ? 1.0 : (double) (rnd() % 1000) / 100.0;
            mass[d[i] / block] += w[i];
            mass_d[d[i] / block] += w[i] * d[i];
        }
        int    blk[16], cnt = 0;
        double got = pic_ckpt_solve(mass, mass_d, B, block, m, blk, &cnt);

        double best = INFINITY;
        for (unsigned mask = 0; mask < (1u << B); mask++) {
            if (__builtin_popcount(mask) > m) {
                continue;
            }
            int pos[16], c = 0;
            for (int i = 0; i < B; i++) {
                if (mask & (1u << i)) {
                    pos[c++] = (i + 1) * block;
                }
            }
            best = fmin(best, direct_waste(d, w, nd, pos, c));
        }
        int pos[16];
        for (int i = 0; i < cnt; i++) {
            pos[i] = blk[i] * block;
            assert_true(blk[i] >= 1 && blk[i] <= B);
            assert_true(i == 0 || blk[i] > blk[i - 1]);
        }
        assert_true(cnt <= m);
        assert_true(fabs(got - best) <= 1e-9 * fmax(1.0, best));
        assert_true(fabs(direct_waste(d, w, nd, pos, cnt) - best) <= 1e-9 * fmax(1.0, best));
        assert_true(fabs(pic_ckpt_waste(mass, mass_d, B, block, blk, cnt) - got) < 1e-9 * fmax(1.0, got));
        int    qblk[16], qcnt = 0;
        double q = pic_ckpt_solve_quadratic(mass, mass_d, B, block, m, qblk, &qcnt);
        assert_true(fabs(q - best) <= 1e-9 * fmax(1.0, best));
    }
}

/* The O(M·B log B) solver against the O(M·B²) one (itself checked by brute
 * force above) on random histograms up to B = 4096 blocks: sparse ones,
 * dense ones, heavy tails, spikes, all mass in one bin; the same optimal
 * waste (ties may choose other positions of the same waste). */
static void
test_divide_and_conquer_matches_quadratic(void **unused)
{
    static const int Bs[] = { 1, 2, 3, 17, 64, 257, 1000, 2048, 4096 };
    int    block = 64, trials = 0;
    double worst = 0.0;

    for (size_t b = 0; b < sizeof(Bs) / sizeof(Bs[0]); b++) {
        int B = Bs[b];
        for (int shape = 0; shape < 5; shape++) {
            int     m = 1 + (int) (rnd() % (B >= 1000 ? 8 : 24));
            double *mass = calloc((size_t) B + 1, sizeof(double));
            double *mass_d = calloc((size_t) B + 1, sizeof(double));
            int    *blk = malloc((size_t) m * sizeof(int)), *qblk = malloc((size_t) m * sizeof(int));
            int     cnt = 0, qcnt = 0, nobs = shape == 1 ? 40 * (B + 1) : 3 + (int) (rnd() % 200);

            for (int k = 0; k < nobs; k++) {
                unsigned u = rnd();
                int      j = shape == 2 ? (int) ((double) (B + 1) * pow((u % 10007) / 10007.0, 4.0))
                           : shape == 3 ? (int) ((u % 4) * (unsigned) B / 4u)
                           : shape == 4 ? B / 2 : (int) (u % (unsigned) (B + 1));
                int      d = j * block + (int) (rnd() % (unsigned) block);
                double   w = (double) (1 + rnd() % 1000) / 37.0;
                j = j > B ? B : j;
                mass[j] += w;
                mass_d[j] += w * d;
            }
            double got = pic_ckpt_solve(mass, mass_d, B, block, m, blk, &cnt);
            double q = pic_ckpt_solve_quadratic(mass, mass_d, B, block, m, qblk, &qcnt);
            double err = fabs(got - q) / fmax(1.0, q);
            worst = fmax(worst, err);
            if (err > 1e-9) {
                fail_msg("B %d m %d shape %d: waste %.17g, quadratic %.17g", B, m, shape, got, q);
            }
            assert_true(cnt <= m);
            for (int i = 0; i < cnt; i++) {
                assert_true(blk[i] >= 1 && blk[i] <= B && (i == 0 || blk[i] > blk[i - 1]));
            }
            assert_true(fabs(pic_ckpt_waste(mass, mass_d, B, block, blk, cnt) - got)
                        <= 1e-9 * fmax(1.0, got));
            trials++;
            free(mass); free(mass_d); free(blk); free(qblk);
        }
    }
    print_message("  %d histograms, largest relative difference %.3g\n", trials, worst);
}

static void
test_fixed_placements(void **unused)
{
    int pos[16], c;

    c = pic_ckpt_place(PIC_CKPT_BALANCED, 64, 4, 1000, pos);    /* B = 15 */
    assert_int_equal(c, 4);
    assert_int_equal(pos[0], 256);      /* round(15/4) = 4 blocks */
    assert_int_equal(pos[3], 960);
    c = pic_ckpt_place(PIC_CKPT_BLOCK, 64, 4, 3000, pos);
    assert_int_equal(c, 2);
    assert_int_equal(pos[0], 1024);
    assert_int_equal(pos[1], 2048);
    c = pic_ckpt_place(PIC_CKPT_LOG, 64, 3, 4100, pos);
    assert_int_equal(c, 3);
    assert_int_equal(pos[0], 1024);
    assert_int_equal(pos[1], 2048);
    assert_int_equal(pos[2], 4096);
    assert_int_equal(pic_ckpt_place(PIC_CKPT_BALANCED, 64, 4, 63, pos), 0);
    c = pic_ckpt_place(PIC_CKPT_BALANCED, 64, 8, 130, pos);     /* B = 2 < M */
    assert_int_equal(c, 2);
    assert_int_equal(pos[1], 128);
}

static void
test_policy_balanced_then_dp_then_decay(void **unused)
{
    char          err[128];
    pic_ckpt_opts o = { .block = 64, .m = 1, .resolve_every = 10, .min_history = 20,
                        .max_tokens = 8192, .decay = 0.9 };
    pic_ckpt_dp  *dp = pic_ckpt_dp_init(&o, err, sizeof(err));
    int           pos[4];
    long          obs, res;

    assert_non_null(dp);
    for (int i = 0; i < 19; i++) {
        pic_ckpt_dp_observe(dp, 1000);
    }
    assert_int_equal(pic_ckpt_dp_plan(dp, 4096, pos), 1);
    assert_int_equal(pos[0], 4096);                 /* balanced, M = 1 */
    assert_int_equal(pic_ckpt_dp_solve_now(dp, 4096, pos), 1);
    assert_int_equal(pos[0], 960);                  /* the DP on the live histogram */
    pic_ckpt_dp_observe(dp, 1000);                  /* 20th: first snapshot */
    assert_int_equal(pic_ckpt_dp_plan(dp, 4096, pos), 1);
    assert_int_equal(pos[0], 960);
    /* the distribution moves to 2000: the plan follows only at a re-solve */
    for (int i = 0; i < 9; i++) {
        pic_ckpt_dp_observe(dp, 2000);
    }
    assert_int_equal(pic_ckpt_dp_plan(dp, 4096, pos), 1);
    assert_int_equal(pos[0], 960);
    pic_ckpt_dp_observe(dp, 2000);
    assert_int_equal(pic_ckpt_dp_plan(dp, 4096, pos), 1);
    assert_int_equal(pos[0], 1984);                 /* 10 recent beat 20 decayed */
    pic_ckpt_dp_counts(dp, &obs, &res);
    assert_int_equal(obs, 30);
    assert_int_equal(res, 2);
    /* an entry shorter than the depths: they clamp to its end */
    assert_int_equal(pic_ckpt_dp_plan(dp, 700, pos), 1);
    assert_int_equal(pos[0], 640);
    pic_ckpt_dp_free(dp);

    o.decay = 1.5;
    assert_null(pic_ckpt_dp_init(&o, err, sizeof(err)));
}

typedef struct {
    pic_ckpt_dp *dp;
    int          depth;
} obs_arg;

static void *
observer(void *p)
{
    obs_arg *a = p;
    int      pos[8];
    for (int i = 0; i < 2000; i++) {
        pic_ckpt_dp_observe(a->dp, a->depth + (i % 7) * 64);
        if (i % 100 == 0) {
            pic_ckpt_dp_plan(a->dp, 4096, pos);
        }
    }
    return NULL;
}

static void
test_concurrent_observers(void **unused)
{
    char          err[128];
    pic_ckpt_opts o = { .m = 3, .max_tokens = 4096 };
    pic_ckpt_dp  *dp = pic_ckpt_dp_init(&o, err, sizeof(err));
    pthread_t     t[4];
    obs_arg       a[4];
    long          obs, res;

    for (int i = 0; i < 4; i++) {
        a[i].dp = dp;
        a[i].depth = 300 * (i + 1);
        pthread_create(&t[i], NULL, observer, &a[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
    }
    pic_ckpt_dp_counts(dp, &obs, &res);
    assert_int_equal(obs, 8000);
    assert_int_equal(res, 800);      /* at 10, 20, …, 8000 */
    pic_ckpt_dp_free(dp);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dp_matches_brute_force),
        cmocka_unit_test(test_divide_and_conquer_matches_quadratic),
        cmocka_unit_test(test_fixed_placements),
        cmocka_unit_test(test_policy_balanced_then_dp_then_decay),
        cmocka_unit_test(test_concurrent_observers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
