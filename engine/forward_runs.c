/*
 * forward_runs.c — layer-major forward over scattered runs (forward_runs.h).
 * The layer bodies follow forward.c step for step (MODEL.md §3–§5) on its
 * workspace (pic_ws_get); only the row bookkeeping differs: positions per
 * row, per-run conv and recurrence in the linear layers with the caller's
 * prep in between, and one attention call over every row.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward_impl.h"
#include "forward_runs.h"

/* A piece of a run inside one pass: rows [row, row+n) at positions p0.. */
typedef struct {
    int run, first, p0, n, row;
} pic_piece;

/* --- Gated DeltaNet over the pieces (MODEL.md §3) --- */

static void
pic_runs_gdn(const pic_model *m, const pic_backend *be, pic_state *s, int l,
             pic_ws *w, int nb, const pic_piece *pc, int np,
             pic_run_prep_fn prep, void *user)
{
    const pic_config        *c = &m->cfg;
    const pic_layer_weights *lw = &m->w.layers[l];
    int H = c->hidden, Hk = c->lin_k_heads, Hv = c->lin_v_heads;
    int dk = c->lin_k_dim, dv = c->lin_v_dim, kd = Hk * dk, vd = Hv * dv;
    int C = 2 * kd + vd;

    /* 1. projections over every row */
    be->matmul(w->qkv, w->xn, lw->in_qkv, nb, H, C, 0);
    be->matmul(w->z, w->xn, lw->in_z, nb, H, vd, 0);
    be->matmul(w->beta, w->xn, lw->in_b, nb, H, Hv, 0);
    be->matmul(w->g, w->xn, lw->in_a, nb, H, Hv, 0);

    /* 3. gates in fp32 (row-wise, state-free) */
    be->sigmoid(w->beta, (size_t) nb * Hv);
    for (int t = 0; t < nb; t++) {
        for (int h = 0; h < Hv; h++) {
            w->g[t * Hv + h] += lw->dt_bias[h];
        }
    }
    be->softplus(w->g, (size_t) nb * Hv);
    for (int t = 0; t < nb; t++) {
        for (int h = 0; h < Hv; h++) {
            w->g[t * Hv + h] *= -expf(lw->A_log[h]);
        }
    }

    /* 2, 5–7. per piece: the caller's prep, conv with the carried window,
     * SiLU, q̂/k̂, the recurrence */
    for (int p = 0; p < np; p++) {
        int    r0 = pc[p].row, n = pc[p].n;
        float *cv = w->cv + (size_t) r0 * C;

        if (pc[p].first && prep != NULL) {
            prep(user, l, pc[p].run);
        }
        be->conv1d(cv, w->qkv + (size_t) r0 * C, s->conv[l], lw->conv_w, n, C,
                   c->conv_kernel);
        be->silu(cv, (size_t) n * C);
        for (int t = 0; t < n; t++) {
            be->l2norm(cv + (size_t) t * C, Hk, dk, dk, 1e-6f, 1.0f / sqrtf((float) dk));
            be->l2norm(cv + (size_t) t * C + kd, Hk, dk, dk, 1e-6f, 1.0f);
        }
        pic_gdn_args a = {
            .n = n, .Hk = Hk, .Hv = Hv, .dk = dk, .ds = dv,
            .q = cv, .ldq = C, .k = cv + kd, .ldk = C,
            .v = cv + 2 * kd, .ldv = C, .g = w->g + (size_t) r0 * Hv,
            .beta = w->beta + (size_t) r0 * Hv, .S = s->S[l],
            .o = w->lo + (size_t) r0 * vd, .ldo = vd,
        };
        /* seam pieces are short (2w tokens) but the states are large
         * (Hv·dk·dv): the chunked form reads and writes S once per piece
         * instead of once per token, so it starts at 8 tokens here */
        if (n < 8) {
            be->gdn_recurrent(&a);
        } else {
            be->gdn_chunked(&a);
        }
    }

    /* 8–9. gated RMSNorm, out_proj + residual over every row */
    be->rmsnorm(w->lo, w->lo, lw->gdn_norm, nb * Hv, dv, c->rms_eps, 0);
    be->silu(w->z, (size_t) nb * vd);
    for (size_t i = 0; i < (size_t) nb * vd; i++) {
        w->lo[i] *= w->z[i];
    }
    be->matmul(w->x, w->lo, lw->out_proj, nb, vd, H, 1);
}

/* --- gated full attention over the rows (MODEL.md §4) --- */

