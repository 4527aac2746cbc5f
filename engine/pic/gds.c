/*
 * gds.c — the indexed min-heap and shared clock of cost-aware eviction
 * (gds.h).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gds.h"
#include "pic_buf.h"

static void
pic_gds_set(pic_gds_heap *h, size_t i, pic_gds_node *x)
{
    h->a[i] = x;
    x->idx = i + 1;
}

static void
pic_gds_up(pic_gds_heap *h, size_t i)
{
    pic_gds_node *x = h->a[i];

    while (i > 0 && h->a[(i - 1) / 2]->key > x->key) {
        pic_gds_set(h, i, h->a[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    pic_gds_set(h, i, x);
}

static void
pic_gds_down(pic_gds_heap *h, size_t i)
{
    pic_gds_node *x = h->a[i];

    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) {
            break;
        }
        if (c + 1 < h->n && h->a[c + 1]->key < h->a[c]->key) {
            c++;
        }
        if (h->a[c]->key >= x->key) {
            break;
        }
        pic_gds_set(h, i, h->a[c]);
        i = c;
    }
    pic_gds_set(h, i, x);
}

int
pic_gds_push(pic_gds_heap *h, pic_gds_node *x)
{
    if (pic_grow((void **) &h->a, &h->cap, h->n + 1, sizeof(*h->a)) != 0) {
        x->idx = 0;
        return -1;
    }
    h->a[h->n] = x;
    pic_gds_up(h, h->n++);
    return 0;
}

void
pic_gds_remove(pic_gds_heap *h, pic_gds_node *x)
{
    size_t i;

    if (x->idx == 0) {
        return;
    }
    i = x->idx - 1;
    x->idx = 0;
    if (i == --h->n) {
        return;
    }
    h->a[i] = h->a[h->n];
    h->a[i]->idx = i + 1;
    pic_gds_update(h, h->a[i]);
}

void
pic_gds_update(pic_gds_heap *h, pic_gds_node *x)
{
    size_t i = x->idx - 1;

    if (i > 0 && h->a[(i - 1) / 2]->key > x->key) {
        pic_gds_up(h, i);
    } else {
        pic_gds_down(h, i);
    }
}

pic_gds_node *
pic_gds_min(const pic_gds_heap *h)
{
    return h->n > 0 ? h->a[0] : NULL;
}

void
pic_gds_free(pic_gds_heap *h)
{
    free(h->a);
    h->a = NULL;
    h->n = h->cap = 0;
}

void
pic_gds_raise(double *L, double h)
{
    double cur;

    __atomic_load(L, &cur, __ATOMIC_RELAXED);
    while (h > cur && !__atomic_compare_exchange(L, &cur, &h, 1, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED)) {
    }
}

double
pic_gds_clock(const double *L)
{
    double v;

    __atomic_load(L, &v, __ATOMIC_RELAXED);
    return v;
}
