/*
 * test_plan.c — the plan wire format: build from a segmentation, LPT worker
 * assignment, encode/decode round trip, and strict rejection of hostile
 * plans (each with a 400 naming the field).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pic_plan.h"

static const char *K1 = "0123456789abcdef0123456789abcdef";

/* A small hand-written valid plan. */
static const char *GOOD =
    "{\"version\":1,\"id\":\"p-1\",\"combine\":\"e1\",\"scope\":\"t\",\"segments\":["
    "{\"key\":\"0123456789abcdef0123456789abcdef\",\"offset\":0,\"bytes\":100,\"tokens\":25,"
    "\"kind\":\"prefix\",\"holders\":[\"e1\"],\"worker\":null},"
    "{\"key\":\"fedcba9876543210fedcba9876543210\",\"offset\":100,\"bytes\":4000,"
    "\"tokens\":1000,\"kind\":\"pic\",\"holders\":[],\"worker\":\"10.0.0.2:8081\"},"
    "{\"key\":\"00000000000000000000000000000000\",\"offset\":4100,\"bytes\":30,\"tokens\":8,"
    "\"kind\":\"dynamic\",\"holders\":[],\"worker\":null}]}";

static void
test_plan_decode_good_and_reencode_identical(void **state)
{
    (void) state;
    pic_plan p;
    pic_error err;
    pic_plan_init(&p);
    assert_int_equal(pic_plan_decode(&p, GOOD, strlen(GOOD), &err), 0);
    assert_string_equal(p.id, "p-1");
    assert_string_equal(p.engines[p.combine].id, "e1");
    assert_string_equal(p.scope, "t");
    assert_int_equal(p.n_segs, 3);
    assert_string_equal(p.segs[0].key.hex, K1);
    assert_int_equal(p.segs[0].key.len, 100);
    assert_int_equal(p.segs[0].kind, PIC_SEG_PREFIX);
    assert_int_equal(p.segs[0].n_holders, 1);
    assert_int_equal(p.segs[0].holders[0], p.combine);
    assert_string_equal(p.engines[p.segs[1].worker].id, "10.0.0.2:8081");
    assert_int_equal(p.segs[2].worker, -1);
    assert_int_equal(p.n_engines, 2);
    pic_buf out;
    pic_buf_init(&out);
    assert_int_equal(pic_plan_encode(&p, &out, &err), 0);
    assert_string_equal(out.data, GOOD);
    pic_buf_free(&out);
    pic_plan_free(&p);
}

/* Replaces the first occurrence of `from` in GOOD by `to` and expects a
 * 400 whose param is `param`. */
static void
expect_bad_plan(const char *from, const char *to, const char *param)
{
    char        buf[2048];
    const char *at = strstr(GOOD, from);
    assert_non_null(at);
    snprintf(buf, sizeof(buf), "%.*s%s%s", (int) (at - GOOD), GOOD, to, at + strlen(from));
    pic_plan  p;
    pic_error err;
    pic_plan_init(&p);
    int rc = pic_plan_decode(&p, buf, strlen(buf), &err);
    if (rc == 0) {
        print_error("accepted: %s\n", buf);
    }
    assert_int_equal(rc, -1);
    assert_int_equal(err.status, 400);
    if (strcmp(err.param, param ? param : "") != 0) {
        print_error("param '%s' != '%s' (%s) for %s\n", err.param, param ? param : "",
                    err.message, buf);
    }
    assert_string_equal(err.param, param ? param : "");
    assert_int_equal(p.n_segs, 0);
    assert_null(p.engines);
}

