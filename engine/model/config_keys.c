/*
 * config_keys.c — config.json's keys into a pic_config (config_keys.h).
 *
 * RoPE settings may sit at the top level or inside rope_parameters /
 * rope_scaling, of the text object or of the wrapper.  Every number is
 * range-checked so that later size arithmetic cannot overflow; the RoPE
 * scalings are computed in fp32 in transformers' order of operations, so
 * the frequencies are the same floats.
 */
#include "config_keys.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>


void
pic_cfg_err(pic_cfg_ctx *c, const char *fmt, ...)
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


/* obj[key] as an int in [lo, hi]; def when absent (required: error).
 * Returns 0 ok, -1 error. */
int
pic_cfg_int(pic_cfg_ctx *c, const cJSON *obj, const char *key, int *out, int lo,
        int hi, int required, int def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    double       d;

    if (v == NULL || cJSON_IsNull(v)) {
        if (required) {
            pic_cfg_err(c, "missing key '%s'", key);
            return -1;
        }
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v)) {
        pic_cfg_err(c, "'%s' is not a number", key);
        return -1;
    }
    d = v->valuedouble;
    if (!(d >= (double) lo && d <= (double) hi) || d != floor(d)) {
        pic_cfg_err(c, "'%s' = %g is not an integer in [%d, %d]", key, d, lo, hi);
        return -1;
    }
    *out = (int) d;
    return 0;
}


/* obj[key] as a finite double in (lo, hi]; def when absent. */
int
pic_cfg_num(pic_cfg_ctx *c, const cJSON *obj, const char *key, double *out,
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
        pic_cfg_err(c, "'%s' is not a number in (%g, %g]", key, lo, hi);
        return -1;
    }
    *out = v->valuedouble;
    return 0;
}


/* obj[key] as a flag (true/false or 0/1); def when absent. */
int
pic_cfg_bool(pic_cfg_ctx *c, const cJSON *obj, const char *key, int *out, int def)
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
        pic_cfg_err(c, "'%s' is not a boolean", key);
        return -1;
    }
    return 0;
}


int
pic_cfg_refuse(pic_cfg_ctx *c, const cJSON *obj, const char *key, const char *why)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

    if (v == NULL || cJSON_IsNull(v) || cJSON_IsFalse(v)
        || (cJSON_IsNumber(v) && v->valuedouble == 0.0))
    {
        return 0;
    }
    pic_cfg_err(c, "'%s' is set: %s", key, why);
    return -1;
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


