/*
 * forward.c — the decoder's forward pass (forward.h), read top to
 * bottom: embeddings, then per layer a mixer (Gated DeltaNet or attention,
 * in the variant the config names) and an FFN (ffn.c) on pre-normed
 * inputs, then the final norm and lm_head for the rows that need logits.  pic_forward and
 * pic_forward_runs (PIC seam runs) share one driver and one layer pass.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward_impl.h"

/* --- Gated DeltaNet layer (MODEL.md §3) --- */

/* Decode (every span one token, no hooks): steps 2, 5 and 6 of every span
 * and key head g — its q and k channels, the v channels of its r value
 * heads, their conv window, and their recurrence — in one parallel pass
 * over (span, g); each piece is the op of the span-wide call restricted to
 * its channels and heads, so the result is the same bit for bit. */
static void
pic_gdn_decode_step(const pic_model *m, const pic_backend *be, int l,
                    pic_ws *w, const pic_fwd_span *sp, int n_sp)
{
    const pic_config        *c = &m->cfg;
    const pic_layer_weights *lw = &m->w.layers[l];
    int Hk = c->lin_k_heads, Hv = c->lin_v_heads, r = Hv / Hk, K = c->conv_kernel;
    int dk = c->lin_k_dim, dv = c->lin_v_dim, kd = Hk * dk, vd = Hv * dv;
    int C = 2 * kd + vd, S = K - 1;

    #pragma omp parallel for schedule(static) if (n_sp * Hk > 1)
    for (int ig = 0; ig < n_sp * Hk; ig++) {
        int    i = ig / Hk, g = ig % Hk, r0 = sp[i].row;
        float *cv = w->cv + (size_t) r0 * C;       /* (1, C) */
        float *u = w->qkv + (size_t) r0 * C;       /* (1, C) */
        float *st = sp[i].s->conv[l];              /* (C, K-1) */
        int    ch[3][2] = { { g * dk, dk }, { kd + g * dk, dk },
                            { 2 * kd + g * r * dv, r * dv } };

        for (int k = 0; k < 3; k++) {
            int c0 = ch[k][0], len = ch[k][1];

            be->conv1d(cv + c0, u + c0, st + (size_t) c0 * S, lw->conv_w + (size_t) c0 * K,
                       1, len, K);
            be->silu(cv + c0, (size_t) len);
        }
        be->l2norm(cv + g * dk, 1, dk, dk, 1e-6f, 1.0f / sqrtf((float) dk));
        be->l2norm(cv + kd + g * dk, 1, dk, dk, 1e-6f, 1.0f);
        pic_gdn_args a = {
            .n = 1, .Hk = 1, .Hv = r, .dk = dk, .ds = dv,
            .q = cv + g * dk, .ldq = C, .k = cv + kd + g * dk, .ldk = C,
            .v = cv + 2 * kd + (size_t) g * r * dv, .ldv = C,
            .g = w->g + (size_t) r0 * Hv + g * r,
            .beta = w->beta + (size_t) r0 * Hv + g * r,
            .S = sp[i].s->S[l] + (size_t) g * r * dk * dv,
            .o = w->lo + (size_t) r0 * vd + (size_t) g * r * dv, .ldo = vd,
        };
        be->gdn_recurrent(&a);
    }
}