static void
test_plan_hostile_inputs_rejected(void **state)
{
    (void) state;
    expect_bad_plan("\"version\":1", "\"version\":2", "version");
    expect_bad_plan("\"version\":1", "\"version\":1.0", "version");
    expect_bad_plan("\"version\":1", "\"version\":\"1\"", "version");
    expect_bad_plan("\"id\":\"p-1\"", "\"id\":\"p 1\"", "id");
    expect_bad_plan("\"id\":\"p-1\"", "\"id\":\"\"", "id");
    expect_bad_plan("\"combine\":\"e1\"", "\"combine\":\"e 1\"", "combine");
    expect_bad_plan("\"combine\":\"e1\"", "\"combine\":7", "combine");
    expect_bad_plan("\"scope\":\"t\"", "\"scope\":\"t\",\"extra\":1", NULL);
    expect_bad_plan("\"scope\":\"t\",", "", NULL);                          /* missing */
    expect_bad_plan("0123456789abcdef0123456789abcdef", "0123456789ABCDEF0123456789abcdef",
                    "segments[0].key");
    expect_bad_plan("0123456789abcdef0123456789abcdef", "0123", "segments[0].key");
    expect_bad_plan("\"offset\":100", "\"offset\":101", "segments[1].offset");
    expect_bad_plan("\"offset\":100", "\"offset\":-100", "segments[1].offset");
    expect_bad_plan("\"offset\":100", "\"offset\":1e2", "segments[1].offset");
    expect_bad_plan("\"bytes\":100", "\"bytes\":0", "segments[0].bytes");
    expect_bad_plan("\"bytes\":100", "\"bytes\":99999999999", "segments[0].bytes");
    expect_bad_plan("\"tokens\":25", "\"tokens\":101", "segments[0].tokens");
    expect_bad_plan("\"kind\":\"pic\"", "\"kind\":\"prefix\"", "segments[1].kind");
    expect_bad_plan("\"kind\":\"pic\"", "\"kind\":\"PIC\"", "segments[1].kind");
    expect_bad_plan("\"holders\":[\"e1\"]", "\"holders\":[\"e1\",\"e1\"]",
                    "segments[0].holders[1]");
    expect_bad_plan("\"holders\":[\"e1\"]",
                    "\"holders\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]",
                    "segments[0].holders");
    expect_bad_plan("\"holders\":[\"e1\"]", "\"holders\":[\"e1\\n\"]", "segments[0].holders");
    expect_bad_plan("\"holders\":[\"e1\"]", "\"holders\":\"e1\"", "segments[0].holders");
    expect_bad_plan("\"kind\":\"dynamic\",\"holders\":[],\"worker\":null",
                    "\"kind\":\"dynamic\",\"holders\":[],\"worker\":\"e1\"", "segments[2].worker");
    expect_bad_plan("\"worker\":\"10.0.0.2:8081\"", "\"worker\":3", "segments[1].worker");
    expect_bad_plan("\"tokens\":8,", "\"tokens\":8,\"x\":1,", "segments[2]");
    expect_bad_plan("\"tokens\":8,", "", "segments[2]");                     /* missing */
    expect_bad_plan("{\"key\":\"0000", "[{\"key\":\"0000", NULL);            /* depth/shape */
    expect_bad_plan("\"segments\":[", "\"segments\":{", NULL);
}

static void
test_plan_rejects_malformed_and_deep_json(void **state)
{
    (void) state;
    pic_plan  p;
    pic_error err;
    pic_plan_init(&p);
    assert_int_equal(pic_plan_decode(&p, "", 0, &err), -1);
    assert_int_equal(err.status, 400);
    assert_int_equal(pic_plan_decode(&p, "[]", 2, &err), -1);
    char deep[64];
    memset(deep, '[', sizeof(deep));
    assert_int_equal(pic_plan_decode(&p, deep, sizeof(deep), &err), -1);
    assert_string_equal(err.code, "nesting_too_deep");
    /* too many distinct engines */
    pic_buf b;
    pic_buf_init(&b);
    pic_buf_appends(&b, "{\"version\":1,\"id\":\"x\",\"combine\":\"c\",\"scope\":\"\",\"segments\":[");
    for (int i = 0; i < 300; i++) {
        pic_buf_printf(&b, "%s{\"key\":\"%s\",\"offset\":%d,\"bytes\":1,\"tokens\":1,"
                       "\"kind\":\"pic\",\"holders\":[\"h%d\"],\"worker\":null}",
                       i ? "," : "", K1, i, i);
    }
    pic_buf_appends(&b, "]}");
    assert_int_equal(pic_plan_decode(&p, b.data, b.len, &err), -1);
    assert_int_equal(err.status, 400);
    pic_buf_free(&b);
}

/* Built from a real segmentation, LPT spreads the cold pic segments over
 * the workers, leaves held and dynamic ones alone (and those before
 * `from`), and survives a round trip through the wire. */
