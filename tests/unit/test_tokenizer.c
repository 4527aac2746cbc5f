/*
 * test_tokenizer.c — the tokenizer's API on a tokenizer.json written here:
 * merges applied by rank, added tokens, the streaming decoder's UTF-8
 * holding-back, concurrent encodes, and hostile JSON (mutated bytes must
 * give an error, never a crash; run under ASan to see the error paths).
 * Ids against the `tokenizers` library are checked in
 * tests/integration/test_tokenizer.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tokenizer.h"

#define QWEN35_REGEX \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{L}\\\\p{M}]+|\\\\p{N}|" \
    " ?[^\\\\s\\\\p{L}\\\\p{M}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"

static char  json[65536];
static char  err[512];

/* --- a small tokenizer.json: 256 byte tokens (id = byte), four merges,
 *     <|im_end|> (300, special) and <think> (301, not special) --- */

static size_t
put_cp(char *o, unsigned cp)
{
    if (cp == '"' || cp == '\\') {
        o[0] = '\\';
        o[1] = (char)cp;
        return 2;
    }
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static unsigned
byte_cp(int b)
{
    static unsigned map[256];
    static int      done;
    int             i, n = 0;

    if (!done) {
        for (i = 0; i < 256; i++) {
            map[i] = ((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174)
                     ? (unsigned)i : (unsigned)(256 + n++);
        }
        done = 1;
    }
    return map[b];
}

static size_t
build_json(char *out)
{
    char *o = out;
    int   b;

    o += sprintf(o, "{\"version\": \"1.0\", \"added_tokens\": ["
                 "{\"id\": 300, \"content\": \"<|im_end|>\", \"single_word\": false, "
                 "\"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true},"
                 "{\"id\": 301, \"content\": \"<think>\", \"special\": false, "
                 "\"normalized\": false}],"
                 "\"normalizer\": {\"type\": \"NFC\"},"
                 "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
                 "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"" QWEN35_REGEX "\"}, "
                 "\"behavior\": \"Isolated\", \"invert\": false},"
                 "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, "
                 "\"use_regex\": false}]},"
                 "\"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"},"
                 "\"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
                 "\"vocab\": {");
    for (b = 0; b < 256; b++) {
        *o++ = '"';
        o += put_cp(o, byte_cp(b));
        o += sprintf(o, "\": %d, ", b);
    }
    o += sprintf(o, "\"aa\": 256, \"ab\": 257, \"bc\": 258, \"\xC4\xA0" "a\": 259}, "
                 "\"merges\": [\"a a\", \"a b\", [\"b\", \"c\"], \"\xC4\xA0 a\"]}}");
    return (size_t)(o - out);
}

static pic_tokenizer *
load_small(void)
{
    size_t         n = build_json(json);
    pic_tokenizer *t = pic_tokenizer_load_json(json, n, err, sizeof(err));

    if (t == NULL) {
        fprintf(stderr, "load: %s\n", err);
    }
    assert_non_null(t);
    return t;
}

static void
expect_ids(const pic_tokenizer *t, const char *text, unsigned flags, const int32_t *want,
           size_t n_want)
{
    int32_t *ids;
    size_t   n, i;

    assert_int_equal(pic_tokenizer_encode_flags(t, text, strlen(text), flags, &ids, &n),
                     PIC_TOKENIZER_OK);
    assert_int_equal(n, n_want);
    for (i = 0; i < n; i++) {
        assert_int_equal(ids[i], want[i]);
    }
    free(ids);
}


/* --- tests --- */

static void
test_merges_apply_lowest_rank_first(void **state)
{
    pic_tokenizer *t = load_small();

    expect_ids(t, "aaa", 0, (int32_t[]){ 256, 'a' }, 2);    /* leftmost on ties */
    expect_ids(t, "abc", 0, (int32_t[]){ 257, 'c' }, 2);    /* "a b" before "b c" */
    expect_ids(t, "bc", 0, (int32_t[]){ 258 }, 1);
    expect_ids(t, "x a", 0, (int32_t[]){ 'x', 259 }, 2);   /* "Ġ a" in byte-level form */
    expect_ids(t, "", 0, NULL, 0);
    pic_tokenizer_free(t);
}

static void
test_added_tokens_match_before_bpe(void **state)
{
    pic_tokenizer *t = load_small();

    expect_ids(t, "b<|im_end|>aa<think>", 0, (int32_t[]){ 'b', 300, 256, 301 }, 4);
    /* split special: <|im_end|> is text, <think> (not special) still matches */
    expect_ids(t, "<|im_end|><think>", PIC_TOKENIZER_SPLIT_SPECIAL,
               (int32_t[]){ '<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|', '>', 301 }, 11);
    pic_tokenizer_free(t);
}

static void
test_queries(void **state)
{
    pic_tokenizer *t = load_small();
    size_t         len;
    const char    *b;

    assert_int_equal(pic_tokenizer_vocab_size(t), 302);
    assert_int_equal(pic_tokenizer_token_id(t, "<|im_end|>"), 300);
    assert_int_equal(pic_tokenizer_token_id(t, "ab"), 257);
    assert_int_equal(pic_tokenizer_token_id(t, "\xC4\xA0" "a"), 259);
    assert_int_equal(pic_tokenizer_token_id(t, "zz"), -1);
    assert_true(pic_tokenizer_is_special(t, 300));
    assert_false(pic_tokenizer_is_special(t, 301));
    assert_false(pic_tokenizer_is_special(t, 100000));
    assert_string_equal(pic_tokenizer_token_str(t, 259), "\xC4\xA0" "a");
    assert_null(pic_tokenizer_token_str(t, 280));   /* a hole in the ids */
    b = pic_tokenizer_token_bytes(t, 259, &len);
    assert_int_equal(len, 2);
    assert_memory_equal(b, " a", 2);
    pic_tokenizer_free(t);
}

static void
test_bad_text_and_arguments(void **state)
{
    pic_tokenizer *t = load_small();
    int32_t       *ids = (int32_t *)&ids;
    size_t         n = 7;

    assert_int_equal(pic_tokenizer_encode(t, "a\xC3", 2, &ids, &n), PIC_TOKENIZER_EUTF8);
    assert_null(ids);
    assert_int_equal(n, 0);
    assert_int_equal(pic_tokenizer_encode(t, "\xED\xA0\x80", 3, &ids, &n), PIC_TOKENIZER_EUTF8);
    assert_int_equal(pic_tokenizer_encode(NULL, "a", 1, &ids, &n), PIC_TOKENIZER_EINVAL);
    assert_int_equal(pic_tokenizer_encode(t, NULL, 1, &ids, &n), PIC_TOKENIZER_EINVAL);
    assert_int_equal(pic_tokenizer_encode(t, "a", 1, NULL, &n), PIC_TOKENIZER_EINVAL);
    /* NUL is a character like any other */
    assert_int_equal(pic_tokenizer_encode(t, "a\0b", 3, &ids, &n), PIC_TOKENIZER_OK);
    assert_int_equal(n, 3);
    free(ids);
    pic_tokenizer_free(t);
    pic_tokenizer_free(NULL);
}

static void
test_stream_holds_partial_utf8(void **state)
{
    pic_tokenizer *t = load_small();
    pic_detok      d;
    size_t         len;
    const char    *s;

    pic_detok_init(&d, t, 0);
    /* é = C3 A9, fed as two byte tokens (ids are the bytes) */
    s = pic_detok_feed(&d, 0xC3, &len);
    assert_int_equal(len, 0);
    assert_string_equal(s, "");
    s = pic_detok_feed(&d, 0xA9, &len);
    assert_int_equal(len, 2);
    assert_string_equal(s, "\xC3\xA9");
    /* 🚀 = F0 9F 9A 80, one byte at a time */
    assert_int_equal(*pic_detok_feed(&d, 0xF0, &len), '\0');
    assert_int_equal(*pic_detok_feed(&d, 0x9F, &len), '\0');
    assert_int_equal(*pic_detok_feed(&d, 0x9A, &len), '\0');
    s = pic_detok_feed(&d, 0x80, &len);
    assert_string_equal(s, "\xF0\x9F\x9A\x80");
    /* a lead byte followed by ASCII: U+FFFD then the ASCII */
    pic_detok_feed(&d, 0xE2, &len);
    s = pic_detok_feed(&d, 'x', &len);
    assert_string_equal(s, "\xEF\xBF\xBDx");
    /* special skipped when asked; unknown ids are nothing */
    s = pic_detok_feed(&d, 300, &len);
    assert_string_equal(s, "<|im_end|>");
    s = pic_detok_feed(&d, 99999, &len);
    assert_int_equal(len, 0);
    /* an unfinished sequence at the end flushes as one U+FFFD */
    pic_detok_feed(&d, 0xF0, &len);
    pic_detok_feed(&d, 0x9F, &len);
    s = pic_detok_flush(&d, &len);
    assert_string_equal(s, "\xEF\xBF\xBD");
    s = pic_detok_flush(&d, &len);
    assert_int_equal(len, 0);
    pic_detok_free(&d);

    pic_detok_init(&d, t, 1);
    s = pic_detok_feed(&d, 300, &len);
    assert_int_equal(len, 0);
    pic_detok_free(&d);
    pic_tokenizer_free(t);
}

static void
test_stream_concatenation_equals_one_shot(void **state)
{
    pic_tokenizer *t = load_small();
    int32_t        ids[64];
    char          *one, cat[1024];
    size_t         n1, len, k, i, r;
    uint32_t       x = 12345;

    for (r = 0; r < 500; r++) {
        pic_detok d;

        for (i = 0; i < 64; i++) {
            x = x * 1103515245u + 12345u;
            /* mostly high bytes so sequences break in every way */
            ids[i] = (int32_t)((x >> 16) % 4 == 0 ? (x >> 8) % 302 : 0x80 + (x >> 8) % 0x80);
        }
        assert_int_equal(pic_tokenizer_decode(t, ids, 64, 0, &one, &n1), PIC_TOKENIZER_OK);
        pic_detok_init(&d, t, 0);
        k = 0;
        for (i = 0; i <= 64; i++) {
            const char *s = i < 64 ? pic_detok_feed(&d, ids[i], &len) : pic_detok_flush(&d, &len);

            assert_true(k + len < sizeof(cat));
            memcpy(cat + k, s, len);
            k += len;
        }
        pic_detok_free(&d);
        assert_int_equal(k, n1);
        assert_memory_equal(cat, one, n1);
        free(one);
    }
    pic_tokenizer_free(t);
}

typedef struct {
    const pic_tokenizer *t;
    const char          *text;
    int32_t             *want;
    size_t               n_want;
    int                  bad;
} enc_job;

static void *
enc_thread(void *arg)
{
    enc_job *j = arg;
    int      r;

    for (r = 0; r < 200; r++) {
        int32_t *ids;
        size_t   n;

        if (pic_tokenizer_encode(j->t, j->text, strlen(j->text), &ids, &n) != 0
            || n != j->n_want || memcmp(ids, j->want, n * sizeof(*ids)) != 0) {
            j->bad++;
        }
        free(ids);
    }
    return NULL;
}

static void
test_concurrent_encodes_agree(void **state)
{
    pic_tokenizer *t = load_small();
    const char    *text = "aaa abc bcab <|im_end|> caf\xC3\xA9 cafe\xCC\x81 \xE6\x88\x91 "
                          "   x\ty\r\n 12345 it's aab abab aaaa <think>";
    enc_job        job[4];
    pthread_t      th[4];
    int32_t       *want;
    size_t         n_want;
    int            i;

    assert_int_equal(pic_tokenizer_encode(t, text, strlen(text), &want, &n_want), 0);
    for (i = 0; i < 4; i++) {
        job[i] = (enc_job){ t, text, want, n_want, 0 };
        assert_int_equal(pthread_create(&th[i], NULL, enc_thread, &job[i]), 0);
    }
    for (i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(job[i].bad, 0);
    }
    free(want);
    pic_tokenizer_free(t);
}

static void
test_hostile_json_never_crashes(void **state)
{
    size_t         n = build_json(json), i, r;
    char          *m = malloc(n + 1);
    uint32_t       x = 99;
    int            loaded = 0;
    pic_tokenizer *t;

    assert_null(pic_tokenizer_load_json(NULL, 0, err, sizeof(err)));
    assert_null(pic_tokenizer_load_json("", 0, err, sizeof(err)));
    assert_true(strlen(err) > 0);
    assert_null(pic_tokenizer_load_json("{}", 2, err, sizeof(err)));
    assert_non_null(strstr(err, "model"));
    assert_null(pic_tokenizer_load_json("{\"model\":{\"vocab\":{\"a\":16777216}}}", 33, NULL, 0));
    /* truncations at every 97th byte */
    for (i = 0; i < n; i += 97) {
        assert_null(pic_tokenizer_load_json(json, i, err, sizeof(err)));
    }
    /* random byte mutations: an error or a tokenizer, never a crash */
    for (r = 0; r < 300; r++) {
        memcpy(m, json, n);
        for (i = 0; i < 4; i++) {
            x = x * 1103515245u + 12345u;
            m[(x >> 8) % n] = (char)(x >> 3);
        }
        t = pic_tokenizer_load_json(m, n, err, sizeof(err));
        if (t != NULL) {
            int32_t *ids;
            size_t   k;

            loaded++;
            if (pic_tokenizer_encode(t, "abc <|im_end|> x", 16, &ids, &k) == 0) {
                free(ids);
            }
            pic_tokenizer_free(t);
        } else {
            assert_true(strlen(err) > 0);
        }
    }
    free(m);
    (void)loaded;
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merges_apply_lowest_rank_first),
        cmocka_unit_test(test_added_tokens_match_before_bpe),
        cmocka_unit_test(test_queries),
        cmocka_unit_test(test_bad_text_and_arguments),
        cmocka_unit_test(test_stream_holds_partial_utf8),
        cmocka_unit_test(test_stream_concatenation_equals_one_shot),
        cmocka_unit_test(test_concurrent_encodes_agree),
        cmocka_unit_test(test_hostile_json_never_crashes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
