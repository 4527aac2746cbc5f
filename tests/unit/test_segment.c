/*
 * test_segment.c — the shared pipeline request → keyed segments: coverage,
 * kinds, and the properties PIC relies on: a document keeps its key
 * wherever it sits (other prefixes, other positions, reordered tool
 * results, tool subsets, user message or tool result), tenants never
 * share keys, and the marked wire form round-trips.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pic_buf.h"
#include "pic_segment.h"

typedef struct {
    pic_cdc     cdc;
    pic_key_ctx keys;
    pic_key_ctx keys_b;         /* another tenant */
    pic_marker  marker;
} fixture;

static int
setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    assert_int_equal(pic_cdc_init(&f->cdc, NULL, NULL), 0);
    assert_int_equal(pic_key_ctx_init(&f->keys, "fp", 2, "", 0, NULL), 0);
    assert_int_equal(pic_key_ctx_init(&f->keys_b, "fp", 2, "tenant-b", 8, NULL), 0);
    assert_int_equal(pic_marker_init(&f->marker, NULL, 0, NULL), 0);
    *state = f;
    return 0;
}

static int
teardown(void **state)
{
    fixture *f = *state;
    pic_key_ctx_free(&f->keys);
    pic_key_ctx_free(&f->keys_b);
    free(f);
    return 0;
}

/* A deterministic ~n-byte document with words and newlines, JSON-safe. */
static char *
document(unsigned seed, size_t n)
{
    char    *d = malloc(n + 1);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        unsigned r = (unsigned) (s >> 33) % 100;
        d[i] = r < 15 ? ' ' : r < 17 ? '.' : (char) ('a' + (s >> 40) % 26);
    }
    d[n] = '\0';
    return d;
}

static void
segment(fixture *f, const char *body, pic_template_dialect d, const pic_key_ctx *keys,
        pic_segmentation *s)
{
    pic_request     req;
    pic_error       err;
    pic_segment_cfg cfg = { d, &f->marker, 0, &f->cdc, keys ? keys : &f->keys, 64, 0 };
    assert_int_equal(pic_request_parse(&req, PIC_REQ_CHAT, body, strlen(body), NULL, &err), 0);
    pic_segmentation_init(s);
    int rc = pic_segment_request(&cfg, &req, s, &err);
    if (rc != 0) {
        print_error("%s\n", err.message);
    }
    assert_int_equal(rc, 0);
    pic_request_free(&req);
}

/* Keys of the segments cut from content regions of kind k. */
static size_t
content_keys(const pic_segmentation *s, pic_region_kind k, pic_key *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n_segs; i++) {
        if (s->segs[i].region == k && !(s->segs[i].flags & PIC_SEG_FLAG_GLUE) && n < cap) {
            out[n++] = s->segs[i].key;
        }
    }
    return n;
}

static int
has_key(const pic_segmentation *s, const pic_key *k)
{
    for (size_t i = 0; i < s->n_segs; i++) {
        if (pic_key_equal(&s->segs[i].key, k)) {
            return 1;
        }
    }
    return 0;
}

static void
test_segments_cover_text_and_keys_match_bytes(void **state)
{
    fixture *f = *state;
    char    *doc = document(1, 9000);
    char    *body = malloc(20000);
    snprintf(body, 20000,
             "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"You help.\"},"
             "{\"role\":\"user\",\"content\":\"%s\"}]}", doc);
    for (int d = 0; d < 2; d++) {
        pic_segmentation s;
        segment(f, body, (pic_template_dialect) d, NULL, &s);
        size_t at = 0;
        for (size_t i = 0; i < s.n_segs; i++) {
            const pic_segment *g = &s.segs[i];
            assert_int_equal(g->start, at);
            assert_true(g->len > 0);
            pic_key k;
            pic_key_compute(&f->keys, s.render.text.data + g->start, g->len, &k);
            assert_true(pic_key_equal(&k, &g->key));
            assert_int_equal(g->tokens, (g->len + 3) / 4);
            at += g->len;
        }
        assert_int_equal(at, s.render.text.len);
        /* segment 0 is the prefix "<|im_start|>system\nYou help." */
        assert_int_equal(s.segs[0].kind, PIC_SEG_PREFIX);
        assert_int_equal(s.segs[0].len, strlen("<|im_start|>system\nYou help."));
        /* the long user message was cut by CDC; its last chunk and the rest
         * (footer, generation prompt) are dynamic, its other chunks pic */
        size_t n_user = 0, last_user = 0;
        for (size_t i = 0; i < s.n_segs; i++) {
            if (s.segs[i].region == PIC_REGION_USER) {
                n_user++;
                last_user = i;
            }
        }
        assert_true(n_user >= 4);
        for (size_t i = 0; i < s.n_segs; i++) {
            if (i >= last_user) {
                assert_int_equal(s.segs[i].kind, PIC_SEG_DYNAMIC);
            } else if (s.segs[i].region == PIC_REGION_USER) {
                assert_int_equal(s.segs[i].kind, PIC_SEG_PIC);
                assert_true(s.segs[i].flags & PIC_SEG_FLAG_CDC);
                assert_true(s.segs[i].len >= f->cdc.p.min_size);
                assert_true(s.segs[i].len <= f->cdc.p.max_size);
            }
        }
        pic_segmentation_free(&s);
    }
    free(body);
    free(doc);
}

