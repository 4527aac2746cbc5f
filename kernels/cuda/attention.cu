/*
 * attention.cu — causal GQA attention over a KV cache (MODEL.md §4 item
 * 4): one block of 4 warps per (query, q head, key split).  Warp w takes
 * keys w, w+4, ... of its split: the dot with q spread over the lanes (lane
 * owns dims lane + 32 i), an online softmax in fp32 (running max, sum,
 * weighted V), then the four warps' partial results are merged.  Decode
 * (few queries × heads, many keys) splits the keys over up to
 * PIC_ATTN_MAX_SPLIT blocks (flash-decoding) whose partial (max, sum,
 * weighted V) a second kernel merges.  Correctness first: no tensor cores,
 * K/V rows are re-read per q head (from L2).
 */
#include <math.h>

#include "pic_cuda.h"
#include "pic_cuda_check.cuh"

#define PIC_ATTN_WARPS 4
#define PIC_ATTN_MAX_SPLIT 64           /* key splits of one (query, head) */
#define PIC_ATTN_SPLIT_KEYS 256         /* keys a split takes, at least */

/* D: dims per lane, hd <= 32 D. */
/* nsplit > 1: block z takes keys [z·chunk, (z+1)·chunk) of its query's
 * range and writes its partial max, sum and weighted V sum to pm, pl, pacc
 * ((n, Hq, nsplit) and (n, Hq, nsplit, hd)) instead of o. */
template <int D>
static __global__ void
attention_kernel(float *o, const float *q, const int *qpos, int Hq, int Hkv,
                 int hd, const float *kc, const float *vc, int cap,
                 int n_keys, float scale, int nsplit, float *pm, float *pl,
                 float *pacc)
{
    __shared__ float sm[PIC_ATTN_WARPS], sl[PIC_ATTN_WARPS];
    extern __shared__ float sacc[];     /* (PIC_ATTN_WARPS, hd) */
    int          h = blockIdx.x, t = blockIdx.y, kh = h / (Hq / Hkv);
    int          warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int          lim = qpos[t] + 1;
    const float *qr = q + (size_t) t * Hq * hd + (size_t) h * hd;
    float       *orow = o + (size_t) t * Hq * hd + (size_t) h * hd;
    const float *K = kc + (size_t) kh * cap * hd;
    const float *V = vc + (size_t) kh * cap * hd;
    float        qv[D], acc[D], m = -INFINITY, l = 0.0f;

    lim = lim > n_keys ? n_keys : lim < 0 ? 0 : lim;
    int    z = blockIdx.z, chunk = (lim + nsplit - 1) / nsplit;
    int    j0 = z * chunk, j1 = j0 + chunk < lim ? j0 + chunk : lim;
    size_t part = ((size_t) t * Hq + h) * nsplit + z;

    if (nsplit > 1 && j0 >= j1) {
        if (threadIdx.x == 0) {
            pm[part] = -INFINITY;
            pl[part] = 0.0f;
        }
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            pacc[part * hd + i] = 0.0f;
        }
        return;
    }
    if (lim == 0) {
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            orow[i] = 0.0f;
        }
        return;
    }
    #pragma unroll
    for (int i = 0; i < D; i++) {
        int d = lane + 32 * i;

        qv[i] = d < hd ? qr[d] : 0.0f;
        acc[i] = 0.0f;
    }
    for (int j = j0 + warp; j < j1; j += PIC_ATTN_WARPS) {
        const float *kr = K + (size_t) j * hd, *vr = V + (size_t) j * hd;
        float        s = 0.0f;

        #pragma unroll
        for (int i = 0; i < D; i++) {
            int d = lane + 32 * i;

            s += d < hd ? qv[i] * kr[d] : 0.0f;
        }
        for (int off = 16; off > 0; off >>= 1) {
            s += __shfl_xor_sync(0xffffffffu, s, off);
        }
        s *= scale;
        float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);

        l = l * corr + p;
        #pragma unroll
        for (int i = 0; i < D; i++) {
            int d = lane + 32 * i;

            acc[i] = acc[i] * corr + (d < hd ? p * vr[d] : 0.0f);
        }
        m = mn;
    }
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
    #pragma unroll
    for (int i = 0; i < D; i++) {
        int d = lane + 32 * i;

        if (d < hd) {
            sacc[warp * hd + d] = acc[i];
        }
    }
    __syncthreads();
    float M = sm[0], L = 0.0f, f[PIC_ATTN_WARPS];
    for (int w = 1; w < PIC_ATTN_WARPS; w++) {
        M = fmaxf(M, sm[w]);
    }
    for (int w = 0; w < PIC_ATTN_WARPS; w++) {
        f[w] = sl[w] > 0.0f ? expf(sm[w] - M) : 0.0f;
        L += sl[w] * f[w];
    }
    float inv = nsplit > 1 ? 1.0f : 1.0f / L;
    float *dst = nsplit > 1 ? pacc + part * hd : orow;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float r = 0.0f;

        for (int w = 0; w < PIC_ATTN_WARPS; w++) {
            r += f[w] * sacc[w * hd + d];
        }
        dst[d] = r * inv;
    }
    if (nsplit > 1 && threadIdx.x == 0) {
        pm[part] = M;
        pl[part] = L;
    }
}

