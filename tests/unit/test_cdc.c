/*
 * test_cdc.c — content-defined chunking: against an independent
 * re-implementation of FastCDC from its description, determinism, shift
 * invariance across markers, size bounds, token-friendly cuts, UTF-8
 * safety, edit locality and the S1 sub-windows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pic_cdc.h"
#include "pic_marker.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t
rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Prose-like text: words of 1-10 letters, spaces, some newlines. */
static char *
make_text(size_t n)
{
    char *t = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rnd() % 100;
        t[i] = r < 14 ? ' ' : r < 16 ? '\n' : (char) ('a' + rnd() % 26);
    }
    t[n] = '\0';
    return t;
}

static void
cdc_default(pic_cdc *c, uint32_t nudge)
{
    pic_cdc_params p;
    pic_cdc_params_default(&p);
    p.nudge = nudge;
    assert_int_equal(pic_cdc_init(c, &p, NULL), 0);
}

static size_t
chunks(const pic_cdc *c, const char *d, size_t n, size_t **ends)
{
    size_t cap = pic_cdc_max_chunks(c, n);
    *ends = malloc((cap ? cap : 1) * sizeof(size_t));
    size_t k = pic_cdc_chunks(c, d, n, *ends, cap);
    assert_true(k <= cap);
    return k;
}

/* --- an independent FastCDC, written from the description in pic_cdc.h --- */

static void
ref_gear(uint64_t g[256])
{
    uint64_t s = 0x7069635f63646321ull;                 /* "pic_cdc!" */
    for (int i = 0; i < 256; i++) {
        s += 0x9E3779B97F4A7C15ull;                     /* splitmix64 */
        uint64_t z = s;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        g[i] = z ^ (z >> 31);
    }
}

static size_t
ref_cut(const uint64_t g[256], const unsigned char *d, size_t n, int merge)
{
    const size_t min = 256, avg = 1024, max = 4096;
    if (n <= min) {
        return n;
    }
    size_t   end = n < max ? n : max, cut = end;
    uint64_t h = 0;
    for (size_t i = min; i < end; i++) {
        h = (h << 1) + g[d[i]];
        int bits = i < avg ? 12 : 8;                    /* log2(1024) +- 2 */
        if ((h >> (64 - bits)) == 0) {
            cut = i + 1;
            break;
        }
    }
    return merge && n - cut < min ? n : cut;            /* a runt tail joins */
}

static void
test_cdc_matches_reference_fastcdc(void **state)
{
    (void) state;
    uint64_t g[256];
    pic_cdc  c;
    ref_gear(g);
    cdc_default(&c, 0);                                 /* no nudging */
    assert_memory_equal(c.gear, g, sizeof(g));
    size_t n = 1 << 20, merged = 0;
    char  *t = make_text(n);
    for (size_t at = 0, k = 0; at < n; k++) {
        /* every other region ends early, at a random length: tail merges */
        size_t len = k % 2 ? 1 + rnd() % 1500 : n - at;
        len = len < n - at ? len : n - at;
        size_t want = ref_cut(g, (const unsigned char *) t + at, len, 1);
        size_t got = pic_cdc_cut(&c, t + at, len);
        if (want != got) {
            print_error("chunk %zu at %zu: want %zu got %zu\n", k, at, want, got);
        }
        assert_int_equal(got, want);
        merged += got == len && ref_cut(g, (const unsigned char *) t + at, len, 0) < len;
        at += got;
    }
    assert_true(merged >= 10);                          /* runt tails joined */
    free(t);
}

static void
test_cdc_deterministic_and_covering(void **state)
{
    (void) state;
    pic_cdc c1, c2;
    cdc_default(&c1, 32);
    cdc_default(&c2, 32);
    size_t  n = 300000;
    char   *t = make_text(n);
    size_t *e1, *e2;
    size_t  k1 = chunks(&c1, t, n, &e1), k2 = chunks(&c2, t, n, &e2);
    assert_int_equal(k1, k2);
    assert_memory_equal(e1, e2, k1 * sizeof(size_t));
    assert_int_equal(e1[k1 - 1], n);
    for (size_t i = 1; i < k1; i++) {
        assert_true(e1[i] > e1[i - 1]);
    }
    double avg = (double) n / (double) k1;          /* normalised chunking: near avg */
    assert_true(avg > 700 && avg < 2000);
    free(e1);
    free(e2);
    free(t);
    assert_int_equal(pic_cdc_chunks(&c1, "", 0, NULL, 0), 0);
    size_t one;
    assert_int_equal(pic_cdc_chunks(&c1, "short", 5, &one, 1), 1);
    assert_int_equal(one, 5);
}

