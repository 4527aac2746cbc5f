/*
 * pic_request.h — the OpenAI request model: /v1/chat/completions and
 * /v1/completions bodies parsed and strictly validated.
 *
 * Hostile input: the body goes through pic_json_parse (strict JSON,
 * well-formed UTF-8 in every string, nesting limit) and every field the
 * gateway or engine reads is type-checked; anything wrong yields a 400
 * invalid_request_error naming the offending field in `param`, e.g.
 * "messages[2].tool_calls[0].function.arguments".  Top-level fields are
 * checked against the list of parameters the project serves (docs/OPENAI.md's
 * table): an unknown one, or a known one with a value we cannot honour
 * (n > 1, echo, audio, reasoning_effort, ...), is a 400 naming it, never
 * silently ignored.  A body over the size limit is the caller's 413.
 *
 * Strings (pic_str) point into the request's cJSON tree: valid until
 * pic_request_free, NUL-terminated, never containing NUL.
 */
#ifndef PIC_REQUEST_H
#define PIC_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "pic_error.h"

typedef struct {
    const char *ptr;        /* NUL-terminated; "" (not NULL) when empty */
    size_t      len;
} pic_str;

typedef enum {
    PIC_REQ_CHAT = 0,       /* /v1/chat/completions */
    PIC_REQ_COMPLETION,     /* /v1/completions */
} pic_req_kind;

typedef enum {
    PIC_ROLE_SYSTEM = 0,    /* also "developer" (from_developer set) */
    PIC_ROLE_USER,
    PIC_ROLE_ASSISTANT,
    PIC_ROLE_TOOL,
} pic_role;

typedef enum {
    PIC_CONTENT_NONE = 0,   /* null or absent (assistant with tool_calls) */
    PIC_CONTENT_STRING,     /* "content": "..." */
    PIC_CONTENT_PARTS,      /* "content": [{"type":"text","text":"..."}, ...] */
} pic_content_kind;

typedef struct {
    pic_str id;             /* "" when absent */
    pic_str name;           /* function.name, non-empty */
    pic_str arguments;      /* function.arguments exactly as sent (JSON text) */
    cJSON  *args;           /* the arguments parsed: always a JSON object */
} pic_tool_call;

typedef struct {
    pic_role          role;
    int               from_developer;   /* role was "developer" */
    pic_content_kind  content_kind;
    pic_str           content;          /* CONTENT_STRING */
    pic_str          *parts;            /* CONTENT_PARTS: each text part */
    size_t            n_parts;
    int               has_reasoning;    /* reasoning_content is a string */
    pic_str           reasoning;
    pic_tool_call    *tool_calls;       /* assistant only */
    size_t            n_tool_calls;
    pic_str           tool_call_id;     /* tool only; "" when absent */
} pic_message;

typedef struct {
    int    max_depth;           /* JSON nesting (default 64) */
    size_t max_messages;        /* default 4096 */
    size_t max_parts;           /* content parts per message (default 1024) */
    size_t max_tools;           /* default 512 */
    size_t max_tool_calls;      /* per assistant message (default 256) */
    size_t max_prompt_tokens;   /* completions token-id prompts (default 1<<20) */
    int    foreign;             /* for a foreign server (default 0): top-level
                                   fields we do not know pass, it judges them */
} pic_request_limits;

#define PIC_STOP_MAX 4
#define PIC_TOP_LOGPROBS_MAX 20

typedef enum {
    PIC_TOOL_CHOICE_AUTO = 0,   /* absent or "auto": the model decides */
    PIC_TOOL_CHOICE_NONE,       /* "none": no tool calls parsed */
    PIC_TOOL_CHOICE_REQUIRED,   /* "required": the answer opens with a call */
    PIC_TOOL_CHOICE_FUNCTION,   /* {"type":"function","function":{"name":N}} */
} pic_tool_choice;

typedef enum {
    PIC_RESPONSE_TEXT = 0,      /* absent or {"type":"text"} */
    PIC_RESPONSE_JSON_OBJECT,   /* {"type":"json_object"} */
    PIC_RESPONSE_JSON_SCHEMA,   /* {"type":"json_schema","json_schema":{...}} */
} pic_response_format;

typedef struct {
    pic_req_kind  kind;
    cJSON        *root;                 /* owned: the parsed body */
    pic_str       model;

    /* chat */
    pic_message  *messages;
    size_t        n_messages;
    const cJSON  *tools;                /* the "tools" array as sent; NULL if absent/empty */
    size_t        n_tools;
    int           enable_thinking;      /* chat_template_kwargs.enable_thinking: -1 unset, 0, 1 */
    int           add_generation_prompt;/* vLLM extension; default 1 */

    /* completions: exactly one of prompt / prompt_tokens */
    pic_str       prompt;
    int32_t      *prompt_tokens;        /* owned; NULL for a text prompt */
    size_t        n_prompt_tokens;

    /* sampling and output */
    int           stream;
    int           include_usage;        /* stream_options.include_usage */
    int64_t       max_tokens;           /* max_completion_tokens or max_tokens; -1 unset */
    int           has_temperature;
    double        temperature;          /* [0, 2] */
    int           has_top_p;
    double        top_p;                /* (0, 1] */
    int           has_top_k;
    int64_t       top_k;                /* -1 (off) or >= 0 */
    int           has_seed;
    int64_t       seed;
    pic_str       stop[PIC_STOP_MAX];
    size_t        n_stop;
    int           has_min_p;
    double        min_p;                /* [0, 1] */
    double        presence_penalty;     /* [-2, 2]; 0 off */
    double        frequency_penalty;    /* [-2, 2]; 0 off */
    double        repetition_penalty;   /* (0, 2]; 1 off */
    const cJSON  *logit_bias;           /* {"id": bias in [-100, 100]}; NULL if absent */
    int           logprobs;             /* chat: logprobs; completions: logprobs >= 0 */
    int           top_logprobs;         /* [0, 20] alternatives per token */

    /* tools and output form (chat) */
    pic_tool_choice     tool_choice;
    pic_str             tool_choice_name;   /* FUNCTION: a name listed in tools */
    int                 parallel_tool_calls;/* default 1; 0: at most one call */
    pic_response_format response_format;
    const cJSON        *json_schema;        /* JSON_SCHEMA: response_format.json_schema.schema */
} pic_request;

/* Fills lim with the defaults listed in pic_request_limits. */
void pic_request_limits_default(pic_request_limits *lim);

/* Parses and validates body[0..len) as a `kind` request under lim (NULL =
 * defaults).  On success returns 0 and req owns its memory (release with
 * pic_request_free).  On failure returns -1, req is left empty (safe to
 * free) and err holds the status (400, or 500 out of memory) and message. */
int pic_request_parse(pic_request *req, pic_req_kind kind, const char *body,
                      size_t len, const pic_request_limits *lim, pic_error *err);

/* Releases everything req owns; req becomes empty.  Safe on an empty req. */
void pic_request_free(pic_request *req);

#endif /* PIC_REQUEST_H */
