/*
 * wmat.c — matmul on compact weights (pic_wmat: F32 / BF16 / Q8) for the
 * CPU backend, and the conversions the loader uses to make them.
 *
 * GEMV (n <= PIC_WMAT_GEMV_ROWS, the decode step of every running
 * sequence), every format: each thread streams its slice of W once, four
 * weight rows at a time, prefetching PIC_WMAT_PF_BYTES ahead, and dots
 * them with the n activation rows, which were prepared once per call —
 * BF16 rows split into even and odd columns so a 32-bit load of W is two
 * fp32 values after a shift and a mask, Q8 rows quantised per 32-block so
 * a block's dot is an int8 one (VNNI vpdpbusd, or AVX2 maddubs, as
 * llama.cpp's Q8_0) — and accumulates in fp32.  Q8 past the GEMV rows on
 * a CPU with AVX-512 VNNI: an int8 GEMM of vpdpbusd on W packed per call
 * (see its section), the GEMV's arithmetic.  Small GEMM (5 to
 * PIC_WMAT_GEMM_ROWS rows, BF16 / Q8, AVX-512): W read as stored, eight
 * rows converted at a time into an L1 buffer and dotted with three rows of
 * x at a time (no repack; see the section).  GEMM (prefill): each
 * thread converts tiles of its rows of W to fp32 (4 MiB, reused) and hands
 * each tile to the fp32 sgemm (Q8: against the activations rounded as the
 * GEMV rounds them); F32 GEMM (and F32 GEMV on the scalar path) is
 * pic_cpu_matmul, OpenBLAS.  BF16 with xbf16 (--weights bf16dot) rounds x
 * to bf16 first: past the GEMV rows on AMX tiles where the CPU has them
 * (wmat_amx.c), on a CPU with AVX-512 BF16 where vdpbf16ps outruns the
 * fp32 FMA (pic_wmat_dot_gemm) a GEMM of vdpbf16ps on W as stored (see
 * its section), elsewhere the paths above on the rounded x.
 *
 * SIMD is picked at run time (pic_kernels_simd): AMX with AVX-512 BF16,
 * AVX-512 (F/BW/VL) with VNNI and BF16, with VNNI, AVX-512 without, AVX2 + FMA + F16C, or portable C; the vector
 * paths are compiled with __attribute__((target)) so the binary needs
 * nothing beyond the build baseline to start.
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
#define PIC_WMAT_GEMM_ROWS 64           /* then up to this: the small GEMM */
#define PIC_WMAT_TILE_BYTES (4 << 20)   /* fp32 tile of W per sgemm call */

/* GEMV software prefetch: for every 64 bytes of a weight row a kernel
 * reads, it asks for the line PIC_WMAT_PF_BYTES further on.  One core's
 * hardware prefetchers alone are latency-bound on this stream (the L2
 * streamer stops at every 4 KiB page; four q8 rows of 1 KiB share one):
 * decode of models/mid, one thread, tok per CPU-second, loaded machine,
 * alternated: q8 13.5-17.4 -> 22.3-24.9, bf16 12.2-12.6 -> 16.0-16.3, f32
 * 7.2-7.9 -> 7.8-9.1 (4-32 KiB all within the noise).  A prefetch past the
 * end of W is harmless (it never faults).  Tried again on the f32 GEMV at
 * its one-core ceiling (wmat_bench 1 262144 1024, GB/s per CPU-second,
 * three alternated runs, machine shared): T0 16 KiB 16.3-16.8 (the read
 * anchor 16.0-17.0), 4 / 32 / 64 KiB 14.9-16.4, _MM_HINT_T1 15.9-16.9
 * (the same), _MM_HINT_NTA 6.6-6.8 at 16 KiB, 14.4-14.9 at 4 KiB (worse:
 * NTA fills L1 alone, and four rows 16 KiB ahead outrun it); W in
 * 2 MiB transparent huge pages (madvise, AnonHugePages = W) 15.8-16.4
 * against 16.8-17.1 (no gain: the stream is bound by the core's
 * outstanding misses, not by page walks). */
#ifndef PIC_WMAT_PF_BYTES
#define PIC_WMAT_PF_BYTES 16384
#endif

/* GEMV weight rows per tile: 1 streams W in order, one row after the next
 * (the rows are contiguous: one sequential stream per thread); 0 means the
 * kernel's own several rows at a time (four, interleaved streams 2-4 KiB
 * apart, each activation load shared by the four).  Picked at run time
 * (pic_wmat_pick): 1 on AMD, 0 elsewhere; $PIC_GEMV_TILE=1|0 overrides.
 * AMD EPYC Zen 4, wmat_bench (65536, 1024) n = 1, GB/s, one thread, two
 * runs, quiet (read anchor 23.9-24.8): f32 16.6 -> 20.4-21.7, bf16 11.8-12.7
 * -> 19.1-20.3, q8 9.1-10.8 -> 24.0-25.1, bf16dot 13.3-14.7 -> 23.1-25.0.
 * The Intel Xeons of earlier sessions were tuned with four rows and are
 * kept on them until measured. */
static int pic_wmat_gemv_tile;

/* bf16dot past the GEMV rows on the avx512bf16 path: 1 multiplies with
 * vdpbf16ps on W as stored (the dot GEMM below), 0 in fp32 FMAs on x
 * rounded to bf16 (the small GEMM, tiles + sgemm: the products of two bf16
 * are exact in fp32 either way, only the order of the sums differs).  One
 * vdpbf16ps is 32 products: on AMD Zen 4 it issues as often as an fp32 FMA
 * of 16 (twice the rate), on Intel at a quarter of it.  This Xeon
 * (Sapphire Rapids class), one thread, a loop of 12 independent chains:
 * vdpbf16ps 75-78 GFLOP/s against vfmadd231ps zmm 155-157; bench/gemm_bench
 * (570, 1024) . (3584, 1024)^T, GFLOP per CPU-second, one run: the dot
 * GEMM 57.9, x rounded + tiles + sgemm 82.6 (sgemm on fp32 W: 92.2).
 * Picked at run time (pic_wmat_pick): 1 on AMD, 0 elsewhere;
 * $PIC_DOT_GEMM=1|0 overrides, pic_kernels_dot_gemm sets it. */
static int pic_wmat_dot_gemm;
static int pic_wmat_dot_forced = -1;    /* $PIC_DOT_GEMM or pic_kernels_dot_gemm */
#define PIC_WMAT_PF(p)                                                        \
    _mm_prefetch((const char *) (p) + PIC_WMAT_PF_BYTES, _MM_HINT_T0)


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

/* x as a bf16dot matmul multiplies it (bf16 bits): nearest even,
 * subnormals to signed zero (as vcvtneps2bf16 and vdpbf16ps treat them),
 * NaN quiet. */
static inline uint16_t
pic_bf16_act_bits(float v)
{
    uint32_t x;

    memcpy(&x, &v, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t) ((x >> 16) | 0x40);
    }
    if ((x & 0x7f800000u) == 0) {
        return (uint16_t) ((x >> 16) & 0x8000);
    }
    return (uint16_t) ((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

#if PIC_WMAT_X86
/* dst[i] = src[i] as pic_bf16_act_bits rounds it, back in fp32, for the
 * whole vectors of [i0, i1); the index reached.  AVX2, in the fp32 bits:
 * the rounding add, NaN made quiet, a zero exponent to the signed zero. */
__attribute__((target("avx2,fma")))
static size_t
pic_bf16_act_round_avx2(float *dst, const float *src, size_t i0, size_t i1)
{
    const __m256i lo = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i top = _mm256_set1_epi32((int) 0xffff0000u);
    const __m256i sgn = _mm256_set1_epi32((int) 0x80000000u);
    const __m256i quiet = _mm256_set1_epi32(0x00400000);
    size_t        i = i0;

    for (; i + 8 <= i1; i += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *) (src + i));
        __m256i r = _mm256_add_epi32(v, _mm256_add_epi32(lo, _mm256_and_si256(
                                                             _mm256_srli_epi32(v, 16), one)));
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(v, abs), inf);
        __m256i sub = _mm256_cmpeq_epi32(_mm256_and_si256(v, inf), _mm256_setzero_si256());

        r = _mm256_and_si256(r, top);
        r = _mm256_blendv_epi8(r, _mm256_and_si256(_mm256_or_si256(v, quiet), top), nan);
        r = _mm256_blendv_epi8(r, _mm256_and_si256(v, sgn), sub);
        _mm256_storeu_si256((__m256i *) (dst + i), r);
    }
    return i;
}
#endif

