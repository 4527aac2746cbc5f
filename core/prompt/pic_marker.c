/*
 * pic_marker.c — marker validation, document splitting, escaping
 * (see pic_marker.h for the scheme and its proof).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE             /* memmem */
#endif
#include <string.h>

#include "pic_marker.h"
#include "pic_utf8.h"

int
pic_marker_init(pic_marker *m, const char *s, size_t n, pic_error *err)
{
    if (!s) {
        s = PIC_MARKER_DEFAULT;
        n = strlen(s);
    }
    if (n < 2 || n > PIC_MARKER_MAX) {
        return pic_error_invalid(err, NULL, "invalid_marker",
                                 "%s: the marker must be 2 to %d bytes long",
                                 __func__, PIC_MARKER_MAX);
    }
    if (memchr(s, '\0', n) || pic_utf8_check(s, n) != n) {
        return pic_error_invalid(err, NULL, "invalid_marker",
                                 "%s: the marker must be valid UTF-8 without NUL",
                                 __func__);
    }
    if (memchr(s + 1, s[0], n - 1)) {
        return pic_error_invalid(err, NULL, "invalid_marker",
                                 "%s: the marker's first byte must not occur again in it",
                                 __func__);
    }
    memcpy(m->str, s, n);
    m->str[n] = '\0';
    m->len = n;
    m->esc = '\\';
    for (const char *e = "\\~^"; *e; e++) {   /* e differs from c and marker[1] */
        if (*e != s[0] && *e != s[1]) {
            m->esc = *e;
            break;
        }
    }
    return 0;
}

size_t
pic_marker_find(const pic_marker *m, const char *s, size_t n, size_t from)
{
    if (from >= n || n - from < m->len) {
        return n;
    }
    const char *hit = memmem(s + from, n - from, m->str, m->len);
    return hit ? (size_t) (hit - s) : n;
}

int
pic_marker_next(const pic_marker *m, const char *s, size_t n, size_t *pos,
                size_t *start, size_t *end)
{
    if (*pos > n) {
        return 0;
    }
    size_t at = pic_marker_find(m, s, n, *pos);
    *start = *pos;
    *end = at;
    *pos = at < n ? at + m->len : n + 1;
    return 1;
}

int
pic_marker_escape(const pic_marker *m, const char *s, size_t n, pic_buf *out)
{
    const char c = m->str[0];
    size_t     run = 0;

    for (const char *p = memchr(s, c, n); p; p = memchr(p + 1, c, n - (size_t) (p + 1 - s))) {
        size_t i = (size_t) (p - s);
        int    hit = (i + 1 < n && s[i + 1] == m->esc)
                  || (n - i >= m->len && memcmp(p, m->str, m->len) == 0);
        if (hit) {
            pic_buf_append(out, s + run, i + 1 - run);
            pic_buf_appendc(out, m->esc);
            run = i + 1;
        }
        if (i + 1 >= n) {
            break;
        }
    }
    return pic_buf_append(out, s + run, n - run);
}

int
pic_marker_unescape(const pic_marker *m, const char *s, size_t n, pic_buf *out)
{
    const char c = m->str[0];
    size_t     run = 0;

    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] == c && s[i + 1] == m->esc) {
            pic_buf_append(out, s + run, i + 1 - run);
            run = i + 2;
            i++;
        }
    }
    return pic_buf_append(out, s + run, n - run);
}

int
pic_marker_join(const pic_marker *m, const char *text, const size_t *starts,
                const size_t *ends, size_t n, pic_buf *out)
{
    for (size_t i = 0; i < n; i++) {
        if (i) {
            pic_buf_append(out, m->str, m->len);
        }
        pic_marker_escape(m, text + starts[i], ends[i] - starts[i], out);
    }
    return out->oom ? -1 : 0;
}
