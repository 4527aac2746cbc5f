/*
 * gguf_model.c — a GGUF file as a checkpoint (gguf_model.h).
 */
#include "gguf_model.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "gguf_quant.h"

/* How one tensor is read: its GGUF bytes, its HF shape, and (Llama q/k)
 * the heads whose rows llama.cpp interleaved. */
typedef struct {
    const pic_gguf_tensor *gt;
    int64_t                rows, cols;  /* HF (rows, cols); 1-D: (1, n) */
    int                    heads;       /* > 0: rows un-permuted per head */
} gguf_src;

static void
gm_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int
pic_gguf_is_file(const char *path)
{
    unsigned char m[4];
    int           fd = open(path, O_RDONLY | O_CLOEXEC), ok;

    if (fd < 0) {
        return 0;
    }
    ok = read(fd, m, 4) == 4 && memcmp(m, "GGUF", 4) == 0;
    close(fd);
    return ok;
}

/* --- tensors --- */

/* The GGUF row holding HF row r of a q/k matrix: llama.cpp's converter
 * wrote row h·hd + a·hd/2 + b (a ∈ {0, 1}) at h·hd + 2b + a. */
static int64_t
gguf_row(const gguf_src *x, int64_t r)
{
    int64_t hd, h, i;

    if (x->heads <= 0) {
        return r;
    }
    hd = x->rows / x->heads;
    h = r / hd;
    i = r % hd;
    return h * hd + 2 * (i % (hd / 2)) + i / (hd / 2);
}

static int
gguf_read(const pic_st_tensor *t, uint64_t first, uint64_t n, float *dst, char *err,
          size_t errlen)
{
    const gguf_src *x = t->ext;
    int             ty = x->gt->type, bs = pic_ggml_block_size(ty);
    size_t          bb = pic_ggml_block_bytes(ty);
    size_t          row_bytes = (size_t) x->cols / (size_t) bs * bb;
    float          *row = NULL;
    uint64_t        done = 0;

    /* whole blocks in file order: straight through */
    if (x->heads <= 0 && first % (uint64_t) bs == 0 && n % (uint64_t) bs == 0) {
        if (pic_ggml_dequant(ty, x->gt->data + first / (uint64_t) bs * bb, dst, n) != 0) {
            gm_err(err, errlen, "%s: tensor '%s': cannot dequantize %s", t->file, t->name,
                   pic_ggml_type_name(ty));
            return -1;
        }
        /* the file's pages leave the resident set once converted (the
         * engine holds its own copy; a later read faults them back in) */
        pic_st_release(x->gt->data + first / (uint64_t) bs * bb, (size_t) (n / bs) * bb);
        return 0;
    }
    row = malloc((size_t) x->cols * sizeof(float));
    if (row == NULL) {
        gm_err(err, errlen, "%s: out of memory", t->file);
        return -1;
    }
    while (done < n) {
        uint64_t e = first + done, r = e / (uint64_t) x->cols, c = e % (uint64_t) x->cols;
        uint64_t k = (uint64_t) x->cols - c < n - done ? (uint64_t) x->cols - c : n - done;

        pic_ggml_dequant(ty, x->gt->data + (size_t) gguf_row(x, (int64_t) r) * row_bytes,
                         row, (size_t) x->cols);
        memcpy(dst + done, row + c, (size_t) k * sizeof(float));
        done += k;
        if (c + k == (uint64_t) x->cols) {
            pic_st_release(x->gt->data + (size_t) gguf_row(x, (int64_t) r) * row_bytes,
                           row_bytes);
        }
    }
    free(row);
    return 0;
}

/* llama.cpp's tensor names and transformers' for a layer's tensors. */
static const char *const gguf_layer_names[][2] = {
    { "attn_norm.weight", "input_layernorm.weight" },
    { "ffn_norm.weight", "post_attention_layernorm.weight" },
    { "attn_q.weight", "self_attn.q_proj.weight" },
    { "attn_k.weight", "self_attn.k_proj.weight" },
    { "attn_v.weight", "self_attn.v_proj.weight" },
    { "attn_output.weight", "self_attn.o_proj.weight" },
    { "attn_q.bias", "self_attn.q_proj.bias" },
    { "attn_k.bias", "self_attn.k_proj.bias" },
    { "attn_v.bias", "self_attn.v_proj.bias" },
    { "attn_output.bias", "self_attn.o_proj.bias" },
    { "attn_q_norm.weight", "self_attn.q_norm.weight" },
    { "attn_k_norm.weight", "self_attn.k_norm.weight" },
    { "ffn_gate.weight", "mlp.gate_proj.weight" },
    { "ffn_up.weight", "mlp.up_proj.weight" },
    { "ffn_down.weight", "mlp.down_proj.weight" },
};

