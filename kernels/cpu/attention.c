/*
 * attention.c — CPU reference for causal GQA attention over a KV cache
 * (MODEL.md §4 item 4).  Work item: one kv head and a tile of queries; the
 * tile's rows are all the q heads of that kv head (group = Hq/Hkv) for each
 * of its queries, so one OpenBLAS GEMM scores them against the kv head's
 * keys (K packed once, not once per q head) and one more takes the weighted
 * sum; the softmax runs in fp32 between them, row by row.
 *
 * The bf16dot variant (attention_dot) multiplies q, k, the softmax weights
 * and v rounded to bf16, as that format's weight products round their
 * activations (and as llama.cpp's half-precision KV cache holds k and v):
 * the products are exact in fp32, so only the order of the fp32 sums
 * depends on the path.  Where vdpbf16ps outruns the fp32 FMA
 * (pic_cpu_dot_gemm_on) and a call has PIC_ATTN_DOT_ROWS rows or more,
 * K and Vᵀ are rounded to bf16 once per call and both products run as the
 * dot GEMM; elsewhere (decode, other CPUs) blocks of keys are rounded in
 * fp32 into an L2-sized buffer and multiplied by sgemm, so no second pass
 * over the cache reaches memory.
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_exp.h"
#include "cpu_ops.h"

#define PIC_ATTN_TILE 64                /* queries per work item, at most */
#define PIC_ATTN_KB 256                 /* keys of a rounded fp32 block */
#define PIC_ATTN_DOT_ROWS 16            /* rows a call needs for the dot GEMM */
#define PIC_ATTN_PV_KC 1024             /* P·V's K-block: P's rows stay in L2 */

/* Scratch of one thread: q rows, scores, outputs of one work item; the
 * bf16dot variant's rounded blocks and bf16 operands. */
typedef struct {
    float    *q;                        /* (group*tile, hd) */
    float    *sc;                       /* (group*tile, n_keys) */
    float    *o;                        /* (group*tile, hd) */
    float    *kr;                       /* (PIC_ATTN_KB, hd) a rounded block
                                         * of K or V (bf16dot, sgemm) */
    uint16_t *qb;                       /* (group*tile, hd) q in bf16 (dot GEMM) */
    uint16_t *pb;                       /* (group*tile, ldp) P in bf16 (dot GEMM) */
} pic_attn_buf;

/* How one call multiplies: dot rounds the operands to bf16; gemm (with
 * dot) runs both products as the dot GEMM on K (Hkv, nk8, hd) and Vᵀ
 * (Hkv, hd, ldv) in bf16, P's rows ldp apart. */
typedef struct {
    int             dot;
    int             gemm;
    const uint16_t *kb;
    const uint16_t *vt;
    int             nk8, ldv, ldp;
} pic_attn_dot;

/*
 * The softmax of a score row, vectorised (e^x of cpu_exp.h).  The sum runs
 * in 8 lanes, lane k taking the entries j ≡ k mod 8, then adds the lanes in
 * one fixed tree; the AVX2 path and the portable one agree bit for bit.
 * glibc's scalar expf was ~30% of the attention's time on a warm chunk.
 * pic_lanes_sum: the 8 lanes' sums in the fixed tree both paths use.
 */
