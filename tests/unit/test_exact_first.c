/*
 * test_exact_first.c — the serving path's lookup order (plan_exec.h,
 * DESIGN §3.4) on the tiny-qwen35 fixture with its tokenizer: an
 * append-only agent loop of interleaved sessions resumes every turn from
 * the prefix tree and its last-position logits equal one plain prefill of
 * the whole prompt (≤ 1e-4), also under a budget that evicts; a generated
 * answer kept at the end of a request (session continuation) is resumed
 * by the next turn; shifted documents past a shared prefix come from PIC
 * entries after the exact part, also when they begin alike; cache scopes never share a prefix; the
 * ids served are the whole text's ids however the segments cut it.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>

#include "fixture_models.h"
#include "forward.h"
#include "frame.h"
#include "model.h"
#include "plan_exec.h"
#include "prefix_cache.h"
#include "state.h"
#include "tokenizer.h"

typedef struct {
    pic_model        *m;
    pic_tokenizer    *tok;
    pic_pool         *pool;
    pic_prefix_cache *pc;
    pic_plan_door     door;
    pic_plan_ctx      ctx;
    pic_state        *s;
    float            *lg, *ref;
} fx;

static int
fx_init(fx *f, size_t prefix_budget)
{
    char err[256];

    memset(f, 0, sizeof(*f));
    f->m = fixture_load("tiny-qwen35");
    if (f->m == NULL) {
        return -1;
    }
    f->tok = pic_tokenizer_load("tests/fixtures/models/tiny-qwen35/tokenizer.json", err,
                                sizeof(err));
    assert_non_null(f->tok);
    f->pool = pic_pool_init(64u << 20, f->m->fingerprint, err, sizeof(err));
    pic_prefix_opts po = { .budget = prefix_budget, .ckpt = { .block = 16, .m = 4 } };
    f->pc = pic_prefix_cache_init(f->m, &po, err, sizeof(err));
    assert_non_null(f->pool);
    assert_non_null(f->pc);
    pthread_mutex_init(&f->door.mu, NULL);
    f->ctx.mode = PIC_MODE_PIC;
    f->ctx.seam.w = 4;
    f->ctx.seam.dtype = PIC_DTYPE_F32;
    f->ctx.seam_doc = f->ctx.seam;
    f->ctx.pool = f->pool;
    f->ctx.prefix = f->pc;
    f->ctx.door = &f->door;
    f->s = pic_state_init(&f->m->cfg, 0, err, sizeof(err));
    f->lg = malloc((size_t) f->m->cfg.vocab * sizeof(float));
    f->ref = malloc((size_t) f->m->cfg.vocab * sizeof(float));
    return 0;
}

static void
fx_free(fx *f)
{
    pic_state_free(f->s);
    free(f->lg);
    free(f->ref);
    pic_prefix_cache_free(f->pc);
    pic_pool_free(f->pool);
    pic_tokenizer_free(f->tok);
    pic_model_free(f->m);
}

/* A plan job cutting text at the byte offsets cut[0..nc) (ascending, inside
 * the text): segment 0 PREFIX, the last DYNAMIC, the others PIC; keys from
 * the bytes. */
static pic_plan_job *
job(const char *text, const size_t *cut, int nc)
{
    pic_plan_job *pj = pic_plan_job_new(nc + 1);
    size_t        at = 0, n = strlen(text);

    for (int i = 0; i <= nc; i++) {
        pic_job_segment *g = &pj->segs[i];
        size_t           end = i < nc ? cut[i] : n;

        g->offset = at;
        g->len = end - at;
        g->kind = i == 0 ? PIC_SEG_PREFIX : i == nc ? PIC_SEG_DYNAMIC : PIC_SEG_PIC;
        snprintf(g->key, sizeof(g->key), "%016llx%016llx",
                 (unsigned long long) XXH64(text + at, g->len, 1),
                 (unsigned long long) XXH64(text + at, g->len, 2));
        at = end;
    }
    return pj;
}

/* 1: jobs hold their insertion back past DONE, as the scheduler's do (it
 * runs it once the first token is out): serve_job checks that the tree
 * took nothing before pic_plan_run_insert and the prompt's blocks after. */
static int defer_insert;

/* Run job pj for text through the plan steps to DONE; returns pj. */
static pic_plan_job *
serve_job(fx *f, pic_plan_job *pj, const char *text)
{
    char          err[256];
    int           rc, steps = 0;
    pic_job_error why;

    pj->defer_insert = defer_insert;
    do {
        rc = pic_plan_step(&f->ctx, pj, f->m, f->tok, text, strlen(text), f->s, f->lg,
                           &why, err, sizeof(err));
        if (rc == PIC_PLAN_ERROR) {
            fail_msg("plan step: %s", err);
        }
        assert_true(++steps < 10000);
    } while (rc != PIC_PLAN_DONE);
    if (defer_insert) {
        pic_prefix_stats a, b;
        pic_plan_insert *ins = pic_plan_take_insert(pj);

        assert_non_null(ins);
        assert_null(pic_plan_take_insert(pj));          /* taken once */
        pic_prefix_cache_stats_get(f->pc, &a);
        pic_plan_run_insert(&f->ctx, ins, f->s);
        pic_prefix_cache_stats_get(f->pc, &b);
        if (pj->xend >= 16 + pj->resume) {              /* a new block at least */
            assert_true(b.bytes > a.bytes || b.evictions > a.evictions);
        }
    }
    return pj;
}

