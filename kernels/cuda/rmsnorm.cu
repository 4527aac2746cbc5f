/*
 * rmsnorm.cu — RMSNorm over rows (zero-centred (1+w), plain w, or no
 * weight), one block per row, fp32 accumulation; and the L2 norm of
 * strided rows (the GDN's q/k), one warp per row.
 */
#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

/* Sum of v over the block (blockDim.x a multiple of 32, <= 1024); every
 * thread gets it. */
static __device__ float
block_sum(float v, float *sh)
{
    for (int off = 16; off > 0; off >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, off);
    }
    __syncthreads();                    /* sh may hold a previous sum */
    if ((threadIdx.x & 31) == 0) {
        sh[threadIdx.x >> 5] = v;
    }
    __syncthreads();
    v = 0.0f;
    for (int i = 0; i < (int) (blockDim.x >> 5); i++) {
        v += sh[i];
    }
    return v;
}

/* One block normalises one row of dim values (y may alias x: each thread
 * writes only what it read). */
static __global__ void
rmsnorm_kernel(float *y, const float *x, const float *w, int dim, float eps,
               int zero_centred)
{
    __shared__ float sh[32];
    const float *xr = x + (size_t) blockIdx.x * dim;
    float       *yr = y + (size_t) blockIdx.x * dim;
    float        ss = 0.0f;

    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        ss += xr[i] * xr[i];
    }
    ss = block_sum(ss, sh);
    float inv = 1.0f / sqrtf(ss / dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float s = w ? (zero_centred ? 1.0f + w[i] : w[i]) : 1.0f;
        yr[i] = xr[i] * inv * s;
    }
}

static int
rmsnorm_launch(float *y, const float *x, const float *w, int n, int dim,
               float eps, int zero_centred)
{
    unsigned th = dim >= 1024 ? 256 : dim >= 256 ? 128 : 64;

    if (n == 0) {
        return 0;
    }
    rmsnorm_kernel<<<n, th, 0, pic_cuda_stream_get()>>>(y, x, w, dim, eps,
                                                        zero_centred);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int
pic_cuda_rmsnorm(float *y, const float *x, const float *w, int n, int dim,
                 float eps, int zero_centred)
{
    PIC_CUDA_ARG(y != NULL && x != NULL && n >= 0 && dim > 0);
    return rmsnorm_launch(y, x, w, n, dim, eps, zero_centred);
}

/* --- l2norm --- */

/* Warp r (of the grid) scales row r: head r % heads of token r / heads,
 * at x + (r / heads)*ld + (r % heads)*dim. */
static __global__ void
l2norm_kernel(float *x, int rows, int ld, int heads, int dim, float eps,
              float scale)
{
    int    r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int    lane = threadIdx.x & 31;
    float  ss = 0.0f;

    if (r >= rows) {
        return;
    }
    float *xr = x + (size_t) (r / heads) * ld + (size_t) (r % heads) * dim;
    for (int i = lane; i < dim; i += 32) {
        ss += xr[i] * xr[i];
    }
    for (int off = 16; off > 0; off >>= 1) {
        ss += __shfl_xor_sync(0xffffffffu, ss, off);
    }
    float f = 1.0f / sqrtf(ss + eps) * scale;
    for (int i = lane; i < dim; i += 32) {
        xr[i] *= f;
    }
}

static int
l2norm_launch(float *x, int rows, int ld, int heads, int dim, float eps,
              float scale)
{
    if (rows == 0) {
        return 0;
    }
    l2norm_kernel<<<pic_cuda_blocks(rows, 8), 256, 0, pic_cuda_stream_get()>>>(
        x, rows, ld, heads, dim, eps, scale);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int
pic_cuda_l2norm(float *x, int rows, int ld, int dim, float eps, float scale)
{
    PIC_CUDA_ARG(x != NULL && rows >= 0 && dim > 0 && ld >= dim);
    return l2norm_launch(x, rows, ld, 1, dim, eps, scale);
}

extern "C" int
pic_cuda_l2norm_heads(float *x, int n, int ld, int heads, int dim, float eps,
                      float scale)
{
    PIC_CUDA_ARG(x != NULL && n >= 0 && heads >= 0 && dim > 0);
    PIC_CUDA_ARG(ld >= heads * dim);
    if (heads == 0) {
        return 0;
    }
    return l2norm_launch(x, n * heads, ld, heads, dim, eps, scale);
}
