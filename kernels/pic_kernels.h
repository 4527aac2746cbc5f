/*
 * pic_kernels.h — the op interface of the engine (DESIGN.md §2.4).
 *
 * A backend is a table of function pointers, one per op, as in ggml's
 * backend split.  The CPU backend (kernels/cpu/) is the reference for every
 * op; the CUDA backend (kernels/cuda/, libpic_cuda.so loaded at run time)
 * fills every slot of the same table with device-pointer ops and is tested
 * against the CPU one (tests/cuda/).  All tensors are fp32 (but the compact
 * weight matrices, pic_wmat), row-major, owned by the
 * caller; every op checks its shapes on entry (PIC_OP_CHECK) and has a
 * one-line contract next to its slot.
 *
 * Math: MODEL.md §3 (Gated DeltaNet), §4 (attention), §5 (norms).
 */
#ifndef PIC_KERNELS_H
#define PIC_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Shape / argument check at the entry of every op.  A failed check is a
 * programming error inside the engine (the loader validates all shapes that
 * come from files), so it reports the op and the condition and aborts. */
#define PIC_OP_CHECK(cond)                                                    \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s: op check failed: %s (%s:%d)\n", __func__,    \
                    #cond, __FILE__, __LINE__);                               \
            abort();                                                          \
        }                                                                     \
    } while (0)

/* Arguments of the Gated DeltaNet ops (MODEL.md §3 items 6–7).
 *
 * Value head h (0 ≤ h < Hv) reads key head h / (Hv/Hk).  Per head the state
 * S[h] is a dk × ds matrix: ds = dv for the ordinary recurrent state, or
 * ds = dk when the op advances a transition operator (DESIGN.md §3.1:
 * start from S = I with v == NULL, i.e. writes zeroed, and the result is
 * T = Π e^{g}(I − β k kᵀ); any entering state works, so T_B · T_A is
 * obtained by advancing T_A over B).  q and k must already be L2-normalised
 * (q also scaled by 1/sqrt(dk)). */
typedef struct {
    int          n;         /* tokens */
    int          Hk, Hv;    /* key heads, value heads (Hv % Hk == 0) */
    int          dk, ds;    /* key dim, state columns (dv, or dk for T) */
    const float *q;         /* (n, ldq) head j at q + t*ldq + j*dk; NULL iff o == NULL */
    int          ldq;
    const float *k;         /* (n, ldk) head j at k + t*ldk + j*dk */
    int          ldk;
    const float *v;         /* (n, ldv) head h at v + t*ldv + h*ds; NULL: v = 0 */
    int          ldv;
    const float *g;         /* (n, Hv) log decay, g <= 0 */
    const float *beta;      /* (n, Hv) write strength in (0, 1) */
    float       *S;         /* (Hv, dk, ds) entering state, updated in place */
    float       *o;         /* (n, ldo) head h at o + t*ldo + h*ds; NULL: no output */
    int          ldo;
} pic_gdn_args;

/* Arguments of the absorbed MLA attention (MODEL.md §4.2).  Head h's keys
 * and values are never formed: q_nope goes through W_UK[h] into the latent
 * space, scores are scale·(q_pe·k_pe + (W_UK[h]ᵀ q_nope)·c), the weighted
 * sum of latents goes out through W_UV[h]. */
typedef struct pic_wmat pic_wmat;
typedef struct {
    int             n;          /* queries */
    int             Hq;         /* heads */
    int             dn, dr, dv; /* nope, rope and value dims per head */
    int             r;          /* latent width (kv_lora_rank) */
    const float    *q;          /* (n, Hq*(dr+dn)) per head [q_pe | q_nope] */
    const int      *qpos;       /* (n) query t attends slots 0..min(qpos[t], n_keys−1) */
    const float    *lat;        /* (≥ n_keys, dr+r) slot p = position p: [k_pe | c_KV] */
    int             n_keys;
    const pic_wmat *kvb;        /* (Hq*(dn+dv), r) per head [W_UK (dn) | W_UV (dv)];
                                 * the struct host memory, its data the backend's */
    float           scale;      /* softmax scale */
    float          *o;          /* (n, Hq*dv) */
} pic_mla_args;

