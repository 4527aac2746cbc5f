/*
 * safetensors.c — mmap-backed safetensors reader (see safetensors.h).
 *
 * File layout: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}, ...,
 *  "__metadata__": {...}}, then the data area; offsets are relative to it.
 */
#include "pic_buf.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PIC_ST_MAX_INDEX   (64u << 20)      /* index JSON bytes */
#define PIC_ST_MAX_FILES   4096


typedef struct {
    char          *path;
    uint8_t       *map;                     /* (size) whole file */
    size_t         size;
    int            view;                    /* map is the caller's: never unmapped */
} pic_st_file;

struct pic_st {
    pic_st_file   *files;                   /* [n_files] sorted by path */
    size_t         n_files;
    size_t         cap_files;
    pic_st_tensor *tensors;                 /* [n_tensors] sorted by name */
    size_t         n_tensors;
    size_t         cap_tensors;
};


static void
st_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}


/* --- dtypes --- */

static const struct {
    const char   *name;
    unsigned      size;
    pic_st_dtype  dtype;
} st_dtypes[] = {
    { "F32", 4, PIC_ST_DTYPE_F32 },      { "F16", 2, PIC_ST_DTYPE_F16 },
    { "BF16", 2, PIC_ST_DTYPE_BF16 },    { "F64", 8, PIC_ST_DTYPE_OTHER },
    { "I64", 8, PIC_ST_DTYPE_OTHER },    { "U64", 8, PIC_ST_DTYPE_OTHER },
    { "I32", 4, PIC_ST_DTYPE_OTHER },    { "U32", 4, PIC_ST_DTYPE_OTHER },
    { "I16", 2, PIC_ST_DTYPE_OTHER },    { "U16", 2, PIC_ST_DTYPE_OTHER },
    { "I8", 1, PIC_ST_DTYPE_OTHER },     { "U8", 1, PIC_ST_DTYPE_OTHER },
    { "BOOL", 1, PIC_ST_DTYPE_OTHER },   { "F8_E4M3", 1, PIC_ST_DTYPE_OTHER },
    { "F8_E5M2", 1, PIC_ST_DTYPE_OTHER }, { "F8_E8M0", 1, PIC_ST_DTYPE_OTHER },
    { "C64", 8, PIC_ST_DTYPE_OTHER },
};


float
pic_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t) h << 16;
    float    f;

    memcpy(&f, &bits, 4);
    return f;
}


