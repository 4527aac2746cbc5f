/*
 * gdn.cu — Gated DeltaNet (MODEL.md §3 item 6), token by token: one block
 * per (value head, PIC_GDN_COLS state columns); the PIC_GDN_SPLIT threads of
 * a column each keep every PIC_GDN_SPLIT-th row of it (rows r, r+4, ...) in
 * registers for the whole run, and their partial dots meet by warp
 * shuffles; the block stages each token's k and q in shared memory.  Per
 * token, as the CPU reference:
 * S ← e^g S;  m = Sᵀ k;  δ = β (v − m);  S ← S + k δᵀ;  o = Sᵀ q.
 *
 * gdn_chunked is the WY form of MODEL.md §3 item 7 (chunk PIC_GDN_CHUNK,
 * as kernels/cpu/gdn.c), in two kernels per window of chunks:
 *  1. gdn_chunk_prep, one block per (chunk, value head), every chunk at
 *     once: the cumulative log decay G, A = β K Kᵀ ∘ D (strict lower) and
 *     P = Q Kᵀ ∘ D (lower incl. diagonal) in shared memory, then the unit
 *     lower solve (I + A) [U | W] = [β V | β K ∘ e^G] as T = (I + A)⁻¹
 *     (forward substitution on I, 4 lanes a column) times the right-hand
 *     side in 32-column tiles; G, P, U, W go to device scratch.
 *  2. gdn_chunk_state, one block per (value head, PIC_GDN_COLS state
 *     columns), chunks in order, the state tile in shared memory:
 *     V' = U − W S;  O = (Q ∘ e^G) S + P V';
 *     S ← e^{G_c} S + (K ∘ e^{G_c − G})ᵀ V'.
 * Rows past a partial last chunk are zero; v == NULL makes U zero (the
 * transition-operator case).  fp32 throughout; equal to the CPU op up to
 * summation order.
 */
#include <math.h>
#include <stdlib.h>

#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

#define PIC_GDN_COLS  16                /* state columns per block */
#define PIC_GDN_SPLIT 4                 /* threads per column (rows split) */

/* Sum over the PIC_GDN_SPLIT adjacent lanes of one column. */
static __device__ __forceinline__ float
gdn_col_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v;
}

/* DK: the rows a column can have (dk <= DK); thread t of the block takes
 * column t / PIC_GDN_SPLIT, rows t % PIC_GDN_SPLIT + PIC_GDN_SPLIT·i. */
template <int DK>
static __global__ void
gdn_recurrent_kernel(pic_gdn_args a)
{
    const int RPT = DK / PIC_GDN_SPLIT;     /* rows a thread keeps */
    __shared__ float sk[DK], sq[DK];
    int    h = blockIdx.y, rg = threadIdx.x % PIC_GDN_SPLIT;
    int    j = blockIdx.x * PIC_GDN_COLS + threadIdx.x / PIC_GDN_SPLIT;
    int    r = a.Hv / a.Hk, dk = a.dk, ds = a.ds, Hv = a.Hv;
    int    live = j < ds;
    float *S = a.S + (size_t) h * dk * ds;  /* (dk, ds) */
    float  s[RPT];

    #pragma unroll
    for (int i = 0; i < RPT; i++) {
        int row = rg + PIC_GDN_SPLIT * i;

        s[i] = live && row < dk ? S[(size_t) row * ds + j] : 0.0f;
    }
    for (int t = 0; t < a.n; t++) {
        const float *k = a.k + (size_t) t * a.ldk + (size_t) (h / r) * dk;

        __syncthreads();                /* the previous token's k, q read */
        for (int i = threadIdx.x; i < dk; i += blockDim.x) {
            sk[i] = k[i];
            if (a.o != NULL) {
                sq[i] = a.q[(size_t) t * a.ldq + (size_t) (h / r) * dk + i];
            }
        }
        __syncthreads();

        float eg = expf(a.g[(size_t) t * Hv + h]);
        float b = a.beta[(size_t) t * Hv + h], m = 0.0f;

        #pragma unroll
        for (int i = 0; i < RPT; i++) {
            int row = rg + PIC_GDN_SPLIT * i;

            if (row < dk) {
                s[i] *= eg;
                m += s[i] * sk[row];
            }
        }
        m = gdn_col_sum(m);
        float v = a.v != NULL && live ? a.v[(size_t) t * a.ldv + (size_t) h * ds + j]
                                      : 0.0f;
        float delta = b * (v - m);

        #pragma unroll
        for (int i = 0; i < RPT; i++) {
            int row = rg + PIC_GDN_SPLIT * i;

            if (row < dk) {
                s[i] += sk[row] * delta;
            }
        }
        if (a.o != NULL) {
            float acc = 0.0f;

            #pragma unroll
            for (int i = 0; i < RPT; i++) {
                int row = rg + PIC_GDN_SPLIT * i;

                if (row < dk) {
                    acc += s[i] * sq[row];
                }
            }
            acc = gdn_col_sum(acc);
            if (live && rg == 0) {
                a.o[(size_t) t * a.ldo + (size_t) h * ds + j] = acc;
            }
        }
    }
    if (live) {
        #pragma unroll
        for (int i = 0; i < RPT; i++) {
            int row = rg + PIC_GDN_SPLIT * i;

            if (row < dk) {
                S[(size_t) row * ds + j] = s[i];
            }
        }
    }
}

