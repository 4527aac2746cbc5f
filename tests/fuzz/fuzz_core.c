/*
 * fuzz_core.c — libFuzzer target for the nginx-free core: hostile request
 * bodies, plans and marker text.
 *
 * Build and run (from the repository root; clang with libFuzzer):
 *
 *   make build/fuzz/fuzz_core    (clang -fsanitize=fuzzer over the core's pic_*.c)
 *   mkdir -p build/fuzz-corpus && build/fuzz/fuzz_core -max_total_time=60 build/fuzz-corpus
 *
 * The first input byte picks the target; the rest is the input:
 *   0-2  chat body:       parse, segment in every dialect (markers, small
 *                         CDC), build and round-trip a plan, and check the
 *                         marked wire form splits back into the segments
 *   3    completions body: parse and segment
 *   4    plan JSON:       decode; if valid, encode → decode → encode is stable
 *   5    marker text:     escape never yields the marker; unescape inverts it
 * Any broken invariant traps, so libFuzzer reports it as a crash.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pic_docsplit.h"
#include "pic_plan.h"
#include "pic_segment.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

typedef struct {
    pic_cdc     cdc;
    pic_key_ctx keys;
    pic_marker  marker;
} fuzz_env;

static fuzz_env *
env_get(void)
{
    static fuzz_env *env;           /* the harness's own setup, built once */
    if (!env) {
        pic_cdc_params p = { 32, 64, 256, 8 };     /* small: many cuts */
        env = calloc(1, sizeof(*env));
        CHECK(env && pic_cdc_init(&env->cdc, &p, NULL) == 0);
        CHECK(pic_key_ctx_init(&env->keys, "fuzz", 4, "", 0, NULL) == 0);
        CHECK(pic_marker_init(&env->marker, NULL, 0, NULL) == 0);
    }
    return env;
}

static void
check_segmentation(fuzz_env *env, const pic_segmentation *s)
{
    size_t at = 0;
    for (size_t i = 0; i < s->n_segs; i++) {
        CHECK(s->segs[i].start == at && s->segs[i].len > 0);
        CHECK(s->segs[i].kind != PIC_SEG_PREFIX || i == 0);
        at += s->segs[i].len;
    }
    CHECK(at == s->render.text.len);

    /* marked wire form: split + unescape gives the segments back */
    pic_buf w;
    pic_buf_init(&w);
    if (pic_segmentation_marked(s, &env->marker, &w) == 0 && s->n_segs) {
        size_t pos = 0, a, b, i = 0;
        while (pic_marker_next(&env->marker, w.data, w.len, &pos, &a, &b)) {
            CHECK(i < s->n_segs);
            pic_buf u;
            pic_buf_init(&u);
            pic_marker_unescape(&env->marker, w.data + a, b - a, &u);
            CHECK(u.len == s->segs[i].len);
            CHECK(u.len == 0 || !memcmp(u.data, s->render.text.data + s->segs[i].start, u.len));
            pic_buf_free(&u);
            i++;
        }
        CHECK(i == s->n_segs);
    }
    pic_buf_free(&w);

    /* a plan from it survives the wire */
    pic_plan  p, q;
    pic_error err;
    pic_plan_init(&p);
    pic_plan_init(&q);
    if (pic_plan_from_segmentation(&p, s, "fuzz", "", &err) == 0) {
        p.combine = pic_plan_engine(&p, "c", &err);
        int32_t wk = pic_plan_engine(&p, "w", &err);
        CHECK(pic_plan_assign_lpt(&p, &wk, NULL, 1, 0, &err) == 0);
        pic_buf out;
        pic_buf_init(&out);
        CHECK(pic_plan_encode(&p, &out, &err) == 0);
        CHECK(pic_plan_decode(&q, out.data, out.len, &err) == 0);
        CHECK(q.n_segs == p.n_segs);
        pic_buf_free(&out);
    }
    pic_plan_free(&p);
    pic_plan_free(&q);
}

static void
fuzz_request(fuzz_env *env, pic_req_kind kind, const char *d, size_t n, int split_parts)
{
    pic_request req;
    pic_error   err;
    if (pic_request_parse(&req, kind, d, n, NULL, &err) != 0) {
        CHECK(err.status == 400 || err.status == 500);
        return;
    }
    for (int dialect = 0; dialect < PIC_TEMPLATE_N; dialect++) {
        pic_segment_cfg cfg = { (pic_template_dialect) dialect, &env->marker, split_parts,
                                &env->cdc, &env->keys, 16, dialect & 1 };
        pic_segmentation s;
        pic_segmentation_init(&s);
        if (pic_segment_request(&cfg, &req, &s, &err) == 0) {
            check_segmentation(env, &s);
        } else {
            CHECK(err.status == 400 || err.status == 500);
        }
        pic_segmentation_free(&s);
    }
    pic_request_free(&req);
}

static void
fuzz_plan(const char *d, size_t n)
{
    pic_plan  p, q;
    pic_error err;
    pic_plan_init(&p);
    pic_plan_init(&q);
    if (pic_plan_decode(&p, d, n, &err) == 0) {
        pic_buf a, b;
        pic_buf_init(&a);
        pic_buf_init(&b);
        CHECK(pic_plan_encode(&p, &a, &err) == 0);
        CHECK(pic_plan_decode(&q, a.data, a.len, &err) == 0);
        CHECK(pic_plan_encode(&q, &b, &err) == 0);
        CHECK(a.len == b.len && !memcmp(a.data, b.data, a.len));
        pic_buf_free(&a);
        pic_buf_free(&b);
    } else {
        CHECK(err.status == 400 || err.status == 500);
    }
    pic_plan_free(&p);
    pic_plan_free(&q);
}

static void
fuzz_marker(fuzz_env *env, const char *d, size_t n)
{
    pic_buf e, u;
    pic_buf_init(&e);
    pic_buf_init(&u);
    pic_marker_escape(&env->marker, d, n, &e);
    CHECK(pic_marker_find(&env->marker, e.data ? e.data : "", e.len, 0) == e.len);
    pic_marker_unescape(&env->marker, e.data ? e.data : "", e.len, &u);
    CHECK(u.len == n && (n == 0 || !memcmp(u.data, d, n)));
    pic_buf_free(&e);
    pic_buf_free(&u);
    /* document boundaries in the same bytes: ascending cuts inside the
     * text, each at an ASCII byte (never inside a UTF-8 character) */
    size_t cuts[64], k = pic_docsplit_cuts(d, n, n % 7 == 0 ? 1 : PIC_DOCSPLIT_SOFT_MIN,
                                           cuts, 64);
    for (size_t i = 0; i < k && i < 64; i++) {
        CHECK(cuts[i] > 0 && cuts[i] < n && (i == 0 || cuts[i] > cuts[i - 1]));
        CHECK((unsigned char) d[cuts[i]] < 0x80 || (unsigned char) d[cuts[i] - 1] < 0x80);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_env *env = env_get();
    if (size < 1) {
        return 0;
    }
    const char *d = (const char *) data + 1;
    size_t      n = size - 1;
    switch (data[0] % 6) {
    case 0:
    case 1:
    case 2: fuzz_request(env, PIC_REQ_CHAT, d, n, data[0] % 3 == 1); break;
    case 3: fuzz_request(env, PIC_REQ_COMPLETION, d, n, 0); break;
    case 4: fuzz_plan(d, n); break;
    case 5: fuzz_marker(env, d, n); break;
    }
    return 0;
}
