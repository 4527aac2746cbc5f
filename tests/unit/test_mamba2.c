/*
 * test_mamba2.c — the Mamba2 mixer (MODEL.md §9) and its state: the scan
 * against a float64 recurrence written from the formulas; a scan split in
 * two equals one scan; the zero-start state and decay product compose a
 * segment exactly (S_end = (Π a) S_start + S|0, the scalar transition
 * family); on the committed Mamba2 hybrids a forward cut in pieces equals
 * one forward, and prefix reuse from the tree's checkpoints equals full
 * recompute; an entry holds one transition scalar per head and Mamba2 layer.
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
#include "model_config.h"
#include "fixture_models.h"
#include "prefix_cache.h"
#include "state.h"

/* A random scan problem: H heads in G groups, n tokens, rows of C channels. */
typedef struct {
    int    n, H, G, P, N, ldx;
    float *xbc, *dt, *dtb, *A, *D;
} scan_case;

static float
rnd(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return ((float) (*s >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

static scan_case
scan_case_make(int n, int H, int G, int P, int N, unsigned seed)
{
    scan_case c = { .n = n, .H = H, .G = G, .P = P, .N = N, .ldx = H * P + 2 * G * N };

    c.xbc = malloc((size_t) n * c.ldx * sizeof(float));
    c.dt = malloc((size_t) n * H * sizeof(float));
    c.dtb = malloc((size_t) H * sizeof(float));
    c.A = malloc((size_t) H * sizeof(float));
    c.D = malloc((size_t) H * sizeof(float));
    for (int i = 0; i < n * c.ldx; i++) {
        c.xbc[i] = rnd(&seed);
    }
    for (int i = 0; i < n * H; i++) {
        c.dt[i] = 2.0f * rnd(&seed);
    }
    for (int h = 0; h < H; h++) {
        c.dtb[h] = -2.0f + rnd(&seed);
        c.A[h] = -expf(1.5f * (1.0f + rnd(&seed)));
        c.D[h] = 1.0f + 0.3f * rnd(&seed);
    }
    return c;
}

static void
scan_case_free(scan_case *c)
{
    free(c->xbc);
    free(c->dt);
    free(c->dtb);
    free(c->A);
    free(c->D);
}

static pic_ssd_args
scan_args(const scan_case *c, int t0, int n, float *S, float *y, float *decay)
{
    const float *r = c->xbc + (size_t) t0 * c->ldx;

    return (pic_ssd_args) {
        .n = n, .H = c->H, .G = c->G, .P = c->P, .N = c->N,
        .x = r, .B = r + c->H * c->P, .C = r + c->H * c->P + c->G * c->N, .ldx = c->ldx,
        .dt = c->dt + (size_t) t0 * c->H, .dt_bias = c->dtb, .dt_min = 0.0f,
        .dt_max = INFINITY, .A = c->A, .D = c->D, .S = S, .y = y,
        .ldy = c->H * c->P, .decay = decay,
    };
}

/* The formulas of MODEL.md §9 in float64: y (n, H*P), S (H, P, N) from S = 0. */
static void
scan_ref(const scan_case *c, double *y, double *S)
{
    int r = c->H / c->G;

    memset(S, 0, (size_t) c->H * c->P * c->N * sizeof(double));
    for (int t = 0; t < c->n; t++) {
        const float *row = c->xbc + (size_t) t * c->ldx;

        for (int h = 0; h < c->H; h++) {
            double       v = c->dt[t * c->H + h] + (double) c->dtb[h];
            double       dt = v > 20.0 ? v : log1p(exp(v)), a = exp(dt * c->A[h]);
            const float *x = row + h * c->P;
            const float *B = row + c->H * c->P + (h / r) * c->N;
            const float *C = B + c->G * c->N;

            for (int p = 0; p < c->P; p++) {
                double *Sp = S + ((size_t) h * c->P + p) * c->N, acc = 0.0;

                for (int j = 0; j < c->N; j++) {
                    Sp[j] = a * Sp[j] + dt * x[p] * B[j];
                    acc += Sp[j] * C[j];
                }
                y[(size_t) t * c->H * c->P + h * c->P + p] = acc + c->D[h] * x[p];
            }
        }
    }
}

static void
test_scan_matches_the_float64_recurrence(void **unused)
{
    (void) unused;
    const pic_backend *be = pic_backend_cpu();
    scan_case          c = scan_case_make(37, 6, 3, 5, 7, 11u);
    size_t             ny = (size_t) c.n * c.H * c.P, ns = (size_t) c.H * c.P * c.N;
    float             *y = malloc(ny * sizeof(float)), *S = calloc(ns, sizeof(float));
    double            *yr = malloc(ny * sizeof(double)), *Sr = malloc(ns * sizeof(double));
    double             ey = 0.0, es = 0.0, my = 0.0;

    pic_ssd_args a = scan_args(&c, 0, c.n, S, y, NULL);
    be->ssd_scan(&a);
    scan_ref(&c, yr, Sr);
    for (size_t i = 0; i < ny; i++) {
        ey = fmax(ey, fabs(y[i] - yr[i]));
        my = fmax(my, fabs(yr[i]));
    }
    for (size_t i = 0; i < ns; i++) {
        es = fmax(es, fabs(S[i] - Sr[i]));
    }
    print_message("  scan vs float64: y %.3g (max |y| %.3g), S %.3g\n", ey, my, es);
    assert_true(ey <= 1e-5 * fmax(1.0, my));
    assert_true(es <= 1e-5);
    free(y);
    free(S);
    free(yr);
    free(Sr);
    scan_case_free(&c);
}

/* One scan of 37 tokens = 20 then 17 on the carried state, bit for bit;
 * and the segment's transition: from S0, the second piece ends at
 * (Π a) S0 + S|0 with S|0 from a zero start (one scalar per head). */
static void
test_scan_splits_and_composes_by_a_scalar(void **unused)
{
    (void) unused;
    const pic_backend *be = pic_backend_cpu();
    scan_case          c = scan_case_make(37, 4, 2, 6, 5, 3u);
    size_t             ny = (size_t) c.n * c.H * c.P, ns = (size_t) c.H * c.P * c.N;
    float *y1 = malloc(ny * sizeof(float)), *y2 = malloc(ny * sizeof(float));
    float *S1 = calloc(ns, sizeof(float)), *S2 = calloc(ns, sizeof(float));
    float *S0 = calloc(ns, sizeof(float)), *Z = calloc(ns, sizeof(float));
    float  decay[4] = { 1.0f, 1.0f, 1.0f, 1.0f };
    double e = 0.0;

    pic_ssd_args a = scan_args(&c, 0, c.n, S1, y1, NULL);
    be->ssd_scan(&a);
    a = scan_args(&c, 0, 20, S2, y2, NULL);
    be->ssd_scan(&a);
    memcpy(S0, S2, ns * sizeof(float));            /* the state at 20 */
    a = scan_args(&c, 20, 17, S2, y2 + (size_t) 20 * c.H * c.P, NULL);
    be->ssd_scan(&a);
    assert_memory_equal(y1, y2, ny * sizeof(float));
    assert_memory_equal(S1, S2, ns * sizeof(float));

    a = scan_args(&c, 20, 17, Z, NULL, decay);     /* S|0 and Π a of [20, 37) */
    a.C = NULL;
    be->ssd_scan(&a);
    for (int h = 0; h < c.H; h++) {
        assert_true(decay[h] > 0.0f && decay[h] < 1.0f);
        for (int i = 0; i < c.P * c.N; i++) {
            size_t k = (size_t) h * c.P * c.N + i;

            e = fmax(e, fabs(decay[h] * S0[k] + Z[k] - S1[k]));
        }
    }
    print_message("  (Π a) S0 + S|0 vs the scan: %.3g\n", e);
    assert_true(e <= 1e-5);
    free(y1);
    free(y2);
    free(S1);
    free(S2);
    free(S0);
    free(Z);
    scan_case_free(&c);
}

/* The grouped gated norm against its formula. */
static void
test_gated_rmsnorm_groups(void **unused)
{
    (void) unused;
    const pic_backend *be = pic_backend_cpu();
    unsigned           seed = 5u;
    int                n = 3, dim = 24, G = 3, gs = dim / G;
    float              y[72], z[72], w[24], y0[72];

    for (int i = 0; i < n * dim; i++) {
        y[i] = y0[i] = rnd(&seed);
        z[i] = 2.0f * rnd(&seed);
    }
    for (int i = 0; i < dim; i++) {
        w[i] = 1.0f + 0.2f * rnd(&seed);
    }
    be->gated_rmsnorm(y, z, w, n, dim, G, 1e-6f);
    for (int t = 0; t < n; t++) {
        for (int g = 0; g < G; g++) {
            double ss = 0.0, v[8];

            for (int i = 0; i < gs; i++) {
                int k = t * dim + g * gs + i;

                v[i] = y0[k] * (z[k] / (1.0 + exp(-(double) z[k])));
                ss += v[i] * v[i];
            }
            for (int i = 0; i < gs; i++) {
                double want = v[i] / sqrt(ss / gs + 1e-6) * w[g * gs + i];

                assert_true(fabs(y[t * dim + g * gs + i] - want) <= 1e-5);
            }
        }
    }
}

static const char *const mamba_fixtures[] = {
    "tiny-bamba", "tiny-granite-h", "tiny-granite-h-dense",
};

typedef struct {
    pic_state *s;
    float    **S;                   /* [cut][layer] captured S */
    int        n_layers;
} cut_snap;

static void
snap_hook(void *user, int layer, int cut)
{
    cut_snap *cs = user;
    size_t    n = (size_t) cs->s->Hv * cs->s->dk * cs->s->dv;

    cs->S[cut * cs->n_layers + layer] = malloc(n * sizeof(float));
    memcpy(cs->S[cut * cs->n_layers + layer], cs->s->S[layer], n * sizeof(float));
}

/* pic_forward_cuts on a Mamba2 hybrid: the states at every cut equal a
 * plain forward stopped there, and the logits one forward's. */
static void
test_cut_states_equal_stopped_forwards(void **unused)
{
    (void) unused;
    for (size_t f = 0; f < sizeof(mamba_fixtures) / sizeof(mamba_fixtures[0]); f++) {
        pic_model *m = fixture_load(mamba_fixtures[f]);
        if (m == NULL) {
            skip();
        }
        const pic_config *c = &m->cfg;
        char              err[256];
        int               n = 150, cuts[3] = { 33, 64, 101 };
        int              *ids = fixture_tokens(n, c->vocab, 9u);
        pic_state        *s = pic_state_init(c, 0, err, sizeof(err));
        float            *lg = malloc((size_t) c->vocab * sizeof(float));
        float            *ref = malloc((size_t) c->vocab * sizeof(float));
        cut_snap          cs = { s, calloc((size_t) 3 * c->n_layers, sizeof(float *)),
                                 c->n_layers };
        pic_forward_hooks h = { .user = &cs, .on_cut = snap_hook };
        double            e = 0.0, el = 0.0;

        assert_int_equal(pic_forward_cuts(m, NULL, s, ids, n, 0, cuts, 3,
                                          PIC_LOGITS_LAST, lg, &h, err, sizeof(err)), 0);
        for (int k = 0; k < 3; k++) {
            pic_state *r = pic_state_init(c, 0, err, sizeof(err));

            assert_int_equal(pic_forward(m, NULL, r, ids, cuts[k], 0, PIC_LOGITS_NONE,
                                         NULL, NULL, err, sizeof(err)), 0);
            for (int l = 0; l < c->n_layers; l++) {
                if (c->layer_type[l] != PIC_LAYER_MAMBA2) {
                    assert_null(cs.S[k * c->n_layers + l]);
                    continue;
                }
                assert_non_null(cs.S[k * c->n_layers + l]);
                e = fmax(e, fixture_rel_l2(cs.S[k * c->n_layers + l], r->S[l],
                                           (size_t) r->Hv * r->dk * r->dv));
            }
            pic_state_free(r);
        }
        pic_state_reset(s);
        assert_int_equal(pic_forward(m, NULL, s, ids, n, 0, PIC_LOGITS_LAST, ref, NULL,
                                     err, sizeof(err)), 0);
        for (int i = 0; i < c->vocab; i++) {
            el = fmax(el, fabs(lg[i] - ref[i]));
        }
        print_message("  %s: cut states rel-L2 %.3g, logits %.3g\n", mamba_fixtures[f], e,
                      el);
        assert_true(e <= 1e-5);
        assert_true(el <= 1e-4);
        for (int i = 0; i < 3 * c->n_layers; i++) {
            free(cs.S[i]);
        }
        free(cs.S);
        free(ids);
        free(lg);
        free(ref);
        pic_state_free(s);
        pic_model_free(m);
    }
}

/* Prefix reuse on a Mamba2 hybrid: a request resumes from the deepest
 * checkpoint (S and conv window of every Mamba2 layer) at or below the
 * depth it shares, and its logits and states equal a full prefill. */
static void
test_prefix_resume_equals_full(void **unused)
{
    (void) unused;
    for (size_t f = 0; f < sizeof(mamba_fixtures) / sizeof(mamba_fixtures[0]); f++) {
        pic_model *m = fixture_load(mamba_fixtures[f]);
        if (m == NULL) {
            skip();
        }
        const pic_config *c = &m->cfg;
        char              err[256];
        pic_prefix_opts   o = { .budget = 64u << 20,
                                .ckpt = { .block = 64, .m = 4, .min_history = 1000 } };
        pic_prefix_cache *pc = pic_prefix_cache_init(m, &o, err, sizeof(err));
        pic_state        *s = pic_state_init(c, 0, err, sizeof(err));
        pic_state        *full = pic_state_init(c, 0, err, sizeof(err));
        float            *lg = malloc((size_t) c->vocab * sizeof(float));
        float            *ref = malloc((size_t) c->vocab * sizeof(float));
        int              *a = fixture_tokens(300, c->vocab, 1u);
        int              *b = fixture_tokens(400, c->vocab, 1u);
        pic_prefix_result r;
        double            el = 0.0, es = 0.0;

        for (int i = 200; i < 400; i++) {           /* b shares a's first 200 */
            b[i] = (b[i] * 7 + 13) % c->vocab;
        }
        assert_non_null(pc);
        assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, a, 300, lg, &r, err,
                                                  sizeof(err)), 0);
        assert_int_equal(r.resume, 0);
        assert_int_equal(r.new_checkpoints, 4);
        assert_int_equal(pic_prefix_cache_prefill(pc, NULL, s, b, 400, lg, &r, err,
                                                  sizeof(err)), 0);
        assert_int_equal(r.depth, 200);
        assert_int_equal(r.resume, 192);
        assert_int_equal(pic_forward(m, NULL, full, b, 400, 0, PIC_LOGITS_LAST, ref, NULL,
                                     err, sizeof(err)), 0);
        for (int i = 0; i < c->vocab; i++) {
            el = fmax(el, fabs(lg[i] - ref[i]));
        }
        for (int l = 0; l < c->n_layers; l++) {
            if (c->layer_type[l] == PIC_LAYER_MAMBA2) {
                es = fmax(es, fixture_rel_l2(s->S[l], full->S[l],
                                             (size_t) s->Hv * s->dk * s->dv));
                es = fmax(es, fixture_rel_l2(s->conv[l], full->conv[l],
                                             (size_t) s->conv_ch * s->conv_k1));
            }
        }
        print_message("  %s: resume at %d: logits %.3g, states rel-L2 %.3g\n",
                      mamba_fixtures[f], r.resume, el, es);
        assert_true(el <= 1e-4);
        assert_true(es <= 1e-5);
        free(a);
        free(b);
        free(lg);
        free(ref);
        pic_state_free(s);
        pic_state_free(full);
        pic_prefix_cache_free(pc);
        pic_model_free(m);
    }
}

/* A Mamba2 entry: per Mamba2 layer T is one decay product per head (Hv
 * floats, each in [0, 1)), S|0 (Hv, P, N) and the conv tail; it survives
 * serialisation bit for bit. */
static void
test_entry_holds_a_scalar_per_head(void **unused)
{
    (void) unused;
    pic_model *m = fixture_load("tiny-granite-h");
    if (m == NULL) {
        skip();
    }
    const pic_config *c = &m->cfg;
    char              err[256];
    int              *ids = fixture_tokens(100, c->vocab, 4u);
    pic_entry_opts    o = { .w = 8, .dtype = PIC_DTYPE_F32 };
    pic_entry        *e = NULL, *back;
    size_t            n_ssm = 0;
    int               n_live = 0;

    assert_int_equal(pic_entry_build(m, NULL, ids, 100, &o, &e, NULL, err, sizeof(err)),
                     0);
    assert_non_null(e);
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_type[l] != PIC_LAYER_MAMBA2) {
            assert_null(e->layer[l].T);
            continue;
        }
        n_ssm++;
        for (int h = 0; h < c->ssm_heads; h++) {
            float a = ((const float *) e->layer[l].T)[h];

            assert_true(a >= 0.0f && a < 1.0f);     /* fast heads underflow to 0 */
            n_live += a > 0.0f;
        }
    }
    assert_true(n_live > 0);
    assert_int_equal(e->bytes_T, n_ssm * c->ssm_heads * sizeof(float));
    assert_int_equal(e->bytes_S,
                     n_ssm * c->ssm_heads * c->ssm_head_dim * c->ssm_state * sizeof(float));
    size_t n = pic_entry_serialized_size(e);
    void  *buf = malloc(n);
    assert_int_equal(pic_entry_serialize(e, buf, n), n);
    back = pic_entry_deserialize(m, buf, n, err, sizeof(err));
    assert_non_null(back);
    assert_int_equal(back->bytes_T, e->bytes_T);
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_type[l] == PIC_LAYER_MAMBA2) {
            assert_memory_equal(back->layer[l].T, e->layer[l].T,
                                (size_t) c->ssm_heads * sizeof(float));
        }
    }
    free(buf);
    free(ids);
    pic_entry_unref(e);
    pic_entry_unref(back);
    pic_model_free(m);
}

