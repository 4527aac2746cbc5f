/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: the status location.  JSON (default), Prometheus
 * text (?format=prometheus) and the HTML dashboard (?format=html, or a
 * browser's Accept: text/html).  Built like stub_status: take a snapshot,
 * compute the size, fill one buffer with ngx_sprintf.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_pic_module.h"
#include "ngx_http_pic_index.h"
#include "ngx_http_pic_affinity.h"
#include "ngx_http_pic_redis.h"
#include "ngx_http_pic_dashboard.h"

/* why the gateway's planned hits and the engines' reported tokens differ */
#define NGX_HTTP_PIC_SERVED_NOTE                                              \
    "The gateway plans from the segments its index held when it routed a "   \
    "request; the engines report what they served: entries built after the " \
    "plan (a repeated document is built once seen, off the request path) "   \
    "count for them only, entries evicted since for the plan only, and "     \
    "seams are recomputed."




typedef enum {
    NGX_HTTP_PIC_STATUS_JSON = 0,
    NGX_HTTP_PIC_STATUS_PROMETHEUS,
    NGX_HTTP_PIC_STATUS_HTML
} ngx_http_pic_status_format_e;


typedef struct {
    ngx_http_pic_stats_t         st;
    ngx_uint_t                   nengines;
    ngx_http_pic_engine_sh_t     engines[NGX_HTTP_PIC_MAX_ENGINES];
    ngx_uint_t                   configured[NGX_HTTP_PIC_MAX_ENGINES];
    time_t                       uptime;
    ngx_uint_t                   generation;
    ngx_uint_t                   reclaimed;
    ngx_pid_t                    sub_pid;
    ngx_uint_t                   nodes;
    ngx_atomic_uint_t            evictions;
    ngx_str_t                    zone;
    size_t                       zone_size;
    ngx_str_t                    redis;
    ngx_msec_t                   redis_ok_ago;
    ngx_uint_t                   redis_ok_known;
    ngx_uint_t                   history_count;
    ngx_http_pic_history_t       history[NGX_HTTP_PIC_HISTORY];
} ngx_http_pic_status_snapshot_t;


static ngx_http_pic_status_format_e ngx_http_pic_status_format(
    ngx_http_request_t *r);
static void ngx_http_pic_status_snapshot(ngx_http_request_t *r,
    ngx_http_pic_status_snapshot_t *s);
static ngx_buf_t *ngx_http_pic_status_json(ngx_http_request_t *r,
    ngx_http_pic_status_snapshot_t *s);
static ngx_buf_t *ngx_http_pic_status_prometheus(ngx_http_request_t *r,
    ngx_http_pic_status_snapshot_t *s);
static ngx_buf_t *ngx_http_pic_status_html(ngx_http_request_t *r);
static u_char *ngx_http_pic_status_history(u_char *p,
    ngx_http_pic_status_snapshot_t *s);


/* by NGX_HTTP_PIC_SEAM_* */
static char  *ngx_http_pic_seam_sources[] = {
    "unknown", "default", "--seam", "calibration"
};


/*
 * The gateway's per-engine Prometheus families: the value of each is the
 * word at offset in the engine's shm slot (healthy is 0 or 1; the counters
 * are ngx_atomic_t, the others ngx_uint_t: the same width).
 */
typedef struct {
    char                        *name;
    char                        *type;
    char                        *help;
    size_t                       offset;
    ngx_uint_t                   id;           /* an id label too */
} ngx_http_pic_prom_family_t;

#define ngx_http_pic_engine_field(f)  offsetof(ngx_http_pic_engine_sh_t, f)

static ngx_http_pic_prom_family_t  ngx_http_pic_engine_families[] = {
    { "pic_engine_healthy", "gauge", "Engine in rotation (1) or out (0).",
      ngx_http_pic_engine_field(healthy), 1 },
    { "pic_engine_inflight", "gauge", "Requests routed to the engine, not "
      "finished.", ngx_http_pic_engine_field(inflight), 0 },
    { "pic_engine_load", "gauge", "Load the engine reported to the last "
      "probe.", ngx_http_pic_engine_field(load), 0 },
    { "pic_engine_requests_total", "counter", "Requests routed to the "
      "engine.", ngx_http_pic_engine_field(requests), 0 },
    { "pic_engine_failures_total", "counter", "Attempts on the engine that "
      "failed (connect, reset, read timeout).",
      ngx_http_pic_engine_field(failures), 0 },
    { "pic_engine_hit_bytes_total", "counter", "Prompt bytes the engine held "
      "when it combined.", ngx_http_pic_engine_field(hit_bytes), 0 },
    { "pic_engine_exact_requests_total", "counter", "Requests combined on an "
      "exact prefix the engine held.",
      ngx_http_pic_engine_field(exact_requests), 0 },
    { "pic_engine_exact_bytes_total", "counter", "Bytes of those exact "
      "prefixes.", ngx_http_pic_engine_field(exact_bytes), 0 },
    { "pic_engine_probes_total", "counter", "Health probes sent.",
      ngx_http_pic_engine_field(probes), 0 },
    { "pic_engine_probe_failures_total", "counter", "Health probes that "
      "failed.", ngx_http_pic_engine_field(probe_failures), 0 },
    { "pic_engine_affinity_requests_total", "counter", "Requests pic "
      "affinity routed to the replica.",
      ngx_http_pic_engine_field(aff_requests), 0 },
    { "pic_engine_affinity_hits_total", "counter", "Affinity requests "
      "onto a prefix recorded on the replica.", ngx_http_pic_engine_field(aff_hits), 0 },
    { "pic_engine_affinity_predicted_tokens_total", "counter", "Tokens of "
      "those prefixes, estimated: what the replica should serve cached.",
      ngx_http_pic_engine_field(aff_predicted), 0 },
    { "pic_engine_affinity_reports_total", "counter", "Answers of the "
      "replica that said their cached tokens.",
      ngx_http_pic_engine_field(aff_reports), 0 },
    { "pic_engine_affinity_cached_tokens_total", "counter", "Cached prompt "
      "tokens the replica reported.", ngx_http_pic_engine_field(aff_cached), 0 },
    { "pic_engine_affinity_prompt_tokens_total", "counter", "Prompt tokens "
      "of those answers.", ngx_http_pic_engine_field(aff_prompt), 0 },
    { "pic_engine_affinity_misses_total", "counter", "Answers that reused "
      "less than half of the recorded prefix (evicted, restarted).",
      ngx_http_pic_engine_field(aff_misses), 0 },
    { "pic_engine_affinity_forgotten_total", "counter", "Prefixes forgotten "
      "for the replica (cache capacity, misses).",
      ngx_http_pic_engine_field(aff_forgot), 0 },
    { "pic_engine_affinity_held_bytes", "gauge", "Prompt bytes recorded as "
      "in the replica's cache.", ngx_http_pic_engine_field(aff_held), 0 }
};

#define NGX_HTTP_PIC_ENGINE_FAMILIES                                         \
    (sizeof(ngx_http_pic_engine_families)                                    \
     / sizeof(ngx_http_pic_prom_family_t))


/*
 * The zone's counters, one row each for both outputs: the JSON object and
 * key that hold it, and its Prometheus metric (name NULL: JSON only;
 * section NULL: Prometheus only).  Every field is an ngx_atomic_t of
 * ngx_http_pic_stats_t.
 */
typedef struct {
    char                        *section;
    char                        *key;
    char                        *name;
    char                        *type;
    char                        *help;
    size_t                       offset;
} ngx_http_pic_counter_t;

#define ngx_http_pic_stat(f)  offsetof(ngx_http_pic_stats_t, f)

static ngx_http_pic_counter_t  ngx_http_pic_counters[] = {
    { "requests", "total", "pic_requests_total", "counter",
      "Requests seen in pic locations.", ngx_http_pic_stat(requests) },
    { "requests", "errors", "pic_errors_total", "counter",
      "Requests answered with an error status.", ngx_http_pic_stat(errors) },
    { "requests", "status", "pic_status_requests_total", "counter",
      "Requests to the status location.", ngx_http_pic_stat(status_requests) },
    { "requests", "passed", "pic_passed_total", "counter",
      "Requests passed untouched (not completions).",
      ngx_http_pic_stat(passed) },
    { "requests", "planned", "pic_planned_total", "counter",
      "Requests planned and sent to an engine.", ngx_http_pic_stat(planned) },
    { "requests", "observed", "pic_observed_total", "counter",
      "Requests accounted in observe mode.", ngx_http_pic_stat(observed) },
    { "requests", "rejected", "pic_rejected_total", "counter",
      "Bad requests answered by the module.", ngx_http_pic_stat(rejected) },
    { "requests", "no_engine", "pic_no_engine_total", "counter",
      "Requests answered 503: no healthy engine.",
      ngx_http_pic_stat(no_engine) },
    { "requests", "upstream_errors", "pic_upstream_errors_total", "counter",
      "Engine attempts that failed (502/504).",
      ngx_http_pic_stat(upstream_errors) },
    { "requests", "fallback", "pic_fallback_plans_total", "counter",
      "Plans made by rendezvous hashing (redis unknown).",
      ngx_http_pic_stat(fallback) },
    { "requests", "offloaded", NULL, NULL, NULL, ngx_http_pic_stat(offloaded) },

    { "segments", "total", "pic_segments_total", "counter", "Segments keyed.",
      ngx_http_pic_stat(segments) },
    { "segments", "hits", "pic_segment_hits_total", "counter",
      "Segments some engine holds.", ngx_http_pic_stat(seg_hits) },
    { "segments", "misses", "pic_segment_misses_total", "counter",
      "Cacheable segments no engine holds.", ngx_http_pic_stat(seg_misses) },
    { "segments", "dynamic", "pic_segment_dynamic_total", "counter",
      "Segments recomputed every time (tail, short).",
      ngx_http_pic_stat(seg_dynamic) },
    { "segments", "s1_hits", NULL, NULL, NULL, ngx_http_pic_stat(s1_hits) },

    { "bytes", "prompt", "pic_prompt_bytes_total", "counter",
      "Rendered prompt bytes in segments.", ngx_http_pic_stat(bytes_total) },
    { "bytes", "hit", "pic_hit_bytes_total", "counter",
      "Prompt bytes in hit segments.", ngx_http_pic_stat(bytes_hit) },
    { "bytes", "exact_prefix", "pic_exact_prefix_bytes_total", "counter",
      "Prompt bytes an exact-prefix cache would serve.",
      ngx_http_pic_stat(bytes_prefix) },
    { "bytes", "above_prefix", "pic_above_prefix_bytes_total", "counter",
      "Hit bytes beyond the exact prefix (PIC's gain).",
      ngx_http_pic_stat(bytes_above_prefix) },
    { "bytes", "novel", "pic_novel_bytes_total", "counter",
      "Prompt bytes no cache holds.", ngx_http_pic_stat(bytes_novel) },
    { "bytes", "s1", NULL, NULL, NULL, ngx_http_pic_stat(s1_bytes) },

    { "routing", "exact_routed", NULL, NULL, NULL,
      ngx_http_pic_stat(exact_routed) },
    { "routing", "exact_bytes", NULL, NULL, NULL,
      ngx_http_pic_stat(bytes_exact_routed) },
    { "routing", "exact_decided", NULL, NULL, NULL,
      ngx_http_pic_stat(exact_decided) },
    { "routing", "segments_kept_exact", NULL, NULL, NULL,
      ngx_http_pic_stat(seg_exact_local) },
    { "routing", "seen_routed", NULL, NULL, NULL,
      ngx_http_pic_stat(seen_routed) },
    { "routing", "seen_decided", NULL, NULL, NULL,
      ngx_http_pic_stat(seen_decided) },
    { "routing", "affinity_routed", "pic_affinity_routed_total", "counter",
      "Requests routed by pic affinity.", ngx_http_pic_stat(affinity_routed) },
    { "routing", "affinity_hits", "pic_affinity_hits_total", "counter",
      "Affinity requests onto a prefix recorded on the replica.",
      ngx_http_pic_stat(affinity_hits) },
    { "routing", "affinity_misses", "pic_affinity_misses_total", "counter",
      "Affinity requests whose replica reused less than half of it.",
      ngx_http_pic_stat(affinity_misses) },

    { "cdc", "bytes", "pic_cdc_bytes_total", "counter",
      "Bytes rendered, marked, chunked and keyed.",
      ngx_http_pic_stat(cdc_bytes) },
    { "cdc", "chunks", "pic_cdc_chunks_total", "counter", "Chunks cut.",
      ngx_http_pic_stat(cdc_chunks) },
    { "cdc", "markers", "pic_markers_total", "counter",
      "Boundary markers placed.", ngx_http_pic_stat(markers) },
    { "cdc", "escapes", "pic_marker_escapes_total", "counter",
      "Marker strings escaped in client text.", ngx_http_pic_stat(escapes) },
    { "cdc", "usec", "pic_cdc_microseconds_total", "counter",
      "Time spent rendering, chunking and keying.",
      ngx_http_pic_stat(cdc_usec) },

    { "redis", "up_workers", "pic_redis_up", "gauge",
      "Workers connected to redis.", ngx_http_pic_stat(redis_up) },
    { "redis", "lookups", "pic_redis_lookups_total", "counter",
      "Pipelined redis lookups.", ngx_http_pic_stat(redis_lookups) },
    { "redis", "keys", NULL, NULL, NULL, ngx_http_pic_stat(redis_keys) },
    { "redis", "hits", NULL, NULL, NULL, ngx_http_pic_stat(redis_hits) },
    { "redis", "timeouts", "pic_redis_timeouts_total", "counter",
      "Redis lookups past pic_redis_timeout.",
      ngx_http_pic_stat(redis_timeouts) },
    { "redis", "errors", "pic_redis_errors_total", "counter",
      "Redis connection and command errors.", ngx_http_pic_stat(redis_errors) },
    { "redis", "connects", NULL, NULL, NULL, ngx_http_pic_stat(redis_connects) },
    { "redis", "events", NULL, NULL, NULL, ngx_http_pic_stat(redis_events) },

    { NULL, NULL, "pic_usage_reports_total", "counter",
      "Answers that reported usage.pic.", ngx_http_pic_stat(usage_reports) }
};

#define NGX_HTTP_PIC_COUNTERS                                                \
    (sizeof(ngx_http_pic_counters) / sizeof(ngx_http_pic_counter_t))

#define ngx_http_pic_counter_value(st, c)                                    \
    (*(ngx_atomic_t *) ((u_char *) (st) + (c)->offset))


/* The counters of one JSON section as "key":value pairs (the caller writes
 * its name, braces and any other field). */
static u_char *
ngx_http_pic_status_section(u_char *p, ngx_http_pic_stats_t *st, char *section)
{
    ngx_uint_t               i, first;
    ngx_http_pic_counter_t  *c;

    first = 1;

    for (i = 0; i < NGX_HTTP_PIC_COUNTERS; i++) {
        c = &ngx_http_pic_counters[i];

        if (c->section == NULL || ngx_strcmp(c->section, section) != 0) {
            continue;
        }

        p = ngx_sprintf(p, first ? "\"%s\":%uA" : ",\"%s\":%uA", c->key,
                        ngx_http_pic_counter_value(st, c));
        first = 0;
    }

    return p;
}


/* The most bytes the table's rows take in the JSON and the Prometheus
 * output together. */
static size_t
ngx_http_pic_counters_size(void)
{
    size_t                   size;
    ngx_uint_t               i;
    ngx_http_pic_counter_t  *c;

    size = 0;

    for (i = 0; i < NGX_HTTP_PIC_COUNTERS; i++) {
        c = &ngx_http_pic_counters[i];
        size += 2 * (8 + NGX_ATOMIC_T_LEN);

        if (c->key) {
            size += ngx_strlen(c->key);
        }

        if (c->name) {
            size += 3 * ngx_strlen(c->name) + ngx_strlen(c->type)
                    + ngx_strlen(c->help) + 24;
        }
    }

    return size;
}


/* by NGX_HTTP_PIC_CACHE_* */
static char  *ngx_http_pic_cache_names[] = {
    "unknown", "exact", "pic", "prefix", "full"
};


ngx_int_t
ngx_http_pic_status_handler(ngx_http_request_t *r)
{
    ngx_int_t                         rc;
    ngx_buf_t                        *b;
    ngx_chain_t                       out;
    ngx_http_pic_status_format_e      format;
    ngx_http_pic_status_snapshot_t   *snap;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);

    if (rc != NGX_OK) {
        return rc;
    }

    format = ngx_http_pic_status_format(r);

    if (format == NGX_HTTP_PIC_STATUS_HTML) {
        ngx_str_set(&r->headers_out.content_type, "text/html; charset=utf-8");
        b = ngx_http_pic_status_html(r);

    } else {
        snap = ngx_palloc(r->pool, sizeof(ngx_http_pic_status_snapshot_t));
        if (snap == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_http_pic_status_snapshot(r, snap);

        if (format == NGX_HTTP_PIC_STATUS_PROMETHEUS) {
            ngx_str_set(&r->headers_out.content_type,
                        "text/plain; version=0.0.4; charset=utf-8");
            b = ngx_http_pic_status_prometheus(r, snap);

        } else {
            ngx_str_set(&r->headers_out.content_type, "application/json");
            b = ngx_http_pic_status_json(r, snap);
        }
    }

    r->headers_out.content_type_len = r->headers_out.content_type.len;

    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = b->last - b->pos;

    if (r->method == NGX_HTTP_HEAD) {
        r->header_only = 1;
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


static ngx_http_pic_status_format_e
ngx_http_pic_status_format(ngx_http_request_t *r)
{
    ngx_str_t         value;
    ngx_table_elt_t  *accept;

    if (ngx_http_arg(r, (u_char *) "format", 6, &value) == NGX_OK) {

        if (value.len == 10
            && ngx_strncmp(value.data, "prometheus", 10) == 0)
        {
            return NGX_HTTP_PIC_STATUS_PROMETHEUS;
        }

        if (value.len == 4 && ngx_strncmp(value.data, "html", 4) == 0) {
            return NGX_HTTP_PIC_STATUS_HTML;
        }

        return NGX_HTTP_PIC_STATUS_JSON;
    }

#if (NGX_HTTP_HEADERS)
    accept = r->headers_in.accept;
#else
    accept = NULL;
#endif

    if (accept == NULL) {
        return NGX_HTTP_PIC_STATUS_JSON;
    }

    /* a Prometheus scraper asks for OpenMetrics or text/plain first */

    if (ngx_strlcasestrn(accept->value.data,
                         accept->value.data + accept->value.len,
                         (u_char *) "openmetrics", 11 - 1)
        != NULL
        || (accept->value.len >= 10
            && ngx_strncasecmp(accept->value.data, (u_char *) "text/plain", 10)
               == 0))
    {
        return NGX_HTTP_PIC_STATUS_PROMETHEUS;
    }

    if (ngx_strlcasestrn(accept->value.data,
                         accept->value.data + accept->value.len,
                         (u_char *) "text/html", 9 - 1)
        != NULL)
    {
        return NGX_HTTP_PIC_STATUS_HTML;
    }

    return NGX_HTTP_PIC_STATUS_JSON;
}


static void
ngx_http_pic_status_snapshot(ngx_http_request_t *r,
    ngx_http_pic_status_snapshot_t *s)
{
    ngx_uint_t                 i;
    ngx_http_pic_zone_ctx_t   *zc;
    ngx_http_pic_main_conf_t  *pmcf;

    ngx_memzero(s, sizeof(ngx_http_pic_status_snapshot_t));

    pmcf = ngx_http_get_module_main_conf(r, ngx_http_pic_module);

    s->redis = pmcf->redis_name;

    if (pmcf->shm_zone == NULL) {
        ngx_str_set(&s->zone, "");
        return;
    }

    zc = pmcf->shm_zone->data;

    ngx_shmtx_lock(&zc->shpool->mutex);

    s->st = zc->sh->stats;
    s->nengines = zc->sh->nengines;
    ngx_memcpy(s->engines, zc->sh->engines,
               s->nengines * sizeof(ngx_http_pic_engine_sh_t));
    s->nodes = zc->sh->nodes;
    s->generation = zc->sh->generation;
    s->history_count = zc->sh->history_count;
    ngx_memcpy(s->history, zc->sh->history, sizeof(s->history));
    s->reclaimed = zc->sh->reclaimed;
    s->sub_pid = zc->sh->sub_pid;

    ngx_shmtx_unlock(&zc->shpool->mutex);

    for (i = 0; i < s->nengines; i++) {
        /* engines this configuration no longer names are not shown */
        s->configured[i] = (s->engines[i].configured == s->generation);
    }

    s->evictions = zc->sh->evictions;
    s->uptime = ngx_time() - zc->sh->started;
    s->zone = pmcf->shm_zone->shm.name;
    s->zone_size = pmcf->shm_zone->shm.size;

    if (s->st.redis_ok_at) {
        s->redis_ok_known = 1;
        s->redis_ok_ago = ngx_current_msec - s->st.redis_ok_at;
    }
}


/* An engine's seam as JSON at p: its width, "off" or null (unknown). */
static u_char *
ngx_http_pic_status_seam(u_char *p, ngx_uint_t seam)
{
    if (seam == NGX_HTTP_PIC_SEAM_OFF) {
        return ngx_cpymem(p, "\"off\"", 5);
    }

    return seam ? ngx_sprintf(p, "%ui", seam - 1) : ngx_cpymem(p, "null", 4);
}

static ngx_buf_t *
ngx_http_pic_status_json(ngx_http_request_t *r,
    ngx_http_pic_status_snapshot_t *s)
{
    static char               *sections[] = {
        "requests", "segments", "bytes", "routing"
    };

    u_char                    *p;
    size_t                     size;
    ngx_buf_t                 *b;
    ngx_uint_t                 i, first, bpt;
    ngx_http_pic_stats_t      *st;
    ngx_http_pic_engine_sh_t  *e;

    st = &s->st;

    size = 2048 + 10 * NGX_ATOMIC_T_LEN + sizeof(NGX_HTTP_PIC_SERVED_NOTE)
           + ngx_http_pic_counters_size()
           + s->zone.len * 6 + s->redis.len * 6
           + PIC_TTFT_BUCKETS * 2 * NGX_ATOMIC_T_LEN
           + s->nengines * (776 + 6 * NGX_SOCKADDR_STRLEN
                            + 6 * NGX_HTTP_PIC_ENGINE_ID_LEN
                            + 19 * NGX_ATOMIC_T_LEN
                            + 256 + 12 * NGX_ATOMIC_T_LEN)
           + NGX_HTTP_PIC_HISTORY * (256 + 6 * NGX_SOCKADDR_STRLEN
                                     + 8 * NGX_INT64_LEN);

    b = ngx_create_temp_buf(r->pool, size);
    if (b == NULL) {
        return NULL;
    }

    p = b->last;

    p = ngx_sprintf(p, "{\"module\":\"ngx_http_pic_module\","
                    "\"version\":\"%s\",\"nginx_version\":\"%s\","
                    "\"pid\":%P,\"zone\":{\"name\":\"",
                    NGX_HTTP_PIC_VERSION, NGINX_VERSION, ngx_pid);
    p = (u_char *) ngx_escape_json(p, s->zone.data, s->zone.len);
    p = ngx_sprintf(p, "\",\"size\":%uz,\"generation\":%ui,"
                    "\"uptime_s\":%T,\"index_entries\":%ui,"
                    "\"evictions\":%uA,\"engine_slots\":%ui,"
                    "\"slots_reused\":%ui},",
                    s->zone_size, s->generation, s->uptime, s->nodes,
                    s->evictions, s->nengines, s->reclaimed);

    for (i = 0; i < sizeof(sections) / sizeof(sections[0]); i++) {
        p = ngx_sprintf(p, "\"%s\":{", sections[i]);
        p = ngx_http_pic_status_section(p, st, sections[i]);
        p = ngx_cpymem(p, "},", 2);
    }

    p = ngx_sprintf(p, "\"tokens_est\":{\"bytes_per_token\":%d,"
                    "\"hit\":%uA,\"above_prefix\":%uA},",
                    NGX_HTTP_PIC_BYTES_PER_TOKEN,
                    st->bytes_hit / NGX_HTTP_PIC_BYTES_PER_TOKEN,
                    st->bytes_above_prefix / NGX_HTTP_PIC_BYTES_PER_TOKEN);

    p = ngx_cpymem(p, "\"cdc\":{", 7);
    p = ngx_http_pic_status_section(p, st, "cdc");
    p = ngx_sprintf(p, ",\"mb_per_s\":%uA},",
                    st->cdc_usec ? st->cdc_bytes / st->cdc_usec : 0);

    p = ngx_cpymem(p, "\"ttft_ms\":{\"bounds\":[", 21);

    for (i = 0; i < PIC_TTFT_BUCKETS; i++) {
        if (i == PIC_TTFT_BUCKETS - 1) {
            p = ngx_cpymem(p, "null", 4);

        } else {
            p = ngx_sprintf(p, "%uL,", pic_ttft_bounds_ms[i]);
        }
    }

    p = ngx_cpymem(p, "],\"counts\":[", 12);

    for (i = 0; i < PIC_TTFT_BUCKETS; i++) {
        p = ngx_sprintf(p, i ? ",%uA" : "%uA", st->ttft[i]);
    }

    p = ngx_sprintf(p, "],\"count\":%uA,\"sum\":%uA},",
                    st->ttft_count, st->ttft_sum_ms);

    p = ngx_sprintf(p, "\"redis\":{\"configured\":%s,\"address\":\"",
                    s->redis.len ? "true" : "false");
    p = (u_char *) ngx_escape_json(p, s->redis.data, s->redis.len);
    p = ngx_sprintf(p, "\",\"up\":%s,", st->redis_up ? "true" : "false");
    p = ngx_http_pic_status_section(p, st, "redis");
    p = ngx_sprintf(p, ",\"subscriber_pid\":%P,\"last_ok_ms_ago\":", s->sub_pid);

    if (s->redis_ok_known) {
        p = ngx_sprintf(p, "%M}", s->redis_ok_ago);

    } else {
        p = ngx_cpymem(p, "null}", 5);
    }

    p = ngx_cpymem(p, ",\"engines\":[", 12);

    first = 1;

    for (i = 0; i < s->nengines; i++) {
        e = &s->engines[i];

        if (!s->configured[i]) {
            continue;
        }

        if (!first) {
            *p++ = ',';
        }

        first = 0;

        p = ngx_cpymem(p, "{\"name\":\"", 9);
        p = (u_char *) ngx_escape_json(p, e->name, e->name_len);
        p = ngx_cpymem(p, "\",\"id\":\"", 8);
        p = (u_char *) ngx_escape_json(p, e->id, e->id_len);
        p = ngx_sprintf(p, "\",\"healthy\":%s,\"fails\":%ui,\"load\":%ui,"
                        "\"inflight\":%uA,\"requests\":%uA,"
                        "\"failures\":%uA,\"hit_bytes\":%uA,"
                        "\"exact_requests\":%uA,\"exact_bytes\":%uA,"
                        "\"cache_mode\":\"%s\",\"break_even_tokens\":%ui,"
                        "\"probes\":%uA,\"probe_failures\":%uA,"
                        "\"probe_fails\":%ui,\"probe_passes\":%ui,"
                        "\"seam_source\":\"%s\",\"seam\":",
                        e->healthy ? "true" : "false", e->fails, e->load,
                        e->inflight, e->requests, e->failures, e->hit_bytes,
                        e->exact_requests, e->exact_bytes,
                        ngx_http_pic_cache_names[e->cache <= NGX_HTTP_PIC_CACHE_FULL
                                                 ? e->cache : 0],
                        e->break_even, e->probes, e->probe_failures,
                        e->probe_fails, e->probe_passes,
                        ngx_http_pic_seam_sources[e->seam_source
                                                  <= NGX_HTTP_PIC_SEAM_CALIBRATION
                                                  ? e->seam_source : 0]);
        p = ngx_http_pic_status_seam(p, e->seam);
        p = ngx_cpymem(p, ",\"seam_doc\":", sizeof(",\"seam_doc\":") - 1);
        p = ngx_http_pic_status_seam(p, e->seam_doc);

        bpt = e->aff_bpt ? e->aff_bpt : NGX_HTTP_PIC_AFFINITY_BPT;

        p = ngx_sprintf(p, ",\"affinity\":{\"requests\":%uA,\"hits\":%uA,"
                        "\"predicted_tokens\":%uA,\"reports\":%uA,"
                        "\"cached_tokens\":%uA,\"prompt_tokens\":%uA,"
                        "\"misses\":%uA,\"forgotten\":%uA,"
                        "\"held_bytes\":%uz,\"held_tokens_est\":%uz,"
                        "\"bytes_per_1000_tokens\":%ui}}",
                        e->aff_requests, e->aff_hits, e->aff_predicted,
                        e->aff_reports, e->aff_cached, e->aff_prompt,
                        e->aff_misses, e->aff_forgot, e->aff_held,
                        e->aff_held * 1000 / bpt, bpt);
    }

    p = ngx_cpymem(p, "]", 1);

    p = ngx_http_pic_status_history(p, s);

    p = ngx_cpymem(p, "}\n", 2);

    b->last = p;

    return b;
}


/*
 * ,"tokens":{usage.pic totals},"history":{"size":N,"requests":[oldest ..
 * newest by arrival]}: each recent request's arrival and end, status,
 * engine, TTFT and prompt
 * tokens by source (null where the answer carried no usage.pic).
 */
static u_char *
ngx_http_pic_status_history(u_char *p, ngx_http_pic_status_snapshot_t *s)
{
    ngx_uint_t               i, n, first;
    ngx_http_pic_history_t  *h;

    p = ngx_sprintf(p, ",\"tokens\":{\"requests\":%uA,\"exact\":%uA,"
                    "\"pic\":%uA,\"recomputed\":%uA}",
                    s->st.usage_reports, s->st.tokens_exact, s->st.tokens_pic,
                    s->st.tokens_recomputed);

    /*
     * the same requests told twice: what the gateway planned when it routed
     * them (bytes of segments its index held then) and what the engines
     * say they served (tokens, usage.pic); NGX_HTTP_PIC_SERVED_NOTE says
     * why the two differ
     */
    p = ngx_sprintf(p, ",\"served\":{\"planned_by_gateway\":{\"requests\":%uA,"
                    "\"exact_prefix_bytes\":%uA,\"above_prefix_bytes\":%uA,"
                    "\"novel_bytes\":%uA,\"above_prefix_tokens_est\":%uA},"
                    "\"reported_by_engines\":{\"requests\":%uA,"
                    "\"exact_tokens\":%uA,\"pic_tokens\":%uA,"
                    "\"recomputed_tokens\":%uA},\"note\":\"%s\"}",
                    s->st.planned, s->st.bytes_prefix,
                    s->st.bytes_above_prefix, s->st.bytes_novel,
                    s->st.bytes_above_prefix / NGX_HTTP_PIC_BYTES_PER_TOKEN,
                    s->st.usage_reports, s->st.tokens_exact, s->st.tokens_pic,
                    s->st.tokens_recomputed, NGX_HTTP_PIC_SERVED_NOTE);

    p = ngx_sprintf(p, ",\"history\":{\"size\":%d,\"recorded\":%ui,"
                    "\"requests\":[", NGX_HTTP_PIC_HISTORY, s->history_count);

    n = ngx_min(s->history_count, NGX_HTTP_PIC_HISTORY);
    first = 1;

    for (i = s->history_count - n; i < s->history_count; i++) {
        h = &s->history[i % NGX_HTTP_PIC_HISTORY];

        if (!first) {
            *p++ = ',';
        }

        first = 0;

        p = ngx_sprintf(p, "{\"start_ms\":%uL,\"at_ms\":%uL,\"status\":%ui,"
                        "\"mode\":\"%s\",\"engine\":", h->start_ms, h->at_ms,
                        (ngx_uint_t) h->status,
                        h->planned ? "planned" : "observed");

        if (h->engine >= 0 && (ngx_uint_t) h->engine < s->nengines) {
            *p++ = '"';
            p = (u_char *) ngx_escape_json(p, s->engines[h->engine].name,
                                           s->engines[h->engine].name_len);
            *p++ = '"';

        } else {
            p = ngx_cpymem(p, "null", 4);
        }

        p = ngx_sprintf(p, ",\"prompt_bytes\":%uD,\"ttft_ms\":",
                        h->prompt_bytes);

        if (h->has_ttft) {
            p = ngx_sprintf(p, "%uD", h->ttft_ms);

        } else {
            p = ngx_cpymem(p, "null", 4);
        }

        if (h->exact >= 0) {
            p = ngx_sprintf(p, ",\"exact_tokens\":%D,\"pic_tokens\":%D,"
                            "\"recomputed_tokens\":%D}",
                            h->exact, h->pic, h->recomputed);

        } else {
            p = ngx_cpymem(p, ",\"exact_tokens\":null,\"pic_tokens\":null,"
                           "\"recomputed_tokens\":null}",
                           sizeof(",\"exact_tokens\":null,\"pic_tokens\":null,"
                                  "\"recomputed_tokens\":null}") - 1);
        }
    }

    return ngx_cpymem(p, "]}", 2);
}


static ngx_buf_t *
ngx_http_pic_status_prometheus(ngx_http_request_t *r,
    ngx_http_pic_status_snapshot_t *s)
{
    u_char                    *p;
    size_t                     size;
    ngx_buf_t                 *b;
    ngx_uint_t                 i, f;
    ngx_atomic_uint_t          cum;
    ngx_http_pic_stats_t      *st;
    ngx_http_pic_counter_t    *c;
    ngx_http_pic_engine_sh_t  *e;

    st = &s->st;

    size = 2048 + ngx_http_pic_counters_size()
           + NGX_HTTP_PIC_ENGINE_FAMILIES * 256
           + PIC_TTFT_BUCKETS * (64 + 2 * NGX_ATOMIC_T_LEN)
           + s->nengines * NGX_HTTP_PIC_ENGINE_FAMILIES
                         * (96 + 2 * NGX_SOCKADDR_STRLEN
                                + 2 * NGX_HTTP_PIC_ENGINE_ID_LEN
                                + NGX_ATOMIC_T_LEN);

    b = ngx_create_temp_buf(r->pool, size);
    if (b == NULL) {
        return NULL;
    }

    p = b->last;

#define ngx_http_pic_prom(p, name, type, help, v)                            \
    ngx_sprintf(p, "# HELP " name " " help "\n# TYPE " name " " type "\n"    \
                name " %uA\n", (ngx_atomic_uint_t) (v))

    for (i = 0; i < NGX_HTTP_PIC_COUNTERS; i++) {
        c = &ngx_http_pic_counters[i];

        if (c->name) {
            p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s %s\n%s %uA\n",
                            c->name, c->help, c->name, c->type, c->name,
                            ngx_http_pic_counter_value(st, c));
        }
    }

    p = ngx_http_pic_prom(p, "pic_index_entries", "gauge",
                          "Entries in the shm index.", s->nodes);
    p = ngx_http_pic_prom(p, "pic_index_evictions_total", "counter",
                          "Entries evicted from the shm index (LRU).",
                          s->evictions);
    p = ngx_sprintf(p, "# HELP pic_prompt_tokens_total Prompt tokens of those "
                    "answers by source.\n# TYPE pic_prompt_tokens_total "
                    "counter\npic_prompt_tokens_total{source=\"exact\"} %uA\n"
                    "pic_prompt_tokens_total{source=\"pic\"} %uA\n"
                    "pic_prompt_tokens_total{source=\"recomputed\"} %uA\n",
                    st->tokens_exact, st->tokens_pic, st->tokens_recomputed);

    p = ngx_cpymem(p, "# HELP pic_ttft_milliseconds Time to first byte of "
                   "the answer.\n# TYPE pic_ttft_milliseconds histogram\n",
                   sizeof("# HELP pic_ttft_milliseconds Time to first byte of "
                          "the answer.\n# TYPE pic_ttft_milliseconds "
                          "histogram\n") - 1);

    cum = 0;

    for (i = 0; i < PIC_TTFT_BUCKETS; i++) {
        cum += st->ttft[i];

        if (i == PIC_TTFT_BUCKETS - 1) {
            p = ngx_sprintf(p, "pic_ttft_milliseconds_bucket{le=\"+Inf\"} "
                            "%uA\n", cum);

        } else {
            p = ngx_sprintf(p, "pic_ttft_milliseconds_bucket{le=\"%uL\"} "
                            "%uA\n", pic_ttft_bounds_ms[i], cum);
        }
    }

    p = ngx_sprintf(p, "pic_ttft_milliseconds_sum %uA\n"
                    "pic_ttft_milliseconds_count %uA\n",
                    st->ttft_sum_ms, st->ttft_count);

    /* one family at a time, a line per engine (the format's grouping) */

    for (f = 0; f < NGX_HTTP_PIC_ENGINE_FAMILIES; f++) {
        p = ngx_sprintf(p, "# HELP %s %s\n# TYPE %s %s\n",
                        ngx_http_pic_engine_families[f].name,
                        ngx_http_pic_engine_families[f].help,
                        ngx_http_pic_engine_families[f].name,
                        ngx_http_pic_engine_families[f].type);

        for (i = 0; i < s->nengines; i++) {
            e = &s->engines[i];

            if (!s->configured[i]) {
                continue;
            }

            p = ngx_sprintf(p, "%s{engine=\"%*s\"",
                            ngx_http_pic_engine_families[f].name,
                            e->name_len, e->name);

            if (ngx_http_pic_engine_families[f].id) {
                p = ngx_sprintf(p, ",id=\"%*s\"", e->id_len, e->id);
            }

            p = ngx_sprintf(p, "} %uA\n",
                            *(ngx_atomic_uint_t *) ((u_char *) e
                                   + ngx_http_pic_engine_families[f].offset));
        }
    }

#undef ngx_http_pic_prom

    p = ngx_sprintf(p, "# HELP pic_info Module build information.\n"
                    "# TYPE pic_info gauge\n"
                    "pic_info{version=\"%s\",nginx_version=\"%s\"} 1\n",
                    NGX_HTTP_PIC_VERSION, NGINX_VERSION);

    b->last = p;

    return b;
}


static ngx_buf_t *
ngx_http_pic_status_html(ngx_http_request_t *r)
{
    ngx_buf_t  *b;

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NULL;
    }

    b->memory = 1;
    b->pos = (u_char *) ngx_http_pic_dashboard;
    b->last = b->pos + sizeof(ngx_http_pic_dashboard) - 1;

    return b;
}
