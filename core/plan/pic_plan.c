/*
 * pic_plan.c — plan JSON encode / strict decode, LPT worker assignment
 * (see pic_plan.h for the wire format).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pic_buf.h"
#include "pic_json.h"
#include "pic_lpt.h"
#include "pic_plan.h"

#define PIC_PLAN_DEPTH 8

void
pic_plan_init(pic_plan *p)
{
    memset(p, 0, sizeof(*p));
    p->version = PIC_PLAN_VERSION;
    p->combine = -1;
}

void
pic_plan_free(pic_plan *p)
{
    free(p->engines);
    free(p->segs);
    pic_plan_init(p);
}

int
pic_engine_id_valid(const char *s, size_t n)
{
    if (n == 0 || n > PIC_ENGINE_ID_MAX) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
              || strchr("_.:@/-", c)) || c == '\0') {
            return 0;
        }
    }
    return 1;
}

static int
pic_plan_id_valid(const char *s, size_t n)
{
    if (n == 0 || n > PIC_PLAN_ID_MAX) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
              || c == '_' || c == '.' || c == '-')) {
            return 0;
        }
    }
    return 1;
}

int32_t
pic_plan_engine(pic_plan *p, const char *id, pic_error *err)
{
    size_t n = strlen(id);
    if (!pic_engine_id_valid(id, n)) {
        pic_error_invalid(err, "engine", "invalid_value",
                          "%s: engine ids are 1-%d characters of [A-Za-z0-9_.:@/-]",
                          __func__, PIC_ENGINE_ID_MAX);
        return -1;
    }
    for (size_t i = 0; i < p->n_engines; i++) {
        if (!strcmp(p->engines[i].id, id)) {
            return (int32_t) i;
        }
    }
    if (p->n_engines >= PIC_PLAN_ENGINES_MAX) {
        pic_error_invalid(err, "engine", "too_many_engines",
                          "%s: a plan names at most %d engines", __func__,
                          PIC_PLAN_ENGINES_MAX);
        return -1;
    }
    if (pic_grow((void **) &p->engines, &p->cap_engines, p->n_engines + 1,
                 sizeof(*p->engines)) != 0) {
        pic_error_oom(err, __func__);
        return -1;
    }
    memcpy(p->engines[p->n_engines].id, id, n + 1);
    return (int32_t) p->n_engines++;
}

/* --- validation shared by encode and decode --- */

