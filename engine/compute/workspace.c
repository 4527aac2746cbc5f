/*
 * workspace.c — the forward's micro-batch workspace (forward_impl.h): its
 * layout for nb rows in backend memory and the host staging of index work
 * (positions, token ids, expert lists), grown on demand in the run state.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward_impl.h"

static size_t
pic_align(size_t n)
{
    return (n + 15) & ~(size_t) 15;     /* 64-byte steps */
}

/* Lay the workspace for nb rows (+ lg_rows logits) out at base (NULL: only
 * count); floats. */
static size_t
pic_ws_layout(const pic_config *c, int nb, int lg_rows, float *base, pic_ws *w)
{
    size_t off = 0;
    int    C = pic_config_conv_ch(c);
    int    vd = c->lin_v_heads * c->lin_v_dim;
    int    qd = c->mla ? 0 : c->n_q_heads * c->head_dim;
    int    kvd = c->mla ? 0 : c->n_kv_heads * c->head_dim;
    int    I = c->intermediate > c->shared_intermediate ? c->intermediate
                                                        : c->shared_intermediate;
    int    k = c->n_experts_per_tok > 0 ? c->n_experts_per_tok : 1;

#define PIC_TAKE(field, type, count)                                          \
    do {                                                                      \
        w->field = base ? (type *) (base + off) : NULL;                       \
        off += pic_align((size_t) (count));                                   \
    } while (0)

    /* live through the whole pass: the residual stream, its norm, the
     * positions and ids staged once per pass, the logits, xr (around every
     * block) */
    PIC_TAKE(x, float, (size_t) nb * c->hidden);
    PIC_TAKE(xn, float, (size_t) nb * c->hidden);
    PIC_TAKE(pos, int, nb);
    PIC_TAKE(ids, int, nb);
    PIC_TAKE(lg, float, (size_t) lg_rows * c->vocab);
    PIC_TAKE(xr, float, c->resid_mult != 0.0f && c->resid_mult != 1.0f
                        ? (size_t) nb * c->hidden : 0);
    /* a layer's mixer (GDN, attention, MLA, Mamba2) and its FFN run one
     * after the other, each from xn into x: their scratch shares one region
     * (half the workspace of a Qwen3.5 pass) */
    {
        size_t mix0 = off, mix1;
        size_t mi = (size_t) c->ssm_heads * c->ssm_head_dim;

        PIC_TAKE(qkv, float, (size_t) nb * C);
        PIC_TAKE(cv, float, (size_t) nb * C);
        PIC_TAKE(z, float, (size_t) nb * vd);
        PIC_TAKE(beta, float, (size_t) nb * c->lin_v_heads);
        PIC_TAKE(g, float, (size_t) nb * c->lin_v_heads);
        PIC_TAKE(lo, float, (size_t) nb * vd);
        PIC_TAKE(qp, float, (size_t) nb * 2 * qd);
        PIC_TAKE(q, float, (size_t) nb * qd);
        PIC_TAKE(gate, float, (size_t) nb * qd);
        PIC_TAKE(k, float, (size_t) nb * kvd);
        PIC_TAKE(v, float, (size_t) nb * kvd);
        PIC_TAKE(ao, float, (size_t) nb * qd);
        PIC_TAKE(mqa, float, (size_t) nb * c->q_lora_rank);
        PIC_TAKE(mq, float, c->mla ? (size_t) nb * c->n_q_heads
                                     * (c->qk_rope_dim + c->qk_nope_dim) : 0);
        PIC_TAKE(mlat, float, c->mla ? (size_t) nb * (c->qk_rope_dim + c->kv_lora_rank) : 0);
        PIC_TAKE(mcn, float, (size_t) nb * c->kv_lora_rank);
        PIC_TAKE(mo, float, (size_t) nb * c->n_q_heads * c->v_head_dim);
        PIC_TAKE(mz, float, (size_t) nb * mi);
        PIC_TAKE(mdt, float, (size_t) nb * c->ssm_heads);
        PIC_TAKE(my, float, (size_t) nb * mi);
        mix1 = off;
        off = mix0;
        PIC_TAKE(fg, float, (size_t) nb * I);
        PIC_TAKE(fu, float, (size_t) nb * I);
        PIC_TAKE(rl, float, (size_t) nb * c->n_experts);
        PIC_TAKE(xe, float, c->n_experts ? (size_t) nb * c->hidden : 0);
        PIC_TAKE(eg, float, (size_t) nb * c->moe_intermediate);
        PIC_TAKE(eu, float, (size_t) nb * c->moe_intermediate);
        PIC_TAKE(ed, float, (c->n_experts ? (size_t) nb * c->hidden : 0));
        PIC_TAKE(sel, int, (size_t) nb * k);
        PIC_TAKE(selw, float, (size_t) nb * k);
        PIC_TAKE(rows, int, (size_t) nb * k);
        PIC_TAKE(roww, float, (size_t) nb * k);
        PIC_TAKE(sg, float, nb);
        off = off > mix1 ? off : mix1;
    }
#undef PIC_TAKE
    return off;
}

