/*
 * test_kernels.c — the CPU reference ops against naive formulas and their
 * algebraic identities: chunked GDN == token-by-token recurrence, transition
 * operators compose (DESIGN.md §3.1), R(a+b) == R(a)R(b), attention ==
 * naive softmax, conv state split == unsplit; each kernel's one-thread path
 * gives the bits of its team path.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pic_kernels.h"

static uint64_t rng_state = 88172645463325252ull;

static float
frand(void)     /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float) ((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static float *
frand_vec(size_t n, float scale)
{
    float *v = malloc(n * sizeof(float));
    assert_non_null(v);
    for (size_t i = 0; i < n; i++) {
        v[i] = frand() * scale;
    }
    return v;
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

/* --- GDN --- */

typedef struct {
    int    n, Hk, Hv, dk, dv;
    float *q, *k, *v, *g, *beta;   /* (n,Hk*dk) (n,Hk*dk) (n,Hv*dv) (n,Hv) (n,Hv) */
} gdn_case;

static void
gdn_case_init(gdn_case *c, int n, int Hk, int Hv, int dk, int dv)
{
    const pic_backend *be = pic_backend_cpu();

    c->n = n; c->Hk = Hk; c->Hv = Hv; c->dk = dk; c->dv = dv;
    c->q = frand_vec((size_t) n * Hk * dk, 1.0f);
    c->k = frand_vec((size_t) n * Hk * dk, 1.0f);
    c->v = frand_vec((size_t) n * Hv * dv, 1.0f);
    c->g = frand_vec((size_t) n * Hv, 1.0f);
    c->beta = frand_vec((size_t) n * Hv, 3.0f);
    be->l2norm(c->q, n * Hk, dk, dk, 1e-6f, 1.0f / sqrtf((float) dk));
    be->l2norm(c->k, n * Hk, dk, dk, 1e-6f, 1.0f);
    be->sigmoid(c->beta, (size_t) n * Hv);
    for (int i = 0; i < n * Hv; i++) {
        c->g[i] = -0.3f * (c->g[i] + 1.0f);      /* log decay in [-0.6, 0] */
    }
}

static void
gdn_case_free(gdn_case *c)
{
    free(c->q); free(c->k); free(c->v); free(c->g); free(c->beta);
}

static pic_gdn_args
gdn_args(gdn_case *c, float *S, float *o, int with_v, int ds)
{
    pic_gdn_args a = {
        .n = c->n, .Hk = c->Hk, .Hv = c->Hv, .dk = c->dk, .ds = ds,
        .q = c->q, .ldq = c->Hk * c->dk, .k = c->k, .ldk = c->Hk * c->dk,
        .v = with_v ? c->v : NULL, .ldv = c->Hv * c->dv,
        .g = c->g, .beta = c->beta, .S = S, .o = o, .ldo = c->Hv * ds,
    };
    return a;
}

static void
test_gdn_chunked_matches_recurrence(void **unused)
{
    static const int lens[] = { 1, 2, 63, 64, 65, 128, 200 };
    const pic_backend *be = pic_backend_cpu();

    for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
        gdn_case c;
        gdn_case_init(&c, lens[li], 2, 4, 32, 16);

        size_t ns = (size_t) c.Hv * c.dk * c.dv, no = (size_t) c.n * c.Hv * c.dv;
        float *S0 = frand_vec(ns, 0.5f);
        float *S1 = malloc(ns * sizeof(float)), *S2 = malloc(ns * sizeof(float));
        float *o1 = malloc(no * sizeof(float)), *o2 = malloc(no * sizeof(float));
        memcpy(S1, S0, ns * sizeof(float));
        memcpy(S2, S0, ns * sizeof(float));

        pic_gdn_args a1 = gdn_args(&c, S1, o1, 1, c.dv);
        pic_gdn_args a2 = gdn_args(&c, S2, o2, 1, c.dv);
        be->gdn_recurrent(&a1);
        be->gdn_chunked(&a2);

        print_message("n=%d: max|Δo|=%.3g max|ΔS|=%.3g\n", c.n,
                      max_abs_diff(o1, o2, no), max_abs_diff(S1, S2, ns));
        assert_true(max_abs_diff(o1, o2, no) < 2e-5f);
        assert_true(max_abs_diff(S1, S2, ns) < 2e-5f);

        free(S0); free(S1); free(S2); free(o1); free(o2);
        gdn_case_free(&c);
    }
}

/* Advancing S in two calls equals one call (state carries across calls). */
static void
test_gdn_chunked_split_equals_whole(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    gdn_case c;
    gdn_case_init(&c, 150, 1, 2, 16, 8);

    size_t ns = (size_t) c.Hv * c.dk * c.dv, no = (size_t) c.n * c.Hv * c.dv;
    float *S1 = calloc(ns, sizeof(float)), *S2 = calloc(ns, sizeof(float));
    float *o1 = malloc(no * sizeof(float)), *o2 = malloc(no * sizeof(float));

    pic_gdn_args a = gdn_args(&c, S1, o1, 1, c.dv);
    be->gdn_chunked(&a);

    int cut = 77;
    pic_gdn_args b = gdn_args(&c, S2, o2, 1, c.dv);
    b.n = cut;
    be->gdn_chunked(&b);
    b.n = c.n - cut;
    b.q += (size_t) cut * b.ldq; b.k += (size_t) cut * b.ldk;
    b.v += (size_t) cut * b.ldv; b.g += (size_t) cut * c.Hv;
    b.beta += (size_t) cut * c.Hv; b.o += (size_t) cut * b.ldo;
    be->gdn_chunked(&b);

    assert_true(max_abs_diff(o1, o2, no) < 2e-5f);
    assert_true(max_abs_diff(S1, S2, ns) < 2e-5f);
    free(S1); free(S2); free(o1); free(o2);
    gdn_case_free(&c);
}

/* T from S0 = I with writes zeroed, S|0 from zero: S(S0) == T S0 + S|0,
 * for both kernels (DESIGN.md §3.1). */
