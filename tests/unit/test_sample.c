/*
 * test_sample.c — sampling checked statistically with fixed seeds: greedy
 * is argmax, top-k never leaves the top k, top-p keeps exactly the nucleus,
 * frequencies follow the softmax, a seed replays the same choices, stop ids
 * come from the config; logit bias and the penalties move greedy choices as
 * their formulas say, min-p drops the unlikely, logprobs equal a log-softmax
 * computed here in double.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sample.h"

#define V 16

static void
make_logits(float *l, const double *p, int n)
{
    for (int i = 0; i < n; i++) {
        l[i] = p[i] > 0 ? (float) log(p[i]) : -1e30f;
    }
}

static void
test_temperature_zero_is_argmax(void **unused)
{
    float             l[V];
    pic_sampler       s;
    pic_sample_params p = { .temperature = 0.0f, .seed = 7 };

    for (int i = 0; i < V; i++) {
        l[i] = (float) ((i * 7) % V);
    }
    assert_int_equal(pic_sampler_init(&s, &p, V), 0);
    for (int r = 0; r < 50; r++) {
        assert_int_equal(pic_sampler_sample(&s, l), pic_sample_argmax(l, V));
    }
    pic_sampler_free(&s);

    /* top_k = 1 is greedy at any temperature */
    pic_sample_params p1 = { .temperature = 5.0f, .top_k = 1, .seed = 3 };
    assert_int_equal(pic_sampler_init(&s, &p1, V), 0);
    for (int r = 0; r < 50; r++) {
        assert_int_equal(pic_sampler_sample(&s, l), pic_sample_argmax(l, V));
    }
    pic_sampler_free(&s);
}

static void
test_top_k_stays_in_top_k(void **unused)
{
    float             l[V];
    int               seen[V] = { 0 };
    pic_sampler       s;
    pic_sample_params p = { .temperature = 1.0f, .top_k = 3, .seed = 11 };

    for (int i = 0; i < V; i++) {
        l[i] = (float) ((i * 5) % V) * 0.1f;     /* top 3 ids: 3 (1.5), 6, 9 */
    }
    assert_int_equal(pic_sampler_init(&s, &p, V), 0);
    for (int r = 0; r < 3000; r++) {
        seen[pic_sampler_sample(&s, l)]++;
    }
    for (int i = 0; i < V; i++) {
        int top = (i == 3 || i == 6 || i == 9);
        print_message("id %d: %d\n", i, seen[i]);
        if (top) {
            assert_true(seen[i] > 500);
        } else {
            assert_int_equal(seen[i], 0);
        }
    }
    pic_sampler_free(&s);
}

static void
test_top_p_keeps_nucleus_with_right_mass(void **unused)
{
    static const double pr[V] = { 0.05, 0.5, 0.0, 0.3, 0.15 };
    float             l[V];
    int               seen[V] = { 0 }, n = 20000;
    pic_sampler       s;
    pic_sample_params p = { .temperature = 1.0f, .top_p = 0.7f, .seed = 5 };

    make_logits(l, pr, V);
    assert_int_equal(pic_sampler_init(&s, &p, V), 0);
    for (int r = 0; r < n; r++) {
        seen[pic_sampler_sample(&s, l)]++;
    }
    /* nucleus for 0.7 = {1 (0.5), 3 (0.3)}, renormalised to 0.625 / 0.375 */
    for (int i = 0; i < V; i++) {
        if (i != 1 && i != 3) {
            assert_int_equal(seen[i], 0);
        }
    }
    assert_true(fabs(seen[1] / (double) n - 0.625) < 0.015);
    assert_true(fabs(seen[3] / (double) n - 0.375) < 0.015);
    pic_sampler_free(&s);

    /* top_p = 0.85 adds id 4 (0.5+0.3 < 0.85 <= 0.95) */
    memset(seen, 0, sizeof(seen));
    p.top_p = 0.85f;
    assert_int_equal(pic_sampler_init(&s, &p, V), 0);
    for (int r = 0; r < n; r++) {
        seen[pic_sampler_sample(&s, l)]++;
    }
    assert_true(seen[4] > 0 && seen[0] == 0);
    assert_true(fabs(seen[4] / (double) n - 0.15 / 0.95) < 0.015);
    pic_sampler_free(&s);
}

static void
test_frequencies_follow_softmax(void **unused)
{
    static const double pr[V] = { 0.1, 0.2, 0.3, 0.4 };
    float             l[V];
    int               seen[V] = { 0 }, n = 40000;
    pic_sampler       s;
    pic_sample_params p = { .temperature = 2.0f, .seed = 99 };

    make_logits(l, pr, V);
    assert_int_equal(pic_sampler_init(&s, &p, V), 0);
    for (int r = 0; r < n; r++) {
        seen[pic_sampler_sample(&s, l)]++;
    }
    /* T = 2: p_i ∝ sqrt(pr_i) */
    double z = 0.0;
    for (int i = 0; i < 4; i++) {
        z += sqrt(pr[i]);
    }
    for (int i = 0; i < 4; i++) {
        double want = sqrt(pr[i]) / z, got = seen[i] / (double) n;
        print_message("id %d: want %.4f got %.4f\n", i, want, got);
        assert_true(fabs(got - want) < 0.01);
    }
    for (int i = 4; i < V; i++) {
        assert_int_equal(seen[i], 0);
    }
    pic_sampler_free(&s);
}

