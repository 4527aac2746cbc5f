/*
 * grammar.c — a schema-driven JSON recognizer over bytes (grammar.h).
 *
 * One frame per open value.  A frame that completes pops itself; a number
 * only knows it is complete when a byte that cannot continue it arrives,
 * which is then handed to the frame below.
 */
#include <stdio.h>
#include <string.h>

#include "grammar.h"

typedef enum {
    PIC_GF_VALUE = 0,           /* a value is expected */
    PIC_GF_OBJECT,
    PIC_GF_ARRAY,
    PIC_GF_STRING,              /* prop: PIC_GS_* mode */
    PIC_GF_NUMBER,
    PIC_GF_LITERAL,             /* prop: 0 true, 1 false, 2 null; st: bytes matched */
} pic_gframe_kind;

enum { PIC_GO_FIRST = 0, PIC_GO_KEY, PIC_GO_COLON, PIC_GO_AFTER };     /* object */
enum { PIC_GA_FIRST = 0, PIC_GA_NEXT, PIC_GA_AFTER };                  /* array */
enum { PIC_GS_FREE = 0, PIC_GS_KEY, PIC_GS_ENUM, PIC_GS_FREEKEY };     /* string */

static const char *const pic_glit[3] = { "true", "false", "null" };

/* --- the schema subset --- */

