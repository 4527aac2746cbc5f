/*
 * test_request.c — OpenAI request parsing: every field read, and every bad
 * input rejected with the right status, param, code and message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pic_json.h"
#include "pic_request.h"

/* Parses body[0..len) as kind and expects a 400 naming param (NULL = no
 * param) with code, and a message containing `msg`. */
static void
expect_bad_n(pic_req_kind kind, const char *body, size_t len, const char *param,
             const char *code, const char *msg)
{
    pic_request req;
    pic_error   err;
    int         rc = pic_request_parse(&req, kind, body, len, NULL, &err);
    if (rc == 0) {
        print_error("accepted: %.*s\n", (int) len, body);
    }
    assert_int_equal(rc, -1);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.type, "invalid_request_error");
    assert_string_equal(err.param, param ? param : "");
    assert_string_equal(err.code, code);
    if (!strstr(err.message, msg)) {
        print_error("message '%s' lacks '%s'\n", err.message, msg);
    }
    assert_non_null(strstr(err.message, msg));
    assert_null(req.root);
    pic_request_free(&req);
}

static void
expect_bad(const char *body, const char *param, const char *code, const char *msg)
{
    expect_bad_n(PIC_REQ_CHAT, body, strlen(body), param, code, msg);
}

static void
expect_bad_completion(const char *body, const char *param, const char *code,
                      const char *msg)
{
    expect_bad_n(PIC_REQ_COMPLETION, body, strlen(body), param, code, msg);
}

static void
parse_ok(pic_request *req, pic_req_kind kind, const char *body)
{
    pic_error err;
    int       rc = pic_request_parse(req, kind, body, strlen(body), NULL, &err);
    if (rc != 0) {
        print_error("rejected (%s): %s\n", err.message, body);
    }
    assert_int_equal(rc, 0);
}

/* --- accepted requests --- */

static void
test_full_chat_request_fields(void **state)
{
    (void) state;
    pic_request req;
    parse_ok(&req, PIC_REQ_CHAT,
        "{\"model\":\"qwen\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"max_tokens\":5,\"max_completion_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,"
        "\"top_k\":20,\"seed\":-3,\"n\":1,\"stop\":[\"a\",\"b\"],\"user\":\"ignored\","
        "\"chat_template_kwargs\":{\"enable_thinking\":false},"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\","
        "\"parameters\":{\"type\":\"object\"}}}],"
        "\"messages\":["
        "{\"role\":\"developer\",\"content\":\"dev\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"p1\"},"
        "{\"type\":\"text\",\"text\":\"p2\"}]},"
        "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"why\","
        "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"arguments\":\"{\\\"x\\\": 1.0, \\\"y\\\": [true]}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\"}]}");
    assert_string_equal(req.model.ptr, "qwen");
    assert_int_equal(req.stream, 1);
    assert_int_equal(req.include_usage, 1);
    assert_int_equal(req.max_tokens, 7);            /* max_completion_tokens wins */
    assert_true(req.has_temperature && req.temperature == 0.5);
    assert_true(req.has_top_p && req.top_p == 0.9);
    assert_true(req.has_top_k && req.top_k == 20);
    assert_true(req.has_seed && req.seed == -3);
    assert_int_equal(req.n_stop, 2);
    assert_string_equal(req.stop[1].ptr, "b");
    assert_int_equal(req.enable_thinking, 0);
    assert_int_equal(req.n_tools, 1);
    assert_int_equal(req.n_messages, 4);
    assert_int_equal(req.messages[0].role, PIC_ROLE_SYSTEM);
    assert_int_equal(req.messages[0].from_developer, 1);
    assert_int_equal(req.messages[1].content_kind, PIC_CONTENT_PARTS);
    assert_int_equal(req.messages[1].n_parts, 2);
    assert_string_equal(req.messages[1].parts[1].ptr, "p2");
    const pic_message *a = &req.messages[2];
    assert_int_equal(a->content_kind, PIC_CONTENT_NONE);
    assert_true(a->has_reasoning);
    assert_string_equal(a->reasoning.ptr, "why");
    assert_int_equal(a->n_tool_calls, 1);
    assert_string_equal(a->tool_calls[0].id.ptr, "c1");
    assert_string_equal(a->tool_calls[0].name.ptr, "f");
    assert_true(cJSON_IsObject(a->tool_calls[0].args));
    /* the number keeps its source spelling for Python-exact rendering */
    assert_string_equal(pic_json_number_lexeme(cJSON_GetObjectItem(a->tool_calls[0].args, "x")),
                        "1.0");
    assert_string_equal(req.messages[3].tool_call_id.ptr, "c1");
    pic_request_free(&req);
}

