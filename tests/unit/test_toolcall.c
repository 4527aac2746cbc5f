/*
 * test_toolcall.c — the server's output filters, which random-weight models
 * never exercise: <tool_call> blocks (JSON and XML bodies) into OpenAI
 * tool_calls, the streaming splitter fed at every possible cut, and stop
 * strings over streamed text.
 */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "stopstr.h"
#include "toolcall.h"

/* --- one block --- */

static void
test_json_body(void **unused)
{
    pic_toolcall_out c;
    const char      *b = "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                         "\"days\": 3}}\n";

    assert_int_equal(pic_toolcall_parse_body(b, strlen(b), NULL, &c), 0);
    assert_string_equal(c.name, "get_weather");
    assert_string_equal(c.arguments, "{\"city\":\"Paris\",\"days\":3}");
    pic_toolcall_clear(&c);
}

static void
test_json_body_string_arguments_and_missing(void **unused)
{
    pic_toolcall_out c;
    const char      *a = "{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}";
    const char      *b = "{\"name\": \"g\"}";

    assert_int_equal(pic_toolcall_parse_body(a, strlen(a), NULL, &c), 0);
    assert_string_equal(c.arguments, "{\"x\": 1}");
    pic_toolcall_clear(&c);
    assert_int_equal(pic_toolcall_parse_body(b, strlen(b), NULL, &c), 0);
    assert_string_equal(c.name, "g");
    assert_string_equal(c.arguments, "{}");
    pic_toolcall_clear(&c);
}

static void
test_bad_bodies_are_rejected(void **unused)
{
    static const char *bad[] = {
        "", "   ", "{", "{\"arguments\": {}}", "{\"name\": \"\"}", "{\"name\": 5}",
        "{\"name\": \"f\", \"arguments\": [1]}", "[1, 2]", "get_weather(city=Paris)",
        "<function=f>\n<parameter=x>\n1\n</parameter>\n",          /* no </function> */
        "<function=>\n</function>", "<function=f>junk</function>",
        "<function=f>\n</function>\ntrailing", "<function=a\nb>\n</function>",
    };
    pic_toolcall_out c;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (pic_toolcall_parse_body(bad[i], strlen(bad[i]), NULL, &c) == 0) {
            fail_msg("accepted bad body #%zu: %s", i, bad[i]);
        }
        assert_null(c.name);
        assert_null(c.arguments);
    }
}

static void
test_xml_body_with_schema(void **unused)
{
    const char *tools_json =
        "[{\"type\":\"function\",\"function\":{\"name\":\"book\",\"parameters\":{"
        "\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\"},"
        "\"nights\":{\"type\":\"integer\"},\"opts\":{\"type\":\"object\"}}}}}]";
    const char *b = "<function=book>\n<parameter=code>\n007\n</parameter>\n"
                    "<parameter=nights>\n3\n</parameter>\n<parameter=opts>\n"
                    "{\"late\": true}\n</parameter>\n<parameter=note>\nhello\nworld\n"
                    "</parameter>\n<parameter=n2>\n2.5\n</parameter>\n</function>";
    cJSON            *tools = cJSON_Parse(tools_json), *args;
    pic_toolcall_out  c;

    assert_int_equal(pic_toolcall_parse_body(b, strlen(b), tools, &c), 0);
    assert_string_equal(c.name, "book");
    args = cJSON_Parse(c.arguments);
    assert_non_null(args);
    /* declared string: stays a string even though it looks like a number */
    assert_string_equal(cJSON_GetObjectItem(args, "code")->valuestring, "007");
    assert_int_equal(cJSON_GetObjectItem(args, "nights")->valueint, 3);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(args, "opts"), "late")));
    /* undeclared: JSON when it parses, else the text; inner newlines kept */
    assert_string_equal(cJSON_GetObjectItem(args, "note")->valuestring, "hello\nworld");
    assert_true(cJSON_GetObjectItem(args, "n2")->valuedouble == 2.5);
    cJSON_Delete(args);
    pic_toolcall_clear(&c);
    cJSON_Delete(tools);
}

static void
test_xml_body_tolerates_missing_parameter_close(void **unused)
{
    const char      *b = "<function=f>\n<parameter=a>\nx\n<parameter=b>\ny\n</function>";
    pic_toolcall_out c;

    assert_int_equal(pic_toolcall_parse_body(b, strlen(b), NULL, &c), 0);
    assert_string_equal(c.arguments, "{\"a\":\"x\",\"b\":\"y\"}");
    pic_toolcall_clear(&c);
}

/* --- streaming --- */

typedef struct {
    char             content[4096];
    size_t           len;
    pic_toolcall_out calls[8];
    int              n;
} stream_out;

