/*
 * wmat_amx.c — the bf16 dot GEMM on Intel AMX tiles (TDPBF16PS): a BF16 W
 * with bf16 activations (--weights bf16dot) past the GEMV rows, on the
 * "amx" SIMD path (pic_kernels_simd).
 *
 * TDPBF16PS multiplies a tile of 16 rows of 32 bf16 by a tile of 16 pairs
 * of rows laid side by side ("VNNI" layout: 16 rows of 16 columns, each
 * two adjacent k of one column) and adds every row · column to an fp32
 * tile of 16 x 16: 16,384 products in one instruction.  Row-major bf16 W
 * is already the first operand's layout (16 weight rows, 32 columns), so W
 * stays as stored — no repack at load, no second copy, only a plain copy
 * of 32 rows at a time into contiguous lines — and the activations take
 * the second operand's layout,
 * once per call (pic_amx_x_pack: x rounded to bf16 as pic_bf16_act_bits
 * rounds it, 16 rows x 32 columns per tile, transposed in registers).  The
 * fp32 tiles then hold 16 outputs x 16 activation rows and are transposed
 * back into y.  Each sum runs over k in the same order for every output
 * and every n (zero rows and columns pad the edges), and fp32 tiles are
 * never rounded between steps, so a row's sums never depend on n or on
 * the blocking below; the products of two bf16 are exact in fp32, as on
 * every bf16dot path, only the order of the fp32 sums differs (TDPBF16PS
 * treats subnormal inputs as zero, which the rounding of x already did).
 *
 * Blocking: the rows in chunks whose packed x stays in L2 (PIC_AMX_XCHUNK
 * bytes); in a chunk, a thread's outputs in panels of 32 (two W tiles,
 * copied contiguous first: pic_amx_w_panel), two row tiles at a time: four
 * fp32 tiles of sums, two W and two x tiles, the eight tiles of palette 1.
 *
 * The path needs the CPU's AMX-TILE and AMX-BF16, the OS's tile state
 * (XCR0 bits 17 and 18) and Linux's permission for it
 * (arch_prctl(ARCH_REQ_XCOMP_PERM)); pic_amx_usable asks all three once.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "cpu_ops.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define PIC_AMX_BUILD 1
#else
#define PIC_AMX_BUILD 0
#endif

#define PIC_AMX_XCHUNK (1 << 20)    /* packed x bytes of one row chunk (L2) */

#if PIC_AMX_BUILD

#define PIC_AMX_TARGET                                                        \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,"    \
                          "amx-tile,amx-bf16")))

#define ARCH_REQ_XCOMP_PERM_ 0x1023
#define XFEATURE_XTILEDATA_  18

static int            pic_amx_ok;
static pthread_once_t pic_amx_once = PTHREAD_ONCE_INIT;

static void
pic_amx_probe(void)
{
    unsigned a, b, c, d;
    unsigned lo, hi;

    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)
        || !(d & (1u << 22)) || !(d & (1u << 24)))      /* AMX-BF16, AMX-TILE */
    {
        return;
    }
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) {    /* OSXSAVE */
        return;
    }
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) {          /* XTILECFG, XTILEDATA */
        return;
    }
    /* Linux hands out the 8 KiB of tile state per process on request; it
     * refuses where a thread's signal stack is too small to hold it. */
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) != 0) {
        return;
    }
    pic_amx_ok = 1;
}

int
pic_amx_usable(void)
{
    pthread_once(&pic_amx_once, pic_amx_probe);
    return pic_amx_ok;
}

/* Palette 1, eight tiles of 16 rows of 64 bytes: 0-3 the fp32 sums, 4-5
 * W, 6-7 x. */
typedef struct {
    uint8_t  palette;
    uint8_t  start_row;
    uint8_t  reserved[14];
    uint16_t colsb[16];
    uint8_t  rows[16];
} __attribute__((packed, aligned(64))) pic_amx_cfg;

PIC_AMX_TARGET static void
pic_amx_config(void)
{
    pic_amx_cfg cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}

