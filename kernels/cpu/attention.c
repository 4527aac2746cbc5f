/*
 * attention.c — CPU reference for causal GQA attention over a KV cache
 * (MODEL.md §4 item 4): scores and the weighted sum are OpenBLAS GEMMs per
 * (head, query tile); the softmax runs in fp32 between them.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

#define PIC_ATTN_TILE 64

void
pic_cpu_attention(float *o, const float *q, const int *qpos, int n, int Hq,
                  int Hkv, int hd, const float *kc, const float *vc, int cap,
                  int n_keys)
{
    PIC_OP_CHECK(o != NULL && q != NULL && qpos != NULL);
    PIC_OP_CHECK(kc != NULL && vc != NULL);
    PIC_OP_CHECK(n >= 0 && Hq > 0 && Hkv > 0 && Hq % Hkv == 0 && hd > 0);
    PIC_OP_CHECK(n_keys >= 0 && n_keys <= cap);

    int    ntiles = (n + PIC_ATTN_TILE - 1) / PIC_ATTN_TILE;
    int    group = Hq / Hkv;
    int    ldq = Hq * hd;
    float  scale = 1.0f / sqrtf((float) hd);
    int    saved = pic_cpu_blas_serial_begin();

    #pragma omp parallel if ((double) n * n_keys * Hq * hd > 131072.0)
    {
        float *sc = malloc((size_t) PIC_ATTN_TILE * (n_keys > 0 ? n_keys : 1)
                           * sizeof(float));

        PIC_OP_CHECK(sc != NULL);

        #pragma omp for collapse(2) schedule(dynamic)
        for (int h = 0; h < Hq; h++) {
            for (int tt = 0; tt < ntiles; tt++) {
                int          t0 = tt * PIC_ATTN_TILE;
                int          nt = n - t0 < PIC_ATTN_TILE ? n - t0 : PIC_ATTN_TILE;
                int          kh = h / group;
                int          nk = 0;
                const float *Q = q + (size_t) t0 * ldq + (size_t) h * hd;
                const float *K = kc + (size_t) kh * cap * hd;
                const float *V = vc + (size_t) kh * cap * hd;
                float       *O = o + (size_t) t0 * ldq + (size_t) h * hd;

                for (int i = 0; i < nt; i++) {
                    int lim = qpos[t0 + i] + 1;
                    if (lim > n_keys) {
                        lim = n_keys;
                    }
                    if (lim > nk) {
                        nk = lim;
                    }
                }
                if (nk <= 0) {
                    for (int i = 0; i < nt; i++) {
                        memset(O + (size_t) i * ldq, 0, hd * sizeof(float));
                    }
                    continue;
                }

                /* scores (nt, nk) = Q Kᵀ / sqrt(hd) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nt, nk,
                            hd, scale, Q, ldq, K, hd, 0.0f, sc, nk);

                for (int i = 0; i < nt; i++) {
                    float *r = sc + (size_t) i * nk;
                    int    lim = qpos[t0 + i] + 1;
                    float  mx = -INFINITY, sum = 0.0f;

                    if (lim > n_keys) {
                        lim = n_keys;
                    }
                    if (lim < 0) {
                        lim = 0;
                    }
                    for (int j = 0; j < lim; j++) {
                        mx = r[j] > mx ? r[j] : mx;
                    }
                    for (int j = 0; j < lim; j++) {
                        r[j] = expf(r[j] - mx);
                        sum += r[j];
                    }
                    float inv = lim > 0 ? 1.0f / sum : 0.0f;
                    for (int j = 0; j < lim; j++) {
                        r[j] *= inv;
                    }
                    for (int j = lim; j < nk; j++) {
                        r[j] = 0.0f;
                    }
                }

                /* O (nt, hd) = P V */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nt, hd,
                            nk, 1.0f, sc, nk, V, hd, 0.0f, O, ldq);
            }
        }
        free(sc);
    }
    pic_cpu_blas_serial_end(saved);
}