static void
pic_gdn_layer(const pic_model *m, const pic_backend *be, int l, pic_ws *w,
              int nb, const pic_fwd_span *sp, int n_sp,
              const pic_forward_hooks *hooks)
{
    const pic_config        *c = &m->cfg;
    const pic_layer_weights *lw = &m->w.layers[l];
    int H = c->hidden, Hk = c->lin_k_heads, Hv = c->lin_v_heads;
    int dk = c->lin_k_dim, dv = c->lin_v_dim, kd = Hk * dk, vd = Hv * dv;
    int C = 2 * kd + vd;

    /* 1. projections (decode: one parallel pass over all four) */
    {
        pic_wmat        wb = pic_wmat_f32(lw->in_b, Hv, H);
        pic_wmat        wa = pic_wmat_f32(lw->in_a, Hv, H);
        const pic_wmat *ws[4] = { &lw->in_qkv, &lw->in_z, &wb, &wa };
        float          *ys[4] = { w->qkv, w->z, w->beta, w->g };

        be->matmul_w_multi(ys, w->xn, ws, 4, nb);
    }

    /* 3. gates in fp32 (row-wise, state-free): β = σ(b),
     * g = −e^{A_log} softplus(a + dt_bias) */
    be->gdn_gates(w->g, w->beta, lw->A_log, lw->dt_bias, nb, Hv);

    /* per span, in order: the caller's prep (seam runs), 2. causal conv
     * with the span's carried window and SiLU, 5. q̂ = q/‖q‖ / sqrt(dk),
     * k̂ = k/‖k‖ (eps on the sum of squares), 6–7. the recurrence */
    int decode = hooks == NULL
                 || (hooks->on_run == NULL && hooks->on_gdn == NULL
                     && hooks->on_cut == NULL);

    /* the fused step calls the ops from inside its own team: host only */
    decode = decode && be->host;
    for (int i = 0; i < n_sp && decode; i++) {
        decode = sp[i].n == 1;
    }
    if (decode) {
        pic_gdn_decode_step(m, be, l, w, sp, n_sp);
    }
    for (int i = 0; i < n_sp && !decode; i++) {
        int    r0 = sp[i].row, n = sp[i].n;
        float *cv = w->cv + (size_t) r0 * C;   /* (n, C) this span's rows */
        int    chunk_min = sp[i].chunk_min > 0 ? sp[i].chunk_min : PIC_GDN_CHUNK;

        if (sp[i].prep && hooks != NULL && hooks->on_run != NULL) {
            hooks->on_run(hooks->user, l, sp[i].run);
        }
        be->conv1d(cv, w->qkv + (size_t) r0 * C, sp[i].s->conv[l], lw->conv_w, n,
                   C, c->conv_kernel);
        be->silu(cv, (size_t) n * C);
        be->l2norm_heads(cv, n, C, Hk, dk, 1e-6f, 1.0f / sqrtf((float) dk));
        be->l2norm_heads(cv + kd, n, C, Hk, dk, 1e-6f, 1.0f);
        pic_gdn_args a = {
            .n = n, .Hk = Hk, .Hv = Hv, .dk = dk, .ds = dv,
            .q = cv, .ldq = C, .k = cv + kd, .ldk = C,
            .v = cv + 2 * kd, .ldv = C, .g = w->g + (size_t) r0 * Hv,
            .beta = w->beta + (size_t) r0 * Hv,
            .S = sp[i].s->S[l], .o = NULL, .ldo = vd,
        };
        if (hooks != NULL && hooks->on_gdn != NULL) {
            hooks->on_gdn(hooks->user, l, sp[i].p0, &a);
        }
        a.o = w->lo + (size_t) r0 * vd;
        /* below chunk_min tokens the WY form buys nothing: step token by
         * token */
        if (n < chunk_min) {
            be->gdn_recurrent(&a);
        } else {
            be->gdn_chunked(&a);
        }
        if (sp[i].cut && hooks != NULL && hooks->on_cut != NULL) {
            hooks->on_cut(hooks->user, l, sp[i].run);
        }
    }

    /* 8. gated RMSNorm per head (plain w, norm before gate) */
    be->rmsnorm(w->lo, w->lo, lw->gdn_norm, nb * Hv, dv, c->rms_eps, 0);
    be->silu(w->z, (size_t) nb * vd);
    be->mul(w->lo, w->z, (size_t) nb * vd);

    /* 9. out_proj + residual */
    be->matmul_w(w->x, w->lo, &lw->out_proj, nb, 1);
}

/* --- attention layer (MODEL.md §4) --- */

/* Causal GQA attention in the variant the config names: Qwen3.5's gated
 * one (q_proj rows [q_h | gate_h] per head, (1+w) q/k RMSNorm, partial
 * RoPE, σ(gate) on the output), or the plain one of Llama, Qwen3 (plain
 * q/k RMSNorm) and Qwen2 (q/k/v biases). */
