/*
 * wmat.c — matmul on compact weights (pic_wmat: F32 / BF16 / Q8) for the
 * CPU backend, and the conversions the loader uses to make them.
 *
 * GEMV (n <= PIC_WMAT_GEMV_ROWS, the decode step of every running
 * sequence): each thread streams its slice of W once and dots every
 * weight row with the n activation rows, converting in registers and
 * accumulating in fp32.  GEMM (prefill): each thread converts tiles of its
 * rows of W to fp32 in a buffer that stays in L2 and hands the tile to the
 * fp32 sgemm.  F32 goes straight to pic_cpu_matmul.
 *
 * SIMD is picked at run time (pic_kernels_simd): AVX-512 (F/BW/VL), AVX2 +
 * FMA + F16C, or portable C; the vector paths are compiled with
 * __attribute__((target)) so the binary needs nothing beyond the build
 * baseline to start.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PIC_WMAT_X86 1
#else
#define PIC_WMAT_X86 0
#endif

#define PIC_WMAT_GEMV_ROWS 4            /* n up to this: GEMV kernel */
#define PIC_WMAT_TILE_BYTES (256 * 1024)/* fp32 tile of W kept in L2 */


/* --- scalar conversions --- */

float
pic_half_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t) (h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    float    f;

    if (exp == 0) {                     /* zero / subnormal: man * 2^-24 */
        f = ldexpf((float) man, -24);
        return sign ? -f : f;
    }
    if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    memcpy(&f, &bits, sizeof(f));
    return f;
}

uint16_t
pic_f32_to_half(float f)
{
    uint32_t x, sign, man;
    int      exp;

    memcpy(&x, &f, sizeof(x));
    sign = (x >> 16) & 0x8000;
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t) (sign | 0x7e00);                  /* NaN */
    }
    exp = (int) ((x >> 23) & 0xff) - 127 + 15;
    man = x & 0x7fffff;
    if (exp >= 31) {
        return (uint16_t) (sign | 0x7c00);                  /* overflow: inf */
    }
    if (exp <= 0) {                                         /* subnormal */
        float    a = fabsf(f) * 16777216.0f;                /* / 2^-24 */
        uint32_t q = (uint32_t) lrintf(a);                  /* nearest even */

        return (uint16_t) (sign | (q > 0x3ff ? 0x400 : q));
    }
    {
        uint32_t h = ((uint32_t) exp << 10) | (man >> 13);
        uint32_t rem = man & 0x1fff;

        if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) {
            h++;                        /* may carry into the exponent: ok */
        }
        return (uint16_t) (sign | h);
    }
}

static inline float
pic_bf16_f32(uint16_t h)
{
    uint32_t bits = (uint32_t) h << 16;
    float    f;

    memcpy(&f, &bits, sizeof(f));
    return f;
}

void
pic_bf16_from_f32(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x;

        memcpy(&x, &src[i], sizeof(x));
        if ((x & 0x7fffffffu) > 0x7f800000u) {
            dst[i] = (uint16_t) ((x >> 16) | 0x40);         /* quiet NaN */
        } else {
            dst[i] = (uint16_t) ((x + 0x7fff + ((x >> 16) & 1)) >> 16);
        }
    }
}

void
pic_q8_from_f32(int8_t *qs, uint16_t *scale, const float *src, size_t n)
{
    PIC_OP_CHECK(n % PIC_Q8_BLOCK == 0);

    for (size_t b = 0; b < n / PIC_Q8_BLOCK; b++) {
        const float *x = src + b * PIC_Q8_BLOCK;
        float        amax = 0.0f, d, id;

        for (int i = 0; i < PIC_Q8_BLOCK; i++) {
            amax = fmaxf(amax, fabsf(x[i]));
        }
        scale[b] = pic_f32_to_half(amax / 127.0f);
        d = pic_half_to_f32(scale[b]);      /* quantise with the stored d */
        id = d > 0.0f ? 1.0f / d : 0.0f;
        for (int i = 0; i < PIC_Q8_BLOCK; i++) {
            float q = roundf(x[i] * id);

            q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
            qs[b * PIC_Q8_BLOCK + i] = (int8_t) q;
        }
    }
}


/* --- pic_wmat helpers --- */

pic_wmat
pic_wmat_f32(const float *p, int rows, int cols)
{
    return (pic_wmat) { .type = PIC_WTYPE_F32, .rows = rows, .cols = cols,
                        .data = p, .scale = NULL };
}

