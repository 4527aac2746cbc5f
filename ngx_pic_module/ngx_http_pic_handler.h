/*
 * Copyright (C) ngx_pic authors
 *
 * ngx_http_pic_module: the request path.  A precontent-phase handler (like
 * ngx_http_mirror_module's) reads the body, has the shared core parse,
 * render, mark, chunk and key it, resolves segment holders (shm index, then
 * one pipelined redis round trip), plans, rewrites the body into the
 * engine's plan request and lets the location's proxy_pass send it on.
 * A header/body filter pair answers every error nginx makes in a pic
 * location as OpenAI-shaped JSON and takes the TTFT sample.
 */


#ifndef _NGX_HTTP_PIC_HANDLER_H_INCLUDED_
#define _NGX_HTTP_PIC_HANDLER_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "pic_error.h"
#include "ngx_http_pic_module.h"


/* Answer this request with err (status and OpenAI error fields): remembers
 * err for the error filter and returns the status to finalize with. */
ngx_int_t ngx_http_pic_error(ngx_http_request_t *r, ngx_http_pic_ctx_t *ctx,
    pic_error *err, ngx_uint_t level);


#endif /* _NGX_HTTP_PIC_HANDLER_H_INCLUDED_ */
