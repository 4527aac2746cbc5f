/*
 * test_registry.c — the engine's Redis registration against a real
 * redis-server on a loopback port (skipped when redis-server is missing):
 * the hash, its TTL and discovery set; segment add/evict; Redis killed and
 * restarted (re-registration of every live segment, evictions made while
 * it was down replayed); Redis frozen (SIGSTOP: stalled replies detected,
 * connection re-made); an engine that starts before Redis.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <hiredis/hiredis.h>

#include "pic_time.h"
#include "registry.h"

#define REDIS_BIN "/usr/bin/redis-server"

typedef struct {
    pid_t               pid;
    int                 port;
    struct event_base  *base;
    pic_registry       *reg;
    redisContext       *rc;         /* sync checks */
} fixture;

static int
free_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t          len = sizeof(a);
    int                fd = socket(AF_INET, SOCK_STREAM, 0), port;

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *) &a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *) &a, &len), 0);
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void
redis_start(fixture *f)
{
    char port[16];

    snprintf(port, sizeof(port), "%d", f->port);
    f->pid = fork();
    assert_true(f->pid >= 0);
    if (f->pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        execl(REDIS_BIN, REDIS_BIN, "--port", port, "--bind", "127.0.0.1", "--save", "",
              "--appendonly", "no", "--protected-mode", "no", "--dir", "/tmp", (char *) 0);
        _exit(127);
    }
    /* wait for PING */
    for (double t0 = pic_now_s(); pic_now_s() - t0 < 10;) {
        struct timeval tv = { 0, 200000 };
        redisContext  *c = redisConnectWithTimeout("127.0.0.1", f->port, tv);
        if (c != NULL && !c->err) {
            redisReply *r = redisCommand(c, "PING");
            int         ok = r != NULL && r->type == REDIS_REPLY_STATUS;
            freeReplyObject(r);
            if (ok) {
                redisSetTimeout(c, (struct timeval) { 2, 0 });
                f->rc = c;
                return;
            }
        }
        if (c) {
            redisFree(c);
        }
        usleep(20000);
    }
    fail_msg("redis-server did not start");
}

static void
redis_stop(fixture *f)
{
    if (f->rc) {
        redisFree(f->rc);
        f->rc = NULL;
    }
    if (f->pid > 0) {
        kill(f->pid, SIGKILL);
        waitpid(f->pid, NULL, 0);
        f->pid = 0;
    }
}

static void
fake_load(void *arg, pic_registry_load *out)
{
    out->capacity = 8;
    out->running = 2;
    out->queued = 1;
    out->free_bytes = 12345;
}

static pic_registry *
reg_start(fixture *f)
{
    pic_registry_opts o = { 0 };
    char              addr[64], err[256];
    pic_registry     *r;

    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f->port);
    o.redis = addr;
    o.id = "eng-test";
    o.addr = "127.0.0.1:9999";
    o.version = "9.9";
    o.model_fp = 0xabcdef;
    o.heartbeat_ms = 50;
    o.ttl_s = 2;
    o.timeout_ms = 400;
    o.load = fake_load;
    r = pic_registry_init(f->base, &o, err, sizeof(err));
    assert_non_null(r);
    return r;
}

/* Run the loop until pred(f) or timeout seconds; returns pred's last value. */
static int
run_until(fixture *f, int (*pred)(fixture *), double timeout)
{
    double t0 = pic_now_s();

    while (!pred(f)) {
        struct timeval tv = { 0, 20000 };
        if (pic_now_s() - t0 > timeout) {
            return 0;
        }
        event_base_loopexit(f->base, &tv);
        event_base_dispatch(f->base);
    }
    return 1;
}

static int
is_up(fixture *f)
{
    return pic_registry_connected(f->reg);
}

static int
is_down(fixture *f)
{
    return !pic_registry_connected(f->reg);
}

static long long
cmd_int(fixture *f, const char *fmt, ...)
{
    va_list     ap;
    redisReply *r;
    long long   v = -1000;

    va_start(ap, fmt);
    r = redisvCommand(f->rc, fmt, ap);
    va_end(ap);
    if (r != NULL && r->type == REDIS_REPLY_INTEGER) {
        v = r->integer;
    }
    freeReplyObject(r);
    return v;
}

static void
hget(fixture *f, const char *field, char *out, size_t n)
{
    redisReply *r = redisCommand(f->rc, "HGET pic:eng:eng-test %s", field);

    out[0] = '\0';
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        snprintf(out, n, "%s", r->str);
    }
    freeReplyObject(r);
}

