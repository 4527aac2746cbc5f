/*
 * plan_exec.c — segments → entries → assembled state (plan_exec.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "forward.h"
#include "frame.h"
#include "pic_plan.h"
#include "pic_time.h"
#include "plan_exec.h"

/* The exact part's insertion, held back past the first token. */
struct pic_plan_insert {
    uint64_t  scope;
    int      *ids;                      /* (n) the exact part's ids */
    int       n;
    int      *cuts;                     /* (n_cut) taken from the job */
    float   **snap;                     /* (n_cut) taken from the job */
    int       n_cut;
    int       tail;                     /* the end state too: s->pos == n then */
};

static pic_plan_insert *pic_plan_insert_new(pic_plan_job *pj, const pic_state *s, int n);

/* Free ins (NULL is fine), its snapshots not taken by the tree back to pc's stock. */
static void
pic_plan_insert_free(pic_plan_insert *ins, const pic_prefix_cache *pc)
{
    if (ins == NULL) {
        return;
    }
    for (int k = 0; ins->snap != NULL && k < ins->n_cut; k++) {
        pic_prefix_cache_ck_free(pc, ins->snap[k]);
    }
    free(ins->snap);
    free(ins->cuts);
    free(ins->ids);
    free(ins);
}

enum { PIC_PH_TOKENIZE = 0, PIC_PH_RESTORE, PIC_PH_RESOLVE, PIC_PH_EXACT, PIC_PH_ASSEMBLE,
       PIC_PH_INSERT, PIC_PH_SNAP };

const char *
pic_plan_phase_name(int i)
{
    static const char *const name[PIC_PLAN_PHASES] = { "tokenize", "restore", "resolve",
                                                       "exact", "assemble", "insert",
                                                       "snap" };

    return i >= 0 && i < PIC_PLAN_PHASES ? name[i] : "?";
}

/* CPU time of the calling thread in nanoseconds (with one thread, all of
 * a step's work: PIC_TRACE's cpu= figures). */
