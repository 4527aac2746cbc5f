/*
 * cuda_bench.c — the CUDA backend's ops alone on the GPU (pic_backend_cuda,
 * build/libpic_cuda.so): bf16 GEMM TFLOP/s at prefill shapes against the
 * bf16 dense tensor-core peak, decode GEMV GB/s of weight bytes against the
 * device-to-device copy bandwidth measured in the same run, the Gated
 * DeltaNet decode step and prefill tokens/s, attention prefill and decode.
 * Shapes are Qwen3.5-0.8B's (hidden 1024, FFN 3584, GDN 16 × 128 heads,
 * attention 8 q / 2 kv heads × 256, vocab 248320).
 *
 *   cuda_bench [--json FILE] [--quick] [--peak TFLOPS]
 *
 * Each figure: 2 warm-up calls, then the best of 3 batches (a batch: as
 * many calls as fill ~0.2 s, 0.05 s with --quick) timed by the wall clock
 * around pic_cuda_sync().  Prints a table; writes bench/results/cuda.json's
 * shape (summary, machine, config, rows) to FILE.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pic_kernels.h"
#include "pic_time.h"
#include "cuda/pic_cuda.h"

typedef struct {
    char   name[64];
    char   shape[64];
    double sec;                         /* one call */
    double value;                       /* the row's figure */
    char   unit[16];
    double ratio;                       /* value / its anchor, or 0 */
    char   anchor[32];
} bench_row;

static bench_row rows[64];
static int       nrows;
static double    batch_s = 0.2;

typedef void (*bench_fn)(void *ctx);

/* Seconds one call of fn takes: best of 3 timed batches. */
static double
bench_time(bench_fn fn, void *ctx)
{
    double best = INFINITY, t0, one;
    int    reps;

    fn(ctx);
    fn(ctx);
    pic_cuda_sync();
    t0 = pic_now_s();
    fn(ctx);
    pic_cuda_sync();
    one = pic_now_s() - t0;
    reps = one > 0 ? (int) (batch_s / one) : 1000;
    reps = reps < 3 ? 3 : reps > 5000 ? 5000 : reps;
    for (int b = 0; b < 3; b++) {
        t0 = pic_now_s();
        for (int i = 0; i < reps; i++) {
            fn(ctx);
        }
        if (pic_cuda_sync() != 0) {
            fprintf(stderr, "cuda_bench: CUDA error\n");
            exit(1);
        }
        double t = (pic_now_s() - t0) / reps;
        best = t < best ? t : best;
    }
    return best;
}

static bench_row *
row_add(const char *name, const char *shape, double sec, double value,
        const char *unit)
{
    bench_row *r = &rows[nrows++];

    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "%s", name);
    snprintf(r->shape, sizeof(r->shape), "%s", shape);
    snprintf(r->unit, sizeof(r->unit), "%s", unit);
    r->sec = sec;
    r->value = value;
    printf("%-26s %-24s %10.2f us  %10.1f %s\n", name, shape, sec * 1e6, value, unit);
    fflush(stdout);
    return r;
}

static void *
dev_rand(size_t n, float scale)
{
    float    *h = malloc(n * sizeof(float));
    void     *d = pic_cuda_malloc(n * sizeof(float));
    uint64_t  s = 0x2545f4914f6cdd1dull ^ n;

    if (h == NULL || d == NULL) {
        fprintf(stderr, "cuda_bench: out of memory (%zu floats)\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        h[i] = ((float) (s >> 40) / (float) (1 << 24) * 2.0f - 1.0f) * scale;
    }
    pic_cuda_upload(d, h, n * sizeof(float));
    free(h);
    return d;
}

/* A (rows, cols) weight of type t on the device, random. */
static void
wmat_dev(pic_wmat *d, pic_wtype t, int r, int c)
{
    size_t   n = (size_t) r * c;
    float   *f = malloc(n * sizeof(float));
    pic_wmat h = { .type = t, .rows = r, .cols = c };
    uint64_t s = 0x9e3779b97f4a7c15ull ^ n;
    void    *data = NULL;
    uint16_t *scale = NULL;

    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        f[i] = ((float) (s >> 40) / (float) (1 << 24) * 2.0f - 1.0f) * 0.03f;
    }
    if (t == PIC_WTYPE_F32) {
        data = f;
        f = NULL;
    } else if (t == PIC_WTYPE_BF16) {
        data = malloc(n * 2);
        pic_bf16_from_f32(data, f, n);
    } else {
        data = malloc(n);
        scale = malloc(n / PIC_Q8_BLOCK * 2);
        pic_q8_from_f32(data, scale, f, n);
    }
    h.data = data;
    h.scale = scale;
    if (pic_cuda_wmat_upload(d, &h) != 0) {
        exit(1);
    }
    free(f);
    free(data);
    free(scale);
}

