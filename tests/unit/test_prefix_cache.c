/*
 * test_prefix_cache.c — exact prefix reuse with sparse checkpoints
 * (engine/pic/prefix_cache.h) on a tiny fixture checkpoint: a request resumes
 * from the deepest checkpoint at or below the depth it shares and its
 * logits and states equal full recompute; checkpoints follow the DP once
 * history exists; the budget evicts least recently used leaves; threads
 * prefill overlapping prompts at once.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "forward.h"
#include "model.h"
#include "fixture_models.h"
#include "prefix_cache.h"
#include "state.h"

/* n ids: the first `shared` from seed 1, the rest from seed */
static int *
prompt(int n, int shared, unsigned seed, int vocab)
{
    int *t = malloc((size_t) n * sizeof(int));
    for (int i = 0; i < n; i++) {
        unsigned sd = i < shared ? 1u : seed;
        t[i] = (int) (((unsigned) i * 2654435761u + sd * 97u + 3u) % (unsigned) vocab);
    }
    return t;
}

/* logits and linear states of s against one plain prefill of ids */
static void
check_vs_full(pic_model *m, pic_state *s, const float *lg, const int *ids, int n)
{
    const pic_config *c = &m->cfg;
    char              err[256];
    float            *ref = malloc((size_t) c->vocab * sizeof(float));
    pic_state        *f = pic_state_init(c, 0, err, sizeof(err));
    float             mx = 0.0f;
    double            se = 0.0;

    assert_int_equal(pic_forward(m, NULL, f, ids, n, 0, PIC_LOGITS_LAST, ref, NULL,
                                 err, sizeof(err)), 0);
    for (int i = 0; i < c->vocab; i++) {
        mx = fmaxf(mx, fabsf(lg[i] - ref[i]));
    }
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_type[l] == PIC_LAYER_LINEAR) {
            se = fmax(se, fixture_rel_l2(s->S[l], f->S[l], (size_t) s->Hv * s->dk * s->dv));
        } else {
            for (int j = 0; j < s->Hkv; j++) {
                se = fmax(se, fixture_rel_l2(s->kc[l] + (size_t) j * s->cap * s->hd,
                                     f->kc[l] + (size_t) j * f->cap * f->hd,
                                     (size_t) n * s->hd));
            }
        }
    }
    print_message("  vs full: max |Δlogit| %.3g, state rel-L2 %.3g\n", mx, se);
    assert_true(mx <= 1e-4f);
    assert_true(se <= 1e-5);
    assert_int_equal(s->pos, n);
    free(ref);
    pic_state_free(f);
}

static void
test_resume_from_checkpoint_equals_full(void **unused)
{
    pic_model *m = fixture_load("tiny-qwen3next");
    if (m == NULL) {
        skip();
    }
    char              err[256];
    pic_prefix_opts   o = { .budget = 64u << 20,
                            .ckpt = { .block = 64, .m = 4, .min_history = 1000 } };
    pic_prefix_cache *pc = pic_prefix_cache_init(m, &o, err, sizeof(err));
    pic_state        *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    float            *lg = malloc((size_t) m->cfg.vocab * sizeof(float));
    pic_prefix_result r;
    pic_prefix_stats  st;

    /* a cold request: nothing reused; balanced checkpoints at 64..256 */
    int *a = prompt(300, 300, 1, m->cfg.vocab);
    assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, a, 300, lg, &r, err,
                                              sizeof(err)), 0);
    assert_int_equal(r.resume, 0);
    assert_int_equal(r.new_blocks, 4);
    assert_int_equal(r.new_checkpoints, 4);
    check_vs_full(m, s, lg, a, 300);

    /* shares 200 tokens: depth 200, resumes at 192, recomputes 208 */
    int *b = prompt(400, 200, 7, m->cfg.vocab);
    int  depth, resume;
    pic_prefix_cache_lookup(pc, b, 400, &depth, &resume);
    assert_int_equal(depth, 200);
    assert_int_equal(resume, 192);
    assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, b, 400, lg, &r, err,
                                              sizeof(err)), 0);
    assert_int_equal(r.depth, 200);
    assert_int_equal(r.resume, 192);
    assert_int_equal(r.recomputed, 208);
    assert_int_equal(r.new_blocks, 3);          /* b's blocks 3..5 */
    assert_int_equal(r.new_checkpoints, 3);     /* balanced over the new edge: 256..384 */
    check_vs_full(m, s, lg, b, 400);

    /* the same prompt again: everything but the last partial block */
    assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, b, 400, lg, &r, err,
                                              sizeof(err)), 0);
    assert_int_equal(r.depth, 384);             /* full blocks; no partial child */
    assert_int_equal(r.resume, 384);            /* the checkpoint b added */
    check_vs_full(m, s, lg, b, 400);

    /* block-aligned prompt fully cached: the last token is still recomputed */
    assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, a, 256, lg, &r, err,
                                              sizeof(err)), 0);
    assert_int_equal(r.resume, 192);
    check_vs_full(m, s, lg, a, 256);

    pic_prefix_cache_stats_get(pc, &st);
    assert_int_equal(st.lookups, 4);
    assert_int_equal(st.hits, 3);
    assert_true(st.bytes <= st.budget && st.blocks == 7);
    assert_int_equal(st.tokens_skippable, 8 + 0 + 64);   /* shared but recomputed */
    free(a);
    free(b);
    free(lg);
    pic_state_free(s);
    pic_prefix_cache_free(pc);
    pic_model_free(m);
}

