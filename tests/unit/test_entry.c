/*
 * test_entry.c — segment entries (engine/pic/entry.h) on the tiny fixture
 * checkpoints: T_I and S_I|0 compose the isolated prefill's own states
 * (S after [0, L−w) = T_I · S after [0, h) + S_I|0, each side from its own
 * forward), conv tails and K/V are the prefill's, whole entries equal the
 * end state, a context entry of a segment at 0 equals the isolated one,
 * bf16 storage stays close, and the serialised payload round-trips and
 * rejects every corruption tried.
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

#include "entry.h"
#include "forward.h"
#include "model.h"
#include "fixture_models.h"
#include "state.h"

/* fp32 copy of n elements of an entry tensor */
static float *
f32(const void *src, size_t n, pic_dtype dt)
{
    float *f = malloc(n * sizeof(float));
    pic_entry_load_f32(f, src, n, dt);
    return f;
}

static pic_state *
prefill(pic_model *m, const int *ids, int n)
{
    char       err[256];
    pic_state *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    assert_non_null(s);
    if (n > 0) {
        assert_int_equal(pic_forward(m, NULL, s, ids, n, 0, PIC_LOGITS_NONE, NULL,
                                     NULL, err, sizeof(err)), 0);
    }
    return s;
}

static void
test_bf16_rounding(void **unused)
{
    float    src[6] = { 1.0f, -2.5f, 1.00390625f, 1.01171875f, 1.0e-30f, 65504.0f };
    uint16_t h[6];
    float    back[6];

    pic_entry_store(h, src, 6, PIC_DTYPE_BF16);
    pic_entry_load_f32(back, h, 6, PIC_DTYPE_BF16);
    print_message("%.9g %.9g\n", back[2], back[3]);
    assert_true(back[0] == 1.0f && back[1] == -2.5f);
    assert_true(back[2] == 1.0f);               /* tie 1 + 2^-8 → even (1.0) */
    assert_true(back[3] == 1.015625f);          /* tie 1 + 3·2^-8 → even (1 + 2^-6) */
    for (int i = 0; i < 6; i++) {
        assert_true(fabsf(back[i] - src[i]) <= fabsf(src[i]) * (1.0f / 256.0f));
    }
}

/* The seam entry's T and S|0 reproduce the isolated prefill's state at the
 * interior's end from its state after the head seam; conv tail and K/V are
 * the prefill's. */
