/*
 * test_model_load.c — pic_model_load on tiny checkpoints written here in
 * the real layouts (Qwen3.5 wrapper / text-only, Qwen3-Next; dense, MoE with
 * per-expert or fused experts; F32/BF16/F16; one file or sharded).  Every
 * tensor holds a value computed from its name and flat index, so the loaded
 * fp32 weights are checked against that formula, independently of the
 * loader.  Broken checkpoints must fail with a message naming the tensor or
 * config key.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "model.h"
#include "model_config.h"

static char root_dir[256];
static int  n_dirs;
static char err[2048];

/* --- the checkpoint builder --- */

typedef struct {
    int h, nl, v, inter, hq, hkv, hd, hk, hv, dk, dv, kc, e, topk, ie, is;
} dims;

typedef struct {
    dims        d;
    int         next;           /* Qwen3-Next: top-level keys, qkvz/ba */
    int         text_only;      /* qwen3_5_text at top level, "model." */
    int         moe_mask;       /* bit i: layer i is MoE */
    int         fused;          /* experts as gate_up_proj / down_proj */
    int         tie;
    const char *dtype;          /* of 2-D+ tensors; 1-D ones stay F32 */
    int         iota;           /* value = flat index */
    int         shards;         /* write two shards and an index */
    int         extras;         /* model.visual.* (I64) and mtp.* too */
    int         full_every;     /* layer i full iff (i+1) % full_every == 0 */
    int         no_layer_types; /* config gives full_attention_interval */
    int         no_head_dim;
    int         rope_style;     /* 0 rope_parameters, 1 top level, 2 rope_scaling */
    int         sparse_step;    /* Qwen3-Next decoder_sparse_step */
    int         mlp_only;       /* Qwen3-Next mlp_only_layers [this] (-1 none) */
    int         norm_topk;
    int         eos;            /* eos_token_id in the text keys (-1 none) */
} spec;

typedef struct {
    char        name[160];
    char        dtype[8];
    int         ndim;
    int64_t     shape[3];
    int         extra;          /* not part of the text model */
} tdesc;

typedef struct {
    spec        s;
    tdesc       t[512];
    int         n;
    cJSON      *cfg;            /* whole config.json */
    cJSON      *tc;             /* the object holding the text keys */
    char        dir[512];
    const char *prefix;
} ckpt;

static spec
spec_default(void)
{
    spec s;

    memset(&s, 0, sizeof(s));
    s.d = (dims) { .h = 8, .nl = 4, .v = 16, .inter = 12, .hq = 2, .hkv = 1,
                   .hd = 8, .hk = 2, .hv = 4, .dk = 4, .dv = 2, .kc = 4,
                   .e = 3, .topk = 2, .ie = 4, .is = 6 };
    s.dtype = "F32";
    s.full_every = 4;
    s.sparse_step = 1;
    s.mlp_only = -1;
    s.norm_topk = 1;
    s.eos = -1;
    return s;
}

static int
is_full(const spec *s, int i)
{
    return (i + 1) % s->full_every == 0;
}

static uint32_t
fnv1a(const char *s)
{
    uint32_t h = 2166136261u;

    while (*s) {
        h = (h ^ (uint8_t) *s++) * 16777619u;
    }
    return h;
}

/* the value of element i of tensor name: k/64 with |k| <= 127, exact in
 * F32, BF16 and F16; or i itself (iota) */
static float
val(const char *name, uint64_t i, int iota)
{
    if (iota) {
        return (float) i;
    }
    return (float) ((int) ((fnv1a(name) + i * 7919u) % 255u) - 127) / 64.0f;
}

static void
add(ckpt *c, const char *dtype, int ndim, int64_t d0, int64_t d1,
    int64_t d2, const char *fmt, ...)
{
    tdesc   *t = &c->t[c->n++];
    va_list  ap;
    int      n;

    assert_true(c->n <= 512);
    memset(t, 0, sizeof(*t));
    n = strncmp(fmt, "lm_head", 7) == 0 || strncmp(fmt, "model.", 6) == 0
        || strncmp(fmt, "mtp.", 4) == 0
        ? 0 : snprintf(t->name, sizeof(t->name), "%s", c->prefix);
    va_start(ap, fmt);
    vsnprintf(t->name + n, sizeof(t->name) - n, fmt, ap);
    va_end(ap);
    snprintf(t->dtype, sizeof(t->dtype), "%s",
             dtype ? dtype : (ndim >= 2 ? c->s.dtype : "F32"));
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->shape[2] = d2;
}

static tdesc *
find(ckpt *c, const char *suffix)
{
    size_t ls = strlen(suffix);
    int    i;

    for (i = 0; i < c->n; i++) {
        size_t ln = strlen(c->t[i].name);

        if (ln >= ls && strcmp(c->t[i].name + ln - ls, suffix) == 0) {
            return &c->t[i];
        }
    }
    fail_msg("no tensor ending in %s", suffix);
    return NULL;
}

static void
drop(ckpt *c, const char *suffix)
{
    tdesc *t = find(c, suffix);

    memmove(t, t + 1, (size_t) (&c->t[c->n] - (t + 1)) * sizeof(*t));
    c->n--;
}

static void
build_tensors(ckpt *c)
{
    const spec *s = &c->s;
    const dims *d = &s->d;
    int64_t     H = d->h, kd = d->hk * d->dk, vd = d->hv * d->dv;
    int64_t     r = d->hv / d->hk;
    int         i, e;

    add(c, NULL, 2, d->v, H, 0, "embed_tokens.weight");
    add(c, NULL, 1, H, 0, 0, "norm.weight");
    if (!s->tie) {
        add(c, NULL, 2, d->v, H, 0, "lm_head.weight");
    }
    for (i = 0; i < d->nl; i++) {
        add(c, NULL, 1, H, 0, 0, "layers.%d.input_layernorm.weight", i);
        add(c, NULL, 1, H, 0, 0, "layers.%d.post_attention_layernorm.weight",
            i);
        if (!is_full(s, i)) {
            if (s->next) {
                add(c, NULL, 2, d->hk * (2 * d->dk + 2 * r * d->dv), H, 0,
                    "layers.%d.linear_attn.in_proj_qkvz.weight", i);
                add(c, NULL, 2, 2 * d->hv, H, 0,
                    "layers.%d.linear_attn.in_proj_ba.weight", i);
            } else {
                add(c, NULL, 2, 2 * kd + vd, H, 0,
                    "layers.%d.linear_attn.in_proj_qkv.weight", i);
                add(c, NULL, 2, vd, H, 0,
                    "layers.%d.linear_attn.in_proj_z.weight", i);
                add(c, NULL, 2, d->hv, H, 0,
                    "layers.%d.linear_attn.in_proj_b.weight", i);
                add(c, NULL, 2, d->hv, H, 0,
                    "layers.%d.linear_attn.in_proj_a.weight", i);
            }
            add(c, NULL, 3, 2 * kd + vd, 1, d->kc,
                "layers.%d.linear_attn.conv1d.weight", i);
            add(c, NULL, 1, d->hv, 0, 0, "layers.%d.linear_attn.dt_bias", i);
            add(c, NULL, 1, d->hv, 0, 0, "layers.%d.linear_attn.A_log", i);
            add(c, NULL, 1, d->dv, 0, 0, "layers.%d.linear_attn.norm.weight",
                i);
            add(c, NULL, 2, H, vd, 0, "layers.%d.linear_attn.out_proj.weight",
                i);
        } else {
            add(c, NULL, 2, 2 * d->hq * d->hd, H, 0,
                "layers.%d.self_attn.q_proj.weight", i);
            add(c, NULL, 2, d->hkv * d->hd, H, 0,
                "layers.%d.self_attn.k_proj.weight", i);
            add(c, NULL, 2, d->hkv * d->hd, H, 0,
                "layers.%d.self_attn.v_proj.weight", i);
            add(c, NULL, 2, H, d->hq * d->hd, 0,
                "layers.%d.self_attn.o_proj.weight", i);
            add(c, NULL, 1, d->hd, 0, 0, "layers.%d.self_attn.q_norm.weight",
                i);
            add(c, NULL, 1, d->hd, 0, 0, "layers.%d.self_attn.k_norm.weight",
                i);
        }
        if (s->moe_mask & (1 << i)) {
            add(c, NULL, 2, d->e, H, 0, "layers.%d.mlp.gate.weight", i);
            if (s->fused) {
                add(c, NULL, 3, d->e, 2 * d->ie, H,
                    "layers.%d.mlp.experts.gate_up_proj", i);
                add(c, NULL, 3, d->e, H, d->ie,
                    "layers.%d.mlp.experts.down_proj", i);
            } else {
                for (e = 0; e < d->e; e++) {
                    add(c, NULL, 2, d->ie, H, 0,
                        "layers.%d.mlp.experts.%d.gate_proj.weight", i, e);
                    add(c, NULL, 2, d->ie, H, 0,
                        "layers.%d.mlp.experts.%d.up_proj.weight", i, e);
                    add(c, NULL, 2, H, d->ie, 0,
                        "layers.%d.mlp.experts.%d.down_proj.weight", i, e);
                }
            }
            add(c, NULL, 2, d->is, H, 0,
                "layers.%d.mlp.shared_expert.gate_proj.weight", i);
            add(c, NULL, 2, d->is, H, 0,
                "layers.%d.mlp.shared_expert.up_proj.weight", i);
            add(c, NULL, 2, H, d->is, 0,
                "layers.%d.mlp.shared_expert.down_proj.weight", i);
            add(c, NULL, 2, 1, H, 0, "layers.%d.mlp.shared_expert_gate.weight",
                i);
        } else {
            add(c, NULL, 2, d->inter, H, 0, "layers.%d.mlp.gate_proj.weight",
                i);
            add(c, NULL, 2, d->inter, H, 0, "layers.%d.mlp.up_proj.weight", i);
            add(c, NULL, 2, H, d->inter, 0, "layers.%d.mlp.down_proj.weight",
                i);
        }
    }
    if (s->extras) {
        add(c, "I64", 2, 3, 2, 0, "model.visual.pos_ids");
        c->t[c->n - 1].extra = 1;
        add(c, "F32", 2, 2, H, 0, "model.visual.blocks.0.attn.qkv.weight");
        c->t[c->n - 1].extra = 1;
        add(c, "BF16", 2, H, 2 * H, 0, "mtp.fc.weight");
        c->t[c->n - 1].extra = 1;
    }
}