static void
test_gdn_transition_operator_composes(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    static const int lens[] = { 1, 64, 100 };

    for (size_t li = 0; li < 3; li++) {
        gdn_case c;
        gdn_case_init(&c, lens[li], 2, 4, 16, 8);
        for (int i = 0; i < c.n * c.Hv; i++) {
            c.g[i] *= 0.1f;             /* keep S0 visible after 100 steps */
        }
        int    dk = c.dk, dv = c.dv, Hv = c.Hv;
        size_t ns = (size_t) Hv * dk * dv, nt = (size_t) Hv * dk * dk;
        float *S0 = frand_vec(ns, 1.0f);
        float *Sf = malloc(ns * sizeof(float));
        float *Sz = calloc(ns, sizeof(float));
        float *T = calloc(nt, sizeof(float)), *Tr = calloc(nt, sizeof(float));

        memcpy(Sf, S0, ns * sizeof(float));
        for (int h = 0; h < Hv; h++) {
            for (int i = 0; i < dk; i++) {
                T[(size_t) h * dk * dk + (size_t) i * dk + i] = 1.0f;
                Tr[(size_t) h * dk * dk + (size_t) i * dk + i] = 1.0f;
            }
        }
        pic_gdn_args af = gdn_args(&c, Sf, NULL, 1, dv);
        pic_gdn_args az = gdn_args(&c, Sz, NULL, 1, dv);
        pic_gdn_args at = gdn_args(&c, T, NULL, 0, dk);
        pic_gdn_args ar = gdn_args(&c, Tr, NULL, 0, dk);
        be->gdn_chunked(&af);
        be->gdn_chunked(&az);
        be->gdn_chunked(&at);
        be->gdn_recurrent(&ar);
        assert_true(max_abs_diff(T, Tr, nt) < 2e-5f);

        float err = 0.0f;
        for (int h = 0; h < Hv; h++) {
            for (int i = 0; i < dk; i++) {
                for (int j = 0; j < dv; j++) {
                    double s = Sz[(size_t) h * dk * dv + (size_t) i * dv + j];
                    for (int l = 0; l < dk; l++) {
                        s += (double) T[(size_t) h * dk * dk + (size_t) i * dk + l]
                             * S0[(size_t) h * dk * dv + (size_t) l * dv + j];
                    }
                    float d = fabsf((float) s - Sf[(size_t) h * dk * dv + (size_t) i * dv + j]);
                    err = d > err ? d : err;
                }
            }
        }
        print_message("n=%d: max|T S0 + S|0 − S| = %.3g\n", c.n, err);
        assert_true(err < 2e-5f);
        free(S0); free(Sf); free(Sz); free(T); free(Tr);
        gdn_case_free(&c);
    }
}

/* --- RoPE --- */

static void
test_rope_composes(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    int    heads = 3, hd = 32, rd = 8, n = 4;
    int    pa[] = { 0, 5, 1000, 7777 }, pb[] = { 3, -5, 2345, -7000 };
    int    pab[4];
    pic_rope rp;
    float *x = frand_vec((size_t) n * heads * hd, 1.0f);
    float *y = malloc((size_t) n * heads * hd * sizeof(float));
    float *z = malloc((size_t) n * heads * hd * sizeof(float));

    for (int i = 0; i < n; i++) {
        pab[i] = pa[i] + pb[i];
    }
    assert_int_equal(pic_rope_init(&rp, rd, 1e7f), 0);
    memcpy(y, x, (size_t) n * heads * hd * sizeof(float));
    memcpy(z, x, (size_t) n * heads * hd * sizeof(float));
    be->rope(y, heads * hd, pa, n, heads, hd, &rp);
    be->rope(y, heads * hd, pb, n, heads, hd, &rp);
    be->rope(z, heads * hd, pab, n, heads, hd, &rp);
    assert_true(max_abs_diff(y, z, (size_t) n * heads * hd) < 1e-5f);

    /* dims past rotary_dim pass through; position 0 is the identity */
    for (int h = 0; h < heads; h++) {
        for (int i = rd; i < hd; i++) {
            assert_true(y[h * hd + i] == x[h * hd + i]);
        }
    }
    memcpy(z, x, (size_t) heads * hd * sizeof(float));
    int p0 = 0;
    be->rope(z, heads * hd, &p0, 1, heads, hd, &rp);
    assert_true(max_abs_diff(z, x, (size_t) heads * hd) == 0.0f);

    /* first pair against the formula: inv_freq_0 = 1, angle = p */
    int p = 3;
    memcpy(z, x, (size_t) heads * hd * sizeof(float));
    be->rope(z, heads * hd, &p, 1, heads, hd, &rp);
    assert_float_equal(z[0], x[0] * cosf(3.0f) - x[rd / 2] * sinf(3.0f), 1e-6);
    assert_float_equal(z[rd / 2], x[rd / 2] * cosf(3.0f) + x[0] * sinf(3.0f), 1e-6);
    free(x); free(y); free(z);
}

/* --- attention --- */

static void
test_attention_matches_naive(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    int    Hq = 4, Hkv = 2, hd = 16, cap = 200, n = 70, p0 = 9, nk = p0 + n;
    float *kc = frand_vec((size_t) Hkv * cap * hd, 1.0f);
    float *vc = frand_vec((size_t) Hkv * cap * hd, 1.0f);
    float *q = frand_vec((size_t) n * Hq * hd, 2.0f);
    float *o = malloc((size_t) n * Hq * hd * sizeof(float));
    int   *pos = malloc(n * sizeof(int));

    for (int t = 0; t < n; t++) {
        pos[t] = p0 + t;
    }
    be->attention(o, q, pos, n, Hq, Hkv, hd, kc, vc, cap, nk);

    float err = 0.0f;
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < Hq; h++) {
            const float *qv = q + (size_t) t * Hq * hd + h * hd;
            int          kh = h / (Hq / Hkv);
            double       w[256], mx = -1e30, sum = 0.0;
            for (int j = 0; j <= pos[t]; j++) {
                double s = 0.0;
                for (int i = 0; i < hd; i++) {
                    s += (double) qv[i] * kc[((size_t) kh * cap + j) * hd + i];
                }
                w[j] = s / sqrt((double) hd);
                mx = w[j] > mx ? w[j] : mx;
            }
            for (int j = 0; j <= pos[t]; j++) {
                w[j] = exp(w[j] - mx);
                sum += w[j];
            }
            for (int i = 0; i < hd; i++) {
                double acc = 0.0;
                for (int j = 0; j <= pos[t]; j++) {
                    acc += w[j] / sum * vc[((size_t) kh * cap + j) * hd + i];
                }
                float d = fabsf((float) acc - o[(size_t) t * Hq * hd + h * hd + i]);
                err = d > err ? d : err;
            }
        }
    }
    print_message("attention max err %.3g\n", err);
    assert_true(err < 1e-5f);
    free(kc); free(vc); free(q); free(o); free(pos);
}

