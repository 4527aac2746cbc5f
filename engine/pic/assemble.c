/*
 * assemble.c — PIC assembly (assemble.h, DESIGN.md §3.3): compose cached
 * interiors into the running state, place their re-rotated K/V, recompute
 * the seam runs through all layers.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "assemble.h"
#include "forward.h"
#include "pic_time.h"
#include "transition.h"

const char *
pic_mode_name(pic_mode mode)
{
    switch (mode) {
    case PIC_MODE_FULL:   return "full";
    case PIC_MODE_PREFIX: return "prefix";
    case PIC_MODE_NAIVE:  return "naive";
    case PIC_MODE_PIC:    return "pic";
    }
    return "?";
}

int
pic_mode_parse(const char *name, pic_mode *mode)
{
    static const pic_mode all[] = { PIC_MODE_FULL, PIC_MODE_PREFIX,
                                    PIC_MODE_NAIVE, PIC_MODE_PIC };

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (!strcmp(name, pic_mode_name(all[i]))) {
            *mode = all[i];
            return 0;
        }
    }
    return -1;
}

/* --- the two state operations --- */

int
pic_assemble_compose_layer(const pic_entry *e, pic_state *s, int l, int use_T,
                           double *flops)
{
    const pic_entry_layer *el = &e->layer[l];
    const pic_transition  *tr = pic_transition_of(e->layer_type[l]);
    int                    Hv = e->Hv, dk = e->dk, dv = e->dv, bad = 0;
    size_t                 es = pic_dtype_size(e->dtype);

    if (tr == NULL || s->S[l] == NULL) {
        return 0;
    }
    size_t nh = tr->head_floats(dk);                           /* T_h floats */
    use_T = use_T && e->has_T;
    /* one head per thread: S_h ← T_h S_h + S|0_h in the layer's family
     * (OpenBLAS itself runs single-threaded inside the engine) */
    #pragma omp parallel for schedule(static) reduction(|:bad) if (Hv > 1)
    for (int h = 0; h < Hv; h++) {
        float *S = s->S[l] + (size_t) h * dk * dv;              /* (dk, dv) */
        float *Y = malloc((size_t) dk * dv * sizeof(float));    /* (dk, dv) S|0, then T S + S|0 */
        float *Tf = NULL;                                       /* (nh) */
        const void *s0 = (const unsigned char *) el->S + (size_t) h * dk * dv * es;

        if (Y == NULL) {
            bad |= 1;
            continue;
        }
        pic_entry_load_f32(Y, s0, (size_t) dk * dv, e->dtype);
        if (!use_T) {
            for (size_t i = 0; i < (size_t) dk * dv; i++) {
                S[i] += Y[i];
            }
            free(Y);
            continue;
        }
        const void *t = (const unsigned char *) el->T + (size_t) h * nh * es;
        if (e->dtype == PIC_DTYPE_F32) {
            Tf = (float *) t;
        } else if ((Tf = malloc(nh * sizeof(float))) != NULL) {
            pic_entry_load_f32(Tf, t, nh, e->dtype);
        } else {
            bad |= 1;
            free(Y);
            continue;
        }
        tr->apply(Tf, S, Y, dk, dv);
        memcpy(S, Y, (size_t) dk * dv * sizeof(float));
        if (e->dtype != PIC_DTYPE_F32) {
            free(Tf);
        }
        free(Y);
    }
    if (bad) {
        return -1;
    }
    if (use_T && flops != NULL) {
        *flops += tr->flops(Hv, dk, dv);
    }
    memcpy(s->conv[l], el->conv, (size_t) e->conv_ch * e->conv_k1 * sizeof(float));
    return 0;
}

int
pic_assemble_compose(pic_state *s, const pic_entry *e, int use_T, double *flops)
{
    for (int l = 0; l < e->n_layers; l++) {
        if (pic_assemble_compose_layer(e, s, l, use_T, flops) != 0) {
            return -1;
        }
    }
    return 0;
}

/* x (n, hd) rows ← R(delta) x: partial NeoX RoPE on the first r->dim
 * dims, the same arithmetic as the backend's rope op at position delta for
 * every row (one angle table instead of one per row). */
static void
pic_rerotate(float *x, int n, int hd, const pic_rope *r, int delta)
{
    int   half = r->dim / 2;
    float c[half > 0 ? half : 1], sn[half > 0 ? half : 1];

    for (int i = 0; i < half; i++) {
        double ang = (double) delta * (double) r->inv_freq[i];
        c[i] = (float) cos(ang);
        sn[i] = (float) sin(ang);
    }
    #pragma omp parallel for schedule(static) if (n > 256)
    for (int t = 0; t < n; t++) {
        float *v = x + (size_t) t * hd;
        for (int i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i]        = a * c[i] - b * sn[i];
            v[i + half] = b * c[i] + a * sn[i];
        }
    }
}

