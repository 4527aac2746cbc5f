/*
 * segmenter.h — the standalone serving interface (DESIGN.md §2.3, HYPIC's
 * PIC_SEPARATOR prompts): a plain prompt containing the PIC separator
 * marker is split at the markers, and each segment is tokenized on its
 * own, so a document yields the same ids (and the same cache entry)
 * wherever it appears.  The markers themselves are removed: the model sees
 * the segments laid end to end.
 *
 * A prompt that is exactly marker + one document + marker (nothing but
 * empty pieces around it) is a cache-warming request: its one segment is
 * to be prefilled and stored, nothing generated (warm_only).
 *
 * Splitting uses the shared core's marker (core/prompt/pic_marker.h:
 * default "<|pic_sep|>", any 2..64-byte marker it accepts).  Thread-safe:
 * the tokenizer is, and nothing else is shared.
 */
#ifndef PIC_SEGMENTER_H
#define PIC_SEGMENTER_H

#include <stddef.h>

#include "tokenizer.h"

typedef struct {
    size_t  offset;         /* the segment's bytes in the prompt */
    size_t  length;
    int    *ids;            /* (n_ids) its tokens, encoded alone */
    size_t  n_ids;
} pic_split_segment;

typedef struct {
    pic_split_segment *seg;   /* (n) non-empty pieces in prompt order */
    int                  n;
    int                  marked;    /* the prompt contained the marker */
    int                  warm_only; /* marker + one document + marker */
} pic_segmented;

/* Split text (len bytes) at marker (NULL: PIC_MARKER_DEFAULT) into out and
 * tokenize each piece with tok; a prompt without the marker is one
 * segment.  -1 + err on a bad marker, invalid UTF-8 or OOM (out is then
 * empty). */
int pic_segmenter_split(const pic_tokenizer *tok, const char *marker,
                        const char *text, size_t len, pic_segmented *out,
                        char *err, size_t errlen);

/* Free what pic_segmenter_split put in s (s itself is the caller's). */
void pic_segmented_free(pic_segmented *s);

#endif /* PIC_SEGMENTER_H */