/* x rounded to bf16 as a bf16dot product multiplies it (nearest even;
 * the test's values are normal numbers). */
static double
bf16_round(double x)
{
    float    f = (float) x;
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* 1 where p lies within a relative 2^-20 of a tie between two bf16
 * values: there fp32 rounding on the way may round it the other way. */
static int
bf16_near_tie(double p)
{
    float    f = (float) p;
    uint32_t u;
    double   lo, hi;

    memcpy(&u, &f, sizeof(u));
    u &= 0xffff0000u;
    memcpy(&f, &u, sizeof(f));
    lo = f;
    u += 0x10000u;
    memcpy(&f, &u, sizeof(f));
    hi = f;
    return fabs(p - (lo + hi) / 2) <= fabs(p) * 0x1p-20;
}

/* attention_dot against float64 on the bf16-rounded q, k, v and the
 * rounded softmax weights, on every SIMD path, with and without the dot
 * GEMM, for a block of queries (past PIC_ATTN_DOT_ROWS) and a decode-sized
 * one.  The bound per output is the arithmetic's: the fp32 scores' error
 * (hd sums) moves each weight by at most twice the largest, exp and the
 * sum of nk weights add theirs; a weight within 2^-20 of a bf16 tie may
 * round the other way (one bf16 ulp).  Leaving any operand unrounded
 * costs ~2^-9 of the output, far past the bound. */
static void
test_attention_dot_matches_rounded(void **unused)
{
    static const char *paths[] = { "avx512bf16", "avx512vnni", "avx512", "avx2", "scalar" };
    const pic_backend *be = pic_backend_cpu();
    char   saved[32];
    int    Hq = 8, Hkv = 2, hd = 64, cap = 300, p0 = 150, tried = 0;
    int    saved_dot = pic_kernels_dot_gemm(-1);
    float *kc = frand_vec((size_t) Hkv * cap * hd, 1.0f);
    float *vc = frand_vec((size_t) Hkv * cap * hd, 1.0f);
    int    ns[2] = { 77, 1 };

    snprintf(saved, sizeof(saved), "%s", pic_kernels_simd());
    for (size_t pi = 0; pi < sizeof(paths) / sizeof(paths[0]); pi++) {
        if (pic_kernels_set_simd(paths[pi]) != 0) {
            continue;
        }
        for (int dot = 0; dot < 2; dot++) {
            pic_kernels_dot_gemm(dot);
            for (int c = 0; c < 2; c++) {
                int    n = ns[c], nk = p0 + n;
                size_t no = (size_t) n * Hq * hd;
                float *q = frand_vec(no, 3.0f);
                float *o = malloc(no * sizeof(float));
                int   *pos = malloc(n * sizeof(int));
                double worst = 0.0;

                for (int t = 0; t < n; t++) {
                    pos[t] = p0 + t;
                }
                be->attention_dot(o, q, pos, n, Hq, Hkv, hd, kc, vc, cap, nk);
                for (int t = 0; t < n; t++) {
                    for (int h = 0; h < Hq; h++) {
                        const float *qv = q + (size_t) t * Hq * hd + h * hd;
                        int          kh = h / (Hq / Hkv), lim = pos[t] + 1;
                        double       w[512], mag = 0.0, mx = -1e30, sum = 0.0, ds;
                        int          tie[512];

                        for (int j = 0; j < lim; j++) {
                            double sj = 0.0, aj = 0.0;

                            for (int i = 0; i < hd; i++) {
                                double pr = bf16_round(qv[i])
                                            * bf16_round(kc[((size_t) kh * cap + j) * hd + i]);
                                sj += pr;
                                aj += fabs(pr);
                            }
                            w[j] = sj / sqrt((double) hd);
                            mag = aj / sqrt((double) hd) > mag ? aj / sqrt((double) hd) : mag;
                            mx = w[j] > mx ? w[j] : mx;
                        }
                        for (int j = 0; j < lim; j++) {
                            w[j] = exp(w[j] - mx);
                            sum += w[j];
                        }
                        /* relative error of an fp32 weight before rounding */
                        ds = 2.0 * (hd + 2) * 0x1p-24 * mag + 0x1p-21 + 2.0 * lim * 0x1p-24;
                        for (int j = 0; j < lim; j++) {
                            tie[j] = bf16_near_tie(w[j] / sum);
                            w[j] = bf16_round(w[j] / sum);
                        }
                        for (int i = 0; i < hd; i++) {
                            double acc = 0.0, tol = 0.0;

                            for (int j = 0; j < lim; j++) {
                                double vj = bf16_round(vc[((size_t) kh * cap + j) * hd + i]);

                                acc += w[j] * vj;
                                tol += w[j] * fabs(vj) * (ds + lim * 0x1p-24
                                                          + (tie[j] ? 0x1p-7 : 0.0));
                            }
                            double got = o[(size_t) t * Hq * hd + h * hd + i];
                            double r = fabs(got - acc) / (tol + 1e-30);

                            worst = r > worst ? r : worst;
                            if (r > 1.0) {
                                fail_msg("%s dot %d n %d: o[%d][%d][%d] = %.9g, want %.9g "
                                         "(bound %.3g)", paths[pi], dot, n, t, h, i, got,
                                         acc, tol);
                            }
                        }
                    }
                }
                print_message("attention_dot %s dot_gemm %d n %d: worst error / bound %.3f\n",
                              paths[pi], dot, n, worst);
                tried++;
                free(q); free(o); free(pos);
            }
        }
    }
    pic_kernels_dot_gemm(saved_dot);
    assert_int_equal(pic_kernels_set_simd(saved), 0);
    assert_true(tried > 0);
    free(kc); free(vc);
}

/* The absorbed MLA op equals the expanded attention computed here in
 * double: per head k_nope | v = W_kvb[h] c, K = [k_pe | k_nope], scores
 * scale·q·K, causal by qpos over the latent slots. */
static void
test_mla_absorbed_matches_expanded(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    int    Hq = 3, dn = 12, dr = 6, dv = 10, r = 20, n = 5, p0 = 17, nk = p0 + n;
    int    hq = dr + dn, lw = dr + r;
    float *lat = frand_vec((size_t) (nk + 4) * lw, 1.0f);
    float *q = frand_vec((size_t) n * Hq * hq, 1.0f);
    float *W = frand_vec((size_t) Hq * (dn + dv) * r, 0.3f);
    float *o = malloc((size_t) n * Hq * dv * sizeof(float));
    int    pos[5];
    float  scale = 0.29f, err = 0.0f;
    pic_wmat kvb = pic_wmat_f32(W, Hq * (dn + dv), r);

    for (int t = 0; t < n; t++) {
        pos[t] = p0 + t - (t == 2 ? 3 : 0);     /* one query sees fewer slots */
    }
    pic_mla_args a = { .n = n, .Hq = Hq, .dn = dn, .dr = dr, .dv = dv, .r = r, .q = q,
                       .qpos = pos, .lat = lat, .n_keys = nk, .kvb = &kvb,
                       .scale = scale, .o = o };
    be->mla_attention(&a);
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < Hq; h++) {
            const float *qp = q + ((size_t) t * Hq + h) * hq;
            const float *Wh = W + (size_t) h * (dn + dv) * r;
            double       sc[64], mx = -1e30, sum = 0.0;
            int          m = pos[t] + 1;

            for (int p = 0; p < m; p++) {
                const float *lp = lat + (size_t) p * lw;
                double       s = 0.0;

                for (int d = 0; d < dr; d++) {
                    s += (double) qp[d] * lp[d];
                }
                for (int i = 0; i < dn; i++) {
                    double k = 0.0;

                    for (int j = 0; j < r; j++) {
                        k += (double) Wh[(size_t) i * r + j] * lp[dr + j];
                    }
                    s += (double) qp[dr + i] * k;
                }
                sc[p] = s * scale;
                mx = sc[p] > mx ? sc[p] : mx;
            }
            for (int p = 0; p < m; p++) {
                sc[p] = exp(sc[p] - mx);
                sum += sc[p];
            }
            for (int d = 0; d < dv; d++) {
                double acc = 0.0;

                for (int p = 0; p < m; p++) {
                    double v = 0.0;

                    for (int j = 0; j < r; j++) {
                        v += (double) Wh[(size_t) (dn + d) * r + j] * lat[(size_t) p * lw + dr + j];
                    }
                    acc += sc[p] / sum * v;
                }
                float e = fabsf((float) acc - o[((size_t) t * Hq + h) * dv + d]);
                err = e > err ? e : err;
            }
        }
    }
    print_message("mla absorbed vs expanded max err %.3g\n", err);
    assert_true(err < 1e-5f);
    free(lat); free(q); free(W); free(o);
}