/* Host staging for nb rows at base (NULL: only count); bytes. */
static size_t
pic_ws_host_layout(const pic_config *c, int nb, char *base, pic_ws *w)
{
    size_t off = 0;
    size_t k = c->n_experts_per_tok > 0 ? (size_t) c->n_experts_per_tok : 1;

#define PIC_HTAKE(field, type, count)                                         \
    do {                                                                      \
        w->field = base ? (type *) (base + off) : NULL;                       \
        off += pic_align((size_t) (count)) * sizeof(float);                   \
    } while (0)

    PIC_HTAKE(h_ids, int, nb);
    PIC_HTAKE(h_pos, int, nb);
    PIC_HTAKE(h_sel, int, nb * k);
    PIC_HTAKE(h_selw, float, nb * k);
    PIC_HTAKE(h_rows, int, nb * k);
    PIC_HTAKE(h_roww, float, nb * k);
    PIC_HTAKE(h_off, int, (size_t) c->n_experts + 1);
#undef PIC_HTAKE
    return off;
}

int
pic_ws_get(const pic_config *cfg, pic_state *s, int nb, int lg_rows, pic_ws *w)
{
    const pic_backend *be = s->be;
    pic_workspace     *b = s->shared != NULL ? s->shared : &s->own;
    size_t             need;

    lg_rows = be->host ? 0 : lg_rows;
    need = pic_ws_layout(cfg, nb, lg_rows, NULL, w);
    if (need > b->ws_cap) {
        float *p = be->mem_alloc(need * sizeof(float));
        if (p == NULL) {
            return -1;
        }
        be->mem_free(b->ws);
        b->ws = p;
        b->ws_cap = need;
    }
    pic_ws_layout(cfg, nb, lg_rows, b->ws, w);
    if (!be->host) {
        size_t hneed = pic_ws_host_layout(cfg, nb, NULL, w);

        if (hneed > b->hws_cap) {
            void *p = malloc(hneed);
            if (p == NULL) {
                return -1;
            }
            free(b->hws);
            b->hws = p;
            b->hws_cap = hneed;
        }
        pic_ws_host_layout(cfg, nb, b->hws, w);
        /* the expert offsets live on the host only */
        return 0;
    }
    w->h_ids = w->ids;
    w->h_pos = w->pos;
    w->h_sel = w->sel;
    w->h_selw = w->selw;
    w->h_rows = w->rows;
    w->h_roww = w->roww;
    w->h_off = b->hws_cap >= ((size_t) cfg->n_experts + 1) * sizeof(int)
               ? b->hws : NULL;
    if (w->h_off == NULL) {
        void *p = malloc(((size_t) cfg->n_experts + 1) * sizeof(int));
        if (p == NULL) {
            return -1;
        }
        free(b->hws);
        b->hws = w->h_off = p;
        b->hws_cap = ((size_t) cfg->n_experts + 1) * sizeof(int);
    }
    return 0;
}

float *
pic_ws_scratch(pic_state *s, size_t n)
{
    pic_workspace *b = s->shared != NULL ? s->shared : &s->own;

    if (n > b->xs_cap) {
        float *p = s->be->mem_alloc(n * sizeof(float));

        if (p == NULL) {
            return NULL;
        }
        s->be->mem_free(b->xs);
        b->xs = p;
        b->xs_cap = n;
    }
    return b->xs;
}

void
pic_ws_put(const pic_backend *be, void *dst, const void *src, size_t bytes)
{
    if (dst != src) {
        be->mem_upload(dst, src, bytes);
    }
}