/* Serve text through the plan steps under scope; returns the job (caller frees). */
static pic_plan_job *
serve_scope(fx *f, uint64_t scope, const char *text, const size_t *cut, int nc)
{
    pic_plan_job *pj = job(text, cut, nc);

    pj->scope = scope;
    return serve_job(f, pj, text);
}

/* Tokens composed from entries made for this request (built here, or a
 * worker's fresh prefill): composed, not cached. */
static int
built_tokens(const pic_plan_job *pj)
{
    int n = 0;

    for (int i = 0; i < pj->n_segs; i++) {
        const pic_job_segment *g = &pj->segs[i];

        if (g->entry != NULL && (g->source == PIC_SRC_BUILT
                                 || (g->source == PIC_SRC_PEER && !g->remote_cached))) {
            n += g->entry->has_T ? g->entry->i1 - g->entry->i0 : g->entry->n_tokens;
        }
    }
    return n;
}

static pic_plan_job *
serve(fx *f, const char *text, const size_t *cut, int nc)
{
    return serve_scope(f, 0, text, cut, nc);
}

/* max |logits − one plain prefill of text's ids| */
static float
vs_full(fx *f, const char *text, int *n_ids)
{
    int32_t   *ids = NULL;
    size_t     n = 0;
    char       err[256];
    pic_state *r = pic_state_init(&f->m->cfg, 0, err, sizeof(err));
    float      mx = 0.0f;

    assert_int_equal(pic_tokenizer_encode(f->tok, text, strlen(text), &ids, &n), 0);
    assert_int_equal(pic_forward(f->m, NULL, r, (int *) ids, (int) n, 0, PIC_LOGITS_LAST,
                                 f->ref, NULL, err, sizeof(err)), 0);
    for (int i = 0; i < f->m->cfg.vocab; i++) {
        mx = fmaxf(mx, fabsf(f->lg[i] - f->ref[i]));
    }
    *n_ids = (int) n;
    free(ids);
    pic_state_free(r);
    return mx;
}

/* a deterministic pseudo-text of about n words */
static void
words(char *out, size_t cap, unsigned seed, int n)
{
    static const char *const w[] = { "state", "cache", "layer", "token", "prefix",
                                     "seam", "entry", "agent", "tool", "result",
                                     "delta", "gate", "query", "value", "block" };
    size_t at = 0;

    out[0] = '\0';
    for (int i = 0; i < n && at + 16 < cap; i++) {
        seed = seed * 1103515245u + 12345u;
        at += (size_t) snprintf(out + at, cap - at, "%s%s", i ? " " : "",
                                w[(seed >> 16) % 15]);
    }
}

/* --- the agent loop --- */

#define SESS 3
#define TURNS 4

