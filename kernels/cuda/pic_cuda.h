/*
 * pic_cuda.h — the CUDA backend (kernels/cuda/<op>.cu, built as
 * build/libpic_cuda.so): the op table pic_backend_cuda() and the device
 * memory helpers an engine needs around it.
 *
 * DEVICE POINTERS: every tensor pointer passed to a CUDA op — through the
 * table or a pic_cuda_<op>() below — is device memory (pic_cuda_malloc),
 * with the same shapes and meaning as the CPU reference op of the same name
 * in pic_kernels.h.  That includes the int position arrays (rope's pos,
 * attention's qpos) and the data/scale of a pic_wmat (pic_cuda_wmat_upload)
 * and every pointer inside a pic_gdn_args; the argument structs themselves
 * (pic_wmat, pic_gdn_args, matmul_w_multi's ys/ws arrays) are host memory.
 *
 * Ordering: every op and helper runs on one CUDA stream per process
 * (pic_cuda_stream); ops return at once, and pic_cuda_sync() waits for them.
 * pic_cuda_upload / pic_cuda_download wait for the stream themselves, so a
 * host buffer is free again when they return.  One thread at a time (the
 * ops share a device scratch buffer and one cuBLAS handle).
 *
 * Errors: a table op (pic_backend) that hits a CUDA error prints it and
 * aborts, as PIC_OP_CHECK does on CPU; pic_cuda_<op>() and the helpers
 * return 0 on success or -1 after printing the failing call.
 *
 * The engine loads the library with dlopen and resolves
 * PIC_CUDA_BACKEND_SYM ("pic_backend_cuda") and the helpers with dlsym, so
 * pic-engine itself keeps no CUDA link dependency.
 */
#ifndef PIC_CUDA_H
#define PIC_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "pic_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PIC_CUDA_BACKEND_SYM "pic_backend_cuda"

/* matmul_w on BF16 weights: n up to this runs the GEMV kernel (fp32 x,
 * bf16 W); more rows split x into bf16 parts (pic_cuda_bf16_split) and run
 * one cuBLAS bf16 GEMM with fp32 accumulation per part. */
#define PIC_CUDA_BF16_GEMV_ROWS 4

/* matmul_w on Q8 weights: n up to this runs the int8 (dp4a) GEMV on x
 * quantised as pic_q8_act_from_f32; more rows dequantise W tile by tile to
 * fp32 and multiply x rounded the same way (cuBLAS sgemm), as the CPU does. */
#define PIC_CUDA_Q8_GEMV_ROWS 4

/* --- the backend --- */

/* The CUDA op table (device pointers, see above), or NULL (with a message
 * on stderr) when no CUDA device can be used. */
const pic_backend *pic_backend_cuda(void);

/* Number of usable CUDA devices (0 when no driver or no GPU). */
int pic_cuda_device_count(void);

/* "NVIDIA H100 80GB HBM3, sm_90, 132 SMs" of the current device, for logs;
 * "none" without one. */
const char *pic_cuda_device_name(void);

/* --- device memory --- */

/* bytes of device memory (256-byte aligned), or NULL after a message. */
void *pic_cuda_malloc(size_t bytes);

/* Free p from pic_cuda_malloc (NULL is a no-op); waits for the stream. */
void pic_cuda_free(void *p);

/* dst(bytes, device) = src(bytes, host); returns when src may be reused. */
int pic_cuda_upload(void *dst, const void *src, size_t bytes);

/* dst(bytes, host) = src(bytes, device), after every op queued before. */
int pic_cuda_download(void *dst, const void *src, size_t bytes);

/* dst(bytes, device) = src(bytes, device), queued on the stream. */
int pic_cuda_copy(void *dst, const void *src, size_t bytes);

/* dst(bytes, device) = the byte value, queued on the stream. */
int pic_cuda_memset(void *dst, int value, size_t bytes);

/* Wait until every op queued so far has finished. */
int pic_cuda_sync(void);