static void
test_defaults_when_fields_absent(void **state)
{
    (void) state;
    pic_request req;
    parse_ok(&req, PIC_REQ_CHAT,
             "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
             "\"temperature\":null,\"tools\":[]}");
    assert_int_equal(req.stream, 0);
    assert_int_equal(req.max_tokens, -1);
    assert_false(req.has_temperature);
    assert_int_equal(req.enable_thinking, -1);
    assert_int_equal(req.add_generation_prompt, 1);
    assert_null(req.tools);
    assert_int_equal(req.messages[0].content.len, 2);
    pic_request_free(&req);
}

static void
test_completions_prompt_forms(void **state)
{
    (void) state;
    pic_request req;
    parse_ok(&req, PIC_REQ_COMPLETION, "{\"model\":\"m\",\"prompt\":\"abc\",\"max_tokens\":3}");
    assert_string_equal(req.prompt.ptr, "abc");
    assert_null(req.prompt_tokens);
    pic_request_free(&req);
    parse_ok(&req, PIC_REQ_COMPLETION, "{\"model\":\"m\",\"prompt\":[\"xyz\"]}");
    assert_string_equal(req.prompt.ptr, "xyz");
    pic_request_free(&req);
    parse_ok(&req, PIC_REQ_COMPLETION, "{\"model\":\"m\",\"prompt\":[1,2,151645]}");
    assert_int_equal(req.n_prompt_tokens, 3);
    assert_int_equal(req.prompt_tokens[2], 151645);
    pic_request_free(&req);
    parse_ok(&req, PIC_REQ_COMPLETION, "{\"model\":\"m\",\"prompt\":[[7,8]]}");
    assert_int_equal(req.n_prompt_tokens, 2);
    pic_request_free(&req);
    expect_bad_completion("{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", "prompt",
                          "unsupported_value", "Only one prompt");
    expect_bad_completion("{\"model\":\"m\"}", "prompt", "missing_required_parameter",
                          "'prompt'");
    expect_bad_completion("{\"model\":\"m\",\"prompt\":[1,-2]}", "prompt[1]",
                          "invalid_value", "between");
    expect_bad_completion("{\"model\":\"m\",\"prompt\":{}}", "prompt", "invalid_type",
                          "got an object");
}

/* --- malformed JSON --- */

static void
test_malformed_json_rejected(void **state)
{
    (void) state;
    static const char *bad[] = {
        "", "{", "{\"model\":\"m\"", "{\"model\":\"m\",}", "{'model':'m'}",
        "{\"model\":\"m\"} x", "{\"a\":+1}", "{\"a\":007}", "{\"a\":.5}", "{\"a\":1.}",
        "{\"a\":NaN}", "{\"a\":tru}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}",
        "[1,2,]", "{\"a\":1 \"b\":2}", "\"unterminated",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        expect_bad(bad[i], NULL, "invalid_json", "invalid JSON at byte");
    }
}

static void
test_raw_control_char_and_nul_rejected(void **state)
{
    (void) state;
    expect_bad_n(PIC_REQ_CHAT, "{\"a\":\"x\ny\"}", 11, NULL, "invalid_json",
                 "control character in string");
    expect_bad_n(PIC_REQ_CHAT, "{\"a\":\"x\0y\"}", 11, NULL, "invalid_json",
                 "control character in string");
    expect_bad("{\"a\":\"x\\u0000y\"}", NULL, "invalid_json", "\\u0000 is not allowed");
}

