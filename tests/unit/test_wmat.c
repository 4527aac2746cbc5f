/*
 * test_wmat.c — the weight-matrix ops (pic_wmat: f32, bf16, q8) against a
 * double-precision reference on the dequantised weights (q8: and on the
 * activations quantised as pic_q8_act_from_f32 quantises them, GEMV and
 * GEMM alike), on odd shapes (rows not a multiple of the four-row step or
 * the thread slice, columns not a multiple of the vector width or of 16
 * q8 blocks or past one K-block of the small GEMM, n = 1..65 rows across
 * the GEMV / small GEMM / sgemm switches), accumulate or not; every SIMD
 * path this CPU has (PIC_SIMD names) against the scalar one; the small
 * GEMM's rows independent of n; and the conversions (bf16 nearest-even, fp16 round trip, q8 error at
 * most half a step of its block, activations too).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pic_kernels.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float
frand(void)     /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float) ((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static float *
frand_vec(size_t n, float scale)
{
    float *v = malloc(n * sizeof(float));

    assert_non_null(v);
    for (size_t i = 0; i < n; i++) {
        v[i] = frand() * scale;
    }
    return v;
}

/* A compact copy of w (rows, cols) in type t; storage in *store (free it). */
static pic_wmat
make_wmat(pic_wtype t, const float *w, int rows, int cols, void **store)
{
    size_t   n = (size_t) rows * cols;
    pic_wmat m = { .type = t, .rows = rows, .cols = cols };

    if (t == PIC_WTYPE_F32) {
        float *f = malloc(n * sizeof(float));

        memcpy(f, w, n * sizeof(float));
        m.data = f;
        *store = f;
    } else if (t == PIC_WTYPE_BF16) {
        uint16_t *b = malloc(n * 2);

        pic_bf16_from_f32(b, w, n);
        m.data = b;
        *store = b;
    } else {
        int8_t *q = malloc(n + n / PIC_Q8_BLOCK * 2);   /* scales behind */

        pic_q8_from_f32(q, (uint16_t *) (q + n), w, n);
        m.data = q;
        m.scale = (const uint16_t *) (q + n);
        *store = q;
    }
    return m;
}

/* A loop index over the formats: the pic_wtype values, then BF16 with xbf16. */
#define T_BF16DOT (PIC_WTYPE_Q8 + 1)

/* make_wmat of the format t (a pic_wtype or T_BF16DOT). */
static pic_wmat
make_fmt(int t, const float *w, int rows, int cols, void **store)
{
    pic_wmat m = make_wmat(t == T_BF16DOT ? PIC_WTYPE_BF16 : (pic_wtype) t, w, rows, cols,
                           store);

    m.xbf16 = t == T_BF16DOT;
    return m;
}

static const char *
fmt_name(int t)
{
    return t == T_BF16DOT ? "bf16dot" : pic_wtype_name((pic_wtype) t);
}

static const char *simd_paths[] = { "amx", "avx512bf16", "avx512vnni", "avx512", "avx2", "scalar" };

/* x(n) as the q8 matmul sees it: quantised per block and back. */
static void
q8_act_round(float *dst, const float *x, size_t n)
{
    int8_t *q = malloc(n);
    float  *d = malloc(n / 32 * sizeof(float));

    pic_q8_act_from_f32(q, d, x, n);
    for (size_t i = 0; i < n; i++) {
        dst[i] = q[i] * d[i / 32];
    }
    free(q); free(d);
}

/* matmul_w == double reference over the dequantised W (xbf16: and x
 * rounded as pic_bf16_act_round rounds it), on every path. */
