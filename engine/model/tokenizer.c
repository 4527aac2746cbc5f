/*
 * tokenizer.c — byte-level BPE read from a Hugging Face tokenizer.json,
 * giving the same ids as the `tokenizers` library (see tokenizer.h).
 *
 * Encode, as tokenizers' AddedVocabulary + BPE model do it:
 *   1. added tokens with normalized=false are matched on the raw text
 *      (leftmost-longest; single_word / lstrip / rstrip honoured);
 *   2. each piece between them is normalised (NFC ...), then added tokens with
 *      normalized=true are matched on the normalised text;
 *   3. the remaining pieces go through the pre-tokenizer stages (regex splits,
 *      ByteLevel's optional prefix space and GPT-2 regex);
 *   4. each final piece ("word") is mapped byte -> unicode char -> vocab id and
 *      merged by rank (lowest rank first, leftmost on ties) with a heap.
 * Words up to PIC_TOK_CACHE_WORD bytes are cached in a direct-mapped table
 * guarded by striped mutexes (trylock: a busy stripe is a miss, never a wait).
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include <pcre2.h>
#include <utf8proc.h>
#include <xxhash.h>

#include "pic_buf.h"
#include "tokenizer.h"

#define PIC_TOK_MAX_FILE      ((size_t)512 << 20)  /* tokenizer.json size cap */
#define PIC_TOK_MAX_ID        (1 << 24)            /* ids must be below this */
#define PIC_TOK_MAX_TOKEN     65536                /* bytes in one vocab string */
#define PIC_TOK_MAX_STAGES    8                    /* pre-tokenizer stages */
#ifndef PIC_TOK_CACHE_SLOTS
#define PIC_TOK_CACHE_SLOTS   16384                /* power of two */
#endif
#define PIC_TOK_CACHE_LOCKS   64
#ifndef PIC_TOK_CACHE_WORD
#define PIC_TOK_CACHE_WORD    24                   /* longest cached word, bytes */
#endif
#define PIC_TOK_CACHE_IDS     12                   /* most ids of a cached word */

/* GPT-2's regex, used by a ByteLevel pre-tokenizer with use_regex=true */
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";


/* --- types --- */

typedef struct {
    uint32_t off;               /* key offset in the blob */
    uint32_t len;               /* key length, bytes */
    int32_t  id;                /* -1: empty slot */
} pic_strmap_slot;

typedef struct {
    pic_strmap_slot *slots;     /* (cap) */
    size_t           cap;       /* power of two */
    size_t           n;
} pic_strmap;

typedef struct {
    uint64_t key;               /* (left id << 32) | right id; UINT64_MAX empty */
    int32_t  rank;              /* index in merges: lower merges first */
    int32_t  id;                /* id of the merged token */
} pic_pairmap_slot;

typedef struct {
    pic_pairmap_slot *slots;    /* (cap) */
    size_t            cap;      /* power of two */
    size_t            n;
} pic_pairmap;

typedef struct {
    uint32_t off;               /* content (normalised if normalized) in the blob */
    uint32_t len;
    int32_t  id;
    uint8_t  special, normalized, lstrip, rstrip, single_word;
} pic_added;

typedef struct {
    const pic_added **tok;      /* (n) longest first */
    size_t            n;
    uint8_t           first[256]; /* 1 if some token starts with this byte */
} pic_added_set;

typedef enum {
    PIC_STAGE_SPLIT = 0,        /* regex split */
    PIC_STAGE_PREFIX_SPACE,     /* ByteLevel add_prefix_space */
} pic_stage_kind;

typedef struct {
    pic_stage_kind kind;
    pcre2_code    *re;
    int            removed;     /* behavior Removed (else Isolated) */
    int            invert;
} pic_stage;

typedef struct {
    uint64_t h;
    uint8_t  len;               /* 0: empty slot */
    uint8_t  n_ids;
    char     word[PIC_TOK_CACHE_WORD];
    int32_t  ids[PIC_TOK_CACHE_IDS];
} pic_cache_slot;

typedef struct {
    pthread_mutex_t lock[PIC_TOK_CACHE_LOCKS];
    pic_cache_slot  slot[PIC_TOK_CACHE_SLOTS];
} pic_cache;

struct pic_tokenizer {
    char          *blob;        /* (blob_len) every string, NUL after each */
    size_t         blob_len, blob_cap;

    size_t         n_ids;       /* 1 + largest id */
    uint32_t      *str_off;     /* (n_ids) token string; UINT32_MAX: unused id */
    uint32_t      *str_len;     /* (n_ids) */
    uint32_t      *dec_off;     /* (n_ids) bytes the id decodes to */
    uint32_t      *dec_len;     /* (n_ids) */
    uint8_t       *special;     /* (n_ids) 1: added special token */

    pic_strmap     vocab;       /* model vocab string -> id */
    pic_strmap     added_map;   /* added content -> id */
    pic_pairmap    merges;
    int32_t        byte_id[256]; /* id of each byte's mapped char, -1 none */
    int32_t        unk_id;       /* -1: no unk */
    int            fuse_unk;
    int            ignore_merges;

    pic_added     *added;       /* (n_added) */
    size_t         n_added;
    pic_added_set  raw_set;     /* normalized=false tokens */
    pic_added_set  norm_set;    /* normalized=true tokens */

    int            norm;        /* utf8proc options; 0: no normaliser */
    pic_stage      stage[PIC_TOK_MAX_STAGES];
    int            n_stages;

    pic_cache     *cache;
};

/* byte <-> unicode char of GPT-2's byte-level BPE */
static uint32_t byte_to_cp[256];
static int16_t  cp_to_byte[324];
static pthread_once_t byte_map_once = PTHREAD_ONCE_INIT;


/* --- small helpers --- */

static void
seterr(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL || errlen == 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void
byte_map_init(void)
{
    int b, n = 0;

    for (b = 0; b < 324; b++) {
        cp_to_byte[b] = -1;
    }
    for (b = 0; b < 256; b++) {
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174)) {
            byte_to_cp[b] = (uint32_t)b;
        } else {
            byte_to_cp[b] = (uint32_t)(256 + n++);
        }
        cp_to_byte[byte_to_cp[b]] = (int16_t)b;
    }
}

/* UTF-8 encode cp into out (>= 4 bytes); returns the length. */
static size_t
utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the well-formed UTF-8 sequence at p[0..n), or 0 if it is not
 * one.  With partial != NULL, *partial = 1 when the bytes are a valid but
 * incomplete prefix cut by the end of the buffer.  On a bad sequence the
 * return is 0 and *bad = length of its maximal subpart (>= 1). */
static size_t
utf8_seq(const unsigned char *p, size_t n, int *partial, size_t *bad)
{
    unsigned char b = p[0];
    unsigned char lo = 0x80, hi = 0xBF;
    size_t        need, k;

    *partial = 0;
    *bad = 1;
    if (b < 0x80) {
        return 1;
    }
    if (b >= 0xC2 && b <= 0xDF) {
        need = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0) {
            lo = 0xA0;
        } else if (b == 0xED) {
            hi = 0x9F;
        }
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0) {
            lo = 0x90;
        } else if (b == 0xF4) {
            hi = 0x8F;
        }
    } else {
        return 0;
    }
    for (k = 1; k < need; k++) {
        if (k >= n) {
            *partial = 1;
            *bad = k;
            return 0;
        }
        if (p[k] < lo || p[k] > hi) {
            *bad = k;
            return 0;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    return need;
}

/* 1 if p[0..n) is valid UTF-8 (no surrogates, no overlongs, <= U+10FFFF). */
static int
utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t               i = 0, k, bad;
    int                  partial;

    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        k = utf8_seq(p + i, n - i, &partial, &bad);
        if (k == 0) {
            return 0;
        }
        i += k;
    }
    return 1;
}

/* Decode the char at p[0..n) (valid UTF-8); returns its length. */
static size_t
utf8_get(const char *s, size_t n, int32_t *cp)
{
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s,
                                          (utf8proc_ssize_t)n, cp);

    if (k <= 0) {
        *cp = -1;
        return 1;
    }
    return (size_t)k;
}

/* Start offset of the char that ends at s[end] (s valid UTF-8, end > 0). */
static size_t
utf8_prev(const char *s, size_t end)
{
    size_t i = end - 1;

    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) {
        i--;
    }
    return i;
}