static void
test_invalid_utf8_rejected(void **state)
{
    (void) state;
    static const char *bad[] = {
        "{\"a\":\"\xC3\x28\"}",             /* bad continuation */
        "{\"a\":\"\xC0\xAF\"}",             /* overlong '/' */
        "{\"a\":\"\xED\xA0\x80\"}",         /* UTF-16 surrogate as UTF-8 */
        "{\"a\":\"\xF5\x80\x80\x80\"}",     /* above U+10FFFF */
        "{\"a\":\"\xE2\x82\"}",             /* truncated */
        "{\"a\":\"\x80\"}",                 /* lone continuation */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        expect_bad(bad[i], NULL, "invalid_json", "invalid UTF-8 in string");
    }
    expect_bad("{\"a\":\"\\ud800\"}", NULL, "invalid_json", "lone high surrogate");
    expect_bad("{\"a\":\"\\udc00\"}", NULL, "invalid_json", "lone low surrogate");
    /* a valid pair and raw 4-byte UTF-8 are fine */
    pic_request req;
    parse_ok(&req, PIC_REQ_CHAT,
             "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
             "\"\\ud83d\\ude00 \xF0\x9F\x98\x80\"}]}");
    assert_string_equal(req.messages[0].content.ptr, "\xF0\x9F\x98\x80 \xF0\x9F\x98\x80");
    pic_request_free(&req);
}

/* A chat body whose ignored field "extra" holds `arrays` nested arrays:
 * the document then nests arrays + 1 levels (the root object counts). */
static size_t
nested_body(char *body, int arrays)
{
    size_t n = (size_t) sprintf(body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                                      "\"content\":\"x\"}],\"metadata\":");
    for (int i = 0; i < arrays; i++) {
        body[n++] = '[';
    }
    for (int i = 0; i < arrays; i++) {
        body[n++] = ']';
    }
    body[n++] = '}';
    return n;
}

static void
test_nesting_depth_limit(void **state)
{
    (void) state;
    char        body[512];
    pic_request req;
    pic_error   err;

    size_t n = nested_body(body, 63);                   /* 64 levels: the limit */
    assert_int_equal(pic_request_parse(&req, PIC_REQ_CHAT, body, n, NULL, &err), 0);
    pic_request_free(&req);
    n = nested_body(body, 64);                          /* 65 levels */
    expect_bad_n(PIC_REQ_CHAT, body, n, NULL, "nesting_too_deep", "deeper than 64");

    /* far deeper input: rejected by the pre-scan, no recursion blow-up */
    size_t big = 200000;
    char  *deep = malloc(big);
    memset(deep, '[', big);
    expect_bad_n(PIC_REQ_CHAT, deep, big, NULL, "nesting_too_deep", "deeper than 64");
    free(deep);

    /* the limit is configurable, and applies inside tool-call arguments too */
    pic_request_limits lim;
    pic_request_limits_default(&lim);
    lim.max_depth = 3;
    const char *b3 = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{}]}]}";
    assert_int_equal(pic_request_parse(&req, PIC_REQ_CHAT, b3, strlen(b3), &lim, &err), -1);
    assert_string_equal(err.code, "nesting_too_deep");
    lim.max_depth = 6;                  /* the body nests 6 levels, the arguments 7 */
    const char *b4 = "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":"
                     "[{\"function\":{\"name\":\"f\",\"arguments\":"
                     "\"{\\\"a\\\":[[[[[[1]]]]]]}\"}}]}]}";
    assert_int_equal(pic_request_parse(&req, PIC_REQ_CHAT, b4, strlen(b4), &lim, &err), -1);
    assert_string_equal(err.code, "nesting_too_deep");
    assert_string_equal(err.param, "messages[0].tool_calls[0].function.arguments");
}

/* --- wrong types and values --- */

