/*
 * pic_request.c — OpenAI request parsing and validation (see pic_request.h).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pic_json.h"
#include "pic_request.h"

#define PIC_PARAM_MAX PIC_ERROR_PARAM_MAX

static const pic_str pic_str_empty = { "", 0 };

void
pic_request_limits_default(pic_request_limits *lim)
{
    lim->max_depth = 64;
    lim->max_messages = 4096;
    lim->max_parts = 1024;
    lim->max_tools = 512;
    lim->max_tool_calls = 256;
    lim->max_prompt_tokens = 1u << 20;
    lim->foreign = 0;
}

/* --- small helpers --- */

static const char *
pic_param(char *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, PIC_PARAM_MAX, fmt, ap);
    va_end(ap);
    return buf;
}

static pic_str
pic_str_of(const cJSON *s)
{
    pic_str r = { s->valuestring, strlen(s->valuestring) };
    return r;
}

static const char *
pic_json_type_name(const cJSON *v)
{
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v))   return "a boolean";
    if (cJSON_IsNull(v))   return "null";
    if (cJSON_IsArray(v))  return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "invalid";
}

static int
pic_bad_type(pic_error *err, const char *param, const char *want, const cJSON *v)
{
    return pic_error_invalid(err, param, "invalid_type",
                             "Invalid type for '%s': expected %s, but got %s.",
                             param, want, pic_json_type_name(v));
}

/* JSON null and absent are the same for optional fields. */
static const cJSON *
pic_field(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

/* An integral JSON number within +-2^53. */
static int
pic_get_int(const cJSON *v, const char *param, int64_t lo, int64_t hi,
            int64_t *out, pic_error *err)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)
        || fabs(v->valuedouble) > 9007199254740992.0) {
        return pic_bad_type(err, param, "an integer", v);
    }
    int64_t x = (int64_t) v->valuedouble;
    if (x < lo || x > hi) {
        return pic_error_invalid(err, param, "invalid_value",
                                 "'%s' must be between %lld and %lld.", param,
                                 (long long) lo, (long long) hi);
    }
    *out = x;
    return 0;
}

static int
pic_get_number(const cJSON *v, const char *param, double lo, double hi,
               double *out, pic_error *err)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        return pic_bad_type(err, param, "a number", v);
    }
    if (v->valuedouble < lo || v->valuedouble > hi) {
        return pic_error_invalid(err, param, "invalid_value",
                                 "'%s' must be between %g and %g.", param, lo, hi);
    }
    *out = v->valuedouble;
    return 0;
}

static int
pic_get_bool(const cJSON *v, const char *param, int *out, pic_error *err)
{
    if (!cJSON_IsBool(v)) {
        return pic_bad_type(err, param, "a boolean", v);
    }
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 0;
}

/* --- messages --- */

static int
pic_parse_content(pic_message *m, const cJSON *content, size_t mi,
                  const pic_request_limits *lim, pic_error *err)
{
    char param[PIC_PARAM_MAX];

    if (cJSON_IsString(content)) {
        m->content_kind = PIC_CONTENT_STRING;
        m->content = pic_str_of(content);
        return 0;
    }
    if (!cJSON_IsArray(content)) {
        return pic_bad_type(err, pic_param(param, "messages[%zu].content", mi),
                            "a string or an array of content parts", content);
    }
    size_t n = (size_t) cJSON_GetArraySize(content);
    if (n > lim->max_parts) {
        return pic_error_invalid(err, pic_param(param, "messages[%zu].content", mi),
                                 "array_above_max_length",
                                 "'%s' has %zu content parts, more than the limit of %zu.",
                                 param, n, lim->max_parts);
    }
    m->content_kind = PIC_CONTENT_PARTS;
    m->parts = calloc(n ? n : 1, sizeof(pic_str));
    if (!m->parts) {
        return pic_error_oom(err, __func__);
    }
    size_t j = 0;
    for (const cJSON *part = content->child; part; part = part->next, j++) {
        if (!cJSON_IsObject(part)) {
            return pic_bad_type(err, pic_param(param, "messages[%zu].content[%zu]", mi, j),
                                "an object", part);
        }
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (!type) {
            return pic_error_invalid(err,
                pic_param(param, "messages[%zu].content[%zu].type", mi, j),
                "missing_required_parameter", "Missing required parameter: '%s'.", param);
        }
        if (!cJSON_IsString(type)) {
            return pic_bad_type(err,
                pic_param(param, "messages[%zu].content[%zu].type", mi, j), "a string", type);
        }
        if (strcmp(type->valuestring, "text") != 0) {
            return pic_error_invalid(err,
                pic_param(param, "messages[%zu].content[%zu].type", mi, j),
                "unsupported_content_type",
                "'%s': only content parts of type 'text' are supported.", param);
        }
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!text) {
            return pic_error_invalid(err,
                pic_param(param, "messages[%zu].content[%zu].text", mi, j),
                "missing_required_parameter", "Missing required parameter: '%s'.", param);
        }
        if (!cJSON_IsString(text)) {
            return pic_bad_type(err,
                pic_param(param, "messages[%zu].content[%zu].text", mi, j), "a string", text);
        }
        m->parts[j] = pic_str_of(text);
    }
    m->n_parts = n;
    return 0;
}

