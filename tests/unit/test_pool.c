/*
 * test_pool.c — the public pool of segment entries (engine/pic/pool.h): hits
 * and misses by (key, length), model fingerprint check, LRU order under a
 * byte budget, eviction callbacks (after the lock: a callback may call the
 * pool), an evicted entry staying alive while a request holds it, budget
 * changes, and many threads at once.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "entry.h"
#include "model.h"
#include "pool.h"

#define FP 0x1234abcdULL

/* A stand-in entry of a given size (the pool only reads bytes and the
 * fingerprint). */
static pic_entry *
fake(size_t bytes, uint64_t fp)
{
    pic_entry *e = calloc(1, sizeof(*e));
    e->bytes = bytes;
    e->fingerprint = fp;
    e->refs = 1;
    e->data = malloc(16);
    memset(e->data, 0x5a, 16);
    return e;
}

typedef struct {
    char      keys[64][PIC_POOL_KEY_MAX + 1];
    int       n;
    pic_pool *pool;             /* probed from inside the callback */
} evict_log;

static void
on_evict(void *user, const char *key, uint64_t len, size_t bytes)
{
    evict_log *l = user;
    if (l->pool != NULL) {
        (void) pic_pool_contains(l->pool, key, len);    /* would deadlock under the lock */
    }
    if (l->n < 64) {
        snprintf(l->keys[l->n++], sizeof(l->keys[0]), "%s", key);
    }
    assert_true(bytes > 0);
}

static void
test_hits_misses_and_fingerprint(void **unused)
{
    char           err[128];
    pic_pool      *p = pic_pool_init(100000, FP, err, sizeof(err));
    pic_entry     *a = fake(1000, FP), *other = fake(1000, FP + 1);
    pic_pool_stats st;

    assert_int_equal(pic_pool_put(p, "aaaa", 17, a), 0);
    assert_int_equal(a->refs, 2);
    assert_int_equal(pic_pool_put(p, "bbbb", 5, other), -1);    /* another model */
    pic_entry *g = pic_pool_get(p, "aaaa", 17);
    assert_ptr_equal(g, a);
    assert_int_equal(a->refs, 3);
    pic_entry_unref(g);
    assert_null(pic_pool_get(p, "aaaa", 18));       /* same key, other length */
    assert_null(pic_pool_get(p, "bbbb", 5));
    assert_int_equal(pic_pool_put(p, "", 1, a), -1);
    char longkey[PIC_POOL_KEY_MAX + 2];
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    assert_int_equal(pic_pool_put(p, longkey, 1, a), -1);
    pic_pool_stats_get(p, &st);
    assert_int_equal(st.hits, 1);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.insertions, 1);
    assert_int_equal(st.rejected, 3);
    assert_int_equal(st.items, 1);
    assert_true(st.bytes >= 1000 && st.bytes < 2000);
    assert_int_equal(pic_pool_contains(p, "aaaa", 17), 1);
    pic_pool_free(p);
    assert_int_equal(a->refs, 1);
    pic_entry_unref(a);
    pic_entry_unref(other);
}