/* The same tool result behind different histories and at different
 * positions produces the same segment keys (S2 + content-only regions). */
static void
test_document_keys_shift_invariant(void **state)
{
    fixture *f = *state;
    char    *doc = document(2, 12150);      /* its last cut leaves a runt */
    char    *body = malloc(40000);
    pic_key  ref[64];
    size_t   nref = 0;
    const char *histories[] = {
        "{\"role\":\"user\",\"content\":\"read the file\"}",
        "{\"role\":\"system\",\"content\":\"Agent 7. Long header that differs.\"},"
        "{\"role\":\"user\",\"content\":\"earlier question\"},"
        "{\"role\":\"assistant\",\"content\":\"earlier answer\"},"
        "{\"role\":\"user\",\"content\":\"now read the file please\"}",
    };
    for (int d = 0; d < 2; d++) {
        nref = 0;
        for (int h = 0; h < 2; h++) {
            snprintf(body, 40000,
                     "{\"model\":\"m\",\"messages\":[%s,"
                     "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"1\","
                     "\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"{}\"}}]},"
                     "{\"role\":\"tool\",\"tool_call_id\":\"1\",\"content\":\"%s\"},"
                     "{\"role\":\"user\",\"content\":\"summarise\"}]}", histories[h], doc);
            pic_segmentation s;
            segment(f, body, (pic_template_dialect) d, NULL, &s);
            pic_key keys[64];
            size_t  n = content_keys(&s, PIC_REGION_TOOL_RESULT, keys, 64);
            assert_true(n >= 5);
            if (h == 0) {
                memcpy(ref, keys, n * sizeof(pic_key));
                nref = n;
            } else {
                assert_int_equal(n, nref);
                for (size_t i = 0; i < n; i++) {
                    assert_true(pic_key_equal(&keys[i], &ref[i]));
                }
            }
            /* every chunk, the document's last included (tail merging), is
             * at least min_size and reusable (pic) */
            for (size_t i = 0; i < s.n_segs; i++) {
                if (s.segs[i].region == PIC_REGION_TOOL_RESULT) {
                    assert_true(s.segs[i].len >= f->cdc.p.min_size);
                    assert_int_equal(s.segs[i].kind, PIC_SEG_PIC);
                }
            }
            pic_segmentation_free(&s);
        }
    }
    free(body);
    free(doc);
}

/* Reordered tool results (rerank) keep their keys; a document delimited
 * by markers in a user message has the same key as the same bytes in a
 * tool result. */
static void
test_rerank_and_cross_role_keys(void **state)
{
    fixture *f = *state;
    char    *a = document(3, 700), *b = document(4, 650);
    char    *body = malloc(8000);
    pic_segmentation s1, s2, s3;
#define TOOLS "{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"\"," \
    "\"tool_calls\":[{\"id\":\"1\",\"type\":\"function\",\"function\":{\"name\":\"s\"," \
    "\"arguments\":\"{}\"}}]},"
    snprintf(body, 8000, "{\"model\":\"m\",\"messages\":[" TOOLS
             "{\"role\":\"tool\",\"content\":\"%s\"},{\"role\":\"tool\",\"content\":\"%s\"}]}", a, b);
    segment(f, body, PIC_TEMPLATE_QWEN3, NULL, &s1);
    snprintf(body, 8000, "{\"model\":\"m\",\"messages\":[" TOOLS
             "{\"role\":\"tool\",\"content\":\"%s\"},{\"role\":\"tool\",\"content\":\"%s\"}]}", b, a);
    segment(f, body, PIC_TEMPLATE_QWEN3, NULL, &s2);
    snprintf(body, 8000, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
             "\"Context:<|pic_sep|>%s<|pic_sep|>%s<|pic_sep|>Question?\"}]}", a, b);
    segment(f, body, PIC_TEMPLATE_QWEN3, NULL, &s3);
#undef TOOLS
    pic_key ka, kb;
    pic_key_compute(&f->keys, a, strlen(a), &ka);
    pic_key_compute(&f->keys, b, strlen(b), &kb);
    assert_true(has_key(&s1, &ka) && has_key(&s1, &kb));
    assert_true(has_key(&s2, &ka) && has_key(&s2, &kb));
    assert_true(has_key(&s3, &ka) && has_key(&s3, &kb));
    pic_segmentation_free(&s1);
    pic_segmentation_free(&s2);
    pic_segmentation_free(&s3);
    free(body);
    free(a);
    free(b);
}