/* The grouped router against its rules written out: V2 (softmax, groups
 * by their best, no renorm, scaled) and V3 (sigmoid + bias for the choice,
 * groups by their two best, weights without the bias, renormalised). */
static void
test_moe_route_grouped_rules(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    enum { E = 8, G = 4, K = 3, N = 6 };
    float bias[E] = { 0.3f, -0.2f, 0.0f, 0.1f, -0.4f, 0.2f, 0.05f, -0.1f };

    for (int v3 = 0; v3 < 2; v3++) {
        float *x = frand_vec((size_t) N * E, 3.0f), p[N * E], selw[N * K];
        int    sel[N * K];

        memcpy(p, x, sizeof(p));
        pic_moe_group_args a = { .n = N, .E = E, .k = K, .groups = G, .topk_groups = 2,
                                 .sigmoid = v3, .bias = v3 ? bias : NULL, .renorm = v3,
                                 .scale = 1.5f };
        be->moe_route_grouped(sel, selw, p, &a);
        for (int t = 0; t < N; t++) {
            const float *xr = x + (size_t) t * E;
            double       sc[E], ch[E], gs[G], mx = -1e30, sum = 0.0, tot = 0.0;
            int          keep[G] = { 0 }, used[E] = { 0 };

            for (int e = 0; e < E; e++) {
                mx = xr[e] > mx ? xr[e] : mx;
            }
            for (int e = 0; e < E; e++) {
                sc[e] = v3 ? 1.0 / (1.0 + exp(-(double) xr[e])) : exp(xr[e] - mx);
                sum += sc[e];
            }
            for (int e = 0; e < E; e++) {
                sc[e] = v3 ? sc[e] : sc[e] / sum;
                ch[e] = sc[e] + (v3 ? bias[e] : 0.0);
            }
            for (int g = 0; g < G; g++) {
                double a0 = ch[2 * g], a1 = ch[2 * g + 1];
                gs[g] = v3 ? a0 + a1 : (a0 > a1 ? a0 : a1);
            }
            for (int j = 0; j < 2; j++) {
                int b = -1;
                for (int g = 0; g < G; g++) {
                    if (!keep[g] && (b < 0 || gs[g] > gs[b])) {
                        b = g;
                    }
                }
                keep[b] = 1;
            }
            for (int j = 0; j < K; j++) {
                int b = -1;
                for (int e = 0; e < E; e++) {
                    if (keep[e / 2] && !used[e] && (b < 0 || ch[e] > ch[b])) {
                        b = e;
                    }
                }
                used[b] = 1;
                assert_int_equal(sel[t * K + j], b);
                tot += sc[b];
            }
            for (int j = 0; j < K; j++) {
                double w = sc[sel[t * K + j]] / (v3 ? tot + 1e-20 : 1.0) * 1.5;
                assert_true(fabs(w - selw[t * K + j]) < 1e-6);
            }
        }
        free(x);
    }
}

