/*
 * pic_json.h — strict JSON intake on top of cJSON, and the Python-compatible
 * JSON writer the chat templates need.
 *
 * cJSON is lenient (it accepts trailing garbage, `+1`, `.5`, `007`, raw
 * control characters in strings, and does no UTF-8 checks; a `\u0000`
 * escape silently truncates a string).  pic_json_parse therefore runs a
 * strict RFC 8259 validator first — well-formed UTF-8 everywhere, a nesting
 * limit, no NUL in strings, nothing after the value — and only then hands
 * the text to cJSON.
 *
 * Number lexemes: Python's json.loads keeps 1 and 1.0 apart (int vs float)
 * and the templates print them differently; cJSON keeps only a double.  The
 * validator records every number's source text and pic_json_parse stores it
 * in the number node's `valuestring` (allocated with cJSON_malloc, freed by
 * cJSON_Delete; cJSON ignores valuestring on numbers otherwise), so the
 * writer below reproduces `json.dumps` byte for byte.
 */
#ifndef PIC_JSON_H
#define PIC_JSON_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "pic_buf.h"
#include "pic_error.h"

#define PIC_JSON_DEPTH_MAX 512      /* hard cap on any caller's limit */

/* Parses exactly one strict JSON text from buf[0..len) with at most
 * max_depth nested arrays/objects.  Returns the cJSON tree (free with
 * cJSON_Delete), or NULL with err set: 400 invalid_request_error for bad
 * input (param = `what`, may be NULL), 500 on allocation failure. */
cJSON *pic_json_parse(const char *buf, size_t len, int max_depth,
                      const char *what, pic_error *err);

/* Appends Python's `json.dumps(v, ensure_ascii=False)` of v (separators
 * ", " and ": ", key order kept, non-ASCII raw).  Returns 0, or -1 on OOM. */
int pic_json_write_py(pic_buf *b, const cJSON *v);

/* Appends Python's `json.dumps(v, ensure_ascii=False, indent=indent)`
 * (Jinja's `tojson(indent=N)`): one item a line, indented by depth, items
 * ended by ",", keys by ": "; empty containers as `[]` / `{}`.  Returns 0,
 * or -1 on OOM. */
int pic_json_write_py_indent(pic_buf *b, const cJSON *v, int indent);

/* Appends Python's `str(v)` for a scalar as Jinja's `|string` prints it
 * (strings raw, True/False/None, ints as ints, floats by repr); arrays and
 * objects are written as pic_json_write_py.  Returns 0 or -1. */
int pic_json_write_py_str(pic_buf *b, const cJSON *v);

/* Appends s[0..n) as a JSON string literal (quotes included), escaping as
 * Python's json.dumps(ensure_ascii=False) does.  Returns 0 or -1. */
int pic_json_write_string(pic_buf *b, const char *s, size_t n);

/* Writes Python's repr() of a finite double into out (>= 32 bytes),
 * e.g. 1.0, 0.0001, 1e-05, 1e+16, 1.2345678901234568e+17.  Returns the
 * length. */
size_t pic_json_py_float_repr(double x, char *out);

/* The number's source text recorded by pic_json_parse, or NULL. */
const char *pic_json_number_lexeme(const cJSON *num);

#endif /* PIC_JSON_H */