/* o of (query blockIdx.y, head blockIdx.x) from its nsplit partials. */
static __global__ void
attention_merge_kernel(float *o, const int *qpos, int Hq, int hd, int n_keys,
                       int nsplit, const float *pm, const float *pl,
                       const float *pacc)
{
    int          h = blockIdx.x, t = blockIdx.y, lim = qpos[t] + 1;
    size_t       base = ((size_t) t * Hq + h) * nsplit;
    float       *orow = o + (size_t) t * Hq * hd + (size_t) h * hd;
    float        M = -INFINITY, L = 0.0f;

    lim = lim > n_keys ? n_keys : lim;
    if (lim <= 0) {
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            orow[d] = 0.0f;
        }
        return;
    }
    for (int z = 0; z < nsplit; z++) {
        M = pl[base + z] > 0.0f ? fmaxf(M, pm[base + z]) : M;
    }
    for (int z = 0; z < nsplit; z++) {
        L += pl[base + z] > 0.0f ? pl[base + z] * expf(pm[base + z] - M) : 0.0f;
    }
    float inv = 1.0f / L;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float r = 0.0f;

        for (int z = 0; z < nsplit; z++) {
            if (pl[base + z] > 0.0f) {
                r += expf(pm[base + z] - M) * pacc[(base + z) * hd + d];
            }
        }
        orow[d] = r * inv;
    }
}

static int
attention_launch(float *o, const float *q, const int *qpos, int n, int Hq,
                 int Hkv, int hd, const float *kc, const float *vc, int cap,
                 int n_keys)
{
    unsigned     th = 32 * PIC_ATTN_WARPS;
    size_t       sh = (size_t) PIC_ATTN_WARPS * hd * sizeof(float);
    float        scale = 1.0f / sqrtf((float) hd);
    cudaStream_t s = pic_cuda_stream_get();
    int          nsplit = 1;
    float       *pm = NULL, *pl = NULL, *pacc = NULL;

    if (n == 0) {
        return 0;
    }
    /* fewer (query, head) blocks than two waves of the SMs: split the keys */
    while ((size_t) n * Hq * nsplit < 264 && nsplit < PIC_ATTN_MAX_SPLIT
           && (size_t) n_keys > (size_t) nsplit * 2 * PIC_ATTN_SPLIT_KEYS)
    {
        nsplit *= 2;
    }
    if (nsplit > 1) {
        size_t parts = (size_t) n * Hq * nsplit;

        pm = (float *) pic_cuda_scratch(PIC_CUDA_BUF_Q,
                                        parts * (2 + (size_t) hd) * sizeof(float));
        if (pm == NULL) {
            return -1;
        }
        pl = pm + parts;
        pacc = pl + parts;
    }
    dim3 grid((unsigned) Hq, (unsigned) n, (unsigned) nsplit);
    if (hd <= 64) {
        attention_kernel<2><<<grid, th, sh, s>>>(o, q, qpos, Hq, Hkv, hd, kc, vc, cap, n_keys, scale, nsplit, pm, pl, pacc);
    } else if (hd <= 128) {
        attention_kernel<4><<<grid, th, sh, s>>>(o, q, qpos, Hq, Hkv, hd, kc, vc, cap, n_keys, scale, nsplit, pm, pl, pacc);
    } else if (hd <= 256) {
        attention_kernel<8><<<grid, th, sh, s>>>(o, q, qpos, Hq, Hkv, hd, kc, vc, cap, n_keys, scale, nsplit, pm, pl, pacc);
    } else {
        attention_kernel<16><<<grid, th, sh, s>>>(o, q, qpos, Hq, Hkv, hd, kc, vc, cap, n_keys, scale, nsplit, pm, pl, pacc);
    }
    PIC_CUDA_CHECK_LAUNCH();
    if (nsplit > 1) {
        attention_merge_kernel<<<dim3((unsigned) Hq, (unsigned) n), 128, 0, s>>>(
            o, qpos, Hq, hd, n_keys, nsplit, pm, pl, pacc);
        PIC_CUDA_CHECK_LAUNCH();
    }
    return 0;
}

extern "C" int
pic_cuda_attention(float *o, const float *q, const int *qpos, int n, int Hq,
                   int Hkv, int hd, const float *kc, const float *vc, int cap,
                   int n_keys)
{
    PIC_CUDA_ARG(o != NULL && q != NULL && qpos != NULL);
    PIC_CUDA_ARG(kc != NULL && vc != NULL);
    PIC_CUDA_ARG(n >= 0 && n <= 65535 && Hq > 0 && Hkv > 0 && Hq % Hkv == 0);
    PIC_CUDA_ARG(hd > 0 && hd <= 512);
    PIC_CUDA_ARG(n_keys >= 0 && n_keys <= cap);
    return attention_launch(o, q, qpos, n, Hq, Hkv, hd, kc, vc, cap, n_keys);
}
