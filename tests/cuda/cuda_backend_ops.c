/*
 * cuda_backend_ops.c — every op of the CUDA backend table
 * (pic_backend_cuda(), build/libpic_cuda.so) against the CPU reference
 * backend by normalised MSE, as ggml's test-backend-ops: one table of
 * (op, shapes, weight type, tolerance) with the real Qwen3.5-0.8B shapes
 * (hidden 1024, GDN 16 key / 16 value heads × 128, conv K 4, attention
 * 8 q / 2 kv heads × 256, rotary 64, FFN 3584, vocab 248320) and small odd
 * ones.  Every case prints its NMSE.  Skips (and says so) when no GPU is
 * present.
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
#include "cuda/pic_cuda.h"

/* One case.  Shape fields by op (unused ones 0):
 *   matmul / matmul_w / multi: a = n, b = in (cols), c = out (rows), d = accumulate
 *   wmat_rows:  a = rows, b = cols, c = r0, d = nr
 *   rmsnorm:    a = n, b = dim, c = zero_centred (2: no weight), d = in place
 *   silu / sigmoid / softplus: a = n, b = value scale
 *   conv1d:     a = n, b = C, c = K
 *   l2norm:     a = rows, b = ld, c = dim
 *   rope:       a = n, b = heads, c = hd, d = rotary_dim, e = first position
 *   attention:  a = n, b = Hq, c = Hkv, d = hd, e = first qpos, f = n_keys
 *               (cap = n_keys + 16)
 *   gdn_*:      a = n, b = Hk, c = Hv, d = dk, e = ds, f = 1: v = NULL, no
 *               output (the transition operator T); ld of q/k/v: conv row */
typedef struct {
    const char *op;
    int         a, b, c, d, e, f;
    pic_wtype   wt;
    double      tol;
} cuda_case;

#define F32  PIC_WTYPE_F32
#define BF16 PIC_WTYPE_BF16
#define Q8   PIC_WTYPE_Q8