void
pic_bf16_act_round(float *dst, const float *src, size_t n)
{
    long nb = (long) ((n + 4095) / 4096);
#if PIC_WMAT_X86
    int  vec = strcmp(pic_kernels_simd(), "scalar") != 0;
#endif

    #pragma omp parallel for schedule(static) if (nb >= 32 && !omp_in_parallel())
    for (long b = 0; b < nb; b++) {
        size_t e = (size_t) (b + 1) * 4096 < n ? (size_t) (b + 1) * 4096 : n;
        size_t i = (size_t) b * 4096;

#if PIC_WMAT_X86
        if (vec) {
            i = pic_bf16_act_round_avx2(dst, src, i, e);
        }
#endif
        for (; i < e; i++) {
            dst[i] = pic_bf16_f32(pic_bf16_act_bits(src[i]));
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


/* --- activations ---
 *
 * Each matmul_w call prepares its activation rows once, in the calling
 * thread, for the kernel of its weight type: BF16 rows permuted so that one
 * 32-bit load of W pairs with an even and an odd column (pic_wmat_act.xp),
 * Q8 rows quantised per 32-block (.q, .d) so the dot is an integer one as
 * in llama.cpp's Q8_0 (the compact-weight decode is then bound by reading
 * W, not by converting it).
 */

typedef struct {
    const float  *x;        /* (n, cols) the activations as given */
    const float  *xw;       /* (n, cols) what BF16 W multiplies: x, or x
                             * rounded to bf16 (xbf16) */
    const float  *xp;       /* BF16: (n, cp) cp = cols rounded up to 32; per
                             * 32-chunk its 16 even then 16 odd columns, zeros
                             * past cols; else (and when xh is set) NULL */
    int           cp;
    const int8_t *q;        /* Q8: (n, cols) quantised activations */
    const float  *d;        /* Q8: (n, cols/32) their block scales */
    const uint16_t *xb;     /* BF16 xbf16 past the GEMV rows on a path with
                             * gemm_dot: (n, cols) x in bf16; else NULL */
    const uint16_t *xh;     /* BF16 xbf16 GEMV rows on that path: (n, cp) x
                             * in bf16, zeros past cols; else NULL */
    const int32_t *xs;      /* Q8: (n, cols/32) 128 x the sum of each block's
                             * quantised x (gemm_q8's correction for x + 128;
                             * made with .q, .d); else NULL */
} pic_wmat_act;

void
pic_q8_act_from_f32(int8_t *qs, float *d, const float *x, size_t n)
{
    PIC_OP_CHECK(n % PIC_Q8_BLOCK == 0);

    for (size_t b = 0; b < n / PIC_Q8_BLOCK; b++) {
        const float *xb = x + b * PIC_Q8_BLOCK;
        int8_t      *qb = qs + b * PIC_Q8_BLOCK;
        float        amax = 0.0f, id;

        for (int i = 0; i < PIC_Q8_BLOCK; i++) {
            float a = xb[i] < 0.0f ? -xb[i] : xb[i];

            amax = a > amax ? a : amax;
        }
        d[b] = amax / 127.0f;
        id = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int i = 0; i < PIC_Q8_BLOCK; i++) {
            float v = xb[i] * id;                           /* |v| <= 127 */

            qb[i] = (int8_t) (int) (v + (v < 0.0f ? -0.5f : 0.5f));
        }
    }
}

/* dst(n) = src(n) quantised per 32-block and back: the values the Q8 GEMV
 * multiplies (qs · d), for the GEMM path.  Blocks are independent: split
 * over the OpenMP team past 64 Ki values (a 570-row chunk of models/mid
 * rounds ~50 M values a forward: serial, a core idled through it). */
static void
pic_q8_act_round(float *dst, const float *src, size_t n)
{
    long nb = (long) (n / PIC_Q8_BLOCK);

    #pragma omp parallel for schedule(static) if (nb >= 2048 && !omp_in_parallel())
    for (long b = 0; b < nb; b++) {
        int8_t q[PIC_Q8_BLOCK];
        float  d;

        pic_q8_act_from_f32(q, &d, src + b * PIC_Q8_BLOCK, PIC_Q8_BLOCK);
        for (int i = 0; i < PIC_Q8_BLOCK; i++) {
            dst[b * PIC_Q8_BLOCK + i] = (float) q[i] * d;
        }
    }
}

/* The calling thread's activation buffer. */
static void *
pic_wmat_act_buf(size_t bytes)
{
    return pic_cpu_thread_buf(PIC_CPU_BUF_ACT, bytes);
}

/* Quantise n rows of x (n, cols) for gemm_q8 into the calling thread's
 * activation buffer: a->q, a->d as the GEMV's, a->xs their block sums
 * times 128.  Blocks are independent: split over the OpenMP team as
 * pic_q8_act_round splits them. */
static void
pic_wmat_q8_prep(pic_wmat_act *a, const float *x, int n, int cols)
{
    size_t  nq = (size_t) n * cols;
    long    nb = (long) (nq / PIC_Q8_BLOCK);
    char   *buf = pic_wmat_act_buf((size_t) nb * (sizeof(float) + sizeof(int32_t)) + nq);
    float  *d = (float *) buf;
    int32_t *xs = (int32_t *) (d + nb);
    int8_t *q = (int8_t *) (xs + nb);

    memset(a, 0, sizeof(*a));
    a->x = a->xw = x;
    #pragma omp parallel for schedule(static) if (nb >= 2048 && !omp_in_parallel())
    for (long b = 0; b < nb; b++) {
        int8_t *qb = q + b * PIC_Q8_BLOCK;
        int32_t sum = 0;

        pic_q8_act_from_f32(qb, d + b, x + b * PIC_Q8_BLOCK, PIC_Q8_BLOCK);
        for (int i = 0; i < PIC_Q8_BLOCK; i++) {
            sum += qb[i];
        }
        xs[b] = 128 * sum;
    }
    a->q = q;
    a->d = d;
    a->xs = xs;
}

/* Prepare n rows of x (n, w->cols) for the GEMV of w; x_bf16: the path's
 * bf16 conversion when it has a bf16 dot GEMV (pic_wmat_impl), else NULL. */
static void
pic_wmat_act_prep(pic_wmat_act *a, const float *x, int n, const pic_wmat *w,
                  void (*x_bf16)(uint16_t *, const float *, size_t))
{
    int cols = w->cols;

    memset(a, 0, sizeof(*a));
    a->x = a->xw = x;
    if (w->type == PIC_WTYPE_BF16) {
        int    cp = (cols + 31) & ~31;
        size_t nx = w->xbf16 ? (size_t) n * cols : 0;       /* rounded x behind */
        size_t nh = w->xbf16 && x_bf16 ? (size_t) n * cp : 0;   /* or bf16 x alone */
        float *xp;

        if (nh > 0) {
            uint16_t *xh = pic_wmat_act_buf(nh * sizeof(uint16_t));

            memset(xh, 0, nh * sizeof(uint16_t));
            for (int r = 0; r < n; r++) {
                x_bf16(xh + (size_t) r * cp, x + (size_t) r * cols, (size_t) cols);
            }
            a->xh = xh;
            a->cp = cp;
            return;                 /* the bf16 dot reads nothing else */
        }
        xp = pic_wmat_act_buf(((size_t) n * cp + nx) * sizeof(float));
        if (w->xbf16) {
            float *xr = xp + (size_t) n * cp;

            pic_bf16_act_round(xr, x, nx);
            a->xw = x = xr;
        }

        for (int r = 0; r < n; r++) {
            const float *xr = x + (size_t) r * cols;
            float       *pr = xp + (size_t) r * cp;
            int          c = 0;

            for (; c + 32 <= cols; c += 32) {       /* branch-free: vectorised */
                for (int j = 0; j < 16; j++) {
                    pr[c + j] = xr[c + 2 * j];
                    pr[c + 16 + j] = xr[c + 2 * j + 1];
                }
            }
            for (; c < cp; c += 32) {
                for (int j = 0; j < 16; j++) {
                    int e = c + 2 * j, o = e + 1;

                    pr[c + j] = e < cols ? xr[e] : 0.0f;
                    pr[c + 16 + j] = o < cols ? xr[o] : 0.0f;
                }
            }
        }
        a->xp = xp;
        a->cp = cp;
    } else if (w->type == PIC_WTYPE_Q8) {
        pic_wmat_q8_prep(a, x, n, cols);
    }
}


/* --- kernels: one set per SIMD path ---
 *
 * rows(dst, w, r0, nr): rows [r0, r0+nr) of W as fp32 (dst stride cols).
 * gemv(y, ldy, a, n, w, r0, r1, beta): y[r][o] = dot(W[o], x[r]) (+ beta
 * * y[r][o]) for o in [r0, r1), r < n <= PIC_WMAT_GEMV_ROWS, x as a
 * holds it (Q8: the quantised rows; the integer dot of a block is exact on
 * every path, only the fp32 sums of the scaled blocks round differently).
 */

typedef struct {
    const char *name;
    void (*rows)(float *dst, const pic_wmat *w, int r0, int nr);
    void (*gemv)(float *y, int ldy, const pic_wmat_act *a, int n,
                 const pic_wmat *w, int r0, int r1, float beta);
    int   gemv_f32;     /* 1: gemv takes F32 too (else OpenBLAS sgemv) */
    /* gemm(y, ldy, x, n, w, o0, o1, beta): as gemv on fp32 rows x (n, cols)
     * for BF16 / Q8 W and n up to PIC_WMAT_GEMM_ROWS; NULL: tiles + sgemm */
    void (*gemm)(float *y, int ldy, const float *x, int n, const pic_wmat *w,
                 int o0, int o1, float beta);
    /* gemm_dot(y, ldy, xb, n, w, o0, o1, beta): as gemm for a BF16 W with
     * xbf16, x already in bf16 (n, cols), any n > PIC_WMAT_GEMV_ROWS; and
     * x_bf16(dst, src, n) the rounding to bf16 it takes (pic_bf16_act_bits
     * bit for bit).  NULL: x rounded in fp32, then gemv / gemm / sgemm. */
    void (*gemm_dot)(float *y, int ldy, const uint16_t *xb, int n,
                     const pic_wmat *w, int o0, int o1, float beta);
    void (*x_bf16)(uint16_t *dst, const float *src, size_t n);
    /* gemm_q8(y, ldy, a, n, w, o0, o1, beta): as gemm for a Q8 W on the
     * quantised rows a->q, a->d, a->xs, any n > PIC_WMAT_GEMV_ROWS.  NULL:
     * the rounded x through gemm / sgemm. */
    void (*gemm_q8)(float *y, int ldy, const pic_wmat_act *a, int n,
                    const pic_wmat *w, int o0, int o1, float beta);
    /* 1: gemm_dot is the AMX tile GEMM (wmat_amx.c), xb packed for it by
     * pic_amx_x_pack; it outruns the fp32 FMAs, so bf16dot takes it by
     * default. */
    int   amx;
} pic_wmat_impl;

static float *pic_wmat_tile(size_t floats);

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

/* y row r, column o ← acc (+ beta · old) */
static inline void
pic_wmat_put(float *y, int ldy, int r, int o, float acc, float beta)
{
    float *yo = y + (size_t) r * ldy + o;

    *yo = acc + (beta != 0.0f ? beta * *yo : 0.0f);
}

static void
pic_wmat_gemv_scalar(float *y, int ldy, const pic_wmat_act *a, int n,
                     const pic_wmat *w, int r0, int r1, float beta)
{
    int cols = w->cols, nb = cols / PIC_Q8_BLOCK;

    for (int o = r0; o < r1; o++) {
        float acc[PIC_WMAT_GEMV_ROWS] = { 0 };

        if (w->type == PIC_WTYPE_BF16) {
            const uint16_t *s = (const uint16_t *) w->data + (size_t) o * cols;

            for (int c = 0; c < cols; c++) {
                float v = pic_bf16_f32(s[c]);

                for (int r = 0; r < n; r++) {
                    acc[r] += v * a->xw[(size_t) r * cols + c];
                }
            }
        } else {
            const int8_t   *q = (const int8_t *) w->data + (size_t) o * cols;
            const uint16_t *sc = w->scale + (size_t) o * nb;

            for (int b = 0; b < nb; b++) {
                float dw = pic_half_to_f32(sc[b]);

                for (int r = 0; r < n; r++) {
                    const int8_t *xq = a->q + (size_t) r * cols + b * PIC_Q8_BLOCK;
                    int32_t       s = 0;

                    for (int i = 0; i < PIC_Q8_BLOCK; i++) {
                        s += (int32_t) q[b * PIC_Q8_BLOCK + i] * xq[i];
                    }
                    acc[r] += dw * a->d[(size_t) r * nb + b] * (float) s;
                }
            }
        }
        for (int r = 0; r < n; r++) {
            pic_wmat_put(y, ldy, r, o, acc[r], beta);
        }
    }
}

#if PIC_WMAT_X86

/* ---- AVX2 + FMA + F16C ----
 *
 * Every kernel takes R weight rows at once against N activation rows (R,
 * N constants after inlining): the activation loads are shared by the R
 * rows and R streams of W are in flight. */

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

/* BF16: one 32-bit load holds an even and an odd column; the even one
 * shifted up, the odd one masked, each against its half of a->xp.  One
 * row at a time (R = 1, the AMD tile): four chains, not one (models/mid
 * decode, PIC_SIMD=avx2, warm_bench tg 64, 2 threads, Zen 4, three
 * alternated runs: 37.0-41.0 -> 42.8-52.1 tok/s, each run ahead). */
PIC_AVX2 static inline __attribute__((always_inline)) void
pic_avx2_bf16(float *acc, const pic_wmat *w, int o, const pic_wmat_act *a,
              int R, int N)
{
    int             cols = w->cols, c = 0;
    const uint16_t *W = (const uint16_t *) w->data + (size_t) o * cols;
    const __m256i   hi = _mm256_set1_epi32((int) 0xffff0000u);
    __m256          A[4][PIC_WMAT_GEMV_ROWS];

    for (int r = 0; r < R; r++) {
        for (int n = 0; n < N; n++) {
            A[r][n] = _mm256_setzero_ps();
        }
    }
    if (R == 1) {                   /* the AMD tile: four chains, as AVX-512's */
        __m256 B[3][PIC_WMAT_GEMV_ROWS];

        for (int n = 0; n < N; n++) {
            B[0][n] = B[1][n] = B[2][n] = _mm256_setzero_ps();
        }
        for (; c + 32 <= cols; c += 32) {
            __m256i v0 = _mm256_loadu_si256((const __m256i *) (W + c));
            __m256i v1 = _mm256_loadu_si256((const __m256i *) (W + c + 16));
            __m256  e0 = _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16));
            __m256  o0 = _mm256_castsi256_ps(_mm256_and_si256(v0, hi));
            __m256  e1 = _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16));
            __m256  o1 = _mm256_castsi256_ps(_mm256_and_si256(v1, hi));

            PIC_WMAT_PF(W + c);
            for (int n = 0; n < N; n++) {
                const float *p = a->xp + (size_t) n * a->cp + c;

                A[0][n] = _mm256_fmadd_ps(e0, _mm256_loadu_ps(p), A[0][n]);
                B[0][n] = _mm256_fmadd_ps(o0, _mm256_loadu_ps(p + 16), B[0][n]);
                B[1][n] = _mm256_fmadd_ps(e1, _mm256_loadu_ps(p + 8), B[1][n]);
                B[2][n] = _mm256_fmadd_ps(o1, _mm256_loadu_ps(p + 24), B[2][n]);
            }
        }
        for (int n = 0; n < N; n++) {
            A[0][n] = _mm256_add_ps(_mm256_add_ps(A[0][n], B[0][n]),
                                    _mm256_add_ps(B[1][n], B[2][n]));
        }
    }
    for (; c + 32 <= cols; c += 32) {
        for (int h = 0; h < 2; h++) {           /* 16 columns per half */
            __m256 xe[PIC_WMAT_GEMV_ROWS], xo[PIC_WMAT_GEMV_ROWS];

            for (int n = 0; n < N; n++) {
                const float *p = a->xp + (size_t) n * a->cp + c + 8 * h;

                xe[n] = _mm256_loadu_ps(p);
                xo[n] = _mm256_loadu_ps(p + 16);
            }
            for (int r = 0; r < R; r++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)
                                               (W + (size_t) r * cols + c + 16 * h));

                if (h == 0) {
                    PIC_WMAT_PF(W + (size_t) r * cols + c);
                }
                __m256  ev = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
                __m256  od = _mm256_castsi256_ps(_mm256_and_si256(v, hi));

                for (int n = 0; n < N; n++) {
                    A[r][n] = _mm256_fmadd_ps(ev, xe[n], A[r][n]);
                    A[r][n] = _mm256_fmadd_ps(od, xo[n], A[r][n]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++) {
        for (int n = 0; n < N; n++) {
            float s = pic_avx2_hsum(A[r][n]);

            for (int k = c; k < cols; k++) {
                s += pic_bf16_f32(W[(size_t) r * cols + k]) * a->xw[(size_t) n * cols + k];
            }
            acc[r * PIC_WMAT_GEMV_ROWS + n] = s;
        }
    }
}

/* Q8 (llama.cpp's AVX2 Q8_0 dot): |w| · (x signed by w) with maddubs,
 * pairs summed to int32, scaled per block. */
PIC_AVX2 static inline __attribute__((always_inline)) void
pic_avx2_q8(float *acc, const pic_wmat *w, int o, const pic_wmat_act *a,
            int R, int N)
{
    int             cols = w->cols, nb = cols / PIC_Q8_BLOCK;
    const int8_t   *Q = (const int8_t *) w->data + (size_t) o * cols;
    const uint16_t *S = w->scale + (size_t) o * nb;
    const __m256i   ones = _mm256_set1_epi16(1);
    __m256          A[4][PIC_WMAT_GEMV_ROWS];

    for (int r = 0; r < R; r++) {
        for (int n = 0; n < N; n++) {
            A[r][n] = _mm256_setzero_ps();
        }
    }
    for (int b = 0; b < nb; b++) {
        __m256i xv[PIC_WMAT_GEMV_ROWS];
        float   dx[PIC_WMAT_GEMV_ROWS];

        for (int n = 0; n < N; n++) {
            xv[n] = _mm256_loadu_si256((const __m256i *)
                                       (a->q + (size_t) n * cols + b * PIC_Q8_BLOCK));
            dx[n] = a->d[(size_t) n * nb + b];
        }
        for (int r = 0; r < R; r++) {
            __m256i wv = _mm256_loadu_si256((const __m256i *)
                                            (Q + (size_t) r * cols + b * PIC_Q8_BLOCK));
            __m256i aw = _mm256_abs_epi8(wv);
            float   dw = _cvtsh_ss(S[(size_t) r * nb + b]);

            if ((b & 1) == 0) {
                PIC_WMAT_PF(Q + (size_t) r * cols + b * PIC_Q8_BLOCK);
            }
            if ((b & 31) == 0) {
                PIC_WMAT_PF(S + (size_t) r * nb + b);
            }

            for (int n = 0; n < N; n++) {
                __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv[n], wv));

                p = _mm256_madd_epi16(p, ones);
                A[r][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),
                                          _mm256_set1_ps(dw * dx[n]), A[r][n]);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        for (int n = 0; n < N; n++) {
            acc[r * PIC_WMAT_GEMV_ROWS + n] = pic_avx2_hsum(A[r][n]);
        }
    }
}

