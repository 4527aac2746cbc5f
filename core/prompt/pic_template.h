/*
 * pic_template.h — chat-template rendering (MODEL.md §6): the dialects of
 * the Qwen family, plain ChatML, Llama 3 and Mistral, with the byte span of
 * every structural piece.
 *
 * The dialects reproduce the public Jinja templates as transformers'
 * apply_chat_template renders them (trim_blocks, lstrip_blocks, `tojson` =
 * json.dumps(ensure_ascii=False)) on the request as vLLM hands it over
 * (tool-call arguments decoded to objects; for Qwen3, text parts joined
 * with "\n"):
 *
 *  - PIC_TEMPLATE_QWEN3 (Qwen3, Qwen3-Next): JSON tool calls
 *    `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`, tools
 *    listed after the system prompt; reasoning kept only on assistant turns
 *    after the last user query (the final one always gets a think block);
 *    `enable_thinking=false` appends `<think>\n\n</think>\n\n` to the
 *    generation prompt.
 *  - PIC_TEMPLATE_QWEN3_5 (Qwen3.5): XML tool calls
 *    `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n
 *    </function>\n</tool_call>`, tools listed before the system prompt,
 *    every content trimmed (Python str.strip), a user query required, a
 *    system message only first; generation prompt ends in `<think>\n`, or
 *    the empty think block when thinking is off.
 *  - PIC_TEMPLATE_CHATML: `<|im_start|>ROLE\nCONTENT<|im_end|>\n` per
 *    message, content as given (text parts joined with "\n"), tools and
 *    tool calls not shown (the template has no place for them); generation
 *    prompt `<|im_start|>assistant\n`.
 *  - PIC_TEMPLATE_SMOLLM2: CHATML with SmolLM2's default system message
 *    first when the conversation has none (PIC_CHATML_SMOLLM2_SYSTEM).
 *  - PIC_TEMPLATE_LLAMA3, _LLAMA3_1, _LLAMA3_2: Meta's Llama 3.0, 3.1 / 3.3
 *    and 3.2 instruct templates (pic_template_llama3.c).
 *  - PIC_TEMPLATE_MISTRAL, _MISTRAL_NEMO: Mistral-7B-Instruct-v0.3's and
 *    Mistral-Nemo-Instruct-2407's [INST] templates (pic_template_mistral.c).
 * Template errors (raise_exception) come back as 400s with its message.
 * `developer` messages render as `system`.  The Qwen3-Next checkpoints ship
 * variants of the Qwen3 template (to our knowledge: Instruct without think
 * handling, Thinking opening `<think>\n` in the generation prompt; not
 * verified here, the checkpoints' templates being unavailable offline); the
 * QWEN3 dialect renders the original Qwen3 template for both.
 *
 * Regions.  The output is partitioned into regions: GLUE is template text
 * (role headers, footers, tool instructions, wrappers such as
 * "\n<tool_response>\n"); every other kind is client content: one system,
 * user or tool-result message body (or one document of it), one tool schema
 * (its JSON), one assistant turn body (think block, content and tool calls),
 * or a completions prompt document.  Client content never includes template
 * text, so the same document gets the same bytes in any message or
 * position.  Documents: with opts.split set, marker occurrences inside
 * system, user and tool content (and completions prompts) end a document
 * and are removed; with opts.split_parts, each text part of an array
 * content is a document (the Qwen3 "\n" joiner becomes glue).
 */
#ifndef PIC_TEMPLATE_H
#define PIC_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "pic_buf.h"
#include "pic_error.h"
#include "pic_marker.h"
#include "pic_request.h"

