/*
 * transition.h — the transition families of PIC entries (DESIGN.md §3.8):
 * how a linear layer's segment transition T is held, started, and applied
 * when an entry is composed into a running state, S ← T·S + S|0.
 *
 *  - dense (Gated DeltaNet): T_h = Π e^{g}(I − β k kᵀ), a dk×dk matrix per
 *    head, advanced by the GDN kernel itself (gdn_chunked from S = I);
 *  - scalar (Mamba2): T_h = Π a_t, one number per head, the product the
 *    scan returns (ssd_scan's decay).
 *
 * The entry layout, its sizes, assembly and the capacity report read the
 * family of each linear layer here instead of assuming one.  Per head the
 * state is (dk, dv) in both: GDN's (dk, dv), Mamba2's (P, N).
 */
#ifndef PIC_TRANSITION_H
#define PIC_TRANSITION_H

#include <stddef.h>

#include "model.h"

typedef struct {
    const char *name;               /* "dense", "scalar" */
    /* floats of T_h per head for a state of dk rows (dk·dk, or 1) */
    size_t (*head_floats)(int dk);
    /* T_h(head_floats) ← the identity (I, or 1) */
    void   (*identity)(float *T, int dk);
    /* Y(dk, dv) ← T_h S + Y: S|0 in Y on entry, the composed state on return */
    void   (*apply)(const float *T, const float *S, float *Y, int dk, int dv);
    /* FLOPs of apply over Hv heads */
    double (*flops)(int Hv, int dk, int dv);
} pic_transition;

/* The family of a layer kind: dense for GDN, scalar for Mamba2, NULL for
 * layers without a recurrent state (attention). */
const pic_transition *pic_transition_of(pic_layer_type t);

/* Bytes of one linear layer's T in an entry stored at es bytes a value. */
size_t pic_transition_bytes(const pic_config *c, pic_layer_type t, size_t es);

#endif /* PIC_TRANSITION_H */