static void
agent_loop(size_t budget, int tight)
{
    fx f;

    if (fx_init(&f, budget) != 0) {
        skip();
    }
    static char text[SESS][32768];
    size_t      cuts[SESS][64];
    int         nc[SESS];
    char        body[4096];
    long        served = 0, exact = 0;
    int         prev[SESS] = { 0 };

    for (int k = 0; k < SESS; k++) {
        words(body, sizeof(body), 7, 400);         /* the shared system prompt */
        int at = snprintf(text[k], sizeof(text[k]), "<|im_start|>system\n%s<|im_end|>\n", body);
        cuts[k][0] = (size_t) at;
        words(body, sizeof(body), 100 + k, 30);
        at += snprintf(text[k] + at, sizeof(text[k]) - at, "<|im_start|>user\n%s<|im_end|>\n",
                       body);
        cuts[k][1] = (size_t) at;
        nc[k] = 2;
    }
    for (int t = 0; t < TURNS; t++) {
        for (int k = 0; k < SESS; k++) {
            char   req[32768];
            size_t base = strlen(text[k]);
            int    n_ids;

            snprintf(req, sizeof(req), "%s<|im_start|>assistant\n", text[k]);
            pic_plan_job *pj = serve(&f, req, cuts[k], nc[k]);
            float mx = vs_full(&f, req, &n_ids);
            print_message("  session %d turn %d: %d tokens, exact %d, pic %d, |Δ| %.3g\n",
                          k, t, pj->n_prompt, pj->n_exact, pj->n_pic, mx);
            assert_int_equal(pj->n_prompt, n_ids);
            /* cached: exact + entries older than the request (a built
             * entry is composed, not cached) */
            assert_true(pj->n_cached >= pj->n_exact
                        && pj->n_cached <= pj->n_exact + pj->n_pic);
            assert_int_equal(pj->n_cached - pj->n_exact,
                             pj->n_pic - built_tokens(pj));
            if (!tight) {
                /* every turn resumes where the previous one's prompt ended */
                assert_true(mx <= 1e-4f);
                assert_int_equal(pj->n_pic, 0);
                if (t > 0) {
                    assert_int_equal(pj->n_exact, prev[k]);
                }
            } else if (pj->n_pic == 0) {
                /* evicted: less is reused, nothing stale is */
                assert_true(mx <= 1e-4f);
            }
            prev[k] = pj->n_prompt;
            if (t > 0) {
                served += pj->n_prompt;
                exact += pj->n_exact;
            }
            pic_plan_job_free(pj);
            /* the agent appends a tool call and its result */
            words(body, sizeof(body), 1000 + 31 * k + t, 30 + 10 * t);
            int at = snprintf(text[k] + base, sizeof(text[k]) - base,
                              "<|im_start|>assistant\n<tool_call>\n{\"name\": \"search\"}\n"
                              "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
                              "%s\n</tool_response><|im_end|>\n", body);
            cuts[k][nc[k]++] = base + (size_t) at;
        }
    }
    pic_prefix_stats st;
    pic_prefix_cache_stats_get(f.pc, &st);
    print_message("  exact share after the first turn: %.3f; tree %zu bytes of %zu, "
                  "%llu evictions\n", (double) exact / served, st.bytes, st.budget,
                  (unsigned long long) st.evictions);
    assert_true(st.bytes <= st.budget);
    if (!tight) {
        assert_true((double) exact >= 0.85 * (double) served);
    } else {
        assert_true(st.evictions > 0);
    }
    fx_free(&f);
}

static void
test_agent_loop_resumes_every_turn_exactly(void **unused)
{
    agent_loop(64u << 20, 0);
}

/* The same with the insertion run after DONE (the scheduler's order): the
 * next turn finds the whole previous prompt all the same. */
static void
test_agent_loop_resumes_with_the_insertion_after_the_first_token(void **unused)
{
    defer_insert = 1;
    agent_loop(64u << 20, 0);
    defer_insert = 0;
}

static void
test_agent_loop_is_exact_under_a_tight_budget(void **unused)
{
    /* a budget of about one session: eviction, never a stale answer */
    agent_loop(600u << 10, 1);
}

/* --- session continuation --- */

static void
test_generated_answer_is_resumed_next_turn(void **unused)
{
    fx f;

    if (fx_init(&f, 64u << 20) != 0) {
        skip();
    }
    char body[4096], req[16384], req2[20000];
    words(body, sizeof(body), 3, 150);
    int at = snprintf(req, sizeof(req), "<|im_start|>system\n%s<|im_end|>\n"
                      "<|im_start|>user\nsummarise<|im_end|>\n<|im_start|>assistant\n", body);
    size_t cut = (size_t) at - strlen("<|im_start|>user\nsummarise<|im_end|>\n"
                                      "<|im_start|>assistant\n");
    pic_plan_job *pj = serve(&f, req, &cut, 1);
    assert_true(pj->exact_all);

    /* "generate" an answer: feed its ids after the prompt, as decode does */
    const char *answer = "The state cache keeps every layer of the prefix exact";
    int32_t    *gen = NULL;
    size_t      ng = 0;
    char        err[256];
    assert_int_equal(pic_tokenizer_encode(f.tok, answer, strlen(answer), &gen, &ng), 0);
    int  n = pj->n_prompt + (int) ng;
    int *all = malloc((size_t) n * sizeof(int));
    memcpy(all, pj->ids, (size_t) pj->n_prompt * sizeof(int));
    for (size_t i = 0; i < ng; i++) {
        all[pj->n_prompt + (int) i] = gen[i];
        assert_int_equal(pic_forward(f.m, NULL, f.s, &all[pj->n_prompt + (int) i], 1,
                                     f.s->pos, PIC_LOGITS_LAST, f.lg, NULL, err,
                                     sizeof(err)), 0);
    }
    pic_plan_keep_session(&f.ctx, pj, f.s, all, n);
    pic_plan_job_free(pj);

    /* the next turn re-renders the answer and asks again */
    snprintf(req2, sizeof(req2), "%s%s<|im_end|>\n<|im_start|>user\nand why?<|im_end|>\n"
             "<|im_start|>assistant\n", req, answer);
    pj = serve(&f, req2, &cut, 1);
    int   n2;
    float mx = vs_full(&f, req2, &n2);
    print_message("  next turn: %d tokens, resumed at %d (answer ended at %d), |Δ| %.3g\n",
                  pj->n_prompt, pj->n_exact, n, mx);
    assert_int_equal(pj->n_exact, n);
    assert_true(mx <= 1e-4f);
    pic_prefix_stats st;
    pic_prefix_cache_stats_get(f.pc, &st);
    assert_true(st.tail_hits >= 1);
    pic_plan_job_free(pj);
    free(all);
    free(gen);
    fx_free(&f);
}

