/*
 * pic_template_mistral.c — Mistral's [INST] chat templates with region spans
 * (pic_template.h), rendered as transformers' apply_chat_template renders
 * the released templates:
 *
 *  - PIC_TEMPLATE_MISTRAL (Mistral-7B-Instruct-v0.3, tokenizer v3):
 *    `<s>[INST] USER[/INST] ASSISTANT|trim</s>`; the system message goes
 *    before the last user message (`[INST] SYSTEM\n\nUSER[/INST]`), the tool
 *    listing `[AVAILABLE_TOOLS] [...][/AVAILABLE_TOOLS]` before it too;
 *    calls `[TOOL_CALLS] [{"name": ..., "arguments": ..., "id": "ID"}]</s>`,
 *    results `[TOOL_RESULTS] {"content": CONTENT, "call_id": "ID"}
 *    [/TOOL_RESULTS]`.
 *  - PIC_TEMPLATE_MISTRAL_NEMO (Mistral-Nemo-Instruct-2407, tekken): the
 *    same without the spaces after `[INST]`, `[AVAILABLE_TOOLS]`,
 *    `[TOOL_CALLS]`, `[TOOL_RESULTS]` and before an assistant turn (whose
 *    content is not trimmed); the system message only rides on a user
 *    message that is the conversation's last message (`loop.last`).
 *
 * Both templates check that user and assistant turns alternate (tool calls
 * and results aside), want 9-character tool call ids, accept a system
 * message only first, and have no generation prompt (an [INST] turn is
 * already one).  Their errors come back as 400s with the template's own
 * message.  "The last user message" is the template's `message ==
 * user_messages[-1]`, which compares whole messages: every user message
 * equal to the last one qualifies.  A forced call (tool_choice "required"
 * or a named function) renders as any other request: the engine forces the
 * answer's `[TOOL_CALLS] [{…}]` itself.  Text parts are joined by "\n".
 */
#include <stdio.h>
#include <string.h>

#include "pic_json.h"
#include "pic_template.h"
#include "pic_template_int.h"

typedef struct {
    const char *inst;           /* a user turn's opening */
    const char *tools;          /* the tool listing's opening */
    const char *calls;          /* a tool-call turn's opening */
    const char *results;        /* a tool result's opening */
    int         answer_space;   /* " " + content|trim before an assistant's eos */
    int         system_last;    /* system only on a user message that is last */
} mistral_variant;

static const mistral_variant MISTRAL_V3 = {
    "[INST] ", "[AVAILABLE_TOOLS] [", "[TOOL_CALLS] [", "[TOOL_RESULTS] {\"content\": ", 1, 0,
};

static const mistral_variant MISTRAL_TEKKEN = {
    "[INST]", "[AVAILABLE_TOOLS][", "[TOOL_CALLS][", "[TOOL_RESULTS]{\"content\": ", 0, 1,
};

static const char MISTRAL_BOS[] = "<s>";
static const char MISTRAL_EOS[] = "</s>";

/* Whether two messages are equal as the template's dicts compare (role and
 * content; tool calls and ids are not on user messages). */
static int
mistral_same_user(const pic_message *a, const pic_message *b, pic_rtext *x, pic_rtext *y)
{
    pic_rt_content(x, a, "\n", NULL, 0);
    pic_rt_content(y, b, "\n", NULL, 0);
    return a->content_kind == b->content_kind && pic_rt_len(x) == pic_rt_len(y)
           && memcmp(pic_rt_data(x), pic_rt_data(y), pic_rt_len(x)) == 0;
}

static int
mistral_param(pic_error *err, const char *fmt, size_t i, const char *code, const char *msg)
{
    char param[PIC_ERROR_PARAM_MAX];

    snprintf(param, sizeof(param), fmt, i);
    return pic_error_invalid(err, param, code, "%s", msg);
}

/* The template's raise_exception checks, before any output. */
static int
mistral_check(const pic_template_opts *o, const pic_request *req, size_t first, pic_error *err)
{
    size_t k = 0;

    (void) o;
    for (size_t i = first; i < req->n_messages; i++) {
        const pic_message *m = &req->messages[i];

        if (m->role == PIC_ROLE_TOOL || m->n_tool_calls) {
            continue;
        }
        if ((m->role == PIC_ROLE_USER) != (k % 2 == 0)) {
            return mistral_param(err, "messages[%zu].role", i, "invalid_value",
                                 "After the optional system message, conversation roles "
                                 "must alternate user/assistant/user/assistant/...");
        }
        k++;
    }
    for (size_t i = first; i < req->n_messages; i++) {
        const pic_message *m = &req->messages[i];

        if (m->role == PIC_ROLE_SYSTEM) {
            return mistral_param(err, "messages[%zu].role", i, "invalid_value",
                                 "Only user and assistant roles are supported, with the "
                                 "exception of an initial optional system message!");
        }
        for (size_t j = 0; j < m->n_tool_calls; j++) {
            if (m->tool_calls[j].id.len != 9) {
                char param[PIC_ERROR_PARAM_MAX];
                snprintf(param, sizeof(param), "messages[%zu].tool_calls[%zu].id", i, j);
                return pic_error_invalid(err, param, "invalid_value",
                                         "Tool call IDs should be alphanumeric strings "
                                         "with length 9!");
            }
        }
        if (m->role == PIC_ROLE_TOOL && m->tool_call_id.len != 9) {
            return mistral_param(err, "messages[%zu].tool_call_id", i, "invalid_value",
                                 "Tool call IDs should be alphanumeric strings with "
                                 "length 9!");
        }
    }
    return 0;
}

/* The tool listing: each tool's function as the template writes it (string
 * values raw between quotes, others tojson, "return" left out). */