static void
build_config(ckpt *c)
{
    const spec *s = &c->s;
    const dims *d = &s->d;
    cJSON      *tc = cJSON_CreateObject(), *lt, *rp;
    int         i, any_dense = 0;

    for (i = 0; i < d->nl; i++) {
        any_dense |= !(s->moe_mask & (1 << i));
    }
    cJSON_AddNumberToObject(tc, "hidden_size", d->h);
    cJSON_AddNumberToObject(tc, "num_hidden_layers", d->nl);
    cJSON_AddNumberToObject(tc, "vocab_size", d->v);
    if (any_dense) {
        cJSON_AddNumberToObject(tc, "intermediate_size", d->inter);
    }
    cJSON_AddNumberToObject(tc, "num_attention_heads", d->hq);
    cJSON_AddNumberToObject(tc, "num_key_value_heads", d->hkv);
    if (!s->no_head_dim) {
        cJSON_AddNumberToObject(tc, "head_dim", d->hd);
    }
    cJSON_AddNumberToObject(tc, "linear_num_key_heads", d->hk);
    cJSON_AddNumberToObject(tc, "linear_num_value_heads", d->hv);
    cJSON_AddNumberToObject(tc, "linear_key_head_dim", d->dk);
    cJSON_AddNumberToObject(tc, "linear_value_head_dim", d->dv);
    cJSON_AddNumberToObject(tc, "linear_conv_kernel_dim", d->kc);
    cJSON_AddNumberToObject(tc, "rms_norm_eps", 1e-6);
    cJSON_AddStringToObject(tc, "hidden_act", "silu");
    cJSON_AddFalseToObject(tc, "attention_bias");
    cJSON_AddNumberToObject(tc, "max_position_embeddings", 4096);
    if (!s->no_layer_types) {
        lt = cJSON_AddArrayToObject(tc, "layer_types");
        for (i = 0; i < d->nl; i++) {
            cJSON_AddItemToArray(lt, cJSON_CreateString(
                is_full(s, i) ? "full_attention" : "linear_attention"));
        }
    } else if (s->full_every != 4) {
        cJSON_AddNumberToObject(tc, "full_attention_interval", s->full_every);
    }
    switch (s->rope_style) {
    case 0:
        rp = cJSON_AddObjectToObject(tc, "rope_parameters");
        cJSON_AddStringToObject(rp, "rope_type", "default");
        cJSON_AddNumberToObject(rp, "rope_theta", 1e7);
        cJSON_AddNumberToObject(rp, "partial_rotary_factor", 0.25);
        lt = cJSON_AddArrayToObject(rp, "mrope_section");
        cJSON_AddItemToArray(lt, cJSON_CreateNumber(1));
        break;
    case 1:
        cJSON_AddNumberToObject(tc, "rope_theta", 5e6);
        cJSON_AddNumberToObject(tc, "partial_rotary_factor", 0.5);
        break;
    default:
        rp = cJSON_AddObjectToObject(tc, "rope_scaling");
        cJSON_AddStringToObject(rp, "type", "default");
        cJSON_AddNumberToObject(rp, "rope_theta", 2e6);
        cJSON_AddNumberToObject(rp, "partial_rotary_factor", 1.0);
        break;
    }
    if (s->moe_mask) {
        cJSON_AddNumberToObject(tc, "num_experts", d->e);
        cJSON_AddNumberToObject(tc, "num_experts_per_tok", d->topk);
        cJSON_AddNumberToObject(tc, "moe_intermediate_size", d->ie);
        cJSON_AddNumberToObject(tc, "shared_expert_intermediate_size", d->is);
        if (s->next) {
            cJSON_AddNumberToObject(tc, "decoder_sparse_step", s->sparse_step);
            lt = cJSON_AddArrayToObject(tc, "mlp_only_layers");
            if (s->mlp_only >= 0) {
                cJSON_AddItemToArray(lt, cJSON_CreateNumber(s->mlp_only));
            }
            cJSON_AddBoolToObject(tc, "norm_topk_prob", s->norm_topk);
        }
    }
    if (s->eos >= 0) {
        cJSON_AddNumberToObject(tc, "eos_token_id", s->eos);
    } else {
        cJSON_AddNullToObject(tc, "eos_token_id");
    }

    if (s->next) {
        cJSON_AddStringToObject(tc, "model_type", "qwen3_next");
        cJSON_AddBoolToObject(tc, "tie_word_embeddings", s->tie);
        c->cfg = tc;
    } else if (s->text_only) {
        cJSON_AddStringToObject(tc, "model_type", s->moe_mask
                                ? "qwen3_5_moe_text" : "qwen3_5_text");
        cJSON_AddBoolToObject(tc, "tie_word_embeddings", s->tie);
        c->cfg = tc;
    } else {
        /* as transformers saves it: text_config's tie flag stays false,
         * the wrapper's governs */
        cJSON_AddStringToObject(tc, "model_type", s->moe_mask
                                ? "qwen3_5_moe_text" : "qwen3_5_text");
        cJSON_AddFalseToObject(tc, "tie_word_embeddings");
        c->cfg = cJSON_CreateObject();
        cJSON_AddStringToObject(c->cfg, "model_type", s->moe_mask
                                ? "qwen3_5_moe" : "qwen3_5");
        cJSON_AddItemToObject(c->cfg, "text_config", tc);
        cJSON_AddBoolToObject(c->cfg, "tie_word_embeddings", s->tie);
        rp = cJSON_AddObjectToObject(c->cfg, "vision_config");
        cJSON_AddNumberToObject(rp, "hidden_size", 16);
        cJSON_AddNumberToObject(rp, "depth", 1);
    }
    c->tc = tc;
}

