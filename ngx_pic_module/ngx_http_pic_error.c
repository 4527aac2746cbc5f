/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: answering a request with an OpenAI-shaped error
 * (see ngx_http_pic_error.h).
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "pic_error.h"

#include "ngx_http_pic_module.h"
#include "ngx_http_pic_index.h"
#include "ngx_http_pic_error.h"


ngx_int_t
ngx_http_pic_error(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx,
    pic_error *err, ngx_uint_t level)
{
    ngx_http_pic_zone_ctx_t  *zc;

    ctx->err = *err;
    ctx->rejected = (err->status < 500);

    ngx_log_error(level, r->connection->log, 0,
                  "pic: %s%s%s (status %d%s%s)",
                  err->message,
                  err->param[0] ? ", param " : "", err->param,
                  err->status,
                  err->code[0] ? ", code " : "", err->code);

    zc = ngx_http_pic_zone(r);

    if (zc && ctx->rejected) {
        (void) ngx_atomic_fetch_add(&zc->sh->stats.rejected, 1);
    }

    return err->status;
}