/* Arguments of the grouped MoE router (DeepSeek V2 / V3). */
typedef struct {
    int          n, E, k;       /* rows, experts, experts per row */
    int          groups;        /* expert groups of E/groups (1: no limit), <= 64 */
    int          topk_groups;   /* groups a row may pick from */
    int          sigmoid;       /* 1: scores σ(x), choice σ(x)+bias, a group
                                 * ranked by its two best choices (V3); 0:
                                 * softmax scores, a group by its best (V2) */
    const float *bias;          /* (E) correction bias (sigmoid only) or NULL */
    int          renorm;        /* weights / (their sum + 1e-20) */
    float        scale;         /* then × scale (routed_scaling_factor) */
} pic_moe_group_args;
/* Arguments of the Mamba2 scan (MODEL.md §9 items 4–6), token by token.
 *
 * Head h (0 ≤ h < H) reads B and C of group h / (H/G).  Per token t:
 * dt = clamp(softplus(dt_raw + dt_bias[h]), dt_min, dt_max), a = e^{dt·A[h]},
 * S[h] ← a S[h] + dt x_t B_tᵀ (S[h] is P × N), y_t = S[h] C_t + D[h] x_t.
 * Any entering state works, so S = 0 with y == NULL gives a segment's
 * zero-start state S|0, and decay its transition Π a (DESIGN.md §3.8). */
typedef struct {
    int          n;         /* tokens */
    int          H, G;      /* heads, B/C groups (H % G == 0) */
    int          P, N;      /* head dim, state size */
    const float *x;         /* (n, ldx) head h at x + t*ldx + h*P */
    const float *B;         /* (n, ldx) group g at B + t*ldx + g*N */
    const float *C;         /* (n, ldx) group g at C + t*ldx + g*N; NULL iff y == NULL */
    int          ldx;       /* row stride of x, B and C (the conv's channels) */
    const float *dt;        /* (n, H) raw dt (in_proj rows), before bias and softplus */
    const float *dt_bias;   /* (H) */
    float        dt_min, dt_max;
    const float *A;         /* (H) A = −e^{A_log} < 0 */
    const float *D;         /* (H) skip, or NULL */
    float       *S;         /* (H, P, N) entering state, updated in place */
    float       *y;         /* (n, ldy) head h at y + t*ldy + h*P; NULL: no output */
    int          ldy;
    float       *decay;     /* (H) or NULL: each multiplied by Π_t a_t */
} pic_ssd_args;

/* --- compact weights --- */

/* Storage of a projection matrix.  Activations, accumulators and every other
 * tensor stay fp32; only the big [out, in] weight matrices may be compact. */
typedef enum {
    PIC_WTYPE_F32 = 0,          /* float, as computed in */
    PIC_WTYPE_BF16,             /* bfloat16 (top 16 bits of the fp32) */
    PIC_WTYPE_Q8,               /* int8 blocks of PIC_Q8_BLOCK + one fp16 scale */
} pic_wtype;

#define PIC_Q8_BLOCK 32

/* A weight matrix W (rows, cols), y = W x, row-major.  Q8: value (r, c) =
 * qs[r*cols + c] * fp16 scale[r*cols/32 + c/32] (Q8_0-like, 34 bytes per
 * 32 values); cols % PIC_Q8_BLOCK == 0. */
struct pic_wmat {
    pic_wtype       type;
    int             rows, cols;
    const void     *data;       /* F32 float / BF16 uint16_t / Q8 int8_t: (rows, cols) */
    const uint16_t *scale;      /* Q8: fp16 (rows, cols/32); else NULL */
    int             xbf16;      /* BF16: 1 = x rounded to bf16 (nearest even,
                                 * subnormals to 0) before the dot, products
                                 * summed in fp32: bf16 dot products, what
                                 * llama.cpp's BF16 computes (--weights
                                 * bf16dot); 0 = x as fp32 (exact products) */
};

