/*
 * gguf.c — the GGUF reader (gguf.h).
 *
 * Layout: magic "GGUF", version (2 or 3), tensor count, metadata count
 * (u64 each), the metadata pairs (string key, u32 type, value; arrays are
 * an element type, a u64 count and the elements; strings a u64 length and
 * bytes), the tensor infos (name, u32 ndim, u64 dims, u32 ggml type, u64
 * offset), then the data section at the next multiple of
 * general.alignment (default 32), each tensor at its offset from there.
 */
#define _GNU_SOURCE
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf_quant.h"

typedef struct {
    const char *key;            /* NUL-terminated copy */
    int         type;           /* pic_gguf_vtype */
    size_t      off;            /* value's bytes in the file */
    int         etype;          /* arrays: element type */
    size_t      n;              /* arrays: elements */
    size_t     *eoff;           /* string arrays: offset of each element's
                                 * length field (n) */
} pic_gguf_kv;

struct pic_gguf {
    char             path[4096];
    const uint8_t   *p;
    size_t           len;
    int              mapped;
    int              version;
    pic_gguf_kv     *kv;
    size_t           n_kv;
    pic_gguf_tensor *t;
    size_t           n_t;
};

typedef struct {
    pic_gguf   *g;
    size_t      at;             /* read position */
    char       *err;
    size_t      errlen;
} rd;

static int
rd_err(rd *r, const char *fmt, ...)
{
    va_list ap;
    int     n;

    if (r->err == NULL || r->errlen == 0) {
        return -1;
    }
    n = snprintf(r->err, r->errlen, "%s: ", r->g->path);
    if (n < 0 || (size_t) n >= r->errlen) {
        return -1;
    }
    va_start(ap, fmt);
    vsnprintf(r->err + n, r->errlen - (size_t) n, fmt, ap);
    va_end(ap);
    return -1;
}

static int
rd_need(rd *r, size_t n, const char *what)
{
    if (n > r->g->len || r->at > r->g->len - n) {
        return rd_err(r, "truncated at byte %zu reading %s", r->at, what);
    }
    return 0;
}

static uint64_t
le(const uint8_t *p, int n)
{
    uint64_t v = 0;

    for (int i = n - 1; i >= 0; i--) {
        v = v << 8 | p[i];
    }
    return v;
}

static int
rd_u32(rd *r, uint32_t *v, const char *what)
{
    if (rd_need(r, 4, what) != 0) {
        return -1;
    }
    *v = (uint32_t) le(r->g->p + r->at, 4);
    r->at += 4;
    return 0;
}

static int
rd_u64(rd *r, uint64_t *v, const char *what)
{
    if (rd_need(r, 8, what) != 0) {
        return -1;
    }
    *v = le(r->g->p + r->at, 8);
    r->at += 8;
    return 0;
}

/* A string: its bytes' offset and length; the position moves past it. */
static int
rd_str(rd *r, size_t *off, size_t *len, const char *what)
{
    uint64_t n;

    if (rd_u64(r, &n, what) != 0) {
        return -1;
    }
    if (n > PIC_GGUF_MAX_STRING) {
        return rd_err(r, "%s: string of %llu bytes (limit %u)", what,
                      (unsigned long long) n, PIC_GGUF_MAX_STRING);
    }
    if (rd_need(r, (size_t) n, what) != 0) {
        return -1;
    }
    *off = r->at;
    *len = (size_t) n;
    r->at += (size_t) n;
    return 0;
}

/* Bytes of one scalar of type t; 0 for strings, arrays and unknown types. */
static size_t
scalar_bytes(int t)
{
    switch (t) {
    case PIC_GGUF_U8: case PIC_GGUF_I8: case PIC_GGUF_BOOL: return 1;
    case PIC_GGUF_U16: case PIC_GGUF_I16:                   return 2;
    case PIC_GGUF_U32: case PIC_GGUF_I32: case PIC_GGUF_F32: return 4;
    case PIC_GGUF_U64: case PIC_GGUF_I64: case PIC_GGUF_F64: return 8;
    }
    return 0;
}

/* A NUL-terminated copy of the n bytes at off, or NULL on OOM. */
static char *
name_copy(const pic_gguf *g, size_t off, size_t n)
{
    char *d = malloc(n + 1);

    if (d != NULL) {
        memcpy(d, g->p + off, n);
        d[n] = '\0';
    }
    return d;
}

