/*
 * forward_runs.h — one layer-major forward over several runs of tokens at
 * scattered positions (the recompute runs of PIC assembly, DESIGN §3.3).
 *
 * Runs r = 0..n_runs−1 hold tokens at positions p0_r..p0_r+n_r−1, in
 * increasing position order, with gaps between them that the caller filled
 * beforehand (attention KV placed in the cache, linear states composed).
 * Every layer processes all runs' rows at once — one GEMM per projection
 * over Σ n_r rows instead of one pass over the weights per run — except the
 * linear layers' conv and recurrence, which go run by run: before run r,
 * prep(user, layer, r) lets the caller advance s->S[layer] and seed
 * s->conv[layer] over the gap (S ← T S + S|0, conv tail).  Attention rows
 * attend causally by global position, so run r sees every run before it
 * and every cached interior below it.
 *
 * The result equals calling prep for every layer and then pic_forward on
 * each run in turn (tests/unit/test_assemble.c checks it against full
 * recompute).  Rows beyond PIC_UBATCH go in several layer-major passes.
 *
 * This mirrors forward.c's layers (the workspace, pic_ws_get and
 * pic_ffn_forward of forward_impl.h are shared).  forward.c's pass over
 * spans (pic_forward_layers) does not fit as is: it convolves every span
 * before any recurrence, while a run's conv window must be seeded from the
 * interior before it, and it calls attention once per span, which re-reads
 * the whole cached context for every seam run instead of once per 64-row
 * tile of all runs.
 */
#ifndef PIC_FORWARD_RUNS_H
#define PIC_FORWARD_RUNS_H

#include <stddef.h>

#include "forward.h"

typedef struct {
    int p0;                         /* first position */
    int n;                          /* tokens */
} pic_run;

/* Called before run r enters linear layer `layer` (for the run's first
 * pass only); may modify s->S[layer] and s->conv[layer]. */
typedef void (*pic_run_prep_fn)(void *user, int layer, int run);

/* Forward tokens (Σ n_r, runs laid end to end) through every layer as
 * above; s->pos becomes the last run's end; logits (V) of the last token
 * when logits != NULL.  be NULL: CPU.  -1 + err on bad runs, token ids or
 * OOM (the state is then unspecified). */
int pic_forward_runs(const pic_model *m, const pic_backend *be, pic_state *s,
                     const int *tokens, const pic_run *runs, int n_runs,
                     pic_run_prep_fn prep, void *user, float *logits, char *err,
                     size_t errlen);

#endif /* PIC_FORWARD_RUNS_H */
