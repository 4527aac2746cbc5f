/*
 * silu.cu — elementwise x·sigmoid(x) in place.
 */
#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

static __global__ void
silu_kernel(float *x, size_t n)
{
    size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n) {
        float v = x[i];
        x[i] = v / (1.0f + __expf(-v));
    }
}

static int
silu_launch(float *x, size_t n)
{
    if (n == 0) {
        return 0;
    }
    silu_kernel<<<(unsigned) ((n + 255) / 256), 256>>>(x, n);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int
pic_cuda_silu(float *x, size_t n)
{
    return silu_launch(x, n);
}

extern "C" int
pic_cuda_device_count(void)
{
    int n = 0;

    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void) cudaGetLastError();
        return 0;
    }
    return n;
}
