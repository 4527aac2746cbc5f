/*
 * fuzz_gguf.c — libFuzzer target for the GGUF reader and its mapping into a
 * checkpoint (engine/model/gguf.h, gguf_model.h): the input is a whole GGUF
 * file, mapped from a memfd as a model path is.  Every tensor the reader
 * accepts lies inside the file and its first block dequantizes; every
 * metadata string and array element it hands out lies inside the file;
 * and opening the file as a checkpoint (config.json, tokenizer.json and
 * the tensor view) fails cleanly or succeeds.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_model.h"
#include "gguf_quant.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

static void
check_reader(const uint8_t *data, size_t size)
{
    char      err[256];
    pic_gguf *g = pic_gguf_open_mem(data, size, err, sizeof(err));

    if (g == NULL) {
        return;
    }
    for (size_t i = 0; i < pic_gguf_kv_count(g); i++) {
        const char *key = pic_gguf_kv_key(g, i), *s;
        size_t      len, n;
        int         type;
        double      d;

        CHECK(key != NULL && pic_gguf_find(g, key) == (int) i);
        if (pic_gguf_get_str(g, key, &s, &len) == 0) {
            CHECK((const uint8_t *) s >= data && (size_t) ((const uint8_t *) s - data) <= size
                  && len <= size - (size_t) ((const uint8_t *) s - data));
        }
        if (pic_gguf_get_arr(g, key, &type, &n) == 0) {
            for (size_t j = 0; j < n && j < 64; j++) {
                if (pic_gguf_arr_str(g, key, j, &s, &len) == 0) {
                    CHECK((const uint8_t *) s >= data
                          && len <= size - (size_t) ((const uint8_t *) s - data));
                }
                pic_gguf_arr_f64(g, key, j, &d);
            }
        }
    }
    for (size_t i = 0; i < pic_gguf_tensor_count(g); i++) {
        const pic_gguf_tensor *t = pic_gguf_tensor_get(g, i);
        int                    bs = pic_ggml_block_size(t->type);
        float                  v[256];

        CHECK(t->data >= data && t->nbytes <= size
              && (size_t) (t->data - data) <= size - t->nbytes);
        CHECK(pic_gguf_tensor_find(g, t->name) == t);
        CHECK(bs > 0 && pic_ggml_dequant(t->type, t->data, v, (size_t) bs) == 0);
    }
    pic_gguf_close(g);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char          path[64], err[256];
    int           fd = memfd_create("gguf", 0);
    pic_gguf_ckpt c;

    check_reader(data, size);
    CHECK(fd >= 0);
    CHECK(size == 0 || write(fd, data, size) == (ssize_t) size);
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    if (pic_gguf_ckpt_open(path, &c, err, sizeof(err)) == 0) {
        CHECK(c.config != NULL && c.tokenizer != NULL && c.st != NULL);
        pic_gguf_ckpt_close(&c);
    }
    close(fd);
    return 0;
}
