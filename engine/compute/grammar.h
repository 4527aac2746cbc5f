/*
 * grammar.h — JSON output by constrained decoding (response_format).
 *
 * A byte-level pushdown recognizer of JSON, optionally driven by a JSON
 * schema (a subset, checked up front: pic_grammar_check).  The sampler asks
 * whether a token's byte string can extend what was generated; tokens that
 * cannot are masked, so every answer is a prefix of a valid document, and
 * once the document is complete the next token is the end of the answer.
 *
 * Schema subset: "type" one of object, array, string, number, integer,
 * boolean, null; "properties", "required", "additionalProperties": false
 * (objects hold only declared properties, each at most once, in any order,
 * every required one before "}"); "items"; "enum" and "const" of strings;
 * annotations ("title", "description", "default", "examples", "$schema")
 * are ignored.  Anything else is refused by pic_grammar_check with the
 * keyword's path.  Object keys and enum strings have no escapes.  Runs of
 * white space are capped (PIC_GRAMMAR_MAX_WS) so that a model cannot pad
 * forever.
 *
 * Tool calls (tool_choice "required" or a named function): the same
 * recognizer follows a whole call in either Qwen syntax from right after
 * "<tool_call>\n" (pic_gstate_init_call): the function name among the
 * tools, then its arguments by the function's parameters schema — in the
 * XML syntax each <parameter=KEY> once, a declared key, a string's value
 * raw, an enum's one of its strings, any other type a JSON value of that
 * schema — and "</tool_call>" at the end.  The call parsers find a value's,
 * a call's and a block's end in the raw text, so inside a call a raw value
 * never holds "<parameter=", "</function>" or "</tool_call>", and a JSON
 * string never holds "</" (JSON's "<\/" says the same).
 *
 * Completion (pic_gstate_complete): from any state, the shortest bytes
 * that finish the document — what the scheduler generates when max_tokens
 * comes within reach, so that a constrained answer still closes.
 *
 * Masking (pic_gvocab): the vocabulary's byte strings as a trie walked
 * depth first from the current state; a byte the grammar refuses prunes its
 * subtree, a byte that leaves the state as it is (free string content, an
 * XML raw value) shares its parent's state instead of copying it, and a
 * subtree made only of such bytes allows its tokens (a run in byte order)
 * without being walked.
 */
#ifndef PIC_GRAMMAR_H
#define PIC_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "tokenizer.h"

#define PIC_GRAMMAR_DEPTH   32      /* nesting of the generated document */
#define PIC_GRAMMAR_MAX_WS  16      /* consecutive white-space bytes (room for
                                     * pretty-printed nesting) */
#define PIC_GRAMMAR_MAX_PROPS 64    /* properties per schema object */

typedef struct {
    uint8_t      kind;          /* pic_gframe_kind (grammar.c) */
    uint8_t      st;            /* state inside the frame */
    uint8_t      syn;           /* call: pic_gcall_syntax */
    uint8_t      lit;           /* call: the literal being matched */
    int16_t      prop;          /* object: property whose key/value is parsed */
    const cJSON *schema;        /* this value's schema; NULL: any JSON */
    uint64_t     seen;          /* object: properties given so far (bit i) */
} pic_gframe;

typedef struct {
    pic_gframe  stack[PIC_GRAMMAR_DEPTH];
    int         depth;          /* frames in use; 0 with done: complete */
    int         done;           /* the top-level value is complete */
    int         ws;             /* white-space bytes in a row */
    int         nbuf;           /* key / enum string bytes so far */
    char        buf[128];
} pic_gstate;

/* 0 if schema (NULL: any JSON object) is inside the subset; else -1 with
 * path (e.g. "properties.age.minimum") and a message. */
int pic_grammar_check(const cJSON *schema, char *path, size_t pathlen, char *msg,
                      size_t msglen);

/* Start: the document is an object (schema NULL) or follows schema. */
void pic_gstate_init(pic_gstate *g, const cJSON *schema);

/* Feed bytes; 0 if they extend a valid document (g advanced), -1 if not
 * (g is then unspecified: feed a copy to test). */
int pic_gstate_feed(pic_gstate *g, const char *s, size_t n);

/* 1 once the document is complete. */
int pic_gstate_done(const pic_gstate *g);

/* The tool-call syntaxes: the Qwen templates' two, and the JSON calls of
 * Llama 3.1 / 3.2 and Mistral (whose call is the rest of the answer). */
typedef enum {
    PIC_GCALL_XML = 0,          /* <function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n
                                 * ...</function>\n</tool_call> (Qwen3.5) */
    PIC_GCALL_JSON,             /* {"name": "NAME", "arguments": {...}}\n</tool_call>
                                 * (Qwen3) */
    PIC_GCALL_LLAMA,            /* {"name": "NAME", "parameters": {...}} (Llama 3.1/3.2) */
    PIC_GCALL_MISTRAL,          /* [{"name": "NAME", "arguments": {...}}] (after
                                 * Mistral's [TOOL_CALLS]) */
} pic_gcall_syntax;

/* Start a tool call right after its opening ("<tool_call>\n"; nothing for
 * Llama; "[TOOL_CALLS]" for Mistral).  fns: an array of
 * {"name": S, "parameters": schema or null} to pick from; or, with fns NULL,
 * the function whose opening ("<function=NAME>\n", or the JSON syntaxes'
 * text up to the arguments) was generated already and its parameters schema params.
 * A NULL schema means any object (XML: any keys, raw values).  Schemas must
 * have passed pic_grammar_check; names hold no quote, backslash, '<', '>'
 * or newline.  Done after the syntax's end ("</tool_call>", "}", "}]"). */
void pic_gstate_init_call(pic_gstate *g, pic_gcall_syntax syn, const cJSON *fns,
                          const cJSON *params);

/* The shortest bytes that complete the document from g (a value's
 * shortest form, an object's missing required properties, every open
 * frame closed) into out (cap bytes); their count (0: complete already),
 * or -1 when they do not fit.  Feeding them to g makes it done. */
int pic_gstate_complete(const pic_gstate *g, char *out, size_t cap);

/* Copy src into dst (only the frames and bytes in use). */
void pic_gstate_copy(pic_gstate *dst, const pic_gstate *src);

typedef struct pic_gvocab pic_gvocab;

/* The tokenizer's non-special token byte strings as a trie; NULL on ENOMEM. */
pic_gvocab *pic_gvocab_new(const pic_tokenizer *tok);

/* Free (NULL is fine). */
void pic_gvocab_free(pic_gvocab *v);

/* ok[id] = 1 for every token whose bytes extend g, else 0, for ids below
 * the tokenizer's vocab size (ok holds that many); returns how many. */
int pic_gvocab_mask(const pic_gvocab *v, const pic_gstate *g, uint8_t *ok);

#endif /* PIC_GRAMMAR_H */
