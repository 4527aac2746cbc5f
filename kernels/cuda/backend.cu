/*
 * backend.cu — pic_backend_cuda(): the op table of pic_kernels.h filled
 * with the CUDA ops (device pointers, pic_cuda.h).  A table op that fails
 * prints the CUDA error (the pic_cuda_<op> did) and aborts, as a failed
 * PIC_OP_CHECK does on CPU.
 */
#include <stdlib.h>

#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

#define PIC_CUDA_OP(call)                                                     \
    do {                                                                      \
        if ((call) != 0) {                                                    \
            fprintf(stderr, "%s: CUDA op failed\n", __func__);                \
            abort();                                                          \
        }                                                                     \
    } while (0)

static void
cuda_matmul(float *y, const float *x, const float *w, int n, int in, int out,
            int accumulate)
{
    PIC_CUDA_OP(pic_cuda_matmul(y, x, w, n, in, out, accumulate));
}

static void
cuda_matmul_w(float *y, const float *x, const pic_wmat *w, int n,
              int accumulate)
{
    PIC_CUDA_OP(pic_cuda_matmul_w(y, x, w, n, accumulate));
}

static void
cuda_matmul_w_multi(float *const *ys, const float *x,
                    const pic_wmat *const *ws, int k, int n)
{
    PIC_CUDA_OP(pic_cuda_matmul_w_multi(ys, x, ws, k, n));
}

static void
cuda_wmat_rows(float *dst, const pic_wmat *w, int r0, int nr)
{
    PIC_CUDA_OP(pic_cuda_wmat_rows(dst, w, r0, nr));
}

static void
cuda_rmsnorm(float *y, const float *x, const float *w, int n, int dim,
             float eps, int zero_centred)
{
    PIC_CUDA_OP(pic_cuda_rmsnorm(y, x, w, n, dim, eps, zero_centred));
}

static void
cuda_silu(float *x, size_t n)
{
    PIC_CUDA_OP(pic_cuda_silu(x, n));
}

static void
cuda_sigmoid(float *x, size_t n)
{
    PIC_CUDA_OP(pic_cuda_sigmoid(x, n));
}

static void
cuda_softplus(float *x, size_t n)
{
    PIC_CUDA_OP(pic_cuda_softplus(x, n));
}

static void
cuda_conv1d(float *y, const float *u, float *state, const float *w, int n,
            int C, int K)
{
    PIC_CUDA_OP(pic_cuda_conv1d(y, u, state, w, n, C, K));
}

static void
cuda_l2norm(float *x, int rows, int ld, int dim, float eps, float scale)
{
    PIC_CUDA_OP(pic_cuda_l2norm(x, rows, ld, dim, eps, scale));
}

static void
cuda_rope(float *x, int ld, const int *pos, int n, int heads, int hd,
          const pic_rope *r)
{
    PIC_CUDA_OP(pic_cuda_rope(x, ld, pos, n, heads, hd, r));
}

static void
cuda_attention(float *o, const float *q, const int *qpos, int n, int Hq,
               int Hkv, int hd, const float *kc, const float *vc, int cap,
               int n_keys)
{
    PIC_CUDA_OP(pic_cuda_attention(o, q, qpos, n, Hq, Hkv, hd, kc, vc, cap,
                                   n_keys));
}

static void
cuda_gdn_chunked(const pic_gdn_args *a)
{
    PIC_CUDA_OP(pic_cuda_gdn_chunked(a));
}

static void
cuda_gdn_recurrent(const pic_gdn_args *a)
{
    PIC_CUDA_OP(pic_cuda_gdn_recurrent(a));
}

static void
cuda_add_rows(float *y, const float *b, int n, int dim)
{
    PIC_CUDA_OP(pic_cuda_add_rows(y, b, n, dim));
}

static void
cuda_mul(float *y, const float *x, size_t n)
{
    PIC_CUDA_OP(pic_cuda_mul(y, x, n));
}

static void
cuda_copy_rows(float *dst, int ldd, const float *src, int lds, int n, int dim)
{
    PIC_CUDA_OP(pic_cuda_copy_rows(dst, ldd, src, lds, n, dim));
}

static void
cuda_l2norm_heads(float *x, int n, int ld, int heads, int dim, float eps,
                  float scale)
{
    PIC_CUDA_OP(pic_cuda_l2norm_heads(x, n, ld, heads, dim, eps, scale));
}

static void
cuda_gather_rows(float *x, const pic_wmat *w, const int *ids, int n)
{
    PIC_CUDA_OP(pic_cuda_gather_rows(x, w, ids, n));
}

static void
cuda_scatter_add(float *x, const float *src, const int *ids, const float *wts,
                 int n, int dim)
{
    PIC_CUDA_OP(pic_cuda_scatter_add(x, src, ids, wts, n, dim));
}

static void
cuda_gdn_gates(float *g, float *beta, const float *A_log, const float *dt_bias,
               int n, int Hv)
{
    PIC_CUDA_OP(pic_cuda_gdn_gates(g, beta, A_log, dt_bias, n, Hv));
}