/* --- prefix + PIC --- */

/* req ← a system prompt sys, then a user turn of the documents docs[0..3)
 * (a NULL ends them early), one a line, and "question r?", then the
 * generation prompt; cut[] ← the byte offsets after the system turn and
 * after each document (the segment cuts); returns how many. */
static int
docs_request(char *req, size_t cap, const char *sys, const char *const docs[3], int r,
             size_t *cut)
{
    int nc = 0, at;

    at = snprintf(req, cap, "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n", sys);
    cut[nc++] = (size_t) at;
    for (int d = 0; d < 3 && docs[d] != NULL; d++) {
        at += snprintf(req + at, cap - (size_t) at, "%s\n", docs[d]);
        cut[nc++] = (size_t) at;
    }
    snprintf(req + at, cap - (size_t) at, "question %d?<|im_end|>\n<|im_start|>assistant\n", r);
    return nc;
}

/* Serve request r of documents docs after system prompt sys (docs_request's
 * cuts); *mx ← max |logits − a plain prefill's|; the ids are the whole
 * text's.  Returns the job (caller frees). */
static pic_plan_job *
serve_docs(fx *f, const char *sys, const char *const docs[3], int r, float *mx)
{
    static char   req[32768];
    size_t        cut[4];
    int           nc = docs_request(req, sizeof(req), sys, docs, r, cut), n2;
    pic_plan_job *pj = serve(f, req, cut, nc);

    *mx = vs_full(f, req, &n2);
    print_message("  request %d: %d tokens, exact %d, pic %d, built %d, depth %d, "
                  "first document at %d, |Δ| %.3g\n", r, pj->n_prompt, pj->n_exact, pj->n_pic,
                  pj->n_built, pj->depth, pj->segs[1].start, *mx);
    assert_int_equal(pj->n_prompt, n2);
    return pj;
}

static void
test_shifted_documents_after_a_shared_prefix_use_pic(void **unused)
{
    fx f;

    if (fx_init(&f, 64u << 20) != 0) {
        skip();
    }
    char sys[4096], a[4096], b[4096], c[4096];
    words(sys, sizeof(sys), 11, 80);
    words(a, sizeof(a), 12, 150);
    words(b, sizeof(b), 13, 150);
    words(c, sizeof(c), 14, 40);
    const char *order[3][3] = { { a, b, NULL }, { b, a, NULL }, { c, a, b } };

    for (int r = 0; r < 3; r++) {
        float         mx;
        pic_plan_job *pj = serve_docs(&f, sys, order[r], r, &mx);

        if (r == 0) {
            /* cold content, first seen: recomputed exactly, nothing built */
            assert_int_equal(pj->n_pic, 0);
            assert_true(mx <= 1e-4f);
            assert_int_equal(pj->n_built, 0);
        } else if (r == 1) {
            /* seen again at another place: built and composed after the
             * exact system prompt */
            assert_int_equal(pj->n_built, 2);
            assert_true(pj->n_exact >= 48 && pj->n_pic > 200);
        } else {
            /* the shared system prompt exactly, the shifted documents by PIC */
            assert_true(pj->n_exact >= 48);
            assert_true(pj->n_pic > 200);
            assert_false(pj->exact_all);
            assert_true(isfinite(f.lg[0]));
        }
        pic_plan_job_free(pj);
    }
    fx_free(&f);
}

/* Documents that begin alike ("[" here; a "{" or a shared tag in agent
 * traffic): re-ordered after the shared system prompt, the exact prefix
 * reaches a token or so into the first document; that document is still
 * composed from its entry (the overlap lies inside its head seam, which
 * assembly recomputes in context), not recomputed whole. */
static void
test_documents_that_begin_alike_are_composed_after_the_exact_part(void **unused)
{
    fx f;

    if (fx_init(&f, 64u << 20) != 0) {
        skip();
    }
    char sys[4096], a[4096], b[4096];
    words(sys, sizeof(sys), 41, 80);
    a[0] = b[0] = '[';
    words(a + 1, sizeof(a) - 1, 42, 150);
    words(b + 1, sizeof(b) - 1, 43, 150);
    const char *order[2][3] = { { a, b, NULL }, { b, a, NULL } };

    for (int r = 0; r < 2; r++) {
        float         mx;
        pic_plan_job *pj = serve_docs(&f, sys, order[r], r, &mx);

        if (r == 0) {
            assert_int_equal(pj->n_pic, 0);
            assert_true(mx <= 1e-4f);
        } else {
            /* the case: the shared prefix ends inside the first document */
            assert_true(pj->depth > pj->segs[1].start);
            assert_true(pj->resume <= pj->segs[1].start);
            /* both documents composed, the system prompt exact */
            assert_int_equal(pj->n_built, 2);
            assert_true(pj->n_exact >= 48 && pj->n_pic > 250);
            assert_true(isfinite(f.lg[0]));
        }
        pic_plan_job_free(pj);
    }
    fx_free(&f);
}