static void
ckpt_init(ckpt *c, const spec *s)
{
    memset(c, 0, sizeof(*c));
    c->s = *s;
    c->prefix = (!s->next && !s->text_only) ? "model.language_model."
                                            : "model.";
    snprintf(c->dir, sizeof(c->dir), "%s/ck%d", root_dir, n_dirs++);
    assert_int_equal(mkdir(c->dir, 0700), 0);
    build_tensors(c);
    build_config(c);
}

static void
ckpt_free(ckpt *c)
{
    cJSON_Delete(c->cfg);
}

static void
write_file(const char *dir, const char *name, const void *buf, size_t len)
{
    char  path[800];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
}

static void
write_str(const char *dir, const char *name, const char *text)
{
    write_file(dir, name, text, strlen(text));
}

static uint16_t
to_bf16(float f)
{
    uint32_t b;

    memcpy(&b, &f, 4);
    return (uint16_t) (b >> 16);        /* exact for our values */
}

static uint16_t
to_f16(float f)
{
    double m;
    int    e;

    if (f == 0.0f) {
        return 0;
    }
    m = frexp(fabs(f), &e);             /* |f| = m 2^e, m in [0.5, 1) */
    return (uint16_t) ((f < 0 ? 0x8000 : 0) | ((e - 1 + 15) << 10)
                       | (int) ((2 * m - 1) * 1024));
}

static size_t
esize(const char *dtype)
{
    if (strcmp(dtype, "F32") == 0 || strcmp(dtype, "I32") == 0) {
        return 4;
    }
    if (strcmp(dtype, "I64") == 0) {
        return 8;
    }
    return 2;
}

static uint64_t
numel(const tdesc *t)
{
    uint64_t n = 1;
    int      i;

    for (i = 0; i < t->ndim; i++) {
        n *= (uint64_t) t->shape[i];
    }
    return n;
}

/* one safetensors file holding the tensors with index % nshard == shard */
static void
write_shard(ckpt *c, const char *fname, int shard, int nshard)
{
    cJSON    *hdr = cJSON_CreateObject(), *e, *a;
    uint8_t  *data = NULL, *buf;
    size_t    off = 0, hl;
    char     *h;
    int       i, k;

    e = cJSON_AddObjectToObject(hdr, "__metadata__");
    cJSON_AddStringToObject(e, "format", "pt");
    for (i = shard; i < c->n; i += nshard) {
        tdesc   *t = &c->t[i];
        uint64_t n = numel(t), j;
        size_t   es = esize(t->dtype);

        data = realloc(data, off + n * es);
        assert_non_null(data);
        for (j = 0; j < n; j++) {
            float    v = val(t->name, j, c->s.iota);
            uint8_t *p = data + off + j * es;
            uint16_t h16;

            if (strcmp(t->dtype, "F32") == 0) {
                memcpy(p, &v, 4);
            } else if (strcmp(t->dtype, "BF16") == 0) {
                h16 = to_bf16(v);
                memcpy(p, &h16, 2);
            } else if (strcmp(t->dtype, "F16") == 0) {
                h16 = to_f16(v);
                memcpy(p, &h16, 2);
            } else {
                memset(p, 0, es);
            }
        }
        e = cJSON_AddObjectToObject(hdr, t->name);
        cJSON_AddStringToObject(e, "dtype", t->dtype);
        a = cJSON_AddArrayToObject(e, "shape");
        for (k = 0; k < t->ndim; k++) {
            cJSON_AddItemToArray(a, cJSON_CreateNumber((double) t->shape[k]));
        }
        a = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double) off));
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double) (off + n * es)));
        off += n * es;
    }
    h = cJSON_PrintUnformatted(hdr);
    hl = strlen(h);
    buf = malloc(8 + hl + off + 1);
    assert_non_null(buf);
    for (k = 0; k < 8; k++) {
        buf[k] = (uint8_t) ((uint64_t) hl >> (8 * k));
    }
    memcpy(buf + 8, h, hl);
    if (off) {
        memcpy(buf + 8 + hl, data, off);
    }
    write_file(c->dir, fname, buf, 8 + hl + off);
    free(buf);
    free(h);
    free(data);
    cJSON_Delete(hdr);
}

static void
ckpt_write(ckpt *c)
{
    char *s = cJSON_Print(c->cfg);
    int   i;

    write_file(c->dir, "config.json", s, strlen(s));
    free(s);
    if (!c->s.shards) {
        write_shard(c, "model.safetensors", 0, 1);
        return;
    }
    write_shard(c, "model-00001-of-00002.safetensors", 0, 2);
    write_shard(c, "model-00002-of-00002.safetensors", 1, 2);
    {
        cJSON *idx = cJSON_CreateObject(), *wm;

        cJSON_AddObjectToObject(idx, "metadata");
        wm = cJSON_AddObjectToObject(idx, "weight_map");
        for (i = 0; i < c->n; i++) {
            cJSON_AddStringToObject(wm, c->t[i].name, i % 2
                                    ? "model-00002-of-00002.safetensors"
                                    : "model-00001-of-00002.safetensors");
        }
        s = cJSON_Print(idx);
        write_file(c->dir, "model.safetensors.index.json", s, strlen(s));
        free(s);
        cJSON_Delete(idx);
    }
}

/* the loaded buffer p holds exactly the values written for tensor suffix,
 * starting at element first */
static void
check_vals(ckpt *c, const char *suffix, uint64_t first, const float *p,
           uint64_t n)
{
    tdesc   *t = find(c, suffix);
    uint64_t j;

    assert_non_null(p);
    assert_true(first + n <= numel(t));
    for (j = 0; j < n; j++) {
        if (p[j] != val(t->name, first + j, c->s.iota)) {
            fail_msg("%s[%llu] = %g, wrote %g", t->name,
                     (unsigned long long) (first + j), p[j],
                     val(t->name, first + j, c->s.iota));
        }
    }
}

static void
check_all(ckpt *c, const char *suffix, const float *p)
{
    check_vals(c, suffix, 0, p, numel(find(c, suffix)));
}

static size_t
text_bytes(ckpt *c)
{
    size_t n = 0;
    int    i;

    for (i = 0; i < c->n; i++) {
        n += c->t[i].extra ? 0 : numel(&c->t[i]) * 4;
    }
    return n;
}

static pic_model *
load_ok(ckpt *c)
{
    pic_model *m;

    ckpt_write(c);
    m = pic_model_load_as(c->dir, PIC_WEIGHTS_F32, err, sizeof(err));
    if (m == NULL) {
        fail_msg("load failed: %s", err);
    }
    return m;
}

static void
load_fails(ckpt *c, ...)
{
    pic_model  *m;
    const char *s;
    va_list     ap;

    ckpt_write(c);
    err[0] = '\0';
    m = pic_model_load(c->dir, err, sizeof(err));
    if (m != NULL) {
        pic_model_free(m);
        fail_msg("%s loaded but should not", c->dir);
    }
    if (getenv("PIC_TEST_VERBOSE")) {
        print_message("  error: %s\n", err);
    }
    va_start(ap, c);
    while ((s = va_arg(ap, const char *)) != NULL) {
        if (strstr(err, s) == NULL) {
            va_end(ap);
            fail_msg("error '%s' lacks '%s'", err, s);
        }
    }
    va_end(ap);
}

static int
group_setup(void **state)
{
    snprintf(root_dir, sizeof(root_dir), "/tmp/pic_load_test.XXXXXX");
    return mkdtemp(root_dir) ? 0 : -1;
}

