/*
 * checkpoint_dp.h — where to keep linear-layer states for exact prefix
 * reuse (DESIGN.md §3.4, the sparse-prefix-caching seed).
 *
 * The prefix cache keeps attention KV for every cached token but the
 * linear-layer states (S, conv) only at M checkpoints per entry, at block
 * multiples (block = 64 tokens).  A request that shares d leading tokens
 * with an entry resumes from the deepest checkpoint c(d) ≤ d and
 * recomputes d − c(d) tokens it could have skipped.  Placement minimises
 * the expected waste
 *
 *     Σ_d p(d) · (d − c(d))
 *
 * over the observed distribution p of overlap depths: an exponentially
 * weighted histogram (each observation multiplies the old weights by
 * `decay` and adds 1), snapshotted every `resolve_every` observations; the
 * optimum for an entry of n tokens is an exact dynamic program over its
 * B = ⌊n/block⌋ block positions, O(M·B log B) by divide and conquer
 * (when fewer than M positions have any expected gain, the rest are
 * filled with balanced ones: an extra checkpoint never raises the waste).  Before `min_history` observations
 * the placement is balanced (evenly spaced); the histogram is snapshotted
 * at min_history observations and every resolve_every after that.
 *
 * Thread safety: a pic_ckpt_dp has its own mutex; observe and plan may be
 * called from any thread.  The pure functions share nothing.
 */
#ifndef PIC_CHECKPOINT_DP_H
#define PIC_CHECKPOINT_DP_H

#include <stddef.h>

typedef struct {
    int    block;           /* checkpoint granularity in tokens (64) */
    int    m;               /* checkpoints per entry (M) */
    int    resolve_every;   /* re-solve after this many observations (10) */
    int    min_history;     /* observations before the DP replaces balanced (10) */
    int    max_tokens;      /* deepest depth tracked; deeper ones are clamped */
    double decay;           /* weight kept per observation, in (0, 1] (0.99) */
} pic_ckpt_opts;

typedef enum {
    PIC_CKPT_BALANCED = 0,  /* round(k·B/M) blocks, k = 1..M */
    PIC_CKPT_BLOCK,         /* every 16 blocks from the start, first M */
    PIC_CKPT_LOG,           /* n, n/2, n/4, … rounded down to blocks */
} pic_ckpt_placement;

typedef struct pic_ckpt_dp pic_ckpt_dp;

/* New placement policy (o copied; zero fields take the defaults above);
 * NULL + err on bad options or OOM. */
pic_ckpt_dp *pic_ckpt_dp_init(const pic_ckpt_opts *o, char *err, size_t errlen);

/* Free (NULL is fine). */
void pic_ckpt_dp_free(pic_ckpt_dp *dp);

/* Record one request's overlap depth (tokens, clamped to [0, max_tokens]);
 * re-snapshots the histogram every resolve_every calls. */
void pic_ckpt_dp_observe(pic_ckpt_dp *dp, int depth);

/* Checkpoint positions (ascending token counts, block multiples in
 * [block, n]) for a new entry of n tokens under the live policy; writes at
 * most M into pos and returns the count. */
int pic_ckpt_dp_plan(pic_ckpt_dp *dp, int n, int *pos);

/* The DP on the live histogram (not the snapshot), whatever the history
 * length; as pic_ckpt_dp_plan. */
int pic_ckpt_dp_solve_now(pic_ckpt_dp *dp, int n, int *pos);

/* Observations so far and re-solves done. */
void pic_ckpt_dp_counts(pic_ckpt_dp *dp, long *observed, long *resolves);

/* --- pure functions --- */

/* Exact optimum: mass[j], mass_d[j] (j = 0..B) are Σ p(d) and Σ p(d)·d over
 * depths d in block j (bin B holds every d ≥ B·block); chooses at most m
 * block indices in 1..B (ascending, into blk) minimising the waste, which
 * it returns (-1 on ENOMEM); *cnt = how many.  O(m·B log B): each row of
 * the DP by divide and conquer (the gain's cross term is supermodular, so
 * the best next checkpoint moves right with the current one). */
double pic_ckpt_solve(const double *mass, const double *mass_d, int B, int block,
                      int m, int *blk, int *cnt);

/* The same optimum by the plain O(m·B²) DP (the oracle of tests and
 * bench); ties may pick other positions of equal waste. */
double pic_ckpt_solve_quadratic(const double *mass, const double *mass_d, int B, int block,
                                int m, int *blk, int *cnt);

/* The waste Σ_j (mass_d[j] − mass[j]·c_j) of checkpoints at block indices
 * blk (ascending, cnt of them). */
double pic_ckpt_waste(const double *mass, const double *mass_d, int B, int block,
                      const int *blk, int cnt);

/* The placement of one entry of B blocks from its histogram (mass, mass_d
 * as pic_ckpt_solve): the DP's optimum, filled up to m with balanced
 * positions (an extra checkpoint never raises the waste); block indices
 * in 1..B, ascending, into blk (room for m); returns the count. */
int pic_ckpt_solve_fill(const double *mass, const double *mass_d, int B, int block, int m,
                        int *blk);

/* A fixed placement for an entry of n tokens: positions (tokens) into pos,
 * at most m, ascending; returns the count. */
int pic_ckpt_place(pic_ckpt_placement how, int block, int m, int n, int *pos);

#endif /* PIC_CHECKPOINT_DP_H */