static void
pic_attn_layer(const pic_model *m, const pic_backend *be, int l, pic_ws *w,
               int nb, const pic_fwd_span *sp, int n_sp)
{
    const pic_config        *c = &m->cfg;
    const pic_layer_weights *lw = &m->w.layers[l];
    int Hq = c->n_q_heads, Hkv = c->n_kv_heads, hd = c->head_dim;
    int qd = Hq * hd, kvd = Hkv * hd;
    /* bf16dot rounds the attention's operands as it rounds the weights' */
    void (*attend)(float *, const float *, const int *, int, int, int, int,
                   const float *, const float *, int, int) =
        m->xbf16 && be->attention_dot != NULL ? be->attention_dot : be->attention;

    /* 1. projections (+ biases); gated: q rows interleaved per head
     * [q_h | gate_h] */
    {
        const pic_wmat *ws[3] = { &lw->wq, &lw->wk, &lw->wv };
        float          *ys[3] = { c->attn_gate ? w->qp : w->q, w->k, w->v };

        be->matmul_w_multi(ys, w->xn, ws, 3, nb);
    }
    if (c->attn_gate) {
        be->copy_rows(w->q, hd, w->qp, 2 * hd, nb * Hq, hd);
        be->copy_rows(w->gate, hd, w->qp + hd, 2 * hd, nb * Hq, hd);
    }
    if (lw->bq != NULL) {
        be->add_rows(w->q, lw->bq, nb, qd);
        be->add_rows(w->k, lw->bk, nb, kvd);
        be->add_rows(w->v, lw->bv, nb, kvd);
    }

    /* 2–3. per-head RMSNorm over hd, then NeoX RoPE on the rotary dims */
    if (lw->q_norm != NULL) {
        be->rmsnorm(w->q, w->q, lw->q_norm, nb * Hq, hd, c->rms_eps, c->norm_offset);
        be->rmsnorm(w->k, w->k, lw->k_norm, nb * Hkv, hd, c->rms_eps, c->norm_offset);
    }
    be->rope(w->q, qd, w->pos, nb, Hq, hd, &c->rope);
    be->rope(w->k, kvd, w->pos, nb, Hkv, hd, &c->rope);
    if (c->attn_scale > 0.0f) {         /* the op scales by 1/sqrt(hd) */
        be->scale_add(w->q, w->q, 0.0f, c->attn_scale * sqrtf((float) hd),
                      (size_t) nb * qd);
    }

    /* K/V into each sequence's cache at their positions, then 4. causal
     * GQA over its slots [0, p0+n).  Consecutive spans on one state (seam
     * runs) attend in one call: causality by position keeps later spans
     * invisible to earlier ones, and the cached context is read once. */
    for (int i = 0, j; i < n_sp; i = j) {
        pic_state *s = sp[i].s;

        for (j = i; j < n_sp && sp[j].s == s; j++) {
            be->kv_store(s->kc[l], s->vc[l], s->cap, w->k + (size_t) sp[j].row * kvd,
                         w->v + (size_t) sp[j].row * kvd, sp[j].n, Hkv, hd, sp[j].p0);
        }
        int r0 = sp[i].row, n = sp[j - 1].row + sp[j - 1].n - r0;
        attend(w->ao + (size_t) r0 * qd, w->q + (size_t) r0 * qd, w->pos + r0, n,
               Hq, Hkv, hd, s->kc[l], s->vc[l], s->cap, sp[j - 1].p0 + sp[j - 1].n);
    }

    /* 5. output gate σ(gate); o_proj (+ bias) into the residual */
    if (c->attn_gate) {
        be->sigmoid(w->gate, (size_t) nb * qd);
        be->mul(w->ao, w->gate, (size_t) nb * qd);
    }
    be->matmul_w(w->x, w->ao, &lw->wo, nb, 1);
    if (lw->bo != NULL) {
        be->add_rows(w->x, lw->bo, nb, c->hidden);
    }
}

/* --- multi-head latent attention layer (MODEL.md §4.2) --- */

/* Spans of at most this many rows attend in the absorbed form (one
 * mla_attention op over the latent rows); longer ones expand each head's
 * keys and values from the latents and run the attention op per head. */
#define PIC_MLA_ABSORB_ROWS 4

/* Rows [r0, r0+n) of w attend the latent cache kc (slots [0, nk)) head by
 * head: per head h, k_nope_h | v_h = W_kvb[h] c for every slot (one GEMM),
 * K_h = [k_pe | k_nope_h | 0], V_h = [v_h | 0], q_h = [q_pe | q_nope | 0]
 * padded to mla_hdp (the attention op's one head width; q carries the
 * scale that makes its 1/sqrt(hdp) the model's: pic_mla_layer).  -1 on OOM. */