/* Multi-head latent attention: the tree keeps each block's latent rows
 * ([k_pe | c_KV] per layer, no V) and a request sharing a prefix resumes
 * from them; logits and latents equal full recompute, and a block costs
 * layers · block · (dr + r) floats, not 2 · Hq · head dims. */
static void
test_mla_prefix_reuse_in_latent_form(void **unused)
{
    pic_model *m = fixture_load("tiny-deepseek-v3");
    if (m == NULL) {
        skip();
    }
    const pic_config *c = &m->cfg;
    char              err[256];
    pic_prefix_opts   o = { .budget = 64u << 20,
                            .ckpt = { .block = 64, .m = 4, .min_history = 1000 } };
    pic_prefix_cache *pc = pic_prefix_cache_init(m, &o, err, sizeof(err));
    pic_state        *s = pic_state_init(c, 0, err, sizeof(err));
    float            *lg = malloc((size_t) c->vocab * sizeof(float));
    pic_prefix_result r;
    pic_prefix_stats  st;
    int              *a = prompt(300, 300, 1, c->vocab);
    int              *b = prompt(400, 200, 7, c->vocab);

    assert_non_null(pc);
    assert_true(c->mla && s->vd == 0 && s->Hkv == 1
                && s->hd == c->qk_rope_dim + c->kv_lora_rank);
    assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, a, 300, lg, &r, err,
                                              sizeof(err)), 0);
    assert_int_equal(r.resume, 0);
    check_vs_full(m, s, lg, a, 300);
    pic_prefix_cache_stats_get(pc, &st);
    print_message("  4 blocks of latent rows: %zu bytes (latent %d floats per token "
                  "and layer)\n", (size_t) st.bytes, s->hd);
    assert_true(st.bytes >= (size_t) 4 * 64 * c->n_layers * s->hd * sizeof(float));
    assert_true(st.bytes < (size_t) 4 * 64 * c->n_layers * 2 * c->n_q_heads
                           * (c->qk_nope_dim + c->qk_rope_dim) * sizeof(float));

    assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, b, 400, lg, &r, err,
                                              sizeof(err)), 0);
    assert_int_equal(r.depth, 200);
    assert_true(r.resume >= 192);
    assert_int_equal(r.recomputed, 400 - r.resume);
    check_vs_full(m, s, lg, b, 400);

    free(a);
    free(b);
    free(lg);
    pic_state_free(s);
    pic_prefix_cache_free(pc);
    pic_model_free(m);
}

/* The keeper's stock of pre-faulted checkpoint buffers: prefault fills it
 * to its cap and stops; a request's checkpoints come out of it (the stock
 * shrinks by as many), and resuming from one equals a full prefill. */
