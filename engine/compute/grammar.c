/*
 * grammar.c — a schema-driven JSON recognizer over bytes (grammar.h).
 *
 * One frame per open value.  A frame that completes pops itself; a number
 * only knows it is complete when a byte that cannot continue it arrives,
 * which is then handed to the frame below.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "pic_buf.h"

typedef enum {
    PIC_GF_VALUE = 0,           /* a value is expected */
    PIC_GF_OBJECT,
    PIC_GF_ARRAY,
    PIC_GF_STRING,              /* prop: PIC_GS_* mode */
    PIC_GF_NUMBER,
    PIC_GF_LITERAL,             /* prop: 0 true, 1 false, 2 null; st: bytes matched */
    PIC_GF_CALL,                /* a tool call: st pic_gcall_state, syn, lit; schema
                                 * the functions, then the parameters */
} pic_gframe_kind;

/* tool-call states (PIC_GF_CALL) */
enum {
    PIC_GC_LIT = 0,             /* matching pic_gcall_lit[lit], g->nbuf bytes so far */
    PIC_GC_NAME,                /* the function's name (buf) */
    PIC_GC_START,               /* XML: "<parameter=" or the end (buf) */
    PIC_GC_KEY,                 /* XML: a parameter's name (buf) */
    PIC_GC_RAW,                 /* XML: a string value; nbuf bytes of its end tag */
    PIC_GC_ENUM,                /* XML: an enum value (buf) */
};

/* the literals of a call, and what follows each */
enum {
    PIC_GL_XFN = 0, PIC_GL_NAMENL, PIC_GL_KEYNL, PIC_GL_VEND, PIC_GL_PEND,
    PIC_GL_JOPEN, PIC_GL_JARGS, PIC_GL_JEND,
};

static const char *const pic_gcall_lit[] = {
    "<function=", "\n", "\n", "\n</parameter>\n", "</parameter>\n",
    "{\"name\": \"", ", \"arguments\": ", "}\n</tool_call>",
};

/* the JSON syntaxes' opening, name-to-arguments and end literals */
static const char *const pic_gcall_jlit[][3] = {
    [PIC_GCALL_JSON] = { "{\"name\": \"", ", \"arguments\": ", "}\n</tool_call>" },
    [PIC_GCALL_LLAMA] = { "{\"name\": \"", ", \"parameters\": ", "}" },
    [PIC_GCALL_MISTRAL] = { "[{\"name\": \"", ", \"arguments\": ", "}]" },
};

/* The text of literal lit in f's syntax. */
static const char *
pic_gcall_text(const pic_gframe *f, int lit)
{
    if (f->syn != PIC_GCALL_XML && lit >= PIC_GL_JOPEN) {
        return pic_gcall_jlit[f->syn][lit - PIC_GL_JOPEN];
    }
    return pic_gcall_lit[lit];
}