static int
pic_plan_check(const pic_plan *p, pic_error *err)
{
    char     param[PIC_ERROR_PARAM_MAX];
    uint64_t at = 0;

    if (p->version != PIC_PLAN_VERSION) {
        return pic_error_invalid(err, "version", "unsupported_value",
                                 "plan version %u is not supported (want %d)",
                                 p->version, PIC_PLAN_VERSION);
    }
    if (!pic_plan_id_valid(p->id, strlen(p->id))) {
        return pic_error_invalid(err, "id", "invalid_value",
                                 "plan id must be 1-%d characters of [A-Za-z0-9_.-]",
                                 PIC_PLAN_ID_MAX);
    }
    if (p->combine < 0 || (size_t) p->combine >= p->n_engines) {
        return pic_error_invalid(err, "combine", "invalid_value",
                                 "the plan names no combine engine");
    }
    if (p->n_segs > PIC_PLAN_SEGS_MAX) {
        return pic_error_invalid(err, "segments", "array_above_max_length",
                                 "a plan has at most %d segments", PIC_PLAN_SEGS_MAX);
    }
    for (size_t i = 0; i < p->n_segs; i++) {
        const pic_plan_segment *s = &p->segs[i];
        if (s->offset != at) {
            snprintf(param, sizeof(param), "segments[%zu].offset", i);
            return pic_error_invalid(err, param, "invalid_value",
                                     "'%s' is %llu, expected %llu (segments are contiguous)",
                                     param, (unsigned long long) s->offset,
                                     (unsigned long long) at);
        }
        if (s->key.len == 0 || s->key.len > (1u << 30)) {
            snprintf(param, sizeof(param), "segments[%zu].bytes", i);
            return pic_error_invalid(err, param, "invalid_value",
                                     "'%s' must be between 1 and 2^30", param);
        }
        if (s->tokens > s->key.len) {
            snprintf(param, sizeof(param), "segments[%zu].tokens", i);
            return pic_error_invalid(err, param, "invalid_value",
                                     "'%s' exceeds the segment's bytes", param);
        }
        if (s->kind > PIC_SEG_DYNAMIC || (s->kind == PIC_SEG_PREFIX && i != 0)) {
            snprintf(param, sizeof(param), "segments[%zu].kind", i);
            return pic_error_invalid(err, param, "invalid_value",
                                     "'%s': only segment 0 may be the prefix", param);
        }
        if (s->n_holders > PIC_PLAN_HOLDERS_MAX) {
            snprintf(param, sizeof(param), "segments[%zu].holders", i);
            return pic_error_invalid(err, param, "array_above_max_length",
                                     "'%s' has more than %d engines", param,
                                     PIC_PLAN_HOLDERS_MAX);
        }
        for (size_t h = 0; h < s->n_holders; h++) {
            int dup = 0;
            for (size_t g = 0; g < h; g++) {
                dup |= s->holders[g] == s->holders[h];
            }
            if (s->holders[h] >= p->n_engines || dup) {
                snprintf(param, sizeof(param), "segments[%zu].holders[%zu]", i, h);
                return pic_error_invalid(err, param, "invalid_value",
                                         "'%s' is unknown or repeated", param);
            }
        }
        if (s->worker < -1 || (s->worker >= 0 && (size_t) s->worker >= p->n_engines)
            || (s->worker >= 0 && s->kind == PIC_SEG_DYNAMIC)) {
            snprintf(param, sizeof(param), "segments[%zu].worker", i);
            return pic_error_invalid(err, param, "invalid_value",
                                     "'%s' is unknown, or set on a dynamic segment", param);
        }
        at += s->key.len;
    }
    return 0;
}

/* --- building --- */

int
pic_plan_from_segmentation(pic_plan *p, const pic_segmentation *s, const char *id,
                           const char *scope, pic_error *err)
{
    size_t idn = id ? strlen(id) : 0, scn = scope ? strlen(scope) : 0;
    if (!pic_plan_id_valid(id ? id : "", idn) || scn > PIC_KEY_PART_MAX) {
        return pic_error_invalid(err, "id", "invalid_value",
                                 "%s: invalid plan id or scope", __func__);
    }
    if (s->n_segs > PIC_PLAN_SEGS_MAX) {
        return pic_error_invalid(err, "segments", "array_above_max_length",
                                 "%s: %zu segments, more than %d", __func__, s->n_segs,
                                 PIC_PLAN_SEGS_MAX);
    }
    memcpy(p->id, id, idn + 1);
    memcpy(p->scope, scope ? scope : "", scn + 1);
    p->segs = calloc(s->n_segs ? s->n_segs : 1, sizeof(*p->segs));
    if (!p->segs) {
        return pic_error_oom(err, __func__);
    }
    for (size_t i = 0; i < s->n_segs; i++) {
        pic_plan_segment *d = &p->segs[i];
        d->key = s->segs[i].key;
        d->offset = s->segs[i].start;
        d->tokens = s->segs[i].tokens;
        d->kind = s->segs[i].kind;
        d->worker = -1;
    }
    p->n_segs = s->n_segs;
    return 0;
}

int
pic_plan_assign_lpt(pic_plan *p, const int32_t *workers, const uint64_t *loads, size_t m,
                    size_t from, pic_error *err)
{
    size_t n = 0;
    for (size_t i = from; i < p->n_segs; i++) {
        n += p->segs[i].kind != PIC_SEG_DYNAMIC && p->segs[i].n_holders == 0;
    }
    if (n == 0) {
        return 0;
    }
    for (size_t k = 0; k < m; k++) {
        if (workers[k] < 0 || (size_t) workers[k] >= p->n_engines) {
            return pic_error_invalid(err, "workers", "invalid_value",
                                     "%s: worker %zu is not a plan engine", __func__, k);
        }
    }
    uint64_t *w = malloc(n * sizeof(*w));
    uint32_t *a = malloc(n * sizeof(*a));
    size_t   *idx = malloc(n * sizeof(*idx));
    int       rc = -1;
    if (!w || !a || !idx) {
        pic_error_oom(err, __func__);
        goto done;
    }
    n = 0;
    for (size_t i = from; i < p->n_segs; i++) {
        if (p->segs[i].kind != PIC_SEG_DYNAMIC && p->segs[i].n_holders == 0) {
            w[n] = p->segs[i].tokens;
            idx[n++] = i;
        }
    }
    if (pic_lpt_assign(w, n, loads, m, NULL, a, NULL, err) != 0) {
        goto done;
    }
    for (size_t j = 0; j < n; j++) {
        p->segs[idx[j]].worker = workers[a[j]];
    }
    rc = 0;
done:
    free(w);
    free(a);
    free(idx);
    return rc;
}