static int
pic_parse_tool_calls(pic_message *m, const cJSON *calls, size_t mi,
                     const pic_request_limits *lim, pic_error *err)
{
    char param[PIC_PARAM_MAX];

    if (!cJSON_IsArray(calls)) {
        return pic_bad_type(err, pic_param(param, "messages[%zu].tool_calls", mi),
                            "an array", calls);
    }
    size_t n = (size_t) cJSON_GetArraySize(calls);
    if (n > lim->max_tool_calls) {
        return pic_error_invalid(err, pic_param(param, "messages[%zu].tool_calls", mi),
                                 "array_above_max_length",
                                 "'%s' has %zu entries, more than the limit of %zu.",
                                 param, n, lim->max_tool_calls);
    }
    m->tool_calls = calloc(n ? n : 1, sizeof(pic_tool_call));
    if (!m->tool_calls) {
        return pic_error_oom(err, __func__);
    }
    size_t j = 0;
    for (const cJSON *c = calls->child; c; c = c->next, j++) {
        pic_tool_call *tc = &m->tool_calls[j];
        m->n_tool_calls = j + 1;        /* so pic_request_free sees tc->args */
        tc->id = pic_str_empty;
        if (!cJSON_IsObject(c)) {
            return pic_bad_type(err, pic_param(param, "messages[%zu].tool_calls[%zu]", mi, j),
                                "an object", c);
        }
        const cJSON *id = pic_field(c, "id");
        if (id) {
            if (!cJSON_IsString(id)) {
                return pic_bad_type(err,
                    pic_param(param, "messages[%zu].tool_calls[%zu].id", mi, j), "a string", id);
            }
            tc->id = pic_str_of(id);
        }
        const cJSON *type = pic_field(c, "type");
        if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0)) {
            return pic_error_invalid(err,
                pic_param(param, "messages[%zu].tool_calls[%zu].type", mi, j),
                "invalid_value", "'%s' must be 'function'.", param);
        }
        const cJSON *fn = pic_field(c, "function");
        if (!fn) {
            return pic_error_invalid(err,
                pic_param(param, "messages[%zu].tool_calls[%zu].function", mi, j),
                "missing_required_parameter", "Missing required parameter: '%s'.", param);
        }
        if (!cJSON_IsObject(fn)) {
            return pic_bad_type(err,
                pic_param(param, "messages[%zu].tool_calls[%zu].function", mi, j),
                "an object", fn);
        }
        const cJSON *name = pic_field(fn, "name");
        if (!name || !cJSON_IsString(name) || !name->valuestring[0]) {
            return pic_error_invalid(err,
                pic_param(param, "messages[%zu].tool_calls[%zu].function.name", mi, j),
                name ? "invalid_value" : "missing_required_parameter",
                "'%s' must be a non-empty string.", param);
        }
        tc->name = pic_str_of(name);
        const cJSON *args = pic_field(fn, "arguments");
        pic_param(param, "messages[%zu].tool_calls[%zu].function.arguments", mi, j);
        if (!args) {
            return pic_error_invalid(err, param, "missing_required_parameter",
                                     "Missing required parameter: '%s'.", param);
        }
        if (!cJSON_IsString(args)) {
            return pic_bad_type(err, param, "a string", args);
        }
        tc->arguments = pic_str_of(args);
        tc->args = pic_json_parse(tc->arguments.ptr, tc->arguments.len,
                                  lim->max_depth, param, err);
        if (!tc->args) {
            return -1;
        }
        if (!cJSON_IsObject(tc->args)) {
            return pic_error_invalid(err, param, "invalid_value",
                                     "'%s' must be a JSON object encoded as a string.",
                                     param);
        }
    }
    return 0;
}