#define PIC_GC_PARAM  "<parameter="
#define PIC_GC_END    "</function>\n</tool_call>"

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
    } else if (g->stack[g->depth - 1].kind == PIC_GF_CALL) {
        g->nbuf = 0;                /* a call's value ended: its literal starts */
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

/* Does some enum (or const) string of schema start with g->buf (exact:
 * equal it)?  Its index or -1. */
static int
pic_genum(const pic_gstate *g, const cJSON *schema, int exact)
{
    const cJSON *e, *v;
    int          i = 0;

    e = cJSON_GetObjectItemCaseSensitive(schema, "enum");
    if (e == NULL) {
        e = cJSON_GetObjectItemCaseSensitive(schema, "const");
        if (cJSON_IsString(e)) {
            size_t n = strlen(e->valuestring);
            return (size_t) g->nbuf <= n && memcmp(e->valuestring, g->buf, (size_t) g->nbuf) == 0
                   && (!exact || n == (size_t) g->nbuf) ? 0 : -1;
        }
    }
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
    return pic_genum(g, f->schema, exact);
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

/* --- tool calls --- */

/* A JSON value right after an XML call's "<parameter=KEY>\n": no leading
 * white space (the call parser would read " 42" as a string). */
static int
pic_gbare(const pic_gstate *g)
{
    return g->depth >= 2 && g->stack[g->depth - 1].kind == PIC_GF_VALUE
           && g->stack[g->depth - 2].kind == PIC_GF_CALL
           && g->stack[g->depth - 2].syn == PIC_GCALL_XML;
}

/* Every declared property of a closed object schema given already? */
static int
pic_gall_seen(const pic_gframe *f)
{
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(f->schema, "properties"));

    return n >= 64 ? f->seen == ~0ull : f->seen == (1ull << n) - 1;
}

/* The function (key 0: among f->schema's {"name"} items) or the unseen
 * declared parameter (key 1) whose name starts with g->buf (exact: equals
 * it); its index or -1. */
static int
pic_gcall_match(const pic_gstate *g, const pic_gframe *f, int key, int exact)
{
    const cJSON *e, *list = key ? cJSON_GetObjectItemCaseSensitive(f->schema, "properties")
                                : f->schema;
    int          i = 0;

    cJSON_ArrayForEach(e, list) {
        const cJSON *nm = key ? NULL : cJSON_GetObjectItemCaseSensitive(e, "name");
        const char  *s = key ? e->string : cJSON_IsString(nm) ? nm->valuestring : NULL;
        size_t       n = s ? strlen(s) : 0;

        if (s != NULL && !(key && (f->seen & (1ull << i))) && (size_t) g->nbuf <= n
            && memcmp(s, g->buf, (size_t) g->nbuf) == 0 && (!exact || n == (size_t) g->nbuf)) {
            return i;
        }
        i++;
    }
    return -1;
}

/* After "<parameter=KEY>\n": the value's form from the parameter's schema. */
static int
pic_gcall_value(pic_gstate *g, pic_gframe *f)
{
    const cJSON *ps = f->prop >= 0 && pic_gclosed(f->schema) ? pic_gprop(f->schema, f->prop)
                                                             : NULL;
    const char  *t = pic_gtype(ps);

    g->nbuf = 0;
    if (t == NULL || strcmp(t, "string") == 0) {
        f->st = PIC_GC_RAW;
        f->lit = 0;
        return 0;
    }
    if (strcmp(t, "enum") == 0) {
        f->st = PIC_GC_ENUM;
        return 0;
    }
    f->st = PIC_GC_LIT;
    f->lit = PIC_GL_VEND;
    return pic_gpush(g, PIC_GF_VALUE, ps, 0);
}

/* A literal of the call is complete: what follows it. */
static int
pic_gcall_next(pic_gstate *g, pic_gframe *f)
{
    g->nbuf = 0;
    switch (f->lit) {
    case PIC_GL_XFN:
    case PIC_GL_JOPEN:
        f->st = PIC_GC_NAME;
        return 0;
    case PIC_GL_NAMENL:
    case PIC_GL_VEND:
    case PIC_GL_PEND:
        f->st = PIC_GC_START;
        return 0;
    case PIC_GL_KEYNL:
        return pic_gcall_value(g, f);
    case PIC_GL_JARGS:
        f->lit = PIC_GL_JEND;
        if (pic_gpush(g, PIC_GF_VALUE, f->schema, 0) != 0) {
            return -1;
        }
        g->stack[g->depth - 1].st = 1;          /* an object */
        return 0;
    default:                                    /* PIC_GL_JEND */
        pic_gpop(g);
        return 0;
    }
}

/* An XML raw value never holds "<parameter=", "</function>" or
 * "</tool_call>" (the call parsers would end the value, the call or the
 * block there): f->lit counts the bytes of one matched so far (1: "<",
 * 2.. "<p...", 102.. "</..." and "</f...", 203.. "</t..."); -1 when c
 * completes one. */
static int
pic_graw_tag(pic_gframe *f, int c)
{
    static const char p1[] = "<parameter=", p2[] = "</function>", p3[] = "</tool_call>";
    int               s = f->lit;

    if (s >= 1 && s < (int) sizeof(p1) - 1 && c == (unsigned char) p1[s]) {
        s++;
    } else if (s == 1 && c == (unsigned char) p2[1]) {
        s = 102;
    } else if (s >= 102 && s < 100 + (int) sizeof(p2) - 1
               && c == (unsigned char) p2[s - 100]) {
        s++;
    } else if (s == 102 && c == (unsigned char) p3[2]) {
        s = 203;
    } else if (s >= 203 && s < 200 + (int) sizeof(p3) - 1
               && c == (unsigned char) p3[s - 200]) {
        s++;
    } else {
        s = c == '<';
    }
    f->lit = (uint8_t) s;
    return s == (int) sizeof(p1) - 1 || s == 100 + (int) sizeof(p2) - 1
           || s == 200 + (int) sizeof(p3) - 1 ? -1 : 0;
}

/* Inside a tool call (either syntax), a JSON string never holds "</": the
 * call parsers look for </parameter>, </function> and </tool_call> in the
 * raw text (the model can write "<\/"). */
static int
pic_gin_call(const pic_gstate *g)
{
    return g->stack[0].kind == PIC_GF_CALL;
}

/* One byte of a tool call (frame f, kind CALL); 0 or -1. */
static int
pic_gcall_byte(pic_gstate *g, pic_gframe *f, int c)
{
    const char *lit;
    int         i;

    switch (f->st) {
    case PIC_GC_LIT:
        lit = pic_gcall_text(f, f->lit);
        if (c != (unsigned char) lit[g->nbuf]) {
            return -1;
        }
        return lit[++g->nbuf] != '\0' ? 0 : pic_gcall_next(g, f);

    case PIC_GC_NAME:
    case PIC_GC_KEY: {
        int key = f->st == PIC_GC_KEY, closed = !key || pic_gclosed(f->schema);
        int end = !key && f->syn != PIC_GCALL_XML ? '"' : '>';

        if (c == end && g->nbuf > 0) {
            i = closed ? pic_gcall_match(g, f, key, 1) : -1;
            if (closed && i < 0) {
                return -1;
            }
            if (key) {
                f->seen |= i >= 0 ? 1ull << i : 0;
                f->prop = (int16_t) i;
                f->lit = PIC_GL_KEYNL;
            } else {
                const cJSON *ps = cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetArrayItem(f->schema, i), "parameters");
                f->schema = cJSON_IsObject(ps) ? ps : NULL;
                f->seen = 0;
                f->lit = f->syn != PIC_GCALL_XML ? PIC_GL_JARGS : PIC_GL_NAMENL;
            }
            f->st = PIC_GC_LIT;
            g->nbuf = 0;
            return 0;
        }
        if (c == '"' || c == '\\' || c == '<' || c == '>' || c < 0x20
            || g->nbuf >= (int) sizeof(g->buf)) {
            return -1;
        }
        g->buf[g->nbuf++] = (char) c;
        return !closed || pic_gcall_match(g, f, key, 0) >= 0 ? 0 : -1;
    }

    case PIC_GC_START: {
        size_t np = strlen(PIC_GC_PARAM), ne = strlen(PIC_GC_END);

        if (g->nbuf >= (int) sizeof(g->buf)) {
            return -1;
        }
        g->buf[g->nbuf++] = (char) c;
        if ((size_t) g->nbuf <= np && memcmp(g->buf, PIC_GC_PARAM, (size_t) g->nbuf) == 0) {
            if (g->nbuf == 2 && pic_gclosed(f->schema) && pic_gall_seen(f)) {
                return -1;
            }
            if ((size_t) g->nbuf == np) {
                f->st = PIC_GC_KEY;
                g->nbuf = 0;
            }
            return 0;
        }
        if ((size_t) g->nbuf <= ne && memcmp(g->buf, PIC_GC_END, (size_t) g->nbuf) == 0) {
            if (g->nbuf == 2 && !pic_grequired_ok(f)) {
                return -1;
            }
            if ((size_t) g->nbuf == ne) {
                pic_gpop(g);
            }
            return 0;
        }
        return -1;
    }

    case PIC_GC_RAW:
        if (pic_graw_tag(f, c) != 0) {
            return -1;
        }
        lit = pic_gcall_lit[PIC_GL_VEND];       /* "\n</parameter>\n" */
        if (c == (unsigned char) lit[g->nbuf]) {
            if (lit[++g->nbuf] == '\0') {
                f->st = PIC_GC_START;
                g->nbuf = 0;
            }
            return 0;
        }
        if (lit[g->nbuf + 1] == '\0') {
            return -1;                          /* "</parameter>" ends the value */
        }
        g->nbuf = c == '\n';
        return 0;

    case PIC_GC_ENUM: {
        const cJSON *ps = pic_gprop(f->schema, f->prop);

        if (c == '\n') {
            if (pic_genum(g, ps, 1) < 0) {
                return -1;
            }
            f->st = PIC_GC_LIT;
            f->lit = PIC_GL_PEND;
            g->nbuf = 0;
            return 0;
        }
        if (c == '"' || c == '\\' || c < 0x20 || g->nbuf >= (int) sizeof(g->buf)) {
            return -1;
        }
        g->buf[g->nbuf++] = (char) c;
        return pic_genum(g, ps, 0) >= 0 ? 0 : -1;
    }
    }
    return -1;
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
    if (f->kind != PIC_GF_STRING && f->kind != PIC_GF_NUMBER && f->kind != PIC_GF_LITERAL
        && f->kind != PIC_GF_CALL && !pic_gbare(g)) {
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
            if (f->st == 6) {                   /* after '<' in a call */
                if (c == '/') {
                    return -1;
                }
                f->st = 0;
            }
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
            if (c == '<' && pic_gin_call(g)) {
                f->st = 6;
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

    case PIC_GF_CALL:
        return pic_gcall_byte(g, f, c);
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

void
pic_gstate_init_call(pic_gstate *g, pic_gcall_syntax syn, const cJSON *fns,
                     const cJSON *params)
{
    pic_gframe *f = &g->stack[0];

    memset(g, 0, sizeof(*g));
    g->depth = 1;
    f->kind = PIC_GF_CALL;
    f->syn = (uint8_t) syn;
    f->prop = -1;
    f->st = PIC_GC_LIT;
    if (fns != NULL) {
        f->schema = fns;
        f->lit = syn != PIC_GCALL_XML ? PIC_GL_JOPEN : PIC_GL_XFN;
        return;
    }
    f->schema = params;
    if (syn == PIC_GCALL_XML) {
        f->st = PIC_GC_START;
        return;
    }
    f->lit = PIC_GL_JEND;
    pic_gpush(g, PIC_GF_VALUE, params, 0);
    g->stack[1].st = 1;                         /* the arguments: an object */
}

void
pic_gstate_copy(pic_gstate *dst, const pic_gstate *src)
{
    memcpy(dst->stack, src->stack, (size_t) src->depth * sizeof(src->stack[0]));
    dst->depth = src->depth;
    dst->done = src->done;
    dst->ws = src->ws;
    dst->nbuf = src->nbuf;
    memcpy(dst->buf, src->buf, (size_t) src->nbuf);
}

/* --- masking over the vocabulary --- */

struct pic_gvocab {
    int       n_ids;            /* the tokenizer's id slots */
    int       n_nodes;
    int       max_depth;        /* longest token, bytes */
    uint8_t  *byte;             /* (n_nodes) byte entering each node, depth-first */
    uint16_t *depth;            /* (n_nodes) its depth, 1 at the root's children */
    int32_t  *end;              /* (n_nodes) first node after its subtree */
    int32_t  *tok;              /* (n_nodes) a token ending there, or -1 */
    int32_t  *next_tok;         /* (n_ids) the next token with the same bytes, or -1 */
    uint8_t  *cls;              /* (n_nodes) byte classes in its subtree: PIC_GV_* */
    int32_t  *sorted;           /* (n_sorted) token ids in byte order = trie order */
    int32_t  *first;            /* (n_nodes + 1) index in sorted of the first token
                                 * of each subtree (tokens of a subtree are a run) */
    int       n_sorted;
};

#define PIC_GV_NOT_PLAIN  1     /* a byte a free string cannot hold as is */
#define PIC_GV_NEWLINE    2     /* a newline or '<' (may start an XML raw value's
                                 * end tag, or a tag it must not hold) */

static const pic_tokenizer *pic_gv_sort_tok;    /* qsort has no context argument */

static int
pic_gv_cmp(const void *a, const void *b)
{
    size_t      na, nb;
    const char *sa = pic_tokenizer_token_bytes(pic_gv_sort_tok, *(const int32_t *) a, &na);
    const char *sb = pic_tokenizer_token_bytes(pic_gv_sort_tok, *(const int32_t *) b, &nb);
    int         c = memcmp(sa, sb, na < nb ? na : nb);

    return c != 0 ? c : na < nb ? -1 : na > nb ? 1 : 0;
}

void
pic_gvocab_free(pic_gvocab *v)
{
    if (v == NULL) {
        return;
    }
    free(v->byte);
    free(v->depth);
    free(v->end);
    free(v->tok);
    free(v->next_tok);
    free(v->cls);
    free(v->sorted);
    free(v->first);
    free(v);
}

pic_gvocab *
pic_gvocab_new(const pic_tokenizer *tok)
{
    static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;
    pic_gvocab *v = calloc(1, sizeof(*v));
    int32_t    *ids = NULL, *path = NULL, *node = NULL;
    size_t      cap_b = 0, cap_d = 0, len, plen = 0;
    int         n = 0, sp = 0;
    const char *b, *prev = NULL;

    if (v == NULL) {
        return NULL;
    }
    v->n_ids = (int) pic_tokenizer_vocab_size(tok);
    ids = malloc((size_t) (v->n_ids ? v->n_ids : 1) * sizeof(*ids));
    node = malloc((size_t) (v->n_ids ? v->n_ids : 1) * sizeof(*node));
    v->next_tok = malloc((size_t) (v->n_ids ? v->n_ids : 1) * sizeof(*v->next_tok));
    if (ids == NULL || node == NULL || v->next_tok == NULL) {
        goto fail;
    }
    for (int32_t id = 0; id < v->n_ids; id++) {
        v->next_tok[id] = -1;
        b = pic_tokenizer_token_bytes(tok, id, &len);
        if (b != NULL && len > 0 && len < 65535 && !pic_tokenizer_is_special(tok, id)) {
            ids[n++] = id;
            v->max_depth = (int) len > v->max_depth ? (int) len : v->max_depth;
        }
    }
    pthread_mutex_lock(&sort_mu);
    pic_gv_sort_tok = tok;
    qsort(ids, (size_t) n, sizeof(*ids), pic_gv_cmp);
    pthread_mutex_unlock(&sort_mu);

    /* depth-first order: each token adds the nodes past its common prefix
     * with the previous one (sorted, so that prefix is on the path) */
    path = malloc((size_t) (v->max_depth + 1) * sizeof(*path));
    if (path == NULL) {
        goto fail;
    }
    for (int k = 0; k < n; k++) {
        size_t lcp = 0, need;

        b = pic_tokenizer_token_bytes(tok, ids[k], &len);
        while (prev != NULL && lcp < len && lcp < plen && b[lcp] == prev[lcp]) {
            lcp++;
        }
        need = (size_t) v->n_nodes + len - lcp;
        if (pic_grow((void **) &v->byte, &cap_b, need, sizeof(*v->byte)) != 0
            || pic_grow((void **) &v->depth, &cap_d, need, sizeof(*v->depth)) != 0) {
            goto fail;
        }
        for (size_t d = lcp; d < len; d++) {
            v->byte[v->n_nodes] = (uint8_t) b[d];
            v->depth[v->n_nodes] = (uint16_t) (d + 1);
            path[d] = v->n_nodes++;
        }
        node[k] = path[len - 1];            /* where ids[k] ends */
        prev = b;
        plen = len;
    }
    v->end = malloc((size_t) (v->n_nodes ? v->n_nodes : 1) * sizeof(*v->end));
    v->tok = malloc((size_t) (v->n_nodes ? v->n_nodes : 1) * sizeof(*v->tok));
    if (v->end == NULL || v->tok == NULL) {
        goto fail;
    }
    for (int i = 0; i < v->n_nodes; i++) {
        v->tok[i] = -1;
    }
    for (int k = 0; k < n; k++) {
        v->next_tok[ids[k]] = v->tok[node[k]];
        v->tok[node[k]] = ids[k];
    }
    /* a node's subtree ends at the next node no deeper (path as a stack) */
    for (int i = 0; i < v->n_nodes; i++) {
        while (sp > 0 && v->depth[path[sp - 1]] >= v->depth[i]) {
            v->end[path[--sp]] = i;
        }
        path[sp++] = i;
    }
    while (sp > 0) {
        v->end[path[--sp]] = v->n_nodes;
    }
    /* byte classes of each subtree (children after their parent: walk back) */
    v->cls = malloc((size_t) (v->n_nodes ? v->n_nodes : 1));
    v->first = malloc((size_t) (v->n_nodes + 1) * sizeof(*v->first));
    if (v->cls == NULL || v->first == NULL) {
        goto fail;
    }
    for (int i = v->n_nodes - 1; i >= 0; i--) {
        int c = v->byte[i];

        v->cls[i] = (uint8_t) ((c < 0x20 || c == '"' || c == '\\' ? PIC_GV_NOT_PLAIN : 0)
                               | (c == '\n' || c == '<' ? PIC_GV_NEWLINE : 0));
        for (int j = i + 1; j < v->end[i]; j = v->end[j]) {
            v->cls[i] |= v->cls[j];
        }
    }
    for (int i = 0, k = 0; i <= v->n_nodes; i++) {
        while (k < n && node[k] < i) {
            k++;
        }
        v->first[i] = k;
    }
    v->sorted = ids;
    v->n_sorted = n;
    free(node);
    free(path);
    return v;

fail:
    free(ids);
    free(node);
    free(path);
    pic_gvocab_free(v);
    return NULL;
}

/* Which bytes leave g exactly as it is: PIC_GV_NOT_PLAIN's complement
 * (free string content), PIC_GV_NEWLINE's (an XML raw value away from its
 * end tag), or none (0). */
static int
pic_gkeeps(const pic_gstate *g)
{
    const pic_gframe *f;

    if (g->done || g->depth == 0) {
        return 0;
    }
    f = &g->stack[g->depth - 1];
    if (f->kind == PIC_GF_STRING && (f->prop == PIC_GS_FREE || f->prop == PIC_GS_FREEKEY)
        && f->st == 0) {
        return pic_gin_call(g) ? PIC_GV_NOT_PLAIN | PIC_GV_NEWLINE : PIC_GV_NOT_PLAIN;
    }
    return f->kind == PIC_GF_CALL && f->st == PIC_GC_RAW && g->nbuf == 0 && f->lit == 0
           ? PIC_GV_NEWLINE : 0;
}

/* Would byte c leave g exactly as it is?  (free string content, XML raw
 * values away from their end tag) */
static int
pic_gsame(const pic_gstate *g, int c)
{
    const pic_gframe *f;

    if (g->done || g->depth == 0) {
        return 0;
    }
    f = &g->stack[g->depth - 1];
    if (f->kind == PIC_GF_STRING) {
        return (f->prop == PIC_GS_FREE || f->prop == PIC_GS_FREEKEY) && f->st == 0
               && c >= 0x20 && c != '"' && c != '\\' && !(c == '<' && pic_gin_call(g));
    }
    return f->kind == PIC_GF_CALL && f->st == PIC_GC_RAW && g->nbuf == 0 && f->lit == 0
           && c != '\n' && c != '<';
}

int
pic_gvocab_mask(const pic_gvocab *v, const pic_gstate *g, uint8_t *ok)
{
    pic_gstate        *st = malloc((size_t) (v->max_depth + 1) * sizeof(*st));
    const pic_gstate **cur = malloc((size_t) (v->max_depth + 1) * sizeof(*cur));
    int                n = 0;

    if (st == NULL || cur == NULL) {
        free(st);
        free(cur);
        return -1;
    }
    memset(ok, 0, (size_t) v->n_ids);
    cur[0] = g;
    for (int i = 0; i < v->n_nodes; ) {
        int               d = v->depth[i], c = v->byte[i];
        const pic_gstate *p = cur[d - 1];
        int               keeps = pic_gkeeps(p);

        if (keeps != 0 && !(v->cls[i] & keeps)) {
            /* every byte below leaves the state as it is: all its tokens */
            for (int k = v->first[i]; k < v->first[v->end[i]]; k++) {
                ok[v->sorted[k]] = 1;
            }
            n += v->first[v->end[i]] - v->first[i];
            i = v->end[i];
            continue;
        }
        if (pic_gsame(p, c)) {
            cur[d] = p;
        } else {
            pic_gstate_copy(&st[d], p);
            if (pic_gbyte(&st[d], c) != 0) {
                i = v->end[i];                  /* no token below extends g */
                continue;
            }
            cur[d] = &st[d];
        }
        for (int32_t t = v->tok[i]; t >= 0; t = v->next_tok[t]) {
            ok[t] = 1;
            n++;
        }
        i++;
    }
    free(st);
    free(cur);
    return n;
}

/* --- the shortest completion --- */

/* Is property name (index i of obj's "properties") required by obj? */
static int
pic_grequired_has(const cJSON *obj, const char *name)
{
    const cJSON *r;

    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(obj, "required")) {
        if (cJSON_IsString(r) && strcmp(r->valuestring, name) == 0) {
            return 1;
        }
    }
    return 0;
}

/* An unseen property of obj whose name starts with pre[0..n), a required
 * one first; NULL when none. */
static const char *
pic_gpick_prop(const cJSON *obj, uint64_t seen, const char *pre, size_t n)
{
    const cJSON *p;

    for (int pass = 0; pass < 2; pass++) {
        int i = 0;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(obj, "properties")) {
            size_t len = strlen(p->string);
            if (!(seen & (1ull << i)) && len >= n && memcmp(p->string, pre, n) == 0
                && (pass == 1 || pic_grequired_has(obj, p->string))) {
                return p->string;
            }
            i++;
        }
    }
    return NULL;
}

