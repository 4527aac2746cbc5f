/*
 * wmat.cu — matmul on compact weights resident on the device (pic_wmat:
 * F32 / BF16 / Q8), and the rows of one as fp32 (embeddings).
 *
 * F32: cuBLAS sgemm (matmul.cu).  BF16: decode (n <= PIC_CUDA_BF16_GEMV_ROWS)
 * is a GEMV kernel, one warp per weight row, 16-byte loads of W, fp32 x and
 * fp32 sums; prefill splits x into bf16 parts (x = hi + mid + lo, 24 bits:
 * the fp32 x of the CPU op) and runs one cublasGemmEx bf16 × bf16 → fp32
 * (fp32 accumulation) per part.  One part (x rounded to bf16, relative 2^-9
 * a value) was measured on the GPU: logits 0.1-1 away from the CPU's on the
 * bf16 test models (fwd-gpu-check), so three is the default
 * (pic_cuda_bf16_split).  Q8:
 * x quantised per 32-block exactly as pic_q8_act_from_f32 does; decode is an
 * int8 GEMV (dp4a, integer dot per block exact, Σ dw·dx·dot in fp32, as the
 * CPU's); prefill dequantises W in row tiles to fp32 and runs sgemm against
 * x rounded the same way (the CPU's GEMM path) — both equal the CPU op up to
 * fp32 summation order.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdlib.h>

#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

#define PIC_Q8_TILE_BYTES (64u << 20)  /* fp32 tile of a Q8 W per sgemm */

static __device__ __forceinline__ float
bf16_f32(uint16_t h)
{
    return __uint_as_float((uint32_t) h << 16);
}

/* --- conversions --- */

/* dst(parts, n) = src split into parts bf16 terms, largest first: part 0
 * = bf16(x), part p = bf16 of what the parts before it leave (nearest
 * even each); their sum is x to 8 more bits per part. */
static __global__ void
bf16_split_kernel(__nv_bfloat16 *dst, const float *src, size_t n, int parts)
{
    size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x;

    if (i >= n) {
        return;
    }
    float r = src[i];
    for (int p = 0; p < parts; p++) {
        __nv_bfloat16 h = __float2bfloat16_rn(r);

        dst[(size_t) p * n + i] = h;
        r -= __bfloat162float(h);
    }
}

/* One warp per 32-block of x: q = round(x / d), d = max|x| / 127, as
 * pic_q8_act_from_f32 (ties away from 0, the same fp32 operations); rounded
 * != NULL: also rounded = q · d (the CPU GEMM's activations). */
static __global__ void
q8_act_kernel(int8_t *qs, float *d, float *rounded, const float *x,
              size_t nblocks)
{
    size_t b = (size_t) blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int    lane = threadIdx.x & 31;

    if (b >= nblocks) {
        return;
    }
    float v = x[b * PIC_Q8_BLOCK + lane], a = fabsf(v), amax = a;

    for (int off = 16; off > 0; off >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    }
    float db = __fdiv_rn(amax, 127.0f);
    float id = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    float s = __fmul_rn(v, id);
    int   q = (int) __fadd_rn(s, s < 0.0f ? -0.5f : 0.5f);

    if (qs != NULL) {
        qs[b * PIC_Q8_BLOCK + lane] = (int8_t) q;
    }
    if (lane == 0 && d != NULL) {
        d[b] = db;
    }
    if (rounded != NULL) {
        rounded[b * PIC_Q8_BLOCK + lane] = __fmul_rn((float) q, db);
    }
}

/* dst(count / cols, cols) = rows r0, r0+1, ... of W as fp32, or rows
 * ids[0], ids[1], ... when ids != NULL. */