/* The HF name of GGUF tensor name into out, or -1 (not a tensor we read). */
static int
gguf_hf_name(const char *name, char *out, size_t n)
{
    int layer, used = 0;

    if (strcmp(name, "token_embd.weight") == 0) {
        snprintf(out, n, "model.embed_tokens.weight");
        return 0;
    }
    if (strcmp(name, "output_norm.weight") == 0) {
        snprintf(out, n, "model.norm.weight");
        return 0;
    }
    if (strcmp(name, "output.weight") == 0) {
        snprintf(out, n, "lm_head.weight");
        return 0;
    }
    if (sscanf(name, "blk.%d.%n", &layer, &used) != 1 || used == 0 || layer < 0) {
        return -1;
    }
    for (size_t i = 0; i < sizeof(gguf_layer_names) / sizeof(gguf_layer_names[0]); i++) {
        if (strcmp(name + used, gguf_layer_names[i][0]) == 0) {
            snprintf(out, n, "model.layers.%d.%s", layer, gguf_layer_names[i][1]);
            return 0;
        }
    }
    return -1;
}

static int
gguf_tensors(pic_gguf_ckpt *c, const char *arch, int64_t n_head, int64_t n_kv, char *err,
             size_t errlen)
{
    size_t    nt = pic_gguf_tensor_count(c->g), len;
    gguf_src *src = calloc(nt ? nt : 1, sizeof(*src));
    char      hf[256];

    if (src == NULL) {
        gm_err(err, errlen, "%s: out of memory", pic_gguf_path(c->g));
        return -1;
    }
    const uint8_t *bytes = pic_gguf_bytes(c->g, &len);    /* sets len first */

    c->st = pic_st_new_view(pic_gguf_path(c->g), bytes, len);
    if (c->st == NULL) {
        free(src);
        gm_err(err, errlen, "%s: out of memory", pic_gguf_path(c->g));
        return -1;
    }
    /* the sources live as long as the view: kept in the ckpt */
    c->priv = src;
    for (size_t i = 0; i < nt; i++) {
        const pic_gguf_tensor *gt = pic_gguf_tensor_get(c->g, i);
        pic_st_tensor          t;
        gguf_src              *x = &src[i];
        size_t                 k = strlen(gt->name);

        if (gguf_hf_name(gt->name, hf, sizeof(hf)) != 0) {
            continue;           /* rope_freqs and the like: refused by the config */
        }
        if (gt->ndim > 2) {
            gm_err(err, errlen, "%s: tensor '%s' has %d dimensions", pic_gguf_path(c->g),
                   gt->name, gt->ndim);
            return -1;
        }
        x->gt = gt;
        x->cols = gt->ne[0];
        x->rows = gt->ndim == 2 ? gt->ne[1] : 1;
        /* llama.cpp interleaves Llama's q and k rows for its rotary layout */
        if (strcmp(arch, "llama") == 0 && gt->ndim == 2 && k > 13
            && (strcmp(gt->name + k - 13, "attn_q.weight") == 0
                || strcmp(gt->name + k - 13, "attn_k.weight") == 0))
        {
            x->heads = (int) (gt->name[k - 8] == 'q' ? n_head : n_kv);
            if (x->heads <= 0 || x->rows % (2 * x->heads) != 0) {
                gm_err(err, errlen, "%s: tensor '%s': %lld rows are not %d heads of even "
                       "size", pic_gguf_path(c->g), gt->name, (long long) x->rows,
                       x->heads);
                return -1;
            }
        }
        memset(&t, 0, sizeof(t));
        t.name = hf;
        t.dtype = PIC_ST_DTYPE_EXT;
        snprintf(t.dtype_name, sizeof(t.dtype_name), "%s", pic_ggml_type_name(gt->type));
        t.ndim = gt->ndim;
        t.shape[0] = gt->ndim == 2 ? gt->ne[1] : gt->ne[0];
        t.shape[1] = gt->ndim == 2 ? gt->ne[0] : 0;
        t.numel = gt->numel;
        t.nbytes = gt->nbytes;
        t.data = gt->data;
        t.read = gguf_read;
        t.ext = x;
        if (pic_st_add(c->st, &t) != 0) {
            gm_err(err, errlen, "%s: out of memory", pic_gguf_path(c->g));
            return -1;
        }
    }
    if (pic_st_seal(c->st) != 0) {
        gm_err(err, errlen, "%s: two tensors map to one name", pic_gguf_path(c->g));
        return -1;
    }
    return 0;
}

