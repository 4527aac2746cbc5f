/*
 * blend.c — selective recompute of cached segments (blend.h).
 */
#include "blend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "forward.h"
#include "pic_time.h"

/* A cached token's K/V deviation at the selection layer, for sorting. */
typedef struct {
    float dev;
    int   pos;
} pic_blend_dev;

/* Larger deviation first; equal ones by position (a stable choice). */
static int
pic_blend_cmp(const void *a, const void *b)
{
    const pic_blend_dev *x = a, *y = b;

    if (x->dev != y->dev) {
        return x->dev < y->dev ? 1 : -1;
    }
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* 1 if sg's entry covers every token of its segment and fits m. */
static int
pic_blend_usable(const pic_model *m, const pic_asm_segment *sg)
{
    const pic_entry *e = sg->entry;
    char             err[160];

    return e != NULL && e->i0 == 0 && e->i1 == sg->n
           && pic_entry_check(e, m, sg->tokens, sg->n, err, sizeof(err)) == 0;
}

/* Squared L2 distance of rows [a, a+n) of cache c (Hkv, cap, width) from
 * the copy c0 (Hkv, n, width), added into dev (n). */
static void
pic_blend_deviation(const pic_state *s, const float *c, int width, int a, int n,
                    const float *c0, float *dev)
{
    #pragma omp parallel for schedule(static) if (n > 256)
    for (int t = 0; t < n; t++) {
        double d = 0.0;

        for (int j = 0; j < s->Hkv; j++) {
            const float *x = c + ((size_t) j * s->cap + a + t) * width;
            const float *x0 = c0 + ((size_t) j * n + t) * width;

            for (int i = 0; i < width; i++) {
                d += (double) (x[i] - x0[i]) * (x[i] - x0[i]);
            }
        }
        dev[t] += (float) d;
    }
}

/* Rows [a, a+n) of cache c (Hkv, cap, width) into out (Hkv, n, width). */
static void
pic_blend_copy(const pic_state *s, const float *c, int width, int a, int n, float *out)
{
    for (int j = 0; j < s->Hkv; j++) {
        memcpy(out + (size_t) j * n * width, c + ((size_t) j * s->cap + a) * width,
               (size_t) n * width * sizeof(float));
    }
}

int
pic_assemble_blend(const pic_model *m, const pic_backend *be, pic_state *s,
                   const pic_asm_segment *segs, int n_seg, double ratio,
                   float *logits, pic_assemble_stats *st, char *err, size_t errlen)
{
    const pic_config  *c = &m->cfg;
    const int          L1 = PIC_BLEND_SELECT_LAYER;
    pic_assemble_stats local;
    int               *tok = NULL, *cached = NULL, *pick = NULL, *sel = NULL;
    float             *ko = NULL, *vo = NULL, *dev = NULL;
    pic_blend_dev     *order = NULL;
    pic_run           *runs = NULL;
    int                total = 0, a = 0, rc = -1, n_cand = 0, n_runs = 0, n_sel = 0;
    double             t0 = pic_now_s(), t;

    if (st == NULL) {
        st = &local;
    }
    memset(st, 0, sizeof(*st));
    if (be == NULL) {
        be = pic_backend_cpu();
    }
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_type[l] != PIC_LAYER_FULL) {
            snprintf(err, errlen, "%s: selective recompute needs an all-attention model "
                     "(layer %d is recurrent)", __func__, l);
            return -1;
        }
    }
    if (logits == NULL || !(ratio >= 0 && ratio <= 1) || c->n_layers <= L1) {
        snprintf(err, errlen, "%s: needs logits, a ratio in [0, 1] and more than %d "
                 "layers", __func__, L1 + 1);
        return -1;
    }
    if (pic_assemble_total(segs, n_seg, &total, err, errlen) != 0) {
        return -1;
    }
    st->n_tokens = total;
    pic_state_reset(s);
    if (pic_state_reserve(s, total, err, errlen) != 0) {
        return -1;
    }
    tok = malloc((size_t) total * sizeof(int));
    cached = calloc((size_t) total, sizeof(int));
    if (tok == NULL || cached == NULL) {
        goto oom;
    }

    /* 1. place every usable entry; the first segment's at 0 is the exact
     * prefix, the selection starts after it */
    t = pic_now_s();
    for (int i = 0, off = 0; i < n_seg; off += segs[i].n, i++) {
        memcpy(tok + off, segs[i].tokens, (size_t) segs[i].n * sizeof(int));
        if (!pic_blend_usable(m, &segs[i])) {
            st->n_rejected += segs[i].entry != NULL;
            continue;
        }
        if (pic_assemble_place_kv(m, s, segs[i].entry, off) != 0) {
            goto oom;
        }
        st->n_composed++;
        if (i == 0) {
            a = segs[0].n;
            st->n_prefix = a;
        } else {
            for (int k = 0; k < segs[i].n; k++) {
                cached[off + k] = 1;
            }
        }
    }
    st->t_kv = pic_now_s() - t;
    if (a == total) {               /* all prefix: the last token again */
        a = total - 1;
        st->n_prefix = a;
    }
    cached[total - 1] = 0;          /* its logits are wanted */

    /* 2. layers [0, L1] in full context over [a, total), the cached K/V of
     * layer L1 kept to measure how far each token moved */
    int n = total - a;
    /* K rows of hd, V rows of vd (0: none — MLA's latent row is its K row) */
    ko = malloc((size_t) s->Hkv * n * s->hd * sizeof(float));
    vo = s->vd > 0 ? malloc((size_t) s->Hkv * n * s->vd * sizeof(float)) : NULL;
    dev = calloc((size_t) n, sizeof(float));
    order = malloc((size_t) n * sizeof(*order));
    pick = calloc((size_t) n, sizeof(int));
    if (ko == NULL || (s->vd > 0 && vo == NULL) || dev == NULL || order == NULL
        || pick == NULL) {
        goto oom;
    }
    pic_blend_copy(s, s->kc[L1], s->hd, a, n, ko);
    if (vo != NULL) {
        pic_blend_copy(s, s->vc[L1], s->vd, a, n, vo);
    }
    t = pic_now_s();
    {
        pic_run           run = { .p0 = a, .n = n };
        pic_forward_hooks upto = { .layers = L1 + 1 };

        s->pos = a;
        if (pic_forward_runs(m, be, s, tok + a, &run, 1, NULL, &upto, err, errlen) != 0) {
            goto done;
        }
    }
    st->n_partial = n;
    pic_blend_deviation(s, s->kc[L1], s->hd, a, n, ko, dev);
    if (vo != NULL) {
        pic_blend_deviation(s, s->vc[L1], s->vd, a, n, vo, dev);
    }

    /* 3. the chosen: every uncached token, and the ratio of the cached ones
     * that moved most */
    for (int k = 0; k < n; k++) {
        if (cached[a + k]) {
            order[n_cand++] = (pic_blend_dev) { dev[k], k };
        } else {
            pick[k] = 1;
        }
    }
    qsort(order, (size_t) n_cand, sizeof(*order), pic_blend_cmp);
    for (int k = 0, want = (int) ceil(ratio * n_cand - 1e-9); k < want && k < n_cand; k++) {
        pick[order[k].pos] = 1;
    }
    sel = malloc((size_t) n * sizeof(int));
    runs = malloc((size_t) n * sizeof(*runs));
    if (sel == NULL || runs == NULL) {
        goto oom;
    }
    for (int k = 0; k < n; k++) {
        if (!pick[k]) {
            continue;
        }
        if (n_runs > 0 && runs[n_runs - 1].p0 + runs[n_runs - 1].n == a + k) {
            runs[n_runs - 1].n++;
        } else {
            runs[n_runs++] = (pic_run) { .p0 = a + k, .n = 1 };
        }
        sel[n_sel++] = tok[a + k];
    }

    /* 4. the chosen through every layer (the last token among them) */
    s->pos = a;
    if (pic_forward_runs(m, be, s, sel, runs, n_runs, logits, NULL, err, errlen) != 0) {
        goto done;
    }
    st->t_forward = pic_now_s() - t;
    st->n_recomputed = n_sel;
    st->n_runs = n_runs + 1;
    st->n_reused = total - n_sel;
    s->pos = total;
    rc = 0;
    goto done;

oom:
    snprintf(err, errlen, "%s: out of memory", __func__);
done:
    free(tok);
    free(cached);
    free(pick);
    free(sel);
    free(ko);
    free(vo);
    free(dev);
    free(order);
    free(runs);
    st->t_total = pic_now_s() - t0;
    return rc;
}
