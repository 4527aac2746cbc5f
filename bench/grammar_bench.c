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
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "pic_time.h"
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
    int            reps = 5;
    int64_t        t0;
    double         build_ms;

    if (argc < 2) {
        fprintf(stderr, "usage: grammar_bench TOKENIZER_JSON [--reps R]\n");
        return 2;
    }
    if (argc >= 4 && strcmp(argv[2], "--reps") == 0) {
        reps = atoi(argv[3]) > 0 ? atoi(argv[3]) : 1;
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
    if (v == NULL || a == NULL || b == NULL) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    printf("{\"vocab\": %zu, \"trie_build_ms\": %.3f, \"reps\": %d, \"states\": [", n_ids,
           build_ms, reps);
    for (size_t k = 0; k < sizeof(states) / sizeof(states[0]); k++) {
        const bench_state *s = &states[k];
        double            *te = malloc((size_t) reps * sizeof(double));
        double            *tt = malloc((size_t) reps * sizeof(double));
        pic_gstate         g;
        int                na = 0, nb = 0, same;

        if (s->call) {
            pic_gstate_init_call(&g, PIC_GCALL_XML, NULL, params);
        } else {
            pic_gstate_init(&g, schema);
        }
        if (te == NULL || tt == NULL
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
        }
        same = na == nb && memcmp(a, b, n_ids) == 0;
        qsort(te, (size_t) reps, sizeof(double), cmp_double);
        qsort(tt, (size_t) reps, sizeof(double), cmp_double);
        printf("%s\n  {\"state\": \"%s\", \"allowed\": %d, \"same_mask\": %s, "
               "\"each_ms_best\": %.3f, \"each_ms_median\": %.3f, "
               "\"trie_ms_best\": %.3f, \"trie_ms_median\": %.3f}", k ? "," : "", s->name,
               nb, same ? "true" : "false", te[0], te[reps / 2], tt[0], tt[reps / 2]);
        free(te);
        free(tt);
        if (!same) {
            fprintf(stderr, "%s: the masks differ (%d vs %d tokens)\n", s->name, na, nb);
            return 1;
        }
    }
    printf("\n]}\n");
    free(a);
    free(b);
    pic_gvocab_free(v);
    pic_tokenizer_free(tok);
    cJSON_Delete(schema);
    cJSON_Delete(params);
    return 0;
}