static int
by_name(const void *a, const void *b, void *ctx)
{
    const pic_gguf_tensor *t = ctx;

    return strcmp(t[*(const size_t *) a].name, t[*(const size_t *) b].name);
}

static int
by_offset(const void *a, const void *b, void *ctx)
{
    const pic_gguf_tensor *t = ctx;
    const uint8_t         *x = t[*(const size_t *) a].data, *y = t[*(const size_t *) b].data;

    return x < y ? -1 : x > y;
}

/* No two tensors share a name or a byte: sorted by name, then by offset. */
static int
check_tensors(rd *r)
{
    pic_gguf *g = r->g;
    size_t   *ix = malloc((g->n_t ? g->n_t : 1) * sizeof(size_t));
    int       rc = 0;

    if (ix == NULL) {
        return rd_err(r, "out of memory");
    }
    for (size_t i = 0; i < g->n_t; i++) {
        ix[i] = i;
    }
    qsort_r(ix, g->n_t, sizeof(*ix), by_name, g->t);
    for (size_t i = 1; i < g->n_t && rc == 0; i++) {
        if (strcmp(g->t[ix[i - 1]].name, g->t[ix[i]].name) == 0) {
            rc = rd_err(r, "tensor '%s' appears twice", g->t[ix[i]].name);
        }
    }
    qsort_r(ix, g->n_t, sizeof(*ix), by_offset, g->t);
    for (size_t i = 1; i < g->n_t && rc == 0; i++) {
        const pic_gguf_tensor *a = &g->t[ix[i - 1]], *b = &g->t[ix[i]];

        if (a->data + a->nbytes > b->data) {
            rc = rd_err(r, "tensors '%s' and '%s' overlap", a->name, b->name);
        }
    }
    free(ix);
    return rc;
}

static int
rd_value(rd *r, pic_gguf_kv *kv, const char *key)
{
    uint32_t et;
    uint64_t n;
    size_t   s, off, len;

    kv->off = r->at;
    if (kv->type == PIC_GGUF_STRING) {
        return rd_str(r, &off, &len, key);
    }
    if (kv->type != PIC_GGUF_ARRAY) {
        s = scalar_bytes(kv->type);
        if (s == 0) {
            return rd_err(r, "key '%s': value type %d is not a GGUF type", key, kv->type);
        }
        if (rd_need(r, s, key) != 0) {
            return -1;
        }
        r->at += s;
        return 0;
    }
    if (rd_u32(r, &et, key) != 0 || rd_u64(r, &n, key) != 0) {
        return -1;
    }
    if (et == PIC_GGUF_ARRAY) {
        return rd_err(r, "key '%s': arrays of arrays are not read", key);
    }
    if (n > PIC_GGUF_MAX_ARRAY) {
        return rd_err(r, "key '%s': array of %llu elements (limit %u)", key,
                      (unsigned long long) n, PIC_GGUF_MAX_ARRAY);
    }
    kv->etype = (int) et;
    kv->n = (size_t) n;
    kv->off = r->at;
    if (et == PIC_GGUF_STRING) {
        kv->eoff = malloc((n ? n : 1) * sizeof(size_t));
        if (kv->eoff == NULL) {
            return rd_err(r, "out of memory");
        }
        for (size_t i = 0; i < n; i++) {
            kv->eoff[i] = r->at;
            if (rd_str(r, &off, &len, key) != 0) {
                return -1;
            }
        }
        return 0;
    }
    s = scalar_bytes((int) et);
    if (s == 0) {
        return rd_err(r, "key '%s': array element type %u is not a GGUF type", key, et);
    }
    if (n > r->g->len / s || rd_need(r, (size_t) n * s, key) != 0) {
        return rd_err(r, "key '%s': array of %llu elements runs past the end", key,
                      (unsigned long long) n);
    }
    r->at += (size_t) n * s;
    return 0;
}

