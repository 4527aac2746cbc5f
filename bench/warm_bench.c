/*
 * warm_bench.c — the forward of a warm chunk alone, llama-bench's
 * `-p N -d DEPTH` for pic-engine (bench/peer.py): DEPTH random token ids
 * are prefilled (untimed), then N more at positions DEPTH.. are timed, fed
 * as the server feeds a prompt (one pic_forward, micro-batches as it cuts
 * them, logits of the last token), on a fresh copy of the prefilled state
 * each repetition, after one untimed warm-up (as llama-bench's).  The
 * copies share one forward workspace, as a server worker's slots share
 * theirs and llama-bench keeps its compute buffers: a new one each time
 * put its first-touch page faults in the timing (bf16dot, 570 after 2,048,
 * Zen 4, three alternated runs: 500-570 tok/s with a new one each time,
 * 598-647 with one shared).  No server, tokenizer or cache in the way: it isolates
 * the engine's forward from what either server's prompt cache brings back.
 * The weight format is the loader's (PIC_WEIGHTS=f32|bf16|q8).
 *
 *   warm_bench MODEL_DIR DEPTH N [THREADS [REPS [pp|tg [GAP_MS]]]]
 *
 * pp (default) times the N tokens as one prompt, llama-bench's pp N @ d
 * DEPTH (DEPTH 0: its plain pp N; warm-up a whole N-token run); tg times N
 * decode steps of one token each, logits of every step, llama-bench's tg N
 * (@ d DEPTH), after its warm-up of one step.  GAP_MS > 0 sleeps that long
 * before each timed repetition: the forward starts cold, as a server's
 * request does after an idle spell (threads parked, CPUs idle), instead of
 * straight after the previous one.
 *
 * Prints one JSON object: the mean over repetitions of each one's tok/s
 * (mean_tok_s, llama-bench's avg_ts: the same statistic), wall seconds and
 * tok/s of the best one (the figure a shared machine disturbs least) and
 * its process CPU seconds; the model FLOPs of one repetition
 * (pic_forward_flops: gflop, so gflop * mean_tok_s / N is the forward's
 * model GFLOP/s), the SIMD path and the OpenBLAS core it ran on.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_cpu.h"
#include "forward.h"
#include "model.h"
#include "pic_kernels.h"
#include "pic_time.h"
#include "state.h"

/* n tokens at positions p0.. into s: one pic_forward (tg 0) or n one-token
 * steps (tg 1), logits (V) of the last token of each call; 0 or -1 + err. */
static int
warm_run(const pic_model *m, pic_state *s, const int *tok, int n, int p0,
         int tg, float *logits, char *err, size_t errlen)
{
    if (!tg) {
        return pic_forward(m, NULL, s, tok, n, p0, PIC_LOGITS_LAST, logits,
                           NULL, err, errlen);
    }
    for (int i = 0; i < n; i++) {
        if (pic_forward(m, NULL, s, tok + i, 1, p0 + i, PIC_LOGITS_LAST,
                        logits, NULL, err, errlen) != 0)
        {
            return -1;
        }
    }
    return 0;
}