static inline float
pic_lanes_sum(const float *s)
{
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

/* e^(r[j] - max) for j < lim in place; *sum their sum. */
static void
pic_attn_softmax_scalar(float *r, int lim, float *sum)
{
    float s[8] = { 0 }, mx = -INFINITY;

    for (int j = 0; j < lim; j++) {
        mx = r[j] > mx ? r[j] : mx;
    }
    for (int j = 0; j < lim; j++) {
        r[j] = pic_exp_scalar(r[j] - mx);
        s[j & 7] += r[j];
    }
    *sum = pic_lanes_sum(s);
}

#if PIC_EXP_X86
__attribute__((target("avx2,fma")))
static void
pic_attn_softmax_avx2(float *r, int lim, float *sum)
{
    __m256 vmx = _mm256_set1_ps(-INFINITY), acc = _mm256_setzero_ps();
    float  s[8];
    int    j;

    /* the maximum (exact in any order) */
    for (j = 0; j + 8 <= lim; j += 8) {
        vmx = _mm256_max_ps(vmx, _mm256_loadu_ps(r + j));
    }
    _mm256_storeu_ps(s, vmx);
    for (; j < lim; j++) {
        s[0] = r[j] > s[0] ? r[j] : s[0];
    }
    for (int k = 1; k < 8; k++) {
        s[0] = s[k] > s[0] ? s[k] : s[0];
    }
    vmx = _mm256_set1_ps(s[0]);

    /* whole vectors plainly, the tail masked: a masked store is microcoded
     * on AMD Zen (713 queries at 5,814, 2 threads, alternated three times:
     * 180-181 -> 188 GFLOP/s); the lanes add the same values in the same
     * order, so the result is bit for bit the same */
    for (j = 0; j + 8 <= lim; j += 8) {
        __m256 p = pic_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(r + j), vmx));

        _mm256_storeu_ps(r + j, p);
        acc = _mm256_add_ps(acc, p);
    }
    if (j < lim) {
        __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(lim - j),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256  p = pic_exp_avx2(_mm256_sub_ps(_mm256_maskload_ps(r + j, mask), vmx));

        p = _mm256_and_ps(p, _mm256_castsi256_ps(mask));    /* 0 past lim */
        _mm256_maskstore_ps(r + j, mask, p);
        acc = _mm256_add_ps(acc, p);
    }
    _mm256_storeu_ps(s, acc);
    *sum = pic_lanes_sum(s);
}
#endif

/* Row r(nk) ← softmax of its first lim entries, zeros after. */
static void
pic_attn_softmax_row(float *r, int lim, int nk, int simd)
{
    float sum = 0.0f;

#if PIC_EXP_X86
    if (simd) {
        pic_attn_softmax_avx2(r, lim, &sum);
    } else
#endif
    {
        (void) simd;
        pic_attn_softmax_scalar(r, lim, &sum);
    }
    float inv = lim > 0 ? 1.0f / sum : 0.0f;
    for (int j = 0; j < lim; j++) {
        r[j] *= inv;
    }
    for (int j = lim; j < nk; j++) {
        r[j] = 0.0f;
    }
}

/* The softmax of every row of a work item's scores sc (rows of nk; query
 * i's rows see its first lim keys). */
static void
pic_attn_softmax_rows(float *sc, const int *qpos, int t0, int nt, int group,
                      int nk, int n_keys, int simd)
{
    for (int i = 0; i < nt; i++) {
        int lim = qpos[t0 + i] + 1;

        lim = lim > n_keys ? n_keys : lim < 0 ? 0 : lim;
        for (int g = 0; g < group; g++) {
            pic_attn_softmax_row(sc + (size_t) (i * group + g) * nk, lim, nk, simd);
        }
    }
}

/* Rows [j0, j0+kb) of X (a kv head's K or V, rows hd apart) as the
 * products take them: the cache itself, or in bf16dot rounded into b->kr. */
static const float *
pic_attn_block(const float *X, int j0, int kb, int hd, const pic_attn_dot *d,
               pic_attn_buf *b)
{
    if (!d->dot) {
        return X + (size_t) j0 * hd;
    }
    pic_bf16_act_round(b->kr, X + (size_t) j0 * hd, (size_t) kb * hd);
    return b->kr;
}

