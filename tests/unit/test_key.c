/*
 * test_key.c — segment keys against an independent oracle: the xxhash
 * CLI.  The known answers below were produced by `xxh128sum` (xxhash
 * 0.8.1, Debian package `xxhash`) over files holding the framed bytes
 * u32le(|fp|) fp u32le(|scope|) scope data; when the CLI is installed the
 * test also checks fresh random inputs against it live.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pic_key.h"

static void
key_of(const char *fp, const char *scope, const void *data, size_t n, pic_key *out)
{
    pic_key_ctx ctx;
    pic_error   err;
    assert_int_equal(pic_key_ctx_init(&ctx, fp, strlen(fp), scope, strlen(scope), &err), 0);
    pic_key_compute(&ctx, data, n, out);
    pic_key_ctx_free(&ctx);
}

static void
test_key_known_answers_from_xxh128sum(void **state)
{
    (void) state;
    unsigned char big[1280];
    for (size_t i = 0; i < sizeof(big); i++) {
        big[i] = (unsigned char) (i % 256);
    }
    static const struct {
        const char *fp, *scope;
        int         which;          /* 0: "Hello, world!", 1: "", 2: big, 3: "x" */
        const char *hex;
    } kat[] = {
        { "qwen3.5-0.8b/w=8", "", 0, "ad66110ec6aafb841898df8cf37badb6" },
        { "fp", "tenant-42", 1, "70b86f35589fa62dca45a30e7162e9ed" },
        { "", "", 1, "2c0a8a99dc147d5445c3b49d035665b2" },
        { "model-fp-0123456789abcdef", "global", 2, "73521cc685388f6a6669c68eb4942a30" },
        { "ab", "c", 3, "bd0f625eecdc5ae9135d831f8cab33e0" },
        { "a", "bc", 3, "e9ab7d109e9891b74c1cc8b1b0195d11" },
    };
    for (size_t i = 0; i < sizeof(kat) / sizeof(kat[0]); i++) {
        const void *d = kat[i].which == 0 ? (const void *) "Hello, world!"
                      : kat[i].which == 2 ? (const void *) big
                      : kat[i].which == 3 ? (const void *) "x" : (const void *) "";
        size_t      n = kat[i].which == 0 ? 13 : kat[i].which == 2 ? sizeof(big)
                      : kat[i].which == 3 ? 1 : 0;
        pic_key k;
        key_of(kat[i].fp, kat[i].scope, d, n, &k);
        assert_string_equal(k.hex, kat[i].hex);
        assert_int_equal(k.len, n);
    }
}

/* "ab"+"c" and "a"+"bc" differ: the length prefixes make framing unambiguous. */
static void
test_key_framing_unambiguous(void **state)
{
    (void) state;
    pic_key a, b, c;
    key_of("ab", "c", "x", 1, &a);
    key_of("a", "bc", "x", 1, &b);
    key_of("abc", "", "x", 1, &c);
    assert_false(pic_key_equal(&a, &b));
    assert_false(pic_key_equal(&a, &c));
    assert_false(pic_key_equal(&b, &c));
}

/* Tenants are separated: same bytes, different scope, different key. */
static void
test_key_scope_separates_tenants(void **state)
{
    (void) state;
    pic_key a, b, a2;
    key_of("fp", "tenant-a", "same document", 13, &a);
    key_of("fp", "tenant-b", "same document", 13, &b);
    key_of("fp", "tenant-a", "same document", 13, &a2);
    assert_false(pic_key_equal(&a, &b));
    assert_true(pic_key_equal(&a, &a2));
    assert_string_equal(a.hex, a2.hex);
}

static void
test_key_hex_parse_round_trip(void **state)
{
    (void) state;
    pic_key k, p;
    key_of("fp", "", "abc", 3, &k);
    assert_int_equal(strlen(k.hex), PIC_KEY_HEX);
    for (int i = 0; i < PIC_KEY_HEX; i++) {
        assert_true((k.hex[i] >= '0' && k.hex[i] <= '9') || (k.hex[i] >= 'a' && k.hex[i] <= 'f'));
    }
    p.len = 3;
    assert_int_equal(pic_key_parse_hex(&p, k.hex, PIC_KEY_HEX), 0);
    assert_true(pic_key_equal(&k, &p));
    p.len = 4;                                  /* the length is part of identity */
    assert_false(pic_key_equal(&k, &p));
    assert_int_equal(pic_key_parse_hex(&p, "ABCDEF0123456789abcdef0123456789", 32), -1);
    assert_int_equal(pic_key_parse_hex(&p, k.hex, 31), -1);
    assert_int_equal(pic_key_parse_hex(&p, "0123456789abcdef0123456789abcdeg", 32), -1);
}