/* F32: 16 columns a step (two vectors, one 64-byte line of each row). */
PIC_AVX2 static inline __attribute__((always_inline)) void
pic_avx2_f32(float *acc, const pic_wmat *w, int o, const pic_wmat_act *a,
             int R, int N)
{
    int          cols = w->cols, c = 0;
    const float *W = (const float *) w->data + (size_t) o * cols;
    __m256       A[4][PIC_WMAT_GEMV_ROWS], B[4][PIC_WMAT_GEMV_ROWS];

    for (int r = 0; r < R; r++) {
        for (int n = 0; n < N; n++) {
            A[r][n] = _mm256_setzero_ps();
            B[r][n] = _mm256_setzero_ps();
        }
    }
    for (; c + 16 <= cols; c += 16) {
        __m256 x0[PIC_WMAT_GEMV_ROWS], x1[PIC_WMAT_GEMV_ROWS];

        for (int n = 0; n < N; n++) {
            x0[n] = _mm256_loadu_ps(a->x + (size_t) n * cols + c);
            x1[n] = _mm256_loadu_ps(a->x + (size_t) n * cols + c + 8);
        }
        for (int r = 0; r < R; r++) {
            const float *wr = W + (size_t) r * cols + c;
            __m256       w0 = _mm256_loadu_ps(wr), w1 = _mm256_loadu_ps(wr + 8);

            PIC_WMAT_PF(wr);
            for (int n = 0; n < N; n++) {
                A[r][n] = _mm256_fmadd_ps(w0, x0[n], A[r][n]);
                B[r][n] = _mm256_fmadd_ps(w1, x1[n], B[r][n]);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        for (int n = 0; n < N; n++) {
            float s = pic_avx2_hsum(_mm256_add_ps(A[r][n], B[r][n]));

            for (int k = c; k < cols; k++) {
                s += W[(size_t) r * cols + k] * a->x[(size_t) n * cols + k];
            }
            acc[r * PIC_WMAT_GEMV_ROWS + n] = s;
        }
    }
}

/* One R×N tile of a type's kernel, then its stores. */
#define PIC_WMAT_TILE(kern, R, N)                                             \
    do {                                                                      \
        float acc_[8 * PIC_WMAT_GEMV_ROWS];                                   \
        kern(acc_, w, o, a, R, N);                                            \
        for (int r_ = 0; r_ < R; r_++) {                                      \
            for (int n_ = 0; n_ < N; n_++) {                                  \
                pic_wmat_put(y, ldy, n_, o + r_,                              \
                             acc_[r_ * PIC_WMAT_GEMV_ROWS + n_], beta);       \
            }                                                                 \
        }                                                                     \
    } while (0)

/* An AVX-512 GEMV kernel's end: acc[r][n] (rows PIC_WMAT_GEMV_ROWS apart)
 * = the sum of the 16 lanes of A[r][n], r < R, n < N. */
#define PIC_GEMV_SUMS(acc, A, R, N)                                           \
    do {                                                                      \
        for (int r_ = 0; r_ < (R); r_++) {                                    \
            for (int n_ = 0; n_ < (N); n_++) {                                \
                (acc)[r_ * PIC_WMAT_GEMV_ROWS + n_] = _mm512_reduce_add_ps((A)[r_][n_]); \
            }                                                                 \
        }                                                                     \
    } while (0)

/* Rows [r0, r1) with kern, R rows at a time and the rest one by one. */
#define PIC_WMAT_ROWS(kern, R, N)                                             \
    do {                                                                      \
        int o = r0;                                                           \
        for (; o + R <= r1; o += R) {                                         \
            PIC_WMAT_TILE(kern, R, N);                                        \
        }                                                                     \
        for (; o < r1; o++) {                                                 \
            PIC_WMAT_TILE(kern, 1, N);                                        \
        }                                                                     \
    } while (0)

/* The n switch: RA weight rows at a time for one or two activation rows,
 * RB for three or four (the accumulators fit the registers); or one row
 * at a time when pic_wmat_gemv_tile says so (see there). */
#define PIC_WMAT_BY_N(kern, RA, RB)                                           \
    do {                                                                      \
        if (pic_wmat_gemv_tile == 1) {                                        \
            switch (n) {                                                      \
            case 1:  PIC_WMAT_ROWS(kern, 1, 1); break;                        \
            case 2:  PIC_WMAT_ROWS(kern, 1, 2); break;                        \
            case 3:  PIC_WMAT_ROWS(kern, 1, 3); break;                        \
            default: PIC_WMAT_ROWS(kern, 1, 4); break;                        \
            }                                                                 \
            break;                                                            \
        }                                                                     \
        switch (n) {                                                          \
        case 1:  PIC_WMAT_ROWS(kern, RA, 1); break;                           \
        case 2:  PIC_WMAT_ROWS(kern, RA, 2); break;                           \
        case 3:  PIC_WMAT_ROWS(kern, RB, 3); break;                           \
        default: PIC_WMAT_ROWS(kern, RB, 4); break;                           \
        }                                                                     \
    } while (0)

PIC_AVX2 static void
pic_wmat_gemv_avx2_bf16(float *y, int ldy, const pic_wmat_act *a, int n,
                        const pic_wmat *w, int r0, int r1, float beta)
{
    PIC_WMAT_BY_N(pic_avx2_bf16, 4, 1);
}

PIC_AVX2 static void
pic_wmat_gemv_avx2_q8(float *y, int ldy, const pic_wmat_act *a, int n,
                      const pic_wmat *w, int r0, int r1, float beta)
{
    PIC_WMAT_BY_N(pic_avx2_q8, 4, 2);
}

PIC_AVX2 static void
pic_wmat_gemv_avx2_f32(float *y, int ldy, const pic_wmat_act *a, int n,
                       const pic_wmat *w, int r0, int r1, float beta)
{
    PIC_WMAT_BY_N(pic_avx2_f32, 4, 1);
}

PIC_AVX2 static void
pic_wmat_gemv_avx2(float *y, int ldy, const pic_wmat_act *a, int n,
                   const pic_wmat *w, int r0, int r1, float beta)
{
    if (w->type == PIC_WTYPE_F32) {
        pic_wmat_gemv_avx2_f32(y, ldy, a, n, w, r0, r1, beta);
    } else if (w->type == PIC_WTYPE_BF16) {
        pic_wmat_gemv_avx2_bf16(y, ldy, a, n, w, r0, r1, beta);
    } else {
        pic_wmat_gemv_avx2_q8(y, ldy, a, n, w, r0, r1, beta);
    }
}

/* ---- AVX-512 F/BW/VL (+ FMA, F16C); VNNI for the Q8 dot ---- */

#define PIC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define PIC_AVX512VNNI \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

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

/* BF16: 32 columns a step as 16 even (shifted up) and 16 odd (masked)
 * against a->xp, each into its own sum; the last partial step masked
 * (a->xp is zero there).  One row at a time (R = 1, the AMD tile): 64
 * columns a step into four chains (the bf16 dot's two), so the FMA
 * latency is not what a 2 KiB row waits on (models/mid decode, bf16,
 * warm_bench tg 64, 2 threads, Zen 4, four alternated runs: 33.1-39.0 ->
 * 35.4-46.8 tok/s, each run ahead). */
PIC_AVX512 static inline __attribute__((always_inline)) void
pic_avx512_bf16(float *acc, const pic_wmat *w, int o, const pic_wmat_act *a,
                int R, int N)
{
    int             cols = w->cols;
    const uint16_t *W = (const uint16_t *) w->data + (size_t) o * cols;
    const __m512i   hi = _mm512_set1_epi32((int) 0xffff0000u);
    __m512          A[4][PIC_WMAT_GEMV_ROWS], B[4][PIC_WMAT_GEMV_ROWS];
    int             c = 0;

    for (int r = 0; r < R; r++) {
        for (int n = 0; n < N; n++) {
            A[r][n] = _mm512_setzero_ps();
            B[r][n] = _mm512_setzero_ps();
        }
    }
    if (R == 1) {                   /* 64 columns a step, four chains */
        __m512 C[PIC_WMAT_GEMV_ROWS], D[PIC_WMAT_GEMV_ROWS];

        for (int n = 0; n < N; n++) {
            C[n] = _mm512_setzero_ps();
            D[n] = _mm512_setzero_ps();
        }
        for (; c + 64 <= cols; c += 64) {
            __m512i v0 = _mm512_loadu_si512(W + c);
            __m512i v1 = _mm512_loadu_si512(W + c + 32);
            __m512  e0 = _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16));
            __m512  o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, hi));
            __m512  e1 = _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16));
            __m512  o1 = _mm512_castsi512_ps(_mm512_and_si512(v1, hi));

            PIC_WMAT_PF(W + c);
            PIC_WMAT_PF(W + c + 32);
            for (int n = 0; n < N; n++) {
                const float *xr = a->xp + (size_t) n * a->cp + c;

                A[0][n] = _mm512_fmadd_ps(e0, _mm512_loadu_ps(xr), A[0][n]);
                B[0][n] = _mm512_fmadd_ps(o0, _mm512_loadu_ps(xr + 16), B[0][n]);
                C[n] = _mm512_fmadd_ps(e1, _mm512_loadu_ps(xr + 32), C[n]);
                D[n] = _mm512_fmadd_ps(o1, _mm512_loadu_ps(xr + 48), D[n]);
            }
        }
        for (int n = 0; n < N; n++) {
            A[0][n] = _mm512_add_ps(A[0][n], C[n]);
            B[0][n] = _mm512_add_ps(B[0][n], D[n]);
        }
    }
    for (; c < cols; c += 32) {
        __mmask32 m = cols - c >= 32 ? 0xffffffffu
                                     : (__mmask32) ((1u << (cols - c)) - 1);
        __m512    xe[PIC_WMAT_GEMV_ROWS], xo[PIC_WMAT_GEMV_ROWS];

        for (int n = 0; n < N; n++) {
            xe[n] = _mm512_loadu_ps(a->xp + (size_t) n * a->cp + c);
            xo[n] = _mm512_loadu_ps(a->xp + (size_t) n * a->cp + c + 16);
        }
        for (int r = 0; r < R; r++) {
            __m512i v = m == 0xffffffffu
                        ? _mm512_loadu_si512(W + (size_t) r * cols + c)
                        : _mm512_maskz_loadu_epi16(m, W + (size_t) r * cols + c);
            __m512  ev = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
            __m512  od = _mm512_castsi512_ps(_mm512_and_si512(v, hi));

            PIC_WMAT_PF(W + (size_t) r * cols + c);
            for (int n = 0; n < N; n++) {
                A[r][n] = _mm512_fmadd_ps(ev, xe[n], A[r][n]);
                B[r][n] = _mm512_fmadd_ps(od, xo[n], B[r][n]);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        for (int n = 0; n < N; n++) {
            acc[r * PIC_WMAT_GEMV_ROWS + n] =
                _mm512_reduce_add_ps(_mm512_add_ps(A[r][n], B[r][n]));
        }
    }
}

/* F32: 16 columns (one 64-byte line of each row) a step; the last partial
 * step masked.  R = 1: 64 columns a step into four chains, as BF16. */
PIC_AVX512 static inline __attribute__((always_inline)) void
pic_avx512_f32(float *acc, const pic_wmat *w, int o, const pic_wmat_act *a,
               int R, int N)
{
    int          cols = w->cols;
    const float *W = (const float *) w->data + (size_t) o * cols;
    __m512       A[4][PIC_WMAT_GEMV_ROWS];
    int          c = 0;

    for (int r = 0; r < R; r++) {
        for (int n = 0; n < N; n++) {
            A[r][n] = _mm512_setzero_ps();
        }
    }
    if (R == 1) {                   /* 64 columns a step, four chains */
        __m512 B[3][PIC_WMAT_GEMV_ROWS];

        for (int n = 0; n < N; n++) {
            B[0][n] = B[1][n] = B[2][n] = _mm512_setzero_ps();
        }
        for (; c + 64 <= cols; c += 64) {
            __m512 v0 = _mm512_loadu_ps(W + c), v1 = _mm512_loadu_ps(W + c + 16);
            __m512 v2 = _mm512_loadu_ps(W + c + 32), v3 = _mm512_loadu_ps(W + c + 48);

            PIC_WMAT_PF(W + c);
            PIC_WMAT_PF(W + c + 16);
            PIC_WMAT_PF(W + c + 32);
            PIC_WMAT_PF(W + c + 48);
            for (int n = 0; n < N; n++) {
                const float *xr = a->x + (size_t) n * cols + c;

                A[0][n] = _mm512_fmadd_ps(v0, _mm512_loadu_ps(xr), A[0][n]);
                B[0][n] = _mm512_fmadd_ps(v1, _mm512_loadu_ps(xr + 16), B[0][n]);
                B[1][n] = _mm512_fmadd_ps(v2, _mm512_loadu_ps(xr + 32), B[1][n]);
                B[2][n] = _mm512_fmadd_ps(v3, _mm512_loadu_ps(xr + 48), B[2][n]);
            }
        }
        for (int n = 0; n < N; n++) {
            A[0][n] = _mm512_add_ps(_mm512_add_ps(A[0][n], B[0][n]),
                                    _mm512_add_ps(B[1][n], B[2][n]));
        }
    }
    for (; c < cols; c += 16) {
        __mmask16 m = cols - c >= 16 ? 0xffff : (__mmask16) ((1u << (cols - c)) - 1);
        __m512    xv[PIC_WMAT_GEMV_ROWS];

        for (int n = 0; n < N; n++) {
            xv[n] = _mm512_maskz_loadu_ps(m, a->x + (size_t) n * cols + c);
        }
        for (int r = 0; r < R; r++) {
            const float *wr = W + (size_t) r * cols + c;
            __m512       wv = _mm512_maskz_loadu_ps(m, wr);

            PIC_WMAT_PF(wr);
            for (int n = 0; n < N; n++) {
                A[r][n] = _mm512_fmadd_ps(wv, xv[n], A[r][n]);
            }
        }
    }
    PIC_GEMV_SUMS(acc, A, R, N);
}

/* Q8 with VNNI: vpdpbusd wants unsigned × signed bytes, so x goes in as
 * x + 128 and the sum starts from −128 Σw (vpdpbusd of 128 and w, shared
 * by the N rows).  Two blocks per 512 bits: lanes 0–7 hold block b's four-
 * byte partial dots, lanes 8–15 block b+1's; each lane is scaled by its
 * block's dw · dx (16 blocks' scales loaded at once, permuted per pair). */
PIC_AVX512VNNI static inline __attribute__((always_inline)) void
pic_vnni_q8(float *acc, const pic_wmat *w, int o, const pic_wmat_act *a,
            int R, int N)
{
    int             cols = w->cols, nb = cols / PIC_Q8_BLOCK;
    const int8_t   *Q = (const int8_t *) w->data + (size_t) o * cols;
    const uint16_t *S = w->scale + (size_t) o * nb;
    const __m512i   bias = _mm512_set1_epi8((char) 0x80);
    const __m512i   pair0 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1,
                                             0, 0, 0, 0, 0, 0, 0, 0);
    __m512          A[4][PIC_WMAT_GEMV_ROWS];

    for (int r = 0; r < R; r++) {
        for (int n = 0; n < N; n++) {
            A[r][n] = _mm512_setzero_ps();
        }
    }
    for (int b0 = 0; b0 < nb; b0 += 16) {
        int       nbk = nb - b0 < 16 ? nb - b0 : 16;
        __mmask16 km = (__mmask16) ((1u << nbk) - 1);
        __m512    sc[4][PIC_WMAT_GEMV_ROWS];

        for (int r = 0; r < R; r++) {
            __m512 dw = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
                            km, S + (size_t) r * nb + b0));

            PIC_WMAT_PF(S + (size_t) r * nb + b0);

            for (int n = 0; n < N; n++) {
                sc[r][n] = _mm512_mul_ps(dw, _mm512_maskz_loadu_ps(
                                                 km, a->d + (size_t) n * nb + b0));
            }
        }
        for (int k = 0; k < nbk; k += 2) {
            __mmask64 lm = nbk - k >= 2 ? ~(__mmask64) 0 : (__mmask64) 0xffffffffu;
            __m512i   idx = _mm512_add_epi32(pair0, _mm512_set1_epi32(k));
            size_t    c = (size_t) (b0 + k) * PIC_Q8_BLOCK;
            __m512i   xu[PIC_WMAT_GEMV_ROWS];

            for (int n = 0; n < N; n++) {
                xu[n] = _mm512_xor_si512(lm == ~(__mmask64) 0
                            ? _mm512_loadu_si512(a->q + (size_t) n * cols + c)
                            : _mm512_maskz_loadu_epi8(lm, a->q + (size_t) n * cols + c),
                            bias);
            }
            for (int r = 0; r < R; r++) {
                __m512i wv = lm == ~(__mmask64) 0
                             ? _mm512_loadu_si512(Q + (size_t) r * cols + c)
                             : _mm512_maskz_loadu_epi8(lm, Q + (size_t) r * cols + c);
                __m512i nc = _mm512_sub_epi32(_mm512_setzero_si512(),
                                 _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, wv));

                PIC_WMAT_PF(Q + (size_t) r * cols + c);
                for (int n = 0; n < N; n++) {
                    __m512i p = _mm512_dpbusd_epi32(nc, xu[n], wv);

                    A[r][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
                                              _mm512_permutexvar_ps(idx, sc[r][n]),
                                              A[r][n]);
                }
            }
        }
    }
    PIC_GEMV_SUMS(acc, A, R, N);
}

