/*
 * ckpt_dp_bench.c — time of the checkpoint-placement DP
 * (engine/pic/checkpoint_dp.c): the O(M·B log B) divide-and-conquer solver
 * against the O(M·B²) one on the same random histograms, per edge length
 * B (blocks) and checkpoint budget M.  Driven by bench/checkpoints.py;
 * prints one JSON object.
 *
 *   ckpt_dp_bench [--reps R]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_dp.h"
#include "pic_time.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t) (rng >> 32);
}

int
main(int argc, char **argv)
{
    static const int Bs[] = { 64, 256, 1024, 4096 };
    static const int Ms[] = { 4, 16 };
    int              reps = 3, first = 1;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--reps") == 0) {
            reps = atoi(argv[i + 1]);
        }
    }
    printf("{\"reps\": %d, \"cases\": [", reps);
    for (size_t b = 0; b < sizeof(Bs) / sizeof(Bs[0]); b++) {
        for (size_t k = 0; k < sizeof(Ms) / sizeof(Ms[0]); k++) {
            int     B = Bs[b], M = Ms[k], blk[16], cnt;
            double *mass = calloc((size_t) B + 1, sizeof(double));
            double *mass_d = calloc((size_t) B + 1, sizeof(double));
            double  best_dc = INFINITY, best_q = INFINITY, w_dc = 0, w_q = 0;

            for (int o = 0; o < 20 * B; o++) {          /* depths, heavier early */
                double u = (rnd() % 100003) / 100003.0;
                int    d = (int) (u * u * (double) (B + 1) * 64);
                mass[d / 64] += 1.0;
                mass_d[d / 64] += d;
            }
            for (int r = 0; r < reps; r++) {
                int64_t t0 = pic_now_ns();
                w_dc = pic_ckpt_solve(mass, mass_d, B, 64, M, blk, &cnt);
                int64_t t1 = pic_now_ns();
                w_q = pic_ckpt_solve_quadratic(mass, mass_d, B, 64, M, blk, &cnt);
                int64_t t2 = pic_now_ns();
                best_dc = fmin(best_dc, 1e-6 * (double) (t1 - t0));
                best_q = fmin(best_q, 1e-6 * (double) (t2 - t1));
            }
            printf("%s{\"B\": %d, \"M\": %d, \"dc_ms\": %.4f, \"quadratic_ms\": %.4f, "
                   "\"same_waste\": %s}", first ? "" : ", ", B, M, best_dc, best_q,
                   fabs(w_dc - w_q) <= 1e-9 * fmax(1.0, w_q) ? "true" : "false");
            first = 0;
            free(mass);
            free(mass_d);
        }
    }
    printf("]}\n");
    return 0;
}