static int
group_teardown(void **state)
{
    char cmd[600];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* --- whole checkpoints --- */

static void
test_qwen35_wrapper_dense_tied(void **state)
{
    spec       s = spec_default();
    ckpt       c;
    pic_model *m;
    pic_config *cf;

    s.tie = 1;
    s.eos = 15;
    s.extras = 1;                   /* visual (I64) and mtp tensors skipped */
    ckpt_init(&c, &s);
    m = load_ok(&c);
    cf = &m->cfg;

    assert_int_equal(cf->arch, PIC_ARCH_QWEN3_5);
    assert_string_equal(cf->model_type, "qwen3_5");
    assert_int_equal(cf->hidden, 8);
    assert_int_equal(cf->n_layers, 4);
    assert_int_equal(cf->vocab, 16);
    assert_int_equal(cf->intermediate, 12);
    assert_int_equal(cf->n_q_heads, 2);
    assert_int_equal(cf->n_kv_heads, 1);
    assert_int_equal(cf->head_dim, 8);
    assert_int_equal(cf->rotary_dim, 2);            /* 8 * 0.25 */
    assert_true(cf->rope_theta == 1e7f);
    assert_true(cf->rms_eps == 1e-6f);
    assert_int_equal(cf->lin_k_heads, 2);
    assert_int_equal(cf->lin_v_heads, 4);
    assert_int_equal(cf->lin_k_dim, 4);
    assert_int_equal(cf->lin_v_dim, 2);
    assert_int_equal(cf->conv_kernel, 4);
    assert_int_equal(cf->n_experts, 0);
    assert_int_equal(cf->max_position, 4096);
    assert_int_equal(cf->tie_embeddings, 1);
    assert_int_equal(cf->eos_ids[0], 15);
    assert_int_equal(cf->eos_ids[1], -1);
    assert_int_equal(cf->layer_type[0], PIC_LAYER_LINEAR);
    assert_int_equal(cf->layer_type[2], PIC_LAYER_LINEAR);
    assert_int_equal(cf->layer_type[3], PIC_LAYER_FULL);
    assert_int_equal(cf->layer_is_moe[0] | cf->layer_is_moe[3], 0);

    assert_ptr_equal(m->w.lm_head.data, m->w.embed.data);
    check_all(&c, "model.language_model.embed_tokens.weight", m->w.embed.data);
    check_all(&c, "model.language_model.norm.weight", m->w.final_norm);
    check_all(&c, "layers.0.linear_attn.in_proj_qkv.weight",
              m->w.layers[0].in_qkv.data);
    check_all(&c, "layers.0.linear_attn.in_proj_z.weight",
              m->w.layers[0].in_z.data);
    check_all(&c, "layers.1.linear_attn.in_proj_b.weight",
              m->w.layers[1].in_b);
    check_all(&c, "layers.1.linear_attn.in_proj_a.weight",
              m->w.layers[1].in_a);
    check_all(&c, "layers.2.linear_attn.conv1d.weight",
              m->w.layers[2].conv_w);
    check_all(&c, "layers.2.linear_attn.dt_bias", m->w.layers[2].dt_bias);
    check_all(&c, "layers.2.linear_attn.A_log", m->w.layers[2].A_log);
    check_all(&c, "layers.2.linear_attn.norm.weight", m->w.layers[2].gdn_norm);
    check_all(&c, "layers.2.linear_attn.out_proj.weight",
              m->w.layers[2].out_proj.data);
    check_all(&c, "layers.3.self_attn.q_proj.weight", m->w.layers[3].wq.data);
    check_all(&c, "layers.3.self_attn.k_proj.weight", m->w.layers[3].wk.data);
    check_all(&c, "layers.3.self_attn.v_proj.weight", m->w.layers[3].wv.data);
    check_all(&c, "layers.3.self_attn.o_proj.weight", m->w.layers[3].wo.data);
    check_all(&c, "layers.3.self_attn.q_norm.weight", m->w.layers[3].q_norm);
    check_all(&c, "layers.3.self_attn.k_norm.weight", m->w.layers[3].k_norm);
    check_all(&c, "layers.3.input_layernorm.weight",
              m->w.layers[3].input_norm);
    check_all(&c, "layers.3.post_attention_layernorm.weight",
              m->w.layers[3].post_norm);
    check_all(&c, "layers.3.mlp.gate_proj.weight", m->w.layers[3].mlp_gate.data);
    check_all(&c, "layers.3.mlp.up_proj.weight", m->w.layers[3].mlp_up.data);
    check_all(&c, "layers.3.mlp.down_proj.weight", m->w.layers[3].mlp_down.data);
    assert_null(m->w.layers[0].wq.data);
    assert_null(m->w.layers[3].in_qkv.data);
    assert_null(m->w.layers[0].router);
    assert_int_equal(m->weight_bytes, text_bytes(&c));
    assert_string_equal(m->dir, c.dir);
    pic_model_free(m);
    ckpt_free(&c);
}

static void
test_qwen3next_top_level_moe_untied(void **state)
{
    spec               s = spec_default();
    ckpt               c;
    pic_model         *m;
    pic_layer_weights *l;
    char               n[96];
    int                i, e;

    s.next = 1;
    s.moe_mask = 0xf;
    s.rope_style = 1;               /* legacy top-level rope_theta/prf */
    ckpt_init(&c, &s);
    m = load_ok(&c);

    assert_int_equal(m->cfg.arch, PIC_ARCH_QWEN3_NEXT);
    assert_true(m->cfg.rope_theta == 5e6f);
    assert_int_equal(m->cfg.rotary_dim, 4);         /* 8 * 0.5 */
    assert_int_equal(m->cfg.n_experts, 3);
    assert_int_equal(m->cfg.n_experts_per_tok, 2);
    assert_int_equal(m->cfg.moe_intermediate, 4);
    assert_int_equal(m->cfg.shared_intermediate, 6);
    assert_int_equal(m->cfg.norm_topk_prob, 1);
    assert_int_equal(m->cfg.tie_embeddings, 0);
    assert_ptr_not_equal(m->w.lm_head.data, m->w.embed.data);
    check_all(&c, "lm_head.weight", m->w.lm_head.data);
    check_all(&c, "model.embed_tokens.weight", m->w.embed.data);
    for (i = 0; i < 4; i++) {
        l = &m->w.layers[i];
        assert_int_equal(m->cfg.layer_is_moe[i], 1);
        assert_null(l->mlp_gate.data);
        snprintf(n, sizeof(n), "layers.%d.mlp.gate.weight", i);
        check_all(&c, n, l->router);
        for (e = 0; e < 3; e++) {
            snprintf(n, sizeof(n), "layers.%d.mlp.experts.%d.gate_proj.weight",
                     i, e);
            check_all(&c, n, l->experts[e].gate.data);
            snprintf(n, sizeof(n), "layers.%d.mlp.experts.%d.up_proj.weight",
                     i, e);
            check_all(&c, n, l->experts[e].up.data);
            snprintf(n, sizeof(n), "layers.%d.mlp.experts.%d.down_proj.weight",
                     i, e);
            check_all(&c, n, l->experts[e].down.data);
        }
        snprintf(n, sizeof(n), "layers.%d.mlp.shared_expert.gate_proj.weight",
                 i);
        check_all(&c, n, l->shared.gate.data);
        snprintf(n, sizeof(n), "layers.%d.mlp.shared_expert.up_proj.weight",
                 i);
        check_all(&c, n, l->shared.up.data);
        snprintf(n, sizeof(n), "layers.%d.mlp.shared_expert.down_proj.weight",
                 i);
        check_all(&c, n, l->shared.down.data);
        snprintf(n, sizeof(n), "layers.%d.mlp.shared_expert_gate.weight", i);
        check_all(&c, n, l->shared_gate);
    }
    assert_int_equal(m->weight_bytes, text_bytes(&c));
    pic_model_free(m);
    ckpt_free(&c);
}

/*
 * Qwen3-Next in_proj_qkvz with Hk=2, r=Hv/Hk=2, dk=4, dv=2: two blocks of
 * 16 rows [q (4) | k (4) | v (2 heads x 2) | z (2 heads x 2)]; in_proj_ba
 * two blocks of 4 rows [b (2) | a (2)].  Each element holds its flat index,
 * so row R of a source tensor holds R*H .. R*H+H-1.
 */
static void
test_qwen3next_qkvz_ba_unpack(void **state)
{
    static const int qkv_src[] = {
        0, 1, 2, 3, 16, 17, 18, 19,         /* q: head 0, head 1 */
        4, 5, 6, 7, 20, 21, 22, 23,         /* k */
        8, 9, 10, 11, 24, 25, 26, 27,       /* v: heads 0,1 | 2,3 */
    };
    static const int z_src[] = { 12, 13, 14, 15, 28, 29, 30, 31 };
    static const int b_src[] = { 0, 1, 4, 5 };
    static const int a_src[] = { 2, 3, 6, 7 };
    spec       s = spec_default();
    ckpt       c;
    pic_model *m;
    int        L, row, col, H = 8;

    s.next = 1;
    s.iota = 1;
    ckpt_init(&c, &s);
    m = load_ok(&c);
    for (L = 0; L < 3; L++) {
        const pic_layer_weights *l = &m->w.layers[L];

        for (row = 0; row < 24; row++) {
            for (col = 0; col < H; col++) {
                assert_true(((const float *) l->in_qkv.data)[row * H + col]
                            == (float) (qkv_src[row] * H + col));
            }
        }
        for (row = 0; row < 8; row++) {
            for (col = 0; col < H; col++) {
                assert_true(((const float *) l->in_z.data)[row * H + col]
                            == (float) (z_src[row] * H + col));
            }
        }
        for (row = 0; row < 4; row++) {
            for (col = 0; col < H; col++) {
                assert_true(l->in_b[row * H + col]
                            == (float) (b_src[row] * H + col));
                assert_true(l->in_a[row * H + col]
                            == (float) (a_src[row] * H + col));
            }
        }
    }
    /* conv1d [C,1,K] is (C,K) as stored; q_proj stays interleaved */
    check_all(&c, "layers.0.linear_attn.conv1d.weight",
              m->w.layers[0].conv_w);
    check_all(&c, "layers.3.self_attn.q_proj.weight", m->w.layers[3].wq.data);
    assert_int_equal(m->weight_bytes, text_bytes(&c));
    pic_model_free(m);
    ckpt_free(&c);
}

static void
check_fused_experts(ckpt *c, const pic_model *m)
{
    int64_t H = 8, Ie = 4;
    int     i, e;
    char    gu[96], dn[96];

    for (i = 0; i < 4; i++) {
        const pic_layer_weights *l = &m->w.layers[i];

        snprintf(gu, sizeof(gu), "layers.%d.mlp.experts.gate_up_proj", i);
        snprintf(dn, sizeof(dn), "layers.%d.mlp.experts.down_proj", i);
        for (e = 0; e < 3; e++) {
            check_vals(c, gu, e * 2 * Ie * H, l->experts[e].gate.data, Ie * H);
            check_vals(c, gu, e * 2 * Ie * H + Ie * H, l->experts[e].up.data,
                       Ie * H);
            check_vals(c, dn, e * H * Ie, l->experts[e].down.data, H * Ie);
        }
    }
}

static void
test_qwen35_moe_fused_experts(void **state)
{
    spec       s = spec_default();
    ckpt       c;
    pic_model *m;

    s.moe_mask = 0xf;
    s.fused = 1;
    s.dtype = "BF16";
    s.eos = 3;
    ckpt_init(&c, &s);
    /* a top-level eos too, and a tokenizer naming the chat stop tokens */
    cJSON_AddNumberToObject(c.cfg, "eos_token_id", 5);
    write_str(c.dir, "tokenizer.json",
              "{\"added_tokens\":[{\"id\":13,\"content\":\"<|im_start|>\"},"
              "{\"id\":14,\"content\":\"<|im_end|>\"},"
              "{\"id\":3,\"content\":\"<|endoftext|>\"}],\"model\":{}}");
    m = load_ok(&c);

    assert_string_equal(m->cfg.model_type, "qwen3_5_moe");
    assert_int_equal(m->cfg.norm_topk_prob, 1);
    assert_int_equal(m->cfg.n_experts, 3);
    assert_int_equal(m->cfg.eos_ids[0], 3);
    assert_int_equal(m->cfg.eos_ids[1], 5);
    assert_int_equal(m->cfg.eos_ids[2], 14);
    assert_int_equal(m->cfg.eos_ids[3], -1);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(m->cfg.layer_is_moe[i], 1);
    }
    check_fused_experts(&c, m);
    check_all(&c, "layers.1.mlp.shared_expert_gate.weight",
              m->w.layers[1].shared_gate);
    assert_int_equal(m->weight_bytes, text_bytes(&c));
    pic_model_free(m);
    ckpt_free(&c);
}

