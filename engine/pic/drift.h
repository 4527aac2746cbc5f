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

#endif /* PIC_DRIFT_H */
