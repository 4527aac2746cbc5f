/*
 * forward_bench.c — timing helper for bench/forward.py (built by it against
 * $BUILD/libpic.a).  Measures, in one process: OpenBLAS sgemm GFLOP/s and
 * memcpy GB/s (the machine anchors), prefill tokens/s at the given lengths,
 * decode tokens/s after a prefill, and peak RSS.  Prints one JSON object.
 *
 *   forward_bench MODEL_DIR PREFILL_LENS(comma) DECODE_STEPS [THREADS [REPS]]
 */
#include <cblas.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "forward.h"
#include "model.h"
#include "pic_kernels.h"
#include "pic_time.h"
#include "state.h"

/* Best-of-3 OpenBLAS sgemm (its own threads) on an n×n×n product. */
static double
bench_sgemm(int n, int threads)
{
    float  *a = malloc((size_t) n * n * sizeof(float));
    float  *b = malloc((size_t) n * n * sizeof(float));
    float  *c = malloc((size_t) n * n * sizeof(float));
    double  best = 0.0;

    for (size_t i = 0; i < (size_t) n * n; i++) {
        a[i] = (float) (i % 7) * 0.1f;
        b[i] = (float) (i % 5) * 0.1f;
    }
    openblas_set_num_threads(threads);
    for (int r = 0; r < 4; r++) {
        double t0 = pic_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f,
                    a, n, b, n, 0.0f, c, n);
        double dt = pic_now_s() - t0;
        if (r > 0 && 2.0 * n * n * (double) n / dt > best) {
            best = 2.0 * n * n * (double) n / dt;
        }
    }
    openblas_set_num_threads(1);        /* back to the engine's setting */
    free(a); free(b); free(c);
    return best / 1e9;
}

/* Best-of-3 of the engine's own matmul op (OpenBLAS single-threaded per
 * OpenMP thread, output columns split) on the same n×n×n product: the
 * anchor is the better of the two ways to run sgemm on this machine. */
static double
bench_engine_gemm(int n)
{
    const pic_backend *be = pic_backend_cpu();
    float  *a = malloc((size_t) n * n * sizeof(float));
    float  *b = malloc((size_t) n * n * sizeof(float));
    float  *c = malloc((size_t) n * n * sizeof(float));
    double  best = 0.0;

    for (size_t i = 0; i < (size_t) n * n; i++) {
        a[i] = (float) (i % 7) * 0.1f;
        b[i] = (float) (i % 5) * 0.1f;
    }
    for (int r = 0; r < 4; r++) {
        double t0 = pic_now_s();
        be->matmul(c, a, b, n, n, n, 0);
        double dt = pic_now_s() - t0;
        if (r > 0 && 2.0 * n * n * (double) n / dt > best) {
            best = 2.0 * n * n * (double) n / dt;
        }
    }
    free(a); free(b); free(c);
    return best / 1e9;
}

/* Best-of-5 memcpy of a 512 MiB buffer: bytes copied per second. */
static double
bench_memcpy(void)
{
    size_t  n = (size_t) 512 << 20;
    char   *a = malloc(n), *b = malloc(n);
    double  best = 0.0;

    memset(a, 1, n);
    memset(b, 2, n);
    for (int r = 0; r < 5; r++) {
        double t0 = pic_now_s();
        memcpy(b, a, n);
        double dt = pic_now_s() - t0;
        best = n / dt > best ? n / dt : best;
        a[r] = b[n - 1 - r];
    }
    free(a); free(b);
    return best / 1e9;
}

/* Best-of-5 read of a 512 MiB buffer by the engine's OpenMP threads, each
 * streaming its own share (pic_kernels_read_bw): bytes read per second. */
static double
bench_read(void)
{
    size_t  n = (size_t) 512 << 20, nf = n / sizeof(float);
    float  *a = malloc(n);
    double  best;

    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < nf; i++) {
        a[i] = (float) (i & 7);
    }
    best = pic_kernels_read_bw(a, n, 5);
    free(a);
    return best / 1e9;
}

/* Bytes one decode step at position pos reads: every projection matrix
 * once (the embedding table only through the head when tied, else one row),
 * the small fp32 weights, the GDN state and conv window (read and written),
 * and the KV cache up to pos at the attention layers. */
static double
decode_bytes(const pic_model *m, int pos)
{
    const pic_config *c = &m->cfg;
    double            b = (double) m->weight_bytes;

    if (m->w.lm_head.data != m->w.embed.data) {
        b -= (double) pic_wmat_bytes(&m->w.embed) - pic_wmat_bytes(&m->w.embed) / c->vocab;
    }
    for (int l = 0; l < c->n_layers; l++) {
        if (pic_layer_recurrent(c->layer_type[l])) {
            double C = pic_config_conv_ch(c);

            b += 2.0 * 4 * ((double) c->lin_v_heads * c->lin_k_dim * c->lin_v_dim
                            + C * (c->conv_kernel - 1));
        } else {
            b += 4.0 * pic_config_cache_heads(c)
                 * (pic_config_cache_kdim(c) + pic_config_cache_vdim(c)) * (double) (pos + 1);
        }
    }
    return b;
}

/* Resident set size now, from /proc/self/statm. */
static long
rss_now(void)
{
    long  pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f != NULL) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2) {
            rss = 0;
        }
        fclose(f);
    }
    return rss * 4096L;
}

