/*
 * fuzz_frame.c — libFuzzer target for the entry frame decoder
 * (engine/cluster/frame.h): the bytes a peer sends.  The input is the frame;
 * the expected fingerprint is the one it claims (so decoding goes past that
 * check), no key or length is required, 64 layers at most.  A frame that
 * decodes must encode back to the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static pic_frame_desc desc[PIC_FRAME_MAX_DESC];
    pic_frame_expect      x;
    pic_frame             f;
    char                  err[256];

    memset(&x, 0, sizeof(x));
    if (size >= 24) {
        memcpy(&x.fingerprint, data + 16, 8);
    }
    x.n_layers = 64;
    x.max_payload = 1u << 24;
    if (pic_frame_decode(data, size, &x, &f, desc, PIC_FRAME_MAX_DESC, err, sizeof(err))
        != 0) {
        CHECK(err[0] != '\0');
        return 0;
    }
    CHECK(pic_frame_size(f.n_desc, f.payload_bytes) == size);
    uint8_t *again = malloc(size);
    CHECK(again != NULL);
    CHECK(pic_frame_encode(&f, again, size) == size);
    CHECK(memcmp(again, data, size) == 0);
    free(again);
    return 0;
}
