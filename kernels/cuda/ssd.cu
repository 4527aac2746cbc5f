/*
 * ssd.cu — the Mamba2 ops on the GPU (MODEL.md §9; contracts in
 * pic_kernels.h): the scan token by token, one thread per state row (head
 * h, row p: its N state values in device memory, updated and read per
 * token), the grouped gated RMSNorm (one block per row and group), and
 * y ← a·x + b·y.
 */
#include <math.h>

#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

/* Thread (h, p) carries S[h][p][0..N) through every token; thread p == 0
 * of each head also multiplies decay[h]. */
static __global__ void
ssd_scan_kernel(pic_ssd_args a)
{
    int h = blockIdx.x, p = threadIdx.x + blockIdx.y * blockDim.x;

    if (p >= a.P) {
        return;
    }
    int    g = h / (a.H / a.G), N = a.N;
    float *S = a.S + ((size_t) h * a.P + p) * N;
    float  Ah = a.A[h], Dh = a.D != NULL ? a.D[h] : 0.0f, decay = 1.0f;

    for (int t = 0; t < a.n; t++) {
        const float *B = a.B + (size_t) t * a.ldx + (size_t) g * N;
        float        r = a.dt[(size_t) t * a.H + h] + a.dt_bias[h];
        float        dt = r > 20.0f ? r : log1pf(expf(r));

        dt = fminf(fmaxf(dt, a.dt_min), a.dt_max);
        float da = expf(dt * Ah);
        float xp = a.x[(size_t) t * a.ldx + (size_t) h * a.P + p];
        float xd = dt * xp, acc = 0.0f;

        decay *= da;
        for (int j = 0; j < N; j++) {
            S[j] = da * S[j] + xd * B[j];
        }
        if (a.y != NULL) {
            const float *C = a.C + (size_t) t * a.ldx + (size_t) g * N;

            for (int j = 0; j < N; j++) {
                acc += S[j] * C[j];
            }
            a.y[(size_t) t * a.ldy + (size_t) h * a.P + p] = acc + Dh * xp;
        }
    }
    if (a.decay != NULL && p == 0) {
        a.decay[h] *= decay;
    }
}

extern "C" int
pic_cuda_ssd_scan(const pic_ssd_args *a)
{
    PIC_CUDA_ARG(a != NULL && a->n >= 0 && a->H > 0 && a->G > 0 && a->H % a->G == 0);
    PIC_CUDA_ARG(a->P > 0 && a->N > 0 && a->S != NULL && a->A != NULL);
    PIC_CUDA_ARG(a->y == NULL || a->C != NULL);
    if (a->n == 0) {
        return 0;
    }
    unsigned th = a->P < 128 ? (unsigned) ((a->P + 31) / 32 * 32) : 128;
    dim3     grid((unsigned) a->H, (unsigned) ((a->P + th - 1) / th));

    ssd_scan_kernel<<<grid, th, 0, pic_cuda_stream_get()>>>(*a);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

/* Block (row t, group g): y ← rms(y · silu(z)) · w over the group's gs values. */
static __global__ void
gated_rmsnorm_kernel(float *y, const float *z, const float *w, int dim, int gs,
                     float eps)
{
    __shared__ float sh[32];
    size_t           o = (size_t) blockIdx.x * dim + (size_t) blockIdx.y * gs;
    float            ss = 0.0f;

    for (int i = threadIdx.x; i < gs; i += blockDim.x) {
        float zi = z[o + i], v = y[o + i] * (zi / (1.0f + expf(-zi)));

        y[o + i] = v;
        ss += v * v;
    }
    for (int off = 16; off > 0; off >>= 1) {
        ss += __shfl_xor_sync(0xffffffffu, ss, off);
    }
    if ((threadIdx.x & 31) == 0) {
        sh[threadIdx.x >> 5] = ss;
    }
    __syncthreads();
    ss = 0.0f;
    for (int i = 0; i < (int) (blockDim.x >> 5); i++) {
        ss += sh[i];
    }
    float r = rsqrtf(ss / gs + eps);
    for (int i = threadIdx.x; i < gs; i += blockDim.x) {
        y[o + i] = y[o + i] * r * w[(size_t) blockIdx.y * gs + i];
    }
}

extern "C" int
pic_cuda_gated_rmsnorm(float *y, const float *z, const float *w, int n, int dim,
                       int groups, float eps)
{
    PIC_CUDA_ARG(y != NULL && z != NULL && w != NULL && n >= 0 && dim > 0);
    PIC_CUDA_ARG(groups > 0 && dim % groups == 0);
    if (n == 0) {
        return 0;
    }
    dim3 grid((unsigned) n, (unsigned) groups);

    gated_rmsnorm_kernel<<<grid, 256, 0, pic_cuda_stream_get()>>>(y, z, w, dim,
                                                                  dim / groups, eps);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

static __global__ void
scale_add_kernel(float *y, const float *x, float a, float b, size_t n)
{
    size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
    size_t step = (size_t) gridDim.x * blockDim.x;

    for (; i < n; i += step) {
        y[i] = a * x[i] + b * y[i];
    }
}

extern "C" int
pic_cuda_scale_add(float *y, const float *x, float a, float b, size_t n)
{
    PIC_CUDA_ARG((y != NULL && x != NULL) || n == 0);
    if (n == 0) {
        return 0;
    }
    scale_add_kernel<<<pic_cuda_blocks(n, 256), 256, 0, pic_cuda_stream_get()>>>(
        y, x, a, b, n);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}
