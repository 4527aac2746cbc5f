/*
 * stopstr.c — stop strings over streamed text (stopstr.h).
 */
#include <string.h>

#include "stopstr.h"

/* First occurrence of needle (nlen > 0) in hay, or NULL. */
static const char *
pic_memmem(const char *hay, size_t hlen, const char *needle, size_t nlen)
{
    if (nlen > hlen) {
        return NULL;
    }
    for (size_t i = 0; i + nlen <= hlen; i++) {
        if (hay[i] == needle[0] && memcmp(hay + i, needle, nlen) == 0) {
            return hay + i;
        }
    }
    return NULL;
}

size_t
pic_stop_scan(const char *buf, size_t len, const char *const *stops,
              int n_stops, int *matched)
{
    size_t first = len, keep = 0;

    *matched = 0;
    for (int i = 0; i < n_stops; i++) {
        size_t      sl = stops[i] ? strlen(stops[i]) : 0;
        const char *at;

        if (sl == 0) {
            continue;
        }
        at = pic_memmem(buf, len, stops[i], sl);
        if (at != NULL && (size_t) (at - buf) < first) {
            first = (size_t) (at - buf);
            *matched = 1;
        }
    }
    if (*matched) {
        return first;
    }
    /* the longest tail of buf that a stop string starts with */
    for (int i = 0; i < n_stops; i++) {
        size_t sl = stops[i] ? strlen(stops[i]) : 0;
        size_t t = sl > 0 ? sl - 1 : 0;     /* a proper prefix at most */

        for (t = t > len ? len : t; t > keep; t--) {
            if (memcmp(buf + len - t, stops[i], t) == 0) {
                keep = t;
                break;
            }
        }
    }
    return len - keep;
}