/* --- encode --- */

int
pic_plan_encode(const pic_plan *p, pic_buf *out, pic_error *err)
{
    if (pic_plan_check(p, err) != 0) {
        return -1;
    }
    pic_buf_printf(out, "{\"version\":%u,\"id\":", p->version);
    pic_json_write_string(out, p->id, strlen(p->id));
    pic_buf_appends(out, ",\"combine\":");
    pic_json_write_string(out, p->engines[p->combine].id, strlen(p->engines[p->combine].id));
    pic_buf_appends(out, ",\"scope\":");
    pic_json_write_string(out, p->scope, strlen(p->scope));
    pic_buf_appends(out, ",\"segments\":[");
    for (size_t i = 0; i < p->n_segs; i++) {
        const pic_plan_segment *s = &p->segs[i];
        pic_buf_printf(out, "%s{\"key\":\"%s\",\"offset\":%llu,\"bytes\":%llu,"
                       "\"tokens\":%u,\"kind\":\"%s\",\"holders\":[",
                       i ? "," : "", s->key.hex, (unsigned long long) s->offset,
                       (unsigned long long) s->key.len, s->tokens,
                       pic_seg_kind_name(s->kind));
        for (size_t h = 0; h < s->n_holders; h++) {
            if (h) {
                pic_buf_appendc(out, ',');
            }
            const char *id = p->engines[s->holders[h]].id;
            pic_json_write_string(out, id, strlen(id));
        }
        pic_buf_appends(out, "],\"worker\":");
        if (s->worker >= 0) {
            const char *id = p->engines[s->worker].id;
            pic_json_write_string(out, id, strlen(id));
        } else {
            pic_buf_appends(out, "null");
        }
        pic_buf_appendc(out, '}');
    }
    pic_buf_appends(out, "]}");
    return out->oom ? pic_error_oom(err, __func__) : 0;
}

/* --- decode --- */

static int
pic_plan_uint(const cJSON *v, const char *param, uint64_t max, uint64_t *out,
              pic_error *err)
{
    const char *lx = pic_json_number_lexeme(v);
    if (!cJSON_IsNumber(v) || !lx || strpbrk(lx, ".eE-") || strlen(lx) > 15) {
        return pic_error_invalid(err, param, "invalid_type",
                                 "'%s' must be a non-negative integer", param);
    }
    uint64_t x = strtoull(lx, NULL, 10);
    if (x > max) {
        return pic_error_invalid(err, param, "invalid_value", "'%s' is too large", param);
    }
    *out = x;
    return 0;
}

