/*
 * pic_cdc.c — FastCDC over a Gear hash, token-friendly cut nudging, S1
 * windows (see pic_cdc.h).
 */
#include <string.h>

#include "pic_cdc.h"
#include "pic_utf8.h"

#define PIC_CDC_SEED   0x7069635f63646321ull    /* "pic_cdc!" */

void
pic_cdc_params_default(pic_cdc_params *p)
{
    p->min_size = 256;
    p->avg_size = 1024;
    p->max_size = 4096;
    p->nudge = 32;
}

static uint64_t
pic_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static unsigned
pic_log2(uint64_t x)
{
    unsigned k = 0;
    while (x > 1) {
        x >>= 1;
        k++;
    }
    return k;
}

int
pic_cdc_init(pic_cdc *c, const pic_cdc_params *p, pic_error *err)
{
    pic_cdc_params d;
    if (!p) {
        pic_cdc_params_default(&d);
        p = &d;
    }
    if (p->min_size < 16 || p->min_size >= p->avg_size || p->avg_size >= p->max_size
        || p->max_size > (1u << 30) || (p->avg_size & (p->avg_size - 1)) != 0
        || p->max_size - p->min_size < 8 || p->nudge > 4096) {
        return pic_error_invalid(err, NULL, "invalid_value",
                                 "%s: need 16 <= min < avg < max <= 1 GiB, avg a power "
                                 "of two, max - min >= 8, nudge <= 4096", __func__);
    }
    memset(c, 0, sizeof(*c));
    c->p = *p;
    unsigned bits = pic_log2(p->avg_size);
    c->strong = 1ull << (64 - (bits + 2));
    c->weak = 1ull << (64 - (bits > 2 ? bits - 2 : 1));
    uint64_t s = PIC_CDC_SEED;
    for (int i = 0; i < 256; i++) {
        c->gear[i] = pic_splitmix64(&s);
    }
    return 0;
}

/* --- cut placement --- */

static int
pic_cdc_ws(unsigned char b)
{
    return b == ' ' || b == '\n' || b == '\t' || b == '\r';
}

/* Moves candidate cut `at` (min <= at <= lim = min(n, max)) to a
 * token-friendly place within nudge bytes, or to a UTF-8 boundary. */
static size_t
pic_cdc_nudge(const pic_cdc *c, const unsigned char *d, size_t n, size_t at, size_t lim)
{
    size_t reach = at + c->p.nudge < lim ? at + c->p.nudge : lim;

    for (size_t j = at; j < reach; j++) {
        if (!pic_cdc_ws(d[j])) {
            continue;
        }
        size_t r = j;
        while (r < lim && pic_cdc_ws(d[r])) {
            r++;
        }
        if (r == lim && r < n) {
            return j;                       /* the run crosses max: cut before it */
        }
        if (r == n || d[r - 1] == '\n' || d[r - 1] == '\r') {
            return r;                       /* after a newline run (or the end) */
        }
        return r - 1 > j ? r - 1 : j;       /* before the run's last space */
    }
    size_t j = at;
    while (j < lim && !pic_utf8_is_boundary((const char *) d, n, j)) {
        j++;
    }
    if (pic_utf8_is_boundary((const char *) d, n, j)) {
        return j;
    }
    j = at;                                 /* max falls inside a character */
    while (j > 1 && !pic_utf8_is_boundary((const char *) d, n, j)) {
        j--;
    }
    return j;
}

/* The Gear scan: advances h (*hp) over d[i..end), h = (h << 1) + g[d[k]],
 * and returns k + 1 for the first byte k after which h < t, or 0 when none
 * (then *hp holds h after d[end - 1]).  Two bytes a step: h1 = 2h + g[a]
 * and h2 = 4h + (2g[a] + g[b]) are both one shift-add away from h, so the
 * dependency chain costs one shift-add per two bytes instead of per byte,
 * and four steps unrolled leave one loop branch per eight bytes.  Every
 * hash value is still tested in order: the cuts are the byte loop's. */
