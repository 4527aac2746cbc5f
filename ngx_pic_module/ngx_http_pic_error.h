/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: the module's own errors.  Every error the module
 * decides (bad body, no engine, too large) goes through one function that
 * logs it, counts a client's mistake as rejected and leaves the OpenAI
 * error fields for the error filter (ngx_http_pic_handler.c) to answer.
 */


#ifndef _NGX_HTTP_PIC_ERROR_H_INCLUDED_
#define _NGX_HTTP_PIC_ERROR_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "pic_error.h"
#include "ngx_http_pic_module.h"


/* Answer this request with err (status and OpenAI error fields): remembers
 * err for the error filter and returns the status to finalize with. */
ngx_int_t ngx_http_pic_error(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx,
    pic_error *err, ngx_uint_t level);


#endif /* _NGX_HTTP_PIC_ERROR_H_INCLUDED_ */
