/*
 * mla.cu — the DeepSeek ops of the CUDA backend: the absorbed MLA
 * attention over the latent cache, scale_rows and the grouped MoE router (contracts:
 * pic_kernels.h, CPU references kernels/cpu/attention.c and glue.c).
 *
 * mla_attention: kv_b as fp32 in scratch (wmat_rows), then one block per
 * (query, head): q̃ = W_UKᵀ q_nope in shared memory, the visible latent
 * rows in tiles of PIC_MLA_TILE with an online softmax (running max and
 * sum, the latent accumulator rescaled per tile), o = W_UV ō / sum.
 */
#include <math.h>

#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

#define PIC_MLA_TILE    128
#define PIC_MLA_THREADS 128

static __global__ void
mla_kernel(float *o, const float *q, const int *qpos, const float *lat,
           const float *W, int Hq, int dn, int dr, int dv, int r, int n_keys,
           float scale)
{
    extern __shared__ float sm[];
    float *qa = sm;                     /* (r) */
    float *ol = qa + r;                 /* (r) */
    float *sc = ol + r;                 /* (PIC_MLA_TILE) */
    float *st = sc + PIC_MLA_TILE;      /* [0] max, [1] sum, [2] rescale */
    int    t = blockIdx.x / Hq, h = blockIdx.x % Hq, hq = dr + dn, lw = dr + r;
    const float *qp = q + ((size_t) t * Hq + h) * hq;
    const float *Wh = W + (size_t) h * (dn + dv) * r;
    int    nk = qpos[t] + 1 < n_keys ? qpos[t] + 1 : n_keys;

    for (int j = threadIdx.x; j < r; j += blockDim.x) {
        float acc = 0.0f;

        for (int i = 0; i < dn; i++) {
            acc += qp[dr + i] * Wh[(size_t) i * r + j];
        }
        qa[j] = acc;
        ol[j] = 0.0f;
    }
    if (threadIdx.x == 0) {
        st[0] = -INFINITY;
        st[1] = 0.0f;
    }
    __syncthreads();
    for (int p0 = 0; p0 < nk; p0 += PIC_MLA_TILE) {
        int cnt = nk - p0 < PIC_MLA_TILE ? nk - p0 : PIC_MLA_TILE;

        for (int i = threadIdx.x; i < cnt; i += blockDim.x) {
            const float *lp = lat + (size_t) (p0 + i) * lw;
            float        s = 0.0f, sn = 0.0f;

            for (int d = 0; d < dr; d++) {
                s += qp[d] * lp[d];
            }
            for (int j = 0; j < r; j++) {
                sn += qa[j] * lp[dr + j];
            }
            sc[i] = (s + sn) * scale;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            float mx = st[0], sum = 0.0f;

            for (int i = 0; i < cnt; i++) {
                mx = sc[i] > mx ? sc[i] : mx;
            }
            st[2] = expf(st[0] - mx);
            for (int i = 0; i < cnt; i++) {
                sc[i] = expf(sc[i] - mx);
                sum += sc[i];
            }
            st[1] = st[1] * st[2] + sum;
            st[0] = mx;
        }
        __syncthreads();
        for (int j = threadIdx.x; j < r; j += blockDim.x) {
            float acc = ol[j] * st[2];

            for (int i = 0; i < cnt; i++) {
                acc += sc[i] * lat[(size_t) (p0 + i) * lw + dr + j];
            }
            ol[j] = acc;
        }
        __syncthreads();
    }
    for (int d = threadIdx.x; d < dv; d += blockDim.x) {
        const float *wr = Wh + (size_t) (dn + d) * r;
        float        acc = 0.0f;

        for (int j = 0; j < r; j++) {
            acc += wr[j] * ol[j];
        }
        o[((size_t) t * Hq + h) * dv + d] = acc / st[1];
    }
}

