/*
 * entry.h — a segment's PIC entry (DESIGN.md §3.2): what a worker computes
 * for one segment prefilled alone from position 0, and what the public pool
 * stores.
 *
 * A segment of L tokens with seam width w is cut into a head seam [0, h)
 * with h = max(w, K−1) (K = conv kernel), an interior I = [h, L−w) and a
 * tail seam [L−w, L).  The entry holds, for the interior only:
 *  - per linear (GDN) layer: the transition operator T_I (Hv, dk, dk) —
 *    the recurrence run from S = I with writes zeroed —, the zero-start
 *    end state S_I|0 (Hv, dk, dv) and the conv tail (C, K−1): the last K−1
 *    pre-conv inputs before position L−w;
 *  - per full-attention layer: K (post k_norm, RoPE at the local positions
 *    h..L−w−1) and V, both (Hkv, L−w−h, hd).
 * Seams are recomputed at assembly (assemble.h), so the entry also keeps
 * the segment's tokens.
 *
 * A "whole" entry has h = w = 0 and no T: its S is the segment's state from
 * a zero start, its conv tail and KV cover every token.  It is the exact
 * prefix state of a segment at position 0 (the first-chunk carve-out) and
 * the naive-addition entry (S ← S + S_C|0) elsewhere.
 *
 * T, S, K and V are stored as fp32 or bf16 (composition always runs in
 * fp32); the conv tail is always fp32 (K−1 rows, negligible).
 *
 * Entries are immutable once built and reference counted: a pool and any
 * number of requests may hold one at once (pic_entry_ref / _unref are
 * atomic; the data is only read).
 */
#ifndef PIC_ENTRY_H
#define PIC_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "pic_kernels.h"

typedef enum {
    PIC_DTYPE_F32 = 0,
    PIC_DTYPE_BF16,
} pic_dtype;

/* Interiors shorter than this are not worth an entry: recompute instead
 * (pic_entry_build returns no seam entry for them). */
#define PIC_ENTRY_MIN_INTERIOR 16

#define PIC_ENTRY_MAX_W 64

typedef struct {
    void  *T;               /* linear layers with T, else NULL: (Hv, dk, dk) dtype
                             * for GDN (dense), (Hv) for Mamba2 (scalar: Π a per
                             * head; transition.h) */
    void  *S;               /* (Hv, dk, dv) dtype; linear layers, else NULL */
    float *conv;            /* (C, K−1) fp32; linear layers, else NULL */
    void  *K;               /* (Hkv, n_int, hd) dtype, RoPE at local positions; full
                             * layers (MLA: the latent rows [k_pe | c_KV], k_pe at
                             * local positions) */
    void  *V;               /* (Hkv, n_int, vd) dtype; full layers (NULL when vd == 0) */
} pic_entry_layer;

typedef struct pic_entry {
    uint64_t        fingerprint;    /* model fingerprint it was built with */
    int             n_tokens;       /* L */
    int             h, w;           /* head seam [0, h), tail seam [L−w, L) */
    int             i0, i1;         /* interior [i0, i1) = [h, L−w) */
    int             has_T;          /* 0: whole entry (no transition operators) */
    pic_dtype       dtype;
    int             n_layers;
    pic_layer_type  layer_type[PIC_MAX_LAYERS];
    int             Hv, dk, dv;     /* GDN shapes */
    int             conv_ch, conv_k1;
    int             Hkv, hd, vd;    /* attention caches: heads, K row, V row (MLA:
                                     * 1, dr + r, 0; pic_config_cache_*) */
    int            *tokens;         /* (L) the segment */
    pic_entry_layer layer[PIC_MAX_LAYERS];
    size_t          bytes_T, bytes_S, bytes_conv, bytes_K, bytes_V;
    size_t          bytes;          /* total held, tokens and struct included */
    void           *data;           /* one allocation behind all tensors */
    int             refs;           /* atomic reference count */
} pic_entry;

typedef struct {
    int       w;                    /* tail seam width 0..PIC_ENTRY_MAX_W (head: max(w, K−1)) */
    pic_dtype dtype;                /* storage of T, S, K, V */
    int       min_interior;         /* <= 0: PIC_ENTRY_MIN_INTERIOR */
} pic_entry_opts;

