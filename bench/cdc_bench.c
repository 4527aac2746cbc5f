/*
 * cdc_bench.c — throughput of the shared core's CDC and keying
 * (core/segment/pic_cdc.c, pic_key.c) and of the whole gateway-side
 * pipeline (parse + render + CDC + keys) per request.  Driven by
 * bench/cdc.py, which builds it against $BUILD/libpic.a; prints one JSON
 * object.
 *
 *   cdc_bench [--mb N] [--reps R]
 *
 * Corpora (deterministic): "prose" (random words, spaces, newlines),
 * "json" (tool-output-like JSON lines), "code" (the system's C headers
 * under /usr/include, concatenated; skipped when absent).  For each corpus
 * and CDC configuration the four measurements run interleaved, R rounds,
 * best and median kept: memcpy (the machine's copy rate on the same
 * buffer), CDC alone (all cut points), keys alone (xxh3-128 of the chunks
 * found), and CDC + keys (cut, key, next: what the gateway does).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pic_cdc.h"
#include "pic_key.h"
#include "pic_segment.h"
#include "pic_time.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint64_t
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void
fill_prose(char *d, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t w = 1 + rnd() % 10;
        for (size_t k = 0; k < w && i < n; k++) {
            d[i++] = (char) ('a' + rnd() % 26);
        }
        if (i < n) {
            d[i++] = rnd() % 12 == 0 ? '\n' : ' ';
        }
    }
}

static void
fill_json(char *d, size_t n)
{
    size_t i = 0;
    while (i < n) {
        char line[160];
        int  k = snprintf(line, sizeof(line),
                          "{\"id\": %llu, \"path\": \"src/mod%llu/file%llu.c\", \"score\": 0.%04llu,"
                          " \"ok\": %s}\n",
                          (unsigned long long) (rnd() % 100000), (unsigned long long) (rnd() % 50),
                          (unsigned long long) (rnd() % 1000), (unsigned long long) (rnd() % 10000),
                          rnd() % 2 ? "true" : "false");
        for (int j = 0; j < k && i < n; j++) {
            d[i++] = line[j];
        }
    }
}

/* C headers from /usr/include, repeated to n bytes; 0 if none found. */
static int
fill_code(char *d, size_t n)
{
    DIR   *dir = opendir("/usr/include");
    size_t i = 0;
    if (!dir) {
        return 0;
    }
    struct dirent *e;
    while ((e = readdir(dir)) && i < n) {
        size_t l = strlen(e->d_name);
        if (l < 3 || strcmp(e->d_name + l - 2, ".h") != 0) {
            continue;
        }
        char path[512];
        snprintf(path, sizeof(path), "/usr/include/%s", e->d_name);
        FILE *f = fopen(path, "rb");
        if (f) {
            i += fread(d + i, 1, n - i, f);
            fclose(f);
        }
    }
    closedir(dir);
    if (i == 0) {
        return 0;
    }
    for (size_t j = i; j < n; j++) {
        d[j] = d[j - i];
    }
    return 1;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double best, median;
} rate;

static rate
summarise(double *v, int n)
{
    qsort(v, (size_t) n, sizeof(double), cmp_double);
    rate r = { v[n - 1], v[n / 2] };
    return r;
}

static void
bench_corpus(const char *name, const char *d, size_t n, const pic_cdc_params *p, int reps,
             const pic_key_ctx *kc, int first)
{
    pic_cdc c;
    pic_cdc_init(&c, p, NULL);
    size_t  cap = pic_cdc_max_chunks(&c, n);
    size_t *ends = malloc(cap * sizeof(size_t));
    char   *copy = malloc(n);
    double  gb = (double) n / 1e9;
    double *mc = calloc((size_t) reps, sizeof(double)), *cd = calloc((size_t) reps, sizeof(double));
    double *ky = calloc((size_t) reps, sizeof(double)), *both = calloc((size_t) reps, sizeof(double));
    size_t  k = 0;
    uint64_t sink = 0;

    for (int r = 0; r < reps; r++) {
        double t0 = pic_now_s();
        memcpy(copy, d, n);
        double t1 = pic_now_s();
        k = pic_cdc_chunks(&c, d, n, ends, cap);
        double t2 = pic_now_s();
        pic_key key;
        size_t  prev = 0;
        for (size_t i = 0; i < k; i++) {
            pic_key_compute(kc, d + prev, ends[i] - prev, &key);
            sink += key.lo;
            prev = ends[i];
        }
        double t3 = pic_now_s();
        for (size_t at = 0; at < n; ) {
            size_t len = pic_cdc_cut(&c, d + at, n - at);
            pic_key_compute(kc, d + at, len, &key);
            sink += key.hi;
            at += len;
        }
        double t4 = pic_now_s();
        mc[r] = gb / (t1 - t0);
        cd[r] = gb / (t2 - t1);
        ky[r] = gb / (t3 - t2);
        both[r] = gb / (t4 - t3);
        sink += (uint64_t) copy[r % n];
    }
    size_t mn = SIZE_MAX, mx = 0, prev = 0;
    for (size_t i = 0; i + 1 < k; i++) {
        size_t l = ends[i] - prev;
        mn = l < mn ? l : mn;
        mx = l > mx ? l : mx;
        prev = ends[i];
    }
    rate rm = summarise(mc, reps), rc = summarise(cd, reps), rk = summarise(ky, reps),
         rb = summarise(both, reps);
    printf("%s{\"corpus\":\"%s\",\"min\":%u,\"avg\":%u,\"max\":%u,\"bytes\":%zu,"
           "\"chunks\":%zu,\"mean_chunk\":%.1f,\"min_chunk\":%zu,\"max_chunk\":%zu,"
           "\"memcpy_gbps\":%.3f,\"cdc_gbps\":%.3f,\"cdc_gbps_median\":%.3f,"
           "\"key_gbps\":%.3f,\"key_gbps_median\":%.3f,"
           "\"cdc_key_gbps\":%.3f,\"cdc_key_gbps_median\":%.3f,\"sink\":%llu}\n",
           first ? "" : ",", name, p->min_size, p->avg_size, p->max_size, n, k,
           (double) n / (double) k, mn, mx, rm.best, rc.best, rc.median, rk.best, rk.median,
           rb.best, rb.median, (unsigned long long) (sink & 1));
    free(ends);
    free(copy);
    free(mc);
    free(cd);
    free(ky);
    free(both);
}