static void
check_matmul_x(pic_wtype t, int xbf16, int rows, int cols)
{
    const pic_backend *be = pic_backend_cpu();
    float             *w = frand_vec((size_t) rows * cols, 0.5f);
    float             *wd = malloc((size_t) rows * cols * sizeof(float));
    void              *store;
    pic_wmat           m = make_wmat(t, w, rows, cols, &store);
    const char        *saved = pic_kernels_simd();

    m.xbf16 = xbf16;
    be->wmat_rows(wd, &m, 0, rows);
    for (size_t p = 0; p < sizeof(simd_paths) / sizeof(simd_paths[0]); p++) {
        if (pic_kernels_set_simd(simd_paths[p]) != 0) {
            continue;                           /* not on this CPU */
        }
        static const int ns[] = { 1, 2, 3, 4, 5, 9, 37, 64, 65, 130 };

        for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
            int n = ns[ni];

            for (int acc = 0; acc <= 1; acc++) {
                float *x = frand_vec((size_t) n * cols, 1.0f);
                float *xr = malloc((size_t) n * cols * sizeof(float));
                float *y = frand_vec((size_t) n * rows, 1.0f);
                float *y0 = malloc((size_t) n * rows * sizeof(float));

                memcpy(y0, y, (size_t) n * rows * sizeof(float));
                memcpy(xr, x, (size_t) n * cols * sizeof(float));
                if (t == PIC_WTYPE_Q8) {
                    q8_act_round(xr, x, (size_t) n * cols);
                } else if (xbf16) {
                    pic_bf16_act_round(xr, x, (size_t) n * cols);
                }
                be->matmul_w(y, x, &m, n, acc);
                for (int r = 0; r < n; r++) {
                    for (int o = 0; o < rows; o++) {
                        double s = acc ? y0[r * rows + o] : 0.0, mag = fabs(s);

                        for (int i = 0; i < cols; i++) {
                            double q = (double) xr[r * cols + i] * wd[(size_t) o * cols + i];
                            s += q;
                            mag += fabs(q);
                        }
                        if (fabs(y[r * rows + o] - s) > 2e-6 * mag + 1e-30) {
                            fail_msg("%s %s%s (%d, %d) n=%d acc=%d: y[%d][%d] = %g, want %g",
                                     simd_paths[p], pic_wtype_name(t), xbf16 ? " xbf16" : "",
                                     rows, cols, n,
                                     acc, r, o, y[r * rows + o], s);
                        }
                    }
                }
                free(x); free(xr); free(y); free(y0);
            }
        }
    }
    assert_int_equal(pic_kernels_set_simd(saved), 0);
    free(w); free(wd); free(store);
}

static void
check_matmul(pic_wtype t, int rows, int cols)
{
    check_matmul_x(t, 0, rows, cols);
}

static void
test_f32_matmul_odd_shapes(void **unused)
{
    check_matmul(PIC_WTYPE_F32, 1, 7);
    check_matmul(PIC_WTYPE_F32, 37, 19);
    check_matmul(PIC_WTYPE_F32, 301, 133);      /* threaded, tails of 8/16 */
    check_matmul(PIC_WTYPE_F32, 700, 1024);
}

static void
test_bf16_matmul_odd_shapes(void **unused)
{
    check_matmul(PIC_WTYPE_BF16, 1, 7);
    check_matmul(PIC_WTYPE_BF16, 37, 19);
    check_matmul(PIC_WTYPE_BF16, 301, 133);     /* threaded, tails of 16/32 */
    check_matmul(PIC_WTYPE_BF16, 700, 1024);    /* several GEMM tiles */
    check_matmul(PIC_WTYPE_BF16, 37, 1100);     /* two K-blocks, a 12-wide tail */
}

/* bf16dot: the dot GEMM (AVX-512 BF16) and the rounded-x fallback of every
 * other path, GEMV and GEMM rows alike; the AVX-512 BF16 path both ways
 * (pic_kernels_dot_gemm: vdpbf16ps, or fp32 FMAs on the rounded x). */