static int
pic_parse_message(pic_message *m, const cJSON *msg, size_t mi,
                  const pic_request_limits *lim, pic_error *err)
{
    char param[PIC_PARAM_MAX];

    m->content = pic_str_empty;
    m->reasoning = pic_str_empty;
    m->tool_call_id = pic_str_empty;

    if (!cJSON_IsObject(msg)) {
        return pic_bad_type(err, pic_param(param, "messages[%zu]", mi), "an object", msg);
    }
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
    pic_param(param, "messages[%zu].role", mi);
    if (!role) {
        return pic_error_invalid(err, param, "missing_required_parameter",
                                 "Missing required parameter: '%s'.", param);
    }
    if (!cJSON_IsString(role)) {
        return pic_bad_type(err, param, "a string", role);
    }
    const char *r = role->valuestring;
    if (!strcmp(r, "system")) {
        m->role = PIC_ROLE_SYSTEM;
    } else if (!strcmp(r, "developer")) {
        m->role = PIC_ROLE_SYSTEM;
        m->from_developer = 1;
    } else if (!strcmp(r, "user")) {
        m->role = PIC_ROLE_USER;
    } else if (!strcmp(r, "assistant")) {
        m->role = PIC_ROLE_ASSISTANT;
    } else if (!strcmp(r, "tool")) {
        m->role = PIC_ROLE_TOOL;
    } else {
        return pic_error_invalid(err, param, "invalid_value",
                                 "Invalid value for '%s': expected one of 'system', "
                                 "'developer', 'user', 'assistant' or 'tool'.", param);
    }

    const cJSON *content = pic_field(msg, "content");
    if (content && pic_parse_content(m, content, mi, lim, err) != 0) {
        return -1;
    }

    const cJSON *calls = pic_field(msg, "tool_calls");
    if (calls) {
        if (m->role != PIC_ROLE_ASSISTANT) {
            return pic_error_invalid(err, pic_param(param, "messages[%zu].tool_calls", mi),
                                     "invalid_value",
                                     "'%s' is only allowed on assistant messages.", param);
        }
        if (pic_parse_tool_calls(m, calls, mi, lim, err) != 0) {
            return -1;
        }
    }

    if (!content && !(m->role == PIC_ROLE_ASSISTANT && m->n_tool_calls > 0)) {
        return pic_error_invalid(err, pic_param(param, "messages[%zu].content", mi),
                                 "missing_required_parameter",
                                 "Missing required parameter: '%s'.", param);
    }

    const cJSON *reasoning = pic_field(msg, "reasoning_content");
    if (reasoning && m->role == PIC_ROLE_ASSISTANT) {
        if (!cJSON_IsString(reasoning)) {
            return pic_bad_type(err, pic_param(param, "messages[%zu].reasoning_content", mi),
                                "a string", reasoning);
        }
        m->has_reasoning = 1;
        m->reasoning = pic_str_of(reasoning);
    }

    const cJSON *tcid = pic_field(msg, "tool_call_id");
    if (tcid && m->role == PIC_ROLE_TOOL) {
        if (!cJSON_IsString(tcid)) {
            return pic_bad_type(err, pic_param(param, "messages[%zu].tool_call_id", mi),
                                "a string", tcid);
        }
        m->tool_call_id = pic_str_of(tcid);
    }

    const cJSON *name = pic_field(msg, "name");
    if (name && !cJSON_IsString(name)) {
        return pic_bad_type(err, pic_param(param, "messages[%zu].name", mi), "a string", name);
    }
    return 0;
}

static int
pic_parse_tools(pic_request *req, const cJSON *tools, const pic_request_limits *lim,
                pic_error *err)
{
    char param[PIC_PARAM_MAX];

    if (!cJSON_IsArray(tools)) {
        return pic_bad_type(err, "tools", "an array", tools);
    }
    size_t n = (size_t) cJSON_GetArraySize(tools);
    if (n > lim->max_tools) {
        return pic_error_invalid(err, "tools", "array_above_max_length",
                                 "'tools' has %zu entries, more than the limit of %zu.",
                                 n, lim->max_tools);
    }
    size_t j = 0;
    for (const cJSON *t = tools->child; t; t = t->next, j++) {
        if (!cJSON_IsObject(t)) {
            return pic_bad_type(err, pic_param(param, "tools[%zu]", j), "an object", t);
        }
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        if (!type || !cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0) {
            return pic_error_invalid(err, pic_param(param, "tools[%zu].type", j),
                                     type ? "invalid_value" : "missing_required_parameter",
                                     "'%s' must be 'function'.", param);
        }
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!fn || !cJSON_IsObject(fn)) {
            return pic_error_invalid(err, pic_param(param, "tools[%zu].function", j),
                                     fn ? "invalid_type" : "missing_required_parameter",
                                     "'%s' must be an object.", param);
        }
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!name || !cJSON_IsString(name) || !name->valuestring[0]) {
            return pic_error_invalid(err, pic_param(param, "tools[%zu].function.name", j),
                                     name ? "invalid_value" : "missing_required_parameter",
                                     "'%s' must be a non-empty string.", param);
        }
        const cJSON *desc = pic_field(fn, "description");
        if (desc && !cJSON_IsString(desc)) {
            return pic_bad_type(err, pic_param(param, "tools[%zu].function.description", j),
                                "a string", desc);
        }
        const cJSON *params = pic_field(fn, "parameters");
        if (params && !cJSON_IsObject(params)) {
            return pic_bad_type(err, pic_param(param, "tools[%zu].function.parameters", j),
                                "an object", params);
        }
    }
    if (n > 0) {
        req->tools = tools;
        req->n_tools = n;
    }
    return 0;
}