/* The stream every op runs on (a cudaStream_t), for callers that queue
 * their own work in order with the ops. */
void *pic_cuda_stream(void);

/* dst = src with its data (and Q8 scales) copied to fresh device memory;
 * the type and shape are src's.  dst->data / dst->scale are then device
 * pointers, to be freed with pic_cuda_wmat_free. */
int pic_cuda_wmat_upload(pic_wmat *dst, const pic_wmat *src);

/* Free what pic_cuda_wmat_upload allocated and clear dst. */
void pic_cuda_wmat_free(pic_wmat *w);

/* Parts x is split into for the BF16 GEMM (parts 1..3; other values only
 * ask): 3 (default, or $PIC_CUDA_BF16_SPLIT) carries x's 24 bits, so the
 * result is the CPU op's up to fp32 summation order, at 3 GEMMs' cost; 1
 * rounds x to bf16 (relative 2^-9 a value).  Returns the previous count. */
int pic_cuda_bf16_split(int parts);

/* --- the ops (device pointers; contracts: pic_kernels.h) --- */

/* y(n,out) = x(n,in) · W(out,in)ᵀ (+ y when accumulate), cuBLAS sgemm,
 * fp32 math (no TF32). */
int pic_cuda_matmul(float *y, const float *x, const float *w, int n, int in,
                    int out, int accumulate);

/* y(n, w->rows) = x(n, w->cols) · Wᵀ (+ y) for W of any pic_wtype. */
int pic_cuda_matmul_w(float *y, const float *x, const pic_wmat *w, int n,
                      int accumulate);

/* ys[i](n, ws[i]->rows) = x(n, cols) · ws[i]ᵀ for i < k. */
int pic_cuda_matmul_w_multi(float *const *ys, const float *x,
                            const pic_wmat *const *ws, int k, int n);

/* dst(nr, w->cols) = rows [r0, r0+nr) of W as fp32. */
int pic_cuda_wmat_rows(float *dst, const pic_wmat *w, int r0, int nr);

/* y(n,dim) = x / sqrt(mean(x²)+eps) · (1+w) if zero_centred else · w;
 * w == NULL: no weight; y may alias x. */
int pic_cuda_rmsnorm(float *y, const float *x, const float *w, int n, int dim,
                     float eps, int zero_centred);

/* x(n) ← x·sigmoid(x) in place. */
int pic_cuda_silu(float *x, size_t n);

/* x(n) ← 1/(1+e^{−x}) in place. */
int pic_cuda_sigmoid(float *x, size_t n);

/* x(n) ← log(1+e^{x}) in place (x when x > 20). */
int pic_cuda_softplus(float *x, size_t n);

/* y(n,C) = causal depthwise conv of u(n,C) with w(C,K); state(C,K−1)
 * replaced by the last K−1 inputs of state‖u (K <= 17); y != u. */
int pic_cuda_conv1d(float *y, const float *u, float *state, const float *w,
                    int n, int C, int K);

/* each of rows vectors x + r*ld (dim) ← x / sqrt(Σx² + eps) · scale. */
int pic_cuda_l2norm(float *x, int rows, int ld, int dim, float eps,
                    float scale);

/* x(n, heads, hd) rows of stride ld: partial NeoX RoPE on the first
 * r->dim dims at position pos[t] (pos: n ints, device, may be < 0; r host
 * memory, passed by value to the kernel). */
int pic_cuda_rope(float *x, int ld, const int *pos, int n, int heads, int hd,
                  const pic_rope *r);

/* o(n, Hq*hd) = causal GQA softmax(q kᵀ/sqrt(hd)) v over cache slots
 * 0..min(qpos[t], n_keys−1); kc, vc (Hkv, cap, hd); hd <= 512. */
int pic_cuda_attention(float *o, const float *q, const int *qpos, int n,
                       int Hq, int Hkv, int hd, const float *kc,
                       const float *vc, int cap, int n_keys);

/* Gated DeltaNet token by token (pic_kernels.h); dk <= 256. */
int pic_cuda_gdn_recurrent(const pic_gdn_args *a);