int
main(int argc, char **argv)
{
    char        err[512];
    int         depth, n, threads, reps, tg, gap_ms, *tok;
    double      best = 1e30, best_cpu = 0.0, sum = 0.0, gflop = 0.0;
    uint64_t    x = 88172645463325252ull;
    pic_model  *m;
    pic_state  *s;
    pic_workspace ws = { 0 };       /* one for every repetition, as a
                                     * server worker's slots share one */
    float      *logits;             /* (vocab) */

    pic_kernels_process_env(argv);
    if (argc < 4) {
        fprintf(stderr, "usage: warm_bench MODEL_DIR DEPTH N [THREADS [REPS [pp|tg "
                "[GAP_MS]]]]\n");
        return 2;
    }
    depth = atoi(argv[2]);
    n = atoi(argv[3]);
    threads = argc > 4 ? atoi(argv[4]) : 0;
    reps = argc > 5 ? atoi(argv[5]) : 2;
    tg = argc > 6 && strcmp(argv[6], "tg") == 0;
    gap_ms = argc > 7 ? atoi(argv[7]) : 0;
    if (depth < 0 || n <= 0 || reps <= 0 || gap_ms < 0 || gap_ms > 60000
        || (argc > 6 && !tg && strcmp(argv[6], "pp") != 0))
    {
        fprintf(stderr, "warm_bench: DEPTH >= 0, N > 0, REPS > 0, pp or tg, "
                "0 <= GAP_MS <= 60000\n");
        return 2;
    }
    pic_kernels_set_threads(threads);
    threads = pic_kernels_threads();

    m = pic_model_load(argv[1], err, sizeof(err));
    if (m == NULL) {
        fprintf(stderr, "warm_bench: %s\n", err);
        return 1;
    }
    logits = malloc((size_t) m->cfg.vocab * sizeof(float));
    tok = malloc((size_t) (depth + n) * sizeof(int));
    s = pic_state_init(&m->cfg, 0, err, sizeof(err));
    if (logits == NULL || tok == NULL || s == NULL) {
        fprintf(stderr, "warm_bench: out of memory\n");
        return 1;
    }
    for (int i = 0; i < depth + n; i++) {       /* xorshift ids, as forward_bench */
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        tok[i] = (int) (x % (uint64_t) m->cfg.vocab);
    }
    if ((depth > 0
         && pic_forward(m, NULL, s, tok, depth, 0, PIC_LOGITS_NONE, logits,
                        NULL, err, sizeof(err)) != 0)
        || pic_state_reserve(s, depth + n, err, sizeof(err)) != 0)
    {
        fprintf(stderr, "warm_bench: %s\n", err);
        return 1;
    }

    for (int r = -1; r < reps; r++) {           /* r -1: warm-up, untimed */
        pic_state *t = pic_state_clone(s);
        double     t0, c0, dt;

        if (t == NULL) {
            fprintf(stderr, "warm_bench: out of memory\n");
            return 1;
        }
        pic_state_share_workspace(t, &ws);
        if (r >= 0 && gap_ms > 0) {
            struct timespec z = { gap_ms / 1000, (long) (gap_ms % 1000) * 1000000L };

            nanosleep(&z, NULL);
        }
        t0 = pic_now_s();
        c0 = bench_cpu_s(CLOCK_PROCESS_CPUTIME_ID);
        if (warm_run(m, t, tok + depth, tg ? (r < 0 ? 1 : n) : n, depth, tg,
                     logits, err, sizeof(err)) != 0)
        {
            fprintf(stderr, "warm_bench: %s\n", err);
            return 1;
        }
        dt = pic_now_s() - t0;
        sum += r >= 0 ? n / dt : 0.0;
        if (r >= 0 && dt < best) {
            best = dt;
            best_cpu = bench_cpu_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        }
        pic_state_free(t);
    }
    for (int i = 0; i < (tg ? n : 1); i++) {    /* tg: one token a step */
        gflop += pic_forward_flops(&m->cfg, tg ? 1 : n, depth + i, PIC_LOGITS_LAST) / 1e9;
    }
    printf("{\"mode\": \"%s\", \"depth\": %d, \"tokens\": %d, \"threads\": %d, "
           "\"reps\": %d, \"gap_ms\": %d, "
           "\"weights\": \"%s\", \"seconds\": %.4f, \"tok_s\": %.3f, "
           "\"mean_tok_s\": %.3f, \"cpu_seconds\": %.4f, \"gflop\": %.4f, "
           "\"simd\": \"%s\", \"blas_core\": \"%s\"}\n",
           tg ? "tg" : "pp", depth, n, threads, reps, gap_ms, pic_wtype_name(m->wtype),
           best, n / best, sum / reps, best_cpu, gflop, pic_kernels_simd(),
           pic_kernels_blas_core());
    pic_state_free(s);
    pic_workspace_free(pic_backend_cpu(), &ws);
    pic_model_free(m);
    free(logits);
    free(tok);
    return 0;
}