static int
pic_plan_seg_decode(pic_plan *p, pic_plan_segment *s, const cJSON *o, size_t i, pic_error *err)
{
    char     param[PIC_ERROR_PARAM_MAX];
    uint64_t x;
    int      seen = 0;

    snprintf(param, sizeof(param), "segments[%zu]", i);
    if (!cJSON_IsObject(o)) {
        return pic_error_invalid(err, param, "invalid_type", "'%s' must be an object", param);
    }
    s->worker = -1;
    for (const cJSON *f = o->child; f; f = f->next) {
        const char *k = f->string;
        snprintf(param, sizeof(param), "segments[%zu].%.8s", i, k);  /* known names only */
        for (const cJSON *g = o->child; g != f; g = g->next) {
            if (!strcmp(g->string, k)) {
                return pic_error_invalid(err, param, "duplicate_parameter",
                                         "'%s' appears twice", param);
            }
        }
        if (!strcmp(k, "key")) {
            if (!cJSON_IsString(f)
                || pic_key_parse_hex(&s->key, f->valuestring, strlen(f->valuestring)) != 0) {
                return pic_error_invalid(err, param, "invalid_value",
                                         "'%s' must be 32 lowercase hex digits", param);
            }
            seen |= 1;
        } else if (!strcmp(k, "offset")) {
            if (pic_plan_uint(f, param, 1ull << 50, &s->offset, err) != 0) {
                return -1;
            }
            seen |= 2;
        } else if (!strcmp(k, "bytes")) {
            if (pic_plan_uint(f, param, 1u << 30, &x, err) != 0) {
                return -1;
            }
            s->key.len = x;
            seen |= 4;
        } else if (!strcmp(k, "tokens")) {
            if (pic_plan_uint(f, param, UINT32_MAX, &x, err) != 0) {
                return -1;
            }
            s->tokens = (uint32_t) x;
            seen |= 8;
        } else if (!strcmp(k, "kind")) {
            if (!cJSON_IsString(f) || pic_seg_kind_parse(f->valuestring, &s->kind) != 0) {
                return pic_error_invalid(err, param, "invalid_value",
                                         "'%s' must be \"prefix\", \"pic\" or \"dynamic\"",
                                         param);
            }
            seen |= 16;
        } else if (!strcmp(k, "holders")) {
            if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) > PIC_PLAN_HOLDERS_MAX) {
                return pic_error_invalid(err, param, "invalid_value",
                                         "'%s' must be an array of at most %d engine ids",
                                         param, PIC_PLAN_HOLDERS_MAX);
            }
            s->n_holders = 0;
            for (const cJSON *h = f->child; h; h = h->next) {
                int32_t e = cJSON_IsString(h) ? pic_plan_engine(p, h->valuestring, err) : -1;
                if (e < 0) {
                    return pic_error_invalid(err, param, "invalid_value",
                                             "'%s' holds an invalid engine id", param);
                }
                s->holders[s->n_holders++] = (uint16_t) e;
            }
        } else if (!strcmp(k, "worker")) {
            if (!cJSON_IsNull(f)) {
                int32_t e = cJSON_IsString(f) ? pic_plan_engine(p, f->valuestring, err) : -1;
                if (e < 0) {
                    return pic_error_invalid(err, param, "invalid_value",
                                             "'%s' must be an engine id or null", param);
                }
                s->worker = e;
            }
        } else {
            snprintf(param, sizeof(param), "segments[%zu]", i);
            return pic_error_invalid(err, param, "unknown_parameter",
                                     "'%s' has an unrecognized field", param);
        }
    }
    if (seen != 31) {
        snprintf(param, sizeof(param), "segments[%zu]", i);
        return pic_error_invalid(err, param, "missing_required_parameter",
                                 "'%s' needs key, offset, bytes, tokens and kind", param);
    }
    return 0;
}