static const char *
pic_gtype(const cJSON *s)
{
    const cJSON *t = s ? cJSON_GetObjectItemCaseSensitive(s, "type") : NULL;

    if (s != NULL && (cJSON_GetObjectItemCaseSensitive(s, "enum") != NULL
                      || cJSON_GetObjectItemCaseSensitive(s, "const") != NULL)) {
        return "enum";
    }
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static int
pic_gcheck(const cJSON *s, char *path, size_t pathlen, char *msg, size_t msglen, int depth)
{
    static const char *const ok[] = {
        "type", "properties", "required", "additionalProperties", "items", "enum", "const",
        "title", "description", "default", "examples", "$schema", NULL
    };
    size_t       base = strlen(path);
    const cJSON *k, *t;

#define PIC_GFAIL(...) do { snprintf(msg, msglen, __VA_ARGS__); return -1; } while (0)
    if (!cJSON_IsObject(s)) {
        PIC_GFAIL("a schema must be an object");
    }
    if (depth > PIC_GRAMMAR_DEPTH - 2) {
        PIC_GFAIL("the schema nests deeper than %d", PIC_GRAMMAR_DEPTH - 2);
    }
    for (k = s->child; k != NULL; k = k->next) {
        int known = 0;
        for (size_t i = 0; ok[i] != NULL && !known; i++) {
            known = strcmp(k->string, ok[i]) == 0;
        }
        if (!known) {
            snprintf(path + base, pathlen - base, "%s%s", base ? "." : "", k->string);
            PIC_GFAIL("the schema keyword '%s' is not supported (supported: type, properties, "
                      "required, additionalProperties: false, items, enum, const)", k->string);
        }
    }
    t = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (t != NULL) {
        static const char *const types[] = {
            "object", "array", "string", "number", "integer", "boolean", "null", NULL
        };
        int known = 0;
        for (size_t i = 0; cJSON_IsString(t) && types[i] != NULL && !known; i++) {
            known = strcmp(t->valuestring, types[i]) == 0;
        }
        if (!known) {
            snprintf(path + base, pathlen - base, "%stype", base ? "." : "");
            PIC_GFAIL("'type' must be one of object, array, string, number, integer, boolean, "
                      "null (one type, not a list)");
        }
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "enum")) != NULL
        || (k = cJSON_GetObjectItemCaseSensitive(s, "const")) != NULL) {
        const cJSON *e;
        int          n = 0;

        if (cJSON_IsArray(k)) {
            cJSON_ArrayForEach(e, k) {
                if (!cJSON_IsString(e) || strlen(e->valuestring) >= 128
                    || strpbrk(e->valuestring, "\"\\") != NULL) {
                    n = -1;
                    break;
                }
                n++;
            }
        } else {
            n = cJSON_IsString(k) && strlen(k->valuestring) < 128
                && strpbrk(k->valuestring, "\"\\") == NULL ? 1 : -1;
        }
        if (n <= 0) {
            snprintf(path + base, pathlen - base, "%s%s", base ? "." : "", k->string);
            PIC_GFAIL("'%s' must hold strings (shorter than 128 bytes, without quotes or "
                      "backslashes)", k->string);
        }
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties")) != NULL
        && !cJSON_IsFalse(k)) {
        snprintf(path + base, pathlen - base, "%sadditionalProperties", base ? "." : "");
        PIC_GFAIL("only 'additionalProperties': false is supported");
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "properties")) != NULL) {
        const cJSON *p;
        int          n = 0;

        if (!cJSON_IsObject(k)) {
            snprintf(path + base, pathlen - base, "%sproperties", base ? "." : "");
            PIC_GFAIL("'properties' must be an object");
        }
        cJSON_ArrayForEach(p, k) {
            if (++n > PIC_GRAMMAR_MAX_PROPS || strlen(p->string) >= 128
                || strpbrk(p->string, "\"\\") != NULL) {
                snprintf(path + base, pathlen - base, "%sproperties", base ? "." : "");
                PIC_GFAIL("at most %d properties, names shorter than 128 bytes without quotes "
                          "or backslashes", PIC_GRAMMAR_MAX_PROPS);
            }
            snprintf(path + base, pathlen - base, "%sproperties.%s", base ? "." : "",
                     p->string);
            if (pic_gcheck(p, path, pathlen, msg, msglen, depth + 1) != 0) {
                return -1;
            }
            path[base] = '\0';
        }
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "required")) != NULL) {
        const cJSON *r, *props = cJSON_GetObjectItemCaseSensitive(s, "properties");

        if (!cJSON_IsArray(k)) {
            snprintf(path + base, pathlen - base, "%srequired", base ? "." : "");
            PIC_GFAIL("'required' must be an array of property names");
        }
        cJSON_ArrayForEach(r, k) {
            if (!cJSON_IsString(r) || cJSON_GetObjectItemCaseSensitive(props, r->valuestring)
                                      == NULL) {
                snprintf(path + base, pathlen - base, "%srequired", base ? "." : "");
                PIC_GFAIL("'required' names a property that 'properties' does not declare");
            }
        }
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "items")) != NULL) {
        snprintf(path + base, pathlen - base, "%sitems", base ? "." : "");
        if (pic_gcheck(k, path, pathlen, msg, msglen, depth + 1) != 0) {
            return -1;
        }
        path[base] = '\0';
    }
    return 0;
#undef PIC_GFAIL
}

int
pic_grammar_check(const cJSON *schema, char *path, size_t pathlen, char *msg, size_t msglen)
{
    const char *t;

    path[0] = '\0';
    msg[0] = '\0';
    if (schema == NULL) {
        return 0;
    }
    if (pic_gcheck(schema, path, pathlen, msg, msglen, 0) != 0) {
        return -1;
    }
    t = pic_gtype(schema);
    if (t == NULL || strcmp(t, "object") != 0) {
        snprintf(path, pathlen, "type");
        snprintf(msg, msglen, "the top level of the schema must be of type 'object'");
        return -1;
    }
    return 0;
}

/* --- the recognizer --- */

void
pic_gstate_init(pic_gstate *g, const cJSON *schema)
{
    memset(g, 0, sizeof(*g));
    g->depth = 1;
    g->stack[0].kind = PIC_GF_VALUE;
    g->stack[0].schema = schema;
    g->stack[0].st = 1;                 /* the top level is an object */
}

int
pic_gstate_done(const pic_gstate *g)
{
    return g->done;
}

