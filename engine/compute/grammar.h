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
 */
#ifndef PIC_GRAMMAR_H
#define PIC_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define PIC_GRAMMAR_DEPTH   32      /* nesting of the generated document */
#define PIC_GRAMMAR_MAX_WS  16      /* consecutive white-space bytes (room for
                                     * pretty-printed nesting) */
#define PIC_GRAMMAR_MAX_PROPS 64    /* properties per schema object */

typedef struct {
    uint8_t      kind;          /* pic_gframe_kind (grammar.c) */
    uint8_t      st;            /* state inside the frame */
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

#endif /* PIC_GRAMMAR_H */
