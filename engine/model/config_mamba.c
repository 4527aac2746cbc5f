/*
 * config_mamba.c — the config keys of Mamba2 hybrids (config_keys.h): the
 * mixer's mamba_* keys and time_step_limit, and the two ways their layer
 * lists are written (Bamba's attn_layer_indices, Granite's layer_types).
 */
#include "config_keys.h"

#include <math.h>
#include <string.h>


/* time_step_limit: [lo, hi] of numbers, hi possibly infinite (transformers
 * writes it as {"__float__": "Infinity"}); absent or null: (0, inf). */
static int
cfg_dt_limit(pic_cfg_ctx *c, pic_config *cfg)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->tc, "time_step_limit");
    double       lim[2] = { 0.0, INFINITY };

    if (v != NULL && !cJSON_IsNull(v)) {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2) {
            pic_cfg_err(c, "'time_step_limit' is not a pair");
            return -1;
        }
        for (int i = 0; i < 2; i++) {
            const cJSON *e = cJSON_GetArrayItem(v, i);
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "__float__");

            if (cJSON_IsNumber(e) && isfinite(e->valuedouble)) {
                lim[i] = e->valuedouble;
            } else if (cJSON_IsString(f) && strcmp(f->valuestring, "Infinity") == 0) {
                lim[i] = INFINITY;
            } else {
                pic_cfg_err(c, "'time_step_limit'[%d] is not a number", i);
                return -1;
            }
        }
        if (!(lim[0] >= 0.0 && lim[1] > lim[0])) {
            pic_cfg_err(c, "'time_step_limit' must be [lo, hi] with 0 <= lo < hi");
            return -1;
        }
    }
    cfg->ssm_dt_min = (float) lim[0];
    cfg->ssm_dt_max = (float) lim[1];
    return 0;
}


int
pic_cfg_mamba2(pic_cfg_ctx *c, pic_config *cfg)
{
    const cJSON *hd;
    int          expand, conv, inner;

    if (pic_cfg_int(c, c->tc, "mamba_n_heads", &cfg->ssm_heads, 1, CFG_MAX_HEADS, 0,
                    128) != 0
        || pic_cfg_int(c, c->tc, "mamba_n_groups", &cfg->ssm_groups, 1, CFG_MAX_HEADS,
                       0, 1) != 0
        || pic_cfg_int(c, c->tc, "mamba_d_state", &cfg->ssm_state, 1, CFG_MAX_HEAD_DIM,
                       0, 256) != 0
        || pic_cfg_int(c, c->tc, "mamba_d_conv", &conv, 1, CFG_MAX_CONV, 0, 4) != 0
        || pic_cfg_int(c, c->tc, "mamba_expand", &expand, 1, 64, 0, 2) != 0
        || pic_cfg_int(c, c->tc, "mamba_chunk_size", &cfg->ssm_chunk, 1, 1 << 20, 0,
                       256) != 0
        || pic_cfg_bool(c, c->tc, "mamba_conv_bias", &cfg->ssm_conv_bias, 1) != 0
        || pic_cfg_refuse(c, c->tc, "mamba_proj_bias",
                          "Mamba2 in_proj / out_proj biases are not implemented") != 0
        || cfg_dt_limit(c, cfg) != 0)
    {
        return -1;
    }
    inner = expand * cfg->hidden;
    hd = cJSON_GetObjectItemCaseSensitive(c->tc, "mamba_d_head");
    if (hd == NULL || cJSON_IsNull(hd)
        || (cJSON_IsString(hd) && strcmp(hd->valuestring, "auto") == 0))
    {
        cfg->ssm_head_dim = inner / cfg->ssm_heads;
    } else if (pic_cfg_int(c, c->tc, "mamba_d_head", &cfg->ssm_head_dim, 1,
                           CFG_MAX_HEAD_DIM, 1, 0) != 0)
    {
        return -1;
    }
    if (cfg->ssm_head_dim * cfg->ssm_heads != inner) {
        pic_cfg_err(c, "mamba_n_heads %d x mamba_d_head %d != mamba_expand x "
                    "hidden_size %d", cfg->ssm_heads, cfg->ssm_head_dim, inner);
        return -1;
    }
    if (cfg->ssm_heads % cfg->ssm_groups != 0) {
        pic_cfg_err(c, "mamba_n_heads %d is not a multiple of mamba_n_groups %d",
                    cfg->ssm_heads, cfg->ssm_groups);
        return -1;
    }
    /* the state's shape where every state consumer reads it (model.h) */
    cfg->lin_v_heads = cfg->ssm_heads;
    cfg->lin_k_heads = cfg->ssm_groups;
    cfg->lin_k_dim = cfg->ssm_head_dim;
    cfg->lin_v_dim = cfg->ssm_state;
    cfg->conv_kernel = conv;
    return 0;
}


int
pic_cfg_mamba_layers(pic_cfg_ctx *c, pic_config *cfg)
{
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c->tc, "layer_types");
    const cJSON *ai = cJSON_GetObjectItemCaseSensitive(c->tc, "attn_layer_indices");
    const cJSON *e;
    int          i = 0;

    for (i = 0; i < cfg->n_layers; i++) {
        cfg->layer_type[i] = PIC_LAYER_MAMBA2;
    }
    if (lt != NULL && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != cfg->n_layers) {
            pic_cfg_err(c, "'layer_types' must list %d layer types", cfg->n_layers);
            return -1;
        }
        i = 0;
        cJSON_ArrayForEach(e, lt) {
            const char *s = cJSON_IsString(e) ? e->valuestring : "";

            if (strcmp(s, "full_attention") == 0 || strcmp(s, "attention") == 0) {
                cfg->layer_type[i] = PIC_LAYER_FULL;
            } else if (strcmp(s, "linear_attention") != 0 && strcmp(s, "mamba") != 0) {
                pic_cfg_err(c, "layer_types[%d] is none of 'linear_attention', "
                            "'mamba', 'full_attention', 'attention'", i);
                return -1;
            }
            i++;
        }
        return 0;
    }
    if (ai == NULL || cJSON_IsNull(ai)) {
        return 0;
    }
    if (!cJSON_IsArray(ai)) {
        pic_cfg_err(c, "'attn_layer_indices' is not a list");
        return -1;
    }
    cJSON_ArrayForEach(e, ai) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble)
            || e->valuedouble < 0 || e->valuedouble >= cfg->n_layers)
        {
            pic_cfg_err(c, "'attn_layer_indices' holds a value that is not a layer "
                        "index below %d", cfg->n_layers);
            return -1;
        }
        cfg->layer_type[(int) e->valuedouble] = PIC_LAYER_FULL;
    }
    return 0;
}


int
pic_cfg_mamba_hybrid(pic_cfg_ctx *c, pic_config *cfg, double prf)
{
    int any_full = 0, any_ssm = 0;

    cfg->norm_offset = 0;
    if (pic_cfg_mamba_layers(c, cfg) != 0) {
        return -1;
    }
    for (int i = 0; i < cfg->n_layers; i++) {
        any_full |= cfg->layer_type[i] == PIC_LAYER_FULL;
        any_ssm |= cfg->layer_type[i] == PIC_LAYER_MAMBA2;
    }
    if ((any_full && pic_cfg_attention(c, cfg, prf, 0) != 0)
        || (any_ssm && pic_cfg_mamba2(c, cfg) != 0))
    {
        return -1;
    }
    return 0;
}
