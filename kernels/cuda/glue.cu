/*
 * glue.cu — the forward's glue ops on the device (pic_kernels.h: mul,
 * add_rows, copy_rows, scatter_add, gdn_gates, kv_store, moe_route): elementwise or
 * row-wise kernels, one thread per output value (moe_route: one per row).
 * l2norm_heads is in rmsnorm.cu, gather_rows in wmat.cu.
 */
#include <math.h>

#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

/* y[i] *= x[i], grid-stride. */
static __global__ void
mul_kernel(float *y, const float *x, size_t n)
{
    size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x;

    for (; i < n; i += (size_t) gridDim.x * blockDim.x) {
        y[i] *= x[i];
    }
}

static unsigned
grid_for(size_t n)
{
    size_t b = (n + 255) / 256;

    return (unsigned) (b > 65535 ? 65535 : b < 1 ? 1 : b);
}

extern "C" int
pic_cuda_mul(float *y, const float *x, size_t n)
{
    PIC_CUDA_ARG((y != NULL && x != NULL) || n == 0);
    if (n == 0) {
        return 0;
    }
    mul_kernel<<<grid_for(n), 256, 0, pic_cuda_stream_get()>>>(y, x, n);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

/* y[r*dim + i] += b[i], grid-stride. */
static __global__ void
add_rows_kernel(float *y, const float *b, int n, int dim)
{
    size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = (size_t) n * dim;

    for (; i < total; i += (size_t) gridDim.x * blockDim.x) {
        y[i] += b[i % dim];
    }
}

extern "C" int
pic_cuda_add_rows(float *y, const float *b, int n, int dim)
{
    size_t total = (size_t) n * dim;

    PIC_CUDA_ARG(y != NULL && b != NULL && n >= 0 && dim >= 0);
    if (total == 0) {
        return 0;
    }
    add_rows_kernel<<<grid_for(total), 256, 0, pic_cuda_stream_get()>>>(y, b, n, dim);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

/* dst + r*ldd + i ← src + r*lds + i. */
static __global__ void
copy_rows_kernel(float *dst, int ldd, const float *src, int lds, int n, int dim)
{
    size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = (size_t) n * dim;

    for (; i < total; i += (size_t) gridDim.x * blockDim.x) {
        size_t r = i / dim, c = i % dim;

        dst[r * ldd + c] = src[r * lds + c];
    }
}

extern "C" int
pic_cuda_copy_rows(float *dst, int ldd, const float *src, int lds, int n, int dim)
{
    size_t total = (size_t) n * dim;

    PIC_CUDA_ARG(dst != NULL && src != NULL && n >= 0 && dim >= 0);
    PIC_CUDA_ARG(ldd >= dim && lds >= dim);
    if (total == 0) {
        return 0;
    }
    copy_rows_kernel<<<grid_for(total), 256, 0, pic_cuda_stream_get()>>>(
        dst, ldd, src, lds, n, dim);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

/* x[ids[r]][i] += wts[r] · src[r][i] (ids distinct: no two threads add to
 * one value). */
static __global__ void
scatter_add_kernel(float *x, const float *src, const int *ids, const float *wts,
                   int n, int dim)
{
    size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = (size_t) n * dim;

    for (; i < total; i += (size_t) gridDim.x * blockDim.x) {
        size_t r = i / dim, c = i % dim;
        size_t row = ids != NULL ? (size_t) ids[r] : r;

        x[row * dim + c] += (wts != NULL ? wts[r] : 1.0f) * src[i];
    }
}

extern "C" int
pic_cuda_scatter_add(float *x, const float *src, const int *ids,
                     const float *wts, int n, int dim)
{
    size_t total = (size_t) n * dim;

    PIC_CUDA_ARG(x != NULL && src != NULL && n >= 0 && dim > 0);
    if (total == 0) {
        return 0;
    }
    scatter_add_kernel<<<grid_for(total), 256, 0, pic_cuda_stream_get()>>>(
        x, src, ids, wts, n, dim);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

/* beta ← σ(beta); g ← softplus(g + dt_bias[h]) · −e^{A_log[h]}, in the
 * CPU op's order of operations. */
static __global__ void
gdn_gates_kernel(float *g, float *beta, const float *A_log, const float *dt_bias,
                 int n, int Hv)
{
    size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x;

    if (i >= (size_t) n * Hv) {
        return;
    }
    int   h = (int) (i % Hv);
    float b = beta[i], x = g[i] + dt_bias[h];

    beta[i] = 1.0f / (1.0f + expf(-b));
    x = x > 20.0f ? x : log1pf(expf(x));
    g[i] = x * -expf(A_log[h]);
}

extern "C" int
pic_cuda_gdn_gates(float *g, float *beta, const float *A_log,
                   const float *dt_bias, int n, int Hv)
{
    size_t total = (size_t) n * Hv;

    PIC_CUDA_ARG(g != NULL && beta != NULL && A_log != NULL && dt_bias != NULL);
    PIC_CUDA_ARG(n >= 0 && Hv > 0);
    if (total == 0) {
        return 0;
    }
    gdn_gates_kernel<<<pic_cuda_blocks(total, 256), 256, 0, pic_cuda_stream_get()>>>(
        g, beta, A_log, dt_bias, n, Hv);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

/* kc, vc slot p0+t of head h ← k, v row t head h. */
static __global__ void
kv_store_kernel(float *kc, float *vc, int cap, const float *k, const float *v,
                int n, int Hkv, int hd, int p0)
{
    size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = (size_t) n * Hkv * hd;

    for (; i < total; i += (size_t) gridDim.x * blockDim.x) {
        size_t t = i / ((size_t) Hkv * hd), rest = i % ((size_t) Hkv * hd);
        size_t h = rest / hd, d = rest % hd;
        size_t slot = (h * cap + p0 + t) * hd + d;

        kc[slot] = k[i];
        vc[slot] = v[i];
    }
}

extern "C" int
pic_cuda_kv_store(float *kc, float *vc, int cap, const float *k, const float *v,
                  int n, int Hkv, int hd, int p0)
{
    size_t total = (size_t) n * Hkv * hd;

    PIC_CUDA_ARG(kc != NULL && vc != NULL && k != NULL && v != NULL);
    PIC_CUDA_ARG(n >= 0 && Hkv > 0 && hd > 0 && p0 >= 0 && p0 + n <= cap);
    if (total == 0) {
        return 0;
    }
    kv_store_kernel<<<grid_for(total), 256, 0, pic_cuda_stream_get()>>>(
        kc, vc, cap, k, v, n, Hkv, hd, p0);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

/* One thread routes row t, as the CPU op: softmax in place, k passes of
 * argmax (ties: lower index), renormalised. */
static __global__ void
moe_route_kernel(int *sel, float *selw, float *p, int n, int E, int k, int renorm)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;

    if (t >= n) {
        return;
    }
    float *pr = p + (size_t) t * E, mx = -INFINITY, sum = 0.0f, top = 0.0f;
    int   *sr = sel + (size_t) t * k;
    float *wr = selw + (size_t) t * k;

    for (int e = 0; e < E; e++) {
        mx = pr[e] > mx ? pr[e] : mx;
    }
    for (int e = 0; e < E; e++) {
        pr[e] = expf(pr[e] - mx);
        sum += pr[e];
    }
    for (int e = 0; e < E; e++) {
        pr[e] /= sum;
    }
    for (int j = 0; j < k; j++) {
        int best = -1;

        for (int e = 0; e < E; e++) {
            int taken = 0;

            for (int i = 0; i < j && !taken; i++) {
                taken = sr[i] == e;
            }
            if (!taken && (best < 0 || pr[e] > pr[best])) {
                best = e;
            }
        }
        sr[j] = best;
        wr[j] = pr[best];
        top += pr[best];
    }
    if (renorm) {
        for (int j = 0; j < k; j++) {
            wr[j] /= top;
        }
    }
}

extern "C" int
pic_cuda_moe_route(int *sel, float *selw, float *p, int n, int E, int k,
                   int renorm)
{
    PIC_CUDA_ARG(sel != NULL && selw != NULL && p != NULL);
    PIC_CUDA_ARG(n >= 0 && E > 0 && k > 0 && k <= E);
    if (n == 0) {
        return 0;
    }
    moe_route_kernel<<<pic_cuda_blocks(n, 64), 64, 0, pic_cuda_stream_get()>>>(
        sel, selw, p, n, E, k, renorm);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}
