/*
 * pic_template_llama3.c — the Llama 3 instruct chat templates with region
 * spans (pic_template.h), rendered as transformers' apply_chat_template
 * renders Meta's released templates:
 *
 *  - PIC_TEMPLATE_LLAMA3 (Llama 3.0): every message a header turn
 *    `<|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT|trim<|eot_id|>`
 *    after `<|begin_of_text|>`; the template has no place for tools or
 *    assistant tool calls (refused: param "tools" / the message).
 *  - PIC_TEMPLATE_LLAMA3_1 (3.1, 3.3) and PIC_TEMPLATE_LLAMA3_2 (3.2): a
 *    system turn always, opening "Cutting Knowledge Date: December 2023\n
 *    Today Date: DATE\n\n" (3.1: the template's fixed "26 Jul 2024"; 3.2:
 *    strftime_now("%d %b %Y"), the local date at rendering), "Environment:
 *    ipython\n" first when tools are offered; tools go into the first user
 *    message (the template's default tools_in_user_message), each
 *    `tojson(indent=4)`; an assistant tool call renders as
 *    `{"name": "NAME", "parameters": ARGS}` (one call a message: more is the
 *    template's error), a tool result as an `ipython` turn holding its
 *    content as a JSON string (a string is iterable to Jinja, so the
 *    template's `tojson` branch is taken).
 *
 * A forced call (tool_choice "required" or a named function) renders as
 * any other request: the engine forces the answer's JSON call itself.  Text
 * parts are joined by "\n" (as vLLM flattens them for a string-content
 * template).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "pic_json.h"
#include "pic_template.h"
#include "pic_template_int.h"

/* --- template text --- */

static const char LLAMA3_BOS[] = "<|begin_of_text|>";
static const char LLAMA3_EOT[] = "<|eot_id|>";
static const char LLAMA31_DATE[] = "26 Jul 2024";

static const char LLAMA31_TOOLS_HEAD[] =
    "<|start_header_id|>user<|end_header_id|>\n\n"
    "Given the following functions, please respond with a JSON for a function call "
    "with its proper arguments that best answers the given prompt.\n\n"
    "Respond in the format {\"name\": function name, \"parameters\": dictionary of "
    "argument name and its value}.Do not use variables.\n\n";

/* --- pieces --- */

static void
llama3_header(pic_render *r, const char *role)
{
    pic_glue(r, "<|start_header_id|>");
    pic_glue(r, role);
    pic_glue(r, "<|end_header_id|>\n\n");
}

/* Llama 3.0's template has no place for tools: any tool use refused by
 * name (3.1 and 3.2 take them; a forced call is the engine's to force). */
static int
llama3_check(pic_template_dialect d, const pic_request *req, pic_error *err)
{
    if (d != PIC_TEMPLATE_LLAMA3) {
        return 0;
    }
    if (req->tool_choice == PIC_TOOL_CHOICE_REQUIRED
        || req->tool_choice == PIC_TOOL_CHOICE_FUNCTION) {
        return pic_error_invalid(err, "tool_choice", "invalid_value",
                                 "the llama3 chat template (Llama 3.0) has no place for "
                                 "tools");
    }
    if (req->tools != NULL) {
        return pic_error_invalid(err, "tools", "unsupported_parameter",
                                 "the llama3 chat template (Llama 3.0) has no place for "
                                 "tools");
    }
    for (size_t i = 0; i < req->n_messages; i++) {
        if (req->messages[i].n_tool_calls) {
            char param[PIC_ERROR_PARAM_MAX];
            snprintf(param, sizeof(param), "messages[%zu].tool_calls", i);
            return pic_error_invalid(err, param, "invalid_value",
                                     "the llama3 chat template (Llama 3.0) has no place "
                                     "for tool calls");
        }
    }
    return 0;
}

/* The tool result as the 3.1 template's `message.content | tojson`: the
 * content as a JSON string, its documents escaped one by one (escaping
 * is per character, so the pieces still concatenate to the whole). */
