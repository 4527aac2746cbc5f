/*
 * test_usage.c — the reuse a foreign server reports (core/plan/pic_usage.h),
 * read from answers as the real servers write them (vLLM's and OpenAI's
 * usage, llama-server's usage and timings, an SSE stream), cut into pieces
 * at every byte, and never from a key name quoted inside a string value.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pic_usage.h"

static void
scan_cut(pic_usage *u, const char *s, size_t cut)
{
    size_t len = strlen(s);

    pic_usage_init(u);
    if (cut > len) {
        cut = len;
    }
    pic_usage_scan(u, (const unsigned char *) s, cut);
    pic_usage_scan(u, (const unsigned char *) s + cut, len - cut);
}

/* vLLM / OpenAI: usage.prompt_tokens_details.cached_tokens, wherever the
 * answer is cut. */
static void
test_openai_usage_any_cut(void **state)
{
    static const char s[] =
        "{\"id\":\"x\",\"choices\":[{\"text\":\"hi\"}],\"usage\":{\"prompt_tokens\":1234,"
        "\"total_tokens\":1240,\"completion_tokens\":6,\"prompt_tokens_details\":"
        "{\"cached_tokens\":1008}}}";
    pic_usage u;
    size_t    cut;

    for (cut = 0; cut <= sizeof(s) - 1; cut++) {
        scan_cut(&u, s, cut);
        assert_int_equal(pic_usage_cached(&u), 1008);
        assert_int_equal(pic_usage_prompt(&u), 1234);
    }
}

/* llama-server: timings.cache_n and prompt_n when usage says no cached
 * tokens; cached_tokens wins over cache_n when both are there; spaces
 * around the colon (a pretty-printing server). */
static void
test_llama_timings(void **state)
{
    pic_usage u;

    scan_cut(&u, "{\"timings\": {\"cache_n\" : 40, \"prompt_n\": 2}}", 7);
    assert_int_equal(pic_usage_cached(&u), 40);
    assert_int_equal(pic_usage_prompt(&u), 42);
    scan_cut(&u, "{\"usage\":{\"prompt_tokens\":42,\"prompt_tokens_details\":"
             "{\"cached_tokens\":39}},\"timings\":{\"cache_n\":40,\"prompt_n\":2}}", 30);
    assert_int_equal(pic_usage_cached(&u), 39);
    assert_int_equal(pic_usage_prompt(&u), 42);
}

/* The last occurrence wins: an SSE stream whose final chunk has the usage. */
static void
test_sse_last_wins(void **state)
{
    pic_usage u;

    scan_cut(&u, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,"
             "\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n"
             "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":50,"
             "\"prompt_tokens_details\":{\"cached_tokens\":48}}}\n\ndata: [DONE]\n\n", 100);
    assert_int_equal(pic_usage_cached(&u), 48);
    assert_int_equal(pic_usage_prompt(&u), 50);
}

/* A key name inside a string (a model writing JSON) is text, not a key;
 * neither is a key whose value is not a number; unknown stays -1. */
static void
test_strings_are_not_keys(void **state)
{
    pic_usage u;

    scan_cut(&u, "{\"content\":\"say \\\"cached_tokens\\\":77 and \\\\\","
             "\"x\":\"cached_tokens\",\"cached_tokens\":null,\"n\":\"prompt_n\"}", 20);
    assert_int_equal(pic_usage_cached(&u), -1);
    assert_int_equal(pic_usage_prompt(&u), -1);
    /* an escaped backslash ends the string where it should: the key after
     * it is read */
    scan_cut(&u, "{\"a\":\"\\\\\",\"cached_tokens\":3}", 9);
    assert_int_equal(pic_usage_cached(&u), 3);
    /* an absurd number is dropped, not wrapped */
    scan_cut(&u, "{\"cached_tokens\":123456789012345678901234}", 5);
    assert_int_equal(pic_usage_cached(&u), -1);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openai_usage_any_cut),
        cmocka_unit_test(test_llama_timings),
        cmocka_unit_test(test_sse_last_wins),
        cmocka_unit_test(test_strings_are_not_keys),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