static void
test_bf16dot_matmul_odd_shapes(void **unused)
{
    int saved = pic_kernels_dot_gemm(-1);

    for (int dot = 0; dot <= 1; dot++) {
        assert_int_equal(pic_kernels_dot_gemm(dot), dot);
        check_matmul_x(PIC_WTYPE_BF16, 1, 1, 7);
        check_matmul_x(PIC_WTYPE_BF16, 1, 37, 19);
        check_matmul_x(PIC_WTYPE_BF16, 1, 301, 133);    /* threaded, a last group of 5 rows */
        check_matmul_x(PIC_WTYPE_BF16, 1, 700, 1024);
        check_matmul_x(PIC_WTYPE_BF16, 1, 37, 1100);    /* a 12-wide tail */
        check_matmul_x(PIC_WTYPE_BF16, 1, 21, 4100);    /* three K-blocks of the dot GEMM */
    }
    pic_kernels_dot_gemm(saved);
}

/* bf16dot rounds x exactly as pic_bf16_act_round does, on every path and
 * row count: through W = I, y is the rounded x itself (ties to even,
 * subnormals to zero, large and negative values). */
static void
test_bf16dot_rounds_x_as_documented(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    const char        *saved = pic_kernels_simd();
    int                d = 64, tried = 0, saved_dot = pic_kernels_dot_gemm(-1);
    float             *eye = calloc((size_t) d * d, sizeof(float));
    float             *x = frand_vec((size_t) 40 * d, 3.0f);
    float             *want = malloc((size_t) 40 * d * sizeof(float));
    float             *y = malloc((size_t) 40 * d * sizeof(float));
    void              *store;
    pic_wmat           m;

    for (int i = 0; i < d; i++) {
        eye[i * d + i] = 1.0f;
    }
    x[0] = 1.0f + 0x1p-8f;              /* tie: to 1 */
    x[1] = 1.0f + 3 * 0x1p-8f;          /* tie: to 1 + 2^-6 */
    x[2] = 0x1p-130f;                   /* subnormal: to 0 */
    x[3] = -0x1p-127f;
    x[4] = 0x1p-126f;                   /* the smallest normal stays */
    x[5] = -3.0e38f;
    x[d + 7] = 1.0f + 0x1p-7f + 0x1p-20f;
    m = make_wmat(PIC_WTYPE_BF16, eye, d, d, &store);
    m.xbf16 = 1;
    pic_bf16_act_round(want, x, (size_t) 40 * d);
    assert_true(want[0] == 1.0f && want[1] == 1.0f + 0x1p-6f);
    assert_true(want[2] == 0.0f && want[3] == 0.0f && want[4] == 0x1p-126f);
    for (size_t p = 0; p < sizeof(simd_paths) / sizeof(simd_paths[0]); p++) {
        if (pic_kernels_set_simd(simd_paths[p]) != 0) {
            continue;
        }
        tried++;
        for (int dot = 0; dot <= 1; dot++) {    /* fp32 FMAs, then vdpbf16ps */
            pic_kernels_dot_gemm(dot);
            for (int n = 2; n <= 40; n += 38) { /* GEMV, then GEMM rows */
                be->matmul_w(y, x, &m, n, 0);
                for (int i = 0; i < n * d; i++) {
                    if (!(y[i] == want[i])) {
                        fail_msg("%s dot %d n=%d: y[%d] = %a, want %a (x %a)", simd_paths[p],
                                 dot, n, i, y[i], want[i], x[i]);
                    }
                }
            }
        }
        pic_kernels_dot_gemm(saved_dot);
    }
    assert_true(tried >= 1);
    assert_int_equal(pic_kernels_set_simd(saved), 0);
    free(eye); free(x); free(want); free(y); free(store);
}

static void
test_q8_matmul_odd_shapes(void **unused)
{
    check_matmul(PIC_WTYPE_Q8, 1, 32);
    check_matmul(PIC_WTYPE_Q8, 37, 96);
    check_matmul(PIC_WTYPE_Q8, 301, 160);
    check_matmul(PIC_WTYPE_Q8, 43, 544);        /* 17 blocks: 16 + an odd one */
    check_matmul(PIC_WTYPE_Q8, 700, 1024);
    check_matmul(PIC_WTYPE_Q8, 43, 1056);       /* two K-blocks of the small GEMM */
}