static int64_t
pic_plan_cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Add the time since *t0 (and the thread's CPU time since pj->c0) to
 * phase ph and restart both clocks. */
static void
pic_plan_clock(pic_plan_job *pj, int ph, int64_t *t0)
{
    int64_t now = pic_now_ns(), cpu = pic_plan_cpu_ns();

    pj->t_ns[ph] += now - *t0;
    pj->t_cpu_ns[ph] += cpu - pj->c0;
    *t0 = now;
    pj->c0 = cpu;
}

pic_plan_job *
pic_plan_job_new(int n)
{
    pic_plan_job *pj = calloc(1, sizeof(*pj));

    if (pj == NULL) {
        return NULL;
    }
    pj->segs = calloc((size_t) (n > 0 ? n : 1), sizeof(pic_job_segment));
    if (pj->segs == NULL) {
        free(pj);
        return NULL;
    }
    pj->n_segs = n;
    return pj;
}

void
pic_plan_job_free(pic_plan_job *pj)
{
    if (pj == NULL) {
        return;
    }
    for (int i = 0; i < pj->n_segs; i++) {
        pic_entry_unref(pj->segs[i].entry);
        free(pj->segs[i].ids);
        free(pj->segs[i].frame);
    }
    for (int k = 0; pj->snap != NULL && k < pj->n_cut; k++) {
        pic_prefix_cache_ck_free(pj->snap_pc, pj->snap[k]);
    }
    pic_plan_insert_free(pj->insert, pj->snap_pc);  /* never taken: its buffers back */
    free(pj->snap);
    free(pj->cuts);
    free(pj->ids);
    free(pj->segs);
    free(pj);
}

/* Tokenize the whole prompt once and give each token to the segment its
 * first byte lies in (DESIGN §3.4: the ids never depend on the cuts); 0,
 * or -1 + err (*why set). */
static int
pic_plan_tokenize(pic_plan_job *pj, const pic_tokenizer *tok, const char *text,
                  size_t text_len, pic_job_error *why, char *err, size_t errlen)
{
    int32_t  *ids = NULL;
    size_t    n = 0, at = 0, byte = 0, t = 0;
    int       rc;

    pj->n_prompt = 0;
    for (int i = 0; i < pj->n_segs; i++) {
        const pic_job_segment *g = &pj->segs[i];

        if (g->offset != at || g->len > text_len - at) {
            *why = PIC_JOB_ERROR_INPUT;
            snprintf(err, errlen, "segment %d [%zu, +%zu) does not continue the prompt "
                     "(%zu bytes)", i, g->offset, g->len, text_len);
            return -1;
        }
        at += g->len;
    }
    if (at != text_len) {
        *why = PIC_JOB_ERROR_INPUT;
        snprintf(err, errlen, "the segments cover %zu of the prompt's %zu bytes", at,
                 text_len);
        return -1;
    }
    rc = pic_tokenizer_encode(tok, text, text_len, &ids, &n);
    if (rc != PIC_TOKENIZER_OK || n > 0x7fffffff) {
        free(ids);
        *why = rc == PIC_TOKENIZER_EUTF8 ? PIC_JOB_ERROR_INPUT : PIC_JOB_ERROR_INTERNAL;
        snprintf(err, errlen, "cannot tokenize the prompt (%s)",
                 rc == PIC_TOKENIZER_EUTF8 ? "invalid UTF-8" : "tokenizer error");
        return -1;
    }
    pj->ids = malloc((n ? n : 1) * sizeof(int));
    if (pj->ids == NULL) {
        free(ids);
        *why = PIC_JOB_ERROR_INTERNAL;
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t k = 0; k < n; k++) {
        pj->ids[k] = ids[k];
    }
    pj->n_prompt = (int) n;
    for (int i = 0; i < pj->n_segs; i++) {
        pic_job_segment *g = &pj->segs[i];
        size_t           end = g->offset + g->len, t0 = t;

        /* tokens whose first byte lies in [offset, end) */
        pic_tokenizer_advance(tok, ids, n, end, i == pj->n_segs - 1, &t, &byte);
        g->start = (int) t0;
        g->n_ids = (int) (t - t0);
        g->ids = malloc((g->n_ids ? (size_t) g->n_ids : 1) * sizeof(int));
        if (g->ids == NULL) {
            free(ids);
            *why = PIC_JOB_ERROR_INTERNAL;
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        memcpy(g->ids, pj->ids + t0, (size_t) g->n_ids * sizeof(int));
    }
    free(ids);
    return 0;
}

/* Keep a new entry: pool it, announce it, hold the one budget. */
static void
pic_plan_keep(const pic_plan_ctx *ctx, pic_job_segment *g, pic_entry *e)
{
    /* kept only when what it saves per byte beats what it would displace */
    if (ctx->pool != NULL
        && pic_cache_budget_admit(ctx->budget, e->has_T ? e->i1 - e->i0 : e->n_tokens, 1.0,
                                  e->bytes)
        && pic_pool_put(ctx->pool, g->key, g->len, e) == 0 && ctx->reg != NULL) {
        pic_registry_post_add(ctx->reg, g->key);
    }
    pic_cache_budget_enforce(ctx->budget);
}

char *
pic_plan_held(const pic_plan_ctx *ctx, const pic_plan_job *pj)
{
    unsigned char *held = calloc((size_t) pj->n_segs + 1, 1);
    char          *hex = malloc(PIC_PLAN_HELD_MAX + 1);

    if (held == NULL || hex == NULL) {
        free(held);
        free(hex);
        return NULL;
    }
    for (int i = 0; ctx->pool != NULL && i < pj->n_segs && i < 4 * PIC_PLAN_HELD_MAX; i++) {
        const pic_job_segment *g = &pj->segs[i];

        held[i] = g->kind != PIC_SEG_DYNAMIC && g->n_ids > 0
                  && pic_pool_contains(ctx->pool, g->key, g->len);
    }
    pic_plan_held_format(held, (size_t) pj->n_segs, hex);
    free(held);
    return hex;
}

/* --- deferred builds of client documents (pic_plan_door) --- */

void
pic_plan_door_stats(pic_plan_door *d, pic_plan_later_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (d == NULL) {
        return;
    }
    pthread_mutex_lock(&d->mu);
    out->queued = d->later_queued;
    out->built = d->later_built;
    out->dropped = d->later_dropped;
    out->pending = d->later_n + d->building;
    pthread_mutex_unlock(&d->mu);
}

void
pic_plan_door_free(pic_plan_door *d)
{
    if (d == NULL) {
        return;
    }
    for (int k = 0; k < d->later_n; k++) {
        free(d->later[(d->later_head + k) % PIC_PLAN_LATER].ids);
    }
    d->later_n = 0;
}

/* 1 if segment g may be composed after the exact part: it starts at or
 * after the restored state (resume) and the exact prefix reaches at most h
 * tokens into it (the entry's head seam, which assembly recomputes in
 * context: composing g serves none of those tokens less exactly).  So a
 * document whose first token or two equal the previous request's (a "[",
 * a "{", a shared tag) is still composed, not recomputed whole. */
static int
pic_plan_after_exact(const pic_plan_job *pj, const pic_job_segment *g, int h)
{
    return g->start >= pj->resume && g->start + h >= pj->depth;
}

const pic_entry_opts *
pic_plan_seam(const pic_plan_ctx *ctx, uint32_t flags)
{
    return (flags & PIC_SEG_FLAG_DOC) ? &ctx->seam_doc : &ctx->seam;
}

int
pic_plan_recomputes(const pic_plan_ctx *ctx, uint32_t flags)
{
    return (flags & PIC_SEG_FLAG_DOC) ? ctx->recompute_doc : ctx->recompute;
}

void
pic_plan_defer(const pic_plan_ctx *ctx, pic_plan_job *pj, const pic_model *m)
{
    pic_plan_door *d;

    if (ctx == NULL || (d = ctx->door) == NULL || d->model == NULL || ctx->pool == NULL
        || ctx->mode != PIC_MODE_PIC) {
        return;
    }
    for (int i = 0; i < pj->n_segs; i++) {
        pic_job_segment *g = &pj->segs[i];
        pic_plan_later  *q;
        int             *ids;

        if (g->kind != PIC_SEG_PIC || !(g->flags & (PIC_SEG_FLAG_DOC | PIC_SEG_FLAG_AHEAD))
            || pic_plan_recomputes(ctx, g->flags) || g->entry != NULL
            || !pic_plan_after_exact(pj, g,
                                     pic_entry_head(&m->cfg, pic_plan_seam(ctx, g->flags)->w))
            || g->n_ids == 0
            || __atomic_load_n(&g->remote, __ATOMIC_ACQUIRE) != PIC_REMOTE_NONE
            || !pic_entry_worth(&m->cfg, g->n_ids, pic_plan_seam(ctx, g->flags))
            || pic_pool_contains(ctx->pool, g->key, g->len)) {
            continue;
        }
        ids = malloc((size_t) g->n_ids * sizeof(int));
        pthread_mutex_lock(&d->mu);
        if (ids == NULL || d->later_n == PIC_PLAN_LATER) {
            d->later_dropped++;
            pthread_mutex_unlock(&d->mu);
            free(ids);
            continue;
        }
        q = &d->later[(d->later_head + d->later_n) % PIC_PLAN_LATER];
        memcpy(ids, g->ids, (size_t) g->n_ids * sizeof(int));
        memcpy(q->key, g->key, sizeof(q->key));
        q->len = g->len;
        q->ids = ids;
        q->n_ids = g->n_ids;
        q->flags = g->flags;
        d->later_n++;
        d->later_queued++;
        pthread_mutex_unlock(&d->mu);
    }
}

/* The keeper's share: build and pool the oldest queued entry (skipped
 * when the pool got it meanwhile); one that is not a client document
 * waits while busy (a request queued or running: it would take the cores
 * from it).  1 if one was dequeued, 0 if the queue is empty or waits. */
static int
pic_plan_build_later(const pic_plan_ctx *ctx, int busy)
{
    pic_plan_door  *d = ctx->door;
    pic_plan_later  q;
    pic_entry      *e = NULL;
    int             ok = 1;
    char            err[256];

    pthread_mutex_lock(&d->mu);
    if (d->later_n == 0
        || (busy && !(d->later[d->later_head].flags & PIC_SEG_FLAG_DOC))) {
        pthread_mutex_unlock(&d->mu);
        return 0;
    }
    q = d->later[d->later_head];
    d->later_head = (d->later_head + 1) % PIC_PLAN_LATER;
    d->later_n--;
    d->building = 1;
    pthread_mutex_unlock(&d->mu);

    if (!pic_pool_contains(ctx->pool, q.key, q.len)) {
        if (pic_entry_build(d->model, NULL, q.ids, q.n_ids,
                            pic_plan_seam(ctx, q.flags), &e, NULL, err,
                            sizeof(err)) != 0 || e == NULL) {
            ok = 0;
        } else {
            pic_job_segment g;

            memset(&g, 0, sizeof(g));
            memcpy(g.key, q.key, sizeof(g.key));
            g.len = q.len;
            pic_plan_keep(ctx, &g, e);
            pic_entry_unref(e);
        }
    }
    free(q.ids);
    pthread_mutex_lock(&d->mu);
    d->building = 0;
    if (ok) {
        d->later_built++;
    } else {
        d->later_dropped++;
    }
    pthread_mutex_unlock(&d->mu);
    return 1;
}

int
pic_plan_idle(const pic_plan_ctx *ctx, int busy)
{
    if (ctx->prefix != NULL && pic_prefix_cache_due(ctx->prefix)) {
        pic_prefix_cache_maintain(ctx->prefix);
        return 1;
    }
    if (ctx->door != NULL && ctx->door->model != NULL && ctx->pool != NULL
        && pic_plan_build_later(ctx, busy))
    {
        return 1;
    }
    return !busy && ctx->prefix != NULL && pic_prefix_cache_prefault(ctx->prefix);
}

/* A pooled entry for g that fits (tokens, and T when required), or NULL. */
static pic_entry *
pic_plan_lookup(const pic_plan_ctx *ctx, const pic_model *m, pic_job_segment *g, int need_T,
                int whole)
{
    pic_entry *e;
    char       err[128];

    if (ctx->pool == NULL) {
        return NULL;
    }
    e = pic_pool_get(ctx->pool, g->key, g->len);
    if (e == NULL) {
        return NULL;
    }
    if (pic_entry_check(e, m, g->ids, g->n_ids, err, sizeof(err)) != 0
        || (need_T && !e->has_T) || (whole && e->has_T)) {
        pic_entry_unref(e);
        return NULL;
    }
    return e;
}

/* Tokens whose state an entry supplies. */
static int
pic_plan_reused(const pic_entry *e)
{
    return e->has_T ? e->i1 - e->i0 : e->n_tokens;
}

/* The prompt's tokens by how they were served (plan_exec.h), after
 * assembly; resumed: tokens restored from the prefix tree.  pic: every
 * token composed from an entry (the approximation), whatever made the
 * entry; exact: resumed, or a leading whole entry that existed before;
 * cached: exact plus tokens composed from entries that existed before the
 * request (local hits, holders' entries).  An entry built for this
 * request, here or by a worker, was computed for it: composed, not
 * cached.  An entry assembly refused served nothing. */
static void
pic_plan_count(pic_plan_job *pj, int resumed)
{
    int old = 0, lead = 0;

    for (int i = 0; i < pj->n_segs; i++) {
        const pic_job_segment *g = &pj->segs[i];

        if (g->entry != NULL && (g->source == PIC_SRC_HIT
                                 || (g->source == PIC_SRC_PEER && g->remote_cached))) {
            old += pic_plan_reused(g->entry);
            if (lead == 0 && g->start == 0) {
                lead = pj->as.n_prefix;
            }
        }
    }
    if (old > pj->as.n_reused) {
        old = pj->as.n_reused;
    }
    pj->n_exact = resumed + (lead < old ? lead : old);
    pj->n_pic = pj->as.n_reused - pj->as.n_prefix;
    pj->n_cached = resumed + old;
    if (pj->n_cached < pj->n_exact) {
        pj->n_cached = pj->n_exact;
    }
}

/* Take segment g's remote entry if one arrived and fits: 1 taken, 0 none
 * (pending is handled by the caller). */
static int
pic_plan_take_remote(const pic_plan_ctx *ctx, pic_plan_job *pj, pic_job_segment *g,
                     const pic_model *m, int whole)
{
    int        remote = __atomic_load_n(&g->remote, __ATOMIC_ACQUIRE);
    pic_entry *e;
    char       ferr[256] = "";

    if (remote == PIC_REMOTE_FAILED) {
        pj->n_remote_failed++;
        return 0;
    }
    if (remote != PIC_REMOTE_ARRIVED) {
        return 0;
    }
    e = pic_frame_to_entry(m, g->frame, g->frame_len, g->key, g->len, ferr, sizeof(ferr));
    free(g->frame);
    g->frame = NULL;
    g->frame_len = 0;
    if (e != NULL && pic_entry_check(e, m, g->ids, g->n_ids, ferr, sizeof(ferr)) != 0) {
        pic_entry_unref(e);
        e = NULL;
    }
    if (e != NULL && ((whole && e->has_T) || (!whole && ctx->mode == PIC_MODE_PIC
                                              && !e->has_T))) {
        snprintf(ferr, sizeof(ferr), "entry of the wrong kind");
        pic_entry_unref(e);
        e = NULL;
    }
    if (e == NULL) {
        pj->n_remote_failed++;
        fprintf(stderr, "pic-engine: segment %s from a peer rejected (%s); "
                "computing it here\n", g->key, ferr);
        return 0;
    }
    g->entry = e;
    g->source = PIC_SRC_PEER;
    pj->n_peer++;
    if (g->remote_cached) {
        pj->n_cached += pic_plan_reused(e);
    }
    pic_plan_keep(ctx, g, e);
    return 1;
}

/* Resolve segment i: 1 if it took real work (a build), 0 if cheap,
 * PIC_PLAN_WAIT if its remote entry is pending, -1 on error.  build_all:
 * the worker side (no mode restrictions, never waits). */
static int
pic_plan_resolve(const pic_plan_ctx *ctx, pic_plan_job *pj, int i, const pic_model *m,
                 int build_all, char *err, size_t errlen)
{
    pic_job_segment *g = &pj->segs[i];
    pic_entry     *e = NULL;
    pic_entry_opts wopt = { .w = 0, .dtype = PIC_DTYPE_F32 };
    int            whole = g->kind == PIC_SEG_PREFIX && (i == 0 || build_all);

    g->source = PIC_SRC_RECOMPUTE;
    if (g->n_ids == 0 || g->kind == PIC_SEG_DYNAMIC) {
        return 0;
    }
    if (!build_all && !whole && pic_plan_recomputes(ctx, g->flags)) {
        return 0;
    }
    if (!build_all && (ctx->mode == PIC_MODE_FULL
                       || (ctx->mode == PIC_MODE_PREFIX && !whole))) {
        return 0;
    }
    e = pic_plan_lookup(ctx, m, g, !whole && ctx->mode == PIC_MODE_PIC, whole);
    if (e != NULL) {
        g->entry = e;
        g->source = PIC_SRC_HIT;
        pj->n_hits++;
        pj->n_cached += pic_plan_reused(e);
        return 0;
    }
    if (!build_all) {
        if (__atomic_load_n(&g->remote, __ATOMIC_ACQUIRE) == PIC_REMOTE_PENDING) {
            return PIC_PLAN_WAIT;
        }
        if (pic_plan_take_remote(ctx, pj, g, m, whole)) {
            return 0;
        }
    }
    if (whole) {
        if (pic_entry_build(m, NULL, g->ids, g->n_ids, &wopt, NULL, &e, err, errlen) != 0) {
            return -1;
        }
    } else {
        const pic_entry_opts *so = pic_plan_seam(ctx, g->flags);

        if (!pic_entry_worth(&m->cfg, g->n_ids, so)) {
            return 0;               /* too short for a seam entry: recompute */
        }
        if (pic_entry_build(m, NULL, g->ids, g->n_ids, so, &e, NULL, err, errlen) != 0) {
            return -1;
        }
    }
    if (e == NULL) {
        return 0;
    }
    g->entry = e;
    g->source = PIC_SRC_BUILT;
    pj->n_built++;
    pic_plan_keep(ctx, g, e);
    return 1;
}

/* 1 if key was seen before (and forget it), else remember it: a segment
 * is built on its second sighting outside any exact prefix. */
static int
pic_plan_door_seen(pic_plan_door *d, const char *key)
{
    uint64_t h = XXH64(key, strlen(key), 0x5eed) | 1;
    size_t   i = (size_t) (h % PIC_PLAN_DOOR);
    int      seen;

    if (d == NULL) {
        return 1;
    }
    pthread_mutex_lock(&d->mu);
    seen = d->slot[i] == h;
    d->slot[i] = seen ? 0 : h;
    pthread_mutex_unlock(&d->mu);
    return seen;
}

/* Exact-first resolution of segment i (past the exact prefix): entries
 * that existed before this request, or one built now on the segment's
 * second sighting.  A worker's fresh prefill is composed (waited for) only
 * past the first composed segment, where the state is PIC's anyway
 * (DESIGN §3.5); before it, it is pooled, not used (it would cost the
 * exactness of what is recomputed exactly).  1 if it took real work (a
 * build), 0 if cheap, PIC_PLAN_WAIT, -1 on error. */
static int
pic_plan_resolve_exact(const pic_plan_ctx *ctx, pic_plan_job *pj, int i, const pic_model *m,
                       char *err, size_t errlen)
{
    pic_job_segment *g = &pj->segs[i];
    pic_entry       *e = NULL;
    int              remote, composed = 0;
    const pic_entry_opts *so = pic_plan_seam(ctx, g->flags);

    g->source = PIC_SRC_RECOMPUTE;
    if (g->n_ids == 0 || g->kind != PIC_SEG_PIC || ctx->mode == PIC_MODE_PREFIX
        || pic_plan_recomputes(ctx, g->flags)) {
        return 0;
    }
    e = pic_plan_lookup(ctx, m, g, ctx->mode == PIC_MODE_PIC, 0);
    if (e != NULL) {
        g->entry = e;
        g->source = PIC_SRC_HIT;
        pj->n_hits++;
        return 0;
    }
    for (int j = 0; j < i && !composed; j++) {
        composed = pj->segs[j].entry != NULL && pj->segs[j].start >= pj->resume;
    }
    remote = __atomic_load_n(&g->remote, __ATOMIC_ACQUIRE);
    if (remote == PIC_REMOTE_PENDING && (g->remote_cached || composed)) {
        return PIC_PLAN_WAIT;           /* a holder's entry, or one past the exact part */
    }
    if ((remote == PIC_REMOTE_ARRIVED || remote == PIC_REMOTE_FAILED)
        && pic_plan_take_remote(ctx, pj, g, m, 0)) {
        if (!g->remote_cached && !composed) {
            /* a worker's fresh prefill inside the exact part: pooled
             * (take_remote), not composed */
            pic_entry_unref(g->entry);
            g->entry = NULL;
            g->source = PIC_SRC_RECOMPUTE;
        }
        return 0;
    }
    if (remote == PIC_REMOTE_PENDING || remote == PIC_REMOTE_ARRIVED
        || !pic_entry_worth(&m->cfg, g->n_ids, so)
        || !pic_plan_door_seen(ctx->door, g->key)) {
        return 0;
    }
    if (pic_entry_build(m, NULL, g->ids, g->n_ids, so, &e, NULL, err, errlen) != 0) {
        return -1;
    }
    if (e != NULL) {
        /* content seen again at another place: PIC territory from now on
         * (building it cost what recomputing it would) */
        g->entry = e;
        g->source = PIC_SRC_BUILT;
        pj->n_built++;
        pic_plan_keep(ctx, g, e);
    }
    return 1;
}

int
pic_plan_build_step(const pic_plan_ctx *ctx, pic_plan_job *pj, const pic_model *m,
                    const pic_tokenizer *tok, const char *text, size_t text_len,
                    int *index, pic_entry **e, pic_job_error *why, char *err,
                    size_t errlen)
{
    int rc;

    *why = PIC_JOB_ERROR_INTERNAL;
    *e = NULL;
    if (!pj->tokenized) {
        if (pic_plan_tokenize(pj, tok, text, text_len, why, err, errlen) != 0) {
            return PIC_PLAN_ERROR;
        }
        pj->tokenized = 1;
        if (ctx->max_ctx > 0 && pj->n_prompt >= ctx->max_ctx) {
            *why = PIC_JOB_ERROR_TOO_LONG;
            snprintf(err, errlen, "the segments have %d tokens; the context is %d tokens",
                     pj->n_prompt, ctx->max_ctx);
            return PIC_PLAN_ERROR;
        }
    }
    if (pj->next >= pj->n_segs) {
        return PIC_PLAN_DONE;
    }
    *index = pj->next;
    rc = pic_plan_resolve(ctx, pj, pj->next, m, 1, err, errlen);
    if (rc < 0) {
        return PIC_PLAN_ERROR;
    }
    if (pj->segs[pj->next].entry != NULL) {
        *e = pic_entry_ref(pj->segs[pj->next].entry);
    }
    pj->next++;
    return PIC_PLAN_MORE;
}

/* The checkpoints of one exact forward, filled layer by layer from its
 * on_cut hook: snap[k] is cut k of that call; the copies are clocked as
 * snap, the forward around them as exact. */
typedef struct {
    const pic_prefix_cache *pc;
    const pic_state        *s;
    float                 **snap;
    pic_plan_job           *pj;
    int64_t                *t0;
} pic_plan_snapper;

static void
pic_plan_snap_layer(void *user, int layer, int cut)
{
    pic_plan_snapper *sn = user;

    pic_plan_clock(sn->pj, PIC_PH_EXACT, sn->t0);
    pic_prefix_cache_snap_layer(sn->pc, sn->s, layer, sn->snap[cut]);
    pic_plan_clock(sn->pj, PIC_PH_SNAP, sn->t0);
}

/* Exact first (plan_exec.h): one unit of work per call, as pic_plan_step. */
static int
pic_plan_step_exact(const pic_plan_ctx *ctx, pic_plan_job *pj, const pic_model *m,
                    const pic_tokenizer *tok, pic_state *s, float *logits,
                    pic_job_error *why, char *err, size_t errlen)
{
    pic_prefix_cache *pc = ctx->prefix;
    int               n = pj->n_prompt, rc;
    int64_t           t0 = pic_now_ns();

    pj->c0 = pic_plan_cpu_ns();
    if (pj->phase == 0) {
        if (pic_prefix_cache_restore(pc, pj->scope, s, pj->ids, n, &pj->depth,
                                     &pj->resume, err, errlen) != 0) {
            return PIC_PLAN_ERROR;
        }
        pj->next = pj->n_segs;
        for (int i = 0; i < pj->n_segs; i++) {
            if (pic_plan_after_exact(pj, &pj->segs[i],
                                     pic_entry_head(&m->cfg,
                                                    pic_plan_seam(ctx, pj->segs[i].flags)->w))
                && pj->segs[i].n_ids > 0) {
                pj->next = i;
                break;
            }
        }
        pj->phase = 1;
        pic_plan_clock(pj, PIC_PH_RESTORE, &t0);
    }
    if (pj->phase == 1) {
        while (pj->next < pj->n_segs) {
            rc = pic_plan_resolve_exact(ctx, pj, pj->next, m, err, errlen);
            if (rc == PIC_PLAN_WAIT || rc < 0) {
                return rc < 0 ? PIC_PLAN_ERROR : PIC_PLAN_WAIT;
            }
            pj->next++;
            if (rc == 1) {
                pic_plan_clock(pj, PIC_PH_RESOLVE, &t0);
                return PIC_PLAN_MORE;   /* a build is one step */
            }
        }
        /* exact up to the first segment whose entry is composed */
        pj->xend = n;
        pj->xseg = pj->n_segs;
        for (int i = 0; i < pj->n_segs; i++) {
            if (pj->segs[i].entry != NULL && pj->segs[i].start >= pj->resume) {
                pj->xend = pj->segs[i].start;
                pj->xseg = i;
                break;
            }
        }
        pj->cuts = malloc((size_t) (pic_prefix_cache_max_cuts(pc) + 4) * sizeof(int));
        pj->snap = calloc((size_t) (pic_prefix_cache_max_cuts(pc) + 4), sizeof(float *));
        pj->snap_pc = pc;
        if (pj->cuts == NULL || pj->snap == NULL) {
            snprintf(err, errlen, "out of memory");
            return PIC_PLAN_ERROR;
        }
        pj->n_cut = pic_prefix_cache_cuts(pc, pj->scope, pj->ids, n, pj->resume, pj->xend,
                                          pj->cuts);
        /* and where the next requests are likeliest to part: after the
         * leading segment (the system prompt), before the trailing one (the
         * last message, where the next turn appends) and before the last
         * turn marker (the generation prompt, which the next turn's
         * template may render otherwise, e.g. without "<think>") */
        int im = tok != NULL ? pic_tokenizer_token_id(tok, "<|im_start|>") : -1, last = 0;
        for (int t = n - 1; im >= 0 && t > 0; t--) {
            if (pj->ids[t] == im) {
                last = t;
                break;
            }
        }
        int extra[3] = { pj->n_segs > 1 ? pj->segs[1].start : 0,
                         pj->n_segs > 1 ? pj->segs[pj->n_segs - 1].start : 0, last };
        for (int e = 0; e < 3; e++) {
            int p = extra[e], k = pj->n_cut;

            if (p <= pj->resume || p >= pj->xend) {
                continue;
            }
            for (int j = 0; j < pj->n_cut; j++) {
                if (pj->cuts[j] == p) {
                    p = -1;
                    break;
                }
            }
            if (p < 0) {
                continue;
            }
            while (k > 0 && pj->cuts[k - 1] > p) {
                pj->cuts[k] = pj->cuts[k - 1];
                k--;
            }
            pj->cuts[k] = p;
            pj->n_cut++;
        }
        pj->pos = pj->resume;
        pj->phase = 2;
        pic_plan_clock(pj, PIC_PH_RESOLVE, &t0);
    }
    while (pj->next_cut < pj->n_cut && pj->cuts[pj->next_cut] <= pj->pos) {
        pj->next_cut++;
    }
    if (pj->phase == 2 && pj->pos < pj->xend
        && (pj->xend == n || pj->next_cut < pj->n_cut)) {
        /* one micro-batch of the exact part per step, the checkpoints in
         * it captured during that one forward (on_cut); past the last
         * cut, when entries follow, the rest of the exact part is the
         * head of assembly's first run: one forward less */
        int              to = pj->xend, k1 = pj->next_cut, last;
        pic_plan_snapper sn = { .pc = pc, .s = s, .snap = pj->snap + pj->next_cut,
                                .pj = pj, .t0 = &t0 };
        pic_forward_hooks h = { .user = &sn, .on_cut = pic_plan_snap_layer };

        if (to - pj->pos > PIC_UBATCH) {
            to = pj->pos + PIC_UBATCH;
        }
        if (pj->xend < n && pj->cuts[pj->n_cut - 1] < to) {
            to = pj->cuts[pj->n_cut - 1];
        }
        while (k1 < pj->n_cut && pj->cuts[k1] <= to) {
            /* NULL on OOM: insert skips it */
            pj->snap[k1++] = pic_prefix_cache_ck_new(pc);
        }
        last = to == n;
        if (pic_forward_cuts(m, NULL, s, pj->ids + pj->pos, to - pj->pos, pj->pos,
                             pj->cuts + pj->next_cut, k1 - pj->next_cut,
                             last ? PIC_LOGITS_LAST : PIC_LOGITS_NONE, logits,
                             k1 > pj->next_cut ? &h : NULL, err, errlen) != 0) {
            return PIC_PLAN_ERROR;
        }
        pj->next_cut = k1;
        pj->pos = to;
        pj->n_fwd++;
        pic_plan_clock(pj, PIC_PH_EXACT, &t0);
        if (pj->pos < pj->xend) {
            return PIC_PLAN_MORE;
        }
    }
    pj->phase = 3;
    memset(&pj->as, 0, sizeof(pj->as));
    if (pj->xend < n) {
        pic_asm_segment *segs = malloc((size_t) (pj->n_segs + 1) * sizeof(*segs));
        int              k = 0;

        if (segs == NULL) {
            snprintf(err, errlen, "out of memory");
            return PIC_PLAN_ERROR;
        }
        if (pj->pos < pj->xend) {
            /* the exact part's rest, recomputed in the first run */
            segs[k].tokens = pj->ids + pj->pos;
            segs[k].n = pj->xend - pj->pos;
            segs[k].entry = NULL;
            k++;
        }
        for (int i = pj->xseg; i < pj->n_segs; i++) {
            if (pj->segs[i].n_ids > 0) {
                segs[k].tokens = pj->segs[i].ids;
                segs[k].n = pj->segs[i].n_ids;
                segs[k].entry = pj->segs[i].entry;
                k++;
            }
        }
        rc = pic_assemble_at(m, NULL, s, pj->pos, segs, k, ctx->mode, logits, &pj->as,
                             err, errlen);
        free(segs);
        if (rc != 0) {
            return PIC_PLAN_ERROR;
        }
        pj->n_rejected = pj->as.n_rejected;
        pic_plan_clock(pj, PIC_PH_ASSEMBLE, &t0);
    }
    /* the exact part into the tree: blocks, checkpoints, and the prompt's
     * end state when all of it is exact (now, or after the first token) */
    pj->exact_all = pj->xend == n;
    if (!pj->defer_insert || (pj->insert = pic_plan_insert_new(pj, s, n)) == NULL) {
        pic_prefix_cache_insert(pc, pj->scope, s, pj->ids, pj->xend, pj->cuts, pj->snap,
                                pj->n_cut, pj->exact_all && s->pos == n, NULL, NULL);
        pic_cache_budget_enforce(ctx->budget);
    }
    pic_plan_clock(pj, PIC_PH_INSERT, &t0);
    pic_plan_count(pj, pj->resume);
    *why = PIC_JOB_ERROR_NONE;
    return PIC_PLAN_DONE;
}

/* --- the exact part's insertion, held back past the first token --- */

/* pj's insertion as it stands at DONE (s holds the prompt, n tokens);
 * takes pj's cuts and snaps; NULL on OOM (pj unchanged). */
static pic_plan_insert *
pic_plan_insert_new(pic_plan_job *pj, const pic_state *s, int n)
{
    pic_plan_insert *ins = calloc(1, sizeof(*ins));

    if (ins == NULL || (ins->ids = malloc((size_t) (pj->xend > 0 ? pj->xend : 1)
                                          * sizeof(int))) == NULL) {
        free(ins);
        return NULL;
    }
    memcpy(ins->ids, pj->ids, (size_t) pj->xend * sizeof(int));
    ins->scope = pj->scope;
    ins->n = pj->xend;
    ins->cuts = pj->cuts;
    ins->snap = pj->snap;
    ins->n_cut = pj->n_cut;
    ins->tail = pj->exact_all && s->pos == n;
    pj->cuts = NULL;
    pj->snap = NULL;
    pj->n_cut = pj->next_cut = 0;
    return ins;
}

pic_plan_insert *
pic_plan_take_insert(pic_plan_job *pj)
{
    pic_plan_insert *ins = pj->insert;

    pj->insert = NULL;
    return ins;
}

void
pic_plan_run_insert(const pic_plan_ctx *ctx, pic_plan_insert *ins, const pic_state *s)
{
    static int on = -1;
    int64_t    t0 = pic_now_ns();

    if (ins == NULL) {
        return;
    }
    pic_prefix_cache_insert(ctx->prefix, ins->scope, s, ins->ids, ins->n, ins->cuts,
                            ins->snap, ins->n_cut, ins->tail, NULL, NULL);
    pic_cache_budget_enforce(ctx->budget);
    if (on < 0) {
        on = getenv("PIC_TRACE") != NULL;
    }
    if (on) {
        fprintf(stderr, "pic-trace: insert n=%d cuts=%d tail=%d after the first token "
                "%.1fms\n", ins->n, ins->n_cut, ins->tail, 1e-6 * (double) (pic_now_ns() - t0));
    }
    pic_plan_insert_free(ins, ctx->prefix);     /* the tree took or gave back every snap */
}

/* With PIC_TRACE set in the environment, one stderr line per finished job:
 * its token split, the exact run's forward calls, the wall time per phase
 * and the worker thread's CPU time per phase (cpu_*). */
static void
pic_plan_trace(const pic_plan_job *pj, int rc)
{
    static int on = -1;
    char       line[1024];
    int        at;

    if (on < 0) {
        on = getenv("PIC_TRACE") != NULL;
    }
    if (!on || rc != PIC_PLAN_DONE) {
        return;
    }
    at = snprintf(line, sizeof(line), "pic-trace: job n=%d exact=%d pic=%d resume=%d "
                  "depth=%d xend=%d built=%d hits=%d forwards=%d cuts=%d", pj->n_prompt,
                  pj->n_exact, pj->n_pic, pj->resume, pj->depth, pj->xend, pj->n_built,
                  pj->n_hits, pj->n_fwd, pj->n_cut);
    for (int i = 0; i < PIC_PLAN_PHASES && at > 0 && (size_t) at < sizeof(line); i++) {
        at += snprintf(line + at, sizeof(line) - (size_t) at, " %s=%.1fms",
                       pic_plan_phase_name(i), 1e-6 * (double) pj->t_ns[i]);
    }
    for (int i = 0; i < PIC_PLAN_PHASES && at > 0 && (size_t) at < sizeof(line); i++) {
        at += snprintf(line + at, sizeof(line) - (size_t) at, " cpu_%s=%.1fms",
                       pic_plan_phase_name(i), 1e-6 * (double) pj->t_cpu_ns[i]);
    }
    fprintf(stderr, "%s\n", line);
}

void
pic_plan_keep_session(const pic_plan_ctx *ctx, const pic_plan_job *pj,
                      const pic_state *s, const int *tokens, int n)
{
    if (ctx == NULL || ctx->prefix == NULL || pj == NULL || !pj->exact_all
        || s->pos != n || n <= pj->n_prompt) {
        return;
    }
    pic_prefix_cache_insert(ctx->prefix, pj->scope, s, tokens, n, NULL, NULL, 0, 1,
                            NULL, NULL);
    pic_cache_budget_enforce(ctx->budget);
}

static int
pic_plan_step_marked(const pic_plan_ctx *ctx, pic_plan_job *pj, const pic_model *m,
                     const pic_tokenizer *tok, const char *text, size_t text_len,
                     pic_state *s, float *logits, pic_job_error *why, char *err,
                     size_t errlen)
{
    pic_asm_segment *segs;
    int          rc;

    int64_t      t0 = pic_now_ns();

    pj->c0 = pic_plan_cpu_ns();
    *why = PIC_JOB_ERROR_INTERNAL;
    if (!pj->tokenized) {
        if (pic_plan_tokenize(pj, tok, text, text_len, why, err, errlen) != 0) {
            return PIC_PLAN_ERROR;
        }
        pj->tokenized = 1;
        pic_plan_clock(pj, PIC_PH_TOKENIZE, &t0);
        return PIC_PLAN_MORE;
    }
    if (ctx->prefix != NULL) {
        rc = pic_plan_step_exact(ctx, pj, m, tok, s, logits, why, err, errlen);
        pic_plan_trace(pj, rc);
        return rc;
    }
    while (pj->next < pj->n_segs) {
        rc = pic_plan_resolve(ctx, pj, pj->next, m, 0, err, errlen);
        if (rc == PIC_PLAN_WAIT) {
            return PIC_PLAN_WAIT;
        }
        if (rc < 0) {
            return PIC_PLAN_ERROR;
        }
        pj->next++;
        if (rc == 1) {
            pic_plan_clock(pj, PIC_PH_RESOLVE, &t0);
            return PIC_PLAN_MORE;       /* a build is one step */
        }
    }
    pic_plan_clock(pj, PIC_PH_RESOLVE, &t0);
    segs = malloc((size_t) pj->n_segs * sizeof(*segs));
    if (segs == NULL) {
        snprintf(err, errlen, "out of memory");
        return PIC_PLAN_ERROR;
    }
    int k = 0;
    for (int i = 0; i < pj->n_segs; i++) {
        if (pj->segs[i].n_ids > 0) {        /* a segment may own no token */
            segs[k].tokens = pj->segs[i].ids;
            segs[k].n = pj->segs[i].n_ids;
            segs[k].entry = pj->segs[i].entry;
            k++;
        }
    }
    rc = pic_assemble(m, NULL, s, segs, k, ctx->mode, logits, &pj->as, err, errlen);
    free(segs);
    if (rc != 0) {
        return PIC_PLAN_ERROR;
    }
    pj->n_rejected = pj->as.n_rejected;
    pic_plan_count(pj, 0);
    pic_plan_clock(pj, PIC_PH_ASSEMBLE, &t0);
    pic_plan_trace(pj, PIC_PLAN_DONE);
    return PIC_PLAN_DONE;
}

int
pic_plan_step(const pic_plan_ctx *ctx, pic_plan_job *pj, const pic_model *m,
              const pic_tokenizer *tok, const char *text, size_t text_len,
              pic_state *s, float *logits, pic_job_error *why, char *err,
              size_t errlen)
{
    int rc;

    pic_prefix_cache_mark_request(1);   /* a re-solve in here would be on the request's path */
    rc = pic_plan_step_marked(ctx, pj, m, tok, text, text_len, s, logits, why, err, errlen);
    pic_prefix_cache_mark_request(0);
    return rc;
}
