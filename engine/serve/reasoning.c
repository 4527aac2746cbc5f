/*
 * reasoning.c — <think> blocks out of streamed model text (reasoning.h).
 */
#include <string.h>

#include "reasoning.h"

#define PIC_THINK_OPEN   "<think>"
#define PIC_THINK_CLOSE  "</think>"

void
pic_think_init(pic_thinkstream *t, int in_think)
{
    memset(t, 0, sizeof(*t));
    pic_buf_init(&t->hold);
    t->state = in_think ? PIC_THINK_REASONING : PIC_THINK_START;
    t->strip_nl = in_think;
    t->fresh = in_think;
}

void
pic_think_free(pic_thinkstream *t)
{
    pic_buf_free(&t->hold);
}

static size_t
pic_think_find(const char *s, size_t n, const char *needle)
{
    size_t m = strlen(needle);

    for (size_t i = 0; i + m <= n; i++) {
        if (memcmp(s + i, needle, m) == 0) {
            return i;
        }
    }
    return n;
}

/* Length of the longest tail of s[0..n) that is a proper prefix of tag. */
static size_t
pic_think_partial(const char *s, size_t n, const char *tag)
{
    size_t m = strlen(tag);

    for (size_t k = m - 1 < n ? m - 1 : n; k > 0; k--) {
        if (memcmp(s + n - k, tag, k) == 0) {
            return k;
        }
    }
    return 0;
}

static void
pic_think_consume(pic_thinkstream *t, size_t n)
{
    if (n == 0) {
        return;                 /* hold may be empty (data NULL): no memmove */
    }
    memmove(t->hold.data, t->hold.data + n, t->hold.len - n);
    pic_buf_truncate(&t->hold, t->hold.len - n);
}

int
pic_think_feed(pic_thinkstream *t, const char *text, size_t len, int final,
               pic_buf *reasoning, pic_buf *content)
{
    if (len > 0 && pic_buf_append(&t->hold, text, len) != 0) {
        return -1;
    }
    for (;;) {
        const char *h = t->hold.data;
        size_t      n = t->hold.len, ws = 0, k;

        if (t->strip_nl) {
            while (ws < n && h[ws] == '\n') {
                ws++;
            }
            pic_think_consume(t, ws);
            if (t->hold.len == 0 && !final) {
                return 0;               /* maybe more newlines to come */
            }
            t->strip_nl = 0;
            continue;
        }
        switch (t->state) {
        case PIC_THINK_START:
            while (ws < n && (h[ws] == ' ' || h[ws] == '\n' || h[ws] == '\t' || h[ws] == '\r')) {
                ws++;
            }
            k = strlen(PIC_THINK_OPEN);
            if (n - ws >= k && memcmp(h + ws, PIC_THINK_OPEN, k) == 0) {
                pic_think_consume(t, ws + k);
                t->state = PIC_THINK_REASONING;
                t->strip_nl = 1;
                continue;
            }
            if (!final && n - ws < k && memcmp(h + ws, PIC_THINK_OPEN, n - ws) == 0) {
                return 0;               /* could still become <think> */
            }
            t->state = PIC_THINK_CONTENT;
            continue;

        case PIC_THINK_REASONING:
            if (t->fresh) {
                k = strlen(PIC_THINK_OPEN);
                if (n >= k && memcmp(h, PIC_THINK_OPEN, k) == 0) {
                    pic_think_consume(t, k);
                    t->fresh = 0;
                    t->strip_nl = 1;
                    continue;
                }
                if (!final && n < k && memcmp(h, PIC_THINK_OPEN, n) == 0) {
                    return 0;
                }
                t->fresh = 0;
            }
            k = pic_think_find(h, n, PIC_THINK_CLOSE);
            if (k < n) {
                size_t r = k;
                while (r > 0 && h[r - 1] == '\n') {
                    r--;
                }
                if (r > 0 && pic_buf_append(reasoning, h, r) != 0) {
                    return -1;
                }
                pic_think_consume(t, k + strlen(PIC_THINK_CLOSE));
                t->state = PIC_THINK_CONTENT;
                t->strip_nl = 1;
                continue;
            }
            /* hold back a possible start of </think> and trailing newlines */
            k = final ? n : n - pic_think_partial(h, n, PIC_THINK_CLOSE);
            while (!final && k > 0 && h[k - 1] == '\n') {
                k--;
            }
            if (k > 0 && pic_buf_append(reasoning, h, k) != 0) {
                return -1;
            }
            pic_think_consume(t, k);
            return 0;

        case PIC_THINK_CONTENT:
            if (n > 0 && pic_buf_append(content, h, n) != 0) {
                return -1;
            }
            pic_think_consume(t, n);
            return 0;
        }
    }
}

int
pic_think_prompt_open(const char *prompt, size_t len)
{
    size_t o = len, c = len, m = strlen(PIC_THINK_OPEN), mc = strlen(PIC_THINK_CLOSE);

    for (size_t i = len; i-- > 0;) {
        if (o == len && i + m <= len && memcmp(prompt + i, PIC_THINK_OPEN, m) == 0) {
            o = i;
        }
        if (c == len && i + mc <= len && memcmp(prompt + i, PIC_THINK_CLOSE, mc) == 0) {
            c = i;
        }
        if (o != len) {
            break;
        }
    }
    return o != len && c == len;       /* a </think> after it closed it */
}
