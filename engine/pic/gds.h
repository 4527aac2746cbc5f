/*
 * gds.h — cost-aware eviction (GreedyDual-Size) for the engine's caches
 * (budget.h).
 *
 * Every cached item gets a priority H = L + cost / bytes when it is
 * stored or used, where cost is what losing it costs in model FLOPs (the
 * tokens it would take to recompute, times the model's per-token cost) and
 * L is a clock shared by every part of the budget; the item with the
 * smallest H is evicted first and L rises to its H.  Items used long ago
 * age (their H stays while L rises past it); among items used at the same
 * time, the cheap-to-recompute big one goes before the expensive small one.
 * With equal cost per byte it is LRU.
 *
 * An indexed binary min-heap orders a part's candidates: the heap node is
 * embedded in the item (its key is H, its index lets the item leave or move
 * in O(log n)).  The heap has no lock of its own: its part's lock guards it.
 */
#ifndef PIC_GDS_H
#define PIC_GDS_H

#include <stddef.h>

typedef struct {
    double key;             /* H */
    size_t idx;             /* 1-based place in the heap; 0: not in it */
} pic_gds_node;

typedef struct {
    pic_gds_node **a;       /* (n, room for cap) a[0] has the smallest key */
    size_t         n, cap;
} pic_gds_heap;

/* Add x (x->key set, x not in a heap); -1 on ENOMEM (x stays out). */
int pic_gds_push(pic_gds_heap *h, pic_gds_node *x);

/* Take x out (nothing if it is not in the heap). */
void pic_gds_remove(pic_gds_heap *h, pic_gds_node *x);

/* Move x to its place after its key changed (x in the heap). */
void pic_gds_update(pic_gds_heap *h, pic_gds_node *x);

/* The node with the smallest key, or NULL when empty. */
pic_gds_node *pic_gds_min(const pic_gds_heap *h);

/* Free the heap's array (not the nodes). */
void pic_gds_free(pic_gds_heap *h);

/* Raise the shared clock *L to h if h is larger (atomic; any thread). */
void pic_gds_raise(double *L, double h);

/* The shared clock's value now (atomic). */
double pic_gds_clock(const double *L);

#endif /* PIC_GDS_H */