/* Client-delimited documents (PIC_SEG_FLAG_DOC; the keeper builds with
 * door.model set): on their first sighting they are recomputed exactly
 * like any other (logits = a plain prefill's, nothing built on the
 * request's path) and queued; the keeper builds their entries between
 * requests; their second sighting, shifted, composes those entries as pool
 * hits, building nothing.  An unflagged document is not queued: it is
 * still built by the door on its second sighting; flagged PREFIX and
 * DYNAMIC segments are never queued. */
static void
test_client_documents_are_built_by_the_keeper_after_an_exact_first_sighting(void **unused)
{
    fx f;

    if (fx_init(&f, 64u << 20) != 0) {
        skip();
    }
    f.door.model = f.m;
    char sys[4096], a[4096], b[4096], c[4096], req[32768];
    words(sys, sizeof(sys), 31, 80);
    words(a, sizeof(a), 32, 150);
    words(b, sizeof(b), 33, 150);
    words(c, sizeof(c), 34, 150);
    /* documents per request; flagged: the client delimited them */
    const char *order[3][3] = { { a, b, c }, { b, a, NULL }, { c, a, NULL } };
    const int   flagged[3][3] = { { 1, 1, 0 }, { 1, 1, 0 }, { 0, 1, 0 } };
    pic_plan_later_stats ls;
    int                  n2, work = 0;

    for (int r = 0; r < 3; r++) {
        size_t cut[4];
        int    nc = docs_request(req, sizeof(req), sys, order[r], r, cut);

        pic_plan_job *pj = job(req, cut, nc);
        for (int d = 0; d < nc - 1; d++) {
            pj->segs[1 + d].flags = flagged[r][d] ? PIC_SEG_FLAG_DOC : 0;
        }
        /* a flag on the PREFIX and the DYNAMIC segment changes nothing:
         * only PIC segments get entries */
        pj->segs[0].flags = pj->segs[nc].flags = PIC_SEG_FLAG_DOC;
        serve_job(&f, pj, req);
        pic_plan_defer(&f.ctx, pj, f.m);
        float mx = vs_full(&f, req, &n2);
        pic_plan_door_stats(&f.door, &ls);
        print_message("  request %d: %d tokens, exact %d, pic %d, built %d, hits %d, "
                      "queued %llu, |Δ| %.3g\n", r, pj->n_prompt, pj->n_exact, pj->n_pic,
                      pj->n_built, pj->n_hits, (unsigned long long) ls.queued, mx);
        assert_int_equal(pj->n_prompt, n2);
        if (r == 0) {
            /* first sightings: exact, nothing built, the two documents queued */
            assert_int_equal(pj->n_pic, 0);
            assert_int_equal(pj->n_built, 0);
            assert_true(mx <= 1e-4f);
            assert_int_equal(ls.queued, 2);
            assert_int_equal(ls.pending, 2);
            assert_false(pic_pool_contains(f.pool, pj->segs[1].key, pj->segs[1].len));
            assert_false(pic_pool_contains(f.pool, pj->segs[3].key, pj->segs[3].len));
            while (pic_plan_idle(&f.ctx, 1)) {
                work++;
            }
            pic_plan_door_stats(&f.door, &ls);
            assert_int_equal(ls.built, 2);
            assert_int_equal(ls.pending, 0);
            assert_true(pic_pool_contains(f.pool, pj->segs[1].key, pj->segs[1].len));
            assert_true(pic_pool_contains(f.pool, pj->segs[2].key, pj->segs[2].len));
            assert_false(pic_pool_contains(f.pool, pj->segs[3].key, pj->segs[3].len));
        } else if (r == 1) {
            /* shifted: both composed from the keeper's entries, none built */
            assert_int_equal(pj->n_built, 0);
            assert_int_equal(pj->n_hits, 2);
            assert_true(pj->n_exact >= 48 && pj->n_pic > 200);
            assert_int_equal(ls.queued, 2);
        } else {
            /* the unflagged document's second sighting: the door builds it */
            assert_int_equal(pj->n_built, 1);
            assert_int_equal(pj->n_hits, 1);
            assert_int_equal(ls.queued, 2);
        }
        pic_plan_job_free(pj);
    }
    assert_true(work >= 2);
    pic_plan_door_free(&f.door);
    fx_free(&f);
}

/* More client documents than the keeper's queue holds (PIC_PLAN_LATER):
 * the rest are dropped (counted) and nothing else changes: the door still
 * builds a dropped one on its second sighting; a queued one is a hit. */
