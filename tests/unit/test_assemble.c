/*
 * test_assemble.c — PIC assembly (engine/pic/assemble.h) against full
 * recompute on every tiny fixture checkpoint (Qwen3.5 dense and MoE,
 * Qwen3-Next, real head shapes), DESIGN.md §3.3:
 *  (1) entries computed from a full-context forward assemble into the full
 *      recompute's logits (≤ 1e-4) and states for w ∈ {0, 8};
 *  (2) with isolated entries the first linear layer's composed state
 *      equals full recompute (rel-L2 ≤ 1e-5, fp32);
 *  (3) naive addition is measurably worse than PIC;
 *  (4) the exact prefix reproduces full recompute;
 * plus K re-rotation R(a)R(b) = R(a+b), decode after assembly, entries
 * that do not fit being recomputed, and the run bookkeeping.
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

#include "assemble.h"
#include "entry.h"
#include "forward.h"
#include "model.h"
#include "fixture_models.h"
#include "state.h"

#define NSEG 5
static const int seg_len[NSEG] = { 41, 57, 36, 70, 9 };     /* last: the query */

static float
max_abs(const float *a, const float *b, size_t n)
{
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        m = fmaxf(m, fabsf(a[i] - b[i]));
    }
    return m;
}

static int
total_len(void)
{
    int n = 0;
    for (int i = 0; i < NSEG; i++) {
        n += seg_len[i];
    }
    return n;
}

/* full recompute: state and last logits */
static pic_state *
full(pic_model *m, const int *ids, int n, float *logits)
{
    char       err[256];
    pic_state *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    assert_non_null(s);
    assert_int_equal(pic_forward(m, NULL, s, ids, n, 0, PIC_LOGITS_LAST, logits,
                                 NULL, err, sizeof(err)), 0);
    return s;
}

static void
segments(const int *ids, pic_entry **e, pic_asm_segment *sg)
{
    for (int i = 0, off = 0; i < NSEG; off += seg_len[i], i++) {
        sg[i].tokens = ids + off;
        sg[i].n = seg_len[i];
        sg[i].entry = e != NULL ? e[i] : NULL;
    }
}

/* Largest state difference over all layers (S, conv, and KV below n). */
static double
state_err(const pic_state *a, const pic_state *b, const pic_config *c, int n)
{
    double worst = 0.0;
    for (int l = 0; l < c->n_layers; l++) {
        double e;
        if (c->layer_type[l] == PIC_LAYER_LINEAR) {
            e = fixture_rel_l2(a->S[l], b->S[l], (size_t) a->Hv * a->dk * a->dv);
            worst = fmax(worst, e);
            e = fixture_rel_l2(a->conv[l], b->conv[l], (size_t) a->conv_ch * a->conv_k1);
        } else {
            e = 0.0;
            for (int j = 0; j < a->Hkv; j++) {
                e = fmax(e, fixture_rel_l2(a->kc[l] + (size_t) j * a->cap * a->hd,
                                   b->kc[l] + (size_t) j * b->cap * b->hd,
                                   (size_t) n * a->hd));
                e = fmax(e, fixture_rel_l2(a->vc[l] + (size_t) j * a->cap * a->hd,
                                   b->vc[l] + (size_t) j * b->cap * b->hd,
                                   (size_t) n * a->hd));
            }
        }
        worst = fmax(worst, e);
    }
    return worst;
}

static int
first_linear(const pic_config *c)
{
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_type[l] == PIC_LAYER_LINEAR) {
            return l;
        }
    }
    return -1;
}