/* Documents a client delimited with the marker are flagged declared
 * reusable (PIC_SEG_FLAG_DOC), the first and the last of the message too;
 * a message of one document (system prompt, tool result) and the glue are
 * not; pic_render_client_doc answers the same at any byte. */
static void
test_client_delimited_documents_are_flagged(void **state)
{
    fixture *f = *state;
    char    *a = document(5, 700), *b = document(6, 650), *c = document(7, 600);
    char    *body = malloc(8000);
    pic_segmentation s;
    size_t   n_doc = 0;

    snprintf(body, 8000, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":"
             "\"%s\"},{\"role\":\"user\",\"content\":\"%s<|pic_sep|>%s<|pic_sep|>"
             "Question?\"},{\"role\":\"assistant\",\"content\":\"ok\"},"
             "{\"role\":\"user\",\"content\":\"%s\"},{\"role\":\"user\","
             "\"content\":\"end\"}]}", c, a, b, c);
    segment(f, body, PIC_TEMPLATE_QWEN3, NULL, &s);
    for (size_t i = 0; i < s.n_segs; i++) {
        const pic_segment *g = &s.segs[i];
        int doc = g->region == PIC_REGION_USER && g->index == 1;

        assert_int_equal(!!(g->flags & PIC_SEG_FLAG_DOC), doc);
        assert_int_equal(pic_render_client_doc(&s.render, g->start), doc);
        assert_int_equal(pic_render_client_doc(&s.render, g->start + g->len - 1), doc);
        n_doc += doc;
    }
    assert_true(n_doc >= 3);                /* a's and b's chunks and the question */
    assert_int_equal(pic_render_client_doc(&s.render, s.render.text.len), 0);
    pic_segmentation_free(&s);
    free(body);
    free(a);
    free(b);
    free(c);
}

/* Keys of the segments cut from tool schema `index`'s region. */
static size_t
schema_keys(const pic_segmentation *s, int32_t index, pic_key *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n_segs; i++) {
        const pic_segment *g = &s->segs[i];
        if (g->region == PIC_REGION_TOOL_SCHEMA && g->index == index && n < cap) {
            out[n++] = g->key;
        }
    }
    return n;
}

/* A tool schema keeps its keys whatever subset of tools is listed and in
 * whatever order, first place included (the tools preamble is a segment of
 * its own), in both dialects, with and without a system message; short
 * schemas are one segment, long ones are cut by CDC alike. */