/* Mamba2 configs the engine cannot run are refused at parse time with the
 * key named; a good one fills the state's shape into the GDN fields. */
static void
test_config_refusals_name_the_key(void **unused)
{
    (void) unused;
    static const char *base =
        "{\"model_type\": \"bamba\", \"hidden_size\": 64, \"num_hidden_layers\": 2,"
        " \"vocab_size\": 100, \"intermediate_size\": 32, \"num_attention_heads\": 4,"
        " \"num_key_value_heads\": 2, \"mamba_n_heads\": 8, \"mamba_d_state\": 12%s}";
    static const char *good = ", \"mamba_n_groups\": 2, \"attn_layer_indices\": [1]";
    static const struct { const char *extra, *want; } bad[] = {
        { ", \"mamba_proj_bias\": true", "mamba_proj_bias" },
        { ", \"mamba_n_groups\": 3", "multiple of mamba_n_groups" },
        { ", \"attn_layer_indices\": [5]", "attn_layer_indices" },
        { ", \"mamba_d_head\": 10", "mamba_d_head" },
        { ", \"time_step_limit\": [0.5, 0.1]", "time_step_limit" },
        { ", \"time_step_limit\": [0.0, \"inf\"]", "time_step_limit" },
        { ", \"hidden_act\": \"gelu\"", "hidden_act" },
    };
    pic_config cfg;
    char       json[1024], err[512];

    snprintf(json, sizeof(json), base, good);
    assert_int_equal(pic_config_parse(&cfg, json, strlen(json), "config.json", err,
                                      sizeof(err)), 0);
    assert_int_equal(cfg.layer_type[0], PIC_LAYER_MAMBA2);
    assert_int_equal(cfg.layer_type[1], PIC_LAYER_FULL);
    assert_int_equal(cfg.ssm_head_dim, 16);
    assert_int_equal(cfg.lin_v_heads, 8);
    assert_int_equal(pic_config_conv_ch(&cfg), 128 + 2 * 2 * 12);
    assert_true(isinf(cfg.ssm_dt_max) && cfg.ssm_dt_min == 0.0f);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(json, sizeof(json), base, bad[i].extra);
        err[0] = '\0';
        assert_int_equal(pic_config_parse(&cfg, json, strlen(json), "config.json", err,
                                          sizeof(err)), -1);
        if (strstr(err, bad[i].want) == NULL) {
            print_message("%s: %s\n", bad[i].extra, err);
        }
        assert_non_null(strstr(err, bad[i].want));
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scan_matches_the_float64_recurrence),
        cmocka_unit_test(test_scan_splits_and_composes_by_a_scalar),
        cmocka_unit_test(test_gated_rmsnorm_groups),
        cmocka_unit_test(test_cut_states_equal_stopped_forwards),
        cmocka_unit_test(test_prefix_resume_equals_full),
        cmocka_unit_test(test_entry_holds_a_scalar_per_head),
        cmocka_unit_test(test_config_refusals_name_the_key),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
