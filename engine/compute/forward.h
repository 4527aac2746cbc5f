/*
 * forward.h — the hybrid decoder's forward pass (MODEL.md §3–§5).
 *
 * One entry point runs n tokens at positions p0..p0+n−1 through every
 * layer, advancing a pic_state: GDN layers carry S and the conv window,
 * attention layers write K/V at their positions and attend to every slot
 * below.  Prefill and decode are the same call (decode is n == 1), so
 *   forward(A at 0) ; forward(B at |A|)  ==  forward(A‖B at 0)
 * and a prefill followed by N one-token steps equals one long prefill.
 * Long inputs are processed in micro-batches of PIC_UBATCH tokens (the
 * state carries, so this changes nothing but the peak memory and the
 * speed: every pass converts and packs each weight matrix once for its
 * GEMMs, a fixed ~55 ms a pass on models/mid).
 *
 * Projections are OpenBLAS GEMMs over the batch rows; the GDN prefill is
 * the chunked WY kernel (kernels/pic_kernels.h) and decode the recurrent
 * step.
 *
 * PIC reuse (DESIGN.md §3.2–§3.3).  Nothing here is specific to PIC; the
 * pieces it needs are:
 *  - p0 is explicit: a run may start at any position whose KV slots below
 *    were filled by the caller (cached interiors, K rotated by
 *    R(p_global − p_local) with the backend's rope op at delta positions);
 *  - composition before a run, S ← T_I S + S_I|0 and the conv window seeded
 *    with the interior's conv tail, is done by the caller directly on
 *    pic_state (state.h) for every linear layer: before calling forward, or
 *    with pic_forward_runs inside each linear layer from hooks->on_run, so
 *    that all seam runs share one layer-major pass;
 *  - computing T_I and S_I|0 for a segment interior needs the GDN inputs of
 *    those tokens at every linear layer: hooks->on_gdn receives them (q̂,
 *    k̂, v, g, β, exactly what the recurrence consumes) before the state is
 *    advanced.  Run the backend's gdn_chunked on them with S = I (dk×dk,
 *    ds = dk) and v = NULL to get T, and with S = 0 to get S|0; the conv
 *    tail is the layer's conv window after a forward that ends at the
 *    interior's end.
 */
#ifndef PIC_FORWARD_H
#define PIC_FORWARD_H

#include <stddef.h>

#include "model.h"
#include "pic_kernels.h"
#include "state.h"

/* Tokens per micro-batch.  1024 rather than 512: an agent turn's new
 * tokens (a tool result, ~700) go in one pass instead of 512 + the rest,
 * whose fixed cost per token was 15% above a full pass's (PIC_TRACE: 2.46
 * against 2.82 ms a token at depth 5k); warm_bench models/mid 5090 718,
 * alternated three times: 1.81-1.87 -> 1.74-1.83 s.  The activations of
 * a pass (~148 KB a token on models/mid) are one workspace per scheduler
 * worker (pic_state_share_workspace), not one per slot. */
#define PIC_UBATCH 1024

typedef enum {
    PIC_LOGITS_NONE = 0,            /* no logits (prefill of a prefix) */
    PIC_LOGITS_LAST,                /* (V) for the last token */
    PIC_LOGITS_ALL,                 /* (n, V) for every token */
} pic_logits_mode;

typedef struct {
    void *user;
    /* Linear layer `layer` is about to advance its state over tokens
     * p0..p0+a->n−1 (one micro-batch); a describes them (a->S is the
     * entering state, a->o NULL).  Called once per layer and micro-batch
     * (pic_forward_runs: per run and micro-batch). */
    void (*on_gdn)(void *user, int layer, int p0, const pic_gdn_args *a);
    /* Run `run` (run 0 for pic_forward) is about to enter linear layer
     * `layer`, before its conv, in its first micro-batch; may modify
     * s->S[layer] and s->conv[layer].  NULL: none. */
    void (*on_run)(void *user, int layer, int run);
    /* pic_forward_cuts: linear layer `layer` has advanced s->S[layer] and
     * s->conv[layer] to cut position cuts[cut] (read them, change
     * nothing).  Called once per layer and cut, in position order. */
    void (*on_cut)(void *user, int layer, int cut);
    /* > 0: only layers [0, layers) run (selective recompute's selection
     * pass: the attention layers among them write K/V at the run's
     * positions, the layers above are untouched); no logits may be asked.
     * 0: every layer. */
    int layers;
    /* Mamba2 layer `layer` is about to advance its state over tokens
     * p0..p0+a->n−1 (as on_gdn: a->S the entering state, a->y NULL). */
    void (*on_ssd)(void *user, int layer, int p0, const pic_ssd_args *a);
} pic_forward_hooks;

