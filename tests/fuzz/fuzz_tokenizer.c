/*
 * fuzz_tokenizer.c — libFuzzer target for tokenizer.json loading
 * (engine/model/tokenizer.h).  The first input byte splits the rest: a
 * tokenizer.json text, then a text to encode with it.  A tokenizer that
 * loads must encode the text and decode the ids without fault; every id
 * it produces must decode.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pic_tokenizer *t;
    char           err[256];
    size_t         cut;

    if (size < 1) {
        return 0;
    }
    cut = 1 + (size - 1) * data[0] / 255;
    t = pic_tokenizer_load_json((const char *) data + 1, cut - 1, err, sizeof(err));
    if (t != NULL) {
        int32_t *ids = NULL;
        size_t   n = 0;

        if (pic_tokenizer_encode(t, (const char *) data + cut, size - cut, &ids, &n)
            == PIC_TOKENIZER_OK) {
            char  *out = NULL;
            size_t len = 0;

            CHECK(n == 0 || ids != NULL);
            (void) pic_tokenizer_decode(t, ids, n, 0, &out, &len);
            free(out);
        }
        free(ids);
        pic_tokenizer_free(t);
    }
    return 0;
}