static void
check_seam_entry(pic_model *m, int L, int w)
{
    const pic_config *c = &m->cfg;
    int              *ids = fixture_tokens(L, c->vocab, 3);
    pic_entry_opts    o = { .w = w, .dtype = PIC_DTYPE_F32 };
    pic_entry        *se = NULL, *we = NULL;
    char              err[256];
    int               h = pic_entry_head(c, w);

    assert_int_equal(pic_entry_build(m, NULL, ids, L, &o, &se, &we, err, sizeof(err)), 0);
    assert_non_null(se);
    assert_non_null(we);
    assert_int_equal(se->h, h);
    assert_int_equal(se->i0, h);
    assert_int_equal(se->i1, L - w);
    assert_int_equal(se->has_T, 1);
    assert_int_equal(we->h, 0);
    assert_int_equal(we->i1, L);
    assert_int_equal(we->has_T, 0);
    assert_memory_equal(se->tokens, ids, (size_t) L * sizeof(int));

    pic_state *sh = prefill(m, ids, h);
    pic_state *si = prefill(m, ids, L - w);
    pic_state *sl = prefill(m, ids, L);
    int        Hv = c->lin_v_heads, dk = c->lin_k_dim, dv = c->lin_v_dim;
    size_t     nS = (size_t) Hv * dk * dv;
    float     *want = malloc(nS * sizeof(float));

    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_type[l] == PIC_LAYER_LINEAR) {
            const float *T = se->layer[l].T, *S0 = se->layer[l].S;
            for (int hh = 0; hh < Hv; hh++) {
                for (int i = 0; i < dk; i++) {
                    for (int j = 0; j < dv; j++) {
                        double v = S0[(size_t) hh * dk * dv + i * dv + j];
                        for (int k = 0; k < dk; k++) {
                            v += (double) T[(size_t) hh * dk * dk + i * dk + k]
                                 * sh->S[l][(size_t) hh * dk * dv + k * dv + j];
                        }
                        want[(size_t) hh * dk * dv + i * dv + j] = (float) v;
                    }
                }
            }
            double e1 = fixture_rel_l2(want, si->S[l], nS);
            double e2 = fixture_rel_l2(we->layer[l].S, sl->S[l], nS);
            print_message("L=%d w=%d layer %d: |T S_H + S_I|0 − S| %.2g, whole %.2g\n",
                          L, w, l, e1, e2);
            assert_true(e1 < 1e-5);
            assert_true(e2 < 1e-5);
            /* the same prefill cut differently: equal up to rounding */
            size_t nc = (size_t) se->conv_ch * se->conv_k1;
            assert_true(fixture_rel_l2(se->layer[l].conv, si->conv[l], nc) < 1e-5);
            assert_true(fixture_rel_l2(we->layer[l].conv, sl->conv[l], nc) < 1e-5);
        } else {
            int    ni = L - w - h, hd = c->head_dim;
            for (int j = 0; j < c->n_kv_heads; j++) {
                const float *K = (const float *) se->layer[l].K + (size_t) j * ni * hd;
                const float *V = (const float *) se->layer[l].V + (size_t) j * ni * hd;
                const float *Kw = (const float *) we->layer[l].K + (size_t) j * L * hd;
                size_t       slot = ((size_t) j * sl->cap + h) * hd;
                assert_true(fixture_rel_l2(K, sl->kc[l] + slot, (size_t) ni * hd) < 1e-5);
                assert_true(fixture_rel_l2(V, sl->vc[l] + slot, (size_t) ni * hd) < 1e-5);
                assert_true(fixture_rel_l2(Kw, sl->kc[l] + (size_t) j * sl->cap * hd,
                                   (size_t) L * hd) < 1e-5);
            }
        }
    }
    size_t sum = se->bytes_T + se->bytes_S + se->bytes_conv + se->bytes_K + se->bytes_V;
    assert_true(se->bytes >= sum + (size_t) L * sizeof(int));
    assert_int_equal(we->bytes_T, 0);
    free(want);
    free(ids);
    pic_state_free(sh);
    pic_state_free(si);
    pic_state_free(sl);
    pic_entry_unref(se);
    pic_entry_unref(we);
}

static void
test_seam_entry_composes_own_prefill(void **unused)
{
    for (size_t i = 0; i < sizeof(fixture_models) / sizeof(fixture_models[0]); i++) {
        pic_model *m = fixture_load(fixture_models[i]);
        if (m == NULL) {
            skip();
        }
        print_message("%s\n", fixture_models[i]);
        check_seam_entry(m, 57, 8);
        check_seam_entry(m, 150, 0);            /* chunks of 64 inside the interior */
        check_seam_entry(m, PIC_UBATCH + 90, 5);    /* micro-batches inside */
        pic_model_free(m);
    }
}

static void
test_short_segment_gets_no_seam_entry(void **unused)
{
    pic_model     *m = fixture_load("tiny-qwen35");
    pic_entry_opts o = { .w = 8, .dtype = PIC_DTYPE_F32 };
    pic_entry     *se = (pic_entry *) 1, *we = NULL;
    char           err[256];
    int           *ids;

    if (m == NULL) {
        skip();
    }
    ids = fixture_tokens(20, m->cfg.vocab, 1);
    assert_int_equal(pic_entry_worth(&m->cfg, 31, &o), 0);     /* 8 + 8 + 15 */
    assert_int_equal(pic_entry_worth(&m->cfg, 32, &o), 1);
    assert_int_equal(pic_entry_build(m, NULL, ids, 20, &o, &se, &we, err, sizeof(err)), 0);
    assert_null(se);
    assert_non_null(we);
    pic_entry_unref(we);
    o.w = PIC_ENTRY_MAX_W + 1;
    assert_int_equal(pic_entry_build(m, NULL, ids, 20, &o, &se, NULL, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "seam width"));
    o.w = 4;
    assert_int_equal(pic_entry_build(m, NULL, ids, 0, &o, &se, NULL, err, sizeof(err)), -1);
    ids[3] = m->cfg.vocab;
    assert_int_equal(pic_entry_build(m, NULL, ids, 20, &o, NULL, &we, err, sizeof(err)), -1);
    assert_null(we);
    free(ids);
    pic_model_free(m);
}