PIC_AVX512 static void
pic_wmat_gemv_avx512_bf16(float *y, int ldy, const pic_wmat_act *a, int n,
                          const pic_wmat *w, int r0, int r1, float beta)
{
    PIC_WMAT_BY_N(pic_avx512_bf16, 4, 2);
}

PIC_AVX512 static void
pic_wmat_gemv_avx512_f32(float *y, int ldy, const pic_wmat_act *a, int n,
                         const pic_wmat *w, int r0, int r1, float beta)
{
    PIC_WMAT_BY_N(pic_avx512_f32, 4, 4);
}

PIC_AVX512VNNI static void
pic_wmat_gemv_vnni_q8(float *y, int ldy, const pic_wmat_act *a, int n,
                      const pic_wmat *w, int r0, int r1, float beta)
{
    PIC_WMAT_BY_N(pic_vnni_q8, 4, 2);
}

/* AVX-512 without VNNI: the AVX2 Q8 dot. */
PIC_AVX512 static void
pic_wmat_gemv_avx512(float *y, int ldy, const pic_wmat_act *a, int n,
                     const pic_wmat *w, int r0, int r1, float beta)
{
    if (w->type == PIC_WTYPE_F32) {
        pic_wmat_gemv_avx512_f32(y, ldy, a, n, w, r0, r1, beta);
    } else if (w->type == PIC_WTYPE_BF16) {
        pic_wmat_gemv_avx512_bf16(y, ldy, a, n, w, r0, r1, beta);
    } else {
        pic_wmat_gemv_avx2_q8(y, ldy, a, n, w, r0, r1, beta);
    }
}

