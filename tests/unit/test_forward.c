/*
 * test_forward.c — properties of the forward pass on a small random model
 * built in memory (dense and MoE FFNs, GDN with Hv = 2 Hk, GQA attention):
 * state carries across calls (split prefill == one prefill, prefill +
 * decode steps == one prefill, micro-batch boundaries invisible), and the
 * on_gdn hook hands out exactly what is needed to rebuild a linear layer's
 * state by composition, S_after = T S_before + S|0 (DESIGN.md §3.1).
 * Numbers against transformers live in tests/integration/test_oracle.py.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fixture_models.h"
#include "forward.h"
#include "model.h"
#include "state.h"

static uint64_t rng = 0x1234567887654321ull;

static float
frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float) ((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* every weight buffer, freed by the group teardown */
static void  *owned[512];
static size_t n_owned;

static void *
own(void *p)
{
    assert_non_null(p);
    assert_true(n_owned < sizeof(owned) / sizeof(owned[0]));
    owned[n_owned++] = p;
    return p;
}

static int
free_model(void **unused)
{
    while (n_owned > 0) {
        free(owned[--n_owned]);
    }
    return 0;
}

static float *
rnd(size_t n, float scale)
{
    float *v = own(malloc(n * sizeof(float)));
    for (size_t i = 0; i < n; i++) {
        v[i] = frand() * scale;
    }
    return v;
}

/* built once per run (fixed seed), freed by free_model */
static pic_model *
tiny_model(void)
{
    static pic_model m;
    static int       built;
    pic_config      *c = &m.cfg;
    int              H = 32;

    if (built) {
        return &m;
    }
    built = 1;
    memset(&m, 0, sizeof(m));
    c->arch = PIC_ARCH_QWEN3_5;
    c->hidden = H;
    c->n_layers = 5;
    c->vocab = 61;
    c->intermediate = 48;
    c->rms_eps = 1e-6f;
    c->tie_embeddings = 1;
    pic_layer_type lt[5] = { PIC_LAYER_LINEAR, PIC_LAYER_LINEAR, PIC_LAYER_FULL,
                             PIC_LAYER_LINEAR, PIC_LAYER_FULL };
    memcpy(c->layer_type, lt, sizeof(lt));
    c->n_q_heads = 4; c->n_kv_heads = 2; c->head_dim = 16; c->rotary_dim = 4;
    c->rope_theta = 10000.0f;
    pic_rope_init(&c->rope, c->rotary_dim, c->rope_theta);
    c->attn_gate = c->attn_qk_norm = c->norm_offset = 1;
    c->lin_k_heads = 2; c->lin_v_heads = 4; c->lin_k_dim = 8; c->lin_v_dim = 12;
    c->conv_kernel = 4;
    c->n_experts = 4; c->n_experts_per_tok = 2; c->moe_intermediate = 16;
    c->shared_intermediate = 24; c->norm_topk_prob = 1;
    c->layer_is_moe[1] = c->layer_is_moe[2] = 1;
    c->max_position = 4096;
    c->eos_ids[0] = 60; c->eos_ids[1] = c->eos_ids[2] = c->eos_ids[3] = -1;

    float s = 1.0f / sqrtf((float) H);
    int   Cc = 2 * 2 * 8 + 4 * 12, vd = 4 * 12, qd = 4 * 16, kvd = 2 * 16;

    m.w.embed = pic_wmat_f32(rnd((size_t) c->vocab * H, 1.0f), c->vocab, H);
    m.w.lm_head = m.w.embed;
    m.w.final_norm = rnd(H, 0.1f);
    for (int l = 0; l < c->n_layers; l++) {
        pic_layer_weights *w = &m.w.layers[l];
        w->input_norm = rnd(H, 0.1f);
        w->post_norm = rnd(H, 0.1f);
        if (lt[l] == PIC_LAYER_LINEAR) {
            w->in_qkv = pic_wmat_f32(rnd((size_t) Cc * H, s), Cc, H);
            w->in_z = pic_wmat_f32(rnd((size_t) vd * H, s), vd, H);
            w->in_b = rnd((size_t) 4 * H, s);
            w->in_a = rnd((size_t) 4 * H, s);
            w->conv_w = rnd((size_t) Cc * 4, 0.5f);
            w->dt_bias = rnd(4, 1.0f);
            w->A_log = rnd(4, 1.0f);
            w->gdn_norm = rnd(12, 1.0f);
            w->out_proj = pic_wmat_f32(rnd((size_t) H * vd, 1.0f / sqrtf((float) vd)), H, vd);
        } else {
            w->wq = pic_wmat_f32(rnd((size_t) 2 * qd * H, s), 2 * qd, H);
            w->wk = pic_wmat_f32(rnd((size_t) kvd * H, s), kvd, H);
            w->wv = pic_wmat_f32(rnd((size_t) kvd * H, s), kvd, H);
            w->wo = pic_wmat_f32(rnd((size_t) H * qd, 1.0f / sqrtf((float) qd)), H, qd);
            w->q_norm = rnd(16, 0.1f);
            w->k_norm = rnd(16, 0.1f);
        }
        if (c->layer_is_moe[l]) {
            w->router = rnd((size_t) 4 * H, s);
            w->experts = own(calloc(4, sizeof(pic_expert_weights)));
            for (int e = 0; e < 4; e++) {
                w->experts[e].gate = pic_wmat_f32(rnd((size_t) 16 * H, s), 16, H);
                w->experts[e].up = pic_wmat_f32(rnd((size_t) 16 * H, s), 16, H);
                w->experts[e].down = pic_wmat_f32(rnd((size_t) H * 16, 0.25f), H, 16);
            }
            w->shared.gate = pic_wmat_f32(rnd((size_t) 24 * H, s), 24, H);
            w->shared.up = pic_wmat_f32(rnd((size_t) 24 * H, s), 24, H);
            w->shared.down = pic_wmat_f32(rnd((size_t) H * 24, 0.2f), H, 24);
            w->shared_gate = rnd(H, s);
        } else {
            w->mlp_gate = pic_wmat_f32(rnd((size_t) 48 * H, s), 48, H);
            w->mlp_up = pic_wmat_f32(rnd((size_t) 48 * H, s), 48, H);
            w->mlp_down = pic_wmat_f32(rnd((size_t) H * 48, 1.0f / sqrtf(48.0f)), H, 48);
        }
    }
    return &m;
}

