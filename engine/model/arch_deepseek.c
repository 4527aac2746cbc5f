/*
 * arch_deepseek.c — DeepSeek-V2 and DeepSeek-V3 (and the checkpoints in the
 * V3 layout: Kimi-K2 / Moonlight, GLM-style MLA): every layer multi-head
 * latent attention (MODEL.md §4.2) — queries straight from x or through a
 * low-rank q_lora, keys and values from one latent c_KV per token plus a
 * rotary key k_pe shared by the heads — and a dense SwiGLU MLP on the
 * first first_k_dense_replace layers, a MoE with shared experts on the
 * rest.  The two differ in the router: V2 softmax scores, top-k greedy or
 * limited to the topk_group groups of best single expert, never
 * renormalised; V3 sigmoid scores plus e_score_correction_bias for the
 * choice, groups ranked by their two best, top-k renormalised when
 * norm_topk_prob.  Both scale the routed weights by routed_scaling_factor.
 * RoPE default or YaRN (its mscale_all_dim enters the softmax scale);
 * rotary pairs are interleaved on disk (V2 always, V3 unless
 * rope_interleave is false).  Plain x·w RMSNorms.
 */
#include "arch.h"

#include <math.h>
#include <string.h>

static int
deepseek_config(pic_cfg_ctx *c, pic_config *cfg)
{
    const cJSON *v, *rd;
    const char  *rtype, *method = "greedy";
    int          v3 = cfg->arch == PIC_ARCH_DEEPSEEK_V3, dense, n_shared, hd, freq;
    double       rsf, factor = 1.0, msa = 0.0;

    cfg->mla = 1;
    if (pic_cfg_refuse(c, c->tc, "attention_bias", "attention biases are not "
                       "implemented for MLA") != 0
        || pic_cfg_refuse(c, c->tc, "mlp_bias", "MLP biases are not implemented") != 0
        || pic_cfg_attention_layers(c, cfg) != 0
        || pic_cfg_int(c, c->tc, "num_attention_heads", &cfg->n_q_heads, 1,
                       CFG_MAX_HEADS, 1, 0) != 0
        || pic_cfg_int(c, c->tc, "kv_lora_rank", &cfg->kv_lora_rank, 1,
                       CFG_MAX_HEAD_DIM, 1, 0) != 0
        || pic_cfg_int(c, c->tc, "qk_nope_head_dim", &cfg->qk_nope_dim, 1,
                       CFG_MAX_HEAD_DIM, 1, 0) != 0
        || pic_cfg_int(c, c->tc, "qk_rope_head_dim", &cfg->qk_rope_dim, 2,
                       2 * PIC_ROPE_MAX_PAIRS, 1, 0) != 0
        || pic_cfg_int(c, c->tc, "v_head_dim", &cfg->v_head_dim, 1,
                       CFG_MAX_HEAD_DIM, 1, 0) != 0)
    {
        return -1;
    }
    v = cJSON_GetObjectItemCaseSensitive(c->tc, "q_lora_rank");
    if (v != NULL && !cJSON_IsNull(v)
        && pic_cfg_int(c, c->tc, "q_lora_rank", &cfg->q_lora_rank, 1,
                       CFG_MAX_HIDDEN, 1, 0) != 0)
    {
        return -1;
    }
    if (cfg->qk_rope_dim % 2 != 0) {
        pic_cfg_err(c, "qk_rope_head_dim %d is odd", cfg->qk_rope_dim);
        return -1;
    }
    cfg->mla_interleave = 1;
    if (v3 && pic_cfg_bool(c, c->tc, "rope_interleave", &cfg->mla_interleave, 1) != 0) {
        return -1;
    }
    /* the unused GQA view: one "kv head" of the cache row */
    cfg->n_kv_heads = 1;
    cfg->head_dim = cfg->qk_rope_dim + cfg->kv_lora_rank;
    if (pic_cfg_rope(c, cfg, cfg->qk_rope_dim, PIC_ROPE_SCALE_YARN) != 0) {
        return -1;
    }
    hd = cfg->qk_nope_dim + cfg->qk_rope_dim;
    cfg->mla_hdp = hd > cfg->v_head_dim ? hd : cfg->v_head_dim;
    cfg->mla_scale = (float) (1.0 / sqrt((double) hd));
    rd = pic_cfg_rope_dict(c, &rtype);
    if (strcmp(rtype, "default") != 0) {
        if (pic_cfg_num(c, rd, "factor", &factor, 0.0, 1e6, 1.0) != 0
            || pic_cfg_num(c, rd, "mscale_all_dim", &msa, -1e6, 1e6, 0.0) != 0)
        {
            return -1;
        }
        if (msa != 0.0) {
            double m = pic_yarn_mscale(factor, msa);

            cfg->mla_scale = (float) (1.0 / sqrt((double) hd) * m * m);
        }
    }

    /* FFN: dense first, MoE after */
    if (pic_cfg_int(c, c->tc, "first_k_dense_replace", &dense, 0, PIC_MAX_LAYERS, 0, 0)
        != 0
        || pic_cfg_int(c, c->tc, "moe_layer_freq", &freq, 1, PIC_MAX_LAYERS, 0, 1) != 0)
    {
        return -1;
    }
    if (freq != 1) {
        pic_cfg_err(c, "'moe_layer_freq' %d: only every layer past "
                    "first_k_dense_replace is MoE in this layout", freq);
        return -1;
    }
    if (pic_cfg_int(c, c->tc, "n_routed_experts", &cfg->n_experts, 0, CFG_MAX_EXPERTS,
                    0, 0) != 0)
    {
        return -1;
    }
    for (int i = 0; i < cfg->n_layers; i++) {
        cfg->layer_is_moe[i] = cfg->n_experts > 0 && i >= dense;
    }
    if (dense > 0 || cfg->n_experts == 0) {
        if (pic_cfg_int(c, c->tc, "intermediate_size", &cfg->intermediate, 1,
                        CFG_MAX_INTER, 1, 0) != 0)
        {
            return -1;
        }
    }
    if (cfg->n_experts == 0 || dense >= cfg->n_layers) {
        return 0;
    }
    cfg->moe_grouped = 1;
    cfg->moe_sigmoid = v3;
    /* the released configs name the scoring; transformers fixes it per version */
    v = cJSON_GetObjectItemCaseSensitive(c->tc, "scoring_func");
    if (v != NULL && !cJSON_IsNull(v)
        && !(cJSON_IsString(v) && strcmp(v->valuestring, v3 ? "sigmoid" : "softmax") == 0))
    {
        pic_cfg_err(c, "'scoring_func' %.32s: %s routes with %s scores only",
                    cJSON_IsString(v) ? v->valuestring : "?", cfg->model_type,
                    v3 ? "sigmoid" : "softmax");
        return -1;
    }
    if (pic_cfg_int(c, c->tc, "num_experts_per_tok", &cfg->n_experts_per_tok, 1,
                    cfg->n_experts, 1, 0) != 0
        || pic_cfg_int(c, c->tc, "moe_intermediate_size", &cfg->moe_intermediate, 1,
                       CFG_MAX_INTER, 1, 0) != 0
        || pic_cfg_int(c, c->tc, "n_shared_experts", &n_shared, 0, 1024, 0, v3 ? 1 : 2)
           != 0
        || pic_cfg_num(c, c->tc, "routed_scaling_factor", &rsf, 0.0, 1e6, v3 ? 2.5 : 1.0)
           != 0)
    {
        return -1;
    }
    cfg->shared_intermediate = n_shared * cfg->moe_intermediate;
    cfg->moe_scale = (float) rsf;
    cfg->moe_groups = 1;
    cfg->moe_topk_groups = 1;
    if (v3) {
        if (pic_cfg_bool(c, c->tc, "norm_topk_prob", &cfg->norm_topk_prob, 1) != 0) {
            return -1;
        }
    } else {
        v = cJSON_GetObjectItemCaseSensitive(c->tc, "topk_method");
        if (v != NULL && !cJSON_IsNull(v)) {
            method = cJSON_IsString(v) ? v->valuestring : "?";
        }
        if (strcmp(method, "greedy") != 0 && strcmp(method, "group_limited_greedy") != 0) {
            pic_cfg_err(c, "topk_method '%.32s' is not supported (greedy, "
                        "group_limited_greedy)", method);
            return -1;
        }
        /* transformers' V2 router never renormalises */
        cfg->norm_topk_prob = 0;
    }
    if (v3 || strcmp(method, "group_limited_greedy") == 0) {
        if (pic_cfg_int(c, c->tc, "n_group", &cfg->moe_groups, 1, 64, 0, v3 ? 8 : 1) != 0
            || pic_cfg_int(c, c->tc, "topk_group", &cfg->moe_topk_groups, 1,
                           cfg->moe_groups, 0, v3 ? 4 : 1) != 0)
        {
            return -1;
        }
        if (cfg->n_experts % cfg->moe_groups != 0
            || (v3 && cfg->n_experts / cfg->moe_groups < 2)
            || cfg->n_experts_per_tok > cfg->moe_topk_groups
                                        * (cfg->n_experts / cfg->moe_groups))
        {
            pic_cfg_err(c, "n_routed_experts %d, n_group %d, topk_group %d and "
                        "num_experts_per_tok %d do not make whole groups",
                        cfg->n_experts, cfg->moe_groups, cfg->moe_topk_groups,
                        cfg->n_experts_per_tok);
            return -1;
        }
    }
    return 0;
}

static const char *const deepseek_v2_types[] = { "deepseek_v2", NULL };
static const char *const deepseek_v3_types[] = { "deepseek_v3", NULL };
static const char *const deepseek_wrappers[] = { NULL };

const pic_arch_desc pic_arch_deepseek_v2 = {
    .name = "deepseek_v2",
    .arch = PIC_ARCH_DEEPSEEK_V2,
    .model_types = deepseek_v2_types,
    .wrappers = deepseek_wrappers,
    .dialect = PIC_TEMPLATE_CHATML,
    .config = deepseek_config,
};

const pic_arch_desc pic_arch_deepseek_v3 = {
    .name = "deepseek_v3",
    .arch = PIC_ARCH_DEEPSEEK_V3,
    .model_types = deepseek_v3_types,
    .wrappers = deepseek_wrappers,
    .dialect = PIC_TEMPLATE_CHATML,
    .config = deepseek_config,
};