static void
test_bf16_and_f16_convert_exactly(void **state)
{
    static const char *dts[] = { "BF16", "F16" };
    int                k;

    for (k = 0; k < 2; k++) {
        spec       s = spec_default();
        ckpt       c;
        pic_model *m;

        s.dtype = dts[k];
        s.text_only = 1;            /* qwen3_5_text, prefix "model." */
        ckpt_init(&c, &s);
        m = load_ok(&c);
        assert_int_equal(m->cfg.arch, PIC_ARCH_QWEN3_5);
        check_all(&c, "model.embed_tokens.weight", m->w.embed.data);
        check_all(&c, "lm_head.weight", m->w.lm_head.data);
        check_all(&c, "layers.0.linear_attn.in_proj_qkv.weight",
                  m->w.layers[0].in_qkv.data);
        check_all(&c, "layers.3.self_attn.o_proj.weight", m->w.layers[3].wo.data);
        pic_model_free(m);
        ckpt_free(&c);
    }
}

static void
test_sharded_checkpoint(void **state)
{
    spec       s = spec_default();
    ckpt       c;
    pic_model *m;

    s.shards = 1;
    s.moe_mask = 0xf;
    s.fused = 1;
    s.extras = 1;
    ckpt_init(&c, &s);
    m = load_ok(&c);
    check_all(&c, "model.language_model.embed_tokens.weight", m->w.embed.data);
    check_all(&c, "lm_head.weight", m->w.lm_head.data);
    check_all(&c, "layers.2.linear_attn.out_proj.weight",
              m->w.layers[2].out_proj.data);
    check_fused_experts(&c, m);
    assert_int_equal(m->weight_bytes, text_bytes(&c));
    pic_model_free(m);
    ckpt_free(&c);
}

static void
test_layer_types_from_interval(void **state)
{
    spec       s = spec_default();
    ckpt       c;
    pic_model *m;

    s.full_every = 2;
    s.no_layer_types = 1;
    s.rope_style = 2;               /* rope_scaling {type, rope_theta} */
    ckpt_init(&c, &s);
    m = load_ok(&c);
    assert_int_equal(m->cfg.layer_type[0], PIC_LAYER_LINEAR);
    assert_int_equal(m->cfg.layer_type[1], PIC_LAYER_FULL);
    assert_int_equal(m->cfg.layer_type[2], PIC_LAYER_LINEAR);
    assert_int_equal(m->cfg.layer_type[3], PIC_LAYER_FULL);
    assert_true(m->cfg.rope_theta == 2e6f);
    assert_int_equal(m->cfg.rotary_dim, 8);
    check_all(&c, "layers.1.self_attn.q_proj.weight", m->w.layers[1].wq.data);
    pic_model_free(m);
    ckpt_free(&c);

    s.full_every = 4;               /* no key at all: default interval 4 */
    ckpt_init(&c, &s);
    m = load_ok(&c);
    assert_int_equal(m->cfg.layer_type[1], PIC_LAYER_LINEAR);
    assert_int_equal(m->cfg.layer_type[3], PIC_LAYER_FULL);
    pic_model_free(m);
    ckpt_free(&c);
}