static void
test_tool_schema_subsets_keep_keys(void **state)
{
    fixture *f = *state;
    char    *desc = document(9, 3000);
    char    *t[3];
    t[0] = malloc(4096);
    snprintf(t[0], 4096, "{\"type\":\"function\",\"function\":{\"name\":\"alpha\","
             "\"description\":\"%s\"}}", desc);
    t[1] = strdup("{\"type\":\"function\",\"function\":{\"name\":\"beta\",\"description\":"
                  "\"second tool with another long description so that it is not below "
                  "the minimum size\"}}");
    t[2] = strdup("{\"type\":\"function\",\"function\":{\"name\":\"gamma\",\"description\":"
                  "\"third tool also with a long description, long enough to be a pic "
                  "segment in the plan\"}}");
    /* listings as tool indices; -1 ends */
    const int   lists[4][4] = { { 0, 1, 2, -1 }, { 2, 0, -1 }, { 1, 2, 0, -1 }, { 0, 2, -1 } };
    const char *sys[2] = { "", "{\"role\":\"system\",\"content\":\"You are an agent.\"}," };
    char       *body = malloc(16384);
    for (int d = 0; d < 2; d++) {
        for (int y = 0; y < 2; y++) {
            pic_key ref[3][16];
            size_t  nref[3] = { 0, 0, 0 };
            for (int l = 0; l < 4; l++) {
                size_t at = (size_t) snprintf(body, 16384, "{\"model\":\"m\",\"tools\":[");
                for (int k = 0; lists[l][k] >= 0; k++) {
                    at += (size_t) snprintf(body + at, 16384 - at, "%s%s", k ? "," : "",
                                            t[lists[l][k]]);
                }
                snprintf(body + at, 16384 - at, "],\"messages\":[%s{\"role\":\"user\","
                         "\"content\":\"hi\"}]}", sys[y]);
                pic_segmentation s;
                segment(f, body, (pic_template_dialect) d, NULL, &s);
                assert_int_equal(s.segs[0].kind, PIC_SEG_PREFIX);
                for (int k = 0; lists[l][k] >= 0; k++) {
                    int     tool = lists[l][k];
                    pic_key keys[16];
                    size_t  n = schema_keys(&s, k, keys, 16);
                    assert_true(n >= (tool == 0 ? 2u : 1u));        /* alpha is cut */
                    if (nref[tool] == 0) {
                        memcpy(ref[tool], keys, n * sizeof(pic_key));
                        nref[tool] = n;
                    }
                    assert_int_equal(n, nref[tool]);
                    for (size_t i = 0; i < n; i++) {
                        assert_true(pic_key_equal(&keys[i], &ref[tool][i]));
                    }
                }
                /* schemas are never in the prefix: segment 0 holds no tool
                 * bytes unless a system message leads (Qwen3) */
                for (size_t i = 0; i < s.n_segs; i++) {
                    if (s.segs[i].region == PIC_REGION_TOOL_SCHEMA) {
                        assert_true(i > 0);
                        if (s.segs[i].len >= 64) {
                            assert_int_equal(s.segs[i].kind, PIC_SEG_PIC);
                        }
                    }
                }
                pic_segmentation_free(&s);
            }
        }
    }
    /* the keys are those of the schemas' own bytes (json.dumps style) */
    pic_key k1;
    const char *beta = "{\"type\": \"function\", \"function\": {\"name\": \"beta\", "
                       "\"description\": \"second tool with another long description so "
                       "that it is not below the minimum size\"}}";
    pic_key_compute(&f->keys, beta, strlen(beta), &k1);
    pic_segmentation s;
    snprintf(body, 16384, "{\"model\":\"m\",\"tools\":[%s,%s],\"messages\":[{\"role\":"
             "\"user\",\"content\":\"hi\"}]}", t[1], t[2]);
    segment(f, body, PIC_TEMPLATE_QWEN3_5, NULL, &s);
    assert_true(has_key(&s, &k1));
    pic_segmentation_free(&s);
    for (int k = 0; k < 3; k++) {
        free(t[k]);
    }
    free(body);
    free(desc);
}

static void
test_tenants_never_share_keys(void **state)
{
    fixture *f = *state;
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":"
                       "\"shared system prompt\"},{\"role\":\"user\",\"content\":\"x\"}]}";
    pic_segmentation a, b;
    segment(f, body, PIC_TEMPLATE_QWEN3, &f->keys, &a);
    segment(f, body, PIC_TEMPLATE_QWEN3, &f->keys_b, &b);
    assert_int_equal(a.n_segs, b.n_segs);
    for (size_t i = 0; i < a.n_segs; i++) {
        assert_int_equal(a.segs[i].len, b.segs[i].len);
        assert_false(pic_key_equal(&a.segs[i].key, &b.segs[i].key));
    }
    pic_segmentation_free(&a);
    pic_segmentation_free(&b);
}

/* The marked wire form splits back into exactly the segments, even when
 * client text quotes the marker (document splitting off). */
static void
test_marked_form_round_trip(void **state)
{
    fixture *f = *state;
    pic_request      req;
    pic_error        err;
    pic_segmentation s;
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
                       "\"quote: <|pic_sep|> and <\\\\| end\"}]}";
    pic_segment_cfg cfg = { PIC_TEMPLATE_QWEN3, NULL, 0, &f->cdc, &f->keys, 0, 0 };
    assert_int_equal(pic_request_parse(&req, PIC_REQ_CHAT, body, strlen(body), NULL, &err), 0);
    pic_segmentation_init(&s);
    assert_int_equal(pic_segment_request(&cfg, &req, &s, &err), 0);
    assert_non_null(strstr(s.render.text.data, "quote: <|pic_sep|> and <\\| end"));
    pic_buf w;
    pic_buf_init(&w);
    assert_int_equal(pic_segmentation_marked(&s, &f->marker, &w), 0);
    size_t pos = 0, a, b, i = 0;
    while (pic_marker_next(&f->marker, w.data, w.len, &pos, &a, &b)) {
        assert_true(i < s.n_segs);
        pic_buf u;
        pic_buf_init(&u);
        pic_marker_unescape(&f->marker, w.data + a, b - a, &u);
        assert_int_equal(u.len, s.segs[i].len);
        assert_memory_equal(u.data, s.render.text.data + s.segs[i].start, u.len);
        pic_buf_free(&u);
        i++;
    }
    assert_int_equal(i, s.n_segs);
    pic_buf_free(&w);
    pic_segmentation_free(&s);
    pic_request_free(&req);
}