/* Gated DeltaNet over a->n tokens, the chunked WY form (chunk
 * PIC_GDN_CHUNK; gdn.cu): per window of up to 64 chunks, one kernel builds
 * every chunk's decayed K Kᵀ / Q Kᵀ and solves the unit-lower system
 * (blocks per chunk and value head), a second carries the state through
 * the chunks in order (blocks per value head and 16 state columns).  v ==
 * NULL (transition operators) works.  Device scratch: Hv · min(chunks,
 * 64) · 64 · (65 + ds + dk) floats.  On by default (gdn.cu's
 * PIC_CUDA_GDN_CHUNKED_DEFAULT); $PIC_CUDA_GDN_CHUNKED=0 turns it off, and
 * the recurrent kernel (equal up to rounding) serves. */
int pic_cuda_gdn_chunked(const pic_gdn_args *a);

/* --- the forward's glue (device pointers; contracts: pic_kernels.h) --- */

/* y(n) ← y ⊙ x. */
int pic_cuda_mul(float *y, const float *x, size_t n);

/* y(n, dim) rows each += b(dim). */
int pic_cuda_add_rows(float *y, const float *b, int n, int dim);

/* dst + r*ldd ← src + r*lds (dim floats) for r < n. */
int pic_cuda_copy_rows(float *dst, int ldd, const float *src, int lds, int n,
                       int dim);

/* l2norm of x + t*ld + h*dim (dim) for t < n, h < heads. */
int pic_cuda_l2norm_heads(float *x, int n, int ld, int heads, int dim,
                          float eps, float scale);

/* x(n, w->cols) = rows ids[t] of W as fp32; ids (n) device ints. */
int pic_cuda_gather_rows(float *x, const pic_wmat *w, const int *ids, int n);

/* x + ids[r]*dim += wts[r] · src + r*dim (ids / wts NULL: r / 1). */
int pic_cuda_scatter_add(float *x, const float *src, const int *ids,
                         const float *wts, int n, int dim);

/* beta(n,Hv) ← σ(beta); g(n,Hv) ← −e^{A_log[h]} · softplus(g + dt_bias[h]). */
int pic_cuda_gdn_gates(float *g, float *beta, const float *A_log,
                       const float *dt_bias, int n, int Hv);

/* slots p0..p0+n−1 of kc, vc (Hkv, cap, hd) ← rows of k, v (n, Hkv*hd). */
int pic_cuda_kv_store(float *kc, float *vc, int cap, const float *k,
                      const float *v, int n, int Hkv, int hd, int p0);

/* p(n,E) ← softmax rows; sel, selw (n,k) the top k (renormalised). */
int pic_cuda_moe_route(int *sel, float *selw, float *p, int n, int E, int k,
                       int renorm);

/* The absorbed MLA attention (pic_mla_args; the struct and *kvb host
 * memory, every tensor device memory); kv_lora_rank <= 6000. */
int pic_cuda_mla_attention(const pic_mla_args *a);

/* x + r*ld (dim) ×= alpha for r < n. */
int pic_cuda_scale_rows(float *x, int ld, int n, int dim, float alpha);

/* The grouped MoE router (pic_moe_group_args; bias device memory). */
int pic_cuda_moe_route_grouped(int *sel, float *selw, float *p,
                               const pic_moe_group_args *a);
/* --- Mamba2 (ssd.cu; contracts: pic_kernels.h) --- */

/* The Mamba2 scan token by token, one thread per state row. */
int pic_cuda_ssd_scan(const pic_ssd_args *a);

/* y(n, dim) ← grouped RMSNorm of y · silu(z), times w(dim). */
int pic_cuda_gated_rmsnorm(float *y, const float *z, const float *w, int n, int dim,
                           int groups, float eps);

/* y(n) ← a·x + b·y. */
int pic_cuda_scale_add(float *y, const float *x, float a, float b, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* PIC_CUDA_H */