static const cuda_case cases[] = {
    /* fp32 sgemm (TF32 off): summation order only */
    { "matmul", 1, 1024, 3584, 0, 0, 0, F32, 1e-10 },
    { "matmul", 5, 100, 7, 1, 0, 0, F32, 1e-10 },
    { "matmul", 64, 3584, 1024, 1, 0, 0, F32, 1e-10 },
    { "matmul", 512, 1024, 6144, 0, 0, 0, F32, 1e-10 },

    /* compact weights: decode GEMV (n <= 4) and prefill GEMM */
    { "matmul_w", 1, 1024, 3584, 0, 0, 0, F32, 1e-10 },
    { "matmul_w", 64, 3584, 1024, 1, 0, 0, F32, 1e-10 },
    { "matmul_w", 1, 1024, 3584, 0, 0, 0, BF16, 1e-10 },
    { "matmul_w", 3, 3584, 1024, 1, 0, 0, BF16, 1e-10 },
    { "matmul_w", 4, 1024, 6144, 0, 0, 0, BF16, 1e-10 },
    { "matmul_w", 2, 100, 37, 1, 0, 0, BF16, 1e-10 },       /* scalar path */
    { "matmul_w", 1, 1024, 248320, 0, 0, 0, BF16, 1e-10 },  /* lm_head */
    /* GEMM: x rounded to bf16 (relative 2^-9 a value) */
    { "matmul_w", 5, 1024, 3584, 0, 0, 0, BF16, 1e-5 },
    { "matmul_w", 64, 3584, 1024, 1, 0, 0, BF16, 1e-5 },
    { "matmul_w", 512, 1024, 6144, 0, 0, 0, BF16, 1e-5 },
    { "matmul_w", 7, 100, 37, 0, 0, 0, BF16, 1e-5 },
    { "matmul_w", 64, 1024, 248320, 0, 0, 0, BF16, 1e-5 },  /* lm_head */
    /* Q8: x quantised as the CPU does; fp32 sums in another order */
    { "matmul_w", 1, 1024, 3584, 0, 0, 0, Q8, 1e-8 },
    { "matmul_w", 4, 3584, 1024, 1, 0, 0, Q8, 1e-8 },
    { "matmul_w", 2, 64, 37, 0, 0, 0, Q8, 1e-8 },
    { "matmul_w", 1, 1024, 248320, 0, 0, 0, Q8, 1e-8 },     /* lm_head */
    { "matmul_w", 5, 1024, 3584, 1, 0, 0, Q8, 1e-8 },
    { "matmul_w", 64, 3584, 1024, 0, 0, 0, Q8, 1e-8 },
    { "matmul_w", 512, 1024, 6144, 0, 0, 0, Q8, 1e-8 },

    /* the GDN in_proj (qkv 6144, z 2048, b 16, a 16) as one call */
    { "matmul_w_multi", 1, 1024, 0, 0, 0, 0, F32, 1e-10 },
    { "matmul_w_multi", 1, 1024, 0, 0, 0, 0, BF16, 1e-10 },
    { "matmul_w_multi", 4, 1024, 0, 0, 0, 0, Q8, 1e-8 },
    { "matmul_w_multi", 64, 1024, 0, 0, 0, 0, BF16, 1e-5 },
    { "matmul_w_multi", 64, 1024, 0, 0, 0, 0, Q8, 1e-8 },

    /* embedding rows: exact */
    { "wmat_rows", 512, 1024, 5, 17, 0, 0, F32, 0 },
    { "wmat_rows", 512, 1024, 100, 1, 0, 0, BF16, 0 },
    { "wmat_rows", 512, 1024, 0, 512, 0, 0, Q8, 0 },

    { "rmsnorm", 1, 1024, 1, 0, 0, 0, F32, 1e-12 },
    { "rmsnorm", 512, 1024, 1, 1, 0, 0, F32, 1e-12 },
    { "rmsnorm", 7 * 16, 128, 0, 0, 0, 0, F32, 1e-12 },     /* gated head norm */
    { "rmsnorm", 33, 256, 2, 1, 0, 0, F32, 1e-12 },
    { "rmsnorm", 3, 37, 0, 0, 0, 0, F32, 1e-12 },

    { "silu", 64 * 3584, 8, 0, 0, 0, 0, F32, 1e-12 },
    { "silu", 100003, 30, 0, 0, 0, 0, F32, 1e-12 },
    { "sigmoid", 64 * 6144, 8, 0, 0, 0, 0, F32, 1e-12 },
    { "sigmoid", 17, 30, 0, 0, 0, 0, F32, 1e-12 },
    { "softplus", 64 * 16, 30, 0, 0, 0, 0, F32, 1e-12 },
    { "softplus", 100003, 8, 0, 0, 0, 0, F32, 1e-12 },

    { "conv1d", 1, 6144, 4, 0, 0, 0, F32, 1e-12 },
    { "conv1d", 2, 6144, 4, 0, 0, 0, F32, 1e-12 },
    { "conv1d", 200, 6144, 4, 0, 0, 0, F32, 1e-12 },
    { "conv1d", 5, 33, 1, 0, 0, 0, F32, 1e-12 },
    { "conv1d", 9, 33, 7, 0, 0, 0, F32, 1e-12 },

    { "l2norm", 1 * 32, 6144, 128, 0, 0, 0, F32, 1e-12 },   /* q and k heads */
    { "l2norm", 200 * 32, 6144, 128, 0, 0, 0, F32, 1e-12 },
    { "l2norm", 7, 40, 37, 0, 0, 0, F32, 1e-12 },

    { "rope", 1, 8, 256, 64, 4000, 0, F32, 1e-10 },
    { "rope", 64, 2, 256, 64, 0, 0, F32, 1e-10 },
    { "rope", 200, 8, 256, 64, -150, 0, F32, 1e-10 },       /* negative: R(−p) */
    { "rope", 3, 4, 32, 16, 100000, 0, F32, 1e-10 },

    { "attention", 1, 8, 2, 256, 1000, 1001, F32, 1e-9 },   /* decode */
    { "attention", 64, 8, 2, 256, 0, 64, F32, 1e-9 },       /* prefill */
    { "attention", 37, 8, 2, 256, 100, 137, F32, 1e-9 },    /* a chunk after 100 */
    { "attention", 9, 8, 2, 256, -3, 4, F32, 1e-9 },        /* qpos < 0, > n_keys */
    { "attention", 20, 4, 1, 32, 5, 16, F32, 1e-9 },
    { "attention", 3, 6, 3, 100, 50, 53, F32, 1e-9 },

    { "gdn_recurrent", 1, 16, 16, 128, 128, 0, F32, 1e-10 }, /* decode */
    { "gdn_recurrent", 7, 16, 16, 128, 128, 0, F32, 1e-10 },
    { "gdn_recurrent", 5, 2, 4, 64, 48, 0, F32, 1e-10 },
    { "gdn_recurrent", 3, 16, 16, 128, 128, 1, F32, 1e-10 }, /* T: ds = dk, v = 0 */
    { "gdn_chunked", 64, 16, 16, 128, 128, 0, F32, 1e-8 },
    { "gdn_chunked", 200, 16, 16, 128, 128, 0, F32, 1e-8 },
    { "gdn_chunked", 100, 2, 4, 32, 32, 1, F32, 1e-8 },
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float
frand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float) ((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* host (n) uniform in (−scale, scale) */
static float *
host_rand(size_t n, float scale)
{
    float *p = malloc(n * sizeof(float) + 4);

    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        p[i] = frand() * scale;
    }
    return p;
}

/* device copy of host (bytes) */
static void *
dev_copy(const void *h, size_t bytes)
{
    void *d = pic_cuda_malloc(bytes);

    assert_non_null(d);
    assert_int_equal(pic_cuda_upload(d, h, bytes), 0);
    return d;
}

/* host copy of device floats (n) */
static float *
host_copy(const void *d, size_t n)
{
    float *h = malloc(n * sizeof(float) + 4);

    assert_non_null(h);
    assert_int_equal(pic_cuda_download(h, d, n * sizeof(float)), 0);
    return h;
}

/* Σ(a−b)² / Σb² — ggml's normalised mean squared error. */
static double
nmse(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;

    for (size_t i = 0; i < n; i++) {
        double e = (double) a[i] - b[i];

        num += e * e;
        den += (double) b[i] * b[i];
        if (isnan(a[i]) != isnan(b[i])) {
            return INFINITY;
        }
    }
    return den > 0 ? num / den : num;
}

/* --- weights --- */

typedef struct {
    pic_wmat  h;                        /* host copy */
    pic_wmat  d;                        /* device copy */
    void     *data;                     /* host storage */
    uint16_t *scale;                    /* host Q8 scales */
} cuda_wmat;

/* A random (rows, cols) matrix of type t on host and device. */
static void
wmat_make(cuda_wmat *m, pic_wtype t, int rows, int cols)
{
    size_t n = (size_t) rows * cols;
    float *f = host_rand(n, 1.0f / sqrtf((float) cols));

    memset(m, 0, sizeof(*m));
    if (t == F32) {
        m->data = f;
        f = NULL;
    } else if (t == BF16) {
        m->data = malloc(n * 2);
        pic_bf16_from_f32(m->data, f, n);
    } else {
        m->data = malloc(n);
        m->scale = malloc(n / PIC_Q8_BLOCK * 2);
        pic_q8_from_f32(m->data, m->scale, f, n);
    }
    free(f);
    m->h.type = t;
    m->h.rows = rows;
    m->h.cols = cols;
    m->h.data = m->data;
    m->h.scale = m->scale;
    assert_int_equal(pic_cuda_wmat_upload(&m->d, &m->h), 0);
}

static void
wmat_drop(cuda_wmat *m)
{
    pic_cuda_wmat_free(&m->d);
    free(m->data);
    free(m->scale);
}

/* --- one case per op --- */

/* Compare device result d (n) with host ref; returns the NMSE. */
static double
cmp(const void *d, const float *ref, size_t n)
{
    float  *got;
    double  e;

    assert_int_equal(pic_cuda_sync(), 0);
    got = host_copy(d, n);
    e = nmse(got, ref, n);
    free(got);
    return e;
}

static double
run_matmul(const pic_backend *cpu, const pic_backend *gpu, const cuda_case *c)
{
    int     n = c->a, in = c->b, out = c->c, acc = c->d;
    float  *x = host_rand((size_t) n * in, 1.0f);
    float  *y = host_rand((size_t) n * out, 1.0f);
    float  *dx = dev_copy(x, (size_t) n * in * 4), *dy = dev_copy(y, (size_t) n * out * 4);
    double  e;

    if (strcmp(c->op, "matmul") == 0) {
        float *w = host_rand((size_t) out * in, 1.0f / sqrtf((float) in));
        float *dw = dev_copy(w, (size_t) out * in * 4);

        cpu->matmul(y, x, w, n, in, out, acc);
        gpu->matmul(dy, dx, dw, n, in, out, acc);
        e = cmp(dy, y, (size_t) n * out);
        pic_cuda_free(dw);
        free(w);
    } else {
        cuda_wmat m;

        wmat_make(&m, c->wt, out, in);
        cpu->matmul_w(y, x, &m.h, n, acc);
        gpu->matmul_w(dy, dx, &m.d, n, acc);
        e = cmp(dy, y, (size_t) n * out);
        wmat_drop(&m);
    }
    pic_cuda_free(dx);
    pic_cuda_free(dy);
    free(x);
    free(y);
    return e;
}

static double
run_multi(const pic_backend *cpu, const pic_backend *gpu, const cuda_case *c)
{
    int             rows[4] = { 6144, 2048, 16, 16 }, n = c->a, in = c->b, k = 4;
    cuda_wmat       m[4];
    const pic_wmat *wh[4], *wd[4];
    float          *yh[4], *yd[4];
    float          *x = host_rand((size_t) n * in, 1.0f), *dx = dev_copy(x, (size_t) n * in * 4);
    double          e = 0;

    for (int i = 0; i < k; i++) {
        /* the last one F32 beside the compact ones, as the CPU op allows */
        wmat_make(&m[i], i == 3 ? F32 : c->wt, rows[i], in);
        wh[i] = &m[i].h;
        wd[i] = &m[i].d;
        yh[i] = malloc((size_t) n * rows[i] * 4);
        yd[i] = pic_cuda_malloc((size_t) n * rows[i] * 4);
    }
    cpu->matmul_w_multi(yh, x, wh, k, n);
    gpu->matmul_w_multi(yd, dx, wd, k, n);
    for (int i = 0; i < k; i++) {
        double ei = cmp(yd[i], yh[i], (size_t) n * rows[i]);

        e = ei > e ? ei : e;
        pic_cuda_free(yd[i]);
        free(yh[i]);
        wmat_drop(&m[i]);
    }
    pic_cuda_free(dx);
    free(x);
    return e;
}

static double
run_wmat_rows(const pic_backend *cpu, const pic_backend *gpu, const cuda_case *c)
{
    cuda_wmat m;
    size_t    n = (size_t) c->d * c->b;
    float    *ref = malloc(n * 4), *d = pic_cuda_malloc(n * 4);
    double    e;

    wmat_make(&m, c->wt, c->a, c->b);
    cpu->wmat_rows(ref, &m.h, c->c, c->d);
    gpu->wmat_rows(d, &m.d, c->c, c->d);
    e = cmp(d, ref, n);
    wmat_drop(&m);
    pic_cuda_free(d);
    free(ref);
    return e;
}

static double
run_rmsnorm(const pic_backend *cpu, const pic_backend *gpu, const cuda_case *c)
{
    int     n = c->a, dim = c->b, zc = c->c == 1, inplace = c->d;
    size_t  nx = (size_t) n * dim;
    float  *x = host_rand(nx, 3.0f), *w = host_rand(dim, 0.5f), *y = malloc(nx * 4);
    float  *dx = dev_copy(x, nx * 4), *dw = dev_copy(w, dim * 4);
    float  *dy = inplace ? dx : pic_cuda_malloc(nx * 4);
    double  e;

    cpu->rmsnorm(y, x, c->c == 2 ? NULL : w, n, dim, 1e-6f, zc);
    gpu->rmsnorm(dy, dx, c->c == 2 ? NULL : dw, n, dim, 1e-6f, zc);
    e = cmp(dy, y, nx);
    if (!inplace) {
        pic_cuda_free(dy);
    }
    pic_cuda_free(dx);
    pic_cuda_free(dw);
    free(x);
    free(w);
    free(y);
    return e;
}

static double
run_act(const pic_backend *cpu, const pic_backend *gpu, const cuda_case *c)
{
    size_t  n = (size_t) c->a;
    float  *x = host_rand(n, (float) c->b), *dx = dev_copy(x, n * 4);
    double  e;

    if (strcmp(c->op, "silu") == 0) {
        cpu->silu(x, n);
        gpu->silu(dx, n);
    } else if (strcmp(c->op, "sigmoid") == 0) {
        cpu->sigmoid(x, n);
        gpu->sigmoid(dx, n);
    } else {
        cpu->softplus(x, n);
        gpu->softplus(dx, n);
    }
    e = cmp(dx, x, n);
    pic_cuda_free(dx);
    free(x);
    return e;
}

static double
run_conv1d(const pic_backend *cpu, const pic_backend *gpu, const cuda_case *c)
{
    int     n = c->a, C = c->b, K = c->c, S = K - 1;
    float  *u = host_rand((size_t) n * C, 2.0f), *w = host_rand((size_t) C * K, 0.5f);
    float  *st = host_rand((size_t) C * (S ? S : 1), 2.0f), *y = malloc((size_t) n * C * 4);
    float  *du = dev_copy(u, (size_t) n * C * 4), *dw = dev_copy(w, (size_t) C * K * 4);
    float  *dst = dev_copy(st, (size_t) C * (S ? S : 1) * 4);
    float  *dy = pic_cuda_malloc((size_t) n * C * 4);
    double  e, es;

    cpu->conv1d(y, u, st, w, n, C, K);
    gpu->conv1d(dy, du, dst, dw, n, C, K);
    e = cmp(dy, y, (size_t) n * C);
    es = S ? cmp(dst, st, (size_t) C * S) : 0;
    pic_cuda_free(du);
    pic_cuda_free(dw);
    pic_cuda_free(dst);
    pic_cuda_free(dy);
    free(u);
    free(w);
    free(st);
    free(y);
    return e > es ? e : es;
}

static double
run_l2norm(const pic_backend *cpu, const pic_backend *gpu, const cuda_case *c)
{
    int     rows = c->a, ld = c->b, dim = c->c;
    /* rows of stride ld: row r at r*ld within rows/(ld/dim)... keep it
     * simple: rows vectors at stride ld, the gaps untouched */
    size_t  nx = (size_t) (rows - 1) * ld + dim;
    float  *x = host_rand(nx, 2.0f), *dx = dev_copy(x, nx * 4);
    double  e;

    cpu->l2norm(x, rows, ld, dim, 1e-6f, 1.0f / sqrtf((float) dim));
    gpu->l2norm(dx, rows, ld, dim, 1e-6f, 1.0f / sqrtf((float) dim));
    e = cmp(dx, x, nx);
    pic_cuda_free(dx);
    free(x);
    return e;
}

static double
run_rope(const pic_backend *cpu, const pic_backend *gpu, const cuda_case *c)
{
    int     n = c->a, heads = c->b, hd = c->c, rot = c->d, ld = heads * hd + 8;
    size_t  nx = (size_t) n * ld;
    float  *x = host_rand(nx, 1.0f), *dx = dev_copy(x, nx * 4);
    int    *pos = malloc((size_t) n * sizeof(int)), *dpos;
    double  e;

    for (int t = 0; t < n; t++) {
        pos[t] = c->e + t * (t % 3 == 2 ? 7 : 1);
    }
    dpos = dev_copy(pos, (size_t) n * sizeof(int));
    cpu->rope(x, ld, pos, n, heads, hd, rot, 1e7f);
    gpu->rope(dx, ld, dpos, n, heads, hd, rot, 1e7f);
    e = cmp(dx, x, nx);
    pic_cuda_free(dx);
    pic_cuda_free(dpos);
    free(x);
    free(pos);
    return e;
}

static double
run_attention(const pic_backend *cpu, const pic_backend *gpu, const cuda_case *c)
{
    int     n = c->a, Hq = c->b, Hkv = c->c, hd = c->d, nk = c->f, cap = nk + 16;
    size_t  nq = (size_t) n * Hq * hd, nc = (size_t) Hkv * cap * hd;
    float  *q = host_rand(nq, 1.5f), *kc = host_rand(nc, 1.5f), *vc = host_rand(nc, 1.0f);
    float  *o = malloc(nq * 4);
    int    *qpos = malloc((size_t) n * sizeof(int));
    float  *dq = dev_copy(q, nq * 4), *dk = dev_copy(kc, nc * 4), *dv = dev_copy(vc, nc * 4);
    float  *dout = pic_cuda_malloc(nq * 4);
    int    *dpos;
    double  e;

    for (int t = 0; t < n; t++) {
        qpos[t] = c->e + t;             /* c->e < 0: the first rows see no key */
    }
    dpos = dev_copy(qpos, (size_t) n * sizeof(int));
    cpu->attention(o, q, qpos, n, Hq, Hkv, hd, kc, vc, cap, nk);
    gpu->attention(dout, dq, dpos, n, Hq, Hkv, hd, dk, dv, cap, nk);
    e = cmp(dout, o, nq);
    pic_cuda_free(dq);
    pic_cuda_free(dk);
    pic_cuda_free(dv);
    pic_cuda_free(dout);
    pic_cuda_free(dpos);
    free(q);
    free(kc);
    free(vc);
    free(o);
    free(qpos);
    return e;
}

static double
run_gdn(const pic_backend *cpu, const pic_backend *gpu, const cuda_case *c)
{
    int          n = c->a, Hk = c->b, Hv = c->c, dk = c->d, ds = c->e, tmat = c->f;
    int          ld = 2 * Hk * dk + Hv * ds;        /* one conv output row: q | k | v */
    size_t       nrow = (size_t) n * ld, ns = (size_t) Hv * dk * ds, no = (size_t) n * Hv * ds;
    float       *qkv = host_rand(nrow, 1.0f), *S = host_rand(ns, 0.2f);
    float       *g = malloc((size_t) n * Hv * 4), *beta = malloc((size_t) n * Hv * 4);
    float       *o = calloc(no + 1, 4);
    double       e, es;

    if (tmat) {                         /* T from S = I */
        memset(S, 0, ns * 4);
        for (int h = 0; h < Hv; h++) {
            for (int i = 0; i < dk; i++) {
                S[(size_t) h * dk * ds + (size_t) i * ds + i] = 1.0f;
            }
        }
    }
    for (int i = 0; i < n * Hv; i++) {
        g[i] = -0.05f - 0.3f * (frand() + 1.0f);
        beta[i] = 0.1f + 0.4f * (frand() + 1.0f);
    }
    for (int t = 0; t < n; t++) {       /* q then k heads of each row */
        cpu->l2norm(qkv + (size_t) t * ld, Hk, dk, dk, 1e-6f, 1.0f / sqrtf((float) dk));
        cpu->l2norm(qkv + (size_t) t * ld + Hk * dk, Hk, dk, dk, 1e-6f, 1.0f);
    }
    float *dqkv = dev_copy(qkv, nrow * 4), *dS = dev_copy(S, ns * 4);
    float *dg = dev_copy(g, (size_t) n * Hv * 4), *db = dev_copy(beta, (size_t) n * Hv * 4);
    float *dout = pic_cuda_malloc(no * 4 + 4);

    pic_gdn_args a = { .n = n, .Hk = Hk, .Hv = Hv, .dk = dk, .ds = ds,
                       .q = tmat ? NULL : qkv, .ldq = ld,
                       .k = qkv + Hk * dk, .ldk = ld,
                       .v = tmat ? NULL : qkv + 2 * Hk * dk, .ldv = ld,
                       .g = g, .beta = beta, .S = S,
                       .o = tmat ? NULL : o, .ldo = Hv * ds };
    pic_gdn_args b = a;

    b.q = tmat ? NULL : dqkv;
    b.k = dqkv + Hk * dk;
    b.v = tmat ? NULL : dqkv + 2 * Hk * dk;
    b.g = dg;
    b.beta = db;
    b.S = dS;
    b.o = tmat ? NULL : dout;
    if (strcmp(c->op, "gdn_chunked") == 0) {
        cpu->gdn_chunked(&a);
        gpu->gdn_chunked(&b);
    } else {
        cpu->gdn_recurrent(&a);
        gpu->gdn_recurrent(&b);
    }
    es = cmp(dS, S, ns);
    e = tmat ? 0 : cmp(dout, o, no);
    pic_cuda_free(dqkv);
    pic_cuda_free(dS);
    pic_cuda_free(dg);
    pic_cuda_free(db);
    pic_cuda_free(dout);
    free(qkv);
    free(S);
    free(g);
    free(beta);
    free(o);
    return e > es ? e : es;
}

/* --- the driver --- */

static const pic_backend *
need_gpu(void)
{
    const pic_backend *gpu;

    if (pic_cuda_device_count() == 0) {
        print_message("no CUDA device: CUDA op tests skipped\n");
        skip();
    }
    gpu = pic_backend_cuda();
    assert_non_null(gpu);
    return gpu;
}

/* Every case of op `name`. */
static void
run_op(const char *name)
{
    const pic_backend *gpu = need_gpu(), *cpu = pic_backend_cpu();
    int                ran = 0, bad = 0;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const cuda_case *c = &cases[i];
        double           e;

        if (strcmp(c->op, name) != 0) {
            continue;
        }
        if (strcmp(c->op, "matmul") == 0 || strcmp(c->op, "matmul_w") == 0) {
            e = run_matmul(cpu, gpu, c);
        } else if (strcmp(c->op, "matmul_w_multi") == 0) {
            e = run_multi(cpu, gpu, c);
        } else if (strcmp(c->op, "wmat_rows") == 0) {
            e = run_wmat_rows(cpu, gpu, c);
        } else if (strcmp(c->op, "rmsnorm") == 0) {
            e = run_rmsnorm(cpu, gpu, c);
        } else if (strcmp(c->op, "conv1d") == 0) {
            e = run_conv1d(cpu, gpu, c);
        } else if (strcmp(c->op, "l2norm") == 0) {
            e = run_l2norm(cpu, gpu, c);
        } else if (strcmp(c->op, "rope") == 0) {
            e = run_rope(cpu, gpu, c);
        } else if (strcmp(c->op, "attention") == 0) {
            e = run_attention(cpu, gpu, c);
        } else if (strncmp(c->op, "gdn_", 4) == 0) {
            e = run_gdn(cpu, gpu, c);
        } else {
            e = run_act(cpu, gpu, c);
        }
        ran++;
        bad += !(e <= c->tol);
        print_message("%-15s %-5s a=%d b=%d c=%d d=%d e=%d f=%d  nmse %.3e (tol %.0e) %s\n",
                      c->op, pic_wtype_name(c->wt), c->a, c->b, c->c, c->d, c->e,
                      c->f, e, c->tol, e <= c->tol ? "ok" : "FAIL");
    }
    assert_true(ran > 0);
    assert_int_equal(bad, 0);
}

