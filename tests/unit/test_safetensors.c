/*
 * test_safetensors.c — the safetensors reader on well-formed and hostile
 * files written here byte by byte: every malformed header must give an
 * error naming the file and the tensor, never a crash (run under ASan or
 * valgrind to see the error paths are clean).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "safetensors.h"

static char tmpdir[256];
static char err[1024];

/* --- helpers --- */

static const char *
tpath(const char *name)
{
    static char p[4][512];
    static int  k;

    k = (k + 1) % 4;
    snprintf(p[k], sizeof(p[k]), "%s/%s", tmpdir, name);
    return p[k];
}

static void
write_raw(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
}

/* 8-byte LE header length (hlen, normally strlen(header)), header, data */
static void
write_st_len(const char *path, uint64_t hlen, const char *header,
             const void *data, size_t dlen)
{
    size_t   n = strlen(header);
    uint8_t *buf = malloc(8 + n + dlen + 1);
    int      i;

    assert_non_null(buf);
    for (i = 0; i < 8; i++) {
        buf[i] = (uint8_t) (hlen >> (8 * i));
    }
    memcpy(buf + 8, header, n);
    if (dlen) {
        memcpy(buf + 8 + n, data, dlen);
    }
    write_raw(path, buf, 8 + n + dlen);
    free(buf);
}

static void
write_st(const char *path, const char *header, const void *data, size_t dlen)
{
    write_st_len(path, strlen(header), header, data, dlen);
}

/* open must fail, and the message must hold every given substring */
static void
expect_open_fails(const char *path, ...)
{
    pic_st     *st;
    const char *s;
    va_list     ap;

    err[0] = '\0';
    st = pic_st_open(path, err, sizeof(err));
    if (st != NULL) {
        pic_st_close(st);
        fail_msg("%s opened but should not", path);
    }
    if (getenv("PIC_TEST_VERBOSE")) {
        print_message("  error: %s\n", err);
    }
    va_start(ap, path);
    while ((s = va_arg(ap, const char *)) != NULL) {
        if (strstr(err, s) == NULL) {
            va_end(ap);
            fail_msg("error '%s' lacks '%s'", err, s);
        }
    }
    va_end(ap);
}

static int
setup(void **state)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/pic_st_test.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int
teardown(void **state)
{
    char cmd[600];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* --- well-formed files --- */

static void
test_reads_f32_bf16_f16_and_skips_metadata(void **state)
{
    /* a: F32 [2,2] at 0..16, b: BF16 [3] at 16..22, c: F16 [9] at 22..40 */
    const char *hdr =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
        "\"c\":{\"dtype\":\"F16\",\"shape\":[9],\"data_offsets\":[22,40]}}  ";
    float    a[4] = { 1.0f, -2.0f, 0.5f, 3.25f }, out[9];
    uint16_t b[3] = { 0x3f80, 0xc020, 0x4049 };     /* 1, -2.5, 3.140625 */
    uint16_t c[9] = { 0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x7c00,
                      0x8000, 0x3555, 0xfc00 };
    uint8_t  data[40];
    pic_st  *st;
    const pic_st_tensor *t;

    memcpy(data, a, 16);
    memcpy(data + 16, b, 6);
    memcpy(data + 22, c, 18);
    write_st(tpath("ok.safetensors"), hdr, data, sizeof(data));

    st = pic_st_open(tpath("ok.safetensors"), err, sizeof(err));
    assert_non_null(st);
    assert_int_equal(pic_st_count(st), 3);          /* no __metadata__ */
    assert_null(pic_st_find(st, "__metadata__"));
    assert_null(pic_st_find(st, "nope"));

    t = pic_st_find(st, "a");
    assert_non_null(t);
    assert_int_equal(t->dtype, PIC_ST_DTYPE_F32);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 2);
    assert_int_equal(t->numel, 4);
    assert_int_equal(pic_st_read_f32(t, 0, 4, out, err, sizeof(err)), 0);
    assert_memory_equal(out, a, 16);
    assert_int_equal(pic_st_read_f32(t, 1, 2, out, err, sizeof(err)), 0);
    assert_true(out[0] == -2.0f && out[1] == 0.5f);

    t = pic_st_find(st, "b");
    assert_int_equal(t->dtype, PIC_ST_DTYPE_BF16);
    assert_int_equal(pic_st_read_f32(t, 0, 3, out, err, sizeof(err)), 0);
    assert_true(out[0] == 1.0f);
    assert_true(out[1] == -2.5f);
    assert_true(out[2] == 3.140625f);

    t = pic_st_find(st, "c");
    assert_int_equal(t->dtype, PIC_ST_DTYPE_F16);
    assert_int_equal(pic_st_read_f32(t, 0, 9, out, err, sizeof(err)), 0);
    assert_true(out[0] == 1.0f);
    assert_true(out[1] == -2.0f);
    assert_true(out[2] == 65504.0f);                /* largest half */
    assert_true(out[3] == 0x1p-24f);                /* smallest subnormal */
    assert_true(out[4] == 0x3ffp-24f);              /* largest subnormal */
    assert_true(out[5] == INFINITY);
    assert_true(out[6] == 0.0f && signbit(out[6])); /* -0 */
    assert_true(out[7] == 0.333251953125f);         /* 0x3555 */
    assert_true(out[8] == -INFINITY);

    /* a range past the tensor is refused, not read */
    assert_int_equal(pic_st_read_f32(t, 8, 2, out, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "'c'"));
    pic_st_close(st);
}