/* The softmax's AVX2 path and its portable one agree bit for bit, on
 * rows of every length mod 8 and on tiles of queries and heads at once. */
static void
test_attention_simd_equals_portable(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    char   saved[32];
    int    Hq = 8, Hkv = 2, hd = 32, cap = 300, n = 77, p0 = 150, nk = p0 + n;
    size_t no = (size_t) n * Hq * hd;
    float *kc = frand_vec((size_t) Hkv * cap * hd, 1.0f);
    float *vc = frand_vec((size_t) Hkv * cap * hd, 1.0f);
    float *q = frand_vec(no, 3.0f);
    float *o[2] = { malloc(no * sizeof(float)), malloc(no * sizeof(float)) };
    int   *pos = malloc(n * sizeof(int));

    snprintf(saved, sizeof(saved), "%s", pic_kernels_simd());
    for (int t = 0; t < n; t++) {
        pos[t] = p0 + t;
    }
    if (strcmp(saved, "scalar") == 0) {
        free(kc); free(vc); free(q); free(o[0]); free(o[1]); free(pos);
        skip();
    }
    be->attention(o[0], q, pos, n, Hq, Hkv, hd, kc, vc, cap, nk);
    assert_int_equal(pic_kernels_set_simd("scalar"), 0);
    be->attention(o[1], q, pos, n, Hq, Hkv, hd, kc, vc, cap, nk);
    assert_int_equal(pic_kernels_set_simd(saved), 0);
    assert_memory_equal(o[0], o[1], no * sizeof(float));
    free(kc); free(vc); free(q); free(o[0]); free(o[1]); free(pos);
}

/* SiLU and σ: the AVX2 path equals the portable one bit for bit (every
 * length mod 8, the team split included) and both stay within 2 ulp-ish of
 * libm's expf; NaN stays NaN, σ(±inf) saturates. */
static void
test_activations_simd_equals_portable(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    char   saved[32];
    size_t n = 70013;                   /* > 65536: a team when threads > 1 */
    float *x = frand_vec(n, 40.0f), *y[2][2];
    double err = 0.0;

    snprintf(saved, sizeof(saved), "%s", pic_kernels_simd());
    x[0] = NAN;
    x[1] = INFINITY;
    x[2] = -INFINITY;
    x[3] = 0.0f;
    x[4] = -0.0f;
    x[5] = 100.0f;
    x[6] = -100.0f;
    for (int p = 0; p < 2; p++) {               /* p 0: the default, p 1: scalar */
        if (p == 1 && pic_kernels_set_simd("scalar") != 0) {
            fail();
        }
        for (int k = 0; k < 2; k++) {
            y[p][k] = malloc(n * sizeof(float));
            memcpy(y[p][k], x, n * sizeof(float));
        }
        be->silu(y[p][0], n);
        be->sigmoid(y[p][1], n);
    }
    assert_int_equal(pic_kernels_set_simd(saved), 0);
    for (int k = 0; k < 2; k++) {
        assert_memory_equal(y[0][k] + 1, y[1][k] + 1, (n - 1) * sizeof(float));
        assert_true(isnan(y[0][k][0]) && isnan(y[1][k][0]));
    }
    assert_true(y[0][0][1] == INFINITY && y[0][1][1] == 1.0f);
    assert_true(y[0][1][2] >= 0.0f && y[0][1][2] < 1e-37f);
    for (size_t i = 3; i < n; i++) {
        double s = 1.0 / (1.0 + exp(-(double) x[i]));

        if (fabs(x[i]) > 80.0f) {               /* σ below 1e-34 or 1: absolute */
            assert_true(fabs(y[0][1][i] - s) < 1e-30 && fabs(y[0][0][i] - x[i] * s) < 1e-28);
            continue;
        }
        err = fmax(err, fabs(y[0][1][i] - s) / s);
        err = fmax(err, fabs(y[0][0][i] - x[i] * s) / fmax(fabs(x[i] * s), 1e-30));
    }
    print_message("silu / sigmoid max rel err %.3g\n", err);
    assert_true(err < 5e-7);
    free(x);
    for (int p = 0; p < 2; p++) {
        free(y[p][0]);
        free(y[p][1]);
    }
}

/* --- conv1d --- */

static void
test_conv_split_equals_unsplit(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    int    n = 10, C = 5, K = 4;
    float *u = frand_vec((size_t) n * C, 1.0f), *w = frand_vec((size_t) C * K, 1.0f);
    float *y = malloc((size_t) n * C * sizeof(float));
    float *y2 = malloc((size_t) n * C * sizeof(float));
    float  st[5 * 3] = { 0 }, st2[5 * 3];

    be->conv1d(y, u, st, w, n, C, K);

    /* against the formula with left zero padding */
    for (int t = 0; t < n; t++) {
        for (int c = 0; c < C; c++) {
            float s = 0.0f;
            for (int j = 0; j < K; j++) {
                int src = t - K + 1 + j;
                s += src >= 0 ? w[c * K + j] * u[src * C + c] : 0.0f;
            }
            assert_float_equal(s, y[t * C + c], 1e-6);
        }
    }
    /* final state = last K−1 inputs */
    for (int c = 0; c < C; c++) {
        for (int i = 0; i < K - 1; i++) {
            assert_true(st[c * (K - 1) + i] == u[(n - K + 1 + i) * C + c]);
        }
    }
    for (int cut = 0; cut <= n; cut++) {
        memset(st2, 0, sizeof(st2));
        if (cut > 0) {
            be->conv1d(y2, u, st2, w, cut, C, K);
        }
        if (cut < n) {
            be->conv1d(y2 + cut * C, u + cut * C, st2, w, n - cut, C, K);
        }
        assert_true(max_abs_diff(y, y2, (size_t) n * C) == 0.0f);
        assert_true(max_abs_diff(st, st2, sizeof(st) / sizeof(float)) == 0.0f);
    }
    free(u); free(w); free(y); free(y2);
}

