/*
 * model_config.c — config.json into a validated pic_config (MODEL.md §1).
 *
 * Qwen3-Next keeps its keys at the top level; the Qwen3.5 wrappers
 * (qwen3_5, qwen3_5_moe) keep the text model's keys under text_config, and a
 * text-only save (qwen3_5_text, qwen3_5_moe_text) at the top level.  RoPE
 * settings may sit at the top level or inside rope_parameters / rope_scaling.
 * Every number is range-checked so that later size arithmetic cannot
 * overflow.
 */
#include "model_config.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* generous upper bounds: products of any three stay far below 2^63 */
#define CFG_MAX_HIDDEN      65536
#define CFG_MAX_VOCAB       (1 << 22)
#define CFG_MAX_HEADS       1024
#define CFG_MAX_HEAD_DIM    4096
#define CFG_MAX_INTER       (1 << 20)
#define CFG_MAX_EXPERTS     4096
#define CFG_MAX_CONV        64


typedef struct {
    const cJSON *tc;                /* object holding the text keys */
    const cJSON *root;              /* the whole config.json */
    const char  *path;
    char        *err;
    size_t       errlen;
} cfg_ctx;


static void
cfg_err(cfg_ctx *c, const char *fmt, ...)
{
    va_list ap;
    int     n;

    if (c->err == NULL || c->errlen == 0) {
        return;
    }
    n = snprintf(c->err, c->errlen, "pic_config_parse: %s: ", c->path);
    if (n < 0 || (size_t) n >= c->errlen) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(c->err + n, c->errlen - (size_t) n, fmt, ap);
    va_end(ap);
}


/* --- typed key access --- */

/* obj[key] as an int in [lo, hi]; def when absent (required: error).
 * Returns 0 ok, -1 error. */
static int
cfg_int(cfg_ctx *c, const cJSON *obj, const char *key, int *out, int lo,
        int hi, int required, int def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    double       d;

    if (v == NULL || cJSON_IsNull(v)) {
        if (required) {
            cfg_err(c, "missing key '%s'", key);
            return -1;
        }
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v)) {
        cfg_err(c, "'%s' is not a number", key);
        return -1;
    }
    d = v->valuedouble;
    if (!(d >= (double) lo && d <= (double) hi) || d != floor(d)) {
        cfg_err(c, "'%s' = %g is not an integer in [%d, %d]", key, d, lo, hi);
        return -1;
    }
    *out = (int) d;
    return 0;
}


/* obj[key] as a finite double in (lo, hi]; def when absent. */
static int
cfg_num(cfg_ctx *c, const cJSON *obj, const char *key, double *out,
        double lo, double hi, double def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

    if (v == NULL || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)
        || !(v->valuedouble > lo && v->valuedouble <= hi))
    {
        cfg_err(c, "'%s' is not a number in (%g, %g]", key, lo, hi);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}


/* obj[key] as a flag (true/false or 0/1); def when absent. */
static int
cfg_bool(cfg_ctx *c, const cJSON *obj, const char *key, int *out, int def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

    if (v == NULL || cJSON_IsNull(v)) {
        *out = def;
    } else if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v);
    } else if (cJSON_IsNumber(v)
               && (v->valuedouble == 0.0 || v->valuedouble == 1.0))
    {
        *out = v->valuedouble != 0.0;
    } else {
        cfg_err(c, "'%s' is not a boolean", key);
        return -1;
    }
    return 0;
}


/* The first of obj.rope_parameters[key], obj.rope_scaling[key], obj[key]
 * that is present, in the text object and then at the top level. */
