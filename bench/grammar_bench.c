/*
 * grammar_bench.c — cost of masking the vocabulary for constrained decoding
 * (engine/compute/grammar.c) in representative grammar states, the way the
 * scheduler did it before (a copy of the state fed each token's bytes, one
 * token after the other) and with the vocabulary trie (pic_gvocab_mask).
 * Driven by bench/grammar.py; prints one JSON object.
 *
 *   grammar_bench TOKENIZER_JSON [--reps R]
 *
 * Every state's two masks are compared (they must be equal); per state the
 * best and median of R rounds of each method, interleaved, are reported.
 *
 * And what constrained decoding adds to one generated token, the way the
 * scheduler spends it: always the shortest completion (pic_gstate_complete,
 * the max_tokens check) and one token fed to a copy of the state; when the
 * sampled token breaks the grammar also the trie mask, the masked copy of
 * the logits and a second draw over them.  Against a decode step's floor:
 * the (vocab, hidden) bf16 output projection alone (y = W x on every
 * thread, pic_backend.matmul_w), which every decode step of a model with
 * this vocabulary pays besides its layers.
 *
 *   grammar_bench TOKENIZER_JSON [--reps R] [--hidden H]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "grammar.h"
#include "pic_kernels.h"
#include "pic_time.h"
#include "sample.h"
#include "tokenizer.h"

#define SCHEMA "{\"type\":\"object\",\"properties\":{" \
    "\"mood\":{\"enum\":[\"happy\",\"sad\"]},\"n\":{\"type\":\"number\"}," \
    "\"s\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}}}"
#define PARAMS "{\"type\":\"object\",\"properties\":{" \
    "\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"]}"

typedef struct {
    const char *name;
    int         call;           /* an XML tool call's arguments, else a JSON document */
    const char *prefix;         /* fed before masking */
} bench_state;

static const bench_state states[] = {
    { "json_start", 0, "" },
    { "json_key", 0, "{\"" },
    { "json_string_value", 0, "{\"s\": \"some text so far" },
    { "json_number", 0, "{\"n\": 12" },
    { "json_after_value", 0, "{\"mood\": \"sad\"" },
    { "json_array_string", 0, "{\"tags\": [\"a\", \"b" },
    { "call_start", 1, "" },
    { "call_key", 1, "<parameter=" },
    { "call_raw_value", 1, "<parameter=city>\nSaint-" },
    { "call_integer", 1, "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3" },
};

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;

    return x < y ? -1 : x > y;
}

/* The scheduler's old mask: each token alone through a copy of the state. */
static int
mask_each(const pic_tokenizer *tok, size_t n_ids, const pic_gstate *g, uint8_t *ok)
{
    int n = 0;

    for (size_t id = 0; id < n_ids; id++) {
        size_t      len = 0;
        const char *b = pic_tokenizer_token_bytes(tok, (int32_t) id, &len);
        pic_gstate  t;

        ok[id] = 0;
        if (b == NULL || len == 0 || pic_tokenizer_is_special(tok, (int32_t) id)) {
            continue;
        }
        t = *g;
        if (pic_gstate_feed(&t, b, len) == 0) {
            ok[id] = 1;
            n++;
        }
    }
    return n;
}

