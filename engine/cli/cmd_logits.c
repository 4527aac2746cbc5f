/*
 * cmd_logits.c — `pic-engine logits`: float32 little-endian logits
 * [tokens × vocab] for a list of token ids, for the oracle tests.
 *
 *   pic-engine logits --model DIR --tokens ID,ID,... --out FILE
 *                     [--decode-from N | --split-at N] [--threads N]
 *                     [--weights auto|f32|bf16|bf16dot|q8] [--device cpu|cuda]
 *
 * With --decode-from N the first N tokens are one prefill and the rest are
 * fed one at a time as decode steps; with --split-at N they are two
 * prefills, [0, N) then [N, end).  Either way the rows must equal the
 * single prefill's, which proves that the state carries across calls.
 *
 * --device cuda runs the same forward on the CUDA backend (libpic_cuda.so,
 * loaded at run time): weights uploaded once (bf16 unless --weights says
 * otherwise), state and workspace in GPU memory, token ids in and logits
 * out the only host traffic.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"
#include "commands.h"
#include "forward.h"
#include "model.h"
#include "pic_kernels.h"
#include "state.h"

static void
pic_logits_usage(FILE *f)
{
    fprintf(f, "usage: pic-engine logits --model DIR --tokens ID,ID,... --out FILE\n"
               "                         [--decode-from N | --split-at N] [--threads N]\n"
               "                         [--weights auto|f32|bf16|bf16dot|q8] [--device cpu|cuda]\n");
}

int
pic_cmd_logits(int argc, char **argv)
{
    pic_cli_opts  o = { .cmd = "logits" };
    pic_cli_model cm = { NULL };
    const char   *tokens = NULL, *out = NULL;
    int           decode_from = -1, split_at = -1, n = 0, rc = 1, took;
    int          *ids = NULL;
    float        *logits = NULL;
    pic_state    *s = NULL;
    FILE         *f = NULL;
    char          err[512];

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            pic_logits_usage(stdout);
            return 0;
        }
        if (v == NULL) {
            fprintf(stderr, "pic-engine logits: %s needs a value\n", a);
            return 2;
        }
        if ((took = pic_cli_option(&o, a, v)) < 0) {
            return 2;
        }
        if (took) {
            i++;
            continue;
        }
        if (!strcmp(a, "--tokens")) {
            tokens = v;
        } else if (!strcmp(a, "--out")) {
            out = v;
        } else if (!strcmp(a, "--decode-from")) {
            decode_from = atoi(v);
        } else if (!strcmp(a, "--split-at")) {
            split_at = atoi(v);
        } else {
            fprintf(stderr, "pic-engine logits: unknown option %s\n", a);
            pic_logits_usage(stderr);
            return 2;
        }
        i++;
    }
    if (o.model == NULL || tokens == NULL || out == NULL) {
        pic_logits_usage(stderr);
        return 2;
    }
    if (pic_cli_parse_ids(tokens, &ids, &n) != 0) {
        fprintf(stderr, "pic-engine logits: --tokens wants ids like 1,2,3\n");
        return 2;
    }
    if (decode_from != -1 && split_at != -1) {
        fprintf(stderr, "pic-engine logits: --decode-from and --split-at exclude each other\n");
        free(ids);
        return 2;
    }
    if (split_at != -1 && (split_at < 1 || split_at >= n)) {
        fprintf(stderr, "pic-engine logits: --split-at must be in [1, %d]\n", n - 1);
        free(ids);
        return 2;
    }
    if (decode_from == -1) {
        decode_from = split_at != -1 ? split_at : n;
    }
    if (decode_from < 1 || decode_from > n) {
        fprintf(stderr, "pic-engine logits: --decode-from must be in [1, %d]\n", n);
        free(ids);
        return 2;
    }
    if (pic_cli_load(&o, &cm) != 0) {
        free(ids);
        return 1;
    }
    const pic_model   *m = cm.host, *fm = cm.run;
    const pic_backend *be = cm.be;

    size_t V = (size_t) m->cfg.vocab;
    s = pic_state_init_on(&m->cfg, 0, be, err, sizeof(err));
    logits = malloc((size_t) n * V * sizeof(float));
    if (s == NULL || logits == NULL) {
        fprintf(stderr, "pic-engine logits: out of memory\n");
        goto done;
    }
    if (pic_forward(fm, be, s, ids, decode_from, 0, PIC_LOGITS_ALL, logits,
                    NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "pic-engine logits: %s\n", err);
        goto done;
    }
    if (split_at != -1
        && pic_forward(fm, be, s, ids + split_at, n - split_at, split_at,
                       PIC_LOGITS_ALL, logits + (size_t) split_at * V, NULL,
                       err, sizeof(err)) != 0) {
        fprintf(stderr, "pic-engine logits: %s\n", err);
        goto done;
    }
    for (int t = split_at != -1 ? n : decode_from; t < n; t++) {
        if (pic_forward(fm, be, s, ids + t, 1, t, PIC_LOGITS_LAST,
                        logits + (size_t) t * V, NULL, err, sizeof(err)) != 0) {
            fprintf(stderr, "pic-engine logits: %s\n", err);
            goto done;
        }
    }
    f = fopen(out, "wb");
    if (f == NULL || fwrite(logits, sizeof(float), (size_t) n * V, f) != (size_t) n * V) {
        fprintf(stderr, "pic-engine logits: cannot write %s: %s\n", out, strerror(errno));
        goto done;
    }
    if (fclose(f) != 0) {
        f = NULL;
        fprintf(stderr, "pic-engine logits: cannot write %s: %s\n", out, strerror(errno));
        goto done;
    }
    f = NULL;
    rc = 0;

done:
    if (f != NULL) {
        fclose(f);
    }
    free(logits);
    free(ids);
    pic_state_free(s);
    pic_cli_model_free(&cm);
    return rc;
}
