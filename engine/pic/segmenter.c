/*
 * segmenter.c — split a marked prompt and tokenize each segment alone
 * (segmenter.h).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pic_buf.h"
#include "pic_marker.h"
#include "segmenter.h"

void
pic_segmented_free(pic_segmented *s)
{
    if (s == NULL) {
        return;
    }
    for (int i = 0; i < s->n; i++) {
        free(s->seg[i].ids);
    }
    free(s->seg);
    memset(s, 0, sizeof(*s));
}

/* Tokenize text[off, off+len) into piece p. */
static int
pic_segmenter_encode(const pic_tokenizer *tok, const char *text, size_t off,
                     size_t len, pic_split_segment *p, char *err, size_t errlen)
{
    int32_t *ids = NULL;
    size_t   n = 0;
    int      rc = pic_tokenizer_encode(tok, text + off, len, &ids, &n);

    if (rc != PIC_TOKENIZER_OK) {
        snprintf(err, errlen, "%s: segment at byte %zu: %s", __func__, off,
                 rc == PIC_TOKENIZER_EUTF8 ? "invalid UTF-8" : "tokenizer error");
        return -1;
    }
    p->offset = off;
    p->length = len;
    p->n_ids = n;
    p->ids = malloc((n > 0 ? n : 1) * sizeof(int));
    if (p->ids == NULL) {
        free(ids);
        snprintf(err, errlen, "%s: out of memory", __func__);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        p->ids[i] = (int) ids[i];
    }
    free(ids);
    return 0;
}

int
pic_segmenter_split(const pic_tokenizer *tok, const char *marker,
                    const char *text, size_t len, pic_segmented *out,
                    char *err, size_t errlen)
{
    pic_marker mk;
    pic_error  perr;
    size_t     pos = 0, start, end, cap = 8;

    memset(out, 0, sizeof(*out));
    if (pic_marker_init(&mk, marker, marker != NULL ? strlen(marker) : 0, &perr) != 0) {
        snprintf(err, errlen, "%s: %s", __func__, perr.message);
        return -1;
    }
    out->seg = calloc(cap, sizeof(*out->seg));
    if (out->seg == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        return -1;
    }
    out->marked = pic_marker_find(&mk, text, len, 0) < len;
    while (pic_marker_next(&mk, text, len, &pos, &start, &end)) {
        if (end == start) {
            continue;
        }
        if (pic_grow((void **) &out->seg, &cap, (size_t) out->n + 1, sizeof(*out->seg)) != 0) {
            snprintf(err, errlen, "%s: out of memory", __func__);
            pic_segmented_free(out);
            return -1;
        }
        if (pic_segmenter_encode(tok, text, start, end - start, &out->seg[out->n],
                                 err, errlen) != 0) {
            pic_segmented_free(out);
            return -1;
        }
        out->n++;
    }
    /* warm-only: marker first, marker last, one document between */
    out->warm_only = out->marked && out->n == 1 && len >= 2 * mk.len
                     && memcmp(text, mk.str, mk.len) == 0
                     && memcmp(text + len - mk.len, mk.str, mk.len) == 0;
    return 0;
}
