/*
 * pic_error.h — OpenAI-shaped request errors for the nginx-free core.
 *
 * Every fallible core function takes a `pic_error *` (may be NULL) and fills
 * it on failure: the HTTP status to answer with and the four fields of
 * `{"error":{"message","type","param","code"}}` (DESIGN.md §4.4).  The
 * struct is fixed-size so it can live on the stack or inside an nginx
 * request context; nothing in it is heap-allocated.
 */
#ifndef PIC_ERROR_H
#define PIC_ERROR_H

#include <stddef.h>

#define PIC_ERROR_MESSAGE_MAX 256
#define PIC_ERROR_PARAM_MAX   96
#define PIC_ERROR_CODE_MAX    48
#define PIC_ERROR_TYPE_MAX    32

typedef struct {
    int  status;                            /* HTTP status; 0 = no error */
    char message[PIC_ERROR_MESSAGE_MAX];    /* human-readable, NUL-terminated */
    char type[PIC_ERROR_TYPE_MAX];          /* "invalid_request_error", ... */
    char param[PIC_ERROR_PARAM_MAX];        /* "messages[2].content"; "" = null */
    char code[PIC_ERROR_CODE_MAX];          /* machine-readable; "" = null */
} pic_error;

/* Resets err to "no error" (status 0, empty strings).  err may be NULL. */
void pic_error_clear(pic_error *err);

/* Fills err (when non-NULL): status, type, param and code (either may be
 * NULL for JSON null) and a printf-formatted message; strings are truncated
 * to their fields.  Always returns -1 so callers can `return pic_error_set(..)`. */
int pic_error_set(pic_error *err, int status, const char *type,
                  const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Shorthand for the common 400 invalid_request_error; returns -1. */
int pic_error_invalid(pic_error *err, const char *param, const char *code,
                      const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Shorthand for a 500 out-of-memory server_error naming the caller; returns -1. */
int pic_error_oom(pic_error *err, const char *where);

/* Writes err as the OpenAI error body `{"error":{...}}` into buf (capacity
 * cap, NUL-terminated, JSON-escaped).  Returns the length written, or the
 * length needed (>= cap) when buf is too small, like snprintf. */
size_t pic_error_json(const pic_error *err, char *buf, size_t cap);

#endif /* PIC_ERROR_H */