static void test_matmul_matches_cpu(void **state) { run_op("matmul"); }
static void test_matmul_w_matches_cpu(void **state) { run_op("matmul_w"); }
static void test_matmul_w_multi_matches_cpu(void **state) { run_op("matmul_w_multi"); }
static void test_wmat_rows_matches_cpu(void **state) { run_op("wmat_rows"); }
static void test_rmsnorm_matches_cpu(void **state) { run_op("rmsnorm"); }
static void test_silu_matches_cpu(void **state) { run_op("silu"); }
static void test_sigmoid_matches_cpu(void **state) { run_op("sigmoid"); }
static void test_softplus_matches_cpu(void **state) { run_op("softplus"); }
static void test_conv1d_matches_cpu(void **state) { run_op("conv1d"); }
static void test_l2norm_matches_cpu(void **state) { run_op("l2norm"); }
static void test_rope_matches_cpu(void **state) { run_op("rope"); }
static void test_attention_matches_cpu(void **state) { run_op("attention"); }
static void test_gdn_recurrent_matches_cpu(void **state) { run_op("gdn_recurrent"); }
static void test_gdn_chunked_matches_cpu(void **state) { run_op("gdn_chunked"); }

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_matches_cpu),
        cmocka_unit_test(test_matmul_w_matches_cpu),
        cmocka_unit_test(test_matmul_w_multi_matches_cpu),
        cmocka_unit_test(test_wmat_rows_matches_cpu),
        cmocka_unit_test(test_rmsnorm_matches_cpu),
        cmocka_unit_test(test_silu_matches_cpu),
        cmocka_unit_test(test_sigmoid_matches_cpu),
        cmocka_unit_test(test_softplus_matches_cpu),
        cmocka_unit_test(test_conv1d_matches_cpu),
        cmocka_unit_test(test_l2norm_matches_cpu),
        cmocka_unit_test(test_rope_matches_cpu),
        cmocka_unit_test(test_attention_matches_cpu),
        cmocka_unit_test(test_gdn_recurrent_matches_cpu),
        cmocka_unit_test(test_gdn_chunked_matches_cpu),
    };

    if (pic_cuda_device_count() > 0) {
        print_message("device: %s\n", pic_cuda_device_name());
    }
    return cmocka_run_group_tests_name("cuda_backend_ops", tests, NULL, NULL);
}