static const cJSON *
cfg_rope_obj(const cJSON *tc, const cJSON *root, const char *key)
{
    static const char *const nests[] = { "rope_parameters", "rope_scaling" };
    const cJSON             *objs[2] = { tc, root };
    size_t                   i, j;

    for (i = 0; i < 2; i++) {
        if (i == 1 && root == tc) {
            break;
        }
        for (j = 0; j < 2; j++) {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(objs[i],
                                                              nests[j]);
            if (cJSON_IsObject(n)
                && cJSON_GetObjectItemCaseSensitive(n, key) != NULL)
            {
                return n;
            }
        }
        if (cJSON_GetObjectItemCaseSensitive(objs[i], key) != NULL) {
            return objs[i];
        }
    }
    return NULL;
}


/* One eos_token_id value. */
static int
cfg_eos_one(cfg_ctx *c, pic_config *cfg, const cJSON *e)
{
    if (!cJSON_IsNumber(e) || e->valuedouble < 0
        || e->valuedouble >= CFG_MAX_VOCAB
        || e->valuedouble != floor(e->valuedouble))
    {
        cfg_err(c, "'eos_token_id' holds a value that is not a token id");
        return -1;
    }
    pic_config_add_eos(cfg, (int) e->valuedouble);
    return 0;
}


/* eos_token_id of obj: an int or a list of ints. */
static int
cfg_eos(cfg_ctx *c, pic_config *cfg, const cJSON *obj)
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
        if (strcmp(content->valuestring, "<|im_end|>") == 0
            || strcmp(content->valuestring, "<|endoftext|>") == 0)
        {
            pic_config_add_eos(cfg, (int) id->valuedouble);
            found++;
        }
    }
    cJSON_Delete(root);
    return found;
}


/* --- the parser --- */

static int
cfg_layer_types(cfg_ctx *c, pic_config *cfg)
{
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c->tc, "layer_types");
    const cJSON *e;
    int          i, interval;

    if (lt != NULL && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != cfg->n_layers) {
            cfg_err(c, "'layer_types' must list %d layer types",
                    cfg->n_layers);
            return -1;
        }
        i = 0;
        cJSON_ArrayForEach(e, lt) {
            if (cJSON_IsString(e)
                && strcmp(e->valuestring, "linear_attention") == 0)
            {
                cfg->layer_type[i] = PIC_LAYER_LINEAR;
            } else if (cJSON_IsString(e)
                       && strcmp(e->valuestring, "full_attention") == 0)
            {
                cfg->layer_type[i] = PIC_LAYER_FULL;
            } else {
                cfg_err(c, "layer_types[%d] is neither 'linear_attention' "
                        "nor 'full_attention'", i);
                return -1;
            }
            i++;
        }
        return 0;
    }

    if (cfg_int(c, c->tc, "full_attention_interval", &interval, 1,
                PIC_MAX_LAYERS, 0, 4) != 0)
    {
        return -1;
    }
    for (i = 0; i < cfg->n_layers; i++) {
        cfg->layer_type[i] = ((i + 1) % interval == 0) ? PIC_LAYER_FULL
                                                       : PIC_LAYER_LINEAR;
    }
    return 0;
}


static int
cfg_rope(cfg_ctx *c, pic_config *cfg)
{
    const cJSON *o, *rt;
    double       theta, prf;
    int          i;

    for (i = 0; i < 4; i++) {           /* the rope dicts' type keys */
        o = cJSON_GetObjectItemCaseSensitive(i < 2 ? c->tc : c->root,
                                             i % 2 ? "rope_scaling"
                                                   : "rope_parameters");
        rt = cJSON_GetObjectItemCaseSensitive(o, "rope_type");
        if (rt == NULL) {
            rt = cJSON_GetObjectItemCaseSensitive(o, "type");
        }
        if (rt != NULL && !cJSON_IsNull(rt)
            && !(cJSON_IsString(rt)
                 && (strcmp(rt->valuestring, "default") == 0
                     || strcmp(rt->valuestring, "mrope") == 0)))
        {
            cfg_err(c, "rope_type '%.32s' is not supported (only default "
                    "RoPE)", cJSON_IsString(rt) ? rt->valuestring : "?");
            return -1;
        }
    }

    o = cfg_rope_obj(c->tc, c->root, "rope_theta");
    if (cfg_num(c, o, "rope_theta", &theta, 0.0, 1e12, 10000.0) != 0) {
        return -1;
    }
    o = cfg_rope_obj(c->tc, c->root, "partial_rotary_factor");
    if (cfg_num(c, o, "partial_rotary_factor", &prf, 0.0, 1.0, 0.25) != 0) {
        return -1;
    }
    cfg->rope_theta = (float) theta;
    cfg->rotary_dim = (int) (cfg->head_dim * prf);
    if (cfg->rotary_dim < 2 || cfg->rotary_dim % 2 != 0
        || cfg->rotary_dim > cfg->head_dim)
    {
        cfg_err(c, "rotary dim %d (head_dim %d x partial_rotary_factor %g) "
                "must be even and in [2, head_dim]", cfg->rotary_dim,
                cfg->head_dim, prf);
        return -1;
    }
    return 0;
}


