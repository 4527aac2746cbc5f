/*
 * prefix_cache.h — exact prefix reuse with sparse recurrent checkpoints
 * (DESIGN.md §3.4).
 *
 * A token-prefix tree of 64-token blocks: every node holds its block's
 * tokens and the attention K/V of those positions (post-norm, RoPE'd, as
 * in pic_state); a few nodes also hold a checkpoint — every linear layer's
 * S and conv window at the node's end position.  A request that shares d
 * leading tokens with the tree resumes from the deepest checkpoint
 * c ≤ d (KV [0, c) and the checkpoint's states copied into its run state)
 * and recomputes [c, n) exactly; the result equals a full prefill up to
 * rounding.  Checkpoint positions for the blocks a request adds come from
 * checkpoint_dp.h (balanced at first, then the DP over the observed depths);
 * the prefill is cut at those positions to capture the states.
 *
 * Budget: bytes of all nodes; least recently used leaves go first (a
 * lookup touches its path leaf-first, so ancestors are always more recent
 * than their descendants and the LRU end is a leaf).
 *
 * Thread safety: one mutex; the tree is only locked while walking and
 * copying, never during the forward pass.  Any number of threads may call
 * pic_prefix_cache_prefill at once, each with its own state.
 */
#ifndef PIC_PREFIX_CACHE_H
#define PIC_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint_dp.h"
#include "model.h"
#include "pic_kernels.h"
#include "state.h"

typedef struct {
    size_t        budget;           /* bytes for nodes */
    pic_ckpt_opts ckpt;             /* block (64), M, re-solve period, decay, … */
} pic_prefix_opts;

typedef struct {
    int depth;                      /* tokens shared with the tree (token-level) */
    int resume;                     /* position resumed from (deepest checkpoint <= depth) */
    int recomputed;                 /* n − resume */
    int new_blocks;                 /* blocks added to the tree */
    int new_checkpoints;            /* checkpoints added */
} pic_prefix_result;

typedef struct {
    uint64_t lookups;
    uint64_t hits;                  /* lookups that resumed past 0 */
    uint64_t tokens_reused;         /* Σ resume */
    uint64_t tokens_recomputed;     /* Σ (n − resume) */
    uint64_t tokens_skippable;      /* Σ (depth − resume): shared but recomputed */
    uint64_t insertions;            /* blocks added */
    uint64_t evictions;             /* blocks evicted */
    uint64_t checkpoints;           /* checkpoints held now */
    size_t   blocks;                /* blocks held now */
    size_t   bytes, budget;
} pic_prefix_stats;

typedef struct pic_prefix_cache pic_prefix_cache;

/* New empty cache for model m (kept by pointer); NULL + err on bad options
 * or OOM. */
pic_prefix_cache *pic_prefix_cache_init(const pic_model *m, const pic_prefix_opts *o,
                                        char *err, size_t errlen);

/* Free the cache (NULL is fine). */
void pic_prefix_cache_free(pic_prefix_cache *pc);

/* Prefill tokens (n) into s (reset first) reusing the cache as above, then
 * add the request's full blocks and planned checkpoints; logits (V) of the
 * last token when logits != NULL; r may be NULL.  At least the last token
 * is always recomputed.  be NULL: CPU.  -1 + err on bad input or OOM. */
int pic_prefix_cache_prefill(pic_prefix_cache *pc, const pic_backend *be,
                             pic_state *s, const int *tokens, int n,
                             float *logits, pic_prefix_result *r, char *err,
                             size_t errlen);

/* Depth shared with the tree and the checkpoint a prefill would resume
 * from (no counters, no LRU change, nothing observed). */
void pic_prefix_cache_lookup(pic_prefix_cache *pc, const int *tokens, int n,
                             int *depth, int *resume);

/* Snapshot of the counters. */
void pic_prefix_cache_stats_get(pic_prefix_cache *pc, pic_prefix_stats *st);

#endif /* PIC_PREFIX_CACHE_H */