/* Unicode White_Space (Rust's char::is_whitespace). */
static int
is_white(int32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0
           || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028
           || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Word char of tokenizers' single_word check (regex \w): letters, marks,
 * decimal and letter numbers, connector punctuation, ZWNJ/ZWJ. */
static int
is_word_char(int32_t c)
{
    utf8proc_category_t k;

    if (c < 0) {
        return 0;
    }
    if (c == 0x200C || c == 0x200D) {
        return 1;
    }
    k = utf8proc_category(c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_ME)
           || k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL
           || k == UTF8PROC_CATEGORY_PC;
}


/* --- blob and hash maps --- */

/* Append n bytes and a NUL to the blob; offset in *off; -1 on overflow/ENOMEM. */
static int
blob_add(pic_tokenizer *t, const char *s, size_t n, uint32_t *off)
{
    if (n > UINT32_MAX || t->blob_len + n + 1 > UINT32_MAX) {
        return -1;
    }
    if (pic_grow((void **) &t->blob, &t->blob_cap, t->blob_len + n + 1, 1) != 0) {
        return -1;
    }
    memcpy(t->blob + t->blob_len, s, n);
    t->blob[t->blob_len + n] = '\0';
    *off = (uint32_t)t->blob_len;
    t->blob_len += n + 1;
    return 0;
}

static int
strmap_init(pic_strmap *m, size_t n)
{
    size_t i;

    m->cap = 16;
    while (m->cap < 2 * n + 16) {
        m->cap *= 2;
    }
    m->n = 0;
    m->slots = malloc(m->cap * sizeof(*m->slots));
    if (m->slots == NULL) {
        return -1;
    }
    for (i = 0; i < m->cap; i++) {
        m->slots[i].id = -1;
    }
    return 0;
}

/* Slot for key s[0..n): the one holding it or the empty one it would take. */
static pic_strmap_slot *
strmap_find(const pic_strmap *m, const char *blob, const char *s, size_t n)
{
    size_t i = (size_t)XXH3_64bits(s, n) & (m->cap - 1);

    for (;;) {
        pic_strmap_slot *e = &m->slots[i];

        if (e->id < 0
            || (e->len == n && memcmp(blob + e->off, s, n) == 0)) {
            return e;
        }
        i = (i + 1) & (m->cap - 1);
    }
}

static int32_t
strmap_get(const pic_strmap *m, const char *blob, const char *s, size_t n)
{
    if (m->slots == NULL) {
        return -1;
    }
    return strmap_find(m, blob, s, n)->id;
}

static int
pairmap_init(pic_pairmap *m, size_t n)
{
    size_t i;

    m->cap = 16;
    while (m->cap < 2 * n + 16) {
        m->cap *= 2;
    }
    m->n = 0;
    m->slots = malloc(m->cap * sizeof(*m->slots));
    if (m->slots == NULL) {
        return -1;
    }
    for (i = 0; i < m->cap; i++) {
        m->slots[i].key = UINT64_MAX;
    }
    return 0;
}

static inline size_t
pair_hash(uint64_t key, size_t cap)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

static inline const pic_pairmap_slot *
pairmap_get(const pic_pairmap *m, int32_t a, int32_t b)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t   i = pair_hash(key, m->cap);

    for (;;) {
        const pic_pairmap_slot *e = &m->slots[i];

        if (e->key == key) {
            return e;
        }
        if (e->key == UINT64_MAX) {
            return NULL;
        }
        i = (i + 1) & (m->cap - 1);
    }
}

/* Insert or overwrite (a later duplicate merge wins, as in tokenizers). */
static void
pairmap_put(pic_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t   i = pair_hash(key, m->cap);

    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != key) {
        i = (i + 1) & (m->cap - 1);
    }
    if (m->slots[i].key == UINT64_MAX) {
        m->n++;
    }
    m->slots[i].key = key;
    m->slots[i].rank = rank;
    m->slots[i].id = id;
}


/* --- loading: JSON helpers --- */

/* Read an optional bool field; -1 if present and not a bool. */
static int
json_bool(const cJSON *obj, const char *name, int dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);

    if (v == NULL || cJSON_IsNull(v)) {
        return dflt;
    }
    if (!cJSON_IsBool(v)) {
        return -1;
    }
    return cJSON_IsTrue(v) ? 1 : 0;
}

/* A JSON number that is an integer id in [0, PIC_TOK_MAX_ID); else -1. */
static int32_t
json_id(const cJSON *v)
{
    double d;

    if (!cJSON_IsNumber(v)) {
        return -1;
    }
    d = v->valuedouble;
    if (!(d >= 0 && d < PIC_TOK_MAX_ID) || d != (double)(int32_t)d) {
        return -1;
    }
    return (int32_t)d;
}

/* The "type" string of a component object, or NULL. */
static const char *
json_type(const cJSON *obj)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "type");

    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Bytes a token string decodes to: its chars mapped back to bytes when every
 * char is a byte-level char, else its own UTF-8 (tokenizers' ByteLevel). */
static int
decode_piece(pic_tokenizer *t, const char *s, size_t n, uint32_t *off, uint32_t *len)
{
    char   stack[256];
    char  *buf = n <= sizeof(stack) ? stack : malloc(n);
    size_t i = 0, k = 0;
    int    rc;

    if (buf == NULL) {
        return -1;
    }
    while (i < n) {
        int32_t cp;
        size_t  l = utf8_get(s + i, n - i, &cp);

        if (cp < 0 || cp >= 324 || cp_to_byte[cp] < 0) {
            break;
        }
        buf[k++] = (char)cp_to_byte[cp];
        i += l;
    }
    if (i < n) {
        /* kept as written; copied first: s may lie in the blob that
         * blob_add reallocates */
        memcpy(buf, s, n);
        rc = blob_add(t, buf, n, off);
        *len = (uint32_t)n;
    } else {
        rc = blob_add(t, buf, k, off);
        *len = (uint32_t)k;
    }
    if (buf != stack) {
        free(buf);
    }
    return rc;
}


/* --- loading: components --- */

static int
load_model(pic_tokenizer *t, const cJSON *model, char *err, size_t errlen)
{
    const cJSON *vocab, *merges, *v, *item;
    const char  *type;
    char         ch[4];
    size_t       n_vocab, n_merges, i;
    int32_t      rank = 0;

    if (!cJSON_IsObject(model)) {
        seterr(err, errlen, "%s: \"model\" is missing or not an object", __func__);
        return -1;
    }
    type = json_type(model);
    if (cJSON_GetObjectItemCaseSensitive(model, "type") != NULL
        && (type == NULL || strcmp(type, "BPE") != 0)) {
        seterr(err, errlen, "%s: model type %s%s%s is not supported (want BPE)",
               __func__, type ? "\"" : "", type ? type : "(not a string)",
               type ? "\"" : "");
        return -1;
    }
    v = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (v != NULL && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0)) {
        seterr(err, errlen, "%s: model.dropout must be null (BPE dropout is random)",
               __func__);
        return -1;
    }
    if (json_bool(model, "byte_fallback", 0) != 0) {
        seterr(err, errlen, "%s: model.byte_fallback is not supported", __func__);
        return -1;
    }
    t->fuse_unk = json_bool(model, "fuse_unk", 0);
    t->ignore_merges = json_bool(model, "ignore_merges", 0);
    if (t->fuse_unk < 0 || t->ignore_merges < 0) {
        seterr(err, errlen, "%s: model.fuse_unk / ignore_merges must be booleans", __func__);
        return -1;
    }
    for (i = 0; i < 2; i++) {
        const char *name = i == 0 ? "continuing_subword_prefix" : "end_of_word_suffix";

        v = cJSON_GetObjectItemCaseSensitive(model, name);
        if (v != NULL && !cJSON_IsNull(v)
            && !(cJSON_IsString(v) && v->valuestring[0] == '\0')) {
            seterr(err, errlen, "%s: model.%s is not supported", __func__, name);
            return -1;
        }
    }

    vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) {
        seterr(err, errlen, "%s: model.vocab is missing or not an object", __func__);
        return -1;
    }
    n_vocab = 0;
    cJSON_ArrayForEach(item, vocab) {
        n_vocab++;
    }
    if (n_vocab == 0 || n_vocab > PIC_TOK_MAX_ID) {
        seterr(err, errlen, "%s: model.vocab has %zu entries (want 1..%d)",
               __func__, n_vocab, PIC_TOK_MAX_ID);
        return -1;
    }
    if (strmap_init(&t->vocab, n_vocab) != 0) {
        goto nomem;
    }
    cJSON_ArrayForEach(item, vocab) {
        const char      *key = item->string;
        int32_t          id = json_id(item);
        size_t           n;
        pic_strmap_slot *e;

        if (key == NULL) {
            seterr(err, errlen, "%s: model.vocab entry without a key", __func__);
            return -1;
        }
        n = strlen(key);
        if (id < 0) {
            seterr(err, errlen, "%s: model.vocab[\"%.40s\"] is not an id in [0, %d)",
                   __func__, key, PIC_TOK_MAX_ID);
            return -1;
        }
        if (n == 0 || n > PIC_TOK_MAX_TOKEN) {
            seterr(err, errlen, "%s: model.vocab has a token of %zu bytes", __func__, n);
            return -1;
        }
        if ((size_t)id >= t->n_ids) {
            seterr(err, errlen, "%s: internal: id %d out of range", __func__, id);
            return -1;
        }
        if (t->str_off[id] != UINT32_MAX) {
            seterr(err, errlen, "%s: model.vocab: id %d is used twice (\"%.40s\")",
                   __func__, id, key);
            return -1;
        }
        e = strmap_find(&t->vocab, t->blob, key, n);
        if (e->id >= 0) {
            seterr(err, errlen, "%s: model.vocab: token \"%.40s\" appears twice",
                   __func__, key);
            return -1;
        }
        if (blob_add(t, key, n, &e->off) != 0) {
            goto nomem;
        }
        e->len = (uint32_t)n;
        e->id = id;
        t->vocab.n++;
        t->str_off[id] = e->off;
        t->str_len[id] = (uint32_t)n;
    }

    for (i = 0; i < 256; i++) {
        size_t n = utf8_put(byte_to_cp[i], ch);

        t->byte_id[i] = strmap_get(&t->vocab, t->blob, ch, n);
    }
    t->unk_id = -1;
    v = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (v != NULL && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v)) {
            seterr(err, errlen, "%s: model.unk_token must be a string or null", __func__);
            return -1;
        }
        t->unk_id = strmap_get(&t->vocab, t->blob, v->valuestring, strlen(v->valuestring));
        if (t->unk_id < 0) {
            seterr(err, errlen, "%s: model.unk_token \"%.40s\" is not in the vocab",
                   __func__, v->valuestring);
            return -1;
        }
    }

    merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (merges == NULL || cJSON_IsNull(merges)) {
        n_merges = 0;
    } else if (!cJSON_IsArray(merges)) {
        seterr(err, errlen, "%s: model.merges is not an array", __func__);
        return -1;
    } else {
        n_merges = (size_t)cJSON_GetArraySize(merges);
    }
    if (n_merges > PIC_TOK_MAX_ID) {
        seterr(err, errlen, "%s: model.merges has %zu entries (max %d)",
               __func__, n_merges, PIC_TOK_MAX_ID);
        return -1;
    }
    if (pairmap_init(&t->merges, n_merges) != 0) {
        goto nomem;
    }
    if (n_merges == 0) {
        return 0;
    }
    cJSON_ArrayForEach(item, merges) {
        const char *a, *b;
        size_t      na, nb;
        int32_t     ia, ib, im;
        char       *cat;

        if (cJSON_IsString(item)) {
            const char *sp = strchr(item->valuestring, ' ');

            if (sp == NULL || strchr(sp + 1, ' ') != NULL) {
                seterr(err, errlen, "%s: model.merges[%d] \"%.40s\" is not \"A B\"",
                       __func__, rank, item->valuestring);
                return -1;
            }
            a = item->valuestring;
            na = (size_t)(sp - a);
            b = sp + 1;
            nb = strlen(b);
        } else if (cJSON_IsArray(item) && cJSON_GetArraySize(item) == 2
                   && cJSON_IsString(cJSON_GetArrayItem(item, 0))
                   && cJSON_IsString(cJSON_GetArrayItem(item, 1))) {
            a = cJSON_GetArrayItem(item, 0)->valuestring;
            b = cJSON_GetArrayItem(item, 1)->valuestring;
            na = strlen(a);
            nb = strlen(b);
        } else {
            seterr(err, errlen, "%s: model.merges[%d] is neither \"A B\" nor [\"A\", \"B\"]",
                   __func__, rank);
            return -1;
        }
        if (na + nb > 2 * PIC_TOK_MAX_TOKEN) {
            seterr(err, errlen, "%s: model.merges[%d] is too long", __func__, rank);
            return -1;
        }
        ia = strmap_get(&t->vocab, t->blob, a, na);
        ib = strmap_get(&t->vocab, t->blob, b, nb);
        cat = malloc(na + nb + 1);
        if (cat == NULL) {
            goto nomem;
        }
        memcpy(cat, a, na);
        memcpy(cat + na, b, nb);
        im = strmap_get(&t->vocab, t->blob, cat, na + nb);
        free(cat);
        if (ia < 0 || ib < 0 || im < 0) {
            seterr(err, errlen, "%s: model.merges[%d] (\"%.*s\" \"%.*s\"): %s is not in the vocab",
                   __func__, rank, (int)(na > 40 ? 40 : na), a, (int)(nb > 40 ? 40 : nb), b,
                   ia < 0 ? "the left token" : ib < 0 ? "the right token" : "the merged token");
            return -1;
        }
        pairmap_put(&t->merges, ia, ib, rank, im);
        rank++;
    }
    return 0;

