/*
 * conv1d.cu — causal depthwise conv1d with a carried state (the GDN's
 * short conv): one thread per (token, channel) output, then one thread per
 * channel shifts the state.
 */
#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

#define PIC_CONV_MAX_S 16               /* K <= 17, as the CPU op */

/* y[t][c] = Σ_j w[c][j] · (state‖u)[t + j][c]. */
static __global__ void
conv1d_kernel(float *y, const float *u, const float *state, const float *w,
              int n, int C, int K)
{
    size_t idx = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
    int    S = K - 1;

    if (idx >= (size_t) n * C) {
        return;
    }
    int   t = (int) (idx / C), c = (int) (idx % C);
    float acc = 0.0f;

    for (int j = 0; j < K; j++) {
        int src = t - S + j;            /* input index, < 0: from state */

        acc += w[(size_t) c * K + j]
               * (src >= 0 ? u[(size_t) src * C + c] : state[(size_t) c * S + S + src]);
    }
    y[idx] = acc;
}

/* state[c] ← the last S inputs of state[c] ‖ u[:, c]. */
static __global__ void
conv1d_state_kernel(const float *u, float *state, int n, int C, int S)
{
    int   c = blockIdx.x * blockDim.x + threadIdx.x;
    float buf[PIC_CONV_MAX_S];

    if (c >= C) {
        return;
    }
    float *st = state + (size_t) c * S;
    #pragma unroll
    for (int i = 0; i < PIC_CONV_MAX_S; i++) {
        if (i < S) {
            int src = n - S + i;
            buf[i] = src >= 0 ? u[(size_t) src * C + c] : st[S + src];
        }
    }
    #pragma unroll
    for (int i = 0; i < PIC_CONV_MAX_S; i++) {
        if (i < S) {
            st[i] = buf[i];
        }
    }
}

static int
conv1d_launch(float *y, const float *u, float *state, const float *w, int n,
              int C, int K)
{
    cudaStream_t s = pic_cuda_stream_get();

    if (n > 0) {
        conv1d_kernel<<<pic_cuda_blocks((size_t) n * C, 256), 256, 0, s>>>(
            y, u, state, w, n, C, K);
        PIC_CUDA_CHECK_LAUNCH();
    }
    if (K > 1) {
        conv1d_state_kernel<<<pic_cuda_blocks(C, 256), 256, 0, s>>>(u, state, n, C,
                                                                    K - 1);
        PIC_CUDA_CHECK_LAUNCH();
    }
    return 0;
}

extern "C" int
pic_cuda_conv1d(float *y, const float *u, float *state, const float *w,
                int n, int C, int K)
{
    PIC_CUDA_ARG(y != NULL && u != NULL && w != NULL && y != u);
    PIC_CUDA_ARG(n >= 0 && C > 0 && K >= 1 && K - 1 <= PIC_CONV_MAX_S);
    PIC_CUDA_ARG(K == 1 || state != NULL);
    return conv1d_launch(y, u, state, w, n, C, K);
}