static int
cfg_moe(cfg_ctx *c, pic_config *cfg, int qwen35_moe)
{
    const cJSON *only, *e;
    int          i, step, need;

    if (qwen35_moe) {
        if (cfg_int(c, c->tc, "num_experts", &cfg->n_experts, 1,
                    CFG_MAX_EXPERTS, 1, 0) != 0)
        {
            return -1;
        }
        cfg->norm_topk_prob = 1;
        for (i = 0; i < cfg->n_layers; i++) {
            cfg->layer_is_moe[i] = 1;
        }
    } else {
        if (cfg_int(c, c->tc, "num_experts", &cfg->n_experts, 0,
                    CFG_MAX_EXPERTS, 0, 0) != 0
            || cfg_int(c, c->tc, "decoder_sparse_step", &step, 1,
                       PIC_MAX_LAYERS, 0, 1) != 0
            || cfg_bool(c, c->tc, "norm_topk_prob", &cfg->norm_topk_prob, 1)
               != 0)
        {
            return -1;
        }
        only = cJSON_GetObjectItemCaseSensitive(c->tc, "mlp_only_layers");
        if (only != NULL && !cJSON_IsNull(only) && !cJSON_IsArray(only)) {
            cfg_err(c, "'mlp_only_layers' is not a list");
            return -1;
        }
        for (i = 0; i < cfg->n_layers; i++) {
            cfg->layer_is_moe[i] = cfg->n_experts > 0 && (i + 1) % step == 0;
        }
        if (!cJSON_IsArray(only)) {
            only = NULL;
        }
        cJSON_ArrayForEach(e, only) {
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble)) {
                cfg_err(c, "'mlp_only_layers' holds a non-integer");
                return -1;
            }
            if (e->valuedouble >= 0 && e->valuedouble < cfg->n_layers) {
                cfg->layer_is_moe[(int) e->valuedouble] = 0;
            }
        }
    }

    need = 0;
    for (i = 0; i < cfg->n_layers; i++) {
        need |= cfg->layer_is_moe[i];
    }
    if (!need) {
        return 0;
    }
    if (cfg_int(c, c->tc, "num_experts_per_tok", &cfg->n_experts_per_tok, 1,
                cfg->n_experts, 1, 0) != 0
        || cfg_int(c, c->tc, "moe_intermediate_size", &cfg->moe_intermediate,
                   1, CFG_MAX_INTER, 1, 0) != 0
        || cfg_int(c, c->tc, "shared_expert_intermediate_size",
                   &cfg->shared_intermediate, 0, CFG_MAX_INTER, 0, 0) != 0)
    {
        return -1;
    }
    return 0;
}