typedef enum {
    PIC_TEMPLATE_QWEN3 = 0,     /* Qwen3 / Qwen3-Next: JSON tool calls */
    PIC_TEMPLATE_QWEN3_5,       /* Qwen3.5: XML tool calls */
    PIC_TEMPLATE_CHATML,        /* plain ChatML: no tools */
    PIC_TEMPLATE_SMOLLM2,       /* ChatML + SmolLM2's default system prompt */
    PIC_TEMPLATE_LLAMA3,        /* Llama 3.0 header turns: no tools */
    PIC_TEMPLATE_LLAMA3_1,      /* Llama 3.1 / 3.3: dated system turn, JSON calls */
    PIC_TEMPLATE_LLAMA3_2,      /* Llama 3.2: 3.1 with today's date */
    PIC_TEMPLATE_MISTRAL,       /* Mistral v0.3 [INST] turns (tokenizer v3) */
    PIC_TEMPLATE_MISTRAL_NEMO,  /* Mistral Nemo [INST] turns (tekken) */
    PIC_TEMPLATE_N              /* the number of dialects */
} pic_template_dialect;

typedef enum {
    PIC_REGION_GLUE = 0,        /* template text */
    PIC_REGION_SYSTEM,          /* system message content (or one document) */
    PIC_REGION_TOOL_SCHEMA,     /* one tool's JSON in the tools listing */
    PIC_REGION_USER,            /* user message content (or one document) */
    PIC_REGION_ASSISTANT,       /* assistant turn body */
    PIC_REGION_TOOL_RESULT,     /* tool message content (or one document) */
    PIC_REGION_PROMPT,          /* completions prompt (or one document) */
} pic_region_kind;

typedef struct {
    pic_region_kind kind;
    int32_t         index;      /* message index; tool index for TOOL_SCHEMA; -1 for GLUE */
    uint32_t        doc;        /* document number inside the message, from 0 */
    size_t          start;      /* byte span [start, end) of the rendered text */
    size_t          end;
} pic_region;

typedef struct {
    pic_buf     text;           /* the rendered prompt (what the model reads) */
    pic_region *regions;        /* partition of text, in order, none empty */
    size_t      n_regions;
    size_t      cap_regions;
    int         oom;
} pic_render;

typedef struct {
    pic_template_dialect dialect;
    const pic_marker    *split;         /* client document delimiter; NULL = off */
    int                  split_parts;   /* each content text part is a document */
} pic_template_opts;

/* The token that ends a turn in dialect d ("<|im_end|>", "<|eot_id|>",
 * "</s>"): generation stops on it. */
const char *pic_template_end_of_turn(pic_template_dialect d);

/* The system prompt SmolLM2's template inserts when the conversation has
 * none. */
#define PIC_CHATML_SMOLLM2_SYSTEM \
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


/* Makes r empty (no allocation). */
void pic_render_init(pic_render *r);

/* Frees r's text and regions; r becomes empty. */
void pic_render_free(pic_render *r);

/* Parses a dialect name: "qwen3", "qwen3_next", "qwen3-next" -> QWEN3;
 * "qwen3.5", "qwen3_5", "qwen35" -> QWEN3_5; "chatml" -> CHATML;
 * "smollm2" -> SMOLLM2; "llama3", "llama3.1", "llama3.2" -> LLAMA3,
 * LLAMA3_1, LLAMA3_2; "mistral", "mistral-nemo" -> MISTRAL, MISTRAL_NEMO.
 * Returns 0, or -1 if unknown. */
int pic_template_dialect_parse(const char *name, pic_template_dialect *out);

/* The dialect's canonical name (the first of each group above). */
const char *pic_template_dialect_name(pic_template_dialect d);

/* A region kind's name ("glue", "system", "tool_schema", ...). */
const char *pic_region_kind_name(pic_region_kind k);

/* Renders req (chat: the chat template with the generation prompt when
 * req->add_generation_prompt; completion with a text prompt: the prompt
 * itself, split into documents) into out, which must be empty (init'ed).
 * A token-id completions prompt renders as empty text with no regions.
 * Returns 0, or -1 with err set (400 template error, 500 OOM); out is left
 * empty on error. */
int pic_template_render(const pic_template_opts *opts, const pic_request *req,
                        pic_render *out, pic_error *err);

#endif /* PIC_TEMPLATE_H */
