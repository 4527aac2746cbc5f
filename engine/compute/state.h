/*
 * state.h — the per-sequence run state of the hybrid decoder.
 *
 * Per linear (GDN) layer: the recurrent state S and the conv window; per
 * full-attention layer: the K/V cache, indexed by absolute position (slot p
 * holds position p), growing by chunks up to max_ctx.  The forward pass
 * (forward.h) reads and advances it; PIC assembly writes into it directly
 * (compose S, seed the conv window, place rotated interior K/V).
 */
#ifndef PIC_STATE_H
#define PIC_STATE_H

#include <stddef.h>

#include "model.h"
#include "pic_kernels.h"

/* The scratch of a forward: activations of one micro-batch (ws, ws_cap
 * floats, in the backend's memory) and the host staging of its ids (hws,
 * hws_cap bytes; device backends only), grown to the largest pass asked. */
typedef struct pic_workspace {
    float  *ws;
    size_t  ws_cap;
    void   *hws;
    size_t  hws_cap;
    float  *xs;             /* scratch sized by the context (the expanded
                             * MLA keys and values), xs_cap floats */
    size_t  xs_cap;
} pic_workspace;

typedef struct pic_state {
    int     n_layers;
    int     pos;                    /* next position = tokens consumed */
    int     cap;                    /* KV slots allocated per layer */
    int     max_ctx;                /* hard limit on positions */
    int     Hv, dk, dv, conv_ch, conv_k1;   /* GDN shapes (conv_k1 = K−1) */
    int     Hkv, hd, vd;            /* attention caches: heads, K row, V row
                                     * (MLA: 1, dr + r, 0: the latent row
                                     * [k_pe | c_KV] and no V cache) */
    float  *S[PIC_MAX_LAYERS];      /* (Hv, dk, dv) linear layers, else NULL */
    float  *conv[PIC_MAX_LAYERS];   /* (C, K−1) linear layers, else NULL */
    float  *kc[PIC_MAX_LAYERS];     /* (Hkv, cap, hd) post-norm, RoPE'd K (MLA:
                                     * the latent rows); full layers */
    float  *vc[PIC_MAX_LAYERS];     /* (Hkv, cap, vd) V; full layers (NULL
                                     * when vd == 0) */
    pic_workspace  own;             /* the forward workspace, unless shared */
    pic_workspace *shared;          /* NULL, or the one its forwards use
                                     * (pic_state_share_workspace) */
    const pic_backend *be;          /* where S, conv, KV and the workspace
                                     * live (every buffer above is its memory) */
} pic_state;

/* Allocate a zero state for cfg (max_ctx <= 0: cfg->max_position, or 1<<20
 * when that is unset); NULL + err on allocation failure. */
pic_state *pic_state_init(const pic_config *cfg, int max_ctx, char *err,
                          size_t errlen);

/* pic_state_init with every buffer in be's memory (be NULL: CPU): the
 * state a forward on be advances; host code reads it only through
 * be->mem_download (pic_state_to_host) unless be->host. */
pic_state *pic_state_init_on(const pic_config *cfg, int max_ctx,
                             const pic_backend *be, char *err, size_t errlen);

/* Free a state (NULL is fine). */
void pic_state_free(pic_state *s);

/* Back to the empty sequence: zero S and conv, pos = 0 (KV kept allocated). */
void pic_state_reset(pic_state *s);

/* Make KV slots [0, n_pos) available (grow by doubling, preserving
 * contents); -1 + err if n_pos > max_ctx or memory runs out. */
int pic_state_reserve(pic_state *s, int n_pos, char *err, size_t errlen);

/* From now on s's forwards use w's workspace instead of their own (freed),
 * NULL: their own again.  States that share one run one forward at a time
 * (a scheduler worker's slots: one pass's activations, not one per slot);
 * w outlives them, freed by pic_workspace_free(be, w). */
void pic_state_share_workspace(pic_state *s, pic_workspace *w);

/* Release w's buffers (in be's memory) and zero it; w itself is the caller's. */
void pic_workspace_free(const pic_backend *be, pic_workspace *w);

/* Deep copy of src (positions [0, src->pos) of the KV), or NULL. */
pic_state *pic_state_clone(const pic_state *src);

/* A host (CPU) deep copy of s, wherever s lives: the snapshot a prefix
 * cache or PIC entry keeps; NULL on OOM. */
pic_state *pic_state_to_host(const pic_state *s);

/* Bytes held by the state (S, conv, KV at current capacity). */
size_t pic_state_bytes(const pic_state *s);

#endif /* PIC_STATE_H */
