/*
 * mamba2.c — the Mamba2 mixer of Bamba and Granite 4.0-H (MODEL.md §9),
 * read top to bottom: in_proj into z, x | B | C and dt; per span the causal
 * conv with the span's carried window (+ bias) and SiLU, then the scan
 * (ssd_scan: S ← a S + dt x Bᵀ, y = S C + D x) on the span's state; the
 * grouped gated RMSNorm over y · silu(z); out_proj into the residual.
 */
#include "forward_impl.h"

void
pic_mamba2_layer(const pic_model *m, const pic_backend *be, int l, pic_ws *w,
                 int nb, const pic_fwd_span *sp, int n_sp,
                 const pic_forward_hooks *hooks)
{
    const pic_config        *c = &m->cfg;
    const pic_layer_weights *lw = &m->w.layers[l];
    int Hm = c->ssm_heads, P = c->ssm_head_dim, N = c->ssm_state, G = c->ssm_groups;
    int I = Hm * P, C = pic_config_conv_ch(c), K = c->conv_kernel;

    /* 1. in_proj rows [z | x B C | dt] (decode: one parallel pass) */
    {
        const pic_wmat *ws[3] = { &lw->ssm_in_z, &lw->ssm_in_xbc, &lw->ssm_in_dt };
        float          *ys[3] = { w->mz, w->qkv, w->mdt };

        be->matmul_w_multi(ys, w->xn, ws, 3, nb);
    }

    /* 2–5. per span, in order: the caller's prep (seam runs), the conv over
     * x | B | C with the carried window, its bias and SiLU, the scan */
    for (int i = 0; i < n_sp; i++) {
        int    r0 = sp[i].row, n = sp[i].n;
        float *cv = w->cv + (size_t) r0 * C;   /* (n, C) this span's rows */

        if (sp[i].prep && hooks != NULL && hooks->on_run != NULL) {
            hooks->on_run(hooks->user, l, sp[i].run);
        }
        be->conv1d(cv, w->qkv + (size_t) r0 * C, sp[i].s->conv[l], lw->ssm_conv_w, n,
                   C, K);
        if (lw->ssm_conv_b != NULL) {
            be->add_rows(cv, lw->ssm_conv_b, n, C);
        }
        be->silu(cv, (size_t) n * C);
        pic_ssd_args a = {
            .n = n, .H = Hm, .G = G, .P = P, .N = N,
            .x = cv, .B = cv + I, .C = cv + I + G * N, .ldx = C,
            .dt = w->mdt + (size_t) r0 * Hm, .dt_bias = lw->ssm_dt_bias,
            .dt_min = c->ssm_dt_min, .dt_max = c->ssm_dt_max,
            .A = lw->ssm_A, .D = lw->ssm_D, .S = sp[i].s->S[l], .y = NULL, .ldy = I,
        };
        if (hooks != NULL && hooks->on_ssd != NULL) {
            hooks->on_ssd(hooks->user, l, sp[i].p0, &a);
        }
        a.y = w->my + (size_t) r0 * I;
        be->ssd_scan(&a);
        if (sp[i].cut && hooks != NULL && hooks->on_cut != NULL) {
            hooks->on_cut(hooks->user, l, sp[i].run);
        }
    }

    /* 6. y ← RMSNorm_G(y · silu(z)) · w;  7. out_proj + residual */
    be->gated_rmsnorm(w->my, w->mz, lw->ssm_norm, nb, I, G, c->rms_eps);
    be->matmul_w(w->x, w->my, &lw->ssm_out, nb, 1);
}

/* --- Granite's scalars --- */

void
pic_forward_scale_embed(const pic_model *m, const pic_backend *be, float *x, int nb)
{
    float e = m->cfg.embed_mult;

    if (e != 0.0f && e != 1.0f) {
        be->scale_add(x, x, 0.0f, e, (size_t) nb * m->cfg.hidden);
    }
}

void
pic_forward_scale_logits(const pic_model *m, const pic_backend *be, float *lg, int rows)
{
    float d = m->cfg.logits_div;

    if (d != 0.0f && d != 1.0f) {
        be->scale_add(lg, lg, 0.0f, 1.0f / d, (size_t) rows * m->cfg.vocab);
    }
}

float *
pic_forward_resid_begin(const pic_model *m, const pic_backend *be, pic_ws *w, int nb)
{
    float *x = w->x, r = m->cfg.resid_mult;

    if (r != 0.0f && r != 1.0f) {
        be->mem_zero(w->xr, (size_t) nb * m->cfg.hidden * sizeof(float));
        w->x = w->xr;
    }
    return x;
}

void
pic_forward_resid_end(const pic_model *m, const pic_backend *be, pic_ws *w, int nb,
                      float *x)
{
    if (w->x != x) {
        be->scale_add(x, w->x, m->cfg.resid_mult, 1.0f, (size_t) nb * m->cfg.hidden);
        w->x = x;
    }
}
