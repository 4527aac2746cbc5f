/*
 * pic_template.c — the Qwen3 / Qwen3.5 and ChatML chat templates with
 * region spans, and pic_template_render's dispatch to every dialect (see
 * pic_template.h).  Each render_* function follows its Jinja template
 * statement by statement; comments quote the template where it is subtle.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE             /* memmem */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pic_json.h"
#include "pic_template.h"
#include "pic_template_int.h"
#include "pic_utf8.h"

/* --- template text --- */

static const char QWEN3_TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query."
    "\n\nYou are provided with function signatures within <tools></tools> XML tags:"
    "\n<tools>";

static const char QWEN3_TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name "
    "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call><|im_end|>\n";

static const char QWEN35_TOOLS_HEAD[] =
    "<|im_start|>system\n# Tools\n\nYou have access to the following functions:"
    "\n\n<tools>";

static const char QWEN35_TOOLS_TAIL[] =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following "
    "format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n"
    "<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: "
    "an inner <function=...></function> block must be nested within "
    "<tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural "
    "language BEFORE the function call, but NOT after\n- If there is no function "
    "call available, answer the question like normal with your current knowledge "
    "and do not tell the user about function calls\n</IMPORTANT>";

/* --- Python string helpers on byte spans --- */

static int
pic_starts(const char *s, size_t n, const char *pre)
{
    size_t k = strlen(pre);
    return n >= k && memcmp(s, pre, k) == 0;
}

static int
pic_ends(const char *s, size_t n, const char *suf)
{
    size_t k = strlen(suf);
    return n >= k && memcmp(s + n - k, suf, k) == 0;
}

/* Offset of the first / last occurrence of pat in s[0..n), or n. */
static size_t
pic_find(const char *s, size_t n, const char *pat)
{
    const char *p = memmem(s, n, pat, strlen(pat));
    return p ? (size_t) (p - s) : n;
}

static size_t
pic_rfind(const char *s, size_t n, const char *pat)
{
    size_t k = strlen(pat);
    if (k > n) {
        return n;
    }
    for (size_t i = n - k + 1; i-- > 0; ) {
        if (memcmp(s + i, pat, k) == 0) {
            return i;
        }
    }
    return n;
}

typedef struct {
    const char *p;
    size_t      n;
} pic_span;

static pic_span
pic_lstrip_nl(pic_span s)
{
    while (s.n && s.p[0] == '\n') {
        s.p++;
        s.n--;
    }
    return s;
}

static pic_span
pic_rstrip_nl(pic_span s)
{
    while (s.n && s.p[s.n - 1] == '\n') {
        s.n--;
    }
    return s;
}

/* The think split both templates share:
 *   reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
 *   content   = content.split('</think>')[-1].lstrip('\n')                              */
static void
pic_think_split(pic_span *content, pic_span *reasoning)
{
    size_t   first = pic_find(content->p, content->n, "</think>");
    size_t   last = pic_rfind(content->p, content->n, "</think>");
    pic_span before = { content->p, first };
    before = pic_rstrip_nl(before);
    size_t open = pic_rfind(before.p, before.n, "<think>");
    if (open < before.n) {
        before.p += open + 7;
        before.n -= open + 7;
    }
    *reasoning = pic_lstrip_nl(before);
    pic_span after = { content->p + last + 8, content->n - last - 8 };
    *content = pic_lstrip_nl(after);
}

/* --- shared pieces --- */

static void
pic_tools_listing(pic_render *r, const pic_request *req, pic_buf *tmp)
{
    int32_t i = 0;
    for (const cJSON *t = req->tools->child; t; t = t->next, i++) {
        pic_glue(r, "\n");
        pic_buf_reset(tmp);
        pic_json_write_py(tmp, t);
        if (tmp->oom) {
            r->oom = 1;
            return;
        }
        pic_render_push(r, PIC_REGION_TOOL_SCHEMA, i, 0, tmp->data, tmp->len);
    }
}

/* --- Qwen3 / Qwen3-Next --- */

