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
          int rotary_dim, float theta)
{
    PIC_CUDA_OP(pic_cuda_rope(x, ld, pos, n, heads, hd, rotary_dim, theta));
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
    b->name = "cuda";
    return b;
}