PIC_AVX512VNNI static void
pic_wmat_gemv_avx512vnni(float *y, int ldy, const pic_wmat_act *a, int n,
                         const pic_wmat *w, int r0, int r1, float beta)
{
    if (w->type == PIC_WTYPE_Q8) {
        pic_wmat_gemv_vnni_q8(y, ldy, a, n, w, r0, r1, beta);
    } else {
        pic_wmat_gemv_avx512(y, ldy, a, n, w, r0, r1, beta);
    }
}


/* --- small GEMM (AVX-512): 5 to PIC_WMAT_GEMM_ROWS rows, BF16 / Q8 ---
 *
 * OpenBLAS repacks all of W for every call, whatever n: after our tile
 * conversion to fp32, the packing is paid twice, and for a few dozen rows
 * it is not amortised (bf16, one thread, (1792, 1024), n = 40: 58 GFLOP/s
 * against 140 at n = 570).  Here W is read as stored (row-major, no
 * repack): eight rows of it at a time, converted to fp32 over a K-block
 * into a per-thread buffer that stays in L1, and dotted with three
 * activation rows at a time (24 sums of 16 lanes, each reduced once per
 * K-block), so each weight row is converted once and read from L1 by all
 * n rows.  Each y[r][o] is the same sum whatever n or the row's place in
 * its group of three.  Measured against the tile + sgemm path, one thread,
 * CPU time, loaded machine: bf16 (1792, 1024) n = 16 / 40 / 64: 2.1x /
 * 1.2x / 1.3x, (512, 3584): 2.0x / 1.3x / 1.1x, q8 alike; n = 128 0.9x, so
 * it stops at 64.  F32 keeps OpenBLAS (0.8-1.3x here). */

#define PIC_WMAT_GEMM_KC 1024           /* K-block (fp32 buffer (8, kc + 16)) */

/* The eight sums of a0..a7 (16 lanes each), in order. */
PIC_AVX512 static inline __m256
pic_avx512_sum8(__m512 a0, __m512 a1, __m512 a2, __m512 a3, __m512 a4,
                __m512 a5, __m512 a6, __m512 a7)
{
    __m512 a01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    __m512 a23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    __m512 a45 = _mm512_add_ps(_mm512_unpacklo_ps(a4, a5), _mm512_unpackhi_ps(a4, a5));
    __m512 a67 = _mm512_add_ps(_mm512_unpacklo_ps(a6, a7), _mm512_unpackhi_ps(a6, a7));
    __m512d p01 = _mm512_castps_pd(a01), p23 = _mm512_castps_pd(a23);
    __m512d p45 = _mm512_castps_pd(a45), p67 = _mm512_castps_pd(a67);
    __m512 lo = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(p01, p23)),
                              _mm512_castpd_ps(_mm512_unpackhi_pd(p01, p23)));
    __m512 hi = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(p45, p67)),
                              _mm512_castpd_ps(_mm512_unpackhi_pd(p45, p67)));
    __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(lo, hi, 0x88),
                             _mm512_shuffle_f32x4(lo, hi, 0xdd));
    __m512 v = _mm512_add_ps(_mm512_shuffle_f32x4(u, u, 0x88),
                             _mm512_shuffle_f32x4(u, u, 0xdd));

    return _mm512_castps512_ps256(v);
}

/* One K step of a tile: x rows 0..mr-1 and the 8 rows of b, vectors of
 * type T read by LD, into the accumulators c<t><j> by MAC(c, x, w). */
#define PIC_TILE_MAC3(MAC, j)                                                 \
    do {                                                                      \
        c0##j = MAC(c0##j, x0, wv);                                           \
        if (mr > 1) c1##j = MAC(c1##j, x1, wv);                               \
        if (mr > 2) c2##j = MAC(c2##j, x2, wv);                               \
    } while (0)

#define PIC_TILE_STEP(T, LD, MAC)                                             \
    do {                                                                      \
        T x0 = LD(x + k), x1 = mr > 1 ? LD(x + ldx + k) : x0, wv;             \
        T x2 = mr > 2 ? LD(x + 2 * (size_t) ldx + k) : x0;                    \
        wv = LD(b + 0 * (size_t) ldb + k);                                    \
        PIC_TILE_MAC3(MAC, 0);                                                \
        wv = LD(b + 1 * (size_t) ldb + k);                                    \
        PIC_TILE_MAC3(MAC, 1);                                                \
        wv = LD(b + 2 * (size_t) ldb + k);                                    \
        PIC_TILE_MAC3(MAC, 2);                                                \
        wv = LD(b + 3 * (size_t) ldb + k);                                    \
        PIC_TILE_MAC3(MAC, 3);                                                \
        wv = LD(b + 4 * (size_t) ldb + k);                                    \
        PIC_TILE_MAC3(MAC, 4);                                                \
        wv = LD(b + 5 * (size_t) ldb + k);                                    \
        PIC_TILE_MAC3(MAC, 5);                                                \
        wv = LD(b + 6 * (size_t) ldb + k);                                    \
        PIC_TILE_MAC3(MAC, 6);                                                \
        wv = LD(b + 7 * (size_t) ldb + k);                                    \
        PIC_TILE_MAC3(MAC, 7);                                                \
    } while (0)

#define PIC_GEMM_PUT(t)                                                       \
    do {                                                                      \
        float  *yr = y + (size_t) (t) * ldy;                                  \
        __m256  s = pic_avx512_sum8(c##t##0, c##t##1, c##t##2, c##t##3,       \
                                    c##t##4, c##t##5, c##t##6, c##t##7);      \
        if (add) {                                                            \
            s = _mm256_add_ps(s, _mm256_maskz_loadu_ps(om, yr));              \
        } else if (beta != 0.0f) {                                            \
            s = _mm256_fmadd_ps(_mm256_set1_ps(beta),                         \
                                _mm256_maskz_loadu_ps(om, yr), s);            \
        }                                                                     \
        _mm256_mask_storeu_ps(yr, om, s);                                     \
    } while (0)

#define PIC_LD(p) _mm512_loadu_ps(p)
#define PIC_LDM(p) _mm512_maskz_loadu_ps(m, p)
#define PIC_FMA(c, x, w) _mm512_fmadd_ps(x, w, c)

/* The body of a tile function: VW columns of K a step (T vectors, LD / LDM
 * full and masked loads, MASK_T the mask type), then y (+)= the sums. */
#define PIC_TILE_BODY(T, VW, MASK_T, LD, LDM, MAC)                            \
    do {                                                                      \
        __m512   c00, c01, c02, c03, c04, c05, c06, c07;                      \
        __m512   c10, c11, c12, c13, c14, c15, c16, c17;                      \
        __m512   c20, c21, c22, c23, c24, c25, c26, c27;                      \
        __mmask8 om = (__mmask8) ((1u << nr) - 1);                            \
        int      k = 0;                                                       \
                                                                              \
        c00 = c01 = c02 = c03 = c04 = c05 = c06 = c07 = _mm512_setzero_ps();  \
        c10 = c11 = c12 = c13 = c14 = c15 = c16 = c17 = c00;                  \
        c20 = c21 = c22 = c23 = c24 = c25 = c26 = c27 = c00;                  \
        for (; k + VW <= kc; k += VW) {                                       \
            PIC_TILE_STEP(T, LD, MAC);                                        \
        }                                                                     \
        if (k < kc) {                                                         \
            MASK_T m = (MASK_T) ((1ull << (kc - k)) - 1);                     \
                                                                              \
            PIC_TILE_STEP(T, LDM, MAC);                                       \
        }                                                                     \
        PIC_GEMM_PUT(0);                                                      \
        if (mr > 1) {                                                         \
            PIC_GEMM_PUT(1);                                                  \
        }                                                                     \
        if (mr > 2) {                                                         \
            PIC_GEMM_PUT(2);                                                  \
        }                                                                     \
    } while (0)

/* y[t][0..nr) (+)= x[t][0..kc) . b[j][0..kc) for t < mr (1..3), j < nr
 * (1..8; b has 8 rows, ldb apart, zero past nr): add 1 adds to y (a later
 * K-block), else y = sum + beta * y (beta 0: y not read). */
PIC_AVX512 static inline __attribute__((always_inline)) void
pic_gemm_tile(float *y, int ldy, const float *x, int ldx, const float *b,
              int ldb, int kc, int mr, int nr, int add, float beta)
{
    PIC_TILE_BODY(__m512, 16, __mmask16, PIC_LD, PIC_LDM, PIC_FMA);
}

/* Rows [o, o+nr) of W, columns [k0, k0+kc), as fp32 into b (8, ldb); rows
 * past nr zero.  Q8: k0 and kc multiples of PIC_Q8_BLOCK. */
PIC_AVX512 static void
pic_gemm_load_w(float *b, int ldb, const pic_wmat *w, int o, int nr, int k0,
                int kc)
{
    for (int j = 0; j < 8; j++) {
        float  *d = b + (size_t) j * ldb;
        size_t  off = (size_t) (o + j) * w->cols + k0;
        int     k = 0;

        if (j >= nr) {
            memset(d, 0, (size_t) kc * sizeof(float));
        } else if (w->type == PIC_WTYPE_BF16) {
            const uint16_t *s = (const uint16_t *) w->data + off;

            for (; k + 16 <= kc; k += 16) {
                _mm512_storeu_ps(d + k, pic_avx512_bf16x16(s + k));
            }
            for (; k < kc; k++) {
                d[k] = pic_bf16_f32(s[k]);
            }
        } else {
            const int8_t   *q = (const int8_t *) w->data + off;
            const uint16_t *sc = w->scale + off / PIC_Q8_BLOCK;

            for (; k < kc; k += PIC_Q8_BLOCK) {
                __m512 dv = _mm512_set1_ps(_cvtsh_ss(sc[k / PIC_Q8_BLOCK]));

                _mm512_storeu_ps(d + k, _mm512_mul_ps(dv, pic_avx512_q8x16(q + k)));
                _mm512_storeu_ps(d + k + 16,
                                 _mm512_mul_ps(dv, pic_avx512_q8x16(q + k + 16)));
            }
        }
    }
}

/* y(n, ldy)[., o0..o1) = x(n, cols) . W[o0..o1)^T (+ beta * y), W BF16 or
 * Q8 (x then rounded as the GEMV rounds it), n any (see above for when). */
PIC_AVX512 static void
pic_wmat_gemm_avx512(float *y, int ldy, const float *x, int n,
                     const pic_wmat *w, int o0, int o1, float beta)
{
    int    K = w->cols, nkb = (K + PIC_WMAT_GEMM_KC - 1) / PIC_WMAT_GEMM_KC;
    int    kcs = ((K + nkb - 1) / nkb + PIC_Q8_BLOCK - 1) & ~(PIC_Q8_BLOCK - 1);
    int    ldb = kcs + 16;             /* rows of b not 4 KiB apart */
    float *b = pic_wmat_tile((size_t) 8 * ldb);

    for (int k0 = 0; k0 < K; k0 += kcs) {
        int kc = K - k0 < kcs ? K - k0 : kcs;

        for (int o = o0; o < o1; o += 8) {
            int nr = o1 - o < 8 ? o1 - o : 8;

            pic_gemm_load_w(b, ldb, w, o, nr, k0, kc);
            for (int t = 0; t < n; t += 3) {
                float       *yt = y + (size_t) t * ldy + o;
                const float *xt = x + (size_t) t * K + k0;

                if (n - t >= 3) {
                    pic_gemm_tile(yt, ldy, xt, K, b, ldb, kc, 3, nr, k0 > 0, beta);
                } else if (n - t == 2) {
                    pic_gemm_tile(yt, ldy, xt, K, b, ldb, kc, 2, nr, k0 > 0, beta);
                } else {
                    pic_gemm_tile(yt, ldy, xt, K, b, ldb, kc, 1, nr, k0 > 0, beta);
                }
            }
        }
    }
}


/* --- bf16 dot GEMM (AVX-512 BF16): BF16 W with xbf16, n > GEMV rows ---
 *
 * vdpbf16ps multiplies two adjacent bf16 columns of a W row by the same two
 * of an x row and adds both products to one fp32 lane: row-major bf16 is
 * already its operand layout, so W is read as stored (no conversion, no
 * repack) and x is rounded to bf16 once per call.  The tile is the small
 * GEMM's: three x rows by eight W rows, 24 accumulators of 16 lanes,
 * reduced once per K-block (PIC_WMAT_DOT_KC: eight W rows of it stay in
 * L1, the x rows of it in L2); every n takes it, so a row's sums never
 * depend on n.  The products of two bf16 are exact in fp32; only the order
 * of the fp32 sums differs from the other paths on the rounded x.  One
 * thread, Zen 4 (AVX-512 BF16 at twice the fp32 FMA rate per
 * instruction), GFLOP/s, x (570, K) . W^T against OpenBLAS sgemm on the
 * same W in fp32: (3584, 1024) 150-180 vs 95-100, (1024, 3584) 160-190 vs
 * 100 (bench sketch, machine shared; see bench/peer.py for the model). */

#define PIC_WMAT_DOT_KC 2048            /* K-block, multiple of 32 */

#define PIC_AVX512BF16                                                        \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16," \
                          "avx2,fma,f16c")))