static void
test_f16_bf16_match_formula_for_all_finite(void **state)
{
    uint32_t h;

    /* every finite half equals (-1)^s * 2^(e-15) * (1 + m/1024) (or the
     * subnormal form); every bf16 is the top half of an fp32 */
    for (h = 0; h < 0x10000; h++) {
        int    s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double want;
        float  got = pic_f16_to_f32((uint16_t) h);

        if (e == 0x1f) {
            assert_true(m ? isnan(got) : isinf(got));
            continue;
        }
        want = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
        if (s) {
            want = -want;
        }
        assert_true((double) got == want);
    }
    assert_true(pic_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(pic_bf16_to_f32(0x4120) == 10.0f);
    assert_true(pic_bf16_to_f32(0xbf00) == -0.5f);
    assert_true(pic_bf16_to_f32(0x0001) == 0x1p-133f);
}

static void
test_zero_size_and_empty_shape_are_fine(void **state)
{
    const char *hdr =
        "{\"e\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[4,4]},"
        "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}";
    float   v = 7.0f, out;
    pic_st *st;

    write_st(tpath("zero.safetensors"), hdr, &v, 4);
    st = pic_st_open(tpath("zero.safetensors"), err, sizeof(err));
    assert_non_null(st);
    assert_int_equal(pic_st_find(st, "e")->numel, 0);
    assert_int_equal(pic_st_find(st, "s")->numel, 1);
    assert_int_equal(pic_st_read_f32(pic_st_find(st, "s"), 0, 1, &out, err,
                                     sizeof(err)), 0);
    assert_true(out == 7.0f);
    pic_st_close(st);
}

static void
test_unsupported_dtype_opens_but_does_not_convert(void **state)
{
    const char *hdr =
        "{\"ids\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    int32_t  ids[2] = { 1, 2 };
    float    out[2];
    pic_st  *st;

    write_st(tpath("i32.safetensors"), hdr, ids, 8);
    st = pic_st_open(tpath("i32.safetensors"), err, sizeof(err));
    assert_non_null(st);
    assert_int_equal(pic_st_find(st, "ids")->dtype, PIC_ST_DTYPE_OTHER);
    assert_int_equal(pic_st_read_f32(pic_st_find(st, "ids"), 0, 2, out, err,
                                     sizeof(err)), -1);
    assert_non_null(strstr(err, "'ids'"));
    assert_non_null(strstr(err, "I32"));
    assert_non_null(strstr(err, "i32.safetensors"));
    pic_st_close(st);
}

/* --- hostile files --- */

static void
test_truncated_file(void **state)
{
    write_raw(tpath("trunc.safetensors"), "\x10\x00\x00", 3);
    expect_open_fails(tpath("trunc.safetensors"), "trunc.safetensors",
                      "truncated", NULL);
    write_raw(tpath("empty.safetensors"), "", 0);
    expect_open_fails(tpath("empty.safetensors"), "empty.safetensors",
                      "truncated", NULL);
}

static void
test_header_length_beyond_file(void **state)
{
    write_st_len(tpath("long.safetensors"), 1000, "{}", NULL, 0);
    expect_open_fails(tpath("long.safetensors"), "long.safetensors",
                      "beyond the end", NULL);
}

static void
test_huge_header_length(void **state)
{
    write_st_len(tpath("huge.safetensors"), 1ull << 40, "{}", NULL, 0);
    expect_open_fails(tpath("huge.safetensors"), "huge.safetensors",
                      "exceeds", NULL);
    write_st_len(tpath("huge2.safetensors"), UINT64_MAX, "{}", NULL, 0);
    expect_open_fails(tpath("huge2.safetensors"), "huge2.safetensors",
                      "exceeds", NULL);
}

static void
test_non_json_header(void **state)
{
    write_st(tpath("nj.safetensors"), "{\"a\": {\"dtype\": \"F3", NULL, 0);
    expect_open_fails(tpath("nj.safetensors"), "nj.safetensors",
                      "not a JSON object", NULL);
    write_st(tpath("arr.safetensors"), "[1,2,3]", NULL, 0);
    expect_open_fails(tpath("arr.safetensors"), "not a JSON object", NULL);
    write_st(tpath("ent.safetensors"), "{\"w\": 3}", NULL, 0);
    expect_open_fails(tpath("ent.safetensors"), "'w'", "not an object",
                      NULL);
}

static void
test_offsets_out_of_range(void **state)
{
    uint8_t data[8] = { 0 };

    write_st(tpath("oor.safetensors"),
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],"
             "\"data_offsets\":[0,16]}}", data, 8);
    expect_open_fails(tpath("oor.safetensors"), "oor.safetensors", "'w'",
                      "outside the data area", NULL);
    write_st(tpath("neg.safetensors"),
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
             "\"data_offsets\":[-4,0]}}", data, 8);
    expect_open_fails(tpath("neg.safetensors"), "'w'", "non-negative", NULL);
    write_st(tpath("one.safetensors"),
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
             "\"data_offsets\":[0]}}", data, 8);
    expect_open_fails(tpath("one.safetensors"), "'w'", "[begin, end]", NULL);
}