static int
pic_gws(int c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static int
pic_gpush(pic_gstate *g, pic_gframe_kind kind, const cJSON *schema, int prop)
{
    pic_gframe *f;

    if (g->depth >= PIC_GRAMMAR_DEPTH) {
        return -1;
    }
    f = &g->stack[g->depth++];
    memset(f, 0, sizeof(*f));
    f->kind = (uint8_t) kind;
    f->schema = schema;
    f->prop = (int16_t) prop;
    return 0;
}

static void
pic_gpop(pic_gstate *g)
{
    if (--g->depth == 0) {
        g->done = 1;
    }
}

/* The i-th property (schema) of an object schema, and its name. */
static const cJSON *
pic_gprop(const cJSON *obj, int i)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(obj, "properties");
    const cJSON *e = p ? p->child : NULL;

    while (e != NULL && i-- > 0) {
        e = e->next;
    }
    return e;
}

/* Every required property of an object frame given? */
static int
pic_grequired_ok(const pic_gframe *f)
{
    const cJSON *req = f->schema ? cJSON_GetObjectItemCaseSensitive(f->schema, "required")
                                 : NULL;
    const cJSON *r, *props = f->schema ? cJSON_GetObjectItemCaseSensitive(f->schema,
                                                                          "properties") : NULL;

    cJSON_ArrayForEach(r, req) {
        int i = 0;
        const cJSON *p;
        cJSON_ArrayForEach(p, props) {
            if (strcmp(p->string, r->valuestring) == 0) {
                break;
            }
            i++;
        }
        if (!(f->seen & (1ull << i))) {
            return 0;
        }
    }
    return 1;
}

/* A schema'd object restricts its keys (schema with "properties"). */
static int
pic_gclosed(const cJSON *s)
{
    return s != NULL && cJSON_GetObjectItemCaseSensitive(s, "properties") != NULL;
}

/* Does some candidate string start with buf[0..n) (exact: equal it)?
 * Returns the candidate's index or -1. */
static int
pic_gmatch(const pic_gstate *g, const pic_gframe *f, int exact)
{
    const pic_gframe *parent = &g->stack[g->depth - 2];
    const cJSON      *e;
    int               i = 0;

    if (f->prop == PIC_GS_KEY) {
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(parent->schema, "properties")) {
            size_t n = strlen(e->string);
            if (!(parent->seen & (1ull << i)) && (size_t) g->nbuf <= n
                && memcmp(e->string, g->buf, (size_t) g->nbuf) == 0
                && (!exact || n == (size_t) g->nbuf)) {
                return i;
            }
            i++;
        }
        return -1;
    }
    e = cJSON_GetObjectItemCaseSensitive(f->schema, "enum");
    if (e == NULL) {
        e = cJSON_GetObjectItemCaseSensitive(f->schema, "const");
        if (cJSON_IsString(e)) {
            size_t n = strlen(e->valuestring);
            return (size_t) g->nbuf <= n && memcmp(e->valuestring, g->buf, (size_t) g->nbuf) == 0
                   && (!exact || n == (size_t) g->nbuf) ? 0 : -1;
        }
    }
    const cJSON *v;
    cJSON_ArrayForEach(v, e) {
        size_t n = strlen(v->valuestring);
        if ((size_t) g->nbuf <= n && memcmp(v->valuestring, g->buf, (size_t) g->nbuf) == 0
            && (!exact || n == (size_t) g->nbuf)) {
            return i;
        }
        i++;
    }
    return -1;
}