static int *
tokens(int n, int vocab)
{
    int *t = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) {
        t[i] = (int) ((i * 2654435761u + 17) % (unsigned) vocab);
    }
    return t;
}

static float
max_abs_diff(const float *a, const float *b, size_t n)
{
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        m = d > m ? d : m;
    }
    return m;
}

/* all logits of one prefill over ids */
static float *
prefill_all(pic_model *m, const int *ids, int n)
{
    char       err[256];
    float     *lg = malloc((size_t) n * m->cfg.vocab * sizeof(float));
    pic_state *s = pic_state_init(&m->cfg, 0, err, sizeof(err));

    assert_non_null(s);
    assert_int_equal(pic_forward(m, NULL, s, ids, n, 0, PIC_LOGITS_ALL, lg,
                                 NULL, err, sizeof(err)), 0);
    assert_int_equal(s->pos, n);
    pic_state_free(s);
    return lg;
}

static void
test_split_prefill_equals_one_prefill(void **unused)
{
    pic_model *m = tiny_model();
    int        n = 150, V = m->cfg.vocab;
    int       *ids = tokens(n, V);
    float     *ref = prefill_all(m, ids, n);
    char       err[256];
    static const int cuts[] = { 1, 63, 64, 65, 100, 149 };

    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
        int        a = cuts[i];
        float     *lg = malloc((size_t) n * V * sizeof(float));
        pic_state *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
        assert_int_equal(pic_forward(m, NULL, s, ids, a, 0, PIC_LOGITS_ALL, lg,
                                     NULL, err, sizeof(err)), 0);
        assert_int_equal(pic_forward(m, NULL, s, ids + a, n - a, a,
                                     PIC_LOGITS_ALL, lg + (size_t) a * V,
                                     NULL, err, sizeof(err)), 0);
        float e = max_abs_diff(ref, lg, (size_t) n * V);
        print_message("cut %d: max |Δlogit| %.3g\n", a, e);
        assert_true(e < 1e-4f);
        free(lg);
        pic_state_free(s);
    }
    free(ref);
    free(ids);
}

