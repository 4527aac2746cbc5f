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
 * rounding.
 *
 * Checkpoint placement, per edge (DESIGN §3.4's "cache entry" of the
 * sparse-prefix-caching decomposition; "edge" here, "entry" being a PIC
 * segment entry): an edge is a path of the tree between branch points (a
 * chain of blocks each of which has one block child).  Each edge holds at
 * most M block checkpoints.  Every lookup's overlap depth d is observed on
 * the block it ends in (an exponentially weighted count and depth sum per
 * block, so an edge's histogram is the concatenation of its blocks' and
 * survives splits); pic_prefix_cache_maintain re-solves an edge's
 * placement (balanced until the edge has min_history observations, then
 * the exact DP of checkpoint_dp.h over its histogram) every resolve_every
 * observations or when its shape changed, solving without the tree's lock
 * (snapshot, solve, apply if the edge is unchanged).  That re-solve runs off the
 * request path (the server's keeper thread; a re-solve made while the
 * calling thread is marked as serving a request is counted in
 * resolves_in_request, which stays 0).  A request captures the planned
 * positions it recomputes anyway (pic_prefix_cache_cuts), balanced ones in
 * blocks that are new; an edge over M drops its unplanned checkpoints
 * (the closest to the previous one first) at once.
 *
 * Requests end anywhere, not at block multiples: a request's end state (the
 * prompt's, and after decoding the prompt + generated tokens', for session
 * continuation) is kept as a tail node, a partial block under the last full
 * one holding its tokens, their KV and a checkpoint at its end.  Trees are
 * per cache scope (a 64-bit value, 0 = the global one): a request only ever
 * walks its own scope's subtree.
 *
 * Budget: bytes of all nodes; least recently used leaves go first.  A
 * lookup touches its path leaf-first, so ancestors are always more recent
 * than their descendants; the leaves are also kept in a list of their own
 * in the same order, so finding (pic_prefix_cache_oldest) and evicting
 * the least recently used leaf are O(1), not a walk past interior nodes.
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
    pic_ckpt_opts ckpt;             /* block (64), M per edge (4), resolve_every (10),
                                     * min_history (10), decay (0.99) */
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
    uint64_t tail_hits;             /* lookups that resumed at a tail (a request's end) */
    uint64_t hits;                  /* lookups that resumed past 0 */
    uint64_t tokens_reused;         /* Σ resume */
    uint64_t tokens_recomputed;     /* Σ (n − resume) */
    uint64_t tokens_skippable;      /* Σ (depth − resume): shared but recomputed */
    uint64_t insertions;            /* blocks added */
    uint64_t evictions;             /* blocks evicted */
    uint64_t checkpoints;           /* checkpoints held now */
    uint64_t observations;          /* depths observed (lookups that restored) */
    uint64_t resolves;              /* edge placements re-solved (maintain) */
    uint64_t resolves_in_request;   /* ... while the thread served a request: 0 */
    uint64_t resolves_dropped;      /* solved, not applied: the edge changed meanwhile */
    uint64_t trims;                 /* checkpoints dropped to keep M per edge */
    int      ck_per_edge;          /* M */
    uint64_t tails;                 /* tail nodes held now (partial last blocks) */
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

/* As pic_prefix_cache_lookup, in scope's subtree. */
void pic_prefix_cache_lookup_scope(pic_prefix_cache *pc, uint64_t scope, const int *tokens,
                                   int n, int *depth, int *resume);

/* The first half of an exact prefill: reset s, reserve n positions, walk
 * scope's subtree and copy in KV [0, c) and the checkpoint at c, the
 * deepest checkpoint (block or tail) on the shared path ending at or
 * before n − 1; s->pos = c.  *depth = tokens shared, *resume = c.  Counts
 * the lookup and observes the depth for checkpoint placement.  -1 + err on
 * bad input or OOM. */
int pic_prefix_cache_restore(pic_prefix_cache *pc, uint64_t scope, pic_state *s,
                             const int *tokens, int n, int *depth, int *resume,
                             char *err, size_t errlen);

/* Checkpoint positions to capture while recomputing tokens (n) over
 * (from, to] under scope: block ends the edges' placement plans that
 * hold no checkpoint yet, and balanced positions of the edge the blocks
 * past the tree will form; ascending, into pos (room for
 * pic_prefix_cache_max_cuts); returns the count. */
int pic_prefix_cache_cuts(pic_prefix_cache *pc, uint64_t scope, const int *tokens, int n,
                          int from, int to, int *pos);

/* Most positions pic_prefix_cache_cuts writes (2·M). */
int pic_prefix_cache_max_cuts(const pic_prefix_cache *pc);

/* 1 if pic_prefix_cache_maintain has work: resolve_every observations or
 * a change of the tree's shape since it last ran. */
int pic_prefix_cache_due(pic_prefix_cache *pc);

/* Re-solve the placement of every edge that is due (see above), drop the
 * checkpoints an edge holds past M; returns the edges re-solved.  The
 * tree is locked only to snapshot the due edges' histograms and to apply
 * the placements, not while solving: a placement is applied only to an
 * edge that still has the blocks it was solved for (else it counts in
 * resolves_dropped and the edge is due again).  Meant for a thread that
 * serves no request (the keeper). */