/* Whole gateway pipeline on an agentic chat body of about `kb` KiB: a
 * system prompt, tool schemas, history, two large tool results. */
static void
bench_pipeline(int kb, int reps, const pic_key_ctx *kc, int first)
{
    size_t  doc = (size_t) kb * 1024 / 3;
    char   *a = malloc(doc + 1), *b = malloc(doc + 1), *s = malloc(doc + 1);
    fill_prose(a, doc);
    fill_prose(b, doc);
    fill_prose(s, doc);
    a[doc] = b[doc] = s[doc] = '\0';
    for (size_t i = 0; i < doc; i++) {              /* JSON-safe: no newline */
        a[i] = a[i] == '\n' ? ' ' : a[i];
        b[i] = b[i] == '\n' ? ' ' : b[i];
        s[i] = s[i] == '\n' ? ' ' : s[i];
    }
    size_t cap = 3 * doc + 4096;
    char  *body = malloc(cap);
    int    len = snprintf(body, cap,
        "{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"read\","
        "\"description\":\"Read a file.\",\"parameters\":{\"type\":\"object\",\"properties\":"
        "{\"path\":{\"type\":\"string\"}}}}}],\"messages\":["
        "{\"role\":\"system\",\"content\":\"%s\"},{\"role\":\"user\",\"content\":\"go\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"1\",\"type\":"
        "\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"{\\\"path\\\":\\\"a\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"1\",\"content\":\"%s\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"2\",\"content\":\"%s\"},"
        "{\"role\":\"user\",\"content\":\"summarise\"}]}", s, a, b);
    pic_cdc    c;
    pic_marker m;
    pic_cdc_init(&c, NULL, NULL);
    pic_marker_init(&m, NULL, 0, NULL);
    pic_segment_cfg cfg = { PIC_TEMPLATE_QWEN3_5, &m, 0, &c, kc, 64, 0 };
    double *us = calloc((size_t) reps, sizeof(double));
    size_t  nseg = 0;
    for (int r = 0; r < reps; r++) {
        pic_request      req;
        pic_segmentation sg;
        pic_error        err;
        double           t0 = pic_now_s();
        pic_request_parse(&req, PIC_REQ_CHAT, body, (size_t) len, NULL, &err);
        pic_segmentation_init(&sg);
        pic_segment_request(&cfg, &req, &sg, &err);
        double t1 = pic_now_s();
        nseg = sg.n_segs;
        pic_segmentation_free(&sg);
        pic_request_free(&req);
        us[r] = (t1 - t0) * 1e6;
    }
    qsort(us, (size_t) reps, sizeof(double), cmp_double);
    printf("%s{\"body_bytes\":%d,\"segments\":%zu,\"us_best\":%.1f,\"us_median\":%.1f,"
           "\"mb_per_s_median\":%.1f}\n", first ? "" : ",", len, nseg, us[0], us[reps / 2],
           (double) len / us[reps / 2]);
    free(us);
    free(body);
    free(a);
    free(b);
    free(s);
}

int
main(int argc, char **argv)
{
    size_t mb = 64;
    int    reps = 11;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mb")) {
            mb = (size_t) atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--reps")) {
            reps = atoi(argv[i + 1]);
        }
    }
    size_t      n = mb << 20;
    char       *d = malloc(n);
    pic_key_ctx kc;
    pic_key_ctx_init(&kc, "qwen3.5-fingerprint", 19, "", 0, NULL);
    pic_cdc_params configs[2] = { { 256, 1024, 4096, 32 }, { 1024, 4096, 16384, 32 } };

    printf("{\"rows\":[\n");
    int first = 1;
    for (int corpus = 0; corpus < 3; corpus++) {
        const char *name = corpus == 0 ? "prose" : corpus == 1 ? "json" : "code";
        if (corpus == 0) {
            fill_prose(d, n);
        } else if (corpus == 1) {
            fill_json(d, n);
        } else if (!fill_code(d, n)) {
            continue;
        }
        for (int k = 0; k < 2; k++) {
            bench_corpus(name, d, n, &configs[k], reps, &kc, first);
            first = 0;
        }
    }
    printf("],\"pipeline\":[\n");
    int sizes[3] = { 8, 64, 512 };
    for (int i = 0; i < 3; i++) {
        bench_pipeline(sizes[i], reps * 3, &kc, i == 0);
    }
    printf("]}\n");
    pic_key_ctx_free(&kc);
    free(d);
    return 0;
}