pic_wmat
pic_wmat_view(const pic_wmat *w, int r0, int nr)
{
    pic_wmat v = *w;
    size_t   off = (size_t) r0 * w->cols;

    PIC_OP_CHECK(r0 >= 0 && nr >= 0 && r0 + nr <= w->rows);
    v.rows = nr;
    switch (w->type) {
    case PIC_WTYPE_F32:
        v.data = (const float *) w->data + off;
        break;
    case PIC_WTYPE_BF16:
        v.data = (const uint16_t *) w->data + off;
        break;
    case PIC_WTYPE_Q8:
        v.data = (const int8_t *) w->data + off;
        v.scale = w->scale + off / PIC_Q8_BLOCK;
        break;
    }
    return v;
}

size_t
pic_wmat_bytes(const pic_wmat *w)
{
    size_t n = (size_t) w->rows * w->cols;

    switch (w->type) {
    case PIC_WTYPE_BF16:
        return n * 2;
    case PIC_WTYPE_Q8:
        return n + n / PIC_Q8_BLOCK * 2;
    default:
        return n * 4;
    }
}

const char *
pic_wtype_name(pic_wtype t)
{
    return t == PIC_WTYPE_BF16 ? "bf16" : t == PIC_WTYPE_Q8 ? "q8" : "f32";
}


/* --- kernels: one set per SIMD path ---
 *
 * rows(dst, w, r0, nr): rows [r0, r0+nr) of W as fp32 (dst stride cols).
 * gemv(y, ldy, x, n, w, r0, r1, beta): y[r][o] = dot(W[o], x[r]) (+ beta
 * * y[r][o]) for o in [r0, r1), r < n <= PIC_WMAT_GEMV_ROWS.
 */

typedef struct {
    const char *name;
    void (*rows)(float *dst, const pic_wmat *w, int r0, int nr);
    void (*gemv)(float *y, int ldy, const float *x, int n, const pic_wmat *w,
                 int r0, int r1, float beta);
} pic_wmat_impl;

static void
pic_wmat_rows_scalar(float *dst, const pic_wmat *w, int r0, int nr)
{
    size_t cols = (size_t) w->cols, n = (size_t) nr * cols;
    size_t off = (size_t) r0 * cols;

    if (w->type == PIC_WTYPE_F32) {
        memcpy(dst, (const float *) w->data + off, n * sizeof(float));
    } else if (w->type == PIC_WTYPE_BF16) {
        const uint16_t *s = (const uint16_t *) w->data + off;

        for (size_t i = 0; i < n; i++) {
            dst[i] = pic_bf16_f32(s[i]);
        }
    } else {
        const int8_t   *q = (const int8_t *) w->data + off;
        const uint16_t *sc = w->scale + off / PIC_Q8_BLOCK;

        for (size_t b = 0; b < n / PIC_Q8_BLOCK; b++) {
            float d = pic_half_to_f32(sc[b]);

            for (int i = 0; i < PIC_Q8_BLOCK; i++) {
                dst[b * PIC_Q8_BLOCK + i] = d * q[b * PIC_Q8_BLOCK + i];
            }
        }
    }
}

static void
pic_wmat_gemv_scalar(float *y, int ldy, const float *x, int n,
                     const pic_wmat *w, int r0, int r1, float beta)
{
    int cols = w->cols;

    for (int o = r0; o < r1; o++) {
        float acc[PIC_WMAT_GEMV_ROWS] = { 0 };

        if (w->type == PIC_WTYPE_BF16) {
            const uint16_t *s = (const uint16_t *) w->data + (size_t) o * cols;

            for (int c = 0; c < cols; c++) {
                float v = pic_bf16_f32(s[c]);

                for (int r = 0; r < n; r++) {
                    acc[r] += v * x[(size_t) r * cols + c];
                }
            }
        } else {
            const int8_t   *q = (const int8_t *) w->data + (size_t) o * cols;
            const uint16_t *sc = w->scale + (size_t) o * cols / PIC_Q8_BLOCK;

            for (int b = 0; b < cols / PIC_Q8_BLOCK; b++) {
                float d = pic_half_to_f32(sc[b]);

                for (int r = 0; r < n; r++) {
                    const float *xr = x + (size_t) r * cols + b * PIC_Q8_BLOCK;
                    float        s = 0.0f;

                    for (int i = 0; i < PIC_Q8_BLOCK; i++) {
                        s += q[b * PIC_Q8_BLOCK + i] * xr[i];
                    }
                    acc[r] += d * s;
                }
            }
        }
        for (int r = 0; r < n; r++) {
            float *yo = y + (size_t) r * ldy + o;

            *yo = acc[r] + (beta != 0.0f ? beta * *yo : 0.0f);
        }
    }
}