static void
test_checkpoints_come_from_the_prefaulted_stock(void **unused)
{
    pic_model *m = fixture_load("tiny-qwen3next");
    if (m == NULL) {
        skip();
    }
    char              err[256];
    pic_prefix_opts   o = { .budget = 64u << 20,
                            .ckpt = { .block = 64, .m = 4, .min_history = 1000 } };
    pic_prefix_cache *pc = pic_prefix_cache_init(m, &o, err, sizeof(err));
    pic_state        *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    float            *lg = malloc((size_t) m->cfg.vocab * sizeof(float));
    pic_prefix_result r;
    int               filled = 0;

    assert_int_equal(pic_prefix_cache_spares(pc), 0);
    while (pic_prefix_cache_prefault(pc)) {
        filled++;
    }
    assert_int_equal(filled, 6);
    assert_int_equal(pic_prefix_cache_spares(pc), 6);

    int *a = prompt(300, 300, 1, m->cfg.vocab);
    assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, a, 300, lg, &r, err,
                                              sizeof(err)), 0);
    assert_int_equal(r.new_checkpoints, 4);
    assert_int_equal(pic_prefix_cache_spares(pc), 2);

    int *b = prompt(400, 200, 7, m->cfg.vocab);
    assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, b, 400, lg, &r, err,
                                              sizeof(err)), 0);
    assert_int_equal(r.resume, 192);            /* from a checkpoint of the stock */
    assert_int_equal(pic_prefix_cache_spares(pc), 0);
    check_vs_full(m, s, lg, b, 400);
    assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, b, 400, lg, &r, err,
                                              sizeof(err)), 0);
    assert_int_equal(r.resume, 384);            /* a malloc'd one: the stock ran out */
    check_vs_full(m, s, lg, b, 400);
    free(a);
    free(b);
    free(lg);
    pic_state_free(s);
    pic_prefix_cache_free(pc);
    pic_model_free(m);
}

/* After enough history the new edges' checkpoints sit where requests
 * stop sharing (here: 5 blocks + 20 tokens → a checkpoint at 320). */
static void
test_checkpoints_follow_observed_depths(void **unused)
{
    pic_model *m = fixture_load("tiny-qwen35");
    if (m == NULL) {
        skip();
    }
    char              err[256];
    pic_prefix_opts   o = { .budget = 256u << 20,
                            .ckpt = { .block = 64, .m = 1, .min_history = 4,
                                      .resolve_every = 2 } };
    pic_prefix_cache *pc = pic_prefix_cache_init(m, &o, err, sizeof(err));
    pic_state        *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    pic_prefix_result r;

    /* same 340-token document, different questions */
    for (int q = 0; q < 6; q++) {
        int *p = prompt(420, 340, 100 + q, m->cfg.vocab);
        assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, p, 420, NULL, &r, err,
                                                  sizeof(err)), 0);
        pic_prefix_cache_maintain(pc);          /* the keeper's re-solve */
        print_message("question %d: depth %d resume %d\n", q, r.depth, r.resume);
        if (q >= 5) {
            assert_int_equal(r.depth, 340);
            assert_int_equal(r.resume, 320);    /* the DP's checkpoint */
        }
        free(p);
    }
    pic_state_free(s);
    pic_prefix_cache_free(pc);
    pic_model_free(m);
}

