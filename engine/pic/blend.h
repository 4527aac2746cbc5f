/*
 * blend.h — selective recompute (CacheBlend-style) for all-attention
 * models: the alternative to seams for repairing cached segments
 * (DESIGN.md §3.3).
 *
 * Every segment with a whole-segment entry (interior = every token) has its
 * K/V placed, keys re-rotated to the segment's offset.  Layer 0's K/V of a
 * cached token depend only on the token and its position, so they are
 * already exact; above it a cached token attended only inside its segment.
 * One pass through layers [0, select_layer] over every token after the
 * first segment recomputes those layers in full context, and the tokens
 * whose K/V at select_layer moved most (squared L2 over heads, K and V; an
 * MLA model's latent row [k_pe | c_KV]) are chosen: ratio of the cached
 * tokens after the first segment, plus every token without an entry (the
 * question, segments never cached).  The chosen tokens then run through
 * every layer, attending to the placed K/V of the others (fresh below
 * select_layer + 1, cached above).  A cached
 * first segment at position 0 is the exact prefix, never re-chosen.
 *
 * Cost against full recompute of the same tokens, in token-layers:
 * (select_layer + 1) / L for the selection pass plus ratio (the chosen
 * tokens also re-run the layers already fresh).  Recurrent (linear) layers
 * have no per-token state to repair: models with any are refused.
 */
#ifndef PIC_BLEND_H
#define PIC_BLEND_H

#include <stddef.h>

#include "assemble.h"
#include "model.h"
#include "pic_kernels.h"
#include "state.h"

/* The layer whose K/V deviation picks the tokens (CacheBlend's: the second). */
#define PIC_BLEND_SELECT_LAYER 1

/* Assemble segs (n_seg, laid from position 0) into s (reset first) by
 * selective recompute of ratio (0..1) of the cached tokens; logits (V) of
 * the last prompt token (never NULL: the last token is always recomputed).
 * st may be NULL; st->n_recomputed counts the chosen tokens (run through
 * every layer), st->n_partial the selection pass's.  be NULL: CPU.  -1 +
 * err on bad input, a model with linear layers, or OOM. */
int pic_assemble_blend(const pic_model *m, const pic_backend *be, pic_state *s,
                       const pic_asm_segment *segs, int n_seg, double ratio,
                       float *logits, pic_assemble_stats *st, char *err, size_t errlen);

#endif /* PIC_BLEND_H */