int
main(int argc, char **argv)
{
    char        err[512];
    int         lens[16], nl = 0, steps, threads;
    const char *p;

    pic_kernels_process_env(argv);

    if (argc < 4) {
        fprintf(stderr, "usage: forward_bench MODEL_DIR LENS DECODE_STEPS [THREADS [REPS]]\n");
        return 2;
    }
    for (p = argv[2]; *p && nl < 16; ) {
        lens[nl++] = atoi(p);
        p = strchr(p, ',');
        if (p == NULL) {
            break;
        }
        p++;
    }
    steps = atoi(argv[3]);
    threads = argc > 4 ? atoi(argv[4]) : 0;
    int reps = argc > 5 ? atoi(argv[5]) : 1;
    reps = reps < 1 ? 1 : reps;
    pic_kernels_set_threads(threads);
    threads = pic_kernels_threads();

    double sgemm = bench_sgemm(2048, threads);
    double egemm = bench_engine_gemm(2048);
    double mcpy = bench_memcpy();
    double rd = bench_read();

    double     t0 = pic_now_s();
    pic_model *m = pic_model_load(argv[1], err, sizeof(err));
    if (m == NULL) {
        fprintf(stderr, "forward_bench: %s\n", err);
        return 1;
    }
    double load_s = pic_now_s() - t0;
    long   rss_load = rss_now();
    const pic_config *c = &m->cfg;
    float *logits = malloc((size_t) c->vocab * sizeof(float));
    int    maxn = 0;
    for (int i = 0; i < nl; i++) {
        maxn = lens[i] > maxn ? lens[i] : maxn;
    }
    int *tok = malloc((size_t) (maxn + steps + 1) * sizeof(int));
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < maxn + steps + 1; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        tok[i] = (int) (x % (uint64_t) c->vocab);
    }

    printf("{\"threads\": %d, \"sgemm_gflops\": %.3f, \"memcpy_gbps\": %.3f, "
           "\"read_gbps\": %.3f, \"weight_bytes\": %zu, \"load_seconds\": %.3f, "
           "\"rss_after_load_bytes\": %ld, \"prefill\": [",
           threads, sgemm, mcpy, rd, m->weight_bytes, load_s, rss_load);

    pic_state *keep = NULL;
    int        keep_n = 0;
    for (int i = 0; i < nl; i++) {
        pic_state *s = pic_state_init(c, 0, err, sizeof(err));
        double     dt = 1e30;
        for (int r = 0; r < reps; r++) {        /* best of reps */
            double t1 = pic_now_s();
            if (s != NULL) {
                pic_state_reset(s);
            }
            if (s == NULL || pic_forward(m, NULL, s, tok, lens[i], 0, PIC_LOGITS_LAST,
                                         logits, NULL, err, sizeof(err)) != 0) {
                fprintf(stderr, "forward_bench: %s\n", err);
                return 1;
            }
            dt = pic_now_s() - t1 < dt ? pic_now_s() - t1 : dt;
        }
        double fl = pic_forward_flops(c, lens[i], 0, PIC_LOGITS_LAST);
        printf("%s{\"tokens\": %d, \"seconds\": %.4f, \"tok_s\": %.3f, "
               "\"model_flops\": %.6g, \"gflops\": %.3f}",
               i ? ", " : "", lens[i], dt, lens[i] / dt, fl, fl / dt / 1e9);
        fflush(stdout);
        if (keep == NULL || lens[i] < keep_n) {   /* decode after the shortest */
            pic_state_free(keep);
            keep = s;
            keep_n = lens[i];
        } else {
            pic_state_free(s);
        }
    }

    /* decode: steps single-token forwards after the shortest prefill; the
     * median step is the figure (robust to a preempted step on a shared
     * machine), the mean is reported too */
    double *st = malloc((size_t) (steps > 0 ? steps : 1) * sizeof(double));
    double  dd = 0.0;
    for (int i = 0; i < steps; i++) {
        double t2 = pic_now_s();
        if (pic_forward(m, NULL, keep, tok + keep_n + i, 1, keep_n + i,
                        PIC_LOGITS_LAST, logits, NULL, err, sizeof(err)) != 0) {
            fprintf(stderr, "forward_bench: %s\n", err);
            return 1;
        }
        st[i] = pic_now_s() - t2;
        dd += st[i];
        for (int j = i; j > 0 && st[j] < st[j - 1]; j--) {
            double t = st[j]; st[j] = st[j - 1]; st[j - 1] = t;
        }
    }
    double med = steps > 0 ? st[steps / 2] : 0.0;
    free(st);
    /* the anchor again after the model runs: best of both (shared machine) */
    double sgemm2 = bench_sgemm(2048, threads);
    double egemm2 = bench_engine_gemm(2048);
    double best = sgemm;
    best = sgemm2 > best ? sgemm2 : best;
    best = egemm > best ? egemm : best;
    best = egemm2 > best ? egemm2 : best;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("], \"decode\": {\"context\": %d, \"steps\": %d, \"seconds\": %.4f, "
           "\"tok_s\": %.4f, \"mean_tok_s\": %.4f}, \"peak_rss_bytes\": %ld, \"rss_end_bytes\": %ld, "
           "\"state_bytes\": %zu, \"weights\": \"%s\", \"decode_bytes_per_token\": %.0f, "
           "\"sgemm_gflops_best\": %.3f, "
           "\"openblas_threaded_gflops\": [%.3f, %.3f], "
           "\"engine_split_gemm_gflops\": [%.3f, %.3f]}\n",
           keep_n, steps, dd, med > 0 ? 1.0 / med : 0.0, steps / dd, ru.ru_maxrss * 1024L, rss_now(),
           pic_state_bytes(keep), pic_wtype_name(m->wtype),
           decode_bytes(m, keep_n + steps / 2), best, sgemm, sgemm2, egemm, egemm2);
    pic_state_free(keep);
    pic_model_free(m);
    free(logits);
    free(tok);
    return 0;
}
