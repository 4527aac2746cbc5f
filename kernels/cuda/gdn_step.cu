/*
 * gdn_step.cu — Gated DeltaNet decode step: one block per (value head,
 * block of state columns); each thread owns one column of S (dk values).
 */
#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

/* Thread j of head h updates column j of S[h] (dk × dv) and writes o[h][j]. */
static __global__ void
gdn_step_kernel(float *S, float *o, const float *q, const float *k,
                const float *v, const float *g, const float *beta, int r,
                int dk, int dv)
{
    int          h = blockIdx.y;
    int          j = blockIdx.x * blockDim.x + threadIdx.x;
    const float *qh = q + (size_t) (h / r) * dk;
    const float *kh = k + (size_t) (h / r) * dk;
    float       *Sh = S + (size_t) h * dk * dv;
    float        decay = __expf(g[h]), b = beta[h], m = 0.0f, acc = 0.0f;

    if (j >= dv) {
        return;
    }
    for (int i = 0; i < dk; i++) {
        m += kh[i] * Sh[(size_t) i * dv + j] * decay;
    }
    float delta = b * (v[(size_t) h * dv + j] - m);
    for (int i = 0; i < dk; i++) {
        float s = Sh[(size_t) i * dv + j] * decay + kh[i] * delta;
        Sh[(size_t) i * dv + j] = s;
        acc += s * qh[i];
    }
    o[(size_t) h * dv + j] = acc;
}

static int
gdn_step_launch(float *S, float *o, const float *q, const float *k,
                const float *v, const float *g, const float *beta, int Hk,
                int Hv, int dk, int dv)
{
    dim3 grid((unsigned) ((dv + 127) / 128), (unsigned) Hv);

    gdn_step_kernel<<<grid, 128>>>(S, o, q, k, v, g, beta, Hv / Hk, dk, dv);
    PIC_CUDA_CHECK_LAUNCH();
    return 0;
}

extern "C" int
pic_cuda_gdn_step(float *S, float *o, const float *q, const float *k,
                  const float *v, const float *g, const float *beta, int Hk,
                  int Hv, int dk, int dv)
{
    if (Hk <= 0 || Hv <= 0 || Hv % Hk != 0 || dk <= 0 || dv <= 0) {
        fprintf(stderr, "%s: bad shape Hk=%d Hv=%d dk=%d dv=%d\n", __func__, Hk, Hv, dk, dv);
        return -1;
    }
    return gdn_step_launch(S, o, q, k, v, g, beta, Hk, Hv, dk, dv);
}
