/*
 * pic_json.c — strict JSON validator, cJSON intake, Python-style writer.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pic_buf.h"
#include "pic_json.h"
#include "pic_utf8.h"

/* --- strict validator --- */

typedef struct {
    size_t off;                 /* number lexeme: offset into the text */
    size_t len;
} pic_json_lexeme;

typedef struct {
    const unsigned char *p;
    size_t               n;
    size_t               i;
    int                  max_depth;
    const char          *err;   /* static description of the first error */
    size_t               err_at;
    pic_json_lexeme     *nums;  /* number lexemes in document order */
    size_t               n_nums;
    size_t               cap_nums;
    int                  oom;
} pic_json_scan;

#define PIC_JSON_NUMBER_MAX 63  /* cJSON copies numbers into a 64-byte buffer */

static int
pic_json_fail(pic_json_scan *s, const char *what)
{
    if (!s->err) {
        s->err = what;
        s->err_at = s->i;
    }
    return -1;
}

static void
pic_json_ws(pic_json_scan *s)
{
    while (s->i < s->n) {
        unsigned char c = s->p[s->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            break;
        }
        s->i++;
    }
}

static int
pic_json_hex4(pic_json_scan *s, unsigned *out)
{
    unsigned v = 0;
    if (s->n - s->i < 4) {
        return pic_json_fail(s, "truncated \\u escape");
    }
    for (int k = 0; k < 4; k++) {
        unsigned char c = s->p[s->i + k];
        unsigned      d;
        if (c >= '0' && c <= '9') {
            d = c - '0';
        } else if (c >= 'a' && c <= 'f') {
            d = c - 'a' + 10;
        } else if (c >= 'A' && c <= 'F') {
            d = c - 'A' + 10;
        } else {
            return pic_json_fail(s, "bad hex digit in \\u escape");
        }
        v = v * 16 + d;
    }
    s->i += 4;
    *out = v;
    return 0;
}

static int
pic_json_string(pic_json_scan *s)
{
    s->i++;                                     /* opening quote */
    for (;;) {
        if (s->i >= s->n) {
            return pic_json_fail(s, "unterminated string");
        }
        unsigned char c = s->p[s->i];
        if (c == '"') {
            s->i++;
            return 0;
        }
        if (c < 0x20) {
            return pic_json_fail(s, "control character in string");
        }
        if (c == '\\') {
            if (s->i + 1 >= s->n) {
                return pic_json_fail(s, "unterminated string");
            }
            unsigned char e = s->p[s->i + 1];
            s->i += 2;
            if (e == 'u') {
                unsigned u, lo;
                if (pic_json_hex4(s, &u) != 0) {
                    return -1;
                }
                if (u == 0) {
                    return pic_json_fail(s, "\\u0000 is not allowed in strings");
                }
                if (u >= 0xDC00 && u <= 0xDFFF) {
                    return pic_json_fail(s, "lone low surrogate in \\u escape");
                }
                if (u >= 0xD800 && u <= 0xDBFF) {
                    if (s->n - s->i < 2 || s->p[s->i] != '\\' || s->p[s->i + 1] != 'u') {
                        return pic_json_fail(s, "lone high surrogate in \\u escape");
                    }
                    s->i += 2;
                    if (pic_json_hex4(s, &lo) != 0) {
                        return -1;
                    }
                    if (lo < 0xDC00 || lo > 0xDFFF) {
                        return pic_json_fail(s, "lone high surrogate in \\u escape");
                    }
                }
            } else if (!strchr("\"\\/bfnrt", e) || e == 0) {
                s->i -= 1;
                return pic_json_fail(s, "invalid escape in string");
            }
            continue;
        }
        if (c < 0x80) {
            s->i++;
            continue;
        }
        uint32_t cp;
        size_t   k = pic_utf8_decode((const char *) s->p + s->i, s->n - s->i, &cp);
        if (k == 0) {
            return pic_json_fail(s, "invalid UTF-8 in string");
        }
        s->i += k;
    }
}

static int
pic_json_digits(pic_json_scan *s)
{
    size_t start = s->i;
    while (s->i < s->n && s->p[s->i] >= '0' && s->p[s->i] <= '9') {
        s->i++;
    }
    return s->i > start ? 0 : pic_json_fail(s, "invalid number");
}

