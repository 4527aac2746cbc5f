/*
 * gdn.cu — Gated DeltaNet (MODEL.md §3 item 6), token by token: one block
 * per (value head, 32 state columns); thread j keeps column j of its head's
 * state S (dk × ds) in registers for the whole run, the block stages each
 * token's k and q in shared memory.  Per token, as the CPU reference:
 * S ← e^g S;  m = Sᵀ k;  δ = β (v − m);  S ← S + k δᵀ;  o = Sᵀ q.
 * gdn_chunked runs the same kernel for now (no WY form on the GPU yet).
 */
#include <math.h>

#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

#define PIC_GDN_COLS 32                 /* state columns per block */

/* DK: the register array's length, dk <= DK. */
template <int DK>
static __global__ void
gdn_recurrent_kernel(pic_gdn_args a)
{
    __shared__ float sk[DK], sq[DK];
    int    h = blockIdx.y, j = blockIdx.x * PIC_GDN_COLS + threadIdx.x;
    int    r = a.Hv / a.Hk, dk = a.dk, ds = a.ds, Hv = a.Hv;
    int    live = j < ds;
    float *S = a.S + (size_t) h * dk * ds;  /* (dk, ds) */
    float  s[DK];

    #pragma unroll
    for (int i = 0; i < DK; i++) {
        s[i] = live && i < dk ? S[(size_t) i * ds + j] : 0.0f;
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
        for (int i = 0; i < DK; i++) {
            if (i < dk) {
                s[i] *= eg;
                m += s[i] * sk[i];
            }
        }
        float v = a.v != NULL && live ? a.v[(size_t) t * a.ldv + (size_t) h * ds + j]
                                      : 0.0f;
        float delta = b * (v - m);

        #pragma unroll
        for (int i = 0; i < DK; i++) {
            if (i < dk) {
                s[i] += sk[i] * delta;
            }
        }
        if (a.o != NULL && live) {
            float acc = 0.0f;

            #pragma unroll
            for (int i = 0; i < DK; i++) {
                if (i < dk) {
                    acc += s[i] * sq[i];
                }
            }
            a.o[(size_t) t * a.ldo + (size_t) h * ds + j] = acc;
        }
    }
    if (live) {
        #pragma unroll
        for (int i = 0; i < DK; i++) {
            if (i < dk) {
                S[(size_t) i * ds + j] = s[i];
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
    cudaStream_t s = pic_cuda_stream_get();

    if (a->n == 0) {
        return 0;
    }
    if (a->dk <= 32) {
        gdn_recurrent_kernel<32><<<grid, PIC_GDN_COLS, 0, s>>>(*a);
    } else if (a->dk <= 64) {
        gdn_recurrent_kernel<64><<<grid, PIC_GDN_COLS, 0, s>>>(*a);
    } else if (a->dk <= 128) {
        gdn_recurrent_kernel<128><<<grid, PIC_GDN_COLS, 0, s>>>(*a);
    } else {
        gdn_recurrent_kernel<256><<<grid, PIC_GDN_COLS, 0, s>>>(*a);
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