/* --- shared sampling fields --- */

static int
pic_parse_sampling(pic_request *req, const cJSON *root, pic_error *err)
{
    const cJSON *v;
    int64_t      x;

    if ((v = pic_field(root, "stream")) && pic_get_bool(v, "stream", &req->stream, err) != 0) {
        return -1;
    }
    if ((v = pic_field(root, "stream_options"))) {
        if (!cJSON_IsObject(v)) {
            return pic_bad_type(err, "stream_options", "an object", v);
        }
        const cJSON *u = pic_field(v, "include_usage");
        if (u && pic_get_bool(u, "stream_options.include_usage", &req->include_usage, err) != 0) {
            return -1;
        }
    }
    if ((v = pic_field(root, "max_tokens"))) {
        if (pic_get_int(v, "max_tokens", 1, INT32_MAX, &req->max_tokens, err) != 0) {
            return -1;
        }
    }
    if ((v = pic_field(root, "max_completion_tokens"))) {
        if (pic_get_int(v, "max_completion_tokens", 1, INT32_MAX, &req->max_tokens, err) != 0) {
            return -1;
        }
    }
    if ((v = pic_field(root, "temperature"))) {
        if (pic_get_number(v, "temperature", 0.0, 2.0, &req->temperature, err) != 0) {
            return -1;
        }
        req->has_temperature = 1;
    }
    if ((v = pic_field(root, "top_p"))) {
        if (pic_get_number(v, "top_p", 0.0, 1.0, &req->top_p, err) != 0) {
            return -1;
        }
        req->has_top_p = 1;
    }
    if ((v = pic_field(root, "top_k"))) {
        if (pic_get_int(v, "top_k", -1, INT32_MAX, &req->top_k, err) != 0) {
            return -1;
        }
        req->has_top_k = 1;
    }
    if ((v = pic_field(root, "seed"))) {
        if (pic_get_int(v, "seed", -9007199254740992LL, 9007199254740992LL,
                        &req->seed, err) != 0) {
            return -1;
        }
        req->has_seed = 1;
    }
    if ((v = pic_field(root, "n"))) {
        if (pic_get_int(v, "n", 1, 128, &x, err) != 0) {
            return -1;
        }
        if (x != 1) {
            return pic_error_invalid(err, "n", "unsupported_value",
                                     "Only n=1 is supported.");
        }
    }
    if ((v = pic_field(root, "stop"))) {
        if (cJSON_IsString(v)) {
            req->stop[0] = pic_str_of(v);
            req->n_stop = 1;
        } else if (cJSON_IsArray(v)) {
            char   param[PIC_PARAM_MAX];
            size_t j = 0;
            if (cJSON_GetArraySize(v) > PIC_STOP_MAX) {
                return pic_error_invalid(err, "stop", "array_above_max_length",
                                         "'stop' allows at most %d sequences.", PIC_STOP_MAX);
            }
            for (const cJSON *s = v->child; s; s = s->next, j++) {
                if (!cJSON_IsString(s)) {
                    return pic_bad_type(err, pic_param(param, "stop[%zu]", j), "a string", s);
                }
                req->stop[j] = pic_str_of(s);
            }
            req->n_stop = j;
        } else {
            return pic_bad_type(err, "stop", "a string or an array of strings", v);
        }
    }
    return 0;
}

/* --- the parameter list: what we serve, what we refuse --- */

/* Top-level fields a request may carry.  Fields read elsewhere (model,
 * messages, prompt, tools, chat_template_kwargs, add_generation_prompt,
 * ignore_eos, thinking_budget, pic: the gateway's plan) are listed so that
 * they pass; fields we accept without effect are only those that change no
 * output (user, metadata, prompt_cache_key: our caching is automatic).
 * Anything else is a 400 naming it, as OpenAI answers "Unrecognized
 * request argument". */