static void
test_qwen3next_sparse_step_and_mlp_only(void **state)
{
    spec       s = spec_default();
    ckpt       c;
    pic_model *m;

    /* (i+1) % 2 == 0 -> layers 1, 3; layer 3 in mlp_only_layers */
    s.next = 1;
    s.sparse_step = 2;
    s.mlp_only = 3;
    s.moe_mask = 1 << 1;
    s.norm_topk = 0;
    ckpt_init(&c, &s);
    m = load_ok(&c);
    assert_int_equal(m->cfg.layer_is_moe[0], 0);
    assert_int_equal(m->cfg.layer_is_moe[1], 1);
    assert_int_equal(m->cfg.layer_is_moe[2], 0);
    assert_int_equal(m->cfg.layer_is_moe[3], 0);
    assert_int_equal(m->cfg.norm_topk_prob, 0);
    check_all(&c, "layers.3.mlp.down_proj.weight", m->w.layers[3].mlp_down.data);
    check_all(&c, "layers.1.mlp.experts.2.down_proj.weight",
              m->w.layers[1].experts[2].down.data);
    pic_model_free(m);
    ckpt_free(&c);
}

static void
test_head_dim_defaults_to_hidden_over_heads(void **state)
{
    spec       s = spec_default();
    ckpt       c;
    pic_model *m;

    s.no_head_dim = 1;
    s.d.hd = 4;                     /* hidden 8 / 2 heads */
    s.rope_style = 2;               /* partial_rotary_factor 1: rd 4 */
    ckpt_init(&c, &s);
    m = load_ok(&c);
    assert_int_equal(m->cfg.head_dim, 4);
    assert_int_equal(m->cfg.rotary_dim, 4);
    check_all(&c, "layers.3.self_attn.q_norm.weight", m->w.layers[3].q_norm);
    pic_model_free(m);
    ckpt_free(&c);
}

static void
test_fingerprint_tracks_every_input(void **state)
{
    spec       s = spec_default();
    ckpt       c;
    pic_model *m;
    uint64_t   fp0, fp;

    ckpt_init(&c, &s);
    m = load_ok(&c);
    fp0 = m->fingerprint;
    pic_model_free(m);
    m = load_ok(&c);                /* same bytes, same print */
    assert_true(m->fingerprint == fp0);
    pic_model_free(m);

    write_str(c.dir, "tokenizer.json", "{\"added_tokens\":[]}");
    m = pic_model_load(c.dir, err, sizeof(err));
    assert_non_null(m);
    fp = m->fingerprint;
    assert_true(fp != fp0);
    pic_model_free(m);

    c.s.iota = 1;                   /* every weight value changes */
    m = load_ok(&c);
    assert_true(m->fingerprint != fp && m->fingerprint != fp0);
    fp = m->fingerprint;
    pic_model_free(m);

    cJSON_AddStringToObject(c.cfg, "comment", "x");    /* config bytes */
    m = load_ok(&c);
    assert_true(m->fingerprint != fp);
    fp = m->fingerprint;
    pic_model_free(m);

    /* another arithmetic on the same bytes is another model for entries */
    m = pic_model_load_as(c.dir, PIC_WEIGHTS_BF16DOT, err, sizeof(err));
    assert_non_null(m);
    assert_true(m->fingerprint != fp && m->xbf16 && m->wtype == PIC_WTYPE_BF16);
    assert_true(m->w.lm_head.xbf16 && m->w.lm_head.type == PIC_WTYPE_BF16);
    assert_string_equal(pic_model_weights_name(m), "bf16dot");
    pic_model_free(m);
    ckpt_free(&c);
}

/* --- broken checkpoints --- */

static void
test_missing_tensor_named(void **state)
{
    spec s = spec_default();
    ckpt c;

    ckpt_init(&c, &s);
    drop(&c, "layers.2.linear_attn.A_log");
    load_fails(&c, "missing tensor",
               "'model.language_model.layers.2.linear_attn.A_log'", NULL);
    ckpt_free(&c);

    s.next = 1;
    s.moe_mask = 0xf;
    ckpt_init(&c, &s);
    drop(&c, "layers.1.mlp.experts.2.up_proj.weight");
    load_fails(&c, "'model.layers.1.mlp.experts.2.up_proj.weight'", NULL);
    ckpt_free(&c);

    s = spec_default();
    s.next = 1;
    ckpt_init(&c, &s);
    drop(&c, "layers.0.linear_attn.in_proj_ba.weight");
    load_fails(&c, "'model.layers.0.linear_attn.in_proj_ba.weight'", NULL);
    ckpt_free(&c);
}

static void
test_wrong_shape_named(void **state)
{
    spec s = spec_default();
    ckpt c;

    ckpt_init(&c, &s);
    find(&c, "layers.3.self_attn.q_proj.weight")->shape[0] = 30;
    load_fails(&c, "'model.language_model.layers.3.self_attn.q_proj.weight'",
               "shape [30, 8], expected [32, 8]", "model.safetensors", NULL);
    ckpt_free(&c);

    s.next = 1;                     /* the packed tensors are checked too */
    ckpt_init(&c, &s);
    find(&c, "layers.1.linear_attn.in_proj_qkvz.weight")->shape[0] = 31;
    load_fails(&c, "in_proj_qkvz", "expected [32, 8]", NULL);
    ckpt_free(&c);

    s = spec_default();
    s.moe_mask = 0xf;
    s.fused = 1;
    ckpt_init(&c, &s);
    find(&c, "layers.0.mlp.experts.down_proj")->shape[2] = 5;
    load_fails(&c, "mlp.experts.down_proj", "expected [3, 8, 4]", NULL);
    ckpt_free(&c);

    s = spec_default();
    ckpt_init(&c, &s);
    find(&c, "layers.0.linear_attn.conv1d.weight")->ndim = 2;
    load_fails(&c, "conv1d.weight", "expected [24, 1, 4]", NULL);
    ckpt_free(&c);
}

static void
test_untied_without_lm_head(void **state)
{
    spec s = spec_default();
    ckpt c;

    ckpt_init(&c, &s);
    drop(&c, "lm_head.weight");
    load_fails(&c, "'lm_head.weight'", "tie_word_embeddings", NULL);
    ckpt_free(&c);
}

static void
test_unsupported_dtype_in_used_tensor(void **state)
{
    spec s = spec_default();
    ckpt c;

    ckpt_init(&c, &s);
    strcpy(find(&c, "layers.0.linear_attn.dt_bias")->dtype, "I32");
    load_fails(&c, "'model.language_model.layers.0.linear_attn.dt_bias'",
               "I32", NULL);
    ckpt_free(&c);
}

static void
test_bad_files_in_directory(void **state)
{
    spec s = spec_default();
    ckpt c;
    char p[800];

    ckpt_init(&c, &s);
    ckpt_write(&c);
    /* config.json absent */
    snprintf(p, sizeof(p), "%s/config.json", c.dir);
    unlink(p);
    assert_null(pic_model_load(c.dir, err, sizeof(err)));
    assert_non_null(strstr(err, "config.json"));
    /* config.json not JSON */
    write_str(c.dir, "config.json", "{\"model_type\": ");
    assert_null(pic_model_load(c.dir, err, sizeof(err)));
    assert_non_null(strstr(err, "config.json"));
    /* tokenizer.json not JSON */
    ckpt_write(&c);
    write_str(c.dir, "tokenizer.json", "nope");
    assert_null(pic_model_load(c.dir, err, sizeof(err)));
    assert_non_null(strstr(err, "tokenizer.json"));
    snprintf(p, sizeof(p), "%s/tokenizer.json", c.dir);
    unlink(p);
    /* weights file truncated */
    write_file(c.dir, "model.safetensors", "\x08\0\0\0\0\0\0\0{}", 10);
    assert_null(pic_model_load(c.dir, err, sizeof(err)));
    assert_non_null(strstr(err, "model.safetensors"));
    /* no directory */
    assert_null(pic_model_load("/nonexistent/dir", err, sizeof(err)));
    assert_non_null(strstr(err, "/nonexistent/dir"));
    ckpt_free(&c);
}

typedef enum { SET_NUM, SET_STR, DEL, SET_RAW } op_kind;

