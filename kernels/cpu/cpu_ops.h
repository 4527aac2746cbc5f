/*
 * cpu_ops.h — the CPU backend's ops (the .c files beside it), gathered into the
 * backend table by kernels/pic_kernels.c.  Contracts: pic_kernels.h.
 */
#ifndef PIC_CPU_OPS_H
#define PIC_CPU_OPS_H

#include "pic_kernels.h"

void pic_cpu_matmul(float *y, const float *x, const float *w, int n, int in,
                    int out, int accumulate);
void pic_cpu_matmul_w(float *y, const float *x, const pic_wmat *w, int n,
                      int accumulate);
void pic_cpu_matmul_w_multi(float *const *ys, const float *x,
                            const pic_wmat *const *ws, int k, int n);
void pic_cpu_wmat_rows(float *dst, const pic_wmat *w, int r0, int nr);
void pic_cpu_rmsnorm(float *y, const float *x, const float *w, int n,
                     int dim, float eps, int zero_centred);
void pic_cpu_silu(float *x, size_t n);
void pic_cpu_sigmoid(float *x, size_t n);
void pic_cpu_softplus(float *x, size_t n);
void pic_cpu_l2norm(float *x, int rows, int ld, int dim, float eps,
                    float scale);
void pic_cpu_conv1d(float *y, const float *u, float *state, const float *w,
                    int n, int C, int K);
void pic_cpu_rope(float *x, int ld, const int *pos, int n, int heads, int hd,
                  const pic_rope *r);
void pic_cpu_attention(float *o, const float *q, const int *qpos, int n,
                       int Hq, int Hkv, int hd, const float *kc,
                       const float *vc, int cap, int n_keys);
void pic_cpu_attention_dot(float *o, const float *q, const int *qpos, int n,
                           int Hq, int Hkv, int hd, const float *kc,
                           const float *vc, int cap, int n_keys);
void pic_cpu_gdn_chunked(const pic_gdn_args *a);
void pic_cpu_gdn_recurrent(const pic_gdn_args *a);
void pic_cpu_add_rows(float *y, const float *b, int n, int dim);
void pic_cpu_mul(float *y, const float *x, size_t n);
void pic_cpu_copy_rows(float *dst, int ldd, const float *src, int lds, int n,
                       int dim);
void pic_cpu_l2norm_heads(float *x, int n, int ld, int heads, int dim,
                          float eps, float scale);
void pic_cpu_gather_rows(float *x, const pic_wmat *w, const int *ids, int n);
void pic_cpu_scatter_add(float *x, const float *src, const int *ids,
                         const float *wts, int n, int dim);
void pic_cpu_gdn_gates(float *g, float *beta, const float *A_log,
                       const float *dt_bias, int n, int Hv);
void pic_cpu_kv_store(float *kc, float *vc, int cap, const float *k,
                      const float *v, int n, int Hkv, int hd, int p0);
void pic_cpu_mla_attention(const pic_mla_args *a);
void pic_cpu_scale_rows(float *x, int ld, int n, int dim, float alpha);
void pic_cpu_moe_route_grouped(int *sel, float *selw, float *p,
                               const pic_moe_group_args *a);
void pic_cpu_moe_route(int *sel, float *selw, float *p, int n, int E, int k,
                       int renorm);
void pic_cpu_ssd_scan(const pic_ssd_args *a);
void pic_cpu_gated_rmsnorm(float *y, const float *z, const float *w, int n, int dim,
                           int groups, float eps);
void pic_cpu_scale_add(float *y, const float *x, float a, float b, size_t n);
void *pic_cpu_mem_alloc(size_t bytes);
void pic_cpu_mem_free(void *p);
void pic_cpu_mem_copy(void *dst, const void *src, size_t bytes);
void pic_cpu_mem_zero(void *dst, size_t bytes);

/* The AMX bf16 GEMM (wmat_amx.c).  pic_amx_usable: 1 where the CPU, the
 * OS and Linux's per-process permission let this process use AMX tiles
 * (asked once).  pic_amx_x_bytes: the bytes pic_amx_x_pack writes for x
 * (n, cols).  pic_amx_x_pack: x rounded to bf16 (pic_bf16_act_bits) into
 * dst (64-byte aligned) as the tiles' second operand, zero-padded to 32
 * rows and 32 columns.  pic_amx_gemm: y(n, ldy)[., o0..o1) = x . W[o0..o1)^T
 * (+ beta * y; beta 0: y not read), W BF16, xp that packed x; one thread's
 * share, configures and releases the tiles itself. */
int    pic_amx_usable(void);
size_t pic_amx_x_bytes(int n, int cols);
void   pic_amx_x_pack(uint16_t *dst, const float *x, int n, int cols);
void   pic_amx_gemm(float *y, int ldy, const uint16_t *xp, int n,
                    const pic_wmat *w, int o0, int o1, float beta);

/* bf16 products on operands that are not weights (wmat.c), for the
 * attention in bf16dot.  pic_cpu_dot_gemm_on: 1 where they run as
 * vdpbf16ps (the avx512bf16 path, where it outruns the fp32 FMA:
 * pic_kernels_dot_gemm); elsewhere the caller multiplies the rounded values
 * in fp32 (the same products, exact in fp32).  pic_cpu_x_bf16: dst(n) =
 * src rounded as pic_bf16_act_bits.  pic_cpu_dot_gemm: y(n, ldy)[., 0..nb)
 * = x(n, K) . b(nb, K)^T, bf16 rows ldx and ldb apart, fp32 sums in
 * K-blocks of kcb (multiple of 32); b readable for whole groups of eight
 * rows; only where pic_cpu_dot_gemm_on. */
int  pic_cpu_dot_gemm_on(void);
void pic_cpu_x_bf16(uint16_t *dst, const float *src, size_t n);
void pic_cpu_dot_gemm(float *y, int ldy, const uint16_t *x, int ldx, int n,
                      const uint16_t *b, int ldb, int nb, int K, int kcb);

/* Make OpenBLAS single-threaded for GEMMs issued inside an OpenMP region
 * (avoids oversubscription); returns the count to hand back to _end. */
int  pic_cpu_blas_serial_begin(void);
void pic_cpu_blas_serial_end(int saved);

/* (scratch.c) 1 where a kernel's parallel loop should open an OpenMP team: its work is
 * big enough (big), no team is running and more than one thread may run.
 * An OpenMP construct costs ~0.3-0.5 µs even when its `if` is false or it
 * is nested in a team; decode calls the per-head kernels ~700 times a token
 * inside the GDN step's team, so they branch around the construct instead. */
int  pic_cpu_par(int big);

/* 1 where the elementwise ops take their AVX2 path (cpu_exp.h): the
 * run-time SIMD choice (pic_kernels_simd) is not "scalar". */
int  pic_cpu_simd(void);

/* Per-thread scratch (scratch.c): one buffer per use, so that nested users
 * never share one. */
enum { PIC_CPU_BUF_ACT, PIC_CPU_BUF_TILE, PIC_CPU_BUF_ATTN, PIC_CPU_BUF_KV,
       PIC_CPU_NBUF };

/* The calling thread's scratch buffer `which` (PIC_CPU_BUF_*), 64-byte
 * aligned, at least `bytes` long, kept for its later calls and freed when
 * the thread ends (its contents are not kept when it grows). */
void *pic_cpu_thread_buf(int which, size_t bytes);

/* Check the common shape rules of pic_gdn_args. */
void pic_cpu_gdn_check(const pic_gdn_args *a);

#endif /* PIC_CPU_OPS_H */
