/*
 * gateway_helper.c — the gateway's nginx-free work measured and exposed for
 * bench/gateway.py.  Links the shared core (libpic.a) the module runs.
 *
 *   gateway_helper cdc MB [REPEAT]
 *       CDC + keying throughput on one core: MB of generated text chunked
 *       with the default pic_cdc (256/1024/4096) and every chunk keyed with
 *       xxh3-128; also Gear-only chunking and keying-only rates.  Prints JSON.
 *   gateway_helper pipeline FILE [REPEAT]
 *       the module's per-request work on a chat request body (FILE):
 *       parse + render + mark + CDC + key (pic_request_parse,
 *       pic_segment_request).  Prints JSON with microseconds per request.
 *   gateway_helper render [qwen3|qwen3.5]
 *       a chat request on stdin rendered with the chat template (markers
 *       split documents, as the module does): prints JSON {"text", "regions":
 *       [[kind, start, end], ...]} for the benchmark's oracle.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pic_buf.h"
#include "pic_cdc.h"
#include "pic_error.h"
#include "pic_json.h"
#include "pic_key.h"
#include "pic_marker.h"
#include "pic_request.h"
#include "pic_segment.h"
#include "pic_template.h"
#include "pic_time.h"

/* Deterministic English-like text: n bytes into buf. */
static void
gen_text(char *buf, size_t n)
{
    static const char *words[] = {
        "agent", "tool", "result", "cache", "segment", "prefix", "engine", "token",
        "state", "nginx", "plan", "worker", "index", "memory", "document", "query",
        "retrieval", "schema", "summary", "context", "window", "latency", "the",
        "a", "of", "to", "and", "is", "in", "for", "with", "returns", "function",
    };
    uint64_t x = 88172645463325252ull;
    size_t   at = 0;

    while (at < n) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const char *w = words[(x >> 20) % (sizeof(words) / sizeof(words[0]))];
        size_t      l = strlen(w);
        for (size_t i = 0; i < l && at < n; i++) {
            buf[at++] = w[i];
        }
        if (at < n) {
            buf[at++] = (x >> 40) % 13 == 0 ? '\n' : ' ';
        }
    }
}

static int
cmd_cdc(int argc, char **argv)
{
    size_t      mb = argc > 2 ? (size_t) atol(argv[2]) : 64;
    int         repeat = argc > 3 ? atoi(argv[3]) : 3;
    size_t      n = mb << 20;
    char       *buf = malloc(n);
    size_t     *ends;
    pic_cdc     c;
    pic_key_ctx kc;
    pic_error   err;
    double      best_all = 1e9, best_cdc = 1e9, best_key = 1e9;
    size_t      chunks = 0;
    uint64_t    sink = 0;

    if (buf == NULL || pic_cdc_init(&c, NULL, &err) != 0
        || pic_key_ctx_init(&kc, "836da3fe8730a832", 16, "", 0, &err) != 0) {
        fprintf(stderr, "%s: setup failed\n", __func__);
        return 1;
    }
    gen_text(buf, n);
    ends = malloc(pic_cdc_max_chunks(&c, n) * sizeof(size_t));

    for (int r = 0; r < repeat; r++) {
        double t0 = pic_now_s();
        chunks = pic_cdc_chunks(&c, buf, n, ends, pic_cdc_max_chunks(&c, n));
        double t1 = pic_now_s();
        size_t start = 0;
        for (size_t i = 0; i < chunks; i++) {
            pic_key k;
            pic_key_compute(&kc, buf + start, ends[i] - start, &k);
            sink += k.lo;
            start = ends[i];
        }
        double t2 = pic_now_s();
        best_cdc = t1 - t0 < best_cdc ? t1 - t0 : best_cdc;
        best_key = t2 - t1 < best_key ? t2 - t1 : best_key;
        best_all = t2 - t0 < best_all ? t2 - t0 : best_all;
    }
    printf("{\"bytes\":%zu,\"chunks\":%zu,\"avg_chunk\":%.1f,"
           "\"cdc_gbps\":%.3f,\"key_gbps\":%.3f,\"cdc_key_gbps\":%.3f,\"sink\":%llu}\n",
           n, chunks, (double) n / (double) chunks, n / best_cdc / 1e9, n / best_key / 1e9,
           n / best_all / 1e9, (unsigned long long) (sink & 1));
    pic_key_ctx_free(&kc);
    free(ends);
    free(buf);
    return 0;
}