static void
test_budget_evicts_lru_leaves(void **unused)
{
    pic_model *m = fixture_load("tiny-qwen35");
    if (m == NULL) {
        skip();
    }
    char              err[256];
    pic_prefix_opts   o = { .budget = 1, .ckpt = { .m = 2, .min_history = 1000 } };
    pic_prefix_cache *probe = pic_prefix_cache_init(m, &o, err, sizeof(err));
    pic_state        *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    pic_prefix_result r;
    pic_prefix_stats  st;
    int              *a = prompt(256, 256, 1, m->cfg.vocab);
    int              *b = prompt(256, 0, 5, m->cfg.vocab);
    int              *c = prompt(256, 0, 9, m->cfg.vocab);

    /* one 4-block prompt's size */
    pic_prefix_cache_prefill(probe, NULL, s, a, 256, NULL, &r, err, sizeof(err));
    pic_prefix_cache_stats_get(probe, &st);
    assert_int_equal(st.blocks, 0);             /* nothing fits a 1-byte budget */
    assert_int_equal(st.evictions, 4);
    pic_prefix_cache_free(probe);

    o.budget = 1u << 30;
    probe = pic_prefix_cache_init(m, &o, err, sizeof(err));
    pic_prefix_cache_prefill(probe, NULL, s, a, 256, NULL, &r, err, sizeof(err));
    pic_prefix_cache_stats_get(probe, &st);
    size_t one = st.bytes;
    pic_prefix_cache_free(probe);

    o.budget = 2 * one + one / 2;
    pic_prefix_cache *pc = pic_prefix_cache_init(m, &o, err, sizeof(err));
    pic_prefix_cache_prefill(pc, NULL, s, a, 256, NULL, &r, err, sizeof(err));
    pic_prefix_cache_prefill(pc, NULL, s, b, 256, NULL, &r, err, sizeof(err));
    pic_prefix_cache_prefill(pc, NULL, s, a, 256, NULL, &r, err, sizeof(err));   /* a recent */
    assert_int_equal(r.resume, 128);
    pic_prefix_cache_prefill(pc, NULL, s, c, 256, NULL, &r, err, sizeof(err));
    pic_prefix_cache_stats_get(pc, &st);
    print_message("blocks %zu evictions %llu bytes %zu budget %zu\n", st.blocks,
                  (unsigned long long) st.evictions, st.bytes, st.budget);
    assert_true(st.bytes <= st.budget);
    assert_true(st.evictions >= 1);
    int depth, resume;
    pic_prefix_cache_lookup(pc, b, 256, &depth, &resume);
    assert_true(depth < 256);                   /* b was least recently used */
    pic_prefix_cache_lookup(pc, a, 256, &depth, &resume);
    assert_int_equal(depth, 256);
    free(a); free(b); free(c);
    pic_state_free(s);
    pic_prefix_cache_free(pc);
    pic_model_free(m);
}

typedef struct {
    pic_model        *m;
    pic_prefix_cache *pc;
    int               seed;
    int               bad;
} thr_arg;

static void *
thr(void *v)
{
    thr_arg   *a = v;
    char       err[256];
    pic_state *s = pic_state_init(&a->m->cfg, 0, err, sizeof(err));
    pic_state *f = pic_state_init(&a->m->cfg, 0, err, sizeof(err));
    float     *lg = malloc((size_t) a->m->cfg.vocab * sizeof(float));
    float     *ref = malloc((size_t) a->m->cfg.vocab * sizeof(float));

    for (int i = 0; i < 6; i++) {
        int *p = prompt(200 + 30 * i, 130, (unsigned) (a->seed * 10 + i), a->m->cfg.vocab);
        int  n = 200 + 30 * i;
        if (pic_prefix_cache_prefill(a->pc, NULL, s, p, n, lg, NULL, err, sizeof(err)) != 0
            || pic_forward(a->m, NULL, f, p, n, 0, PIC_LOGITS_LAST, ref, NULL, err,
                           sizeof(err)) != 0) {
            a->bad++;
        }
        pic_state_reset(f);
        for (int k = 0; k < a->m->cfg.vocab; k++) {
            a->bad += fabsf(lg[k] - ref[k]) > 1e-4f;
        }
        free(p);
    }
    free(lg);
    free(ref);
    pic_state_free(s);
    pic_state_free(f);
    return NULL;
}

static void
test_threads_share_the_tree(void **unused)
{
    pic_model *m = fixture_load("tiny-qwen35-moe");
    if (m == NULL) {
        skip();
    }
    char              err[256];
    pic_prefix_opts   o = { .budget = 8u << 20, .ckpt = { .m = 3, .min_history = 5 } };
    pic_prefix_cache *pc = pic_prefix_cache_init(m, &o, err, sizeof(err));
    pthread_t         t[3];
    thr_arg           a[3];
    pic_prefix_stats  st;

    for (int i = 0; i < 3; i++) {
        a[i] = (thr_arg) { .m = m, .pc = pc, .seed = i + 1 };
        pthread_create(&t[i], NULL, thr, &a[i]);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].bad, 0);
    }
    pic_prefix_cache_stats_get(pc, &st);
    print_message("lookups %llu hits %llu reused %llu recomputed %llu\n",
                  (unsigned long long) st.lookups, (unsigned long long) st.hits,
                  (unsigned long long) st.tokens_reused,
                  (unsigned long long) st.tokens_recomputed);
    assert_int_equal(st.lookups, 18);
    assert_true(st.hits > 0);
    pic_prefix_cache_free(pc);
    pic_model_free(m);
}