#define PIC_LDH(p) ((__m512bh) _mm512_loadu_si512(p))
#define PIC_LDHM(p) ((__m512bh) _mm512_maskz_loadu_epi16(m, p))

/* y[t][0..nr) (+)= x[t][0..kc) . b[j][0..kc) for t < mr (1..3), j < nr
 * (1..8), x and b bf16 (b has 8 readable rows, ldb apart): add and beta as
 * pic_gemm_tile's. */
PIC_AVX512BF16 static inline __attribute__((always_inline)) void
pic_dot_tile(float *y, int ldy, const uint16_t *x, int ldx, const uint16_t *b,
             int ldb, int kc, int mr, int nr, int add, float beta)
{
    PIC_TILE_BODY(__m512bh, 32, __mmask32, PIC_LDH, PIC_LDHM, _mm512_dpbf16_ps);
}

/* BF16 xbf16 GEMV: 32 columns (one 64-byte line of each W row) a step, one
 * vdpbf16ps per activation row on W as stored; the last partial step
 * masked (xh is zero past cols). */
PIC_AVX512BF16 static inline __attribute__((always_inline)) void
pic_avx512bf16_dot(float *acc, const pic_wmat *w, int o, const pic_wmat_act *a,
                   int R, int N)
{
    int             cols = w->cols;
    const uint16_t *W = (const uint16_t *) w->data + (size_t) o * cols;
    __m512          A[8][PIC_WMAT_GEMV_ROWS];
    int             c = 0;

    for (int r = 0; r < R; r++) {
        for (int n = 0; n < N; n++) {
            A[r][n] = _mm512_setzero_ps();
        }
    }
    if (R == 1) {                   /* a second chain of sums per row */
        __m512 B[PIC_WMAT_GEMV_ROWS];

        for (int n = 0; n < N; n++) {
            B[n] = _mm512_setzero_ps();
        }
        for (; c + 64 <= cols; c += 64) {
            __m512bh v0 = (__m512bh) _mm512_loadu_si512(W + c);
            __m512bh v1 = (__m512bh) _mm512_loadu_si512(W + c + 32);

            PIC_WMAT_PF(W + c);
            PIC_WMAT_PF(W + c + 32);
            for (int n = 0; n < N; n++) {
                const uint16_t *xr = a->xh + (size_t) n * a->cp + c;

                A[0][n] = _mm512_dpbf16_ps(A[0][n], (__m512bh) _mm512_loadu_si512(xr), v0);
                B[n] = _mm512_dpbf16_ps(B[n], (__m512bh) _mm512_loadu_si512(xr + 32), v1);
            }
        }
        for (int n = 0; n < N; n++) {
            A[0][n] = _mm512_add_ps(A[0][n], B[n]);
        }
    }
    for (; c < cols; c += 32) {
        __mmask32 m = cols - c >= 32 ? 0xffffffffu
                                     : (__mmask32) ((1u << (cols - c)) - 1);
        __m512bh  xv[PIC_WMAT_GEMV_ROWS];

        for (int n = 0; n < N; n++) {
            xv[n] = (__m512bh) _mm512_loadu_si512(a->xh + (size_t) n * a->cp + c);
        }
        for (int r = 0; r < R; r++) {
            __m512bh v = (__m512bh) _mm512_maskz_loadu_epi16(m, W + (size_t) r * cols + c);

            PIC_WMAT_PF(W + (size_t) r * cols + c);
            for (int n = 0; n < N; n++) {
                A[r][n] = _mm512_dpbf16_ps(A[r][n], xv[n], v);
            }
        }
    }
    PIC_GEMV_SUMS(acc, A, R, N);
}

/* The avx512bf16 path's GEMV: bf16 dots for BF16 xbf16 (a->xh), the
 * avx512vnni path's kernels for everything else. */
PIC_AVX512BF16 static void
pic_wmat_gemv_avx512bf16(float *y, int ldy, const pic_wmat_act *a, int n,
                         const pic_wmat *w, int r0, int r1, float beta)
{
    if (w->type == PIC_WTYPE_BF16 && a->xh != NULL) {
        PIC_WMAT_BY_N(pic_avx512bf16_dot, 8, 4);
    } else {
        pic_wmat_gemv_avx512vnni(y, ldy, a, n, w, r0, r1, beta);
    }
}

/* dst(n) = src(n) in bf16 as pic_bf16_act_bits makes it (vcvtneps2bf16:
 * nearest even, subnormals to zero; the tail through the scalar). */
PIC_AVX512BF16 static void
pic_wmat_x_bf16_avx512bf16(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));

        _mm256_storeu_si256((__m256i *) (dst + i), (__m256i) h);
    }
    for (; i < n; i++) {
        dst[i] = pic_bf16_act_bits(src[i]);
    }
}

/* y(n, ldy)[., o0..o1) = xb(n, cols) . W[o0..o1)^T (+ beta * y), W BF16,
 * xb its bf16 activations, n any. */
PIC_AVX512BF16 static void
pic_wmat_gemm_dot_avx512bf16(float *y, int ldy, const uint16_t *xb, int n,
                             const pic_wmat *w, int o0, int o1, float beta)
{
    int             K = w->cols, nkb = (K + PIC_WMAT_DOT_KC - 1) / PIC_WMAT_DOT_KC;
    int             kcs = ((K + nkb - 1) / nkb + 31) & ~31;
    const uint16_t *W = w->data;
    uint16_t       *pad = NULL;     /* (8, kcs): a last group of < 8 rows */

    for (int k0 = 0; k0 < K; k0 += kcs) {
        int kc = K - k0 < kcs ? K - k0 : kcs;

        for (int o = o0; o < o1; o += 8) {
            int             nr = o1 - o < 8 ? o1 - o : 8, ldb = K;
            const uint16_t *b = W + (size_t) o * K + k0;

            if (nr < 8) {               /* rows past o1 may be past W */
                if (pad == NULL) {
                    pad = (uint16_t *) pic_wmat_tile((size_t) 8 * kcs / 2);
                }
                memset(pad, 0, (size_t) 8 * kcs * sizeof(uint16_t));
                for (int j = 0; j < nr; j++) {
                    memcpy(pad + (size_t) j * kcs, b + (size_t) j * K,
                           (size_t) kc * sizeof(uint16_t));
                }
                b = pad;
                ldb = kcs;
            }
            for (int t = 0; t < n; t += 3) {
                float          *yt = y + (size_t) t * ldy + o;
                const uint16_t *xt = xb + (size_t) t * K + k0;

                if (n - t >= 3) {
                    pic_dot_tile(yt, ldy, xt, K, b, ldb, kc, 3, nr, k0 > 0, beta);
                } else if (n - t == 2) {
                    pic_dot_tile(yt, ldy, xt, K, b, ldb, kc, 2, nr, k0 > 0, beta);
                } else {
                    pic_dot_tile(yt, ldy, xt, K, b, ldb, kc, 1, nr, k0 > 0, beta);
                }
            }
        }
    }
}


/* y(n, ldy)[., 0..nb) = x(n, K) . b(nb, K)^T on bf16 operands, rows ldx
 * and ldb apart, K-blocks of kcb (a multiple of 32): the dot GEMM's tile
 * on operands that are not a weight (the attention's products in
 * bf16dot).  b readable for whole groups of eight rows. */
PIC_AVX512BF16 static void
pic_dot_gemm_avx512bf16(float *y, int ldy, const uint16_t *x, int ldx, int n,
                        const uint16_t *b, int ldb, int nb, int K, int kcb)
{
    for (int k0 = 0; k0 < K; k0 += kcb) {
        int kc = K - k0 < kcb ? K - k0 : kcb;

        for (int o = 0; o < nb; o += 8) {
            int             nr = nb - o < 8 ? nb - o : 8;
            const uint16_t *bo = b + (size_t) o * ldb + k0;

            for (int t = 0; t < n; t += 3) {
                float          *yt = y + (size_t) t * ldy + o;
                const uint16_t *xt = x + (size_t) t * ldx + k0;

                if (n - t >= 3) {
                    pic_dot_tile(yt, ldy, xt, ldx, bo, ldb, kc, 3, nr, k0 > 0, 0.0f);
                } else if (n - t == 2) {
                    pic_dot_tile(yt, ldy, xt, ldx, bo, ldb, kc, 2, nr, k0 > 0, 0.0f);
                } else {
                    pic_dot_tile(yt, ldy, xt, ldx, bo, ldb, kc, 1, nr, k0 > 0, 0.0f);
                }
            }
        }
    }
}


/* --- Q8 int8 GEMM (AVX-512 VNNI): Q8 W, n > GEMV rows ---
 *
 * The arithmetic of the Q8 GEMV (and of llama.cpp's Q8_0): x quantised per
 * 32-block, each block's integer dot exact, scaled by dw · dx and summed in
 * fp32 — here as an outer product.  W is packed per call, 32 output rows
 * (a panel) at a time, into the operand layout of vpdpbusd with the
 * outputs across the lanes: for every four columns, 32 lanes of four bytes
 * (row o+j's columns 4c..4c+3 in lane j), stored as w + 128 (vpdpbusd
 * wants one operand unsigned), and the panel's block scales as fp32 beside
 * it (32 K + 128 K/32 bytes: in L2 for every x row).  Four x rows at a
 * time take the panel: per block, eight vpdpbusd per row and vector of 16
 * outputs, x's four bytes broadcast from memory, then the int32 sums less
 * 128 Σx (x's block sums, made with the quantisation), to fp32, times
 * dx · dw, added.  Each y[r][o] is the same sum whatever n and the row's
 * place among them.  It takes every n past the GEMV rows (the small GEMM
 * and the tiles + sgemm are for CPUs without VNNI).  AMD EPYC Zen 4,
 * models/mid q8, warm_bench pp N, 2 threads, tok/s, PIC_SIMD=avx512 (tiles
 * + sgemm, small GEMM to 64) against this: N = 512 465-487 -> 1175-1195,
 * 128 422 -> 1056, 64 217 -> 668, 40 203 -> 493, 16 206 -> 242, 8 183 ->
 * 179 (bf16dot at 512 on the same run: 848). */