/* Context entries of a single segment (the context is the segment) equal
 * the isolated build; bf16 entries are within bf16 rounding of fp32. */
static void
test_context_single_segment_and_bf16(void **unused)
{
    pic_model     *m = fixture_load("tiny-qwen3next");
    pic_entry_opts o = { .w = 8, .dtype = PIC_DTYPE_F32 }, ob = o;
    pic_entry     *iso = NULL, *ctx = NULL, *b16 = NULL;
    char           err[256];
    int            L = 90;

    if (m == NULL) {
        skip();
    }
    int *ids = fixture_tokens(L, m->cfg.vocab, 9);
    ob.dtype = PIC_DTYPE_BF16;
    assert_int_equal(pic_entry_build(m, NULL, ids, L, &o, &iso, NULL, err, sizeof(err)), 0);
    assert_int_equal(pic_entry_build(m, NULL, ids, L, &ob, &b16, NULL, err, sizeof(err)), 0);
    assert_int_equal(pic_entry_build_context(m, NULL, ids, L, &L, 1, &o, &ctx, err,
                                             sizeof(err)), 0);
    assert_non_null(ctx);
    pic_entry_tensor ta[64], tb[64], tc[64];
    int nt = pic_entry_tensors(iso, ta, 64);
    assert_int_equal(pic_entry_tensors(ctx, tc, 64), nt);
    assert_int_equal(pic_entry_tensors(b16, tb, 64), nt);
    for (int i = 0; i < nt; i++) {
        size_t n = ta[i].bytes / 4;
        assert_int_equal(tb[i].bytes, ta[i].kind == PIC_TENSOR_CONV ? n * 4 : n * 2);
        float *b = f32(tb[i].data, n, tb[i].dtype);
        double ec = fixture_rel_l2(tc[i].data, ta[i].data, n), eb = fixture_rel_l2(b, ta[i].data, n);
        print_message("layer %d kind %d: context %.2g bf16 %.2g\n", ta[i].layer,
                      ta[i].kind, ec, eb);
        assert_true(ec < 1e-5);
        assert_true(eb < 8e-3);
        free(b);
    }
    assert_true(b16->bytes < iso->bytes * 0.6);
    pic_entry_unref(iso);
    pic_entry_unref(ctx);
    pic_entry_unref(b16);
    free(ids);
    pic_model_free(m);
}

static void
test_check_and_refcount(void **unused)
{
    pic_model     *m = fixture_load("tiny-qwen35");
    pic_entry_opts o = { .w = 4, .dtype = PIC_DTYPE_F32 };
    pic_entry     *e = NULL;
    char           err[256];

    if (m == NULL) {
        skip();
    }
    int *ids = fixture_tokens(40, m->cfg.vocab, 2);
    assert_int_equal(pic_entry_build(m, NULL, ids, 40, &o, &e, NULL, err, sizeof(err)), 0);
    assert_int_equal(pic_entry_check(e, m, ids, 40, err, sizeof(err)), 0);
    assert_int_equal(pic_entry_check(e, m, ids, 39, err, sizeof(err)), -1);
    ids[5]++;
    assert_int_equal(pic_entry_check(e, m, ids, 40, err, sizeof(err)), -1);
    ids[5]--;
    m->fingerprint ^= 1;
    assert_int_equal(pic_entry_check(e, m, ids, 40, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "model"));
    m->fingerprint ^= 1;
    assert_ptr_equal(pic_entry_ref(e), e);
    assert_int_equal(e->refs, 2);
    pic_entry_unref(e);
    assert_int_equal(e->refs, 1);
    pic_entry_unref(e);
    pic_entry_unref(NULL);
    free(ids);
    pic_model_free(m);
}

