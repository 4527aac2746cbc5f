/*
 * ffn.c — the feed-forward half of a block (MODEL.md §5): dense SwiGLU MLP,
 * or the MoE (fp32 softmax router over all experts, top-k, renormalise,
 * plus the sigmoid-gated shared expert).  Expert GEMMs run over the rows
 * routed to each expert.
 */

#include "forward_impl.h"

/* fu ← SiLU(fg) ⊙ fu over n values (fg becomes SiLU(fg)). */
static void
pic_swiglu(const pic_backend *be, float *fg, float *fu, size_t n)
{
    be->silu(fg, n);
    be->mul(fu, fg, n);
}

static void
pic_ffn_dense(const pic_backend *be, const pic_layer_weights *lw, int I,
              pic_ws *w, int nb)
{
    const pic_wmat *ws[2] = { &lw->mlp_gate, &lw->mlp_up };
    float          *ys[2] = { w->fg, w->fu };

    be->matmul_w_multi(ys, w->xn, ws, 2, nb);
    pic_swiglu(be, w->fg, w->fu, (size_t) nb * I);
    be->matmul_w(w->x, w->fu, &lw->mlp_down, nb, 1);
}

static void
pic_ffn_moe(const pic_model *m, const pic_backend *be,
            const pic_layer_weights *lw, pic_ws *w, int nb)
{
    const pic_config *cfg = &m->cfg;
    int H = cfg->hidden, E = cfg->n_experts, k = cfg->n_experts_per_tok;
    int Ie = cfg->moe_intermediate, Is = cfg->shared_intermediate;

    be->matmul(w->rl, w->xn, lw->router, nb, H, E, 0);
    if (cfg->moe_grouped) {
        pic_moe_group_args ga = {
            .n = nb, .E = E, .k = k, .groups = cfg->moe_groups,
            .topk_groups = cfg->moe_topk_groups, .sigmoid = cfg->moe_sigmoid,
            .bias = lw->router_bias, .renorm = cfg->norm_topk_prob,
            .scale = cfg->moe_scale,
        };
        be->moe_route_grouped(w->sel, w->selw, w->rl, &ga);
    } else {
        be->moe_route(w->sel, w->selw, w->rl, nb, E, k,
                      cfg->norm_topk_prob || cfg->arch == PIC_ARCH_QWEN3_5);
    }

    /* shared expert first (reads xn only), gated by sigmoid(w_sg · x) */
    if (Is > 0 && lw->shared.gate.data != NULL) {
        be->matmul_w(w->fg, w->xn, &lw->shared.gate, nb, 0);
        be->matmul_w(w->fu, w->xn, &lw->shared.up, nb, 0);
        pic_swiglu(be, w->fg, w->fu, (size_t) nb * Is);
        be->matmul_w(w->ed, w->fu, &lw->shared.down, nb, 0);
        if (lw->shared_gate != NULL) {
            be->matmul(w->sg, w->xn, lw->shared_gate, nb, H, 1, 0);
            be->sigmoid(w->sg, (size_t) nb);
        }
        be->scatter_add(w->x, w->ed, NULL, lw->shared_gate != NULL ? w->sg : NULL,
                        nb, H);
    }

    /* routed experts: the rows of each expert listed on the host (the
     * routing comes back from the backend), then per expert gather, GEMM,
     * weighted scatter-add */
    if (w->h_sel != w->sel) {
        be->mem_download(w->h_sel, w->sel, (size_t) nb * k * sizeof(int));
        be->mem_download(w->h_selw, w->selw, (size_t) nb * k * sizeof(float));
    }
    for (int e = 0; e <= E; e++) {
        w->h_off[e] = 0;
    }
    for (int i = 0; i < nb * k; i++) {
        w->h_off[w->h_sel[i] + 1]++;
    }
    for (int e = 0; e < E; e++) {
        w->h_off[e + 1] += w->h_off[e];
    }
    for (int i = 0; i < nb * k; i++) {      /* each expert's rows in t order */
        int at = w->h_off[w->h_sel[i]]++;

        w->h_rows[at] = i / k;
        w->h_roww[at] = w->h_selw[i];
    }
    for (int e = E; e > 0; e--) {            /* h_off[e] moved to e's end */
        w->h_off[e] = w->h_off[e - 1];
    }
    w->h_off[0] = 0;
    pic_ws_put(be, w->rows, w->h_rows, (size_t) nb * k * sizeof(int));
    pic_ws_put(be, w->roww, w->h_roww, (size_t) nb * k * sizeof(float));

    pic_wmat xn = pic_wmat_f32(w->xn, nb, H);
    for (int e = 0; e < E; e++) {
        int o = w->h_off[e], cnt = w->h_off[e + 1] - o;
        if (cnt == 0) {
            continue;
        }
        const pic_expert_weights *ex = &lw->experts[e];
        be->gather_rows(w->xe, &xn, w->rows + o, cnt);
        be->matmul_w(w->eg, w->xe, &ex->gate, cnt, 0);
        be->matmul_w(w->eu, w->xe, &ex->up, cnt, 0);
        pic_swiglu(be, w->eg, w->eu, (size_t) cnt * Ie);
        be->matmul_w(w->ed, w->eu, &ex->down, cnt, 0);
        be->scatter_add(w->x, w->ed, w->rows + o, w->roww + o, cnt, H);
    }
}

void
pic_ffn_forward(const pic_model *m, const pic_backend *be, int l, pic_ws *w,
                int nb)
{
    const pic_config        *cfg = &m->cfg;
    const pic_layer_weights *lw = &m->w.layers[l];

    if (cfg->layer_is_moe[l]) {
        pic_ffn_moe(m, be, lw, w, nb);
    } else {
        pic_ffn_dense(be, lw, cfg->intermediate, w, nb);
    }
}