float
pic_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t) (h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    float    f;

    if (exp == 0x1f) {                      /* inf / nan */
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {                  /* normal */
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {                  /* zero */
        bits = sign;
    } else {                                /* subnormal: renormalise */
        exp = 113;
        while ((man & 0x400) == 0) {
            man <<= 1;
            exp--;
        }
        bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
    memcpy(&f, &bits, 4);
    return f;
}


/* --- one file --- */

static int
st_cmp_offset(const void *a, const void *b)
{
    const pic_st_tensor *x = *(const pic_st_tensor *const *) a;
    const pic_st_tensor *y = *(const pic_st_tensor *const *) b;

    if (x->data != y->data) {
        return x->data < y->data ? -1 : 1;
    }
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}


/* An integral JSON number in [0, 2^53], or -1. */
static int64_t
st_json_uint(const cJSON *v)
{
    double d;

    if (!cJSON_IsNumber(v)) {
        return -1;
    }
    d = v->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || d != (double) (int64_t) d) {
        return -1;
    }
    return (int64_t) d;
}


static int
st_tensors_grow(pic_st *st, size_t more)
{
    return pic_grow((void **) &st->tensors, &st->cap_tensors, st->n_tensors + more,
                    sizeof(*st->tensors));
}


/* Parse one tensor entry of file f (data area [data, data + data_size)). */
static int
st_parse_entry(pic_st_tensor *t, const cJSON *e, const char *path,
               const uint8_t *data, uint64_t data_size,
               char *err, size_t errlen)
{
    const cJSON *dt, *shape, *offs, *d;
    unsigned     size = 0;
    uint64_t     numel = 1, nbytes;
    int64_t      begin, end, v;
    size_t       i;
    int          n;

    memset(t, 0, sizeof(*t));
    t->name = e->string;
    t->file = path;

    if (!cJSON_IsObject(e)) {
        st_err(err, errlen, "%s: %s: tensor '%s': entry is not an object",
               __func__, path, e->string);
        return -1;
    }

    dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(dt)) {
        st_err(err, errlen, "%s: %s: tensor '%s': missing dtype",
               __func__, path, e->string);
        return -1;
    }
    for (i = 0; i < sizeof(st_dtypes) / sizeof(st_dtypes[0]); i++) {
        if (strcmp(dt->valuestring, st_dtypes[i].name) == 0) {
            size = st_dtypes[i].size;
            t->dtype = st_dtypes[i].dtype;
            snprintf(t->dtype_name, sizeof(t->dtype_name), "%s",
                     st_dtypes[i].name);
            break;
        }
    }
    if (size == 0) {
        st_err(err, errlen, "%s: %s: tensor '%s': unknown dtype '%.32s'",
               __func__, path, e->string, dt->valuestring);
        return -1;
    }

    shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(shape)) {
        st_err(err, errlen, "%s: %s: tensor '%s': missing shape",
               __func__, path, e->string);
        return -1;
    }
    n = cJSON_GetArraySize(shape);
    if (n > PIC_ST_MAX_DIMS) {
        st_err(err, errlen, "%s: %s: tensor '%s': %d dims (max %d)",
               __func__, path, e->string, n, PIC_ST_MAX_DIMS);
        return -1;
    }
    t->ndim = 0;
    cJSON_ArrayForEach(d, shape) {
        v = st_json_uint(d);
        if (v < 0) {
            st_err(err, errlen, "%s: %s: tensor '%s': shape[%d] is not a "
                   "non-negative integer", __func__, path, e->string,
                   t->ndim);
            return -1;
        }
        if (__builtin_mul_overflow(numel, (uint64_t) v, &numel)) {
            st_err(err, errlen, "%s: %s: tensor '%s': shape product "
                   "overflows", __func__, path, e->string);
            return -1;
        }
        t->shape[t->ndim++] = v;
    }
    if (__builtin_mul_overflow(numel, (uint64_t) size, &nbytes)) {
        st_err(err, errlen, "%s: %s: tensor '%s': byte size overflows",
               __func__, path, e->string);
        return -1;
    }

    offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2) {
        st_err(err, errlen, "%s: %s: tensor '%s': data_offsets must be "
               "[begin, end]", __func__, path, e->string);
        return -1;
    }
    begin = st_json_uint(cJSON_GetArrayItem(offs, 0));
    end = st_json_uint(cJSON_GetArrayItem(offs, 1));
    if (begin < 0 || end < 0) {
        st_err(err, errlen, "%s: %s: tensor '%s': data_offsets are not "
               "non-negative integers", __func__, path, e->string);
        return -1;
    }
    if (end < begin) {
        st_err(err, errlen, "%s: %s: tensor '%s': data_offsets end %lld < "
               "begin %lld", __func__, path, e->string,
               (long long) end, (long long) begin);
        return -1;
    }
    if ((uint64_t) end > data_size) {
        st_err(err, errlen, "%s: %s: tensor '%s': data_offsets [%lld, %lld] "
               "outside the data area (%llu bytes)", __func__, path,
               e->string, (long long) begin, (long long) end,
               (unsigned long long) data_size);
        return -1;
    }
    if ((uint64_t) (end - begin) != nbytes) {
        st_err(err, errlen, "%s: %s: tensor '%s': %lld data bytes but shape "
               "x %s needs %llu", __func__, path, e->string,
               (long long) (end - begin), t->dtype_name,
               (unsigned long long) nbytes);
        return -1;
    }

    t->numel = numel;
    t->nbytes = nbytes;
    t->data = data + begin;
    return 0;
}