/* Every chunk is >= min, every chunk but the last <= max and the last
 * < max + min (tail merging), on ordinary text, on text without any cut
 * candidate (one repeated byte), on whitespace only, and on multi-byte
 * UTF-8 without spaces; region lengths vary so that tails of every size
 * occur. */
static void
test_cdc_min_max_respected(void **state)
{
    (void) state;
    pic_cdc c;
    cdc_default(&c, 32);
    size_t n = 200000;
    char  *inputs[4];
    inputs[0] = make_text(n);
    inputs[1] = malloc(n);
    memset(inputs[1], 'a', n);
    inputs[2] = malloc(n);
    memset(inputs[2], ' ', n);
    inputs[3] = malloc(n);
    for (size_t i = 0; i + 3 <= n; i += 3) {
        memcpy(inputs[3] + i, "\xE4\xB8\xAD", 3);   /* U+4E2D */
    }
    n -= n % 3;
    for (int k = 0; k < 4; k++) {
        for (size_t rn = n - 3 * 4000; rn <= n; rn += 3 * 100) {   /* region lengths */
            size_t *e;
            size_t  m = chunks(&c, inputs[k], rn, &e), prev = 0;
            for (size_t i = 0; i < m; i++) {
                size_t len = e[i] - prev;
                assert_true(len >= c.p.min_size);
                if (i + 1 < m) {
                    assert_true(len <= c.p.max_size);
                } else {
                    assert_true(len < c.p.max_size + c.p.min_size);
                }
                if (k == 3) {                       /* never inside a character */
                    assert_int_equal(e[i] % 3, 0);
                }
                prev = e[i];
            }
            assert_int_equal(prev, rn);
            free(e);
        }
        free(inputs[k]);
    }
}

/* Cuts land where BPE pre-tokenisers split: before a space or after a
 * newline, whenever one is within the nudge window. */
static void
test_cdc_cuts_token_friendly(void **state)
{
    (void) state;
    pic_cdc c;
    cdc_default(&c, 32);
    size_t  n = 500000;
    char   *t = make_text(n);
    size_t *e;
    size_t  m = chunks(&c, t, n, &e), good = 0;
    for (size_t i = 0; i + 1 < m; i++) {
        size_t at = e[i];
        good += t[at] == ' ' || t[at - 1] == '\n';
    }
    assert_true(good * 100 >= (m - 1) * 95);
    free(e);
    free(t);
}

/* S2: the same document behind different prefixes yields the same chunks
 * once chunking restarts at the marker. */
static void
test_cdc_shift_invariant_after_marker(void **state)
{
    (void) state;
    pic_cdc    c;
    pic_marker mk;
    cdc_default(&c, 32);
    assert_int_equal(pic_marker_init(&mk, NULL, 0, NULL), 0);
    char  *doc = make_text(20000);
    size_t dn = strlen(doc);
    size_t pre[3] = { 0, 17, 1001 };
    size_t *ref = NULL, nref = 0;
    for (int v = 0; v < 3; v++) {
        char  *p = make_text(pre[v]);
        size_t n = pre[v] + mk.len + dn;
        char  *s = malloc(n);
        memcpy(s, p, pre[v]);
        memcpy(s + pre[v], mk.str, mk.len);
        memcpy(s + pre[v] + mk.len, doc, dn);
        size_t pos = 0, a, b, piece = 0;
        while (pic_marker_next(&mk, s, n, &pos, &a, &b)) {
            if (piece++ != 1) {
                continue;
            }
            size_t *e, k = chunks(&c, s + a, b - a, &e);
            if (!ref) {
                ref = e;
                nref = k;
            } else {
                assert_int_equal(k, nref);
                assert_memory_equal(e, ref, k * sizeof(size_t));
                free(e);
            }
        }
        free(p);
        free(s);
    }
    free(ref);
    free(doc);
}

/* An edit disturbs only the chunks around it (content-defined boundaries
 * resynchronise). */