/* One work item: queries [t0, t0+nt) of the q heads of kv head kh. */
static void
pic_attn_item(float *o, const float *q, const int *qpos, int t0, int nt,
              int kh, int group, int ldq, int hd, const float *kc,
              const float *vc, int cap, int n_keys, float scale, int simd,
              const pic_attn_dot *d, pic_attn_buf *b)
{
    int          rows = nt * group, nk = 0;
    const float *K = kc + (size_t) kh * cap * hd;
    const float *V = vc + (size_t) kh * cap * hd;
    size_t       hb = (size_t) group * hd;  /* one query's group of heads */

    for (int i = 0; i < nt; i++) {
        int lim = qpos[t0 + i] + 1;

        lim = lim > n_keys ? n_keys : lim;
        nk = lim > nk ? lim : nk;
    }
    if (nk <= 0) {
        for (int i = 0; i < nt; i++) {
            memset(o + (size_t) (t0 + i) * ldq + kh * hb, 0, hb * sizeof(float));
        }
        return;
    }

    if (d->gemm) {
        /* rows in (query, head) order, in bf16; S = Q Kᵀ scaled, softmax,
         * P in bf16, O = P V */
        const uint16_t *Kb = d->kb + (size_t) kh * d->nk8 * hd;
        const uint16_t *Vt = d->vt + (size_t) kh * hd * d->ldv;

        for (int i = 0; i < nt; i++) {
            pic_cpu_x_bf16(b->qb + i * hb, q + (size_t) (t0 + i) * ldq + kh * hb, hb);
        }
        pic_cpu_dot_gemm(b->sc, nk, b->qb, hd, rows, Kb, hd, nk, hd, (hd + 31) & ~31);
        for (size_t e = 0; e < (size_t) rows * nk; e++) {
            b->sc[e] *= scale;
        }
        pic_attn_softmax_rows(b->sc, qpos, t0, nt, group, nk, n_keys, simd);
        for (int r = 0; r < rows; r++) {
            pic_cpu_x_bf16(b->pb + (size_t) r * d->ldp, b->sc + (size_t) r * nk,
                           (size_t) nk);
        }
        pic_cpu_dot_gemm(b->o, hd, b->pb, d->ldp, rows, Vt, d->ldv, hd, nk,
                         PIC_ATTN_PV_KC);
    } else {
        /* rows in (query, head) order: a query's heads are adjacent in q */
        for (int i = 0; i < nt; i++) {
            memcpy(b->q + i * hb, q + (size_t) (t0 + i) * ldq + kh * hb,
                   hb * sizeof(float));
        }
        /* scores (rows, nk) = Q Kᵀ / sqrt(hd), then O (rows, hd) = P V; in
         * bf16dot over blocks of rounded keys (else one block: the cache) */
        int step = d->dot ? PIC_ATTN_KB : nk;

        if (d->dot) {
            pic_bf16_act_round(b->q, b->q, (size_t) rows * hd);
        }
        for (int j0 = 0; j0 < nk; j0 += step) {
            int kb = nk - j0 < step ? nk - j0 : step;

            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kb, hd, scale,
                        b->q, hd, pic_attn_block(K, j0, kb, hd, d, b), hd, 0.0f,
                        b->sc + j0, nk);
        }
        pic_attn_softmax_rows(b->sc, qpos, t0, nt, group, nk, n_keys, simd);
        if (d->dot) {
            pic_bf16_act_round(b->sc, b->sc, (size_t) rows * nk);
        }
        for (int j0 = 0; j0 < nk; j0 += step) {
            int kb = nk - j0 < step ? nk - j0 : step;

            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, kb, 1.0f,
                        b->sc + j0, nk, pic_attn_block(V, j0, kb, hd, d, b), hd,
                        j0 > 0 ? 1.0f : 0.0f, b->o, hd);
        }
    }
    for (int i = 0; i < nt; i++) {
        memcpy(o + (size_t) (t0 + i) * ldq + kh * hb, b->o + i * hb,
               hb * sizeof(float));
    }
}

/* kb (Hkv, nk8, hd) and vt (Hkv, hd, ldv) = K and Vᵀ of the cache's first
 * nk slots in bf16 (rows nk..nk8 of K zero), over the team when par. */
static void
pic_attn_dot_operands(uint16_t *kb, uint16_t *vt, const float *kc,
                      const float *vc, int cap, int Hkv, int hd, int nk,
                      int nk8, int ldv, int par)
{
    int nblk = (nk8 + 63) / 64;

    #pragma omp parallel for collapse(2) schedule(static) if (par)
    for (int kh = 0; kh < Hkv; kh++) {
        for (int jb = 0; jb < nblk; jb++) {
            const float *K = kc + (size_t) kh * cap * hd;
            const float *V = vc + (size_t) kh * cap * hd;
            uint16_t    *Kb = kb + (size_t) kh * nk8 * hd;
            uint16_t    *Vt = vt + (size_t) kh * hd * ldv;
            int          j0 = jb * 64, j1 = j0 + 64 < nk8 ? j0 + 64 : nk8;
            float        col[64];

            for (int j = j0; j < j1; j++) {
                if (j < nk) {
                    pic_cpu_x_bf16(Kb + (size_t) j * hd, K + (size_t) j * hd, (size_t) hd);
                } else {
                    memset(Kb + (size_t) j * hd, 0, (size_t) hd * sizeof(uint16_t));
                }
            }
            j1 = j1 < nk ? j1 : nk;
            for (int e = 0; j0 < j1 && e < hd; e++) {
                for (int j = j0; j < j1; j++) {
                    col[j - j0] = V[(size_t) j * hd + e];
                }
                pic_cpu_x_bf16(Vt + (size_t) e * ldv + j0, col, (size_t) (j1 - j0));
            }
        }
    }
}

