/*
 * wmat_bench.c — the decode matmul kernels alone: y = W x for one to four
 * activation rows (pic_backend.matmul_w), per weight format and per SIMD
 * path this CPU has, next to the machine's read bandwidth measured the same
 * way (threads streaming their own share of a buffer as large as W).
 * (f32 on the "scalar" path is OpenBLAS' sgemv.)  Figures are GB/s of weight
 * bytes streamed, so a kernel at its roofline
 * reads as the read anchor (pic_kernels_read_bw).  Single-threaded by default: a ratio between two
 * kernels measured in one run holds on a shared machine where a threaded
 * figure does not.
 *
 *   wmat_bench [THREADS [ROWS [COLS [REPS [N]]]]]
 *
 * Defaults: 1 thread, W (65536, 1024) (64 Mi weights: past any per-core
 * cache), best of 7, N = 1.  Prints one JSON object (bench/wmat.py reads it).
 */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cpu.h"
#include "pic_kernels.h"
#include "pic_time.h"


int
main(int argc, char **argv)
{
    int    threads;
    int    rows = argc > 2 ? atoi(argv[2]) : 65536;
    int    cols = argc > 3 ? atoi(argv[3]) : 1024;
    int    reps = argc > 4 ? atoi(argv[4]) : 7;
    int    n = argc > 5 ? atoi(argv[5]) : 1;
    size_t nw = (size_t) rows * cols;
    float *w, *x, *y;
    const pic_backend *be;
    const char        *best_path, *paths[16];
    size_t             npaths;
    int                first = 1;

    pic_kernels_process_env(argv);          /* OpenBLAS on its proper core */
    threads = argc > 1 ? atoi(argv[1]) : 1;
    if (rows <= 0 || cols <= 0 || cols % PIC_Q8_BLOCK != 0 || reps <= 0
        || n < 1 || n > 4)
    {
        fprintf(stderr, "usage: wmat_bench [THREADS [ROWS [COLS(%%32) [REPS [N(1-4)]]]]]\n");
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
        fprintf(stderr, "wmat_bench: out of memory\n");
        return 1;
    }
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < nw; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        w[i] = (float) ((int64_t) (s >> 40) - (1 << 23)) / (float) (1 << 26);
    }
    for (int i = 0; i < n * cols; i++) {
        x[i] = (float) ((i * 7919) % 2001 - 1000) / 1000.0f;
    }

    printf("{\"threads\": %d, \"rows\": %d, \"cols\": %d, \"n\": %d, \"best_path\": \"%s\", "
           "\"read_gbps\": %.3f, \"cases\": [",
           pic_kernels_threads(), rows, cols, n, best_path,
           pic_kernels_read_bw(w, nw * sizeof(float), reps) / 1e9);
    for (int t = PIC_WTYPE_F32; t <= PIC_WTYPE_Q8 + 1; t++) {   /* + 1: bf16dot */
        void    *store = NULL;
        int      dot = t == PIC_WTYPE_Q8 + 1;
        pic_wmat m = { .type = dot ? PIC_WTYPE_BF16 : (pic_wtype) t, .rows = rows,
                       .cols = cols, .xbf16 = dot };

        if (t == PIC_WTYPE_F32) {
            m.data = w;
        } else if (m.type == PIC_WTYPE_BF16) {
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
            double best = 1e30, best_cpu = 1e30;

            if (pic_kernels_set_simd(paths[p]) != 0) {
                continue;
            }
            for (int r = 0; r < reps + 1; r++) {
                double t0 = pic_now_s(), c0 = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID);

                be->matmul_w(y, x, &m, n, 0);
                double dt = pic_now_s() - t0;
                double dc = bench_cpu_s(CLOCK_THREAD_CPUTIME_ID) - c0;
                if (r > 0 && dt < best) {
                    best = dt;
                }
                if (r > 0 && dc < best_cpu) {
                    best_cpu = dc;
                }
            }
            printf("%s{\"weights\": \"%s\", \"path\": \"%s\", \"seconds\": %.6f, "
                   "\"gbps\": %.3f, \"gbps_cpu\": %.3f, \"y0\": %.6g}",
                   first ? "" : ", ", dot ? "bf16dot" : pic_wtype_name(m.type),
                   t == PIC_WTYPE_F32 && strcmp(paths[p], "scalar") == 0
                   ? "openblas" : paths[p], best,
                   pic_wmat_bytes(&m) / best / 1e9,
                   pic_wmat_bytes(&m) / best_cpu / 1e9, y[0]);
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