static __global__ void
wmat_rows_kernel(float *dst, int type, const void *data,
                 const uint16_t *scale, int cols, int r0, const int *ids,
                 size_t count)
{
    size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x;

    if (i >= count) {
        return;
    }
    size_t t = i / cols;
    size_t j = ((ids != NULL ? (size_t) ids[t] : (size_t) r0 + t)) * cols + i % cols;
    if (type == PIC_WTYPE_F32) {
        dst[i] = ((const float *) data)[j];
    } else if (type == PIC_WTYPE_BF16) {
        dst[i] = bf16_f32(((const uint16_t *) data)[j]);
    } else {
        dst[i] = __half2float(__ushort_as_half(scale[j / PIC_Q8_BLOCK]))
                 * (float) ((const int8_t *) data)[j];
    }
}

static int
wmat_rows_launch(float *dst, const pic_wmat *w, int r0, const int *ids, int nr)
{
    size_t count = (size_t) nr * w->cols;

    if (count == 0) {
        return 0;
    }
    wmat_rows_kernel<<<pic_cuda_blocks(count, 256), 256, 0, pic_cuda_stream_get()>>>(
        dst, (int) w->type, w->data, w->scale, w->cols, r0, ids, count);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

/* --- GEMV kernels (decode): one warp per weight row --- */

/* Lanes' sum, in every lane. */
static __device__ __forceinline__ float
warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, off);
    }
    return v;
}

/* y[r][o] = W[o] · x[r] (+ beta y) for the N rows of x; bf16 W.  vec: cols
 * % 8 == 0 and W 16-byte aligned, so a lane reads 8 weights at once. */