/* --- the ops timed --- */

typedef struct {
    const pic_backend *be;
    pic_wmat           w;
    float             *x, *y;
    int                n;
} mm_ctx;

static void
mm_call(void *p)
{
    mm_ctx *c = p;

    c->be->matmul_w(c->y, c->x, &c->w, c->n, 0);
}

typedef struct {
    void  *dst, *src;
    size_t bytes;
} copy_ctx;

static void
copy_call(void *p)
{
    copy_ctx *c = p;

    pic_cuda_copy(c->dst, c->src, c->bytes);
}

typedef struct {
    const pic_backend *be;
    pic_gdn_args       a;
    int                chunked;
} gdn_ctx;

static void
gdn_call(void *p)
{
    gdn_ctx *c = p;

    if (c->chunked) {
        c->be->gdn_chunked(&c->a);
    } else {
        c->be->gdn_recurrent(&c->a);
    }
}

typedef struct {
    const pic_backend *be;
    float             *o, *q, *kc, *vc;
    int               *qpos;
    int                n, cap, n_keys;
} attn_ctx;

static void
attn_call(void *p)
{
    attn_ctx *c = p;

    c->be->attention(c->o, c->q, c->qpos, c->n, 8, 2, 256, c->kc, c->vc, c->cap,
                     c->n_keys);
}

/* matmul_w of a (out, in) weight of type t on n rows: one row. */
static bench_row *
bench_mm(const pic_backend *be, pic_wtype t, int n, int in, int out,
         const char *name)
{
    mm_ctx c = { .be = be, .n = n };
    char   shape[64];
    double sec, flop = 2.0 * n * in * out;

    wmat_dev(&c.w, t, out, in);
    c.x = dev_rand((size_t) n * in, 1.0f);
    c.y = pic_cuda_malloc((size_t) n * out * sizeof(float));
    sec = bench_time(mm_call, &c);
    snprintf(shape, sizeof(shape), "%s n=%d %dx%d", pic_wtype_name(t), n, in, out);
    bench_row *r = n <= 4 ? row_add(name, shape, sec, pic_wmat_bytes(&c.w) / sec / 1e9, "GB/s")
                          : row_add(name, shape, sec, flop / sec / 1e12, "TFLOP/s");
    pic_cuda_wmat_free(&c.w);
    pic_cuda_free(c.x);
    pic_cuda_free(c.y);
    return r;
}