static void
test_seed_replays(void **unused)
{
    float             l[V];
    int               a[64], b[64], c[64], same_c = 0;
    pic_sampler       s;
    pic_sample_params p = { .temperature = 1.0f, .top_p = 0.95f, .seed = 1234 };

    for (int i = 0; i < V; i++) {
        l[i] = 0.1f * i;
    }
    for (int run = 0; run < 3; run++) {
        int *out = run == 0 ? a : run == 1 ? b : c;
        p.seed = run < 2 ? 1234 : 4321;
        assert_int_equal(pic_sampler_init(&s, &p, V), 0);
        for (int i = 0; i < 64; i++) {
            out[i] = pic_sampler_sample(&s, l);
        }
        pic_sampler_free(&s);
    }
    assert_memory_equal(a, b, sizeof(a));
    for (int i = 0; i < 64; i++) {
        same_c += a[i] == c[i];
    }
    assert_true(same_c < 64);
}

static void
test_stop_ids_from_config(void **unused)
{
    pic_config cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.eos_ids[0] = 248046;
    cfg.eos_ids[1] = 248044;
    cfg.eos_ids[2] = -1;
    cfg.eos_ids[3] = -1;
    assert_true(pic_sample_is_stop(&cfg, 248046));
    assert_true(pic_sample_is_stop(&cfg, 248044));
    assert_false(pic_sample_is_stop(&cfg, 0));
    assert_false(pic_sample_is_stop(&cfg, -1));
}

static void
test_logit_bias_and_penalties_move_greedy(void **unused)
{
    float             l[V];
    pic_sampler       s;
    int32_t           bid[1] = { 3 };
    float             bv[1] = { 100.0f };
    pic_sample_params pb = { .temperature = 0.0f, .bias_id = bid, .bias = bv, .n_bias = 1 };
    pic_sample_params pp = { .temperature = 0.0f, .presence_penalty = 1.5f };
    pic_sample_params pf = { .temperature = 0.0f, .frequency_penalty = 0.6f };
    pic_sample_params pr = { .temperature = 0.0f, .repetition_penalty = 2.0f };

    for (int i = 0; i < V; i++) {
        l[i] = 0.0f;
    }
    l[0] = 2.0f;            /* best */
    l[1] = 1.0f;            /* second */

    assert_int_equal(pic_sampler_init(&s, &pb, V), 0);
    assert_int_equal(pic_sampler_sample(&s, l), 3);        /* 0 + 100 > 2 */
    pic_sampler_free(&s);

    /* presence: 2 - 1.5 = 0.5 < 1 once 0 was generated */
    assert_int_equal(pic_sampler_init(&s, &pp, V), 0);
    assert_int_equal(pic_sampler_sample(&s, l), 0);
    pic_sampler_accept(&s, 0);
    assert_int_equal(pic_sampler_sample(&s, l), 1);
    pic_sampler_free(&s);

    /* frequency: 2 - 0.6 n; after one 1.4 > 1, after two 0.8 < 1 */
    assert_int_equal(pic_sampler_init(&s, &pf, V), 0);
    pic_sampler_accept(&s, 0);
    assert_int_equal(pic_sampler_sample(&s, l), 0);
    pic_sampler_accept(&s, 0);
    assert_int_equal(pic_sampler_sample(&s, l), 1);
    pic_sampler_free(&s);

    /* repetition (HF): a prompt token's positive logit halves: 2/2 = 1 ties
     * with id 1 (the lower id wins), 1/2 then loses to 1 */
    l[1] = 1.5f;
    assert_int_equal(pic_sampler_init(&s, &pr, V), 0);
    int32_t prompt[1] = { 0 };
    pic_sampler_prompt(&s, prompt, 1);
    assert_int_equal(pic_sampler_sample(&s, l), 1);
    pic_sampler_free(&s);
}

static void
test_min_p_drops_the_unlikely(void **unused)
{
    double            p[V] = { 0.5, 0.3, 0.04, 0.16 };
    float             l[V];
    pic_sampler       s;
    pic_sample_params pm = { .temperature = 1.0f, .min_p = 0.2f, .seed = 3 };

    make_logits(l, p, V);
    assert_int_equal(pic_sampler_init(&s, &pm, V), 0);
    for (int r = 0; r < 2000; r++) {
        int id = pic_sampler_sample(&s, l);
        assert_true(id == 0 || id == 1 || id == 3);       /* 0.04 < 0.2 * 0.5 */
    }
    pic_sampler_free(&s);
}

static void
test_logprob_is_log_softmax(void **unused)
{
    float             l[V];
    pic_token_logprob out;
    double            mx = -1e300, sum = 0.0;

    for (int i = 0; i < V; i++) {
        l[i] = (float) sin(i * 1.7) * 3.0f;
        mx = l[i] > mx ? l[i] : mx;
    }
    for (int i = 0; i < V; i++) {
        sum += exp(l[i] - mx);
    }
    pic_sample_logprob(l, V, 5, 4, &out);
    assert_int_equal(out.id, 5);
    assert_true(fabs(out.logprob - (l[5] - mx - log(sum))) < 1e-5);
    assert_int_equal(out.n_top, 4);
    for (int k = 0; k < 4; k++) {
        int better = 0;
        for (int i = 0; i < V; i++) {
            better += l[i] > l[out.top_id[k]];
        }
        assert_int_equal(better, k);                       /* the k-th best */
        assert_true(fabs(out.top_lp[k] - (l[out.top_id[k]] - mx - log(sum))) < 1e-5);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_temperature_zero_is_argmax),
        cmocka_unit_test(test_top_k_stays_in_top_k),
        cmocka_unit_test(test_top_p_keeps_nucleus_with_right_mass),
        cmocka_unit_test(test_frequencies_follow_softmax),
        cmocka_unit_test(test_seed_replays),
        cmocka_unit_test(test_stop_ids_from_config),
        cmocka_unit_test(test_logit_bias_and_penalties_move_greedy),
        cmocka_unit_test(test_min_p_drops_the_unlikely),
        cmocka_unit_test(test_logprob_is_log_softmax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
