/*
 * pic_cuda.h — CUDA implementations of the hot ops (kernels/cuda/<op>.cu).
 *
 * Every pointer is device memory, fp32, row-major, with the same shapes and
 * meaning as the CPU reference op of the same name in pic_kernels.h.  Each
 * function returns 0 on success or -1 after printing the failing CUDA call.
 * Tests compare each op against the CPU backend (tests/cuda/).
 */
#ifndef PIC_CUDA_H
#define PIC_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (0 when no driver or no GPU). */
int pic_cuda_device_count(void);

/* y(n,dim) = x / sqrt(mean(x²)+eps) · (1+w) if zero_centred else · w. */
int pic_cuda_rmsnorm(float *y, const float *x, const float *w, int n, int dim,
                     float eps, int zero_centred);

/* x(n) ← x·sigmoid(x) in place. */
int pic_cuda_silu(float *x, size_t n);

/* y(n,out) = x(n,in) · W(out,in)ᵀ (+ y when accumulate), cuBLAS sgemm. */
int pic_cuda_matmul(float *y, const float *x, const float *w, int n, int in,
                    int out, int accumulate);

/* Gated DeltaNet decode step for one token (MODEL.md §3 item 6):
 * S(Hv,dk,dv) ← e^{g}(I − β k kᵀ) S + β k vᵀ; o(Hv,dv) = Sᵀ q.
 * q, k (Hk, dk) already L2-normalised (q scaled); v (Hv, dv); g, beta (Hv). */
int pic_cuda_gdn_step(float *S, float *o, const float *q, const float *k,
                      const float *v, const float *g, const float *beta,
                      int Hk, int Hv, int dk, int dv);

#ifdef __cplusplus
}
#endif

#endif /* PIC_CUDA_H */