/* Start a value with byte c in frame f (kind VALUE); 0 or -1. */
static int
pic_gvalue(pic_gstate *g, int c)
{
    pic_gframe *f = &g->stack[g->depth - 1];
    const char *t = pic_gtype(f->schema);
    int         top_object = f->st == 1;
    const cJSON *s = f->schema;

#define PIC_GALLOW(name) (t == NULL ? !top_object || strcmp(name, "object") == 0 \
                                    : strcmp(t, name) == 0)
    if (c == '{' && PIC_GALLOW("object")) {
        f->kind = PIC_GF_OBJECT;
        f->st = PIC_GO_FIRST;
        f->seen = 0;
        return 0;
    }
    if (c == '[' && PIC_GALLOW("array")) {
        f->kind = PIC_GF_ARRAY;
        f->st = PIC_GA_FIRST;
        return 0;
    }
    if (c == '"' && (PIC_GALLOW("string") || (t != NULL && strcmp(t, "enum") == 0))) {
        f->kind = PIC_GF_STRING;
        f->st = 0;
        f->prop = t != NULL && strcmp(t, "enum") == 0 ? PIC_GS_ENUM : PIC_GS_FREE;
        g->nbuf = 0;
        return 0;
    }
    if ((c == '-' || (c >= '0' && c <= '9'))
        && (PIC_GALLOW("number") || (t != NULL && strcmp(t, "integer") == 0))) {
        f->kind = PIC_GF_NUMBER;
        f->prop = t != NULL && strcmp(t, "integer") == 0;
        f->st = c == '-' ? 1 : c == '0' ? 2 : 3;
        return 0;
    }
    for (int i = 0; i < 3; i++) {
        if (c == pic_glit[i][0]
            && PIC_GALLOW(i == 2 ? "null" : "boolean")) {
            f->kind = PIC_GF_LITERAL;
            f->prop = (int16_t) i;
            f->st = 1;
            return 0;
        }
    }
    (void) s;
    return -1;
#undef PIC_GALLOW
}