static void
stream_feed(pic_toolstream *ts, stream_out *o, const char *p, size_t n, int final)
{
    char             *content;
    size_t            clen;
    pic_toolcall_out *calls;
    int               k;

    assert_int_equal(pic_toolstream_feed(ts, p, n, final, &content, &clen), 0);
    assert_true(o->len + clen < sizeof(o->content));
    if (clen) {
        memcpy(o->content + o->len, content, clen);
        o->len += clen;
    }
    o->content[o->len] = '\0';
    free(content);
    k = pic_toolstream_take(ts, &calls);
    for (int i = 0; i < k; i++) {
        assert_true(o->n < 8);
        o->calls[o->n++] = calls[i];
    }
    free(calls);
}

static void
stream_clear(stream_out *o)
{
    for (int i = 0; i < o->n; i++) {
        pic_toolcall_clear(&o->calls[i]);
    }
    memset(o, 0, sizeof(*o));
}

/* The text cut in two at every byte, and fed byte by byte: always the same
 * content and calls. */
static void
check_every_cut_syn(pic_toolsyntax syn, const char *text, const char *want_content,
                    int want_calls, const char *first_name)
{
    size_t n = strlen(text);

    for (size_t cut = 0; cut <= n + 1; cut++) {
        pic_toolstream ts;
        stream_out     o = { 0 };

        pic_toolstream_init(&ts, NULL, syn);
        if (cut <= n) {
            stream_feed(&ts, &o, text, cut, 0);
            stream_feed(&ts, &o, text + cut, n - cut, 0);
        } else {
            for (size_t i = 0; i < n; i++) {
                stream_feed(&ts, &o, text + i, 1, 0);
            }
        }
        stream_feed(&ts, &o, NULL, 0, 1);
        assert_string_equal(o.content, want_content);
        assert_int_equal(o.n, want_calls);
        assert_int_equal(ts.total_calls, want_calls);
        if (want_calls > 0) {
            assert_string_equal(o.calls[0].name, first_name);
        }
        stream_clear(&o);
        pic_toolstream_free(&ts);
    }
}

static void
check_every_cut(const char *text, const char *want_content, int want_calls,
                const char *first_name)
{
    check_every_cut_syn(PIC_TOOLSYN_TAGS, text, want_content, want_calls, first_name);
}

static void
test_stream_content_then_calls(void **unused)
{
    check_every_cut("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                    "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n<function=get_time>\n"
                    "<parameter=tz>\nCET\n</parameter>\n</function>\n</tool_call>",
                    "Let me check.\n\n", 2, "get_weather");
}

static void
test_stream_plain_text_and_lookalikes(void **unused)
{
    /* "<tool" that never becomes a tag, a lone "<", a tag-like word */
    check_every_cut("a <tool b < c <tool_cal d <tool_call", "a <tool b < c <tool_cal d "
                    "<tool_call", 0, NULL);
    check_every_cut("no calls here", "no calls here", 0, NULL);
}

static void
test_stream_bad_block_stays_content(void **unused)
{
    check_every_cut("x<tool_call>not json</tool_call>y",
                    "x<tool_call>not json</tool_call>y", 0, NULL);
    /* unterminated at the end of the stream */
    check_every_cut("x<tool_call>{\"name\": \"f\"", "x<tool_call>{\"name\": \"f\"", 0, NULL);
}

static void
test_call_ids(void **unused)
{
    char a[32], b[32];

    pic_toolcall_id(PIC_TOOLSYN_TAGS, a, sizeof(a));
    pic_toolcall_id(PIC_TOOLSYN_TAGS, b, sizeof(b));
    assert_int_equal(strlen(a), 29);
    assert_memory_equal(a, "call_", 5);
    assert_string_not_equal(a, b);
    /* Mistral's templates refuse any id but 9 alphanumerics */
    pic_toolcall_id(PIC_TOOLSYN_MISTRAL, a, sizeof(a));
    pic_toolcall_id(PIC_TOOLSYN_MISTRAL, b, sizeof(b));
    assert_int_equal(strlen(a), 9);
    assert_string_not_equal(a, b);
    for (int i = 0; i < 9; i++) {
        assert_true(isalnum((unsigned char) a[i]));
    }
}

/* --- Llama 3.1 / 3.2 and Mistral: calls that end with the answer --- */

static void
test_syntax_of_dialects(void **unused)
{
    assert_int_equal(pic_toolsyntax_of(PIC_TEMPLATE_QWEN3_5), PIC_TOOLSYN_TAGS);
    assert_int_equal(pic_toolsyntax_of(PIC_TEMPLATE_SMOLLM2), PIC_TOOLSYN_TAGS);
    assert_int_equal(pic_toolsyntax_of(PIC_TEMPLATE_LLAMA3_1), PIC_TOOLSYN_LLAMA_JSON);
    assert_int_equal(pic_toolsyntax_of(PIC_TEMPLATE_LLAMA3_2), PIC_TOOLSYN_LLAMA_JSON);
    assert_int_equal(pic_toolsyntax_of(PIC_TEMPLATE_MISTRAL), PIC_TOOLSYN_MISTRAL);
    assert_int_equal(pic_toolsyntax_of(PIC_TEMPLATE_MISTRAL_NEMO), PIC_TOOLSYN_MISTRAL);
}

