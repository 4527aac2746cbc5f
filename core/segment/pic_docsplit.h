/*
 * pic_docsplit.h — document boundaries in unmarked text (DESIGN.md §3.7).
 *
 * Frameworks put retrieved documents in one message without markers, each
 * behind a label that changes per request ("Document [3]:", a rank, a
 * score).  For a document to keep one key wherever it sits and whatever
 * its label says, a cut must fall at its boundary, and the label must sit
 * in a small segment of its own.  Cuts, found line by line in one content
 * region:
 *
 *   header line     a line of at most PIC_DOCSPLIT_HEADER_MAX bytes that is
 *                   a label ("Document [3]:", "Doc 2", "[4]", "Source: …",
 *                   "Passage #1", a word from a short list followed by a
 *                   number), a markdown heading ("# …" to "###### …") or one
 *                   opening tag alone ("<document>", "<doc id=7>"): cut
 *                   before the line and after its newline, so the header is
 *                   a segment of its own (dynamic: it is short);
 *   inline label    "[3] text…" or "Document 3: text…" at a line's start:
 *                   cut before it and right after its "]" or ":" (the body
 *                   keeps the space, which BPE attaches to its first word);
 *   closing tag     a line holding only "</name>": cut after its newline
 *                   (the tag stays with the body it closes);
 *   blank-line run  one or more empty lines after at least soft_min bytes
 *                   since the last cut, or after a single line of at most
 *                   PIC_DOCSPLIT_HEADER_MAX bytes ("You are agent 2."): cut
 *                   after the run (the body keeps its trailing separator,
 *                   as it does behind every label; paragraphs shorter than
 *                   soft_min join the next, so prose is not cut into
 *                   entries too small to pay for their seams);
 *   JSON array      a region whose text is a JSON array: cut before each
 *                   top-level item (after the "[" and every top-level ",",
 *                   past white space).
 *
 * Each cut depends only on the bytes since the previous one, and the
 * caller restarts CDC at every cut, so a document's body is cut alike
 * wherever it sits and whatever precedes it.  Cuts fall on ASCII bytes
 * only: never inside a UTF-8 character.
 */
#ifndef PIC_DOCSPLIT_H
#define PIC_DOCSPLIT_H

#include <stddef.h>

#include "pic_template.h"

#define PIC_DOCSPLIT_HEADER_MAX   120   /* bytes: a longer line is text, not a header */
#define PIC_DOCSPLIT_SOFT_MIN     512   /* bytes before a blank-line run cuts (~128 tokens) */

/* Cut offsets of data[0..n), ascending, each in (0, n): writes up to cap
 * of them to cuts and returns how many there are (may exceed cap).
 * soft_min: bytes since the last cut before a blank-line run cuts. */
size_t pic_docsplit_cuts(const char *data, size_t n, size_t soft_min, size_t *cuts,
                         size_t cap);

/* Splits every system, user, tool-result and completions-prompt region of
 * r at its cuts (soft_min as above) into consecutive regions of the same
 * kind and index, and renumbers the documents of each message from 0 in
 * order (so pic_render_client_doc sees a message with a cut as several
 * documents), except a tool result's parts, which keep their number: cut,
 * but not declared reusable.  Returns 0, or -1 on OOM (r unchanged). */
int pic_docsplit_render(pic_render *r, size_t soft_min);

#endif /* PIC_DOCSPLIT_H */