static const char *const pic_chat_fields[] = {
    "model", "messages", "stream", "stream_options", "max_tokens",
    "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "n",
    "stop", "tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs",
    "add_generation_prompt", "logprobs", "top_logprobs", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "logit_bias", "response_format", "user",
    "metadata", "store", "service_tier", "modalities", "prompt_cache_key",
    "safety_identifier", "ignore_eos", "thinking_budget", "pic", NULL
};

static const char *const pic_completion_fields[] = {
    "model", "prompt", "stream", "stream_options", "max_tokens", "temperature", "top_p",
    "top_k", "min_p", "seed", "n", "best_of", "echo", "suffix", "stop", "logprobs",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "user",
    "metadata", "prompt_cache_key", "safety_identifier", "ignore_eos", "pic", NULL
};

static int
pic_unsupported(pic_error *err, const char *param, const char *why)
{
    return pic_error_invalid(err, param, "unsupported_parameter",
                             "Unsupported parameter: '%s' %s.", param, why);
}

static int
pic_check_fields(const cJSON *root, pic_req_kind kind, pic_error *err)
{
    const char *const *list = kind == PIC_REQ_CHAT ? pic_chat_fields : pic_completion_fields;

    for (const cJSON *f = root->child; f; f = f->next) {
        int known = 0;
        for (size_t i = 0; list[i] != NULL && !known; i++) {
            known = strcmp(f->string, list[i]) == 0;
        }
        if (!known) {
            return pic_error_invalid(err, f->string, "unknown_parameter",
                                     "Unrecognized request argument supplied: %s",
                                     f->string);
        }
    }
    return 0;
}

static int
pic_parse_logit_bias(pic_request *req, const cJSON *v, pic_error *err)
{
    char param[PIC_PARAM_MAX];

    if (!cJSON_IsObject(v)) {
        return pic_bad_type(err, "logit_bias", "an object", v);
    }
    if (cJSON_GetArraySize(v) > 1024) {
        return pic_error_invalid(err, "logit_bias", "invalid_value",
                                 "'logit_bias' may hold at most 1024 tokens.");
    }
    for (const cJSON *b = v->child; b; b = b->next) {
        const char *k = b->string;
        char       *end;
        double      x;
        long        id = strtol(k, &end, 10);

        pic_param(param, "logit_bias.%s", k);
        if (k[0] < '0' || k[0] > '9' || *end != '\0' || id < 0 || id > INT32_MAX) {
            return pic_error_invalid(err, param, "invalid_value",
                                     "'logit_bias' keys must be token ids (decimal "
                                     "integers), not '%s'.", k);
        }
        if (pic_get_number(b, param, -100.0, 100.0, &x, err) != 0) {
            return -1;
        }
    }
    req->logit_bias = cJSON_GetArraySize(v) > 0 ? v : NULL;
    return 0;
}

/* The penalties, biases and logprobs both endpoints share. */
static int
pic_parse_extra_sampling(pic_request *req, const cJSON *root, pic_error *err)
{
    const cJSON *v;
    int64_t      x;

    if ((v = pic_field(root, "min_p"))) {
        if (pic_get_number(v, "min_p", 0.0, 1.0, &req->min_p, err) != 0) {
            return -1;
        }
        req->has_min_p = 1;
    }
    if ((v = pic_field(root, "presence_penalty"))
        && pic_get_number(v, "presence_penalty", -2.0, 2.0, &req->presence_penalty, err) != 0) {
        return -1;
    }
    if ((v = pic_field(root, "frequency_penalty"))
        && pic_get_number(v, "frequency_penalty", -2.0, 2.0, &req->frequency_penalty,
                          err) != 0) {
        return -1;
    }
    if ((v = pic_field(root, "repetition_penalty"))) {
        if (pic_get_number(v, "repetition_penalty", 0.0, 2.0, &req->repetition_penalty,
                           err) != 0) {
            return -1;
        }
        if (req->repetition_penalty <= 0.0) {
            return pic_error_invalid(err, "repetition_penalty", "invalid_value",
                                     "'repetition_penalty' must be greater than 0.");
        }
    }
    if ((v = pic_field(root, "logit_bias")) && pic_parse_logit_bias(req, v, err) != 0) {
        return -1;
    }
    if (req->kind == PIC_REQ_COMPLETION) {
        /* completions: logprobs is the number of alternatives (0..5) */
        if ((v = pic_field(root, "logprobs"))) {
            if (pic_get_int(v, "logprobs", 0, 5, &x, err) != 0) {
                return -1;
            }
            req->logprobs = 1;
            req->top_logprobs = (int) x;
        }
        if ((v = pic_field(root, "echo")) && !cJSON_IsFalse(v)) {
            return pic_unsupported(err, "echo", "is not supported (only false)");
        }
        if ((v = pic_field(root, "best_of"))) {
            if (pic_get_int(v, "best_of", 1, 128, &x, err) != 0) {
                return -1;
            }
            if (x != 1) {
                return pic_unsupported(err, "best_of", "is not supported (only 1)");
            }
        }
        if ((v = pic_field(root, "suffix"))
            && !(cJSON_IsString(v) && v->valuestring[0] == '\0')) {
            return pic_unsupported(err, "suffix", "is not supported (no fill-in-the-middle)");
        }
        return 0;
    }
    if ((v = pic_field(root, "logprobs")) && pic_get_bool(v, "logprobs", &req->logprobs,
                                                         err) != 0) {
        return -1;
    }
    if ((v = pic_field(root, "top_logprobs"))) {
        if (pic_get_int(v, "top_logprobs", 0, PIC_TOP_LOGPROBS_MAX, &x, err) != 0) {
            return -1;
        }
        if (!req->logprobs && x > 0) {
            return pic_error_invalid(err, "top_logprobs", "invalid_value",
                                     "'top_logprobs' requires 'logprobs' to be true.");
        }
        req->top_logprobs = (int) x;
    }
    if ((v = pic_field(root, "store")) && !cJSON_IsFalse(v)) {
        return pic_unsupported(err, "store", "is not supported (completions are never "
                               "stored; only false)");
    }
    if ((v = pic_field(root, "service_tier"))
        && !(cJSON_IsString(v) && (strcmp(v->valuestring, "auto") == 0
                                   || strcmp(v->valuestring, "default") == 0))) {
        return pic_unsupported(err, "service_tier", "is not supported (only 'auto' or "
                               "'default')");
    }
    if ((v = pic_field(root, "modalities"))) {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 1 || !cJSON_IsString(v->child)
            || strcmp(v->child->valuestring, "text") != 0) {
            return pic_unsupported(err, "modalities", "is not supported (only [\"text\"])");
        }
    }
    return 0;
}