static void
llama31_tool_result(pic_render *r, const pic_rtext *rt, int32_t index, pic_buf *tmp)
{
    uint32_t doc = 0;

    pic_glue(r, "\"");
    for (size_t i = 0; i < rt->n && !r->oom; i++) {
        pic_buf_reset(tmp);
        pic_json_write_string(tmp, rt->buf.data + rt->p[i].start,
                              rt->p[i].end - rt->p[i].start);
        if (tmp->oom) {
            r->oom = 1;
            break;
        }
        /* without its quotes */
        if (rt->p[i].glue) {
            pic_render_push(r, PIC_REGION_GLUE, -1, 0, tmp->data + 1, tmp->len - 2);
        } else {
            pic_render_push(r, PIC_REGION_TOOL_RESULT, index, doc++, tmp->data + 1,
                            tmp->len - 2);
        }
    }
    pic_glue(r, "\"");
}

/* A message with plain content, one turn: header, content (the documents
 * of a non-assistant turn split as o says), end of turn. */
static void
llama3_plain_turn(const pic_template_opts *o, pic_render *r, pic_rtext *rt,
                  const pic_message *m, int32_t index)
{
    int doc = m->role != PIC_ROLE_ASSISTANT;

    llama3_header(r, pic_role_name(m->role));
    pic_rt_content(rt, m, "\n", doc ? o->split : NULL, doc && o->split_parts);
    pic_rt_trim(rt);
    pic_rt_emit(r, rt, pic_region_of(m->role), index);
    pic_glue(r, LLAMA3_EOT);
}

/* --- Llama 3.0 --- */

static int
llama30_render(const pic_template_opts *o, const pic_request *req, pic_render *r)
{
    pic_rtext rt;
    int       oom;

    pic_rt_init(&rt);
    pic_glue(r, LLAMA3_BOS);
    for (size_t i = 0; i < req->n_messages && !r->oom; i++) {
        llama3_plain_turn(o, r, &rt, &req->messages[i], (int32_t) i);
    }
    if (req->add_generation_prompt) {
        llama3_header(r, "assistant");
    }
    oom = r->oom || rt.oom;
    pic_rt_free(&rt);
    return oom;
}

/* --- Llama 3.1 / 3.2 / 3.3 --- */