/* --- matmul, norms, activations --- */

static void
test_matmul_matches_naive(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    int    in = 37, out = 19;

    for (int n = 1; n <= 5; n += 4) {
        float *x = frand_vec((size_t) n * in, 1.0f), *w = frand_vec((size_t) out * in, 1.0f);
        float *y = frand_vec((size_t) n * out, 1.0f), *y0 = malloc((size_t) n * out * sizeof(float));
        memcpy(y0, y, (size_t) n * out * sizeof(float));
        be->matmul(y, x, w, n, in, out, 1);
        for (int t = 0; t < n; t++) {
            for (int o = 0; o < out; o++) {
                double s = y0[t * out + o];
                for (int i = 0; i < in; i++) {
                    s += (double) x[t * in + i] * w[o * in + i];
                }
                assert_float_equal((float) s, y[t * out + o], 1e-5);
            }
        }
        be->matmul(y, x, w, n, in, out, 0);
        assert_float_equal(y[0], y[0], 0);
        free(x); free(w); free(y); free(y0);
    }
}

/* n = 1..5 rows on a shape that takes the threaded path and, for n <= 4,
 * several L2-sized weight blocks per thread: within float rounding of a
 * double-precision reference (scaled by sum |x*w|), accumulate or not. */
static void
test_matmul_small_n(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    int    in = 1024, out = 300;
    float *w = frand_vec((size_t) out * in, 1.0f);      /* (out, in) */

    for (int n = 1; n <= 5; n++) {
        for (int acc = 0; acc <= 1; acc++) {
            float *x = frand_vec((size_t) n * in, 1.0f);     /* (n, in) */
            float *y = frand_vec((size_t) n * out, 1.0f);    /* (n, out) */
            float *y0 = malloc((size_t) n * out * sizeof(float));

            memcpy(y0, y, (size_t) n * out * sizeof(float));
            be->matmul(y, x, w, n, in, out, acc);
            for (int t = 0; t < n; t++) {
                for (int o = 0; o < out; o++) {
                    double s = acc ? y0[t * out + o] : 0.0, mag = fabs(s);
                    for (int i = 0; i < in; i++) {
                        double p = (double) x[t * in + i] * w[o * in + i];
                        s += p;
                        mag += fabs(p);
                    }
                    assert_true(fabs(y[t * out + o] - s) <= 1e-6 * mag + 1e-30);
                }
            }
            free(x); free(y); free(y0);
        }
    }
    free(w);
}

static void
test_norms_and_activations(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    float x[4] = { 1.0f, -2.0f, 3.0f, 0.5f }, w[4] = { 0.0f, 1.0f, -0.5f, 2.0f };
    float y[4], z[4];
    double ms = (1 + 4 + 9 + 0.25) / 4.0;
    float  r = (float) (1.0 / sqrt(ms + 1e-6));

    be->rmsnorm(y, x, w, 1, 4, 1e-6f, 1);
    be->rmsnorm(z, x, w, 1, 4, 1e-6f, 0);
    for (int i = 0; i < 4; i++) {
        assert_float_equal(y[i], x[i] * r * (1.0f + w[i]), 1e-6);
        assert_float_equal(z[i], x[i] * r * w[i], 1e-6);
    }

    float l[3] = { 3.0f, 4.0f, 0.0f };
    be->l2norm(l, 1, 3, 3, 1e-6f, 0.5f);
    assert_float_equal(l[0], 0.3f, 1e-6);
    assert_float_equal(l[1], 0.4f, 1e-6);

    float sp[3] = { 25.0f, 0.0f, -3.0f };
    be->softplus(sp, 3);
    assert_true(sp[0] == 25.0f);
    assert_float_equal(sp[1], logf(2.0f), 1e-6);
    assert_float_equal(sp[2], log1pf(expf(-3.0f)), 1e-6);

    float s[2] = { 0.0f, 2.0f };
    be->silu(s, 2);
    assert_float_equal(s[0], 0.0f, 0);
    assert_float_equal(s[1], 2.0f / (1.0f + expf(-2.0f)), 1e-6);
}

/* --- one thread or a team: the same bits --- */

/* The elementwise and per-row kernels run their loop on a team when the work
 * is big and no team is running, else on the calling thread (decode calls
 * them per head inside a team); both paths must give the same bits. */
static void
test_serial_paths_equal_parallel(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    int    saved = pic_kernels_threads();
    size_t ne = 70000;                          /* > the activations' 65536 */
    int    nr = 100, dim = 64;                  /* rmsnorm: > 64 rows */
    int    n = 200, C = 400, K = 4;             /* conv1d: n * C > 65536 */
    gdn_case g;
    int    ds = 64;

    gdn_case_init(&g, 16, 2, 4, 32, ds);        /* n * dk * ds > 16384 */

    float *x = frand_vec(ne, 4.0f), *nw = frand_vec((size_t) dim, 1.0f);
    float *u = frand_vec((size_t) n * C, 1.0f), *cw = frand_vec((size_t) C * K, 1.0f);
    float *st0 = frand_vec((size_t) C * (K - 1), 1.0f);
    float *S0 = frand_vec((size_t) g.Hv * g.dk * ds, 0.1f);
    float *out[2][9];

    for (int p = 0; p < 2; p++) {               /* p 0: a team, p 1: one thread */
        pic_kernels_set_threads(p == 0 ? 2 : 1);
        for (int k = 0; k < 3; k++) {
            out[p][k] = malloc(ne * sizeof(float));
            memcpy(out[p][k], x, ne * sizeof(float));
        }
        be->silu(out[p][0], ne);
        be->sigmoid(out[p][1], ne);
        be->softplus(out[p][2], ne);
        out[p][3] = malloc((size_t) nr * dim * sizeof(float));
        be->rmsnorm(out[p][3], x, nw, nr, dim, 1e-6f, 1);
        out[p][4] = malloc((size_t) n * C * sizeof(float));
        out[p][5] = malloc((size_t) C * (K - 1) * sizeof(float));
        memcpy(out[p][5], st0, (size_t) C * (K - 1) * sizeof(float));
        be->conv1d(out[p][4], u, out[p][5], cw, n, C, K);
        out[p][6] = malloc((size_t) g.Hv * g.dk * ds * sizeof(float));
        memcpy(out[p][6], S0, (size_t) g.Hv * g.dk * ds * sizeof(float));
        out[p][7] = malloc((size_t) g.n * g.Hv * ds * sizeof(float));
        pic_gdn_args a = gdn_args(&g, out[p][6], out[p][7], 1, ds);
        be->gdn_recurrent(&a);
        out[p][8] = NULL;
    }
    pic_kernels_set_threads(saved);

    size_t len[8] = { ne, ne, ne, (size_t) nr * dim, (size_t) n * C, (size_t) C * (K - 1),
                      (size_t) g.Hv * g.dk * ds, (size_t) g.n * g.Hv * ds };
    for (int k = 0; k < 8; k++) {
        assert_memory_equal(out[0][k], out[1][k], len[k] * sizeof(float));
        free(out[0][k]);
        free(out[1][k]);
    }
    free(x); free(nw); free(u); free(cw); free(st0); free(S0);
    gdn_case_free(&g);
}