/* --- config.json --- */

/* {arch}.suffix as an integer into *v; -1 when absent (required: + err). */
static int
gguf_arch_int(const pic_gguf *g, const char *arch, const char *suffix, int64_t *v,
              int required, char *err, size_t errlen)
{
    char key[128];

    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    if (pic_gguf_get_i64(g, key, v) == 0) {
        return 0;
    }
    if (required) {
        gm_err(err, errlen, "%s: metadata '%s' is missing or not an integer",
               pic_gguf_path(g), key);
    }
    return -1;
}

static int
gguf_config(pic_gguf_ckpt *c, const char *arch, int64_t *n_head, int64_t *n_kv,
            char *err, size_t errlen)
{
    const pic_gguf *g = c->g;
    const pic_gguf_tensor *rf;
    cJSON          *o = cJSON_CreateObject();
    int64_t         hidden, layers, ffn, ctx, vocab, hd, rd, eos;
    double          theta = 10000.0, eps = 1e-5, factor;
    const char     *s;
    size_t          len;
    char            key[128];
    int             type;

    if (o == NULL) {
        gm_err(err, errlen, "out of memory");
        return -1;
    }
    if (gguf_arch_int(g, arch, "embedding_length", &hidden, 1, err, errlen) != 0
        || gguf_arch_int(g, arch, "block_count", &layers, 1, err, errlen) != 0
        || gguf_arch_int(g, arch, "feed_forward_length", &ffn, 1, err, errlen) != 0
        || gguf_arch_int(g, arch, "attention.head_count", n_head, 1, err, errlen) != 0)
    {
        cJSON_Delete(o);
        return -1;
    }
    if (gguf_arch_int(g, arch, "attention.head_count_kv", n_kv, 0, err, errlen) != 0) {
        *n_kv = *n_head;
    }
    if (gguf_arch_int(g, arch, "context_length", &ctx, 0, err, errlen) != 0) {
        ctx = 4096;
    }
    if (gguf_arch_int(g, arch, "vocab_size", &vocab, 0, err, errlen) != 0) {
        if (pic_gguf_get_arr(g, "tokenizer.ggml.tokens", &type, &len) != 0) {
            gm_err(err, errlen, "%s: no vocabulary size", pic_gguf_path(g));
            cJSON_Delete(o);
            return -1;
        }
        vocab = (int64_t) len;
    }
    snprintf(key, sizeof(key), "%s.rope.freq_base", arch);
    pic_gguf_get_f64(g, key, &theta);
    snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", arch);
    pic_gguf_get_f64(g, key, &eps);

    cJSON_AddStringToObject(o, "model_type", arch);
    cJSON_AddNumberToObject(o, "hidden_size", (double) hidden);
    cJSON_AddNumberToObject(o, "num_hidden_layers", (double) layers);
    cJSON_AddNumberToObject(o, "intermediate_size", (double) ffn);
    cJSON_AddNumberToObject(o, "num_attention_heads", (double) *n_head);
    cJSON_AddNumberToObject(o, "num_key_value_heads", (double) *n_kv);
    cJSON_AddNumberToObject(o, "max_position_embeddings", (double) ctx);
    cJSON_AddNumberToObject(o, "vocab_size", (double) vocab);
    cJSON_AddNumberToObject(o, "rope_theta", theta);
    cJSON_AddNumberToObject(o, "rms_norm_eps", eps);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddBoolToObject(o, "tie_word_embeddings",
                          pic_gguf_tensor_find(g, "output.weight") == NULL);
    if (gguf_arch_int(g, arch, "attention.key_length", &hd, 0, err, errlen) == 0) {
        cJSON_AddNumberToObject(o, "head_dim", (double) hd);
    } else {
        hd = *n_head > 0 ? hidden / *n_head : 0;
    }
    if (gguf_arch_int(g, arch, "rope.dimension_count", &rd, 0, err, errlen) == 0
        && rd != hd && hd > 0)
    {
        cJSON_AddNumberToObject(o, "partial_rotary_factor", (double) rd / (double) hd);
    }
    if (strcmp(arch, "llama") == 0 && pic_gguf_tensor_find(g, "blk.0.attn_q.bias") != NULL) {
        cJSON_AddBoolToObject(o, "attention_bias", 1);
    }
    if (strcmp(arch, "qwen3") == 0 && pic_gguf_tensor_find(g, "blk.0.attn_q.bias") != NULL) {
        cJSON_AddBoolToObject(o, "attention_bias", 1);
    }
    /* RoPE scaling: linear by its factor; per-frequency tables (llama3's
     * rope_freqs) and the rest are refused by name */
    snprintf(key, sizeof(key), "%s.rope.scaling.type", arch);
    if (pic_gguf_get_str(g, key, &s, &len) == 0 && !(len == 4 && memcmp(s, "none", 4) == 0)) {
        snprintf(key, sizeof(key), "%s.rope.scaling.factor", arch);
        if (len == 6 && memcmp(s, "linear", 6) == 0 && pic_gguf_get_f64(g, key, &factor) == 0) {
            cJSON *rs = cJSON_AddObjectToObject(o, "rope_scaling");

            cJSON_AddStringToObject(rs, "rope_type", "linear");
            cJSON_AddNumberToObject(rs, "factor", factor);
        } else {
            gm_err(err, errlen, "%s: RoPE scaling '%.*s' is not supported (linear)",
                   pic_gguf_path(g), (int) (len < 32 ? len : 32), s);
            cJSON_Delete(o);
            return -1;
        }
    }
    /* llama3 RoPE scaling as llama.cpp keeps it: a table of per-frequency
     * divisors (the config's arithmetic already done by the converter) */
    if ((rf = pic_gguf_tensor_find(g, "rope_freqs.weight")) != NULL) {
        cJSON *rs, *fa;

        if (rf->type != 0 || rf->ndim != 1 || rf->numel < 1 || rf->numel > 4096
            || rf->nbytes != rf->numel * sizeof(float))
        {
            gm_err(err, errlen, "%s: rope_freqs.weight must be one F32 row", pic_gguf_path(g));
            cJSON_Delete(o);
            return -1;
        }
        if (cJSON_GetObjectItemCaseSensitive(o, "rope_scaling") != NULL) {
            gm_err(err, errlen, "%s: both a RoPE scaling type and a rope_freqs table",
                   pic_gguf_path(g));
            cJSON_Delete(o);
            return -1;
        }
        rs = cJSON_AddObjectToObject(o, "rope_scaling");
        cJSON_AddStringToObject(rs, "rope_type", "freq_factors");
        fa = cJSON_AddArrayToObject(rs, "factors");
        for (uint64_t i = 0; fa != NULL && i < rf->numel; i++) {
            float f;

            memcpy(&f, rf->data + i * sizeof(float), sizeof(f));
            cJSON_AddItemToArray(fa, cJSON_CreateNumber((double) f));
        }
    }
    if (pic_gguf_get_i64(g, "tokenizer.ggml.eos_token_id", &eos) == 0) {
        cJSON_AddNumberToObject(o, "eos_token_id", (double) eos);
    }
    c->config = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (c->config == NULL) {
        gm_err(err, errlen, "out of memory");
        return -1;
    }
    c->config_len = strlen(c->config);
    return 0;
}