int
pic_assemble_place_kv(const pic_model *m, pic_state *s, const pic_entry *e, int off)
{
    const pic_config *c = &m->cfg;
    int               ni = e->i1 - e->i0, hd = e->hd, vd = e->vd;
    size_t            es = pic_dtype_size(e->dtype), rows = (size_t) ni * hd;
    size_t            vrows = (size_t) ni * vd;

    if (ni <= 0) {
        return 0;
    }
    for (int l = 0; l < e->n_layers; l++) {
        if (e->layer_type[l] != PIC_LAYER_FULL) {
            continue;
        }
        for (int j = 0; j < e->Hkv; j++) {
            size_t slot = ((size_t) j * s->cap + off + e->i0) * hd;
            const unsigned char *k = (const unsigned char *) e->layer[l].K + j * rows * es;

            pic_entry_load_f32(s->kc[l] + slot, k, rows, e->dtype);
            if (vd > 0) {
                const unsigned char *v = (const unsigned char *) e->layer[l].V
                                         + j * vrows * es;

                pic_entry_load_f32(s->vc[l] + ((size_t) j * s->cap + off + e->i0) * vd, v,
                                   vrows, e->dtype);
            }
            if (off != 0) {
                /* p_global − p_local = off for every row; MLA: the latent
                 * row's first dr dims are k_pe, the only ones that turn */
                pic_rerotate(s->kc[l] + slot, ni, hd, &c->rope, off);
            }
        }
    }
    return 0;
}

/* --- assembly --- */

/* How segment i's entry is used: 0 recompute, 1 compose with T, 2 compose
 * without T (naive, or the exact prefix on an empty state). */
static int
pic_entry_use(const pic_model *m, const pic_asm_segment *sg, pic_mode mode, int off,
              int first, int *rejected)
{
    const pic_entry *e = sg->entry;
    char             err[160];

    if (e == NULL || mode == PIC_MODE_FULL) {
        return 0;
    }
    if (pic_entry_check(e, m, sg->tokens, sg->n, err, sizeof(err)) != 0) {
        (*rejected)++;
        return 0;
    }
    int prefix = !e->has_T && off == 0 && first;
    switch (mode) {
    case PIC_MODE_PREFIX:
        return prefix ? 2 : 0;
    case PIC_MODE_NAIVE:
        return 2;
    case PIC_MODE_PIC:
        if (prefix) {
            return 2;
        }
        if (!e->has_T) {
            (*rejected)++;
            return 0;
        }
        return 1;
    default:
        return 0;
    }
}

/* An interior composed into the state before run `run` (n_runs: after
 * the last run). */
typedef struct {
    const pic_entry *e;
    int              off;
    int              use_T;
    int              run;
} pic_gap;

typedef struct {
    pic_state     *s;
    const pic_gap *gaps;
    int            n_gaps;
    double         t_compose;
    double         flops;
    int            failed;
} pic_prep_ctx;

/* pic_run_prep_fn: compose, in this layer, the interiors before run. */
static void
pic_assemble_prep(void *user, int layer, int run)
{
    pic_prep_ctx *P = user;
    double        t = pic_now_s();

    for (int g = 0; g < P->n_gaps; g++) {
        if (P->gaps[g].run == run
            && pic_assemble_compose_layer(P->gaps[g].e, P->s, layer, P->gaps[g].use_T,
                                          &P->flops) != 0) {
            P->failed = 1;
        }
    }
    P->t_compose += pic_now_s() - t;
}

int
pic_assemble_total(const pic_asm_segment *segs, int n_seg, int *total, char *err,
                   size_t errlen)
{
    *total = 0;
    if (segs == NULL || n_seg <= 0) {
        snprintf(err, errlen, "assembly: no segments");
        return -1;
    }
    for (int i = 0; i < n_seg; i++) {
        if (segs[i].tokens == NULL || segs[i].n <= 0 || segs[i].n > (1 << 28) - *total) {
            snprintf(err, errlen, "assembly: segment %d is empty or too long", i);
            return -1;
        }
        *total += segs[i].n;
    }
    return 0;
}

int
pic_assemble(const pic_model *m, const pic_backend *be, pic_state *s,
             const pic_asm_segment *segs, int n_seg, pic_mode mode,
             float *logits, pic_assemble_stats *st, char *err, size_t errlen)
{
    pic_state_reset(s);
    return pic_assemble_at(m, be, s, 0, segs, n_seg, mode, logits, st, err, errlen);
}