extern "C" int
pic_cuda_mla_attention(const pic_mla_args *a)
{
    PIC_CUDA_ARG(a != NULL && a->q != NULL && a->qpos != NULL && a->lat != NULL
                 && a->kvb != NULL && a->o != NULL);
    PIC_CUDA_ARG(a->n >= 0 && a->Hq > 0 && a->dn > 0 && a->dr >= 0 && a->dv > 0
                 && a->r > 0 && a->n_keys > 0);
    PIC_CUDA_ARG(a->kvb->rows == a->Hq * (a->dn + a->dv) && a->kvb->cols == a->r);
    if (a->n == 0) {
        return 0;
    }
    float *W = (float *) pic_cuda_scratch(PIC_CUDA_BUF_W,
                                          (size_t) a->kvb->rows * a->r * sizeof(float));
    size_t smem = (2 * (size_t) a->r + PIC_MLA_TILE + 4) * sizeof(float);

    if (W == NULL || pic_cuda_wmat_rows(W, a->kvb, 0, a->kvb->rows) != 0) {
        return -1;
    }
    PIC_CUDA_ARG(smem <= 48 * 1024);
    mla_kernel<<<a->n * a->Hq, PIC_MLA_THREADS, smem, pic_cuda_stream_get()>>>(
        a->o, a->q, a->qpos, a->lat, W, a->Hq, a->dn, a->dr, a->dv, a->r, a->n_keys,
        a->scale);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

static __global__ void
scale_rows_kernel(float *x, int ld, int n, int dim, float alpha)
{
    size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x;

    if (i < (size_t) n * dim) {
        x[(i / dim) * ld + i % dim] *= alpha;
    }
}

extern "C" int
pic_cuda_scale_rows(float *x, int ld, int n, int dim, float alpha)
{
    PIC_CUDA_ARG(x != NULL && n >= 0 && dim >= 0 && ld >= dim);
    if ((size_t) n * dim == 0) {
        return 0;
    }
    scale_rows_kernel<<<pic_cuda_blocks((size_t) n * dim, 256), 256, 0,
                        pic_cuda_stream_get()>>>(x, ld, n, dim, alpha);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

/* One thread routes row t, as the CPU op (glue.c pic_moe_group_row). */
static __global__ void
moe_group_kernel(int *sel, float *selw, float *p, int n, int E, int k, int G, int tg,
                 int sigm, const float *bias, int renorm, float scale)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;

    if (t >= n) {
        return;
    }
    float   *pr = p + (size_t) t * E, top = 0.0f, gs[64];
    int     *sr = sel + (size_t) t * k, per = E / G;
    float   *wr = selw + (size_t) t * k;
    uint64_t keep = 0;

    if (sigm) {
        for (int e = 0; e < E; e++) {
            pr[e] = 1.0f / (1.0f + expf(-pr[e]));
        }
    } else {
        float mx = -INFINITY, sum = 0.0f;

        for (int e = 0; e < E; e++) {
            mx = pr[e] > mx ? pr[e] : mx;
        }
        for (int e = 0; e < E; e++) {
            pr[e] = expf(pr[e] - mx);
            sum += pr[e];
        }
        for (int e = 0; e < E; e++) {
            pr[e] /= sum;
        }
    }
#define PIC_CHOICE(e) (bias != NULL ? pr[e] + bias[e] : pr[e])
    if (G > 1) {
        for (int g = 0; g < G; g++) {
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
            gs[g] = sigm ? b1 + b2 : b1;
        }
        for (int j = 0; j < tg; j++) {
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
    for (int j = 0; j < k; j++) {
        int   best = -1;
        float bv = 0.0f;

        for (int e = 0; e < E; e++) {
            int taken = !(keep >> (G > 1 ? e / per : 0) & 1);

            for (int i = 0; i < j && !taken; i++) {
                taken = sr[i] == e;
            }
            if (!taken && (best < 0 || PIC_CHOICE(e) > bv)) {
                best = e;
                bv = PIC_CHOICE(e);
            }
        }
        sr[j] = best;
        wr[j] = pr[best];
        top += pr[best];
    }
#undef PIC_CHOICE
    for (int j = 0; j < k; j++) {
        wr[j] = (renorm ? wr[j] / (top + 1e-20f) : wr[j]) * scale;
    }
}

extern "C" int
pic_cuda_moe_route_grouped(int *sel, float *selw, float *p, const pic_moe_group_args *a)
{
    PIC_CUDA_ARG(sel != NULL && selw != NULL && p != NULL && a != NULL);
    PIC_CUDA_ARG(a->n >= 0 && a->E > 0 && a->k > 0 && a->groups >= 1 && a->groups <= 64
                 && a->E % a->groups == 0 && a->topk_groups >= 1
                 && a->topk_groups <= a->groups
                 && a->k <= a->topk_groups * (a->E / a->groups));
    if (a->n == 0) {
        return 0;
    }
    moe_group_kernel<<<pic_cuda_blocks(a->n, 64), 64, 0, pic_cuda_stream_get()>>>(
        sel, selw, p, a->n, a->E, a->k, a->groups, a->topk_groups, a->sigmoid, a->bias,
        a->renorm, a->scale);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}