static void
test_a_full_keeper_queue_drops_the_rest_and_the_door_still_builds(void **unused)
{
    fx f;

    if (fx_init(&f, 64u << 20) != 0) {
        skip();
    }
    f.door.model = f.m;
    enum { N_DOCS = PIC_PLAN_LATER + 3 };
    static char req[1 << 18];
    char        sys[4096];
    size_t      cut[N_DOCS + 1];
    int         nc = 0, at, n_pic = 0, work = 0;
    pic_plan_later_stats ls;

    words(sys, sizeof(sys), 41, 80);
    at = snprintf(req, sizeof(req), "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n", sys);
    cut[nc++] = (size_t) at;
    for (int k = 0; k < N_DOCS; k++) {
        char doc[2048];

        words(doc, sizeof(doc), 100 + (unsigned) k, 40);
        /* "0) ", "66) ": the documents part at their first token */
        at += snprintf(req + at, sizeof(req) - at, "%d) %s\n", k, doc);
        cut[nc++] = (size_t) at;
    }
    snprintf(req + at, sizeof(req) - at, "question?<|im_end|>\n<|im_start|>assistant\n");
    pic_plan_job *pj = job(req, cut, nc);
    for (int i = 0; i <= nc; i++) {
        pj->segs[i].flags = PIC_SEG_FLAG_DOC;
    }
    serve_job(&f, pj, req);
    pic_plan_defer(&f.ctx, pj, f.m);
    for (int i = 1; i < nc; i++) {
        n_pic += pic_entry_worth(&f.m->cfg, pj->segs[i].n_ids, &f.ctx.seam);
    }
    pic_plan_door_stats(&f.door, &ls);
    print_message("  %d documents worth an entry: queued %llu, dropped %llu\n", n_pic,
                  (unsigned long long) ls.queued, (unsigned long long) ls.dropped);
    assert_true(n_pic > PIC_PLAN_LATER);
    assert_int_equal(ls.queued, PIC_PLAN_LATER);
    assert_int_equal(ls.dropped, n_pic - PIC_PLAN_LATER);
    assert_int_equal(ls.pending, PIC_PLAN_LATER);
    while (pic_plan_idle(&f.ctx, 1)) {
        work++;
    }
    pic_plan_door_stats(&f.door, &ls);
    assert_int_equal(ls.built, PIC_PLAN_LATER);
    assert_int_equal(ls.pending, 0);
    /* the first document (queued) and the last (dropped), swapped, after
     * the same system prompt */
    const pic_job_segment *first = &pj->segs[1], *last = &pj->segs[nc - 1];
    assert_true(pic_pool_contains(f.pool, first->key, first->len));
    assert_false(pic_pool_contains(f.pool, last->key, last->len));
    char a[4096], b[4096], req2[16384];
    size_t cut2[3];

    snprintf(a, sizeof(a), "%.*s", (int) last->len, req + last->offset);
    snprintf(b, sizeof(b), "%.*s", (int) first->len, req + first->offset);
    at = snprintf(req2, sizeof(req2), "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n",
                  sys);
    cut2[0] = (size_t) at;
    at += snprintf(req2 + at, sizeof(req2) - at, "%s", a);
    cut2[1] = (size_t) at;
    at += snprintf(req2 + at, sizeof(req2) - at, "%s", b);
    cut2[2] = (size_t) at;
    snprintf(req2 + at, sizeof(req2) - at, "again?<|im_end|>\n<|im_start|>assistant\n");
    pic_plan_job *pj2 = job(req2, cut2, 3);
    serve_job(&f, pj2, req2);
    print_message("  again: built %d, hits %d, pic %d\n", pj2->n_built, pj2->n_hits, pj2->n_pic);
    assert_int_equal(pj2->n_built, 1);      /* the dropped one, by the door */
    assert_int_equal(pj2->n_hits, 1);       /* the queued one, the keeper's */
    assert_int_equal(pj2->segs[1].source, PIC_SRC_BUILT);
    assert_int_equal(pj2->segs[2].source, PIC_SRC_HIT);
    pic_plan_job_free(pj2);
    pic_plan_job_free(pj);
    pic_plan_door_free(&f.door);
    fx_free(&f);
}

/* The keeper's upkeep (pic_plan_idle) re-solves the tree's checkpoint
 * placement between requests, never inside one: the re-solves counted in
 * request context stay 0 while requests run as plan steps. */
