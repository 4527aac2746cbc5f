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
 * Exact first (DESIGN §3.4; ctx->prefix set, the default --cache-mode
 * exact).  The prompt's ids are looked up in the prefix tree first: the
 * request resumes from the deepest checkpoint c at or below the depth d it
 * shares (KV [0, c) and the checkpoint copied in).  Segments that start at
 * or after d are then resolved as above, but a segment seen for the first
 * time outside any exact prefix is recomputed exactly (not built): an
 * append-only agent loop never composes its fresh tool results.  Entries
 * that existed before this request are composed (pool hits, pulls from
 * holders), and so is one built here on the segment's second sighting
 * outside an exact prefix (content that moves: PIC territory).  (Building
 * first sightings' entries in the background instead was measured to cost
 * an agent loop 2.4x its TTFT for entries it never uses: bench/agent.py.)
 * Except for documents the client delimited (PIC_SEG_FLAG_DOC: declared
 * reusable) and content before the prompt's newest message
 * (PIC_SEG_FLAG_AHEAD: a tool schema, an earlier tool result, a system
 * prompt's part): recomputed exactly all the same, they are queued when
 * the job is DONE (pic_plan_defer) and the keeper builds their entries
 * after it (pic_plan_door), documents at once, the others only while no
 * request is queued or running, so their second sighting is a pool hit,
 * not a build on its path.  The newest message (an agent loop's fresh
 * tool result) is never queued: the next turn serves it from its exact
 * prefix, and its entry would be work no request uses.
 * A gateway worker's fresh prefill is composed when its segment lies past
 * the first composed one (waited for: the state there is PIC's anyway,
 * DESIGN §3.5); before it, it is pooled for the requests after it, not
 * used (the gateway sends no worker there under exact first).
 * Everything from c to the first composed interior's segment (x; the
 * prompt's end when none) is recomputed exactly, a scheduler step per
 * PIC_UBATCH tokens, cut at the planned checkpoint positions; assembly
 * continues from x (pic_assemble_at).  [0, x) then goes into the tree with
 * the captured checkpoints, and when x is the prompt's end the prompt's
 * final state too (a tail checkpoint at n, where the next turn of an agent
 * loop resumes; pic_plan_keep_session adds the generated tokens' state when
 * the request ends).
 *
 * Token ids are those of the whole rendered prompt in every mode (DESIGN
 * §3.4): the text is tokenized once and each token belongs to the segment
 * its first byte lies in; an entry whose ids differ (the cut fell inside a
 * token elsewhere) fails pic_entry_check and is not used.
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

#include <pthread.h>

#include "assemble.h"
#include "budget.h"
#include "entry.h"
#include "model.h"
#include "pic_segment.h"
#include "pool.h"
#include "prefix_cache.h"
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
    uint32_t        flags;              /* PIC_SEG_FLAG_DOC: a client-delimited document;
                                         * PIC_SEG_FLAG_AHEAD: content before the newest
                                         * message (pic_render_ahead) */
    char            key[PIC_KEY_HEX + 1];
    int            *ids;                /* (n_ids) this segment's share of the prompt's ids */
    int             n_ids;
    int             start;              /* position of ids[0] in the prompt */
    pic_entry      *entry;              /* reference held, or NULL */
    pic_seg_source  source;
    int             remote;             /* pic_remote_state, atomic */
    int             remote_cached;      /* from a holder's pool (counts as cached),
                                         * not a worker's fresh prefill */
    void           *frame;              /* (frame_len) set before ARRIVED */
    size_t          frame_len;
} pic_job_segment;

#define PIC_PLAN_PHASES 7              /* tokenize, restore, resolve, exact, assemble, insert, snap */

typedef struct pic_plan_job {
    pic_job_segment *segs;                     /* (n_segs) prompt order, contiguous */
    int       n_segs;
    int       tokenized;
    int       next;                     /* next segment to resolve */
    uint64_t  scope;                    /* prefix tree scope (hash of the cache scope) */
    int      *ids;                      /* (n_prompt) the whole prompt's ids */
    /* exact first (ctx->prefix) */
    int       phase;                    /* 0 restore, 1 resolve, 2 exact run, 3 assemble */
    int       depth, resume;            /* shared with the tree; resumed at */
    int       xend;                     /* end of the exactly computed part */
    int       xseg;                     /* first segment assembled from xend */
    int       pos;                      /* exact run: next position */
    int      *cuts;                     /* (n_cut) checkpoint positions in (resume, xend] */
    float   **snap;                     /* (n_cut) states captured there */
    const pic_prefix_cache *snap_pc;    /* the tree snap's buffers go back to */
    int       n_cut, next_cut;
    int       n_fwd;                    /* forward calls of the exact run */
    int       exact_all;                /* [0, n_prompt) computed exactly */
    int       defer_insert;             /* set by the caller: DONE leaves the
                                         * exact part's insertion to
                                         * pic_plan_take_insert */
    struct pic_plan_insert *insert;     /* that insertion, until taken */
    /* results, valid once the step reports DONE */
    int       n_prompt;                 /* Σ n_ids = the whole text's ids */
    int       n_cached;                 /* exact + composed from entries older than the request */
    int       n_exact;                  /* resumed from the prefix tree or a leading whole entry */
    int       n_pic;                    /* composed from entries (any origin): the approximation */
    int       n_hits, n_peer, n_built, n_rejected, n_remote_failed;
    pic_assemble_stats as;
    int64_t   t_ns[PIC_PLAN_PHASES];    /* time per phase (pic_plan_phase_name) */
    int64_t   t_cpu_ns[PIC_PLAN_PHASES]; /* the worker thread's CPU time per phase */
    int64_t   c0;                       /* thread CPU clock at the last phase mark */
} pic_plan_job;

