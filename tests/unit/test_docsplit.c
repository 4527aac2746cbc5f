/*
 * test_docsplit.c — document boundaries in unmarked text: where the cuts
 * fall (labels, headings, tags, blank lines, JSON items), and what PIC
 * needs from them: a document's body keeps its keys under any label, at
 * any rank, behind any other documents, CDC cuts inside it included, and
 * its label is a small dynamic segment of its own.
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
#include "pic_docsplit.h"
#include "pic_segment.h"

/* Cuts of s (NUL-terminated), soft_min as given, into cuts[16]. */
static size_t
cuts_of(const char *s, size_t soft_min, size_t *cuts)
{
    size_t n = pic_docsplit_cuts(s, strlen(s), soft_min, cuts, 16);
    assert_true(n <= 16);
    return n;
}

static void
test_header_lines_cut_before_and_after(void **state)
{
    (void) state;
    const char *s = "Intro.\n\nDocument [1]:\nalpha beta.\n\nDocument [2]:\ngamma.\n\nQ?";
    size_t      c[16];
    size_t      n = cuts_of(s, 1 << 20, c);

    /* before and after each header line; the body keeps its blank line (and
     * a one-line paragraph is a header of its own: "gamma." ends one) */
    assert_int_equal(n, 5);
    assert_string_equal(s + c[4], "Q?");
    assert_string_equal(s + c[0], "Document [1]:\nalpha beta.\n\nDocument [2]:\ngamma.\n\nQ?");
    assert_int_equal(c[1] - c[0], strlen("Document [1]:\n"));
    assert_int_equal(c[2] - c[1], strlen("alpha beta.\n\n"));
    assert_int_equal(c[3] - c[2], strlen("Document [2]:\n"));
}

static void
test_label_forms(void **state)
{
    (void) state;
    size_t c[16];

    assert_int_equal(cuts_of("x\n[3]\nbody", 1 << 20, c), 2);
    assert_int_equal(cuts_of("x\nSource: a.pdf\nbody", 1 << 20, c), 2);
    assert_int_equal(cuts_of("x\nPassage #4\nbody", 1 << 20, c), 2);
    assert_int_equal(cuts_of("x\n## Results\nbody", 1 << 20, c), 2);
    assert_int_equal(cuts_of("x\ndoc 12:\nbody", 1 << 20, c), 2);
    /* prose that merely starts with a listed word is not a label */
    assert_int_equal(cuts_of("x\nDocuments are kept here.\nbody", 1 << 20, c), 0);
    assert_int_equal(cuts_of("x\nThe source is open.\nbody", 1 << 20, c), 0);
    /* inline: "[3] text" cuts after the "]", the body keeps its space */
    const char *s = "a\n[3] The body text.";
    assert_int_equal(cuts_of(s, 1 << 20, c), 2);
    assert_string_equal(s + c[1], " The body text.");
    /* a long line is text even when it starts like a label */
    char long_line[300];
    memset(long_line, 'w', sizeof(long_line));
    memcpy(long_line, "x\nSource: ", 10);
    long_line[sizeof(long_line) - 1] = '\0';
    assert_int_equal(cuts_of(long_line, 1 << 20, c), 0);
}

static void
test_tags_wrap_documents(void **state)
{
    (void) state;
    const char *s = "Docs:\n<document index=\"2\">\nbody one\n</document>\n"
                    "<doc id=7>body two</doc>\nQ?";
    size_t      c[16];
    size_t      n = cuts_of(s, 1 << 20, c);

    assert_int_equal(n, 5);
    assert_string_equal(s + c[1], "body one\n</document>\n<doc id=7>body two</doc>\nQ?");
    assert_string_equal(s + c[2], "<doc id=7>body two</doc>\nQ?");
    assert_string_equal(s + c[3], "body two</doc>\nQ?");
    assert_string_equal(s + c[4], "Q?");
}