int
pic_cfg_hybrid_layers(pic_cfg_ctx *c, pic_config *cfg)
{
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c->tc, "layer_types");
    const cJSON *e;
    int          i, interval;

    if (lt != NULL && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != cfg->n_layers) {
            pic_cfg_err(c, "'layer_types' must list %d layer types",
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
                pic_cfg_err(c, "layer_types[%d] is neither 'linear_attention' "
                        "nor 'full_attention'", i);
                return -1;
            }
            i++;
        }
        return 0;
    }

    if (pic_cfg_int(c, c->tc, "full_attention_interval", &interval, 1,
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
cfg_moe(pic_cfg_ctx *c, pic_config *cfg, int qwen35_moe)
{
    const cJSON *only, *e;
    int          i, step, need;

    if (qwen35_moe) {
        if (pic_cfg_int(c, c->tc, "num_experts", &cfg->n_experts, 1,
                    CFG_MAX_EXPERTS, 1, 0) != 0)
        {
            return -1;
        }
        cfg->norm_topk_prob = 1;
        for (i = 0; i < cfg->n_layers; i++) {
            cfg->layer_is_moe[i] = 1;
        }
    } else {
        if (pic_cfg_int(c, c->tc, "num_experts", &cfg->n_experts, 0,
                    CFG_MAX_EXPERTS, 0, 0) != 0
            || pic_cfg_int(c, c->tc, "decoder_sparse_step", &step, 1,
                       PIC_MAX_LAYERS, 0, 1) != 0
            || pic_cfg_bool(c, c->tc, "norm_topk_prob", &cfg->norm_topk_prob, 1)
               != 0)
        {
            return -1;
        }
        only = cJSON_GetObjectItemCaseSensitive(c->tc, "mlp_only_layers");
        if (only != NULL && !cJSON_IsNull(only) && !cJSON_IsArray(only)) {
            pic_cfg_err(c, "'mlp_only_layers' is not a list");
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
                pic_cfg_err(c, "'mlp_only_layers' holds a non-integer");
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
    if (pic_cfg_int(c, c->tc, "num_experts_per_tok", &cfg->n_experts_per_tok, 1,
                cfg->n_experts, 1, 0) != 0
        || pic_cfg_int(c, c->tc, "moe_intermediate_size", &cfg->moe_intermediate,
                   1, CFG_MAX_INTER, 1, 0) != 0
        || pic_cfg_int(c, c->tc, "shared_expert_intermediate_size",
                   &cfg->shared_intermediate, 0, CFG_MAX_INTER, 0, 0) != 0)
    {
        return -1;
    }
    return 0;
}


int
pic_cfg_attention_layers(pic_cfg_ctx *c, pic_config *cfg)
{
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c->tc, "layer_types");
    const cJSON *e;
    int          i = 0, windowed = 0;

    for (i = 0; i < cfg->n_layers; i++) {
        cfg->layer_type[i] = PIC_LAYER_FULL;
    }
    if (lt == NULL || cJSON_IsNull(lt)) {
        return 0;
    }
    if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != cfg->n_layers) {
        pic_cfg_err(c, "'layer_types' must list %d layer types", cfg->n_layers);
        return -1;
    }
    i = 0;
    cJSON_ArrayForEach(e, lt) {
        if (cJSON_IsString(e) && strcmp(e->valuestring, "sliding_attention") == 0) {
            windowed = 1;
        } else if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention") != 0) {
            pic_cfg_err(c, "layer_types[%d] is not 'full_attention' (this architecture "
                        "has attention layers only)", i);
            return -1;
        }
        i++;
    }
    /* a sliding layer is a full one while no window is in force */
    if (windowed && (pic_cfg_refuse(c, c->tc, "use_sliding_window",
                                    "sliding-window attention is not implemented") != 0
                     || pic_cfg_refuse(c, c->tc, "sliding_window",
                                       "sliding-window attention is not implemented")
                        != 0))
    {
        return -1;
    }
    return 0;
}


/* The rope dict holding the scaling's type, or NULL (default RoPE). */
static const cJSON *
cfg_rope_scaling(pic_cfg_ctx *c, const char **type)
{
    for (int i = 0; i < 4; i++) {       /* the rope dicts' type keys */
        const cJSON *o, *rt;

        o = cJSON_GetObjectItemCaseSensitive(i < 2 ? c->tc : c->root,
                                             i % 2 ? "rope_scaling" : "rope_parameters");
        rt = cJSON_GetObjectItemCaseSensitive(o, "rope_type");
        if (rt == NULL) {
            rt = cJSON_GetObjectItemCaseSensitive(o, "type");
        }
        if (rt != NULL && !cJSON_IsNull(rt)) {
            *type = cJSON_IsString(rt) ? rt->valuestring : "?";
            return o;
        }
    }
    *type = "default";
    return NULL;
}


/* inv_freq of r under Llama 3.1's scaling (transformers'
 * _compute_llama3_parameters, elementwise in fp32). */
static void
cfg_rope_llama3(pic_rope *r, float factor, float low, float high, float old_ctx)
{
    float two_pi = (float) (2.0 * M_PI);
    float low_wl = old_ctx / low, high_wl = old_ctx / high;
    float span = (float) ((double) high - (double) low);

    for (int i = 0; i < r->dim / 2; i++) {
        float inv = r->inv_freq[i], wl = two_pi / inv;
        float scaled = wl > low_wl ? inv / factor : inv;

        if (!(wl < high_wl) && !(wl > low_wl)) {
            float sf = (old_ctx / wl - low) / span;

            scaled = (1.0f - sf) * scaled / factor + sf * scaled;
        }
        r->inv_freq[i] = scaled;
    }
}


const cJSON *
pic_cfg_rope_dict(pic_cfg_ctx *c, const char **type)
{
    return cfg_rope_scaling(c, type);
}


double
pic_yarn_mscale(double factor, double m)
{
    return factor <= 1.0 ? 1.0 : 0.1 * m * log(factor) + 1.0;
}


/* inv_freq of r under YaRN (transformers' _compute_yarn_parameters: the
 * correction range in double, the ramp and the blend in fp32). */
static void
cfg_rope_yarn(pic_rope *r, float theta, double factor, double beta_fast,
              double beta_slow, double old_ctx, int truncate)
{
    int    dim = r->dim;
    double lo = dim * log(old_ctx / (beta_fast * 2 * M_PI)) / (2 * log(theta));
    double hi = dim * log(old_ctx / (beta_slow * 2 * M_PI)) / (2 * log(theta));

    if (truncate) {
        lo = floor(lo);
        hi = ceil(hi);
    }
    lo = lo > 0 ? lo : 0;
    hi = hi < dim - 1 ? hi : dim - 1;
    if (lo == hi) {
        hi += 0.001;                /* as transformers: no singular ramp */
    }
    for (int i = 0; i < dim / 2; i++) {
        float pf = powf(theta, (float) (2 * i) / (float) dim);
        float extra = 1.0f / pf, inter = 1.0f / ((float) factor * pf);
        float ramp = ((float) i - (float) lo) / (float) (hi - lo);

        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        float ef = 1.0f - ramp;

        r->inv_freq[i] = inter * (1.0f - ef) + extra * ef;
    }
}


/* The scaling of RoPE named by the config, applied to cfg->rope. */
static int
cfg_rope_scale(pic_cfg_ctx *c, pic_config *cfg, int scalings)
{
    const char  *type;
    const cJSON *o = cfg_rope_scaling(c, &type);
    double       factor, low, high, old;
    int          old_i;

    if (strcmp(type, "default") == 0 || strcmp(type, "mrope") == 0) {
        return 0;
    }
    if (strcmp(type, "linear") == 0 && (scalings & PIC_ROPE_SCALE_LINEAR)) {
        if (pic_cfg_num(c, o, "factor", &factor, 0.0, 1e6, 0.0) != 0 || factor <= 0.0) {
            pic_cfg_err(c, "rope_type 'linear' needs a 'factor' > 0");
            return -1;
        }
        for (int i = 0; i < cfg->rope.dim / 2; i++) {
            cfg->rope.inv_freq[i] /= (float) factor;
        }
        return 0;
    }
    if (strcmp(type, "dynamic") == 0 && (scalings & PIC_ROPE_SCALE_DYNAMIC)) {
        /* NTK scaling changes the frequencies only past
         * max_position_embeddings, and the engine never goes there */
        return 0;
    }
    if (strcmp(type, "llama3") == 0 && (scalings & PIC_ROPE_SCALE_LLAMA3)) {
        if (pic_cfg_num(c, o, "factor", &factor, 0.0, 1e6, 0.0) != 0
            || pic_cfg_num(c, o, "low_freq_factor", &low, 0.0, 1e6, 0.0) != 0
            || pic_cfg_num(c, o, "high_freq_factor", &high, 0.0, 1e6, 0.0) != 0
            || pic_cfg_int(c, o, "original_max_position_embeddings", &old_i, 1, INT_MAX,
                           1, 0) != 0)
        {
            return -1;
        }
        if (factor <= 0.0 || low <= 0.0 || high <= low) {
            pic_cfg_err(c, "rope_type 'llama3' needs factor > 0 and high_freq_factor > "
                        "low_freq_factor > 0");
            return -1;
        }
        old = old_i;
        cfg_rope_llama3(&cfg->rope, (float) factor, (float) low, (float) high, (float) old);
        return 0;
    }
    if (strcmp(type, "freq_factors") == 0 && (scalings & PIC_ROPE_SCALE_LLAMA3)) {
        /* llama3 scaling as a GGUF file holds it (gguf_model.c): one divisor
         * per frequency, as llama.cpp's rope applies it */
        const cJSON *fa = cJSON_GetObjectItemCaseSensitive(o, "factors");
        int          i = 0;

        if (!cJSON_IsArray(fa) || cJSON_GetArraySize(fa) != cfg->rope.dim / 2) {
            pic_cfg_err(c, "rope_type 'freq_factors' needs %d factors (rotary dims / 2)",
                        cfg->rope.dim / 2);
            return -1;
        }
        for (const cJSON *f = fa->child; f != NULL; f = f->next, i++) {
            if (!cJSON_IsNumber(f) || !(f->valuedouble > 0.0 && f->valuedouble < 1e6)) {
                pic_cfg_err(c, "rope factor %d must be a number in (0, 1e6)", i);
                return -1;
            }
            cfg->rope.inv_freq[i] /= (float) f->valuedouble;
        }
        return 0;
    }
    if (strcmp(type, "yarn") == 0 && (scalings & PIC_ROPE_SCALE_YARN)) {
        double af, ms, msa, bf, bs;
        int    trunc;

        if (pic_cfg_num(c, o, "factor", &factor, 0.0, 1e6, 0.0) != 0 || factor <= 0.0
            || pic_cfg_int(c, o, "original_max_position_embeddings", &old_i, 1, INT_MAX,
                           1, 0) != 0
            || pic_cfg_num(c, o, "beta_fast", &bf, 0.0, 1e6, 32.0) != 0
            || pic_cfg_num(c, o, "beta_slow", &bs, 0.0, 1e6, 1.0) != 0
            || pic_cfg_num(c, o, "mscale", &ms, -1e6, 1e6, 0.0) != 0
            || pic_cfg_num(c, o, "mscale_all_dim", &msa, -1e6, 1e6, 0.0) != 0
            || pic_cfg_num(c, o, "attention_factor", &af, 0.0, 1e6, 0.0) != 0
            || pic_cfg_bool(c, o, "truncate", &trunc, 1) != 0)
        {
            return -1;
        }
        if (factor <= 0.0) {
            pic_cfg_err(c, "rope_type 'yarn' needs a 'factor' > 0");
            return -1;
        }
        if (af <= 0.0) {
            af = ms != 0.0 && msa != 0.0
                 ? pic_yarn_mscale(factor, ms) / pic_yarn_mscale(factor, msa)
                 : pic_yarn_mscale(factor, 1.0);
        }
        cfg->rope_attn_factor = (float) af;
        cfg_rope_yarn(&cfg->rope, cfg->rope_theta, factor, bf, bs, (double) old_i, trunc);
        return 0;
    }
    pic_cfg_err(c, "rope_type '%.32s' is not supported by model_type %s (%s%s%s%sdefault)",
                type, cfg->model_type,
                scalings & PIC_ROPE_SCALE_LINEAR ? "linear, " : "",
                scalings & PIC_ROPE_SCALE_DYNAMIC ? "dynamic, " : "",
                scalings & PIC_ROPE_SCALE_LLAMA3 ? "llama3, " : "",
                scalings & PIC_ROPE_SCALE_YARN ? "yarn, " : "");
    return -1;
}


int
pic_cfg_attention(pic_cfg_ctx *c, pic_config *cfg, double prf_default, int scalings)
{
    const cJSON *o, *v;
    double       theta, prf;

    if (pic_cfg_int(c, c->tc, "num_attention_heads", &cfg->n_q_heads, 1, CFG_MAX_HEADS,
                    1, 0) != 0
        || pic_cfg_int(c, c->tc, "num_key_value_heads", &cfg->n_kv_heads, 1,
                       CFG_MAX_HEADS, 0, cfg->n_q_heads) != 0)
    {
        return -1;
    }
    if (cfg->n_q_heads % cfg->n_kv_heads != 0) {
        pic_cfg_err(c, "num_attention_heads %d is not a multiple of "
                    "num_key_value_heads %d", cfg->n_q_heads, cfg->n_kv_heads);
        return -1;
    }
    v = cJSON_GetObjectItemCaseSensitive(c->tc, "head_dim");
    if (v == NULL || cJSON_IsNull(v)) {
        if (cfg->hidden % cfg->n_q_heads != 0) {
            pic_cfg_err(c, "no head_dim and hidden_size %d is not a multiple of "
                        "num_attention_heads %d", cfg->hidden, cfg->n_q_heads);
            return -1;
        }
        cfg->head_dim = cfg->hidden / cfg->n_q_heads;
    } else if (pic_cfg_int(c, c->tc, "head_dim", &cfg->head_dim, 1, CFG_MAX_HEAD_DIM, 1,
                           0) != 0)
    {
        return -1;
    }

    o = cfg_rope_obj(c->tc, c->root, "rope_theta");
    if (pic_cfg_num(c, o, "rope_theta", &theta, 0.0, 1e12, 10000.0) != 0) {
        return -1;
    }
    o = cfg_rope_obj(c->tc, c->root, "partial_rotary_factor");
    if (pic_cfg_num(c, o, "partial_rotary_factor", &prf, 0.0, 1.0, prf_default) != 0) {
        return -1;
    }
    cfg->rope_theta = (float) theta;
    cfg->rotary_dim = (int) (cfg->head_dim * prf);
    if (cfg->rotary_dim < 2 || cfg->rotary_dim % 2 != 0 || cfg->rotary_dim > cfg->head_dim
        || cfg->rotary_dim > 2 * PIC_ROPE_MAX_PAIRS)
    {
        pic_cfg_err(c, "rotary dim %d (head_dim %d x partial_rotary_factor %g) must be "
                    "even and in [2, min(head_dim, %d)]", cfg->rotary_dim, cfg->head_dim,
                    prf, 2 * PIC_ROPE_MAX_PAIRS);
        return -1;
    }
    pic_rope_init(&cfg->rope, cfg->rotary_dim, cfg->rope_theta);
    return cfg_rope_scale(c, cfg, scalings);
}


int
pic_cfg_rope(pic_cfg_ctx *c, pic_config *cfg, int dim, int scalings)
{
    const cJSON *o = cfg_rope_obj(c->tc, c->root, "rope_theta");
    double       theta;

    if (pic_cfg_num(c, o, "rope_theta", &theta, 0.0, 1e12, 10000.0) != 0) {
        return -1;
    }
    cfg->rope_theta = (float) theta;
    cfg->rotary_dim = dim;
    cfg->rope_attn_factor = 1.0f;
    if (pic_rope_init(&cfg->rope, dim, cfg->rope_theta) != 0) {
        pic_cfg_err(c, "rotary dim %d must be even and in [2, %d]", dim,
                    2 * PIC_ROPE_MAX_PAIRS);
        return -1;
    }
    return cfg_rope_scale(c, cfg, scalings);
}


int
pic_cfg_gdn(pic_cfg_ctx *c, pic_config *cfg)
{
    if (pic_cfg_int(c, c->tc, "linear_num_key_heads", &cfg->lin_k_heads, 1,
                    CFG_MAX_HEADS, 1, 0) != 0
        || pic_cfg_int(c, c->tc, "linear_num_value_heads", &cfg->lin_v_heads, 1,
                       CFG_MAX_HEADS, 1, 0) != 0
        || pic_cfg_int(c, c->tc, "linear_key_head_dim", &cfg->lin_k_dim, 1,
                       CFG_MAX_HEAD_DIM, 1, 0) != 0
        || pic_cfg_int(c, c->tc, "linear_value_head_dim", &cfg->lin_v_dim, 1,
                       CFG_MAX_HEAD_DIM, 1, 0) != 0
        || pic_cfg_int(c, c->tc, "linear_conv_kernel_dim", &cfg->conv_kernel, 1,
                       CFG_MAX_CONV, 0, 4) != 0)
    {
        return -1;
    }
    if (cfg->lin_v_heads % cfg->lin_k_heads != 0) {
        pic_cfg_err(c, "linear_num_value_heads %d is not a multiple of "
                    "linear_num_key_heads %d", cfg->lin_v_heads, cfg->lin_k_heads);
        return -1;
    }
    return 0;
}


int
pic_cfg_ffn(pic_cfg_ctx *c, pic_config *cfg, int moe, int qwen35_moe)
{
    int any_dense = 0;

    if (moe && cfg_moe(c, cfg, qwen35_moe) != 0) {
        return -1;
    }
    for (int i = 0; i < cfg->n_layers; i++) {
        any_dense |= !cfg->layer_is_moe[i];
    }
    if (any_dense
        && pic_cfg_int(c, c->tc, "intermediate_size", &cfg->intermediate, 1,
                       CFG_MAX_INTER, 1, 0) != 0)
    {
        return -1;
    }
    return 0;
}


int
pic_cfg_hybrid(pic_cfg_ctx *c, pic_config *cfg, int qwen35_moe)
{
    int any_lin = 0, any_full = 0;

    cfg->norm_offset = 1;
    cfg->attn_gate = 1;
    cfg->attn_qk_norm = 1;
    if (pic_cfg_refuse(c, c->tc, "attention_bias", "attention biases are not part of "
                       "this architecture") != 0
        || pic_cfg_hybrid_layers(c, cfg) != 0)
    {
        return -1;
    }
    for (int i = 0; i < cfg->n_layers; i++) {
        any_lin |= cfg->layer_type[i] == PIC_LAYER_LINEAR;
        any_full |= cfg->layer_type[i] == PIC_LAYER_FULL;
    }
    if ((any_full && pic_cfg_attention(c, cfg, 0.25, 0) != 0)
        || (any_lin && pic_cfg_gdn(c, cfg) != 0))
    {
        return -1;
    }
    return pic_cfg_ffn(c, cfg, 1, qwen35_moe);
}