#if PIC_WMAT_X86

/* ---- AVX2 + FMA + F16C ---- */

#define PIC_AVX2 __attribute__((target("avx2,fma,f16c")))

PIC_AVX2 static inline __m256
pic_avx2_bf16x8(const uint16_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *) p);

    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

PIC_AVX2 static inline __m256
pic_avx2_q8x8(const int8_t *p)
{
    __m128i b = _mm_loadl_epi64((const __m128i *) p);

    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

PIC_AVX2 static inline float
pic_avx2_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

PIC_AVX2 static void
pic_wmat_rows_avx2(float *dst, const pic_wmat *w, int r0, int nr)
{
    size_t n = (size_t) nr * w->cols, off = (size_t) r0 * w->cols, i = 0;

    if (w->type == PIC_WTYPE_BF16) {
        const uint16_t *s = (const uint16_t *) w->data + off;

        for (; i + 8 <= n; i += 8) {
            _mm256_storeu_ps(dst + i, pic_avx2_bf16x8(s + i));
        }
        for (; i < n; i++) {
            dst[i] = pic_bf16_f32(s[i]);
        }
    } else if (w->type == PIC_WTYPE_Q8) {
        const int8_t   *q = (const int8_t *) w->data + off;
        const uint16_t *sc = w->scale + off / PIC_Q8_BLOCK;

        for (size_t b = 0; b < n / PIC_Q8_BLOCK; b++) {
            __m256 d = _mm256_set1_ps(_cvtsh_ss(sc[b]));

            for (int k = 0; k < PIC_Q8_BLOCK; k += 8) {
                size_t j = b * PIC_Q8_BLOCK + k;

                _mm256_storeu_ps(dst + j, _mm256_mul_ps(d, pic_avx2_q8x8(q + j)));
            }
        }
    } else {
        pic_wmat_rows_scalar(dst, w, r0, nr);
    }
}

/* One weight row against N activation rows (N a constant after inlining). */
PIC_AVX2 static inline __attribute__((always_inline)) void
pic_avx2_row(float *acc, const pic_wmat *w, int o, const float *x, int N)
{
    int    cols = w->cols, c = 0;
    __m256 a0[PIC_WMAT_GEMV_ROWS], a1[PIC_WMAT_GEMV_ROWS];

    for (int r = 0; r < N; r++) {
        a0[r] = _mm256_setzero_ps();
        a1[r] = _mm256_setzero_ps();
    }
    if (w->type == PIC_WTYPE_BF16) {
        const uint16_t *s = (const uint16_t *) w->data + (size_t) o * cols;

        for (; c + 16 <= cols; c += 16) {
            __m256 w0 = pic_avx2_bf16x8(s + c), w1 = pic_avx2_bf16x8(s + c + 8);

            for (int r = 0; r < N; r++) {
                const float *xr = x + (size_t) r * cols + c;

                a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr), a0[r]);
                a1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr + 8), a1[r]);
            }
        }
        for (int r = 0; r < N; r++) {
            acc[r] = pic_avx2_hsum(_mm256_add_ps(a0[r], a1[r]));
            for (int k = c; k < cols; k++) {
                acc[r] += pic_bf16_f32(s[k]) * x[(size_t) r * cols + k];
            }
        }
    } else {
        const int8_t   *q = (const int8_t *) w->data + (size_t) o * cols;
        const uint16_t *sc = w->scale + (size_t) o * cols / PIC_Q8_BLOCK;

        for (int b = 0; b < cols / PIC_Q8_BLOCK; b++, c += PIC_Q8_BLOCK) {
            __m256 d = _mm256_set1_ps(_cvtsh_ss(sc[b]));
            __m256 w0 = pic_avx2_q8x8(q + c), w1 = pic_avx2_q8x8(q + c + 8);
            __m256 w2 = pic_avx2_q8x8(q + c + 16), w3 = pic_avx2_q8x8(q + c + 24);

            for (int r = 0; r < N; r++) {
                const float *xr = x + (size_t) r * cols + c;
                __m256       s = _mm256_mul_ps(w0, _mm256_loadu_ps(xr));

                s = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr + 8), s);
                s = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xr + 16), s);
                s = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xr + 24), s);
                if (b & 1) {
                    a1[r] = _mm256_fmadd_ps(d, s, a1[r]);
                } else {
                    a0[r] = _mm256_fmadd_ps(d, s, a0[r]);
                }
            }
        }
        for (int r = 0; r < N; r++) {
            acc[r] = pic_avx2_hsum(_mm256_add_ps(a0[r], a1[r]));
        }
    }
}