static int
pic_mla_expanded(const pic_model *m, const pic_backend *be, const pic_layer_weights *lw,
                 pic_ws *w, pic_state *s, const float *kc, int r0, int n, int nk)
{
    const pic_config *c = &m->cfg;
    int    Hq = c->n_q_heads, dn = c->qk_nope_dim, dr = c->qk_rope_dim;
    int    dv = c->v_head_dim, r = c->kv_lora_rank, hq = dr + dn, hp = c->mla_hdp;
    size_t need = (size_t) nk * r + (size_t) nk * (dn + dv) + 2 * (size_t) nk * hp
                  + 2 * (size_t) n * hp;
    float *cc = pic_ws_scratch(s, need);            /* (nk, r) the c_KV rows */

    if (cc == NULL) {
        return -1;
    }
    float *kv = cc + (size_t) nk * r;               /* (nk, dn+dv) head h's */
    float *K = kv + (size_t) nk * (dn + dv);        /* (nk, hp) */
    float *V = K + (size_t) nk * hp;                /* (nk, hp) */
    float *qh = V + (size_t) nk * hp;               /* (n, hp) */
    float *oh = qh + (size_t) n * hp;               /* (n, hp) */

    be->mem_zero(K, (2 * (size_t) nk * hp + (size_t) n * hp) * sizeof(float));
    be->copy_rows(cc, r, kc + dr, dr + r, nk, r);
    be->copy_rows(K, hp, kc, dr + r, nk, dr);       /* k_pe: every head's */
    for (int h = 0; h < Hq; h++) {
        pic_wmat wh = pic_wmat_view(&lw->kv_b, h * (dn + dv), dn + dv);

        be->matmul_w(kv, cc, &wh, nk, 0);
        be->copy_rows(K + dr, hp, kv, dn + dv, nk, dn);
        be->copy_rows(V, hp, kv + dn, dn + dv, nk, dv);
        be->copy_rows(qh, hp, w->mq + (size_t) r0 * Hq * hq + (size_t) h * hq, Hq * hq,
                      n, hq);
        be->attention(oh, qh, w->pos + r0, n, 1, 1, hp, K, V, nk, nk);
        be->copy_rows(w->mo + (size_t) r0 * Hq * dv + (size_t) h * dv, Hq * dv, oh, hp,
                      n, dv);
    }
    return 0;
}

/* MLA: q (direct or through q_lora and its RMSNorm), the latent row
 * [k_pe | c_KV] from kv_a (c_KV through kv_a_layernorm), RoPE on q_pe and
 * k_pe, latent rows into the cache at their positions, attention
 * (absorbed for short spans, expanded for long), o_proj.  -1 on OOM. */