template <int N>
static __global__ void
gemv_bf16_kernel(float *y, const float *x, const uint16_t *w, int rows,
                 int cols, float beta, int vec)
{
    int   o = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int   lane = threadIdx.x & 31;
    float acc[N];

    if (o >= rows) {
        return;
    }
    #pragma unroll
    for (int r = 0; r < N; r++) {
        acc[r] = 0.0f;
    }
    const uint16_t *wr = w + (size_t) o * cols;
    if (vec) {
        #pragma unroll 4
        for (int c = lane * 8; c < cols; c += 256) {
            uint4 p = __ldg((const uint4 *) (wr + c));
            float wv[8];

            wv[0] = __uint_as_float(p.x << 16); wv[1] = __uint_as_float(p.x & 0xffff0000u);
            wv[2] = __uint_as_float(p.y << 16); wv[3] = __uint_as_float(p.y & 0xffff0000u);
            wv[4] = __uint_as_float(p.z << 16); wv[5] = __uint_as_float(p.z & 0xffff0000u);
            wv[6] = __uint_as_float(p.w << 16); wv[7] = __uint_as_float(p.w & 0xffff0000u);
            #pragma unroll
            for (int r = 0; r < N; r++) {
                const float4 *xr = (const float4 *) (x + (size_t) r * cols + c);
                float4        a = xr[0], b = xr[1];

                acc[r] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w
                          + wv[4] * b.x + wv[5] * b.y + wv[6] * b.z + wv[7] * b.w;
            }
        }
    } else {
        for (int c = lane; c < cols; c += 32) {
            float wv = bf16_f32(wr[c]);

            #pragma unroll
            for (int r = 0; r < N; r++) {
                acc[r] += wv * x[(size_t) r * cols + c];
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < N; r++) {
        float s = warp_sum(acc[r]);

        if (lane == 0) {
            float *yo = y + (size_t) r * rows + o;
            *yo = beta != 0.0f ? s + beta * *yo : s;
        }
    }
}

/* The dot of 32 int8 pairs (two 16-byte loads each). */
static __device__ __forceinline__ int
dot32_i8(const int8_t *a, const int8_t *b)
{
    const int4 *pa = (const int4 *) a, *pb = (const int4 *) b;
    int4        a0 = __ldg(pa), a1 = __ldg(pa + 1), b0 = pb[0], b1 = pb[1];
    int         s = 0;

    s = __dp4a(a0.x, b0.x, s); s = __dp4a(a0.y, b0.y, s);
    s = __dp4a(a0.z, b0.z, s); s = __dp4a(a0.w, b0.w, s);
    s = __dp4a(a1.x, b1.x, s); s = __dp4a(a1.y, b1.y, s);
    s = __dp4a(a1.z, b1.z, s); s = __dp4a(a1.w, b1.w, s);
    return s;
}

/* y[r][o] = Σ_blocks dw · dx[r] · (qw · qx[r]) (+ beta y); lane takes
 * blocks lane, lane+32, ... of row o. */
template <int N>
static __global__ void
gemv_q8_kernel(float *y, const int8_t *xq, const float *xd, const int8_t *w,
               const uint16_t *scale, int rows, int cols, float beta)
{
    int   o = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int   lane = threadIdx.x & 31, nb = cols / PIC_Q8_BLOCK;
    float acc[N];

    if (o >= rows) {
        return;
    }
    #pragma unroll
    for (int r = 0; r < N; r++) {
        acc[r] = 0.0f;
    }
    const int8_t   *wr = w + (size_t) o * cols;
    const uint16_t *sr = scale + (size_t) o * nb;
    for (int b = lane; b < nb; b += 32) {
        float dw = __half2float(__ushort_as_half(__ldg(sr + b)));

        #pragma unroll
        for (int r = 0; r < N; r++) {
            int s = dot32_i8(wr + (size_t) b * PIC_Q8_BLOCK,
                             xq + (size_t) r * cols + (size_t) b * PIC_Q8_BLOCK);

            acc[r] += dw * xd[(size_t) r * nb + b] * (float) s;
        }
    }
    #pragma unroll
    for (int r = 0; r < N; r++) {
        float s = warp_sum(acc[r]);

        if (lane == 0) {
            float *yo = y + (size_t) r * rows + o;
            *yo = beta != 0.0f ? s + beta * *yo : s;
        }
    }
}

#define PIC_GEMV_WARPS 8                /* weight rows per block */

static int
gemv_bf16_launch(float *y, const float *x, const pic_wmat *w, int n, float beta)
{
    const uint16_t *wd = (const uint16_t *) w->data;
    int             vec = w->cols % 8 == 0 && ((uintptr_t) wd & 15) == 0
                          && ((uintptr_t) x & 15) == 0;
    unsigned        blocks = pic_cuda_blocks(w->rows, PIC_GEMV_WARPS);
    cudaStream_t    s = pic_cuda_stream_get();

    switch (n) {
    case 1: gemv_bf16_kernel<1><<<blocks, 32 * PIC_GEMV_WARPS, 0, s>>>(y, x, wd, w->rows, w->cols, beta, vec); break;
    case 2: gemv_bf16_kernel<2><<<blocks, 32 * PIC_GEMV_WARPS, 0, s>>>(y, x, wd, w->rows, w->cols, beta, vec); break;
    case 3: gemv_bf16_kernel<3><<<blocks, 32 * PIC_GEMV_WARPS, 0, s>>>(y, x, wd, w->rows, w->cols, beta, vec); break;
    default: gemv_bf16_kernel<4><<<blocks, 32 * PIC_GEMV_WARPS, 0, s>>>(y, x, wd, w->rows, w->cols, beta, vec); break;
    }
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

static int pic_bf16_parts = 0;         /* 0: not read from the env yet */

extern "C" int
pic_cuda_bf16_split(int parts)
{
    int old;

    if (pic_bf16_parts == 0) {
        const char *e = getenv("PIC_CUDA_BF16_SPLIT");

        pic_bf16_parts = e != NULL && atoi(e) >= 1 && atoi(e) <= 3 ? atoi(e) : 3;
    }
    old = pic_bf16_parts;
    if (parts >= 1 && parts <= 3) {
        pic_bf16_parts = parts;
    }
    return old;
}

/* x split into bf16 parts (pic_cuda_bf16_split), then one bf16 × bf16 →
 * fp32 GEMM per part, smallest first, each adding into y. */
static int
gemm_bf16_launch(float *y, const float *x, const pic_wmat *w, int n, float beta)
{
    int             parts = pic_cuda_bf16_split(0);
    size_t          nx = (size_t) n * w->cols;
    __nv_bfloat16  *xb = (__nv_bfloat16 *) pic_cuda_scratch(PIC_CUDA_BUF_X,
                                                            parts * nx * sizeof(*xb));
    cublasHandle_t  h = pic_cuda_blas();
    const float     one = 1.0f;

    if (xb == NULL || h == NULL) {
        return -1;
    }
    bf16_split_kernel<<<pic_cuda_blocks(nx, 256), 256, 0, pic_cuda_stream_get()>>>(
        xb, x, nx, parts);
    PIC_CUDA_CHECK_LAUNCH();
    for (int p = parts - 1; p >= 0; p--) {
        float b = p == parts - 1 ? beta : 1.0f;

        PIC_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, w->rows, n, w->cols,
                                      &one, w->data, CUDA_R_16BF, w->cols,
                                      xb + (size_t) p * nx, CUDA_R_16BF, w->cols, &b,
                                      y, CUDA_R_32F, w->rows, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
    }
    return 0;
}

static int
gemv_q8_launch(float *y, const float *x, const pic_wmat *w, int n, float beta)
{
    size_t        nx = (size_t) n * w->cols, nb = nx / PIC_Q8_BLOCK;
    char         *buf = (char *) pic_cuda_scratch(PIC_CUDA_BUF_Q,
                                                  nb * sizeof(float) + nx + 16);
    float        *xd = (float *) buf;
    int8_t       *xq = (int8_t *) (buf + ((nb * sizeof(float) + 15) & ~(size_t) 15));
    const int8_t *wd = (const int8_t *) w->data;
    unsigned      blocks = pic_cuda_blocks(w->rows, PIC_GEMV_WARPS);
    cudaStream_t  s = pic_cuda_stream_get();

    if (buf == NULL) {
        return -1;
    }
    q8_act_kernel<<<pic_cuda_blocks(nb, 8), 256, 0, s>>>(xq, xd, NULL, x, nb);
    PIC_CUDA_CHECK_LAUNCH();
    switch (n) {
    case 1: gemv_q8_kernel<1><<<blocks, 32 * PIC_GEMV_WARPS, 0, s>>>(y, xq, xd, wd, w->scale, w->rows, w->cols, beta); break;
    case 2: gemv_q8_kernel<2><<<blocks, 32 * PIC_GEMV_WARPS, 0, s>>>(y, xq, xd, wd, w->scale, w->rows, w->cols, beta); break;
    case 3: gemv_q8_kernel<3><<<blocks, 32 * PIC_GEMV_WARPS, 0, s>>>(y, xq, xd, wd, w->scale, w->rows, w->cols, beta); break;
    default: gemv_q8_kernel<4><<<blocks, 32 * PIC_GEMV_WARPS, 0, s>>>(y, xq, xd, wd, w->scale, w->rows, w->cols, beta); break;
    }
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

/* x rounded (q · d) into scratch, then per row tile: W tile → fp32, sgemm
 * into columns [r0, r0+nr) of y. */
static int
gemm_q8_launch(float *y, const float *x, const pic_wmat *w, int n, float beta)
{
    size_t         nx = (size_t) n * w->cols, nb = nx / PIC_Q8_BLOCK;
    int            tile = (int) (PIC_Q8_TILE_BYTES / ((size_t) w->cols * sizeof(float)));
    float         *xr = (float *) pic_cuda_scratch(PIC_CUDA_BUF_X, nx * sizeof(float));
    float         *wt;
    cublasHandle_t h = pic_cuda_blas();
    cudaStream_t   s = pic_cuda_stream_get();
    const float    one = 1.0f;

    tile = tile < 1 ? 1 : tile > w->rows ? w->rows : tile;
    wt = (float *) pic_cuda_scratch(PIC_CUDA_BUF_W, (size_t) tile * w->cols * sizeof(float));
    if (xr == NULL || wt == NULL || h == NULL) {
        return -1;
    }
    q8_act_kernel<<<pic_cuda_blocks(nb, 8), 256, 0, s>>>(NULL, NULL, xr, x, nb);
    PIC_CUDA_CHECK_LAUNCH();
    for (int r0 = 0; r0 < w->rows; r0 += tile) {
        int nr = w->rows - r0 < tile ? w->rows - r0 : tile;

        if (wmat_rows_launch(wt, w, r0, NULL, nr) != 0) {
            return -1;
        }
        PIC_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, nr, n, w->cols,
                                     &one, wt, w->cols, xr, w->cols, &beta,
                                     y + r0, w->rows));
    }
    return 0;
}

static int
wmat_check(const pic_wmat *w)
{
    PIC_CUDA_ARG(w != NULL && w->data != NULL && w->rows > 0 && w->cols > 0);
    PIC_CUDA_ARG(w->type == PIC_WTYPE_F32 || w->type == PIC_WTYPE_BF16
                 || w->type == PIC_WTYPE_Q8);
    PIC_CUDA_ARG(w->type != PIC_WTYPE_Q8
                 || (w->cols % PIC_Q8_BLOCK == 0 && w->scale != NULL
                     && ((uintptr_t) w->data & 15) == 0));
    return 0;
}

extern "C" int
pic_cuda_matmul_w(float *y, const float *x, const pic_wmat *w, int n,
                  int accumulate)
{
    float beta = accumulate ? 1.0f : 0.0f;

    PIC_CUDA_ARG(y != NULL && x != NULL && n >= 0);
    if (wmat_check(w) != 0) {
        return -1;
    }
    if (n == 0) {
        return 0;
    }
    switch (w->type) {
    case PIC_WTYPE_F32:
        return pic_cuda_matmul(y, x, (const float *) w->data, n, w->cols,
                               w->rows, accumulate);
    case PIC_WTYPE_BF16:
        return n <= PIC_CUDA_BF16_GEMV_ROWS ? gemv_bf16_launch(y, x, w, n, beta)
                                            : gemm_bf16_launch(y, x, w, n, beta);
    default:
        return n <= PIC_CUDA_Q8_GEMV_ROWS ? gemv_q8_launch(y, x, w, n, beta)
                                          : gemm_q8_launch(y, x, w, n, beta);
    }
}

extern "C" int
pic_cuda_matmul_w_multi(float *const *ys, const float *x,
                        const pic_wmat *const *ws, int k, int n)
{
    PIC_CUDA_ARG(ys != NULL && x != NULL && ws != NULL && k > 0 && n > 0);
    for (int i = 0; i < k; i++) {
        PIC_CUDA_ARG(ws[i] != NULL && ws[i]->cols == ws[0]->cols);
        if (pic_cuda_matmul_w(ys[i], x, ws[i], n, 0) != 0) {
            return -1;
        }
    }
    return 0;
}

extern "C" int
pic_cuda_wmat_rows(float *dst, const pic_wmat *w, int r0, int nr)
{
    PIC_CUDA_ARG(dst != NULL && nr >= 0);
    if (wmat_check(w) != 0) {
        return -1;
    }
    PIC_CUDA_ARG(r0 >= 0 && r0 + nr <= w->rows);
    return wmat_rows_launch(dst, w, r0, NULL, nr);
}

extern "C" int
pic_cuda_gather_rows(float *x, const pic_wmat *w, const int *ids, int n)
{
    PIC_CUDA_ARG(x != NULL && n >= 0 && (ids != NULL || n == 0));
    if (wmat_check(w) != 0) {
        return -1;
    }
    return wmat_rows_launch(x, w, 0, ids, n);
}
