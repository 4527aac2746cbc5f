/*
 * pic_utf8.h — strict UTF-8 validation and the few Unicode string
 * operations the chat templates need (Python's str.strip semantics).
 */
#ifndef PIC_UTF8_H
#define PIC_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Returns the offset of the first byte that is not part of a well-formed
 * UTF-8 sequence (overlongs, surrogates and > U+10FFFF are ill-formed), or
 * n when all n bytes are valid. */
size_t pic_utf8_check(const char *s, size_t n);

/* Decodes the well-formed sequence at s (n bytes available) into *cp and
 * returns its length 1..4, or 0 if the bytes there are ill-formed. */
size_t pic_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* 1 if cp is whitespace for Python's str.isspace (what Jinja's |trim and
 * str.strip() remove), else 0. */
int pic_utf8_is_py_space(uint32_t cp);

/* Python `s.strip()` on valid UTF-8: sets [*start, *end) to the span left
 * after removing leading and trailing Unicode whitespace. */
void pic_utf8_py_strip(const char *s, size_t n, size_t *start, size_t *end);

/* 1 if offset i of s[0..n) is a character boundary (0, n, or a byte that is
 * not a continuation byte 10xxxxxx), else 0. */
int pic_utf8_is_boundary(const char *s, size_t n, size_t i);

#endif /* PIC_UTF8_H */