/* The 16 canonical bytes are what the hex spells, in order (the module's
 * index and the frames keep them), and they round-trip. */
static void
test_key_bytes_are_the_hex_in_order(void **state)
{
    (void) state;
    pic_key k, p;
    uint8_t b[16];
    char    hex[PIC_KEY_HEX + 1];
    key_of("fp", "t", "segment bytes", 13, &k);
    pic_key_to_bytes(&k, b);
    for (int i = 0; i < 16; i++) {
        snprintf(hex + 2 * i, 3, "%02x", b[i]);
    }
    assert_string_equal(hex, k.hex);
    p.len = k.len;
    pic_key_from_bytes(&p, b);
    assert_true(pic_key_equal(&k, &p));
    assert_string_equal(p.hex, k.hex);
}

static void
test_key_ctx_limits(void **state)
{
    (void) state;
    char        fp[PIC_KEY_PART_MAX + 1];
    pic_key_ctx ctx;
    pic_error   err;
    memset(fp, 'f', sizeof(fp));
    assert_int_equal(pic_key_ctx_init(&ctx, fp, sizeof(fp), "", 0, &err), -1);
    assert_int_equal(err.status, 400);
    assert_int_equal(pic_key_ctx_init(&ctx, fp, PIC_KEY_PART_MAX, "", 0, &err), 0);
    pic_key_ctx_free(&ctx);
    pic_key_ctx_free(&ctx);                     /* idempotent */
}

/* Random inputs against the live CLI when it is installed. */
static void
test_key_matches_xxh128sum_live(void **state)
{
    (void) state;
    if (system("command -v xxh128sum > /dev/null 2>&1") != 0) {
        skip();
    }
    char path[] = "/tmp/pic_key_testXXXXXX";
    int  fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    uint64_t rng = 0x1234567u;
    for (int t = 0; t < 8; t++) {
        size_t         n = (size_t) (t * t * 37 + t);
        unsigned char *d = malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            d[i] = (unsigned char) (rng >> 56);
        }
        const char *fp = t % 2 ? "fingerprint" : "";
        const char *sc = t % 3 ? "scope" : "";
        FILE       *f = fopen(path, "wb");
        uint32_t    l;
        l = (uint32_t) strlen(fp);
        unsigned char le[4] = { l & 255, (l >> 8) & 255, (l >> 16) & 255, l >> 24 };
        fwrite(le, 1, 4, f);
        fwrite(fp, 1, strlen(fp), f);
        l = (uint32_t) strlen(sc);
        unsigned char le2[4] = { l & 255, (l >> 8) & 255, (l >> 16) & 255, l >> 24 };
        fwrite(le2, 1, 4, f);
        fwrite(sc, 1, strlen(sc), f);
        fwrite(d, 1, n, f);
        fclose(f);
        char cmd[128], out[128] = "";
        snprintf(cmd, sizeof(cmd), "xxh128sum %s 2>/dev/null", path);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        assert_non_null(fgets(out, sizeof(out), p));
        pclose(p);
        pic_key k;
        key_of(fp, sc, d, n, &k);
        assert_memory_equal(out, k.hex, PIC_KEY_HEX);
        free(d);
    }
    unlink(path);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_known_answers_from_xxh128sum),
        cmocka_unit_test(test_key_framing_unambiguous),
        cmocka_unit_test(test_key_scope_separates_tenants),
        cmocka_unit_test(test_key_hex_parse_round_trip),
        cmocka_unit_test(test_key_bytes_are_the_hex_in_order),
        cmocka_unit_test(test_key_ctx_limits),
        cmocka_unit_test(test_key_matches_xxh128sum_live),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
