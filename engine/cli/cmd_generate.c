/*
 * cmd_generate.c — `pic-engine generate`: prefill a prompt, then decode and
 * stream the text to stdout (UTF-8 safe), with prefill and decode speeds on
 * stderr.
 *
 *   pic-engine generate --model DIR (--prompt TEXT | --chat JSON | --tokens IDS)
 *       [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
 *       [--threads N] [--weights F] [--device cpu|cuda] [--ignore-eos] [--ids]
 *
 * Temperature 0 (the default) is greedy decoding.  --ids prints the
 * generated token ids (comma-separated) instead of text; with --tokens the
 * prompt is given as ids (no tokenizer needed): the oracle tests use both.
 * --device cuda runs the forward on the CUDA backend (docs/WEIGHTS.md, "Devices").
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "cli_common.h"
#include "commands.h"
#include "forward.h"
#include "model.h"
#include "model_config.h"
#include "pic_kernels.h"
#include "pic_request.h"
#include "pic_template.h"
#include "pic_time.h"
#include "sample.h"
#include "state.h"
#include "tokenizer.h"

static void
pic_generate_usage(FILE *f)
{
    fprintf(f,
        "usage: pic-engine generate --model DIR (--prompt TEXT | --chat JSON | --tokens IDS)\n"
        "           [--max-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
        "           [--seed S] [--threads N] [--weights F] [--device D] [--ignore-eos] [--ids]\n"
        "  --chat JSON   OpenAI messages array, or a chat request object (messages,\n"
        "                tools, chat_template_kwargs), rendered with the model's template\n"
        "  --tokens IDS  prompt as comma-separated token ids\n"
        "  --ids         print generated token ids instead of text\n"
        "  --weights F   big matrices as auto (default), f32, bf16,\n"
        "                bf16dot (x rounded to bf16 too) or q8\n"
        "  --device D    cpu (default), cuda (build/libpic_cuda.so; bf16 weights\n"
        "                unless --weights) or cpu-dev (tests)\n"
        "  temperature 0 (default) is greedy; stop tokens come from the config\n");
}

int
pic_cmd_generate(int argc, char **argv)
{
    pic_cli_opts      o = { .cmd = "generate" };
    pic_cli_model     cm = { NULL };
    const char       *prompt = NULL, *chat = NULL, *tok_list = NULL;
    int               max_tokens = 128, ignore_eos = 0, print_ids = 0, took;
    pic_sample_params sp = { .temperature = 0.0f, .top_k = 0, .top_p = 1.0f,
                             .seed = 0 };
    const pic_model  *m = NULL, *fm = NULL;   /* fm: what the forward runs */
    const pic_backend *be = NULL;
    pic_tokenizer    *tok = NULL;
    pic_state        *s = NULL;
    pic_sampler       smp;
    pic_detok         dt;
    int               have_smp = 0, have_dt = 0, rc = 1, n = 0;
    int              *ids = NULL;
    float            *logits = NULL;
    char             *rendered = NULL;
    char              err[512];

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            pic_generate_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = 1;
            continue;
        }
        if (!strcmp(a, "--ids")) {
            print_ids = 1;
            continue;
        }
        if (v == NULL) {
            fprintf(stderr, "pic-engine generate: %s needs a value\n", a);
            return 2;
        }
        if ((took = pic_cli_option(&o, a, v)) < 0) {
            return 2;
        }
        if (took) {
            i++;
            continue;
        }
        if (!strcmp(a, "--prompt")) {
            prompt = v;
        } else if (!strcmp(a, "--chat")) {
            chat = v;
        } else if (!strcmp(a, "--tokens")) {
            tok_list = v;
        } else if (!strcmp(a, "--max-tokens")) {
            max_tokens = atoi(v);
        } else if (!strcmp(a, "--temperature")) {
            sp.temperature = strtof(v, NULL);
        } else if (!strcmp(a, "--top-k")) {
            sp.top_k = atoi(v);
        } else if (!strcmp(a, "--top-p")) {
            sp.top_p = strtof(v, NULL);
        } else if (!strcmp(a, "--seed")) {
            sp.seed = strtoull(v, NULL, 10);
        } else {
            fprintf(stderr, "pic-engine generate: unknown option %s\n", a);
            pic_generate_usage(stderr);
            return 2;
        }
        i++;
    }
    if (o.model == NULL || (prompt != NULL) + (chat != NULL) + (tok_list != NULL) != 1
        || max_tokens < 0) {
        pic_generate_usage(stderr);
        return 2;
    }
    if (pic_cli_load(&o, &cm) != 0) {
        return 1;
    }
    m = cm.host;
    fm = cm.run;
    be = cm.be;

    /* tokenizer (not needed for --tokens --ids) */
    if (!(tok_list != NULL && print_ids)) {
        tok = pic_checkpoint_tokenizer(o.model, err, sizeof(err));
        if (tok == NULL) {
            fprintf(stderr, "pic-engine generate: %s\n", err);
            goto done;
        }
    }
    if (chat != NULL) {
        pic_template_dialect d;

        if (pic_checkpoint_dialect(o.model, &d, err, sizeof(err)) != 0) {
            fprintf(stderr, "pic-engine generate: %s\n", err);
            goto done;
        }
        rendered = pic_cli_render_chat(chat, d, err, sizeof(err));
        if (rendered == NULL) {
            fprintf(stderr, "pic-engine generate: --chat: %s\n", err);
            rc = 2;
            goto done;
        }
        prompt = rendered;
    }
    if (tok_list != NULL) {
        if (pic_cli_parse_ids(tok_list, &ids, &n) != 0) {
            fprintf(stderr, "pic-engine generate: --tokens wants ids like 1,2,3\n");
            rc = 2;
            goto done;
        }
    } else {
        int32_t *t32 = NULL;
        size_t   nt = 0;
        if (pic_tokenizer_encode(tok, prompt, strlen(prompt), &t32, &nt) != 0
            || nt == 0 || nt > 0x7fffffff) {
            fprintf(stderr, "pic-engine generate: cannot tokenize the prompt "
                            "(invalid UTF-8 or empty)\n");
            free(t32);
            rc = 2;
            goto done;
        }
        ids = malloc(nt * sizeof(int));
        if (ids == NULL) {
            free(t32);
            goto done;
        }
        for (size_t i = 0; i < nt; i++) {
            ids[i] = t32[i];
        }
        n = (int) nt;
        free(t32);
    }

    s = pic_state_init_on(&m->cfg, 0, be, err, sizeof(err));
    logits = malloc((size_t) m->cfg.vocab * sizeof(float));
    if (s == NULL || logits == NULL
        || pic_sampler_init(&smp, &sp, m->cfg.vocab) != 0) {
        fprintf(stderr, "pic-engine generate: out of memory\n");
        goto done;
    }
    have_smp = 1;
    if (tok != NULL) {
        pic_detok_init(&dt, tok, 1);
        have_dt = 1;
    }

    double t0 = pic_now_s();
    if (pic_forward(fm, be, s, ids, n, 0, PIC_LOGITS_LAST, logits, NULL,
                    err, sizeof(err)) != 0) {
        fprintf(stderr, "pic-engine generate: %s\n", err);
        goto done;
    }
    double t1 = pic_now_s();
    int    gen = 0;
    const char *stop_reason = "length";

    while (gen < max_tokens) {
        int id = pic_sampler_sample(&smp, logits);
        if (!ignore_eos && pic_sample_is_stop(&m->cfg, id)) {
            stop_reason = "stop";
            break;
        }
        gen++;
        if (print_ids) {
            printf(gen > 1 ? ",%d" : "%d", id);
        } else {
            size_t      len;
            const char *txt = pic_detok_feed(&dt, id, &len);
            if (txt != NULL && len > 0) {
                fwrite(txt, 1, len, stdout);
            }
        }
        fflush(stdout);
        if (gen == max_tokens) {
            break;
        }
        if (pic_forward(fm, be, s, &id, 1, s->pos, PIC_LOGITS_LAST, logits,
                        NULL, err, sizeof(err)) != 0) {
            fprintf(stderr, "\npic-engine generate: %s\n", err);
            stop_reason = "error";
            break;
        }
    }
    double t2 = pic_now_s();
    if (!print_ids && have_dt) {
        size_t      len;
        const char *txt = pic_detok_flush(&dt, &len);
        if (txt != NULL && len > 0) {
            fwrite(txt, 1, len, stdout);
        }
    }
    printf("\n");
    fflush(stdout);

    /* decode steps = gen − 1 forwards after the prefill (the last sampled
     * token is not fed back) */
    int steps = gen > 1 ? gen - 1 : 0;
    fprintf(stderr, "prefill: %d tokens in %.3f s (%.2f tok/s); "
                    "decode: %d tokens in %.3f s (%.2f tok/s); finish: %s\n",
            n, t1 - t0, n / (t1 - t0 > 0 ? t1 - t0 : 1e-9), steps, t2 - t1,
            steps / (t2 - t1 > 0 ? t2 - t1 : 1e-9), stop_reason);
    rc = strcmp(stop_reason, "error") == 0 ? 1 : 0;

done:
    if (have_dt) {
        pic_detok_free(&dt);
    }
    if (have_smp) {
        pic_sampler_free(&smp);
    }
    free(rendered);
    free(logits);
    free(ids);
    pic_state_free(s);
    pic_cli_model_free(&cm);
    pic_tokenizer_free(tok);
    return rc;
}
