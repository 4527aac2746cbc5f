/*
 * rope.cu — partial NeoX RoPE in place: one thread per (token, rotary
 * pair), looping over the heads; the angle in double as the CPU op does, so
 * that R(a+b) == R(a)R(b) to rounding and negative positions undo.
 */
#include <math.h>

#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

/* Pair i of every head of token t rotated by pos[t] · θ^(−2i/rotary_dim). */
static __global__ void
rope_kernel(float *x, int ld, const int *pos, int n, int heads, int hd,
            int rotary_dim, float theta)
{
    int    half = rotary_dim / 2;
    size_t idx = (size_t) blockIdx.x * blockDim.x + threadIdx.x;

    if (idx >= (size_t) n * half) {
        return;
    }
    int    t = (int) (idx / half), i = (int) (idx % half);
    float  inv = 1.0f / powf(theta, (float) (2 * i) / (float) rotary_dim);
    double ang = (double) pos[t] * (double) inv, sd, cd;

    sincos(ang, &sd, &cd);
    float c = (float) cd, s = (float) sd;
    for (int h = 0; h < heads; h++) {
        float *v = x + (size_t) t * ld + (size_t) h * hd;
        float  a = v[i], b = v[i + half];

        v[i]        = a * c - b * s;
        v[i + half] = b * c + a * s;
    }
}

static int
rope_launch(float *x, int ld, const int *pos, int n, int heads, int hd,
            int rotary_dim, float theta)
{
    size_t items = (size_t) n * (rotary_dim / 2);

    if (items == 0) {
        return 0;
    }
    rope_kernel<<<pic_cuda_blocks(items, 128), 128, 0, pic_cuda_stream_get()>>>(
        x, ld, pos, n, heads, hd, rotary_dim, theta);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int
pic_cuda_rope(float *x, int ld, const int *pos, int n, int heads, int hd,
              int rotary_dim, float theta)
{
    PIC_CUDA_ARG(x != NULL && pos != NULL && n >= 0 && heads > 0);
    PIC_CUDA_ARG(hd > 0 && rotary_dim > 0 && rotary_dim <= hd);
    PIC_CUDA_ARG(rotary_dim % 2 == 0 && ld >= heads * hd && theta > 0.0f);
    return rope_launch(x, ld, pos, n, heads, hd, rotary_dim, theta);
}