PIC_AVX2 static inline __attribute__((always_inline)) void
pic_avx2_gemv_n(float *y, int ldy, const float *x, const pic_wmat *w,
                int r0, int r1, float beta, int N)
{
    for (int o = r0; o < r1; o++) {
        float acc[PIC_WMAT_GEMV_ROWS];

        pic_avx2_row(acc, w, o, x, N);
        for (int r = 0; r < N; r++) {
            float *yo = y + (size_t) r * ldy + o;

            *yo = acc[r] + (beta != 0.0f ? beta * *yo : 0.0f);
        }
    }
}

PIC_AVX2 static void
pic_wmat_gemv_avx2(float *y, int ldy, const float *x, int n,
                   const pic_wmat *w, int r0, int r1, float beta)
{
    switch (n) {
    case 1:  pic_avx2_gemv_n(y, ldy, x, w, r0, r1, beta, 1); break;
    case 2:  pic_avx2_gemv_n(y, ldy, x, w, r0, r1, beta, 2); break;
    case 3:  pic_avx2_gemv_n(y, ldy, x, w, r0, r1, beta, 3); break;
    default: pic_avx2_gemv_n(y, ldy, x, w, r0, r1, beta, 4); break;
    }
}

/* ---- AVX-512 F/BW/VL (+ FMA, F16C) ---- */

#define PIC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

PIC_AVX512 static inline __m512
pic_avx512_bf16x16(const uint16_t *p)
{
    __m256i h = _mm256_loadu_si256((const __m256i *) p);

    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

PIC_AVX512 static inline __m512
pic_avx512_q8x16(const int8_t *p)
{
    __m128i b = _mm_loadu_si128((const __m128i *) p);

    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
}

PIC_AVX512 static void
pic_wmat_rows_avx512(float *dst, const pic_wmat *w, int r0, int nr)
{
    size_t n = (size_t) nr * w->cols, off = (size_t) r0 * w->cols, i = 0;

    if (w->type == PIC_WTYPE_BF16) {
        const uint16_t *s = (const uint16_t *) w->data + off;

        for (; i + 16 <= n; i += 16) {
            _mm512_storeu_ps(dst + i, pic_avx512_bf16x16(s + i));
        }
        for (; i < n; i++) {
            dst[i] = pic_bf16_f32(s[i]);
        }
    } else if (w->type == PIC_WTYPE_Q8) {
        const int8_t   *q = (const int8_t *) w->data + off;
        const uint16_t *sc = w->scale + off / PIC_Q8_BLOCK;

        for (size_t b = 0; b < n / PIC_Q8_BLOCK; b++) {
            __m512 d = _mm512_set1_ps(_cvtsh_ss(sc[b]));
            size_t j = b * PIC_Q8_BLOCK;

            _mm512_storeu_ps(dst + j, _mm512_mul_ps(d, pic_avx512_q8x16(q + j)));
            _mm512_storeu_ps(dst + j + 16,
                             _mm512_mul_ps(d, pic_avx512_q8x16(q + j + 16)));
        }
    } else {
        pic_wmat_rows_scalar(dst, w, r0, nr);
    }
}

PIC_AVX512 static inline __attribute__((always_inline)) void
pic_avx512_row(float *acc, const pic_wmat *w, int o, const float *x, int N)
{
    int    cols = w->cols, c = 0;
    __m512 a0[PIC_WMAT_GEMV_ROWS], a1[PIC_WMAT_GEMV_ROWS];

    for (int r = 0; r < N; r++) {
        a0[r] = _mm512_setzero_ps();
        a1[r] = _mm512_setzero_ps();
    }
    if (w->type == PIC_WTYPE_BF16) {
        const uint16_t *s = (const uint16_t *) w->data + (size_t) o * cols;

        for (; c + 32 <= cols; c += 32) {
            __m512 w0 = pic_avx512_bf16x16(s + c), w1 = pic_avx512_bf16x16(s + c + 16);

            for (int r = 0; r < N; r++) {
                const float *xr = x + (size_t) r * cols + c;

                a0[r] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xr), a0[r]);
                a1[r] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xr + 16), a1[r]);
            }
        }
        for (int r = 0; r < N; r++) {
            acc[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r]));
            for (int k = c; k < cols; k++) {
                acc[r] += pic_bf16_f32(s[k]) * x[(size_t) r * cols + k];
            }
        }
    } else {
        const int8_t   *q = (const int8_t *) w->data + (size_t) o * cols;
        const uint16_t *sc = w->scale + (size_t) o * cols / PIC_Q8_BLOCK;

        for (int b = 0; b < cols / PIC_Q8_BLOCK; b++, c += PIC_Q8_BLOCK) {
            __m512 d = _mm512_set1_ps(_cvtsh_ss(sc[b]));
            __m512 w0 = pic_avx512_q8x16(q + c), w1 = pic_avx512_q8x16(q + c + 16);

            for (int r = 0; r < N; r++) {
                const float *xr = x + (size_t) r * cols + c;
                __m512       s = _mm512_mul_ps(w0, _mm512_loadu_ps(xr));

                s = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xr + 16), s);
                if (b & 1) {
                    a1[r] = _mm512_fmadd_ps(d, s, a1[r]);
                } else {
                    a0[r] = _mm512_fmadd_ps(d, s, a0[r]);
                }
            }
        }
        for (int r = 0; r < N; r++) {
            acc[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r]));
        }
    }
}