/* One request's tree traffic without the forward (placement and budget
 * only: the states are whatever s holds): restore, capture the cuts,
 * insert.  Returns the position resumed from. */
static int
visit(pic_prefix_cache *pc, pic_state *s, const int *ids, int n)
{
    char   err[256];
    int    depth, resume, pos[64], k;
    float *snap[64];

    assert_int_equal(pic_prefix_cache_restore(pc, 0, s, ids, n, &depth, &resume, err,
                                              sizeof(err)), 0);
    k = pic_prefix_cache_cuts(pc, 0, ids, n, resume, n, pos);
    assert_true(k <= pic_prefix_cache_max_cuts(pc) && k <= 64);
    for (int i = 0; i < k; i++) {
        assert_true(pos[i] > resume && pos[i] <= n && (i == 0 || pos[i] > pos[i - 1]));
        snap[i] = pic_prefix_cache_snap(pc, s);
    }
    s->pos = n;
    pic_prefix_cache_insert(pc, 0, s, ids, n, pos, snap, k, 0, NULL, NULL);
    return resume;
}

/* Each edge (path between branch points) gets its own placement from its
 * own depths: document A is read to 300 tokens, B to 520, and with one
 * checkpoint per edge A's goes to 256 and B's to 512 (one global
 * histogram would put both at one place). */
static void
test_each_edge_places_from_its_own_depths(void **unused)
{
    pic_model *m = fixture_load("tiny-qwen35");
    if (m == NULL) {
        skip();
    }
    char              err[256];
    pic_prefix_opts   o = { .budget = 256u << 20,
                            .ckpt = { .block = 64, .m = 1, .min_history = 4,
                                      .resolve_every = 2 } };
    pic_prefix_cache *pc = pic_prefix_cache_init(m, &o, err, sizeof(err));
    pic_state        *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    pic_prefix_result r;
    int              *a = prompt(640, 0, 11, m->cfg.vocab);
    int              *b = prompt(640, 0, 12, m->cfg.vocab);
    int               n_ent, max_ck, ra = -1, rb = -1;
    pic_prefix_stats  st;

    assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, a, 640, NULL, &r, err,
                                              sizeof(err)), 0);
    assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, b, 640, NULL, &r, err,
                                              sizeof(err)), 0);
    pic_prefix_cache_maintain(pc);
    for (int q = 0; q < 8; q++) {
        assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, a, 300, NULL, &r, err,
                                                  sizeof(err)), 0);
        ra = r.resume;
        assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, b, 520, NULL, &r, err,
                                                  sizeof(err)), 0);
        rb = r.resume;
        pic_prefix_cache_maintain(pc);
        pic_prefix_cache_edges(pc, &n_ent, &max_ck);
        print_message("round %d: A resumes at %d, B at %d; %d edges, at most %d "
                      "checkpoints each\n", q, ra, rb, n_ent, max_ck);
        assert_true(max_ck <= 1);
    }
    assert_int_equal(ra, 256);
    assert_int_equal(rb, 512);
    assert_int_equal(n_ent, 2);
    pic_prefix_cache_stats_get(pc, &st);
    assert_true(st.resolves > 0);
    assert_int_equal(st.resolves_in_request, 0);
    free(a);
    free(b);
    pic_state_free(s);
    pic_prefix_cache_free(pc);
    pic_model_free(m);
}

/* M checkpoints per edge, not per request: after 1,000 requests of mixed
 * shapes (shared prefixes, branches, prefixes of stored paths, repeats)
 * no edge holds more than M, at any time, and the tree stays in budget. */