typedef struct {
    const char *what;
    int         next;               /* 1: Qwen3-Next config, 0: wrapper */
    int         top;                /* act on the top-level object */
    op_kind     op;
    const char *key;
    double      num;
    const char *str;
    const char *want;               /* in the error */
    const char *del2;               /* another key to delete first */
} cfg_case;

static void
test_config_errors_named(void **state)
{
    static const cfg_case cases[] = {
        { "no hidden", 0, 0, DEL, "hidden_size", 0, NULL, "'hidden_size'", NULL },
        { "no layers", 1, 0, DEL, "num_hidden_layers", 0, NULL,
          "'num_hidden_layers'", NULL },
        { "no vocab", 0, 0, DEL, "vocab_size", 0, NULL, "'vocab_size'", NULL },
        { "no heads", 0, 0, DEL, "num_attention_heads", 0, NULL,
          "'num_attention_heads'", NULL },
        { "no lin dk", 1, 0, DEL, "linear_key_head_dim", 0, NULL,
          "'linear_key_head_dim'", NULL },
        { "no inter", 0, 0, DEL, "intermediate_size", 0, NULL,
          "'intermediate_size'", NULL },
        { "no text_config", 0, 1, DEL, "text_config", 0, NULL,
          "text_config", NULL },
        { "no model_type", 1, 1, DEL, "model_type", 0, NULL, "model_type", NULL },
        { "gpt2", 1, 1, SET_STR, "model_type", 0, "gpt2", "'gpt2' is not supported", NULL },
        { "hidden str", 0, 0, SET_STR, "hidden_size", 0, "8",
          "'hidden_size' is not a number", NULL },
        { "hidden 0", 0, 0, SET_NUM, "hidden_size", 0, NULL, "'hidden_size'", NULL },
        { "hidden frac", 0, 0, SET_NUM, "hidden_size", 8.5, NULL,
          "'hidden_size'", NULL },
        { "too many layers", 0, 0, SET_NUM, "num_hidden_layers", 129, NULL,
          "'num_hidden_layers'", NULL },
        { "Hv % Hk", 0, 0, SET_NUM, "linear_num_value_heads", 3, NULL,
          "linear_num_value_heads 3", NULL },
        { "Hq % Hkv", 1, 0, SET_NUM, "num_key_value_heads", 3, NULL,
          "num_key_value_heads 3", NULL },
        { "odd rotary", 0, 0, SET_RAW, "rope_parameters", 0,
          "{\"rope_theta\": 1e6, \"partial_rotary_factor\": 0.125}",
          "rotary dim 1", NULL },
        { "yarn", 0, 0, SET_RAW, "rope_parameters", 0,
          "{\"rope_type\": \"yarn\", \"factor\": 4}", "rope_type 'yarn'", NULL },
        { "neg theta", 1, 0, SET_RAW, "rope_parameters", 0,
          "{\"rope_theta\": -5}", "rope_theta", NULL },
        { "layer_types short", 0, 0, SET_RAW, "layer_types", 0,
          "[\"full_attention\"]", "'layer_types'", NULL },
        { "layer_types bad", 0, 0, SET_RAW, "layer_types", 0,
          "[\"full_attention\", 3, \"x\", \"full_attention\"]",
          "layer_types[1]", NULL },
        { "interval 0", 0, 0, SET_NUM, "full_attention_interval", 0, NULL,
          "'full_attention_interval'", "layer_types" },
        { "eos str", 0, 0, SET_STR, "eos_token_id", 0, "x", "eos_token_id", NULL },
        { "eos list", 0, 0, SET_RAW, "eos_token_id", 0, "[1, -2]",
          "eos_token_id", NULL },
        { "gelu", 1, 0, SET_STR, "hidden_act", 0, "gelu", "hidden_act", NULL },
        { "bias", 1, 0, SET_RAW, "attention_bias", 0, "true",
          "attention_bias", NULL },
        { "sparse step 0", 1, 0, SET_NUM, "decoder_sparse_step", 0, NULL,
          "'decoder_sparse_step'", NULL },
        { "topk > E", 1, 0, SET_NUM, "num_experts_per_tok", 4, NULL,
          "'num_experts_per_tok'", NULL },
        { "no moe inter", 1, 0, DEL, "moe_intermediate_size", 0, NULL,
          "'moe_intermediate_size'", NULL },
        { "tie str", 0, 1, SET_STR, "tie_word_embeddings", 0, "yes",
          "tie_word_embeddings", NULL },
        { "not object", 0, 1, SET_RAW, "text_config", 0, "[]",
          "text_config", NULL },
    };
    size_t k;

    for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const cfg_case *t = &cases[k];
        spec            s = spec_default();
        ckpt            c;
        cJSON          *obj;

        s.next = t->next;
        s.moe_mask = t->next ? 0xf : 0;
        ckpt_init(&c, &s);
        obj = t->top ? c.cfg : c.tc;
        cJSON_DeleteItemFromObjectCaseSensitive(obj, t->key);
        if (t->op == SET_NUM) {
            cJSON_AddNumberToObject(obj, t->key, t->num);
        } else if (t->op == SET_STR) {
            cJSON_AddStringToObject(obj, t->key, t->str);
        } else if (t->op == SET_RAW) {
            cJSON_AddItemToObject(obj, t->key, cJSON_Parse(t->str));
        }
        if (t->del2 != NULL) {
            cJSON_DeleteItemFromObjectCaseSensitive(obj, t->del2);
        }
        if (getenv("PIC_TEST_VERBOSE")) {
            print_message("  case: %s\n", t->what);
        }
        load_fails(&c, "config.json", t->want, NULL);
        ckpt_free(&c);
    }
}

/* --- DeepSeek-V2 / V3 (arch_deepseek.c) --- */

/* The fixture's config.json with key (in the top object) replaced by the
 * JSON raw (NULL: deleted), parsed; the parse's return and err. */
static int
deepseek_parse(const char *fixture, const char *key, const char *raw, pic_config *cfg,
               char *err, size_t errlen)
{
    char   path[512];
    FILE  *f;
    char   buf[1 << 14];
    size_t n;
    cJSON *root;
    char  *txt;
    int    rc;

    snprintf(path, sizeof(path), "%s/%s/config.json",
             getenv("PIC_FIXTURES") ? getenv("PIC_FIXTURES") : "tests/fixtures/models",
             fixture);
    f = fopen(path, "rb");
    assert_non_null(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    root = cJSON_Parse(buf);
    assert_non_null(root);
    if (key != NULL) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, key);
        if (raw != NULL) {
            cJSON_AddItemToObject(root, key, cJSON_Parse(raw));
        }
    }
    txt = cJSON_PrintUnformatted(root);
    rc = pic_config_parse(cfg, txt, strlen(txt), path, err, errlen);
    free(txt);
    cJSON_Delete(root);
    return rc;
}

/* The keys land where the forward reads them: latent cache geometry, YaRN's
 * frequencies, attention factor and softmax scale (transformers' formulas,
 * in double here), the routers' rules; settings the layout does not
 * implement are refused by name. */
