/*
 * cuda_forward.c — the whole forward on a device backend, warm: prefill
 * tokens/s at the given lengths and decode tokens/s after the shortest,
 * against the GPU's rooflines (bf16 dense peak for prefill FLOPs; the
 * device copy bandwidth for the bytes a decode step reads).  The backend is
 * loaded as pic-engine loads it (pic_backend_load: dlopen of
 * libpic_cuda.so), the weights uploaded once (bf16 unless $PIC_WEIGHTS),
 * and one untimed prefill runs first, so that module loading, cuBLAS
 * set-up and scratch allocation are not in the figures (a single cold
 * `pic-engine generate` carries them).  Prints one JSON object.
 *
 *   cuda_forward MODEL_DIR LENS(comma) DECODE_STEPS [DEVICE [REPS [PEAK_TFLOPS COPY_GBS]]]
 *
 * DEVICE: cuda (default) or cpu-dev (a dry run of the device path on CPU).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "model.h"
#include "pic_kernels.h"
#include "pic_time.h"
#include "state.h"

int
main(int argc, char **argv)
{
    char               err[512];
    int                lens[16], nl = 0, steps, reps, maxn = 0;
    const char        *p, *device;
    const pic_backend *be;
    pic_model         *m, *dm;
    double             peak, copy;

    pic_kernels_process_env(argv);
    if (argc < 4) {
        fprintf(stderr, "usage: cuda_forward MODEL_DIR LENS DECODE_STEPS "
                        "[DEVICE [REPS [PEAK_TFLOPS COPY_GBS]]]\n");
        return 2;
    }
    for (p = argv[2]; *p && nl < 16; ) {
        lens[nl] = atoi(p);
        maxn = lens[nl] > maxn ? lens[nl] : maxn;
        nl++;
        p = strchr(p, ',');
        if (p == NULL) {
            break;
        }
        p++;
    }
    steps = atoi(argv[3]);
    device = argc > 4 ? argv[4] : "cuda";
    reps = argc > 5 ? atoi(argv[5]) : 3;
    reps = reps < 1 ? 1 : reps;
    peak = argc > 7 ? atof(argv[6]) : 989.0;
    copy = argc > 7 ? atof(argv[7]) : 3012.0;
    if (nl == 0 || maxn <= 0 || steps < 0) {
        fprintf(stderr, "cuda_forward: bad LENS or DECODE_STEPS\n");
        return 2;
    }

    be = pic_backend_load(device, err, sizeof(err));
    if (be == NULL) {
        printf("{\"skipped\": \"%s\"}\n", err);
        return 0;
    }
    /* the device's format unless the operator's $PIC_WEIGHTS names one */
    pic_weights_format wf;

    if (pic_weights_choose(NULL, be->host, &wf, err, sizeof(err)) != 0) {
        fprintf(stderr, "cuda_forward: %s\n", err);
        return 2;
    }
    double t0 = pic_now_s();
    m = pic_model_load_as(argv[1], wf, err, sizeof(err));
    if (m == NULL) {
        fprintf(stderr, "cuda_forward: %s\n", err);
        return 1;
    }
    dm = be->host ? m : pic_model_to_backend(m, be, err, sizeof(err));
    if (dm == NULL) {
        fprintf(stderr, "cuda_forward: %s\n", err);
        return 1;
    }
    double load_s = pic_now_s() - t0;

    const pic_config *c = &m->cfg;
    float    *logits = malloc((size_t) c->vocab * sizeof(float));
    int      *tok = malloc((size_t) (maxn + steps + 1) * sizeof(int));
    uint64_t  x = 88172645463325252ull;

    for (int i = 0; i < maxn + steps + 1; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        tok[i] = (int) (x % (uint64_t) c->vocab);
    }
    pic_state *s = pic_state_init_on(c, 0, be, err, sizeof(err));
    if (s == NULL || logits == NULL || tok == NULL) {
        fprintf(stderr, "cuda_forward: %s\n", s == NULL ? err : "out of memory");
        return 1;
    }

    /* warm-up: one untimed prefill of the longest length and a few steps */
    if (pic_forward(dm, be, s, tok, maxn, 0, PIC_LOGITS_LAST, logits, NULL, err,
                    sizeof(err)) != 0) {
        fprintf(stderr, "cuda_forward: %s\n", err);
        return 1;
    }
    for (int i = 0; i < 3 && i < steps; i++) {
        pic_forward(dm, be, s, tok + maxn + i, 1, s->pos, PIC_LOGITS_LAST, logits,
                    NULL, err, sizeof(err));
    }

    printf("{\"device\": \"%s\", \"weights\": \"%s\", \"weight_bytes\": %zu, "
           "\"load_upload_seconds\": %.3f, \"peak_tflops\": %.0f, \"copy_gbs\": %.0f, "
           "\"prefill\": [", device, pic_wtype_name(m->wtype), m->weight_bytes, load_s,
           peak, copy);
    for (int i = 0; i < nl; i++) {
        double dt = 1e30;

        for (int r = 0; r < reps; r++) {        /* best of reps, each from pos 0 */
            pic_state_reset(s);
            double t1 = pic_now_s();
            if (pic_forward(dm, be, s, tok, lens[i], 0, PIC_LOGITS_LAST, logits, NULL,
                            err, sizeof(err)) != 0) {
                fprintf(stderr, "cuda_forward: %s\n", err);
                return 1;
            }
            double e = pic_now_s() - t1;           /* ends with the logits download */
            dt = e < dt ? e : dt;
        }
        double fl = pic_forward_flops(c, lens[i], 0, PIC_LOGITS_LAST);
        double roof = peak * 1e12 / (fl / lens[i]);
        printf("%s{\"tokens\": %d, \"seconds\": %.4f, \"tok_s\": %.1f, \"model_flops\": %.6g, "
               "\"tflops\": %.3f, \"roof_tok_s\": %.0f, \"vs_roof\": %.4f}",
               i ? ", " : "", lens[i], dt, lens[i] / dt, fl, fl / dt / 1e12, roof,
               lens[i] / dt / roof);
        fflush(stdout);
    }

    /* decode after the shortest length: the median step */
    int     n0 = lens[0];
    double *st = malloc((size_t) (steps > 0 ? steps : 1) * sizeof(double));

    for (int i = 1; i < nl; i++) {
        n0 = lens[i] < n0 ? lens[i] : n0;
    }
    pic_state_reset(s);
    pic_forward(dm, be, s, tok, n0, 0, PIC_LOGITS_LAST, logits, NULL, err, sizeof(err));
    for (int i = 0; i < steps; i++) {
        double t2 = pic_now_s();
        if (pic_forward(dm, be, s, tok + n0 + i, 1, n0 + i, PIC_LOGITS_LAST, logits,
                        NULL, err, sizeof(err)) != 0) {
            fprintf(stderr, "cuda_forward: %s\n", err);
            return 1;
        }
        st[i] = pic_now_s() - t2;
        for (int j = i; j > 0 && st[j] < st[j - 1]; j--) {
            double t = st[j]; st[j] = st[j - 1]; st[j - 1] = t;
        }
    }
    double med = steps > 0 ? st[steps / 2] : 0.0;
    /* bytes a step reads: the weights as held (the tied head is the embedding,
     * read whole), the GDN state and conv window twice, the KV cache */
    double bytes = (double) m->weight_bytes;
    for (int l = 0; l < c->n_layers; l++) {
        if (pic_layer_recurrent(c->layer_type[l])) {
            double C = pic_config_conv_ch(c);

            bytes += 2.0 * 4 * ((double) c->lin_v_heads * c->lin_k_dim * c->lin_v_dim
                                + C * (c->conv_kernel - 1));
        } else {
            bytes += 4.0 * pic_config_cache_heads(c)
                     * (pic_config_cache_kdim(c) + pic_config_cache_vdim(c))
                     * (double) (n0 + steps / 2 + 1);
        }
    }
    double droof = copy * 1e9 / bytes;
    printf("], \"decode\": {\"context\": %d, \"steps\": %d, \"median_step_ms\": %.4f, "
           "\"tok_s\": %.1f, \"bytes_per_token\": %.0f, \"roof_tok_s\": %.0f, "
           "\"vs_roof\": %.4f}}\n", n0, steps, med * 1e3, med > 0 ? 1.0 / med : 0.0,
           bytes, droof, med > 0 ? 1.0 / med / droof : 0.0);
    free(st);
    free(tok);
    free(logits);
    pic_state_free(s);
    if (dm != m) {
        pic_model_free(dm);
    }
    pic_model_free(m);
    return 0;
}
