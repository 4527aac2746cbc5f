/*
 * cli_common.c — the options and the start-up every model-running
 * subcommand shares (cli_common.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "cli_common.h"
#include "pic_request.h"

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

char *
pic_cli_render_chat(const char *json, pic_template_dialect dialect, char *err,
                    size_t errlen)
{
    pic_request       req;
    pic_render        r;
    pic_error         e;
    pic_template_opts opts = { .dialect = dialect };
    char             *body = NULL, *out = NULL;
    cJSON            *root = cJSON_Parse(json), *obj;

    /* a bare array is the messages; the parser wants a model name */
    if (root == NULL) {
        snprintf(err, errlen, "not valid JSON");
        return NULL;
    }
    if (cJSON_IsArray(root)) {
        obj = cJSON_CreateObject();
        if (obj == NULL) {
            cJSON_Delete(root);
            snprintf(err, errlen, "out of memory");
            return NULL;
        }
        cJSON_AddItemToObject(obj, "messages", root);
        root = obj;
    }
    if (cJSON_IsObject(root) && !cJSON_HasObjectItem(root, "model")) {
        cJSON_AddStringToObject(root, "model", "pic-engine");
    }
    body = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (body == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    size_t len = strlen(body);

    memset(&req, 0, sizeof(req));
    memset(&e, 0, sizeof(e));
    if (pic_request_parse(&req, PIC_REQ_CHAT, body, len, NULL,
                          &e) != 0) {
        snprintf(err, errlen, "%s", e.message);
        free(body);
        return NULL;
    }
    pic_render_init(&r);
    if (pic_template_render(&opts, &req, &r, &e) != 0) {
        snprintf(err, errlen, "%s", e.message);
    } else if ((out = malloc(r.text.len + 1)) == NULL) {
        snprintf(err, errlen, "out of memory");
    } else {
        memcpy(out, r.text.data ? r.text.data : "", r.text.len);
        out[r.text.len] = '\0';
    }
    pic_render_free(&r);
    pic_request_free(&req);
    free(body);
    return out;
}

int
pic_cli_model_dialect(const char *dir, pic_template_dialect *dialect, char *err,
                      size_t errlen)
{
    return pic_checkpoint_dialect(dir, dialect, err, errlen);
}