/* One byte; 0 or -1. */
static int
pic_gbyte(pic_gstate *g, int c)
{
    pic_gframe *f;

again:
    if (g->done) {
        return pic_gws(c) && ++g->ws <= PIC_GRAMMAR_MAX_WS ? 0 : -1;
    }
    f = &g->stack[g->depth - 1];
    if (f->kind != PIC_GF_STRING && f->kind != PIC_GF_NUMBER && f->kind != PIC_GF_LITERAL) {
        if (pic_gws(c)) {
            return ++g->ws <= PIC_GRAMMAR_MAX_WS ? 0 : -1;
        }
        g->ws = 0;
    }
    switch ((pic_gframe_kind) f->kind) {
    case PIC_GF_VALUE:
        return pic_gvalue(g, c);

    case PIC_GF_OBJECT:
        if (f->st == PIC_GO_COLON) {
            const cJSON *ps;
            if (c != ':') {
                return -1;
            }
            f->st = PIC_GO_AFTER;
            ps = pic_gclosed(f->schema) ? pic_gprop(f->schema, f->prop) : NULL;
            return pic_gpush(g, PIC_GF_VALUE, ps, 0);
        }
        if (c == '}' && (f->st == PIC_GO_FIRST || f->st == PIC_GO_AFTER)) {
            if (!pic_grequired_ok(f)) {
                return -1;
            }
            pic_gpop(g);
            return 0;
        }
        if (c == ',' && f->st == PIC_GO_AFTER) {
            if (pic_gclosed(f->schema)) {
                /* only while a declared property is left to give */
                int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(f->schema,
                                                                            "properties"));
                if (n >= 64 ? f->seen == ~0ull : f->seen == (1ull << n) - 1) {
                    return -1;
                }
            }
            f->st = PIC_GO_KEY;
            return 0;
        }
        if (c == '"' && (f->st == PIC_GO_FIRST || f->st == PIC_GO_KEY)) {
            g->nbuf = 0;
            if (pic_gpush(g, PIC_GF_STRING, NULL, pic_gclosed(f->schema) ? PIC_GS_KEY
                                                                        : PIC_GS_FREEKEY)) {
                return -1;
            }
            if (pic_gclosed(f->schema) && pic_gmatch(g, &g->stack[g->depth - 1], 0) < 0) {
                return -1;                      /* every property given already */
            }
            return 0;
        }
        return -1;

    case PIC_GF_ARRAY:
        if (c == ']' && (f->st == PIC_GA_FIRST || f->st == PIC_GA_AFTER)) {
            pic_gpop(g);
            return 0;
        }
        if (c == ',' && f->st == PIC_GA_AFTER) {
            f->st = PIC_GA_NEXT;
            return 0;
        }
        if (f->st == PIC_GA_AFTER) {
            return -1;
        }
        f->st = PIC_GA_AFTER;
        if (pic_gpush(g, PIC_GF_VALUE, f->schema ? cJSON_GetObjectItemCaseSensitive(
                                                       f->schema, "items") : NULL, 0) != 0) {
            return -1;
        }
        goto again;

    case PIC_GF_STRING:
        if (f->prop == PIC_GS_FREE || f->prop == PIC_GS_FREEKEY) {
            if (f->st == 1) {                   /* after a backslash */
                if (c == 'u') {
                    f->st = 2;
                    return 0;
                }
                f->st = 0;
                return strchr("\"\\/bfnrt", c) != NULL && c != '\0' ? 0 : -1;
            }
            if (f->st >= 2) {                   /* \uXXXX */
                if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
                      || (c >= 'A' && c <= 'F'))) {
                    return -1;
                }
                f->st = f->st == 5 ? 0 : f->st + 1;
                return 0;
            }
            if (c == '\\') {
                f->st = 1;
                return 0;
            }
            if (c == '"') {
                int key = f->prop == PIC_GS_FREEKEY;
                pic_gpop(g);
                if (key) {
                    g->stack[g->depth - 1].st = PIC_GO_COLON;
                }
                return 0;
            }
            return (unsigned char) c < 0x20 ? -1 : 0;
        }
        /* a declared key or an enum value: no escapes, a prefix of one */
        if (c == '"') {
            int i = pic_gmatch(g, f, 1), key = f->prop == PIC_GS_KEY;
            if (i < 0) {
                return -1;
            }
            pic_gpop(g);
            if (key) {
                pic_gframe *o = &g->stack[g->depth - 1];
                o->prop = (int16_t) i;
                o->seen |= 1ull << i;
                o->st = PIC_GO_COLON;
            }
            return 0;
        }
        if (c == '\\' || (unsigned char) c < 0x20 || g->nbuf >= (int) sizeof(g->buf)) {
            return -1;
        }
        g->buf[g->nbuf++] = (char) c;
        return pic_gmatch(g, f, 0) >= 0 ? 0 : -1;

    case PIC_GF_NUMBER: {
        int d = c >= '0' && c <= '9', integer = f->prop;
        switch (f->st) {
        case 1: if (c == '0') { f->st = 2; return 0; }
                if (d) { f->st = 3; return 0; }
                return -1;
        case 2: if (c == '.' && !integer) { f->st = 4; return 0; }
                if ((c == 'e' || c == 'E') && !integer) { f->st = 6; return 0; }
                break;
        case 3: if (d) { return 0; }
                if (c == '.' && !integer) { f->st = 4; return 0; }
                if ((c == 'e' || c == 'E') && !integer) { f->st = 6; return 0; }
                break;
        case 4: if (d) { f->st = 5; return 0; }
                return -1;
        case 5: if (d) { return 0; }
                if (c == 'e' || c == 'E') { f->st = 6; return 0; }
                break;
        case 6: if (c == '+' || c == '-') { f->st = 7; return 0; }
                if (d) { f->st = 8; return 0; }
                return -1;
        case 7: if (d) { f->st = 8; return 0; }
                return -1;
        case 8: if (d) { return 0; }
                break;
        }
        /* complete (states 2, 3, 5, 8): c belongs to the frame below */
        pic_gpop(g);
        if (g->done) {
            return -1;                          /* a bare number is never the top level */
        }
        goto again;
    }

    case PIC_GF_LITERAL: {
        const char *lit = pic_glit[f->prop];
        if (c != lit[f->st]) {
            return -1;
        }
        if (lit[++f->st] == '\0') {
            pic_gpop(g);
        }
        return 0;
    }
    }
    return -1;
}

int
pic_gstate_feed(pic_gstate *g, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (pic_gbyte(g, (unsigned char) s[i]) != 0) {
            return -1;
        }
    }
    return 0;
}
