/*
 * pic_key.c — segment keys: framed xxh3-128 (see pic_key.h).
 *
 * The framed prefix is hashed once into ctx->base; each key copies that
 * state to the stack and feeds the segment.  xxHash is used in its
 * documented header-only mode (XXH_INLINE_ALL, Debian's libxxhash-dev
 * header): the state's size is known for the stack copy, and the compiler
 * may use the build's vector extensions (the x86-64-v3 baseline: AVX2),
 * which roughly doubles keying throughput for ~1 KiB segments over the
 * generic shared library.  The digest is the same either way.
 */
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "pic_key.h"

static void
pic_key_u32le(unsigned char out[4], uint32_t v)
{
    out[0] = (unsigned char) v;
    out[1] = (unsigned char) (v >> 8);
    out[2] = (unsigned char) (v >> 16);
    out[3] = (unsigned char) (v >> 24);
}

int
pic_key_ctx_init(pic_key_ctx *ctx, const char *fp, size_t fp_len,
                 const char *scope, size_t scope_len, pic_error *err)
{
    unsigned char len4[4];

    ctx->base = NULL;
    if (fp_len > PIC_KEY_PART_MAX || scope_len > PIC_KEY_PART_MAX) {
        return pic_error_invalid(err, NULL, "invalid_value",
                                 "%s: fingerprint and scope are limited to %d bytes",
                                 __func__, PIC_KEY_PART_MAX);
    }
    ctx->base = XXH3_createState();
    if (!ctx->base) {
        return pic_error_oom(err, __func__);
    }
    XXH3_128bits_reset((XXH3_state_t *) ctx->base);
    pic_key_u32le(len4, (uint32_t) fp_len);
    XXH3_128bits_update((XXH3_state_t *) ctx->base, len4, 4);
    XXH3_128bits_update((XXH3_state_t *) ctx->base, fp, fp_len);
    pic_key_u32le(len4, (uint32_t) scope_len);
    XXH3_128bits_update((XXH3_state_t *) ctx->base, len4, 4);
    XXH3_128bits_update((XXH3_state_t *) ctx->base, scope, scope_len);
    return 0;
}

void
pic_key_ctx_free(pic_key_ctx *ctx)
{
    if (ctx->base) {
        XXH3_freeState((XXH3_state_t *) ctx->base);
        ctx->base = NULL;
    }
}

static void
pic_key_fill_hex(pic_key *k)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        k->hex[i] = hex[(k->hi >> (60 - 4 * i)) & 15];
        k->hex[16 + i] = hex[(k->lo >> (60 - 4 * i)) & 15];
    }
    k->hex[PIC_KEY_HEX] = '\0';
}

void
pic_key_compute(const pic_key_ctx *ctx, const void *bytes, size_t len, pic_key *out)
{
    XXH3_state_t st;

    XXH3_copyState(&st, (const XXH3_state_t *) ctx->base);
    XXH3_128bits_update(&st, bytes, len);
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    out->hi = h.high64;
    out->lo = h.low64;
    out->len = len;
    pic_key_fill_hex(out);
}

int
pic_key_parse_hex(pic_key *out, const char *hex, size_t n)
{
    uint64_t v[2] = { 0, 0 };
    if (n != PIC_KEY_HEX) {
        return -1;
    }
    for (size_t i = 0; i < PIC_KEY_HEX; i++) {
        char     c = hex[i];
        unsigned d;
        if (c >= '0' && c <= '9') {
            d = (unsigned) (c - '0');
        } else if (c >= 'a' && c <= 'f') {
            d = (unsigned) (c - 'a' + 10);
        } else {
            return -1;
        }
        v[i / 16] = (v[i / 16] << 4) | d;
    }
    out->hi = v[0];
    out->lo = v[1];
    memcpy(out->hex, hex, PIC_KEY_HEX);
    out->hex[PIC_KEY_HEX] = '\0';
    return 0;
}

void
pic_key_to_bytes(const pic_key *k, uint8_t out[16])
{
    for (int i = 0; i < 8; i++) {
        out[i] = (uint8_t) (k->hi >> (56 - 8 * i));
        out[8 + i] = (uint8_t) (k->lo >> (56 - 8 * i));
    }
}

void
pic_key_from_bytes(pic_key *out, const uint8_t in[16])
{
    out->hi = 0;
    out->lo = 0;
    for (int i = 0; i < 8; i++) {
        out->hi = (out->hi << 8) | in[i];
        out->lo = (out->lo << 8) | in[8 + i];
    }
    pic_key_fill_hex(out);
}

int
pic_key_equal(const pic_key *a, const pic_key *b)
{
    return a->hi == b->hi && a->lo == b->lo && a->len == b->len;
}