/* (1) context entries reproduce full recompute. */
static void
test_context_entries_reproduce_full(void **unused)
{
    for (size_t mi = 0; mi < sizeof(fixture_models) / sizeof(fixture_models[0]); mi++) {
        pic_model *m = fixture_load(fixture_models[mi]);
        if (m == NULL) {
            skip();
        }
        int        n = total_len(), V = m->cfg.vocab;
        int       *ids = fixture_tokens(n, V, 11);
        float     *ref = malloc((size_t) V * sizeof(float));
        float     *lg = malloc((size_t) V * sizeof(float));
        pic_state *sf = full(m, ids, n, ref);
        char       err[256];
        static const int ws[] = { 0, 8 };

        for (size_t wi = 0; wi < 2; wi++) {
            pic_entry_opts     o = { .w = ws[wi], .dtype = PIC_DTYPE_F32 };
            pic_entry         *e[NSEG];
            pic_asm_segment    sg[NSEG];
            pic_assemble_stats st;

            assert_int_equal(pic_entry_build_context(m, NULL, ids, n, seg_len, NSEG,
                                                     &o, e, err, sizeof(err)), 0);
            for (int i = 0; i < NSEG - 1; i++) {
                assert_non_null(e[i]);
            }
            assert_null(e[NSEG - 1]);               /* the query is too short */
            segments(ids, e, sg);
            pic_state *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
            assert_int_equal(pic_assemble(m, NULL, s, sg, NSEG, PIC_MODE_PIC, lg, &st,
                                          err, sizeof(err)), 0);
            float  dl = max_abs(lg, ref, V);
            double ds = state_err(s, sf, &m->cfg, n);
            print_message("%-16s w=%d: max |Δlogit| %.3g, state rel-L2 %.3g, "
                          "recomputed %d of %d in %d runs\n", fixture_models[mi], ws[wi],
                          dl, ds, st.n_recomputed, n, st.n_runs);
            assert_true(dl <= 1e-4f);
            assert_true(ds <= 1e-4);
            assert_int_equal(s->pos, n);
            assert_int_equal(st.n_composed, NSEG - 1);
            assert_int_equal(st.n_rejected, 0);
            int h = pic_entry_head(&m->cfg, ws[wi]);
            assert_int_equal(st.n_recomputed, (NSEG - 1) * (h + ws[wi]) + seg_len[NSEG - 1]);
            assert_int_equal(st.n_reused + st.n_recomputed, n);
            assert_int_equal(st.n_runs, NSEG);      /* [H1] [T1 H2] … [T4 Q] */
            pic_state_free(s);
            for (int i = 0; i < NSEG; i++) {
                pic_entry_unref(e[i]);
            }
        }
        free(ids); free(ref); free(lg);
        pic_state_free(sf);
        pic_model_free(m);
    }
}

/* A recomputed stretch longer than one micro-batch (a segment without an
 * entry) splits a run across layer-major passes: still full recompute. */
static void
test_long_run_crosses_passes(void **unused)
{
    pic_model *m = fixture_load("tiny-qwen35-moe");
    if (m == NULL) {
        skip();
    }
    int        lens[4] = { 41, PIC_UBATCH + 88, 57, 9 };
    int        n = 41 + PIC_UBATCH + 88 + 57 + 9, V = m->cfg.vocab;
    int       *ids = fixture_tokens(n, V, 31);
    float     *ref = malloc((size_t) V * sizeof(float));
    float     *lg = malloc((size_t) V * sizeof(float));
    pic_state *sf = full(m, ids, n, ref);
    pic_entry *e[4];
    pic_asm_segment sg[4];
    pic_entry_opts o = { .w = 8, .dtype = PIC_DTYPE_F32 };
    pic_assemble_stats st;
    char       err[256];

    assert_int_equal(pic_entry_build_context(m, NULL, ids, n, lens, 4, &o, e, err,
                                             sizeof(err)), 0);
    pic_entry_unref(e[1]);
    e[1] = NULL;                            /* a miss: recomputed whole */
    for (int i = 0, off = 0; i < 4; off += lens[i], i++) {
        sg[i].tokens = ids + off;
        sg[i].n = lens[i];
        sg[i].entry = e[i];
    }
    pic_state *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    assert_int_equal(pic_assemble(m, NULL, s, sg, 4, PIC_MODE_PIC, lg, &st, err,
                                  sizeof(err)), 0);
    print_message("long run: max |Δlogit| %.3g, state %.3g, %d runs, %d recomputed\n",
                  max_abs(lg, ref, V), state_err(s, sf, &m->cfg, n), st.n_runs,
                  st.n_recomputed);
    assert_int_equal(st.n_runs, 3);
    assert_int_equal(st.n_recomputed, 8 + 8 + lens[1] + 8 + 8 + 9);
    assert_true(max_abs(lg, ref, V) <= 1e-4f);
    assert_true(state_err(s, sf, &m->cfg, n) <= 1e-4);
    for (int i = 0; i < 4; i++) {
        pic_entry_unref(e[i]);
    }
    pic_state_free(s);
    pic_state_free(sf);
    free(ids); free(ref); free(lg);
    pic_model_free(m);
}