static void
test_prefill_then_decode_equals_one_prefill(void **unused)
{
    pic_model *m = tiny_model();
    int        n = 90, p = 37, V = m->cfg.vocab;
    int       *ids = tokens(n, V);
    float     *ref = prefill_all(m, ids, n);
    float     *lg = malloc((size_t) V * sizeof(float));
    char       err[256];
    pic_state *s = pic_state_init(&m->cfg, 0, err, sizeof(err));

    assert_int_equal(pic_forward(m, NULL, s, ids, p, 0, PIC_LOGITS_LAST, lg,
                                 NULL, err, sizeof(err)), 0);
    assert_true(max_abs_diff(ref + (size_t) (p - 1) * V, lg, V) < 1e-4f);
    for (int t = p; t < n; t++) {
        assert_int_equal(pic_forward(m, NULL, s, ids + t, 1, t, PIC_LOGITS_LAST,
                                     lg, NULL, err, sizeof(err)), 0);
        assert_true(max_abs_diff(ref + (size_t) t * V, lg, V) < 1e-4f);
    }
    free(lg);
    free(ref);
    free(ids);
    pic_state_free(s);
}

static void
noop_gdn(void *user, int layer, int p0, const pic_gdn_args *a)
{
    (void) user; (void) layer; (void) p0; (void) a;
}

/* Decode without hooks (conv, norms and recurrence in one pass over key
 * heads) is bit for bit the span-by-span path a hook forces. */
static void
test_decode_step_is_the_span_path(void **unused)
{
    pic_model         *m = tiny_model();
    const pic_config  *c = &m->cfg;
    int                n = 40, p = 9, V = c->vocab;
    int               *ids = tokens(n, V);
    float             *la = malloc((size_t) V * sizeof(float));
    float             *lb = malloc((size_t) V * sizeof(float));
    char               err[256];
    pic_forward_hooks  h = { .on_gdn = noop_gdn };
    pic_state         *a = pic_state_init(c, 0, err, sizeof(err));
    pic_state         *b = pic_state_init(c, 0, err, sizeof(err));
    size_t             sn = (size_t) c->lin_v_heads * c->lin_k_dim * c->lin_v_dim;
    size_t             cn = (size_t) pic_config_conv_ch(c) * (c->conv_kernel - 1);

    assert_int_equal(pic_forward(m, NULL, a, ids, p, 0, PIC_LOGITS_LAST, la, NULL,
                                 err, sizeof(err)), 0);
    assert_int_equal(pic_forward(m, NULL, b, ids, p, 0, PIC_LOGITS_LAST, lb, NULL,
                                 err, sizeof(err)), 0);
    for (int t = p; t < n; t++) {
        assert_int_equal(pic_forward(m, NULL, a, ids + t, 1, t, PIC_LOGITS_LAST, la,
                                     NULL, err, sizeof(err)), 0);
        assert_int_equal(pic_forward(m, NULL, b, ids + t, 1, t, PIC_LOGITS_LAST, lb,
                                     &h, err, sizeof(err)), 0);
        assert_memory_equal(la, lb, (size_t) V * sizeof(float));
    }
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_type[l] == PIC_LAYER_LINEAR) {
            assert_memory_equal(a->S[l], b->S[l], sn * sizeof(float));
            assert_memory_equal(a->conv[l], b->conv[l], cn * sizeof(float));
        }
    }
    free(la);
    free(lb);
    free(ids);
    pic_state_free(a);
    pic_state_free(b);
}

/* A prefill longer than one micro-batch equals the same tokens fed in two
 * calls that cut elsewhere (the micro-batch edge is invisible). */
static void
test_microbatch_edge_invisible(void **unused)
{
    pic_model *m = tiny_model();
    int        n = PIC_UBATCH + 77, V = m->cfg.vocab, a = 200;
    int       *ids = tokens(n, V);
    float     *ref = prefill_all(m, ids, n);
    float     *lg = malloc((size_t) n * V * sizeof(float));
    char       err[256];
    pic_state *s = pic_state_init(&m->cfg, 0, err, sizeof(err));

    assert_int_equal(pic_forward(m, NULL, s, ids, a, 0, PIC_LOGITS_ALL, lg,
                                 NULL, err, sizeof(err)), 0);
    assert_int_equal(pic_forward(m, NULL, s, ids + a, n - a, a, PIC_LOGITS_ALL,
                                 lg + (size_t) a * V, NULL, err, sizeof(err)), 0);
    assert_true(max_abs_diff(ref, lg, (size_t) n * V) < 1e-4f);
    free(lg);
    free(ref);
    free(ids);
    pic_state_free(s);
}

