/*
 * matmul.c — CPU reference of the fp32 matmul op (OpenBLAS, pic_kernels.h
 * has the contract): the one GEMM below the compact-weight kernels
 * (wmat.c) and the ops that multiply activations.
 */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>

#include "cpu_ops.h"

#define PIC_MATMUL_SMALL_N  4            /* n up to this: per-row sgemv */
#define PIC_MATMUL_L2_BYTES (192 * 1024) /* W block kept hot across rows */

/* One thread's share: rows [o0, o1) of W. */
static void
pic_cpu_matmul_slice(float *y, const float *x, const float *w, int n, int in,
                     int out, int o0, int o1, float beta)
{
    if (o1 <= o0) {
        return;
    }
    if (n == 1) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, o1 - o0, in, 1.0f,
                    w + (size_t) o0 * in, in, x, 1, beta, y + o0, 1);
    } else if (n <= PIC_MATMUL_SMALL_N) {
        /* a few rows: sgemm's packing costs more than it saves here, so
         * run the n one-row sgemv's over blocks of W that stay in L2;
         * W is then streamed from memory once, as for n = 1 */
        int blk = (int) (PIC_MATMUL_L2_BYTES / ((size_t) in * sizeof(float)));

        blk = blk < 16 ? 16 : blk & ~15;
        for (int b0 = o0; b0 < o1; b0 += blk) {
            int          b1 = b0 + blk < o1 ? b0 + blk : o1;
            const float *wb = w + (size_t) b0 * in;     /* (b1-b0, in) */

            for (int r = 0; r < n; r++) {
                cblas_sgemv(CblasRowMajor, CblasNoTrans, b1 - b0, in, 1.0f, wb, in,
                            x + (size_t) r * in, 1, beta, y + (size_t) r * out + b0, 1);
            }
        }
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, o1 - o0, in,
                    1.0f, x, in, w + (size_t) o0 * in, in, beta, y + o0, out);
    }
}

/* OpenBLAS runs single-threaded (pic_kernels.c); the output columns are
 * split over the OpenMP threads so that one runtime owns the cores. */
void
pic_cpu_matmul(float *y, const float *x, const float *w, int n, int in,
               int out, int accumulate)
{
    PIC_OP_CHECK(y != NULL && x != NULL && w != NULL);
    PIC_OP_CHECK(n > 0 && in > 0 && out > 0);

    float  beta = accumulate ? 1.0f : 0.0f;
    double work = (double) n * in * out;
    int    nt = omp_in_parallel() ? 1 : omp_get_max_threads();

    if (nt <= 1 || work < 262144.0 || out < 32) {
        pic_cpu_matmul_slice(y, x, w, n, in, out, 0, out, beta);
        return;
    }
    #pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int per = ((out + T - 1) / T + 15) & ~15;   /* 64-byte aligned slices */
        int o0 = t * per, o1 = o0 + per < out ? o0 + per : out;
        pic_cpu_matmul_slice(y, x, w, n, in, out, o0, o1, beta);
    }
}