static void
test_blank_lines_cut_after_soft_min(void **state)
{
    (void) state;
    const char *s = "l1\nl2\n\nbb\nb2\n\ncc\nc2\n\ndd";
    size_t      c[16];

    assert_int_equal(cuts_of(s, 1, c), 3);
    assert_string_equal(s + c[0], "bb\nb2\n\ncc\nc2\n\ndd");
    /* a run cuts only soft_min bytes after the last cut */
    assert_int_equal(cuts_of(s, 12, c), 1);
    assert_string_equal(s + c[0], "cc\nc2\n\ndd");
    assert_int_equal(cuts_of(s, 1000, c), 0);
    /* a one-line paragraph is a header of its own, however short */
    const char *h = "You are agent 2.\n\nbody\nmore\n\nend";
    assert_int_equal(cuts_of(h, 1000, c), 1);
    assert_string_equal(h + c[0], "body\nmore\n\nend");
}

static void
test_json_array_items(void **state)
{
    (void) state;
    const char *s = "[{\"t\": \"a, [b]\"},\n {\"t\": \"c\"}, {\"t\": \"}\"}]";
    size_t      c[16];

    assert_int_equal(cuts_of(s, 1, c), 3);
    assert_string_equal(s + c[0], "{\"t\": \"a, [b]\"},\n {\"t\": \"c\"}, {\"t\": \"}\"}]");
    assert_string_equal(s + c[1], "{\"t\": \"c\"}, {\"t\": \"}\"}]");
    assert_string_equal(s + c[2], "{\"t\": \"}\"}]");
    assert_int_equal(cuts_of("[{\"only\": 1}]", 1, c), 0);
}

/* A deterministic ~n-byte document of words (no newlines, JSON-safe). */
static char *
body_text(unsigned seed, size_t n)
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

/* Segments a chat request whose user message holds docs[order[0..k)]
 * behind "Document [rank]:" labels, no markers, then a question. */
static void
rag_segments(char **docs, const int *order, int k, const char *label_fmt,
             pic_segmentation *s)
{
    pic_buf         b;
    pic_request     req;
    pic_error       err;
    pic_cdc         cdc;
    pic_key_ctx     keys;
    char            lab[64];

    pic_buf_init(&b);
    pic_buf_appends(&b, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                           "{\"role\":\"user\",\"content\":\"Use these.\\n\\n");
    for (int i = 0; i < k; i++) {
        snprintf(lab, sizeof(lab), label_fmt, i + 1);
        pic_buf_appends(&b, lab);
        pic_buf_appends(&b, "\\n");
        pic_buf_appends(&b, docs[order[i]]);
        pic_buf_appends(&b, "\\n\\n");
    }
    pic_buf_appends(&b, "Question: why?\"}]}");
    assert_false(b.oom);
    assert_int_equal(pic_cdc_init(&cdc, NULL, NULL), 0);
    assert_int_equal(pic_key_ctx_init(&keys, "fp", 2, "", 0, NULL), 0);

    pic_segment_cfg cfg = { PIC_TEMPLATE_QWEN3_5, NULL, 0, &cdc, &keys, 64, 1 };

    assert_int_equal(pic_request_parse(&req, PIC_REQ_CHAT, b.data, b.len, NULL, &err), 0);
    pic_segmentation_init(s);
    assert_int_equal(pic_segment_request(&cfg, &req, s, &err), 0);
    pic_request_free(&req);
    pic_key_ctx_free(&keys);
    pic_buf_free(&b);
}