/* Two states sharing one workspace (a scheduler worker's slots), their
 * forwards interleaved, a long pass growing it between a short one's
 * steps, give bit for bit what states with their own give; freeing the
 * states leaves the shared workspace to its owner. */
static void
test_shared_workspace_changes_nothing(void **unused)
{
    pic_model    *m = tiny_model();
    int           n = PIC_UBATCH + 77, V = m->cfg.vocab, a = 50;
    int          *ids = tokens(n, V);
    float        *lg[4];                /* (V) each: s1, s2 shared; s3, s4 own */
    char          err[256];
    pic_workspace ws = { 0 };
    pic_state    *s[4];

    for (int i = 0; i < 4; i++) {
        lg[i] = malloc((size_t) V * sizeof(float));
        s[i] = pic_state_init(&m->cfg, 0, err, sizeof(err));
        assert_non_null(s[i]);
    }
    pic_state_share_workspace(s[0], &ws);
    pic_state_share_workspace(s[1], &ws);
    /* s1: a tokens, then the rest after s2's whole prompt grew the workspace */
    for (int i = 0; i < 4; i += 2) {
        assert_int_equal(pic_forward(m, NULL, s[i], ids, a, 0, PIC_LOGITS_NONE, NULL,
                                     NULL, err, sizeof(err)), 0);
        assert_int_equal(pic_forward(m, NULL, s[i + 1], ids, n, 0, PIC_LOGITS_LAST,
                                     lg[i + 1], NULL, err, sizeof(err)), 0);
        assert_int_equal(pic_forward(m, NULL, s[i], ids + a, n - a, a, PIC_LOGITS_LAST,
                                     lg[i], NULL, err, sizeof(err)), 0);
    }
    assert_memory_equal(lg[0], lg[2], (size_t) V * sizeof(float));
    assert_memory_equal(lg[1], lg[3], (size_t) V * sizeof(float));
    assert_non_null(ws.ws);                     /* the shared one was used ... */
    assert_null(s[0]->own.ws);                  /* ... and no own one */
    assert_null(s[1]->own.ws);
    assert_non_null(s[2]->own.ws);
    for (int i = 0; i < 4; i++) {
        pic_state_free(s[i]);
        free(lg[i]);
    }
    assert_non_null(ws.ws);                     /* the owner's to free */
    pic_workspace_free(pic_backend_cpu(), &ws);
    assert_null(ws.ws);
    free(ids);
}

/* --- checkpoints inside one forward (pic_forward_cuts) --- */

typedef struct {
    const pic_state *s;
    float          **S;         /* (n_cuts * n_layers) copies of S, NULL: not a linear layer */
    float          **conv;      /* same for the conv window */
    int              n_layers, calls;
} cut_ctx;

static void
capture_cut(void *user, int layer, int cut)
{
    cut_ctx          *h = user;
    const pic_state  *s = h->s;
    size_t            sn = (size_t) s->Hv * s->dk * s->dv;
    size_t            cn = (size_t) s->conv_ch * s->conv_k1;
    size_t            i = (size_t) cut * h->n_layers + layer;

    assert_null(h->S[i]);
    h->S[i] = malloc(sn * sizeof(float));
    h->conv[i] = malloc(cn * sizeof(float));
    memcpy(h->S[i], s->S[layer], sn * sizeof(float));
    memcpy(h->conv[i], s->conv[layer], cn * sizeof(float));
    h->calls++;
}

/* Run p0 + n tokens on m (p0 plain, then n with the cuts) twice:
 * pic_forward_cuts with on_cut copies, and one pic_forward per piece with
 * the states read between the calls.  Returns the largest difference
 * between the two of every linear layer's S and conv at every cut, the
 * final S, conv and KV and the last logits; *full gets the largest
 * difference of the checkpoints to plain forwards that stop at the cuts
 * and of the last logits to one plain forward of all p0 + n tokens. */