PIC_AVX512 static inline __attribute__((always_inline)) void
pic_avx512_gemv_n(float *y, int ldy, const float *x, const pic_wmat *w,
                  int r0, int r1, float beta, int N)
{
    for (int o = r0; o < r1; o++) {
        float acc[PIC_WMAT_GEMV_ROWS];

        pic_avx512_row(acc, w, o, x, N);
        for (int r = 0; r < N; r++) {
            float *yo = y + (size_t) r * ldy + o;

            *yo = acc[r] + (beta != 0.0f ? beta * *yo : 0.0f);
        }
    }
}

PIC_AVX512 static void
pic_wmat_gemv_avx512(float *y, int ldy, const float *x, int n,
                     const pic_wmat *w, int r0, int r1, float beta)
{
    switch (n) {
    case 1:  pic_avx512_gemv_n(y, ldy, x, w, r0, r1, beta, 1); break;
    case 2:  pic_avx512_gemv_n(y, ldy, x, w, r0, r1, beta, 2); break;
    case 3:  pic_avx512_gemv_n(y, ldy, x, w, r0, r1, beta, 3); break;
    default: pic_avx512_gemv_n(y, ldy, x, w, r0, r1, beta, 4); break;
    }
}

#endif /* PIC_WMAT_X86 */

static const pic_wmat_impl pic_wmat_impls[] = {
#if PIC_WMAT_X86
    { "avx512", pic_wmat_rows_avx512, pic_wmat_gemv_avx512 },
    { "avx2",   pic_wmat_rows_avx2,   pic_wmat_gemv_avx2 },
#endif
    { "scalar", pic_wmat_rows_scalar, pic_wmat_gemv_scalar },
};

#define PIC_WMAT_N_IMPLS (sizeof(pic_wmat_impls) / sizeof(pic_wmat_impls[0]))


/* --- run-time choice --- */

static const pic_wmat_impl *pic_wmat_cur;
static pthread_once_t       pic_wmat_once = PTHREAD_ONCE_INIT;

static int
pic_wmat_supported(const pic_wmat_impl *im)
{
#if PIC_WMAT_X86
    __builtin_cpu_init();
    if (strcmp(im->name, "avx512") == 0) {
        return __builtin_cpu_supports("avx512f")
               && __builtin_cpu_supports("avx512bw")
               && __builtin_cpu_supports("avx512vl")
               && __builtin_cpu_supports("fma")
               && __builtin_cpu_supports("f16c");
    }
    if (strcmp(im->name, "avx2") == 0) {
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
               && __builtin_cpu_supports("f16c");
    }
#endif
    return 1;
}

static void
pic_wmat_pick(void)
{
    const char *env = getenv("PIC_SIMD");
    size_t      i;

    for (i = 0; env != NULL && i < PIC_WMAT_N_IMPLS; i++) {
        if (strcmp(env, pic_wmat_impls[i].name) == 0
            && pic_wmat_supported(&pic_wmat_impls[i]))
        {
            pic_wmat_cur = &pic_wmat_impls[i];
            return;
        }
    }
    if (env != NULL && env[0] != '\0') {
        fprintf(stderr, "pic_kernels: PIC_SIMD=%s is not available here; "
                "using the best path\n", env);
    }
    for (i = 0; i < PIC_WMAT_N_IMPLS; i++) {
        if (pic_wmat_supported(&pic_wmat_impls[i])) {
            pic_wmat_cur = &pic_wmat_impls[i];
            return;
        }
    }
}