static void
pic_runs_attn(const pic_model *m, const pic_backend *be, pic_state *s, int l,
              pic_ws *w, int nb)
{
    const pic_config        *c = &m->cfg;
    const pic_layer_weights *lw = &m->w.layers[l];
    int H = c->hidden, Hq = c->n_q_heads, Hkv = c->n_kv_heads, hd = c->head_dim;
    int qd = Hq * hd, kvd = Hkv * hd;

    be->matmul(w->qp, w->xn, lw->wq, nb, H, 2 * qd, 0);
    be->matmul(w->k, w->xn, lw->wk, nb, H, kvd, 0);
    be->matmul(w->v, w->xn, lw->wv, nb, H, kvd, 0);
    for (int t = 0; t < nb; t++) {
        for (int h = 0; h < Hq; h++) {
            const float *src = w->qp + (size_t) t * 2 * qd + (size_t) h * 2 * hd;
            memcpy(w->q + (size_t) t * qd + (size_t) h * hd, src, hd * sizeof(float));
            memcpy(w->gate + (size_t) t * qd + (size_t) h * hd, src + hd,
                   hd * sizeof(float));
        }
    }
    be->rmsnorm(w->q, w->q, lw->q_norm, nb * Hq, hd, c->rms_eps, 1);
    be->rmsnorm(w->k, w->k, lw->k_norm, nb * Hkv, hd, c->rms_eps, 1);
    be->rope(w->q, qd, w->pos, nb, Hq, hd, c->rotary_dim, c->rope_theta);
    be->rope(w->k, kvd, w->pos, nb, Hkv, hd, c->rotary_dim, c->rope_theta);

    /* every row's K/V at its position; causality by position keeps later
     * runs invisible to earlier ones */
    for (int t = 0; t < nb; t++) {
        for (int h = 0; h < Hkv; h++) {
            size_t slot = ((size_t) h * s->cap + w->pos[t]) * hd;
            memcpy(s->kc[l] + slot, w->k + (size_t) t * kvd + (size_t) h * hd,
                   hd * sizeof(float));
            memcpy(s->vc[l] + slot, w->v + (size_t) t * kvd + (size_t) h * hd,
                   hd * sizeof(float));
        }
    }
    be->attention(w->ao, w->q, w->pos, nb, Hq, Hkv, hd, s->kc[l], s->vc[l],
                  s->cap, w->pos[nb - 1] + 1);

    be->sigmoid(w->gate, (size_t) nb * qd);
    for (size_t i = 0; i < (size_t) nb * qd; i++) {
        w->ao[i] *= w->gate[i];
    }
    be->matmul(w->x, w->ao, lw->wo, nb, qd, H, 1);
}

/* --- the passes --- */

int
pic_forward_runs(const pic_model *m, const pic_backend *be, pic_state *s,
                 const int *tokens, const pic_run *runs, int n_runs,
                 pic_run_prep_fn prep, void *user, float *logits, char *err,
                 size_t errlen)
{
    const pic_config *c = &m->cfg;
    const float      *lm = m->w.lm_head ? m->w.lm_head : m->w.embed;
    int               H = c->hidden, V = c->vocab, total = 0, end = 0;
    pic_piece        *pc = NULL;
    pic_ws            w;
    int               rc = -1;

    if (be == NULL) {
        be = pic_backend_cpu();
    }
    if (runs == NULL || n_runs <= 0 || tokens == NULL || s->n_layers != c->n_layers) {
        snprintf(err, errlen, "%s: no runs, or a state of another model", __func__);
        return -1;
    }
    for (int r = 0; r < n_runs; r++) {
        if (runs[r].n <= 0 || runs[r].p0 < end || runs[r].n > INT32_MAX - runs[r].p0
            || runs[r].n > INT32_MAX - total) {
            snprintf(err, errlen, "%s: run %d (p0=%d, n=%d) out of order", __func__, r,
                     runs[r].p0, runs[r].n);
            return -1;
        }
        end = runs[r].p0 + runs[r].n;
        total += runs[r].n;
    }
    for (int t = 0; t < total; t++) {
        if (tokens[t] < 0 || tokens[t] >= V) {
            snprintf(err, errlen, "%s: token id %d at %d outside [0, %d)", __func__,
                     tokens[t], t, V);
            return -1;
        }
    }
    if (pic_state_reserve(s, end, err, errlen) != 0) {
        return -1;
    }
    int cap = total < PIC_UBATCH ? total : PIC_UBATCH;
    pc = malloc((size_t) (n_runs + total / PIC_UBATCH + 2) * sizeof(*pc));
    if (pc == NULL || pic_ws_get(c, s, cap, &w) != 0) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        free(pc);
        return -1;
    }

    /* cut the runs into passes of at most PIC_UBATCH rows */
    int r = 0, done_in_run = 0, tok0 = 0;
    while (r < n_runs) {
        int np = 0, nb = 0, ptok = tok0;

        while (r < n_runs && nb < cap) {
            int take = runs[r].n - done_in_run;
            take = take < cap - nb ? take : cap - nb;
            pc[np].run = r;
            pc[np].first = done_in_run == 0;
            pc[np].p0 = runs[r].p0 + done_in_run;
            pc[np].n = take;
            pc[np].row = nb;
            np++;
            nb += take;
            tok0 += take;
            done_in_run += take;
            if (done_in_run == runs[r].n) {
                r++;
                done_in_run = 0;
            }
        }
        for (int p = 0; p < np; p++) {
            for (int t = 0; t < pc[p].n; t++) {
                int row = pc[p].row + t;
                w.pos[row] = pc[p].p0 + t;
                memcpy(w.x + (size_t) row * H,
                       m->w.embed + (size_t) tokens[ptok + row] * H, H * sizeof(float));
            }
        }
        for (int l = 0; l < c->n_layers; l++) {
            const pic_layer_weights *lw = &m->w.layers[l];

            be->rmsnorm(w.xn, w.x, lw->input_norm, nb, H, c->rms_eps, 1);
            if (c->layer_type[l] == PIC_LAYER_LINEAR) {
                pic_runs_gdn(m, be, s, l, &w, nb, pc, np, prep, user);
            } else {
                pic_runs_attn(m, be, s, l, &w, nb);
            }
            be->rmsnorm(w.xn, w.x, lw->post_norm, nb, H, c->rms_eps, 1);
            pic_ffn_forward(m, be, l, &w, nb);
        }
        if (r == n_runs && logits != NULL) {
            be->rmsnorm(w.xn, w.x + (size_t) (nb - 1) * H, m->w.final_norm, 1, H,
                        c->rms_eps, 1);
            be->matmul(logits, w.xn, lm, 1, H, V, 0);
        }
    }
    s->pos = end;
    rc = 0;
    free(pc);
    return rc;
}