/* tool_choice, parallel_tool_calls and response_format (chat, after tools). */
static int
pic_parse_output_form(pic_request *req, const cJSON *root, pic_error *err)
{
    const cJSON *v;

    if ((v = pic_field(root, "tool_choice"))) {
        if (cJSON_IsString(v)) {
            if (strcmp(v->valuestring, "none") == 0) {
                req->tool_choice = PIC_TOOL_CHOICE_NONE;
            } else if (strcmp(v->valuestring, "auto") == 0) {
                req->tool_choice = PIC_TOOL_CHOICE_AUTO;
            } else if (strcmp(v->valuestring, "required") == 0) {
                req->tool_choice = PIC_TOOL_CHOICE_REQUIRED;
            } else {
                return pic_error_invalid(err, "tool_choice", "invalid_value",
                                         "Invalid value for 'tool_choice': expected 'none', "
                                         "'auto', 'required' or a function object.");
            }
        } else if (cJSON_IsObject(v)) {
            const cJSON *type = pic_field(v, "type");
            const cJSON *fn = pic_field(v, "function");
            const cJSON *name = fn ? pic_field(fn, "name") : NULL;

            if (!type || !cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0) {
                return pic_error_invalid(err, "tool_choice.type", "invalid_value",
                                         "'tool_choice.type' must be 'function'.");
            }
            if (!name || !cJSON_IsString(name) || !name->valuestring[0]) {
                return pic_error_invalid(err, "tool_choice.function.name", "invalid_value",
                                         "'tool_choice.function.name' must be a non-empty "
                                         "string.");
            }
            req->tool_choice = PIC_TOOL_CHOICE_FUNCTION;
            req->tool_choice_name = pic_str_of(name);
        } else {
            return pic_bad_type(err, "tool_choice", "a string or an object", v);
        }
        if (req->tool_choice >= PIC_TOOL_CHOICE_REQUIRED && req->tools == NULL) {
            return pic_error_invalid(err, "tool_choice", "invalid_value",
                                     "'tool_choice' other than 'none' or 'auto' requires "
                                     "'tools'.");
        }
        if (req->tool_choice == PIC_TOOL_CHOICE_FUNCTION) {
            int found = 0;
            for (const cJSON *t = req->tools->child; t && !found; t = t->next) {
                const cJSON *n = cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
                found = strcmp(n->valuestring, req->tool_choice_name.ptr) == 0;
            }
            if (!found) {
                return pic_error_invalid(err, "tool_choice.function.name", "invalid_value",
                                         "Tool '%s' named in 'tool_choice' is not in 'tools'.",
                                         req->tool_choice_name.ptr);
            }
        }
    }
    if ((v = pic_field(root, "parallel_tool_calls"))
        && pic_get_bool(v, "parallel_tool_calls", &req->parallel_tool_calls, err) != 0) {
        return -1;
    }
    if ((v = pic_field(root, "response_format"))) {
        const cJSON *type = cJSON_IsObject(v) ? pic_field(v, "type") : NULL;

        if (!cJSON_IsObject(v)) {
            return pic_bad_type(err, "response_format", "an object", v);
        }
        if (!type || !cJSON_IsString(type)) {
            return pic_error_invalid(err, "response_format.type", "invalid_value",
                                     "'response_format.type' must be 'text', 'json_object' "
                                     "or 'json_schema'.");
        }
        if (strcmp(type->valuestring, "text") == 0) {
            req->response_format = PIC_RESPONSE_TEXT;
        } else if (strcmp(type->valuestring, "json_object") == 0) {
            req->response_format = PIC_RESPONSE_JSON_OBJECT;
        } else if (strcmp(type->valuestring, "json_schema") == 0) {
            const cJSON *js = pic_field(v, "json_schema");
            const cJSON *schema = js && cJSON_IsObject(js) ? pic_field(js, "schema") : NULL;

            if (!js || !cJSON_IsObject(js)) {
                return pic_error_invalid(err, "response_format.json_schema",
                                         "missing_required_parameter",
                                         "'response_format.json_schema' must be an object.");
            }
            if (schema && !cJSON_IsObject(schema)) {
                return pic_bad_type(err, "response_format.json_schema.schema", "an object",
                                    schema);
            }
            req->response_format = PIC_RESPONSE_JSON_SCHEMA;
            req->json_schema = schema;
        } else {
            return pic_error_invalid(err, "response_format.type", "invalid_value",
                                     "'response_format.type' must be 'text', 'json_object' "
                                     "or 'json_schema'.");
        }
    }
    return 0;
}

