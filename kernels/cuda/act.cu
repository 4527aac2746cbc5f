/*
 * act.cu — elementwise activations in place: SiLU, sigmoid, softplus.
 */
#include <math.h>

#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

enum { PIC_ACT_SILU, PIC_ACT_SIGMOID, PIC_ACT_SOFTPLUS };

/* x[i] ← act(x[i]), grid-stride. */
static __global__ void
act_kernel(float *x, size_t n, int kind)
{
    size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
    size_t step = (size_t) gridDim.x * blockDim.x;

    for (; i < n; i += step) {
        float v = x[i];

        if (kind == PIC_ACT_SILU) {
            x[i] = v / (1.0f + expf(-v));
        } else if (kind == PIC_ACT_SIGMOID) {
            x[i] = 1.0f / (1.0f + expf(-v));
        } else {
            x[i] = v > 20.0f ? v : log1pf(expf(v));
        }
    }
}

static int
act_launch(float *x, size_t n, int kind)
{
    size_t blocks = (n + 255) / 256;

    if (n == 0) {
        return 0;
    }
    blocks = blocks > 65535 ? 65535 : blocks;
    act_kernel<<<(unsigned) blocks, 256, 0, pic_cuda_stream_get()>>>(x, n, kind);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int
pic_cuda_silu(float *x, size_t n)
{
    PIC_CUDA_ARG(x != NULL || n == 0);
    return act_launch(x, n, PIC_ACT_SILU);
}

extern "C" int
pic_cuda_sigmoid(float *x, size_t n)
{
    PIC_CUDA_ARG(x != NULL || n == 0);
    return act_launch(x, n, PIC_ACT_SIGMOID);
}

extern "C" int
pic_cuda_softplus(float *x, size_t n)
{
    PIC_CUDA_ARG(x != NULL || n == 0);
    return act_launch(x, n, PIC_ACT_SOFTPLUS);
}