static int
pic_json_number(pic_json_scan *s)
{
    size_t start = s->i;
    if (s->p[s->i] == '-') {
        s->i++;
    }
    if (s->i >= s->n) {
        return pic_json_fail(s, "invalid number");
    }
    if (s->p[s->i] == '0') {
        s->i++;
    } else if (pic_json_digits(s) != 0) {
        return -1;
    }
    if (s->i < s->n && s->p[s->i] == '.') {
        s->i++;
        if (pic_json_digits(s) != 0) {
            return -1;
        }
    }
    if (s->i < s->n && (s->p[s->i] == 'e' || s->p[s->i] == 'E')) {
        s->i++;
        if (s->i < s->n && (s->p[s->i] == '+' || s->p[s->i] == '-')) {
            s->i++;
        }
        if (pic_json_digits(s) != 0) {
            return -1;
        }
    }
    if (s->i - start > PIC_JSON_NUMBER_MAX) {
        s->i = start;
        return pic_json_fail(s, "number literal too long");
    }
    if (pic_grow((void **) &s->nums, &s->cap_nums, s->n_nums + 1,
                 sizeof(*s->nums)) != 0) {
        s->oom = 1;
        return pic_json_fail(s, "out of memory");
    }
    s->nums[s->n_nums].off = start;
    s->nums[s->n_nums].len = s->i - start;
    s->n_nums++;
    return 0;
}

static int
pic_json_literal(pic_json_scan *s, const char *word)
{
    size_t n = strlen(word);
    if (s->n - s->i < n || memcmp(s->p + s->i, word, n) != 0) {
        return pic_json_fail(s, "invalid literal");
    }
    s->i += n;
    return 0;
}

static int pic_json_value(pic_json_scan *s, int depth);

static int
pic_json_container(pic_json_scan *s, int depth, int is_object)
{
    unsigned char close = is_object ? '}' : ']';
    if (depth >= s->max_depth) {
        return pic_json_fail(s, "nesting too deep");
    }
    s->i++;
    pic_json_ws(s);
    if (s->i < s->n && s->p[s->i] == close) {
        s->i++;
        return 0;
    }
    for (;;) {
        if (is_object) {
            if (s->i >= s->n || s->p[s->i] != '"') {
                return pic_json_fail(s, "expected a string key");
            }
            if (pic_json_string(s) != 0) {
                return -1;
            }
            pic_json_ws(s);
            if (s->i >= s->n || s->p[s->i] != ':') {
                return pic_json_fail(s, "expected ':'");
            }
            s->i++;
            pic_json_ws(s);
        }
        if (pic_json_value(s, depth + 1) != 0) {
            return -1;
        }
        pic_json_ws(s);
        if (s->i >= s->n) {
            return pic_json_fail(s, is_object ? "unterminated object"
                                              : "unterminated array");
        }
        if (s->p[s->i] == close) {
            s->i++;
            return 0;
        }
        if (s->p[s->i] != ',') {
            return pic_json_fail(s, is_object ? "expected ',' or '}'"
                                              : "expected ',' or ']'");
        }
        s->i++;
        pic_json_ws(s);
    }
}

static int
pic_json_value(pic_json_scan *s, int depth)
{
    if (s->i >= s->n) {
        return pic_json_fail(s, "unexpected end of input");
    }
    switch (s->p[s->i]) {
    case '{': return pic_json_container(s, depth, 1);
    case '[': return pic_json_container(s, depth, 0);
    case '"': return pic_json_string(s);
    case 't': return pic_json_literal(s, "true");
    case 'f': return pic_json_literal(s, "false");
    case 'n': return pic_json_literal(s, "null");
    default:
        if (s->p[s->i] == '-' || (s->p[s->i] >= '0' && s->p[s->i] <= '9')) {
            return pic_json_number(s);
        }
        return pic_json_fail(s, "unexpected character");
    }
}

/* Pre-order walk handing out lexemes in document order (cJSON keeps the
 * order of members and elements, so this matches the scan). */
static int
pic_json_attach(cJSON *v, const char *text, const pic_json_lexeme *nums,
                size_t n_nums, size_t *next)
{
    for (; v; v = v->next) {
        if (cJSON_IsNumber(v)) {
            if (*next >= n_nums) {
                return -1;
            }
            const pic_json_lexeme *lx = &nums[(*next)++];
            char *str = cJSON_malloc(lx->len + 1);
            if (!str) {
                return -2;
            }
            memcpy(str, text + lx->off, lx->len);
            str[lx->len] = '\0';
            v->valuestring = str;
        } else if (v->child) {
            int rc = pic_json_attach(v->child, text, nums, n_nums, next);
            if (rc != 0) {
                return rc;
            }
        }
    }
    return 0;
}