static float
cuts_vs_pieces(pic_model *m, int p0, int n, const int *cuts, int nc, float *full)
{
    const pic_config *c = &m->cfg;
    int               V = c->vocab, L = c->n_layers, hd = c->head_dim;
    int              *ids = tokens(p0 + n, V);
    char              err[256];
    size_t            sn = (size_t) c->lin_v_heads * c->lin_k_dim * c->lin_v_dim;
    size_t            cn = (size_t) pic_config_conv_ch(c) * (c->conv_kernel - 1);
    float            *la = malloc((size_t) V * sizeof(float));
    float            *lb = malloc((size_t) V * sizeof(float));
    float            *lf = malloc((size_t) V * sizeof(float));
    pic_state        *a = pic_state_init(c, 0, err, sizeof(err));
    pic_state        *b = pic_state_init(c, 0, err, sizeof(err));
    cut_ctx           h = { .s = b, .n_layers = L };
    pic_forward_hooks hooks = { .user = &h, .on_cut = capture_cut };
    float             d = 0.0f, e;

    *full = 0.0f;
    h.S = calloc((size_t) nc * L, sizeof(float *));
    h.conv = calloc((size_t) nc * L, sizeof(float *));
    assert_int_equal(pic_forward(m, NULL, a, ids, p0 + n, 0, PIC_LOGITS_LAST, lf, NULL,
                                 err, sizeof(err)), 0);
    assert_int_equal(pic_forward(m, NULL, b, ids, p0, 0, PIC_LOGITS_NONE, NULL, NULL,
                                 err, sizeof(err)), 0);
    assert_int_equal(pic_forward_cuts(m, NULL, b, ids + p0, n, p0, cuts, nc,
                                      PIC_LOGITS_LAST, lb, &hooks, err, sizeof(err)), 0);
    assert_int_equal(b->pos, p0 + n);
    for (int l = 0, lin = 0; l <= L; l++) {     /* one on_cut per linear layer and cut */
        if (l == L) {
            assert_int_equal(h.calls, nc * lin);
        } else if (c->layer_type[l] == PIC_LAYER_LINEAR) {
            lin++;
        }
    }
    /* the oracle: every checkpoint equals the state of one plain forward
     * that stops there */
    for (int k = 0; k < nc; k++) {
        pic_state_reset(a);
        assert_int_equal(pic_forward(m, NULL, a, ids, cuts[k], 0, PIC_LOGITS_NONE, NULL,
                                     NULL, err, sizeof(err)), 0);
        for (int l = 0; l < L; l++) {
            size_t i = (size_t) k * L + l;

            if (c->layer_type[l] == PIC_LAYER_LINEAR) {
                e = max_abs_diff(a->S[l], h.S[i], sn);
                *full = e > *full ? e : *full;
                e = max_abs_diff(a->conv[l], h.conv[i], cn);
                *full = e > *full ? e : *full;
            }
        }
    }
    pic_state_reset(a);
    assert_int_equal(pic_forward(m, NULL, a, ids, p0, 0, PIC_LOGITS_NONE, NULL, NULL,
                                 err, sizeof(err)), 0);
    for (int k = 0, at = p0; k <= nc && at < p0 + n; k++) {
        int to = k < nc ? cuts[k] : p0 + n;

        assert_int_equal(pic_forward(m, NULL, a, ids + at, to - at, at,
                                     to == p0 + n ? PIC_LOGITS_LAST : PIC_LOGITS_NONE,
                                     la, NULL, err, sizeof(err)), 0);
        at = to;
        for (int l = 0; k < nc && l < L; l++) {
            size_t i = (size_t) k * L + l;

            if (c->layer_type[l] != PIC_LAYER_LINEAR) {
                assert_null(h.S[i]);
                continue;
            }
            assert_non_null(h.S[i]);
            e = max_abs_diff(a->S[l], h.S[i], sn);
            d = e > d ? e : d;
            e = max_abs_diff(a->conv[l], h.conv[i], cn);
            d = e > d ? e : d;
        }
    }
    e = max_abs_diff(la, lb, V);
    d = e > d ? e : d;
    for (int l = 0; l < L; l++) {
        if (c->layer_type[l] == PIC_LAYER_LINEAR) {
            e = max_abs_diff(a->S[l], b->S[l], sn);
            d = e > d ? e : d;
            e = max_abs_diff(a->conv[l], b->conv[l], cn);
            d = e > d ? e : d;
            continue;
        }
        for (int hh = 0; hh < c->n_kv_heads; hh++) {
            size_t oa = (size_t) hh * a->cap * hd, ob = (size_t) hh * b->cap * hd;

            e = max_abs_diff(a->kc[l] + oa, b->kc[l] + ob, (size_t) (p0 + n) * hd);
            d = e > d ? e : d;
            e = max_abs_diff(a->vc[l] + oa, b->vc[l] + ob, (size_t) (p0 + n) * hd);
            d = e > d ? e : d;
        }
    }
    e = max_abs_diff(lf, lb, V);
    *full = e > *full ? e : *full;
    for (size_t i = 0; i < (size_t) nc * L; i++) {
        free(h.S[i]);
        free(h.conv[i]);
    }
    free(h.S);
    free(h.conv);
    free(la);
    free(lb);
    free(lf);
    free(ids);
    pic_state_free(a);
    pic_state_free(b);
    return d;
}