/* --- the forward's glue ops --- */

/* mul, copy_rows, l2norm_heads, gather_rows, scatter_add, gdn_gates,
 * kv_store and moe_route against the plain loops forward.c / ffn.c ran
 * before they were ops, bit for bit, on one thread and on a team (shapes
 * big enough for the team path). */
static void
test_glue_ops_equal_loops(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    int    saved = pic_kernels_threads();
    int    n = 70, Hq = 4, hd = 64, Hk = 4, dk = 64, C = 3 * Hk * dk, Hv = 8;
    int    Hkv = 2, cap = 128, p0 = 9, E = 16, k = 4, H = 300;
    size_t nq = (size_t) n * Hq * hd;

    for (int p = 0; p < 2; p++) {
        pic_kernels_set_threads(p == 0 ? 2 : 1);

        /* mul */
        float *a = frand_vec(nq * 2, 2.0f), *b = frand_vec(nq * 2, 2.0f);
        float *ref = malloc(nq * 2 * sizeof(float));
        for (size_t i = 0; i < nq * 2; i++) {
            ref[i] = a[i] * b[i];
        }
        be->mul(a, b, nq * 2);
        assert_memory_equal(a, ref, nq * 2 * sizeof(float));

        /* copy_rows: the [q | gate] split */
        float *qp = frand_vec(nq * 2, 1.0f), *q = malloc(nq * sizeof(float));
        float *gt = malloc(nq * sizeof(float));
        be->copy_rows(q, hd, qp, 2 * hd, n * Hq, hd);
        be->copy_rows(gt, hd, qp + hd, 2 * hd, n * Hq, hd);
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < Hq; h++) {
                const float *src = qp + (size_t) t * 2 * Hq * hd + (size_t) h * 2 * hd;
                assert_memory_equal(q + ((size_t) t * Hq + h) * hd, src, hd * sizeof(float));
                assert_memory_equal(gt + ((size_t) t * Hq + h) * hd, src + hd,
                                    hd * sizeof(float));
            }
        }

        /* l2norm_heads == l2norm per token */
        float *cv = frand_vec((size_t) n * C, 3.0f), *cv2 = malloc((size_t) n * C * sizeof(float));
        memcpy(cv2, cv, (size_t) n * C * sizeof(float));
        be->l2norm_heads(cv, n, C, Hk, dk, 1e-6f, 0.125f);
        be->l2norm_heads(cv + Hk * dk, n, C, Hk, dk, 1e-6f, 1.0f);
        for (int t = 0; t < n; t++) {
            be->l2norm(cv2 + (size_t) t * C, Hk, dk, dk, 1e-6f, 0.125f);
            be->l2norm(cv2 + (size_t) t * C + Hk * dk, Hk, dk, dk, 1e-6f, 1.0f);
        }
        assert_memory_equal(cv, cv2, (size_t) n * C * sizeof(float));

        /* gather_rows == wmat_rows row by row (bf16 table) */
        int      V = 50, ids[70];
        float   *tab = frand_vec((size_t) V * H, 1.0f);
        uint16_t *tb = malloc((size_t) V * H * sizeof(uint16_t));
        pic_bf16_from_f32(tb, tab, (size_t) V * H);
        pic_wmat wb = { .type = PIC_WTYPE_BF16, .rows = V, .cols = H, .data = tb };
        float   *x = malloc((size_t) n * H * sizeof(float)), *x2 = malloc((size_t) n * H * sizeof(float));
        for (int t = 0; t < n; t++) {
            ids[t] = (t * 7 + 3) % V;
            be->wmat_rows(x2 + (size_t) t * H, &wb, ids[t], 1);
        }
        be->gather_rows(x, &wb, ids, n);
        assert_memory_equal(x, x2, (size_t) n * H * sizeof(float));

        /* scatter_add: distinct ids, weights, and the identity form */
        float *src = frand_vec((size_t) n * H, 1.0f), *wts = frand_vec((size_t) n, 1.0f);
        int    rows[70];
        for (int r = 0; r < n; r++) {
            rows[r] = n - 1 - r;
        }
        be->scatter_add(x, src, rows, wts, n, H);
        be->scatter_add(x, src, NULL, NULL, n, H);
        for (int r = 0; r < n; r++) {
            for (int i = 0; i < H; i++) {
                x2[(size_t) rows[r] * H + i] += wts[r] * src[(size_t) r * H + i];
            }
        }
        for (int r = 0; r < n; r++) {
            for (int i = 0; i < H; i++) {
                x2[(size_t) r * H + i] += 1.0f * src[(size_t) r * H + i];
            }
        }
        assert_memory_equal(x, x2, (size_t) n * H * sizeof(float));

        /* gdn_gates == sigmoid, add, softplus, scale */
        float *g = frand_vec((size_t) n * Hv, 4.0f), *beta = frand_vec((size_t) n * Hv, 4.0f);
        float *g2 = malloc((size_t) n * Hv * sizeof(float)), *b2 = malloc((size_t) n * Hv * sizeof(float));
        float *Al = frand_vec((size_t) Hv, 1.0f), *dt = frand_vec((size_t) Hv, 1.0f);
        memcpy(g2, g, (size_t) n * Hv * sizeof(float));
        memcpy(b2, beta, (size_t) n * Hv * sizeof(float));
        be->gdn_gates(g, beta, Al, dt, n, Hv);
        be->sigmoid(b2, (size_t) n * Hv);
        for (int i = 0; i < n * Hv; i++) {
            g2[i] += dt[i % Hv];
        }
        be->softplus(g2, (size_t) n * Hv);
        for (int i = 0; i < n * Hv; i++) {
            g2[i] *= -expf(Al[i % Hv]);
        }
        assert_memory_equal(g, g2, (size_t) n * Hv * sizeof(float));
        assert_memory_equal(beta, b2, (size_t) n * Hv * sizeof(float));

        /* kv_store: slot p0+t of head h holds row t's head h */
        float *kk = frand_vec((size_t) n * Hkv * hd, 1.0f), *vv = frand_vec((size_t) n * Hkv * hd, 1.0f);
        float *kc = calloc((size_t) Hkv * cap * hd, sizeof(float));
        float *vc = calloc((size_t) Hkv * cap * hd, sizeof(float));
        be->kv_store(kc, vc, cap, kk, vv, n, Hkv, hd, p0);
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < Hkv; h++) {
                size_t slot = ((size_t) h * cap + p0 + t) * hd;
                size_t row = ((size_t) t * Hkv + h) * hd;
                assert_memory_equal(kc + slot, kk + row, hd * sizeof(float));
                assert_memory_equal(vc + slot, vv + row, hd * sizeof(float));
            }
        }
        assert_true(kc[0] == 0.0f && vc[(size_t) p0 * hd - 1] == 0.0f);

        /* moe_route: softmax rows, top-k in order, renormalised */
        int   *sel = malloc((size_t) n * k * sizeof(int));
        float *selw = malloc((size_t) n * k * sizeof(float));
        float *pr = frand_vec((size_t) n * E, 3.0f), *pr0 = malloc((size_t) n * E * sizeof(float));
        memcpy(pr0, pr, (size_t) n * E * sizeof(float));
        be->moe_route(sel, selw, pr, n, E, k, 1);
        for (int t = 0; t < n; t++) {
            double z = 0.0, top = 0.0;
            for (int e = 0; e < E; e++) {
                z += exp((double) pr0[t * E + e]);
            }
            for (int j = 0; j < k; j++) {
                int e = sel[t * k + j];
                assert_true(e >= 0 && e < E);
                assert_float_equal(pr[t * E + e], exp((double) pr0[t * E + e]) / z, 1e-6);
                if (j > 0) {
                    assert_true(pr[t * E + e] <= pr[t * E + sel[t * k + j - 1]]);
                }
                top += selw[t * k + j];
            }
            assert_float_equal(top, 1.0, 1e-6);
        }

        free(a); free(b); free(ref); free(qp); free(q); free(gt); free(cv); free(cv2);
        free(tab); free(tb); free(x); free(x2); free(src); free(wts);
        free(g); free(beta); free(g2); free(b2); free(Al); free(dt);
        free(kk); free(vv); free(kc); free(vc); free(sel); free(selw); free(pr); free(pr0);
    }
    pic_kernels_set_threads(saved);
}

