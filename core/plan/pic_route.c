/*
 * pic_route.c — the gateway's routing policy over plain arrays (pic_route.h).
 */
#include <stdlib.h>

#include <xxhash.h>

#include "pic_lpt.h"
#include "pic_route.h"

size_t
pic_route_home(const unsigned char *key, const pic_route_cand *c, size_t n)
{
    uint64_t w, best_w = 0;
    size_t   i, best = 0;

    for (i = 0; i < n; i++) {
        w = XXH3_64bits_withSeed(key, PIC_ROUTE_KEY_LEN, c[i].seed);
        if (i == 0 || w > best_w) {
            best = i;
            best_w = w;
        }
    }
    return best;
}

size_t
pic_route_pick(const pic_route_cand *c, size_t n, uint64_t imbalance, size_t weight,
               int seen, const unsigned char *first_key)
{
    uint64_t min_load = UINT64_MAX;
    size_t   i, tie, best = 0, score, best_score = 0;
    int      have = 0;

    for (i = 0; i < n; i++) {
        if (c[i].load < min_load) {
            min_load = c[i].load;
        }
    }
    tie = first_key != NULL ? pic_route_home(first_key, c, n) : 0;

    for (i = 0; i < n; i++) {
        if (c[i].load - min_load > imbalance) {
            continue;
        }
        score = c[i].local + c[i].home / PIC_ROUTE_HOME_DIV
                + (weight == PIC_ROUTE_INDEX_ONLY ? c[i].held : weight * c[i].exact)
                + (seen ? c[i].seen / PIC_ROUTE_SEEN_DIV : 0);
        if (!have || score > best_score
            || (score == best_score && c[i].load < c[best].load)
            || (score == best_score && c[i].load == c[best].load && i == tie)) {
            best = i;
            best_score = score;
            have = 1;
        }
    }
    return best;
}

size_t
pic_route_affinity(const pic_route_cand *c, size_t n, uint64_t imbalance,
                   size_t floor, const unsigned char *tie_key)
{
    uint64_t min_load = UINT64_MAX;
    size_t   i, tie, best = 0, ei, eb;
    int      have = 0, better;

    for (i = 0; i < n; i++) {
        if (c[i].load < min_load) {
            min_load = c[i].load;
        }
    }
    tie = tie_key != NULL ? pic_route_home(tie_key, c, n) : n;

    for (i = 0; i < n; i++) {
        if (c[i].load - min_load > imbalance) {
            continue;
        }
        ei = c[i].exact >= floor ? c[i].exact : 0;
        eb = have && c[best].exact >= floor ? c[best].exact : 0;
        if (!have) {
            better = 1;
        } else if (ei != eb) {
            better = ei > eb;
        } else if (c[i].local != c[best].local) {
            better = c[i].local > c[best].local;
        } else if (c[i].load != c[best].load) {
            better = c[i].load < c[best].load;
        } else {
            better = i == tie;
        }
        if (better) {
            best = i;
            have = 1;
        }
    }
    return best;
}

int
pic_route_misses(const pic_route_cand *c, size_t n, const uint64_t *w,
                 const size_t *home, size_t m, uint64_t imbalance, uint64_t unit,
                 uint32_t *assign, pic_error *err)
{
    uint64_t *load0, min_load = UINT64_MAX;
    uint32_t *pin;
    size_t    i;
    int       rc;

    if (m == 0) {
        return 0;
    }
    load0 = malloc((n ? n : 1) * sizeof(*load0));
    pin = malloc(m * sizeof(*pin));
    if (load0 == NULL || pin == NULL) {
        free(load0);
        free(pin);
        pic_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    for (i = 0; i < n; i++) {
        load0[i] = c[i].load * unit;
        if (c[i].load < min_load) {
            min_load = c[i].load;
        }
    }
    for (i = 0; i < m; i++) {
        pin[i] = home[i] < n && c[home[i]].load - min_load <= imbalance
                 ? (uint32_t) home[i] : PIC_LPT_FREE;
    }
    rc = pic_lpt_assign(w, m, load0, n, pin, assign, NULL, err);
    free(load0);
    free(pin);
    return rc;
}
