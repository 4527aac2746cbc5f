/*
 * checkpoint.c — a model path's tokenizer, config and chat template
 * (checkpoint.h).
 */
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_model.h"
#include "model_config.h"

/* dir/name whole (NUL-ended), or NULL. */
static char *
ck_slurp(const char *dir, const char *name, size_t *len)
{
    char  path[4200];
    FILE *f;
    char *text = NULL;
    long  n;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n < (1L << 29)
        && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t) n + 1)) != NULL
        && fread(text, 1, (size_t) n, f) == (size_t) n)
    {
        text[n] = '\0';
        *len = (size_t) n;
    } else {
        free(text);
        text = NULL;
    }
    fclose(f);
    return text;
}

pic_tokenizer *
pic_checkpoint_tokenizer(const char *path, char *err, size_t errlen)
{
    pic_tokenizer *t;
    pic_gguf      *g;
    char          *json, file[4200];
    size_t         len;

    if (!pic_gguf_is_file(path)) {
        snprintf(file, sizeof(file), "%s/tokenizer.json", path);
        return pic_tokenizer_load(file, err, errlen);
    }
    g = pic_gguf_open(path, err, errlen);
    if (g == NULL) {
        return NULL;
    }
    json = pic_gguf_tokenizer_json(g, &len, err, errlen);
    pic_gguf_close(g);
    if (json == NULL) {
        return NULL;
    }
    t = pic_tokenizer_load_json(json, len, err, errlen);
    free(json);
    return t;
}

/* The checkpoint's config.json text and chat template (either may be
 * NULL); 0, or -1 + err. */
static int
ck_texts(const char *path, char **config, size_t *config_len, char **tmpl, char *err,
         size_t errlen)
{
    pic_gguf_ckpt c;
    char         *tc;
    size_t        len;

    *tmpl = NULL;
    if (pic_gguf_is_file(path)) {
        if (pic_gguf_ckpt_open(path, &c, err, errlen) != 0) {
            return -1;
        }
        *config = c.config;
        *config_len = c.config_len;
        *tmpl = c.chat_template;
        c.config = NULL;
        c.chat_template = NULL;
        pic_gguf_ckpt_close(&c);
        return 0;
    }
    *config = ck_slurp(path, "config.json", config_len);
    if (*config == NULL) {
        snprintf(err, errlen, "%s/config.json: cannot read", path);
        return -1;
    }
    tc = ck_slurp(path, "tokenizer_config.json", &len);
    if (tc != NULL) {
        cJSON       *root = cJSON_ParseWithLength(tc, len);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "chat_template");

        if (cJSON_IsString(t)) {
            *tmpl = strdup(t->valuestring);
        }
        cJSON_Delete(root);
        free(tc);
    }
    return 0;
}

int
pic_checkpoint_config(const char *path, pic_config *cfg, char *err, size_t errlen)
{
    char  *config, *tmpl;
    size_t len;
    int    rc;

    if (ck_texts(path, &config, &len, &tmpl, err, errlen) != 0) {
        return -1;
    }
    rc = pic_config_parse(cfg, config, len, path, err, errlen);
    free(config);
    free(tmpl);
    return rc;
}

void
pic_checkpoint_calibration_path(const char *path, char *out, size_t n)
{
    size_t len = strlen(path);

    if (!pic_gguf_is_file(path)) {
        snprintf(out, n, "%s/pic_calibration.json", path);
        return;
    }
    if (len > 5 && strcmp(path + len - 5, ".gguf") == 0) {
        len -= 5;
    }
    snprintf(out, n, "%.*s.pic_calibration.json", (int) len, path);
}

/* The dialect rendering template text t of a checkpoint whose architecture
 * renders ChatML by default, told from phrases only its released template
 * has; 0, or -1 with *family naming what it looks like (NULL: unknown). */
static int
ck_template_dialect(const char *t, pic_template_dialect *d, const char **family)
{
    *family = NULL;
    if (strstr(t, "You are a helpful AI assistant named SmolLM") != NULL) {
        *d = PIC_TEMPLATE_SMOLLM2;
        return 0;
    }
    if (strstr(t, "<|im_start|>") != NULL) {
        *d = PIC_TEMPLATE_CHATML;
        return 0;
    }
    if (strstr(t, "<|start_header_id|>") != NULL) {
        *family = "a Llama 3 template";
        if (strstr(t, "Cutting Knowledge Date: December 2023") != NULL
            && strstr(t, "tools_in_user_message") != NULL
            && strstr(t, "\"parameters\": dictionary of argument name") != NULL)
        {
            /* 3.2 dates the system turn today, 3.1 and 3.3 with a constant */
            if (strstr(t, "strftime_now(\"%d %b %Y\")") != NULL) {
                *d = PIC_TEMPLATE_LLAMA3_2;
                return 0;
            }
            if (strstr(t, "\"26 Jul 2024\"") != NULL && strstr(t, "strftime_now") == NULL) {
                *d = PIC_TEMPLATE_LLAMA3_1;
                return 0;
            }
            return -1;
        }
        if (strstr(t, "message['content'] | trim + '<|eot_id|>'") != NULL
            && strstr(t, "set content = bos_token + content") != NULL
            && strstr(t, "tool") == NULL && strstr(t, "system") == NULL)
        {
            *d = PIC_TEMPLATE_LLAMA3;
            return 0;
        }
        return -1;
    }
    if (strstr(t, "[INST]") != NULL) {
        *family = "a Mistral [INST] template";
        if (strstr(t, "[SYSTEM_PROMPT]") != NULL) {
            return -1;
        }
        if (strstr(t, "\"[INST] \" + system_message + \"\\n\\n\"") != NULL
            && strstr(t, "(message == user_messages[-1]) and system_message") != NULL
            && strstr(t, "\" \" + message[\"content\"]|trim + eos_token") != NULL
            && strstr(t, "[AVAILABLE_TOOLS] [") != NULL)
        {
            *d = PIC_TEMPLATE_MISTRAL;
            return 0;
        }
        if (strstr(t, "\"[INST]\" + system_message + \"\\n\\n\"") != NULL
            && strstr(t, "loop.last and system_message is defined") != NULL
            && strstr(t, "message[\"content\"] + eos_token") != NULL
            && strstr(t, "[AVAILABLE_TOOLS][") != NULL)
        {
            *d = PIC_TEMPLATE_MISTRAL_NEMO;
            return 0;
        }
        return -1;
    }
    return -1;
}

int
pic_checkpoint_dialect(const char *path, pic_template_dialect *d, char *err, size_t errlen)
{
    pic_config  cfg;
    const char *family;
    char       *config, *tmpl;
    size_t      len;
    int         rc;

    if (ck_texts(path, &config, &len, &tmpl, err, errlen) != 0) {
        return -1;
    }
    rc = pic_config_parse(&cfg, config, len, path, err, errlen);
    if (rc == 0) {
        *d = pic_config_dialect(cfg.arch);
        /* an architecture without a template of its own (Llama, Mistral,
         * the hybrids): the checkpoint's template says which dialect */
        if (*d == PIC_TEMPLATE_CHATML && tmpl != NULL
            && ck_template_dialect(tmpl, d, &family) != 0)
        {
            snprintf(err, errlen, "%s: the chat template (%s) is not one this engine "
                     "renders (--template chatml, smollm2, llama3, llama3.1, llama3.2, "
                     "mistral, mistral-nemo, qwen3 or qwen3.5)", path,
                     family ? family : "neither ChatML, Llama 3 nor Mistral's");
            rc = -1;
        }
    }
    free(config);
    free(tmpl);
    return rc;
}