/* --- tokenizer.json --- */

/* The pre-tokenizers of the tokenizer.ggml.pre types this engine knows, as
 * tokenizer.json writes them (the checkpoints' own files). */
static const struct {
    const char *pre;
    const char *json;
} gguf_pretok[] = {
    { "smollm",
      "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\","
      "\"individual_digits\":true},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
      "\"trim_offsets\":true,\"use_regex\":true}]}" },
    { "gpt2",
      "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
      "\"use_regex\":true}" },
    { "default",
      "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
      "\"use_regex\":true}" },
    { "qwen2",
      "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
      "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?"
      "[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
      "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
      "\"add_prefix_space\":false,\"trim_offsets\":false,\"use_regex\":false}]}" },
    { "llama-bpe",
      "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
      "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?"
      "[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
      "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
      "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}" },
};

/* GGUF token types: 3 control, 4 user-defined (added tokens) */
#define GGUF_TOKEN_CONTROL      3
#define GGUF_TOKEN_USER_DEFINED 4

/* 1 when token i's string (s, len) equals an earlier token's in the open
 * table seen (mask + 1 slots of token index + 1, 0 empty); else records it. */
static int
gguf_seen(size_t *seen, size_t mask, const pic_gguf *g, size_t i, const char *s, size_t len)
{
    size_t h = (size_t) XXH3_64bits(s, len) & mask;

    for (; seen[h] != 0; h = (h + 1) & mask) {
        const char *o;
        size_t      olen;

        pic_gguf_arr_str(g, "tokenizer.ggml.tokens", seen[h] - 1, &o, &olen);
        if (olen == len && memcmp(o, s, len) == 0) {
            return 1;
        }
    }
    seen[h] = i + 1;
    return 0;
}

