/*
 * rmsnorm.cu — RMSNorm over rows (zero-centred (1+w) or plain w), one block
 * per row, fp32 accumulation.
 */
#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

/* One block normalises one row of dim values. */
static __global__ void
rmsnorm_kernel(float *y, const float *x, const float *w, int dim, float eps,
               int zero_centred)
{
    __shared__ float partial[32];
    const float *xr = x + (size_t) blockIdx.x * dim;
    float       *yr = y + (size_t) blockIdx.x * dim;
    float        ss = 0.0f;

    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        ss += xr[i] * xr[i];
    }
    for (int off = 16; off > 0; off >>= 1) {
        ss += __shfl_down_sync(0xffffffffu, ss, off);
    }
    if ((threadIdx.x & 31) == 0) {
        partial[threadIdx.x >> 5] = ss;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        ss = threadIdx.x < (blockDim.x + 31) / 32 ? partial[threadIdx.x] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) {
            ss += __shfl_down_sync(0xffffffffu, ss, off);
        }
        if (threadIdx.x == 0) {
            partial[0] = rsqrtf(ss / dim + eps);
        }
    }
    __syncthreads();
    float inv = partial[0];
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float s = w ? (zero_centred ? 1.0f + w[i] : w[i]) : 1.0f;
        yr[i] = xr[i] * inv * s;
    }
}

static int
rmsnorm_launch(float *y, const float *x, const float *w, int n, int dim,
               float eps, int zero_centred)
{
    if (n <= 0) {
        return 0;
    }
    rmsnorm_kernel<<<n, 256>>>(y, x, w, dim, eps, zero_centred);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int
pic_cuda_rmsnorm(float *y, const float *x, const float *w, int n, int dim,
                 float eps, int zero_centred)
{
    if (dim <= 0 || n < 0) {
        fprintf(stderr, "%s: bad shape n=%d dim=%d\n", __func__, n, dim);
        return -1;
    }
    return rmsnorm_launch(y, x, w, n, dim, eps, zero_centred);
}