nomem:
    seterr(err, errlen, "%s: out of memory", __func__);
    return -1;
}

static int
cmp_added_len(const void *a, const void *b)
{
    const pic_added *x = *(const pic_added *const *)a;
    const pic_added *y = *(const pic_added *const *)b;

    if (x->len != y->len) {
        return x->len > y->len ? -1 : 1;
    }
    return x->id < y->id ? -1 : x->id > y->id;
}

static int
added_set_build(pic_tokenizer *t, pic_added_set *set, int normalized)
{
    size_t i;

    set->n = 0;
    set->tok = malloc((t->n_added + 1) * sizeof(*set->tok));
    if (set->tok == NULL) {
        return -1;
    }
    memset(set->first, 0, sizeof(set->first));
    for (i = 0; i < t->n_added; i++) {
        if (t->added[i].normalized == normalized && t->added[i].len > 0) {
            set->tok[set->n++] = &t->added[i];
            set->first[(unsigned char)t->blob[t->added[i].off]] = 1;
        }
    }
    qsort(set->tok, set->n, sizeof(*set->tok), cmp_added_len);
    return 0;
}

/* Normalise s[0..n) with utf8proc options; malloc'ed result in *out. */
static int
normalize(int opts, const char *s, size_t n, char **out, size_t *out_len)
{
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t  k;

    k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                     (utf8proc_option_t)opts);
    if (k < 0) {
        return k == UTF8PROC_ERROR_NOMEM ? PIC_TOKENIZER_ENOMEM : PIC_TOKENIZER_EUTF8;
    }
    *out = (char *)dst;
    *out_len = (size_t)k;
    return 0;
}

/* Marks with a non-zero combining class in utf8proc's Unicode 15 data that
 * the `tokenizers` normaliser (older Unicode data) still treats as plain
 * starters, so they block composition and are never reordered there.  Found
 * by normalising "e X U+0301 X" for every code point with tokenizers 0.23;
 * treating them as inert below reproduces its ids exactly. */
static const int32_t stale_marks[] = {
    0x007FD, 0x00899, 0x0089A, 0x0089B, 0x008CF, 0x008D0, 0x008D1, 0x008D2, 0x008D3,
    0x00C3C, 0x00D3B, 0x00D3C, 0x00EBA, 0x01715, 0x01ABF, 0x01AC0, 0x01AC3, 0x01AC4,
    0x01ACA, 0x01DF6, 0x01DF7, 0x01DF8, 0x01DF9, 0x01DFA, 0x0A82C, 0x10EFD, 0x10EFE,
    0x10EFF, 0x10F46, 0x10F47, 0x10F4B, 0x10F4D, 0x10F4E, 0x10F4F, 0x10F50, 0x10F83,
    0x10F85, 0x11070, 0x1133B, 0x11839, 0x1183A, 0x1193D, 0x1193E, 0x11943, 0x119E0,
    0x11A34, 0x11A47, 0x11A99, 0x11D42, 0x11D44, 0x11D45, 0x11D97, 0x11F41, 0x11F42,
    0x16FF0, 0x16FF1, 0x1E4EC, 0x1E4ED, 0x1E4EE
};

static int
is_stale_mark(int32_t cp)
{
    size_t lo = 0, hi = sizeof(stale_marks) / sizeof(stale_marks[0]);

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;

        if (stale_marks[mid] == cp) {
            return 1;
        }
        if (stale_marks[mid] < cp) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return 0;
}

/* 1 if cp is left alone by every normal form and never joins the char
 * before it: a starter (ccc 0) with no decomposition that is not a mark and
 * not a Hangul jamo (the only starters that are second in a composition). */
static int
norm_inert(int32_t cp)
{
    const utf8proc_property_t *pr;

    if (cp < 0x80) {
        return 1;
    }
    if ((cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0xD7B0 && cp <= 0xD7FF)) {
        return 0;
    }
    if (is_stale_mark(cp)) {
        return 1;
    }
    pr = utf8proc_get_property(cp);
    return pr->combining_class == 0 && pr->decomp_seqindex == UINT16_MAX
           && pr->category != UTF8PROC_CATEGORY_MN && pr->category != UTF8PROC_CATEGORY_MC
           && pr->category != UTF8PROC_CATEGORY_ME;
}

static uint8_t        inert_bmp[65536 / 8];
static pthread_once_t inert_once = PTHREAD_ONCE_INIT;

static void
inert_init(void)
{
    int32_t cp;

    for (cp = 0; cp < 65536; cp++) {
        if (norm_inert(cp)) {
            inert_bmp[cp >> 3] |= (uint8_t)(1u << (cp & 7));
        }
    }
}

static inline int
is_inert(int32_t cp)
{
    if (cp < 65536) {
        return (inert_bmp[cp >> 3] >> (cp & 7)) & 1;
    }
    return norm_inert(cp);
}

/* Normalise s[0..n) (valid UTF-8) touching only what can change: text splits
 * before any inert char, so only the runs of non-inert chars, each with the
 * inert char before it, go through utf8proc.  *out = NULL when nothing
 * changed (use s); else a malloc'ed result of *out_len bytes. */
static int
normalize_runs(int opts, const char *s, size_t n, char **out, size_t *out_len)
{
    char   *buf = NULL, *q;
    size_t  cap = 0, len = 0, done = 0, i = 0, cs, ce, l, m;
    int32_t cp;
    int     rc;

    *out = NULL;
    *out_len = n;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        l = utf8_get(s + i, n - i, &cp);
        if (is_inert(cp)) {
            i += l;
            continue;
        }
        /* the run takes the inert char before it (it may compose with the
         * run), unless that is a stale mark, which composes with nothing */
        cs = i;
        if (i > done) {
            int32_t pc;

            cs = utf8_prev(s, i);
            utf8_get(s + cs, i - cs, &pc);
            if (is_stale_mark(pc)) {
                cs = i;
            }
        }
        ce = i + l;
        while (ce < n) {
            l = utf8_get(s + ce, n - ce, &cp);
            if (is_inert(cp)) {
                break;
            }
            ce += l;
        }
        rc = normalize(opts, s + cs, ce - cs, &q, &m);
        if (rc != 0) {
            free(buf);
            return rc;
        }
        if (buf == NULL && m == ce - cs && memcmp(q, s + cs, m) == 0) {
            free(q);        /* unchanged so far: keep pointing at s */
            i = ce;
            continue;
        }
        if (pic_grow((void **) &buf, &cap, len + (cs - done) + m + (n - ce) + 1, 1) != 0) {
            free(q);
            free(buf);
            return PIC_TOKENIZER_ENOMEM;
        }
        memcpy(buf + len, s + done, cs - done);
        len += cs - done;
        memcpy(buf + len, q, m);
        len += m;
        free(q);
        done = ce;
        i = ce;
    }
    if (buf != NULL) {
        memcpy(buf + len, s + done, n - done);
        len += n - done;
        *out = buf;
        *out_len = len;
    }
    return 0;
}

