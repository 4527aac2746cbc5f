/*
 * arch_granitemoehybrid.c — Granite 4.0-H (granitemoehybrid): Mamba2 mixers
 * (MODEL.md §9) and GQA attention as layer_types says, with RoPE or none
 * (position_embedding_type), Granite's four scalars (embeddings ×
 * embedding_multiplier, every mixer and FFN output × residual_multiplier
 * before the residual add, softmax scale attention_multiplier, logits ÷
 * logits_scaling), and an FFN that is a shared SwiGLU MLP (shared_mlp,
 * [gate | up] in one input_linear) plus, with num_local_experts > 0, a
 * top-k MoE whose weights are the softmax of the chosen logits (= the
 * renormalised top-k of the full softmax).
 */
#include "arch.h"

#include <string.h>

static int
granite_scalar(pic_cfg_ctx *c, const char *key, float *out)
{
    double v;

    if (pic_cfg_num(c, c->tc, key, &v, 0.0, 1e6, 1.0) != 0) {
        return -1;
    }
    *out = (float) v;
    return 0;
}

static int
granite_config(pic_cfg_ctx *c, pic_config *cfg)
{
    const cJSON *pe = cJSON_GetObjectItemCaseSensitive(c->tc, "position_embedding_type");
    int          E = 0, Is;

    if (pe != NULL && !cJSON_IsNull(pe)
        && !(cJSON_IsString(pe) && (strcmp(pe->valuestring, "rope") == 0
                                    || strcmp(pe->valuestring, "nope") == 0)))
    {
        pic_cfg_err(c, "'position_embedding_type' is neither 'rope' nor null");
        return -1;
    }
    if (pic_cfg_refuse(c, c->tc, "attention_bias", "attention biases are not "
                       "implemented for granitemoehybrid") != 0
        || pic_cfg_mamba_hybrid(c, cfg, 1.0) != 0
        || granite_scalar(c, "embedding_multiplier", &cfg->embed_mult) != 0
        || granite_scalar(c, "residual_multiplier", &cfg->resid_mult) != 0
        || granite_scalar(c, "attention_multiplier", &cfg->attn_scale) != 0
        || granite_scalar(c, "logits_scaling", &cfg->logits_div) != 0
        || pic_cfg_int(c, c->tc, "num_local_experts", &E, 0, CFG_MAX_EXPERTS, 0, 8) != 0
        || pic_cfg_int(c, c->tc, "shared_intermediate_size", &Is, 1, CFG_MAX_INTER, 0,
                       1024) != 0)
    {
        return -1;
    }
    /* no positions: every frequency 0 turns each rope op (the forward's and
     * an entry's re-rotation) into the identity, exactly */
    if (!(cJSON_IsString(pe) && strcmp(pe->valuestring, "rope") == 0)) {
        cfg->rope_none = 1;
        for (int i = 0; i < PIC_ROPE_MAX_PAIRS; i++) {
            cfg->rope.inv_freq[i] = 0.0f;
        }
    }
    if (E == 0) {                       /* the shared MLP is the dense MLP */
        cfg->intermediate = Is;
        return 0;
    }
    cfg->n_experts = E;
    cfg->shared_intermediate = Is;
    cfg->norm_topk_prob = 1;
    for (int i = 0; i < cfg->n_layers; i++) {
        cfg->layer_is_moe[i] = 1;
    }
    if (pic_cfg_int(c, c->tc, "num_experts_per_tok", &cfg->n_experts_per_tok, 1, E, 0,
                    2) != 0
        || pic_cfg_int(c, c->tc, "intermediate_size", &cfg->moe_intermediate, 1,
                       CFG_MAX_INTER, 1, 0) != 0)
    {
        return -1;
    }
    return 0;
}

static const char *const granite_types[] = { "granitemoehybrid", NULL };
static const char *const granite_wrappers[] = { NULL };

const pic_arch_desc pic_arch_granitemoehybrid = {
    .name = "granitemoehybrid",
    .arch = PIC_ARCH_GRANITEMOEHYBRID,
    .model_types = granite_types,
    .wrappers = granite_wrappers,
    .dialect = PIC_TEMPLATE_CHATML,
    .config = granite_config,
};