static void
test_end_before_begin(void **state)
{
    uint8_t data[8] = { 0 };

    write_st(tpath("eb.safetensors"),
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
             "\"data_offsets\":[8,4]}}", data, 8);
    expect_open_fails(tpath("eb.safetensors"), "eb.safetensors", "'w'",
                      "end 4 < begin 8", NULL);
}

static void
test_size_differs_from_shape_times_dtype(void **state)
{
    uint8_t data[16] = { 0 };

    write_st(tpath("sz.safetensors"),
             "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],"
             "\"data_offsets\":[0,16]}}", data, 16);
    expect_open_fails(tpath("sz.safetensors"), "sz.safetensors", "'w'",
                      "16 data bytes", "needs 12", NULL);
}

static void
test_overlapping_tensors(void **state)
{
    uint8_t data[24] = { 0 };

    write_st(tpath("ov.safetensors"),
             "{\"first\":{\"dtype\":\"F32\",\"shape\":[4],"
             "\"data_offsets\":[0,16]},"
             "\"second\":{\"dtype\":\"F32\",\"shape\":[2],"
             "\"data_offsets\":[12,20]}}", data, 24);
    expect_open_fails(tpath("ov.safetensors"), "ov.safetensors", "'second'",
                      "overlaps", "'first'", NULL);
    /* contained, listed in the other order */
    write_st(tpath("ov2.safetensors"),
             "{\"inner\":{\"dtype\":\"F32\",\"shape\":[1],"
             "\"data_offsets\":[8,12]},"
             "\"outer\":{\"dtype\":\"F32\",\"shape\":[6],"
             "\"data_offsets\":[0,24]}}", data, 24);
    expect_open_fails(tpath("ov2.safetensors"), "overlaps", "'inner'",
                      "'outer'", NULL);
}

static void
test_unknown_dtype(void **state)
{
    uint8_t data[4] = { 0 };

    write_st(tpath("dt.safetensors"),
             "{\"w\":{\"dtype\":\"F24\",\"shape\":[1],"
             "\"data_offsets\":[0,4]}}", data, 4);
    expect_open_fails(tpath("dt.safetensors"), "dt.safetensors", "'w'",
                      "unknown dtype 'F24'", NULL);
    write_st(tpath("dt2.safetensors"),
             "{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}",
             data, 4);
    expect_open_fails(tpath("dt2.safetensors"), "'w'", "missing dtype", NULL);
}