static int
load_added(pic_tokenizer *t, const cJSON *added, char *err, size_t errlen)
{
    const cJSON *item;
    size_t       n = 0;

    if (added == NULL || cJSON_IsNull(added)) {
        return added_set_build(t, &t->raw_set, 0) || added_set_build(t, &t->norm_set, 1)
               ? -1 : 0;
    }
    if (!cJSON_IsArray(added)) {
        seterr(err, errlen, "%s: \"added_tokens\" is not an array", __func__);
        return -1;
    }
    t->added = calloc((size_t)cJSON_GetArraySize(added) + 1, sizeof(*t->added));
    if (t->added == NULL || strmap_init(&t->added_map, (size_t)cJSON_GetArraySize(added)) != 0) {
        seterr(err, errlen, "%s: out of memory", __func__);
        return -1;
    }
    cJSON_ArrayForEach(item, added) {
        const cJSON     *content = cJSON_GetObjectItemCaseSensitive(item, "content");
        int32_t          id = json_id(cJSON_GetObjectItemCaseSensitive(item, "id"));
        pic_added       *a = &t->added[n];
        pic_strmap_slot *e;
        size_t           len;
        int              special, normalized, lstrip, rstrip, single_word;

        if (!cJSON_IsObject(item) || !cJSON_IsString(content) || id < 0) {
            seterr(err, errlen, "%s: added_tokens[%zu] needs an \"id\" in [0, %d) and a "
                   "string \"content\"", __func__, n, PIC_TOK_MAX_ID);
            return -1;
        }
        len = strlen(content->valuestring);
        if (len == 0 || len > PIC_TOK_MAX_TOKEN || !utf8_valid(content->valuestring, len)) {
            seterr(err, errlen, "%s: added_tokens[%zu]: content is empty, too long or "
                   "not UTF-8", __func__, n);
            return -1;
        }
        special = json_bool(item, "special", 0);
        normalized = json_bool(item, "normalized", 0);
        lstrip = json_bool(item, "lstrip", 0);
        rstrip = json_bool(item, "rstrip", 0);
        single_word = json_bool(item, "single_word", 0);
        if (special < 0 || normalized < 0 || lstrip < 0 || rstrip < 0 || single_word < 0) {
            seterr(err, errlen, "%s: added_tokens[%zu]: special / normalized / lstrip / "
                   "rstrip / single_word must be booleans", __func__, n);
            return -1;
        }
        e = strmap_find(&t->added_map, t->blob, content->valuestring, len);
        if (e->id >= 0) {
            seterr(err, errlen, "%s: added_tokens[%zu]: \"%.40s\" appears twice",
                   __func__, n, content->valuestring);
            return -1;
        }
        if (blob_add(t, content->valuestring, len, &e->off) != 0) {
            seterr(err, errlen, "%s: out of memory", __func__);
            return -1;
        }
        e->len = (uint32_t)len;
        e->id = id;
        t->added_map.n++;

        a->id = id;
        a->special = (uint8_t)special;
        a->normalized = (uint8_t)normalized;
        a->lstrip = (uint8_t)lstrip;
        a->rstrip = (uint8_t)rstrip;
        a->single_word = (uint8_t)single_word;
        a->off = e->off;
        a->len = e->len;
        if (normalized && t->norm) {
            char  *nb;
            size_t nl;

            if (normalize(t->norm, content->valuestring, len, &nb, &nl) != 0
                || blob_add(t, nb, nl, &a->off) != 0) {
                seterr(err, errlen, "%s: added_tokens[%zu]: cannot normalise", __func__, n);
                return -1;
            }
            a->len = (uint32_t)nl;
            free(nb);
        }
        /* an added id overrides the vocab's string and decoding of that id */
        t->str_off[id] = e->off;
        t->str_len[id] = e->len;
        t->special[id] = (uint8_t)special;
        n++;
    }
    t->n_added = n;
    if (added_set_build(t, &t->raw_set, 0) != 0 || added_set_build(t, &t->norm_set, 1) != 0) {
        seterr(err, errlen, "%s: out of memory", __func__);
        return -1;
    }
    return 0;
}

static int
norm_form(const char *type)
{
    if (strcmp(type, "NFC") == 0) {
        return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    }
    if (strcmp(type, "NFD") == 0) {
        return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    }
    if (strcmp(type, "NFKC") == 0) {
        return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    }
    if (strcmp(type, "NFKD") == 0) {
        return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    }
    return -1;
}

static int
load_normalizer(pic_tokenizer *t, const cJSON *nz, char *err, size_t errlen)
{
    const char  *type;
    const cJSON *list, *item;
    int          form;

    if (nz == NULL || cJSON_IsNull(nz)) {
        return 0;
    }
    type = json_type(nz);
    if (type == NULL) {
        seterr(err, errlen, "%s: normalizer has no \"type\"", __func__);
        return -1;
    }
    if (strcmp(type, "Sequence") == 0) {
        list = cJSON_GetObjectItemCaseSensitive(nz, "normalizers");
        if (!cJSON_IsArray(list)) {
            seterr(err, errlen, "%s: normalizer Sequence needs a \"normalizers\" array",
                   __func__);
            return -1;
        }
        cJSON_ArrayForEach(item, list) {
            type = json_type(item);
            form = type ? norm_form(type) : -1;
            if (form < 0 || (t->norm && t->norm != form)) {
                seterr(err, errlen, "%s: normalizer %s is not supported (one of NFC, NFD, "
                       "NFKC, NFKD)", __func__, type ? type : "(no type)");
                return -1;
            }
            t->norm = form;
        }
        return 0;
    }
    form = norm_form(type);
    if (form < 0) {
        seterr(err, errlen, "%s: normalizer %s is not supported (one of NFC, NFD, NFKC, "
               "NFKD, Sequence)", __func__, type);
        return -1;
    }
    t->norm = form;
    return 0;
}

/* --- regex: the split regex as tokenizers' Oniguruma reads it --- */

/*
 * PCRE2 10.42 (Debian 12) differs from the Oniguruma inside `tokenizers` in
 * two ways that change pieces: its \s also takes U+180E, and its Unicode
 * tables are older, so letters, marks and numbers added since are \p{Cn} to
 * it.  The pattern is rewritten before compiling: \s / \S become the exact
 * White_Space set, and \p{L} \p{M} \p{N} gain the code points that utf8proc
 * (newer tables) classes so but PCRE2 does not know.  Characters newer than
 * utf8proc's tables still differ (see the report of make test).
 */

#define PIC_WS_CLASS "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
                     "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

typedef struct {
    char  *p;
    size_t n, cap;
    int    oom;
} pic_sbuf;