int pic_prefix_cache_maintain(pic_prefix_cache *pc);

/* Tests: fn(arg) runs inside every pic_prefix_cache_maintain that has
 * work, after the snapshot and before the solve, without the tree's lock
 * (a slow solve); NULL clears it.  Set it before any maintain runs. */
void pic_prefix_cache_set_solve_hook(pic_prefix_cache *pc, void (*fn)(void *), void *arg);

/* Mark (on = 1) or unmark (0) the calling thread as running a request's
 * step; calls nest.  A maintain on a marked thread counts in
 * resolves_in_request. */
void pic_prefix_cache_mark_request(int on);

/* Edges (paths between branch points) held now and the most block
 * checkpoints any of them holds. */
void pic_prefix_cache_edges(pic_prefix_cache *pc, int *n_edges, int *max_ck);

/* A checkpoint buffer holding s's linear states (S and conv of every
 * linear layer) as they are now; NULL on OOM.  Give it to insert. */
float *pic_prefix_cache_snap(const pic_prefix_cache *pc, const pic_state *s);

/* The same one layer at a time, from inside a forward (on_cut of
 * pic_forward_cuts): pic_prefix_cache_ck_new gives an unfilled buffer
 * (NULL on OOM); snap_layer copies linear layer `layer` of s into it
 * (nothing for an attention layer or a NULL ck).  Once every linear layer
 * wrote it at one position it equals pic_prefix_cache_snap there; give it
 * to insert. */
float *pic_prefix_cache_ck_new(const pic_prefix_cache *pc);

/* Give back a buffer of ck_new / snap that insert did not take (to the
 * stock, or unmapped when it is full); NULL does nothing.  Checkpoint
 * buffers are not malloc's: never free() one. */
void pic_prefix_cache_ck_free(const pic_prefix_cache *pc, float *ck);

/* Fault one more checkpoint buffer into the stock ck_new and snap take
 * from (at most 6 held beyond the byte budget, each a checkpoint's size);
 * 1 if it added one, 0 when the stock is full.  For the keeper, while no
 * request runs. */
int pic_prefix_cache_prefault(pic_prefix_cache *pc);

#define PIC_PREFIX_SPARES 6             /* the stock's size */

/* Checkpoint buffers in that stock now. */
int pic_prefix_cache_spares(pic_prefix_cache *pc);
void pic_prefix_cache_snap_layer(const pic_prefix_cache *pc, const pic_state *s, int layer,
                                 float *ck);

/* The second half: add under scope what s holds exactly for tokens[0, n)
 * (s holds their KV at positions [0, n)): the full blocks not held yet,
 * the checkpoints ck[k] captured at positions cpos[k] <= n (n_ck; each
 * buffer is taken or given back to the stock, NULL entries skipped; a
 * position inside a block becomes a tail node) and, when tail and s->pos
 * == n, s's states as a checkpoint at n (copied last, into a buffer the
 * others gave back where one did).  Then evicts to the budget.  Counts into
 * *new_blocks and *new_checkpoints (either may be NULL); 0. */
int pic_prefix_cache_insert(pic_prefix_cache *pc, uint64_t scope, const pic_state *s,
                            const int *tokens, int n, const int *cpos, float **ck,
                            int n_ck, int tail, int *new_blocks, int *new_checkpoints);

/* Snapshot of the counters. */
void pic_prefix_cache_stats_get(pic_prefix_cache *pc, pic_prefix_stats *st);

/* When the least recently used leaf was last touched (pic_now_ns); 0 when
 * the tree is empty. */
int64_t pic_prefix_cache_oldest(pic_prefix_cache *pc);

/* Bytes held now by part: blocks (tokens + KV, checkpoints aside), block
 * checkpoints, and tails (session ends and checkpoints inside a block,
 * with their KV); walks the tree. */
void pic_prefix_cache_bytes(pic_prefix_cache *pc, size_t *blocks, size_t *checkpoints,
                            size_t *tails);

/* Evict the least recently used leaf (the leaf list's tail: O(1)), or
 * under cost-aware eviction the leaf of smallest priority (O(log n));
 * bytes freed (0: empty). */
size_t pic_prefix_cache_evict_one(pic_prefix_cache *pc);

/* Cost-aware eviction (gds.h) when per_token > 0 (the model's FLOPs per
 * token): a leaf's cost is the tokens a request would recompute without it
 * (back to the checkpoint above it when it holds one, else its own
 * tokens) times per_token, over the shared clock *clock (NULL: the tree's
 * own); per_token 0: LRU again. */
void pic_prefix_cache_set_cost(pic_prefix_cache *pc, double per_token, double *clock);

/* Under cost-aware eviction the priority H of the leaf evict_one would
 * take; INFINITY when empty. */
double pic_prefix_cache_victim_priority(pic_prefix_cache *pc);

/* 1 if the tree's bookkeeping holds: the leaf list holds exactly the nodes
 * without children, least recently used last; the bytes add up (tests). */
int pic_prefix_cache_check(pic_prefix_cache *pc);

#endif /* PIC_PREFIX_CACHE_H */
