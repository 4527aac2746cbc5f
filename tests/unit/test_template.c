/*
 * test_template.c — the Qwen3 / Qwen3.5 chat templates, byte for byte (the
 * Llama 3 and Mistral dialects against transformers: test_chat_templates.py).
 *
 * Oracle: the golden strings below were rendered by jinja2 from the public
 * Qwen3 (Qwen/Qwen3-* tokenizer_config.json) and Qwen3.5 chat templates,
 * in the environment transformers' apply_chat_template uses (trim_blocks,
 * lstrip_blocks, tojson = json.dumps(ensure_ascii=False)), with the request
 * as vLLM hands it over (tool-call arguments decoded; Qwen3 text parts
 * joined by "\n").  An expected NULL text means the template raises; the
 * second string is its message.  The same comparison over 1200 random
 * conversations agreed during development (see the commit message).
 *
 * Also: the regions partition the text, client content never includes
 * template text, documents split on the marker, and template errors map
 * to 400s.
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
#include "pic_template.h"

typedef struct {
    const char *name;
    const char *body;
    const char *qwen3;          /* expected text, or NULL: template error */
    const char *qwen3_err;
    const char *qwen35;
    const char *qwen35_err;
} pic_golden;

static const pic_golden goldens[] = {
    { "system_only",
        "{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"You are "
        "a helpful assistant.\"}]}",
        "<|im_start|>system\n"
        "You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>assistant\n", NULL,
        NULL, "No user query found in messages.",
    },
    { "user_only",
        "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}]"
        "}",
        "<|im_start|>user\n"
        "Hello!<|im_end|>\n"
        "<|im_start|>assistant\n", NULL,
        "<|im_start|>user\n"
        "Hello!<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n", NULL,
    },
    { "multi_turn",
        "{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"Be brief"
        ".\"}, {\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"con"
        "tent\": \"Hello!\"}, {\"role\": \"user\", \"content\": \"2+2?\"}]}",
        "<|im_start|>system\n"
        "Be brief.<|im_end|>\n"
        "<|im_start|>user\n"
        "Hi<|im_end|>\n"
        "<|im_start|>assistant\n"
        "Hello!<|im_end|>\n"
        "<|im_start|>user\n"
        "2+2?<|im_end|>\n"
        "<|im_start|>assistant\n", NULL,
        "<|im_start|>system\n"
        "Be brief.<|im_end|>\n"
        "<|im_start|>user\n"
        "Hi<|im_end|>\n"
        "<|im_start|>assistant\n"
        "Hello!<|im_end|>\n"
        "<|im_start|>user\n"
        "2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n", NULL,
    },
    { "tools_listing",
        "{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"Use tool"
        "s.\"}, {\"role\": \"user\", \"content\": \"Weather in Paris?\"}], \"tools\": [{"
        "\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description"
        "\": \"Get the weather.\", \"parameters\": {\"type\": \"object\", \"properties\":"
        " {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"maximum"
        "\": 7.0}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": {"
        "\"name\": \"search\", \"description\": \"Search the web.\", \"parameters\": {\"t"
        "ype\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}]}",
        "<|im_start|>system\n"
        "Use tools.\n"
        "\n"
        "# Tools\n"
        "\n"
        "You may call one or more functions to assist with the user query.\n"
        "\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        "<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description"
        "\": \"Get the weather.\", \"parameters\": {\"type\": \"object\", \"properties\":"
        " {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"maximum"
        "\": 7.0}}, \"required\": [\"city\"]}}}\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": "
        "\"Search the web.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q"
        "\": {\"type\": \"string\"}}}}}\n"
        "</tools>\n"
        "\n"
        "For each function call, return a json object with function name and arguments wi"
        "thin <tool_call></tool_call> XML tags:\n"
        "<tool_call>\n"
        "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "Weather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n", NULL,
        "<|im_start|>system\n"
        "# Tools\n"
        "\n"
        "You have access to the following functions:\n"
        "\n"
        "<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description"
        "\": \"Get the weather.\", \"parameters\": {\"type\": \"object\", \"properties\":"
        " {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"maximum"
        "\": 7.0}}, \"required\": [\"city\"]}}}\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": "
        "\"Search the web.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q"
        "\": {\"type\": \"string\"}}}}}\n"
        "</tools>\n"
        "\n"
        "If you choose to call a function ONLY reply in the following format with NO suff"
        "ix:\n"
        "\n"
        "<tool_call>\n"
        "<function=example_function_name>\n"
        "<parameter=example_parameter_1>\n"
        "value_1\n"
        "</parameter>\n"
        "<parameter=example_parameter_2>\n"
        "This is the value for the second parameter\n"
        "that can span\n"
        "multiple lines\n"
        "</parameter>\n"
        "</function>\n"
        "</tool_call>\n"
        "\n"
        "<IMPORTANT>\n"
        "Reminder:\n"
        "- Function calls MUST follow the specified format: an inner <function=...></func"
        "tion> block must be nested within <tool_call></tool_call> XML tags\n"
        "- Required parameters MUST be specified\n"
        "- You may provide optional reasoning for your function call in natural language "
        "BEFORE the function call, but NOT after\n"
        "- If there is no function call available, answer the question like normal with y"
        "our current knowledge and do not tell the user about function calls\n"
        "</IMPORTANT>\n"
        "\n"
        "Use tools.<|im_end|>\n"
        "<|im_start|>user\n"
        "Weather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n", NULL,
    },
    { "assistant_tool_call",
        "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"Weather in"
        " Paris?\"}, {\"role\": \"assistant\", \"content\": \"Checking.\", \"tool_calls\""
        ": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weath"
        "er\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 2, \\\"opts"
        "\\\": {\\\"unit\\\": \\\"C\\\"}, \\\"raw\\\": true}\"}}]}], \"tools\": [{\"type"
        "\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"G"
        "et the weather.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"cit"
        "y\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"maximum\": 7.0}"
        "}, \"required\": [\"city\"]}}}], \"add_generation_prompt\": false}",
        "<|im_start|>system\n"
        "# Tools\n"
        "\n"
        "You may call one or more functions to assist with the user query.\n"
        "\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        "<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description"
        "\": \"Get the weather.\", \"parameters\": {\"type\": \"object\", \"properties\":"
        " {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"maximum"
        "\": 7.0}}, \"required\": [\"city\"]}}}\n"
        "</tools>\n"
        "\n"
        "For each function call, return a json object with function name and arguments wi"
        "thin <tool_call></tool_call> XML tags:\n"
        "<tool_call>\n"
        "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "Weather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "\n"
        "</think>\n"
        "\n"
        "Checking.\n"
        "<tool_call>\n"
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2, \""
        "opts\": {\"unit\": \"C\"}, \"raw\": true}}\n"
        "</tool_call><|im_end|>\n", NULL,
        "<|im_start|>system\n"
        "# Tools\n"
        "\n"
        "You have access to the following functions:\n"
        "\n"
        "<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description"
        "\": \"Get the weather.\", \"parameters\": {\"type\": \"object\", \"properties\":"
        " {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"maximum"
        "\": 7.0}}, \"required\": [\"city\"]}}}\n"
        "</tools>\n"
        "\n"
        "If you choose to call a function ONLY reply in the following format with NO suff"
        "ix:\n"
        "\n"
        "<tool_call>\n"
        "<function=example_function_name>\n"
        "<parameter=example_parameter_1>\n"
        "value_1\n"
        "</parameter>\n"
        "<parameter=example_parameter_2>\n"
        "This is the value for the second parameter\n"
        "that can span\n"
        "multiple lines\n"
        "</parameter>\n"
        "</function>\n"
        "</tool_call>\n"
        "\n"
        "<IMPORTANT>\n"
        "Reminder:\n"
        "- Function calls MUST follow the specified format: an inner <function=...></func"
        "tion> block must be nested within <tool_call></tool_call> XML tags\n"
        "- Required parameters MUST be specified\n"
        "- You may provide optional reasoning for your function call in natural language "
        "BEFORE the function call, but NOT after\n"
        "- If there is no function call available, answer the question like normal with y"
        "our current knowledge and do not tell the user about function calls\n"
        "</IMPORTANT><|im_end|>\n"
        "<|im_start|>user\n"
        "Weather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "\n"
        "</think>\n"
        "\n"
        "Checking.\n"
        "\n"
        "<tool_call>\n"
        "<function=get_weather>\n"
        "<parameter=city>\n"
        "Paris\n"
        "</parameter>\n"
        "<parameter=days>\n"
        "2\n"
        "</parameter>\n"
        "<parameter=opts>\n"
        "{\"unit\": \"C\"}\n"
        "</parameter>\n"
        "<parameter=raw>\n"
        "True\n"
        "</parameter>\n"
        "</function>\n"
        "</tool_call><|im_end|>\n", NULL,
    },
    { "tool_results_merged",
        "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"Paris and "
        "Rome?\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\":"
        " \"a\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"argu"
        "ments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}}, {\"id\": \"b\", \"type\": \"functio"
        "n\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":"
        "\\\"Rome\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"a\", \"content\": "
        "\"Paris: 21C\"}, {\"role\": \"tool\", \"tool_call_id\": \"b\", \"content\": \"Ro"
        "me: 25C\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get"
        "_weather\", \"description\": \"Get the weather.\", \"parameters\": {\"type\": \""
        "object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\""
        ": \"integer\", \"maximum\": 7.0}}, \"required\": [\"city\"]}}}]}",
        "<|im_start|>system\n"
        "# Tools\n"
        "\n"
        "You may call one or more functions to assist with the user query.\n"
        "\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        "<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description"
        "\": \"Get the weather.\", \"parameters\": {\"type\": \"object\", \"properties\":"
        " {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"maximum"
        "\": 7.0}}, \"required\": [\"city\"]}}}\n"
        "</tools>\n"
        "\n"
        "For each function call, return a json object with function name and arguments wi"
        "thin <tool_call></tool_call> XML tags:\n"
        "<tool_call>\n"
        "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "Paris and Rome?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<tool_call>\n"
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
        "</tool_call>\n"
        "<tool_call>\n"
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "<tool_response>\n"
        "Paris: 21C\n"
        "</tool_response>\n"
        "<tool_response>\n"
        "Rome: 25C\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n", NULL,
        "<|im_start|>system\n"
        "# Tools\n"
        "\n"
        "You have access to the following functions:\n"
        "\n"
        "<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description"
        "\": \"Get the weather.\", \"parameters\": {\"type\": \"object\", \"properties\":"
        " {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"maximum"
        "\": 7.0}}, \"required\": [\"city\"]}}}\n"
        "</tools>\n"
        "\n"
        "If you choose to call a function ONLY reply in the following format with NO suff"
        "ix:\n"
        "\n"
        "<tool_call>\n"
        "<function=example_function_name>\n"
        "<parameter=example_parameter_1>\n"
        "value_1\n"
        "</parameter>\n"
        "<parameter=example_parameter_2>\n"
        "This is the value for the second parameter\n"
        "that can span\n"
        "multiple lines\n"
        "</parameter>\n"
        "</function>\n"
        "</tool_call>\n"
        "\n"
        "<IMPORTANT>\n"
        "Reminder:\n"
        "- Function calls MUST follow the specified format: an inner <function=...></func"
        "tion> block must be nested within <tool_call></tool_call> XML tags\n"
        "- Required parameters MUST be specified\n"
        "- You may provide optional reasoning for your function call in natural language "
        "BEFORE the function call, but NOT after\n"
        "- If there is no function call available, answer the question like normal with y"
        "our current knowledge and do not tell the user about function calls\n"
        "</IMPORTANT><|im_end|>\n"
        "<|im_start|>user\n"
        "Paris and Rome?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "\n"
        "</think>\n"
        "\n"
        "<tool_call>\n"
        "<function=get_weather>\n"
        "<parameter=city>\n"
        "Paris\n"
        "</parameter>\n"
        "</function>\n"
        "</tool_call>\n"
        "<tool_call>\n"
        "<function=get_weather>\n"
        "<parameter=city>\n"
        "Rome\n"
        "</parameter>\n"
        "</function>\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "<tool_response>\n"
        "Paris: 21C\n"
        "</tool_response>\n"
        "<tool_response>\n"
        "Rome: 25C\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n", NULL,
    },
    { "reasoning_kept_dropped",
        "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"Q1\"}, {\""
        "role\": \"assistant\", \"content\": \"A1\", \"reasoning_content\": \"thought 1\""
        "}, {\"role\": \"user\", \"content\": \"Q2\"}, {\"role\": \"assistant\", \"conten"
        "t\": \"A2\", \"reasoning_content\": \"thought 2\"}], \"add_generation_prompt\": "
        "false}",
        "<|im_start|>user\n"
        "Q1<|im_end|>\n"
        "<|im_start|>assistant\n"
        "A1<|im_end|>\n"
        "<|im_start|>user\n"
        "Q2<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "thought 2\n"
        "</think>\n"
        "\n"
        "A2<|im_end|>\n", NULL,
        "<|im_start|>user\n"
        "Q1<|im_end|>\n"
        "<|im_start|>assistant\n"
        "A1<|im_end|>\n"
        "<|im_start|>user\n"
        "Q2<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "thought 2\n"
        "</think>\n"
        "\n"
        "A2<|im_end|>\n", NULL,
    },
    { "reasoning_in_content",
        "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"Q\"}, {\"r"
        "ole\": \"assistant\", \"content\": \"<think>\\nhmm\\n</think>\\n\\nA\"}], \"add_"
        "generation_prompt\": false}",
        "<|im_start|>user\n"
        "Q<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "hmm\n"
        "</think>\n"
        "\n"
        "A<|im_end|>\n", NULL,
        "<|im_start|>user\n"
        "Q<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "hmm\n"
        "</think>\n"
        "\n"
        "A<|im_end|>\n", NULL,
    },
    { "thinking_off",
        "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \""
        "chat_template_kwargs\": {\"enable_thinking\": false}}",
        "<|im_start|>user\n"
        "Hi<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "\n"
        "</think>\n"
        "\n", NULL,
        "<|im_start|>user\n"
        "Hi<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "\n"
        "</think>\n"
        "\n", NULL,
    },
    { "thinking_on",
        "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \""
        "chat_template_kwargs\": {\"enable_thinking\": true}}",
        "<|im_start|>user\n"
        "Hi<|im_end|>\n"
        "<|im_start|>assistant\n", NULL,
        "<|im_start|>user\n"
        "Hi<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n", NULL,
    },
    { "content_parts_trim",
        "{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"  Sys."
        "\\n\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Part"
        " one.\"}, {\"type\": \"text\", \"text\": \" Part two. \"}]}]}",
        "<|im_start|>system\n"
        "  Sys.\n"
        "<|im_end|>\n"
        "<|im_start|>user\n"
        "Part one.\n"
        " Part two. <|im_end|>\n"
        "<|im_start|>assistant\n", NULL,
        "<|im_start|>system\n"
        "Sys.<|im_end|>\n"
        "<|im_start|>user\n"
        "Part one. Part two.<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n", NULL,
    },
};

/* Renders body (a chat request) in dialect d; returns the text (caller
 * frees) or NULL with *err filled. */
static char *
render_body(const char *body, pic_template_dialect d, const pic_marker *split,
            pic_render *keep, pic_error *err)
{
    pic_request       req;
    pic_render        r;
    pic_template_opts o = { d, split, 0 };

    assert_int_equal(pic_request_parse(&req, PIC_REQ_CHAT, body, strlen(body), NULL, err), 0);
    pic_render_init(&r);
    int rc = pic_template_render(&o, &req, &r, err);
    pic_request_free(&req);
    if (rc != 0) {
        return NULL;
    }
    char *text = strdup(r.text.data ? r.text.data : "");
    if (keep) {
        *keep = r;
    } else {
        pic_render_free(&r);
    }
    return text;
}

static void
check_partition(const pic_render *r)
{
    size_t at = 0;
    for (size_t i = 0; i < r->n_regions; i++) {
        assert_int_equal(r->regions[i].start, at);
        assert_true(r->regions[i].end > r->regions[i].start);
        if (i > 0) {        /* glue runs are merged */
            assert_false(r->regions[i].kind == PIC_REGION_GLUE
                         && r->regions[i - 1].kind == PIC_REGION_GLUE);
        }
        at = r->regions[i].end;
    }
    assert_int_equal(at, r->text.len);
}

typedef struct {
    const pic_golden    *g;
    pic_template_dialect d;
    char                 name[96];
} golden_case;

/* One golden case in one dialect: the rendered text, or the template error. */
static void
test_golden(void **state)
{
    const golden_case *c = *state;
    const pic_golden  *g = c->g;
    int                d35 = c->d == PIC_TEMPLATE_QWEN3_5;
    const char        *want = d35 ? g->qwen35 : g->qwen3;
    const char        *want_err = d35 ? g->qwen35_err : g->qwen3_err;
    pic_error          err;
    pic_render         r;
    char              *got = render_body(g->body, c->d, NULL, &r, &err);

    if (!want) {
        assert_null(got);
        assert_int_equal(err.status, 400);
        assert_string_equal(err.type, "invalid_request_error");
        assert_string_equal(err.message, want_err);
        return;
    }
    if (!got) {
        print_error("%s: unexpected error %s\n", c->name, err.message);
    }
    assert_non_null(got);
    if (strcmp(got, want) != 0) {
        print_error("%s mismatch\n--- want\n%s\n--- got\n%s\n", c->name, want, got);
    }
    assert_string_equal(got, want);
    check_partition(&r);
    pic_render_free(&r);
    free(got);
}

static const pic_region *
find_region(const pic_render *r, pic_region_kind kind, int32_t index, uint32_t doc)
{
    for (size_t i = 0; i < r->n_regions; i++) {
        if (r->regions[i].kind == kind && r->regions[i].index == index
            && r->regions[i].doc == doc) {
            return &r->regions[i];
        }
    }
    return NULL;
}

static void
assert_region_text(const pic_render *r, pic_region_kind kind, int32_t index, uint32_t doc,
                   const char *want)
{
    const pic_region *g = find_region(r, kind, index, doc);
    assert_non_null(g);
    assert_int_equal(g->end - g->start, strlen(want));
    assert_memory_equal(r->text.data + g->start, want, strlen(want));
}

/* Each tool result is its own region with exactly the client's bytes; the
 * <tool_response> wrappers and the merged user turn are glue. */
static void
test_regions_tool_results_and_schemas(void **state)
{
    (void) state;
    const char *body =
        "{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"g\",\"parameters\":{\"a\":1}}}],"
        "\"messages\":[{\"role\":\"system\",\"content\":\"SYS\"},"
        "{\"role\":\"user\",\"content\":\"Q\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"1\",\"type\":"
        "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"1\",\"content\":\"R1\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"2\",\"content\":\"R2\"}]}";
    for (int d = 0; d < 2; d++) {
        pic_render r;
        pic_error  err;
        char      *t = render_body(body, d ? PIC_TEMPLATE_QWEN3_5 : PIC_TEMPLATE_QWEN3, NULL,
                                   &r, &err);
        assert_non_null(t);
        check_partition(&r);
        assert_region_text(&r, PIC_REGION_SYSTEM, 0, 0, "SYS");
        assert_region_text(&r, PIC_REGION_USER, 1, 0, "Q");
        assert_region_text(&r, PIC_REGION_TOOL_RESULT, 3, 0, "R1");
        assert_region_text(&r, PIC_REGION_TOOL_RESULT, 4, 0, "R2");
        assert_region_text(&r, PIC_REGION_TOOL_SCHEMA, 0, 0,
                           "{\"type\": \"function\", \"function\": {\"name\": \"f\"}}");
        assert_region_text(&r, PIC_REGION_TOOL_SCHEMA, 1, 0,
                           "{\"type\": \"function\", \"function\": {\"name\": \"g\", "
                           "\"parameters\": {\"a\": 1}}}");
        assert_non_null(find_region(&r, PIC_REGION_ASSISTANT, 2, 0));
        /* between R1 and R2 only glue: "\n</tool_response>\n<tool_response>\n" */
        const pic_region *r1 = find_region(&r, PIC_REGION_TOOL_RESULT, 3, 0);
        const pic_region *gl = r1 + 1;
        assert_int_equal(gl->kind, PIC_REGION_GLUE);
        assert_int_equal(gl->end - gl->start, strlen("\n</tool_response>\n<tool_response>\n"));
        assert_memory_equal(r.text.data + gl->start, "\n</tool_response>\n<tool_response>\n",
                            gl->end - gl->start);
        pic_render_free(&r);
        free(t);
    }
}

/* With a marker, documents inside a message become separate regions and
 * the marker disappears from the text (the HYPIC serving interface);
 * without one the marker stays as literal text. */
static void
test_regions_documents_split_on_marker(void **state)
{
    (void) state;
    pic_marker m;
    assert_int_equal(pic_marker_init(&m, NULL, 0, NULL), 0);
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
        "\"Docs:\\n<|pic_sep|>Doc one.\\n<|pic_sep|>Doc two.\\n<|pic_sep|>Question?\"}]}";
    pic_render r;
    pic_error  err;
    char      *t = render_body(body, PIC_TEMPLATE_QWEN3, &m, &r, &err);
    assert_non_null(t);
    assert_string_equal(t, "<|im_start|>user\nDocs:\nDoc one.\nDoc two.\nQuestion?<|im_end|>\n"
                           "<|im_start|>assistant\n");
    check_partition(&r);
    assert_region_text(&r, PIC_REGION_USER, 0, 0, "Docs:\n");
    assert_region_text(&r, PIC_REGION_USER, 0, 1, "Doc one.\n");
    assert_region_text(&r, PIC_REGION_USER, 0, 2, "Doc two.\n");
    assert_region_text(&r, PIC_REGION_USER, 0, 3, "Question?");
    pic_render_free(&r);
    free(t);

    t = render_body(body, PIC_TEMPLATE_QWEN3, NULL, &r, &err);
    assert_non_null(strstr(t, "Docs:\n<|pic_sep|>Doc one."));
    assert_region_text(&r, PIC_REGION_USER, 0, 0,
                       "Docs:\n<|pic_sep|>Doc one.\n<|pic_sep|>Doc two.\n<|pic_sep|>Question?");
    pic_render_free(&r);
    free(t);
}

/* Qwen3.5 trims every content (Python str.strip, Unicode spaces too); the
 * trim applies to the joined documents. */
static void
test_qwen35_trim_with_documents(void **state)
{
    (void) state;
    pic_marker m;
    assert_int_equal(pic_marker_init(&m, NULL, 0, NULL), 0);
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
        "\"\\u3000 A <|pic_sep|> B \\n\"}]}";
    pic_render r;
    pic_error  err;
    char      *t = render_body(body, PIC_TEMPLATE_QWEN3_5, &m, &r, &err);
    assert_non_null(t);
    assert_string_equal(t, "<|im_start|>user\nA  B<|im_end|>\n<|im_start|>assistant\n<think>\n");
    assert_region_text(&r, PIC_REGION_USER, 0, 0, "A ");
    assert_region_text(&r, PIC_REGION_USER, 0, 1, " B");
    pic_render_free(&r);
    free(t);
}

static void
test_completions_prompt_documents(void **state)
{
    (void) state;
    pic_marker        m;
    pic_request       req;
    pic_render        r;
    pic_error         err;
    pic_template_opts o = { PIC_TEMPLATE_QWEN3, &m, 0 };
    const char       *body = "{\"model\":\"m\",\"prompt\":\"sys<|pic_sep|>doc<|pic_sep|>q\"}";

    assert_int_equal(pic_marker_init(&m, NULL, 0, NULL), 0);
    assert_int_equal(pic_request_parse(&req, PIC_REQ_COMPLETION, body, strlen(body), NULL,
                                       &err), 0);
    pic_render_init(&r);
    assert_int_equal(pic_template_render(&o, &req, &r, &err), 0);
    assert_int_equal(r.text.len, 7);
    assert_memory_equal(r.text.data, "sysdocq", 7);
    assert_int_equal(r.n_regions, 3);
    assert_int_equal(r.regions[1].kind, PIC_REGION_PROMPT);
    assert_int_equal(r.regions[1].doc, 1);
    pic_render_free(&r);
    pic_request_free(&req);
}

static void
test_dialect_names(void **state)
{
    (void) state;
    pic_template_dialect d;
    assert_int_equal(pic_template_dialect_parse("qwen3_next", &d), 0);
    assert_int_equal(d, PIC_TEMPLATE_QWEN3);
    assert_int_equal(pic_template_dialect_parse("qwen3.5", &d), 0);
    assert_int_equal(d, PIC_TEMPLATE_QWEN3_5);
    assert_int_equal(pic_template_dialect_parse("llama", &d), -1);
    assert_string_equal(pic_template_dialect_name(PIC_TEMPLATE_QWEN3_5), "qwen3.5");
    for (int k = 0; k < PIC_TEMPLATE_N; k++) {
        const char *name = pic_template_dialect_name((pic_template_dialect) k);
        assert_int_equal(pic_template_dialect_parse(name, &d), 0);
        assert_int_equal(d, k);
    }
    assert_string_equal(pic_template_end_of_turn(PIC_TEMPLATE_LLAMA3_2), "<|eot_id|>");
    assert_string_equal(pic_template_end_of_turn(PIC_TEMPLATE_MISTRAL_NEMO), "</s>");
    assert_string_equal(pic_template_end_of_turn(PIC_TEMPLATE_SMOLLM2), "<|im_end|>");
}

/* Llama 3.1's tool result is its content as a JSON string: each document is
 * a region of its own holding its escaped bytes, the quotes are glue, and
 * the pieces still concatenate to json.dumps of the whole content. */
static void
test_llama31_tool_result_documents(void **state)
{
    (void) state;
    pic_marker m;
    assert_int_equal(pic_marker_init(&m, NULL, 0, NULL), 0);
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Q\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"1\",\"type\":"
        "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"1\",\"content\":"
        "\"say \\\"one\\\"<|pic_sep|>line\\ntwo\"}]}";
    pic_render r;
    pic_error  err;
    char      *t = render_body(body, PIC_TEMPLATE_LLAMA3_1, &m, &r, &err);
    assert_non_null(t);
    check_partition(&r);
    assert_non_null(strstr(t, "<|start_header_id|>assistant<|end_header_id|>\n\n"
                              "{\"name\": \"f\", \"parameters\": {\"a\": 1}}<|eot_id|>"));
    assert_non_null(strstr(t, "<|start_header_id|>ipython<|end_header_id|>\n\n"
                              "\"say \\\"one\\\"line\\ntwo\"<|eot_id|>"));
    assert_region_text(&r, PIC_REGION_TOOL_RESULT, 2, 0, "say \\\"one\\\"");
    assert_region_text(&r, PIC_REGION_TOOL_RESULT, 2, 1, "line\\ntwo");
    assert_region_text(&r, PIC_REGION_USER, 0, 0, "Q");
    pic_render_free(&r);
    free(t);
}

/* Mistral v0.3: the system message and the tool listing go before the last
 * user message, each tool a region of its own; the calls and results keep
 * the client's ids. */
static void
test_mistral_regions(void **state)
{
    (void) state;
    const char *body =
        "{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"description\":\"d\"}}],\"messages\":[{\"role\":\"system\",\"content\":\"SYS\"},"
        "{\"role\":\"user\",\"content\":\"Q1\"},{\"role\":\"assistant\",\"content\":\" A \"},"
        "{\"role\":\"user\",\"content\":\"Q2\"}]}";
    pic_render r;
    pic_error  err;
    char      *t = render_body(body, PIC_TEMPLATE_MISTRAL, NULL, &r, &err);
    assert_non_null(t);
    check_partition(&r);
    assert_string_equal(t, "<s>[INST] Q1[/INST] A</s>[AVAILABLE_TOOLS] [{\"type\": \"function\", "
                           "\"function\": {\"name\": \"f\", \"description\": \"d\"}}]"
                           "[/AVAILABLE_TOOLS][INST] SYS\n\nQ2[/INST]");
    assert_region_text(&r, PIC_REGION_SYSTEM, 0, 0, "SYS");
    assert_region_text(&r, PIC_REGION_ASSISTANT, 2, 0, "A");
    assert_region_text(&r, PIC_REGION_TOOL_SCHEMA, 0, 0,
                       "{\"type\": \"function\", \"function\": {\"name\": \"f\", "
                       "\"description\": \"d\"}}");
    pic_render_free(&r);
    free(t);
}

/* What a dialect cannot express is a 400 naming the field: any tool use
 * in Llama 3.0's, forced calls included; a forced call renders in 3.1 and
 * Mistral Nemo (the engine forces the call's syntax, not the template). */
static void
test_llama_mistral_refusals(void **state)
{
    (void) state;
    static const struct {
        pic_template_dialect d;
        const char          *body;
        const char          *param;
    } cases[] = {
        { PIC_TEMPLATE_LLAMA3,
          "{\"model\":\"m\",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","
          "\"function\":{\"name\":\"f\"}}],\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]}",
          "tool_choice" },
        { PIC_TEMPLATE_LLAMA3,
          "{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
          "\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]}",
          "tools" },
        { PIC_TEMPLATE_LLAMA3_1,
          "{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
          "\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"assistant\","
          "\"content\":\"A\"}]}",
          "messages[1].role" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pic_error err;
        char     *t = render_body(cases[i].body, cases[i].d, NULL, NULL, &err);
        assert_null(t);
        assert_int_equal(err.status, 400);
        assert_string_equal(err.param, cases[i].param);
    }
    static const struct {
        pic_template_dialect d;
        const char          *body;
    } forced[] = {
        { PIC_TEMPLATE_LLAMA3_1,
          "{\"model\":\"m\",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","
          "\"function\":{\"name\":\"f\"}}],\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]}" },
        { PIC_TEMPLATE_MISTRAL_NEMO,
          "{\"model\":\"m\",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
          "\"f\"}},\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
          "\"messages\":[{\"role\":\"user\",\"content\":\"Q\"}]}" },
    };
    for (size_t i = 0; i < sizeof(forced) / sizeof(forced[0]); i++) {
        pic_error err;
        char     *t = render_body(forced[i].body, forced[i].d, NULL, NULL, &err);
        assert_non_null(t);
        free(t);
    }
}

/* Jinja's tojson(indent=4) is Python's json.dumps(indent=4, ensure_ascii=False). */
static void
test_json_indent_like_python(void **state)
{
    (void) state;
    const char *src = "{\"a\": [], \"b\": {}, \"c\": [1, {\"d\": \"\u00e9\\n\"}], \"e\": 2.5}";
    cJSON      *v = cJSON_Parse(src);
    pic_buf     b;

    assert_non_null(v);
    pic_buf_init(&b);
    assert_int_equal(pic_json_write_py_indent(&b, v, 4), 0);
    pic_buf_appendc(&b, '\0');
    assert_string_equal(b.data, "{\n    \"a\": [],\n    \"b\": {},\n    \"c\": [\n        1,\n"
                                "        {\n            \"d\": \"\u00e9\\n\"\n        }\n    ],\n"
                                "    \"e\": 2.5\n}");
    pic_buf_free(&b);
    cJSON_Delete(v);
}

int
main(void)
{
    enum { N_GOLD = sizeof(goldens) / sizeof(goldens[0]) };
    static golden_case      cases[2 * N_GOLD];
    static struct CMUnitTest tests[2 * N_GOLD + 9];
    size_t                  n = 0;

    for (size_t i = 0; i < N_GOLD; i++) {
        for (int d = 0; d < 2; d++) {
            golden_case *c = &cases[2 * i + d];
            c->g = &goldens[i];
            c->d = d ? PIC_TEMPLATE_QWEN3_5 : PIC_TEMPLATE_QWEN3;
            snprintf(c->name, sizeof(c->name), "test_golden_%s_%s",
                     d ? "qwen35" : "qwen3", goldens[i].name);
            tests[n].name = c->name;
            tests[n].test_func = test_golden;
            tests[n].setup_func = NULL;
            tests[n].teardown_func = NULL;
            tests[n].initial_state = c;
            n++;
        }
    }
    const struct CMUnitTest rest[] = {
        cmocka_unit_test(test_regions_tool_results_and_schemas),
        cmocka_unit_test(test_regions_documents_split_on_marker),
        cmocka_unit_test(test_qwen35_trim_with_documents),
        cmocka_unit_test(test_completions_prompt_documents),
        cmocka_unit_test(test_dialect_names),
        cmocka_unit_test(test_llama31_tool_result_documents),
        cmocka_unit_test(test_mistral_regions),
        cmocka_unit_test(test_llama_mistral_refusals),
        cmocka_unit_test(test_json_indent_like_python),
    };
    memcpy(&tests[n], rest, sizeof(rest));
    n += sizeof(rest) / sizeof(rest[0]);
    return _cmocka_run_group_tests("test_template", tests, n, NULL, NULL);
}