static void
sbuf_add(pic_sbuf *b, const char *s, size_t n)
{
    if (b->oom) {
        return;
    }
    if (pic_grow((void **) &b->p, &b->cap, b->n + n + 1, 1) != 0) {
        b->oom = 1;
        return;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void
sbuf_str(pic_sbuf *b, const char *s)
{
    sbuf_add(b, s, strlen(s));
}

/* class text ("\x{..}-\x{..}...") of L, M, N code points PCRE2 lacks */
static pic_sbuf       gap_class[3];
static pthread_once_t gap_once = PTHREAD_ONCE_INIT;

static void
gap_add_range(pic_sbuf *b, int32_t lo, int32_t hi)
{
    char r[40];

    if (lo == hi) {
        snprintf(r, sizeof(r), "\\x{%X}", (unsigned)lo);
    } else {
        snprintf(r, sizeof(r), "\\x{%X}-\\x{%X}", (unsigned)lo, (unsigned)hi);
    }
    sbuf_str(b, r);
}

static void
gap_init(void)
{
    pcre2_code       *cn;
    pcre2_match_data *md;
    int               ec, k, cur = -1;
    PCRE2_SIZE        eo;
    int32_t           cp, lo = 0;
    char              u[4];

    cn = pcre2_compile((PCRE2_SPTR)"\\p{Cn}", PCRE2_ZERO_TERMINATED,
                       PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &ec, &eo, NULL);
    md = pcre2_match_data_create(1, NULL);
    if (cn == NULL || md == NULL) {
        pcre2_code_free(cn);
        pcre2_match_data_free(md);
        return;
    }
    for (cp = 0x80; cp <= 0x110000; cp++) {
        utf8proc_category_t c = cp < 0x110000 ? utf8proc_category(cp) : UTF8PROC_CATEGORY_CN;

        k = -1;
        if (c != UTF8PROC_CATEGORY_CN && !(cp >= 0xD800 && cp < 0xE000)) {
            k = c <= UTF8PROC_CATEGORY_LO ? 0 : c <= UTF8PROC_CATEGORY_ME ? 1
                : c <= UTF8PROC_CATEGORY_NO ? 2 : -1;
        }
        if (k >= 0 && pcre2_match(cn, (PCRE2_SPTR)u, utf8_put((uint32_t)cp, u), 0,
                                  0, md, NULL) < 0) {
            k = -1;     /* PCRE2 knows it: nothing to add */
        }
        if (k != cur) {
            if (cur >= 0) {
                gap_add_range(&gap_class[cur], lo, cp - 1);
            }
            cur = k;
            lo = cp;
        }
    }
    pcre2_code_free(cn);
    pcre2_match_data_free(md);
}

/* Rewrite pattern[0..len) for PCRE2 as described above; NULL on ENOMEM. */
static char *
regex_rewrite(const char *pat, size_t len, size_t *out_len)
{
    pic_sbuf b = { 0 };
    size_t   i = 0, j;
    int      in_class = 0;

    pthread_once(&gap_once, gap_init);
    sbuf_add(&b, "", 0);
    while (i < len) {
        char c = pat[i];

        if (c == '\\' && i + 1 < len) {
            char d = pat[i + 1];

            if (d == 'p' || d == 'P') {
                const char *name = pat + i + 2;
                size_t      nl = 0, end = i + 3;
                int         k = -1;

                if (i + 2 < len && pat[i + 2] == '{') {
                    for (j = i + 3; j < len && pat[j] != '}'; j++) {
                    }
                    name = pat + i + 3;
                    nl = j - (i + 3);
                    end = j + 1;
                } else if (i + 2 < len) {
                    nl = 1;
                }
                if (nl == 1) {
                    k = name[0] == 'L' ? 0 : name[0] == 'M' ? 1 : name[0] == 'N' ? 2 : -1;
                }
                if (end > len) {
                    end = len;
                }
                if (k >= 0 && gap_class[k].n > 0 && !(d == 'P' && in_class)) {
                    sbuf_str(&b, in_class ? "" : d == 'p' ? "[" : "[^");
                    sbuf_str(&b, k == 0 ? "\\p{L}" : k == 1 ? "\\p{M}" : "\\p{N}");
                    sbuf_add(&b, gap_class[k].p, gap_class[k].n);
                    sbuf_str(&b, in_class ? "" : "]");
                } else {
                    sbuf_add(&b, pat + i, end - i);
                }
                i = end;
                continue;
            }
            if (d == 's') {
                sbuf_str(&b, in_class ? PIC_WS_CLASS : "[" PIC_WS_CLASS "]");
                i += 2;
                continue;
            }
            if (d == 'S' && !in_class) {
                sbuf_str(&b, "[^" PIC_WS_CLASS "]");
                i += 2;
                continue;
            }
            if (d == 'Q') {     /* \Q...\E quotes verbatim */
                for (j = i + 2; j + 1 < len && !(pat[j] == '\\' && pat[j + 1] == 'E'); j++) {
                }
                j = j + 1 < len ? j + 2 : len;
                sbuf_add(&b, pat + i, j - i);
                i = j;
                continue;
            }
            sbuf_add(&b, pat + i, 2);
            i += 2;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            j = i + 1;
            if (j < len && pat[j] == '^') {
                j++;
            }
            if (j < len && pat[j] == ']') {     /* a leading ] is literal */
                j++;
            }
            sbuf_add(&b, pat + i, j - i);
            i = j;
            continue;
        }
        if (in_class && c == '[' && i + 1 < len && pat[i + 1] == ':') {
            for (j = i + 2; j + 1 < len && !(pat[j] == ':' && pat[j + 1] == ']'); j++) {
            }
            j = j + 1 < len ? j + 2 : len;
            sbuf_add(&b, pat + i, j - i);
            i = j;
            continue;
        }
        if (in_class && c == ']') {
            in_class = 0;
        }
        sbuf_add(&b, pat + i, 1);
        i++;
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *out_len = b.n;
    return b.p;
}

static int
add_regex_stage(pic_tokenizer *t, const char *pattern, size_t len, int literal,
                int removed, int invert, char *err, size_t errlen)
{
    pic_stage  *st;
    int         ec;
    PCRE2_SIZE  eo;
    char        msg[160];

    if (t->n_stages >= PIC_TOK_MAX_STAGES) {
        seterr(err, errlen, "%s: more than %d pre-tokenizer stages", __func__,
               PIC_TOK_MAX_STAGES);
        return -1;
    }
    st = &t->stage[t->n_stages];
    st->kind = PIC_STAGE_SPLIT;
    st->removed = removed;
    st->invert = invert;
    if (literal) {
        st->re = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_LITERAL,
                               &ec, &eo, NULL);
    } else {
        size_t rl;
        char  *rw = regex_rewrite(pattern, len, &rl);

        if (rw == NULL) {
            seterr(err, errlen, "%s: out of memory", __func__);
            return -1;
        }
        st->re = pcre2_compile((PCRE2_SPTR)rw, rl,
                               PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C,
                               &ec, &eo, NULL);
        free(rw);
        eo = eo > len ? len : eo;   /* an offset in the rewritten text */
    }
    if (st->re == NULL) {
        pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof(msg));
        seterr(err, errlen, "%s: split regex does not compile at offset %zu: %s",
               __func__, (size_t)eo, msg);
        return -1;
    }
    t->n_stages++;
    pcre2_jit_compile(st->re, PCRE2_JIT_COMPLETE);  /* no JIT: interpreter */
    return 0;
}

static int
load_one_pretok(pic_tokenizer *t, const cJSON *pt, int *have_bl, char *err,
                size_t errlen)
{
    const char  *type = json_type(pt);
    const cJSON *pat, *v;
    int          removed, invert, prefix, regex;

    if (type == NULL) {
        seterr(err, errlen, "%s: pre_tokenizer without a \"type\"", __func__);
        return -1;
    }
    if (*have_bl) {
        seterr(err, errlen, "%s: pre_tokenizer %s after ByteLevel is not supported",
               __func__, type);
        return -1;
    }
    if (strcmp(type, "Split") == 0) {
        pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
        v = cJSON_GetObjectItemCaseSensitive(pt, "behavior");
        if (!cJSON_IsString(v)) {
            seterr(err, errlen, "%s: Split needs a \"behavior\" string", __func__);
            return -1;
        }
        if (strcmp(v->valuestring, "Isolated") == 0) {
            removed = 0;
        } else if (strcmp(v->valuestring, "Removed") == 0) {
            removed = 1;
        } else {
            seterr(err, errlen, "%s: Split behavior \"%.40s\" is not supported "
                   "(Isolated, Removed)", __func__, v->valuestring);
            return -1;
        }
        invert = json_bool(pt, "invert", 0);
        if (invert < 0) {
            seterr(err, errlen, "%s: Split \"invert\" must be a boolean", __func__);
            return -1;
        }
        if (!cJSON_IsObject(pat)) {
            seterr(err, errlen, "%s: Split needs a \"pattern\" object", __func__);
            return -1;
        }
        v = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        if (cJSON_IsString(v)) {
            return add_regex_stage(t, v->valuestring, strlen(v->valuestring), 0,
                                   removed, invert, err, errlen);
        }
        v = cJSON_GetObjectItemCaseSensitive(pat, "String");
        if (cJSON_IsString(v) && v->valuestring[0] != '\0') {
            return add_regex_stage(t, v->valuestring, strlen(v->valuestring), 1,
                                   removed, invert, err, errlen);
        }
        seterr(err, errlen, "%s: Split pattern needs a \"Regex\" or non-empty \"String\"",
               __func__);
        return -1;
    }
    if (strcmp(type, "Digits") == 0) {
        /* tokenizers' Digits: every run of digits (or every digit, with
         * individual_digits) its own piece, i.e. an Isolated split */
        int one = json_bool(pt, "individual_digits", 0);

        if (one < 0) {
            seterr(err, errlen, "%s: Digits \"individual_digits\" must be a boolean",
                   __func__);
            return -1;
        }
        return add_regex_stage(t, one ? "\\p{N}" : "\\p{N}+", one ? 5 : 6, 0, 0, 0,
                               err, errlen);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        prefix = json_bool(pt, "add_prefix_space", 1);
        regex = json_bool(pt, "use_regex", 1);
        if (prefix < 0 || regex < 0) {
            seterr(err, errlen, "%s: ByteLevel flags must be booleans", __func__);
            return -1;
        }
        if (prefix) {
            if (t->n_stages >= PIC_TOK_MAX_STAGES) {
                seterr(err, errlen, "%s: too many pre-tokenizer stages", __func__);
                return -1;
            }
            t->stage[t->n_stages++].kind = PIC_STAGE_PREFIX_SPACE;
        }
        if (regex && add_regex_stage(t, gpt2_regex, strlen(gpt2_regex), 0, 0, 0,
                                     err, errlen) != 0) {
            return -1;
        }
        *have_bl = 1;
        return 0;
    }
    seterr(err, errlen, "%s: pre_tokenizer %s is not supported (Split, Digits, ByteLevel, "
           "Sequence)",
           __func__, type);
    return -1;
}

static int
load_pretok(pic_tokenizer *t, const cJSON *pt, char *err, size_t errlen)
{
    const cJSON *list, *item;
    const char  *type;
    int          have_bl = 0;

    if (!cJSON_IsObject(pt)) {
        seterr(err, errlen, "%s: \"pre_tokenizer\" is missing: not a byte-level BPE",
               __func__);
        return -1;
    }
    type = json_type(pt);
    if (type != NULL && strcmp(type, "Sequence") == 0) {
        list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        if (!cJSON_IsArray(list)) {
            seterr(err, errlen, "%s: pre_tokenizer Sequence needs a \"pretokenizers\" array",
                   __func__);
            return -1;
        }
        cJSON_ArrayForEach(item, list) {
            if (load_one_pretok(t, item, &have_bl, err, errlen) != 0) {
                return -1;
            }
        }
    } else if (load_one_pretok(t, pt, &have_bl, err, errlen) != 0) {
        return -1;
    }
    if (!have_bl) {
        seterr(err, errlen, "%s: pre_tokenizer has no ByteLevel step: not a byte-level BPE",
               __func__);
        return -1;
    }
    return 0;
}

/* post_processor / decoder: null, ByteLevel, or a Sequence of ByteLevel. */
static int
check_bytelevel(const cJSON *c, const char *what, const char *list_name,
                char *err, size_t errlen)
{
    const char  *type;
    const cJSON *list, *item;

    if (c == NULL || cJSON_IsNull(c)) {
        return 0;
    }
    type = json_type(c);
    if (type != NULL && strcmp(type, "ByteLevel") == 0) {
        return 0;
    }
    if (type != NULL && strcmp(type, "Sequence") == 0) {
        list = cJSON_GetObjectItemCaseSensitive(c, list_name);
        if (cJSON_IsArray(list)) {
            cJSON_ArrayForEach(item, list) {
                if (check_bytelevel(item, what, list_name, err, errlen) != 0) {
                    return -1;
                }
            }
            return 0;
        }
    }
    seterr(err, errlen, "%s: %s %s is not supported (null or ByteLevel)", __func__, what,
           type ? type : "(no type)");
    return -1;
}


/* --- loading --- */

pic_tokenizer *
pic_tokenizer_load_json(const char *json, size_t len, char *err, size_t errlen)
{
    pic_tokenizer *t = NULL;
    cJSON         *root, *model, *vocab, *added, *item;
    const char    *ep;
    int32_t        max_id = -1, id;
    size_t         i;

    pthread_once(&byte_map_once, byte_map_init);
    pthread_once(&inert_once, inert_init);
    seterr(err, errlen, "%s: unknown error", __func__);
    if (json == NULL) {
        seterr(err, errlen, "%s: no input", __func__);
        return NULL;
    }
    root = cJSON_ParseWithLength(json, len);
    if (root == NULL) {
        ep = cJSON_GetErrorPtr();
        if (ep != NULL && ep >= json && ep <= json + len) {
            seterr(err, errlen, "%s: tokenizer.json is not valid JSON (near byte %zu)",
                   __func__, (size_t)(ep - json));
        } else {
            seterr(err, errlen, "%s: tokenizer.json is not valid JSON", __func__);
        }
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        seterr(err, errlen, "%s: tokenizer.json is not a JSON object", __func__);
        goto fail;
    }
    model = cJSON_GetObjectItemCaseSensitive(root, "model");
    vocab = cJSON_IsObject(model) ? cJSON_GetObjectItemCaseSensitive(model, "vocab") : NULL;
    added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");

    /* the id range first: tables are indexed by id */
    if (cJSON_IsObject(vocab)) {
        cJSON_ArrayForEach(item, vocab) {
            id = json_id(item);
            max_id = id > max_id ? id : max_id;
        }
    }
    if (cJSON_IsArray(added)) {
        cJSON_ArrayForEach(item, added) {
            id = json_id(cJSON_GetObjectItemCaseSensitive(item, "id"));
            max_id = id > max_id ? id : max_id;
        }
    }

    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        seterr(err, errlen, "%s: out of memory", __func__);
        goto fail;
    }
    t->n_ids = (size_t)(max_id + 1);
    if (t->n_ids > 0) {
        t->str_off = malloc(t->n_ids * sizeof(*t->str_off));
        t->str_len = calloc(t->n_ids, sizeof(*t->str_len));
        t->dec_off = calloc(t->n_ids, sizeof(*t->dec_off));
        t->dec_len = calloc(t->n_ids, sizeof(*t->dec_len));
        t->special = calloc(t->n_ids, sizeof(*t->special));
        if (!t->str_off || !t->str_len || !t->dec_off || !t->dec_len || !t->special) {
            seterr(err, errlen, "%s: out of memory", __func__);
            goto fail;
        }
        for (i = 0; i < t->n_ids; i++) {
            t->str_off[i] = UINT32_MAX;
        }
    }

    if (load_model(t, model, err, errlen) != 0
        || load_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"),
                           err, errlen) != 0
        || load_added(t, added, err, errlen) != 0
        || load_pretok(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"),
                       err, errlen) != 0
        || check_bytelevel(cJSON_GetObjectItemCaseSensitive(root, "post_processor"),
                           "post_processor", "processors", err, errlen) != 0
        || check_bytelevel(cJSON_GetObjectItemCaseSensitive(root, "decoder"),
                           "decoder", "decoders", err, errlen) != 0) {
        goto fail;
    }
    for (i = 0; i < t->n_ids; i++) {
        if (t->str_off[i] != UINT32_MAX
            && decode_piece(t, t->blob + t->str_off[i], t->str_len[i],
                            &t->dec_off[i], &t->dec_len[i]) != 0) {
            seterr(err, errlen, "%s: out of memory", __func__);
            goto fail;
        }
    }
    t->cache = calloc(1, sizeof(*t->cache));
    if (t->cache == NULL) {
        seterr(err, errlen, "%s: out of memory", __func__);
        goto fail;
    }
    for (i = 0; i < PIC_TOK_CACHE_LOCKS; i++) {
        pthread_mutex_init(&t->cache->lock[i], NULL);
    }
    cJSON_Delete(root);
    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }
    return t;