static void
test_keeper_resolves_between_requests(void **unused)
{
    fx f;

    if (fx_init(&f, 64u << 20) != 0) {
        skip();
    }
    char sys[4096], a[4096], req[32768];
    words(sys, sizeof(sys), 21, 80);
    pic_prefix_stats st;
    int              work = 0;

    for (int r = 0; r < 4; r++) {
        size_t cut[2];
        int    at;

        words(a, sizeof(a), 22 + (unsigned) r, 60);
        at = snprintf(req, sizeof(req), "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n",
                      sys);
        cut[0] = (size_t) at;
        at += snprintf(req + at, sizeof(req) - at, "%s\n", a);
        cut[1] = (size_t) at;
        snprintf(req + at, sizeof(req) - at, "question?<|im_end|>\n<|im_start|>assistant\n");
        pic_plan_job_free(serve(&f, req, cut, 2));
        pic_prefix_cache_stats_get(f.pc, &st);
        assert_int_equal(st.resolves_in_request, 0);
        while (pic_plan_idle(&f.ctx, 1)) {
            work++;
        }
    }
    pic_prefix_cache_stats_get(f.pc, &st);
    print_message("  %d upkeep steps, %llu re-solves, %llu in a request\n", work,
                  (unsigned long long) st.resolves, (unsigned long long) st.resolves_in_request);
    assert_true(work > 0 && st.resolves > 0);
    assert_int_equal(st.resolves_in_request, 0);
    fx_free(&f);
}

/* --- a gateway worker's entries (DESIGN §3.5 under exact first) --- */

/* A segment's seam entry as a worker would stream it: a frame. */
static void
worker_frame(fx *f, pic_job_segment *g)
{
    pic_entry *e = NULL;
    char       err[256];

    assert_int_equal(pic_entry_build(f->m, NULL, g->ids, g->n_ids, &f->ctx.seam, &e, NULL,
                                     err, sizeof(err)), 0);
    assert_non_null(e);
    g->frame = pic_frame_from_entry(e, g->key, g->len, &g->frame_len);
    assert_non_null(g->frame);
    pic_entry_unref(e);
}

/* Plan: [system] [c: worker, arrived] [a: pooled] [b: worker, pending]
 * [question].  c lies before the first composed segment (a): its fresh
 * entry is pooled, not used, and c is recomputed exactly.  b lies past
 * a: the engine waits for the worker's entry and composes it (it counts
 * in n_pic and is a peer's entry). */
static void
test_worker_entries_past_the_first_composed_segment_are_composed(void **unused)
{
    fx f;

    if (fx_init(&f, 64u << 20) != 0) {
        skip();
    }
    char sys[4096], a[4096], b[4096], c[4096], req[32768], err[256];
    size_t cut[4];
    int    at, rc, steps = 0, waits = 0;
    pic_job_error why;

    words(sys, sizeof(sys), 41, 80);
    words(c, sizeof(c), 42, 120);
    words(a, sizeof(a), 43, 120);
    words(b, sizeof(b), 44, 120);
    at = snprintf(req, sizeof(req), "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n", sys);
    cut[0] = (size_t) at;
    at += snprintf(req + at, sizeof(req) - at, "%s\n", c);
    cut[1] = (size_t) at;
    at += snprintf(req + at, sizeof(req) - at, "%s\n", a);
    cut[2] = (size_t) at;
    at += snprintf(req + at, sizeof(req) - at, "%s\n", b);
    cut[3] = (size_t) at;
    snprintf(req + at, sizeof(req) - at, "which one?<|im_end|>\n<|im_start|>assistant\n");

    pic_plan_job *pj = job(req, cut, 4);
    assert_int_equal(pic_plan_step(&f.ctx, pj, f.m, f.tok, req, strlen(req), f.s, f.lg, &why,
                                   err, sizeof(err)), PIC_PLAN_MORE);      /* tokenized */
    pic_job_segment *gc = &pj->segs[1], *ga = &pj->segs[2], *gb = &pj->segs[3];
    pic_entry *ea = NULL;
    assert_int_equal(pic_entry_build(f.m, NULL, ga->ids, ga->n_ids, &f.ctx.seam, &ea, NULL,
                                     err, sizeof(err)), 0);
    assert_int_equal(pic_pool_put(f.pool, ga->key, ga->len, ea), 0);
    worker_frame(&f, gc);
    gc->remote = PIC_REMOTE_ARRIVED;
    gb->remote = PIC_REMOTE_PENDING;
    do {
        rc = pic_plan_step(&f.ctx, pj, f.m, f.tok, req, strlen(req), f.s, f.lg, &why, err,
                           sizeof(err));
        if (rc == PIC_PLAN_ERROR) {
            fail_msg("plan step: %s", err);
        }
        if (rc == PIC_PLAN_WAIT) {
            /* waiting on b's worker, not on c's (before anything composed) */
            assert_int_equal(pj->next, 3);
            if (waits++ == 0) {
                worker_frame(&f, gb);
                __atomic_store_n(&gb->remote, PIC_REMOTE_ARRIVED, __ATOMIC_RELEASE);
            }
        }
        assert_true(++steps < 10000);
    } while (rc != PIC_PLAN_DONE);
    print_message("  exact %d, pic %d, peer %d, hits %d, xend %d (a starts at %d)\n",
                  pj->n_exact, pj->n_pic, pj->n_peer, pj->n_hits, pj->xend, ga->start);
    assert_int_equal(waits, 1);
    assert_null(gc->entry);
    assert_int_equal(gc->source, PIC_SRC_RECOMPUTE);
    assert_true(pic_pool_contains(f.pool, gc->key, gc->len));   /* pooled for later requests */
    assert_int_equal(ga->source, PIC_SRC_HIT);
    assert_int_equal(gb->source, PIC_SRC_PEER);
    assert_non_null(gb->entry);
    assert_int_equal(pj->xend, ga->start);      /* exact up to the first composed one */
    assert_int_equal(pj->as.n_rejected, 0);
    /* both composed entries' interiors count as PIC tokens */
    int ra = ea->has_T ? ea->i1 - ea->i0 : ea->n_tokens;
    int rb = gb->entry->has_T ? gb->entry->i1 - gb->entry->i0 : gb->entry->n_tokens;
    assert_int_equal(pj->n_pic, ra + rb);
    /* cached: the pooled entry's tokens, not the worker's fresh one's */
    assert_int_equal(pj->n_cached, pj->n_exact + ra);
    assert_true(isfinite(f.lg[0]));
    pic_entry_unref(ea);
    pic_plan_job_free(pj);
    fx_free(&f);
}