int
main(int argc, char **argv)
{
    pic_tokenizer *tok;
    pic_gvocab    *v;
    cJSON         *schema = cJSON_Parse(SCHEMA), *params = cJSON_Parse(PARAMS);
    char           err[256];
    size_t         n_ids;
    uint8_t       *a, *b;
    int            reps = 5, hidden = 1024;
    float         *logits, *masked;
    pic_sampler    smp;
    pic_sample_params sp = { .temperature = 1.0f, .top_p = 1.0f, .seed = 7 };
    int64_t        t0;
    double         build_ms;

    if (argc < 2) {
        fprintf(stderr, "usage: grammar_bench TOKENIZER_JSON [--reps R]\n");
        return 2;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--reps") == 0) {
            reps = atoi(argv[i + 1]) > 0 ? atoi(argv[i + 1]) : 1;
        } else if (strcmp(argv[i], "--hidden") == 0) {
            hidden = atoi(argv[i + 1]) > 0 ? atoi(argv[i + 1]) / 32 * 32 : 1024;
        }
    }
    tok = pic_tokenizer_load(argv[1], err, sizeof(err));
    if (tok == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    n_ids = pic_tokenizer_vocab_size(tok);
    t0 = pic_now_ns();
    v = pic_gvocab_new(tok);
    build_ms = (double) (pic_now_ns() - t0) * 1e-6;
    a = malloc(n_ids);
    b = malloc(n_ids);
    logits = malloc(n_ids * sizeof(float));
    masked = malloc(n_ids * sizeof(float));
    if (v == NULL || a == NULL || b == NULL || logits == NULL || masked == NULL
        || pic_sampler_init(&smp, &sp, (int) n_ids) != 0) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n_ids; i++) {
        logits[i] = (float) ((i * 2654435761u) % 1000) * 0.01f;
    }
    printf("{\"vocab\": %zu, \"trie_build_ms\": %.3f, \"reps\": %d, \"states\": [", n_ids,
           build_ms, reps);
    for (size_t k = 0; k < sizeof(states) / sizeof(states[0]); k++) {
        const bench_state *s = &states[k];
        double            *te = malloc((size_t) reps * sizeof(double));
        double            *tt = malloc((size_t) reps * sizeof(double));
        double            *tc = malloc((size_t) reps * sizeof(double));
        double            *tw = malloc((size_t) reps * sizeof(double));
        pic_gstate         g;
        int                na = 0, nb = 0, same;

        if (s->call) {
            pic_gstate_init_call(&g, PIC_GCALL_XML, NULL, params);
        } else {
            pic_gstate_init(&g, schema);
        }
        if (te == NULL || tt == NULL || tc == NULL || tw == NULL
            || pic_gstate_feed(&g, s->prefix, strlen(s->prefix)) != 0) {
            fprintf(stderr, "%s: bad state\n", s->name);
            return 1;
        }
        for (int r = 0; r < reps; r++) {
            t0 = pic_now_ns();
            na = mask_each(tok, n_ids, &g, a);
            te[r] = (double) (pic_now_ns() - t0) * 1e-6;
            t0 = pic_now_ns();
            nb = pic_gvocab_mask(v, &g, b);
            tt[r] = (double) (pic_now_ns() - t0) * 1e-6;

            /* every token: the completion check and one token through a copy
             * (100 of them timed together; the clock's grain is ~20 ns) */
            t0 = pic_now_ns();
            for (int k2 = 0; k2 < 100; k2++) {
                char       tail[4096];
                pic_gstate t = g;
                size_t     len = 0;
                const char *tb = pic_tokenizer_token_bytes(tok, (int32_t) (k2 * 2477 % n_ids),
                                                           &len);
                if (pic_gstate_complete(&g, tail, sizeof(tail)) < 0) {
                    fprintf(stderr, "%s: no completion\n", s->name);
                    return 1;
                }
                if (tb != NULL) {
                    (void) pic_gstate_feed(&t, tb, len);
                }
            }
            tc[r] = (double) (pic_now_ns() - t0) * 1e-8;

            /* a refused token: the mask, the masked logits, a second draw */
            t0 = pic_now_ns();
            pic_gvocab_mask(v, &g, b);
            for (size_t i = 0; i < n_ids; i++) {
                masked[i] = b[i] ? logits[i] : -INFINITY;
            }
            (void) pic_sampler_sample(&smp, masked);
            tw[r] = (double) (pic_now_ns() - t0) * 1e-6 + tc[r];
        }
        same = na == nb && memcmp(a, b, n_ids) == 0;
        qsort(te, (size_t) reps, sizeof(double), cmp_double);
        qsort(tt, (size_t) reps, sizeof(double), cmp_double);
        qsort(tc, (size_t) reps, sizeof(double), cmp_double);
        qsort(tw, (size_t) reps, sizeof(double), cmp_double);
        printf("%s\n  {\"state\": \"%s\", \"allowed\": %d, \"same_mask\": %s, "
               "\"each_ms_best\": %.3f, \"each_ms_median\": %.3f, "
               "\"trie_ms_best\": %.3f, \"trie_ms_median\": %.3f, "
               "\"token_allowed_ms_median\": %.4f, \"token_refused_ms_median\": %.3f}",
               k ? "," : "", s->name, nb, same ? "true" : "false", te[0], te[reps / 2], tt[0],
               tt[reps / 2], tc[reps / 2], tw[reps / 2]);
        free(te);
        free(tt);
        free(tc);
        free(tw);
        if (!same) {
            fprintf(stderr, "%s: the masks differ (%d vs %d tokens)\n", s->name, na, nb);
            return 1;
        }
    }
    {
        /* a decode step's floor: the output projection, bf16, every thread */
        size_t    nw = n_ids * (size_t) hidden;
        uint16_t *w = malloc(nw * 2);
        float    *x = malloc((size_t) hidden * sizeof(float));
        double   *tl = malloc((size_t) reps * sizeof(double));
        pic_wmat  m = { .type = PIC_WTYPE_BF16, .rows = (int) n_ids, .cols = hidden };
        const pic_backend *be = pic_backend_cpu();

        if (w == NULL || x == NULL || tl == NULL) {
            fprintf(stderr, "out of memory (output projection)\n");
            return 1;
        }
        for (size_t i = 0; i < nw; i++) {
            w[i] = (uint16_t) (0x3c00 + (i * 40503u) % 512);     /* bf16 ~0.008-0.03 */
        }
        for (int i = 0; i < hidden; i++) {
            x[i] = (float) ((i * 7919) % 2001 - 1000) / 1000.0f;
        }
        m.data = w;
        for (int r = 0; r < reps + 1; r++) {
            t0 = pic_now_ns();
            be->matmul_w(logits, x, &m, 1, 0);
            if (r > 0) {
                tl[r - 1] = (double) (pic_now_ns() - t0) * 1e-6;
            }
        }
        qsort(tl, (size_t) reps, sizeof(double), cmp_double);
        printf("\n], \"lm_head\": {\"rows\": %zu, \"hidden\": %d, \"threads\": %d, "
               "\"simd\": \"%s\", \"ms_best\": %.3f, \"ms_median\": %.3f}}\n", n_ids, hidden,
               pic_kernels_threads(), pic_kernels_simd(), tl[0], tl[reps / 2]);
        free(w);
        free(x);
        free(tl);
    }
    pic_sampler_free(&smp);
    free(logits);
    free(masked);
    free(a);
    free(b);
    pic_gvocab_free(v);
    pic_tokenizer_free(tok);
    cJSON_Delete(schema);
    cJSON_Delete(params);
    return 0;
}
