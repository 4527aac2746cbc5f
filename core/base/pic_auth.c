/*
 * pic_auth.c — the pool credential: secret file and HMAC-SHA256 (pic_auth.h).
 */
#include <stdio.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "pic_auth.h"

int
pic_auth_load(pic_auth *a, const char *path, char *err, size_t errlen)
{
    FILE  *f = fopen(path, "rb");
    size_t n;
    int    extra;

    memset(a, 0, sizeof(*a));
    if (f == NULL) {
        snprintf(err, errlen, "cannot open the pool secret file %s", path);
        return -1;
    }
    n = fread(a->secret, 1, sizeof(a->secret), f);
    extra = fgetc(f) != EOF;
    fclose(f);
    while (n > 0 && (a->secret[n - 1] == '\n' || a->secret[n - 1] == '\r'
                     || a->secret[n - 1] == ' ' || a->secret[n - 1] == '\t')) {
        n--;
    }
    if (extra || n < PIC_AUTH_SECRET_MIN) {
        memset(a, 0, sizeof(*a));
        snprintf(err, errlen, "the pool secret in %s must be %d to %d bytes", path,
                 PIC_AUTH_SECRET_MIN, PIC_AUTH_SECRET_MAX);
        return -1;
    }
    a->len = n;
    return 0;
}

void
pic_auth_clear(pic_auth *a)
{
    OPENSSL_cleanse(a, sizeof(*a));
}

int
pic_auth_mac(const pic_auth *a, const char *label, const void *head, size_t hlen,
             const void *body, size_t blen, unsigned char tag[PIC_AUTH_TAG])
{
    EVP_MAC     *mac;
    EVP_MAC_CTX *ctx = NULL;
    OSSL_PARAM   params[2];
    size_t       out = 0;
    int          rc = -1;

    if (a == NULL || a->len == 0) {
        return -1;
    }
    mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (mac == NULL) {
        return -1;
    }
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *) "SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();
    ctx = EVP_MAC_CTX_new(mac);
    if (ctx != NULL && EVP_MAC_init(ctx, a->secret, a->len, params) == 1
        && EVP_MAC_update(ctx, (const unsigned char *) label, strlen(label)) == 1
        && EVP_MAC_update(ctx, (const unsigned char *) "\n", 1) == 1
        && (hlen == 0 || EVP_MAC_update(ctx, head, hlen) == 1)
        && EVP_MAC_update(ctx, (const unsigned char *) "\n", 1) == 1
        && (blen == 0 || EVP_MAC_update(ctx, body, blen) == 1)
        && EVP_MAC_final(ctx, tag, &out, PIC_AUTH_TAG) == 1 && out == PIC_AUTH_TAG) {
        rc = 0;
    }
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    return rc;
}

int
pic_auth_mac_hex(const pic_auth *a, const char *label, const void *head, size_t hlen,
                 const void *body, size_t blen, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    unsigned char     tag[PIC_AUTH_TAG];

    if (pic_auth_mac(a, label, head, hlen, body, blen, tag) != 0) {
        return -1;
    }
    for (int i = 0; i < PIC_AUTH_TAG; i++) {
        hex[2 * i] = digits[tag[i] >> 4];
        hex[2 * i + 1] = digits[tag[i] & 15];
    }
    hex[PIC_AUTH_HEX] = '\0';
    return 0;
}

int
pic_auth_check(const pic_auth *a, const char *label, const void *head, size_t hlen,
               const void *body, size_t blen, const unsigned char *tag)
{
    unsigned char want[PIC_AUTH_TAG];

    if (tag == NULL || pic_auth_mac(a, label, head, hlen, body, blen, want) != 0) {
        return 0;
    }
    return CRYPTO_memcmp(want, tag, PIC_AUTH_TAG) == 0;
}

int
pic_auth_check_hex(const pic_auth *a, const char *label, const void *head, size_t hlen,
                   const void *body, size_t blen, const char *hex, size_t hexlen)
{
    char want[PIC_AUTH_HEX + 1];

    if (hex == NULL || hexlen != PIC_AUTH_HEX
        || pic_auth_mac_hex(a, label, head, hlen, body, blen, want) != 0) {
        return 0;
    }
    return CRYPTO_memcmp(want, hex, PIC_AUTH_HEX) == 0;
}