int
pic_assemble_at(const pic_model *m, const pic_backend *be, pic_state *s, int p0,
                const pic_asm_segment *segs, int n_seg, pic_mode mode,
                float *logits, pic_assemble_stats *st, char *err, size_t errlen)
{
    pic_assemble_stats local;
    int               *tok = NULL, *use = NULL, total = 0, rc = -1;
    int                n_runs = 0, n_gaps = 0, nt = 0;
    pic_run           *runs = NULL;
    pic_gap           *gaps = NULL;
    double             t0 = pic_now_s(), t;

    if (st == NULL) {
        st = &local;
    }
    memset(st, 0, sizeof(*st));
    if (be == NULL) {
        be = pic_backend_cpu();
    }
    if (pic_assemble_total(segs, n_seg, &total, err, errlen) != 0) {
        return -1;
    }
    st->n_tokens = total;
    if (p0 < 0 || s->pos != p0 || total > (1 << 28) - p0) {
        snprintf(err, errlen, "%s: the state is at %d, not %d", __func__, s->pos, p0);
        return -1;
    }
    if (pic_state_reserve(s, p0 + total, err, errlen) != 0) {
        return -1;
    }
    tok = malloc((size_t) total * sizeof(int));
    use = malloc((size_t) n_seg * sizeof(int));
    runs = malloc((size_t) (n_seg + 1) * sizeof(*runs));
    gaps = malloc((size_t) n_seg * sizeof(*gaps));
    if (tok == NULL || use == NULL || runs == NULL || gaps == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        goto done;
    }

    /* 1. how each entry is used; the last prompt token must be recomputed
     * when logits are wanted */
    for (int i = 0, off = p0; i < n_seg; off += segs[i].n, i++) {
        use[i] = pic_entry_use(m, &segs[i], mode, off, i == 0, &st->n_rejected);
    }
    if (logits != NULL && use[n_seg - 1] != 0
        && segs[n_seg - 1].entry->i1 == segs[n_seg - 1].n) {
        use[n_seg - 1] = 0;
    }

    /* 2. the plan: runs [H1] [T1 H2] … [Tn Q] and the interiors between */
    int open = 0;                       /* a run is collecting tokens */
    for (int i = 0, off = p0; i < n_seg; off += segs[i].n, i++) {
        const pic_asm_segment *sg = &segs[i];
        const pic_entry   *e = sg->entry;
        int                a = use[i] ? e->i0 : sg->n;     /* recomputed head */

        if (a > 0) {
            if (!open) {
                runs[n_runs].p0 = off;
                runs[n_runs].n = 0;
                n_runs++;
                open = 1;
            }
            memcpy(tok + nt, sg->tokens, (size_t) a * sizeof(int));
            nt += a;
            runs[n_runs - 1].n += a;
        }
        if (!use[i]) {
            continue;
        }
        gaps[n_gaps].e = e;
        gaps[n_gaps].off = off;
        gaps[n_gaps].use_T = use[i] == 1;
        gaps[n_gaps].run = n_runs;      /* before the next run to open */
        n_gaps++;
        open = 0;
        st->n_reused += e->i1 - e->i0;
        st->n_prefix += (off == 0 && !e->has_T) ? e->i1 - e->i0 : 0;
        st->n_composed++;
        if (e->i1 < sg->n) {            /* the tail seam opens the next run */
            runs[n_runs].p0 = off + e->i1;
            runs[n_runs].n = sg->n - e->i1;
            memcpy(tok + nt, sg->tokens + e->i1, (size_t) (sg->n - e->i1) * sizeof(int));
            nt += sg->n - e->i1;
            n_runs++;
            open = 1;
        }
    }
    st->n_recomputed = nt;
    st->n_runs = n_runs;

    /* 3. pre-fill the attention KV with every cached interior, re-rotated */
    t = pic_now_s();
    for (int g = 0; g < n_gaps; g++) {
        if (pic_assemble_place_kv(m, s, gaps[g].e, gaps[g].off) != 0) {
            snprintf(err, errlen, "%s: out of memory", __func__);
            goto done;
        }
    }
    st->t_kv = pic_now_s() - t;

    /* 4. the runs, all layers, composing each interior before the run
     * that follows it; then any interiors after the last run */
    pic_prep_ctx P = { .s = s, .gaps = gaps, .n_gaps = n_gaps };
    if (n_runs > 0) {
        t = pic_now_s();
        pic_forward_hooks hooks = { .user = &P, .on_run = pic_assemble_prep };
        if (pic_forward_runs(m, be, s, tok, runs, n_runs, logits, &hooks, err,
                             errlen) != 0) {
            goto done;
        }
        st->t_forward = pic_now_s() - t - P.t_compose;
    }
    if (P.failed) {
        snprintf(err, errlen, "%s: out of memory composing", __func__);
        goto done;
    }
    t = pic_now_s();
    for (int g = 0; g < n_gaps; g++) {
        if (gaps[g].run == n_runs
            && pic_assemble_compose(s, gaps[g].e, gaps[g].use_T, &P.flops) != 0) {
            snprintf(err, errlen, "%s: out of memory composing", __func__);
            goto done;
        }
    }
    st->t_compose = P.t_compose + (pic_now_s() - t);
    st->compose_flops = P.flops;
    s->pos = p0 + total;
    rc = 0;

done:
    free(tok);
    free(use);
    free(runs);
    free(gaps);
    st->t_total = pic_now_s() - t0;
    return rc;
}