static void
test_edge_budget_holds_after_1000_requests(void **unused)
{
    pic_model *m = fixture_load("tiny-qwen35");
    if (m == NULL) {
        skip();
    }
    char              err[256];
    pic_prefix_opts   o = { .budget = 64u << 20,
                            .ckpt = { .block = 16, .m = 3, .min_history = 5,
                                      .resolve_every = 7 } };
    pic_prefix_cache *pc = pic_prefix_cache_init(m, &o, err, sizeof(err));
    pic_state        *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    int               ids[600], n_ent = 0, max_ck = 0;
    unsigned          x = 12345;
    pic_prefix_stats  st;

    for (int r = 0; r < 1000; r++) {
        /* a document (of 6), read to a random depth, then a question */
        x = x * 1103515245u + 12345u;
        int doc = (int) ((x >> 16) % 6), keep = 16 + (int) ((x >> 8) % 400);
        int n = keep + 1 + (int) ((x >> 4) % 90);
        for (int i = 0; i < n; i++) {
            ids[i] = i < keep ? (int) ((unsigned) (doc * 7919 + i * 31) % (unsigned) m->cfg.vocab)
                              : (int) ((x + (unsigned) i * 17u) % (unsigned) m->cfg.vocab);
        }
        visit(pc, s, ids, n);
        if (r % 13 == 0) {
            pic_prefix_cache_maintain(pc);
        }
        pic_prefix_cache_edges(pc, &n_ent, &max_ck);
        if (max_ck > 3) {
            fail_msg("request %d: an edge holds %d checkpoints (M = 3)", r, max_ck);
        }
    }
    pic_prefix_cache_maintain(pc);
    pic_prefix_cache_edges(pc, &n_ent, &max_ck);
    pic_prefix_cache_stats_get(pc, &st);
    print_message("%d edges, at most %d checkpoints each; %llu checkpoints, %llu re-solves, "
                  "%llu trimmed\n", n_ent, max_ck, (unsigned long long) st.checkpoints,
                  (unsigned long long) st.resolves, (unsigned long long) st.trims);
    assert_true(n_ent > 6 && max_ck <= 3);
    assert_true(st.checkpoints <= (uint64_t) (3 * n_ent) + st.tails);
    assert_true(st.resolves > 0 && st.resolves_in_request == 0);
    assert_true(st.bytes <= st.budget);
    pic_state_free(s);
    pic_prefix_cache_free(pc);
    pic_model_free(m);
}

/* The re-solve runs only where it is asked for (the keeper): prefills
 * never re-solve, and a re-solve on a thread marked as serving a request
 * is counted (the counter the server reports stays 0 because nothing does
 * that). */
static void
test_resolve_is_off_the_request_path(void **unused)
{
    pic_model *m = fixture_load("tiny-qwen35");
    if (m == NULL) {
        skip();
    }
    char              err[256];
    pic_prefix_opts   o = { .budget = 64u << 20,
                            .ckpt = { .block = 16, .m = 2, .min_history = 1,
                                      .resolve_every = 1 } };
    pic_prefix_cache *pc = pic_prefix_cache_init(m, &o, err, sizeof(err));
    pic_state        *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    pic_prefix_stats  st;
    pic_prefix_result r;
    int              *a = prompt(200, 120, 3, m->cfg.vocab);

    for (int q = 0; q < 5; q++) {
        int *p = prompt(200, 120, 3 + (unsigned) q, m->cfg.vocab);
        assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, p, 200, NULL, &r, err,
                                                  sizeof(err)), 0);
        free(p);
    }
    pic_prefix_cache_stats_get(pc, &st);
    assert_int_equal(st.resolves, 0);           /* due, but not done by requests */
    assert_true(pic_prefix_cache_due(pc));
    assert_true(pic_prefix_cache_maintain(pc) > 0);
    pic_prefix_cache_stats_get(pc, &st);
    assert_true(st.resolves > 0);
    assert_int_equal(st.resolves_in_request, 0);
    assert_false(pic_prefix_cache_due(pc));

    /* the counter works: a re-solve made inside a request is seen */
    visit(pc, s, a, 200);
    pic_prefix_cache_mark_request(1);
    pic_prefix_cache_maintain(pc);
    pic_prefix_cache_mark_request(0);
    pic_prefix_cache_stats_get(pc, &st);
    assert_true(st.resolves_in_request > 0);
    free(a);
    pic_state_free(s);
    pic_prefix_cache_free(pc);
    pic_model_free(m);
}

/* The leaf list (O(1) victim): evictions take leaves in least recently
 * used order, including a parent that its last child's eviction made a
 * leaf (it goes in by its age, not as the newest leaf); the bookkeeping
 * (pic_prefix_cache_check: the leaf list is exactly the childless nodes,
 * oldest last) holds after every request and eviction of a stress run
 * under a tight budget. */