static void
key_of(int i, char *out)
{
    snprintf(out, PIC_KEY_HEX + 1, "%016x%016x", 0x5e6u, (unsigned) i);
}

static int
setup(void **state)
{
    static fixture f;

    memset(&f, 0, sizeof(f));
    evthread_use_pthreads();
    f.port = free_port();
    f.base = event_base_new();
    *state = &f;
    return 0;
}

/* after every test, pass or fail: no registry, no Redis, a fresh port */
static int
teardown(void **state)
{
    fixture *f = *state;

    pic_registry_free(f->reg);
    f->reg = NULL;
    if (f->pid > 0) {
        kill(f->pid, SIGCONT);
    }
    redis_stop(f);
    event_base_free(f->base);
    return 0;
}

/* --- tests --- */

static void
test_registers_hash_ttl_and_discovery(void **state)
{
    fixture *f = *state;
    char     v[64];

    redis_start(f);
    f->reg = reg_start(f);
    assert_true(run_until(f, is_up, 5));
    run_until(f, is_down, 0.3);         /* a few heartbeats */
    hget(f, "addr", v, sizeof(v));
    assert_string_equal(v, "127.0.0.1:9999");
    hget(f, "capacity", v, sizeof(v));
    assert_string_equal(v, "8");
    hget(f, "load", v, sizeof(v));
    assert_string_equal(v, "0.3750");
    hget(f, "free_bytes", v, sizeof(v));
    assert_string_equal(v, "12345");
    hget(f, "version", v, sizeof(v));
    assert_string_equal(v, "9.9");
    hget(f, "model", v, sizeof(v));
    assert_string_equal(v, "0000000000abcdef");
    long long ttl = cmd_int(f, "TTL pic:eng:eng-test");
    assert_true(ttl >= 1 && ttl <= 2);
    assert_int_equal(cmd_int(f, "SISMEMBER pic:engines eng-test"), 1);

    /* segments: malformed keys refused, add/evict visible */
    assert_int_equal(pic_registry_seg_add(f->reg, "XYZ"), -1);
    assert_int_equal(pic_registry_seg_add(f->reg, "0123456789abcdef0123456789ABCDEF"), -1);
    char k[40];
    for (int i = 0; i < 3000; i++) {
        key_of(i, k);
        assert_int_equal(pic_registry_seg_add(f->reg, k), 0);
    }
    key_of(7, k);
    assert_int_equal(pic_registry_seg_evict(f->reg, k), 0);
    assert_int_equal(pic_registry_seg_evict(f->reg, k), -1);     /* not held */
    run_until(f, is_down, 0.3);
    assert_int_equal(cmd_int(f, "SISMEMBER pic:seg:%s eng-test", k), 0);
    key_of(2999, k);
    assert_int_equal(cmd_int(f, "SISMEMBER pic:seg:%s eng-test", k), 1);
    ttl = cmd_int(f, "TTL pic:seg:%s", k);
    assert_true(ttl > 3000 && ttl <= 3600);
    assert_int_equal(pic_registry_seg_count(f->reg), 2999);

    /* a clean goodbye removes the hash and the memberships */
    pic_registry_free(f->reg);
    f->reg = NULL;
    assert_int_equal(cmd_int(f, "EXISTS pic:eng:eng-test"), 0);
    assert_int_equal(cmd_int(f, "SISMEMBER pic:seg:%s eng-test", k), 0);
    redis_stop(f);
}

static int
all_back(fixture *f)
{
    char k[40];

    if (!pic_registry_connected(f->reg)) {
        return 0;
    }
    if (f->rc == NULL || cmd_int(f, "EXISTS pic:eng:eng-test") != 1) {
        return 0;
    }
    for (int i = 2; i < 2500; i += 97) {     /* key 0 was evicted */
        key_of(i, k);
        if (i % 2 == 0 && cmd_int(f, "SISMEMBER pic:seg:%s eng-test", k) != 1) {
            return 0;
        }
    }
    key_of(2499, k);
    return cmd_int(f, "SISMEMBER pic:seg:%s eng-test", k) == 1;
}

