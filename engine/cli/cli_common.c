/*
 * cli_common.c — the options and the start-up every model-running
 * subcommand shares (cli_common.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"

int
pic_cli_option(pic_cli_opts *o, const char *a, const char *v)
{
    if (!strcmp(a, "--model")) {
        o->model = v;
    } else if (!strcmp(a, "--device")) {
        o->device = v;
    } else if (!strcmp(a, "--weights")) {
        pic_weights_format wf;

        if (pic_weights_parse(v, &wf) != 0) {
            fprintf(stderr, "pic-engine %s: --weights must be " PIC_WEIGHTS_NAMES "\n",
                    o->cmd);
            return -1;
        }
        o->weights = v;
    } else if (!strcmp(a, "--threads")) {
        char *end = NULL;
        long  x = strtol(v, &end, 10);

        if (*v == '\0' || *end != '\0' || x < 0 || x > 4096) {
            fprintf(stderr, "pic-engine %s: invalid --threads '%s'\n", o->cmd, v);
            return -1;
        }
        o->threads = (int) x;
    } else {
        return 0;
    }
    return 1;
}

int
pic_cli_load(const pic_cli_opts *o, pic_cli_model *cm)
{
    pic_weights_format wf;
    char               err[512];

    memset(cm, 0, sizeof(*cm));
    pic_kernels_set_threads(o->threads);
    cm->be = pic_backend_load(o->device ? o->device : "cpu", err, sizeof(err));
    if (cm->be == NULL || pic_weights_choose(o->weights, cm->be->host, &wf, err,
                                             sizeof(err)) != 0) {
        fprintf(stderr, "pic-engine %s: %s\n", o->cmd, err);
        cm->be = NULL;
        return -1;
    }
    cm->host = pic_model_load_as(o->model, wf, err, sizeof(err));
    if (cm->host != NULL && !cm->be->host) {
        cm->dev = pic_model_to_backend(cm->host, cm->be, err, sizeof(err));
        if (cm->dev == NULL) {
            pic_model_free(cm->host);
            cm->host = NULL;
        }
    }
    if (cm->host == NULL) {
        fprintf(stderr, "pic-engine %s: %s\n", o->cmd, err);
        cm->be = NULL;
        return -1;
    }
    cm->run = cm->dev != NULL ? cm->dev : cm->host;
    return 0;
}

void
pic_cli_model_free(pic_cli_model *cm)
{
    pic_model_free(cm->dev);
    pic_model_free(cm->host);
    memset(cm, 0, sizeof(*cm));
}