static void
test_leaf_list_evicts_in_lru_order(void **unused)
{
    pic_model *m = fixture_load("tiny-qwen35");
    if (m == NULL) {
        skip();
    }
    char              err[256];
    pic_prefix_opts   o = { .budget = 64u << 20,
                            .ckpt = { .block = 16, .m = 2, .min_history = 1000 } };
    pic_prefix_cache *pc = pic_prefix_cache_init(m, &o, err, sizeof(err));
    pic_state        *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    int              *a = prompt(32, 0, 11, m->cfg.vocab);
    int              *b = prompt(32, 0, 12, m->cfg.vocab);
    int              *c = prompt(32, 0, 13, m->cfg.vocab);
    int               depth, resume, ids[400];
    pic_prefix_stats  st;

    visit(pc, s, a, 32);
    visit(pc, s, b, 32);
    visit(pc, s, c, 32);
    visit(pc, s, a, 32);                        /* recency: b < c < a */
    assert_true(pic_prefix_cache_check(pc));
    const int *order[3] = { b, c, a };
    for (int k = 0; k < 6; k++) {
        assert_true(pic_prefix_cache_evict_one(pc) > 0);
        assert_true(pic_prefix_cache_check(pc));
        for (int q = 0; q < 3; q++) {
            /* prompts before the victim's are gone, after it whole */
            int want = q < k / 2 ? 0 : q > k / 2 ? 32 : (k % 2 == 0 ? 16 : 0);
            pic_prefix_cache_lookup(pc, order[q], 32, &depth, &resume);
            if (depth != want) {
                fail_msg("after %d evictions prompt %d shares %d tokens, not %d", k + 1, q,
                         depth, want);
            }
        }
    }
    pic_prefix_cache_free(pc);

    /* stress: branching prompts under a budget of a few prompts */
    o.budget = 40 * (size_t) 16 * 2 * 4 * sizeof(float) * 64;
    pc = pic_prefix_cache_init(m, &o, err, sizeof(err));
    unsigned x = 777;
    for (int r = 0; r < 300; r++) {
        x = x * 1103515245u + 12345u;
        int doc = (int) ((x >> 16) % 5), keep = 16 + (int) ((x >> 8) % 200);
        int n = keep + 1 + (int) ((x >> 4) % 120);
        for (int i = 0; i < n; i++) {
            ids[i] = i < keep ? (int) ((unsigned) (doc * 7919 + i * 31) % (unsigned) m->cfg.vocab)
                              : (int) ((x + (unsigned) i * 17u) % (unsigned) m->cfg.vocab);
        }
        visit(pc, s, ids, n);
        if (!pic_prefix_cache_check(pc)) {
            fail_msg("request %d: the leaf list or the bytes are off", r);
        }
        if (r % 7 == 0) {
            pic_prefix_cache_evict_one(pc);
            assert_true(pic_prefix_cache_check(pc));
        }
    }
    pic_prefix_cache_stats_get(pc, &st);
    print_message("  %zu blocks held, %llu evictions, %zu of %zu bytes\n", st.blocks,
                  (unsigned long long) st.evictions, st.bytes, st.budget);
    assert_true(st.evictions > 100 && st.bytes <= st.budget);
    while (pic_prefix_cache_evict_one(pc) > 0) {
        assert_true(pic_prefix_cache_check(pc));
    }
    pic_prefix_cache_stats_get(pc, &st);
    assert_int_equal(st.bytes, 0);
    free(a); free(b); free(c);
    pic_state_free(s);
    pic_prefix_cache_free(pc);
    pic_model_free(m);
}

