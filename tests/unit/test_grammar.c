/*
 * test_grammar.c — the JSON recognizer of constrained decoding: documents
 * the strict parser (pic_json_parse) accepts as objects are accepted byte by
 * byte, what it refuses is refused, schemas restrict keys, types, enums and required properties,
 * and the schema subset check names the unsupported keyword.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grammar.h"
#include "pic_json.h"

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

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_any_object_agrees_with_cjson),
        cmocka_unit_test(test_schema_restricts_keys_types_enums_required),
        cmocka_unit_test(test_schema_subset_check_names_the_keyword),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
