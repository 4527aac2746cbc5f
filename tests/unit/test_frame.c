/*
 * test_frame.c — the segment-entry frame (engine/cluster/frame.h) as hostile input:
 * round trip; every single-byte flip, every truncation and random garbage
 * rejected; frames with a valid checksum but a bad field (version,
 * reserved bits, counts, descriptor shape/bytes/offset/overlap/dtype/ndim,
 * fingerprint, key, length) rejected with a reason; and a real entry of the
 * tiny fixture model carried through a frame intact.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>

#include "entry.h"
#include "frame.h"
#include "model.h"
#include "pic_key.h"

#define FP 0x1122334455667788ull

static const char *KEY = "00112233445566778899aabbccddeeff";

/* KEY's 16 canonical bytes, through the core's one hex-key parser. */
static int
key_bytes(const char *hex, uint8_t out[16])
{
    pic_key k;

    if (pic_key_parse_hex(&k, hex, strlen(hex)) != 0) {
        return -1;
    }
    pic_key_to_bytes(&k, out);
    return 0;
}

/* A small synthetic frame: 3 tensors in a 100-byte payload. */
static unsigned char *
make_frame(size_t *len)
{
    static unsigned char payload[100];
    pic_frame_desc       d[3];
    pic_frame            f;
    unsigned char       *buf;

    for (int i = 0; i < 100; i++) {
        payload[i] = (unsigned char) (i * 7 + 1);
    }
    memset(d, 0, sizeof(d));
    d[0] = (pic_frame_desc) { .layer = 0, .kind = PIC_TENSOR_S, .dtype = PIC_FRAME_F32,
                              .ndim = 2, .shape = { 2, 3 }, .offset = 4, .bytes = 24 };
    d[1] = (pic_frame_desc) { .layer = 1, .kind = PIC_TENSOR_K, .dtype = PIC_FRAME_BF16,
                              .ndim = 3, .shape = { 1, 4, 5 }, .offset = 28, .bytes = 40 };
    d[2] = (pic_frame_desc) { .layer = 1, .kind = PIC_TENSOR_V, .dtype = PIC_FRAME_F16,
                              .ndim = 1, .shape = { 16 }, .offset = 68, .bytes = 32 };
    memset(&f, 0, sizeof(f));
    f.fingerprint = FP;
    assert_int_equal(key_bytes(KEY, f.key), 0);
    f.seg_bytes = 1234;
    f.n_tokens = 40;
    f.h = 8;
    f.w = 8;
    f.n_desc = 3;
    f.desc = d;
    f.payload = payload;
    f.payload_bytes = sizeof(payload);
    *len = pic_frame_size(3, sizeof(payload));
    buf = malloc(*len);
    assert_int_equal(pic_frame_encode(&f, buf, *len), *len);
    assert_int_equal(pic_frame_encode(&f, buf, *len - 1), 0);     /* too small */
    return buf;
}

static int
decode(const unsigned char *buf, size_t len, char *err, size_t errlen)
{
    uint8_t          key[16];
    pic_frame_expect x = { .fingerprint = FP, .key = key, .seg_bytes = 1234, .n_layers = 4 };
    pic_frame        f;
    pic_frame_desc   d[8];

    key_bytes(KEY, key);
    return pic_frame_decode(buf, len, &x, &f, d, 8, err, errlen);
}

static void
reseal(unsigned char *buf, size_t len)
{
    uint64_t h = XXH3_64bits(buf, len - 8);

    for (int i = 0; i < 8; i++) {
        buf[len - 8 + i] = (unsigned char) (h >> (8 * i));
    }
}

