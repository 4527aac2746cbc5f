/*
 * pic_buf.h — a growable byte buffer (malloc/realloc/free), and pic_grow, the
 * one grow-by-doubling helper every growable array of the core and the engine
 * uses.
 *
 * Errors are sticky: after the first failed allocation every append is a
 * no-op and `oom` stays set, so a writer can emit a whole document and check
 * once at the end.  The data is always NUL-terminated when non-NULL (the NUL
 * is not counted in len).  The buffer owns `data`; pic_buf_free releases it,
 * pic_buf_detach hands it to the caller.
 */
#ifndef PIC_BUF_H
#define PIC_BUF_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

typedef struct {
    char  *data;    /* NULL until the first append; NUL-terminated */
    size_t len;     /* bytes in use, excluding the NUL */
    size_t cap;     /* bytes allocated, including room for the NUL */
    int    oom;     /* set by the first failed allocation; sticky */
} pic_buf;

/* Makes b an empty buffer with no allocation. */
void pic_buf_init(pic_buf *b);

/* Frees b's memory and makes it empty again. */
void pic_buf_free(pic_buf *b);

/* Ensures room for `extra` more bytes (+NUL); returns 0, or -1 and sets oom. */
int pic_buf_reserve(pic_buf *b, size_t extra);

/* Appends n bytes; returns 0, or -1 on allocation failure (sticky). */
int pic_buf_append(pic_buf *b, const void *p, size_t n);

/* Appends a NUL-terminated string; returns 0 or -1. */
int pic_buf_appends(pic_buf *b, const char *s);

/* Appends one byte; returns 0 or -1. */
int pic_buf_appendc(pic_buf *b, char c);

/* Appends printf-formatted text; returns 0 or -1. */
int pic_buf_printf(pic_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Drops the contents but keeps the allocation (len = 0, oom cleared). */
void pic_buf_reset(pic_buf *b);

/* Shrinks len to n (n <= len). */
void pic_buf_truncate(pic_buf *b, size_t n);

/* Reads f to its end into a malloc'ed NUL-terminated string (*len = bytes);
 * NULL on a read error or ENOMEM. */
char *pic_read_stream(FILE *f, size_t *len);

/* Ensures the array *p (*cap elements of elem bytes) holds at least need
 * elements, doubling *cap from 16; returns 0, or -1 (overflow or ENOMEM)
 * with *p and *cap unchanged. */
int pic_grow(void **p, size_t *cap, size_t need, size_t elem);

/* Returns the data (caller frees with free(); never NULL unless oom: an
 * empty buffer yields an allocated "") and leaves b empty; *len gets the
 * length when len is non-NULL.  Returns NULL if b->oom. */
char *pic_buf_detach(pic_buf *b, size_t *len);

#endif /* PIC_BUF_H */