/* The rotary frequencies of a model: pair i of every head turns by
 * pos · inv_freq[i].  Made once at load from the config (default, linear or
 * llama3 scaling: pic_rope_init and the architecture's rope), so every rope
 * op, the forward's and a PIC entry's re-rotation, turns by the same angles. */
#define PIC_ROPE_MAX_PAIRS 256

typedef struct {
    int   dim;                          /* rotary dims per head (even) */
    float inv_freq[PIC_ROPE_MAX_PAIRS]; /* (dim / 2) */
} pic_rope;

/* r ← the default frequencies θ^(−2i/dim) in fp32, as transformers computes
 * them; -1 when dim is odd, < 2 or above 2·PIC_ROPE_MAX_PAIRS, or θ <= 0. */
int pic_rope_init(pic_rope *r, int dim, float theta);

typedef struct pic_backend {
    const char *name;

    /* y(n,out) = x(n,in) · W(out,in)ᵀ, plus the old y when accumulate != 0. */
    void (*matmul)(float *y, const float *x, const float *w, int n, int in,
                   int out, int accumulate);

    /* y(n, w->rows) = x(n, w->cols) · Wᵀ (+ the old y when accumulate != 0)
     * for W of any pic_wtype; accumulates in fp32.  Q8 multiplies x as
     * pic_q8_act_from_f32 quantises it (int8 dots, as llama.cpp's Q8_0). */
    void (*matmul_w)(float *y, const float *x, const pic_wmat *w, int n,
                     int accumulate);

    /* ys[i](n, ws[i]->rows) = x(n, cols) · ws[i]ᵀ for i < k (no
     * accumulate), every ws[i] of x's width and of one compact type (F32
     * besides it allowed): matmul_w of each, equal bit for bit, but decode
     * (n <= 4) prepares x once and runs all k in one parallel pass, and a
     * Q8 prefill (n > 4) rounds x once for all k. */
    void (*matmul_w_multi)(float *const *ys, const float *x,
                           const pic_wmat *const *ws, int k, int n);

    /* dst(nr, w->cols) = rows [r0, r0+nr) of W as fp32. */
    void (*wmat_rows)(float *dst, const pic_wmat *w, int r0, int nr);

    /* y(n,dim) = x / sqrt(mean(x²)+eps) · (1+w) if zero_centred, else · w;
     * w == NULL means no weight.  y may alias x. */
    void (*rmsnorm)(float *y, const float *x, const float *w, int n, int dim,
                    float eps, int zero_centred);

    /* x(n) ← x·sigmoid(x) in place. */
    void (*silu)(float *x, size_t n);

    /* x(n) ← 1/(1+e^{−x}) in place. */
    void (*sigmoid)(float *x, size_t n);

    /* x(n) ← log(1+e^{x}) in place (x when x > 20, as torch). */
    void (*softplus)(float *x, size_t n);

    /* y(n,C) = causal depthwise conv of u(n,C) with w(C,K), no bias, no
     * activation; state(C,K−1) holds the K−1 inputs before u[0] (oldest
     * first) and is replaced by the last K−1 inputs of state‖u.  y may not
     * alias u. */
    void (*conv1d)(float *y, const float *u, float *state, const float *w,
                   int n, int C, int K);

    /* each of rows vectors x + r*ld (dim) ← x / sqrt(Σx² + eps) · scale. */
    void (*l2norm)(float *x, int rows, int ld, int dim, float eps,
                   float scale);

    /* x(n, heads, hd) rows of stride ld: partial NeoX RoPE on the first
     * r->dim dims of every head at position pos[t] (may be negative:
     * R(−p) undoes R(p)); the other dims pass through.  r is host memory. */
    void (*rope)(float *x, int ld, const int *pos, int n, int heads, int hd,
                 const pic_rope *r);

    /* o(n, Hq*hd) = causal GQA softmax(q kᵀ/sqrt(hd)) v: query t at position
     * qpos[t] attends cache slots 0..min(qpos[t], n_keys−1) of its kv head
     * h/(Hq/Hkv); kc, vc (Hkv, cap, hd) hold position p at slot p; q (n,
     * Hq*hd); softmax in fp32. */
    void (*attention)(float *o, const float *q, const int *qpos, int n,
                      int Hq, int Hkv, int hd, const float *kc,
                      const float *vc, int cap, int n_keys);

    /* as attention, with q, k, the softmax weights and v rounded to bf16
     * (pic_bf16_act_round) at their products, fp32 sums: the attention of
     * --weights bf16dot.  NULL on a backend without bf16dot. */
    void (*attention_dot)(float *o, const float *q, const int *qpos, int n,
                          int Hq, int Hkv, int hd, const float *kc,
                          const float *vc, int cap, int n_keys);

    /* Gated DeltaNet over a->n tokens, chunked (64) WY form with GEMMs;
     * identical to gdn_recurrent up to rounding (MODEL.md §3 item 7). */
    void (*gdn_chunked)(const pic_gdn_args *a);

    /* Gated DeltaNet, token by token (MODEL.md §3 item 6): the reference,
     * and the decode step (n == 1). */
    void (*gdn_recurrent)(const pic_gdn_args *a);

    /* --- the forward's glue: every tensor loop of forward.c / ffn.c --- */

    /* y(n) ← y ⊙ x elementwise (output gates, SwiGLU).  x may alias y. */
    /* y(n, dim) rows each += b(dim): a projection's bias. */
    void (*add_rows)(float *y, const float *b, int n, int dim);

    void (*mul)(float *y, const float *x, size_t n);

    /* Strided row copy: dst + r*ldd ← src + r*lds (dim floats) for r < n
     * (the attention [q | gate] split: rows n*Hq, lds 2hd, ldd hd); the
     * rows of dst and src do not overlap. */
    void (*copy_rows)(float *dst, int ldd, const float *src, int lds, int n,
                      int dim);

    /* l2norm over n rows of heads vectors each: x + t*ld + h*dim (dim) ←
     * x / sqrt(Σx² + eps) · scale for t < n, h < heads (the GDN q̂, k̂ of a
     * whole span in one call); equals l2norm row by row. */
    void (*l2norm_heads)(float *x, int n, int ld, int heads, int dim,
                         float eps, float scale);

    /* x(n, w->cols) = rows ids[t] of W as fp32 (embedding lookup, MoE row
     * gather); ids (n) in backend memory, each in [0, w->rows). */
    void (*gather_rows)(float *x, const pic_wmat *w, const int *ids, int n);

    /* x + ids[r]*dim (dim) += wts[r] · src + r*dim for r < n (ids NULL:
     * row r; wts NULL: 1); ids distinct.  src(n, dim), wts(n), ids(n) in
     * backend memory (MoE expert outputs back into the residual). */
    void (*scatter_add)(float *x, const float *src, const int *ids,
                        const float *wts, int n, int dim);

    /* GDN gates of n rows (MODEL.md §3 item 3), row-wise in fp32:
     * beta(n, Hv) ← σ(beta); g(n, Hv) ← −e^{A_log[h]} · softplus(g + dt_bias[h]);
     * A_log, dt_bias (Hv).  Equals sigmoid, the add, softplus, the scale. */
    void (*gdn_gates)(float *g, float *beta, const float *A_log,
                      const float *dt_bias, int n, int Hv);

    /* KV store: slots p0..p0+n−1 of kc, vc (Hkv, cap, hd) ← rows of k, v
     * (n, Hkv*hd); p0 + n <= cap. */
    void (*kv_store)(float *kc, float *vc, int cap, const float *k,
                     const float *v, int n, int Hkv, int hd, int p0);

    /* MoE router over n rows: p(n, E) ← softmax rows in fp32 (in place);
     * sel(n, k) the k largest in descending order (ties: lower index),
     * selw(n, k) their p, renormalised to sum 1 when renorm != 0. */
    void (*moe_route)(int *sel, float *selw, float *p, int n, int E, int k,
                      int renorm);

    /* MLA attention over the latent cache in the absorbed form (decode:
     * per token Hq·(dn+dv)·r for the two absorptions plus (dr+2r) per
     * key and head, no per-head keys built); softmax in fp32. */
    void (*mla_attention)(const pic_mla_args *a);

    /* x + r*ld (dim floats) ×= alpha for r < n (the MLA queries' softmax
     * scale, and YaRN's attention factor on their rotary dims). */
    void (*scale_rows)(float *x, int ld, int n, int dim, float alpha);

    /* Grouped MoE router over a->n rows: p(n, E) ← scores in place
     * (softmax or sigmoid); groups ranked as a says, the topk_groups best
     * kept (ties: lower index); sel(n, k) the k best choices among their
     * experts in descending order, selw(n, k) their scores (without the
     * bias), renormalised and scaled as a says. */
    void (*moe_route_grouped)(int *sel, float *selw, float *p,
                              const pic_moe_group_args *a);
    /* --- Mamba2 (MODEL.md §9) --- */

    /* The Mamba2 recurrence over a->n tokens (pic_ssd_args): the scalar
     * reference on the CPU, for prefill and decode alike. */
    void (*ssd_scan)(const pic_ssd_args *a);

    /* y(n, dim) ← RMSNorm over each of the groups runs of dim/groups values
     * of y · silu(z), times w(dim) (Mamba2's gated norm, gate before norm);
     * z(n, dim) unchanged. */
    void (*gated_rmsnorm)(float *y, const float *z, const float *w, int n,
                          int dim, int groups, float eps);

    /* y(n) ← a·x + b·y elementwise (Granite's multipliers); x may alias y. */
    void (*scale_add)(float *y, const float *x, float a, float b, size_t n);

    /* --- memory: where every tensor the ops above take lives --- */

    /* 1: tensors are host memory (the CPU backend), so the caller may also
     * read and write them directly; 0: device memory, reached only through
     * the ops and the mem_* slots. */
    int host;

    /* bytes of backend memory, 64-byte aligned (contents undefined), or NULL. */
    void *(*mem_alloc)(size_t bytes);

    /* Release mem_alloc's p (NULL is fine). */
    void (*mem_free)(void *p);

    /* dst (backend) ← src (host), bytes; src may be reused on return. */
    void (*mem_upload)(void *dst, const void *src, size_t bytes);

    /* dst (host) ← src (backend), bytes, once every op queued before has
     * finished (the synchronisation point of a device backend). */
    void (*mem_download)(void *dst, const void *src, size_t bytes);

    /* dst ← src, both backend memory, bytes, not overlapping. */
    void (*mem_copy)(void *dst, const void *src, size_t bytes);

    /* dst (backend) ← bytes of zeros. */
    void (*mem_zero)(void *dst, size_t bytes);
} pic_backend;

