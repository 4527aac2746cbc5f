/*
 * basic.c — CPU reference for the small ops: norms, activations, causal
 * conv1d and RoPE (pic_kernels.h has the contracts; the fp32 matmul is
 * matmul.c's).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_exp.h"
#include "cpu_ops.h"

/* --- norms and activations --- */

/* One row of pic_cpu_rmsnorm. */
static void
pic_rmsnorm_row(float *yr, const float *xr, const float *w, int dim, float eps,
                int zero_centred)
{
    double ss = 0.0;

    for (int i = 0; i < dim; i++) {
        ss += (double) xr[i] * xr[i];
    }
    float r = (float) (1.0 / sqrt(ss / dim + eps));
    for (int i = 0; i < dim; i++) {
        float wi = w == NULL ? 1.0f : (zero_centred ? 1.0f + w[i] : w[i]);
        yr[i] = xr[i] * r * wi;
    }
}

void
pic_cpu_rmsnorm(float *y, const float *x, const float *w, int n, int dim,
                float eps, int zero_centred)
{
    PIC_OP_CHECK(y != NULL && x != NULL && n >= 0 && dim > 0);

    if (pic_cpu_par(n > 64)) {
        #pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++) {
            pic_rmsnorm_row(y + (size_t) t * dim, x + (size_t) t * dim, w, dim, eps,
                            zero_centred);
        }
        return;
    }
    for (int t = 0; t < n; t++) {
        pic_rmsnorm_row(y + (size_t) t * dim, x + (size_t) t * dim, w, dim, eps,
                        zero_centred);
    }
}

#if PIC_EXP_X86
/* The whole 8-blocks of x[*i, i1) as pic_act_span; *i moves past them. */
__attribute__((target("avx2,fma")))
static void
pic_act_span_avx2(float *x, size_t *i, size_t i1, int sig)
{
    __m256 one = _mm256_set1_ps(1.0f);
    size_t j = *i;

    for (; j + 8 <= i1; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        __m256 e = _mm256_add_ps(one, pic_exp_avx2(_mm256_xor_ps(v, _mm256_set1_ps(-0.0f))));

        _mm256_storeu_ps(x + j, _mm256_div_ps(sig ? one : v, e));
    }
    *i = j;
}
#endif

int
pic_cpu_simd(void)
{
    return strcmp(pic_kernels_simd(), "scalar") != 0;
}

/* x[i0, i1) ← SiLU (sig = 0: x·σ(x)) or σ (sig = 1) in place; the AVX2
 * path and the portable one agree bit for bit (cpu_exp.h). */
static void
pic_act_span(float *x, size_t i0, size_t i1, int sig, int simd)
{
    size_t i = i0;

#if PIC_EXP_X86
    if (simd) {
        pic_act_span_avx2(x, &i, i1, sig);
    }
#else
    (void) simd;
#endif
    for (; i < i1; i++) {
        float e = 1.0f + pic_exp_scalar(-x[i]);

        x[i] = sig ? 1.0f / e : x[i] / e;
    }
}

/* pic_act_span over x(n), split over the team when n is large. */
static void
pic_act(float *x, size_t n, int sig)
{
    int simd = pic_cpu_simd();

    if (pic_cpu_par(n > 65536)) {
        #pragma omp parallel
        {
            size_t T = (size_t) omp_get_num_threads(), t = (size_t) omp_get_thread_num();
            size_t per = ((n + T - 1) / T + 7) & ~(size_t) 7;
            size_t i0 = t * per < n ? t * per : n, i1 = i0 + per < n ? i0 + per : n;

            pic_act_span(x, i0, i1, sig, simd);
        }
        return;
    }
    pic_act_span(x, 0, n, sig, simd);
}

void
pic_cpu_silu(float *x, size_t n)
{
    PIC_OP_CHECK(x != NULL || n == 0);
    pic_act(x, n, 0);
}

void
pic_cpu_sigmoid(float *x, size_t n)
{
    PIC_OP_CHECK(x != NULL || n == 0);
    pic_act(x, n, 1);
}

void
pic_cpu_softplus(float *x, size_t n)
{
    PIC_OP_CHECK(x != NULL || n == 0);
    if (pic_cpu_par(n > 65536)) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            x[i] = x[i] > 20.0f ? x[i] : log1pf(expf(x[i]));
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        x[i] = x[i] > 20.0f ? x[i] : log1pf(expf(x[i]));
    }
}

void
pic_cpu_l2norm(float *x, int rows, int ld, int dim, float eps, float scale)
{
    PIC_OP_CHECK(x != NULL && rows >= 0 && dim > 0 && ld >= dim);

    for (int r = 0; r < rows; r++) {
        float  *xr = x + (size_t) r * ld;
        double  ss = 0.0;

        for (int i = 0; i < dim; i++) {
            ss += (double) xr[i] * xr[i];
        }
        float f = (float) (1.0 / sqrt(ss + eps)) * scale;
        for (int i = 0; i < dim; i++) {
            xr[i] *= f;
        }
    }
}

