/*
 * pic_marker.h — segment boundary markers (DESIGN.md §2.1).
 *
 * The marker is a configurable plain-text string (default "<|pic_sep|>",
 * not a special token).  It plays two roles:
 *
 *  1. Client document delimiter (the HYPIC serving interface): inside
 *     system, user and tool content, and in a completions prompt, the text
 *     between markers is one document = one segment.  The marker itself is
 *     removed: the model never sees it.  (pic_marker_next walks the pieces.)
 *
 *  2. In-band boundary in the "marked" wire form of a segmented prompt:
 *     segments joined by the marker.  Segment text that happens to contain
 *     the marker (a client quoting it, with document splitting off, or a
 *     tool output fetched from the web) must not read as a boundary, so
 *     every segment is escaped before joining and unescaped after
 *     splitting: no client can forge a boundary.
 *
 * Escape scheme.  Let c = marker[0] and e = the escape byte (the first of
 * '\\', '~', '^' that differs from marker[0] and marker[1]).  The marker
 * must be 2..64 bytes of valid UTF-8 without NUL, and c must not occur
 * again inside it.  Escaping inserts e after a c that starts an occurrence
 * of the marker or is followed by e; nothing else changes ("<|pic_sep|>"
 * becomes "<\|pic_sep|>").
 *  - The escaped text never contains the marker: an occurrence would start
 *    at a c; since c occurs once in the marker, the marker's other bytes
 *    contain no c, so no e was inserted inside that occurrence and the same
 *    bytes (after an unescaped c) were in the input, where they would have
 *    been escaped — contradiction.
 *  - It is reversible: a "c e" pair in the escaped text is always an
 *    insertion (an input c followed by e is itself escaped), so unescaping
 *    drops the e of every "c e" pair.
 * The proof is checked exhaustively over short strings in
 * tests/unit/test_marker.c.
 */
#ifndef PIC_MARKER_H
#define PIC_MARKER_H

#include <stddef.h>

#include "pic_buf.h"
#include "pic_error.h"

#define PIC_MARKER_DEFAULT "<|pic_sep|>"
#define PIC_MARKER_MAX     64

typedef struct {
    char   str[PIC_MARKER_MAX + 1];     /* the marker, NUL-terminated */
    size_t len;
    char   esc;                          /* escape byte inserted after str[0] */
} pic_marker;

/* Validates s[0..n) as a marker (NULL = PIC_MARKER_DEFAULT) and fills m.
 * Returns 0, or -1 with a 400 in err naming the rule broken. */
int pic_marker_init(pic_marker *m, const char *s, size_t n, pic_error *err);

/* Offset of the first occurrence of the marker in s[0..n) at or after
 * `from`, or n when there is none. */
size_t pic_marker_find(const pic_marker *m, const char *s, size_t n, size_t from);

/* Document iterator over s[0..n): on each call sets [*start, *end) to the
 * next piece between markers and returns 1; returns 0 when done.  *pos must
 * start at 0.  Empty pieces are returned too (callers skip them). */
int pic_marker_next(const pic_marker *m, const char *s, size_t n, size_t *pos,
                    size_t *start, size_t *end);

/* Appends the escaped form of s[0..n) to out.  Returns 0 or -1 (OOM). */
int pic_marker_escape(const pic_marker *m, const char *s, size_t n, pic_buf *out);

/* Appends the unescaped form of s[0..n) (one piece, no markers in it) to
 * out.  Returns 0 or -1 (OOM). */
int pic_marker_unescape(const pic_marker *m, const char *s, size_t n, pic_buf *out);

/* Appends the marked wire form of pieces text[starts[i]..ends[i]),
 * i < n: escape(p0) M escape(p1) M ... .  Returns 0 or -1. */
int pic_marker_join(const pic_marker *m, const char *text, const size_t *starts,
                    const size_t *ends, size_t n, pic_buf *out);

#endif /* PIC_MARKER_H */
