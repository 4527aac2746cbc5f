/*
 * test_reasoning.c — the <think> splitter: every way of cutting the model's
 * text into pieces gives the split of the whole text, and the whole text's
 * split is what the chat template's reading of an assistant turn gives
 * (reasoning without its framing newlines, content without leading ones).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "reasoning.h"

/* Split text fed in pieces cut at a and b (a <= b <= len). */
static void
split3(const char *text, size_t a, size_t b, int in_think, pic_buf *r, pic_buf *c)
{
    pic_thinkstream t;
    size_t          n = strlen(text);

    pic_think_init(&t, in_think);
    assert_int_equal(pic_think_feed(&t, text, a, 0, r, c), 0);
    assert_int_equal(pic_think_feed(&t, text + a, b - a, 0, r, c), 0);
    assert_int_equal(pic_think_feed(&t, text + b, n - b, 0, r, c), 0);
    assert_int_equal(pic_think_feed(&t, NULL, 0, 1, r, c), 0);
    pic_think_free(&t);
}

static void
expect_split(const char *text, int in_think, const char *reasoning, const char *content)
{
    size_t n = strlen(text);

    for (size_t a = 0; a <= n; a++) {
        for (size_t b = a; b <= n; b++) {
            pic_buf r, c;

            pic_buf_init(&r);
            pic_buf_init(&c);
            split3(text, a, b, in_think, &r, &c);
            assert_int_equal(r.len, strlen(reasoning));
            assert_memory_equal(r.len ? r.data : "", reasoning, r.len);
            assert_int_equal(c.len, strlen(content));
            assert_memory_equal(c.len ? c.data : "", content, c.len);
            pic_buf_free(&r);
            pic_buf_free(&c);
        }
    }
}

static void
test_prompt_opened_think(void **unused)
{
    /* Qwen3.5 thinking on: the prompt ends in "<think>\n" */
    expect_split("Let me see.\nYes.\n</think>\n\nThe answer.", 1,
                 "Let me see.\nYes.", "The answer.");
    /* a repeated opening tag is dropped */
    expect_split("<think>\nHmm\n</think>\n\nOK", 1, "Hmm", "OK");
    /* never closed: all reasoning (newlines kept inside, trailing kept) */
    expect_split("a\n\nb", 1, "a\n\nb", "");
    /* '<' and '</' that are no tag stay text */
    expect_split("x < y </b> z</think>w", 1, "x < y </b> z", "w");
}

static void
test_model_opened_think_and_none(void **unused)
{
    expect_split("<think>\nplan\n</think>\n\nDone", 0, "plan", "Done");
    expect_split("  <think>p</think>q", 0, "p", "q");
    expect_split("No thinking here <think> inside", 0, "", "No thinking here <think> inside");
    expect_split("<thin", 0, "", "<thin");
    expect_split("\n\nplain", 0, "", "\n\nplain");
}

static void
test_prompt_open_detection(void **unused)
{
    const char *on = "<|im_start|>assistant\n<think>\n";
    const char *off = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    const char *none = "<|im_start|>assistant\n";

    assert_int_equal(pic_think_prompt_open(on, strlen(on)), 1);
    assert_int_equal(pic_think_prompt_open(off, strlen(off)), 0);
    assert_int_equal(pic_think_prompt_open(none, strlen(none)), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompt_opened_think),
        cmocka_unit_test(test_model_opened_think_and_none),
        cmocka_unit_test(test_prompt_open_detection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
