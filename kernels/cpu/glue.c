/*
 * glue.c — CPU reference for the forward's glue ops (pic_kernels.h): the
 * elementwise product, bias rows, strided row copies, batched per-head l2norm, row
 * gather and scatter-add, the GDN gates, the KV store, the MoE router, and
 * the host-memory slots of the CPU backend.  Rows go over the OpenMP team
 * when there are enough of them (pic_cpu_par); nothing allocates but
 * mem_alloc.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

/* Rows below this stay on the calling thread: a team costs ~0.5 µs. */
#define PIC_GLUE_PAR_FLOATS 16384

void
pic_cpu_mul(float *y, const float *x, size_t n)
{
    PIC_OP_CHECK((y != NULL && x != NULL) || n == 0);

    if (pic_cpu_par(n > 65536)) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            y[i] *= x[i];
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        y[i] *= x[i];
    }
}

void
pic_cpu_add_rows(float *y, const float *b, int n, int dim)
{
    PIC_OP_CHECK(y != NULL && b != NULL && n >= 0 && dim >= 0);

    #pragma omp parallel for schedule(static) if (pic_cpu_par((size_t) n * dim > PIC_GLUE_PAR_FLOATS))
    for (int r = 0; r < n; r++) {
        float *row = y + (size_t) r * dim;

        for (int i = 0; i < dim; i++) {
            row[i] += b[i];
        }
    }
}

void
pic_cpu_scale_rows(float *x, int ld, int n, int dim, float alpha)
{
    PIC_OP_CHECK(x != NULL && n >= 0 && dim >= 0 && ld >= dim);

    #pragma omp parallel for schedule(static) if (pic_cpu_par((size_t) n * dim > PIC_GLUE_PAR_FLOATS))
    for (int r = 0; r < n; r++) {
        float *row = x + (size_t) r * ld;

        for (int i = 0; i < dim; i++) {
            row[i] *= alpha;
        }
    }
}

void
pic_cpu_copy_rows(float *dst, int ldd, const float *src, int lds, int n, int dim)
{
    PIC_OP_CHECK(dst != NULL && src != NULL && n >= 0 && dim >= 0);
    PIC_OP_CHECK(ldd >= dim && lds >= dim);

    if (pic_cpu_par((size_t) n * dim > PIC_GLUE_PAR_FLOATS)) {
        #pragma omp parallel for schedule(static)
        for (int r = 0; r < n; r++) {
            memcpy(dst + (size_t) r * ldd, src + (size_t) r * lds,
                   (size_t) dim * sizeof(float));
        }
        return;
    }
    for (int r = 0; r < n; r++) {
        memcpy(dst + (size_t) r * ldd, src + (size_t) r * lds,
               (size_t) dim * sizeof(float));
    }
}

void
pic_cpu_l2norm_heads(float *x, int n, int ld, int heads, int dim, float eps,
                     float scale)
{
    PIC_OP_CHECK(x != NULL && n >= 0 && heads >= 0 && dim > 0);
    PIC_OP_CHECK(ld >= heads * dim);

    /* the same row arithmetic as l2norm (one call per row), so equal bit
     * for bit to the per-token loop it replaces */
    if (pic_cpu_par((size_t) n * heads * dim > PIC_GLUE_PAR_FLOATS)) {
        #pragma omp parallel for schedule(static)
        for (int r = 0; r < n * heads; r++) {
            pic_cpu_l2norm(x + (size_t) (r / heads) * ld + (size_t) (r % heads) * dim,
                           1, dim, dim, eps, scale);
        }
        return;
    }
    for (int t = 0; t < n; t++) {
        pic_cpu_l2norm(x + (size_t) t * ld, heads, dim, dim, eps, scale);
    }
}

void
pic_cpu_gather_rows(float *x, const pic_wmat *w, const int *ids, int n)
{
    PIC_OP_CHECK(x != NULL && w != NULL && n >= 0 && (ids != NULL || n == 0));

    for (int t = 0; t < n; t++) {
        PIC_OP_CHECK(ids[t] >= 0 && ids[t] < w->rows);
    }
    if (pic_cpu_par((size_t) n * w->cols > PIC_GLUE_PAR_FLOATS)) {
        #pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++) {
            pic_cpu_wmat_rows(x + (size_t) t * w->cols, w, ids[t], 1);
        }
        return;
    }
    for (int t = 0; t < n; t++) {
        pic_cpu_wmat_rows(x + (size_t) t * w->cols, w, ids[t], 1);
    }
}