/* Every path the CPU has gives the scalar path's answer up to rounding,
 * for wmat_rows exactly (conversion is exact). */
static void
test_simd_paths_match_scalar(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    const char        *saved = pic_kernels_simd();
    int                rows = 129, cols = 224, tried = 0;
    float             *w = frand_vec((size_t) rows * cols, 1.0f);
    float             *x = frand_vec((size_t) 37 * cols, 1.0f);

    assert_int_equal(pic_kernels_set_simd("scalar"), 0);
    assert_int_equal(pic_kernels_set_simd("no-such-path"), -1);
    for (int t = PIC_WTYPE_F32; t <= PIC_WTYPE_Q8; t++) {
        void     *store;
        pic_wmat  m = make_wmat((pic_wtype) t, w, rows, cols, &store);
        float    *ref = malloc((size_t) rows * cols * sizeof(float));
        float    *got = malloc((size_t) rows * cols * sizeof(float));
        float     yr[37 * 129], yg[37 * 129];

        for (int n = 3; n <= 37; n += 34) {     /* GEMV, then the small GEMM */
            assert_int_equal(pic_kernels_set_simd("scalar"), 0);
            be->wmat_rows(ref, &m, 0, rows);
            be->matmul_w(yr, x, &m, n, 0);
            for (size_t p = 0; p < sizeof(simd_paths) / sizeof(simd_paths[0]); p++) {
                if (pic_kernels_set_simd(simd_paths[p]) != 0) {
                    continue;
                }
                tried++;
                assert_string_equal(pic_kernels_simd(), simd_paths[p]);
                be->wmat_rows(got, &m, 0, rows);
                assert_memory_equal(got, ref, (size_t) rows * cols * sizeof(float));
                be->matmul_w(yg, x, &m, n, 0);
                for (int i = 0; i < n * rows; i++) {
                    assert_true(fabsf(yg[i] - yr[i]) <= 1e-5f * (1.0f + fabsf(yr[i])));
                }
            }
        }
        free(store); free(ref); free(got);
    }
    assert_true(tried >= 2);                /* scalar and at least itself */
    assert_int_equal(pic_kernels_set_simd(saved), 0);
    free(w); free(x);
}

/* The small GEMM (AVX-512, BF16 / Q8, 5..64 rows) and the bf16 dot GEMM
 * (any n past the GEMV) give each row the same bits whatever n and the
 * row's place among them: rows 7..11 of a 64-row call equal a 5-row call
 * on those rows, and a 7-row one (groups of three cut differently),
 * threaded or not. */
static void
test_small_gemm_rows_independent_of_n(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    const char        *saved = pic_kernels_simd();
    int                rows = 301, cols = 1056, saved_dot = pic_kernels_dot_gemm(-1);
    float             *w = frand_vec((size_t) rows * cols, 1.0f);
    float             *x = frand_vec((size_t) 64 * cols, 1.0f);
    float             *y64 = malloc((size_t) 64 * rows * sizeof(float));
    float             *y5 = malloc((size_t) 7 * rows * sizeof(float));

    for (size_t p = 0; p < 4; p++) {            /* the AVX-512 paths */
        if (pic_kernels_set_simd(simd_paths[p]) != 0) {
            continue;
        }
        for (int t = PIC_WTYPE_BF16; t <= T_BF16DOT + 1; t++) {    /* + 1: bf16dot, vdpbf16ps */
            void     *store;
            pic_wmat  m = make_fmt(t > T_BF16DOT ? T_BF16DOT : t, w, rows, cols, &store);

            pic_kernels_dot_gemm(t > T_BF16DOT);
            be->matmul_w(y64, x, &m, 64, 0);
            be->matmul_w(y5, x + (size_t) 7 * cols, &m, 5, 0);
            assert_memory_equal(y5, y64 + (size_t) 7 * rows, (size_t) 5 * rows * sizeof(float));
            be->matmul_w(y5, x + (size_t) 6 * cols, &m, 7, 0);
            assert_memory_equal(y5, y64 + (size_t) 6 * rows, (size_t) 7 * rows * sizeof(float));
            free(store);
        }
        pic_kernels_dot_gemm(saved_dot);
    }
    assert_int_equal(pic_kernels_set_simd(saved), 0);
    free(w); free(x); free(y64); free(y5);
}