static void
test_negative_overflowing_and_odd_shapes(void **state)
{
    uint8_t data[4] = { 0 };

    write_st(tpath("sh1.safetensors"),
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],"
             "\"data_offsets\":[0,4]}}", data, 4);
    expect_open_fails(tpath("sh1.safetensors"), "sh1.safetensors", "'w'",
                      "shape[0]", NULL);
    /* 2^32 * 2^32 overflows u64 */
    write_st(tpath("sh2.safetensors"),
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
             "\"data_offsets\":[0,4]}}", data, 4);
    expect_open_fails(tpath("sh2.safetensors"), "'w'", "overflows", NULL);
    /* numel fits but numel * 4 bytes does not */
    write_st(tpath("sh3.safetensors"),
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[4503599627370496,2048],"
             "\"data_offsets\":[0,4]}}", data, 4);
    expect_open_fails(tpath("sh3.safetensors"), "'w'", "byte size overflows",
                      NULL);
    write_st(tpath("sh4.safetensors"),
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],"
             "\"data_offsets\":[0,4]}}", data, 4);
    expect_open_fails(tpath("sh4.safetensors"), "'w'", "shape[0]", NULL);
    write_st(tpath("sh5.safetensors"),
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
             "\"data_offsets\":[0,4]}}", data, 4);
    expect_open_fails(tpath("sh5.safetensors"), "'w'", "9 dims", NULL);
    write_st(tpath("sh6.safetensors"),
             "{\"w\":{\"dtype\":\"F32\",\"shape\":\"4\","
             "\"data_offsets\":[0,4]}}", data, 4);
    expect_open_fails(tpath("sh6.safetensors"), "'w'", "missing shape",
                      NULL);
}

static void
test_duplicate_names_rejected(void **state)
{
    uint8_t data[8] = { 0 };

    write_st(tpath("dup.safetensors"),
             "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             data, 8);
    expect_open_fails(tpath("dup.safetensors"), "'w'", "twice", NULL);
}

static void
test_random_corruption_never_crashes(void **state)
{
    const char *hdr =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]}}";
    size_t   hl = strlen(hdr), len = 8 + hl + 22, i, k;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    uint8_t *good = calloc(1, len), *bad = malloc(len);
    float    out[4];
    int      opened = 0;

    assert_non_null(good);
    assert_non_null(bad);
    for (i = 0; i < 8; i++) {
        good[i] = (uint8_t) (hl >> (8 * i));
    }
    memcpy(good + 8, hdr, hl);
    for (k = 0; k < 3000; k++) {
        pic_st *st;
        size_t  n;

        memcpy(bad, good, len);
        for (i = 0; i < 1 + k % 4; i++) {       /* flip 1..4 bytes */
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            bad[rng % (8 + hl)] ^= (uint8_t) (1u << ((rng >> 32) % 8));
        }
        n = (k % 7 == 0) ? len - (rng >> 40) % len : len;   /* truncate */
        write_raw(tpath("fz.safetensors"), bad, n);
        st = pic_st_open(tpath("fz.safetensors"), err, sizeof(err));
        if (st == NULL) {
            assert_true(err[0] != '\0');
            continue;
        }
        opened++;
        for (i = 0; i < pic_st_count(st); i++) {   /* reads stay inside */
            const pic_st_tensor *t = pic_st_get(st, i);

            if (t->numel <= 4) {
                pic_st_read_f32(t, 0, t->numel, out, err, sizeof(err));
            }
        }
        pic_st_close(st);
    }
    assert_true(opened > 0);
    free(good);
    free(bad);
}

/* --- several files (in their own directory) --- */

static char sdir[600];

static const char *
spath(const char *name)
{
    static char p[4][800];
    static int  k;

    if (sdir[0] == '\0') {
        snprintf(sdir, sizeof(sdir), "%s/shards", tmpdir);
        assert_int_equal(mkdir(sdir, 0700), 0);
    }
    k = (k + 1) % 4;
    snprintf(p[k], sizeof(p[k]), "%s/%s", sdir, name);
    return p[k];
}

static void
write_two_shards(void)
{
    float a[2] = { 1.0f, 2.0f }, b[3] = { 3.0f, 4.0f, 5.0f };

    write_st(spath("model-00001-of-00002.safetensors"),
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
             a, 8);
    write_st(spath("model-00002-of-00002.safetensors"),
             "{\"b\":{\"dtype\":\"F32\",\"shape\":[3],"
             "\"data_offsets\":[0,12]}}", b, 12);
}

static void
write_index(const char *json)
{
    write_raw(spath("model.safetensors.index.json"), json, strlen(json));
}

static void
test_sharded_index_opens_each_shard_once(void **state)
{
    pic_st *st;
    float   out[3];

    write_two_shards();
    write_index("{\"metadata\":{\"total_size\":20},\"weight_map\":{"
                "\"a\":\"model-00001-of-00002.safetensors\","
                "\"b\":\"model-00002-of-00002.safetensors\"}}");
    st = pic_st_open_dir(sdir, err, sizeof(err));
    assert_non_null(st);
    assert_int_equal(pic_st_file_count(st), 2);
    assert_int_equal(pic_st_count(st), 2);
    assert_non_null(strstr(pic_st_find(st, "a")->file, "00001"));
    assert_non_null(strstr(pic_st_find(st, "b")->file, "00002"));
    assert_int_equal(pic_st_read_f32(pic_st_find(st, "b"), 0, 3, out, err,
                                     sizeof(err)), 0);
    assert_true(out[0] == 3.0f && out[2] == 5.0f);
    pic_st_close(st);
    unlink(spath("model.safetensors.index.json"));
    unlink(spath("model-00001-of-00002.safetensors"));
    unlink(spath("model-00002-of-00002.safetensors"));
}