/* Entries built alone for every segment at w; whole entries too. */
static void
isolated(pic_model *m, const int *ids, int w, pic_dtype dt, pic_entry **seam,
         pic_entry **whole)
{
    pic_entry_opts o = { .w = w, .dtype = dt };
    char           err[256];

    for (int i = 0, off = 0; i < NSEG; off += seg_len[i], i++) {
        assert_int_equal(pic_entry_build(m, NULL, ids + off, seg_len[i], &o, &seam[i],
                                         whole ? &whole[i] : NULL, err, sizeof(err)), 0);
    }
}

static void
unref_all(pic_entry **e)
{
    for (int i = 0; i < NSEG; i++) {
        pic_entry_unref(e[i]);
        e[i] = NULL;
    }
}

/* (2) layer-0 exactness with isolated entries, (3) naive is worse, (4)
 * exact prefix. */
static void
test_isolated_entries_layer0_exact_naive_worse(void **unused)
{
    for (size_t mi = 0; mi < sizeof(fixture_models) / sizeof(fixture_models[0]); mi++) {
        pic_model *m = fixture_load(fixture_models[mi]);
        if (m == NULL) {
            skip();
        }
        const pic_config *c = &m->cfg;
        int        n = total_len(), V = c->vocab, l0 = first_linear(c);
        int        deep = -1;
        int       *ids = fixture_tokens(n, V, 5);
        float     *ref = malloc((size_t) V * sizeof(float));
        float     *lg = malloc((size_t) V * sizeof(float));
        pic_state *sf = full(m, ids, n, ref);
        pic_state *s = NULL;
        pic_entry *seam[NSEG], *whole[NSEG];
        pic_asm_segment sg[NSEG];
        char       err[256];
        size_t     nS = (size_t) c->lin_v_heads * c->lin_k_dim * c->lin_v_dim;

        for (int l = 0; l < c->n_layers; l++) {
            deep = c->layer_type[l] == PIC_LAYER_LINEAR ? l : deep;
        }
        s = pic_state_init(c, 0, err, sizeof(err));
        isolated(m, ids, 8, PIC_DTYPE_F32, seam, whole);

        /* PIC */
        segments(ids, seam, sg);
        assert_int_equal(pic_assemble(m, NULL, s, sg, NSEG, PIC_MODE_PIC, lg, NULL,
                                      err, sizeof(err)), 0);
        double pic0 = fixture_rel_l2(s->S[l0], sf->S[l0], nS);
        double picc = fixture_rel_l2(s->conv[l0], sf->conv[l0], (size_t) s->conv_ch * s->conv_k1);
        double picd = fixture_rel_l2(s->S[deep], sf->S[deep], nS);
        float  picl = max_abs(lg, ref, V);

        /* the same with the leading segment as exact prefix */
        sg[0].entry = whole[0];
        pic_assemble_stats st;
        assert_int_equal(pic_assemble(m, NULL, s, sg, NSEG, PIC_MODE_PIC, lg, &st,
                                      err, sizeof(err)), 0);
        double pre0 = fixture_rel_l2(s->S[l0], sf->S[l0], nS);
        assert_int_equal(st.n_prefix, seg_len[0]);
        assert_int_equal(st.n_runs, NSEG - 1);

        /* naive: whole entries, S ← S + S|0 */
        segments(ids, whole, sg);
        sg[NSEG - 1].entry = NULL;
        assert_int_equal(pic_assemble(m, NULL, s, sg, NSEG, PIC_MODE_NAIVE, lg, &st,
                                      err, sizeof(err)), 0);
        double nai0 = fixture_rel_l2(s->S[l0], sf->S[l0], nS);
        double naid = fixture_rel_l2(s->S[deep], sf->S[deep], nS);
        float  nail = max_abs(lg, ref, V);
        assert_int_equal(st.n_recomputed, seg_len[NSEG - 1]);

        print_message("%-16s layer %d: PIC %.2g (conv %.2g, prefix %.2g), naive %.2g; "
                      "layer %d: PIC %.2g naive %.2g; logits PIC %.3g naive %.3g\n",
                      fixture_models[mi], l0, pic0, picc, pre0, nai0, deep, picd, naid,
                      picl, nail);
        assert_true(pic0 <= 1e-5);
        assert_true(picc <= 1e-5);
        assert_true(pre0 <= 1e-5);
        assert_true(nai0 > 1e-2);                   /* no T: measurably off */
        assert_true(nai0 > 100 * pic0);
        assert_true(naid > picd);
        assert_true(nail > picl);

        unref_all(seam);
        unref_all(whole);
        pic_state_free(s);
        pic_state_free(sf);
        free(ids); free(ref); free(lg);
        pic_model_free(m);
    }
}