/* The CPU backend's memory slots are host memory: alloc aligned, copies,
 * zero; the loader refuses unknown devices and names what is missing. */
static void
test_backend_memory_and_load(void **unused)
{
    const pic_backend *be = pic_backend_cpu();
    char   err[256] = "";
    float  h[5] = { 1, 2, 3, 4, 5 }, back[5];
    float *d = be->mem_alloc(sizeof(h)), *d2 = be->mem_alloc(sizeof(h));

    assert_true(be->host);
    assert_non_null(d);
    assert_int_equal((uintptr_t) d % 64, 0);
    be->mem_upload(d, h, sizeof(h));
    be->mem_copy(d2, d, sizeof(h));
    be->mem_download(back, d2, sizeof(h));
    assert_memory_equal(back, h, sizeof(h));
    be->mem_zero(d2, sizeof(h));
    assert_true(d2[0] == 0.0f && d2[4] == 0.0f);
    be->mem_free(d);
    be->mem_free(d2);

    assert_ptr_equal(pic_backend_load("cpu", err, sizeof(err)), be);
    assert_null(pic_backend_load("tpu", err, sizeof(err)));
    assert_non_null(strstr(err, "unknown device"));
    setenv("PIC_CUDA_LIB", "/nonexistent/libpic_cuda.so", 1);
    assert_null(pic_backend_load("cuda", err, sizeof(err)));
    assert_non_null(strstr(err, "/nonexistent/libpic_cuda.so"));
    unsetenv("PIC_CUDA_LIB");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gdn_chunked_matches_recurrence),
        cmocka_unit_test(test_gdn_chunked_split_equals_whole),
        cmocka_unit_test(test_gdn_transition_operator_composes),
        cmocka_unit_test(test_rope_composes),
        cmocka_unit_test(test_attention_matches_naive),
        cmocka_unit_test(test_mla_absorbed_matches_expanded),
        cmocka_unit_test(test_moe_route_grouped_rules),
        cmocka_unit_test(test_attention_simd_equals_portable),
        cmocka_unit_test(test_attention_dot_matches_rounded),
        cmocka_unit_test(test_activations_simd_equals_portable),
        cmocka_unit_test(test_conv_split_equals_unsplit),
        cmocka_unit_test(test_matmul_matches_naive),
        cmocka_unit_test(test_matmul_small_n),
        cmocka_unit_test(test_norms_and_activations),
        cmocka_unit_test(test_serial_paths_equal_parallel),
        cmocka_unit_test(test_glue_ops_equal_loops),
        cmocka_unit_test(test_backend_memory_and_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