/* --- completions prompt --- */

static int
pic_parse_token_array(pic_request *req, const cJSON *arr, const char *param,
                      const pic_request_limits *lim, pic_error *err)
{
    size_t n = (size_t) cJSON_GetArraySize(arr);
    if (n > lim->max_prompt_tokens) {
        return pic_error_invalid(err, param, "array_above_max_length",
                                 "'%s' has %zu tokens, more than the limit of %zu.",
                                 param, n, lim->max_prompt_tokens);
    }
    req->prompt_tokens = malloc((n ? n : 1) * sizeof(int32_t));
    if (!req->prompt_tokens) {
        return pic_error_oom(err, __func__);
    }
    size_t j = 0;
    for (const cJSON *t = arr->child; t; t = t->next, j++) {
        int64_t id = 0;
        char    p[PIC_PARAM_MAX];
        if (pic_get_int(t, pic_param(p, "%s[%zu]", param, j), 0, INT32_MAX, &id, err) != 0) {
            return -1;
        }
        req->prompt_tokens[j] = (int32_t) id;
    }
    req->n_prompt_tokens = n;
    return 0;
}

static int
pic_parse_prompt(pic_request *req, const cJSON *root, const pic_request_limits *lim,
                 pic_error *err)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p || cJSON_IsNull(p)) {
        return pic_error_invalid(err, "prompt", "missing_required_parameter",
                                 "Missing required parameter: 'prompt'.");
    }
    if (cJSON_IsString(p)) {
        req->prompt = pic_str_of(p);
        return 0;
    }
    if (!cJSON_IsArray(p)) {
        return pic_bad_type(err, "prompt",
                            "a string, an array of strings or an array of token ids", p);
    }
    const cJSON *first = p->child;
    if (!first || cJSON_IsNumber(first)) {
        return pic_parse_token_array(req, p, "prompt", lim, err);
    }
    if (cJSON_GetArraySize(p) != 1) {
        return pic_error_invalid(err, "prompt", "unsupported_value",
                                 "Only one prompt per request is supported.");
    }
    if (cJSON_IsString(first)) {
        req->prompt = pic_str_of(first);
        return 0;
    }
    if (cJSON_IsArray(first)) {
        return pic_parse_token_array(req, first, "prompt[0]", lim, err);
    }
    return pic_bad_type(err, "prompt[0]", "a string or an array of token ids", first);
}

/* --- entry points --- */

void
pic_request_free(pic_request *req)
{
    if (req->messages) {
        for (size_t i = 0; i < req->n_messages; i++) {
            pic_message *m = &req->messages[i];
            for (size_t j = 0; j < m->n_tool_calls; j++) {
                cJSON_Delete(m->tool_calls[j].args);
            }
            free(m->tool_calls);
            free(m->parts);
        }
        free(req->messages);
    }
    free(req->prompt_tokens);
    cJSON_Delete(req->root);
    memset(req, 0, sizeof(*req));
}