/* Exact prefix mode: the whole first segment from its entry, everything
 * else recomputed, is bit for bit the same computation as a prefill cut at
 * the segment's end (and within rounding of one prefill); decode then
 * continues as after full recompute. */
static void
test_exact_prefix_equals_full_and_decode_continues(void **unused)
{
    pic_model *m = fixture_load("tiny-qwen3next");
    if (m == NULL) {
        skip();
    }
    int        n = total_len(), V = m->cfg.vocab, extra = 6, L0 = seg_len[0];
    int       *ids = fixture_tokens(n + extra, V, 8);
    float     *ref = malloc((size_t) V * sizeof(float));
    float     *cut = malloc((size_t) V * sizeof(float));
    float     *lg = malloc((size_t) V * sizeof(float));
    float     *r2 = malloc((size_t) V * sizeof(float));
    pic_state *sf = full(m, ids, n, ref);
    pic_entry *seam[NSEG], *whole[NSEG];
    pic_entry_opts o = { .w = 8, .dtype = PIC_DTYPE_F32 };
    pic_asm_segment sg[NSEG];
    pic_assemble_stats st;
    char       err[256];

    isolated(m, ids, 8, PIC_DTYPE_F32, seam, whole);
    pic_entry_unref(whole[0]);
    assert_int_equal(pic_entry_build(m, NULL, ids, L0, &o, NULL, &whole[0], err,
                                     sizeof(err)), 0);
    pic_state *sc = pic_state_init(&m->cfg, 0, err, sizeof(err));
    assert_int_equal(pic_forward(m, NULL, sc, ids, L0, 0, PIC_LOGITS_NONE, NULL,
                                 NULL, err, sizeof(err)), 0);
    assert_int_equal(pic_forward(m, NULL, sc, ids + L0, n - L0, L0, PIC_LOGITS_LAST,
                                 cut, NULL, err, sizeof(err)), 0);
    segments(ids, whole, sg);
    pic_state *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    assert_int_equal(pic_assemble(m, NULL, s, sg, NSEG, PIC_MODE_PREFIX, lg, &st,
                                  err, sizeof(err)), 0);
    print_message("prefix: max |Δlogit| vs cut prefill %.3g, vs one prefill %.3g, "
                  "state %.3g\n", max_abs(lg, cut, V), max_abs(lg, ref, V),
                  state_err(s, sf, &m->cfg, n));
    assert_true(max_abs(lg, cut, V) == 0.0f);
    assert_true(state_err(s, sc, &m->cfg, n) == 0.0);
    assert_true(max_abs(lg, ref, V) <= 1e-4f);
    assert_true(state_err(s, sf, &m->cfg, n) <= 1e-5);
    assert_int_equal(st.n_prefix, seg_len[0]);
    assert_int_equal(st.n_recomputed, n - seg_len[0]);
    assert_int_equal(st.n_runs, 1);
    pic_state_free(sc);
    free(cut);
    for (int t = n; t < n + extra; t++) {
        assert_int_equal(pic_forward(m, NULL, s, ids + t, 1, t, PIC_LOGITS_LAST, lg,
                                     NULL, err, sizeof(err)), 0);
        assert_int_equal(pic_forward(m, NULL, sf, ids + t, 1, t, PIC_LOGITS_LAST, r2,
                                     NULL, err, sizeof(err)), 0);
        assert_true(max_abs(lg, r2, V) <= 1e-4f);
    }
    /* full mode ignores every entry */
    assert_int_equal(pic_assemble(m, NULL, s, sg, NSEG, PIC_MODE_FULL, lg, &st,
                                  err, sizeof(err)), 0);
    assert_int_equal(st.n_recomputed, n);
    assert_true(max_abs(lg, ref, V) == 0.0f);
    unref_all(seam);
    unref_all(whole);
    pic_state_free(s);
    pic_state_free(sf);
    free(ids); free(ref); free(lg); free(r2);
    pic_model_free(m);
}