/* One row of pic_cpu_scatter_add. */
static void
pic_scatter_row(float *xr, const float *sr, float wt, int dim)
{
    for (int i = 0; i < dim; i++) {
        xr[i] += wt * sr[i];
    }
}

void
pic_cpu_scatter_add(float *x, const float *src, const int *ids, const float *wts,
                    int n, int dim)
{
    PIC_OP_CHECK(x != NULL && src != NULL && n >= 0 && dim > 0);

    /* ids distinct: the rows are independent */
    if (pic_cpu_par((size_t) n * dim > PIC_GLUE_PAR_FLOATS)) {
        #pragma omp parallel for schedule(static)
        for (int r = 0; r < n; r++) {
            pic_scatter_row(x + (size_t) (ids ? ids[r] : r) * dim, src + (size_t) r * dim,
                            wts ? wts[r] : 1.0f, dim);
        }
        return;
    }
    for (int r = 0; r < n; r++) {
        pic_scatter_row(x + (size_t) (ids ? ids[r] : r) * dim, src + (size_t) r * dim,
                        wts ? wts[r] : 1.0f, dim);
    }
}

void
pic_cpu_gdn_gates(float *g, float *beta, const float *A_log, const float *dt_bias,
                  int n, int Hv)
{
    PIC_OP_CHECK(g != NULL && beta != NULL && A_log != NULL && dt_bias != NULL);
    PIC_OP_CHECK(n >= 0 && Hv > 0);

    /* the forward's former sequence of ops, so the same bits */
    pic_cpu_sigmoid(beta, (size_t) n * Hv);
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < Hv; h++) {
            g[t * Hv + h] += dt_bias[h];
        }
    }
    pic_cpu_softplus(g, (size_t) n * Hv);
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < Hv; h++) {
            g[t * Hv + h] *= -expf(A_log[h]);
        }
    }
}

void
pic_cpu_kv_store(float *kc, float *vc, int cap, const float *k, const float *v,
                 int n, int Hkv, int hd, int p0)
{
    PIC_OP_CHECK(kc != NULL && vc != NULL && k != NULL && v != NULL);
    PIC_OP_CHECK(n >= 0 && Hkv > 0 && hd > 0 && p0 >= 0 && p0 + n <= cap);

    int    kvd = Hkv * hd;
    size_t row = (size_t) hd * sizeof(float);

    if (pic_cpu_par((size_t) n * kvd > PIC_GLUE_PAR_FLOATS)) {
        #pragma omp parallel for schedule(static)
        for (int th = 0; th < n * Hkv; th++) {
            int    t = th / Hkv, h = th % Hkv;
            size_t slot = ((size_t) h * cap + p0 + t) * hd, at = (size_t) t * kvd + h * hd;

            memcpy(kc + slot, k + at, row);
            memcpy(vc + slot, v + at, row);
        }
        return;
    }
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < Hkv; h++) {
            size_t slot = ((size_t) h * cap + p0 + t) * hd, at = (size_t) t * kvd + h * hd;

            memcpy(kc + slot, k + at, row);
            memcpy(vc + slot, v + at, row);
        }
    }
}

/* Route one row (pic_cpu_moe_route). */
static void
pic_moe_route_row(int *sel, float *selw, float *p, int E, int k, int renorm)
{
    float mx = -INFINITY, sum = 0.0f, top = 0.0f;

    for (int e = 0; e < E; e++) {
        mx = p[e] > mx ? p[e] : mx;
    }
    for (int e = 0; e < E; e++) {
        p[e] = expf(p[e] - mx);
        sum += p[e];
    }
    for (int e = 0; e < E; e++) {
        p[e] /= sum;
    }
    for (int j = 0; j < k; j++) {              /* k passes of argmax */
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j && !taken; i++) {
                taken = sel[i] == e;
            }
            if (!taken && (best < 0 || p[e] > p[best])) {
                best = e;
            }
        }
        sel[j] = best;
        selw[j] = p[best];
        top += p[best];
    }
    if (renorm) {
        for (int j = 0; j < k; j++) {
            selw[j] /= top;
        }
    }
}

void
pic_cpu_moe_route(int *sel, float *selw, float *p, int n, int E, int k, int renorm)
{
    PIC_OP_CHECK(sel != NULL && selw != NULL && p != NULL);
    PIC_OP_CHECK(n >= 0 && E > 0 && k > 0 && k <= E);

    if (pic_cpu_par((size_t) n * E * k > PIC_GLUE_PAR_FLOATS)) {
        #pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++) {
            pic_moe_route_row(sel + (size_t) t * k, selw + (size_t) t * k,
                              p + (size_t) t * E, E, k, renorm);
        }
        return;
    }
    for (int t = 0; t < n; t++) {
        pic_moe_route_row(sel + (size_t) t * k, selw + (size_t) t * k,
                          p + (size_t) t * E, E, k, renorm);
    }
}