static void
pic_request_reset(pic_request *req, pic_req_kind kind)
{
    memset(req, 0, sizeof(*req));
    req->kind = kind;
    req->model = pic_str_empty;
    req->prompt = pic_str_empty;
    req->enable_thinking = -1;
    req->add_generation_prompt = 1;
    req->max_tokens = -1;
    req->top_k = -1;
    req->repetition_penalty = 1.0;
    req->parallel_tool_calls = 1;
    req->tool_choice_name = pic_str_empty;
}

int
pic_request_parse(pic_request *req, pic_req_kind kind, const char *body, size_t len,
                  const pic_request_limits *lim_in, pic_error *err)
{
    pic_request_limits lim;
    char               param[PIC_PARAM_MAX];

    if (lim_in) {
        lim = *lim_in;
    } else {
        pic_request_limits_default(&lim);
    }
    pic_request_reset(req, kind);
    pic_error_clear(err);

    req->root = pic_json_parse(body, len, lim.max_depth, NULL, err);
    if (!req->root) {
        goto fail;
    }
    const cJSON *root = req->root;
    if (!cJSON_IsObject(root)) {
        pic_error_invalid(err, NULL, "invalid_type",
                          "The request body must be a JSON object.");
        goto fail;
    }

    /* no model: the one served (vLLM's and llama.cpp's servers do the same) */
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsNull(model) && !cJSON_IsString(model)) {
        pic_bad_type(err, "model", "a string", model);
        goto fail;
    }
    req->model = model && cJSON_IsString(model) ? pic_str_of(model) : pic_str_empty;

    if ((!lim.foreign && pic_check_fields(root, kind, err) != 0)
        || pic_parse_sampling(req, root, err) != 0
        || pic_parse_extra_sampling(req, root, err) != 0) {
        goto fail;
    }

    if (kind == PIC_REQ_COMPLETION) {
        if (pic_parse_prompt(req, root, &lim, err) != 0) {
            goto fail;
        }
        return 0;
    }

    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!msgs || cJSON_IsNull(msgs)) {
        pic_error_invalid(err, "messages", "missing_required_parameter",
                          "Missing required parameter: 'messages'.");
        goto fail;
    }
    if (!cJSON_IsArray(msgs)) {
        pic_bad_type(err, "messages", "an array", msgs);
        goto fail;
    }
    size_t n = (size_t) cJSON_GetArraySize(msgs);
    if (n == 0) {
        pic_error_invalid(err, "messages", "empty_array",
                          "'messages' must contain at least one message.");
        goto fail;
    }
    if (n > lim.max_messages) {
        pic_error_invalid(err, "messages", "array_above_max_length",
                          "'messages' has %zu entries, more than the limit of %zu.",
                          n, lim.max_messages);
        goto fail;
    }
    req->messages = calloc(n, sizeof(pic_message));
    if (!req->messages) {
        pic_error_oom(err, __func__);
        goto fail;
    }
    size_t i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        req->n_messages = i + 1;
        if (pic_parse_message(&req->messages[i], m, i, &lim, err) != 0) {
            goto fail;
        }
    }

    const cJSON *tools = pic_field(root, "tools");
    if (tools && pic_parse_tools(req, tools, &lim, err) != 0) {
        goto fail;
    }

    if (pic_parse_output_form(req, root, err) != 0) {
        goto fail;
    }

    const cJSON *kw = pic_field(root, "chat_template_kwargs");
    if (kw) {
        if (!cJSON_IsObject(kw)) {
            pic_bad_type(err, "chat_template_kwargs", "an object", kw);
            goto fail;
        }
        for (const cJSON *k = kw->child; k; k = k->next) {
            if (strcmp(k->string, "enable_thinking") != 0) {
                pic_error_invalid(err, pic_param(param, "chat_template_kwargs.%s", k->string),
                                  "unknown_parameter", "Unsupported chat template argument "
                                  "'%s' (the template reads only 'enable_thinking').",
                                  k->string);
                goto fail;
            }
        }
        const cJSON *et = pic_field(kw, "enable_thinking");
        if (et && pic_get_bool(et, pic_param(param, "chat_template_kwargs.enable_thinking"),
                               &req->enable_thinking, err) != 0) {
            goto fail;
        }
    }
    const cJSON *agp = pic_field(root, "add_generation_prompt");
    if (agp && pic_get_bool(agp, "add_generation_prompt", &req->add_generation_prompt,
                            err) != 0) {
        goto fail;
    }
    return 0;

fail:
    pic_request_free(req);
    pic_request_reset(req, kind);
    return -1;
}