/* The CPU ops behind the device-memory contract (host = 0): the forward
 * then takes every path a GPU backend takes (uploads, staging, downloads,
 * no host access to its tensors) on the CPU, so tests check the
 * host <-> device boundary without a GPU; results equal the CPU's. */
const pic_backend *pic_backend_cpu_dev(void);

/* The entry point a device backend library exports (resolved with dlsym
 * by pic_backend_load): its table, or NULL when no usable device exists. */
typedef const pic_backend *(*pic_backend_entry)(void);

#define PIC_BACKEND_CUDA_ENTRY "pic_backend_cuda"

/* The backend called name: "cpu", "cpu-dev" (pic_backend_cpu_dev), or "cuda" loaded at run time with dlopen
 * from $PIC_CUDA_LIB, else libpic_cuda.so beside the running executable
 * (build/), resolving PIC_BACKEND_CUDA_ENTRY, so no binary links CUDA;
 * NULL + err naming the library, the symbol or the missing GPU. */
const pic_backend *pic_backend_load(const char *name, char *err, size_t errlen);

/* The CPU reference backend (OpenBLAS + OpenMP); never NULL. */
const pic_backend *pic_backend_cpu(void);

/* Set the worker threads used by every CPU op (OpenMP and OpenBLAS);
 * n <= 0 keeps the default (all cores). */