/* An enum (or const) string of schema that starts with pre[0..n), or NULL. */
static const char *
pic_gpick_enum(const cJSON *schema, const char *pre, size_t n)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(schema, "enum"), *v;

    if (e == NULL) {
        e = cJSON_GetObjectItemCaseSensitive(schema, "const");
        return cJSON_IsString(e) && strlen(e->valuestring) >= n
               && memcmp(e->valuestring, pre, n) == 0 ? e->valuestring : NULL;
    }
    cJSON_ArrayForEach(v, e) {
        if (cJSON_IsString(v) && strlen(v->valuestring) >= n
            && memcmp(v->valuestring, pre, n) == 0) {
            return v->valuestring;
        }
    }
    return NULL;
}

/* Append the rest of s after its first n bytes, then tail; bytes or -1. */
static int
pic_grest(char *c, size_t cap, const char *s, size_t n, const char *tail)
{
    int k = snprintf(c, cap, "%s%s", s != NULL && strlen(s) >= n ? s + n : "", tail);

    return s == NULL || k < 0 || (size_t) k >= cap ? -1 : k;
}

/* A few bytes that g accepts and that lead the shortest way to the end of
 * the document (the start of a value: its shortest form; an object: its
 * missing required properties, then "}"); their count, 0 when done, -1 when
 * no way is known. */