/* Map path, validate its header, append its tensors to st. */
static int
st_add_file(pic_st *st, const char *path, char *err, size_t errlen)
{
    const pic_st_tensor **order = NULL;
    const pic_st_tensor  *max_t;
    const uint8_t        *data;
    pic_st_file          *f;
    const cJSON          *e;
    struct stat           sb;
    uint64_t              hlen, data_size, max_end;
    cJSON                *root = NULL;
    size_t                first, n, i;
    int                   fd, count;

    if (st->n_files >= st->cap_files) {
        st_err(err, errlen, "%s: %s: too many files", __func__, path);
        return -1;
    }
    f = &st->files[st->n_files];
    memset(f, 0, sizeof(*f));

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        st_err(err, errlen, "%s: %s: %s", __func__, path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st_err(err, errlen, "%s: %s: not a regular file", __func__, path);
        close(fd);
        return -1;
    }
    if (sb.st_size < 8) {
        st_err(err, errlen, "%s: %s: truncated (%lld bytes, need at least 8)",
               __func__, path, (long long) sb.st_size);
        close(fd);
        return -1;
    }
    f->size = (size_t) sb.st_size;
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        st_err(err, errlen, "%s: %s: mmap: %s", __func__, path,
               strerror(errno));
        return -1;
    }
    f->path = strdup(path);
    st->n_files++;                          /* owned from here: close frees */
    if (f->path == NULL) {
        st_err(err, errlen, "%s: %s: out of memory", __func__, path);
        return -1;
    }

    hlen = 0;
    for (i = 0; i < 8; i++) {
        hlen |= (uint64_t) f->map[i] << (8 * i);
    }
    if (hlen > PIC_ST_MAX_HEADER) {
        st_err(err, errlen, "%s: %s: header length %llu exceeds the %u-byte "
               "limit", __func__, path, (unsigned long long) hlen,
               PIC_ST_MAX_HEADER);
        return -1;
    }
    if (hlen > f->size - 8) {
        st_err(err, errlen, "%s: %s: header length %llu beyond the end of "
               "the file (%zu bytes)", __func__, path,
               (unsigned long long) hlen, f->size);
        return -1;
    }
    data = f->map + 8 + hlen;
    data_size = f->size - 8 - hlen;

    root = cJSON_ParseWithLength((const char *) f->map + 8, hlen);
    if (root == NULL || !cJSON_IsObject(root)) {
        st_err(err, errlen, "%s: %s: header is not a JSON object",
               __func__, path);
        goto fail;
    }

    count = cJSON_GetArraySize(root);
    if (count < 0 || st_tensors_grow(st, (size_t) count) != 0) {
        st_err(err, errlen, "%s: %s: out of memory", __func__, path);
        goto fail;
    }
    first = st->n_tensors;
    cJSON_ArrayForEach(e, root) {
        pic_st_tensor *t = &st->tensors[st->n_tensors];

        if (e->string == NULL) {
            st_err(err, errlen, "%s: %s: header entry without a name",
                   __func__, path);
            goto fail;
        }
        if (strcmp(e->string, "__metadata__") == 0) {
            continue;
        }
        if (st_parse_entry(t, e, path, data, data_size, err, errlen) != 0) {
            goto fail;
        }
        t->name = strdup(e->string);
        t->file = f->path;
        if (t->name == NULL) {
            st_err(err, errlen, "%s: %s: out of memory", __func__, path);
            goto fail;
        }
        st->n_tensors++;
    }

    /* no two tensors of this file may share bytes */
    n = st->n_tensors - first;
    order = malloc((n ? n : 1) * sizeof(*order));
    if (order == NULL) {
        st_err(err, errlen, "%s: %s: out of memory", __func__, path);
        goto fail;
    }
    for (i = 0; i < n; i++) {
        order[i] = &st->tensors[first + i];
    }
    qsort(order, n, sizeof(*order), st_cmp_offset);
    max_end = 0;
    max_t = NULL;
    for (i = 0; i < n; i++) {
        uint64_t b = (uint64_t) (order[i]->data - data);

        if (order[i]->nbytes == 0) {
            continue;
        }
        if (max_t != NULL && b < max_end) {
            st_err(err, errlen, "%s: %s: tensor '%s' overlaps tensor '%s'",
                   __func__, path, order[i]->name, max_t->name);
            goto fail;
        }
        if (b + order[i]->nbytes > max_end) {
            max_end = b + order[i]->nbytes;
            max_t = order[i];
        }
    }

    free(order);
    cJSON_Delete(root);
    return 0;

fail:
    free(order);
    cJSON_Delete(root);
    return -1;
}


/* --- the checkpoint --- */

static int
st_cmp_name(const void *a, const void *b)
{
    return strcmp(((const pic_st_tensor *) a)->name,
                  ((const pic_st_tensor *) b)->name);
}


static int
st_cmp_file(const void *a, const void *b)
{
    return strcmp(((const pic_st_file *) a)->path,
                  ((const pic_st_file *) b)->path);
}


static pic_st *
st_new(size_t n_files, char *err, size_t errlen)
{
    pic_st *st = calloc(1, sizeof(*st));

    if (st != NULL) {
        st->files = calloc(n_files ? n_files : 1, sizeof(*st->files));
        st->cap_files = n_files;
    }
    if (st == NULL || st->files == NULL) {
        if (st != NULL) {
            free(st->files);
        }
        free(st);
        st_err(err, errlen, "pic_st_open: out of memory");
        return NULL;
    }
    return st;
}


