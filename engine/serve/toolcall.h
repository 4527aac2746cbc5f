/*
 * toolcall.h — the model's tool-call syntax turned into OpenAI tool_calls.
 *
 * The Qwen ChatML family wraps each call in <tool_call>…</tool_call>
 * (MODEL.md §6).  The body is JSON {"name": …, "arguments": {…}} in
 * Qwen3 / Qwen3-Next, or XML in Qwen3.5:
 *     <function=NAME>
 *     <parameter=P>
 *     VALUE
 *     </parameter>
 *     </function>
 * Both are recognised whatever the model.  XML values become JSON: a value
 * whose parameter the tool schema declares as "string" stays a string;
 * other values are parsed as JSON when they are valid JSON, else kept as
 * strings.  A block that does not parse stays in the content verbatim.
 *
 * Other families write calls their own way (pic_toolsyntax_of):
 *  - Llama 3.1 / 3.2: the whole answer is the call, a JSON object
 *    {"name": …, "parameters": {…}} (after <|python_tag|> when the model
 *    writes it); several objects separated by ";" are several calls.  Only
 *    an answer that starts so is a call; any other answer is content.
 *  - Mistral: [TOOL_CALLS] then a JSON array of {"name", "arguments"}
 *    objects to the end of the answer; text before it is content.  Its
 *    templates want 9-character call ids, so its ids are 9 alphanumerics.
 * Both are parsed when the answer ends (their calls have no end tag), and
 * text that does not parse is content, verbatim.
 *
 * Streaming: pic_toolstream holds back text that may be the start of a
 * call's opening, buffers a block until its end (tag, or the answer's
 * end), and hands out plain content and finished calls as they become
 * certain.
 */
#ifndef PIC_TOOLCALL_H
#define PIC_TOOLCALL_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "pic_buf.h"
#include "pic_template.h"

typedef enum {
    PIC_TOOLSYN_TAGS = 0,       /* <tool_call>BODY</tool_call> (Qwen, ChatML) */
    PIC_TOOLSYN_LLAMA_JSON,     /* the answer is {"name", "parameters"} (Llama 3.1/3.2) */
    PIC_TOOLSYN_MISTRAL,        /* [TOOL_CALLS] [{"name", "arguments"}, …] (Mistral) */
} pic_toolsyntax;

typedef struct {
    char *name;                 /* function name */
    char *arguments;            /* JSON object text (OpenAI: a string) */
    char *body;                 /* the block's text between the tags (streams) */
    size_t body_len;
} pic_toolcall_out;

typedef struct {
    const cJSON   *tools;       /* the request's "tools" array, or NULL */
    pic_toolsyntax syntax;
    int            lead;        /* LLAMA_JSON: 1 once the answer's start decided */
    size_t         skip;        /* LLAMA_JSON block: bytes before its JSON */
    int            in_block;    /* inside a call's block */
    char          *buf;         /* (len) held-back text */
    size_t         len, cap;
    pic_toolcall_out *calls;       /* (n_calls) finished calls not yet taken */
    int            n_calls;
    size_t         cap_calls;
    int            total_calls; /* calls parsed over the stream */
} pic_toolstream;

/* Parse one block body (text between the tags) into a call; 0 or -1. */
int pic_toolcall_parse_body(const char *body, size_t len, const cJSON *tools,
                            pic_toolcall_out *out);

/* Free a call's strings. */
void pic_toolcall_clear(pic_toolcall_out *c);

/* The syntax the model of chat template d writes its calls in. */
pic_toolsyntax pic_toolsyntax_of(pic_template_dialect d);

/* The token text that opens a call in syntax syn ("<tool_call>",
 * "<|python_tag|>", "[TOOL_CALLS]"): a special token in the model's
 * vocabulary whose text the detokenizer must keep for the parser. */
const char *pic_toolsyntax_opening(pic_toolsyntax syn);

/* Start a stream of calls in syntax syn (tools may be NULL). */
void pic_toolstream_init(pic_toolstream *ts, const cJSON *tools, pic_toolsyntax syn);

/* Free the stream's buffers and calls. */
void pic_toolstream_free(pic_toolstream *ts);

/* Feed text; appends content that is certain to *content (malloc'ed,
 * NUL-terminated, *content_len bytes; NULL when none) and moves finished
 * calls into ts->calls.  final != 0 ends the stream: held text and an
 * unterminated block become content.  -1 on ENOMEM. */
int pic_toolstream_feed(pic_toolstream *ts, const char *text, size_t len,
                        int final, char **content, size_t *content_len);

/* The function name of the block being received, once its text names it
 * (`<function=NAME>` or `"name": "NAME"`): 1 and name filled, else 0
 * (always 0 outside PIC_TOOLSYN_TAGS, whose calls come whole at the end). */
int pic_toolstream_pending_name(const pic_toolstream *ts, char *name, size_t size);

/* The arguments of a call block (body: the text after <tool_call>, len
 * bytes) as far as they are certain, appended to out: for the JSON form
 * the "arguments" object as written, for the XML form the JSON object
 * built as the parser builds it, string-typed values growing as they
 * come.  complete: the block has closed (out gets everything).  What one
 * call appends is always a prefix of what a later call on a longer body
 * appends, so fragments can be streamed.  0, or -1 when the block's form
 * gives no stream (arguments as a JSON string, unknown syntax). */
int pic_toolcall_stream_args(const char *body, size_t len, int complete,
                             const cJSON *tools, pic_buf *out);

/* The body of the block being received (NULL, 0 outside a block, and
 * outside PIC_TOOLSYN_TAGS). */
const char *pic_toolstream_block(const pic_toolstream *ts, size_t *len);

/* Take the finished calls (caller frees each with pic_toolcall_clear and
 * the array with free()); returns how many. */
int pic_toolstream_take(pic_toolstream *ts, pic_toolcall_out **calls);

/* A fresh call id into buf (>= 30): "call_" + 24 alphanumerics, or for
 * PIC_TOOLSYN_MISTRAL the 9 alphanumerics its templates accept. */
void pic_toolcall_id(pic_toolsyntax syn, char *buf, size_t size);

#endif /* PIC_TOOLCALL_H */