void pic_kernels_set_threads(int n);

/* Threads the CPU ops use. */
int pic_kernels_threads(void);

/* Best of reps: bytes of a (n bytes, n % 256 == 0, 64-byte aligned or
 * not) read per second by the engine's OpenMP threads, each streaming its
 * own share as the decode GEMV streams W: the read roofline. */
double pic_kernels_read_bw(const float *a, size_t n, int reps);

/* Call first thing in main(): sets the run-time defaults that libgomp and
 * OpenBLAS read when they load (OMP_WAIT_POLICY=passive with GOMP_SPINCOUNT=2000:
 * spin ~25 us, then sleep; OPENBLAS_CORETYPE
 * from our own cpuid where OpenBLAS's detection falls back to an older
 * core) and re-executes the process once when it changed one; a variable
 * the user set is never touched. */
void pic_kernels_process_env(char **argv);

/* The OpenBLAS core the CPU ops run on ("SkylakeX", ...), for logs. */
const char *pic_kernels_blas_core(void);

/* An F32 view of p (rows, cols). */
pic_wmat pic_wmat_f32(const float *p, int rows, int cols);

/* Rows [r0, r0+nr) of w as a matrix of their own (no copy). */
pic_wmat pic_wmat_view(const pic_wmat *w, int r0, int nr);