static void
test_wrong_types_rejected(void **state)
{
    (void) state;
#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
    expect_bad("[]", NULL, "invalid_type", "must be a JSON object");
    expect_bad("{\"model\":7," MSGS "}", "model", "invalid_type", "string");
    expect_bad("{\"model\":5," MSGS "}", "model", "invalid_type",
               "expected a string, but got a number");
    {   /* no model: the served one (an empty name) */
        pic_request req;

        parse_ok(&req, PIC_REQ_CHAT, "{" MSGS "}");
        assert_int_equal(req.model.len, 0);
        pic_request_free(&req);
    }
    expect_bad("{\"model\":\"m\"}", "messages", "missing_required_parameter", "'messages'");
    expect_bad("{\"model\":\"m\",\"messages\":{}}", "messages", "invalid_type", "an array");
    expect_bad("{\"model\":\"m\",\"messages\":[]}", "messages", "empty_array", "at least one");
    expect_bad("{\"model\":\"m\",\"messages\":[\"hi\"]}", "messages[0]", "invalid_type",
               "an object");
    expect_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}]}",
               "messages[0].content", "invalid_type", "got a number");
    expect_bad("{\"model\":\"m\",\"stream\":\"yes\"," MSGS "}", "stream", "invalid_type",
               "a boolean");
    expect_bad("{\"model\":\"m\",\"temperature\":\"hot\"," MSGS "}", "temperature",
               "invalid_type", "a number");
    expect_bad("{\"model\":\"m\",\"temperature\":3," MSGS "}", "temperature", "invalid_value",
               "between 0 and 2");
    expect_bad("{\"model\":\"m\",\"max_tokens\":1.5," MSGS "}", "max_tokens", "invalid_type",
               "an integer");
    expect_bad("{\"model\":\"m\",\"max_tokens\":0," MSGS "}", "max_tokens", "invalid_value",
               "between 1");
    expect_bad("{\"model\":\"m\",\"n\":2," MSGS "}", "n", "unsupported_value", "n=1");
    expect_bad("{\"model\":\"m\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]," MSGS "}", "stop",
               "array_above_max_length", "at most 4");
    expect_bad("{\"model\":\"m\",\"stop\":[1]," MSGS "}", "stop[0]", "invalid_type",
               "a string");
    expect_bad("{\"model\":\"m\",\"tools\":{}," MSGS "}", "tools", "invalid_type", "an array");
    expect_bad("{\"model\":\"m\",\"tools\":[{\"type\":\"retrieval\"}]," MSGS "}",
               "tools[0].type", "invalid_value", "'function'");
    expect_bad("{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"function\":{}}]," MSGS "}",
               "tools[0].function.name", "missing_required_parameter", "non-empty string");
    expect_bad("{\"model\":\"m\",\"chat_template_kwargs\":{\"enable_thinking\":1}," MSGS "}",
               "chat_template_kwargs.enable_thinking", "invalid_type", "a boolean");
#undef MSGS
}

static void
test_unknown_role_rejected(void **state)
{
    (void) state;
    expect_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}",
               "messages[0].role", "invalid_value", "expected one of");
    expect_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
               "{\"role\":\"User\",\"content\":\"x\"}]}",
               "messages[1].role", "invalid_value", "expected one of");
    expect_bad("{\"model\":\"m\",\"messages\":[{\"content\":\"x\"}]}", "messages[0].role",
               "missing_required_parameter", "Missing required parameter");
}

static void
test_missing_or_unsupported_content_rejected(void **state)
{
    (void) state;
    expect_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}]}", "messages[0].content",
               "missing_required_parameter", "Missing required parameter");
    expect_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"content\":null}]}",
               "messages[0].content", "missing_required_parameter", "Missing");
    expect_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
               "[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
               "messages[0].content[0].type", "unsupported_content_type", "only content parts");
    expect_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
               "[{\"type\":\"text\"}]}]}",
               "messages[0].content[0].text", "missing_required_parameter", "Missing");
}

static void
test_bad_tool_calls_rejected(void **state)
{
    (void) state;
#define TC(args) "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":" \
                 "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":" args "}}]}]}"
    expect_bad(TC("\"not json\""), "messages[0].tool_calls[0].function.arguments",
               "invalid_json", "invalid JSON at byte");
    expect_bad(TC("\"[1]\""), "messages[0].tool_calls[0].function.arguments",
               "invalid_value", "JSON object encoded as a string");
    expect_bad(TC("{\"a\":1}"), "messages[0].tool_calls[0].function.arguments",
               "invalid_type", "a string");
#undef TC
    expect_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\","
               "\"tool_calls\":[]}]}",
               "messages[0].tool_calls", "invalid_value", "only allowed on assistant");
    expect_bad("{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":"
               "[{\"type\":\"function\",\"function\":{\"name\":\"\",\"arguments\":\"{}\"}}]}]}",
               "messages[0].tool_calls[0].function.name", "invalid_value", "non-empty");
}

static void
test_message_count_limit(void **state)
{
    (void) state;
    pic_request_limits lim;
    pic_request        req;
    pic_error          err;
    pic_request_limits_default(&lim);
    lim.max_messages = 2;
    const char *b = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"1\"},"
                    "{\"role\":\"user\",\"content\":\"2\"},{\"role\":\"user\",\"content\":\"3\"}]}";
    assert_int_equal(pic_request_parse(&req, PIC_REQ_CHAT, b, strlen(b), &lim, &err), -1);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.param, "messages");
    assert_string_equal(err.code, "array_above_max_length");
    lim.max_messages = 3;
    assert_int_equal(pic_request_parse(&req, PIC_REQ_CHAT, b, strlen(b), &lim, &err), 0);
    pic_request_free(&req);
}

