/*
 * forward_impl.h — internals shared by forward.c, forward_batch.c and ffn.c:
 * the micro-batch workspace and the layer-major pass over its rows.  Not a
 * public interface.
 */
#ifndef PIC_FORWARD_IMPL_H
#define PIC_FORWARD_IMPL_H

#include "forward.h"

typedef struct {
    float *x;       /* (nb, H) residual stream */
    float *xn;      /* (nb, H) normed input of the current block */
    /* GDN */
    float *qkv;     /* (nb, C) pre-conv [q | k | v] */
    float *cv;      /* (nb, C) post-conv, SiLU, q̂/k̂ normalised */
    float *z;       /* (nb, Hv*dv) output gate */
    float *beta;    /* (nb, Hv) */
    float *g;       /* (nb, Hv) */
    float *lo;      /* (nb, Hv*dv) recurrence output */
    /* attention */
    float *qp;      /* (nb, Hq*2*hd) [q | gate] per head */
    float *q;       /* (nb, Hq*hd) */
    float *gate;    /* (nb, Hq*hd) */
    float *k;       /* (nb, Hkv*hd) */
    float *v;       /* (nb, Hkv*hd) */
    float *ao;      /* (nb, Hq*hd) */
    int   *pos;     /* (nb) positions */
    /* MLA */
    float *mqa;     /* (nb, qr) q_lora latent */
    float *mq;      /* (nb, Hq*(dr+dn)) per head [q_pe | q_nope] */
    float *mlat;    /* (nb, dr+r) latent rows [k_pe | c_KV] */
    float *mcn;     /* (nb, r) c_KV before / after kv_a_layernorm */
    float *mo;      /* (nb, Hq*dv) attention output */
    /* FFN */
    float *fg;      /* (nb, max(I, Is)) gate activations */
    float *fu;      /* (nb, max(I, Is)) up activations */
    float *rl;      /* (nb, E) router probabilities */
    float *xe;      /* (nb, H) rows routed to one expert */
    float *eg;      /* (nb, Ie) */
    float *eu;      /* (nb, Ie) */
    float *ed;      /* (nb, H) expert / shared expert output */
    int   *sel;     /* (nb, top-k) selected experts */
    float *selw;    /* (nb, top-k) their weights */
    int   *rows;    /* (nb * top-k) rows routed to each expert, expert by expert */
    float *roww;    /* (nb * top-k) their weights */
    int   *ids;     /* (nb) token ids of the pass */
    float *sg;      /* (nb) shared-expert gate */
    float *lg;      /* (lg_rows, V) logits before download; NULL on host backends */
    /* host views of the index arrays above (the same pointers when the
     * backend is host memory; else the state's staging, moved with
     * mem_upload / mem_download) */
    int   *h_ids;   /* (nb) */
    int   *h_pos;   /* (nb) */
    int   *h_sel;   /* (nb * top-k) */
    float *h_selw;  /* (nb * top-k) */
    int   *h_rows;  /* (nb * top-k) */
    float *h_roww;  /* (nb * top-k) */
    int   *h_off;   /* (E + 1) expert e's rows: [h_off[e], h_off[e+1]) */
    /* Mamba2 (I = Hm·P; empty without Mamba2 layers); its pre- and
     * post-conv x | B | C rows are qkv and cv, (nb, C) with C =
     * pic_config_conv_ch = I + 2·G·N */
    float *mz;      /* (nb, I) gate z */
    float *mdt;     /* (nb, Hm) raw dt */
    float *my;      /* (nb, I) scan output, then the gated norm's */
    float *xr;      /* (nb, H) a block's output before residual_multiplier
                     * (Granite; empty elsewhere) */
} pic_ws;

/* One sequence's share of a layer pass: workspace rows [row, row+n) are its
 * tokens at positions p0..p0+n−1 and advance its state s. */
typedef struct {
    pic_state *s;
    int        row;         /* first workspace row */
    int        n;           /* rows (tokens) */
    int        p0;          /* position of the first */
    int        prep;        /* 1: hooks->on_run(user, layer, run) before this
                             * span's conv in every linear layer */
    int        run;         /* the caller's run index, for on_run */
    int        chunk_min;   /* GDN chunked from this many rows (0: PIC_GDN_CHUNK) */
    int        cut;         /* 1: hooks->on_cut(user, layer, run) once this
                             * span advanced s in a linear layer */
} pic_fwd_span;

/* Lay a workspace for nb rows (and lg_rows rows of device logits when
 * s's backend is not host memory) out in s's workspace (its own or the
 * shared one) and its host staging, growing them in s->be's memory; -1 on
 * OOM. */
int pic_ws_get(const pic_config *cfg, pic_state *s, int nb, int lg_rows,
               pic_ws *w);

/* n floats of scratch in s's backend memory, grown on demand (contents
 * undefined, valid until the next call on s's workspace); NULL on OOM. */
float *pic_ws_scratch(pic_state *s, size_t n);

/* Copy n ints or floats from host src to backend dst (nothing when they are
 * the same memory: a host backend's staging is the workspace itself). */
void pic_ws_put(const pic_backend *be, void *dst, const void *src, size_t bytes);

/* Run the nb rows of w->x (embeddings in, residual stream out) through
 * every layer: projections and FFN as GEMMs over all nb rows, the conv,
 * recurrence and KV writes span by span, in order, on each span's state
 * (on_run first where the span asks); consecutive spans on one state
 * attend in one call, causally by position.  The spans cover the rows in
 * order, and each state's KV slots up to p0+n exist.  0, or -1 when the
 * MLA scratch could not grow. */
int pic_forward_layers(const pic_model *m, const pic_backend *be, pic_ws *w,
                       int nb, const pic_fwd_span *sp, int n_sp,
                       const pic_forward_hooks *hooks);

/* A Mamba2 mixer (mamba2.c, MODEL.md §9) on the normed rows w->xn: x +=
 * out_proj(gated norm(scan(conv(in_proj)))), span by span on each span's
 * state, the hooks as the GDN layer calls them (on_run before the conv,
 * on_ssd with the scan's inputs, on_cut after). */
void pic_mamba2_layer(const pic_model *m, const pic_backend *be, int l, pic_ws *w,
                      int nb, const pic_fwd_span *sp, int n_sp,
                      const pic_forward_hooks *hooks);

/* Granite's scalars (mamba2.c; nothing where the config has none):
 * x(nb, H) ×= embedding_multiplier; lg(rows, V) ÷= logits_scaling. */
void pic_forward_scale_embed(const pic_model *m, const pic_backend *be, float *x,
                             int nb);
void pic_forward_scale_logits(const pic_model *m, const pic_backend *be, float *lg,
                              int rows);

/* Around a block that adds into w->x: with residual_multiplier r, begin
 * points w->x at the zeroed w->xr and returns the residual stream, end adds
 * r · xr into it and points w->x back (h ← h + r · block(h)). */
float *pic_forward_resid_begin(const pic_model *m, const pic_backend *be, pic_ws *w,
                               int nb);
void pic_forward_resid_end(const pic_model *m, const pic_backend *be, pic_ws *w,
                           int nb, float *x);

/* h += FFN(xn) for the nb rows of w (dense MLP or MoE, MODEL.md §5). */
void pic_ffn_forward(const pic_model *m, const pic_backend *be, int l,
                     pic_ws *w, int nb);

#endif /* PIC_FORWARD_IMPL_H */