static int
gguf_parse(pic_gguf *g, char *err, size_t errlen)
{
    rd       r = { g, 0, err, errlen };
    uint32_t magic, version, u;
    uint64_t n_t, n_kv, align = 32, base;
    size_t   off, len;

    if (rd_u32(&r, &magic, "the magic") != 0) {
        return -1;
    }
    if (magic != 0x46554747u) {                 /* "GGUF" */
        return rd_err(&r, "not a GGUF file (bad magic)");
    }
    if (rd_u32(&r, &version, "the version") != 0) {
        return -1;
    }
    if (version != 2 && version != 3) {
        return rd_err(&r, "GGUF version %u is not supported (2, 3)", version);
    }
    g->version = (int) version;
    if (rd_u64(&r, &n_t, "the tensor count") != 0
        || rd_u64(&r, &n_kv, "the metadata count") != 0)
    {
        return -1;
    }
    if (n_t > PIC_GGUF_MAX_TENSORS || n_kv > PIC_GGUF_MAX_KV) {
        return rd_err(&r, "%llu tensors and %llu metadata pairs (limits %u, %u)",
                      (unsigned long long) n_t, (unsigned long long) n_kv,
                      PIC_GGUF_MAX_TENSORS, PIC_GGUF_MAX_KV);
    }
    /* every pair and tensor info takes more than 16 bytes of the file */
    if (n_kv > g->len / 16 || n_t > g->len / 16) {
        return rd_err(&r, "%llu tensors and %llu metadata pairs do not fit in %zu bytes",
                      (unsigned long long) n_t, (unsigned long long) n_kv, g->len);
    }
    g->kv = calloc(n_kv ? n_kv : 1, sizeof(*g->kv));
    g->t = calloc(n_t ? n_t : 1, sizeof(*g->t));
    if (g->kv == NULL || g->t == NULL) {
        return rd_err(&r, "out of memory");
    }

    for (uint64_t i = 0; i < n_kv; i++) {
        pic_gguf_kv *kv = &g->kv[i];

        if (rd_str(&r, &off, &len, "a metadata key") != 0) {
            return -1;
        }
        kv->key = name_copy(g, off, len);
        g->n_kv = (size_t) i + 1;
        if (kv->key == NULL) {
            return rd_err(&r, "out of memory");
        }
        if (memchr(kv->key, '\0', len) != NULL) {
            return rd_err(&r, "metadata key %llu holds a NUL byte", (unsigned long long) i);
        }
        if (rd_u32(&r, &u, kv->key) != 0) {
            return -1;
        }
        kv->type = (int) u;
        if (rd_value(&r, kv, kv->key) != 0) {
            return -1;
        }
        for (uint64_t j = 0; j < i; j++) {
            if (strcmp(g->kv[j].key, kv->key) == 0) {
                return rd_err(&r, "metadata key '%s' appears twice", kv->key);
            }
        }
    }
    if (pic_gguf_find(g, "general.alignment") >= 0) {
        int64_t a;

        if (pic_gguf_get_i64(g, "general.alignment", &a) != 0 || a <= 0 || a > 65536
            || (a & (a - 1)) != 0)
        {
            return rd_err(&r, "general.alignment is not a power of two up to 65536");
        }
        align = (uint64_t) a;
    }

    for (uint64_t i = 0; i < n_t; i++) {
        pic_gguf_tensor *t = &g->t[i];
        uint64_t         d, o;
        int              bs;

        if (rd_str(&r, &off, &len, "a tensor name") != 0) {
            return -1;
        }
        t->name = name_copy(g, off, len);
        g->n_t = (size_t) i + 1;
        if (t->name == NULL) {
            return rd_err(&r, "out of memory");
        }
        if (memchr(t->name, '\0', len) != NULL) {
            return rd_err(&r, "tensor %llu's name holds a NUL byte", (unsigned long long) i);
        }
        if (rd_u32(&r, &u, t->name) != 0) {
            return -1;
        }
        if (u < 1 || u > PIC_GGUF_MAX_DIMS) {
            return rd_err(&r, "tensor '%s': %u dimensions (1 to %d)", t->name, u,
                          PIC_GGUF_MAX_DIMS);
        }
        t->ndim = (int) u;
        t->numel = 1;
        for (int k = 0; k < t->ndim; k++) {
            if (rd_u64(&r, &d, t->name) != 0) {
                return -1;
            }
            if (d == 0 || d > ((uint64_t) 1 << 40) || t->numel > ((uint64_t) 1 << 40) / d) {
                return rd_err(&r, "tensor '%s': dimension %d = %llu out of range", t->name,
                              k, (unsigned long long) d);
            }
            t->ne[k] = (int64_t) d;
            t->numel *= d;
        }
        for (int k = t->ndim; k < PIC_GGUF_MAX_DIMS; k++) {
            t->ne[k] = 1;
        }
        if (rd_u32(&r, &u, t->name) != 0 || rd_u64(&r, &o, t->name) != 0) {
            return -1;
        }
        t->type = (int) u;
        bs = pic_ggml_block_size(t->type);
        if (bs == 0) {
            return rd_err(&r, "tensor '%s': ggml type %u is not supported (F32, F16, BF16, "
                          "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)", t->name, u);
        }
        if (t->ne[0] % bs != 0) {
            return rd_err(&r, "tensor '%s': row of %lld values is not whole %s blocks",
                          t->name, (long long) t->ne[0], pic_ggml_type_name(t->type));
        }
        t->nbytes = t->numel / (uint64_t) bs * pic_ggml_block_bytes(t->type);
        if (o % align != 0) {
            return rd_err(&r, "tensor '%s': offset %llu is not aligned to %llu", t->name,
                          (unsigned long long) o, (unsigned long long) align);
        }
        t->data = (const uint8_t *) (uintptr_t) o;      /* relative until the base */
    }

    base = (r.at + align - 1) / align * align;
    for (size_t i = 0; i < g->n_t; i++) {
        pic_gguf_tensor *t = &g->t[i];
        uint64_t         o = (uint64_t) (uintptr_t) t->data;

        if (base > g->len || o > g->len - base || t->nbytes > g->len - base - o) {
            return rd_err(&r, "tensor '%s': bytes [%llu, +%llu) past the end of the file",
                          t->name, (unsigned long long) (base + o),
                          (unsigned long long) t->nbytes);
        }
        t->data = g->p + base + o;
    }
    return check_tensors(&r);
}