static int
cmd_pipeline(int argc, char **argv)
{
    FILE              *f = argc > 2 ? fopen(argv[2], "rb") : NULL;
    int                repeat = argc > 3 ? atoi(argv[3]) : 200;
    size_t             len = 0, segs = 0;
    char              *body;
    pic_cdc            c;
    pic_marker         m;
    pic_key_ctx        kc;
    pic_error          err;
    pic_segment_cfg    cfg;
    double             best = 1e9, total = 0;

    if (f == NULL) {
        fprintf(stderr, "%s: cannot open the request file\n", __func__);
        return 1;
    }
    body = pic_read_stream(f, &len);
    fclose(f);
    if (pic_cdc_init(&c, NULL, &err) != 0 || pic_marker_init(&m, NULL, 0, &err) != 0
        || pic_key_ctx_init(&kc, "836da3fe8730a832", 16, "", 0, &err) != 0) {
        fprintf(stderr, "%s: setup failed\n", __func__);
        return 1;
    }
    memset(&cfg, 0, sizeof(cfg));
    cfg.dialect = PIC_TEMPLATE_QWEN3_5;
    cfg.marker = &m;
    cfg.split_parts = 1;
    cfg.cdc = &c;
    cfg.keys = &kc;
    cfg.min_pic_bytes = 128;

    for (int r = 0; r < repeat; r++) {
        pic_request      req;
        pic_segmentation sg;
        double           t0 = pic_now_s();

        memset(&req, 0, sizeof(req));
        pic_segmentation_init(&sg);
        if (pic_request_parse(&req, PIC_REQ_CHAT, body, len, NULL, &err) != 0
            || pic_segment_request(&cfg, &req, &sg, &err) != 0) {
            fprintf(stderr, "%s: %s\n", __func__, err.message);
            return 1;
        }
        segs = sg.n_segs;
        pic_segmentation_free(&sg);
        pic_request_free(&req);
        double dt = pic_now_s() - t0;
        total += dt;
        best = dt < best ? dt : best;
    }
    printf("{\"body_bytes\":%zu,\"segments\":%zu,\"usec_min\":%.2f,\"usec_mean\":%.2f,"
           "\"mb_per_s\":%.1f}\n", len, segs, best * 1e6, total / repeat * 1e6,
           len / best / 1e6);
    pic_key_ctx_free(&kc);
    free(body);
    return 0;
}

static int
cmd_render(int argc, char **argv)
{
    size_t            len = 0;
    char             *body = pic_read_stream(stdin, &len);
    pic_marker        m;
    pic_error         err;
    pic_request       req;
    pic_render        rd;
    pic_template_opts opts = { PIC_TEMPLATE_QWEN3_5, NULL, 1 };
    pic_buf           out;

    if (argc > 2 && pic_template_dialect_parse(argv[2], &opts.dialect) != 0) {
        fprintf(stderr, "%s: unknown template %s\n", __func__, argv[2]);
        return 1;
    }
    memset(&req, 0, sizeof(req));
    pic_render_init(&rd);
    if (pic_marker_init(&m, NULL, 0, &err) != 0
        || pic_request_parse(&req, PIC_REQ_CHAT, body, len, NULL, &err) != 0) {
        fprintf(stderr, "%s: %s\n", __func__, err.message);
        return 1;
    }
    opts.split = &m;
    if (pic_template_render(&opts, &req, &rd, &err) != 0) {
        fprintf(stderr, "%s: %s\n", __func__, err.message);
        return 1;
    }
    pic_buf_init(&out);
    pic_buf_appends(&out, "{\"text\":");
    pic_json_write_string(&out, rd.text.data, rd.text.len);
    pic_buf_appends(&out, ",\"regions\":[");
    for (size_t i = 0; i < rd.n_regions; i++) {
        pic_buf_printf(&out, "%s[\"%s\",%zu,%zu]", i ? "," : "",
                       pic_region_kind_name(rd.regions[i].kind), rd.regions[i].start,
                       rd.regions[i].end);
    }
    pic_buf_appends(&out, "]}\n");
    fwrite(out.data, 1, out.len, stdout);
    pic_buf_free(&out);
    pic_render_free(&rd);
    pic_request_free(&req);
    free(body);
    return 0;
}

int
main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "cdc")) {
        return cmd_cdc(argc, argv);
    }
    if (argc > 1 && !strcmp(argv[1], "pipeline")) {
        return cmd_pipeline(argc, argv);
    }
    if (argc > 1 && !strcmp(argv[1], "render")) {
        return cmd_render(argc, argv);
    }
    fprintf(stderr, "usage: gateway_helper cdc MB [REPEAT] | pipeline FILE [REPEAT] | "
                    "render [TEMPLATE]\n");
    return 2;
}