/* 1 if every PIC segment inside doc (its bytes in s) has its key in t too. */
static int
body_keys_in(const pic_segmentation *s, const char *doc, const pic_segmentation *t)
{
    const char *at = strstr(s->render.text.data, doc);
    size_t      lo, hi, found = 0;

    assert_non_null(at);
    lo = (size_t) (at - s->render.text.data);
    hi = lo + strlen(doc);
    for (size_t i = 0; i < s->n_segs; i++) {
        const pic_segment *g = &s->segs[i];

        if (g->start < lo || g->start >= hi) {
            continue;
        }
        assert_true(g->start + g->len <= hi + 2);   /* the body and its "\n\n" */
        if (g->kind != PIC_SEG_PIC) {
            continue;
        }
        assert_true(g->flags & PIC_SEG_FLAG_DOC);
        found++;
        int hit = 0;
        for (size_t j = 0; j < t->n_segs; j++) {
            hit |= pic_key_equal(&g->key, &t->segs[j].key);
        }
        if (!hit) {
            return 0;
        }
    }
    return found > 0;
}

static void
test_body_keeps_keys_under_any_label_and_rank(void **state)
{
    (void) state;
    char            *docs[4] = { body_text(1, 900), body_text(2, 5000), body_text(3, 1200),
                                 body_text(4, 300) };
    int              a[] = { 0, 1, 2 }, b[] = { 3, 2, 0, 1 };
    pic_segmentation sa, sb;

    rag_segments(docs, a, 3, "Document [%d]:", &sa);
    rag_segments(docs, b, 4, "[%d]", &sb);
    for (int d = 0; d < 3; d++) {
        assert_true(body_keys_in(&sa, docs[d], &sb));
        assert_true(body_keys_in(&sb, docs[d], &sa));
    }
    /* the 5,000-byte body is cut by CDC inside too (restarted at its start) */
    size_t in_long = 0;
    const char *at = strstr(sa.render.text.data, docs[1]);
    for (size_t i = 0; i < sa.n_segs; i++) {
        in_long += sa.segs[i].start >= (size_t) (at - sa.render.text.data)
                   && sa.segs[i].start < (size_t) (at - sa.render.text.data) + 5000;
    }
    assert_true(in_long >= 2);
    /* every label is a dynamic segment of its own */
    for (size_t i = 0; i < sa.n_segs; i++) {
        const char *p = sa.render.text.data + sa.segs[i].start;
        if (!strncmp(p, "Document [", 10)) {
            assert_int_equal(sa.segs[i].kind, PIC_SEG_DYNAMIC);
            assert_int_equal(sa.segs[i].len, strlen("Document [1]:\n"));
        }
    }
    pic_segmentation_free(&sa);
    pic_segmentation_free(&sb);
    for (int d = 0; d < 4; d++) {
        free(docs[d]);
    }
}

static void
test_off_keeps_one_message_one_piece(void **state)
{
    (void) state;
    pic_render r;
    pic_region g = { PIC_REGION_USER, 1, 0, 0, 0 };
    const char *s = "Document [1]:\nbody";

    pic_render_init(&r);
    pic_buf_appends(&r.text, s);
    g.end = strlen(s);
    r.regions = &g;
    r.n_regions = 1;
    r.cap_regions = 1;
    /* the split copies the regions out; the caller's array is freed */
    r.regions = malloc(sizeof(g));
    memcpy(r.regions, &g, sizeof(g));
    assert_int_equal(pic_docsplit_render(&r, PIC_DOCSPLIT_SOFT_MIN), 0);
    assert_int_equal(r.n_regions, 2);
    assert_int_equal(r.regions[0].doc, 0);
    assert_int_equal(r.regions[1].doc, 1);
    assert_int_equal(r.regions[1].start, strlen("Document [1]:\n"));
    assert_true(pic_render_client_doc(&r, r.regions[1].start));
    pic_render_free(&r);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_lines_cut_before_and_after),
        cmocka_unit_test(test_label_forms),
        cmocka_unit_test(test_tags_wrap_documents),
        cmocka_unit_test(test_blank_lines_cut_after_soft_min),
        cmocka_unit_test(test_json_array_items),
        cmocka_unit_test(test_body_keeps_keys_under_any_label_and_rank),
        cmocka_unit_test(test_off_keeps_one_message_one_piece),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
