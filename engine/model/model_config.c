/*
 * model_config.c — config.json into a validated pic_config (MODEL.md §1):
 * model_type picks the architecture (arch.h), which says where the text
 * keys live and reads its own; the keys every architecture has and the
 * stop tokens are read here.
 */
#include "model_config.h"
#include "arch.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>


/* One eos_token_id value. */
static int
cfg_eos_one(pic_cfg_ctx *c, pic_config *cfg, const cJSON *e)
{
    if (!cJSON_IsNumber(e) || e->valuedouble < 0
        || e->valuedouble >= CFG_MAX_VOCAB
        || e->valuedouble != floor(e->valuedouble))
    {
        pic_cfg_err(c, "'eos_token_id' holds a value that is not a token id");
        return -1;
    }
    pic_config_add_eos(cfg, (int) e->valuedouble);
    return 0;
}


/* eos_token_id of obj: an int or a list of ints. */
static int
cfg_eos(pic_cfg_ctx *c, pic_config *cfg, const cJSON *obj)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "eos_token_id");
    const cJSON *e;

    if (v == NULL || cJSON_IsNull(v)) {
        return 0;
    }
    if (!cJSON_IsArray(v)) {
        return cfg_eos_one(c, cfg, v);
    }
    cJSON_ArrayForEach(e, v) {
        if (cfg_eos_one(c, cfg, e) != 0) {
            return -1;
        }
    }
    return 0;
}


int
pic_config_add_eos(pic_config *cfg, int id)
{
    size_t i;

    for (i = 0; i < sizeof(cfg->eos_ids) / sizeof(cfg->eos_ids[0]); i++) {
        if (cfg->eos_ids[i] == id) {
            return 0;
        }
        if (cfg->eos_ids[i] < 0) {
            cfg->eos_ids[i] = id;
            return 0;
        }
    }
    return -1;
}


/* Whether an added token ends generation: <|endoftext|>, or the token that
 * ends a turn in some dialect (a checkpoint's config may name only its
 * base model's eos, e.g. Llama 3.0 Instruct's <|end_of_text|>, not the
 * <|eot_id|> its template ends turns with). */
static int
cfg_ends_turn(const char *content)
{
    if (strcmp(content, "<|endoftext|>") == 0) {
        return 1;
    }
    for (int d = 0; d < PIC_TEMPLATE_N; d++) {
        if (strcmp(content, pic_template_end_of_turn((pic_template_dialect) d)) == 0) {
            return 1;
        }
    }
    return 0;
}


int
pic_config_add_tokenizer_eos(pic_config *cfg, const char *json, size_t len)
{
    const cJSON *added, *tok, *content, *id;
    cJSON       *root;
    int          found = 0;

    root = cJSON_ParseWithLength(json, len);
    if (root == NULL) {
        return -1;
    }
    added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsArray(added)) {
        added = NULL;
    }
    cJSON_ArrayForEach(tok, added) {
        content = cJSON_GetObjectItemCaseSensitive(tok, "content");
        id = cJSON_GetObjectItemCaseSensitive(tok, "id");
        if (!cJSON_IsString(content) || !cJSON_IsNumber(id)
            || id->valuedouble < 0 || id->valuedouble >= CFG_MAX_VOCAB)
        {
            continue;
        }
        if (cfg_ends_turn(content->valuestring)) {
            pic_config_add_eos(cfg, (int) id->valuedouble);
            found++;
        }
    }
    cJSON_Delete(root);
    return found;
}


/* --- the parser --- */


int
pic_config_parse(pic_config *cfg, const char *json, size_t len,
                 const char *path, char *err, size_t errlen)
{
    const pic_arch_desc *a;
    const cJSON         *mt, *v;
    pic_cfg_ctx          c = { NULL, NULL, path, err, errlen };
    cJSON               *root;
    double               eps;
    int                  i, tie;
    char                 names[256];

    memset(cfg, 0, sizeof(*cfg));
    cfg->rope_attn_factor = 1.0f;
    for (i = 0; i < (int) (sizeof(cfg->eos_ids) / sizeof(cfg->eos_ids[0]));
         i++)
    {
        cfg->eos_ids[i] = -1;
    }

    root = cJSON_ParseWithLength(json, len);
    if (root == NULL || !cJSON_IsObject(root)) {
        pic_cfg_err(&c, "not a JSON object");
        cJSON_Delete(root);
        return -1;
    }
    c.root = root;
    c.tc = root;

    /* --- which architecture, where its keys live --- */
    mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!cJSON_IsString(mt)) {
        pic_cfg_err(&c, "missing key 'model_type'");
        goto fail;
    }
    snprintf(cfg->model_type, sizeof(cfg->model_type), "%s", mt->valuestring);
    a = pic_arch_find(mt->valuestring);
    if (a == NULL) {
        pic_arch_list(names, sizeof(names));
        pic_cfg_err(&c, "model_type '%.64s' is not supported (%s)", mt->valuestring,
                    names);
        goto fail;
    }
    cfg->arch = a->arch;
    if (pic_arch_is_wrapper(a, mt->valuestring)) {
        c.tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
        if (!cJSON_IsObject(c.tc)) {
            pic_cfg_err(&c, "model_type '%s' needs a 'text_config' object",
                        mt->valuestring);
            goto fail;
        }
    }

    /* --- the keys every architecture has --- */
    if (pic_cfg_int(&c, c.tc, "hidden_size", &cfg->hidden, 1, CFG_MAX_HIDDEN, 1,
                    0) != 0
        || pic_cfg_int(&c, c.tc, "num_hidden_layers", &cfg->n_layers, 1,
                       PIC_MAX_LAYERS, 1, 0) != 0
        || pic_cfg_int(&c, c.tc, "vocab_size", &cfg->vocab, 1, CFG_MAX_VOCAB, 1,
                       0) != 0
        || pic_cfg_int(&c, c.tc, "max_position_embeddings", &cfg->max_position,
                       1, INT_MAX, 0, 32768) != 0)
    {
        goto fail;
    }
    if (pic_cfg_num(&c, c.tc, "rms_norm_eps", &eps, 0.0, 1.0, 1e-6) != 0) {
        goto fail;
    }
    cfg->rms_eps = (float) eps;

    v = cJSON_GetObjectItemCaseSensitive(c.tc, "hidden_act");
    if (v != NULL && !(cJSON_IsString(v)
                       && strcmp(v->valuestring, "silu") == 0))
    {
        pic_cfg_err(&c, "hidden_act must be 'silu'");
        goto fail;
    }

    /* tie: the wrapper's own flag governs (text_config's is its default) */
    if (pic_cfg_bool(&c, c.tc, "tie_word_embeddings", &tie, 0) != 0
        || pic_cfg_bool(&c, root, "tie_word_embeddings", &tie, tie) != 0)
    {
        goto fail;
    }
    cfg->tie_embeddings = tie;

    /* --- the architecture's own: layer kinds, attention, GDN, FFN --- */
    if (a->config(&c, cfg) != 0) {
        goto fail;
    }

    /* --- stop tokens --- */
    if (cfg_eos(&c, cfg, c.tc) != 0
        || (c.tc != root && cfg_eos(&c, cfg, root) != 0))
    {
        goto fail;
    }
    cJSON_Delete(root);
    return 0;

fail:
    cJSON_Delete(root);
    return -1;
}


pic_template_dialect
pic_config_dialect(pic_arch arch)
{
    return pic_arch_of(arch)->dialect;
}