static int
pic_gchunk(const pic_gstate *g, char *c, size_t cap)
{
    const pic_gframe *f;
    pic_gstate        t;

    if (g->done || g->depth == 0) {
        return 0;
    }
    f = &g->stack[g->depth - 1];
    switch ((pic_gframe_kind) f->kind) {
    case PIC_GF_VALUE: {
        const char *ty = pic_gtype(f->schema);
        if (ty == NULL) {
            return pic_grest(c, cap, f->st == 1 ? "{" : "0", 0, "");
        }
        if (strcmp(ty, "enum") == 0) {
            return pic_grest(c, cap, "\"", 0, "");
        }
        return pic_grest(c, cap, strcmp(ty, "object") == 0 ? "{"
                                 : strcmp(ty, "array") == 0 ? "["
                                 : strcmp(ty, "string") == 0 ? "\""
                                 : strcmp(ty, "boolean") == 0 ? "true"
                                 : strcmp(ty, "null") == 0 ? "null" : "0", 0, "");
    }
    case PIC_GF_OBJECT:
        if (f->st == PIC_GO_COLON) {
            return pic_grest(c, cap, ":", 0, "");
        }
        if (f->st != PIC_GO_KEY && pic_grequired_ok(f)) {
            return pic_grest(c, cap, "}", 0, "");
        }
        return pic_grest(c, cap, f->st == PIC_GO_AFTER ? "," : "\"", 0, "");
    case PIC_GF_ARRAY:
        if (f->st != PIC_GA_NEXT) {
            return pic_grest(c, cap, "]", 0, "");
        }
        /* after a comma: the shortest item */
        pic_gstate_copy(&t, g);
        t.stack[t.depth - 1].st = PIC_GA_AFTER;
        if (pic_gpush(&t, PIC_GF_VALUE, f->schema ? cJSON_GetObjectItemCaseSensitive(
                                                        f->schema, "items") : NULL, 0) != 0) {
            return -1;
        }
        return pic_gchunk(&t, c, cap);
    case PIC_GF_STRING:
        if (f->prop == PIC_GS_FREE || f->prop == PIC_GS_FREEKEY) {
            /* an escape's rest: "\n", or hex digits ending in 1 (never \u0000) */
            return pic_grest(c, cap, f->st == 0 || f->st == 6 ? "\"" : f->st == 1 ? "n"
                                     : f->st == 5 ? "1" : "0", 0, "");
        }
        if (f->prop == PIC_GS_KEY) {
            const pic_gframe *o = &g->stack[g->depth - 2];
            return pic_grest(c, cap, pic_gpick_prop(o->schema, o->seen, g->buf,
                                                    (size_t) g->nbuf),
                             (size_t) g->nbuf, "\"");
        }
        return pic_grest(c, cap, pic_gpick_enum(f->schema, g->buf, (size_t) g->nbuf),
                         (size_t) g->nbuf, "\"");
    case PIC_GF_NUMBER:
        if (f->st == 1 || f->st == 4 || f->st == 6 || f->st == 7) {
            return pic_grest(c, cap, "0", 0, "");
        }
        /* complete: the next byte is the enclosing frame's */
        pic_gstate_copy(&t, g);
        pic_gpop(&t);
        return t.done ? -1 : pic_gchunk(&t, c, cap);
    case PIC_GF_LITERAL:
        return pic_grest(c, cap, pic_glit[f->prop], f->st, "");
    case PIC_GF_CALL:
        switch (f->st) {
        case PIC_GC_LIT:
            return pic_grest(c, cap, pic_gcall_text(f, f->lit), (size_t) g->nbuf, "");
        case PIC_GC_NAME: {
            int i = pic_gcall_match(g, f, 0, 0);
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(f->schema, i),
                                                               "name");
            return pic_grest(c, cap, i >= 0 && cJSON_IsString(nm) ? nm->valuestring : NULL,
                             (size_t) g->nbuf, f->syn != PIC_GCALL_XML ? "\"" : ">");
        }
        case PIC_GC_START: {
            size_t ne = strlen(PIC_GC_END);
            int    end = g->nbuf == 0 || g->nbuf == 1
                         ? pic_grequired_ok(f)
                         : (size_t) g->nbuf <= ne && memcmp(g->buf, PIC_GC_END,
                                                            (size_t) g->nbuf) == 0;
            return pic_grest(c, cap, end ? PIC_GC_END : PIC_GC_PARAM, (size_t) g->nbuf, "");
        }
        case PIC_GC_KEY:
            if (!pic_gclosed(f->schema)) {
                return pic_grest(c, cap, g->nbuf > 0 ? ">" : "x>", 0, "");
            }
            return pic_grest(c, cap, pic_gpick_prop(f->schema, f->seen, g->buf,
                                                    (size_t) g->nbuf),
                             (size_t) g->nbuf, ">");
        case PIC_GC_RAW:
            return pic_grest(c, cap, pic_gcall_lit[PIC_GL_VEND], (size_t) g->nbuf, "");
        case PIC_GC_ENUM:
            return pic_grest(c, cap, pic_gpick_enum(pic_gprop(f->schema, f->prop), g->buf,
                                                    (size_t) g->nbuf),
                             (size_t) g->nbuf, "\n");
        }
        return -1;
    }
    return -1;
}

int
pic_gstate_complete(const pic_gstate *g, char *out, size_t cap)
{
    pic_gstate t;
    size_t     n = 0;

    pic_gstate_copy(&t, g);
    while (!t.done) {
        char c[160];
        int  k = pic_gchunk(&t, c, sizeof(c));

        if (k <= 0 || n + (size_t) k > cap || pic_gstate_feed(&t, c, (size_t) k) != 0) {
            return -1;
        }
        memcpy(out + n, c, (size_t) k);
        n += (size_t) k;
    }
    return (int) n;
}