/* --- the error body --- */

static void
test_error_json_shape(void **state)
{
    (void) state;
    pic_error err;
    char      buf[512];
    pic_error_invalid(&err, "messages[0].role", "invalid_value", "bad \"role\"\n");
    size_t n = pic_error_json(&err, buf, sizeof(buf));
    assert_int_equal(n, strlen(buf));
    assert_string_equal(buf, "{\"error\":{\"message\":\"bad \\\"role\\\"\\n\",\"type\":"
                             "\"invalid_request_error\",\"param\":\"messages[0].role\","
                             "\"code\":\"invalid_value\"}}");
    cJSON *j = cJSON_Parse(buf);
    assert_non_null(j);
    cJSON_Delete(j);
    pic_error_set(&err, 413, "invalid_request_error", NULL, NULL, "too large");
    pic_error_json(&err, buf, sizeof(buf));
    assert_non_null(strstr(buf, "\"param\":null,\"code\":null"));
    /* too small a buffer: truncated, NUL-terminated, needed length returned */
    char tiny[8];
    size_t need = pic_error_json(&err, tiny, sizeof(tiny));
    assert_true(need > sizeof(tiny));
    assert_int_equal(strlen(tiny), sizeof(tiny) - 1);
}

/* --- the parameter list (honest parameters) --- */

#define MSGS "\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
#define TOOLS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]"

static void
test_unknown_and_unsupported_parameters_rejected(void **state)
{
    (void) state;
    expect_bad("{" MSGS ",\"frobnicate\":1}", "frobnicate", "unknown_parameter",
               "Unrecognized request argument supplied: frobnicate");
    expect_bad("{" MSGS ",\"reasoning_effort\":\"low\"}", "reasoning_effort",
               "unknown_parameter", "reasoning_effort");
    expect_bad("{" MSGS ",\"audio\":{}}", "audio", "unknown_parameter", "audio");
    expect_bad("{" MSGS ",\"functions\":[]}", "functions", "unknown_parameter", "functions");
    expect_bad("{" MSGS ",\"store\":true}", "store", "unsupported_parameter", "store");
    expect_bad("{" MSGS ",\"modalities\":[\"audio\"]}", "modalities",
               "unsupported_parameter", "modalities");
    expect_bad("{" MSGS ",\"chat_template_kwargs\":{\"tools_first\":true}}",
               "chat_template_kwargs.tools_first", "unknown_parameter", "tools_first");
    expect_bad_completion("{\"model\":\"m\",\"prompt\":\"x\",\"echo\":true}", "echo",
                          "unsupported_parameter", "echo");
    expect_bad_completion("{\"model\":\"m\",\"prompt\":\"x\",\"best_of\":2}", "best_of",
                          "unsupported_parameter", "best_of");
    expect_bad_completion("{\"model\":\"m\",\"prompt\":\"x\",\"suffix\":\"y\"}", "suffix",
                          "unsupported_parameter", "suffix");
    expect_bad_completion("{\"model\":\"m\",\"prompt\":\"x\",\"tools\":[]}", "tools",
                          "unknown_parameter", "tools");
    expect_bad_completion("{\"model\":\"m\",\"prompt\":\"x\",\"logprobs\":6}", "logprobs",
                          "invalid_value", "between 0 and 5");
}

