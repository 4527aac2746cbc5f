/*
 * pic_segment.h — the shared pipeline: request → rendered prompt →
 * segments with keys (DESIGN.md §2.1-2.2, §3.2).
 *
 *   1. Render the chat template (pic_template) into text + regions.
 *   1b. With cfg.unmarked_docs, content regions are split at the document
 *      boundaries of unmarked text (pic_docsplit: header lines, labels,
 *      tags, blank-line runs, JSON array items), each part a document.
 *   2. Pieces: every client-content region is a piece; each run of template
 *      glue between them is a piece of its own (so the same document gets
 *      the same bytes and key in any message, position or order); glue at
 *      the very start joins the first content region ("<|im_start|>system\n"
 *      + the system prompt), unless that region is a tool schema: the tools
 *      preamble (Qwen3.5, or Qwen3 without a system message) stays a piece
 *      of its own, so every schema is keyed alike at any rank.
 *   3. CDC (pic_cdc, optional) cuts every content piece longer than
 *      min_size, restarting at each piece: identical content yields
 *      identical chunks wherever it sits.  Glue is never cut.
 *   4. Kinds: the last content piece's last chunk and everything after it
 *      (the user query and the generation prompt) are DYNAMIC; segment 0 is
 *      the PREFIX (an exact prefix, reused whole: the first-chunk carve-out)
 *      unless it is in that tail; the rest are PIC, except segments shorter
 *      than min_pic_bytes, which are DYNAMIC (not worth a seam: recompute).
 *   5. Keys (pic_key) over each segment's rendered bytes.
 *
 * A completions request with token ids has no text: zero segments.
 */
#ifndef PIC_SEGMENT_H
#define PIC_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "pic_buf.h"
#include "pic_cdc.h"
#include "pic_docsplit.h"
#include "pic_error.h"
#include "pic_key.h"
#include "pic_marker.h"
#include "pic_request.h"
#include "pic_template.h"

typedef enum {
    PIC_SEG_PREFIX = 0,         /* leading segment at position 0: exact-prefix reuse */
    PIC_SEG_PIC,                /* position-independent: cached per key, spliced anywhere */
    PIC_SEG_DYNAMIC,            /* recomputed every time (tail, tiny segments) */
} pic_seg_kind;

#define PIC_SEG_FLAG_GLUE 1u    /* template text only */
#define PIC_SEG_FLAG_CDC  2u    /* ends at a CDC cut, not at a structural edge */
#define PIC_SEG_FLAG_DOC  4u    /* inside a document the client delimited (one of
                                 * several in a message: marker or content parts),
                                 * i.e. declared reusable (pic_render_client_doc) */
#define PIC_SEG_FLAG_AHEAD 8u   /* client content before the prompt's newest
                                 * message, not an assistant turn: worth an
                                 * entry built at its first sighting
                                 * (pic_render_ahead) */

typedef struct {
    size_t          start;      /* byte span [start, start + len) of the rendered text */
    size_t          len;
    pic_seg_kind    kind;
    uint32_t        flags;      /* PIC_SEG_FLAG_* */
    pic_region_kind region;     /* kind of the content region it cuts (GLUE for glue) */
    int32_t         index;      /* that region's message / tool index; -1 for glue */
    uint32_t        doc;        /* that region's document number */
    uint32_t        tokens;     /* estimate: ceil(len / 4) */
    pic_key         key;
} pic_segment;

typedef struct {
    pic_template_dialect dialect;
    const pic_marker    *marker;        /* client document delimiter; NULL = off */
    int                  split_parts;   /* each text content part is a document */
    const pic_cdc       *cdc;           /* NULL = one segment per piece */
    const pic_key_ctx   *keys;          /* required */
    size_t               min_pic_bytes; /* shorter non-prefix segments are DYNAMIC */
    int                  unmarked_docs; /* cut content at document boundaries in
                                         * unmarked text (pic_docsplit.h) */
} pic_segment_cfg;

typedef struct {
    pic_render   render;        /* the rendered prompt and its regions */
    pic_segment *segs;          /* consecutive, covering render.text exactly */
    size_t       n_segs;
} pic_segmentation;

/* Makes s empty (no allocation). */
void pic_segmentation_init(pic_segmentation *s);

/* Frees everything s holds; s becomes empty. */
void pic_segmentation_free(pic_segmentation *s);

/* Runs the pipeline above for req under cfg into out, which must be
 * initialised (pic_segmentation_init) or hold an earlier result (freed
 * first).  Returns 0, or -1 with err set (400 template error, 500 OOM). */
int pic_segment_request(const pic_segment_cfg *cfg, const pic_request *req,
                        pic_segmentation *out, pic_error *err);

/* Appends the marked wire form of s to out: segment texts joined by the
 * marker, each escaped (pic_marker_join).  Returns 0 or -1 (OOM). */
int pic_segmentation_marked(const pic_segmentation *s, const pic_marker *m, pic_buf *out);

/* 1 if byte off of r's text lies in a content region of a message the
 * client split into several documents (the marker, or content parts when
 * they are documents), else 0 (glue, one-document messages, off past the
 * end). */
int pic_render_client_doc(const pic_render *r, size_t off);

/* 1 if byte off of r's text lies before the prompt's last message with
 * content (the newest one: an agent loop's fresh tool result, which the
 * next turn finds in its exact prefix) in client content that is not an
 * assistant turn, or in template glue; else 0.  Content that, seen once,
 * is likely to come back elsewhere: a tool schema, the tool instructions,
 * an earlier tool result after a compaction, a system prompt's parts. */
int pic_render_ahead(const pic_render *r, size_t off);

/* The newest message's content regions of a render, [first, last) of its
 * regions (last 0: no content); found once, then asked of any byte. */
typedef struct {
    size_t first;
    size_t last;
} pic_render_span;

/* r's newest message (pic_render_ahead's reference), into *out. */
void pic_render_newest(const pic_render *r, pic_render_span *out);

/* pic_render_ahead(r, off), with r's newest message from pic_render_newest:
 * O(log regions) per byte asked. */
int pic_render_ahead_of(const pic_render *r, const pic_render_span *newest, size_t off);

/* "prefix", "pic" or "dynamic". */
const char *pic_seg_kind_name(pic_seg_kind k);

/* Parses a kind name; returns 0, or -1 if unknown. */
int pic_seg_kind_parse(const char *name, pic_seg_kind *out);

/* The token estimate used for planning: ceil(bytes / 4). */
uint32_t pic_segment_token_estimate(size_t bytes);

#endif /* PIC_SEGMENT_H */