static void
test_cdc_edit_is_local(void **state)
{
    (void) state;
    pic_cdc c;
    cdc_default(&c, 32);
    size_t n = 200000;
    char  *t = make_text(n);
    char  *u = malloc(n + 5);
    size_t at = n / 2;
    memcpy(u, t, at);
    memcpy(u + at, "EDIT!", 5);
    memcpy(u + at + 5, t + at, n - at);
    size_t *e1, *e2;
    size_t  k1 = chunks(&c, t, n, &e1), k2 = chunks(&c, u, n + 5, &e2);
    size_t  before = 0, after = 0;
    for (size_t i = 0; i < k1; i++) {
        for (size_t j = 0; j < k2; j++) {
            if (e1[i] < at && e2[j] == e1[i]) {
                before++;
            }
            if (e1[i] > at + 8192 && e2[j] == e1[i] + 5) {
                after++;
            }
        }
    }
    size_t want_before = 0, want_after = 0;
    for (size_t i = 0; i < k1; i++) {
        want_before += e1[i] < at;
        want_after += e1[i] > at + 8192;
    }
    assert_int_equal(before, want_before);
    assert_int_equal(after, want_after);
    free(e1);
    free(e2);
    free(t);
    free(u);
}

/* S1: shared content at different offsets inside two chunks yields common
 * window keys. */
static void
test_cdc_s1_windows_find_shared_content(void **state)
{
    (void) state;
    pic_cdc     c;
    pic_key_ctx kc;
    cdc_default(&c, 32);
    assert_int_equal(pic_key_ctx_init(&kc, "fp", 2, "", 0, NULL), 0);
    char  *shared = make_text(6000);
    size_t off[2] = { 300, 517 };
    pic_cdc_window w[2][256];
    size_t         nw[2];
    for (int v = 0; v < 2; v++) {
        char *x = make_text(off[v]);
        char *buf = malloc(off[v] + 6000);
        memcpy(buf, x, off[v]);
        memcpy(buf + off[v], shared, 6000);
        nw[v] = pic_cdc_windows(&c, &kc, buf, off[v] + 6000, 256, w[v], 256);
        assert_true(nw[v] <= 256);
        for (size_t i = 0; i < nw[v]; i++) {
            assert_int_equal(w[v][i].len, 256);
            assert_true(w[v][i].off >= 64);
            assert_true(w[v][i].off + 256 <= off[v] + 6000);
            if (i) {
                assert_true(w[v][i].off >= w[v][i - 1].off + 256);  /* no overlap */
            }
        }
        free(x);
        free(buf);
    }
    /* windows of the second chunk lying inside the shared text, past the
     * 64-byte warm-up and the first anchors: most appear in the first */
    size_t inside = 0, found = 0;
    for (size_t i = 0; i < nw[1]; i++) {
        if (w[1][i].off < off[1] + 1024) {
            continue;
        }
        inside++;
        for (size_t j = 0; j < nw[0]; j++) {
            found += pic_key_equal(&w[1][i].key, &w[0][j].key);
        }
    }
    assert_true(inside >= 5);
    assert_true(found * 10 >= inside * 8);
    assert_true(nw[0] * 256 >= 6000 / 2);          /* windows cover a good share */
    pic_key_ctx_free(&kc);
    free(shared);
    pic_cdc_window one;
    assert_int_equal(pic_cdc_windows(&c, &kc, "tiny", 4, 256, &one, 1), 0);
}

static void
test_cdc_params_validated(void **state)
{
    (void) state;
    pic_cdc        c;
    pic_error      err;
    pic_cdc_params p;
    pic_cdc_params_default(&p);
    assert_int_equal(pic_cdc_init(&c, NULL, &err), 0);
    p.avg_size = 1000;                          /* not a power of two */
    assert_int_equal(pic_cdc_init(&c, &p, &err), -1);
    assert_int_equal(err.status, 400);
    pic_cdc_params_default(&p);
    p.min_size = 2048;                          /* min >= avg */
    assert_int_equal(pic_cdc_init(&c, &p, &err), -1);
    pic_cdc_params_default(&p);
    p.min_size = 64;
    p.avg_size = 128;
    p.max_size = 256;
    assert_int_equal(pic_cdc_init(&c, &p, &err), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cdc_matches_reference_fastcdc),
        cmocka_unit_test(test_cdc_deterministic_and_covering),
        cmocka_unit_test(test_cdc_min_max_respected),
        cmocka_unit_test(test_cdc_cuts_token_friendly),
        cmocka_unit_test(test_cdc_shift_invariant_after_marker),
        cmocka_unit_test(test_cdc_edit_is_local),
        cmocka_unit_test(test_cdc_s1_windows_find_shared_content),
        cmocka_unit_test(test_cdc_params_validated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