#define PIC_PLAN_DOOR 4096                 /* doorkeeper slots */
#define PIC_PLAN_LATER 64                  /* client documents awaiting the keeper */

/* A client document recomputed exactly on its first sighting, whose seam
 * entry the keeper builds after the request. */
typedef struct {
    char     key[PIC_KEY_HEX + 1];
    size_t   len;                       /* bytes, with the key */
    int     *ids;                       /* (n_ids) its tokens, owned */
    int      n_ids;
    uint32_t flags;                     /* its PIC_SEG_FLAG_DOC / _AHEAD */
} pic_plan_later;

/* Segments seen once outside any exact prefix (a key's second sighting
 * builds its entry), and the entries of client-delimited documents
 * (PIC_SEG_FLAG_DOC) to build off the request path: such a document is
 * recomputed exactly on its first sighting like any other, then queued
 * here; the keeper (pic_plan_idle) builds and pools its seam entry, so its
 * second sighting is a pool hit instead of a build on the request's path.
 * model NULL: nothing is queued.  Zero it, then pthread_mutex_init(mu). */
typedef struct {
    pthread_mutex_t  mu;
    uint64_t         slot[PIC_PLAN_DOOR];
    const pic_model *model;             /* the keeper's builds; NULL: none */
    pic_plan_later   later[PIC_PLAN_LATER];     /* ring: later_head, later_n */
    int              later_head, later_n;
    int              building;          /* the keeper is building one now */
    uint64_t         later_queued, later_built, later_dropped;
} pic_plan_door;

/* Counters of d's deferred builds (under its lock). */
typedef struct {
    uint64_t queued, built, dropped;    /* dropped: queue full, or the build failed */
    int      pending;                   /* queued and not yet built or dropped */
} pic_plan_later_stats;

/* Reads d's deferred-build counters (d NULL: zeros). */
void pic_plan_door_stats(pic_plan_door *d, pic_plan_later_stats *out);

/* Frees the ids d still queues (NULL is fine; the keeper has stopped). */
void pic_plan_door_free(pic_plan_door *d);

typedef struct {
    pic_mode          mode;             /* PIC_MODE_FULL never reaches here */
    pic_entry_opts    seam;             /* PIC segments: w, dtype */
    pic_entry_opts    seam_doc;         /* those of them that are client-delimited
                                         * documents (PIC_SEG_FLAG_DOC) */
    int               recompute;        /* 1: PIC segments other than documents are
                                         * recomputed (the calibration met its bound
                                         * at no width: served wrong otherwise) */
    int               recompute_doc;    /* 1: documents are */
    pic_pool         *pool;
    pic_registry     *reg;              /* NULL: no index */
    pic_prefix_cache *prefix;           /* NULL: no exact-first (pic-only modes) */
    pic_plan_door    *door;             /* with prefix: the doorkeeper */
    pic_cache_budget *budget;           /* one byte budget over pool and tree; NULL: each
                                         * keeps its own */
    int               max_ctx;          /* a peer's prefill holds fewer tokens; 0: any */
} pic_plan_ctx;

enum {
    PIC_PLAN_ERROR = -1,
    PIC_PLAN_MORE = 0,                  /* did some work; call again */
    PIC_PLAN_DONE = 1,                  /* s holds the prompt, logits filled */
    PIC_PLAN_WAIT = 2,                  /* blocked on a pending remote entry */
};

/* Why a job failed.  The engine's HTTP layer (engine/serve/server.c) maps a
 * reason to a status and an OpenAI error; nothing below it speaks HTTP. */
typedef enum {
    PIC_JOB_ERROR_NONE = 0,
    PIC_JOB_ERROR_INPUT,        /* the prompt or its segments are malformed */
    PIC_JOB_ERROR_TOO_LONG,     /* the prompt leaves no room in the context */
    PIC_JOB_ERROR_UNAVAILABLE,  /* this engine cannot run the job (no tokenizer, no plans) */
    PIC_JOB_ERROR_TIMEOUT,      /* the job ran past its deadline */
    PIC_JOB_ERROR_INTERNAL,     /* out of memory, a failed forward or build */
} pic_job_error;