static void
test_survives_redis_restart(void **state)
{
    fixture *f = *state;
    char     k[40];

    redis_start(f);
    f->reg = reg_start(f);
    assert_true(run_until(f, is_up, 5));
    for (int i = 0; i < 2500; i += 2) {
        key_of(i, k);
        pic_registry_seg_add(f->reg, k);
    }
    run_until(f, is_down, 0.3);
    redis_stop(f);                          /* Redis dies (all data gone) */
    assert_true(run_until(f, is_down, 5));
    /* while it is down: adds and evictions go on locally */
    for (int i = 1; i < 2500; i += 2) {
        key_of(i, k);
        pic_registry_seg_add(f->reg, k);
    }
    key_of(0, k);
    pic_registry_seg_evict(f->reg, k);
    redis_start(f);                         /* same port, empty */
    assert_true(run_until(f, all_back, 10));
    assert_int_equal(cmd_int(f, "SISMEMBER pic:seg:%s eng-test", k), 0);
    assert_int_equal(pic_registry_seg_count(f->reg), 2499);
    cJSON *st = pic_registry_status(f->reg);
    assert_true(cJSON_GetObjectItem(st, "disconnects")->valuedouble >= 1);
    assert_true(cJSON_GetObjectItem(st, "resyncs")->valuedouble >= 2);
    cJSON_Delete(st);
    pic_registry_free(f->reg);
    f->reg = NULL;
    redis_stop(f);
}

static int
stalled(fixture *f)
{
    cJSON *st = pic_registry_status(f->reg);
    int    n = (int) cJSON_GetObjectItem(st, "stalls")->valuedouble;

    cJSON_Delete(st);
    return n >= 1;
}

static int
hash_back(fixture *f)
{
    return pic_registry_connected(f->reg) && cmd_int(f, "EXISTS pic:eng:eng-test") == 1;
}

static void
test_frozen_redis_is_detected(void **state)
{
    fixture *f = *state;
    char     k[40];

    redis_start(f);
    f->reg = reg_start(f);
    assert_true(run_until(f, is_up, 5));
    kill(f->pid, SIGSTOP);
    key_of(42, k);
    pic_registry_seg_add(f->reg, k);
    key_of(43, k);
    pic_registry_seg_add(f->reg, k);
    pic_registry_seg_evict(f->reg, k);       /* sent into the stalled connection */
    assert_true(run_until(f, stalled, 5));
    kill(f->pid, SIGCONT);
    assert_true(run_until(f, hash_back, 10));
    run_until(f, is_down, 0.5);
    key_of(42, k);
    assert_int_equal(cmd_int(f, "SISMEMBER pic:seg:%s eng-test", k), 1);
    key_of(43, k);
    assert_int_equal(cmd_int(f, "SISMEMBER pic:seg:%s eng-test", k), 0);
    pic_registry_free(f->reg);
    f->reg = NULL;
    redis_stop(f);
}

static void
test_starts_before_redis(void **state)
{
    fixture *f = *state;
    char     k[40];

    f->reg = reg_start(f);                  /* nothing listens yet */
    assert_false(run_until(f, is_up, 0.5));
    key_of(1, k);
    pic_registry_seg_add(f->reg, k);
    cJSON *st = pic_registry_status(f->reg);
    assert_true(cJSON_GetObjectItem(st, "connect_failures")->valuedouble >= 1);
    assert_string_equal(cJSON_GetObjectItem(st, "state")->valuestring, "down");
    cJSON_Delete(st);
    redis_start(f);
    assert_true(run_until(f, hash_back, 10));
    run_until(f, is_down, 0.3);
    assert_int_equal(cmd_int(f, "SISMEMBER pic:seg:%s eng-test", k), 1);
    pic_registry_free(f->reg);
    f->reg = NULL;
    redis_stop(f);
}

static void
test_bad_address_is_an_error(void **state)
{
    fixture          *f = *state;
    pic_registry_opts o = { .redis = "127.0.0.1", .id = "x" };
    char              err[256];

    assert_null(pic_registry_init(f->base, &o, err, sizeof(err)));
    o.redis = "127.0.0.1:99999";
    assert_null(pic_registry_init(f->base, &o, err, sizeof(err)));
    o.redis = "127.0.0.1:6379";
    o.id = "has space";
    assert_null(pic_registry_init(f->base, &o, err, sizeof(err)));
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_registers_hash_ttl_and_discovery, setup, teardown),
        cmocka_unit_test_setup_teardown(test_survives_redis_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_frozen_redis_is_detected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_starts_before_redis, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_address_is_an_error, setup, teardown),
    };

    signal(SIGPIPE, SIG_IGN);
    if (access(REDIS_BIN, X_OK) != 0) {
        printf("1..0 # SKIP redis-server not installed\n");
        return 0;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
