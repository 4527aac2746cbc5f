/*
 * pic_key.h — segment keys (DESIGN.md §4.1).
 *
 *   key = xxh3_128( u32le(|fp|) ‖ fp ‖ u32le(|scope|) ‖ scope ‖ bytes )
 *
 * fp is the model fingerprint (changes with weights, tokenizer or seam
 * width), scope is the cache scope ("" = global, or a tenant id such as a
 * hash of the API key: a tenant cannot probe another's entries), bytes are
 * the rendered segment.  The two length prefixes make the framing
 * unambiguous ("ab"‖"c" and "a"‖"bc" differ).  The key is written as 32
 * lowercase hex digits of XXH128's canonical (big-endian) form — exactly
 * what `xxh128sum` prints for a file holding the framed bytes — and travels
 * with the segment's byte length, checked on use.
 */
#ifndef PIC_KEY_H
#define PIC_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "pic_error.h"

#define PIC_KEY_HEX      32     /* hex digits in a key */
#define PIC_KEY_PART_MAX 256    /* max bytes of fingerprint and of scope */

typedef struct {
    uint64_t hi;                    /* XXH128_hash_t.high64 */
    uint64_t lo;                    /* XXH128_hash_t.low64 */
    uint64_t len;                   /* segment length in bytes */
    char     hex[PIC_KEY_HEX + 1];  /* canonical lowercase hex, NUL-terminated */
} pic_key;

typedef struct {
    void *base;             /* XXH3_state_t after the framed fp and scope (opaque) */
} pic_key_ctx;

/* Prepares the keying context for (fingerprint, scope); each at most
 * PIC_KEY_PART_MAX bytes.  Returns 0, or -1 with err set (400 too long,
 * 500 OOM).  Release with pic_key_ctx_free. */
int pic_key_ctx_init(pic_key_ctx *ctx, const char *fp, size_t fp_len,
                     const char *scope, size_t scope_len, pic_error *err);

/* Frees the context's state; ctx becomes unusable until re-initialised. */
void pic_key_ctx_free(pic_key_ctx *ctx);

/* Computes the key of bytes[0..len) under ctx into *out.  Thread-safe for a
 * shared ctx (the base state is only read). */
void pic_key_compute(const pic_key_ctx *ctx, const void *bytes, size_t len,
                     pic_key *out);

/* Parses 32 lowercase hex digits (exactly n == 32) into out->hi/lo/hex;
 * out->len is left as is.  Returns 0, or -1 if malformed.  The one hex-key
 * parser of the tree (the module, the registry and the frames use it). */
int pic_key_parse_hex(pic_key *out, const char *hex, size_t n);

/* Writes k's hash as 16 bytes in canonical order (hi then lo, big-endian:
 * the bytes its hex spells), the form of the module's index and of frames. */
void pic_key_to_bytes(const pic_key *k, uint8_t out[16]);

/* Sets out->hi/lo/hex from 16 canonical bytes; out->len is left as is. */
void pic_key_from_bytes(pic_key *out, const uint8_t in[16]);

/* 1 if a and b name the same segment (hash and length), else 0. */
int pic_key_equal(const pic_key *a, const pic_key *b);

#endif /* PIC_KEY_H */