char *
pic_gguf_tokenizer_json(const pic_gguf *g, size_t *out_len, char *err, size_t errlen)
{
    const char *s, *pre_json = NULL;
    size_t      len, n_tok, n_merge, n_type = 0, mask, *seen = NULL;
    int         type;
    cJSON      *root = NULL, *model, *vocab, *merges, *added, *pre;
    char       *text = NULL, *buf = NULL;

    if (pic_gguf_get_str(g, "tokenizer.ggml.model", &s, &len) != 0
        || !(len == 4 && memcmp(s, "gpt2", 4) == 0))
    {
        gm_err(err, errlen, "%s: tokenizer.ggml.model is not 'gpt2' (byte-level BPE is "
               "the only tokenizer read)", pic_gguf_path(g));
        return NULL;
    }
    if (pic_gguf_get_str(g, "tokenizer.ggml.pre", &s, &len) != 0) {
        s = "default";
        len = 7;
    }
    for (size_t i = 0; i < sizeof(gguf_pretok) / sizeof(gguf_pretok[0]); i++) {
        if (strlen(gguf_pretok[i].pre) == len && memcmp(gguf_pretok[i].pre, s, len) == 0) {
            pre_json = gguf_pretok[i].json;
        }
    }
    if (pre_json == NULL) {
        gm_err(err, errlen, "%s: tokenizer.ggml.pre '%.*s' is not supported (smollm, gpt2, "
               "default, qwen2, llama-bpe)", pic_gguf_path(g), (int) (len < 40 ? len : 40), s);
        return NULL;
    }
    if (pic_gguf_get_arr(g, "tokenizer.ggml.tokens", &type, &n_tok) != 0
        || type != PIC_GGUF_STRING
        || pic_gguf_get_arr(g, "tokenizer.ggml.merges", &type, &n_merge) != 0
        || type != PIC_GGUF_STRING)
    {
        gm_err(err, errlen, "%s: tokenizer.ggml.tokens and .merges must be string arrays",
               pic_gguf_path(g));
        return NULL;
    }
    if (pic_gguf_get_arr(g, "tokenizer.ggml.token_type", &type, &n_type) != 0) {
        n_type = 0;
    }

    for (mask = 1; mask < 2 * n_tok; mask <<= 1) {
    }
    seen = calloc(mask, sizeof(*seen));
    mask -= 1;
    root = cJSON_CreateObject();
    model = cJSON_CreateObject();
    vocab = cJSON_CreateObject();
    merges = cJSON_CreateArray();
    added = cJSON_CreateArray();
    pre = cJSON_Parse(pre_json);
    buf = malloc(PIC_GGUF_MAX_STRING + 1);
    if (root == NULL || model == NULL || vocab == NULL || merges == NULL || added == NULL
        || pre == NULL || buf == NULL || seen == NULL)
    {
        cJSON_Delete(model);
        cJSON_Delete(vocab);
        cJSON_Delete(merges);
        cJSON_Delete(added);
        cJSON_Delete(pre);
        goto oom;
    }
    cJSON_AddItemToObject(root, "added_tokens", added);
    cJSON_AddNullToObject(root, "normalizer");
    cJSON_AddItemToObject(root, "pre_tokenizer", pre);
    cJSON_AddNullToObject(root, "post_processor");
    cJSON_AddItemToObject(root, "decoder", cJSON_Parse("{\"type\":\"ByteLevel\","
                          "\"add_prefix_space\":true,\"trim_offsets\":true,"
                          "\"use_regex\":true}"));
    cJSON_AddItemToObject(root, "model", model);
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddItemToObject(model, "vocab", vocab);
    cJSON_AddItemToObject(model, "merges", merges);

    for (size_t i = 0; i < n_tok; i++) {
        double tt = 1;

        pic_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len);
        memcpy(buf, s, len);
        buf[len] = '\0';
        if (strlen(buf) != len) {
            gm_err(err, errlen, "%s: token %zu holds a NUL byte", pic_gguf_path(g), i);
            cJSON_Delete(root);
            free(buf);
            free(seen);
            return NULL;
        }
        /* a repeated string keeps its first id, as a JSON vocab would */
        if (gguf_seen(seen, mask, g, i, s, len) == 0) {
            cJSON_AddNumberToObject(vocab, buf, (double) i);
        }
        if (i < n_type) {
            pic_gguf_arr_f64(g, "tokenizer.ggml.token_type", i, &tt);
        }
        if (tt == GGUF_TOKEN_CONTROL || tt == GGUF_TOKEN_USER_DEFINED) {
            cJSON *a = cJSON_CreateObject();

            cJSON_AddNumberToObject(a, "id", (double) i);
            cJSON_AddStringToObject(a, "content", buf);
            cJSON_AddBoolToObject(a, "single_word", 0);
            cJSON_AddBoolToObject(a, "lstrip", 0);
            cJSON_AddBoolToObject(a, "rstrip", 0);
            cJSON_AddBoolToObject(a, "normalized", 0);
            cJSON_AddBoolToObject(a, "special", tt == GGUF_TOKEN_CONTROL);
            cJSON_AddItemToArray(added, a);
        }
    }
    for (size_t i = 0; i < n_merge; i++) {
        pic_gguf_arr_str(g, "tokenizer.ggml.merges", i, &s, &len);
        memcpy(buf, s, len);
        buf[len] = '\0';
        cJSON_AddItemToArray(merges, cJSON_CreateString(buf));
    }
    free(buf);
    free(seen);
    buf = NULL;
    seen = NULL;
    text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (text == NULL) {
        goto oom;
    }
    *out_len = strlen(text);
    return text;