static int
gdn_check(const pic_gdn_args *a)
{
    PIC_CUDA_ARG(a != NULL);
    PIC_CUDA_ARG(a->n >= 0 && a->Hk > 0 && a->Hv > 0 && a->Hv % a->Hk == 0);
    PIC_CUDA_ARG(a->dk > 0 && a->dk <= 256 && a->ds > 0);
    PIC_CUDA_ARG(a->k != NULL && a->ldk >= a->Hk * a->dk);
    PIC_CUDA_ARG(a->g != NULL && a->beta != NULL && a->S != NULL);
    PIC_CUDA_ARG(a->v == NULL || a->ldv >= a->Hv * a->ds);
    PIC_CUDA_ARG(a->o == NULL || (a->q != NULL && a->ldq >= a->Hk * a->dk
                                  && a->ldo >= a->Hv * a->ds));
    return 0;
}

static int
gdn_recurrent_launch(const pic_gdn_args *a)
{
    dim3         grid(pic_cuda_blocks(a->ds, PIC_GDN_COLS), (unsigned) a->Hv);
    unsigned     th = PIC_GDN_COLS * PIC_GDN_SPLIT;
    cudaStream_t s = pic_cuda_stream_get();

    if (a->n == 0) {
        return 0;
    }
    if (a->dk <= 32) {
        gdn_recurrent_kernel<32><<<grid, th, 0, s>>>(*a);
    } else if (a->dk <= 64) {
        gdn_recurrent_kernel<64><<<grid, th, 0, s>>>(*a);
    } else if (a->dk <= 128) {
        gdn_recurrent_kernel<128><<<grid, th, 0, s>>>(*a);
    } else {
        gdn_recurrent_kernel<256><<<grid, th, 0, s>>>(*a);
    }
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int
pic_cuda_gdn_recurrent(const pic_gdn_args *a)
{
    if (gdn_check(a) != 0) {
        return -1;
    }
    return gdn_recurrent_launch(a);
}

/* --- chunked (WY form) --- */

#define PIC_GDN_C       PIC_GDN_CHUNK   /* 64: the kernels assume it */
#define PIC_GDN_THREADS 256
#define PIC_GDN_SLAB    16              /* key columns staged per step */
#define PIC_GDN_WINDOW  64              /* chunks per scratch window */

/* Scratch of one window: per (value head, chunk) of nch chunks. */
typedef struct {
    float *G;       /* (Hv, nch, C) cumulative log decay */
    float *P;       /* (Hv, nch, C, C) Q Kᵀ ∘ D, lower incl. diagonal */
    float *U;       /* (Hv, nch, C, ds) */
    float *W;       /* (Hv, nch, C, dk) */
    int    t0, n, nch;   /* the window: tokens [t0, t0+n), nch chunks */
} gdn_win;

/* Block (chunk ci, head h): G, A, P in shared memory, then the solve. */
static __global__ void __launch_bounds__(PIC_GDN_THREADS)
gdn_chunk_prep_kernel(pic_gdn_args a, gdn_win w)
{
    const int C = PIC_GDN_C;
    __shared__ float sKQ[2][C][PIC_GDN_SLAB + 1];  /* then the (C, 32) B tile */
    __shared__ float sA[C][C + 1], sT[C][C + 1];
    __shared__ float sG[C], sB[C];
    int   ci = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    int   Hv = a.Hv, dk = a.dk, ds = a.ds, kh = h / (a.Hv / a.Hk);
    int   t0 = w.t0 + ci * C, c = min(C, w.t0 + w.n - t0);
    int   hasq = a.o != NULL;
    size_t cb = (size_t) h * w.nch + ci;    /* (head, chunk) index */

    if (tid < C) {
        sB[tid] = tid < c ? a.beta[(size_t) (t0 + tid) * Hv + h] : 0.0f;
    }
    if (tid == 0) {
        float acc = 0.0f;

        for (int i = 0; i < C; i++) {
            if (i < c) {
                acc += a.g[(size_t) (t0 + i) * Hv + h];
            }
            sG[i] = acc;
        }
    }

    /* K Kᵀ and Q Kᵀ: thread → row i, columns j = tid % 4 + 4m */
    int   i = tid / 4, j0 = tid % 4;
    float ak[C / 4], ap[C / 4];

    #pragma unroll
    for (int m = 0; m < C / 4; m++) {
        ak[m] = 0.0f;
        ap[m] = 0.0f;
    }
    for (int d0 = 0; d0 < dk; d0 += PIC_GDN_SLAB) {
        __syncthreads();
        for (int e = tid; e < C * PIC_GDN_SLAB; e += PIC_GDN_THREADS) {
            int r = e / PIC_GDN_SLAB, d = e % PIC_GDN_SLAB;
            int ok = r < c && d0 + d < dk;

            sKQ[0][r][d] = ok ? a.k[(size_t) (t0 + r) * a.ldk + (size_t) kh * dk
                                + d0 + d] : 0.0f;
            sKQ[1][r][d] = ok && hasq ? a.q[(size_t) (t0 + r) * a.ldq
                                        + (size_t) kh * dk + d0 + d] : 0.0f;
        }
        __syncthreads();
        for (int d = 0; d < PIC_GDN_SLAB; d++) {
            float kr = sKQ[0][i][d], qr = sKQ[1][i][d];

            #pragma unroll
            for (int m = 0; m < C / 4; m++) {
                float kc = sKQ[0][j0 + 4 * m][d];

                ak[m] += kr * kc;
                ap[m] += qr * kc;
            }
        }
    }
    #pragma unroll
    for (int m = 0; m < C / 4; m++) {
        int   jj = j0 + 4 * m;
        float dec = jj <= i ? expf(sG[i] - sG[jj]) : 0.0f;

        sA[i][jj] = jj < i ? ak[m] * sB[i] * dec : 0.0f;
        if (hasq) {
            w.P[(cb * C + i) * C + jj] = ap[m] * dec;
        }
    }
    if (tid < C) {
        w.G[cb * C + tid] = sG[tid];
    }
    __syncthreads();

    /* T = (I + A)⁻¹ by forward substitution on I, column j by the 4
     * lanes tid = 4j .. 4j+3 (row sums split over them, met by shuffles) */
    {
        int jt = tid / 4, lane = tid % 4;

        for (int r = 0; r < C; r++) {
            float acc = 0.0f;

            for (int q = jt + lane; q < r; q += 4) {
                acc += sA[r][q] * sT[q][jt];
            }
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            acc += __shfl_xor_sync(0xffffffffu, acc, 2);
            if (lane == 0) {
                sT[r][jt] = r < jt ? 0.0f : (r == jt ? 1.0f : -acc);
            }
            __syncwarp();
        }
    }
    __syncthreads();

    /* [U | W] = T [β V | β K ∘ e^G], 32 columns a step: thread → column
     * tid % 32, rows tid / 32 + 8m */
    float *sBt = &sKQ[0][0][0];             /* (C, 32): 2048 <= 2 C (SLAB+1) */
    int    nu = a.v != NULL ? ds : 0, ncol = nu + dk;
    int    cj = tid % 32, r0 = tid / 32;

    for (int col0 = 0; col0 < ncol; col0 += 32) {
        __syncthreads();                    /* sBt of the previous step read */
        for (int e = tid; e < C * 32; e += PIC_GDN_THREADS) {
            int   r = e / 32, col = col0 + e % 32;
            float b = 0.0f;

            if (r < c && col < ncol) {
                b = col < nu ? sB[r] * a.v[(size_t) (t0 + r) * a.ldv
                                           + (size_t) h * ds + col]
                             : sB[r] * expf(sG[r])
                               * a.k[(size_t) (t0 + r) * a.ldk
                                     + (size_t) kh * dk + col - nu];
            }
            sBt[e] = b;
        }
        __syncthreads();

        int col = col0 + cj;

        #pragma unroll
        for (int m = 0; m < C / 8; m++) {
            int   r = r0 + 8 * m;
            float acc = 0.0f;

            for (int q = 0; q <= r; q++) {
                acc += sT[r][q] * sBt[q * 32 + cj];
            }
            if (col < nu) {
                w.U[(cb * C + r) * ds + col] = acc;
            } else if (col < ncol) {
                w.W[(cb * C + r) * dk + col - nu] = acc;
            }
        }
    }
    if (a.v == NULL) {
        for (int e = tid; e < C * ds; e += PIC_GDN_THREADS) {
            w.U[cb * C * ds + e] = 0.0f;
        }
    }
}

/* Shared floats of gdn_chunk_state_kernel<DK>. */
static size_t
gdn_state_smem(int DK)
{
    const int C = PIC_GDN_C;

    return sizeof(float) * ((size_t) C * DK + (size_t) C * C
                            + (size_t) DK * PIC_GDN_COLS
                            + (size_t) C * PIC_GDN_COLS + C);
}

/* Block (column tile, head h): chunks of the window in order.  Thread t
 * takes column t % 16 and chunk rows t / 16 + 16m (state rows
 * (t / 16)·DK/16 .. +DK/16−1) of each product; staged rows are read 4
 * (2) floats at a time. */
template <int DK>
static __global__ void __launch_bounds__(PIC_GDN_THREADS)
gdn_chunk_state_kernel(pic_gdn_args a, gdn_win w)
{
    const int C = PIC_GDN_C, NC = PIC_GDN_COLS, RG = PIC_GDN_THREADS / NC;
    const int RO = C / RG, RS = DK / RG;   /* chunk rows, state rows a thread */
    extern __shared__ __align__(16) float smem[];
    float *sX = smem;                       /* (C, DK) staged W, Q∘e^G, K∘e^.. */
    float *sP = sX + C * DK;                /* (C, C) */
    float *sS = sP + C * C;                 /* (DK, NC) the state tile */
    float *sV = sS + DK * NC;               /* (C, NC) V' */
    float *sG = sV + C * NC;                /* (C) */
    int    h = blockIdx.y, tid = threadIdx.x, jc = tid % NC, rg = tid / NC;
    int    j = blockIdx.x * NC + jc, dk = a.dk, ds = a.ds;
    int    kh = h / (a.Hv / a.Hk), live = j < ds, hasq = a.o != NULL;
    float *S = a.S + (size_t) h * dk * ds;  /* (dk, ds) */

    for (int e = tid; e < DK * NC; e += PIC_GDN_THREADS) {
        int r = e / NC, cc = blockIdx.x * NC + e % NC;

        sS[e] = r < dk && cc < ds ? S[(size_t) r * ds + cc] : 0.0f;
    }
    for (int ci = 0; ci < w.nch; ci++) {
        size_t cb = (size_t) h * w.nch + ci;
        int    t0 = w.t0 + ci * C, c = min(C, w.t0 + w.n - t0);
        float  acc[RO];

        __syncthreads();                    /* previous chunk done with sX */
        if (tid < C) {
            sG[tid] = w.G[cb * C + tid];
        }
        for (int e = tid; e < C * DK; e += PIC_GDN_THREADS) {
            int r = e / DK, d = e % DK;

            sX[e] = d < dk ? w.W[(cb * C + r) * dk + d] : 0.0f;
        }
        __syncthreads();

        /* V' = U − W S */
        #pragma unroll
        for (int m = 0; m < RO; m++) {
            int r = rg + RG * m;

            acc[m] = live ? w.U[(cb * C + r) * ds + j] : 0.0f;
        }
        for (int d = 0; d < DK; d += 4) {
            float s0 = sS[d * NC + jc], s1 = sS[(d + 1) * NC + jc];
            float s2 = sS[(d + 2) * NC + jc], s3 = sS[(d + 3) * NC + jc];

            #pragma unroll
            for (int m = 0; m < RO; m++) {
                float4 x = *(const float4 *) &sX[(rg + RG * m) * DK + d];

                acc[m] -= x.x * s0 + x.y * s1 + x.z * s2 + x.w * s3;
            }
        }
        #pragma unroll
        for (int m = 0; m < RO; m++) {
            sV[(rg + RG * m) * NC + jc] = acc[m];
        }

        if (hasq) {
            /* O = (Q ∘ e^G) S + P V' */
            __syncthreads();                /* sX (W) read */
            for (int e = tid; e < C * DK; e += PIC_GDN_THREADS) {
                int r = e / DK, d = e % DK;

                sX[e] = r < c && d < dk
                        ? a.q[(size_t) (t0 + r) * a.ldq + (size_t) kh * dk + d]
                          * expf(sG[r])
                        : 0.0f;
            }
            for (int e = tid; e < C * C; e += PIC_GDN_THREADS) {
                sP[e] = w.P[cb * C * C + e];
            }
            __syncthreads();
            #pragma unroll
            for (int m = 0; m < RO; m++) {
                acc[m] = 0.0f;
            }
            for (int d = 0; d < DK; d += 4) {
                float s0 = sS[d * NC + jc], s1 = sS[(d + 1) * NC + jc];
                float s2 = sS[(d + 2) * NC + jc], s3 = sS[(d + 3) * NC + jc];

                #pragma unroll
                for (int m = 0; m < RO; m++) {
                    float4 x = *(const float4 *) &sX[(rg + RG * m) * DK + d];

                    acc[m] += x.x * s0 + x.y * s1 + x.z * s2 + x.w * s3;
                }
            }
            for (int l = 0; l < C; l += 4) {
                float v0 = sV[l * NC + jc], v1 = sV[(l + 1) * NC + jc];
                float v2 = sV[(l + 2) * NC + jc], v3 = sV[(l + 3) * NC + jc];

                #pragma unroll
                for (int m = 0; m < RO; m++) {
                    float4 p = *(const float4 *) &sP[(rg + RG * m) * C + l];

                    acc[m] += p.x * v0 + p.y * v1 + p.z * v2 + p.w * v3;
                }
            }
            #pragma unroll
            for (int m = 0; m < RO; m++) {
                int r = rg + RG * m;

                if (live && r < c) {
                    a.o[(size_t) (t0 + r) * a.ldo + (size_t) h * ds + j] = acc[m];
                }
            }
        }

        /* S ← e^{G_c} S + (K ∘ e^{G_c − G})ᵀ V' */
        __syncthreads();                    /* sX read, sV written */
        float gl = sG[c - 1];

        for (int e = tid; e < C * DK; e += PIC_GDN_THREADS) {
            int r = e / DK, d = e % DK;

            sX[e] = r < c && d < dk
                    ? a.k[(size_t) (t0 + r) * a.ldk + (size_t) kh * dk + d]
                      * expf(gl - sG[r])
                    : 0.0f;
        }
        __syncthreads();

        float el = expf(gl), st[RS];

        #pragma unroll
        for (int m = 0; m < RS; m++) {
            st[m] = 0.0f;
        }
        for (int l = 0; l < C; l++) {          /* rows rg·RS .. rg·RS+RS−1 */
            float v = sV[l * NC + jc];

            #pragma unroll
            for (int m = 0; m < RS; m += 2) {
                float2 x = *(const float2 *) &sX[l * DK + rg * RS + m];

                st[m] += x.x * v;
                st[m + 1] += x.y * v;
            }
        }
        #pragma unroll
        for (int m = 0; m < RS; m++) {
            int r = rg * RS + m;

            sS[r * NC + jc] = sS[r * NC + jc] * el + st[m];
        }
    }
    __syncthreads();
    for (int e = tid; e < DK * NC; e += PIC_GDN_THREADS) {
        int r = e / NC, cc = blockIdx.x * NC + e % NC;

        if (r < dk && cc < ds) {
            S[(size_t) r * ds + cc] = sS[e];
        }
    }
}

template <int DK>
static int
gdn_state_launch(const pic_gdn_args *a, const gdn_win *w)
{
    static int   set;
    size_t       smem = gdn_state_smem(DK);
    dim3         grid(pic_cuda_blocks(a->ds, PIC_GDN_COLS), (unsigned) a->Hv);
    cudaStream_t s = pic_cuda_stream_get();

    if (!set) {
        PIC_CUDA_CHECK(cudaFuncSetAttribute(gdn_chunk_state_kernel<DK>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                           (int) smem));
        set = 1;
    }
    gdn_chunk_state_kernel<DK><<<grid, PIC_GDN_THREADS, smem, s>>>(*a, *w);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

static int
gdn_chunked_launch(const pic_gdn_args *a)
{
    const int C = PIC_GDN_C;
    int       nch_all = (a->n + C - 1) / C;
    int       nwin = nch_all < PIC_GDN_WINDOW ? nch_all : PIC_GDN_WINDOW;
    size_t    per = (size_t) C * (1 + C + a->ds + a->dk);  /* floats */
    float    *buf;

    if (a->n == 0) {
        return 0;
    }
    buf = (float *) pic_cuda_scratch(PIC_CUDA_BUF_X,
                                     per * (size_t) a->Hv * nwin * sizeof(float));
    if (buf == NULL) {
        return -1;
    }
    for (int t0 = 0; t0 < a->n; t0 += C * PIC_GDN_WINDOW) {
        gdn_win w;

        w.t0 = t0;
        w.n = a->n - t0 < C * PIC_GDN_WINDOW ? a->n - t0 : C * PIC_GDN_WINDOW;
        w.nch = (w.n + C - 1) / C;
        w.G = buf;
        w.P = w.G + (size_t) a->Hv * w.nch * C;
        w.U = w.P + (size_t) a->Hv * w.nch * C * C;
        w.W = w.U + (size_t) a->Hv * w.nch * C * a->ds;

        dim3 pg((unsigned) w.nch, (unsigned) a->Hv);

        gdn_chunk_prep_kernel<<<pg, PIC_GDN_THREADS, 0,
                                pic_cuda_stream_get()>>>(*a, w);
        PIC_CUDA_CHECK_LAUNCH();

        int rc;

        if (a->dk <= 32) {
            rc = gdn_state_launch<32>(a, &w);
        } else if (a->dk <= 64) {
            rc = gdn_state_launch<64>(a, &w);
        } else if (a->dk <= 128) {
            rc = gdn_state_launch<128>(a, &w);
        } else {
            rc = gdn_state_launch<256>(a, &w);
        }
        if (rc != 0) {
            return -1;
        }
    }
    return 0;
}

/* Whether gdn_chunked runs the WY kernels: $PIC_CUDA_GDN_CHUNKED=1 / =0,
 * else PIC_CUDA_GDN_CHUNKED_DEFAULT (on: checked on an H100 against the CPU
 * op and the transformers fixtures; off, the recurrent kernel, equal up to
 * rounding, serves gdn_chunked). */
#ifndef PIC_CUDA_GDN_CHUNKED_DEFAULT
#define PIC_CUDA_GDN_CHUNKED_DEFAULT 1
#endif

static int
gdn_chunked_on(void)
{
    static int on = -1;

    if (on < 0) {
        const char *e = getenv("PIC_CUDA_GDN_CHUNKED");

        on = e != NULL && e[0] != '\0' ? e[0] != '0' : PIC_CUDA_GDN_CHUNKED_DEFAULT;
    }
    return on;
}

extern "C" int
pic_cuda_gdn_chunked(const pic_gdn_args *a)
{
    if (gdn_check(a) != 0) {
        return -1;
    }
    if (!gdn_chunked_on()) {
        return gdn_recurrent_launch(a);
    }
    return gdn_chunked_launch(a);
}