/* matmul_w_multi gives each matrix matmul_w's answer bit for bit (one
 * pass over all of them for decode; one matrix per call past it, Q8's
 * activations rounded once: the small GEMM at 40 rows, tiles + sgemm at
 * 70), with an F32 matrix beside the compact ones, on every path. */
static void
test_multi_matmul_is_matmul_of_each(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    const char        *saved = pic_kernels_simd();
    int                cols = 256, rows[3] = { 1201, 16, 77 };  /* past the serial cut */

    for (int t = PIC_WTYPE_F32; t <= T_BF16DOT; t++) {
        void           *store[3];
        float          *w[3];
        pic_wmat        m[3];
        const pic_wmat *ws[3];

        for (int i = 0; i < 3; i++) {
            w[i] = frand_vec((size_t) rows[i] * cols, 0.5f);
            m[i] = make_fmt(i == 1 ? PIC_WTYPE_F32 : t, w[i], rows[i], cols, &store[i]);
            ws[i] = &m[i];
        }
        for (size_t p = 0; p < sizeof(simd_paths) / sizeof(simd_paths[0]); p++) {
            if (pic_kernels_set_simd(simd_paths[p]) != 0) {
                continue;
            }
            for (int j = 0; j < 7; j++) {
                int    n = j < 5 ? j + 1 : j == 5 ? 40 : 70;
                float *x = frand_vec((size_t) n * cols, 1.0f);
                float *ys[3];

                for (int i = 0; i < 3; i++) {
                    ys[i] = frand_vec((size_t) n * rows[i], 1.0f);  /* overwritten */
                }
                be->matmul_w_multi(ys, x, ws, 3, n);
                for (int i = 0; i < 3; i++) {
                    float *want = malloc((size_t) n * rows[i] * sizeof(float));

                    be->matmul_w(want, x, &m[i], n, 0);
                    if (memcmp(want, ys[i], (size_t) n * rows[i] * sizeof(float)) != 0) {
                        fail_msg("%s %s n=%d: matrix %d differs from matmul_w",
                                 simd_paths[p], fmt_name(t), n, i);
                    }
                    free(want);
                    free(ys[i]);
                }
                free(x);
            }
        }
        for (int i = 0; i < 3; i++) {
            free(w[i]);
            free(store[i]);
        }
    }
    assert_int_equal(pic_kernels_set_simd(saved), 0);
}

static void
test_bf16_rounds_to_nearest_even(void **unused)
{
    /* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even is 1;
     * 1 + 3*2^-8 ties between 1+2^-7 and 1+2^-6: even is 1 + 2^-6 */
    float    src[5] = { 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-7f + 0x1p-20f,
                        -2.5f, NAN };
    uint16_t b[5];

    pic_bf16_from_f32(b, src, 5);
    assert_int_equal(b[0], 0x3f80);
    assert_int_equal(b[1], 0x3f82);
    assert_int_equal(b[2], 0x3f81);
    assert_int_equal(b[3], 0xc020);
    assert_true((b[4] & 0x7f80) == 0x7f80 && (b[4] & 0x7f) != 0);
}

static void
test_half_round_trip(void **unused)
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) {
            continue;                           /* NaN payloads */
        }
        assert_int_equal(pic_f32_to_half(pic_half_to_f32((uint16_t) h)), h);
    }
    assert_int_equal(pic_f32_to_half(1.0f + 0x1p-11f), 0x3c00);   /* tie to even */
    assert_int_equal(pic_f32_to_half(65520.0f), 0x7c00);          /* overflow */
}