oom:
    cJSON_Delete(root);
    free(buf);
    free(seen);
    gm_err(err, errlen, "%s: out of memory building tokenizer.json", pic_gguf_path(g));
    return NULL;
}

/* --- the checkpoint --- */

int
pic_gguf_ckpt_open(const char *path, pic_gguf_ckpt *c, char *err, size_t errlen)
{
    static const char *const archs[] = { "llama", "qwen2", "qwen3" };
    int64_t                  n_head = 0, n_kv = 0;
    const char              *s;
    size_t                   len;
    char                     arch[32];
    int                      known = 0;

    memset(c, 0, sizeof(*c));
    c->g = pic_gguf_open(path, err, errlen);
    if (c->g == NULL) {
        return -1;
    }
    if (pic_gguf_get_str(c->g, "general.architecture", &s, &len) != 0 || len >= sizeof(arch)) {
        gm_err(err, errlen, "%s: no general.architecture", path);
        goto fail;
    }
    memcpy(arch, s, len);
    arch[len] = '\0';
    for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++) {
        known |= strcmp(arch, archs[i]) == 0;
    }
    if (!known) {
        gm_err(err, errlen, "%s: general.architecture '%s' is not supported in GGUF files "
               "(llama, qwen2, qwen3)", path, arch);
        goto fail;
    }
    if (gguf_config(c, arch, &n_head, &n_kv, err, errlen) != 0
        || gguf_tensors(c, arch, n_head, n_kv, err, errlen) != 0)
    {
        goto fail;
    }
    c->tokenizer = pic_gguf_tokenizer_json(c->g, &c->tokenizer_len, err, errlen);
    if (c->tokenizer == NULL) {
        goto fail;
    }
    if (pic_gguf_get_str(c->g, "tokenizer.chat_template", &s, &len) == 0) {
        c->chat_template = malloc(len + 1);
        if (c->chat_template != NULL) {
            memcpy(c->chat_template, s, len);
            c->chat_template[len] = '\0';
        }
    }
    return 0;

fail:
    pic_gguf_ckpt_close(c);
    return -1;
}

void
pic_gguf_ckpt_close(pic_gguf_ckpt *c)
{
    pic_st_close(c->st);
    pic_gguf_close(c->g);
    free(c->config);
    free(c->tokenizer);
    free(c->chat_template);
    free(c->priv);
    memset(c, 0, sizeof(*c));
}