/* Route one row (pic_cpu_moe_route_grouped). */
static void
pic_moe_group_row(int *sel, float *selw, float *p, const pic_moe_group_args *a)
{
    int      E = a->E, G = a->groups, per = E / G;
    uint64_t keep = 0;
    float    top = 0.0f;

    if (a->sigmoid) {
        for (int e = 0; e < E; e++) {
            p[e] = 1.0f / (1.0f + expf(-p[e]));
        }
    } else {
        float mx = -INFINITY, sum = 0.0f;

        for (int e = 0; e < E; e++) {
            mx = p[e] > mx ? p[e] : mx;
        }
        for (int e = 0; e < E; e++) {
            p[e] = expf(p[e] - mx);
            sum += p[e];
        }
        for (int e = 0; e < E; e++) {
            p[e] /= sum;
        }
    }
#define PIC_CHOICE(e) (a->bias != NULL ? p[e] + a->bias[e] : p[e])
    if (G > 1) {
        float gs[64];

        for (int g = 0; g < G; g++) {       /* best, or sum of the two best */
            float b1 = -INFINITY, b2 = -INFINITY;

            for (int e = g * per; e < (g + 1) * per; e++) {
                float v = PIC_CHOICE(e);

                if (v > b1) {
                    b2 = b1;
                    b1 = v;
                } else if (v > b2) {
                    b2 = v;
                }
            }
            gs[g] = a->sigmoid ? b1 + b2 : b1;
        }
        for (int j = 0; j < a->topk_groups; j++) {
            int best = -1;

            for (int g = 0; g < G; g++) {
                if (!(keep >> g & 1) && (best < 0 || gs[g] > gs[best])) {
                    best = g;
                }
            }
            keep |= (uint64_t) 1 << best;
        }
    } else {
        keep = 1;
    }
    for (int j = 0; j < a->k; j++) {           /* k passes of argmax */
        int   best = -1;
        float bv = 0.0f;

        for (int e = 0; e < E; e++) {
            int taken = !(keep >> (G > 1 ? e / per : 0) & 1);

            for (int i = 0; i < j && !taken; i++) {
                taken = sel[i] == e;
            }
            if (!taken && (best < 0 || PIC_CHOICE(e) > bv)) {
                best = e;
                bv = PIC_CHOICE(e);
            }
        }
        sel[j] = best;
        selw[j] = p[best];
        top += p[best];
    }
#undef PIC_CHOICE
    for (int j = 0; j < a->k; j++) {
        selw[j] = (a->renorm ? selw[j] / (top + 1e-20f) : selw[j]) * a->scale;
    }
}

void
pic_cpu_moe_route_grouped(int *sel, float *selw, float *p, const pic_moe_group_args *a)
{
    PIC_OP_CHECK(sel != NULL && selw != NULL && p != NULL && a != NULL);
    PIC_OP_CHECK(a->n >= 0 && a->E > 0 && a->k > 0 && a->groups >= 1 && a->groups <= 64
                 && a->E % a->groups == 0 && a->topk_groups >= 1
                 && a->topk_groups <= a->groups
                 && a->k <= a->topk_groups * (a->E / a->groups));

    #pragma omp parallel for schedule(static) if (pic_cpu_par((size_t) a->n * a->E * a->k > PIC_GLUE_PAR_FLOATS))
    for (int t = 0; t < a->n; t++) {
        pic_moe_group_row(sel + (size_t) t * a->k, selw + (size_t) t * a->k,
                          p + (size_t) t * a->E, a);
    }
}

/* --- host memory --- */

void *
pic_cpu_mem_alloc(size_t bytes)
{
    void *p = NULL;

    if (posix_memalign(&p, 64, bytes > 0 ? bytes : 64) != 0) {
        return NULL;
    }
    return p;
}

void
pic_cpu_mem_free(void *p)
{
    free(p);
}

void
pic_cpu_mem_copy(void *dst, const void *src, size_t bytes)
{
    PIC_OP_CHECK((dst != NULL && src != NULL) || bytes == 0);
    if (bytes > 0 && dst != src) {
        memcpy(dst, src, bytes);
    }
}

void
pic_cpu_mem_zero(void *dst, size_t bytes)
{
    PIC_OP_CHECK(dst != NULL || bytes == 0);
    if (bytes > 0) {
        memset(dst, 0, bytes);
    }
}
