/*
 * drift.c — KL of two next-token distributions and greedy continuations
 * (drift.h).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drift.h"
#include "forward.h"
#include "sample.h"

double
pic_drift_kl(const float *ref, const float *x, int V)
{
    double mr = -DBL_MAX, mx = -DBL_MAX, zr = 0.0, zx = 0.0, kl = 0.0;

    for (int i = 0; i < V; i++) {
        mr = fmax(mr, ref[i]);
        mx = fmax(mx, x[i]);
    }
    for (int i = 0; i < V; i++) {
        zr += exp(ref[i] - mr);
        zx += exp(x[i] - mx);
    }
    double lzr = log(zr) + mr, lzx = log(zx) + mx;
    for (int i = 0; i < V; i++) {
        double lp = ref[i] - lzr, lq = x[i] - lzx;
        kl += exp(lp) * (lp - lq);
    }
    return kl > 0 ? kl : 0.0;
}

int
pic_drift_greedy(const pic_model *m, pic_state *s, const float *last, int n, int g,
                 int *out, char *err, size_t errlen)
{
    int    V = m->cfg.vocab;
    float *lg = malloc((size_t) V * sizeof(float));     /* (V) */

    if (lg == NULL) {
        return -1;
    }
    memcpy(lg, last, (size_t) V * sizeof(float));
    for (int t = 0; t < g; t++) {
        out[t] = pic_sample_argmax(lg, V);
        if (t + 1 < g && pic_forward(m, NULL, s, &out[t], 1, n + t, PIC_LOGITS_LAST,
                                     lg, NULL, err, errlen) != 0) {
            free(lg);
            return -1;
        }
    }
    free(lg);
    return 0;
}

int
pic_drift_teacher(const pic_model *m, pic_state *s, const float *last,
                  const float *ref_last, const float *ref_teacher, const int *teacher,
                  int nt, int n, pic_drift_stats *out, char *err, size_t errlen)
{
    int    V = m->cfg.vocab;
    double kl = pic_drift_kl(ref_last, last, V);

    out->kl_sum = kl;
    out->kl_max = kl;
    out->matched = pic_sample_argmax(ref_last, V) == pic_sample_argmax(last, V);
    out->positions = 1 + (nt > 0 ? nt : 0);
    if (nt <= 0) {
        return 0;
    }
    float *tl = malloc((size_t) nt * V * sizeof(float));   /* (nt, V) */
    if (tl == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        return -1;
    }
    if (pic_forward(m, NULL, s, teacher, nt, n, PIC_LOGITS_ALL, tl, NULL, err,
                    errlen) != 0) {
        free(tl);
        return -1;
    }
    for (int t = 0; t < nt; t++) {
        const float *r = ref_teacher + (size_t) t * V, *x = tl + (size_t) t * V;

        kl = pic_drift_kl(r, x, V);
        out->kl_sum += kl;
        out->kl_max = fmax(out->kl_max, kl);
        out->matched += pic_sample_argmax(r, V) == pic_sample_argmax(x, V);
    }
    free(tl);
    return 0;
}