static void
test_serialize_round_trip_and_rejects(void **unused)
{
    pic_model     *m = fixture_load("tiny-qwen35-moe");
    pic_entry_opts o = { .w = 8, .dtype = PIC_DTYPE_BF16 };
    pic_entry     *e = NULL, *we = NULL;
    char           err[256];

    if (m == NULL) {
        skip();
    }
    int *ids = fixture_tokens(70, m->cfg.vocab, 4);
    assert_int_equal(pic_entry_build(m, NULL, ids, 70, &o, &e, &we, err, sizeof(err)), 0);
    for (int k = 0; k < 2; k++) {
        pic_entry     *src = k ? we : e;
        size_t         n = pic_entry_serialized_size(src);
        unsigned char *buf = malloc(n + 8);
        assert_int_equal(pic_entry_serialize(src, buf, n - 1), 0);
        assert_int_equal(pic_entry_serialize(src, buf, n), n);
        pic_entry *back = pic_entry_deserialize(m, buf, n, err, sizeof(err));
        assert_non_null(back);
        assert_int_equal(back->n_tokens, src->n_tokens);
        assert_int_equal(back->h, src->h);
        assert_int_equal(back->w, src->w);
        assert_int_equal(back->has_T, src->has_T);
        assert_int_equal(back->dtype, src->dtype);
        assert_int_equal(back->bytes, src->bytes);
        unsigned char *buf2 = malloc(n);
        assert_int_equal(pic_entry_serialize(back, buf2, n), n);
        assert_memory_equal(buf, buf2, n);
        pic_entry_unref(back);

        /* truncated, extended, wrong model, wrong magic */
        assert_null(pic_entry_deserialize(m, buf, n - 1, err, sizeof(err)));
        assert_null(pic_entry_deserialize(m, buf, n + 8, err, sizeof(err)));
        assert_null(pic_entry_deserialize(m, buf, 10, err, sizeof(err)));
        m->fingerprint ^= 2;
        assert_null(pic_entry_deserialize(m, buf, n, err, sizeof(err)));
        m->fingerprint ^= 2;
        memcpy(buf2, buf, n);
        buf2[0] ^= 1;
        assert_null(pic_entry_deserialize(m, buf2, n, err, sizeof(err)));
        /* every header byte flipped in turn: parse or reject, never crash,
         * and a parsed one must describe a consistent entry */
        for (size_t i = 0; i < 60 + 4 * 3; i++) {
            memcpy(buf2, buf, n);
            buf2[i] ^= 0x5a;
            pic_entry *x = pic_entry_deserialize(m, buf2, n, err, sizeof(err));
            if (x != NULL) {
                assert_int_equal(pic_entry_serialized_size(x), n);
                pic_entry_unref(x);
            }
        }
        /* a token outside the vocab, a NaN in the last tensor */
        memcpy(buf2, buf, n);
        size_t tok0 = 60 + (size_t) m->cfg.n_layers;
        buf2[tok0 + 2] = 0x7f;
        assert_null(pic_entry_deserialize(m, buf2, n, err, sizeof(err)));
        assert_non_null(strstr(err, "vocab"));
        memcpy(buf2, buf, n);
        buf2[n - 1] = 0x7f;
        buf2[n - 2] = 0xc0;
        assert_null(pic_entry_deserialize(m, buf2, n, err, sizeof(err)));
        assert_non_null(strstr(err, "non-finite"));
        free(buf);
        free(buf2);
    }
    pic_entry_tensor t[64];
    int nt = pic_entry_tensors(e, t, 64);
    assert_int_equal(nt, 3 * 3 + 2);        /* LLLF: T S conv ×3, K V */
    assert_int_equal(t[nt - 1].kind, PIC_TENSOR_V);
    assert_int_equal(t[nt - 1].shape[1], 70 - 8 - 8);
    pic_entry_unref(e);
    pic_entry_unref(we);
    free(ids);
    pic_model_free(m);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_seam_entry_composes_own_prefill),
        cmocka_unit_test(test_short_segment_gets_no_seam_entry),
        cmocka_unit_test(test_context_single_segment_and_bf16),
        cmocka_unit_test(test_check_and_refcount),
        cmocka_unit_test(test_serialize_round_trip_and_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