static void
test_q8_error_is_half_a_step(void **unused)
{
    size_t    n = 32 * 64;
    float    *x = frand_vec(n, 3.0f), *y = malloc(n * sizeof(float));
    int8_t   *q = malloc(n);
    uint16_t *s = malloc(n / 32 * 2);
    pic_wmat  m = { .type = PIC_WTYPE_Q8, .rows = 64, .cols = 32, .data = q,
                    .scale = s };

    for (int i = 0; i < 32; i++) {
        x[5 * 32 + i] = 0.0f;                   /* an all-zero block */
    }
    pic_q8_from_f32(q, s, x, n);
    pic_backend_cpu()->wmat_rows(y, &m, 0, 64);
    for (size_t b = 0; b < n / 32; b++) {
        float d = pic_half_to_f32(s[b]);

        for (int i = 0; i < 32; i++) {
            assert_true(fabsf(y[b * 32 + i] - x[b * 32 + i]) <= 0.5f * d * 1.0001f);
            assert_true(q[b * 32 + i] >= -127 && q[b * 32 + i] <= 127);
        }
    }
    assert_true(y[5 * 32] == 0.0f && s[5] == 0);
    free(x); free(y); free(q); free(s);
}

/* Activations: |x − q·d| at most half a step, |q| <= 127, the block's
 * largest magnitude exactly ±127, a zero block all zero. */
static void
test_q8_activations_are_half_a_step(void **unused)
{
    size_t  n = 32 * 16;
    float  *x = frand_vec(n, 5.0f), d[16];
    int8_t *q = malloc(n);

    for (int i = 0; i < 32; i++) {
        x[3 * 32 + i] = 0.0f;
    }
    pic_q8_act_from_f32(q, d, x, n);
    for (size_t b = 0; b < n / 32; b++) {
        int big = 0;

        for (int i = 0; i < 32; i++) {
            assert_true(fabsf(q[b * 32 + i] * d[b] - x[b * 32 + i]) <= 0.5f * d[b] * 1.0001f);
            assert_true(q[b * 32 + i] >= -127 && q[b * 32 + i] <= 127);
            big |= q[b * 32 + i] == 127 || q[b * 32 + i] == -127;
        }
        assert_true(b == 3 ? d[b] == 0.0f : big);
    }
    free(x); free(q);
}

static void
test_view_and_bytes(void **unused)
{
    float    *w = frand_vec(64 * 96, 1.0f);
    void     *store;
    pic_wmat  m = make_wmat(PIC_WTYPE_Q8, w, 64, 96, &store);
    pic_wmat  v = pic_wmat_view(&m, 10, 7);
    float     a[7 * 96], b[64 * 96];

    assert_int_equal(pic_wmat_bytes(&m), 64 * 96 + 64 * 3 * 2);
    pic_backend_cpu()->wmat_rows(a, &v, 0, 7);
    pic_backend_cpu()->wmat_rows(b, &m, 0, 64);
    assert_memory_equal(a, b + 10 * 96, sizeof(a));
    free(store); free(w);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_matmul_odd_shapes),
        cmocka_unit_test(test_bf16_matmul_odd_shapes),
        cmocka_unit_test(test_q8_matmul_odd_shapes),
        cmocka_unit_test(test_bf16dot_matmul_odd_shapes),
        cmocka_unit_test(test_bf16dot_rounds_x_as_documented),
        cmocka_unit_test(test_simd_paths_match_scalar),
        cmocka_unit_test(test_small_gemm_rows_independent_of_n),
        cmocka_unit_test(test_multi_matmul_is_matmul_of_each),
        cmocka_unit_test(test_bf16_rounds_to_nearest_even),
        cmocka_unit_test(test_half_round_trip),
        cmocka_unit_test(test_q8_error_is_half_a_step),
        cmocka_unit_test(test_q8_activations_are_half_a_step),
        cmocka_unit_test(test_view_and_bytes),
    };

    pic_kernels_set_threads(2);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
