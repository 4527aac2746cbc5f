/*
 * plan_exec.c — segments → entries → assembled state (plan_exec.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "plan_exec.h"

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
    free(pj->segs);
    free(pj);
}

/* Tokenize every segment alone; 0, or -1 + err (*status set). */
static int
pic_plan_tokenize(pic_plan_job *pj, const pic_tokenizer *tok, const char *text,
                  size_t text_len, int *status, char *err, size_t errlen)
{
    size_t at = 0;

    pj->n_prompt = 0;
    for (int i = 0; i < pj->n_segs; i++) {
        pic_job_segment *g = &pj->segs[i];
        int32_t  *ids = NULL;
        size_t    n = 0;
        int       rc;

        if (g->offset != at || g->len > text_len - at) {
            *status = 400;
            snprintf(err, errlen, "segment %d [%zu, +%zu) does not continue the prompt "
                     "(%zu bytes)", i, g->offset, g->len, text_len);
            return -1;
        }
        at += g->len;
        rc = pic_tokenizer_encode(tok, text + g->offset, g->len, &ids, &n);
        if (rc != PIC_TOKENIZER_OK || n > (size_t) (0x7fffffff - pj->n_prompt)) {
            free(ids);
            *status = rc == PIC_TOKENIZER_EUTF8 ? 400 : 500;
            snprintf(err, errlen, "cannot tokenize segment %d (%s)", i,
                     rc == PIC_TOKENIZER_EUTF8 ? "invalid UTF-8: a segment boundary "
                     "splits a character" : "tokenizer error");
            return -1;
        }
        g->ids = malloc((n ? n : 1) * sizeof(int));
        if (g->ids == NULL) {
            free(ids);
            *status = 500;
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        for (size_t t = 0; t < n; t++) {
            g->ids[t] = ids[t];
        }
        free(ids);
        g->n_ids = (int) n;
        pj->n_prompt += (int) n;
    }
    if (at != text_len) {
        *status = 400;
        snprintf(err, errlen, "the segments cover %zu of the prompt's %zu bytes", at,
                 text_len);
        return -1;
    }
    return 0;
}

/* Keep a new entry: pool it and announce it. */
static void
pic_plan_keep(const pic_plan_ctx *ctx, pic_job_segment *g, pic_entry *e)
{
    if (ctx->pool != NULL && pic_pool_put(ctx->pool, g->key, g->len, e) == 0
        && ctx->reg != NULL) {
        pic_registry_post_add(ctx->reg, g->key);
    }
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
        if (!pic_entry_worth(&m->cfg, g->n_ids, &ctx->seam)) {
            return 0;               /* too short for a seam entry: recompute */
        }
        if (pic_entry_build(m, NULL, g->ids, g->n_ids, &ctx->seam, &e, NULL, err,
                            errlen) != 0) {
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

int
pic_plan_build_step(const pic_plan_ctx *ctx, pic_plan_job *pj, const pic_model *m,
                    const pic_tokenizer *tok, const char *text, size_t text_len,
                    int *index, pic_entry **e, int *status, char *err, size_t errlen)
{
    int rc;

    *status = 500;
    *e = NULL;
    if (!pj->tokenized) {
        if (pic_plan_tokenize(pj, tok, text, text_len, status, err, errlen) != 0) {
            return PIC_PLAN_ERROR;
        }
        pj->tokenized = 1;
        if (ctx->max_ctx > 0 && pj->n_prompt >= ctx->max_ctx) {
            *status = 422;
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

int
pic_plan_step(const pic_plan_ctx *ctx, pic_plan_job *pj, const pic_model *m,
              const pic_tokenizer *tok, const char *text, size_t text_len,
              pic_state *s, float *logits, int *status, char *err, size_t errlen)
{
    pic_asm_segment *segs;
    int          rc;

    *status = 500;
    if (!pj->tokenized) {
        if (pic_plan_tokenize(pj, tok, text, text_len, status, err, errlen) != 0) {
            return PIC_PLAN_ERROR;
        }
        pj->tokenized = 1;
        return PIC_PLAN_MORE;
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
            return PIC_PLAN_MORE;       /* a build is one step */
        }
    }
    segs = malloc((size_t) pj->n_segs * sizeof(*segs));
    if (segs == NULL) {
        snprintf(err, errlen, "out of memory");
        return PIC_PLAN_ERROR;
    }
    for (int i = 0; i < pj->n_segs; i++) {
        segs[i].tokens = pj->segs[i].ids;
        segs[i].n = pj->segs[i].n_ids;
        segs[i].entry = pj->segs[i].entry;
    }
    rc = pic_assemble(m, NULL, s, segs, pj->n_segs, ctx->mode, logits, &pj->as, err, errlen);
    free(segs);
    if (rc != 0) {
        return PIC_PLAN_ERROR;
    }
    pj->n_rejected = pj->as.n_rejected;
    if (pj->as.n_rejected > 0) {
        /* an entry assembly refused was recomputed: it served nothing */
        pj->n_cached = 0;
        for (int i = 0; i < pj->n_segs; i++) {
            const pic_job_segment *g = &pj->segs[i];
            if ((g->source == PIC_SRC_HIT || (g->source == PIC_SRC_PEER && g->remote_cached))
                && g->entry) {
                pj->n_cached += pic_plan_reused(g->entry);
            }
        }
        if (pj->n_cached > pj->as.n_reused) {
            pj->n_cached = pj->as.n_reused;
        }
    }
    return PIC_PLAN_DONE;
}