static int
pic_mla_layer(const pic_model *m, const pic_backend *be, int l, pic_ws *w,
              int nb, const pic_fwd_span *sp, int n_sp)
{
    const pic_config        *c = &m->cfg;
    const pic_layer_weights *lw = &m->w.layers[l];
    int Hq = c->n_q_heads, dn = c->qk_nope_dim, dr = c->qk_rope_dim;
    int dv = c->v_head_dim, r = c->kv_lora_rank, hq = dr + dn, lwd = dr + r;

    /* 1. projections; the low-rank norms use transformers' default eps */
    if (lw->q_a.data != NULL) {
        be->matmul_w(w->mqa, w->xn, &lw->q_a, nb, 0);
        be->rmsnorm(w->mqa, w->mqa, lw->q_a_norm, nb, c->q_lora_rank, 1e-6f, 0);
        be->matmul_w(w->mq, w->mqa, &lw->q_b, nb, 0);
    } else {
        be->matmul_w(w->mq, w->xn, &lw->q_b, nb, 0);
    }
    /* the scale that makes the attention's 1/sqrt(hdp) the model's, and
     * YaRN's factor on cos and sin squared (q_pe·k_pe carries it twice) */
    {
        float qs = c->mla_scale * sqrtf((float) c->mla_hdp);
        float af2 = c->rope_attn_factor * c->rope_attn_factor;

        if (qs != 1.0f) {
            be->scale_rows(w->mq, hq, nb * Hq, hq, qs);
        }
        if (af2 != 1.0f) {
            be->scale_rows(w->mq, hq, nb * Hq, dr, af2);
        }
    }
    be->matmul_w(w->mlat, w->xn, &lw->kv_a, nb, 0);
    be->copy_rows(w->mcn, r, w->mlat + dr, lwd, nb, r);
    be->rmsnorm(w->mcn, w->mcn, lw->kv_a_norm, nb, r, 1e-6f, 0);
    be->copy_rows(w->mlat + dr, lwd, w->mcn, r, nb, r);

    /* 2. RoPE on the first dr dims: q_pe of every head, the shared k_pe */
    be->rope(w->mq, Hq * hq, w->pos, nb, Hq, hq, &c->rope);
    be->rope(w->mlat, lwd, w->pos, nb, 1, lwd, &c->rope);

    /* 3. latent rows into each sequence's cache, then attention over its
     * slots [0, p0+n), consecutive spans on one state in one call */
    for (int i = 0, j; i < n_sp; i = j) {
        pic_state *s = sp[i].s;

        for (j = i; j < n_sp && sp[j].s == s; j++) {
            be->mem_copy(s->kc[l] + (size_t) sp[j].p0 * lwd,
                         w->mlat + (size_t) sp[j].row * lwd,
                         (size_t) sp[j].n * lwd * sizeof(float));
        }
        int r0 = sp[i].row, n = sp[j - 1].row + sp[j - 1].n - r0;
        int nk = sp[j - 1].p0 + sp[j - 1].n;

        if (n <= PIC_MLA_ABSORB_ROWS) {
            pic_mla_args a = {
                .n = n, .Hq = Hq, .dn = dn, .dr = dr, .dv = dv, .r = r,
                .q = w->mq + (size_t) r0 * Hq * hq, .qpos = w->pos + r0,
                .lat = s->kc[l], .n_keys = nk, .kvb = &lw->kv_b,
                .scale = 1.0f / sqrtf((float) c->mla_hdp),
                .o = w->mo + (size_t) r0 * Hq * dv,
            };
            be->mla_attention(&a);
        } else if (pic_mla_expanded(m, be, lw, w, s, s->kc[l], r0, n, nk) != 0) {
            return -1;
        }
    }

    /* 4. o_proj into the residual */
    be->matmul_w(w->x, w->mo, &lw->wo, nb, 1);
    return 0;
}

/* --- the model --- */

int
pic_forward_layers(const pic_model *m, const pic_backend *be, pic_ws *w,
                   int nb, const pic_fwd_span *sp, int n_sp,
                   const pic_forward_hooks *hooks)
{
    const pic_config *c = &m->cfg;
    int               H = c->hidden;

    /* positions of every row, once for all layers (host → backend) */
    for (int i = 0; i < n_sp; i++) {
        for (int t = 0; t < sp[i].n; t++) {
            w->h_pos[sp[i].row + t] = sp[i].p0 + t;
        }
    }
    pic_ws_put(be, w->pos, w->h_pos, (size_t) nb * sizeof(int));

    int nl = hooks != NULL && hooks->layers > 0 && hooks->layers < c->n_layers
             ? hooks->layers : c->n_layers;

    for (int l = 0; l < nl; l++) {
        const pic_layer_weights *lw = &m->w.layers[l];

        float                   *res;

        be->rmsnorm(w->xn, w->x, lw->input_norm, nb, H, c->rms_eps, c->norm_offset);
        res = pic_forward_resid_begin(m, be, w, nb);
        if (c->layer_type[l] == PIC_LAYER_LINEAR) {
            pic_gdn_layer(m, be, l, w, nb, sp, n_sp, hooks);
        } else if (c->layer_type[l] == PIC_LAYER_MAMBA2) {
            pic_mamba2_layer(m, be, l, w, nb, sp, n_sp, hooks);
        } else if (c->mla) {
            if (pic_mla_layer(m, be, l, w, nb, sp, n_sp) != 0) {
                return -1;
            }
        } else {
            pic_attn_layer(m, be, l, w, nb, sp, n_sp);
        }
        pic_forward_resid_end(m, be, w, nb, res);
        be->rmsnorm(w->xn, w->x, lw->post_norm, nb, H, c->rms_eps, c->norm_offset);
        res = pic_forward_resid_begin(m, be, w, nb);
        pic_ffn_forward(m, be, l, w, nb);
        pic_forward_resid_end(m, be, w, nb, res);
    }
    return 0;
}

/* Seam runs are short (2w tokens) but the linear states large (Hv·dk·dv):
 * the chunked form reads and writes S once per run instead of once per
 * token, so runs go chunked from 8 tokens.  Plain forwards keep
 * PIC_GDN_CHUNK (below it their results are the recurrent step's). */
