/*
 * cmd_gguf.c — `pic-engine gguf FILE [--tensor NAME --out PATH]`: what a
 * GGUF file holds, as the engine reads it — its metadata (arrays by type
 * and length) and tensors (name, ggml type, dims) as JSON on stdout; with
 * --tensor, that tensor's values dequantized to fp32 (file order) written
 * raw to --out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "commands.h"
#include "gguf.h"
#include "gguf_model.h"
#include "gguf_quant.h"

static const char *const vtype_names[] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64",
    "i64", "f64",
};

static cJSON *
gguf_value(const pic_gguf *g, size_t i)
{
    const char *key = pic_gguf_kv_key(g, i), *s;
    size_t      len, n;
    int         t = pic_gguf_kv_type(g, i), et;
    int64_t     iv;
    double      d;

    if (t == PIC_GGUF_STRING && pic_gguf_get_str(g, key, &s, &len) == 0) {
        char  *c = malloc(len + 1);
        cJSON *v;

        if (c == NULL) {
            return cJSON_CreateNull();
        }
        memcpy(c, s, len);
        c[len] = '\0';
        v = cJSON_CreateString(c);
        free(c);
        return v;
    }
    if (t == PIC_GGUF_ARRAY && pic_gguf_get_arr(g, key, &et, &n) == 0) {
        cJSON *a = cJSON_CreateObject();

        cJSON_AddStringToObject(a, "array_of", et >= 0 && et <= 12 ? vtype_names[et] : "?");
        cJSON_AddNumberToObject(a, "length", (double) n);
        return a;
    }
    if (pic_gguf_get_i64(g, key, &iv) == 0) {
        return t == PIC_GGUF_BOOL ? cJSON_CreateBool(iv != 0) : cJSON_CreateNumber((double) iv);
    }
    if (pic_gguf_get_f64(g, key, &d) == 0) {
        return cJSON_CreateNumber(d);
    }
    return cJSON_CreateNull();
}

int
pic_cmd_gguf(int argc, char **argv)
{
    const char            *file = NULL, *tensor = NULL, *out = NULL, *tok = NULL;
    const pic_gguf_tensor *t;
    pic_gguf              *g;
    cJSON                 *doc, *meta, *ts;
    char                   err[512], *text;
    int                    rc = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tensor") == 0 && i + 1 < argc) {
            tensor = argv[++i];
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (strcmp(argv[i], "--tokenizer-json") == 0 && i + 1 < argc) {
            tok = argv[++i];
        } else if (strcmp(argv[i], "--help") == 0) {
            printf("usage: pic-engine gguf FILE [--tensor NAME --out PATH] "
                   "[--tokenizer-json PATH]\n"
                   "  the file's metadata and tensors as JSON; --tensor: its values as\n"
                   "  raw float32 (dequantized, file order) into PATH; --tokenizer-json:\n"
                   "  the tokenizer.json the engine makes of the metadata\n");
            return 0;
        } else if (argv[i][0] != '-' && file == NULL) {
            file = argv[i];
        } else {
            fprintf(stderr, "pic-engine gguf: unknown argument '%s' (--help)\n", argv[i]);
            return 2;
        }
    }
    if (file == NULL || (tensor != NULL) != (out != NULL)) {
        fprintf(stderr, "pic-engine gguf: FILE, and --tensor with --out (--help)\n");
        return 2;
    }
    g = pic_gguf_open(file, err, sizeof(err));
    if (g == NULL) {
        fprintf(stderr, "pic-engine gguf: %s\n", err);
        return 1;
    }
    if (tok != NULL) {
        size_t len;
        char  *json = pic_gguf_tokenizer_json(g, &len, err, sizeof(err));
        FILE  *f = json != NULL ? fopen(tok, "wb") : NULL;

        if (json == NULL || f == NULL || fwrite(json, 1, len, f) != len) {
            fprintf(stderr, "pic-engine gguf: %s\n", json == NULL ? err : "cannot write");
            rc = 1;
        }
        if (f != NULL) {
            fclose(f);
        }
        free(json);
        pic_gguf_close(g);
        return rc;
    }
    if (tensor != NULL) {
        float *v;
        FILE  *f;

        t = pic_gguf_tensor_find(g, tensor);
        v = t != NULL ? malloc((size_t) t->numel * sizeof(float)) : NULL;
        if (t == NULL || v == NULL
            || pic_ggml_dequant(t->type, t->data, v, (size_t) t->numel) != 0)
        {
            fprintf(stderr, "pic-engine gguf: %s: no tensor '%s' (or out of memory)\n",
                    file, tensor);
            free(v);
            pic_gguf_close(g);
            return 1;
        }
        f = fopen(out, "wb");
        if (f == NULL || fwrite(v, sizeof(float), (size_t) t->numel, f) != t->numel) {
            fprintf(stderr, "pic-engine gguf: cannot write %s\n", out);
            rc = 1;
        }
        if (f != NULL) {
            fclose(f);
        }
        free(v);
        pic_gguf_close(g);
        return rc;
    }
    doc = cJSON_CreateObject();
    cJSON_AddNumberToObject(doc, "version", pic_gguf_version(g));
    meta = cJSON_AddObjectToObject(doc, "metadata");
    for (size_t i = 0; i < pic_gguf_kv_count(g); i++) {
        cJSON_AddItemToObject(meta, pic_gguf_kv_key(g, i), gguf_value(g, i));
    }
    ts = cJSON_AddArrayToObject(doc, "tensors");
    for (size_t i = 0; i < pic_gguf_tensor_count(g); i++) {
        cJSON *o = cJSON_CreateObject(), *dims;

        t = pic_gguf_tensor_get(g, i);
        cJSON_AddStringToObject(o, "name", t->name);
        cJSON_AddStringToObject(o, "type", pic_ggml_type_name(t->type));
        dims = cJSON_AddArrayToObject(o, "ne");
        for (int k = 0; k < t->ndim; k++) {
            cJSON_AddItemToArray(dims, cJSON_CreateNumber((double) t->ne[k]));
        }
        cJSON_AddNumberToObject(o, "bytes", (double) t->nbytes);
        cJSON_AddItemToArray(ts, o);
    }
    text = cJSON_Print(doc);
    if (text != NULL) {
        printf("%s\n", text);
    }
    free(text);
    cJSON_Delete(doc);
    pic_gguf_close(g);
    return 0;
}