/* Head seam width for tail seam w: max(w, K−1). */
int pic_entry_head(const pic_config *cfg, int w);

/* 1 if a segment of n tokens gets a seam entry under o (interior long
 * enough), else 0. */
int pic_entry_worth(const pic_config *cfg, int n, const pic_entry_opts *o);

/* Prefill tokens (n) alone from position 0 and build its entries: *seam
 * (interior + seams, with T) when seam != NULL and the segment is worth it
 * (else *seam = NULL), *whole (h = w = 0, no T) when whole != NULL.  One
 * prefill serves both.  be NULL: CPU.  -1 + err on bad input or OOM. */
int pic_entry_build(const pic_model *m, const pic_backend *be, const int *tokens,
                    int n, const pic_entry_opts *o, pic_entry **seam,
                    pic_entry **whole, char *err, size_t errlen);

/* Oracle entries for DESIGN §3.3 check (1): one full-context forward over
 * tokens (n) = segments of seg_len[0..n_seg) laid end to end; out[i] is
 * segment i's seam entry computed from the full context's GDN inputs, conv
 * windows and K/V (K rotated back to local positions), or NULL when the
 * segment is not worth it.  Assembling them reproduces full recompute. */
int pic_entry_build_context(const pic_model *m, const pic_backend *be,
                            const int *tokens, int n, const int *seg_len,
                            int n_seg, const pic_entry_opts *o, pic_entry **out,
                            char *err, size_t errlen);

/* Take one more reference (returns e). */
pic_entry *pic_entry_ref(pic_entry *e);

/* Drop a reference; the last one frees the entry (NULL is fine). */
void pic_entry_unref(pic_entry *e);

/* 0 if e fits model m (fingerprint, shapes) and holds tokens (n); -1 + err. */
int pic_entry_check(const pic_entry *e, const pic_model *m, const int *tokens,
                    int n, char *err, size_t errlen);

/* --- storage conversion --- */

/* dst (n) fp32 from src (n) stored as dtype. */
void pic_entry_load_f32(float *dst, const void *src, size_t n, pic_dtype dtype);

/* dst (n) as dtype from fp32 src (n) (bf16: round to nearest even). */
void pic_entry_store(void *dst, const float *src, size_t n, pic_dtype dtype);

/* Bytes of one element of dtype. */
size_t pic_dtype_size(pic_dtype dtype);

/* --- tensors and serialisation (the payload of the wire frame, §4.3) --- */

typedef enum {
    PIC_TENSOR_T = 0, PIC_TENSOR_S, PIC_TENSOR_CONV, PIC_TENSOR_K, PIC_TENSOR_V,
} pic_tensor_kind;

typedef struct {
    int             layer;
    pic_tensor_kind kind;
    pic_dtype       dtype;          /* CONV is always F32 */
    int             ndim;
    int             shape[3];
    const void     *data;
    size_t          bytes;
} pic_entry_tensor;

/* Describe e's tensors in layer order (T, S, CONV for linear layers; K, V
 * for full ones) into out (max); returns the count (> max: out truncated). */
int pic_entry_tensors(const pic_entry *e, pic_entry_tensor *out, int max);

/* Bytes pic_entry_serialize writes for e. */
size_t pic_entry_serialized_size(const pic_entry *e);

/* Write e into buf (cap bytes): a fixed little-endian header (magic "PICE",
 * version, dtype, flags, fingerprint, L, h, w, shapes, layer types), the
 * tokens, then every tensor of pic_entry_tensors in order.  Returns bytes
 * written, or 0 if cap is too small. */
size_t pic_entry_serialize(const pic_entry *e, void *buf, size_t cap);

/* Parse a payload written by pic_entry_serialize (hostile input: every
 * field checked against m's config and fingerprint, sizes against len).
 * Returns a new entry (refs 1) or NULL + err. */
pic_entry *pic_entry_deserialize(const pic_model *m, const void *buf, size_t len,
                                 char *err, size_t errlen);

#endif /* PIC_ENTRY_H */