#define PIC_RUN_CHUNK_MIN 8

/* Forward tokens (total, runs laid end to end) at the runs' positions in
 * layer-major passes of at most PIC_UBATCH rows, one span per piece of a
 * run; the runs below n_cut end at cuts (on_cut after their last piece);
 * logits as mode asks (ALL: (total, V)).  Runs checked by the caller;
 * s->pos becomes the last run's end.  -1 + err on a bad token id or OOM. */
static int
pic_forward_pass(const pic_model *m, const pic_backend *be, pic_state *s,
                 const int *tokens, const pic_run *runs, int n_runs, int n_cut,
                 int total, int chunk_min, pic_logits_mode mode, float *logits,
                 const pic_forward_hooks *hooks, char *err, size_t errlen)
{
    const pic_config *c = &m->cfg;
    const pic_wmat   *lm = m->w.lm_head.data ? &m->w.lm_head : &m->w.embed;
    int               H = c->hidden, V = c->vocab;
    int               cap = total < PIC_UBATCH ? total : PIC_UBATCH;
    int               end = runs[n_runs - 1].p0 + runs[n_runs - 1].n;
    pic_fwd_span      one;              /* the span of a one-run forward */
    pic_fwd_span     *sp;               /* (n_runs) spans of one pass */
    pic_ws            w;

    for (int t = 0; t < total; t++) {
        if (tokens[t] < 0 || tokens[t] >= V) {
            snprintf(err, errlen, "%s: token id %d at %d outside [0, %d)",
                     __func__, tokens[t], t, V);
            return -1;
        }
    }
    if (pic_state_reserve(s, end, err, errlen) != 0) {
        return -1;
    }
    /* decode (one run) allocates nothing: the workspace is s's, kept */
    sp = n_runs == 1 ? &one : malloc((size_t) n_runs * sizeof(*sp));
    if (m->be != NULL ? m->be != be : !be->host) {
        snprintf(err, errlen, "%s: weights on backend %s, forward on %s", __func__,
                 m->be != NULL ? m->be->name : "cpu", be->name);
        if (sp != &one) {
            free(sp);
        }
        return -1;
    }
    if (s->be != be && !(s->be->host && be->host)) {
        snprintf(err, errlen, "%s: state on backend %s, forward on %s", __func__,
                 s->be->name, be->name);
        if (sp != &one) {
            free(sp);
        }
        return -1;
    }
    if (hooks != NULL && hooks->layers > 0 && mode != PIC_LOGITS_NONE) {
        snprintf(err, errlen, "%s: logits asked of a pass through some layers only",
                 __func__);
        if (sp != &one) {
            free(sp);
        }
        return -1;
    }
    if (sp == NULL
        || pic_ws_get(c, s, cap, mode == PIC_LOGITS_ALL ? cap : 1, &w) != 0) {
        snprintf(err, errlen, "%s: out of memory for the workspace", __func__);
        if (sp != &one) {
            free(sp);
        }
        return -1;
    }

    for (int r = 0, done = 0, tok0 = 0; r < n_runs;) {
        int ns = 0, nb = 0;

        while (r < n_runs && nb < cap) {         /* fill the pass */
            int take = runs[r].n - done < cap - nb ? runs[r].n - done : cap - nb;
            sp[ns++] = (pic_fwd_span) {
                .s = s, .row = nb, .n = take, .p0 = runs[r].p0 + done,
                .run = r, .prep = done == 0, .chunk_min = chunk_min,
                .cut = r < n_cut && done + take == runs[r].n,
            };
            nb += take;
            done += take;
            if (done == runs[r].n) {
                r++;
                done = 0;
            }
        }
        /* tokens in (host → backend), embedding rows */
        memcpy(w.h_ids, tokens + tok0, (size_t) nb * sizeof(int));
        pic_ws_put(be, w.ids, w.h_ids, (size_t) nb * sizeof(int));
        be->gather_rows(w.x, &m->w.embed, w.ids, nb);
        pic_forward_scale_embed(m, be, w.x, nb);
        if (pic_forward_layers(m, be, &w, nb, sp, ns, hooks) != 0) {
            snprintf(err, errlen, "%s: out of memory for the attention scratch", __func__);
            if (sp != &one) {
                free(sp);
            }
            return -1;
        }

        /* logits out (backend → host) */
        if (mode == PIC_LOGITS_ALL) {
            float *out = be->host ? logits + (size_t) tok0 * V : w.lg;

            be->rmsnorm(w.xn, w.x, m->w.final_norm, nb, H, c->rms_eps, c->norm_offset);
            be->matmul_w(out, w.xn, lm, nb, 0);
            pic_forward_scale_logits(m, be, out, nb);
            if (!be->host) {
                be->mem_download(logits + (size_t) tok0 * V, out,
                                 (size_t) nb * V * sizeof(float));
            }
        } else if (mode == PIC_LOGITS_LAST && r == n_runs) {
            float *out = be->host ? logits : w.lg;

            be->rmsnorm(w.xn, w.x + (size_t) (nb - 1) * H, m->w.final_norm, 1,
                        H, c->rms_eps, c->norm_offset);
            be->matmul_w(out, w.xn, lm, 1, 0);
            pic_forward_scale_logits(m, be, out, 1);
            if (!be->host) {
                be->mem_download(logits, out, (size_t) V * sizeof(float));
            }
        }
        tok0 += nb;
    }
    if (sp != &one) {
        free(sp);
    }
    s->pos = end;
    return 0;
}