/* Sort by name, reject duplicates (within a file or across shards). */
static int
st_finish(pic_st *st, char *err, size_t errlen)
{
    size_t i;

    qsort(st->tensors, st->n_tensors, sizeof(*st->tensors), st_cmp_name);
    for (i = 1; i < st->n_tensors; i++) {
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0) {
            st_err(err, errlen, "%s: tensor '%s' appears twice (%s, %s)",
                   __func__, st->tensors[i].name, st->tensors[i - 1].file,
                   st->tensors[i].file);
            return -1;
        }
    }
    return 0;
}


/*
 * Files are sorted by path only after all tensors are in: tensor->file
 * points at the path string, not into the array, so sorting is safe.
 */
static void
st_sort_files(pic_st *st)
{
    qsort(st->files, st->n_files, sizeof(*st->files), st_cmp_file);
}


pic_st *
pic_st_open(const char *path, char *err, size_t errlen)
{
    pic_st *st = st_new(1, err, errlen);

    if (st == NULL) {
        return NULL;
    }
    if (st_add_file(st, path, err, errlen) != 0
        || st_finish(st, err, errlen) != 0)
    {
        pic_st_close(st);
        return NULL;
    }
    return st;
}


/* Read a whole small file into a malloc'd buffer (max bytes). */
static char *
st_slurp(const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
    struct stat  sb;
    FILE        *fp;
    char        *buf;

    fp = fopen(path, "rb");
    if (fp == NULL) {
        st_err(err, errlen, "pic_st_open_dir: %s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)
        || sb.st_size < 0 || (uint64_t) sb.st_size > max)
    {
        st_err(err, errlen, "pic_st_open_dir: %s: not a regular file of at "
               "most %zu bytes", path, max);
        fclose(fp);
        return NULL;
    }
    buf = malloc((size_t) sb.st_size + 1);
    if (buf == NULL
        || fread(buf, 1, (size_t) sb.st_size, fp) != (size_t) sb.st_size)
    {
        st_err(err, errlen, "pic_st_open_dir: %s: read failed", path);
        free(buf);
        fclose(fp);
        return NULL;
    }
    fclose(fp);
    buf[sb.st_size] = '\0';
    *len = (size_t) sb.st_size;
    return buf;
}


static int
st_is_plain_name(const char *s)
{
    return s[0] != '\0' && s[0] != '.' && strchr(s, '/') == NULL
           && strlen(s) < 1024;
}


static int
st_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *) a, *(char *const *) b);
}


/* Open the shards named by an index's weight_map, each once. */
static pic_st *
st_open_index(const char *dir, const char *index_path, char *err,
              size_t errlen)
{
    const cJSON  *map, *e;
    const char  **names = NULL;
    pic_st       *st = NULL;
    cJSON        *root = NULL;
    size_t        len, n = 0, u, i;
    char         *text, path[4096 + 1024 + 2];

    text = st_slurp(index_path, PIC_ST_MAX_INDEX, &len, err, errlen);
    if (text == NULL) {
        return NULL;
    }
    root = cJSON_ParseWithLength(text, len);
    free(text);
    map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (root == NULL || !cJSON_IsObject(map)) {
        st_err(err, errlen, "%s: %s: no weight_map object", __func__,
               index_path);
        goto fail;
    }
    names = malloc(((size_t) cJSON_GetArraySize(map) + 1) * sizeof(*names));
    if (names == NULL) {
        st_err(err, errlen, "%s: out of memory", __func__);
        goto fail;
    }
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || !st_is_plain_name(e->valuestring)) {
            st_err(err, errlen, "%s: %s: tensor '%s': shard name is not a "
                   "plain file name", __func__, index_path,
                   e->string ? e->string : "?");
            goto fail;
        }
        names[n++] = e->valuestring;
    }
    if (n == 0) {
        st_err(err, errlen, "%s: %s: empty weight_map", __func__, index_path);
        goto fail;
    }
    qsort(names, n, sizeof(*names), st_cmp_str);
    for (u = 1, i = 1; i < n; i++) {        /* unique shard names */
        if (strcmp(names[i], names[u - 1]) != 0) {
            names[u++] = names[i];
        }
    }
    if (u > PIC_ST_MAX_FILES) {
        st_err(err, errlen, "%s: %s: %zu shards (max %d)", __func__,
               index_path, u, PIC_ST_MAX_FILES);
        goto fail;
    }

    st = st_new(u, err, errlen);
    if (st == NULL) {
        goto fail;
    }
    for (i = 0; i < u; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (st_add_file(st, path, err, errlen) != 0) {
            goto fail;
        }
    }
    if (st_finish(st, err, errlen) != 0) {
        goto fail;
    }

    /* every tensor the index promises must be in the shard it names */
    cJSON_ArrayForEach(e, map) {
        const pic_st_tensor *t = pic_st_find(st, e->string);
        const char          *slash;

        if (t == NULL) {
            st_err(err, errlen, "%s: %s: tensor '%s' listed in the index is "
                   "missing from %s", __func__, index_path, e->string,
                   e->valuestring);
            goto fail;
        }
        slash = strrchr(t->file, '/');
        if (strcmp(slash ? slash + 1 : t->file, e->valuestring) != 0) {
            st_err(err, errlen, "%s: %s: tensor '%s' is in %s, the index "
                   "says %s", __func__, index_path, e->string, t->file,
                   e->valuestring);
            goto fail;
        }
    }
    st_sort_files(st);

    free(names);
    cJSON_Delete(root);
    return st;