cJSON *
pic_json_parse(const char *buf, size_t len, int max_depth, const char *what,
               pic_error *err)
{
    pic_json_scan s;
    memset(&s, 0, sizeof(s));
    s.p = (const unsigned char *) buf;
    s.n = len;
    s.max_depth = max_depth < 1 ? 1
                : max_depth > PIC_JSON_DEPTH_MAX ? PIC_JSON_DEPTH_MAX : max_depth;

    pic_json_ws(&s);
    if (pic_json_value(&s, 0) == 0) {
        pic_json_ws(&s);
        if (s.i != s.n) {
            pic_json_fail(&s, "unexpected data after the JSON value");
        }
    }
    if (s.err) {
        free(s.nums);
        if (s.oom) {
            pic_error_oom(err, __func__);
            return NULL;
        }
        if (!strcmp(s.err, "nesting too deep")) {
            pic_error_invalid(err, what, "nesting_too_deep",
                              "%s%sJSON nesting deeper than %d levels at byte %zu",
                              what ? what : "", what ? ": " : "",
                              s.max_depth, s.err_at);
        } else {
            pic_error_invalid(err, what, "invalid_json",
                              "%s%sinvalid JSON at byte %zu: %s",
                              what ? what : "", what ? ": " : "", s.err_at, s.err);
        }
        return NULL;
    }

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    size_t next = 0;
    int    rc = root ? pic_json_attach(root, buf, s.nums, s.n_nums, &next) : -2;
    free(s.nums);
    if (rc != 0 || next != s.n_nums) {
        cJSON_Delete(root);
        if (rc == -2) {
            pic_error_oom(err, __func__);
        } else {
            pic_error_invalid(err, what, "invalid_json",
                              "%s%sJSON numbers out of step with the parser",
                              what ? what : "", what ? ": " : "");
        }
        return NULL;
    }
    return root;
}

const char *
pic_json_number_lexeme(const cJSON *num)
{
    return cJSON_IsNumber(num) ? num->valuestring : NULL;
}

/* --- Python-compatible writer --- */

size_t
pic_json_py_float_repr(double x, char *out)
{
    char   tmp[40], digits[24];
    size_t nd = 0, o = 0;
    int    exp10 = 0;

    if (x == 0) {
        return (size_t) sprintf(out, signbit(x) ? "-0.0" : "0.0");
    }
    if (x < 0) {
        out[o++] = '-';
        x = -x;
    }
    /* shortest %.Ne that reads back to the same double (Python's 'r') */
    for (int prec = 0; prec < 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec, x);
        if (strtod(tmp, NULL) == x) {
            break;
        }
    }
    for (const char *p = tmp; *p && *p != 'e'; p++) {
        if (*p >= '0' && *p <= '9') {
            digits[nd++] = *p;
        }
    }
    exp10 = atoi(strchr(tmp, 'e') + 1);
    while (nd > 1 && digits[nd - 1] == '0') {
        nd--;
    }
    int decpt = exp10 + 1;          /* digits d1 d2 ... = 0.d1d2.. * 10^decpt */
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int k = 0; k < -decpt; k++) {
                out[o++] = '0';
            }
            memcpy(out + o, digits, nd);
            o += nd;
        } else if ((size_t) decpt >= nd) {
            memcpy(out + o, digits, nd);
            o += nd;
            for (size_t k = nd; k < (size_t) decpt; k++) {
                out[o++] = '0';
            }
            out[o++] = '.';
            out[o++] = '0';
        } else {
            memcpy(out + o, digits, (size_t) decpt);
            o += (size_t) decpt;
            out[o++] = '.';
            memcpy(out + o, digits + decpt, nd - (size_t) decpt);
            o += nd - (size_t) decpt;
        }
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        int e = decpt - 1;
        o += (size_t) sprintf(out + o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    out[o] = '\0';
    return o;
}

/* Python's repr of the number: ints by their (canonical) digits, floats by
 * repr; `as_json` selects json.dumps spelling of non-finite values. */