/* Bytes of w's storage (data + scales). */
size_t pic_wmat_bytes(const pic_wmat *w);

/* Name of a pic_wtype ("f32", "bf16", "q8"). */
const char *pic_wtype_name(pic_wtype t);

/* dst(n) = src rounded to bfloat16 (nearest even; NaN stays NaN). */
void pic_bf16_from_f32(uint16_t *dst, const float *src, size_t n);

/* dst(n) = x(n) as a bf16dot matmul (pic_wmat.xbf16) multiplies it: rounded
 * to bfloat16 (nearest even, subnormals to signed zero, NaN quiet), back to
 * fp32 (dst may be src). */
void pic_bf16_act_round(float *dst, const float *src, size_t n);

/* Quantise src(n), n % PIC_Q8_BLOCK == 0, into qs(n) and fp16 scale(n/32):
 * per block d = max|x|/127 (rounded to fp16), q = round(x/d). */
void pic_q8_from_f32(int8_t *qs, uint16_t *scale, const float *src, size_t n);

/* Quantise activations x(n), n % PIC_Q8_BLOCK == 0, as the Q8 matmul does:
 * per block d = max|x|/127 (fp32), q = round(x/d) (ties away from 0). */
void pic_q8_act_from_f32(int8_t *qs, float *d, const float *x, size_t n);

/* fp16 bit pattern to fp32 (exact) and fp32 to fp16 (nearest even). */
float    pic_half_to_f32(uint16_t h);
uint16_t pic_f32_to_half(float f);

/* SIMD path of the compact-weight kernels, chosen at run time: the best the
 * CPU supports ("amx", "avx512bf16", "avx512vnni", "avx512", "avx2", "scalar"), or $PIC_SIMD when it names one
 * the CPU has.  The binary itself only assumes the build baseline. */
const char *pic_kernels_simd(void);

/* Every SIMD path this CPU can run, best first, into names(cap); returns
 * how many there are (may exceed cap).  The test suite runs its numerical
 * suites once per path. */
size_t pic_kernels_simd_paths(const char **names, size_t cap);

/* on 1: bf16dot past the GEMV rows takes the path's dot GEMM (amx: AMX
 * tiles, avx512bf16: vdpbf16ps), 0: fp32 FMAs on the rounded x (the same
 * products, the sums in another order); -1 changes nothing.  Returns the
 * setting now for the current path: by default 1 on amx and on AMD
 * (vdpbf16ps at twice the fp32 FMA's rate), 0 elsewhere, or $PIC_DOT_GEMM. */
int pic_kernels_dot_gemm(int on);

/* Force a SIMD path by name; -1 when unknown or not supported here. */
int pic_kernels_set_simd(const char *name);

/* GDN chunk length used by gdn_chunked. */
#define PIC_GDN_CHUNK 64

#endif /* PIC_KERNELS_H */