fail:
    cJSON_Delete(root);
    pic_tokenizer_free(t);
    return NULL;
}

pic_tokenizer *
pic_tokenizer_load(const char *path, char *err, size_t errlen)
{
    pic_tokenizer *t;
    struct stat    st;
    FILE          *f;
    char          *buf;
    size_t         n;

    if (path == NULL) {
        seterr(err, errlen, "%s: no path", __func__);
        return NULL;
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        seterr(err, errlen, "%s: cannot open %s: %s", __func__, path, strerror(errno));
        return NULL;
    }
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        seterr(err, errlen, "%s: %s is not a regular file", __func__, path);
        fclose(f);
        return NULL;
    }
    if ((unsigned long long)st.st_size > PIC_TOK_MAX_FILE) {
        seterr(err, errlen, "%s: %s is %lld bytes (max %zu)", __func__, path,
               (long long)st.st_size, PIC_TOK_MAX_FILE);
        fclose(f);
        return NULL;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        seterr(err, errlen, "%s: out of memory reading %s", __func__, path);
        fclose(f);
        return NULL;
    }
    n = fread(buf, 1, (size_t)st.st_size, f);
    fclose(f);
    if (n != (size_t)st.st_size) {
        seterr(err, errlen, "%s: short read on %s", __func__, path);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    t = pic_tokenizer_load_json(buf, n, err, errlen);
    free(buf);
    if (t == NULL && err != NULL && errlen > 0) {
        /* prefix the path so the message says which file */
        char *m = strdup(err);

        if (m != NULL) {
            snprintf(err, errlen, "%s: %s", path, m);
            free(m);
        }
    }
    return t;
}

void
pic_tokenizer_free(pic_tokenizer *t)
{
    int i;

    if (t == NULL) {
        return;
    }
    for (i = 0; i < t->n_stages; i++) {
        pcre2_code_free(t->stage[i].re);
    }
    if (t->cache != NULL) {
        for (i = 0; i < PIC_TOK_CACHE_LOCKS; i++) {
            pthread_mutex_destroy(&t->cache->lock[i]);
        }
        free(t->cache);
    }
    free(t->raw_set.tok);
    free(t->norm_set.tok);
    free(t->added);
    free(t->vocab.slots);
    free(t->added_map.slots);
    free(t->merges.slots);
    free(t->str_off);
    free(t->str_len);
    free(t->dec_off);
    free(t->dec_len);
    free(t->special);
    free(t->blob);
    free(t);
}


/* --- queries --- */

int
pic_tokenizer_token_id(const pic_tokenizer *t, const char *piece)
{
    size_t  n;
    int32_t id;

    if (t == NULL || piece == NULL) {
        return -1;
    }
    n = strlen(piece);
    id = strmap_get(&t->added_map, t->blob, piece, n);
    if (id >= 0) {
        return id;
    }
    return strmap_get(&t->vocab, t->blob, piece, n);
}

size_t
pic_tokenizer_vocab_size(const pic_tokenizer *t)
{
    return t ? t->n_ids : 0;
}

int
pic_tokenizer_is_special(const pic_tokenizer *t, int32_t id)
{
    return t && id >= 0 && (size_t)id < t->n_ids && t->special[id];
}

const char *
pic_tokenizer_token_str(const pic_tokenizer *t, int32_t id)
{
    if (t == NULL || id < 0 || (size_t)id >= t->n_ids || t->str_off[id] == UINT32_MAX) {
        return NULL;
    }
    return t->blob + t->str_off[id];
}

const char *
pic_tokenizer_token_bytes(const pic_tokenizer *t, int32_t id, size_t *len)
{
    if (t == NULL || id < 0 || (size_t)id >= t->n_ids || t->str_off[id] == UINT32_MAX) {
        if (len) {
            *len = 0;
        }
        return NULL;
    }
    if (len) {
        *len = t->dec_len[id];
    }
    return t->blob + t->dec_off[id];
}

void
pic_tokenizer_advance(const pic_tokenizer *t, const int32_t *ids, size_t n, size_t end,
                      int last, size_t *tok, size_t *byte)
{
    while (*tok < n && (*byte < end || last)) {
        size_t bl = 0;

        if (pic_tokenizer_token_bytes(t, ids[*tok], &bl) == NULL) {
            bl = 0;
        }
        *byte += bl;
        (*tok)++;
    }
}


/* --- encode: word cache --- */

static int
cache_get(pic_cache *c, uint64_t h, const char *w, size_t n, int32_t *ids)
{
    size_t          i = (size_t)h & (PIC_TOK_CACHE_SLOTS - 1);
    pic_cache_slot *s = &c->slot[i];
    pthread_mutex_t *m = &c->lock[i & (PIC_TOK_CACHE_LOCKS - 1)];
    int             k = -1;

    if (pthread_mutex_trylock(m) != 0) {
        return -1;
    }
    if (s->len == n && s->h == h && memcmp(s->word, w, n) == 0) {
        k = s->n_ids;
        memcpy(ids, s->ids, (size_t)k * sizeof(*ids));
    }
    pthread_mutex_unlock(m);
    return k;
}

static void
cache_put(pic_cache *c, uint64_t h, const char *w, size_t n, const int32_t *ids, size_t k)
{
    size_t          i = (size_t)h & (PIC_TOK_CACHE_SLOTS - 1);
    pic_cache_slot *s = &c->slot[i];
    pthread_mutex_t *m = &c->lock[i & (PIC_TOK_CACHE_LOCKS - 1)];

    if (pthread_mutex_trylock(m) != 0) {
        return;
    }
    s->h = h;
    s->len = (uint8_t)n;
    s->n_ids = (uint8_t)k;
    memcpy(s->word, w, n);
    memcpy(s->ids, ids, k * sizeof(*ids));
    pthread_mutex_unlock(m);
}


/* --- encode: BPE --- */

typedef struct {
    int32_t id;                 /* token id; the symbol is dead when len == 0 */
    int32_t prev, next;         /* neighbours, -1 at the ends */
    int32_t len;                /* bytes covered */
} pic_sym;

typedef struct {
    int32_t rank;
    int32_t pos;                /* left symbol */
    int32_t id;                 /* merged id the pair had when queued */
} pic_merge;

typedef struct {
    const pic_tokenizer *t;
    unsigned             flags;
    int32_t             *ids;   /* (cap_ids) output */
    size_t               n_ids, cap_ids;
    pcre2_match_data    *md;
    pic_sym             *sym;   /* (cap_sym) symbols of the current word */
    size_t               cap_sym;
    pic_merge           *heap;  /* (cap_heap) */
    size_t               cap_heap;
    char                *tmp;   /* (cap_tmp) scratch: mapped word */
    size_t               cap_tmp;
    pic_tokenizer_piece_fn piece_fn;  /* pic_tokenizer_split: pieces, no BPE */
    void                *piece_ctx;
} pic_enc;