static void
test_sampling_extras_parsed_and_checked(void **state)
{
    (void) state;
    pic_request req;

    parse_ok(&req, PIC_REQ_CHAT, "{" MSGS ",\"min_p\":0.1,\"presence_penalty\":0.5,"
             "\"frequency_penalty\":-1,\"repetition_penalty\":1.2,\"logit_bias\":{\"7\":-100,"
             "\"12\":2.5},\"logprobs\":true,\"top_logprobs\":3,\"user\":\"u\","
             "\"metadata\":{\"k\":\"v\"},\"store\":false,\"service_tier\":\"auto\"}");
    assert_true(req.has_min_p);
    assert_true(req.min_p == 0.1);
    assert_true(req.presence_penalty == 0.5);
    assert_true(req.frequency_penalty == -1.0);
    assert_true(req.repetition_penalty == 1.2);
    assert_non_null(req.logit_bias);
    assert_int_equal(req.logprobs, 1);
    assert_int_equal(req.top_logprobs, 3);
    pic_request_free(&req);

    parse_ok(&req, PIC_REQ_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"logprobs\":2,"
             "\"echo\":false,\"best_of\":1}");
    assert_int_equal(req.logprobs, 1);
    assert_int_equal(req.top_logprobs, 2);
    pic_request_free(&req);

    expect_bad("{" MSGS ",\"presence_penalty\":3}", "presence_penalty", "invalid_value",
               "between -2 and 2");
    expect_bad("{" MSGS ",\"repetition_penalty\":0}", "repetition_penalty", "invalid_value",
               "greater than 0");
    expect_bad("{" MSGS ",\"min_p\":1.5}", "min_p", "invalid_value", "between 0 and 1");
    expect_bad("{" MSGS ",\"logit_bias\":{\"abc\":1}}", "logit_bias.abc", "invalid_value",
               "token ids");
    expect_bad("{" MSGS ",\"logit_bias\":{\"5\":101}}", "logit_bias.5", "invalid_value",
               "between -100 and 100");
    expect_bad("{" MSGS ",\"top_logprobs\":21,\"logprobs\":true}", "top_logprobs",
               "invalid_value", "between 0 and 20");
    expect_bad("{" MSGS ",\"top_logprobs\":2}", "top_logprobs", "invalid_value",
               "requires 'logprobs'");
}

static void
test_tool_choice_and_response_format(void **state)
{
    (void) state;
    pic_request req;

    parse_ok(&req, PIC_REQ_CHAT, "{" MSGS TOOLS ",\"tool_choice\":\"required\","
             "\"parallel_tool_calls\":false}");
    assert_int_equal(req.tool_choice, PIC_TOOL_CHOICE_REQUIRED);
    assert_int_equal(req.parallel_tool_calls, 0);
    pic_request_free(&req);
    parse_ok(&req, PIC_REQ_CHAT, "{" MSGS TOOLS ",\"tool_choice\":{\"type\":\"function\","
             "\"function\":{\"name\":\"f\"}}}");
    assert_int_equal(req.tool_choice, PIC_TOOL_CHOICE_FUNCTION);
    assert_string_equal(req.tool_choice_name.ptr, "f");
    assert_int_equal(req.parallel_tool_calls, 1);
    pic_request_free(&req);
    parse_ok(&req, PIC_REQ_CHAT, "{" MSGS ",\"response_format\":{\"type\":\"json_schema\","
             "\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":\"object\"}}}}");
    assert_int_equal(req.response_format, PIC_RESPONSE_JSON_SCHEMA);
    assert_non_null(req.json_schema);
    pic_request_free(&req);

    expect_bad("{" MSGS TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":"
               "{\"name\":\"g\"}}}", "tool_choice.function.name", "invalid_value",
               "not in 'tools'");
    expect_bad("{" MSGS ",\"tool_choice\":\"required\"}", "tool_choice", "invalid_value",
               "requires 'tools'");
    expect_bad("{" MSGS TOOLS ",\"tool_choice\":\"any\"}", "tool_choice", "invalid_value",
               "'required'");
    expect_bad("{" MSGS ",\"response_format\":{\"type\":\"yaml\"}}", "response_format.type",
               "invalid_value", "json_schema");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_chat_request_fields),
        cmocka_unit_test(test_defaults_when_fields_absent),
        cmocka_unit_test(test_completions_prompt_forms),
        cmocka_unit_test(test_malformed_json_rejected),
        cmocka_unit_test(test_raw_control_char_and_nul_rejected),
        cmocka_unit_test(test_invalid_utf8_rejected),
        cmocka_unit_test(test_nesting_depth_limit),
        cmocka_unit_test(test_wrong_types_rejected),
        cmocka_unit_test(test_unknown_role_rejected),
        cmocka_unit_test(test_missing_or_unsupported_content_rejected),
        cmocka_unit_test(test_bad_tool_calls_rejected),
        cmocka_unit_test(test_message_count_limit),
        cmocka_unit_test(test_error_json_shape),
        cmocka_unit_test(test_unknown_and_unsupported_parameters_rejected),
        cmocka_unit_test(test_sampling_extras_parsed_and_checked),
        cmocka_unit_test(test_tool_choice_and_response_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
