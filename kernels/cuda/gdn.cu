/*
 * gdn.cu — Gated DeltaNet (MODEL.md §3 item 6), token by token: one block
 * per (value head, PIC_GDN_COLS state columns); the PIC_GDN_SPLIT threads of
 * a column each keep every PIC_GDN_SPLIT-th row of it (rows r, r+4, ...) in
 * registers for the whole run, and their partial dots meet by warp
 * shuffles; the block stages each token's k and q in shared memory.  Per
 * token, as the CPU reference:
 * S ← e^g S;  m = Sᵀ k;  δ = β (v − m);  S ← S + k δᵀ;  o = Sᵀ q.
 * gdn_chunked runs the same kernel for now (no WY form on the GPU yet).
 */
#include <math.h>

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

extern "C" int
pic_cuda_gdn_chunked(const pic_gdn_args *a)
{
    if (gdn_check(a) != 0) {
        return -1;
    }
    return gdn_recurrent_launch(a);
}