static void
mistral_tools(pic_render *r, const mistral_variant *v, const pic_request *req, pic_buf *tmp)
{
    int32_t k = 0;

    pic_glue(r, v->tools);
    for (const cJSON *t = req->tools->child; t && !r->oom; t = t->next, k++) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        int          any = 0;

        if (k > 0) {
            pic_glue(r, ", ");
        }
        pic_buf_reset(tmp);
        pic_buf_appends(tmp, "{\"type\": \"function\", \"function\": {");
        for (const cJSON *f = fn ? fn->child : NULL; f; f = f->next) {
            const char *key = f->string ? f->string : "";

            if (strcmp(key, "return") == 0) {
                continue;
            }
            if (any++) {
                pic_buf_appends(tmp, ", ");
            }
            pic_buf_appendc(tmp, '"');
            pic_buf_appends(tmp, key);
            pic_buf_appends(tmp, "\": ");
            if (cJSON_IsString(f)) {
                pic_buf_appendc(tmp, '"');
                pic_buf_appends(tmp, f->valuestring);
                pic_buf_appendc(tmp, '"');
            } else {
                pic_json_write_py(tmp, f);
            }
        }
        pic_buf_appends(tmp, "}}");
        if (tmp->oom) {
            r->oom = 1;
            return;
        }
        pic_render_push(r, PIC_REGION_TOOL_SCHEMA, k, 0, tmp->data, tmp->len);
    }
    pic_glue(r, "][/AVAILABLE_TOOLS]");
}

int
pic_render_mistral(const pic_template_opts *o, const pic_request *req, pic_render *r,
                   pic_error *err)
{
    const mistral_variant *v = o->dialect == PIC_TEMPLATE_MISTRAL_NEMO ? &MISTRAL_TEKKEN
                                                                       : &MISTRAL_V3;
    const pic_message     *msgs = req->messages;
    size_t                 n = req->n_messages, first = 0, last_user = n;
    pic_rtext              rt, rt2;
    pic_buf                tmp;
    int                    rc = 0;

    if (msgs[0].role == PIC_ROLE_SYSTEM) {
        first = 1;
    }
    if (mistral_check(o, req, first, err) != 0) {
        return -1;
    }
    for (size_t i = n; i-- > first; ) {
        if (msgs[i].role == PIC_ROLE_USER) {
            last_user = i;
            break;
        }
    }

    pic_rt_init(&rt);
    pic_rt_init(&rt2);
    pic_buf_init(&tmp);

    pic_glue(r, MISTRAL_BOS);
    for (size_t i = first; i < n && !r->oom; i++) {
        const pic_message *m = &msgs[i];

        if (m->role == PIC_ROLE_USER) {
            int is_last = mistral_same_user(m, &msgs[last_user], &rt, &rt2);
            int with_system = first == 1 && (v->system_last ? i == n - 1 : is_last);

            if (req->tools && is_last) {
                mistral_tools(r, v, req, &tmp);
            }
            pic_glue(r, v->inst);
            if (with_system) {
                pic_rt_content(&rt, &msgs[0], "\n", o->split, o->split_parts);
                pic_rt_emit(r, &rt, PIC_REGION_SYSTEM, 0);
                pic_glue(r, "\n\n");
            }
            pic_rt_content(&rt, m, "\n", o->split, o->split_parts);
            pic_rt_emit(r, &rt, PIC_REGION_USER, (int32_t) i);
            pic_glue(r, "[/INST]");

        } else if (m->n_tool_calls) {
            pic_glue(r, v->calls);
            for (size_t j = 0; j < m->n_tool_calls; j++) {
                const pic_tool_call *tc = &m->tool_calls[j];

                if (j > 0) {
                    pic_glue(r, ", ");
                }
                /* tool_call.function|tojson minus its "}", then the id */
                pic_buf_reset(&tmp);
                pic_buf_appends(&tmp, "{\"name\": ");
                pic_json_write_string(&tmp, tc->name.ptr, tc->name.len);
                pic_buf_appends(&tmp, ", \"arguments\": ");
                pic_json_write_py(&tmp, tc->args);
                pic_buf_appends(&tmp, ", \"id\": \"");
                pic_buf_append(&tmp, tc->id.ptr, tc->id.len);
                pic_buf_appends(&tmp, "\"}");
                if (tmp.oom) {
                    r->oom = 1;
                    break;
                }
                pic_render_push(r, PIC_REGION_ASSISTANT, (int32_t) i, (uint32_t) j, tmp.data,
                                tmp.len);
            }
            pic_glue(r, "]");
            pic_glue(r, MISTRAL_EOS);

        } else if (m->role == PIC_ROLE_ASSISTANT) {
            pic_rt_content(&rt, m, "\n", NULL, 0);
            if (v->answer_space) {
                pic_glue(r, " ");
                pic_rt_trim(&rt);
            }
            pic_rt_emit(r, &rt, PIC_REGION_ASSISTANT, (int32_t) i);
            pic_glue(r, MISTRAL_EOS);

        } else if (m->role == PIC_ROLE_TOOL) {
            pic_glue(r, v->results);
            pic_rt_content(&rt, m, "\n", o->split, o->split_parts);
            pic_rt_emit(r, &rt, PIC_REGION_TOOL_RESULT, (int32_t) i);
            pic_glue(r, ", \"call_id\": \"");
            pic_render_push(r, PIC_REGION_GLUE, -1, 0, m->tool_call_id.ptr,
                            m->tool_call_id.len);
            pic_glue(r, "\"}[/TOOL_RESULTS]");
        }
    }

    if (r->oom || rt.oom || rt2.oom || tmp.oom) {
        rc = pic_error_oom(err, __func__);
    }
    pic_rt_free(&rt);
    pic_rt_free(&rt2);
    pic_buf_free(&tmp);
    return rc;
}