/* A solve made slow (a hook that waits inside maintain, after the
 * snapshot): a request walks and inserts into the tree meanwhile, which
 * it could not if maintain held the tree's lock (the hook would then time
 * out, failing the test).  The request split an edge being solved: that
 * placement is dropped, not applied to blocks it was not solved for, and
 * the edge is due again. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int             in_solve, released, timed_out;
} gate;

static void
slow_solve(void *arg)
{
    gate           *g = arg;
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 300;
    pthread_mutex_lock(&g->mu);
    g->in_solve = 1;
    pthread_cond_broadcast(&g->cv);
    while (!g->released && !g->timed_out) {
        g->timed_out = pthread_cond_timedwait(&g->cv, &g->mu, &until) == ETIMEDOUT;
    }
    pthread_mutex_unlock(&g->mu);
}

static void *
maintain_thread(void *pc)
{
    pic_prefix_cache_maintain(pc);
    return NULL;
}

static void
test_requests_proceed_while_a_solve_runs(void **unused)
{
    pic_model *m = fixture_load("tiny-qwen35");
    if (m == NULL) {
        skip();
    }
    char              err[256];
    pic_prefix_opts   o = { .budget = 64u << 20,
                            .ckpt = { .block = 16, .m = 2, .min_history = 1,
                                      .resolve_every = 1 } };
    pic_prefix_cache *pc = pic_prefix_cache_init(m, &o, err, sizeof(err));
    pic_state        *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    gate              g = { .in_solve = 0 };
    pic_prefix_stats  st;
    pthread_t         t;
    int               depth, resume;

    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    for (int q = 0; q < 5; q++) {
        int *p = prompt(200, 120, 3 + (unsigned) q, m->cfg.vocab);
        visit(pc, s, p, 200);
        free(p);
    }
    assert_true(pic_prefix_cache_due(pc));
    pic_prefix_cache_set_solve_hook(pc, slow_solve, &g);
    assert_int_equal(pthread_create(&t, NULL, maintain_thread, pc), 0);
    pthread_mutex_lock(&g.mu);
    while (!g.in_solve) {
        pthread_cond_wait(&g.cv, &g.mu);
    }
    pthread_mutex_unlock(&g.mu);

    /* while the solve runs: a request that branches inside the shared
     * edge (a split), and a lookup */
    int *p = prompt(200, 60, 99, m->cfg.vocab);
    visit(pc, s, p, 200);
    pic_prefix_cache_lookup(pc, p, 200, &depth, &resume);
    assert_int_equal(depth, 192);               /* its full blocks went in */
    assert_true(pic_prefix_cache_check(pc));

    pthread_mutex_lock(&g.mu);
    int late = g.timed_out;
    g.released = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    pthread_join(t, NULL);
    assert_false(late);
    pic_prefix_cache_stats_get(pc, &st);
    print_message("  during the solve: a request ran; %llu applied, %llu dropped\n",
                  (unsigned long long) st.resolves, (unsigned long long) st.resolves_dropped);
    assert_true(st.resolves_dropped >= 1);      /* the split edge */
    assert_true(pic_prefix_cache_due(pc));      /* ... is due again */
    pic_prefix_cache_set_solve_hook(pc, NULL, NULL);
    uint64_t dropped = st.resolves_dropped;
    assert_true(pic_prefix_cache_maintain(pc) > 0);
    pic_prefix_cache_stats_get(pc, &st);
    assert_int_equal(st.resolves_dropped, dropped);
    assert_int_equal(st.resolves_in_request, 0);
    assert_true(pic_prefix_cache_check(pc));
    int n_edges, max_ck;
    pic_prefix_cache_edges(pc, &n_edges, &max_ck);
    assert_true(max_ck <= 2);
    free(p);
    pthread_mutex_destroy(&g.mu);
    pthread_cond_destroy(&g.cv);
    pic_state_free(s);
    pic_prefix_cache_free(pc);
    pic_model_free(m);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_from_checkpoint_equals_full),
        cmocka_unit_test(test_mla_prefix_reuse_in_latent_form),
        cmocka_unit_test(test_checkpoints_come_from_the_prefaulted_stock),
        cmocka_unit_test(test_checkpoints_follow_observed_depths),
        cmocka_unit_test(test_budget_evicts_lru_leaves),
        cmocka_unit_test(test_threads_share_the_tree),
        cmocka_unit_test(test_each_edge_places_from_its_own_depths),
        cmocka_unit_test(test_edge_budget_holds_after_1000_requests),
        cmocka_unit_test(test_resolve_is_off_the_request_path),
        cmocka_unit_test(test_leaf_list_evicts_in_lru_order),
        cmocka_unit_test(test_requests_proceed_while_a_solve_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