fail:
    free(names);
    cJSON_Delete(root);
    pic_st_close(st);
    return NULL;
}


pic_st *
pic_st_open_dir(const char *dir, char *err, size_t errlen)
{
    struct dirent  *de;
    struct stat     sb;
    pic_st         *st;
    char          **names = NULL;
    size_t          n = 0, cap = 0, i, l;
    DIR            *d;
    char            path[4096 + 1024 + 2];

    if (strlen(dir) > 4096) {
        st_err(err, errlen, "%s: directory path too long", __func__);
        return NULL;
    }
    snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
    if (stat(path, &sb) == 0) {
        return st_open_index(dir, path, err, errlen);
    }
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    if (stat(path, &sb) == 0) {
        return pic_st_open(path, err, errlen);
    }

    /* neither: every *.safetensors file in the directory */
    d = opendir(dir);
    if (d == NULL) {
        st_err(err, errlen, "%s: %s: %s", __func__, dir, strerror(errno));
        return NULL;
    }
    while ((de = readdir(d)) != NULL) {
        l = strlen(de->d_name);
        if (l <= 12 || strcmp(de->d_name + l - 12, ".safetensors") != 0
            || !st_is_plain_name(de->d_name))
        {
            continue;
        }
        if (pic_grow((void **) &names, &cap, n + 1, sizeof(*names)) != 0) {
            break;
        }
        names[n] = strdup(de->d_name);
        if (names[n] == NULL) {
            break;
        }
        n++;
    }
    closedir(d);

    st = NULL;
    if (n == 0) {
        st_err(err, errlen, "%s: %s: no model.safetensors, index or "
               "*.safetensors file", __func__, dir);
    } else if (n > PIC_ST_MAX_FILES) {
        st_err(err, errlen, "%s: %s: too many .safetensors files", __func__,
               dir);
    } else {
        st = st_new(n, err, errlen);
        for (i = 0; st != NULL && i < n; i++) {
            snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
            if (st_add_file(st, path, err, errlen) != 0) {
                pic_st_close(st);
                st = NULL;
            }
        }
        if (st != NULL && st_finish(st, err, errlen) != 0) {
            pic_st_close(st);
            st = NULL;
        }
        if (st != NULL) {
            st_sort_files(st);
        }
    }
    for (i = 0; i < n; i++) {
        free(names[i]);
    }
    free(names);
    return st;
}


pic_st *
pic_st_new_view(const char *path, const uint8_t *bytes, size_t len)
{
    pic_st *st = calloc(1, sizeof(*st));

    if (st == NULL || (st->files = calloc(1, sizeof(*st->files))) == NULL
        || (st->files[0].path = strdup(path)) == NULL)
    {
        pic_st_close(st);
        return NULL;
    }
    st->n_files = st->cap_files = 1;
    st->files[0].map = (uint8_t *) bytes;
    st->files[0].size = len;
    st->files[0].view = 1;
    return st;
}


int
pic_st_add(pic_st *st, const pic_st_tensor *t)
{
    pic_st_tensor *d;

    if (pic_grow((void **) &st->tensors, &st->cap_tensors, st->n_tensors + 1,
                 sizeof(*st->tensors)) != 0)
    {
        return -1;
    }
    d = &st->tensors[st->n_tensors];
    *d = *t;
    d->file = st->files[0].path;
    d->name = strdup(t->name);
    if (d->name == NULL) {
        return -1;
    }
    st->n_tensors++;
    return 0;
}