static pic_gguf *
gguf_new(const char *path)
{
    pic_gguf *g = calloc(1, sizeof(*g));

    if (g != NULL) {
        snprintf(g->path, sizeof(g->path), "%s", path);
    }
    return g;
}

pic_gguf *
pic_gguf_open_mem(const void *buf, size_t len, char *err, size_t errlen)
{
    pic_gguf *g = gguf_new("(memory)");

    if (g == NULL) {
        snprintf(err, errlen, "pic_gguf_open: out of memory");
        return NULL;
    }
    g->p = buf;
    g->len = len;
    if (gguf_parse(g, err, errlen) != 0) {
        pic_gguf_close(g);
        return NULL;
    }
    return g;
}

pic_gguf *
pic_gguf_open(const char *path, char *err, size_t errlen)
{
    struct stat sb;
    pic_gguf   *g;
    void       *p;
    int         fd;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 24) {
        snprintf(err, errlen, "%s: not a regular file of at least 24 bytes", path);
        close(fd);
        return NULL;
    }
    p = mmap(NULL, (size_t) sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "%s: mmap: %s", path, strerror(errno));
        return NULL;
    }
    g = gguf_new(path);
    if (g == NULL) {
        munmap(p, (size_t) sb.st_size);
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    g->p = p;
    g->len = (size_t) sb.st_size;
    g->mapped = 1;
    if (gguf_parse(g, err, errlen) != 0) {
        pic_gguf_close(g);
        return NULL;
    }
    return g;
}

void
pic_gguf_close(pic_gguf *g)
{
    if (g == NULL) {
        return;
    }
    for (size_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].eoff);
        free((char *) g->kv[i].key);
    }
    for (size_t i = 0; i < g->n_t; i++) {
        free((char *) g->t[i].name);
    }
    if (g->mapped) {
        munmap((void *) g->p, g->len);
    }
    free(g->kv);
    free(g->t);
    free(g);
}

const char *
pic_gguf_path(const pic_gguf *g)
{
    return g->path;
}

const uint8_t *
pic_gguf_bytes(const pic_gguf *g, size_t *len)
{
    *len = g->len;
    return g->p;
}

int
pic_gguf_version(const pic_gguf *g)
{
    return g->version;
}

size_t
pic_gguf_kv_count(const pic_gguf *g)
{
    return g->n_kv;
}

const char *
pic_gguf_kv_key(const pic_gguf *g, size_t i)
{
    return i < g->n_kv ? g->kv[i].key : NULL;
}

int
pic_gguf_kv_type(const pic_gguf *g, size_t i)
{
    return i < g->n_kv ? g->kv[i].type : -1;
}

int
pic_gguf_find(const pic_gguf *g, const char *key)
{
    for (size_t i = 0; i < g->n_kv; i++) {
        if (strcmp(g->kv[i].key, key) == 0) {
            return (int) i;
        }
    }
    return -1;
}