/* Checkpoints taken inside one call (cuts on and off the GDN chunk grid,
 * across a micro-batch edge, at the end, a one-token piece) on the random
 * model and every fixture preset: every checkpoint equals a plain forward
 * stopped there and the last logits one plain forward within 1e-4, and
 * all of it the same forward cut into one pic_forward per piece within
 * 2e-4.  Not bit for bit: the projections and FFN are GEMMs over the
 * whole micro-batch instead of each piece, and OpenBLAS rounds by row
 * count (up to 8e-5 between the two on tiny-qwen3next; the one call is
 * the closer to the plain forward). */
static void
test_cuts_inside_one_forward_equal_cut_forwards(void **unused)
{
    static const int sets[][8] = {
        { 4, 37 + 64, 37 + 65, 37 + 300, 37 + 301 },        /* grid, 1-token piece */
        { 3, 37 + 5, 37 + 520, 37 + PIC_UBATCH + 150 },     /* across a ubatch, end */
        { 1, 37 + 200 },
    };

    for (size_t mi = 0; mi <= sizeof(fixture_models) / sizeof(fixture_models[0]); mi++) {
        pic_model *m = mi == 0 ? tiny_model() : fixture_load(fixture_models[mi - 1]);

        assert_non_null(m);
        for (size_t q = 0; q < sizeof(sets) / sizeof(sets[0]); q++) {
            float full, d = cuts_vs_pieces(m, 37, PIC_UBATCH + 150, &sets[q][1],
                                           sets[q][0], &full);

            print_message("%s cuts %zu: vs pieces %.3g, vs plain %.3g\n",
                          mi == 0 ? "random" : fixture_models[mi - 1], q, d, full);
            assert_true(d < 2e-4f);       /* the per-piece path is the noisier */
            assert_true(full < 1e-4f);
        }
        if (mi > 0) {
            pic_model_free(m);
        }
    }
}