/* --- scopes --- */

static void
test_scopes_do_not_share_prefixes(void **unused)
{
    fx f;

    if (fx_init(&f, 64u << 20) != 0) {
        skip();
    }
    char body[4096], req[8192];
    words(body, sizeof(body), 5, 200);
    int    at = snprintf(req, sizeof(req), "<|im_start|>system\n%s<|im_end|>\n", body);
    size_t cut = (size_t) at;
    snprintf(req + at, sizeof(req) - at, "<|im_start|>user\nhi<|im_end|>\n"
             "<|im_start|>assistant\n");
    pic_plan_job *pj = serve_scope(&f, 11, req, &cut, 1);
    pic_plan_job_free(pj);
    pj = serve_scope(&f, 12, req, &cut, 1);       /* another tenant: nothing */
    assert_int_equal(pj->n_exact, 0);
    pic_plan_job_free(pj);
    pj = serve_scope(&f, 11, req, &cut, 1);       /* the same tenant: all but the end */
    assert_true(pj->n_exact >= pj->n_prompt - 8);
    pic_plan_job_free(pj);
    fx_free(&f);
}

/* --- ids --- */

static void
test_ids_are_the_whole_texts_however_it_is_cut(void **unused)
{
    fx f;

    if (fx_init(&f, 64u << 20) != 0) {
        skip();
    }
    /* cuts inside words, between a space and its word, inside "\n\n" and
     * inside a special token's neighbourhood */
    const char *text = "<|im_start|>system\nYou are   helpful.\n\n<|im_end|>\n"
                       "<|im_start|>user\nsearching for cached states, please<|im_end|>\n"
                       "<|im_start|>assistant\n";
    size_t cut[] = { 22, 29, 38, 60, 75, 94 };
    pic_plan_job *pj = serve(&f, text, cut, 6);
    int32_t *ids = NULL;
    size_t   n = 0;
    int      at = 0;

    assert_int_equal(pic_tokenizer_encode(f.tok, text, strlen(text), &ids, &n), 0);
    assert_int_equal(pj->n_prompt, (int) n);
    for (int i = 0; i < pj->n_segs; i++) {
        assert_int_equal(pj->segs[i].start, at);
        for (int t = 0; t < pj->segs[i].n_ids; t++) {
            assert_int_equal(pj->segs[i].ids[t], ids[at + t]);
        }
        at += pj->segs[i].n_ids;
    }
    assert_int_equal(at, (int) n);
    free(ids);
    pic_plan_job_free(pj);
    fx_free(&f);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agent_loop_resumes_every_turn_exactly),
        cmocka_unit_test(test_agent_loop_resumes_with_the_insertion_after_the_first_token),
        cmocka_unit_test(test_agent_loop_is_exact_under_a_tight_budget),
        cmocka_unit_test(test_generated_answer_is_resumed_next_turn),
        cmocka_unit_test(test_shifted_documents_after_a_shared_prefix_use_pic),
        cmocka_unit_test(test_documents_that_begin_alike_are_composed_after_the_exact_part),
        cmocka_unit_test(test_client_documents_are_built_by_the_keeper_after_an_exact_first_sighting),
        cmocka_unit_test(test_a_full_keeper_queue_drops_the_rest_and_the_door_still_builds),
        cmocka_unit_test(test_keeper_resolves_between_requests),
        cmocka_unit_test(test_worker_entries_past_the_first_composed_segment_are_composed),
        cmocka_unit_test(test_scopes_do_not_share_prefixes),
        cmocka_unit_test(test_ids_are_the_whole_texts_however_it_is_cut),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