#define PIC_Q8G_NR 32                   /* outputs per panel: two vectors */
#define PIC_Q8G_MR 4                    /* x rows per tile */

/* Rows [o, o+nr) of Q8 W packed for the tile: pw (cols/4, 32, 4) bytes of
 * w + 128 (rows past nr: 128, i.e. w = 0), dw (cols/32, 32) their block
 * scales (0 past nr). */
PIC_AVX512VNNI static void
pic_q8g_pack(uint8_t *pw, float *dw, const pic_wmat *w, int o, int nr)
{
    int           K = w->cols, nb = K / PIC_Q8_BLOCK;
    const int8_t *Q = (const int8_t *) w->data + (size_t) o * K;

    for (int j = 0; j < PIC_Q8G_NR; j++) {
        const int8_t   *q = Q + (size_t) j * K;
        const uint16_t *sc = w->scale + (size_t) (o + j) * nb;
        uint32_t       *dst = (uint32_t *) pw + j;

        if (j >= nr) {
            for (int c = 0; c < K / 4; c++) {
                dst[(size_t) c * PIC_Q8G_NR] = 0x80808080u;
            }
            for (int b = 0; b < nb; b++) {
                dw[(size_t) b * PIC_Q8G_NR + j] = 0.0f;
            }
            continue;
        }
        for (int c = 0; c < K / 4; c++) {
            uint32_t v;

            memcpy(&v, q + 4 * c, 4);
            dst[(size_t) c * PIC_Q8G_NR] = v ^ 0x80808080u;
        }
        for (int b = 0; b < nb; b++) {
            dw[(size_t) b * PIC_Q8G_NR + j] = _cvtsh_ss(sc[b]);
        }
    }
}

/* y[t][0..32) (masks m0, m1 on the two halves) = x rows t < mr (1..4) .
 * the packed panel (+ beta * y; beta 0: y not read). */
PIC_AVX512VNNI static inline __attribute__((always_inline)) void
pic_q8g_tile(float *y, int ldy, const pic_wmat_act *a, int t, int K,
             const uint8_t *pw, const float *dw, int mr, __mmask16 m0,
             __mmask16 m1, float beta)
{
    int           nb = K / PIC_Q8_BLOCK;
    const int8_t *xq = a->q + (size_t) t * K;
    const float  *xd = a->d + (size_t) t * nb;
    const int32_t *xs = a->xs + (size_t) t * nb;
    __m512        f[PIC_Q8G_MR][2];

    for (int r = 0; r < mr; r++) {
        f[r][0] = f[r][1] = _mm512_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        const uint8_t *pb = pw + (size_t) b * PIC_Q8_BLOCK * PIC_Q8G_NR;
        __m512i        s[PIC_Q8G_MR][2];
        __m512         d0, d1;

        for (int r = 0; r < mr; r++) {
            s[r][0] = s[r][1] = _mm512_setzero_si512();
        }
        for (int c = 0; c < PIC_Q8_BLOCK / 4; c++) {
            __m512i w0 = _mm512_loadu_si512(pb + c * 4 * PIC_Q8G_NR);
            __m512i w1 = _mm512_loadu_si512(pb + c * 4 * PIC_Q8G_NR + 64);

            for (int r = 0; r < mr; r++) {
                int32_t xv;

                memcpy(&xv, xq + (size_t) r * K + b * PIC_Q8_BLOCK + 4 * c, 4);
                s[r][0] = _mm512_dpbusd_epi32(s[r][0], w0, _mm512_set1_epi32(xv));
                s[r][1] = _mm512_dpbusd_epi32(s[r][1], w1, _mm512_set1_epi32(xv));
            }
        }
        d0 = _mm512_loadu_ps(dw + (size_t) b * PIC_Q8G_NR);
        d1 = _mm512_loadu_ps(dw + (size_t) b * PIC_Q8G_NR + 16);
        for (int r = 0; r < mr; r++) {
            __m512i c = _mm512_set1_epi32(xs[(size_t) r * nb + b]);
            __m512  dx = _mm512_set1_ps(xd[(size_t) r * nb + b]);

            f[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s[r][0], c)),
                                      _mm512_mul_ps(d0, dx), f[r][0]);
            f[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s[r][1], c)),
                                      _mm512_mul_ps(d1, dx), f[r][1]);
        }
    }
    for (int r = 0; r < mr; r++) {
        float *yr = y + (size_t) r * ldy;

        if (beta != 0.0f) {
            f[r][0] = _mm512_fmadd_ps(_mm512_set1_ps(beta),
                                      _mm512_maskz_loadu_ps(m0, yr), f[r][0]);
            f[r][1] = _mm512_fmadd_ps(_mm512_set1_ps(beta),
                                      _mm512_maskz_loadu_ps(m1, yr + 16), f[r][1]);
        }
        _mm512_mask_storeu_ps(yr, m0, f[r][0]);
        _mm512_mask_storeu_ps(yr + 16, m1, f[r][1]);
    }
}

/* y(n, ldy)[., o0..o1) = the quantised x rows of a (n) . W[o0..o1)^T
 * (+ beta * y), W Q8, n any. */
PIC_AVX512VNNI static void
pic_wmat_gemm_q8_vnni(float *y, int ldy, const pic_wmat_act *a, int n,
                      const pic_wmat *w, int o0, int o1, float beta)
{
    int      K = w->cols, nb = K / PIC_Q8_BLOCK;
    size_t   pwb = (size_t) PIC_Q8G_NR * K;
    uint8_t *pw = (uint8_t *) pic_wmat_tile((pwb + (size_t) PIC_Q8G_NR * nb
                                             * sizeof(float)) / sizeof(float));
    float   *dw = (float *) (pw + pwb);

    for (int o = o0; o < o1; o += PIC_Q8G_NR) {
        int       nr = o1 - o < PIC_Q8G_NR ? o1 - o : PIC_Q8G_NR;
        __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16) ((1u << nr) - 1);
        __mmask16 m1 = nr >= 32 ? 0xffff
                       : nr > 16 ? (__mmask16) ((1u << (nr - 16)) - 1) : 0;

        pic_q8g_pack(pw, dw, w, o, nr);
        for (int t = 0; t < n; t += PIC_Q8G_MR) {
            float *yt = y + (size_t) t * ldy + o;

            switch (n - t < PIC_Q8G_MR ? n - t : PIC_Q8G_MR) {
            case 4:
                pic_q8g_tile(yt, ldy, a, t, K, pw, dw, 4, m0, m1, beta);
                break;
            case 3:
                pic_q8g_tile(yt, ldy, a, t, K, pw, dw, 3, m0, m1, beta);
                break;
            case 2:
                pic_q8g_tile(yt, ldy, a, t, K, pw, dw, 2, m0, m1, beta);
                break;
            default:
                pic_q8g_tile(yt, ldy, a, t, K, pw, dw, 1, m0, m1, beta);
                break;
            }
        }
    }
}

#endif /* PIC_WMAT_X86 */