static void
test_round_trip(void **unused)
{
    size_t           len;
    unsigned char   *buf = make_frame(&len);
    uint8_t          key[16];
    pic_frame_expect x = { .fingerprint = FP, .key = key, .seg_bytes = 1234, .n_layers = 2 };
    pic_frame        f;
    pic_frame_desc   d[3];
    char             err[256];
    pic_key          k;

    key_bytes(KEY, key);
    assert_int_equal(pic_frame_decode(buf, len, &x, &f, d, 3, err, sizeof(err)), 0);
    assert_int_equal(len, 72 + 3 * 40 + 100 + 8);
    assert_memory_equal(buf, "PICF", 4);
    assert_true(f.fingerprint == FP);
    pic_key_from_bytes(&k, f.key);
    assert_string_equal(k.hex, KEY);
    assert_int_equal(f.n_tokens, 40);
    assert_int_equal(f.h, 8);
    assert_int_equal(f.n_desc, 3);
    assert_int_equal(d[1].kind, PIC_TENSOR_K);
    assert_int_equal(d[1].shape[2], 5);
    assert_int_equal(d[2].offset, 68);
    assert_int_equal(((const unsigned char *) f.payload)[99], (unsigned char) (99 * 7 + 1));
    /* fewer descriptor slots than the frame has */
    assert_int_equal(pic_frame_decode(buf, len, &x, &f, d, 2, err, sizeof(err)), -1);
    free(buf);
}

static void
test_every_byte_flip_is_rejected(void **unused)
{
    size_t         len;
    unsigned char *buf = make_frame(&len);
    char           err[256];

    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            buf[i] ^= (unsigned char) (1 << bit);
            if (decode(buf, len, err, sizeof(err)) == 0) {
                fail_msg("flip of byte %zu bit %d accepted", i, bit);
            }
            buf[i] ^= (unsigned char) (1 << bit);
        }
    }
    assert_int_equal(decode(buf, len, err, sizeof(err)), 0);
    free(buf);
}

static void
test_truncation_and_garbage_are_rejected(void **unused)
{
    size_t         len;
    unsigned char *buf = make_frame(&len), *big;
    char           err[256];
    uint64_t       x = 42;

    for (size_t n = 0; n < len; n++) {
        assert_int_equal(decode(buf, n, err, sizeof(err)), -1);
    }
    big = calloc(1, len + 16);
    memcpy(big, buf, len);
    assert_int_equal(decode(big, len + 16, err, sizeof(err)), -1);  /* trailing bytes */
    assert_int_equal(decode(NULL, 0, err, sizeof(err)), -1);
    for (int r = 0; r < 2000; r++) {
        size_t n = (size_t) (r * 37 % 600);
        for (size_t i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            big[i % (len + 16)] = (unsigned char) (x >> 56);
        }
        if (r % 2) {
            memcpy(big, "PICF\x01\x00", 6);     /* plausible start */
        }
        assert_int_equal(decode(big, n < len + 16 ? n : len + 16, err, sizeof(err)), -1);
    }
    free(big);
    free(buf);
}

/* Corrupt one field, fix the checksum, expect a rejection naming why. */
static void
expect_reject(size_t off, const void *val, size_t n, const char *why)
{
    size_t         len;
    unsigned char *buf = make_frame(&len);
    char           err[256] = "";

    memcpy(buf + off, val, n);
    reseal(buf, len);
    if (decode(buf, len, err, sizeof(err)) == 0) {
        fail_msg("accepted: %s", why);
    }
    if (strstr(err, why) == NULL) {
        fail_msg("%s: rejected for another reason: %s", why, err);
    }
    free(buf);
}

static void
test_sealed_but_invalid_fields(void **unused)
{
    uint16_t v2 = 2, one16 = 1;
    uint32_t big = 0xffffff00u, n10 = 10, n4 = 4, zero = 0, one = 1, l41 = 41;
    uint64_t huge = ~0ull, off = 20, fp = FP + 1, len2 = 99;
    uint8_t  k5 = 5, dt3 = 3, nd0 = 0, nd5 = 5, r1 = 1;
    size_t   d0 = 72, d1 = 72 + 40, d2 = 72 + 80;

    expect_reject(4, &v2, 2, "version");
    expect_reject(6, &one16, 2, "reserved");
    expect_reject(60, &one, 4, "reserved");
    expect_reject(12, &big, 4, "descriptors");
    expect_reject(12, &n4, 4, "header_bytes");
    expect_reject(64, &huge, 8, "header says");
    expect_reject(48, &zero, 4, "impossible");
    expect_reject(52, &l41, 4, "impossible");
    expect_reject(16, &fp, 8, "fingerprint");
    expect_reject(24, "\xff", 1, "another segment key");
    expect_reject(40, &len2, 8, "segment length");
    expect_reject(d0 + 2, &k5, 1, "kind");
    expect_reject(d0 + 3, &dt3, 1, "dtype");
    expect_reject(d0 + 4, &nd0, 1, "ndim");
    expect_reject(d0 + 4, &nd5, 1, "ndim");
    expect_reject(d0 + 5, &r1, 1, "reserved");
    expect_reject(d0 + 8, &n10, 4, "bytes");                 /* shape no longer matches */
    expect_reject(d0 + 16, &one, 4, "beyond ndim");          /* dim 2 set, ndim 2 */
    expect_reject(d1 + 24, &off, 8, "overlaps");             /* K starts inside S */
    expect_reject(d2 + 24, &huge, 8, "leaves the payload");
    expect_reject(d1, &n10, 2, "layer");                     /* layer 10 of 4 */
}