/* Entries that do not fit are recomputed, never used: other tokens, a whole
 * entry away from position 0 in PIC mode. */
static void
test_unfit_entries_are_recomputed(void **unused)
{
    pic_model *m = fixture_load("tiny-qwen35");
    if (m == NULL) {
        skip();
    }
    int        n = total_len(), V = m->cfg.vocab;
    int       *ids = fixture_tokens(n, V, 21);
    float     *ref = malloc((size_t) V * sizeof(float));
    float     *lg = malloc((size_t) V * sizeof(float));
    pic_state *sf = full(m, ids, n, ref);
    pic_entry *seam[NSEG], *whole[NSEG];
    pic_asm_segment sg[NSEG];
    pic_assemble_stats st;
    char       err[256];

    isolated(m, ids, 8, PIC_DTYPE_F32, seam, whole);
    segments(ids, NULL, sg);
    sg[1].entry = seam[2];                  /* another segment's entry */
    sg[2].entry = whole[2];                 /* no T, not at position 0 */
    pic_state *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    assert_int_equal(pic_assemble(m, NULL, s, sg, NSEG, PIC_MODE_PIC, lg, &st,
                                  err, sizeof(err)), 0);
    assert_int_equal(st.n_rejected, 2);
    assert_int_equal(st.n_composed, 0);
    assert_int_equal(st.n_recomputed, n);
    assert_true(max_abs(lg, ref, V) <= 1e-5f);
    /* a whole last segment with no logits wanted needs no run at its end */
    segments(ids, whole, sg);
    assert_int_equal(pic_assemble(m, NULL, s, sg, NSEG, PIC_MODE_NAIVE, NULL, &st,
                                  err, sizeof(err)), 0);
    assert_int_equal(st.n_recomputed, 0);
    assert_int_equal(s->pos, n);
    /* with logits wanted, it is recomputed */
    assert_int_equal(pic_assemble(m, NULL, s, sg, NSEG, PIC_MODE_NAIVE, lg, &st,
                                  err, sizeof(err)), 0);
    assert_int_equal(st.n_recomputed, seg_len[NSEG - 1]);
    assert_int_equal(pic_assemble(m, NULL, s, sg, 0, PIC_MODE_PIC, lg, &st,
                                  err, sizeof(err)), -1);
    unref_all(seam);
    unref_all(whole);
    pic_state_free(s);
    pic_state_free(sf);
    free(ids); free(ref); free(lg);
    pic_model_free(m);
}

