/*
 * test_pages.c — pic_pages: buffers below and above 2 MiB come back
 * zeroed, every byte writable and readable, page-aligned from 2 MiB up,
 * and freed with their size (a leak or a wrong unmap shows under the
 * ASan run and as a crash here); the pages of a large one are resident
 * before its first write (MADV_POPULATE_WRITE, where the kernel has it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cmocka.h>

#include "pic_pages.h"

static void
test_sizes_zeroed_and_writable(void **unused)
{
    static const size_t sizes[] = { 1, 4095, 4096, 100000, (2u << 20) - 1, 2u << 20,
                                    (2u << 20) + 1, 6400000, 9u << 20 };

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t         n = sizes[i];
        unsigned char *p = pic_pages_alloc(n);

        assert_non_null(p);
        if (n >= (2u << 20)) {
            assert_int_equal((uintptr_t) p % 4096, 0);
        }
        for (size_t j = 0; j < n; j += 997) {
            assert_int_equal(p[j], 0);
        }
        assert_int_equal(p[n - 1], 0);
        memset(p, 0xa5, n);
        assert_int_equal(p[n / 2], 0xa5);
        pic_pages_free(p, n);
    }
    pic_pages_free(NULL, 123);
}

/* mincore: every page of a fresh 6.4 MB buffer is in before any write
 * (skipped where the kernel lacks MADV_POPULATE_WRITE: Linux < 5.14). */
static void
test_large_buffer_is_populated(void **unused)
{
    size_t         n = 6400000, pg = (size_t) sysconf(_SC_PAGESIZE);
    size_t         np = (n + pg - 1) / pg, in = 0;
    unsigned char *p = pic_pages_alloc(n);
    unsigned char *vec = malloc(np);
    struct utsname u;
    int            major = 0, minor = 0;

    assert_non_null(p);
    assert_int_equal(mincore(p, n, vec), 0);
    for (size_t i = 0; i < np; i++) {
        in += vec[i] & 1;
    }
    pic_pages_free(p, n);
    free(vec);
    if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2
        || major * 1000 + minor < 5014) {
        skip();                         /* no MADV_POPULATE_WRITE here */
    }
    assert_int_equal(in, np);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_zeroed_and_writable),
        cmocka_unit_test(test_large_buffer_is_populated),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
