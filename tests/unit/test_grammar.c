/*
 * test_grammar.c — the JSON recognizer of constrained decoding: documents
 * the strict parser (pic_json_parse) accepts as objects are accepted byte by
 * byte, what it refuses is refused, schemas restrict keys, types, enums and required properties,
 * and the schema subset check names the unsupported keyword; tool calls in
 * both Qwen syntaxes follow their function's schema; the vocabulary trie
 * masks exactly the tokens a byte-by-byte feed of each one accepts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grammar.h"
#include "pic_json.h"
#include "tokenizer.h"

/* 1 if s is a complete document for schema (NULL: any object). */
static int
accepts(const cJSON *schema, const char *s)
{
    pic_gstate g;

    pic_gstate_init(&g, schema);
    for (size_t i = 0; s[i]; i++) {
        if (pic_gstate_feed(&g, s + i, 1) != 0) {
            return 0;
        }
    }
    return pic_gstate_done(&g);
}

/* 1 if s is a prefix of some document (every byte accepted). */
static int
prefix_ok(const cJSON *schema, const char *s)
{
    pic_gstate g;

    pic_gstate_init(&g, schema);
    return pic_gstate_feed(&g, s, strlen(s)) == 0;
}

static void
test_any_object_agrees_with_cjson(void **unused)
{
    static const char *docs[] = {
        "{}", "{\"a\":1}", "{\"a\": [1, 2.5, -3e+2, true, false, null]}",
        "{\"s\":\"x\\\"y\\\\z\\u00e9\\n\"}", "{\"o\":{\"p\":{\"q\":[]}}}", "{\"n\":0.25E-3}",
        "{\"a\":1,}", "{\"a\" 1}", "[1]", "\"x\"", "{\"a\":01}", "{\"a\":1.}", "{\"a\":tru}",
        "{\"a\":-}", "{a:1}", "{\"a\":\"\\x\"}", "{\"a\":[1,]}", "{\"a\":1}}", "{\"a\":nul}",
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        pic_error err;
        cJSON    *d = pic_json_parse(docs[i], strlen(docs[i]), 64, NULL, &err);
        int       want = cJSON_IsObject(d);
        if (accepts(NULL, docs[i]) != want) {
            print_error("disagree on %s (strict parser %d)\n", docs[i], want);
        }
        assert_int_equal(accepts(NULL, docs[i]), want);
        cJSON_Delete(d);
    }
    /* white space is capped so that a model cannot pad forever */
    assert_true(accepts(NULL, "{ \"a\" :  1 }"));
    assert_true(prefix_ok(NULL, "{\n      \"a\""));
    assert_false(prefix_ok(NULL, "{                  "));
    /* a complete document ends the answer: nothing but a little space after */
    assert_false(prefix_ok(NULL, "{}x"));
}

static void
test_schema_restricts_keys_types_enums_required(void **unused)
{
    cJSON *s = cJSON_Parse(
        "{\"type\":\"object\",\"properties\":{"
        "\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
        "\"mood\":{\"enum\":[\"happy\",\"sad\"]},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}}},"
        "\"required\":[\"name\",\"mood\"],\"additionalProperties\":false}");

    assert_true(accepts(s, "{\"name\":\"Al\",\"mood\":\"sad\"}"));
    assert_true(accepts(s, "{\"mood\": \"happy\", \"age\": 42, \"name\": \"B\", "
                           "\"tags\": [true, false]}"));
    assert_false(accepts(s, "{\"name\":\"Al\"}"));                 /* mood required */
    assert_false(prefix_ok(s, "{\"nam\":"));                       /* unknown key */
    assert_false(prefix_ok(s, "{\"other"));
    assert_false(prefix_ok(s, "{\"age\":4.5"));                    /* integer */
    assert_false(prefix_ok(s, "{\"mood\":\"angry"));               /* enum */
    assert_false(prefix_ok(s, "{\"name\":\"a\",\"name\""));        /* once */
    assert_false(prefix_ok(s, "{\"tags\":[1"));                    /* items */
    assert_false(prefix_ok(s, "{\"name\":\"a\",\"mood\":\"sad\",\"age\":1,"
                              "\"tags\":[],"));                  /* no key left */
    assert_false(prefix_ok(s, "{\"name\":1"));                     /* type */
    assert_true(prefix_ok(s, "{\"mood\":\"ha"));
    cJSON_Delete(s);
}