/* Cuts out of order or outside (p0, p0+n] are an error, before any work. */
static void
test_bad_cuts_are_an_error(void **unused)
{
    pic_model *m = tiny_model();
    char       err[256] = "";
    int        ids[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    pic_state *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    static const int bad[][3] = { { 2, 5, 5 }, { 2, 6, 4 }, { 1, 0, 0 }, { 1, 9, 0 } };

    for (size_t q = 0; q < sizeof(bad) / sizeof(bad[0]); q++) {
        assert_int_equal(pic_forward_cuts(m, NULL, s, ids, 8, 0, &bad[q][1], bad[q][0],
                                          PIC_LOGITS_NONE, NULL, NULL, err, sizeof(err)),
                         -1);
        assert_int_equal(s->pos, 0);
    }
    assert_non_null(strstr(err, "cut"));
    pic_state_free(s);
}

static void
test_bad_input_is_an_error(void **unused)
{
    pic_model *m = tiny_model();
    char       err[256] = "";
    float      lg[61];
    int        bad[2] = { 3, 61 };
    pic_state *s = pic_state_init(&m->cfg, 100, err, sizeof(err));

    assert_int_equal(pic_forward(m, NULL, s, bad, 2, 0, PIC_LOGITS_LAST, lg,
                                 NULL, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "token id 61"));
    assert_int_equal(pic_forward(m, NULL, s, bad, 1, 100, PIC_LOGITS_LAST, lg,
                                 NULL, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "context limit"));
    assert_int_equal(pic_forward(m, NULL, s, bad, 1, 0, PIC_LOGITS_LAST, NULL,
                                 NULL, err, sizeof(err)), -1);
    pic_state_free(s);
}

/* --- the PIC hook --- */

typedef struct {
    int    layer;
    float *T;       /* (Hv, dk, dk) */
    float *Sz;      /* (Hv, dk, dv) */
} hook_ctx;

static void
capture_gdn(void *user, int layer, int p0, const pic_gdn_args *a)
{
    hook_ctx          *h = user;
    const pic_backend *be = pic_backend_cpu();

    if (layer != h->layer) {
        return;
    }
    pic_gdn_args t = *a, z = *a;
    t.v = NULL;
    t.ds = a->dk;
    t.S = h->T;
    be->gdn_chunked(&t);
    z.S = h->Sz;
    be->gdn_chunked(&z);
}

static void
test_on_gdn_hook_gives_composable_operator(void **unused)
{
    pic_model *m = tiny_model();
    int        n = 100, a = 30, V = m->cfg.vocab;
    int        Hv = m->cfg.lin_v_heads, dk = m->cfg.lin_k_dim, dv = m->cfg.lin_v_dim;
    int       *ids = tokens(n, V);
    char       err[256];
    pic_state *s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    hook_ctx   h = { .layer = 3 };
    pic_forward_hooks hooks = { .user = &h, .on_gdn = capture_gdn };
    float     *lg = malloc(V * sizeof(float));

    h.T = calloc((size_t) Hv * dk * dk, sizeof(float));
    h.Sz = calloc((size_t) Hv * dk * dv, sizeof(float));
    for (int hh = 0; hh < Hv; hh++) {
        for (int i = 0; i < dk; i++) {
            h.T[(size_t) hh * dk * dk + i * dk + i] = 1.0f;
        }
    }
    assert_int_equal(pic_forward(m, NULL, s, ids, a, 0, PIC_LOGITS_NONE, NULL,
                                 NULL, err, sizeof(err)), 0);
    float *before = malloc((size_t) Hv * dk * dv * sizeof(float));
    memcpy(before, s->S[3], (size_t) Hv * dk * dv * sizeof(float));
    assert_int_equal(pic_forward(m, NULL, s, ids + a, n - a, a, PIC_LOGITS_LAST,
                                 lg, &hooks, err, sizeof(err)), 0);

    float err_max = 0.0f, mag = 0.0f;
    for (int hh = 0; hh < Hv; hh++) {
        for (int i = 0; i < dk; i++) {
            for (int j = 0; j < dv; j++) {
                double v = h.Sz[(size_t) hh * dk * dv + i * dv + j];
                for (int l = 0; l < dk; l++) {
                    v += (double) h.T[(size_t) hh * dk * dk + i * dk + l]
                         * before[(size_t) hh * dk * dv + l * dv + j];
                }
                float got = s->S[3][(size_t) hh * dk * dv + i * dv + j];
                err_max = fmaxf(err_max, fabsf((float) v - got));
                mag = fmaxf(mag, fabsf(got));
            }
        }
    }
    print_message("composed state error %.3g (|S| up to %.3g)\n", err_max, mag);
    assert_true(mag > 0.01f);
    assert_true(err_max < 1e-5f);
    free(before); free(h.T); free(h.Sz); free(lg); free(ids);
    pic_state_free(s);
}


/* --- backend memory: the device path on the CPU (pic_backend_cpu_dev) --- */

/* Bytes of layer l's S, conv, or KV (positions [0, pos)) in s, compared. */
static void
assert_states_equal(const pic_state *a, const pic_state *b)
{
    assert_int_equal(a->pos, b->pos);
    for (int l = 0; l < a->n_layers; l++) {
        if (a->S[l] != NULL) {
            assert_memory_equal(a->S[l], b->S[l], (size_t) a->Hv * a->dk * a->dv * sizeof(float));
            assert_memory_equal(a->conv[l], b->conv[l],
                                (size_t) a->conv_ch * a->conv_k1 * sizeof(float));
            continue;
        }
        for (int h = 0; h < a->Hkv; h++) {
            assert_memory_equal(a->kc[l] + (size_t) h * a->cap * a->hd,
                                b->kc[l] + (size_t) h * b->cap * b->hd,
                                (size_t) a->pos * a->hd * sizeof(float));
            assert_memory_equal(a->vc[l] + (size_t) h * a->cap * a->hd,
                                b->vc[l] + (size_t) h * b->cap * b->hd,
                                (size_t) a->pos * a->hd * sizeof(float));
        }
    }
}

/* Weights uploaded once (pic_model_to_backend), states on the backend
 * (pic_state_init_on): prefill, decode steps and a batched step give the
 * CPU's logits bit for bit on every fixture preset; pic_state_to_host
 * brings the state back equal to the CPU's, pic_state_clone stays on the
 * backend, and a forward mixing backends is refused. */
static void
test_device_memory_path_equals_cpu(void **unused)
{
    const pic_backend *dev = pic_backend_cpu_dev();
    char               err[256];

    assert_false(dev->host);
    for (size_t mi = 0; mi < sizeof(fixture_models) / sizeof(fixture_models[0]); mi++) {
        pic_model *m = fixture_load(fixture_models[mi]);
        assert_non_null(m);
        assert_null(pic_model_to_backend(m, pic_backend_cpu(), err, sizeof(err)));
        pic_model *dm = pic_model_to_backend(m, dev, err, sizeof(err));
        assert_non_null(dm);
        assert_ptr_equal(dm->be, dev);

        int     n = 140, V = m->cfg.vocab;
        int    *tok = fixture_tokens(n + 4, V, (unsigned) mi);
        float  *la = malloc((size_t) n * V * sizeof(float));
        float  *lb = malloc((size_t) n * V * sizeof(float));
        pic_state *a = pic_state_init(&m->cfg, 0, err, sizeof(err));
        pic_state *b = pic_state_init_on(&m->cfg, 0, dev, err, sizeof(err));
        assert_non_null(a);
        assert_non_null(b);
        assert_ptr_equal(b->be, dev);

        assert_int_equal(pic_forward(m, NULL, a, tok, n, 0, PIC_LOGITS_ALL, la, NULL,
                                     err, sizeof(err)), 0);
        assert_int_equal(pic_forward(dm, dev, b, tok, n, 0, PIC_LOGITS_ALL, lb, NULL,
                                     err, sizeof(err)), 0);
        assert_memory_equal(la, lb, (size_t) n * V * sizeof(float));
        for (int t = n; t < n + 2; t++) {
            assert_int_equal(pic_forward(m, NULL, a, tok + t, 1, t, PIC_LOGITS_LAST, la,
                                         NULL, err, sizeof(err)), 0);
            assert_int_equal(pic_forward(dm, dev, b, tok + t, 1, t, PIC_LOGITS_LAST, lb,
                                         NULL, err, sizeof(err)), 0);
            assert_memory_equal(la, lb, (size_t) V * sizeof(float));
        }

        pic_state *h = pic_state_to_host(b);
        assert_non_null(h);
        assert_ptr_equal(h->be, pic_backend_cpu());
        assert_states_equal(a, h);

        /* two sequences in one batched step: a's clone with b's clone */
        pic_state *a2 = pic_state_clone(a), *b2 = pic_state_clone(b);
        assert_ptr_equal(b2->be, dev);
        pic_state *sa[2] = { a, a2 }, *sb[2] = { b, b2 };
        int        bt[2] = { tok[n + 2], tok[n + 3] };
        assert_int_equal(pic_forward_batch(m, NULL, sa, bt, 2, la, err, sizeof(err)), 0);
        assert_int_equal(pic_forward_batch(dm, dev, sb, bt, 2, lb, err, sizeof(err)), 0);
        assert_memory_equal(la, lb, 2 * (size_t) V * sizeof(float));

        /* be NULL is the state's backend; weights or states on another
         * backend than the forward's are refused */
        assert_int_equal(pic_forward(dm, NULL, b2, tok, 1, b2->pos, PIC_LOGITS_LAST, lb,
                                     NULL, err, sizeof(err)), 0);
        assert_int_equal(pic_forward(m, NULL, b, tok, 1, b->pos, PIC_LOGITS_LAST, la,
                                     NULL, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "weights on backend cpu"));
        assert_int_equal(pic_forward(dm, dev, a, tok, 1, a->pos, PIC_LOGITS_LAST, la,
                                     NULL, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "state on backend cpu"));

        pic_state_free(a); pic_state_free(a2); pic_state_free(b); pic_state_free(b2);
        pic_state_free(h);
        free(la); free(lb); free(tok);
        pic_model_free(dm);
        pic_model_free(m);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_prefill_equals_one_prefill),
        cmocka_unit_test(test_prefill_then_decode_equals_one_prefill),
        cmocka_unit_test(test_decode_step_is_the_span_path),
        cmocka_unit_test(test_microbatch_edge_invisible),
        cmocka_unit_test(test_shared_workspace_changes_nothing),
        cmocka_unit_test(test_cuts_inside_one_forward_equal_cut_forwards),
        cmocka_unit_test(test_bad_cuts_are_an_error),
        cmocka_unit_test(test_bad_input_is_an_error),
        cmocka_unit_test(test_on_gdn_hook_gives_composable_operator),
        cmocka_unit_test(test_device_memory_path_equals_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, free_model);
}