/* --- causal depthwise conv1d --- */

/* Output row t of pic_cpu_conv1d (the state is read, not updated). */
static void
pic_conv1d_row(float *y, const float *u, const float *state, const float *w,
               int t, int C, int K)
{
    int    S = K - 1;
    float *yr = y + (size_t) t * C;             /* (1, C) */

    for (int c = 0; c < C; c++) {
        yr[c] = 0.0f;
    }
    for (int j = 0; j < K; j++) {
        int src = t - S + j;            /* input index, < 0: from state */
        if (src >= 0) {
            const float *ur = u + (size_t) src * C;
            for (int c = 0; c < C; c++) {
                yr[c] += w[(size_t) c * K + j] * ur[c];
            }
        } else {
            for (int c = 0; c < C; c++) {
                yr[c] += w[(size_t) c * K + j] * state[(size_t) c * S + S + src];
            }
        }
    }
}

/* pic_conv1d_row with the taps wt (K, C), tap-major. */
static void
pic_conv1d_row_t(float *y, const float *u, const float *state, const float *wt,
                 int t, int C, int K)
{
    int    S = K - 1;
    float *yr = y + (size_t) t * C;             /* (1, C) */

    for (int c = 0; c < C; c++) {
        yr[c] = 0.0f;
    }
    for (int j = 0; j < K; j++) {
        int          src = t - S + j;   /* input index, < 0: from state */
        const float *wj = wt + (size_t) j * C;

        if (src >= 0) {
            const float *ur = u + (size_t) src * C;
            for (int c = 0; c < C; c++) {
                yr[c] += wj[c] * ur[c];
            }
        } else {
            for (int c = 0; c < C; c++) {
                yr[c] += wj[c] * state[(size_t) c * S + S + src];
            }
        }
    }
}

void
pic_cpu_conv1d(float *y, const float *u, float *state, const float *w,
               int n, int C, int K)
{
    PIC_OP_CHECK(y != NULL && u != NULL && w != NULL && y != u);
    PIC_OP_CHECK(n >= 0 && C > 0 && K >= 1);
    PIC_OP_CHECK(K == 1 || state != NULL);

    int    S = K - 1;
    float *wt = n >= 8 ? malloc((size_t) K * C * sizeof(float)) : NULL;

    /* many rows: the taps transposed to (K, C) once, so that each row's
     * loop over channels reads w contiguously (it vectorises; the sums are
     * the same, tap by tap, bit for bit) */
    if (wt != NULL) {
        for (int c = 0; c < C; c++) {
            for (int j = 0; j < K; j++) {
                wt[(size_t) j * C + c] = w[(size_t) c * K + j];
            }
        }
        #pragma omp parallel for schedule(static) if (pic_cpu_par((size_t) n * C > 65536))
        for (int t = 0; t < n; t++) {
            pic_conv1d_row_t(y, u, state, wt, t, C, K);
        }
        free(wt);
    } else if (pic_cpu_par((size_t) n * C > 65536)) {
        #pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++) {
            pic_conv1d_row(y, u, state, w, t, C, K);
        }
    } else {
        for (int t = 0; t < n; t++) {
            pic_conv1d_row(y, u, state, w, t, C, K);
        }
    }

    /* new state: the last S inputs of state ‖ u */
    for (int c = 0; c < C && S > 0; c++) {
        float *st = state + (size_t) c * S;
        float  tmp[16];
        float *buf = S <= 16 ? tmp : NULL;

        PIC_OP_CHECK(buf != NULL);          /* K <= 17 */
        for (int i = 0; i < S; i++) {
            int src = n - S + i;            /* index into u, < 0: old state */
            buf[i] = src >= 0 ? u[(size_t) src * C + c] : st[S + src];
        }
        memcpy(st, buf, S * sizeof(float));
    }
}

/* --- RoPE --- */

void
pic_cpu_rope(float *x, int ld, const int *pos, int n, int heads, int hd,
             const pic_rope *r)
{
    PIC_OP_CHECK(x != NULL && pos != NULL && r != NULL && n >= 0 && heads > 0);
    PIC_OP_CHECK(hd > 0 && r->dim >= 2 && r->dim <= hd && r->dim % 2 == 0);
    PIC_OP_CHECK(r->dim <= 2 * PIC_ROPE_MAX_PAIRS && ld >= heads * hd);

    int half = r->dim / 2;

    #pragma omp parallel for if (n > 16) schedule(static)
    for (int t = 0; t < n; t++) {
        float c[half], s[half];

        for (int i = 0; i < half; i++) {
            /* the angle in double so that R(a+b) == R(a)R(b) to rounding */
            double ang = (double) pos[t] * (double) r->inv_freq[i];
            c[i] = (float) cos(ang);
            s[i] = (float) sin(ang);
        }
        for (int h = 0; h < heads; h++) {
            float *v = x + (size_t) t * ld + (size_t) h * hd;
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i]        = a * c[i] - b * s[i];
                v[i + half] = b * c[i] + a * s[i];
            }
        }
    }
}
