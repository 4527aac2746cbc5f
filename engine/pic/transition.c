/*
 * transition.c — the dense and scalar transition families (transition.h).
 */
#include <string.h>

#include <cblas.h>

#include "transition.h"

/* --- dense: T_h (dk, dk) --- */

static size_t
pic_dense_head_floats(int dk)
{
    return (size_t) dk * dk;
}

static void
pic_dense_identity(float *T, int dk)
{
    memset(T, 0, (size_t) dk * dk * sizeof(float));
    for (int i = 0; i < dk; i++) {
        T[(size_t) i * dk + i] = 1.0f;
    }
}

static void
pic_dense_apply(const float *T, const float *S, float *Y, int dk, int dv)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dk, dv, dk, 1.0f, T, dk,
                S, dv, 1.0f, Y, dv);
}

static double
pic_dense_flops(int Hv, int dk, int dv)
{
    return 2.0 * Hv * dk * (double) dk * dv;
}

/* --- scalar: T_h = Π a_t --- */

static size_t
pic_scalar_head_floats(int dk)
{
    (void) dk;
    return 1;
}

static void
pic_scalar_identity(float *T, int dk)
{
    (void) dk;
    T[0] = 1.0f;
}

static void
pic_scalar_apply(const float *T, const float *S, float *Y, int dk, int dv)
{
    float a = T[0];

    for (size_t i = 0; i < (size_t) dk * dv; i++) {
        Y[i] += a * S[i];
    }
}

static double
pic_scalar_flops(int Hv, int dk, int dv)
{
    return 2.0 * Hv * (double) dk * dv;
}

static const pic_transition pic_trans_dense = {
    .name = "dense",
    .head_floats = pic_dense_head_floats,
    .identity = pic_dense_identity,
    .apply = pic_dense_apply,
    .flops = pic_dense_flops,
};

static const pic_transition pic_trans_scalar = {
    .name = "scalar",
    .head_floats = pic_scalar_head_floats,
    .identity = pic_scalar_identity,
    .apply = pic_scalar_apply,
    .flops = pic_scalar_flops,
};

const pic_transition *
pic_transition_of(pic_layer_type t)
{
    switch (t) {
    case PIC_LAYER_LINEAR:
        return &pic_trans_dense;
    case PIC_LAYER_MAMBA2:
        return &pic_trans_scalar;
    default:
        return NULL;
    }
}

size_t
pic_transition_bytes(const pic_config *c, pic_layer_type t, size_t es)
{
    const pic_transition *tr = pic_transition_of(t);

    return tr == NULL ? 0 : (size_t) c->lin_v_heads * tr->head_floats(c->lin_k_dim) * es;
}