static inline size_t
pic_cdc_scan(const uint64_t *g, const unsigned char *d, size_t i, size_t end,
             uint64_t *hp, uint64_t t)
{
    uint64_t h = *hp;

#define PIC_CDC_STEP(k)                                                         \
    do {                                                                        \
        uint64_t a = g[d[i + (k)]], b = g[d[i + (k) + 1]];                      \
        uint64_t h1 = (h << 1) + a, h2 = (h << 2) + ((a << 1) + b);             \
        if (__builtin_expect(h1 < t, 0)) {                                      \
            return i + (k) + 1;                                                 \
        }                                                                       \
        if (__builtin_expect(h2 < t, 0)) {                                      \
            return i + (k) + 2;                                                 \
        }                                                                       \
        h = h2;                                                                 \
    } while (0)

    for (; i + 8 <= end; i += 8) {
        PIC_CDC_STEP(0);
        PIC_CDC_STEP(2);
        PIC_CDC_STEP(4);
        PIC_CDC_STEP(6);
    }
#undef PIC_CDC_STEP
    for (; i < end; i++) {
        h = (h << 1) + g[d[i]];
        if (h < t) {
            return i + 1;
        }
    }
    *hp = h;
    return 0;
}

/* The content-defined cut of data[0..n) (n > min_size) before tail merging. */
static size_t
pic_cdc_cut_at(const pic_cdc *c, const unsigned char *d, size_t n)
{
    size_t   lim = n < c->p.max_size ? n : c->p.max_size;
    size_t   mid = lim < c->p.avg_size ? lim : c->p.avg_size;
    uint64_t h = 0;
    size_t   at;

    if ((at = pic_cdc_scan(c->gear, d, c->p.min_size, mid, &h, c->strong)) != 0
        || (at = pic_cdc_scan(c->gear, d, mid, lim, &h, c->weak)) != 0) {
        return pic_cdc_nudge(c, d, n, at, lim);
    }
    return lim == n ? n : pic_cdc_nudge(c, d, n, lim, lim);
}

size_t
pic_cdc_cut(const pic_cdc *c, const char *data, size_t n)
{
    if (n <= c->p.min_size) {
        return n;
    }
    size_t at = pic_cdc_cut_at(c, (const unsigned char *) data, n);
    /* a remainder shorter than min_size joins this chunk (FastCDC): no
     * region ends in a runt too small to cache */
    return n - at < c->p.min_size ? n : at;
}

size_t
pic_cdc_max_chunks(const pic_cdc *c, size_t n)
{
    return n / c->p.min_size + 1;
}

size_t
pic_cdc_chunks(const pic_cdc *c, const char *data, size_t n, size_t *ends, size_t cap)
{
    size_t count = 0, at = 0;
    while (at < n) {
        at += pic_cdc_cut(c, data + at, n - at);
        if (count < cap) {
            ends[count] = at;
        }
        count++;
    }
    return count;
}

/* --- S1 windows --- */

size_t
pic_cdc_windows(const pic_cdc *c, const pic_key_ctx *kc, const char *data, size_t n,
                uint32_t win, pic_cdc_window *out, size_t cap)
{
    const unsigned char *d = (const unsigned char *) data;
    size_t               count = 0;
    uint64_t             h = 0;

    if (win < 16 || win > 65536 || n < 64 + (size_t) win) {
        return 0;
    }
    unsigned bits = pic_log2(win);
    uint64_t anchor = 1ull << (64 - (bits > 3 ? bits - 2 : 1));  /* every ~win/4 */
    size_t   next = 64;                                            /* full history */
    for (size_t i = 0; i + win < n; i++) {
        h = (h << 1) + c->gear[d[i]];
        size_t at = i + 1;                  /* h covers d[at-64 .. at-1] */
        if (at < next || h >= anchor) {
            continue;
        }
        if (count < cap) {
            out[count].off = (uint32_t) at;
            out[count].len = win;
            pic_key_compute(kc, data + at, win, &out[count].key);
        }
        count++;
        next = at + win;
    }
    return count;
}
