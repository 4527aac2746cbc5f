/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: the status location (JSON and Prometheus text),
 * built like stub_status: compute the size, fill one buffer.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_pic_module.h"


typedef enum {
    NGX_HTTP_PIC_STATUS_JSON = 0,
    NGX_HTTP_PIC_STATUS_PROMETHEUS
} ngx_http_pic_status_format_e;


typedef struct {
    ngx_atomic_uint_t            requests;
    ngx_atomic_uint_t            errors;
    ngx_atomic_uint_t            status_requests;
    time_t                       uptime;
    ngx_uint_t                   generation;
    ngx_str_t                    zone;
    size_t                       zone_size;
} ngx_http_pic_status_snapshot_t;


static ngx_http_pic_status_format_e ngx_http_pic_status_format(
    ngx_http_request_t *r);
static void ngx_http_pic_status_snapshot(ngx_http_request_t *r,
    ngx_http_pic_status_snapshot_t *s);
static ngx_buf_t *ngx_http_pic_status_json(ngx_http_request_t *r,
    ngx_http_pic_status_snapshot_t *s);
static ngx_buf_t *ngx_http_pic_status_prometheus(ngx_http_request_t *r,
    ngx_http_pic_status_snapshot_t *s);


ngx_int_t
ngx_http_pic_status_handler(ngx_http_request_t *r)
{
    ngx_int_t                        rc;
    ngx_buf_t                       *b;
    ngx_chain_t                      out;
    ngx_http_pic_status_format_e     format;
    ngx_http_pic_status_snapshot_t   snap;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);

    if (rc != NGX_OK) {
        return rc;
    }

    format = ngx_http_pic_status_format(r);
    ngx_http_pic_status_snapshot(r, &snap);

    if (format == NGX_HTTP_PIC_STATUS_PROMETHEUS) {
        ngx_str_set(&r->headers_out.content_type,
                    "text/plain; version=0.0.4; charset=utf-8");
        b = ngx_http_pic_status_prometheus(r, &snap);

    } else {
        ngx_str_set(&r->headers_out.content_type, "application/json");
        b = ngx_http_pic_status_json(r, &snap);
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
    ngx_str_t  value;

    if (ngx_http_arg(r, (u_char *) "format", 6, &value) == NGX_OK) {
        if (value.len == 10
            && ngx_strncmp(value.data, "prometheus", 10) == 0)
        {
            return NGX_HTTP_PIC_STATUS_PROMETHEUS;
        }
    }

    return NGX_HTTP_PIC_STATUS_JSON;
}


static void
ngx_http_pic_status_snapshot(ngx_http_request_t *r,
    ngx_http_pic_status_snapshot_t *s)
{
    ngx_http_pic_zone_ctx_t   *ctx;
    ngx_http_pic_main_conf_t  *pmcf;

    ngx_memzero(s, sizeof(ngx_http_pic_status_snapshot_t));

    pmcf = ngx_http_get_module_main_conf(r, ngx_http_pic_module);

    if (pmcf->shm_zone == NULL) {
        ngx_str_set(&s->zone, "");
        return;
    }

    ctx = pmcf->shm_zone->data;

    s->requests = ctx->sh->requests;
    s->errors = ctx->sh->errors;
    s->status_requests = ctx->sh->status_requests;
    s->uptime = ngx_time() - ctx->sh->started;
    s->generation = ctx->sh->generation;
    s->zone = pmcf->shm_zone->shm.name;
    s->zone_size = pmcf->shm_zone->shm.size;
}


static ngx_buf_t *
ngx_http_pic_status_json(ngx_http_request_t *r,
    ngx_http_pic_status_snapshot_t *s)
{
    size_t      size;
    ngx_buf_t  *b;

    size = sizeof("{\"module\":\"ngx_http_pic_module\",\"version\":\"\","
                  "\"nginx_version\":\"\",\"pid\":,"
                  "\"zone\":{\"name\":\"\",\"size\":,\"generation\":,"
                  "\"uptime_s\":},"
                  "\"requests\":{\"total\":,\"errors\":,\"status\":}}\n")
           + sizeof(NGX_HTTP_PIC_VERSION) + sizeof(NGINX_VERSION)
           + s->zone.len * 6  /* a zone name is escaped at most 6x */
           + 7 * NGX_ATOMIC_T_LEN;

    b = ngx_create_temp_buf(r->pool, size);
    if (b == NULL) {
        return NULL;
    }

    b->last = ngx_sprintf(b->last,
                          "{\"module\":\"ngx_http_pic_module\","
                          "\"version\":\"%s\",\"nginx_version\":\"%s\","
                          "\"pid\":%P,\"zone\":{\"name\":\"",
                          NGX_HTTP_PIC_VERSION, NGINX_VERSION, ngx_pid);

    b->last = (u_char *) ngx_escape_json(b->last, s->zone.data, s->zone.len);

    b->last = ngx_sprintf(b->last,
                          "\",\"size\":%uz,\"generation\":%ui,"
                          "\"uptime_s\":%T},"
                          "\"requests\":{\"total\":%uA,\"errors\":%uA,"
                          "\"status\":%uA}}\n",
                          s->zone_size, s->generation, s->uptime,
                          s->requests, s->errors, s->status_requests);

    return b;
}


static ngx_buf_t *
ngx_http_pic_status_prometheus(ngx_http_request_t *r,
    ngx_http_pic_status_snapshot_t *s)
{
    size_t      size;
    ngx_buf_t  *b;

    static const char  fmt[] =
        "# HELP pic_requests_total Requests seen in pic locations.\n"
        "# TYPE pic_requests_total counter\n"
        "pic_requests_total %uA\n"
        "# HELP pic_errors_total Requests answered with an error status.\n"
        "# TYPE pic_errors_total counter\n"
        "pic_errors_total %uA\n"
        "# HELP pic_status_requests_total Requests to the status location.\n"
        "# TYPE pic_status_requests_total counter\n"
        "pic_status_requests_total %uA\n"
        "# HELP pic_zone_uptime_seconds Age of the shared zone.\n"
        "# TYPE pic_zone_uptime_seconds gauge\n"
        "pic_zone_uptime_seconds %T\n"
        "# HELP pic_info Module build information.\n"
        "# TYPE pic_info gauge\n"
        "pic_info{version=\"%s\",nginx_version=\"%s\"} 1\n";

    size = sizeof(fmt) + sizeof(NGX_HTTP_PIC_VERSION) + sizeof(NGINX_VERSION)
           + 4 * NGX_ATOMIC_T_LEN;

    b = ngx_create_temp_buf(r->pool, size);
    if (b == NULL) {
        return NULL;
    }

    b->last = ngx_sprintf(b->last, fmt, s->requests, s->errors,
                          s->status_requests, s->uptime,
                          NGX_HTTP_PIC_VERSION, NGINX_VERSION);

    return b;
}