static void
test_schema_subset_check_names_the_keyword(void **unused)
{
    char   path[200], msg[256];
    cJSON *ok = cJSON_Parse("{\"type\":\"object\",\"title\":\"T\",\"properties\":"
                            "{\"a\":{\"type\":\"string\",\"description\":\"d\"}},"
                            "\"required\":[\"a\"],\"additionalProperties\":false}");
    cJSON *bad = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"a\":"
                             "{\"type\":\"integer\",\"minimum\":3}}}");
    cJSON *top = cJSON_Parse("{\"type\":\"array\"}");
    cJSON *any = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":[]}}}");

    assert_int_equal(pic_grammar_check(ok, path, sizeof(path), msg, sizeof(msg)), 0);
    assert_int_equal(pic_grammar_check(NULL, path, sizeof(path), msg, sizeof(msg)), 0);
    assert_int_equal(pic_grammar_check(bad, path, sizeof(path), msg, sizeof(msg)), -1);
    assert_string_equal(path, "properties.a.minimum");
    assert_non_null(strstr(msg, "minimum"));
    assert_int_equal(pic_grammar_check(top, path, sizeof(path), msg, sizeof(msg)), -1);
    assert_string_equal(path, "type");
    assert_int_equal(pic_grammar_check(any, path, sizeof(path), msg, sizeof(msg)), -1);
    assert_string_equal(path, "properties.a.anyOf");
    cJSON_Delete(ok);
    cJSON_Delete(bad);
    cJSON_Delete(top);
    cJSON_Delete(any);
}

/* 1 if s, fed after "<tool_call>\n" (and any forced opening), is a
 * complete call. */
static int
call_ok(pic_gcall_syntax syn, const cJSON *fns, const cJSON *params, const char *s,
        int complete)
{
    pic_gstate g;

    pic_gstate_init_call(&g, syn, fns, params);
    for (size_t i = 0; s[i]; i++) {
        if (pic_gstate_feed(&g, s + i, 1) != 0) {
            return 0;
        }
    }
    return !complete || pic_gstate_done(&g);
}

#define MODE_PARAMS "{\"type\":\"object\",\"properties\":{" \
    "\"mode\":{\"enum\":[\"fast\",\"slow\"]},\"on\":{\"type\":\"boolean\"}," \
    "\"note\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}}," \
    "\"required\":[\"mode\",\"on\"]}"