/* --- a real entry through a frame --- */

static pic_model *
load_tiny(void)
{
    char        dir[512], err[512];
    const char *base = getenv("PIC_FIXTURES");

    snprintf(dir, sizeof(dir), "%s/tiny-qwen35", base ? base : "tests/fixtures/models");
    return pic_model_load(dir, err, sizeof(err));
}

static void
test_entry_through_frame(void **unused)
{
    pic_model     *m = load_tiny();
    pic_entry     *seam = NULL, *back;
    pic_entry_opts o = { .w = 4, .dtype = PIC_DTYPE_BF16 };
    int            ids[48];
    char           err[512];
    size_t         len;
    unsigned char *buf;

    if (m == NULL) {
        skip();
    }
    for (int i = 0; i < 48; i++) {
        ids[i] = (i * 131 + 7) % 1900;
    }
    assert_int_equal(pic_entry_build(m, NULL, ids, 48, &o, &seam, NULL, err, sizeof(err)), 0);
    assert_non_null(seam);
    buf = pic_frame_from_entry(seam, KEY, 777, &len);
    assert_non_null(buf);
    back = pic_frame_to_entry(m, buf, len, KEY, 777, err, sizeof(err));
    if (back == NULL) {
        fail_msg("%s", err);
    }
    assert_int_equal(back->n_tokens, 48);
    assert_int_equal(back->h, seam->h);
    assert_int_equal(back->w, 4);
    assert_memory_equal(back->tokens, seam->tokens, 48 * sizeof(int));
    /* every tensor byte-identical */
    pic_entry_tensor a[PIC_FRAME_MAX_DESC], b[PIC_FRAME_MAX_DESC];
    int na = pic_entry_tensors(seam, a, PIC_FRAME_MAX_DESC);
    int nb = pic_entry_tensors(back, b, PIC_FRAME_MAX_DESC);
    assert_int_equal(na, nb);
    for (int i = 0; i < na; i++) {
        assert_int_equal(a[i].bytes, b[i].bytes);
        assert_memory_equal(a[i].data, b[i].data, a[i].bytes);
    }
    pic_entry_unref(back);
    /* the wrong key, the wrong length, another model, a flipped payload bit */
    assert_null(pic_frame_to_entry(m, buf, len, "ffffffffffffffffffffffffffffffff", 777, err,
                                   sizeof(err)));
    assert_null(pic_frame_to_entry(m, buf, len, KEY, 778, err, sizeof(err)));
    m->fingerprint ^= 1;
    assert_null(pic_frame_to_entry(m, buf, len, KEY, 777, err, sizeof(err)));
    m->fingerprint ^= 1;
    buf[len / 2] ^= 0x10;
    assert_null(pic_frame_to_entry(m, buf, len, KEY, 777, err, sizeof(err)));
    assert_non_null(strstr(err, "checksum"));
    free(buf);
    pic_entry_unref(seam);
    pic_model_free(m);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_every_byte_flip_is_rejected),
        cmocka_unit_test(test_truncation_and_garbage_are_rejected),
        cmocka_unit_test(test_sealed_but_invalid_fields),
        cmocka_unit_test(test_entry_through_frame),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
