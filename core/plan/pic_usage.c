/*
 * pic_usage.c — the reuse a foreign server reports in its answer (pic_usage.h).
 */
#include <string.h>

#include "pic_usage.h"

enum {
    PIC_USAGE_OUT,        /* between tokens */
    PIC_USAGE_STR,        /* inside a string */
    PIC_USAGE_ESC,        /* ... after a backslash */
    PIC_USAGE_COLON,      /* after a known key: white space, then ':' */
    PIC_USAGE_VALUE,      /* after its ':': white space, then digits */
    PIC_USAGE_DIGITS      /* reading its number */
};

static const char *const pic_usage_names[PIC_USAGE_KEYS] = {
    "cached_tokens", "prompt_tokens", "cache_n", "prompt_n"
};

void
pic_usage_init(pic_usage *u)
{
    memset(u, 0, sizeof(*u));
    u->state = PIC_USAGE_OUT;
    u->key = -1;
}

static int
pic_usage_key(const pic_usage *u)
{
    int k;

    if (u->name_len > PIC_USAGE_NAME_MAX) {
        return -1;
    }
    for (k = 0; k < PIC_USAGE_KEYS; k++) {
        if (strlen(pic_usage_names[k]) == u->name_len
            && memcmp(pic_usage_names[k], u->name, u->name_len) == 0) {
            return k;
        }
    }
    return -1;
}

static int
pic_usage_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

void
pic_usage_scan(pic_usage *u, const unsigned char *p, size_t len)
{
    size_t        i;
    unsigned char c;

    for (i = 0; i < len; i++) {
        c = p[i];

        switch (u->state) {

        case PIC_USAGE_STR:
            if (c == '\\') {
                u->state = PIC_USAGE_ESC;
                u->name_len = PIC_USAGE_NAME_MAX + 1;     /* no key has one */
            } else if (c == '"') {
                u->key = pic_usage_key(u);
                u->state = u->key >= 0 ? PIC_USAGE_COLON : PIC_USAGE_OUT;
            } else if (u->name_len < PIC_USAGE_NAME_MAX) {
                u->name[u->name_len++] = (char) c;
            } else {
                u->name_len = PIC_USAGE_NAME_MAX + 1;
            }
            continue;

        case PIC_USAGE_ESC:
            u->state = PIC_USAGE_STR;
            continue;

        case PIC_USAGE_COLON:
            if (pic_usage_space(c)) {
                continue;
            }
            if (c == ':') {
                u->state = PIC_USAGE_VALUE;
                continue;
            }
            break;                  /* a string value, not a key: rescan */

        case PIC_USAGE_VALUE:
            if (pic_usage_space(c)) {
                continue;
            }
            if (c >= '0' && c <= '9') {
                u->state = PIC_USAGE_DIGITS;
                u->num = 0;
                u->digits = 0;
                /* fall through to the digits below */
            } else {
                break;              /* null, a string, an object: not ours */
            }
            /* fall through */

        case PIC_USAGE_DIGITS:
            if (c >= '0' && c <= '9') {
                if (u->digits < 18) {
                    u->num = u->num * 10 + (uint64_t) (c - '0');
                }
                u->digits++;
                continue;
            }
            if (u->digits < 18) {   /* beyond: never a token count */
                u->val[u->key] = u->num;
                u->seen[u->key] = 1;
            }
            break;

        default:
            break;
        }

        /* between tokens: this byte may open a string */
        u->key = -1;
        u->state = PIC_USAGE_OUT;
        if (c == '"') {
            u->state = PIC_USAGE_STR;
            u->name_len = 0;
        }
    }
}

int64_t
pic_usage_cached(const pic_usage *u)
{
    if (u->seen[PIC_USAGE_CACHED]) {
        return (int64_t) u->val[PIC_USAGE_CACHED];
    }
    if (u->seen[PIC_USAGE_CACHE_N]) {
        return (int64_t) u->val[PIC_USAGE_CACHE_N];
    }
    return -1;
}

int64_t
pic_usage_prompt(const pic_usage *u)
{
    if (u->seen[PIC_USAGE_PROMPT]) {
        return (int64_t) u->val[PIC_USAGE_PROMPT];
    }
    if (u->seen[PIC_USAGE_CACHE_N] && u->seen[PIC_USAGE_PROMPT_N]) {
        return (int64_t) (u->val[PIC_USAGE_CACHE_N] + u->val[PIC_USAGE_PROMPT_N]);
    }
    return -1;
}
