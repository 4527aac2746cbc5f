/*
 * assemble.c — PIC assembly (assemble.h, DESIGN.md §3.3): compose cached
 * interiors into the running state, place their re-rotated K/V, recompute
 * the seam runs through all layers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "assemble.h"
#include "forward.h"

static double
pic_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

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
pic_assemble_compose(const pic_model *m, const pic_backend *be, pic_state *s,
                     const pic_entry *e, int use_T, double *flops)
{
    int    Hv = e->Hv, dk = e->dk, dv = e->dv;
    size_t es = pic_dtype_size(e->dtype);
    float *X = malloc((size_t) dv * dk * sizeof(float));    /* (dv, dk) Sᵀ */
    float *Y = malloc((size_t) dv * dk * sizeof(float));    /* (dv, dk) S|0ᵀ, then (T S)ᵀ + S|0ᵀ */
    float *Tf = malloc((size_t) dk * dk * sizeof(float));   /* (dk, dk) one head's T */
    float *S0 = malloc((size_t) dk * dv * sizeof(float));   /* (dk, dv) one head's S|0 */

    if (be == NULL) {
        be = pic_backend_cpu();
    }
    if (X == NULL || Y == NULL || Tf == NULL || S0 == NULL) {
        free(X); free(Y); free(Tf); free(S0);
        return -1;
    }
    use_T = use_T && e->has_T;
    for (int l = 0; l < e->n_layers; l++) {
        const pic_entry_layer *el = &e->layer[l];
        if (e->layer_type[l] != PIC_LAYER_LINEAR) {
            continue;
        }
        for (int h = 0; h < Hv; h++) {
            float      *S = s->S[l] + (size_t) h * dk * dv;     /* (dk, dv) */
            const void *s0 = (const unsigned char *) el->S + (size_t) h * dk * dv * es;

            pic_entry_load_f32(S0, s0, (size_t) dk * dv, e->dtype);
            if (!use_T) {
                for (size_t i = 0; i < (size_t) dk * dv; i++) {
                    S[i] += S0[i];
                }
                continue;
            }
            const void *t = (const unsigned char *) el->T + (size_t) h * dk * dk * es;
            pic_entry_load_f32(Tf, t, (size_t) dk * dk, e->dtype);
            for (int i = 0; i < dk; i++) {
                for (int j = 0; j < dv; j++) {
                    X[(size_t) j * dk + i] = S[(size_t) i * dv + j];
                    Y[(size_t) j * dk + i] = S0[(size_t) i * dv + j];
                }
            }
            /* Y(dv,dk) += X(dv,dk) · T(dk,dk)ᵀ  ⇔  Yᵀ = T S + S|0 */
            be->matmul(Y, X, Tf, dv, dk, dk, 1);
            for (int i = 0; i < dk; i++) {
                for (int j = 0; j < dv; j++) {
                    S[(size_t) i * dv + j] = Y[(size_t) j * dk + i];
                }
            }
        }
        if (use_T && flops != NULL) {
            *flops += 2.0 * Hv * dk * (double) dk * dv;
        }
        memcpy(s->conv[l], el->conv, (size_t) e->conv_ch * e->conv_k1 * sizeof(float));
    }
    free(X); free(Y); free(Tf); free(S0);
    return 0;
}

int
pic_assemble_place_kv(const pic_model *m, const pic_backend *be, pic_state *s,
                      const pic_entry *e, int off)
{
    const pic_config *c = &m->cfg;
    int               ni = e->i1 - e->i0, hd = e->hd;
    size_t            es = pic_dtype_size(e->dtype), rows = (size_t) ni * hd;
    int              *pos = NULL;

    if (be == NULL) {
        be = pic_backend_cpu();
    }
    if (ni <= 0) {
        return 0;
    }
    if (off != 0) {
        pos = malloc((size_t) ni * sizeof(int));
        if (pos == NULL) {
            return -1;
        }
        for (int t = 0; t < ni; t++) {
            pos[t] = off;       /* p_global − p_local, the same for every row */
        }
    }
    for (int l = 0; l < e->n_layers; l++) {
        if (e->layer_type[l] != PIC_LAYER_FULL) {
            continue;
        }
        for (int j = 0; j < e->Hkv; j++) {
            size_t slot = ((size_t) j * s->cap + off + e->i0) * hd;
            const unsigned char *k = (const unsigned char *) e->layer[l].K + j * rows * es;
            const unsigned char *v = (const unsigned char *) e->layer[l].V + j * rows * es;

            pic_entry_load_f32(s->kc[l] + slot, k, rows, e->dtype);
            pic_entry_load_f32(s->vc[l] + slot, v, rows, e->dtype);
            if (off != 0) {
                be->rope(s->kc[l] + slot, hd, pos, ni, 1, hd, c->rotary_dim,
                         c->rope_theta);
            }
        }
    }
    free(pos);
    return 0;
}