static const pic_wmat_impl pic_wmat_impls[] = {
#if PIC_WMAT_X86
    { "amx",        pic_wmat_rows_avx512, pic_wmat_gemv_avx512bf16, 1,
      pic_wmat_gemm_avx512, pic_amx_gemm,
      pic_wmat_x_bf16_avx512bf16, pic_wmat_gemm_q8_vnni, 1 },
    { "avx512bf16", pic_wmat_rows_avx512, pic_wmat_gemv_avx512bf16, 1,
      pic_wmat_gemm_avx512, pic_wmat_gemm_dot_avx512bf16,
      pic_wmat_x_bf16_avx512bf16, pic_wmat_gemm_q8_vnni, 0 },
    { "avx512vnni", pic_wmat_rows_avx512, pic_wmat_gemv_avx512vnni, 1,
      pic_wmat_gemm_avx512, NULL, NULL, pic_wmat_gemm_q8_vnni, 0 },
    { "avx512",     pic_wmat_rows_avx512, pic_wmat_gemv_avx512,     1,
      pic_wmat_gemm_avx512, NULL, NULL, NULL, 0 },
    { "avx2",       pic_wmat_rows_avx2,   pic_wmat_gemv_avx2,       1, NULL,
      NULL, NULL, NULL, 0 },
#endif
    { "scalar",     pic_wmat_rows_scalar, pic_wmat_gemv_scalar,     0, NULL,
      NULL, NULL, NULL, 0 },
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
    if (im->amx) {
        return __builtin_cpu_supports("avx512bf16")
               && __builtin_cpu_supports("avx512vnni")
               && __builtin_cpu_supports("avx512f")
               && __builtin_cpu_supports("avx512bw")
               && __builtin_cpu_supports("avx512vl")
               && __builtin_cpu_supports("avx2")
               && __builtin_cpu_supports("fma")
               && __builtin_cpu_supports("f16c") && pic_amx_usable();
    }
    if (strncmp(im->name, "avx512", 6) == 0) {
        if ((strcmp(im->name, "avx512vnni") == 0
             || strcmp(im->name, "avx512bf16") == 0)
            && !__builtin_cpu_supports("avx512vnni"))
        {
            return 0;
        }
        if (strcmp(im->name, "avx512bf16") == 0
            && !__builtin_cpu_supports("avx512bf16"))
        {
            return 0;
        }
        return __builtin_cpu_supports("avx512f")
               && __builtin_cpu_supports("avx512bw")
               && __builtin_cpu_supports("avx512vl")
               && __builtin_cpu_supports("avx2")
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
    const char *tile = getenv("PIC_GEMV_TILE");
    const char *dot = getenv("PIC_DOT_GEMM");
    size_t      i;

#if PIC_WMAT_X86
    __builtin_cpu_init();
    pic_wmat_gemv_tile = __builtin_cpu_is("amd") ? 1 : 0;
    pic_wmat_dot_gemm = __builtin_cpu_is("amd") ? 1 : 0;
#endif
    if (tile != NULL && tile[0] != '\0') {
        pic_wmat_gemv_tile = atoi(tile) == 1 ? 1 : 0;
    }
    if (dot != NULL && dot[0] != '\0') {
        pic_wmat_dot_forced = atoi(dot) == 1 ? 1 : 0;
    }

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

size_t
pic_kernels_simd_paths(const char **names, size_t cap)
{
    size_t i, n = 0;

    for (i = 0; i < PIC_WMAT_N_IMPLS; i++) {
        if (pic_wmat_supported(&pic_wmat_impls[i])) {
            if (n < cap) {
                names[n] = pic_wmat_impls[i].name;
            }
            n++;
        }
    }
    return n;
}

/* Whether bf16dot past the GEMV rows takes path im's gemm_dot: as forced,
 * else on AMX (tiles) and on AMD (vdpbf16ps), not on other CPUs. */
static int
pic_wmat_dot_on(const pic_wmat_impl *im)
{
    if (pic_wmat_dot_forced >= 0) {
        return pic_wmat_dot_forced;
    }
    return im->amx || pic_wmat_dot_gemm;
}

int
pic_kernels_dot_gemm(int on)
{
    const pic_wmat_impl *im = pic_wmat_impl_get();

    if (on == 0 || on == 1) {
        pic_wmat_dot_forced = on;
    }
    return pic_wmat_dot_on(im);
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

/* --- bf16 products on operands other than weights --- */

int
pic_cpu_dot_gemm_on(void)
{
#if PIC_WMAT_X86
    const pic_wmat_impl *im = pic_wmat_impl_get();

    return im->gemm_dot == pic_wmat_gemm_dot_avx512bf16 && pic_wmat_dot_on(im);
#else
    return 0;
#endif
}

void
pic_cpu_x_bf16(uint16_t *dst, const float *src, size_t n)
{
    const pic_wmat_impl *im = pic_wmat_impl_get();

    if (im->x_bf16 != NULL) {
        im->x_bf16(dst, src, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        dst[i] = pic_bf16_act_bits(src[i]);
    }
}

void
pic_cpu_dot_gemm(float *y, int ldy, const uint16_t *x, int ldx, int n,
                 const uint16_t *b, int ldb, int nb, int K, int kcb)
{
    PIC_OP_CHECK(y != NULL && x != NULL && b != NULL && n >= 0 && nb >= 0);
    PIC_OP_CHECK(K > 0 && kcb > 0 && kcb % 32 == 0 && ldx >= K && ldb >= K);
    PIC_OP_CHECK(pic_cpu_dot_gemm_on());
#if PIC_WMAT_X86
    pic_dot_gemm_avx512bf16(y, ldy, x, ldx, n, b, ldb, nb, K, kcb);
#endif
}

/* The tile buffer of the calling thread (floats long). */
static float *
pic_wmat_tile(size_t floats)
{
    return pic_cpu_thread_buf(PIC_CPU_BUF_TILE, floats * sizeof(float));
}

/* One thread's share of a compact matmul: output columns [o0, o1).  GEMV
 * (n <= PIC_WMAT_GEMV_ROWS) on a's prepared rows; else the small GEMM
 * where the path has one (n <= PIC_WMAT_GEMM_ROWS), or tiles of W to fp32
 * and sgemm, against x (for Q8 the activations rounded as the GEMV's). */
static void
pic_wmat_slice(const pic_wmat_impl *im, float *y, const float *x,
               const pic_wmat_act *a, int n, const pic_wmat *w, int o0,
               int o1, float beta)
{
    int in = w->cols, out = w->rows, tb;

    if (o1 <= o0) {
        return;
    }
    if (a->xb != NULL) {
        im->gemm_dot(y, out, a->xb, n, w, o0, o1, beta);
        return;
    }
    if (a->xs != NULL && n > PIC_WMAT_GEMV_ROWS) {
        im->gemm_q8(y, out, a, n, w, o0, o1, beta);
        return;
    }
    if (n <= PIC_WMAT_GEMV_ROWS) {
        im->gemv(y, out, a, n, w, o0, o1, beta);
        return;
    }
    if (n <= PIC_WMAT_GEMM_ROWS && im->gemm != NULL) {
        im->gemm(y, out, x, n, w, o0, o1, beta);
        return;
    }
    /* sgemm packs all n activation rows again for every call, so the tiles
     * are large (4 MiB: prefill of models/mid, one thread, 256 KiB tiles ran
     * bf16/q8 at 0.6x the f32 sgemm, 4 MiB at 0.8-1.1x).  What a kernel of
     * our own could win here (one thread, GFLOP per CPU-second, machine
     * shared): this path on the warm chunk's shapes, n = 570, bf16 (3584,
     * 1024) / (1024, 3584): 145-170, as OpenBLAS on fp32 W (155-175); an
     * outer-product micro-tile on L1-resident packed data, any of 4x64 /
     * 6x64 / 8x48 / 12x32 / 14x32 rows x columns: 181-195, the ceiling; a
     * tile of it on W packed per call into k-major panels, x packed per
     * K-block: 140-148 (the packing eats the margin).  The AVX-512 BF16
     * dot (vdpbf16ps, x rounded to bf16) in the same tiles: 88-97, half
     * the fp32 FMA's rate on this CPU, so no bf16-dot path either.  Again
     * on an Intel Xeon (Sapphire Rapids class), one thread, bench/gemm_bench:
     * a 12 x 32 outer-product tile (24 zmm sums, x broadcast) alone on
     * L1-resident panels ran 154-158 GFLOP/s, the vfmadd231ps peak, and a
     * 6 x 16 AVX2 tile 80-83 (its peak); as a whole GEMM (x laid out once per
     * call, W converted per call into k-major panels of 32 rows, blocks of
     * 256 outputs so the y block stays in L2 across K-blocks) 0.8-1.0x this
     * path at 570 rows on (3584, 1024) and (1024, 3584), and within the
     * noise of OpenBLAS's Haswell kernels on the AVX2 path: the per-call
     * conversion and layout eat what the tile wins, so W would have to be
     * held in the panel layout from load (which every other reader of W,
     * the GEMVs, gather_rows, the CUDA upload, would then have to read). */
    tb = (int) (PIC_WMAT_TILE_BYTES / ((size_t) in * sizeof(float)));
    tb = tb < 16 ? 16 : tb & ~15;
    tb = tb < o1 - o0 ? tb : o1 - o0;
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

/* pic_cpu_matmul_w; pre: a Q8 W past the GEMV rows, x already prepared
 * by the caller once for several matrices (pre->xs set: quantised for
 * gemm_q8; else pre->xw is x as pic_q8_act_round makes it), else NULL. */
static void
pic_wmat_matmul(float *y, const float *x, const pic_wmat *w, int n,
                int accumulate, const pic_wmat_act *pre)
{
    const pic_wmat_impl *im;
    pic_wmat_act         a = { 0 };
    float                beta = accumulate ? 1.0f : 0.0f;
    double               work;
    int                  nt, out;

    PIC_OP_CHECK(y != NULL && x != NULL && w != NULL && w->data != NULL);
    PIC_OP_CHECK(n > 0 && w->rows > 0 && w->cols > 0);
    PIC_OP_CHECK(w->type != PIC_WTYPE_Q8
                 || (w->cols % PIC_Q8_BLOCK == 0 && w->scale != NULL));

    im = pic_wmat_impl_get();
    if (w->type == PIC_WTYPE_F32
        && (n > PIC_WMAT_GEMV_ROWS || !im->gemv_f32))
    {
        pic_cpu_matmul(y, x, w->data, n, w->cols, w->rows, accumulate);
        return;
    }
    if (n <= PIC_WMAT_GEMV_ROWS) {
        pic_wmat_act_prep(&a, x, n, w, im->x_bf16);
    } else if (w->type == PIC_WTYPE_BF16 && w->xbf16 && im->gemm_dot != NULL
               && pic_wmat_dot_on(im)) {
        uint16_t *xb;

        if (im->amx) {
            xb = pic_wmat_act_buf(pic_amx_x_bytes(n, w->cols));
            pic_amx_x_pack(xb, x, n, w->cols);
        } else {
            xb = pic_wmat_act_buf((size_t) n * w->cols * sizeof(uint16_t));
            im->x_bf16(xb, x, (size_t) n * w->cols);
        }
        a.xb = xb;
    } else if (w->type == PIC_WTYPE_BF16 && w->xbf16) {
        float *xr = pic_wmat_act_buf((size_t) n * w->cols * sizeof(float));

        pic_bf16_act_round(xr, x, (size_t) n * w->cols);
        x = xr;
    } else if (w->type == PIC_WTYPE_Q8 && pre != NULL) {
        a = *pre;
        x = a.xw;
    } else if (w->type == PIC_WTYPE_Q8 && im->gemm_q8 != NULL) {
        pic_wmat_q8_prep(&a, x, n, w->cols);
    } else if (w->type == PIC_WTYPE_Q8) {
        float *xr = pic_wmat_act_buf((size_t) n * w->cols * sizeof(float));

        pic_q8_act_round(xr, x, (size_t) n * w->cols);
        x = xr;
    }
    out = w->rows;
    work = (double) n * w->cols * out;
    nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt <= 1 || work < 262144.0 || out < 32) {
        pic_wmat_slice(im, y, x, &a, n, w, 0, out, beta);
        return;
    }
    #pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int per = ((out + T - 1) / T + 15) & ~15;
        int o0 = t * per, o1 = o0 + per < out ? o0 + per : out;

        pic_wmat_slice(im, y, x, &a, n, w, o0, o1, beta);
    }
}

void
pic_cpu_matmul_w(float *y, const float *x, const pic_wmat *w, int n,
                 int accumulate)
{
    pic_wmat_matmul(y, x, w, n, accumulate, NULL);
}

/* The k matrices as one: thread t takes its share of the rows of all of
 * them laid end to end (16-row steps), each piece with its own matrix's
 * GEMV.  The activations are prepared once, for the compact type among
 * them (an F32 matrix reads a.x, which every preparation keeps). */
void
pic_cpu_matmul_w_multi(float *const *ys, const float *x,
                       const pic_wmat *const *ws, int k, int n)
{
    const pic_wmat_impl *im;
    const pic_wmat      *cw = NULL;     /* the compact type's first matrix */
    pic_wmat_act         a;
    int                  total = 0, nt;

    PIC_OP_CHECK(ys != NULL && x != NULL && ws != NULL && k > 0 && n > 0);
    im = pic_wmat_impl_get();
    for (int i = 0; i < k; i++) {
        PIC_OP_CHECK(ws[i] != NULL && ws[i]->data != NULL && ys[i] != NULL);
        PIC_OP_CHECK(ws[i]->rows > 0 && ws[i]->cols == ws[0]->cols);
        PIC_OP_CHECK(ws[i]->type != PIC_WTYPE_Q8
                     || (ws[i]->cols % PIC_Q8_BLOCK == 0 && ws[i]->scale != NULL));
        if (ws[i]->type != PIC_WTYPE_F32) {
            PIC_OP_CHECK(cw == NULL || cw->type == ws[i]->type);
            cw = cw != NULL ? cw : ws[i];
        }
        total += ws[i]->rows;
    }
    nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (n > PIC_WMAT_GEMV_ROWS || !im->gemv_f32 || nt <= 1
        || (double) n * ws[0]->cols * total < 262144.0)
    {
        pic_wmat_act pre = { 0 };   /* x prepared once for the Q8 ones */
        int          q8 = n > PIC_WMAT_GEMV_ROWS && cw != NULL
                          && cw->type == PIC_WTYPE_Q8;

        if (q8 && im->gemm_q8 != NULL) {
            pic_wmat_q8_prep(&pre, x, n, cw->cols);
        } else if (q8) {
            float *xr = pic_wmat_act_buf((size_t) n * cw->cols * sizeof(float));

            pic_q8_act_round(xr, x, (size_t) n * cw->cols);
            pre.x = pre.xw = xr;
        }
        for (int i = 0; i < k; i++) {
            int q = q8 && ws[i]->type == PIC_WTYPE_Q8;

            pic_wmat_matmul(ys[i], x, ws[i], n, 0, q ? &pre : NULL);
        }
        return;
    }
    pic_wmat_act_prep(&a, x, n, cw != NULL ? cw : ws[0], im->x_bf16);
    #pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int per = ((total + T - 1) / T + 15) & ~15;
        int v0 = t * per, v1 = v0 + per < total ? v0 + per : total;

        for (int i = 0, base = 0; i < k && base < v1; base += ws[i++]->rows) {
            int o0 = v0 > base ? v0 - base : 0;
            int o1 = v1 - base < ws[i]->rows ? v1 - base : ws[i]->rows;

            if (o0 < o1) {
                im->gemv(ys[i], ws[i]->rows, &a, n, ws[i], o0, o1, 0.0f);
            }
        }
    }
}
