/*
 * ffn.c — the feed-forward half of a block (MODEL.md §5): dense SwiGLU MLP,
 * or the MoE (fp32 softmax router over all experts, top-k, renormalise,
 * plus the sigmoid-gated shared expert).  Expert GEMMs run over the rows
 * routed to each expert.
 */
#include <math.h>
#include <string.h>

#include "forward_impl.h"

/* fu ← SiLU(fg) ⊙ fu over n values (fg becomes SiLU(fg)). */
static void
pic_swiglu(const pic_backend *be, float *fg, float *fu, size_t n)
{
    be->silu(fg, n);
    #pragma omp parallel for if (n > 65536) schedule(static)
    for (size_t i = 0; i < n; i++) {
        fu[i] *= fg[i];
    }
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

/* Route each row: softmax over E in fp32, top-k, optional renormalisation. */
static void
pic_moe_route(const pic_config *cfg, pic_ws *w, int nb)
{
    int E = cfg->n_experts, k = cfg->n_experts_per_tok;
    int renorm = cfg->norm_topk_prob || cfg->arch == PIC_ARCH_QWEN3_5;

    for (int t = 0; t < nb; t++) {
        float *p = w->rl + (size_t) t * E;
        float  mx = -INFINITY, sum = 0.0f, top = 0.0f;

        for (int e = 0; e < E; e++) {
            mx = p[e] > mx ? p[e] : mx;
        }
        for (int e = 0; e < E; e++) {
            p[e] = expf(p[e] - mx);
            sum += p[e];
        }
        for (int e = 0; e < E; e++) {
            p[e] /= sum;
        }
        for (int j = 0; j < k; j++) {          /* k passes of argmax */
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j && !taken; i++) {
                    taken = w->sel[t * k + i] == e;
                }
                if (!taken && (best < 0 || p[e] > p[best])) {
                    best = e;
                }
            }
            w->sel[t * k + j] = best;
            w->selw[t * k + j] = p[best];
            top += p[best];
        }
        if (renorm) {
            for (int j = 0; j < k; j++) {
                w->selw[t * k + j] /= top;
            }
        }
    }
}

static void
pic_ffn_moe(const pic_model *m, const pic_backend *be,
            const pic_layer_weights *lw, pic_ws *w, int nb)
{
    const pic_config *cfg = &m->cfg;
    int H = cfg->hidden, E = cfg->n_experts, k = cfg->n_experts_per_tok;
    int Ie = cfg->moe_intermediate, Is = cfg->shared_intermediate;

    be->matmul(w->rl, w->xn, lw->router, nb, H, E, 0);
    pic_moe_route(cfg, w, nb);

    /* shared expert first (reads xn only), gated by sigmoid(w_sg · x) */
    if (Is > 0 && lw->shared.gate.data != NULL) {
        be->matmul_w(w->fg, w->xn, &lw->shared.gate, nb, 0);
        be->matmul_w(w->fu, w->xn, &lw->shared.up, nb, 0);
        pic_swiglu(be, w->fg, w->fu, (size_t) nb * Is);
        be->matmul_w(w->ed, w->fu, &lw->shared.down, nb, 0);
        for (int t = 0; t < nb; t++) {
            float sg = 1.0f;
            if (lw->shared_gate != NULL) {
                float d = 0.0f;
                for (int i = 0; i < H; i++) {
                    d += w->xn[(size_t) t * H + i] * lw->shared_gate[i];
                }
                sg = 1.0f / (1.0f + expf(-d));
            }
            float *xr = w->x + (size_t) t * H, *er = w->ed + (size_t) t * H;
            for (int i = 0; i < H; i++) {
                xr[i] += sg * er[i];
            }
        }
    }

    /* routed experts: gather their rows, GEMM, scatter-add weighted */
    for (int e = 0; e < E; e++) {
        int cnt = 0;
        for (int t = 0; t < nb; t++) {
            for (int j = 0; j < k; j++) {
                if (w->sel[t * k + j] == e) {
                    w->rows[cnt] = t;
                    w->roww[cnt++] = w->selw[t * k + j];
                }
            }
        }
        if (cnt == 0) {
            continue;
        }
        const pic_expert_weights *ex = &lw->experts[e];
        for (int r = 0; r < cnt; r++) {
            memcpy(w->xe + (size_t) r * H, w->xn + (size_t) w->rows[r] * H,
                   H * sizeof(float));
        }
        be->matmul_w(w->eg, w->xe, &ex->gate, cnt, 0);
        be->matmul_w(w->eu, w->xe, &ex->up, cnt, 0);
        pic_swiglu(be, w->eg, w->eu, (size_t) cnt * Ie);
        be->matmul_w(w->ed, w->eu, &ex->down, cnt, 0);
        for (int r = 0; r < cnt; r++) {
            float *xr = w->x + (size_t) w->rows[r] * H, *er = w->ed + (size_t) r * H;
            for (int i = 0; i < H; i++) {
                xr[i] += w->roww[r] * er[i];
            }
        }
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