static void
cuda_kv_store(float *kc, float *vc, int cap, const float *k, const float *v,
              int n, int Hkv, int hd, int p0)
{
    PIC_CUDA_OP(pic_cuda_kv_store(kc, vc, cap, k, v, n, Hkv, hd, p0));
}

static void
cuda_moe_route(int *sel, float *selw, float *p, int n, int E, int k, int renorm)
{
    PIC_CUDA_OP(pic_cuda_moe_route(sel, selw, p, n, E, k, renorm));
}

static void
cuda_ssd_scan(const pic_ssd_args *a)
{
    PIC_CUDA_OP(pic_cuda_ssd_scan(a));
}

static void
cuda_gated_rmsnorm(float *y, const float *z, const float *w, int n, int dim,
                   int groups, float eps)
{
    PIC_CUDA_OP(pic_cuda_gated_rmsnorm(y, z, w, n, dim, groups, eps));
}

static void
cuda_scale_add(float *y, const float *x, float a, float b, size_t n)
{
    PIC_CUDA_OP(pic_cuda_scale_add(y, x, a, b, n));
}

static void
cuda_mla_attention(const pic_mla_args *a)
{
    PIC_CUDA_OP(pic_cuda_mla_attention(a));
}

static void
cuda_scale_rows(float *x, int ld, int n, int dim, float alpha)
{
    PIC_CUDA_OP(pic_cuda_scale_rows(x, ld, n, dim, alpha));
}

static void
cuda_moe_route_grouped(int *sel, float *selw, float *p, const pic_moe_group_args *a)
{
    PIC_CUDA_OP(pic_cuda_moe_route_grouped(sel, selw, p, a));
}

/* --- memory (pic_cuda.h's helpers; a failure aborts, as an op's) --- */

static void *
cuda_mem_alloc(size_t bytes)
{
    return pic_cuda_malloc(bytes);
}

static void
cuda_mem_free(void *p)
{
    pic_cuda_free(p);
}

static void
cuda_mem_upload(void *dst, const void *src, size_t bytes)
{
    PIC_CUDA_OP(pic_cuda_upload(dst, src, bytes));
}

static void
cuda_mem_download(void *dst, const void *src, size_t bytes)
{
    PIC_CUDA_OP(pic_cuda_download(dst, src, bytes));
}

static void
cuda_mem_copy(void *dst, const void *src, size_t bytes)
{
    PIC_CUDA_OP(pic_cuda_copy(dst, src, bytes));
}

static void
cuda_mem_zero(void *dst, size_t bytes)
{
    PIC_CUDA_OP(pic_cuda_memset(dst, 0, bytes));
}

static pic_backend pic_cuda_backend;

extern "C" const pic_backend *
pic_backend_cuda(void)
{
    pic_backend *b = &pic_cuda_backend;

    if (b->name != NULL) {
        return b;
    }
    if (pic_cuda_device_count() == 0) {
        fprintf(stderr, "%s: no CUDA device\n", __func__);
        return NULL;
    }
    if (pic_cuda_blas() == NULL) {
        return NULL;
    }
    b->matmul = cuda_matmul;
    b->matmul_w = cuda_matmul_w;
    b->matmul_w_multi = cuda_matmul_w_multi;
    b->wmat_rows = cuda_wmat_rows;
    b->rmsnorm = cuda_rmsnorm;
    b->silu = cuda_silu;
    b->sigmoid = cuda_sigmoid;
    b->softplus = cuda_softplus;
    b->conv1d = cuda_conv1d;
    b->l2norm = cuda_l2norm;
    b->rope = cuda_rope;
    b->attention = cuda_attention;
    b->gdn_chunked = cuda_gdn_chunked;
    b->gdn_recurrent = cuda_gdn_recurrent;
    b->mul = cuda_mul;
    b->add_rows = cuda_add_rows;
    b->copy_rows = cuda_copy_rows;
    b->l2norm_heads = cuda_l2norm_heads;
    b->gather_rows = cuda_gather_rows;
    b->scatter_add = cuda_scatter_add;
    b->gdn_gates = cuda_gdn_gates;
    b->kv_store = cuda_kv_store;
    b->moe_route = cuda_moe_route;
    b->ssd_scan = cuda_ssd_scan;
    b->gated_rmsnorm = cuda_gated_rmsnorm;
    b->scale_add = cuda_scale_add;
    b->mla_attention = cuda_mla_attention;
    b->scale_rows = cuda_scale_rows;
    b->moe_route_grouped = cuda_moe_route_grouped;
    b->host = 0;
    b->mem_alloc = cuda_mem_alloc;
    b->mem_free = cuda_mem_free;
    b->mem_upload = cuda_mem_upload;
    b->mem_download = cuda_mem_download;
    b->mem_copy = cuda_mem_copy;
    b->mem_zero = cuda_mem_zero;
    b->name = "cuda";
    return b;
}
