/*
 * plan_exec.h — a request's prompt, cut into keyed segments, turned into a
 * run state through the public pool (DESIGN.md §3.3, §3.5): the combine
 * node's side of plan execution.
 *
 * The segments come from the gateway's plan (the "pic" field it adds to
 * the request body) or, in standalone mode, from the same shared-core
 * pipeline run by the engine itself (pic_segment_request: per message
 * region, plus client markers).  Each segment is tokenized alone, so a
 * document yields the same ids wherever it sits.
 *
 * Per segment, in prompt order, on the worker thread, one segment per
 * scheduler step (other requests decode in between):
 *   DYNAMIC                  → recomputed at assembly;
 *   PREFIX (index 0)         → whole entry (exact prefix, fp32) from the
 *                              pool, else built now and pooled;
 *   PIC                      → seam entry from the pool, else one fetched
 *                              from a peer (a frame the loop received:
 *                              decoded and checked here), else built now
 *                              and pooled (too short: recomputed).
 * A pooled or received entry that does not fit (other model, other tokens)
 * is dropped and the segment built or recomputed: a request never fails
 * because of a cache entry or a peer.  Then one pic_assemble call in the
 * configured mode leaves an ordinary decode state and the last logits.
 *
 * Remote entries (peers pulled by the loop, workers prefilling cold
 * segments) arrive through the segment's remote_state: the loop sets it to
 * PENDING before submitting the job and to ARRIVED (frame set) or FAILED
 * later; the worker waits (step returns PIC_PLAN_WAIT) only at a segment
 * whose entry is still pending.  Built and fetched entries are announced
 * to the index with pic_registry_post_add.
 */
#ifndef PIC_PLAN_EXEC_H
#define PIC_PLAN_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "assemble.h"
#include "entry.h"
#include "model.h"
#include "pic_segment.h"
#include "pool.h"
#include "registry.h"
#include "state.h"
#include "tokenizer.h"

typedef enum {
    PIC_SRC_RECOMPUTE = 0,      /* no entry: recomputed at assembly */
    PIC_SRC_HIT,                /* from the local pool */
    PIC_SRC_PEER,               /* received from a peer (holder or worker) */
    PIC_SRC_BUILT,              /* built here for this request */
} pic_seg_source;

typedef enum {
    PIC_REMOTE_NONE = 0,
    PIC_REMOTE_PENDING,         /* a peer is computing / sending it */
    PIC_REMOTE_ARRIVED,         /* frame holds the bytes */
    PIC_REMOTE_FAILED,          /* error, timeout, bad frame: compute here */
} pic_remote_state;

typedef struct {
    size_t          offset, len;        /* bytes of the rendered prompt */
    pic_seg_kind    kind;
    char            key[PIC_KEY_HEX + 1];
    int            *ids;                /* (n_ids) tokenized alone */
    int             n_ids;
    pic_entry      *entry;              /* reference held, or NULL */
    pic_seg_source  source;
    int             remote;             /* pic_remote_state, atomic */
    int             remote_cached;      /* from a holder's pool (counts as cached),
                                         * not a worker's fresh prefill */
    void           *frame;              /* (frame_len) set before ARRIVED */
    size_t          frame_len;
} pic_job_segment;

typedef struct pic_plan_job {
    pic_job_segment *segs;                     /* (n_segs) prompt order, contiguous */
    int       n_segs;
    int       tokenized;
    int       next;                     /* next segment to resolve */
    /* results, valid once the step reports DONE */
    int       n_prompt;                 /* Σ n_ids */
    int       n_cached;                 /* tokens whose state came from pooled/peer entries */
    int       n_hits, n_peer, n_built, n_rejected, n_remote_failed;
    pic_assemble_stats as;
} pic_plan_job;

typedef struct {
    pic_mode        mode;               /* PIC_MODE_FULL never reaches here */
    pic_entry_opts  seam;               /* PIC segments: w, dtype */
    pic_pool       *pool;
    pic_registry   *reg;                /* NULL: no index */
    int             max_ctx;            /* a peer's prefill holds fewer tokens; 0: any */
} pic_plan_ctx;

enum {
    PIC_PLAN_ERROR = -1,
    PIC_PLAN_MORE = 0,                  /* did some work; call again */
    PIC_PLAN_DONE = 1,                  /* s holds the prompt, logits filled */
    PIC_PLAN_WAIT = 2,                  /* blocked on a pending remote entry */
};

/* Allocate a job for n segments (zeroed); NULL on ENOMEM. */
pic_plan_job *pic_plan_job_new(int n);

/* Drop the job's entries, ids and frames (NULL is fine). */
void pic_plan_job_free(pic_plan_job *pj);

/* Advance the job by one unit of work (see above); text is the rendered
 * prompt the segments cut.  On DONE, s holds the prompt's state (reset
 * first) and logits (V) the last token's.  ERROR: err, with *status the
 * HTTP status to answer (400 bad text, 500 otherwise). */
int pic_plan_step(const pic_plan_ctx *ctx, pic_plan_job *pj, const pic_model *m,
                  const pic_tokenizer *tok, const char *text, size_t text_len,
                  pic_state *s, float *logits, int *status, char *err, size_t errlen);

/* Worker side of a remote prefill (POST /v1/pic/prefill): resolve the
 * next segment (pool hit or build: whole entry for PREFIX, seam entry for
 * PIC) and hand it out.  MORE: *index = the segment, *e = a new reference
 * or NULL (not buildable: the caller reports it failed); DONE: every
 * segment was handed out; ERROR: err, *status. */
int pic_plan_build_step(const pic_plan_ctx *ctx, pic_plan_job *pj, const pic_model *m,
                        const pic_tokenizer *tok, const char *text, size_t text_len,
                        int *index, pic_entry **e, int *status, char *err, size_t errlen);

#endif /* PIC_PLAN_EXEC_H */