int
pic_plan_decode(pic_plan *p, const char *json, size_t len, pic_error *err)
{
    uint64_t x;
    int      seen = 0;

    pic_plan_free(p);
    cJSON *root = pic_json_parse(json, len, PIC_PLAN_DEPTH, NULL, err);
    if (!root) {
        return -1;
    }
    if (!cJSON_IsObject(root)) {
        pic_error_invalid(err, NULL, "invalid_type", "a plan must be a JSON object");
        goto fail;
    }
    for (const cJSON *f = root->child; f; f = f->next) {
        const char *k = f->string;
        for (const cJSON *g = root->child; g != f; g = g->next) {
            if (!strcmp(g->string, k)) {
                /* one meaning per field: a second one is refused, not merged */
                pic_error_invalid(err, NULL, "duplicate_parameter",
                                  "the plan repeats a field");
                goto fail;
            }
        }
        if (!strcmp(k, "version")) {
            if (pic_plan_uint(f, "version", 1000, &x, err) != 0) {
                goto fail;
            }
            p->version = (uint32_t) x;
            seen |= 1;
        } else if (!strcmp(k, "id")) {
            if (!cJSON_IsString(f) || !pic_plan_id_valid(f->valuestring, strlen(f->valuestring))) {
                pic_error_invalid(err, "id", "invalid_value",
                                  "plan id must be 1-%d characters of [A-Za-z0-9_.-]",
                                  PIC_PLAN_ID_MAX);
                goto fail;
            }
            memcpy(p->id, f->valuestring, strlen(f->valuestring) + 1);
            seen |= 2;
        } else if (!strcmp(k, "combine")) {
            p->combine = cJSON_IsString(f) ? pic_plan_engine(p, f->valuestring, err) : -1;
            if (p->combine < 0) {
                pic_error_invalid(err, "combine", "invalid_value",
                                  "'combine' must be an engine id");
                goto fail;
            }
            seen |= 4;
        } else if (!strcmp(k, "scope")) {
            if (!cJSON_IsString(f) || strlen(f->valuestring) > PIC_KEY_PART_MAX) {
                pic_error_invalid(err, "scope", "invalid_value",
                                  "'scope' must be a string of at most %d bytes",
                                  PIC_KEY_PART_MAX);
                goto fail;
            }
            memcpy(p->scope, f->valuestring, strlen(f->valuestring) + 1);
            seen |= 8;
        } else if (!strcmp(k, "segments")) {
            if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) > PIC_PLAN_SEGS_MAX) {
                pic_error_invalid(err, "segments", "invalid_value",
                                  "'segments' must be an array of at most %d segments",
                                  PIC_PLAN_SEGS_MAX);
                goto fail;
            }
            size_t n = (size_t) cJSON_GetArraySize(f);
            p->segs = calloc(n ? n : 1, sizeof(*p->segs));
            if (!p->segs) {
                pic_error_oom(err, __func__);
                goto fail;
            }
            size_t i = 0;
            for (const cJSON *o = f->child; o; o = o->next, i++) {
                if (pic_plan_seg_decode(p, &p->segs[i], o, i, err) != 0) {
                    goto fail;
                }
                p->n_segs = i + 1;
            }
            seen |= 16;
        } else {
            pic_error_invalid(err, NULL, "unknown_parameter",
                              "the plan has an unrecognized field");
            goto fail;
        }
    }
    if (seen != 31) {
        pic_error_invalid(err, NULL, "missing_required_parameter",
                          "a plan needs version, id, combine, scope and segments");
        goto fail;
    }
    if (pic_plan_check(p, err) != 0) {
        goto fail;
    }
    cJSON_Delete(root);
    return 0;

fail:
    cJSON_Delete(root);
    pic_plan_free(p);
    return -1;
}

/* --- X-PIC-Held --- */

size_t
pic_plan_held_format(const unsigned char *held, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    size_t            k, i, nd, len = 0;
    unsigned          d;

    if (n > 4 * (size_t) PIC_PLAN_HELD_MAX) {
        n = 4 * (size_t) PIC_PLAN_HELD_MAX;
    }
    nd = (n + 3) / 4;
    for (k = 0; k < nd; k++) {
        d = 0;
        for (i = 0; i < 4 && 4 * k + i < n; i++) {
            d |= held[4 * k + i] ? 1u << i : 0;
        }
        out[k] = hex[d];
        if (d != 0) {
            len = k + 1;
        }
    }
    if (len == 0) {
        out[0] = '0';
        len = 1;
    }
    out[len] = '\0';
    return len;
}

int
pic_plan_held_parse(const char *hex, size_t len, size_t n, unsigned char *held)
{
    size_t   k, i;
    unsigned d;

    memset(held, 0, n);
    if (len == 0 || len > PIC_PLAN_HELD_MAX) {
        return -1;
    }
    for (k = 0; k < len; k++) {
        char c = hex[k];

        if (c >= '0' && c <= '9') {
            d = (unsigned) (c - '0');
        } else if (c >= 'a' && c <= 'f') {
            d = (unsigned) (c - 'a' + 10);
        } else if (c >= 'A' && c <= 'F') {
            d = (unsigned) (c - 'A' + 10);
        } else {
            memset(held, 0, n);
            return -1;
        }
        for (i = 0; i < 4; i++) {
            if (!(d & (1u << i))) {
                continue;
            }
            if (4 * k + i >= n) {
                memset(held, 0, n);
                return -1;
            }
            held[4 * k + i] = 1;
        }
    }
    return 0;
}