static int
llama31_render(const pic_template_opts *o, const pic_request *req, pic_render *r,
               pic_error *err)
{
    const pic_message *msgs = req->messages;
    size_t             n = req->n_messages, first = 0;
    pic_rtext          rt;
    pic_buf            tmp;
    char               date[32];
    int                rc = 0;

    if (o->dialect == PIC_TEMPLATE_LLAMA3_2) {
        time_t    now = time(NULL);
        struct tm tm;

        /* strftime_now: Python's datetime.now(), the local time */
        if (localtime_r(&now, &tm) == NULL || strftime(date, sizeof(date), "%d %b %Y", &tm) == 0) {
            snprintf(date, sizeof(date), "%s", LLAMA31_DATE);
        }
    } else {
        snprintf(date, sizeof(date), "%s", LLAMA31_DATE);
    }

    pic_rt_init(&rt);
    pic_buf_init(&tmp);

    pic_glue(r, LLAMA3_BOS);
    llama3_header(r, "system");
    if (req->tools) {
        pic_glue(r, "Environment: ipython\n");
    }
    pic_glue(r, "Cutting Knowledge Date: December 2023\nToday Date: ");
    pic_glue(r, date);
    pic_glue(r, "\n\n");
    if (msgs[0].role == PIC_ROLE_SYSTEM) {
        pic_rt_content(&rt, &msgs[0], "\n", o->split, o->split_parts);
        pic_rt_trim(&rt);
        pic_rt_emit(r, &rt, PIC_REGION_SYSTEM, 0);
        first = 1;
    }
    pic_glue(r, LLAMA3_EOT);

    if (req->tools) {
        /* the tools ride in the first message after the system one */
        if (first == n) {
            rc = pic_error_invalid(err, "messages", "invalid_value",
                                   "Cannot put tools in the first user message when "
                                   "there's no first user message!");
            goto done;
        }
        if (msgs[first].role != PIC_ROLE_USER) {
            char param[PIC_ERROR_PARAM_MAX];
            snprintf(param, sizeof(param), "messages[%zu].role", first);
            rc = pic_error_invalid(err, param, "invalid_value",
                                   "the %s chat template puts the tools into the first "
                                   "user message: the first message after the system "
                                   "message must be a user message",
                                   pic_template_dialect_name(o->dialect));
            goto done;
        }
        pic_glue(r, LLAMA31_TOOLS_HEAD);
        int32_t k = 0;
        for (const cJSON *t = req->tools->child; t && !r->oom; t = t->next, k++) {
            pic_buf_reset(&tmp);
            pic_json_write_py_indent(&tmp, t, 4);
            if (tmp.oom) {
                r->oom = 1;
                break;
            }
            pic_render_push(r, PIC_REGION_TOOL_SCHEMA, k, 0, tmp.data, tmp.len);
            pic_glue(r, "\n\n");
        }
        pic_rt_content(&rt, &msgs[first], "\n", o->split, o->split_parts);
        pic_rt_trim(&rt);
        pic_rt_emit(r, &rt, PIC_REGION_USER, (int32_t) first);
        pic_glue(r, LLAMA3_EOT);
        first++;
    }

    for (size_t i = first; i < n && !r->oom; i++) {
        const pic_message *m = &msgs[i];

        if (m->role == PIC_ROLE_ASSISTANT && m->n_tool_calls) {
            if (m->n_tool_calls != 1) {
                char param[PIC_ERROR_PARAM_MAX];
                snprintf(param, sizeof(param), "messages[%zu].tool_calls", i);
                rc = pic_error_invalid(err, param, "invalid_value",
                                       "This model only supports single tool-calls at once!");
                goto done;
            }
            const pic_tool_call *tc = &m->tool_calls[0];
            pic_buf_reset(&tmp);
            pic_buf_appends(&tmp, "{\"name\": \"");
            pic_buf_append(&tmp, tc->name.ptr, tc->name.len);
            pic_buf_appends(&tmp, "\", \"parameters\": ");
            pic_json_write_py(&tmp, tc->args);
            pic_buf_appends(&tmp, "}");
            if (tmp.oom) {
                r->oom = 1;
                break;
            }
            llama3_header(r, "assistant");
            pic_render_push(r, PIC_REGION_ASSISTANT, (int32_t) i, 0, tmp.data, tmp.len);
            pic_glue(r, LLAMA3_EOT);

        } else if (m->role == PIC_ROLE_TOOL) {
            llama3_header(r, "ipython");
            pic_rt_content(&rt, m, "\n", o->split, o->split_parts);
            llama31_tool_result(r, &rt, (int32_t) i, &tmp);
            pic_glue(r, LLAMA3_EOT);

        } else {
            llama3_plain_turn(o, r, &rt, m, (int32_t) i);
        }
    }
    if (req->add_generation_prompt) {
        llama3_header(r, "assistant");
    }

done:
    if (rc == 0 && (r->oom || rt.oom || tmp.oom)) {
        rc = pic_error_oom(err, __func__);
    }
    pic_rt_free(&rt);
    pic_buf_free(&tmp);
    return rc;
}

int
pic_render_llama3(const pic_template_opts *o, const pic_request *req, pic_render *r,
                  pic_error *err)
{
    if (llama3_check(o->dialect, req, err) != 0) {
        return -1;
    }
    if (o->dialect == PIC_TEMPLATE_LLAMA3) {
        return llama30_render(o, req, r) ? pic_error_oom(err, __func__) : 0;
    }
    return llama31_render(o, req, r, err);
}