static void
test_xml_call_follows_the_schema(void **unused)
{
    cJSON *p = cJSON_Parse(MODE_PARAMS);
    cJSON *fns = cJSON_Parse("[{\"name\":\"set_mode\",\"parameters\":" MODE_PARAMS "},"
                             "{\"name\":\"ping\",\"parameters\":null}]");
    const char *end = "</function>\n</tool_call>";
    char        buf[512];

    /* named: the opening "<function=set_mode>\n" was forced */
    snprintf(buf, sizeof(buf), "<parameter=on>\ntrue\n</parameter>\n<parameter=mode>\n"
             "slow\n</parameter>\n<parameter=note>\nraw <b>text</b>, \"quotes\"\nlines\n"
             "</parameter>\n%s", end);
    assert_true(call_ok(PIC_GCALL_XML, NULL, p, buf, 1));
    snprintf(buf, sizeof(buf), "<parameter=mode>\nfast\n</parameter>\n%s", end);
    assert_false(call_ok(PIC_GCALL_XML, NULL, p, buf, 0));          /* "on" required */
    assert_false(call_ok(PIC_GCALL_XML, NULL, p, "<parameter=speed>", 0));  /* unknown */
    assert_false(call_ok(PIC_GCALL_XML, NULL, p, "<parameter=mode>\nmedium", 0));
    assert_false(call_ok(PIC_GCALL_XML, NULL, p, "<parameter=on>\n yes", 0));
    assert_false(call_ok(PIC_GCALL_XML, NULL, p, "<parameter=on>\n true", 0)); /* bare */
    assert_false(call_ok(PIC_GCALL_XML, NULL, p, "<parameter=n>\n4.5", 0));
    assert_false(call_ok(PIC_GCALL_XML, NULL, p, "<parameter=on>\ntrue\n</parameter>\n"
                                                 "<parameter=on>", 0));      /* once */
    assert_false(call_ok(PIC_GCALL_XML, NULL, p, "<parameter=note>\nx\n</parameter>y", 0));
    /* a raw value holds no tag the call parser would stop at */
    assert_true(call_ok(PIC_GCALL_XML, NULL, p, "<parameter=note>\na <p> </f> <parameter", 0));
    assert_false(call_ok(PIC_GCALL_XML, NULL, p, "<parameter=note>\nx<parameter=", 0));
    assert_false(call_ok(PIC_GCALL_XML, NULL, p, "<parameter=note>\n<</function>", 0));
    assert_false(call_ok(PIC_GCALL_XML, NULL, p, "<parameter=note>\nx</tool_call>", 0));
    assert_true(call_ok(PIC_GCALL_XML, NULL, p, "<parameter=note>\nx</tool_c </too", 0));
    /* required: the function is picked first, then its own schema applies */
    snprintf(buf, sizeof(buf), "<function=set_mode>\n<parameter=mode>\nfast\n</parameter>\n"
             "<parameter=on>\nfalse\n</parameter>\n%s", end);
    assert_true(call_ok(PIC_GCALL_XML, fns, NULL, buf, 1));
    snprintf(buf, sizeof(buf), "<function=ping>\n<parameter=any>\nthing\n</parameter>\n%s",
             end);
    assert_true(call_ok(PIC_GCALL_XML, fns, NULL, buf, 1));         /* no schema: free */
    assert_false(call_ok(PIC_GCALL_XML, fns, NULL, "<function=pong", 0));
    assert_false(call_ok(PIC_GCALL_XML, fns, NULL, "<function=set_mode>\n<parameter=x", 0));
    cJSON_Delete(p);
    cJSON_Delete(fns);
}

static void
test_json_call_follows_the_schema(void **unused)
{
    cJSON *p = cJSON_Parse(MODE_PARAMS);
    cJSON *fns = cJSON_Parse("[{\"name\":\"set_mode\",\"parameters\":" MODE_PARAMS "}]");

    assert_true(call_ok(PIC_GCALL_JSON, NULL, p,
                        "{\"mode\": \"fast\", \"on\": true}}\n</tool_call>", 1));
    assert_false(call_ok(PIC_GCALL_JSON, NULL, p, "{\"mode\": \"fast\"}", 0));
    assert_false(call_ok(PIC_GCALL_JSON, NULL, p, "[", 0));
    /* a string in a call never holds "</" (the block would end there) */
    assert_false(call_ok(PIC_GCALL_JSON, NULL, NULL, "{\"x\": \"a</tool_call>", 0));
    assert_true(call_ok(PIC_GCALL_JSON, NULL, NULL, "{\"x\": \"a<\\/b <c\"}}\n</tool_call>",
                        1));
    assert_true(call_ok(PIC_GCALL_JSON, NULL, NULL, "{\"x\": [1]}}\n</tool_call>", 1));
    assert_true(call_ok(PIC_GCALL_JSON, fns, NULL,
                        "{\"name\": \"set_mode\", \"arguments\": {\"on\": false, "
                        "\"mode\": \"slow\"}}\n</tool_call>", 1));
    assert_false(call_ok(PIC_GCALL_JSON, fns, NULL, "{\"name\": \"other\"", 0));
    assert_false(call_ok(PIC_GCALL_JSON, fns, NULL,
                         "{\"name\": \"set_mode\", \"arguments\": {\"zz", 0));
    cJSON_Delete(p);
    cJSON_Delete(fns);
}