/* --- assembly --- */

/* How segment i's entry is used: 0 recompute, 1 compose with T, 2 compose
 * without T (naive, or the exact prefix on an empty state). */
static int
pic_entry_use(const pic_model *m, const pic_segment *sg, pic_mode mode, int off,
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

int
pic_assemble(const pic_model *m, const pic_backend *be, pic_state *s,
             const pic_segment *segs, int n_seg, pic_mode mode,
             float *logits, pic_assemble_stats *st, char *err, size_t errlen)
{
    pic_assemble_stats local;
    int               *run = NULL, rn = 0, run_p0 = 0, total = 0, rc = -1;
    int               *use = NULL;
    double             t0 = pic_now(), t;

    if (st == NULL) {
        st = &local;
    }
    memset(st, 0, sizeof(*st));
    if (be == NULL) {
        be = pic_backend_cpu();
    }
    if (segs == NULL || n_seg <= 0) {
        snprintf(err, errlen, "%s: no segments", __func__);
        return -1;
    }
    for (int i = 0; i < n_seg; i++) {
        if (segs[i].tokens == NULL || segs[i].n <= 0 || segs[i].n > (1 << 28) - total) {
            snprintf(err, errlen, "%s: segment %d is empty or too long", __func__, i);
            return -1;
        }
        total += segs[i].n;
    }
    st->n_tokens = total;
    pic_state_reset(s);
    if (pic_state_reserve(s, total, err, errlen) != 0) {
        return -1;
    }
    run = malloc((size_t) total * sizeof(int));
    use = malloc((size_t) n_seg * sizeof(int));
    if (run == NULL || use == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        goto done;
    }

    /* decide each entry's use; the last prompt token must be recomputed
     * when logits are wanted */
    for (int i = 0, off = 0; i < n_seg; off += segs[i].n, i++) {
        use[i] = pic_entry_use(m, &segs[i], mode, off, i == 0, &st->n_rejected);
        if (use[i] != 0) {
            const pic_entry *e = segs[i].entry;
            int              pre = use[i] == 2 && off == 0 && i == 0 && !e->has_T;
            st->n_reused += e->i1 - e->i0;
            st->n_prefix += pre ? e->i1 - e->i0 : 0;
        }
    }
    if (logits != NULL && use[n_seg - 1] != 0
        && segs[n_seg - 1].entry->i1 == segs[n_seg - 1].n) {
        const pic_entry *e = segs[n_seg - 1].entry;
        st->n_reused -= e->i1 - e->i0;
        st->n_prefix -= (n_seg == 1 && !e->has_T) ? e->i1 - e->i0 : 0;
        use[n_seg - 1] = 0;
    }

    for (int i = 0, off = 0; i < n_seg; off += segs[i].n, i++) {
        const pic_segment *sg = &segs[i];
        const pic_entry   *e = sg->entry;

        if (use[i] == 0) {
            memcpy(run + rn, sg->tokens, (size_t) sg->n * sizeof(int));
            rn += sg->n;
            continue;
        }
        /* [.. H_i]: the run up to and including this segment's head seam */
        memcpy(run + rn, sg->tokens, (size_t) e->i0 * sizeof(int));
        rn += e->i0;
        if (rn > 0) {
            t = pic_now();
            if (pic_forward(m, be, s, run, rn, run_p0, PIC_LOGITS_NONE, NULL,
                            NULL, err, errlen) != 0) {
                goto done;
            }
            st->t_forward += pic_now() - t;
            st->n_recomputed += rn;
            st->n_runs++;
        }
        t = pic_now();
        if (pic_assemble_place_kv(m, be, s, e, off) != 0) {
            snprintf(err, errlen, "%s: out of memory", __func__);
            goto done;
        }
        st->t_kv += pic_now() - t;
        t = pic_now();
        if (pic_assemble_compose(m, be, s, e, use[i] == 1, &st->compose_flops) != 0) {
            snprintf(err, errlen, "%s: out of memory", __func__);
            goto done;
        }
        st->t_compose += pic_now() - t;
        st->n_composed++;
        s->pos = off + e->i1;
        /* the tail seam opens the next run */
        rn = sg->n - e->i1;
        memcpy(run, sg->tokens + e->i1, (size_t) rn * sizeof(int));
        run_p0 = off + e->i1;
    }
    if (rn > 0) {
        t = pic_now();
        if (pic_forward(m, be, s, run, rn, run_p0,
                        logits != NULL ? PIC_LOGITS_LAST : PIC_LOGITS_NONE,
                        logits, NULL, err, errlen) != 0) {
            goto done;
        }
        st->t_forward += pic_now() - t;
        st->n_recomputed += rn;
        st->n_runs++;
    }
    s->pos = total;
    rc = 0;

done:
    free(run);
    free(use);
    st->t_total = pic_now() - t0;
    return rc;
}
