/*
 * ckpt_bf16.c — what bf16 storage of the prefix tree's checkpoints and KV
 * would cost in exactness: prefill c tokens, round the
 * saved state to bf16 (linear layers' S and conv window; attention K/V of
 * [0, c); or both), resume, prefill the rest, and compare the last
 * position's logits with one fp32 prefill of the whole prompt.  The exact
 * path's goal is max |Δlogit| <= 1e-4 (fp32 storage).
 *
 * usage: build/bench/ckpt_bf16 MODEL_DIR [n=1200] [c=1024]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "model.h"
#include "state.h"

/* x rounded to the nearest bf16 (ties to even), back in fp32 */
static float
bf16_round(float x)
{
    uint32_t u;

    memcpy(&u, &x, sizeof(u));
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, sizeof(u));
    return x;
}

static void
round_all(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = bf16_round(p[i]);
    }
}

int
main(int argc, char **argv)
{
    char        err[256];
    const char *dir = argc > 1 ? argv[1] : "models/demo";
    int         n = argc > 2 ? atoi(argv[2]) : 1200, c = argc > 3 ? atoi(argv[3]) : 1024;
    pic_model  *m = pic_model_load(dir, err, sizeof(err));

    if (m == NULL || n < 2 || c < 1 || c >= n) {
        fprintf(stderr, "ckpt_bf16: %s\n", m == NULL ? err : "need 0 < c < n");
        return 1;
    }
    const pic_config *cfg = &m->cfg;
    int              *ids = malloc((size_t) n * sizeof(int));
    float            *ref = malloc((size_t) cfg->vocab * sizeof(float));
    float            *lg = malloc((size_t) cfg->vocab * sizeof(float));
    pic_state        *s = pic_state_init(cfg, n, err, sizeof(err));

    for (int i = 0; i < n; i++) {
        ids[i] = (int) (((unsigned) i * 2654435761u + 12345u) % (unsigned) cfg->vocab);
    }
    if (pic_forward(m, NULL, s, ids, n, 0, PIC_LOGITS_LAST, ref, NULL, err, sizeof(err))) {
        fprintf(stderr, "ckpt_bf16: %s\n", err);
        return 1;
    }
    printf("model %s: %d tokens, checkpoint at %d; max |Δlogit| vs one fp32 prefill\n",
           dir, n, c);
    printf("%-28s %12s\n", "stored in bf16", "max_abs_err");
    static const char *const name[4] = { "nothing (fp32, the oracle)", "S + conv (checkpoint)",
                                         "K/V of [0, c)", "both" };
    for (int how = 0; how < 4; how++) {
        pic_state_reset(s);
        if (pic_forward(m, NULL, s, ids, c, 0, PIC_LOGITS_NONE, NULL, NULL, err,
                        sizeof(err))) {
            fprintf(stderr, "ckpt_bf16: %s\n", err);
            return 1;
        }
        for (int l = 0; l < cfg->n_layers; l++) {
            if (pic_layer_recurrent(cfg->layer_type[l]) && (how & 1)) {
                round_all(s->S[l], (size_t) s->Hv * s->dk * s->dv);
                round_all(s->conv[l], (size_t) s->conv_ch * s->conv_k1);
            } else if (cfg->layer_type[l] == PIC_LAYER_FULL && (how & 2)) {
                for (int j = 0; j < s->Hkv; j++) {
                    round_all(s->kc[l] + (size_t) j * s->cap * s->hd, (size_t) c * s->hd);
                    if (s->vd > 0) {        /* MLA: no V cache */
                        round_all(s->vc[l] + (size_t) j * s->cap * s->vd, (size_t) c * s->vd);
                    }
                }
            }
        }
        if (pic_forward(m, NULL, s, ids + c, n - c, c, PIC_LOGITS_LAST, lg, NULL, err,
                        sizeof(err))) {
            fprintf(stderr, "ckpt_bf16: %s\n", err);
            return 1;
        }
        float mx = 0.0f;
        for (int i = 0; i < cfg->vocab; i++) {
            mx = fmaxf(mx, fabsf(lg[i] - ref[i]));
        }
        printf("%-28s %12.3g\n", name[how], (double) mx);
    }
    pic_state_free(s);
    free(ids);
    free(ref);
    free(lg);
    pic_model_free(m);
    return 0;
}
