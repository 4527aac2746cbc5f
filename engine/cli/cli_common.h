/*
 * cli_common.h — what every model-running subcommand shares (cli_common.c),
 * as llama.cpp's common/ does: the options --model, --threads, --weights and
 * --device, parsed by one function, and the start-up they ask for (threads,
 * backend, model load in the chosen weight format, upload to a device).
 */
#ifndef PIC_CLI_COMMON_H
#define PIC_CLI_COMMON_H

#include "model.h"
#include "model_config.h"
#include "pic_kernels.h"
#include "pic_template.h"

typedef struct {
    const char *cmd;            /* the subcommand, for messages ("logits") */
    const char *model;          /* --model DIR */
    const char *weights;        /* --weights NAME (NULL: pic_weights_choose) */
    const char *device;         /* --device NAME (NULL: cpu) */
    int         threads;        /* --threads N (0: every core) */
} pic_cli_opts;

typedef struct {
    const pic_backend *be;
    pic_model         *host;    /* the checkpoint as loaded */
    pic_model         *dev;     /* its weights on be when be is a device, else NULL */
    const pic_model   *run;     /* what the forward takes: dev, else host */
} pic_cli_model;

/* Take option a with value v when it is one of the common ones: 1 taken, 0
 * not a common option, -1 a bad value (said on stderr). */
int pic_cli_option(pic_cli_opts *o, const char *a, const char *v);

/* Set the threads, load the backend and o->model in the weight format
 * pic_weights_choose picks, upload it to a device backend; 0, or -1 after
 * saying why on stderr ("pic-engine CMD: ..."), cm then all NULL. */
int pic_cli_load(const pic_cli_opts *o, pic_cli_model *cm);

/* Free what pic_cli_load gave cm (a zeroed cm is fine). */
void pic_cli_model_free(pic_cli_model *cm);

/* Render an OpenAI chat request (a messages array, or an object with
 * "messages" and optionally "tools", "chat_template_kwargs") with the
 * shared template code (core/prompt) in dialect; malloc'ed text, or NULL +
 * err. */
char *pic_cli_render_chat(const char *json, pic_template_dialect dialect, char *err,
                          size_t errlen);

/* The chat template of the checkpoint in dir, from its config.json alone
 * (no weights read); 0, or -1 + err. */
int pic_cli_model_dialect(const char *dir, pic_template_dialect *dialect, char *err,
                          size_t errlen);

#endif /* PIC_CLI_COMMON_H */
