/*
 * pic_buf.c — growable byte buffer and pic_grow (see pic_buf.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pic_buf.h"

void
pic_buf_init(pic_buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->oom = 0;
}

void
pic_buf_free(pic_buf *b)
{
    free(b->data);
    pic_buf_init(b);
}

int
pic_buf_reserve(pic_buf *b, size_t extra)
{
    if (b->oom) {
        return -1;
    }
    if (extra > SIZE_MAX / 2 - b->len - 1) {
        b->oom = 1;
        return -1;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) {
        return 0;
    }
    if (pic_grow((void **) &b->data, &b->cap, need, 1) != 0) {
        b->oom = 1;
        return -1;
    }
    return 0;
}

char *
pic_read_stream(FILE *f, size_t *len)
{
    pic_buf b;
    size_t  n;

    pic_buf_init(&b);
    do {
        if (pic_buf_reserve(&b, 65536) != 0) {
            return NULL;
        }
        n = fread(b.data + b.len, 1, b.cap - b.len - 1, f);
        b.len += n;
    } while (n > 0);
    if (ferror(f)) {
        pic_buf_free(&b);
        return NULL;
    }
    return pic_buf_detach(&b, len);
}

int
pic_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) {
        return 0;
    }
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2) {
            return -1;
        }
        c *= 2;
    }
    if (elem != 0 && c > SIZE_MAX / elem) {
        return -1;
    }
    void *q = realloc(*p, c * elem);
    if (!q) {
        return -1;
    }
    *p = q;
    *cap = c;
    return 0;
}

int
pic_buf_append(pic_buf *b, const void *p, size_t n)
{
    if (pic_buf_reserve(b, n) != 0) {
        return -1;
    }
    if (n) {
        memcpy(b->data + b->len, p, n);
    }
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int
pic_buf_appends(pic_buf *b, const char *s)
{
    return pic_buf_append(b, s, strlen(s));
}

int
pic_buf_appendc(pic_buf *b, char c)
{
    return pic_buf_append(b, &c, 1);
}

int
pic_buf_printf(pic_buf *b, const char *fmt, ...)
{
    char    small[128];
    va_list ap;

    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return -1;
    }
    if ((size_t) n < sizeof(small)) {
        return pic_buf_append(b, small, (size_t) n);
    }
    if (pic_buf_reserve(b, (size_t) n) != 0) {
        return -1;
    }
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t) n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t) n;
    return 0;
}

void
pic_buf_reset(pic_buf *b)
{
    b->len = 0;
    b->oom = 0;
    if (b->data) {
        b->data[0] = '\0';
    }
}

void
pic_buf_truncate(pic_buf *b, size_t n)
{
    if (n < b->len) {
        b->len = n;
        b->data[n] = '\0';
    }
}

char *
pic_buf_detach(pic_buf *b, size_t *len)
{
    if (b->oom) {
        pic_buf_free(b);
        return NULL;
    }
    if (!b->data && pic_buf_reserve(b, 0) != 0) {
        pic_buf_free(b);
        return NULL;
    }
    char *p = b->data;
    p[b->len] = '\0';
    if (len) {
        *len = b->len;
    }
    pic_buf_init(b);
    return p;
}