int
pic_config_parse(pic_config *cfg, const char *json, size_t len,
                 const char *path, char *err, size_t errlen)
{
    const cJSON *mt, *tmt, *v;
    cfg_ctx      c = { NULL, NULL, path, err, errlen };
    cJSON       *root;
    double       eps;
    int          i, qwen35_moe, any_lin, any_full, any_dense, tie;

    memset(cfg, 0, sizeof(*cfg));
    for (i = 0; i < (int) (sizeof(cfg->eos_ids) / sizeof(cfg->eos_ids[0]));
         i++)
    {
        cfg->eos_ids[i] = -1;
    }

    root = cJSON_ParseWithLength(json, len);
    if (root == NULL || !cJSON_IsObject(root)) {
        cfg_err(&c, "not a JSON object");
        cJSON_Delete(root);
        return -1;
    }
    c.root = root;
    c.tc = root;

    /* --- which model, where its keys live --- */
    mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!cJSON_IsString(mt)) {
        cfg_err(&c, "missing key 'model_type'");
        goto fail;
    }
    snprintf(cfg->model_type, sizeof(cfg->model_type), "%s", mt->valuestring);
    tmt = mt;
    if (strcmp(mt->valuestring, "qwen3_next") == 0) {
        cfg->arch = PIC_ARCH_QWEN3_NEXT;
    } else if (strcmp(mt->valuestring, "qwen3_5") == 0
               || strcmp(mt->valuestring, "qwen3_5_moe") == 0)
    {
        cfg->arch = PIC_ARCH_QWEN3_5;
        c.tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
        if (!cJSON_IsObject(c.tc)) {
            cfg_err(&c, "model_type '%s' needs a 'text_config' object",
                    mt->valuestring);
            goto fail;
        }
        v = cJSON_GetObjectItemCaseSensitive(c.tc, "model_type");
        if (cJSON_IsString(v)) {
            tmt = v;
        }
    } else if (strcmp(mt->valuestring, "qwen3_5_text") == 0
               || strcmp(mt->valuestring, "qwen3_5_moe_text") == 0)
    {
        cfg->arch = PIC_ARCH_QWEN3_5;
    } else {
        cfg_err(&c, "model_type '%.64s' is not supported (qwen3_next, "
                "qwen3_5, qwen3_5_moe)", mt->valuestring);
        goto fail;
    }
    qwen35_moe = strcmp(mt->valuestring, "qwen3_5_moe") == 0
                 || strcmp(tmt->valuestring, "qwen3_5_moe_text") == 0;

    /* --- sizes --- */
    if (cfg_int(&c, c.tc, "hidden_size", &cfg->hidden, 1, CFG_MAX_HIDDEN, 1,
                0) != 0
        || cfg_int(&c, c.tc, "num_hidden_layers", &cfg->n_layers, 1,
                   PIC_MAX_LAYERS, 1, 0) != 0
        || cfg_int(&c, c.tc, "vocab_size", &cfg->vocab, 1, CFG_MAX_VOCAB, 1,
                   0) != 0
        || cfg_int(&c, c.tc, "max_position_embeddings", &cfg->max_position,
                   1, INT_MAX, 0, 32768) != 0)
    {
        goto fail;
    }
    if (cfg_num(&c, c.tc, "rms_norm_eps", &eps, 0.0, 1.0, 1e-6) != 0) {
        goto fail;
    }
    cfg->rms_eps = (float) eps;

    v = cJSON_GetObjectItemCaseSensitive(c.tc, "hidden_act");
    if (v != NULL && !(cJSON_IsString(v)
                       && strcmp(v->valuestring, "silu") == 0))
    {
        cfg_err(&c, "hidden_act must be 'silu'");
        goto fail;
    }
    v = cJSON_GetObjectItemCaseSensitive(c.tc, "attention_bias");
    if (cJSON_IsTrue(v)) {
        cfg_err(&c, "attention_bias = true is not supported");
        goto fail;
    }

    /* tie: the wrapper's own flag governs (text_config's is its default) */
    if (cfg_bool(&c, c.tc, "tie_word_embeddings", &tie, 0) != 0
        || cfg_bool(&c, root, "tie_word_embeddings", &tie, tie) != 0)
    {
        goto fail;
    }
    cfg->tie_embeddings = tie;

    if (cfg_layer_types(&c, cfg) != 0) {
        goto fail;
    }
    any_lin = any_full = 0;
    for (i = 0; i < cfg->n_layers; i++) {
        any_lin |= cfg->layer_type[i] == PIC_LAYER_LINEAR;
        any_full |= cfg->layer_type[i] == PIC_LAYER_FULL;
    }

    /* --- full attention --- */
    if (any_full) {
        if (cfg_int(&c, c.tc, "num_attention_heads", &cfg->n_q_heads, 1,
                    CFG_MAX_HEADS, 1, 0) != 0
            || cfg_int(&c, c.tc, "num_key_value_heads", &cfg->n_kv_heads, 1,
                       CFG_MAX_HEADS, 1, 0) != 0)
        {
            goto fail;
        }
        if (cfg->n_q_heads % cfg->n_kv_heads != 0) {
            cfg_err(&c, "num_attention_heads %d is not a multiple of "
                    "num_key_value_heads %d", cfg->n_q_heads,
                    cfg->n_kv_heads);
            goto fail;
        }
        v = cJSON_GetObjectItemCaseSensitive(c.tc, "head_dim");
        if (v == NULL || cJSON_IsNull(v)) {
            if (cfg->hidden % cfg->n_q_heads != 0) {
                cfg_err(&c, "no head_dim and hidden_size %d is not a "
                        "multiple of num_attention_heads %d", cfg->hidden,
                        cfg->n_q_heads);
                goto fail;
            }
            cfg->head_dim = cfg->hidden / cfg->n_q_heads;
        } else if (cfg_int(&c, c.tc, "head_dim", &cfg->head_dim, 1,
                           CFG_MAX_HEAD_DIM, 1, 0) != 0)
        {
            goto fail;
        }
        if (cfg_rope(&c, cfg) != 0) {
            goto fail;
        }
    }

    /* --- gated deltanet --- */
    if (any_lin) {
        if (cfg_int(&c, c.tc, "linear_num_key_heads", &cfg->lin_k_heads, 1,
                    CFG_MAX_HEADS, 1, 0) != 0
            || cfg_int(&c, c.tc, "linear_num_value_heads", &cfg->lin_v_heads,
                       1, CFG_MAX_HEADS, 1, 0) != 0
            || cfg_int(&c, c.tc, "linear_key_head_dim", &cfg->lin_k_dim, 1,
                       CFG_MAX_HEAD_DIM, 1, 0) != 0
            || cfg_int(&c, c.tc, "linear_value_head_dim", &cfg->lin_v_dim, 1,
                       CFG_MAX_HEAD_DIM, 1, 0) != 0
            || cfg_int(&c, c.tc, "linear_conv_kernel_dim", &cfg->conv_kernel,
                       1, CFG_MAX_CONV, 0, 4) != 0)
        {
            goto fail;
        }
        if (cfg->lin_v_heads % cfg->lin_k_heads != 0) {
            cfg_err(&c, "linear_num_value_heads %d is not a multiple of "
                    "linear_num_key_heads %d", cfg->lin_v_heads,
                    cfg->lin_k_heads);
            goto fail;
        }
    }

    /* --- MLP / MoE --- */
    if (cfg_moe(&c, cfg, qwen35_moe) != 0) {
        goto fail;
    }
    any_dense = 0;
    for (i = 0; i < cfg->n_layers; i++) {
        any_dense |= !cfg->layer_is_moe[i];
    }
    if (any_dense
        && cfg_int(&c, c.tc, "intermediate_size", &cfg->intermediate, 1,
                   CFG_MAX_INTER, 1, 0) != 0)
    {
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
    return arch == PIC_ARCH_QWEN3_5 ? PIC_TEMPLATE_QWEN3_5 : PIC_TEMPLATE_QWEN3;
}
