/*
 * rope.cu — partial NeoX RoPE in place: one thread per (token, rotary
 * pair), looping over the heads, the model's frequency table; the angle in
 * double as the CPU op does, so that R(a+b) == R(a)R(b) to rounding and
 * negative positions undo.
 */
#include <math.h>

#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

/* Pair i of every head of token t rotated by pos[t] · r.inv_freq[i] (the
 * table travels by value in the launch's parameters: 1 KB). */
static __global__ void
rope_kernel(float *x, int ld, const int *pos, int n, int heads, int hd,
            pic_rope r)
{
    int    half = r.dim / 2;
    size_t idx = (size_t) blockIdx.x * blockDim.x + threadIdx.x;

    if (idx >= (size_t) n * half) {
        return;
    }
    int    t = (int) (idx / half), i = (int) (idx % half);
    double ang = (double) pos[t] * (double) r.inv_freq[i], sd, cd;

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
            const pic_rope *r)
{
    size_t items = (size_t) n * (r->dim / 2);

    if (items == 0) {
        return 0;
    }
    rope_kernel<<<pic_cuda_blocks(items, 128), 128, 0, pic_cuda_stream_get()>>>(
        x, ld, pos, n, heads, hd, *r);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int
pic_cuda_rope(float *x, int ld, const int *pos, int n, int heads, int hd,
              const pic_rope *r)
{
    PIC_CUDA_ARG(x != NULL && pos != NULL && r != NULL && n >= 0 && heads > 0);
    PIC_CUDA_ARG(hd > 0 && r->dim >= 2 && r->dim <= hd && r->dim % 2 == 0);
    PIC_CUDA_ARG(r->dim <= 2 * PIC_ROPE_MAX_PAIRS && ld >= heads * hd);
    return rope_launch(x, ld, pos, n, heads, hd, r);
}