/* R(a)R(b) = R(a+b) on the backend's rope, and placing an interior's K at
 * offset off equals K computed at the global positions. */
static void
test_rerotation_composes(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    int                hd = 256, rd = 64, n = 5;
    float              x[5 * 256], y[5 * 256];
    int                a[5] = { 0, 7, 1000, 16383, 250000 };
    int                b[5] = { 3, -7, 31000, 16383, -250000 };
    int                ab[5];
    pic_rope           rp;

    for (int i = 0; i < n * hd; i++) {
        x[i] = y[i] = sinf(0.37f * (float) i) + 0.1f;
    }
    for (int t = 0; t < n; t++) {
        ab[t] = a[t] + b[t];
    }
    assert_int_equal(pic_rope_init(&rp, rd, 1e7f), 0);
    be->rope(x, hd, a, n, 1, hd, &rp);
    be->rope(x, hd, b, n, 1, hd, &rp);
    be->rope(y, hd, ab, n, 1, hd, &rp);
    float d = 0.0f;
    for (int i = 0; i < n * hd; i++) {
        d = fmaxf(d, fabsf(x[i] - y[i]));
    }
    print_message("max |R(a)R(b)x − R(a+b)x| = %.3g\n", d);
    assert_true(d < 1e-5f);
    /* dims past rotary_dim pass through untouched */
    assert_true(x[hd - 1] == sinf(0.37f * (float) (hd - 1)) + 0.1f);
}

/* MLA: an isolated entry's latent rows placed at offset P (k_pe turned by
 * R(P), c_KV as stored) equal the rows the forward computes for the same
 * segment at positions P.. behind any context, in the first layer (whose
 * input is the token embedding alone), on the yarn (V2) and the default
 * (V3) RoPE; and the entry holds no V. */
static void
test_mla_rerotation_matches_segment_at_target(void **unused)
{
    static const char *const names[] = { "tiny-deepseek-v2", "tiny-deepseek-v3" };

    for (int mi = 0; mi < 2; mi++) {
        pic_model *m = fixture_load(names[mi]);
        if (m == NULL) {
            skip();
        }
        const pic_config *c = &m->cfg;
        int        L = 60, P = 211, V = c->vocab, lw = c->qk_rope_dim + c->kv_lora_rank;
        int       *ids = fixture_tokens(P + L, V, 29);
        pic_entry_opts o = { .w = 8, .dtype = PIC_DTYPE_F32 };
        pic_entry *se = NULL;
        char       err[256];
        float     *lg = malloc((size_t) V * sizeof(float));
        pic_state *ref = full(m, ids, P + L, lg);
        pic_state *s = pic_state_init(c, 0, err, sizeof(err));

        assert_int_equal(pic_entry_build(m, NULL, ids + P, L, &o, &se, NULL, err,
                                         sizeof(err)), 0);
        assert_non_null(se);
        assert_true(se->vd == 0 && se->bytes_V == 0 && se->layer[0].V == NULL);
        assert_int_equal((int) se->bytes_K, c->n_layers * (se->i1 - se->i0) * lw * 4);
        assert_int_equal(pic_state_reserve(s, P + L, err, sizeof(err)), 0);
        assert_int_equal(pic_assemble_place_kv(m, s, se, P), 0);

        size_t at = (size_t) (P + se->i0) * lw, rows = (size_t) (se->i1 - se->i0);
        float  dpe = 0.0f, dc = 0.0f, mag = 0.0f;
        for (size_t t = 0; t < rows; t++) {
            const float *a = s->kc[0] + at + t * lw, *b = ref->kc[0] + at + t * lw;

            for (int d = 0; d < lw; d++) {
                float e = fabsf(a[d] - b[d]);
                if (d < c->qk_rope_dim) {
                    dpe = fmaxf(dpe, e);
                    mag = fmaxf(mag, fabsf(b[d]));
                } else {
                    dc = fmaxf(dc, e);
                }
            }
        }
        /* the same k_pe unrotated would be far off: the check has teeth */
        float dnone = 0.0f;
        for (size_t t = 0; t < rows; t++) {
            const float *a = (const float *) se->layer[0].K + t * lw;
            const float *b = ref->kc[0] + at + t * lw;

            for (int d = 0; d < c->qk_rope_dim; d++) {
                dnone = fmaxf(dnone, fabsf(a[d] - b[d]));
            }
        }
        print_message("%s: placed at %d, layer 0: max |Δk_pe| %.3g (|k_pe| %.3g, unrotated "
                      "%.3g), max |Δc_KV| %.3g\n", names[mi], P, dpe, mag, dnone, dc);
        assert_true(dpe <= 1e-5f * fmaxf(1.0f, mag));
        assert_true(dc <= 1e-6f);
        assert_true(dnone > 100.0f * dpe);

        /* the latent entry serialises (K tensors only) and reads back whole */
        size_t     sz = pic_entry_serialized_size(se);
        void      *buf = malloc(sz);
        assert_int_equal(pic_entry_serialize(se, buf, sz), sz);
        pic_entry *back = pic_entry_deserialize(m, buf, sz, err, sizeof(err));
        assert_non_null(back);
        assert_int_equal(pic_entry_tensors(back, NULL, 0), c->n_layers);
        assert_memory_equal(back->layer[1].K, se->layer[1].K, se->bytes_K / c->n_layers);
        pic_entry_unref(back);
        free(buf);
        pic_entry_unref(se);
        pic_state_free(s);
        pic_state_free(ref);
        free(ids);
        free(lg);
        pic_model_free(m);
    }
}