int
pic_forward(const pic_model *m, const pic_backend *be, pic_state *s,
            const int *tokens, int n, int p0, pic_logits_mode mode,
            float *logits, const pic_forward_hooks *hooks, char *err,
            size_t errlen)
{
    pic_run run = { .p0 = p0, .n = n };

    if (be == NULL) {
        be = s != NULL ? s->be : pic_backend_cpu();    /* the state's */
    }
    if (n <= 0 || p0 < 0 || tokens == NULL) {
        snprintf(err, errlen, "%s: bad batch (n=%d, p0=%d)", __func__, n, p0);
        return -1;
    }
    if (mode != PIC_LOGITS_NONE && logits == NULL) {
        snprintf(err, errlen, "%s: logits requested without a buffer", __func__);
        return -1;
    }
    if (s->n_layers != m->cfg.n_layers) {
        snprintf(err, errlen, "%s: state made for another model", __func__);
        return -1;
    }
    if (n > INT32_MAX - p0) {
        snprintf(err, errlen, "%s: position overflow", __func__);
        return -1;
    }
    return pic_forward_pass(m, be, s, tokens, &run, 1, 0, n, PIC_GDN_CHUNK, mode,
                            logits, hooks, err, errlen);
}

int
pic_forward_cuts(const pic_model *m, const pic_backend *be, pic_state *s,
                 const int *tokens, int n, int p0, const int *cuts, int n_cuts,
                 pic_logits_mode mode, float *logits, const pic_forward_hooks *hooks,
                 char *err, size_t errlen)
{
    pic_run *runs;
    int      n_runs, rc;

    if (n_cuts <= 0) {
        return pic_forward(m, be, s, tokens, n, p0, mode, logits, hooks, err, errlen);
    }
    if (n <= 0 || p0 < 0 || tokens == NULL || cuts == NULL || n > INT32_MAX - p0
        || s->n_layers != m->cfg.n_layers
        || (mode != PIC_LOGITS_NONE && logits == NULL)) {
        snprintf(err, errlen, "%s: bad batch (n=%d, p0=%d)", __func__, n, p0);
        return -1;
    }
    for (int k = 0; k < n_cuts; k++) {
        if (cuts[k] <= (k > 0 ? cuts[k - 1] : p0) || cuts[k] > p0 + n) {
            snprintf(err, errlen, "%s: cut %d at %d outside (%d, %d] or out of order",
                     __func__, k, cuts[k], k > 0 ? cuts[k - 1] : p0, p0 + n);
            return -1;
        }
    }
    /* one run per piece: run k ends at cuts[k], the last at p0+n */
    n_runs = cuts[n_cuts - 1] == p0 + n ? n_cuts : n_cuts + 1;
    runs = malloc((size_t) n_runs * sizeof(*runs));
    if (runs == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        return -1;
    }
    for (int k = 0, at = p0; k < n_runs; k++) {
        int end = k < n_cuts ? cuts[k] : p0 + n;

        runs[k] = (pic_run) { .p0 = at, .n = end - at };
        at = end;
    }
    if (be == NULL) {
        be = s != NULL ? s->be : pic_backend_cpu();    /* the state's */
    }
    rc = pic_forward_pass(m, be, s, tokens, runs, n_runs, n_cuts, n, PIC_GDN_CHUNK,
                          mode, logits, hooks, err, errlen);
    free(runs);
    return rc;
}