static void
test_llama_answer_is_the_call(void **unused)
{
    /* the format the Llama 3.1 template asks for, then the python tag form,
     * then two calls as Llama 3.2 writes them */
    check_every_cut_syn(PIC_TOOLSYN_LLAMA_JSON,
                        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                        "", 1, "get_weather");
    check_every_cut_syn(PIC_TOOLSYN_LLAMA_JSON,
                        "\n<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", "", 1, "f");
    check_every_cut_syn(PIC_TOOLSYN_LLAMA_JSON,
                        " {\"name\": \"a\", \"parameters\": {\"x\": 1}}; "
                        "{\"name\": \"b\", \"parameters\": {}}", "", 2, "a");
}

static void
test_llama_other_answers_are_content(void **unused)
{
    static const char *const plain[] = {
        "The capital of France is Paris.",
        "Sure: {\"name\": \"f\", \"parameters\": {}}",     /* not at the start */
        "{not json at all}",
        "{\"name\": \"f\", \"parameters\": {}} and then some words",
        "{\"parameters\": {}}",                                 /* no name */
        "<|python_tag|>brave_search.call(query=\"x\")",          /* built-in tool */
        "<|python_ta",
        "  ",
        "",
    };

    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
        check_every_cut_syn(PIC_TOOLSYN_LLAMA_JSON, plain[i], plain[i], 0, NULL);
    }
}

static void
test_mistral_calls_after_the_tag(void **unused)
{
    pic_toolstream   ts;
    stream_out       o = { 0 };
    const char      *t = "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": "
                         "{\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}, "
                         "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]";

    check_every_cut_syn(PIC_TOOLSYN_MISTRAL, t, "", 2, "get_weather");
    check_every_cut_syn(PIC_TOOLSYN_MISTRAL, "Checking.[TOOL_CALLS][{\"name\": \"f\", "
                        "\"arguments\": {}}]", "Checking.", 1, "f");
    /* no tag, a tag with what does not parse, an empty list: content */
    check_every_cut_syn(PIC_TOOLSYN_MISTRAL, "Paris.", "Paris.", 0, NULL);
    check_every_cut_syn(PIC_TOOLSYN_MISTRAL, "[TOOL_CALLS] [{\"name\": 1}]",
                        "[TOOL_CALLS] [{\"name\": 1}]", 0, NULL);
    check_every_cut_syn(PIC_TOOLSYN_MISTRAL, "[TOOL_CALLS] []", "[TOOL_CALLS] []", 0, NULL);
    check_every_cut_syn(PIC_TOOLSYN_MISTRAL, "[TOOL_CALL", "[TOOL_CALL", 0, NULL);

    /* the arguments as one JSON object; no streamed block for this form */
    pic_toolstream_init(&ts, NULL, PIC_TOOLSYN_MISTRAL);
    stream_feed(&ts, &o, t, strlen(t), 0);
    {
        size_t len;
        char   name[64];

        assert_null(pic_toolstream_block(&ts, &len));
        assert_int_equal(pic_toolstream_pending_name(&ts, name, sizeof(name)), 0);
    }
    stream_feed(&ts, &o, NULL, 0, 1);
    assert_int_equal(o.n, 2);
    assert_string_equal(o.calls[0].arguments, "{\"city\":\"Paris\"}");
    assert_string_equal(o.calls[1].name, "get_time");
    assert_null(o.calls[0].body);
    stream_clear(&o);
    pic_toolstream_free(&ts);
}

/* --- stop strings --- */

static void
test_stop_scan(void **unused)
{
    const char *stops[] = { "STOP", "ab", "" };
    int         m;

    assert_int_equal(pic_stop_scan("hello", 5, stops, 3, &m), 5);
    assert_int_equal(m, 0);
    /* a tail that may begin a stop string is held back */
    assert_int_equal(pic_stop_scan("helloST", 7, stops, 3, &m), 5);
    assert_int_equal(m, 0);
    assert_int_equal(pic_stop_scan("xa", 2, stops, 3, &m), 1);
    assert_int_equal(m, 0);
    /* the earliest stop string wins; it is not shown */
    assert_int_equal(pic_stop_scan("xxabSTOP", 8, stops, 3, &m), 2);
    assert_int_equal(m, 1);
    assert_int_equal(pic_stop_scan("STOP", 4, stops, 3, &m), 0);
    assert_int_equal(m, 1);
    /* a full stop string is never held back as a "prefix" */
    assert_int_equal(pic_stop_scan("xSTO", 4, stops, 1, &m), 1);
    assert_int_equal(pic_stop_scan("", 0, stops, 3, &m), 0);
    assert_int_equal(pic_stop_scan("abc", 3, stops + 2, 1, &m), 3);
}

