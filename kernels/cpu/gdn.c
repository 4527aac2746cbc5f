/*
 * gdn.c — CPU reference for the Gated DeltaNet recurrence (MODEL.md §3):
 * the token-by-token form (reference, decode) and the chunked WY form used
 * for prefill, whose inner products are OpenBLAS GEMMs and one TRSM per
 * chunk and head.  Both accept any entering state with ds columns and
 * v == NULL (writes zeroed), so the same code advances transition
 * operators T (DESIGN.md §3.1).
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

void
pic_cpu_gdn_check(const pic_gdn_args *a)
{
    PIC_OP_CHECK(a != NULL);
    PIC_OP_CHECK(a->n >= 0 && a->Hk > 0 && a->Hv > 0 && a->Hv % a->Hk == 0);
    PIC_OP_CHECK(a->dk > 0 && a->ds > 0);
    PIC_OP_CHECK(a->k != NULL && a->ldk >= a->Hk * a->dk);
    PIC_OP_CHECK(a->g != NULL && a->beta != NULL && a->S != NULL);
    PIC_OP_CHECK(a->v == NULL || a->ldv >= a->Hv * a->ds);
    PIC_OP_CHECK(a->o == NULL || (a->q != NULL && a->ldq >= a->Hk * a->dk
                                  && a->ldo >= a->Hv * a->ds));
}

/* --- token by token --- */

/* Head h of pic_cpu_gdn_recurrent, every token in order. */
static void
pic_gdn_recurrent_head(const pic_gdn_args *a, int h)
{
    int    r = a->Hv / a->Hk, dk = a->dk, ds = a->ds, Hv = a->Hv;
    float *S = a->S + (size_t) h * dk * ds;    /* (dk, ds) */
    float  m[ds];

    for (int t = 0; t < a->n; t++) {
        const float *k = a->k + (size_t) t * a->ldk + (size_t) (h / r) * dk;
        const float *v = a->v ? a->v + (size_t) t * a->ldv + (size_t) h * ds
                              : NULL;
        float        eg = expf(a->g[(size_t) t * Hv + h]);
        float        b = a->beta[(size_t) t * Hv + h];

        /* S ← e^g S;  m = Sᵀ k */
        for (int j = 0; j < ds; j++) {
            m[j] = 0.0f;
        }
        for (int i = 0; i < dk; i++) {
            float *Si = S + (size_t) i * ds;
            for (int j = 0; j < ds; j++) {
                Si[j] *= eg;
                m[j] += Si[j] * k[i];
            }
        }
        /* δ = β (v − m);  S ← S + k δᵀ */
        for (int j = 0; j < ds; j++) {
            m[j] = b * ((v ? v[j] : 0.0f) - m[j]);
        }
        for (int i = 0; i < dk; i++) {
            float *Si = S + (size_t) i * ds;
            for (int j = 0; j < ds; j++) {
                Si[j] += k[i] * m[j];
            }
        }
        /* o = Sᵀ q */
        if (a->o != NULL) {
            const float *q = a->q + (size_t) t * a->ldq + (size_t) (h / r) * dk;
            float       *o = a->o + (size_t) t * a->ldo + (size_t) h * ds;

            for (int j = 0; j < ds; j++) {
                o[j] = 0.0f;
            }
            for (int i = 0; i < dk; i++) {
                const float *Si = S + (size_t) i * ds;
                for (int j = 0; j < ds; j++) {
                    o[j] += Si[j] * q[i];
                }
            }
        }
    }
}

void
pic_cpu_gdn_recurrent(const pic_gdn_args *a)
{
    pic_cpu_gdn_check(a);

    int Hv = a->Hv;

    if (pic_cpu_par(Hv > 1 && (size_t) a->n * a->dk * a->ds > 16384)) {
        #pragma omp parallel for schedule(static)
        for (int h = 0; h < Hv; h++) {
            pic_gdn_recurrent_head(a, h);
        }
        return;
    }
    for (int h = 0; h < Hv; h++) {
        pic_gdn_recurrent_head(a, h);
    }
}

/* --- chunked (WY form) --- */

typedef struct {
    float *Kc;      /* (C, dk) chunk keys */
    float *Qc;      /* (C, dk) chunk queries, then Q ∘ e^G */
    float *B;       /* (C, ds + dk) [β V | β K ∘ e^G], solved in place: [U | W] */
    float *A;       /* (C, C) β K Kᵀ ∘ D, strict lower: the unit-lower system */
    float *P;       /* (C, C) Q Kᵀ ∘ D, lower incl. diagonal */
    float *G;       /* (C) cumulative log decay */
} pic_gdn_scratch;