static const pic_wmat_impl *
pic_wmat_impl_get(void)
{
    pthread_once(&pic_wmat_once, pic_wmat_pick);
    return pic_wmat_cur;
}

const char *
pic_kernels_simd(void)
{
    return pic_wmat_impl_get()->name;
}

int
pic_kernels_set_simd(const char *name)
{
    pic_wmat_impl_get();
    for (size_t i = 0; i < PIC_WMAT_N_IMPLS; i++) {
        if (strcmp(name, pic_wmat_impls[i].name) == 0) {
            if (!pic_wmat_supported(&pic_wmat_impls[i])) {
                return -1;
            }
            pic_wmat_cur = &pic_wmat_impls[i];
            return 0;
        }
    }
    return -1;
}


/* --- the ops --- */

void
pic_cpu_wmat_rows(float *dst, const pic_wmat *w, int r0, int nr)
{
    PIC_OP_CHECK(dst != NULL && w != NULL && w->data != NULL);
    PIC_OP_CHECK(r0 >= 0 && nr >= 0 && r0 + nr <= w->rows);
    PIC_OP_CHECK(w->type != PIC_WTYPE_Q8
                 || (w->cols % PIC_Q8_BLOCK == 0 && w->scale != NULL));

    pic_wmat_impl_get()->rows(dst, w, r0, nr);
}

/* The tile buffer of the calling thread, grown once to the largest tile
 * (never freed: one per OpenMP worker, reused by every later call). */
static float *
pic_wmat_tile(size_t floats)
{
    static __thread float  *buf;
    static __thread size_t  cap;

    if (floats > cap) {
        float *nb = realloc(buf, floats * sizeof(float));

        PIC_OP_CHECK(nb != NULL);
        buf = nb;
        cap = floats;
    }
    return buf;
}

/* One thread's share of a compact matmul: output columns [o0, o1). */
static void
pic_wmat_slice(const pic_wmat_impl *im, float *y, const float *x, int n,
               const pic_wmat *w, int o0, int o1, float beta)
{
    int in = w->cols, out = w->rows, tb;

    if (o1 <= o0) {
        return;
    }
    if (n <= PIC_WMAT_GEMV_ROWS) {
        im->gemv(y, out, x, n, w, o0, o1, beta);
        return;
    }
    tb = (int) (PIC_WMAT_TILE_BYTES / ((size_t) in * sizeof(float)));
    tb = tb < 16 ? 16 : tb & ~15;
    {
        float *t = pic_wmat_tile((size_t) tb * in);

        for (int b0 = o0; b0 < o1; b0 += tb) {
            int nr = b0 + tb < o1 ? tb : o1 - b0;

            im->rows(t, w, b0, nr);                      /* (nr, in) fp32 */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, nr, in,
                        1.0f, x, in, t, in, beta, y + b0, out);
        }
    }
}

void
pic_cpu_matmul_w(float *y, const float *x, const pic_wmat *w, int n,
                 int accumulate)
{
    const pic_wmat_impl *im;
    float                beta = accumulate ? 1.0f : 0.0f;
    double               work;
    int                  nt, out;

    PIC_OP_CHECK(y != NULL && x != NULL && w != NULL && w->data != NULL);
    PIC_OP_CHECK(n > 0 && w->rows > 0 && w->cols > 0);
    if (w->type == PIC_WTYPE_F32) {
        pic_cpu_matmul(y, x, w->data, n, w->cols, w->rows, accumulate);
        return;
    }
    PIC_OP_CHECK(w->type == PIC_WTYPE_BF16
                 || (w->type == PIC_WTYPE_Q8 && w->cols % PIC_Q8_BLOCK == 0
                     && w->scale != NULL));

    im = pic_wmat_impl_get();
    out = w->rows;
    work = (double) n * w->cols * out;
    nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt <= 1 || work < 262144.0 || out < 32) {
        pic_wmat_slice(im, y, x, n, w, 0, out, beta);
        return;
    }
    #pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int per = ((out + T - 1) / T + 15) & ~15;
        int o0 = t * per, o1 = o0 + per < out ? o0 + per : out;

        pic_wmat_slice(im, y, x, n, w, o0, o1, beta);
    }
}