/* Streaming with stop strings equals cutting the whole text once. */
static void
test_stop_scan_streaming_equals_whole(void **unused)
{
    const char *text = "the cat sat on the mat and the dog ran";
    const char *stops[] = { "the d", "at a", "zz" };
    size_t      n = strlen(text);

    for (size_t step = 1; step <= 5; step++) {
        char   shown[128] = "", hold[128] = "";
        size_t ns = 0, nh = 0, emit;
        int    m = 0;

        for (size_t i = 0; i < n && !m; i += step) {
            size_t k = i + step <= n ? step : n - i;
            memcpy(hold + nh, text + i, k);
            nh += k;
            emit = pic_stop_scan(hold, nh, stops, 3, &m);
            memcpy(shown + ns, hold, emit);
            ns += emit;
            memmove(hold, hold + emit, nh - emit);
            nh -= emit;
        }
        shown[ns] = '\0';
        assert_int_equal(m, 1);
        assert_string_equal(shown, "the cat sat on the m");
    }
}

/* The arguments streamed from every prefix of a block body: each is a
 * prefix of the next, the complete one parses to the parser's object, and
 * a string value shows before its block closes. */
static void
expect_stream_args(const char *body, const cJSON *tools, const char *partial)
{
    size_t           n = strlen(body);
    pic_buf          prev, cur;
    pic_toolcall_out c;
    cJSON           *a, *b;
    int              saw_partial = 0;

    pic_buf_init(&prev);
    for (size_t k = 0; k <= n; k++) {
        pic_buf_init(&cur);
        assert_int_equal(pic_toolcall_stream_args(body, k, k == n, tools, &cur), 0);
        assert_true(cur.len >= prev.len);
        assert_memory_equal(cur.len ? cur.data : "", prev.len ? prev.data : "", prev.len);
        if (k < n && cur.len > 0 && strstr(cur.data, partial) != NULL) {
            saw_partial = 1;
        }
        pic_buf_free(&prev);
        prev = cur;
    }
    assert_true(saw_partial);
    assert_int_equal(pic_toolcall_parse_body(body, n, tools, &c), 0);
    a = cJSON_Parse(prev.data);
    b = cJSON_Parse(c.arguments);
    assert_non_null(a);
    assert_true(cJSON_Compare(a, b, 1));
    cJSON_Delete(a);
    cJSON_Delete(b);
    pic_toolcall_clear(&c);
    pic_buf_free(&prev);
}

static void
test_stream_args_grow_as_prefixes(void **state)
{
    (void) state;
    cJSON *tools = cJSON_Parse(
        "[{\"type\":\"function\",\"function\":{\"name\":\"w\",\"parameters\":{\"type\":"
        "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"n\":{\"type\":"
        "\"integer\"}}}}}]");

    expect_stream_args("\n<function=w>\n<parameter=city>\nSan \"Francisco\"\n</parameter>\n"
                       "<parameter=n>\n42\n</parameter>\n</function>\n", tools, "San \\\"Fr");
    expect_stream_args("\n<function=w>\n<parameter=n>\n7\n</parameter>\n<parameter=city>\n"
                       "a\nb</parameter>\n</function>", tools, "{\"n\":7,\"city\":\"a");
    expect_stream_args("\n{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\", \"n\": [1, "
                       "{\"x\": \"}\"}]}}\n", tools, "\"Par");
    cJSON_Delete(tools);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_body),
        cmocka_unit_test(test_json_body_string_arguments_and_missing),
        cmocka_unit_test(test_bad_bodies_are_rejected),
        cmocka_unit_test(test_xml_body_with_schema),
        cmocka_unit_test(test_xml_body_tolerates_missing_parameter_close),
        cmocka_unit_test(test_stream_content_then_calls),
        cmocka_unit_test(test_stream_plain_text_and_lookalikes),
        cmocka_unit_test(test_stream_bad_block_stays_content),
        cmocka_unit_test(test_call_ids),
        cmocka_unit_test(test_syntax_of_dialects),
        cmocka_unit_test(test_llama_answer_is_the_call),
        cmocka_unit_test(test_llama_other_answers_are_content),
        cmocka_unit_test(test_mistral_calls_after_the_tag),
        cmocka_unit_test(test_stream_args_grow_as_prefixes),
        cmocka_unit_test(test_stop_scan),
        cmocka_unit_test(test_stop_scan_streaming_equals_whole),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