/* Every prefix a random walk through the grammar reaches completes: the
 * shortest completion is accepted and leaves the document done (a JSON
 * document then parses as an object; a call ends with its end tag). */
static void
test_every_prefix_completes(void **unused)
{
    static const char alpha[] = "{}[]\":,. -0123456789eEtrufalsn\\\nabcdxyz<>/=_"
                                "modefastslowonnotepingparameterfunctiontool_call";
    cJSON *p = cJSON_Parse(MODE_PARAMS);
    cJSON *fns = cJSON_Parse("[{\"name\":\"set_mode\",\"parameters\":" MODE_PARAMS "},"
                             "{\"name\":\"ping\",\"parameters\":null}]");
    cJSON *nest = cJSON_Parse("{\"type\":\"object\",\"required\":[\"a\",\"o\"],\"properties\":{"
                              "\"a\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}},"
                              "\"o\":{\"type\":\"object\",\"required\":[\"k\"],\"properties\":{"
                              "\"k\":{\"const\":\"v\"},\"s\":{\"type\":\"string\"}}},"
                              "\"x\":{\"type\":\"number\"}}}");
    uint64_t rng = 12345;

    for (int walk = 0; walk < 600; walk++) {
        pic_gstate g, t;
        char       doc[4096], tail[2048];
        size_t     n = 0;
        int        kind = walk % 6;

        switch (kind) {
        case 0: pic_gstate_init(&g, NULL); break;
        case 1: pic_gstate_init(&g, p); break;
        case 2: pic_gstate_init(&g, nest); break;
        case 3: pic_gstate_init_call(&g, PIC_GCALL_XML, fns, NULL); break;
        case 4: pic_gstate_init_call(&g, PIC_GCALL_XML, NULL, p); break;
        default: pic_gstate_init_call(&g, PIC_GCALL_JSON, fns, NULL); break;
        }
        for (int step = 0; step < 200 && !pic_gstate_done(&g); step++) {
            int k = pic_gstate_complete(&g, tail, sizeof(tail));

            assert_true(k >= 0);
            pic_gstate_copy(&t, &g);
            assert_int_equal(pic_gstate_feed(&t, tail, (size_t) k), 0);
            assert_true(pic_gstate_done(&t));
            if (kind <= 2) {
                char       whole[8192];
                pic_error  err;
                cJSON     *d;

                memcpy(whole, doc, n);
                memcpy(whole + n, tail, (size_t) k);
                d = pic_json_parse(whole, n + (size_t) k, 64, NULL, &err);
                if (d == NULL && strstr(err.message, "surrogate") != NULL) {
                    continue;       /* JSON's grammar allows a lone \uDxxx; the strict
                                     * parser does not (the walk wrote it, not the
                                     * completion) */
                }
                if (!cJSON_IsObject(d)) {
                    fprintf(stderr, "[%.*s][%.*s] %s\n", (int) n, doc, k, tail, err.message);
                }
                assert_true(cJSON_IsObject(d));
                if (kind == 2) {
                    assert_non_null(cJSON_GetObjectItemCaseSensitive(d, "a"));
                    assert_non_null(cJSON_GetObjectItemCaseSensitive(
                        cJSON_GetObjectItemCaseSensitive(d, "o"), "k"));
                }
                cJSON_Delete(d);
            } else {
                char whole[8192];

                memcpy(whole, doc, n);
                memcpy(whole + n, tail, (size_t) k);
                assert_true(n + (size_t) k >= 12
                            && memcmp(whole + n + k - 12, "</tool_call>", 12) == 0);
            }
            /* one more byte the grammar accepts (favouring a short walk's variety) */
            for (int tries = 0; tries < 64; tries++) {
                char c;
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                c = alpha[(rng >> 33) % (sizeof(alpha) - 1)];
                pic_gstate_copy(&t, &g);
                if (pic_gstate_feed(&t, &c, 1) == 0 && n < sizeof(doc) - 1) {
                    pic_gstate_copy(&g, &t);
                    doc[n++] = c;
                    break;
                }
            }
        }
    }
    cJSON_Delete(p);
    cJSON_Delete(fns);
    cJSON_Delete(nest);
}