static void
test_glue_and_small_segments_dynamic(void **state)
{
    fixture *f = *state;
    pic_segmentation s;
    segment(f, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
               "{\"role\":\"user\",\"content\":\"tiny\"},{\"role\":\"assistant\",\"content\":"
               "\"short\"},{\"role\":\"user\",\"content\":\"end\"}]}",
            PIC_TEMPLATE_QWEN3, NULL, &s);
    assert_int_equal(s.segs[0].kind, PIC_SEG_PREFIX);
    for (size_t i = 1; i < s.n_segs; i++) {
        assert_int_equal(s.segs[i].kind, PIC_SEG_DYNAMIC);     /* all < 64 bytes */
        if (s.segs[i].region == PIC_REGION_GLUE) {
            assert_true(s.segs[i].flags & PIC_SEG_FLAG_GLUE);
        }
    }
    pic_segmentation_free(&s);
}

static void
test_token_prompt_has_no_segments(void **state)
{
    fixture *f = *state;
    pic_request      req;
    pic_error        err;
    pic_segmentation s;
    pic_segment_cfg  cfg = { PIC_TEMPLATE_QWEN3, &f->marker, 0, &f->cdc, &f->keys, 64, 0 };
    const char      *body = "{\"model\":\"m\",\"prompt\":[1,2,3]}";
    assert_int_equal(pic_request_parse(&req, PIC_REQ_COMPLETION, body, strlen(body), NULL,
                                       &err), 0);
    pic_segmentation_init(&s);
    assert_int_equal(pic_segment_request(&cfg, &req, &s, &err), 0);
    assert_int_equal(s.n_segs, 0);
    pic_segmentation_free(&s);
    pic_request_free(&req);
}

/* What is built at its first sighting (PIC_SEG_FLAG_AHEAD): content and
 * glue before the newest message, never an assistant turn, never the
 * newest message (an agent loop's fresh tool result). */
static void
test_ahead_of_the_newest_message(void **state)
{
    fixture         *f = *state;
    pic_segmentation s;
    char             body[4096];
    char            *sys = document(21, 600), *res = document(22, 600), *q = document(23, 600);

    snprintf(body, sizeof(body),
             "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"%s\"},"
             "{\"role\":\"user\",\"content\":\"do the task\"},"
             "{\"role\":\"assistant\",\"content\":\"calling the tool now, then more\"},"
             "{\"role\":\"tool\",\"content\":\"%s\"},"
             "{\"role\":\"tool\",\"content\":\"%s\"}]}", sys, res, q);
    segment(f, body, PIC_TEMPLATE_QWEN3_5, NULL, &s);
    int seen_sys = 0, seen_res = 0, seen_new = 0;
    for (size_t i = 0; i < s.n_segs; i++) {
        const pic_segment *g = &s.segs[i];
        int                ahead = (g->flags & PIC_SEG_FLAG_AHEAD) != 0;

        if (g->region == PIC_REGION_SYSTEM) {
            assert_true(ahead);
            seen_sys = 1;
        } else if (g->region == PIC_REGION_ASSISTANT) {
            assert_false(ahead);
        } else if (g->region == PIC_REGION_TOOL_RESULT && g->index == 3) {
            assert_true(ahead);
            seen_res = 1;
        } else if (g->region == PIC_REGION_TOOL_RESULT && g->index == 4) {
            assert_false(ahead);
            seen_new = 1;
        } else if (g->start > s.segs[s.n_segs - 1].start - 1 && i == s.n_segs - 1) {
            assert_false(ahead);        /* the generation prompt */
        }
    }
    assert_true(seen_sys && seen_res && seen_new);
    pic_segmentation_free(&s);
    free(sys);
    free(res);
    free(q);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segments_cover_text_and_keys_match_bytes),
        cmocka_unit_test(test_document_keys_shift_invariant),
        cmocka_unit_test(test_rerank_and_cross_role_keys),
        cmocka_unit_test(test_client_delimited_documents_are_flagged),
        cmocka_unit_test(test_tool_schema_subsets_keep_keys),
        cmocka_unit_test(test_tenants_never_share_keys),
        cmocka_unit_test(test_marked_form_round_trip),
        cmocka_unit_test(test_glue_and_small_segments_dynamic),
        cmocka_unit_test(test_token_prompt_has_no_segments),
        cmocka_unit_test(test_ahead_of_the_newest_message),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