/* A scalar of type t at p as a double; *is_int set for the integer types. */
static int
scalar_f64(int t, const uint8_t *p, double *out, int64_t *iout, int *is_int)
{
    uint64_t u;

    *is_int = 1;
    switch (t) {
    case PIC_GGUF_U8: case PIC_GGUF_BOOL: *iout = p[0]; break;
    case PIC_GGUF_I8:  *iout = (int8_t) p[0]; break;
    case PIC_GGUF_U16: *iout = (uint16_t) le(p, 2); break;
    case PIC_GGUF_I16: *iout = (int16_t) le(p, 2); break;
    case PIC_GGUF_U32: *iout = (uint32_t) le(p, 4); break;
    case PIC_GGUF_I32: *iout = (int32_t) le(p, 4); break;
    case PIC_GGUF_I64: *iout = (int64_t) le(p, 8); break;
    case PIC_GGUF_U64:
        u = le(p, 8);
        if (u > INT64_MAX) {
            return -1;
        }
        *iout = (int64_t) u;
        break;
    case PIC_GGUF_F32: {
        uint32_t b = (uint32_t) le(p, 4);
        float    f;

        memcpy(&f, &b, 4);
        *out = f;
        *is_int = 0;
        return 0;
    }
    case PIC_GGUF_F64: {
        uint64_t b = le(p, 8);
        double   f;

        memcpy(&f, &b, 8);
        *out = f;
        *is_int = 0;
        return 0;
    }
    default:
        return -1;
    }
    *out = (double) *iout;
    return 0;
}

int
pic_gguf_get_i64(const pic_gguf *g, const char *key, int64_t *out)
{
    int    i = pic_gguf_find(g, key), is_int;
    double d;

    if (i < 0 || scalar_f64(g->kv[i].type, g->p + g->kv[i].off, &d, out, &is_int) != 0
        || !is_int)
    {
        return -1;
    }
    return 0;
}

int
pic_gguf_get_f64(const pic_gguf *g, const char *key, double *out)
{
    int     i = pic_gguf_find(g, key), is_int;
    int64_t v;

    if (i < 0 || g->kv[i].type == PIC_GGUF_BOOL
        || scalar_f64(g->kv[i].type, g->p + g->kv[i].off, out, &v, &is_int) != 0)
    {
        return -1;
    }
    return 0;
}

int
pic_gguf_get_str(const pic_gguf *g, const char *key, const char **s, size_t *len)
{
    int i = pic_gguf_find(g, key);

    if (i < 0 || g->kv[i].type != PIC_GGUF_STRING) {
        return -1;
    }
    *len = (size_t) le(g->p + g->kv[i].off, 8);
    *s = (const char *) g->p + g->kv[i].off + 8;
    return 0;
}

int
pic_gguf_get_arr(const pic_gguf *g, const char *key, int *type, size_t *n)
{
    int i = pic_gguf_find(g, key);

    if (i < 0 || g->kv[i].type != PIC_GGUF_ARRAY) {
        return -1;
    }
    *type = g->kv[i].etype;
    *n = g->kv[i].n;
    return 0;
}

int
pic_gguf_arr_str(const pic_gguf *g, const char *key, size_t i, const char **s,
                 size_t *len)
{
    int k = pic_gguf_find(g, key);

    if (k < 0 || g->kv[k].type != PIC_GGUF_ARRAY || g->kv[k].etype != PIC_GGUF_STRING
        || i >= g->kv[k].n)
    {
        return -1;
    }
    *len = (size_t) le(g->p + g->kv[k].eoff[i], 8);
    *s = (const char *) g->p + g->kv[k].eoff[i] + 8;
    return 0;
}

int
pic_gguf_arr_f64(const pic_gguf *g, const char *key, size_t i, double *out)
{
    int     k = pic_gguf_find(g, key), is_int;
    int64_t v;
    size_t  s;

    if (k < 0 || g->kv[k].type != PIC_GGUF_ARRAY || i >= g->kv[k].n) {
        return -1;
    }
    s = scalar_bytes(g->kv[k].etype);
    if (s == 0) {
        return -1;
    }
    return scalar_f64(g->kv[k].etype, g->p + g->kv[k].off + i * s, out, &v, &is_int);
}

size_t
pic_gguf_tensor_count(const pic_gguf *g)
{
    return g->n_t;
}

const pic_gguf_tensor *
pic_gguf_tensor_get(const pic_gguf *g, size_t i)
{
    return i < g->n_t ? &g->t[i] : NULL;
}

const pic_gguf_tensor *
pic_gguf_tensor_find(const pic_gguf *g, const char *name)
{
    for (size_t i = 0; i < g->n_t; i++) {
        if (strcmp(g->t[i].name, name) == 0) {
            return &g->t[i];
        }
    }
    return NULL;
}