static void
test_sharded_index_errors(void **state)
{
    pic_st *st;

    write_two_shards();

    /* a tensor promised by the index but absent */
    write_index("{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
                "\"c\":\"model-00002-of-00002.safetensors\"}}");
    st = pic_st_open_dir(sdir, err, sizeof(err));
    assert_null(st);
    assert_non_null(strstr(err, "'c'"));
    assert_non_null(strstr(err, "model-00002-of-00002.safetensors"));

    /* in the wrong shard */
    write_index("{\"weight_map\":{\"a\":\"model-00002-of-00002.safetensors\","
                "\"b\":\"model-00002-of-00002.safetensors\"}}");
    st = pic_st_open_dir(sdir, err, sizeof(err));
    assert_null(st);
    assert_non_null(strstr(err, "'a'"));

    /* path traversal */
    write_index("{\"weight_map\":{\"a\":\"../x.safetensors\"}}");
    st = pic_st_open_dir(sdir, err, sizeof(err));
    assert_null(st);
    assert_non_null(strstr(err, "plain file name"));

    /* a shard missing on disk */
    write_index("{\"weight_map\":{\"a\":\"gone.safetensors\"}}");
    st = pic_st_open_dir(sdir, err, sizeof(err));
    assert_null(st);
    assert_non_null(strstr(err, "gone.safetensors"));

    /* not an index */
    write_index("{\"weight_map\":[]}");
    st = pic_st_open_dir(sdir, err, sizeof(err));
    assert_null(st);
    assert_non_null(strstr(err, "weight_map"));
    write_index("garbage");
    st = pic_st_open_dir(sdir, err, sizeof(err));
    assert_null(st);
    assert_non_null(strstr(err, "index.json"));

    /* the same tensor in two shards (no index: every *.safetensors) */
    unlink(spath("model.safetensors.index.json"));
    write_st(spath("model-00002-of-00002.safetensors"),
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
             "\0\0\0\0", 4);
    st = pic_st_open_dir(sdir, err, sizeof(err));
    assert_null(st);
    assert_non_null(strstr(err, "'a'"));
    assert_non_null(strstr(err, "twice"));
    unlink(spath("model-00001-of-00002.safetensors"));
    unlink(spath("model-00002-of-00002.safetensors"));
}

static void
test_directory_without_weights(void **state)
{
    char empty[600];

    snprintf(empty, sizeof(empty), "%s/nothing", tmpdir);
    assert_int_equal(mkdir(empty, 0700), 0);
    assert_null(pic_st_open_dir(empty, err, sizeof(err)));
    assert_non_null(strstr(err, "nothing"));
    assert_null(pic_st_open(tpath("absent.safetensors"), err, sizeof(err)));
    assert_non_null(strstr(err, "absent.safetensors"));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_f32_bf16_f16_and_skips_metadata),
        cmocka_unit_test(test_f16_bf16_match_formula_for_all_finite),
        cmocka_unit_test(test_zero_size_and_empty_shape_are_fine),
        cmocka_unit_test(test_unsupported_dtype_opens_but_does_not_convert),
        cmocka_unit_test(test_truncated_file),
        cmocka_unit_test(test_header_length_beyond_file),
        cmocka_unit_test(test_huge_header_length),
        cmocka_unit_test(test_non_json_header),
        cmocka_unit_test(test_offsets_out_of_range),
        cmocka_unit_test(test_end_before_begin),
        cmocka_unit_test(test_size_differs_from_shape_times_dtype),
        cmocka_unit_test(test_overlapping_tensors),
        cmocka_unit_test(test_unknown_dtype),
        cmocka_unit_test(test_negative_overflowing_and_odd_shapes),
        cmocka_unit_test(test_duplicate_names_rejected),
        cmocka_unit_test(test_random_corruption_never_crashes),
        cmocka_unit_test(test_sharded_index_opens_each_shard_once),
        cmocka_unit_test(test_sharded_index_errors),
        cmocka_unit_test(test_directory_without_weights),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