int
pic_st_seal(pic_st *st)
{
    qsort(st->tensors, st->n_tensors, sizeof(*st->tensors), st_cmp_name);
    for (size_t i = 1; i < st->n_tensors; i++) {
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0) {
            return -1;
        }
    }
    return 0;
}


void
pic_st_close(pic_st *st)
{
    size_t i;

    if (st == NULL) {
        return;
    }
    for (i = 0; i < st->n_tensors; i++) {
        free((char *) st->tensors[i].name);
    }
    for (i = 0; i < st->n_files; i++) {
        if (st->files[i].map != NULL && !st->files[i].view) {
            munmap(st->files[i].map, st->files[i].size);
        }
        free(st->files[i].path);
    }
    free(st->tensors);
    free(st->files);
    free(st);
}


const pic_st_tensor *
pic_st_find(const pic_st *st, const char *name)
{
    pic_st_tensor key;

    if (st == NULL || st->n_tensors == 0) {
        return NULL;
    }
    key.name = name;
    return bsearch(&key, st->tensors, st->n_tensors, sizeof(key),
                   st_cmp_name);
}


size_t
pic_st_count(const pic_st *st)
{
    return st ? st->n_tensors : 0;
}


const pic_st_tensor *
pic_st_get(const pic_st *st, size_t i)
{
    return (st && i < st->n_tensors) ? &st->tensors[i] : NULL;
}


size_t
pic_st_file_count(const pic_st *st)
{
    return st ? st->n_files : 0;
}


const char *
pic_st_file_path(const pic_st *st, size_t i)
{
    return (st && i < st->n_files) ? st->files[i].path : NULL;
}


const uint8_t *
pic_st_file_bytes(const pic_st *st, size_t i, size_t *len)
{
    if (st == NULL || i >= st->n_files) {
        *len = 0;
        return NULL;
    }
    *len = st->files[i].size;
    return st->files[i].map;
}


/* --- conversion --- */

void
pic_st_release(const void *p, size_t len)
{
    uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t) p + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t) p + len) & ~(page - 1);

    if (hi > lo) {
        (void) madvise((void *) lo, hi - lo, MADV_DONTNEED);
    }
}


static int st_convert_f32(const pic_st_tensor *t, uint64_t first, uint64_t n,
                          float *dst, char *err, size_t errlen);

int
pic_st_read_f32(const pic_st_tensor *t, uint64_t first, uint64_t n,
                float *dst, char *err, size_t errlen)
{
    int    rc = st_convert_f32(t, first, n, dst, err, errlen);
    size_t esz = t->dtype == PIC_ST_DTYPE_F32 ? 4 : 2;

    if (rc == 0 && t->dtype != PIC_ST_DTYPE_EXT) {
        pic_st_release(t->data + first * esz, n * esz);
    }
    return rc;
}

/* The conversion of pic_st_read_f32, without the release. */
static int
st_convert_f32(const pic_st_tensor *t, uint64_t first, uint64_t n,
               float *dst, char *err, size_t errlen)
{
    const uint8_t *src;
    int64_t        i;

    if (first > t->numel || n > t->numel - first) {
        st_err(err, errlen, "%s: %s: tensor '%s': elements [%llu, +%llu) "
               "outside its %llu", __func__, t->file, t->name,
               (unsigned long long) first, (unsigned long long) n,
               (unsigned long long) t->numel);
        return -1;
    }
    switch (t->dtype) {
    case PIC_ST_DTYPE_F32:
        memcpy(dst, t->data + first * 4, n * 4);
        return 0;

    case PIC_ST_DTYPE_EXT:
        return t->read(t, first, n, dst, err, errlen);

    case PIC_ST_DTYPE_BF16:
        src = t->data + first * 2;
        #pragma omp parallel for if (n > (1 << 20)) schedule(static)
        for (i = 0; i < (int64_t) n; i++) {
            uint16_t h;

            memcpy(&h, src + 2 * i, 2);
            dst[i] = pic_bf16_to_f32(h);
        }
        return 0;

    case PIC_ST_DTYPE_F16:
        src = t->data + first * 2;
        #pragma omp parallel for if (n > (1 << 20)) schedule(static)
        for (i = 0; i < (int64_t) n; i++) {
            uint16_t h;

            memcpy(&h, src + 2 * i, 2);
            dst[i] = pic_f16_to_f32(h);
        }
        return 0;

    default:
        st_err(err, errlen, "%s: %s: tensor '%s': dtype %s is not supported "
               "(need F32, F16 or BF16)", __func__, t->file, t->name,
               t->dtype_name);
        return -1;
    }
}
