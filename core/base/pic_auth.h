/*
 * pic_auth.h — the pool credential (DESIGN.md §4.5): a shared secret read
 * from a file, and HMAC-SHA256 (OpenSSL libcrypto) over what gateway and
 * engines send each other.
 *
 * Why HMAC-SHA256 and not keyed xxh3: xxh3 with a secret is a fast hash,
 * not a MAC; nothing bounds what an attacker who sees many (message, tag)
 * pairs learns about the secret, and its 64/128-bit outputs have no forgery
 * bound.  HMAC-SHA256 is a PRF under standard assumptions, runs at ~1-2 GB/s
 * with the SHA extensions (a 16 MB body costs ~10 ms, a 1 MB frame < 1 ms),
 * and libcrypto is already linked by Debian's nginx.
 *
 * Messages (every tag is 64 lowercase hex chars, compared in constant time):
 *   plan     HMAC(s, "pic-plan-v1\n"  ‖ X-PIC-Timeout-Ms value ‖ "\n" ‖ body)
 *            header X-PIC-Auth on a gateway → combine-node request
 *   peer     HMAC(s, "pic-peer-v1\n"  ‖ METHOD " " URI ‖ "\n" ‖ body)
 *            header X-PIC-Auth on a pull or a remote prefill
 *   frame    HMAC(s, "pic-frame-v1\n" ‖ "" ‖ "\n" ‖ frame bytes)
 *            32 raw bytes after every frame an engine sends a peer
 *   scope    HMAC(s, "pic-scope-v1\n" ‖ "" ‖ "\n" ‖ tenant value), first 16
 *            bytes as 32 hex: the cache scope of a tenant
 */
#ifndef PIC_AUTH_H
#define PIC_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define PIC_AUTH_SECRET_MIN 16
#define PIC_AUTH_SECRET_MAX 1024
#define PIC_AUTH_TAG        32                  /* raw HMAC-SHA256 bytes */
#define PIC_AUTH_HEX        (2 * PIC_AUTH_TAG)  /* hex form, without NUL */
#define PIC_AUTH_HEADER     "X-PIC-Auth"

typedef struct {
    unsigned char secret[PIC_AUTH_SECRET_MAX];
    size_t        len;                          /* 0: no credential configured */
} pic_auth;

/* Reads the secret from path (trailing white space dropped; 16..1024 bytes
 * left).  0, or -1 with a reason in err. */
int pic_auth_load(pic_auth *a, const char *path, char *err, size_t errlen);

/* Wipes the secret (a->len becomes 0). */
void pic_auth_clear(pic_auth *a);

/* tag = HMAC-SHA256(a's secret, label ‖ "\n" ‖ head[0..hlen) ‖ "\n" ‖
 * body[0..blen)) (32 bytes).  0, or -1 when libcrypto fails. */
int pic_auth_mac(const pic_auth *a, const char *label, const void *head, size_t hlen,
                 const void *body, size_t blen, unsigned char tag[PIC_AUTH_TAG]);

/* pic_auth_mac as 64 lowercase hex chars + NUL in hex (>= 65 bytes). */
int pic_auth_mac_hex(const pic_auth *a, const char *label, const void *head, size_t hlen,
                     const void *body, size_t blen, char *hex);

/* 1 if hex[0..hlen) is the 64-hex tag of the message (constant time in the
 * tag), else 0. */
int pic_auth_check_hex(const pic_auth *a, const char *label, const void *head, size_t hlen,
                       const void *body, size_t blen, const char *hex, size_t hexlen);

/* 1 if tag (32 raw bytes) is the tag of the message, else 0. */
int pic_auth_check(const pic_auth *a, const char *label, const void *head, size_t hlen,
                   const void *body, size_t blen, const unsigned char *tag);

#endif /* PIC_AUTH_H */