/* attention (dot 0) or attention_dot (dot 1): pic_kernels.h. */
static void
pic_attention(float *o, const float *q, const int *qpos, int n, int Hq,
              int Hkv, int hd, const float *kc, const float *vc, int cap,
              int n_keys, int dot)
{
    PIC_OP_CHECK(o != NULL && q != NULL && qpos != NULL);
    PIC_OP_CHECK(kc != NULL && vc != NULL);
    PIC_OP_CHECK(n >= 0 && Hq > 0 && Hkv > 0 && Hq % Hkv == 0 && hd > 0);
    PIC_OP_CHECK(n_keys >= 0 && n_keys <= cap);

    int          group = Hq / Hkv, ldq = Hq * hd;
    float        scale = 1.0f / sqrtf((float) hd);
    int          par = pic_cpu_par((double) n * n_keys * Hq * hd > 131072.0);
    int          T = par ? omp_get_max_threads() : 1;
    int          tile = PIC_ATTN_TILE, ntiles;
    int          simd = pic_cpu_simd();
    pic_attn_dot d = { 0 };
    int          saved = pic_cpu_blas_serial_begin();

    /* fewer kv heads than threads: smaller tiles, two items a thread */
    while (tile > 8 && Hkv * ((n + tile - 1) / tile) < 2 * T) {
        tile /= 2;
    }
    ntiles = (n + tile - 1) / tile;

    d.dot = dot;
    if (dot && n_keys > 0 && n * group >= PIC_ATTN_DOT_ROWS && pic_cpu_dot_gemm_on()) {
        size_t    kbn, vtn;
        uint16_t *buf;

        d.gemm = 1;
        d.nk8 = (n_keys + 7) & ~7;
        d.ldv = ((n_keys + 31) & ~31) + 32;     /* Vᵀ rows not 4 KiB apart */
        d.ldp = d.ldv;
        kbn = (size_t) Hkv * d.nk8 * hd;
        vtn = (size_t) Hkv * hd * d.ldv;
        buf = pic_cpu_thread_buf(PIC_CPU_BUF_KV, (kbn + vtn) * sizeof(uint16_t));
        d.kb = buf;
        d.vt = buf + kbn;
        pic_attn_dot_operands(buf, buf + kbn, kc, vc, cap, Hkv, hd, n_keys, d.nk8,
                              d.ldv, par);
    }

    #pragma omp parallel if (par)
    {
        size_t       rows = (size_t) group * tile;
        pic_attn_buf b;
        size_t       nsc = rows * (size_t) (n_keys > 0 ? n_keys : 1);
        size_t       nkr = dot && !d.gemm ? (size_t) PIC_ATTN_KB * hd : 0;
        size_t       nbf = d.gemm ? rows * hd + rows * (size_t) d.ldp : 0;

        /* the thread's scratch: q (rows, hd) | o (rows, hd) | sc (rows,
         * n_keys) | kr (KB, hd) | qb (rows, hd) and pb (rows, ldp) bf16 */
        b.q = pic_cpu_thread_buf(PIC_CPU_BUF_ATTN,
                                 (2 * rows * hd + nsc + nkr) * sizeof(float)
                                 + nbf * sizeof(uint16_t));
        b.o = b.q + rows * hd;
        b.sc = b.o + rows * hd;
        b.kr = b.sc + nsc;
        b.qb = (uint16_t *) (b.kr + nkr);
        b.pb = b.qb + rows * hd;

        #pragma omp for collapse(2) schedule(dynamic)
        for (int kh = 0; kh < Hkv; kh++) {
            for (int tt = 0; tt < ntiles; tt++) {
                int t0 = tt * tile, nt = n - t0 < tile ? n - t0 : tile;

                pic_attn_item(o, q, qpos, t0, nt, kh, group, ldq, hd, kc, vc,
                              cap, n_keys, scale, simd, &d, &b);
            }
        }
    }
    pic_cpu_blas_serial_end(saved);
}

void
pic_cpu_attention(float *o, const float *q, const int *qpos, int n, int Hq,
                  int Hkv, int hd, const float *kc, const float *vc, int cap,
                  int n_keys)
{
    pic_attention(o, q, qpos, n, Hq, Hkv, hd, kc, vc, cap, n_keys, 0);
}

