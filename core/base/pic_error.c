/*
 * pic_error.c — OpenAI-shaped request errors (see pic_error.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pic_error.h"

static void
pic_error_copy(char *dst, size_t cap, const char *src)
{
    size_t n = src ? strlen(src) : 0;
    if (n >= cap) {
        n = cap - 1;
    }
    if (n) {
        memcpy(dst, src, n);
    }
    dst[n] = '\0';
}

void
pic_error_clear(pic_error *err)
{
    if (err) {
        memset(err, 0, sizeof(*err));
    }
}

static int
pic_error_vset(pic_error *err, int status, const char *type, const char *param,
               const char *code, const char *fmt, va_list ap)
{
    if (!err) {
        return -1;
    }
    err->status = status;
    pic_error_copy(err->type, sizeof(err->type), type);
    pic_error_copy(err->param, sizeof(err->param), param);
    pic_error_copy(err->code, sizeof(err->code), code);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    return -1;
}

int
pic_error_set(pic_error *err, int status, const char *type, const char *param,
              const char *code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pic_error_vset(err, status, type, param, code, fmt, ap);
    va_end(ap);
    return -1;
}

int
pic_error_invalid(pic_error *err, const char *param, const char *code,
                  const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pic_error_vset(err, 400, "invalid_request_error", param, code, fmt, ap);
    va_end(ap);
    return -1;
}

int
pic_error_oom(pic_error *err, const char *where)
{
    return pic_error_set(err, 500, "server_error", NULL, "out_of_memory",
                         "%s: out of memory", where);
}

/* --- JSON output --- */

typedef struct {
    char  *buf;
    size_t cap;
    size_t len;     /* bytes wanted so far (may exceed cap) */
} pic_error_out;

static void
pic_error_put(pic_error_out *o, const char *s, size_t n)
{
    if (o->len < o->cap) {
        size_t room = o->cap - o->len;
        memcpy(o->buf + o->len, s, n < room ? n : room);
    }
    o->len += n;
}

static void
pic_error_put_str(pic_error_out *o, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    pic_error_put(o, "\"", 1);
    for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
        char esc[6] = { '\\', 'u', '0', '0', 0, 0 };
        switch (*p) {
        case '"':  pic_error_put(o, "\\\"", 2); break;
        case '\\': pic_error_put(o, "\\\\", 2); break;
        case '\n': pic_error_put(o, "\\n", 2); break;
        case '\r': pic_error_put(o, "\\r", 2); break;
        case '\t': pic_error_put(o, "\\t", 2); break;
        default:
            if (*p < 0x20) {
                esc[4] = hex[*p >> 4];
                esc[5] = hex[*p & 15];
                pic_error_put(o, esc, 6);
            } else {
                pic_error_put(o, (const char *) p, 1);
            }
        }
    }
    pic_error_put(o, "\"", 1);
}

static void
pic_error_put_opt(pic_error_out *o, const char *s)
{
    if (s[0]) {
        pic_error_put_str(o, s);
    } else {
        pic_error_put(o, "null", 4);
    }
}

size_t
pic_error_json(const pic_error *err, char *buf, size_t cap)
{
    pic_error_out o = { buf, cap, 0 };
    pic_error_put(&o, "{\"error\":{\"message\":", 20);
    pic_error_put_str(&o, err->message);
    pic_error_put(&o, ",\"type\":", 8);
    pic_error_put_str(&o, err->type[0] ? err->type : "invalid_request_error");
    pic_error_put(&o, ",\"param\":", 9);
    pic_error_put_opt(&o, err->param);
    pic_error_put(&o, ",\"code\":", 8);
    pic_error_put_opt(&o, err->code);
    pic_error_put(&o, "}}", 2);
    if (cap) {
        buf[o.len < cap ? o.len : cap - 1] = '\0';
    }
    return o.len;
}