/* The trie's mask equals feeding every token alone, in many states. */
static void
test_vocab_mask_equals_feeding_each_token(void **unused)
{
    const char    *base = getenv("PIC_FIXTURES");
    char           path[1024], err[256];
    pic_tokenizer *tok;
    pic_gvocab    *v;
    cJSON         *schema = cJSON_Parse(
        "{\"type\":\"object\",\"properties\":{\"mood\":{\"enum\":[\"happy\",\"sad\"]},"
        "\"n\":{\"type\":\"number\"},\"s\":{\"type\":\"string\"}}}");
    cJSON         *p = cJSON_Parse(MODE_PARAMS);
    static const char *const prefixes[] = {
        "", "{", "{\"", "{\"mo", "{\"mood\": \"ha", "{\"n\": -1", "{\"n\": 2.5e", "{\"s\": \"ab",
        "{\"s\": \"a\\", "{\"s\": \"x\", ", "{\"mood\":\"sad\"}",
    };
    static const char *const calls[] = {
        "", "<par", "<parameter=mo", "<parameter=note>\nsome text", "<parameter=note>\nx\n</",
        "<parameter=on>\n", "<parameter=mode>\nfa", "<parameter=note>\nx <para",
        "<parameter=note>\nx </func",
    };
    size_t         n_ids;
    uint8_t       *ok;

    snprintf(path, sizeof(path), "%s/tiny-qwen35/tokenizer.json",
             base ? base : "tests/fixtures/models");
    tok = pic_tokenizer_load(path, err, sizeof(err));
    assert_non_null(tok);
    v = pic_gvocab_new(tok);
    assert_non_null(v);
    n_ids = pic_tokenizer_vocab_size(tok);
    ok = malloc(n_ids);
    for (size_t k = 0; k < sizeof(prefixes) / sizeof(prefixes[0])
                       + sizeof(calls) / sizeof(calls[0]); k++) {
        pic_gstate g, t;
        int        n = 0, want = 0;

        if (k < sizeof(prefixes) / sizeof(prefixes[0])) {
            pic_gstate_init(&g, schema);
            assert_int_equal(pic_gstate_feed(&g, prefixes[k], strlen(prefixes[k])), 0);
        } else {
            const char *c = calls[k - sizeof(prefixes) / sizeof(prefixes[0])];
            pic_gstate_init_call(&g, PIC_GCALL_XML, NULL, p);
            assert_int_equal(pic_gstate_feed(&g, c, strlen(c)), 0);
        }
        n = pic_gvocab_mask(v, &g, ok);
        for (size_t id = 0; id < n_ids; id++) {
            size_t      len = 0;
            const char *b = pic_tokenizer_token_bytes(tok, (int32_t) id, &len);
            int         yes = 0;

            if (b != NULL && len > 0 && !pic_tokenizer_is_special(tok, (int32_t) id)) {
                t = g;
                yes = pic_gstate_feed(&t, b, len) == 0;
            }
            if (yes != ok[id]) {
                print_error("state %zu, token %zu: mask %d, feed %d\n", k, id, ok[id], yes);
            }
            assert_int_equal(yes, ok[id]);
            want += yes;
        }
        assert_int_equal(n, want);
        assert_true(want > 0);
    }
    free(ok);
    pic_gvocab_free(v);
    pic_tokenizer_free(tok);
    cJSON_Delete(schema);
    cJSON_Delete(p);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xml_call_follows_the_schema),
        cmocka_unit_test(test_json_call_follows_the_schema),
        cmocka_unit_test(test_vocab_mask_equals_feeding_each_token),
        cmocka_unit_test(test_every_prefix_completes),
        cmocka_unit_test(test_any_object_agrees_with_cjson),
        cmocka_unit_test(test_schema_restricts_keys_types_enums_required),
        cmocka_unit_test(test_schema_subset_check_names_the_keyword),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