/* Advance one value head over tokens [t0, t0+c) (c <= PIC_GDN_CHUNK). */
static void
pic_gdn_chunk(const pic_gdn_args *a, int h, int t0, int c, pic_gdn_scratch *w)
{
    int          dk = a->dk, ds = a->ds, Hv = a->Hv, kh = h / (a->Hv / a->Hk);
    int          ldb = ds + dk;
    float       *S = a->S + (size_t) h * dk * ds;
    float       *U = w->B, *W = w->B + ds;
    const int    C = PIC_GDN_CHUNK;

    /* gather keys (and queries), cumulative decay */
    float acc = 0.0f;
    for (int i = 0; i < c; i++) {
        memcpy(w->Kc + (size_t) i * dk,
               a->k + (size_t) (t0 + i) * a->ldk + (size_t) kh * dk,
               dk * sizeof(float));
        acc += a->g[(size_t) (t0 + i) * Hv + h];
        w->G[i] = acc;
    }

    /* A = K Kᵀ, then M = I + strict_lower(diag(β) A ∘ D) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c, c, dk, 1.0f,
                w->Kc, dk, w->Kc, dk, 0.0f, w->A, C);
    for (int i = 0; i < c; i++) {
        float b = a->beta[(size_t) (t0 + i) * Hv + h];
        for (int j = 0; j < i; j++) {
            w->A[i * C + j] *= b * expf(w->G[i] - w->G[j]);
        }
    }

    /* B = [β V | β K ∘ e^G]; solve M [U | W] = B */
    for (int i = 0; i < c; i++) {
        float  b = a->beta[(size_t) (t0 + i) * Hv + h];
        float  e = b * expf(w->G[i]);
        float *Br = w->B + (size_t) i * ldb;

        if (a->v != NULL) {
            const float *v = a->v + (size_t) (t0 + i) * a->ldv + (size_t) h * ds;
            for (int j = 0; j < ds; j++) {
                Br[j] = b * v[j];
            }
        } else {
            memset(Br, 0, ds * sizeof(float));
        }
        for (int j = 0; j < dk; j++) {
            Br[ds + j] = e * w->Kc[(size_t) i * dk + j];
        }
    }
    if (a->v != NULL) {
        cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans,
                    CblasUnit, c, ldb, 1.0f, w->A, C, w->B, ldb);
    } else {
        cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans,
                    CblasUnit, c, dk, 1.0f, w->A, C, W, ldb);
    }

    /* V' = U − W S  (stored in U) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c, ds, dk, -1.0f,
                W, ldb, S, ds, 1.0f, U, ldb);

    /* O = (Q ∘ e^G) S + (Q Kᵀ ∘ D, lower incl. diagonal) V' */
    if (a->o != NULL) {
        for (int i = 0; i < c; i++) {
            memcpy(w->Qc + (size_t) i * dk,
                   a->q + (size_t) (t0 + i) * a->ldq + (size_t) kh * dk,
                   dk * sizeof(float));
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c, c, dk, 1.0f,
                    w->Qc, dk, w->Kc, dk, 0.0f, w->P, C);
        for (int i = 0; i < c; i++) {
            float e = expf(w->G[i]);
            for (int j = 0; j <= i; j++) {
                w->P[i * C + j] *= expf(w->G[i] - w->G[j]);
            }
            for (int j = i + 1; j < c; j++) {
                w->P[i * C + j] = 0.0f;
            }
            for (int j = 0; j < dk; j++) {
                w->Qc[(size_t) i * dk + j] *= e;
            }
        }
        float *O = a->o + (size_t) t0 * a->ldo + (size_t) h * ds;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c, ds, dk,
                    1.0f, w->Qc, dk, S, ds, 0.0f, O, a->ldo);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c, ds, c,
                    1.0f, w->P, C, U, ldb, 1.0f, O, a->ldo);
    }

    /* S ← e^{G_c} S + (K ∘ e^{G_c − G})ᵀ V' */
    float gl = w->G[c - 1], el = expf(gl);
    for (size_t i = 0; i < (size_t) dk * ds; i++) {
        S[i] *= el;
    }
    for (int i = 0; i < c; i++) {
        float e = expf(gl - w->G[i]);
        for (int j = 0; j < dk; j++) {
            w->Kc[(size_t) i * dk + j] *= e;
        }
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dk, ds, c, 1.0f,
                w->Kc, dk, U, ldb, 1.0f, S, ds);
}

void
pic_cpu_gdn_chunked(const pic_gdn_args *a)
{
    pic_cpu_gdn_check(a);
    if (a->n == 0) {
        return;
    }

    const int C = PIC_GDN_CHUNK;
    int       saved = pic_cpu_blas_serial_begin();
    int       dk = a->dk, ds = a->ds;

    #pragma omp parallel if (a->Hv > 1 && (double) a->n * a->Hv * dk * ds > 131072.0)
    {
        pic_gdn_scratch w;
        size_t          sz = (size_t) C * dk * 2 + (size_t) C * (ds + dk)
                             + (size_t) C * C * 2 + C;
        float          *buf = malloc(sz * sizeof(float));

        PIC_OP_CHECK(buf != NULL);
        w.Kc = buf;
        w.Qc = w.Kc + (size_t) C * dk;
        w.B = w.Qc + (size_t) C * dk;
        w.A = w.B + (size_t) C * (ds + dk);
        w.P = w.A + (size_t) C * C;
        w.G = w.P + (size_t) C * C;

        #pragma omp for schedule(dynamic)
        for (int h = 0; h < a->Hv; h++) {
            for (int t0 = 0; t0 < a->n; t0 += C) {
                int c = a->n - t0 < C ? a->n - t0 : C;
                pic_gdn_chunk(a, h, t0, c, &w);
            }
        }
        free(buf);
    }
    pic_cpu_blas_serial_end(saved);
}