static void
test_lru_budget_and_callbacks(void **unused)
{
    char           err[128];
    pic_pool      *p = pic_pool_init(3500, FP, err, sizeof(err));
    evict_log      log = { .n = 0 };
    pic_pool_stats st;
    const char    *names[] = { "A", "B", "C", "D", "E" };
    pic_entry     *e[5];

    log.pool = p;
    pic_pool_set_evict_cb(p, on_evict, &log);
    for (int i = 0; i < 5; i++) {
        e[i] = fake(1000, FP);
    }
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pic_pool_put(p, names[i], 1, e[i]), 0);
    }
    pic_entry_unref(pic_pool_get(p, "A", 1));       /* A is now most recent */
    assert_int_equal(pic_pool_put(p, "D", 1, e[3]), 0);
    assert_int_equal(log.n, 1);
    assert_string_equal(log.keys[0], "B");          /* least recently used */
    assert_int_equal(pic_pool_contains(p, "B", 1), 0);
    assert_int_equal(pic_pool_contains(p, "A", 1), 1);

    /* a request holds C; C is evicted; the entry lives until it lets go */
    pic_entry *held = pic_pool_get(p, "C", 1);
    pic_entry_unref(pic_pool_get(p, "A", 1));
    pic_entry_unref(pic_pool_get(p, "D", 1));
    assert_int_equal(pic_pool_put(p, "E", 1, e[4]), 0);
    assert_string_equal(log.keys[1], "C");
    assert_int_equal(((unsigned char *) held->data)[15], 0x5a);
    assert_int_equal(held->refs, 2);                /* ours + the test's original */
    pic_entry_unref(held);

    /* replacing a key announces nothing */
    pic_entry *a2 = fake(500, FP);
    assert_int_equal(pic_pool_put(p, "A", 1, a2), 0);
    assert_int_equal(log.n, 2);
    pic_entry_unref(a2);

    /* too big for the budget */
    pic_entry *big = fake(4000, FP);
    assert_int_equal(pic_pool_put(p, "big", 1, big), -1);
    assert_int_equal(big->refs, 1);
    pic_entry_unref(big);

    pic_pool_stats_get(p, &st);
    assert_true(st.bytes <= st.budget);
    assert_int_equal(st.evictions, 2);
    assert_int_equal(st.items, 3);

    /* shrink the budget: the oldest go, announced */
    pic_pool_set_budget(p, 1200);
    pic_pool_stats_get(p, &st);
    assert_int_equal(st.items, 1);
    assert_int_equal(log.n, 4);
    assert_int_equal(pic_pool_remove(p, "A", 1), 1);
    assert_int_equal(pic_pool_remove(p, "A", 1), 0);
    assert_string_equal(log.keys[4], "A");
    pic_pool_stats_get(p, &st);
    assert_int_equal(st.items, 0);
    assert_int_equal(st.bytes, 0);
    pic_pool_free(p);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(e[i]->refs, 1);
        pic_entry_unref(e[i]);
    }
}

typedef struct {
    pic_pool *p;
    int       id;
} worker_arg;

static void *
worker(void *v)
{
    worker_arg *a = v;
    char        key[32];

    for (int i = 0; i < 3000; i++) {
        snprintf(key, sizeof(key), "k%d", (i * 7 + a->id * 13) % 20);
        if (i % 3 == 0) {
            pic_entry *e = fake(100 + (size_t) (i % 5) * 50, FP);
            pic_pool_put(a->p, key, 1, e);
            pic_entry_unref(e);
        } else if (i % 17 == 0) {
            pic_pool_remove(a->p, key, 1);
        } else {
            pic_entry *e = pic_pool_get(a->p, key, 1);
            if (e != NULL) {
                assert_int_equal(((unsigned char *) e->data)[3], 0x5a);
                pic_entry_unref(e);
            }
        }
    }
    return NULL;
}

static void
test_threads(void **unused)
{
    char           err[128];
    pic_pool      *p = pic_pool_init(4000, FP, err, sizeof(err));
    pthread_t      t[4];
    worker_arg     a[4];
    pic_pool_stats st;

    for (int i = 0; i < 4; i++) {
        a[i].p = p;
        a[i].id = i;
        pthread_create(&t[i], NULL, worker, &a[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
    }
    pic_pool_stats_get(p, &st);
    print_message("hits %llu misses %llu evictions %llu items %zu bytes %zu\n",
                  (unsigned long long) st.hits, (unsigned long long) st.misses,
                  (unsigned long long) st.evictions, st.items, st.bytes);
    assert_true(st.bytes <= st.budget);
    assert_int_equal(st.insertions, 4 * 1000);
    assert_true(st.hits > 0 && st.evictions > 0);
    pic_pool_free(p);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hits_misses_and_fingerprint),
        cmocka_unit_test(test_lru_budget_and_callbacks),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
