/*
 * test_marker.c — boundary markers: validation, document splitting, and the
 * escape scheme's two claims (pic_marker.h), checked exhaustively over all
 * short strings on the alphabet that can interact with the marker.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pic_marker.h"

static void
marker(pic_marker *m, const char *s)
{
    pic_error err;
    assert_int_equal(pic_marker_init(m, s, s ? strlen(s) : 0, &err), 0);
}

static void
test_marker_init_rules(void **state)
{
    (void) state;
    pic_marker m;
    pic_error  err;
    marker(&m, NULL);
    assert_string_equal(m.str, PIC_MARKER_DEFAULT);
    assert_int_equal(m.esc, '\\');
    assert_int_equal(pic_marker_init(&m, "<", 1, &err), -1);            /* too short */
    assert_int_equal(err.status, 400);
    assert_int_equal(pic_marker_init(&m, "<a<", 3, &err), -1);          /* first byte again */
    assert_int_equal(pic_marker_init(&m, "a\0b", 3, &err), -1);         /* NUL */
    assert_int_equal(pic_marker_init(&m, "\xC3(", 2, &err), -1);        /* bad UTF-8 */
    char long_m[80];
    memset(long_m, 'x', sizeof(long_m));
    long_m[0] = '#';
    assert_int_equal(pic_marker_init(&m, long_m, sizeof(long_m), &err), -1);
    marker(&m, "@x");                                                  /* esc is backslash */
    assert_int_equal(m.esc, '\\');
    marker(&m, "<\\sep>");                                              /* marker[1] is '\\' */
    assert_int_equal(m.esc, '~');
    marker(&m, "\\~");                                                  /* both taken */
    assert_int_equal(m.esc, '^');
    marker(&m, "\xC2\xA7!");                                           /* a UTF-8 marker */
    assert_int_equal(m.len, 3);
}

static char *
escape(const pic_marker *m, const char *s, size_t n, size_t *out_n)
{
    pic_buf b;
    pic_buf_init(&b);
    assert_int_equal(pic_marker_escape(m, s, n, &b), 0);
    return pic_buf_detach(&b, out_n);
}

static char *
unescape(const pic_marker *m, const char *s, size_t n, size_t *out_n)
{
    pic_buf b;
    pic_buf_init(&b);
    assert_int_equal(pic_marker_unescape(m, s, n, &b), 0);
    return pic_buf_detach(&b, out_n);
}

static void
test_marker_escape_default_example(void **state)
{
    (void) state;
    pic_marker m;
    size_t     n;
    marker(&m, NULL);
    const char *in = "a <|pic_sep|> b <\\| c <| d";
    char       *e = escape(&m, in, strlen(in), &n);
    assert_string_equal(e, "a <\\|pic_sep|> b <\\\\| c <| d");
    assert_int_equal(pic_marker_find(&m, e, n, 0), n);
    free(e);
    /* text without the marker's first byte is untouched */
    e = escape(&m, "plain text", 10, &n);
    assert_string_equal(e, "plain text");
    free(e);
}

/* Every string of length <= maxlen over alphabet: escape(x) holds no
 * marker and unescape(escape(x)) == x. */
static void
check_exhaustive(const char *mk, const char *alphabet, int maxlen)
{
    pic_marker m;
    marker(&m, mk);
    size_t k = strlen(alphabet);
    char   s[32];
    size_t checked = 0;
    for (int len = 0; len <= maxlen; len++) {
        size_t total = 1;
        for (int i = 0; i < len; i++) {
            total *= k;
        }
        for (size_t code = 0; code < total; code++) {
            size_t c = code;
            for (int i = 0; i < len; i++) {
                s[i] = alphabet[c % k];
                c /= k;
            }
            size_t en, un;
            char  *e = escape(&m, s, (size_t) len, &en);
            if (pic_marker_find(&m, e, en, 0) != en) {
                print_error("marker %s found in escape of '%.*s'\n", mk, len, s);
                fail();
            }
            char *u = unescape(&m, e, en, &un);
            if (un != (size_t) len || memcmp(u, s, un) != 0) {
                print_error("round trip of '%.*s' gave '%.*s'\n", len, s, (int) un, u);
                fail();
            }
            free(e);
            free(u);
            checked++;
        }
    }
    assert_true(checked > 1000);
}

static void
test_marker_escape_never_contains_marker_exhaustive(void **state)
{
    (void) state;
    /* alphabets: the marker's bytes, the escape byte and a neutral byte */
    check_exhaustive("<|", "<|\\x", 9);
    check_exhaustive("<|pic_sep|>", "<|pic\\x", 7);
    check_exhaustive("ab", "ab\\", 11);
    check_exhaustive("<\\", "<\\~x", 9);
}

/* Joining escaped pieces with the marker and splitting on it gives the
 * pieces back: no piece content can forge or hide a boundary. */
static void
test_marker_join_split_round_trip_exhaustive(void **state)
{
    (void) state;
    pic_marker  m;
    const char *alphabet = "<|\\x";
    char        text[16];
    marker(&m, "<|");
    for (size_t a = 0; a < 341; a++) {           /* all strings of length <= 4 */
        for (size_t b = 0; b < 341; b += 3) {
            size_t codes[2] = { a, b }, starts[2], ends[2], n = 0;
            for (int p = 0; p < 2; p++) {
                size_t c = codes[p], len = 0, base = 1;
                while (c >= base) {              /* length from the code */
                    c -= base;
                    base *= 4;
                    len++;
                }
                starts[p] = n;
                for (size_t i = 0; i < len; i++) {
                    text[n++] = alphabet[c % 4];
                    c /= 4;
                }
                ends[p] = n;
            }
            pic_buf w;
            pic_buf_init(&w);
            assert_int_equal(pic_marker_join(&m, text, starts, ends, 2, &w), 0);
            size_t pos = 0, s, e, pieces = 0;
            while (pic_marker_next(&m, w.data, w.len, &pos, &s, &e)) {
                assert_true(pieces < 2);
                size_t un;
                char  *u = unescape(&m, w.data + s, e - s, &un);
                assert_int_equal(un, ends[pieces] - starts[pieces]);
                assert_memory_equal(u, text + starts[pieces], un);
                free(u);
                pieces++;
            }
            assert_int_equal(pieces, 2);
            pic_buf_free(&w);
        }
    }
}

static void
test_marker_next_pieces(void **state)
{
    (void) state;
    pic_marker  m;
    const char *s = "<|pic_sep|>a<|pic_sep|><|pic_sep|>bc";
    size_t      pos = 0, a, b, k = 0;
    const char *want[] = { "", "a", "", "bc" };
    marker(&m, NULL);
    while (pic_marker_next(&m, s, strlen(s), &pos, &a, &b)) {
        assert_true(k < 4);
        assert_int_equal(b - a, strlen(want[k]));
        assert_memory_equal(s + a, want[k], b - a);
        k++;
    }
    assert_int_equal(k, 4);
    pos = 0;                                    /* no marker: one piece */
    assert_int_equal(pic_marker_next(&m, "xyz", 3, &pos, &a, &b), 1);
    assert_int_equal(b - a, 3);
    assert_int_equal(pic_marker_next(&m, "xyz", 3, &pos, &a, &b), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_marker_init_rules),
        cmocka_unit_test(test_marker_escape_default_example),
        cmocka_unit_test(test_marker_escape_never_contains_marker_exhaustive),
        cmocka_unit_test(test_marker_join_split_round_trip_exhaustive),
        cmocka_unit_test(test_marker_next_pieces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
