/*
 * gemm_bench.c — the prefill matmul kernels alone: y = x Wᵀ for N
 * activation rows (N > 4: the GEMM paths of pic_backend.matmul_w), per
 * weight format and per SIMD path this CPU has, next to OpenBLAS sgemm on
 * the same W in fp32 measured in the same run (the anchor the forward's
 * FLOP/s is held against).  Figures are GFLOP (2·N·ROWS·COLS) per
 * CPU-second of the calling thread, best of REPS: a ratio between two
 * kernels of one run holds on a shared machine where wall time does not.
 *
 *   gemm_bench [THREADS [N [ROWS [COLS [REPS]]]]]
 *
 * Defaults: 1 thread, N 570 (the warm chunk of bench/peer.py), W (3584,
 * 1024) (models/mid's FFN gate), best of 5.  Prints one JSON object.
 */
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cpu.h"
#include "pic_kernels.h"
#include "pic_time.h"


/* Best CPU seconds (calling thread) and wall seconds of reps calls. */
static void
gemm_time(const pic_backend *be, float *y, const float *x, const pic_wmat *m,
          int n, int reps, double *cpu, double *wall)
{
    *cpu = *wall = 1e30;
    for (int r = 0; r < reps + 1; r++) {         /* r 0: warm-up */
        double t0 = pic_now_s(), c0 = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);

        be->matmul_w(y, x, m, n, 0);
        double dt = pic_now_s() - t0, dc = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID) - c0;

        if (r > 0) {
            *wall = dt < *wall ? dt : *wall;
            *cpu = dc < *cpu ? dc : *cpu;
        }
    }
}

int
main(int argc, char **argv)
{
    int    threads = argc > 1 ? atoi(argv[1]) : 1;
    int    n = argc > 2 ? atoi(argv[2]) : 570;
    int    rows = argc > 3 ? atoi(argv[3]) : 3584;
    int    cols = argc > 4 ? atoi(argv[4]) : 1024;
    int    reps = argc > 5 ? atoi(argv[5]) : 5;
    size_t nw = (size_t) rows * cols;
    double flop = 2.0 * n * rows * cols, best_cpu = 1e30, best = 1e30;
    float *w, *x, *y;           /* w (rows, cols), x (n, cols), y (n, rows) */
    const pic_backend *be;
    const char        *best_path, *paths[16];
    size_t             npaths;
    int                first = 1;
    uint64_t           s = 88172645463325252ull;

    pic_kernels_process_env(argv);          /* OpenBLAS on its proper core */
    if (threads <= 0 || n <= 0 || rows <= 0 || cols <= 0 || cols % PIC_Q8_BLOCK != 0
        || reps <= 0)
    {
        fprintf(stderr, "usage: gemm_bench [THREADS [N [ROWS [COLS(%%32) [REPS]]]]]\n");
        return 2;
    }
    pic_kernels_set_threads(threads);
    be = pic_backend_cpu();
    best_path = pic_kernels_simd();
    npaths = pic_kernels_simd_paths(paths, 16);
    npaths = npaths < 16 ? npaths : 16;
    w = malloc(nw * sizeof(float));
    x = malloc((size_t) n * cols * sizeof(float));
    y = malloc((size_t) n * rows * sizeof(float));
    if (w == NULL || x == NULL || y == NULL) {
        fprintf(stderr, "gemm_bench: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < nw; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        w[i] = (float) ((int64_t) (s >> 40) - (1 << 23)) / (float) (1 << 26);
    }
    for (size_t i = 0; i < (size_t) n * cols; i++) {
        x[i] = (float) ((int) ((i * 7919) % 2001) - 1000) / 1000.0f;
    }

    /* the anchor: OpenBLAS sgemm on fp32 W, as pic_cpu_matmul calls it */
    for (int r = 0; r < reps + 1; r++) {
        double t0 = pic_now_s(), c0 = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);

        be->matmul(y, x, w, n, cols, rows, 0);
        double dt = pic_now_s() - t0, dc = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID) - c0;

        if (r > 0) {
            best = dt < best ? dt : best;
            best_cpu = dc < best_cpu ? dc : best_cpu;
        }
    }
    printf("{\"threads\": %d, \"n\": %d, \"rows\": %d, \"cols\": %d, \"best_path\": \"%s\", "
           "\"sgemm_gflops\": %.2f, \"sgemm_gflops_cpu\": %.2f, \"cases\": [",
           pic_kernels_threads(), n, rows, cols, best_path, flop / best / 1e9,
           flop / best_cpu / 1e9);
    for (int t = PIC_WTYPE_BF16; t <= PIC_WTYPE_Q8 + 1; t++) {  /* + 1: bf16dot */
        void    *store;
        int      dot = t == PIC_WTYPE_Q8 + 1;
        pic_wmat m = { .type = dot ? PIC_WTYPE_BF16 : (pic_wtype) t, .rows = rows,
                       .cols = cols, .xbf16 = dot };

        if (m.type == PIC_WTYPE_BF16) {
            store = malloc(nw * 2);
            pic_bf16_from_f32(store, w, nw);
            m.data = store;
        } else {
            store = malloc(nw + nw / PIC_Q8_BLOCK * 2);
            pic_q8_from_f32(store, (uint16_t *) ((int8_t *) store + nw), w, nw);
            m.data = store;
            m.scale = (const uint16_t *) ((int8_t *) store + nw);
        }
        for (size_t p = 0; p < npaths; p++) {
            double cpu, wall;

            if (pic_kernels_set_simd(paths[p]) != 0) {
                continue;
            }
            gemm_time(be, y, x, &m, n, reps, &cpu, &wall);
            printf("%s{\"weights\": \"%s\", \"path\": \"%s\", \"seconds\": %.6f, "
                   "\"gflops\": %.2f, \"gflops_cpu\": %.2f, \"y0\": %.6g}",
                   first ? "" : ", ", dot ? "bf16dot" : pic_wtype_name(m.type),
                   paths[p], wall, flop / wall / 1e9, flop / cpu / 1e9, y[0]);
            first = 0;
            fflush(stdout);
        }
        free(store);
    }
    pic_kernels_set_simd(best_path);
    printf("]}\n");
    free(w);
    free(x);
    free(y);
    return 0;
}