int
main(int argc, char **argv)
{
    const char        *json = NULL;
    const pic_backend *be;
    double             peak = 989.0, copy_gbs;
    int                quick = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json = argv[++i];
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--peak") == 0 && i + 1 < argc) {
            peak = atof(argv[++i]);
        } else {
            fprintf(stderr, "usage: cuda_bench [--json FILE] [--quick] [--peak TFLOPS]\n");
            return 2;
        }
    }
    if (pic_cuda_device_count() == 0 || (be = pic_backend_cuda()) == NULL) {
        printf("cuda_bench: no CUDA device: nothing measured\n");
        return 0;
    }
    batch_s = quick ? 0.05 : 0.2;
    printf("device: %s\n", pic_cuda_device_name());

    /* the bandwidth anchor: device-to-device copy, read + write bytes */
    {
        copy_ctx c = { .bytes = (size_t) 1 << 30 };

        c.src = pic_cuda_malloc(c.bytes);
        c.dst = pic_cuda_malloc(c.bytes);
        pic_cuda_memset(c.src, 1, c.bytes);
        double sec = bench_time(copy_call, &c);
        copy_gbs = 2.0 * c.bytes / sec / 1e9;
        row_add("copy_d2d", "1 GiB", sec, copy_gbs, "GB/s");
        pic_cuda_free(c.src);
        pic_cuda_free(c.dst);
    }

    /* prefill GEMMs: TFLOP/s against the bf16 dense peak */
    /* parts: x split into that many bf16 parts (pic_cuda_bf16_split; 3, the
     * default, keeps the CPU op's fp32 x; 1 is the plain bf16 GEMM) */
    struct { pic_wtype t; int n, in, out, parts; const char *name; } gemms[] = {
        { PIC_WTYPE_BF16, 2048, 1024, 3584, 1, "gemm_ffn_up_x1" },
        { PIC_WTYPE_BF16, 2048, 3584, 1024, 1, "gemm_ffn_down_x1" },
        { PIC_WTYPE_BF16, 2048, 1024, 248320, 1, "gemm_lm_head_x1" },
        { PIC_WTYPE_BF16, 2048, 1024, 3584, 3, "gemm_ffn_up_x3" },
        { PIC_WTYPE_BF16, 2048, 1024, 248320, 3, "gemm_lm_head_x3" },
        { PIC_WTYPE_F32, 2048, 1024, 3584, 3, "gemm_ffn_up" },
        { PIC_WTYPE_Q8, 2048, 1024, 3584, 3, "gemm_ffn_up" },
    };
    double gemm_up = 0, gemm_lm = 0, gemm_up3 = 0, gemm_lm3 = 0;
    for (size_t i = 0; i < sizeof(gemms) / sizeof(gemms[0]); i++) {
        pic_cuda_bf16_split(gemms[i].parts);
        bench_row *r = bench_mm(be, gemms[i].t, gemms[i].n, gemms[i].in, gemms[i].out,
                                gemms[i].name);

        pic_cuda_bf16_split(3);
        /* useful FLOP: 2 n in out, whatever the split costs */
        r->ratio = r->value / peak;
        snprintf(r->anchor, sizeof(r->anchor), "bf16 peak %.0f", peak);
        if (gemms[i].t == PIC_WTYPE_BF16 && gemms[i].out == 3584) {
            *(gemms[i].parts == 1 ? &gemm_up : &gemm_up3) = r->value;
        }
        if (gemms[i].t == PIC_WTYPE_BF16 && gemms[i].out == 248320) {
            *(gemms[i].parts == 1 ? &gemm_lm : &gemm_lm3) = r->value;
        }
    }

    /* decode GEMVs: GB/s of weight bytes against the copy */
    struct { pic_wtype t; int n, in, out; const char *name; } gemvs[] = {
        { PIC_WTYPE_BF16, 1, 1024, 3584, "gemv_ffn_up" },
        { PIC_WTYPE_BF16, 1, 3584, 1024, "gemv_ffn_down" },
        { PIC_WTYPE_BF16, 1, 1024, 6144, "gemv_gdn_qkv" },
        { PIC_WTYPE_BF16, 1, 1024, 248320, "gemv_lm_head" },
        { PIC_WTYPE_BF16, 4, 1024, 248320, "gemv_lm_head" },
        { PIC_WTYPE_Q8, 1, 1024, 248320, "gemv_lm_head" },
        { PIC_WTYPE_Q8, 1, 1024, 3584, "gemv_ffn_up" },
        { PIC_WTYPE_F32, 1, 1024, 248320, "gemv_lm_head" },
    };
    double gemv_lm = 0, gemv_up = 0;
    for (size_t i = 0; i < sizeof(gemvs) / sizeof(gemvs[0]); i++) {
        bench_row *r = bench_mm(be, gemvs[i].t, gemvs[i].n, gemvs[i].in, gemvs[i].out,
                                gemvs[i].name);

        r->ratio = r->value / copy_gbs;
        snprintf(r->anchor, sizeof(r->anchor), "copy %.0f GB/s", copy_gbs);
        if (gemvs[i].t == PIC_WTYPE_BF16 && gemvs[i].n == 1 && gemvs[i].out == 248320) {
            gemv_lm = r->value;
        }
        if (gemvs[i].t == PIC_WTYPE_BF16 && gemvs[i].n == 1 && gemvs[i].out == 3584) {
            gemv_up = r->value;
        }
    }

    /* Gated DeltaNet, one layer (16 × 128 heads): decode step, then the
     * prefill by the recurrent and by the chunked (WY) kernel side by side */
    double gdn_step = 0, gdn_prefill = 0, gdn_prefill_rec = 0;
    for (int pass = 0; pass < 3; pass++) {
        int     n = pass == 0 ? 1 : 2048, Hk = 16, Hv = 16, dk = 128, ds = 128;
        int     ld = 2 * Hk * dk + Hv * ds;
        gdn_ctx c = { .be = be, .chunked = pass == 2 };
        float  *qkv = dev_rand((size_t) n * ld, 0.08f);
        float  *g = dev_rand((size_t) n * Hv, 0.0f), *beta = dev_rand((size_t) n * Hv, 0.0f);
        float  *S = dev_rand((size_t) Hv * dk * ds, 0.01f);
        float  *o = pic_cuda_malloc((size_t) n * Hv * ds * sizeof(float));
        char    shape[64];

        pic_cuda_memset(g, 0, (size_t) n * Hv * sizeof(float));         /* e^0 = 1 */
        pic_cuda_memset(beta, 0, (size_t) n * Hv * sizeof(float));      /* β = 0 */
        c.a = (pic_gdn_args) { .n = n, .Hk = Hk, .Hv = Hv, .dk = dk, .ds = ds,
                               .q = qkv, .ldq = ld, .k = qkv + Hk * dk, .ldk = ld,
                               .v = qkv + 2 * Hk * dk, .ldv = ld, .g = g, .beta = beta,
                               .S = S, .o = o, .ldo = Hv * ds };
        double sec = bench_time(gdn_call, &c);
        snprintf(shape, sizeof(shape), "n=%d 16x128 heads", n);
        row_add(pass == 2 ? "gdn_chunked_prefill"
                : pass == 1 ? "gdn_recurrent_prefill" : "gdn_recurrent_step",
                shape, sec, n / sec, "tok/s");
        if (pass == 2) {
            gdn_prefill = n / sec;
        } else if (pass == 1) {
            gdn_prefill_rec = n / sec;
        } else {
            gdn_step = n / sec;
        }
        pic_cuda_free(qkv);
        pic_cuda_free(g);
        pic_cuda_free(beta);
        pic_cuda_free(S);
        pic_cuda_free(o);
    }

    /* attention, one layer (8 q / 2 kv heads × 256): prefill and decode */
    double attn_prefill = 0, attn_decode = 0;
    for (int pass = 0; pass < 2; pass++) {
        int       n = pass == 0 ? 2048 : 1, nk = pass == 0 ? 2048 : 4096, cap = 4096;
        attn_ctx  c = { .be = be, .n = n, .cap = cap, .n_keys = nk };
        int      *pos = malloc((size_t) n * sizeof(int));
        char      shape[64];

        for (int t = 0; t < n; t++) {
            pos[t] = nk - n + t;
        }
        c.qpos = pic_cuda_malloc((size_t) n * sizeof(int));
        pic_cuda_upload(c.qpos, pos, (size_t) n * sizeof(int));
        c.q = dev_rand((size_t) n * 8 * 256, 1.0f);
        c.kc = dev_rand((size_t) 2 * cap * 256, 1.0f);
        c.vc = dev_rand((size_t) 2 * cap * 256, 1.0f);
        c.o = pic_cuda_malloc((size_t) n * 8 * 256 * sizeof(float));
        double sec = bench_time(attn_call, &c);
        snprintf(shape, sizeof(shape), "n=%d keys=%d 8/2x256", n, nk);
        row_add(pass ? "attention_decode" : "attention_prefill", shape, sec, n / sec,
                "tok/s");
        if (pass) {
            attn_decode = n / sec;
        } else {
            attn_prefill = n / sec;
        }
        pic_cuda_free(c.qpos);
        pic_cuda_free(c.q);
        pic_cuda_free(c.kc);
        pic_cuda_free(c.vc);
        pic_cuda_free(c.o);
        free(pos);
    }

    if (json != NULL) {
        FILE *f = fopen(json, "w");

        if (f == NULL) {
            perror(json);
            return 1;
        }
        fprintf(f, "{\n  \"summary\": {\n");
        fprintf(f, "    \"gemm_bf16_tflops_2048x1024x3584\": %.2f,\n", gemm_up);
        fprintf(f, "    \"gemm_bf16_tflops_lm_head_2048x1024x248320\": %.2f,\n", gemm_lm);
        fprintf(f, "    \"gemm_bf16_vs_peak\": %.4f,\n", gemm_up / peak);
        fprintf(f, "    \"gemm_bf16_lm_head_vs_peak\": %.4f,\n", gemm_lm / peak);
        fprintf(f, "    \"gemm_bf16_x3_tflops_2048x1024x3584\": %.2f,\n", gemm_up3);
        fprintf(f, "    \"gemm_bf16_x3_tflops_lm_head\": %.2f,\n", gemm_lm3);
        fprintf(f, "    \"gemv_bf16_gbs_lm_head\": %.1f,\n", gemv_lm);
        fprintf(f, "    \"gemv_bf16_gbs_ffn_up\": %.1f,\n", gemv_up);
        fprintf(f, "    \"copy_d2d_gbs\": %.1f,\n", copy_gbs);
        fprintf(f, "    \"gemv_bf16_lm_head_vs_copy\": %.4f,\n", gemv_lm / copy_gbs);
        fprintf(f, "    \"gdn_recurrent_step_tok_s_per_layer\": %.1f,\n", gdn_step);
        fprintf(f, "    \"gdn_recurrent_prefill_tok_s_per_layer\": %.1f,\n", gdn_prefill_rec);
        fprintf(f, "    \"gdn_chunked_prefill_tok_s_per_layer\": %.1f,\n", gdn_prefill);
        fprintf(f, "    \"attention_prefill_tok_s_per_layer\": %.1f,\n", attn_prefill);
        fprintf(f, "    \"attention_decode_tok_s_per_layer\": %.1f\n", attn_decode);
        fprintf(f, "  },\n  \"machine\": {\"device\": \"%s\", \"bf16_peak_tflops\": %.0f},\n",
                pic_cuda_device_name(), peak);
        fprintf(f, "  \"config\": {\"quick\": %d, \"batch_s\": %.2f, \"timing\": "
                "\"best of 3 batches, wall clock around pic_cuda_sync\"},\n",
                quick, batch_s);
        fprintf(f, "  \"rows\": [\n");
        for (int i = 0; i < nrows; i++) {
            bench_row *r = &rows[i];

            fprintf(f, "    {\"name\": \"%s\", \"shape\": \"%s\", \"us\": %.3f, "
                    "\"value\": %.3f, \"unit\": \"%s\", \"ratio\": %.4f, "
                    "\"anchor\": \"%s\"}%s\n", r->name, r->shape, r->sec * 1e6,
                    r->value, r->unit, r->ratio, r->anchor, i + 1 < nrows ? "," : "");
        }
        fprintf(f, "  ]\n}\n");
        fclose(f);
        printf("wrote %s\n", json);
    }
    return 0;
}