/* bf16 entries still give a close answer (storage, not composition, rounds). */
static void
test_bf16_entries_close(void **unused)
{
    pic_model *m = fixture_load("tiny-realheads");
    if (m == NULL) {
        skip();
    }
    const pic_config *c = &m->cfg;
    int        n = total_len(), V = c->vocab, l0 = first_linear(c);
    int       *ids = fixture_tokens(n, V, 13);
    float     *ref = malloc((size_t) V * sizeof(float));
    float     *lg = malloc((size_t) V * sizeof(float));
    pic_state *sf = full(m, ids, n, ref);
    pic_entry *seam[NSEG];
    pic_asm_segment sg[NSEG];
    char       err[256];

    isolated(m, ids, 8, PIC_DTYPE_BF16, seam, NULL);
    segments(ids, seam, sg);
    pic_state *s = pic_state_init(c, 0, err, sizeof(err));
    assert_int_equal(pic_assemble(m, NULL, s, sg, NSEG, PIC_MODE_PIC, lg, NULL,
                                  err, sizeof(err)), 0);
    double e0 = fixture_rel_l2(s->S[l0], sf->S[l0],
                       (size_t) c->lin_v_heads * c->lin_k_dim * c->lin_v_dim);
    print_message("bf16 entries: layer-0 rel-L2 %.3g\n", e0);
    assert_true(e0 < 2e-2);
    unref_all(seam);
    pic_state_free(s);
    pic_state_free(sf);
    free(ids); free(ref); free(lg);
    pic_model_free(m);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_context_entries_reproduce_full),
        cmocka_unit_test(test_long_run_crosses_passes),
        cmocka_unit_test(test_isolated_entries_layer0_exact_naive_worse),
        cmocka_unit_test(test_exact_prefix_equals_full_and_decode_continues),
        cmocka_unit_test(test_unfit_entries_are_recomputed),
        cmocka_unit_test(test_rerotation_composes),
        cmocka_unit_test(test_mla_rerotation_matches_segment_at_target),
        cmocka_unit_test(test_bf16_entries_close),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