void
pic_cpu_attention_dot(float *o, const float *q, const int *qpos, int n, int Hq,
                      int Hkv, int hd, const float *kc, const float *vc, int cap,
                      int n_keys)
{
    pic_attention(o, q, qpos, n, Hq, Hkv, hd, kc, vc, cap, n_keys, 1);
}

/* --- MLA, absorbed (pic_mla_args) --- */

/*
 * One work item per head: its W_UK / W_UV rows as fp32 once, then every
 * query: q̃ = W_UKᵀ q_nope (r), scores scale·(q_pe·k_pe + q̃·c) over the
 * visible slots, softmax in fp32, ō = Σ a_p c_p (r), o = W_UV ō (dv).
 * Scalar loops: the reference the CUDA slot is tested against; decode
 * reads each latent row once per head, which the per-head keys of the
 * expanded form would read dn+dv times over.
 */
void
pic_cpu_mla_attention(const pic_mla_args *a)
{
    PIC_OP_CHECK(a != NULL && a->q != NULL && a->qpos != NULL && a->lat != NULL
                 && a->kvb != NULL && a->o != NULL);
    PIC_OP_CHECK(a->n >= 0 && a->Hq > 0 && a->dn > 0 && a->dr >= 0 && a->dv > 0
                 && a->r > 0 && a->n_keys > 0);
    PIC_OP_CHECK(a->kvb->rows == a->Hq * (a->dn + a->dv) && a->kvb->cols == a->r);

    int n = a->n, Hq = a->Hq, dn = a->dn, dr = a->dr, dv = a->dv, r = a->r;
    int hq = dr + dn, lw = dr + r, bad = 0;

    #pragma omp parallel for schedule(dynamic, 1) if (pic_cpu_par((size_t) n * Hq * a->n_keys * lw > 65536)) reduction(|:bad)
    for (int h = 0; h < Hq; h++) {
        float *W = malloc((size_t) (dn + dv) * r * sizeof(float));
        float *qa = malloc((size_t) r * sizeof(float));
        float *ol = malloc((size_t) r * sizeof(float));
        float *sc = malloc((size_t) a->n_keys * sizeof(float));

        if (W == NULL || qa == NULL || ol == NULL || sc == NULL) {
            bad = 1;
        } else {
            pic_cpu_wmat_rows(W, a->kvb, h * (dn + dv), dn + dv);
            for (int t = 0; t < n; t++) {
                const float *qp = a->q + (size_t) t * Hq * hq + (size_t) h * hq;
                const float *qn = qp + dr;
                int          nk = a->qpos[t] + 1 < a->n_keys ? a->qpos[t] + 1 : a->n_keys;
                float        mx = -INFINITY, sum = 0.0f;

                for (int j = 0; j < r; j++) {
                    qa[j] = 0.0f;
                    ol[j] = 0.0f;
                }
                for (int i = 0; i < dn; i++) {
                    const float *wr = W + (size_t) i * r;
                    float        qi = qn[i];

                    for (int j = 0; j < r; j++) {
                        qa[j] += qi * wr[j];
                    }
                }
                for (int p = 0; p < nk; p++) {
                    const float *lp = a->lat + (size_t) p * lw;
                    float        s = 0.0f, sn = 0.0f;

                    for (int d = 0; d < dr; d++) {
                        s += qp[d] * lp[d];
                    }
                    for (int j = 0; j < r; j++) {
                        sn += qa[j] * lp[dr + j];
                    }
                    sc[p] = (s + sn) * a->scale;
                    mx = sc[p] > mx ? sc[p] : mx;
                }
                for (int p = 0; p < nk; p++) {
                    sc[p] = expf(sc[p] - mx);
                    sum += sc[p];
                }
                for (int p = 0; p < nk; p++) {
                    const float *cp = a->lat + (size_t) p * lw + dr;
                    float        wp = sc[p] / sum;

                    for (int j = 0; j < r; j++) {
                        ol[j] += wp * cp[j];
                    }
                }
                float *o = a->o + (size_t) t * Hq * dv + (size_t) h * dv;
                for (int d = 0; d < dv; d++) {
                    const float *wr = W + (size_t) (dn + d) * r;
                    float        acc = 0.0f;

                    for (int j = 0; j < r; j++) {
                        acc += wr[j] * ol[j];
                    }
                    o[d] = acc;
                }
            }
        }
        free(W);
        free(qa);
        free(ol);
        free(sc);
    }
    PIC_OP_CHECK(!bad);             /* out of memory for a head's scratch */
}
