/*
 * pic_utf8.c — strict UTF-8 (RFC 3629 table 3-7) and Python whitespace.
 */
#include "pic_utf8.h"

size_t
pic_utf8_decode(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *) s;
    if (n == 0) {
        return 0;
    }
    unsigned c = p[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c < 0xC2) {
        return 0;                       /* continuation byte or overlong C0/C1 */
    }
    if (c < 0xE0) {
        if (n < 2 || (p[1] & 0xC0) != 0x80) {
            return 0;
        }
        *cp = ((c & 0x1Fu) << 6) | (p[1] & 0x3Fu);
        return 2;
    }
    if (c < 0xF0) {
        if (n < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) {
            return 0;
        }
        if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0)) {
            return 0;                   /* overlong, or UTF-16 surrogate */
        }
        *cp = ((c & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80
            || (p[3] & 0xC0) != 0x80) {
            return 0;
        }
        if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] >= 0x90)) {
            return 0;                   /* overlong, or above U+10FFFF */
        }
        *cp = ((c & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12)
            | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
        return 4;
    }
    return 0;
}

size_t
pic_utf8_check(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *) s;
    size_t i = 0;
    while (i < n) {
        /* fast path: 8 ASCII bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            __builtin_memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull) {
                break;
            }
            i += 8;
        }
        if (i >= n) {
            break;
        }
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t   k = pic_utf8_decode(s + i, n - i, &cp);
        if (k == 0) {
            return i;
        }
        i += k;
    }
    return n;
}

int
pic_utf8_is_py_space(uint32_t cp)
{
    if (cp <= 0x20) {
        return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
    }
    if (cp < 0x85) {
        return 0;
    }
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

int
pic_utf8_is_boundary(const char *s, size_t n, size_t i)
{
    if (i == 0 || i >= n) {
        return 1;
    }
    return (((const unsigned char *) s)[i] & 0xC0) != 0x80;
}

void
pic_utf8_py_strip(const char *s, size_t n, size_t *start, size_t *end)
{
    size_t   a = 0, b = n;
    uint32_t cp;

    while (a < b) {
        size_t k = pic_utf8_decode(s + a, b - a, &cp);
        if (k == 0 || !pic_utf8_is_py_space(cp)) {
            break;
        }
        a += k;
    }
    while (b > a) {
        size_t j = b - 1;                       /* back up to a lead byte */
        while (j > a && !pic_utf8_is_boundary(s, n, j)) {
            j--;
        }
        size_t k = pic_utf8_decode(s + j, b - j, &cp);
        if (k == 0 || j + k != b || !pic_utf8_is_py_space(cp)) {
            break;
        }
        b = j;
    }
    *start = a;
    *end = b;
}