/* r[0..15] transposed as 16 x 16 32-bit elements: r[i][j] <- r[j][i]. */
PIC_AMX_TARGET static inline void
pic_amx_transpose16(__m512i r[16])
{
    __m512i a[16], b[16];

    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    /* b[4j + c], 128-bit lane L: column 4L + c of rows 4j..4j+3 */
    for (int j = 0; j < 4; j++) {
        b[4 * j + 0] = _mm512_unpacklo_epi64(a[4 * j + 0], a[4 * j + 2]);
        b[4 * j + 1] = _mm512_unpackhi_epi64(a[4 * j + 0], a[4 * j + 2]);
        b[4 * j + 2] = _mm512_unpacklo_epi64(a[4 * j + 1], a[4 * j + 3]);
        b[4 * j + 3] = _mm512_unpackhi_epi64(a[4 * j + 1], a[4 * j + 3]);
    }
    for (int c = 0; c < 4; c++) {       /* the 4 x 4 of 128-bit lanes */
        __m512i p0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44);
        __m512i p1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xee);
        __m512i p2 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44);
        __m512i p3 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xee);

        r[0 + c] = _mm512_shuffle_i32x4(p0, p2, 0x88);
        r[4 + c] = _mm512_shuffle_i32x4(p0, p2, 0xdd);
        r[8 + c] = _mm512_shuffle_i32x4(p1, p3, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(p1, p3, 0xdd);
    }
}

size_t
pic_amx_x_bytes(int n, int cols)
{
    size_t rows = ((size_t) n + 31) & ~(size_t) 31;
    size_t kp = ((size_t) cols + 31) & ~(size_t) 31;

    return rows * kp * sizeof(uint16_t);
}

/* One tile of the packed x: rows r0..r0+15, columns k0..k0+31 (zero past
 * n and cols) into dst (16 pairs of rows: dst[kk][m] = x[r0+m][k0+2kk..]). */
PIC_AMX_TARGET static void
pic_amx_x_tile(uint16_t *dst, const float *x, int n, int cols, int r0, int k0)
{
    __m512i   v[16];
    int       kc = cols - k0 < 32 ? cols - k0 : 32;
    __mmask16 m0 = kc >= 16 ? 0xffff : (__mmask16) ((1u << kc) - 1);
    __mmask16 m1 = kc >= 32 ? 0xffff
                   : kc > 16 ? (__mmask16) ((1u << (kc - 16)) - 1) : 0;

    for (int i = 0; i < 16; i++) {
        if (r0 + i >= n) {
            v[i] = _mm512_setzero_si512();
            continue;
        }
        const float *xr = x + (size_t) (r0 + i) * cols + k0;
        /* vcvtne2ps2bf16 puts its second operand in the low half */
        __m512bh     h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, xr + 16),
                                             _mm512_maskz_loadu_ps(m0, xr));

        v[i] = (__m512i) h;
    }
    pic_amx_transpose16(v);
    for (int kk = 0; kk < 16; kk++) {
        _mm512_store_si512((void *) (dst + (size_t) kk * 32), v[kk]);
    }
}

PIC_AMX_TARGET void
pic_amx_x_pack(uint16_t *dst, const float *x, int n, int cols)
{
    int  kb = (cols + 31) / 32, rb = ((n + 31) & ~31) / 16;
    long tiles = (long) rb * kb;

    PIC_OP_CHECK(((uintptr_t) dst & 63) == 0);
    #pragma omp parallel for schedule(static) if (tiles >= 256 && pic_cpu_par(1))
    for (long t = 0; t < tiles; t++) {
        int r = (int) (t / kb), k = (int) (t % kb);

        pic_amx_x_tile(dst + (size_t) t * 512, x, n, cols, r * 16, k * 32);
    }
}

/* y[rows r0.., outputs o..] (+)= the fp32 tile c (16 outputs x 16 rows),
 * transposed; nrow, nout: how many of each are real. */
PIC_AMX_TARGET static void
pic_amx_put(float *y, int ldy, const float *c, int r0, int nrow, int o,
            int nout, float beta)
{
    __m512i   v[16];
    __mmask16 om = nout >= 16 ? 0xffff : (__mmask16) ((1u << nout) - 1);

    for (int i = 0; i < 16; i++) {
        v[i] = _mm512_load_si512((const void *) (c + i * 16));
    }
    pic_amx_transpose16(v);
    for (int m = 0; m < nrow; m++) {
        float  *yr = y + (size_t) (r0 + m) * ldy + o;
        __m512  s = _mm512_castsi512_ps(v[m]);

        if (beta != 0.0f) {
            s = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(om, yr), s);
        }
        _mm512_mask_storeu_ps(yr, om, s);
    }
}