int
pic_forward_runs(const pic_model *m, const pic_backend *be, pic_state *s,
                 const int *tokens, const pic_run *runs, int n_runs,
                 float *logits, const pic_forward_hooks *hooks, char *err,
                 size_t errlen)
{
    int total = 0, end = 0;

    if (be == NULL) {
        be = s != NULL ? s->be : pic_backend_cpu();    /* the state's */
    }
    if (runs == NULL || n_runs <= 0 || tokens == NULL
        || s->n_layers != m->cfg.n_layers) {
        snprintf(err, errlen, "%s: no runs, or a state of another model", __func__);
        return -1;
    }
    for (int r = 0; r < n_runs; r++) {
        if (runs[r].n <= 0 || runs[r].p0 < end || runs[r].n > INT32_MAX - runs[r].p0
            || runs[r].n > INT32_MAX - total) {
            snprintf(err, errlen, "%s: run %d (p0=%d, n=%d) out of order", __func__,
                     r, runs[r].p0, runs[r].n);
            return -1;
        }
        end = runs[r].p0 + runs[r].n;
        total += runs[r].n;
    }
    return pic_forward_pass(m, be, s, tokens, runs, n_runs, 0, total,
                            PIC_RUN_CHUNK_MIN,
                            logits != NULL ? PIC_LOGITS_LAST : PIC_LOGITS_NONE,
                            logits, hooks, err, errlen);
}

double
pic_forward_flops(const pic_config *c, int n, int p0, pic_logits_mode mode)
{
    double H = c->hidden, f = 0.0;
    double C = pic_config_conv_ch(c);
    double vd = (double) c->lin_v_heads * c->lin_v_dim;
    double qd = (double) c->n_q_heads * c->head_dim;
    double kvd = (double) c->n_kv_heads * c->head_dim;

    for (int l = 0; l < c->n_layers; l++) {
        double p = 0.0;                 /* parameters touched per token */
        if (c->layer_type[l] == PIC_LAYER_LINEAR) {
            p += H * (C + vd + 2.0 * c->lin_v_heads) + vd * H;
            /* recurrence: Sᵀk, k δᵀ, Sᵀq per value head */
            f += (double) n * 6.0 * c->lin_v_heads * c->lin_k_dim * c->lin_v_dim;
        } else if (c->layer_type[l] == PIC_LAYER_MAMBA2) {
            double mi = (double) c->ssm_heads * c->ssm_head_dim;

            p += H * (mi + C + c->ssm_heads) + mi * H;
            /* scan: a S + dt x Bᵀ and S C per head */
            f += (double) n * 4.0 * mi * c->ssm_state;
        } else if (c->mla) {
            double hq = (double) c->qk_nope_dim + c->qk_rope_dim, r = c->kv_lora_rank;
            double qr = c->q_lora_rank, Hq = c->n_q_heads;
            double keys = (double) n * p0 + (double) n * (n + 1) / 2.0;

            /* projections; the per-head expansion of the latents counted as
             * one W_kvb pass per token (the absorbed form's cost) */
            p += (qr > 0 ? H * qr + qr * Hq * hq : H * Hq * hq) + H * (r + c->qk_rope_dim)
                 + r * Hq * (c->qk_nope_dim + c->v_head_dim) + Hq * c->v_head_dim * H;
            f += 2.0 * Hq * (hq + c->v_head_dim) * keys;
        } else {
            p += H * ((c->attn_gate ? 2.0 : 1.0) * qd + 2.0 * kvd) + qd * H;
            /* scores + weighted sum over the causal keys of each token */
            double keys = (double) n * p0 + (double) n * (n + 1) / 2.0;
            f += 4.0 * qd * keys;
        }
        if (c->layer_is_moe[l]) {
            p += H * c->n_experts
                 + 3.0 * H * c->moe_intermediate * c->n_experts_per_tok
                 + 3.0 * H * c->shared_intermediate;
        } else {
            p += 3.0 * H * c->intermediate;
        }
        f += 2.0 * p * n;
    }
    if (mode != PIC_LOGITS_NONE) {
        f += 2.0 * H * c->vocab * (mode == PIC_LOGITS_ALL ? n : 1);
    }
    return f;
}