/* The seam entry options of a segment with flags (PIC_SEG_FLAG_*) under
 * ctx: seam_doc for a client-delimited document, else seam. */
const pic_entry_opts *pic_plan_seam(const pic_plan_ctx *ctx, uint32_t flags);

/* 1 when segments with flags are recomputed under ctx rather than served
 * from entries (recompute / recompute_doc). */
int pic_plan_recomputes(const pic_plan_ctx *ctx, uint32_t flags);

/* Name of phase i of pic_plan_job.t_ns ("tokenize", "restore", …). */
const char *pic_plan_phase_name(int i);

/* Allocate a job for n segments (zeroed); NULL on ENOMEM. */
pic_plan_job *pic_plan_job_new(int n);

/* Drop the job's entries, ids and frames (NULL is fine). */
void pic_plan_job_free(pic_plan_job *pj);

/* Advance the job by one unit of work (see above); text is the rendered
 * prompt the segments cut.  On DONE, s holds the prompt's state (reset
 * first) and logits (V) the last token's.  ERROR: err, with *why the
 * reason (PIC_JOB_ERROR_INPUT for text the segments do not fit). */
int pic_plan_step(const pic_plan_ctx *ctx, pic_plan_job *pj, const pic_model *m,
                  const pic_tokenizer *tok, const char *text, size_t text_len,
                  pic_state *s, float *logits, pic_job_error *why, char *err,
                  size_t errlen);

/* The exact part's insertion into the prefix tree (blocks, checkpoints
 * captured in the run, the prompt's end state), held back by a job with
 * defer_insert so that it runs after the first token went out. */
typedef struct pic_plan_insert pic_plan_insert;

/* After DONE of a job with defer_insert: its insertion, now the caller's
 * (NULL: none, or it ran already for want of memory). */
pic_plan_insert *pic_plan_take_insert(pic_plan_job *pj);

/* Run ins (NULL: nothing) on s, the state its job's DONE left, before any
 * other forward on s, then free it; the time goes to the "insert" line of
 * PIC_TRACE. */
void pic_plan_run_insert(const pic_plan_ctx *ctx, pic_plan_insert *ins, const pic_state *s);

/* After DONE: the segments of pj whose entry ctx's pool holds now (hits,
 * builds and peers' entries the pool admitted and kept), as the
 * X-PIC-Held hex of pic_plan.h; malloc'ed, NULL on ENOMEM. */
char *pic_plan_held(const pic_plan_ctx *ctx, const pic_plan_job *pj);

/* After DONE, and after pic_plan_held (whose answer must not depend on
 * the keeper's pace): queue the client documents (PIC_SEG_FLAG_DOC) and
 * the content ahead of the newest message (PIC_SEG_FLAG_AHEAD) that pj
 * recomputed exactly on their first sighting (no entry, none from a peer,
 * worth an entry, not pooled) for the keeper to build (pic_plan_idle).
 * Nothing without ctx->door->model or outside exact first; a full queue
 * drops the rest (counted; the door still builds them on a second
 * sighting). */
void pic_plan_defer(const pic_plan_ctx *ctx, pic_plan_job *pj, const pic_model *m);

/* Session continuation: after the request of pj ended with s holding
 * tokens (n: the prompt's ids then the generated ids fed since) exactly,
 * keep s as a checkpoint at n under the prompt's scope (nothing when the
 * prompt was not computed exactly or there is no tree). */
void pic_plan_keep_session(const pic_plan_ctx *ctx, const pic_plan_job *pj,
                           const pic_state *s, const int *tokens, int n);

/* Cache upkeep off the request path (the scheduler's keeper thread): the
 * prefix tree's checkpoint re-solve when it is due, else one deferred
 * entry (pic_plan_door; one that is not a client document only when not
 * busy), else, when not busy (no request
 * queued or running), one more pre-faulted checkpoint buffer
 * (pic_prefix_cache_prefault).  1 if it did work, 0 if nothing was
 * pending. */
int pic_plan_idle(const pic_plan_ctx *ctx, int busy);

/* Worker side of a remote prefill (POST /v1/pic/prefill): resolve the
 * next segment (pool hit or build: whole entry for PREFIX, seam entry for
 * PIC) and hand it out.  MORE: *index = the segment, *e = a new reference
 * or NULL (not buildable: the caller reports it failed); DONE: every
 * segment was handed out; ERROR: err, *why. */
int pic_plan_build_step(const pic_plan_ctx *ctx, pic_plan_job *pj, const pic_model *m,
                        const pic_tokenizer *tok, const char *text, size_t text_len,
                        int *index, pic_entry **e, pic_job_error *why, char *err,
                        size_t errlen);

#endif /* PIC_PLAN_EXEC_H */