/* Rows [o, o+nr) of W as the tiles' first operand, contiguous: for each
 * 32-column block kb, 32 rows of 64 bytes (two tiles, rows past nr and
 * columns past K zero) at dst + kb * 1024.  Rows K apart would share a few
 * L1 sets (a 2 KiB stride meets two of 64), so every tile load of the
 * strided W missed; the copy is a plain one, 64 bytes a move. */
PIC_AMX_TARGET static void
pic_amx_w_panel(uint16_t *dst, const pic_wmat *w, int o, int nr)
{
    int             K = w->cols, KB = (K + 31) / 32, kt = K % 32;
    const uint16_t *W = (const uint16_t *) w->data + (size_t) o * K;
    __mmask32       mt = kt ? (__mmask32) ((1u << kt) - 1) : 0xffffffffu;

    for (int kb = 0; kb < KB; kb++) {
        __mmask32 m = kb == KB - 1 ? mt : 0xffffffffu;
        uint16_t *d = dst + (size_t) kb * 1024;

        for (int i = 0; i < 32; i++) {
            __m512i v = i < nr ? _mm512_maskz_loadu_epi16(m, W + (size_t) i * K + kb * 32)
                               : _mm512_setzero_si512();

            _mm512_store_si512((void *) (d + i * 32), v);
        }
    }
}

PIC_AMX_TARGET void
pic_amx_gemm(float *y, int ldy, const uint16_t *xp, int n, const pic_wmat *w,
             int o0, int o1, float beta)
{
    int       K = w->cols, KB = (K + 31) / 32, Kp = KB * 32;
    int       n32 = (n + 31) & ~31;
    int       chunk = (int) (PIC_AMX_XCHUNK / ((size_t) Kp * sizeof(uint16_t)));
    uint16_t *pw;                       /* (KB, 32, 32): one panel of W */
    float     c[4][256] __attribute__((aligned(64)));

    if (o1 <= o0) {
        return;
    }
    chunk = chunk < 32 ? 32 : chunk & ~31;
    pw = pic_cpu_thread_buf(PIC_CPU_BUF_TILE, (size_t) 32 * Kp * sizeof(uint16_t));
    pic_amx_config();
    for (int c0 = 0; c0 < n32; c0 += chunk) {
        int c1 = c0 + chunk < n32 ? c0 + chunk : n32;

        for (int o = o0; o < o1; o += 32) {
            int nr = o1 - o < 32 ? o1 - o : 32;

            pic_amx_w_panel(pw, w, o, nr);
            for (int r = c0; r < c1; r += 32) {
                const uint16_t *x0 = xp + (size_t) (r / 16) * KB * 512;
                const uint16_t *x1 = x0 + (size_t) KB * 512;

                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                for (int k = 0; k < KB; k++) {
                    _tile_loadd(4, pw + (size_t) k * 1024, 64);
                    _tile_loadd(5, pw + (size_t) k * 1024 + 512, 64);
                    _tile_loadd(6, x0 + (size_t) k * 512, 64);
                    _tile_loadd(7, x1 + (size_t) k * 512, 64);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
                _tile_stored(0, c[0], 64);
                _tile_stored(1, c[1], 64);
                _tile_stored(2, c[2], 64);
                _tile_stored(3, c[3], 64);
                for (int t = 0; t < 4; t++) {
                    int rr = r + (t & 1) * 16, oo = o + (t >> 1) * 16;
                    int nrow = n - rr < 16 ? n - rr : 16;
                    int nout = o + nr - oo < 16 ? o + nr - oo : 16;

                    if (nrow > 0 && nout > 0) {
                        pic_amx_put(y, ldy, c[t], rr, nrow, oo, nout, beta);
                    }
                }
            }
        }
    }
    _tile_release();
}

#else /* !PIC_AMX_BUILD */

int
pic_amx_usable(void)
{
    return 0;
}

size_t
pic_amx_x_bytes(int n, int cols)
{
    (void) n;
    (void) cols;
    return 0;
}

void
pic_amx_x_pack(uint16_t *dst, const float *x, int n, int cols)
{
    (void) dst; (void) x; (void) n; (void) cols;
    PIC_OP_CHECK(0);
}

void
pic_amx_gemm(float *y, int ldy, const uint16_t *xp, int n, const pic_wmat *w,
             int o0, int o1, float beta)
{
    (void) y; (void) ldy; (void) xp; (void) n; (void) w; (void) o0; (void) o1;
    (void) beta;
    PIC_OP_CHECK(0);
}

#endif /* PIC_AMX_BUILD */