static int
pic_json_write_number(pic_buf *b, const cJSON *v, int as_json)
{
    char        tmp[48];
    const char *lx = pic_json_number_lexeme(v);
    double      x = v->valuedouble;

    if (lx && !strpbrk(lx, ".eE")) {
        if (!strcmp(lx, "-0")) {
            return pic_buf_appendc(b, '0');
        }
        return pic_buf_appends(b, lx);          /* Python int: exact digits */
    }
    if (lx) {
        x = strtod(lx, NULL);
    } else if (isfinite(x) && x == floor(x) && fabs(x) < 9007199254740992.0) {
        return pic_buf_printf(b, "%.0f", x);    /* built in code: an int */
    }
    if (isnan(x)) {
        return pic_buf_appends(b, as_json ? "NaN" : "nan");
    }
    if (isinf(x)) {
        return pic_buf_appends(b, x > 0 ? (as_json ? "Infinity" : "inf")
                                        : (as_json ? "-Infinity" : "-inf"));
    }
    size_t n = pic_json_py_float_repr(x, tmp);
    return pic_buf_append(b, tmp, n);
}

int
pic_json_write_string(pic_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t run = 0;

    pic_buf_appendc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) s[i];
        const char   *esc = NULL;
        char          u[7];

        if (c >= 0x20 && c != '"' && c != '\\') {
            continue;
        }
        switch (c) {
        case '"':  esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            u[0] = '\\'; u[1] = 'u'; u[2] = '0'; u[3] = '0';
            u[4] = hex[c >> 4]; u[5] = hex[c & 15]; u[6] = '\0';
            esc = u;
        }
        pic_buf_append(b, s + run, i - run);
        pic_buf_appends(b, esc);
        run = i + 1;
    }
    pic_buf_append(b, s + run, n - run);
    return pic_buf_appendc(b, '"');
}

int
pic_json_write_py(pic_buf *b, const cJSON *v)
{
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        int obj = cJSON_IsObject(v);
        pic_buf_appendc(b, obj ? '{' : '[');
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) {
                pic_buf_append(b, ", ", 2);
            }
            if (obj) {
                const char *k = c->string ? c->string : "";
                pic_json_write_string(b, k, strlen(k));
                pic_buf_append(b, ": ", 2);
            }
            pic_json_write_py(b, c);
        }
        return pic_buf_appendc(b, obj ? '}' : ']');
    }
    if (cJSON_IsString(v)) {
        return pic_json_write_string(b, v->valuestring, strlen(v->valuestring));
    }
    if (cJSON_IsNumber(v)) {
        return pic_json_write_number(b, v, 1);
    }
    if (cJSON_IsTrue(v)) {
        return pic_buf_appends(b, "true");
    }
    if (cJSON_IsFalse(v)) {
        return pic_buf_appends(b, "false");
    }
    return pic_buf_appends(b, "null");
}

static int
pic_json_write_py_at(pic_buf *b, const cJSON *v, int indent, int depth)
{
    if ((cJSON_IsObject(v) || cJSON_IsArray(v)) && v->child != NULL) {
        int obj = cJSON_IsObject(v);
        pic_buf_appendc(b, obj ? '{' : '[');
        for (const cJSON *c = v->child; c; c = c->next) {
            pic_buf_appendc(b, c == v->child ? '\n' : ',');
            if (c != v->child) {
                pic_buf_appendc(b, '\n');
            }
            pic_buf_printf(b, "%*s", indent * (depth + 1), "");
            if (obj) {
                const char *k = c->string ? c->string : "";
                pic_json_write_string(b, k, strlen(k));
                pic_buf_append(b, ": ", 2);
            }
            pic_json_write_py_at(b, c, indent, depth + 1);
        }
        pic_buf_printf(b, "\n%*s", indent * depth, "");
        return pic_buf_appendc(b, obj ? '}' : ']');
    }
    return pic_json_write_py(b, v);
}

int
pic_json_write_py_indent(pic_buf *b, const cJSON *v, int indent)
{
    return pic_json_write_py_at(b, v, indent, 0);
}

int
pic_json_write_py_str(pic_buf *b, const cJSON *v)
{
    if (cJSON_IsString(v)) {
        return pic_buf_appends(b, v->valuestring);
    }
    if (cJSON_IsNumber(v)) {
        return pic_json_write_number(b, v, 0);
    }
    if (cJSON_IsTrue(v)) {
        return pic_buf_appends(b, "True");
    }
    if (cJSON_IsFalse(v)) {
        return pic_buf_appends(b, "False");
    }
    if (cJSON_IsNull(v)) {
        return pic_buf_appends(b, "None");
    }
    return pic_json_write_py(b, v);
}