static inline int
enc_push(pic_enc *e, int32_t id)
{
    if (e->n_ids == e->cap_ids
        && pic_grow((void **) &e->ids, &e->cap_ids, e->n_ids + 1, sizeof(*e->ids)) != 0) {
        return PIC_TOKENIZER_ENOMEM;
    }
    e->ids[e->n_ids++] = id;
    return 0;
}

static inline int
merge_less(const pic_merge *a, const pic_merge *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void
heap_push(pic_merge *h, size_t *n, pic_merge m)
{
    size_t i = (*n)++;

    while (i > 0) {
        size_t p = (i - 1) / 2;

        if (!merge_less(&m, &h[p])) {
            break;
        }
        h[i] = h[p];
        i = p;
    }
    h[i] = m;
}

static pic_merge
heap_pop(pic_merge *h, size_t *n)
{
    pic_merge top = h[0], last = h[--(*n)];
    size_t    i = 0;

    for (;;) {
        size_t c = 2 * i + 1;

        if (c >= *n) {
            break;
        }
        if (c + 1 < *n && merge_less(&h[c + 1], &h[c])) {
            c++;
        }
        if (!merge_less(&h[c], &last)) {
            break;
        }
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) {
        h[i] = last;
    }
    return top;
}

static int
bpe_queue(pic_enc *e, size_t *nh, int32_t pos)
{
    const pic_pairmap_slot *m;
    int32_t                 nx = e->sym[pos].next;
    pic_merge               q;

    if (nx < 0) {
        return 0;
    }
    m = pairmap_get(&e->t->merges, e->sym[pos].id, e->sym[nx].id);
    if (m == NULL) {
        return 0;
    }
    if (*nh == e->cap_heap
        && pic_grow((void **) &e->heap, &e->cap_heap, *nh + 1, sizeof(*e->heap)) != 0) {
        return PIC_TOKENIZER_ENOMEM;
    }
    q.rank = m->rank;
    q.pos = pos;
    q.id = m->id;
    heap_push(e->heap, nh, q);
    return 0;
}

/* Tokenize one pre-tokenized word (raw bytes) and append its ids. */
static int
bpe_word(pic_enc *e, const char *w, size_t n)
{
    const pic_tokenizer *t = e->t;
    int32_t              cached[PIC_TOK_CACHE_IDS];
    size_t               nsym = 0, nh = 0, i, first_id = e->n_ids;
    uint64_t             h = 0;
    int                  k, last_unk = 0;

    if (n == 0) {
        return 0;
    }
    if (n <= PIC_TOK_CACHE_WORD) {
        h = XXH3_64bits(w, n);
        k = cache_get(t->cache, h, w, n, cached);
        if (k >= 0) {
            for (i = 0; i < (size_t)k; i++) {
                if (enc_push(e, cached[i]) != 0) {
                    return PIC_TOKENIZER_ENOMEM;
                }
            }
            return 0;
        }
    }
    if (t->ignore_merges) {
        size_t  m = 0;
        int32_t id;

        if (pic_grow((void **) &e->tmp, &e->cap_tmp, 2 * n + 1, 1) != 0) {
            return PIC_TOKENIZER_ENOMEM;
        }
        for (i = 0; i < n; i++) {
            m += utf8_put(byte_to_cp[(unsigned char)w[i]], e->tmp + m);
        }
        id = strmap_get(&t->vocab, t->blob, e->tmp, m);
        if (id >= 0) {
            return enc_push(e, id);
        }
    }
    if (pic_grow((void **) &e->sym, &e->cap_sym, n, sizeof(*e->sym)) != 0) {
        return PIC_TOKENIZER_ENOMEM;
    }
    for (i = 0; i < n; i++) {
        int32_t id = t->byte_id[(unsigned char)w[i]];

        if (id < 0) {
            /* no such char in the vocab: unk (fused if asked) or dropped */
            if (t->unk_id < 0) {
                continue;
            }
            if (t->fuse_unk && last_unk) {
                e->sym[nsym - 1].len++;
                continue;
            }
            id = t->unk_id;
            last_unk = 1;
        } else {
            last_unk = 0;
        }
        e->sym[nsym].id = id;
        e->sym[nsym].prev = (int32_t)nsym - 1;
        e->sym[nsym].next = (int32_t)nsym + 1;
        e->sym[nsym].len = 1;
        nsym++;
    }
    if (nsym == 0) {
        return 0;
    }
    e->sym[nsym - 1].next = -1;
    for (i = 0; i + 1 < nsym; i++) {
        if (bpe_queue(e, &nh, (int32_t)i) != 0) {
            return PIC_TOKENIZER_ENOMEM;
        }
    }
    while (nh > 0) {
        pic_merge               top = heap_pop(e->heap, &nh);
        pic_sym                *s = &e->sym[top.pos];
        const pic_pairmap_slot *m;
        int32_t                 nx;

        if (s->len == 0 || s->next < 0) {
            continue;
        }
        nx = s->next;
        m = pairmap_get(&t->merges, s->id, e->sym[nx].id);
        if (m == NULL || m->id != top.id) {
            continue;   /* stale: a neighbour changed since it was queued */
        }
        s->id = top.id;
        s->len += e->sym[nx].len;
        s->next = e->sym[nx].next;
        e->sym[nx].len = 0;
        if (s->next >= 0) {
            e->sym[s->next].prev = top.pos;
        }
        if ((s->prev >= 0 && bpe_queue(e, &nh, s->prev) != 0)
            || bpe_queue(e, &nh, top.pos) != 0) {
            return PIC_TOKENIZER_ENOMEM;
        }
    }
    for (i = 0; i < nsym; i++) {
        if (e->sym[i].len > 0 && enc_push(e, e->sym[i].id) != 0) {
            return PIC_TOKENIZER_ENOMEM;
        }
    }
    if (n <= PIC_TOK_CACHE_WORD && e->n_ids - first_id <= PIC_TOK_CACHE_IDS) {
        cache_put(t->cache, h, w, n, e->ids + first_id, e->n_ids - first_id);
    }
    return 0;
}


/* --- encode: pre-tokenizer stages --- */

static int enc_stage(pic_enc *e, int k, const char *p, size_t n);

/* Run stage k's regex over p[0..n) and pass pieces to stage k + 1. */
static int
enc_split(pic_enc *e, int k, const char *p, size_t n)
{
    const pic_stage *st = &e->t->stage[k];
    PCRE2_SIZE      *ov;
    size_t           off = 0, last = 0, s, end;
    int              rc, keep_match, keep_gap;

    keep_match = !st->removed || st->invert;
    keep_gap = !st->removed || !st->invert;
    while (off < n) {
        rc = pcre2_match(st->re, (PCRE2_SPTR)p, n, off, PCRE2_NO_UTF_CHECK, e->md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
            rc = pcre2_match(st->re, (PCRE2_SPTR)p, n, off,
                             PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, e->md, NULL);
        }
        if (rc == PCRE2_ERROR_NOMATCH) {
            break;
        }
        if (rc < 0) {
            return rc == PCRE2_ERROR_NOMEMORY ? PIC_TOKENIZER_ENOMEM : PIC_TOKENIZER_EREGEX;
        }
        ov = pcre2_get_ovector_pointer(e->md);
        s = ov[0];
        end = ov[1];
        if (s > n || end > n || end < s) {
            return PIC_TOKENIZER_EREGEX;   /* \K or lookbehind games */
        }
        if (s > last && keep_gap && (rc = enc_stage(e, k + 1, p + last, s - last)) != 0) {
            return rc;
        }
        if (end > s && keep_match && (rc = enc_stage(e, k + 1, p + s, end - s)) != 0) {
            return rc;
        }
        last = end > last ? end : (s > last ? s : last);
        if (end > s) {
            off = end;
        } else {
            /* empty match: it still splits there; step over one char */
            int32_t cp;

            off = s + utf8_get(p + s, n - s, &cp);
        }
    }
    if (last < n && keep_gap) {
        return enc_stage(e, k + 1, p + last, n - last);
    }
    return 0;
}

static int
enc_stage(pic_enc *e, int k, const char *p, size_t n)
{
    char *q;
    int   rc;

    if (n == 0) {
        return 0;
    }
    if (k == e->t->n_stages) {
        return e->piece_fn ? e->piece_fn(e->piece_ctx, p, n, -1) : bpe_word(e, p, n);
    }
    if (e->t->stage[k].kind == PIC_STAGE_SPLIT) {
        return enc_split(e, k, p, n);
    }
    /* ByteLevel add_prefix_space: a piece not starting with ' ' gets one */
    if (p[0] == ' ') {
        return enc_stage(e, k + 1, p, n);
    }
    q = malloc(n + 1);
    if (q == NULL) {
        return PIC_TOKENIZER_ENOMEM;
    }
    q[0] = ' ';
    memcpy(q + 1, p, n);
    rc = enc_stage(e, k + 1, q, n + 1);
    free(q);
    return rc;
}


/* --- encode: added tokens and normalisation --- */

typedef int (*pic_text_fn)(pic_enc *e, const char *p, size_t n);

/* Split p[0..n) on the added tokens of set (as tokenizers' find_matches):
 * tokens become ids, the text between goes to fn. */
static int
enc_added(pic_enc *e, const pic_added_set *set, const char *p, size_t n, pic_text_fn fn)
{
    size_t i = 0, start_off = 0, j;
    int    rc;

    if (set->n == 0) {
        return fn(e, p, n);
    }
    while (i < n) {
        const pic_added *a = NULL;
        size_t           s, end;
        int32_t          cp;

        if (!set->first[(unsigned char)p[i]]) {
            i++;
            continue;
        }
        for (j = 0; j < set->n; j++) {
            const pic_added *c = set->tok[j];

            if (c->len <= n - i && memcmp(p + i, e->t->blob + c->off, c->len) == 0) {
                a = c;
                break;
            }
        }
        if (a == NULL) {
            i++;
            continue;
        }
        s = i;
        end = i + a->len;
        i = end;
        if (a->special && (e->flags & PIC_TOKENIZER_SPLIT_SPECIAL)) {
            continue;
        }
        if (a->single_word) {
            int32_t before = -1, after = -1;

            if (s > 0) {
                utf8_get(p + utf8_prev(p, s), s - utf8_prev(p, s), &before);
            }
            if (end < n) {
                utf8_get(p + end, n - end, &after);
            }
            if (is_word_char(before) || is_word_char(after)) {
                continue;
            }
        }
        if (s < start_off) {
            continue;
        }
        if (a->lstrip) {
            size_t ns = s;

            while (ns > start_off) {
                size_t b = utf8_prev(p, ns);

                utf8_get(p + b, ns - b, &cp);
                if (!is_white(cp)) {
                    break;
                }
                ns = b;
            }
            s = ns;
        }
        if (a->rstrip) {
            while (end < n) {
                size_t l = utf8_get(p + end, n - end, &cp);

                if (!is_white(cp)) {
                    break;
                }
                end += l;
            }
            i = end;
        }
        if (s > start_off && (rc = fn(e, p + start_off, s - start_off)) != 0) {
            return rc;
        }
        rc = e->piece_fn ? e->piece_fn(e->piece_ctx, p + s, end - s, a->id)
                         : enc_push(e, a->id);
        if (rc != 0) {
            return rc;
        }
        start_off = end;
    }
    if (start_off < n) {
        return fn(e, p + start_off, n - start_off);
    }
    return 0;
}

static int
enc_pretok(pic_enc *e, const char *p, size_t n)
{
    return enc_stage(e, 0, p, n);
}

/* Text between raw-matched added tokens: normalise, then normalized tokens. */
static int
enc_normalized(pic_enc *e, const char *p, size_t n)
{
    char  *q;
    size_t m;
    int    rc;

    if (e->t->norm == 0) {
        return enc_added(e, &e->t->norm_set, p, n, enc_pretok);
    }
    rc = normalize_runs(e->t->norm, p, n, &q, &m);
    if (rc != 0) {
        return rc;
    }
    rc = enc_added(e, &e->t->norm_set, q ? q : p, m, enc_pretok);
    free(q);
    return rc;
}

static int
enc_run(pic_enc *e, const char *text, size_t len)
{
    int rc;

    if (len == 0) {
        return PIC_TOKENIZER_OK;
    }
    if (!utf8_valid(text, len)) {
        return PIC_TOKENIZER_EUTF8;
    }
    e->md = pcre2_match_data_create(1, NULL);
    if (e->md == NULL) {
        return PIC_TOKENIZER_ENOMEM;
    }
    rc = enc_added(e, &e->t->raw_set, text, len, enc_normalized);
    pcre2_match_data_free(e->md);
    free(e->sym);
    free(e->heap);
    free(e->tmp);
    return rc;
}

int
pic_tokenizer_encode_flags(const pic_tokenizer *t, const char *text, size_t len,
                           unsigned flags, int32_t **ids, size_t *n_ids)
{
    pic_enc e;
    int     rc;

    if (ids == NULL || n_ids == NULL) {
        return PIC_TOKENIZER_EINVAL;
    }
    *ids = NULL;
    *n_ids = 0;
    if (t == NULL || (text == NULL && len > 0)) {
        return PIC_TOKENIZER_EINVAL;
    }
    memset(&e, 0, sizeof(e));
    e.t = t;
    e.flags = flags;
    rc = enc_run(&e, text, len);
    if (rc != 0 || e.n_ids == 0) {
        free(e.ids);
        return rc;
    }
    *ids = e.ids;
    *n_ids = e.n_ids;
    return PIC_TOKENIZER_OK;
}

int
pic_tokenizer_split(const pic_tokenizer *t, const char *text, size_t len,
                    unsigned flags, pic_tokenizer_piece_fn fn, void *ctx)
{
    pic_enc e;

    if (t == NULL || fn == NULL || (text == NULL && len > 0)) {
        return PIC_TOKENIZER_EINVAL;
    }
    memset(&e, 0, sizeof(e));
    e.t = t;
    e.flags = flags;
    e.piece_fn = fn;
    e.piece_ctx = ctx;
    return enc_run(&e, text, len);
}

int
pic_tokenizer_encode(const pic_tokenizer *t, const char *text, size_t len,
                     int32_t **ids, size_t *n_ids)
{
    return pic_tokenizer_encode_flags(t, text, len, 0, ids, n_ids);
}


/* --- decode --- */

/* Lossy UTF-8 conversion of the byte stream a[0..na) ++ b[0..nb) into out
 * (room for 3 * (na + nb) + 1 bytes).  Invalid maximal subparts become
 * U+FFFD.  If !final, a valid but incomplete tail is not written; its length
 * is returned in *held (it starts at byte na + nb - *held of the stream). */
static size_t
utf8_lossy(const unsigned char *a, size_t na, const unsigned char *b, size_t nb,
           int final, char *out, size_t *held)
{
    size_t        n = na + nb, i = 0, o = 0, k, bad, j;
    unsigned char win[4];
    int           partial;

    *held = 0;
    while (i < n) {
        const unsigned char *p;
        size_t               avail;

        if (i >= na && b[i - na] < 0x80) {  /* fast path for ASCII */
            out[o++] = (char)b[i - na];
            i++;
            continue;
        }
        /* look at up to 4 bytes of the joined stream */
        avail = n - i < 4 ? n - i : 4;
        for (j = 0; j < avail; j++) {
            win[j] = i + j < na ? a[i + j] : b[i + j - na];
        }
        p = win;
        k = utf8_seq(p, avail, &partial, &bad);
        if (k > 0) {
            memcpy(out + o, p, k);
            o += k;
            i += k;
            continue;
        }
        if (partial && !final) {
            *held = n - i;
            break;
        }
        out[o++] = (char)0xEF;
        out[o++] = (char)0xBF;
        out[o++] = (char)0xBD;
        i += bad;
    }
    out[o] = '\0';
    return o;
}

int
pic_tokenizer_decode(const pic_tokenizer *t, const int32_t *ids, size_t n_ids,
                     int skip_special, char **out, size_t *out_len)
{
    size_t i, total = 0, held;
    char  *raw, *res;

    if (out == NULL || out_len == NULL) {
        return PIC_TOKENIZER_EINVAL;
    }
    *out = NULL;
    *out_len = 0;
    if (t == NULL || (ids == NULL && n_ids > 0)) {
        return PIC_TOKENIZER_EINVAL;
    }
    for (i = 0; i < n_ids; i++) {
        int32_t id = ids[i];

        if (id >= 0 && (size_t)id < t->n_ids && t->str_off[id] != UINT32_MAX
            && !(skip_special && t->special[id])) {
            total += t->dec_len[id];
        }
    }
    raw = malloc(total + 1);
    res = total <= (SIZE_MAX - 1) / 3 ? malloc(3 * total + 1) : NULL;
    if (raw == NULL || res == NULL) {
        free(raw);
        free(res);
        return PIC_TOKENIZER_ENOMEM;
    }
    total = 0;
    for (i = 0; i < n_ids; i++) {
        int32_t id = ids[i];

        if (id >= 0 && (size_t)id < t->n_ids && t->str_off[id] != UINT32_MAX
            && !(skip_special && t->special[id])) {
            memcpy(raw + total, t->blob + t->dec_off[id], t->dec_len[id]);
            total += t->dec_len[id];
        }
    }
    *out_len = utf8_lossy(NULL, 0, (const unsigned char *)raw, total, 1, res, &held);
    *out = res;
    free(raw);
    return PIC_TOKENIZER_OK;
}


/* --- streaming decode --- */

void
pic_detok_init(pic_detok *d, const pic_tokenizer *t, int skip_special)
{
    memset(d, 0, sizeof(*d));
    d->tok = t;
    d->skip_special = skip_special;
    d->keep_id = -1;
}

void
pic_detok_keep(pic_detok *d, int32_t id)
{
    d->keep_id = id;
}

static const char *
detok_run(pic_detok *d, const unsigned char *b, size_t nb, int final, size_t *len)
{
    size_t held, o;

    if (pic_grow((void **) &d->buf, &d->cap, 3 * (d->n_pend + nb) + 1, 1) != 0) {
        *len = 0;
        return NULL;
    }
    o = utf8_lossy(d->pend, d->n_pend, b, nb, final, d->buf, &held);
    if (held > 0) {
        /* the held tail (< 4 bytes) is the end of pend ++ b */
        unsigned char tail[4];
        size_t        j, n = d->n_pend + nb;

        for (j = 0; j < held; j++) {
            size_t at = n - held + j;

            tail[j] = at < d->n_pend ? d->pend[at] : b[at - d->n_pend];
        }
        memcpy(d->pend, tail, held);
    }
    d->n_pend = held;
    *len = o;
    return d->buf;
}

const char *
pic_detok_feed(pic_detok *d, int32_t id, size_t *len)
{
    const pic_tokenizer *t = d->tok;
    size_t               nb = 0;
    const unsigned char *b = NULL;

    if (t != NULL && id >= 0 && (size_t)id < t->n_ids && t->str_off[id] != UINT32_MAX
        && !(d->skip_special && t->special[id] && id != d->keep_id)) {
        b = (const unsigned char *)t->blob + t->dec_off[id];
        nb = t->dec_len[id];
    }
    return detok_run(d, b, nb, 0, len);
}

const char *
pic_detok_flush(pic_detok *d, size_t *len)
{
    return detok_run(d, NULL, 0, 1, len);
}

void
pic_detok_free(pic_detok *d)
{
    free(d->buf);
    d->buf = NULL;
    d->cap = 0;
    d->n_pend = 0;
}