static void
test_deepseek_configs(void **state)
{
    pic_config c;
    char       err[512];

    assert_int_equal(deepseek_parse("tiny-deepseek-v2", NULL, NULL, &c, err, sizeof(err)), 0);
    assert_true(c.mla && c.arch == PIC_ARCH_DEEPSEEK_V2 && c.q_lora_rank == 0);
    assert_int_equal(pic_config_cache_heads(&c), 1);
    assert_int_equal(pic_config_cache_kdim(&c), 8 + 32);
    assert_int_equal(pic_config_cache_vdim(&c), 0);
    assert_int_equal(c.mla_hdp, 24);
    assert_int_equal(c.rope.dim, 8);
    /* yarn factor 4, mscale 1, mscale_all_dim 0.5 */
    double m1 = 0.1 * 1.0 * log(4.0) + 1.0, mh = 0.1 * 0.5 * log(4.0) + 1.0;
    assert_true(fabs(c.rope_attn_factor - m1 / mh) < 1e-6);
    assert_true(fabs(c.mla_scale - mh * mh / sqrt(24.0)) < 1e-6);
    /* correction range [0, 3] of dim 8 at 1024 positions: pair 0 original, pair
     * 3 divided by the factor, pairs 1-2 blended */
    double f0 = 1.0, f3 = pow(1e4, -6.0 / 8.0) / 4.0;
    assert_true(fabs(c.rope.inv_freq[0] - f0) < 1e-6);
    assert_true(fabs(c.rope.inv_freq[3] - f3) < 1e-7);
    assert_true(c.moe_grouped && !c.moe_sigmoid && !c.norm_topk_prob);
    assert_true(c.moe_groups == 4 && c.moe_topk_groups == 2 && fabsf(c.moe_scale - 1.5f) < 1e-6);
    assert_true(!c.layer_is_moe[0] && c.layer_is_moe[1] && c.layer_is_moe[2]);
    assert_int_equal(c.shared_intermediate, 24);

    assert_int_equal(deepseek_parse("tiny-deepseek-v3", NULL, NULL, &c, err, sizeof(err)), 0);
    assert_true(c.mla && c.arch == PIC_ARCH_DEEPSEEK_V3 && c.q_lora_rank == 24);
    assert_true(c.moe_sigmoid && c.norm_topk_prob && c.mla_interleave);
    assert_int_equal(c.mla_hdp, 32);
    assert_true(c.rope_attn_factor == 1.0f && fabs(c.mla_scale - 1.0 / sqrt(24.0)) < 1e-7);

    static const struct {
        const char *fixture, *key, *raw, *want;
    } bad[] = {
        { "tiny-deepseek-v2", "topk_method", "\"noaux_tc\"", "topk_method 'noaux_tc'" },
        { "tiny-deepseek-v2", "rope_parameters",
          "{\"rope_type\": \"linear\", \"factor\": 2, \"rope_theta\": 1e4}",
          "rope_type 'linear'" },
        { "tiny-deepseek-v2", "rope_parameters",
          "{\"rope_type\": \"yarn\", \"factor\": 2, \"rope_theta\": 1e4}",
          "original_max_position_embeddings" },
        { "tiny-deepseek-v3", "attention_bias", "true", "attention_bias" },
        { "tiny-deepseek-v3", "moe_layer_freq", "2", "moe_layer_freq" },
        { "tiny-deepseek-v3", "qk_rope_head_dim", "7", "qk_rope_head_dim 7" },
        { "tiny-deepseek-v3", "kv_lora_rank", NULL, "'kv_lora_rank'" },
        { "tiny-deepseek-v3", "n_group", "3", "do not make whole groups" },
        { "tiny-deepseek-v3", "topk_group", "9", "'topk_group'" },
        { "tiny-deepseek-v3", "q_lora_rank", "\"x\"", "'q_lora_rank'" },
        { "tiny-deepseek-v3", "scoring_func", "\"softmax\"", "'scoring_func' softmax" },
        { "tiny-deepseek-v2", "scoring_func", "\"sigmoid\"", "'scoring_func' sigmoid" },
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        err[0] = '\0';
        assert_int_equal(deepseek_parse(bad[k].fixture, bad[k].key, bad[k].raw, &c, err,
                                        sizeof(err)), -1);
        if (strstr(err, bad[k].want) == NULL) {
            print_message("%s=%s: '%s' lacks '%s'\n", bad[k].key, bad[k].raw, err,
                          bad[k].want);
            fail();
        }
    }
}

/* --- the project's committed tiny checkpoints (make_models.py) --- */

static void
test_loads_committed_fixture_models(void **state)
{
    static const struct {
        const char *name;
        int         arch, n_layers, n_experts, head_dim, rotary_dim, tie;
        const char *types;          /* L linear, F full; M marks MoE */
    } want[] = {
        { "tiny-qwen35", PIC_ARCH_QWEN3_5, 4, 0, 32, 8, 1, "L.L.L.F." },
        { "tiny-qwen35-moe", PIC_ARCH_QWEN3_5, 4, 8, 32, 8, 0, "LMLMLMFM" },
        { "tiny-qwen3next", PIC_ARCH_QWEN3_NEXT, 6, 8, 32, 8, 0,
          "L.LML.F.L.FM" },
        { "tiny-realheads", PIC_ARCH_QWEN3_5, 3, 0, 256, 64, 1, "L.L.F." },
        /* Mamba2 hybrids: L here a Mamba2 layer */
        { "tiny-bamba", PIC_ARCH_BAMBA, 4, 0, 16, 8, 1, "L.L.F.L." },
        { "tiny-granite-h", PIC_ARCH_GRANITEMOEHYBRID, 5, 4, 16, 16, 1, "LMFMLMLMFM" },
        { "tiny-granite-h-dense", PIC_ARCH_GRANITEMOEHYBRID, 4, 0, 16, 16, 1, "L.L.F.L." },
    };
    const char *base = getenv("PIC_FIXTURES");
    char        dir[512];
    size_t      k;
    int         i, found = 0;

    if (base == NULL) {
        base = "tests/fixtures/models";
    }
    for (k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
        pic_model *m;
        struct stat sb;

        snprintf(dir, sizeof(dir), "%s/%s", base, want[k].name);
        if (stat(dir, &sb) != 0) {
            continue;
        }
        found++;
        m = pic_model_load(dir, err, sizeof(err));
        if (m == NULL) {
            fail_msg("%s: %s", dir, err);
        }
        assert_int_equal(m->cfg.arch, want[k].arch);
        assert_int_equal(m->cfg.n_layers, want[k].n_layers);
        assert_int_equal(m->cfg.n_experts, want[k].n_experts);
        assert_int_equal(m->cfg.head_dim, want[k].head_dim);
        assert_int_equal(m->cfg.rotary_dim, want[k].rotary_dim);
        assert_int_equal(m->cfg.tie_embeddings, want[k].tie);
        assert_int_equal(m->w.lm_head.data == m->w.embed.data, want[k].tie);
        for (i = 0; i < m->cfg.n_layers; i++) {
            assert_int_equal(m->cfg.layer_type[i] == PIC_LAYER_FULL,
                             want[k].types[2 * i] == 'F');
            assert_true(m->cfg.layer_type[i] == PIC_LAYER_FULL
                        || m->cfg.layer_type[i] == (m->cfg.ssm_heads > 0 ? PIC_LAYER_MAMBA2
                                                                        : PIC_LAYER_LINEAR));
            assert_int_equal(m->cfg.layer_is_moe[i],
                             want[k].types[2 * i + 1] == 'M');
        }
        assert_true(m->weight_bytes > 0);
        assert_true(m->fingerprint != 0);
        pic_model_free(m);
    }
    if (found == 0) {
        skip();
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen35_wrapper_dense_tied),
        cmocka_unit_test(test_qwen3next_top_level_moe_untied),
        cmocka_unit_test(test_qwen3next_qkvz_ba_unpack),
        cmocka_unit_test(test_qwen35_moe_fused_experts),
        cmocka_unit_test(test_bf16_and_f16_convert_exactly),
        cmocka_unit_test(test_sharded_checkpoint),
        cmocka_unit_test(test_layer_types_from_interval),
        cmocka_unit_test(test_qwen3next_sparse_step_and_mlp_only),
        cmocka_unit_test(test_head_dim_defaults_to_hidden_over_heads),
        cmocka_unit_test(test_fingerprint_tracks_every_input),
        cmocka_unit_test(test_missing_tensor_named),
        cmocka_unit_test(test_wrong_shape_named),
        cmocka_unit_test(test_untied_without_lm_head),
        cmocka_unit_test(test_unsupported_dtype_in_used_tensor),
        cmocka_unit_test(test_bad_files_in_directory),
        cmocka_unit_test(test_config_errors_named),
        cmocka_unit_test(test_loads_committed_fixture_models),
        cmocka_unit_test(test_deepseek_configs),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
