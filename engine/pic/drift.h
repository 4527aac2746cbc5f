/*
 * drift.h — how far a composed state's predictions are from full
 * recompute's (DESIGN.md §3.3, §5): the KL divergence of two next-token
 * distributions, and a greedy continuation to compare token by token.
 * Measured by `pic-engine calibrate` (calibrate.h) and by pic-lab.
 */
#ifndef PIC_DRIFT_H
#define PIC_DRIFT_H

#include <stddef.h>

#include "model.h"
#include "state.h"

/* KL(softmax(ref) ‖ softmax(x)) of two logit rows ref, x (V), in nats,
 * computed in double; >= 0. */
double pic_drift_kl(const float *ref, const float *x, int V);

/* Greedy decode of g tokens into out (g) from s, which holds a prompt of n
 * tokens whose last logits are last (V): out[0] = argmax(last), each next
 * token fed at position n + t (s advances by g − 1 tokens), on the CPU.
 * -1 + err on OOM or a forward error. */
int pic_drift_greedy(const pic_model *m, pic_state *s, const float *last, int n,
                     int g, int *out, char *err, size_t errlen);

/* Drift over the answer positions of one prompt. */
typedef struct {
    double kl_sum;          /* Σ KL(ref ‖ s) over the positions */
    double kl_max;
    int    matched;         /* positions whose most likely token agrees */
    int    positions;       /* 1 + nt */
} pic_drift_stats;

/* Compare s (a prompt of n tokens, last logits last (V)) with the
 * reference (ref_last (V) and ref_teacher (nt, V): its logits after each of
 * teacher (nt)) at the last prompt position and after each teacher token,
 * fed to s at positions n.. (s advances by nt), into out.  -1 + err on OOM
 * or a forward error. */
int pic_drift_teacher(const pic_model *m, pic_state *s, const float *last,
                      const float *ref_last, const float *ref_teacher,
                      const int *teacher, int nt, int n, pic_drift_stats *out,
                      char *err, size_t errlen);

#endif /* PIC_DRIFT_H */