static void
test_plan_from_segmentation_with_lpt(void **state)
{
    (void) state;
    pic_cdc          cdc;
    pic_key_ctx      keys;
    pic_request      req;
    pic_segmentation s;
    pic_error        err;
    pic_plan         p, q;
    assert_int_equal(pic_cdc_init(&cdc, NULL, NULL), 0);
    assert_int_equal(pic_key_ctx_init(&keys, "fp", 2, "", 0, NULL), 0);
    pic_segment_cfg cfg = { PIC_TEMPLATE_QWEN3_5, NULL, 0, &cdc, &keys, 64, 0 };
    pic_buf body;
    pic_buf_init(&body);
    pic_buf_appends(&body, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"sys\"},"
                           "{\"role\":\"user\",\"content\":\"");
    for (int i = 0; i < 3000; i++) {
        pic_buf_printf(&body, "w%d ", i * 7919 % 10007);
    }
    pic_buf_appends(&body, "\"}]}");
    assert_int_equal(pic_request_parse(&req, PIC_REQ_CHAT, body.data, body.len, NULL, &err), 0);
    pic_segmentation_init(&s);
    assert_int_equal(pic_segment_request(&cfg, &req, &s, &err), 0);

    pic_plan_init(&p);
    assert_int_equal(pic_plan_from_segmentation(&p, &s, "req-42", "", &err), 0);
    p.combine = pic_plan_engine(&p, "c0", &err);
    int32_t w[3] = { pic_plan_engine(&p, "w1", &err), pic_plan_engine(&p, "w2", &err),
                     pic_plan_engine(&p, "w3", &err) };
    p.segs[1].holders[0] = (uint16_t) p.combine;         /* one segment already cached */
    p.segs[1].n_holders = 1;
    uint64_t loads[3] = { 0, 0, 5000 };                  /* w3 is busy */
    assert_int_equal(pic_plan_assign_lpt(&p, w, loads, 3, 0, &err), 0);
    size_t per[3] = { 0, 0, 0 }, cold = 0;
    for (size_t i = 0; i < p.n_segs; i++) {
        const pic_plan_segment *g = &p.segs[i];
        if (g->kind == PIC_SEG_DYNAMIC || g->n_holders) {
            assert_int_equal(g->worker, -1);
            continue;
        }
        cold++;
        assert_true(g->worker >= w[0] && g->worker <= w[2]);
        per[g->worker - w[0]]++;
    }
    assert_true(cold >= 4);
    assert_true(per[0] > 0 && per[1] > 0);
    assert_int_equal(per[2], 0);                          /* 5000 tokens of backlog */

    /* from: the segments before it (an exact-first combine's own) get no
     * worker, the same LPT spreads the rest */
    size_t from = 3;
    for (size_t i = 0; i < p.n_segs; i++) {
        p.segs[i].worker = -1;
    }
    assert_int_equal(pic_plan_assign_lpt(&p, w, loads, 3, from, &err), 0);
    cold = 0;
    for (size_t i = 0; i < p.n_segs; i++) {
        if (i < from) {
            assert_int_equal(p.segs[i].worker, -1);
        } else if (p.segs[i].kind != PIC_SEG_DYNAMIC && !p.segs[i].n_holders) {
            assert_true(p.segs[i].worker >= w[0] && p.segs[i].worker <= w[1]);
            cold++;
        }
    }
    assert_true(cold >= 1);
    assert_int_equal(pic_plan_assign_lpt(&p, w, loads, 3, p.n_segs + 5, &err), 0);

    pic_buf out;
    pic_buf_init(&out);
    assert_int_equal(pic_plan_encode(&p, &out, &err), 0);
    pic_plan_init(&q);
    assert_int_equal(pic_plan_decode(&q, out.data, out.len, &err), 0);
    assert_int_equal(q.n_segs, p.n_segs);
    for (size_t i = 0; i < p.n_segs; i++) {
        assert_true(pic_key_equal(&p.segs[i].key, &q.segs[i].key));
        assert_int_equal(p.segs[i].offset, q.segs[i].offset);
        assert_int_equal(p.segs[i].kind, q.segs[i].kind);
        if (p.segs[i].worker >= 0) {
            assert_string_equal(p.engines[p.segs[i].worker].id, q.engines[q.segs[i].worker].id);
        }
    }
    pic_buf out2;
    pic_buf_init(&out2);
    assert_int_equal(pic_plan_encode(&q, &out2, &err), 0);
    assert_int_equal(out.len, out2.len);                  /* same plan, same bytes */
    assert_memory_equal(out.data, out2.data, out.len);

    pic_buf_free(&out);
    pic_buf_free(&out2);
    pic_buf_free(&body);
    pic_plan_free(&p);
    pic_plan_free(&q);
    pic_segmentation_free(&s);
    pic_request_free(&req);
    pic_key_ctx_free(&keys);
}

/* A repeated field is a 400, never a merge: a second "segments" array
 * would replace (and leak) the first, a second "holders" would add to it. */
