/*
 * ssd.c — CPU reference for the Mamba2 ops (MODEL.md §9): the scan token
 * by token (the exact recurrence the chunked SSD form reorders; prefill
 * and decode both take it), the grouped gated RMSNorm, and y ← a·x + b·y
 * for Granite's multipliers.  The loops are plain C over contiguous rows
 * (P rows of N state values per head): the build baseline vectorises them
 * and the scalar build is the reference.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

/* torch's softplus (threshold 20). */
static inline float
pic_ssd_softplus(float x)
{
    return x > 20.0f ? x : log1pf(expf(x));
}

/* Head h of pic_cpu_ssd_scan, every token in order. */
static void
pic_ssd_head(const pic_ssd_args *a, int h)
{
    int          P = a->P, N = a->N, g = h / (a->H / a->G);
    float       *S = a->S + (size_t) h * P * N;        /* (P, N) */
    float        Ah = a->A[h], Dh = a->D != NULL ? a->D[h] : 0.0f;
    double       decay = 1.0;

    for (int t = 0; t < a->n; t++) {
        const float *x = a->x + (size_t) t * a->ldx + (size_t) h * P;
        const float *B = a->B + (size_t) t * a->ldx + (size_t) g * N;
        float        dt = pic_ssd_softplus(a->dt[(size_t) t * a->H + h] + a->dt_bias[h]);

        dt = dt < a->dt_min ? a->dt_min : (dt > a->dt_max ? a->dt_max : dt);
        float da = expf(dt * Ah);

        decay *= da;
        if (a->y == NULL) {
            /* S ← a S + (dt x) Bᵀ */
            for (int p = 0; p < P; p++) {
                float *Sp = S + (size_t) p * N, xp = dt * x[p];

                for (int j = 0; j < N; j++) {
                    Sp[j] = da * Sp[j] + xp * B[j];
                }
            }
            continue;
        }
        /* the same update, and y = S C + D x in one pass over each row:
         * eight partial sums in a fixed order, so the dot vectorises and
         * gives the same bits on every run */
        const float *C = a->C + (size_t) t * a->ldx + (size_t) g * N;
        float       *y = a->y + (size_t) t * a->ldy + (size_t) h * P;

        for (int p = 0; p < P; p++) {
            float *Sp = S + (size_t) p * N, xp = dt * x[p], acc[8] = { 0 }, tail = 0.0f;
            int    j = 0;

            for (; j + 8 <= N; j += 8) {
                for (int k = 0; k < 8; k++) {
                    float v = da * Sp[j + k] + xp * B[j + k];

                    Sp[j + k] = v;
                    acc[k] += v * C[j + k];
                }
            }
            for (; j < N; j++) {
                float v = da * Sp[j] + xp * B[j];

                Sp[j] = v;
                tail += v * C[j];
            }
            y[p] = (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6])
                                                                + (acc[3] + acc[7])))
                   + tail + Dh * x[p];
        }
    }
    if (a->decay != NULL) {
        a->decay[h] = (float) (a->decay[h] * decay);
    }
}

void
pic_cpu_ssd_scan(const pic_ssd_args *a)
{
    PIC_OP_CHECK(a != NULL && a->n >= 0 && a->H > 0 && a->G > 0 && a->H % a->G == 0);
    PIC_OP_CHECK(a->P > 0 && a->N > 0 && a->S != NULL && a->A != NULL);
    PIC_OP_CHECK(a->n == 0 || (a->x != NULL && a->B != NULL && a->dt != NULL
                               && a->dt_bias != NULL));
    PIC_OP_CHECK(a->ldx >= a->H * a->P + 2 * a->G * a->N || a->n == 0);
    PIC_OP_CHECK(a->y == NULL || (a->C != NULL && a->ldy >= a->H * a->P));
    PIC_OP_CHECK(a->dt_min <= a->dt_max);

    if (pic_cpu_par((size_t) a->n * a->H * a->P * a->N > 65536 && a->H > 1)) {
        #pragma omp parallel for schedule(static)
        for (int h = 0; h < a->H; h++) {
            pic_ssd_head(a, h);
        }
        return;
    }
    for (int h = 0; h < a->H; h++) {
        pic_ssd_head(a, h);
    }
}

/* Row t of pic_cpu_gated_rmsnorm. */
static void
pic_gated_rmsnorm_row(float *y, const float *z, const float *w, int dim, int gs,
                      float eps)
{
    for (int i = 0; i < dim; i++) {
        float zi = z[i];

        y[i] *= zi / (1.0f + expf(-zi));
    }
    for (int g0 = 0; g0 < dim; g0 += gs) {
        double ss = 0.0;

        for (int i = g0; i < g0 + gs; i++) {
            ss += (double) y[i] * y[i];
        }
        float r = (float) (1.0 / sqrt(ss / gs + eps));
        for (int i = g0; i < g0 + gs; i++) {
            y[i] = y[i] * r * w[i];
        }
    }
}

void
pic_cpu_gated_rmsnorm(float *y, const float *z, const float *w, int n, int dim,
                      int groups, float eps)
{
    PIC_OP_CHECK(y != NULL && z != NULL && w != NULL && n >= 0 && dim > 0);
    PIC_OP_CHECK(groups > 0 && dim % groups == 0);

    if (pic_cpu_par(n > 64)) {
        #pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++) {
            pic_gated_rmsnorm_row(y + (size_t) t * dim, z + (size_t) t * dim, w, dim,
                                  dim / groups, eps);
        }
        return;
    }
    for (int t = 0; t < n; t++) {
        pic_gated_rmsnorm_row(y + (size_t) t * dim, z + (size_t) t * dim, w, dim,
                              dim / groups, eps);
    }
}

void
pic_cpu_scale_add(float *y, const float *x, float a, float b, size_t n)
{
    PIC_OP_CHECK((y != NULL && x != NULL) || n == 0);

    for (size_t i = 0; i < n; i++) {
        y[i] = a * x[i] + b * y[i];
    }
}