static int
pic_render_qwen3(const pic_template_opts *o, const pic_request *req, pic_render *r,
                 pic_error *err)
{
    const pic_message *msgs = req->messages;
    size_t             n = req->n_messages;
    pic_rtext          rt;
    pic_buf            body, tmp;
    size_t             last_query = n - 1;

    pic_rt_init(&rt);
    pic_buf_init(&body);
    pic_buf_init(&tmp);

    if (req->tools) {
        pic_glue(r, "<|im_start|>system\n");
        if (msgs[0].role == PIC_ROLE_SYSTEM) {
            pic_rt_content(&rt, &msgs[0], "\n", o->split, o->split_parts);
            pic_rt_emit(r, &rt, PIC_REGION_SYSTEM, 0);
            pic_glue(r, "\n\n");
        }
        pic_glue(r, QWEN3_TOOLS_HEAD);
        pic_tools_listing(r, req, &tmp);
        pic_glue(r, QWEN3_TOOLS_TAIL);
    } else if (msgs[0].role == PIC_ROLE_SYSTEM) {
        pic_glue(r, "<|im_start|>system\n");
        pic_rt_content(&rt, &msgs[0], "\n", o->split, o->split_parts);
        pic_rt_emit(r, &rt, PIC_REGION_SYSTEM, 0);
        pic_glue(r, "<|im_end|>\n");
    }

    /* last_query_index: the last user message that is not a bare tool response */
    for (size_t k = n; k-- > 0; ) {
        if (msgs[k].role != PIC_ROLE_USER) {
            continue;
        }
        pic_rt_content(&rt, &msgs[k], "\n", o->split, o->split_parts);
        const char *c = pic_rt_data(&rt);
        size_t      cn = pic_rt_len(&rt);
        if (!(pic_starts(c, cn, "<tool_response>") && pic_ends(c, cn, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }

    for (size_t i = 0; i < n && !r->oom; i++) {
        const pic_message *m = &msgs[i];

        if (m->role == PIC_ROLE_USER || (m->role == PIC_ROLE_SYSTEM && i > 0)) {
            pic_glue(r, m->role == PIC_ROLE_USER ? "<|im_start|>user\n"
                                                 : "<|im_start|>system\n");
            pic_rt_content(&rt, m, "\n", o->split, o->split_parts);
            pic_rt_emit(r, &rt, pic_region_of(m->role), (int32_t) i);
            pic_glue(r, "<|im_end|>\n");

        } else if (m->role == PIC_ROLE_ASSISTANT) {
            pic_rt_content(&rt, m, "\n", NULL, 0);
            pic_span content = { pic_rt_data(&rt), pic_rt_len(&rt) };
            pic_span reasoning = { "", 0 };
            if (m->has_reasoning) {
                reasoning.p = m->reasoning.ptr;
                reasoning.n = m->reasoning.len;
            } else if (pic_find(content.p, content.n, "</think>") < content.n) {
                pic_think_split(&content, &reasoning);
            }
            pic_buf_reset(&body);
            if (i > last_query && (i == n - 1 || reasoning.n)) {
                pic_span rs = pic_lstrip_nl(pic_rstrip_nl(reasoning));
                pic_span cs = pic_lstrip_nl(content);
                pic_buf_appends(&body, "<think>\n");
                pic_buf_append(&body, rs.p, rs.n);
                pic_buf_appends(&body, "\n</think>\n\n");
                pic_buf_append(&body, cs.p, cs.n);
            } else {
                pic_buf_append(&body, content.p, content.n);
            }
            for (size_t j = 0; j < m->n_tool_calls; j++) {
                const pic_tool_call *tc = &m->tool_calls[j];
                if (j > 0 || content.n) {
                    pic_buf_appendc(&body, '\n');
                }
                pic_buf_appends(&body, "<tool_call>\n{\"name\": \"");
                pic_buf_append(&body, tc->name.ptr, tc->name.len);
                pic_buf_appends(&body, "\", \"arguments\": ");
                pic_json_write_py(&body, tc->args);
                pic_buf_appends(&body, "}\n</tool_call>");
            }
            if (body.oom) {
                r->oom = 1;
                break;
            }
            pic_glue(r, "<|im_start|>assistant\n");
            pic_render_push(r, PIC_REGION_ASSISTANT, (int32_t) i, 0, body.data, body.len);
            pic_glue(r, "<|im_end|>\n");

        } else if (m->role == PIC_ROLE_TOOL) {
            if (i == 0 || msgs[i - 1].role != PIC_ROLE_TOOL) {
                pic_glue(r, "<|im_start|>user");
            }
            pic_glue(r, "\n<tool_response>\n");
            pic_rt_content(&rt, m, "\n", o->split, o->split_parts);
            pic_rt_emit(r, &rt, PIC_REGION_TOOL_RESULT, (int32_t) i);
            pic_glue(r, "\n</tool_response>");
            if (i == n - 1 || msgs[i + 1].role != PIC_ROLE_TOOL) {
                pic_glue(r, "<|im_end|>\n");
            }
        }
    }

    if (req->add_generation_prompt) {
        pic_glue(r, "<|im_start|>assistant\n");
        if (req->enable_thinking == 0) {
            pic_glue(r, "<think>\n\n</think>\n\n");
        }
    }

    int oom = r->oom || rt.oom || tmp.oom;
    pic_rt_free(&rt);
    pic_buf_free(&body);
    pic_buf_free(&tmp);
    return oom ? pic_error_oom(err, __func__) : 0;
}

/* --- Qwen3.5 --- */

static int
pic_render_qwen35(const pic_template_opts *o, const pic_request *req, pic_render *r,
                  pic_error *err)
{
    const pic_message *msgs = req->messages;
    size_t             n = req->n_messages;
    pic_rtext          rt;
    pic_buf            body, tmp;
    size_t             last_query = n;      /* n: none found */
    int                rc = 0;

    /* template errors first, before any output */
    for (size_t i = 1; i < n; i++) {
        if (msgs[i].role == PIC_ROLE_SYSTEM) {
            char param[PIC_ERROR_PARAM_MAX];
            snprintf(param, sizeof(param), "messages[%zu].role", i);
            return pic_error_invalid(err, param, "invalid_value",
                                     "System message must be at the beginning.");
        }
    }

    pic_rt_init(&rt);
    pic_buf_init(&body);
    pic_buf_init(&tmp);

    for (size_t k = n; k-- > 0; ) {
        if (msgs[k].role != PIC_ROLE_USER) {
            continue;
        }
        pic_rt_content(&rt, &msgs[k], "", o->split, o->split_parts);
        pic_rt_trim(&rt);
        const char *c = pic_rt_data(&rt);
        size_t      cn = pic_rt_len(&rt);
        if (!(pic_starts(c, cn, "<tool_response>") && pic_ends(c, cn, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }
    if (last_query == n) {
        rc = pic_error_invalid(err, "messages", "invalid_value",
                               "No user query found in messages.");
        goto done;
    }

    if (req->tools) {
        pic_glue(r, QWEN35_TOOLS_HEAD);
        pic_tools_listing(r, req, &tmp);
        pic_glue(r, QWEN35_TOOLS_TAIL);
        if (msgs[0].role == PIC_ROLE_SYSTEM) {
            pic_rt_content(&rt, &msgs[0], "", o->split, o->split_parts);
            pic_rt_trim(&rt);
            if (pic_rt_len(&rt)) {
                pic_glue(r, "\n\n");
                pic_rt_emit(r, &rt, PIC_REGION_SYSTEM, 0);
            }
        }
        pic_glue(r, "<|im_end|>\n");
    } else if (msgs[0].role == PIC_ROLE_SYSTEM) {
        pic_rt_content(&rt, &msgs[0], "", o->split, o->split_parts);
        pic_rt_trim(&rt);
        pic_glue(r, "<|im_start|>system\n");
        pic_rt_emit(r, &rt, PIC_REGION_SYSTEM, 0);
        pic_glue(r, "<|im_end|>\n");
    }

    for (size_t i = 0; i < n && !r->oom; i++) {
        const pic_message *m = &msgs[i];

        if (m->role == PIC_ROLE_USER) {
            pic_rt_content(&rt, m, "", o->split, o->split_parts);
            pic_rt_trim(&rt);
            pic_glue(r, "<|im_start|>user\n");
            pic_rt_emit(r, &rt, PIC_REGION_USER, (int32_t) i);
            pic_glue(r, "<|im_end|>\n");

        } else if (m->role == PIC_ROLE_ASSISTANT) {
            pic_rt_content(&rt, m, "", NULL, 0);
            pic_rt_trim(&rt);
            pic_span content = { pic_rt_data(&rt), pic_rt_len(&rt) };
            pic_span reasoning = { "", 0 };
            if (m->has_reasoning) {
                reasoning.p = m->reasoning.ptr;
                reasoning.n = m->reasoning.len;
            } else if (pic_find(content.p, content.n, "</think>") < content.n) {
                pic_think_split(&content, &reasoning);
            }
            size_t a, b;
            pic_utf8_py_strip(reasoning.p, reasoning.n, &a, &b);
            reasoning.p += a;
            reasoning.n = b - a;

            pic_buf_reset(&body);
            if (i > last_query) {
                pic_buf_appends(&body, "<think>\n");
                pic_buf_append(&body, reasoning.p, reasoning.n);
                pic_buf_appends(&body, "\n</think>\n\n");
            }
            pic_buf_append(&body, content.p, content.n);
            pic_utf8_py_strip(content.p, content.n, &a, &b);
            int has_content = b > a;        /* {%- if content|trim %} */
            for (size_t j = 0; j < m->n_tool_calls; j++) {
                const pic_tool_call *tc = &m->tool_calls[j];
                if (j == 0) {
                    pic_buf_appends(&body, has_content ? "\n\n<tool_call>\n<function="
                                                       : "<tool_call>\n<function=");
                } else {
                    pic_buf_appends(&body, "\n<tool_call>\n<function=");
                }
                pic_buf_append(&body, tc->name.ptr, tc->name.len);
                pic_buf_appends(&body, ">\n");
                for (const cJSON *arg = tc->args->child; arg; arg = arg->next) {
                    pic_buf_appends(&body, "<parameter=");
                    pic_buf_appends(&body, arg->string ? arg->string : "");
                    pic_buf_appends(&body, ">\n");
                    /* mapping or non-string sequence: tojson; else |string */
                    pic_json_write_py_str(&body, arg);
                    pic_buf_appends(&body, "\n</parameter>\n");
                }
                pic_buf_appends(&body, "</function>\n</tool_call>");
            }
            if (body.oom) {
                r->oom = 1;
                break;
            }
            pic_glue(r, "<|im_start|>assistant\n");
            pic_render_push(r, PIC_REGION_ASSISTANT, (int32_t) i, 0, body.data, body.len);
            pic_glue(r, "<|im_end|>\n");

        } else if (m->role == PIC_ROLE_TOOL) {
            /* {%- if loop.previtem and loop.previtem.role != "tool" %}: a
             * leading tool message gets no header (kept as the template has it) */
            if (i > 0 && msgs[i - 1].role != PIC_ROLE_TOOL) {
                pic_glue(r, "<|im_start|>user");
            }
            pic_glue(r, "\n<tool_response>\n");
            pic_rt_content(&rt, m, "", o->split, o->split_parts);
            pic_rt_trim(&rt);
            pic_rt_emit(r, &rt, PIC_REGION_TOOL_RESULT, (int32_t) i);
            pic_glue(r, "\n</tool_response>");
            if (i == n - 1 || msgs[i + 1].role != PIC_ROLE_TOOL) {
                pic_glue(r, "<|im_end|>\n");
            }
        }
        /* a system message can only be first: handled above */
    }

    if (req->add_generation_prompt) {
        pic_glue(r, "<|im_start|>assistant\n");
        pic_glue(r, req->enable_thinking == 0 ? "<think>\n\n</think>\n\n" : "<think>\n");
    }

done:
    if (rc == 0 && (r->oom || rt.oom || tmp.oom)) {
        rc = pic_error_oom(err, __func__);
    }
    pic_rt_free(&rt);
    pic_buf_free(&body);
    pic_buf_free(&tmp);
    return rc;
}

/* --- plain ChatML (SmolLM2) --- */

static int
pic_render_chatml(const pic_template_opts *o, const pic_request *req, pic_render *r,
                  pic_error *err)
{
    pic_rtext rt;
    int       rc = 0;

    pic_rt_init(&rt);
    if (o->dialect == PIC_TEMPLATE_SMOLLM2 && req->messages[0].role != PIC_ROLE_SYSTEM) {
        pic_glue(r, "<|im_start|>system\n" PIC_CHATML_SMOLLM2_SYSTEM "<|im_end|>\n");
    }
    for (size_t i = 0; i < req->n_messages && !r->oom; i++) {
        const pic_message *m = &req->messages[i];
        int                doc = m->role != PIC_ROLE_ASSISTANT;

        pic_glue(r, "<|im_start|>");
        pic_glue(r, pic_role_name(m->role));
        pic_glue(r, "\n");
        pic_rt_content(&rt, m, "\n", doc ? o->split : NULL, doc && o->split_parts);
        pic_rt_emit(r, &rt, pic_region_of(m->role), (int32_t) i);
        pic_glue(r, "<|im_end|>\n");
    }
    if (req->add_generation_prompt) {
        pic_glue(r, "<|im_start|>assistant\n");
    }
    if (r->oom || rt.oom) {
        rc = pic_error_oom(err, __func__);
    }
    pic_rt_free(&rt);
    return rc;
}

/* --- completions --- */

static int
pic_render_prompt(const pic_template_opts *o, const pic_request *req, pic_render *r,
                  pic_error *err)
{
    pic_rtext rt;
    pic_rt_init(&rt);
    pic_rt_add_split(&rt, &req->prompt, o->split, 1);
    pic_rt_emit(r, &rt, PIC_REGION_PROMPT, 0);
    int oom = r->oom || rt.oom;
    pic_rt_free(&rt);
    return oom ? pic_error_oom(err, __func__) : 0;
}

int
pic_template_render(const pic_template_opts *opts, const pic_request *req,
                    pic_render *out, pic_error *err)
{
    int rc;

    pic_render_free(out);
    if (req->kind == PIC_REQ_COMPLETION) {
        rc = req->prompt_tokens ? 0 : pic_render_prompt(opts, req, out, err);
    } else if (req->n_messages == 0) {
        rc = pic_error_invalid(err, "messages", "invalid_value", "No messages provided.");
    } else if (opts->dialect == PIC_TEMPLATE_QWEN3_5) {
        rc = pic_render_qwen35(opts, req, out, err);
    } else if (opts->dialect == PIC_TEMPLATE_CHATML || opts->dialect == PIC_TEMPLATE_SMOLLM2) {
        rc = pic_render_chatml(opts, req, out, err);
    } else if (opts->dialect == PIC_TEMPLATE_LLAMA3 || opts->dialect == PIC_TEMPLATE_LLAMA3_1
               || opts->dialect == PIC_TEMPLATE_LLAMA3_2) {
        rc = pic_render_llama3(opts, req, out, err);
    } else if (opts->dialect == PIC_TEMPLATE_MISTRAL
               || opts->dialect == PIC_TEMPLATE_MISTRAL_NEMO) {
        rc = pic_render_mistral(opts, req, out, err);
    } else {
        rc = pic_render_qwen3(opts, req, out, err);
    }
    if (rc != 0) {
        pic_render_free(out);
    }
    return rc;
}