static void
test_plan_duplicate_fields_rejected(void **state)
{
    (void) state;
    pic_plan  p;
    pic_error err;
    char      buf[2048];
    const char *segs = strstr(GOOD, ",\"segments\":");

    pic_plan_init(&p);
    /* GOOD with its segments array given twice */
    snprintf(buf, sizeof(buf), "%.*s%s", (int) (strlen(GOOD) - 1), GOOD, segs);
    assert_int_equal(pic_plan_decode(&p, buf, strlen(buf), &err), -1);
    assert_int_equal(err.status, 400);
    assert_string_equal(err.code, "duplicate_parameter");
    assert_int_equal(p.n_segs, 0);
    assert_null(p.segs);
    /* a segment naming its holders twice */
    const char *dup =
        "{\"version\":1,\"id\":\"p\",\"combine\":\"e1\",\"scope\":\"\",\"segments\":["
        "{\"key\":\"0123456789abcdef0123456789abcdef\",\"offset\":0,\"bytes\":100,"
        "\"tokens\":25,\"kind\":\"pic\",\"holders\":[\"e1\"],\"holders\":[\"e2\"],"
        "\"worker\":null}]}";
    assert_int_equal(pic_plan_decode(&p, dup, strlen(dup), &err), -1);
    assert_string_equal(err.code, "duplicate_parameter");
    assert_string_equal(err.param, "segments[0].holders");
    pic_plan_free(&p);
}

static void
test_plan_encode_validates(void **state)
{
    (void) state;
    pic_plan  p;
    pic_error err;
    pic_buf   out;
    pic_plan_init(&p);
    pic_buf_init(&out);
    strcpy(p.id, "x");
    assert_int_equal(pic_plan_encode(&p, &out, &err), -1);      /* no combine engine */
    assert_string_equal(err.param, "combine");
    assert_int_equal(pic_plan_engine(&p, "bad id", &err), -1);
    p.combine = pic_plan_engine(&p, "c", &err);
    assert_int_equal(pic_plan_encode(&p, &out, &err), 0);
    assert_string_equal(out.data, "{\"version\":1,\"id\":\"x\",\"combine\":\"c\",\"scope\":\"\","
                                  "\"segments\":[]}");
    pic_buf_free(&out);
    pic_plan_free(&p);
}

/* X-PIC-Held: hex digit k = segments 4k..4k+3, bit 0 first; values
 * worked out by hand */
static void
test_plan_held_format_and_parse(void **state)
{
    (void) state;
    unsigned char held[10] = { 1, 0, 1, 1, 0, 0, 0, 0, 0, 1 };
    unsigned char back[10], none[10] = { 0 }, *big;
    char          out[PIC_PLAN_HELD_MAX + 1];

    assert_int_equal(pic_plan_held_format(held, 10, out), 3);
    assert_string_equal(out, "d02");
    assert_int_equal(pic_plan_held_parse(out, 3, 10, back), 0);
    assert_memory_equal(back, held, 10);
    assert_int_equal(pic_plan_held_parse("D02", 3, 10, back), 0);   /* either case */
    assert_memory_equal(back, held, 10);

    assert_int_equal(pic_plan_held_format(none, 10, out), 1);      /* none: "0" */
    assert_string_equal(out, "0");
    assert_int_equal(pic_plan_held_parse("0", 1, 10, back), 0);
    assert_memory_equal(back, none, 10);
    held[9] = 0;
    assert_int_equal(pic_plan_held_format(held, 10, out), 1);      /* trailing zeros dropped */
    assert_string_equal(out, "d");

    /* malformed: empty, not hex, a bit past the last segment; held zeroed */
    assert_int_equal(pic_plan_held_parse("", 0, 10, back), -1);
    assert_int_equal(pic_plan_held_parse("dx", 2, 10, back), -1);
    assert_memory_equal(back, none, 10);
    assert_int_equal(pic_plan_held_parse("d04", 3, 10, back), -1);  /* segment 10 of 10 */
    assert_int_equal(pic_plan_held_parse("d000", 4, 10, back), 0);  /* zero digits past n: fine */

    /* more segments than the header reports: only the first 8192 */
    big = malloc(9000);
    assert_non_null(big);
    memset(big, 1, 9000);
    assert_int_equal(pic_plan_held_format(big, 9000, out), PIC_PLAN_HELD_MAX);
    assert_int_equal(pic_plan_held_parse(out, PIC_PLAN_HELD_MAX, 9000, big), 0);
    assert_int_equal(big[8191], 1);
    assert_int_equal(big[8192], 0);
    free(big);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_decode_good_and_reencode_identical),
        cmocka_unit_test(test_plan_hostile_inputs_rejected),
        cmocka_unit_test(test_plan_rejects_malformed_and_deep_json),
        cmocka_unit_test(test_plan_from_segmentation_with_lpt),
        cmocka_unit_test(test_plan_encode_validates),
        cmocka_unit_test(test_plan_duplicate_fields_rejected),
        cmocka_unit_test(test_plan_held_format_and_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