typedef struct {
    int p0;                         /* first position */
    int n;                          /* tokens */
} pic_run;

/* Run tokens (n) at positions p0.. through the model, advancing s (s->pos
 * becomes p0+n); logits (V) or (n, V) as mode asks.  be NULL: s's backend
 * (s->be; m's weights must be on it, pic_model_to_backend).  hooks
 * may be NULL.  -1 + err on a bad token id, position or allocation; the
 * state is then unspecified (reset it). */
int pic_forward(const pic_model *m, const pic_backend *be, pic_state *s,
                const int *tokens, int n, int p0, pic_logits_mode mode,
                float *logits, const pic_forward_hooks *hooks, char *err,
                size_t errlen);

/* pic_forward with the linear states captured at positions inside the
 * call (exact prefix checkpoints, DESIGN §3.4): cuts[0..n_cuts) increase
 * within (p0, p0+n]; every linear layer calls hooks->on_cut(user, layer,
 * k) when its state stands at cuts[k].  The conv, the recurrence and the
 * GDN chunk grid restart at every cut exactly as in one pic_forward per
 * piece, while projections, FFN and attention run over whole micro-
 * batches: states and logits equal the cut pic_forward calls up to GEMM
 * rounding (not bit for bit: sgemm rounds by row count), and a plain
 * forward that stops at the cut as closely.  hooks->on_run, if set, runs
 * before every piece.  n_cuts 0 is pic_forward.  -1 + err as
 * pic_forward, or on bad cuts (before any work). */
int pic_forward_cuts(const pic_model *m, const pic_backend *be, pic_state *s,
                     const int *tokens, int n, int p0, const int *cuts, int n_cuts,
                     pic_logits_mode mode, float *logits,
                     const pic_forward_hooks *hooks, char *err, size_t errlen);

/* Several runs of one sequence in one layer-major pass (the recompute runs
 * of PIC assembly, DESIGN §3.3): runs[r] holds tokens at p0_r..p0_r+n_r−1
 * (tokens: Σ n_r, runs laid end to end), in increasing position order, the
 * gaps filled by the caller beforehand (KV placed; linear states composed
 * by hooks->on_run(r) inside each linear layer).  Projections and FFN are
 * GEMMs over all runs' rows, conv and recurrence go run by run, attention
 * is causal by position over every run and cached slot.  Equals on_run for
 * every layer then pic_forward per run, up to GEMM rounding and the GDN
 * kernel choice (chunked from 8 tokens).  s->pos becomes the last run's
 * end; logits (V) of the last token when not NULL.  be NULL: s's; hooks
 * may be NULL.  -1 + err on bad runs, token ids or OOM (state unspecified). */
int pic_forward_runs(const pic_model *m, const pic_backend *be, pic_state *s,
                     const int *tokens, const pic_run *runs, int n_runs,
                     float *logits, const pic_forward_hooks *hooks, char *err,
                     size_t errlen);

/* One decode token per sequence: tokens[i] at position states[i]->pos
 * through the model for each of n_seq distinct states (forward_batch.c),
 * advancing each by one; logits (n_seq, V).  Projections and FFN are one
 * GEMM over the n_seq rows (the weights are read once per step), the GDN
 * step and attention run per row on that row's state, so row i equals
 * pic_forward(states[i], &tokens[i], 1, pos_i, PIC_LOGITS_LAST) up to GEMM
 * rounding.  The workspace lives in states[0].  be NULL: the states'.  -1 + err on
 * bad arguments or OOM, before any state advanced (KV may have grown). */
int pic_forward_batch(const pic_model *m, const pic_backend *be,
                      pic_state *const *states, const int *tokens, int n_seq,
                      float *logits, char *err, size_t errlen);

/* Model FLOPs of a forward of n tokens at positions p0.. (projections,
 * attention scores and sums, GDN chunked work, lm_head rows as mode asks):
 * the numerator of the model-FLOP/s figures in bench/forward.py. */
double pic_forward_flops(const pic_config *cfg, int n, int p0,
                         pic_logits_mode mode);

#endif /* PIC_FORWARD_H */
