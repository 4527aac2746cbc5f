/*
 * frame.c — the segment-entry frame (frame.h): encoder, strict decoder,
 * entry adapters.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "frame.h"
#include "pic_key.h"

/* --- little-endian access --- */

static void
pic_put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char) v;
    p[1] = (unsigned char) (v >> 8);
}

static void
pic_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (unsigned char) (v >> (8 * i));
    }
}

static void
pic_put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (unsigned char) (v >> (8 * i));
    }
}

static uint16_t
pic_get16(const unsigned char *p)
{
    return (uint16_t) (p[0] | p[1] << 8);
}

static uint32_t
pic_get32(const unsigned char *p)
{
    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16
           | (uint32_t) p[3] << 24;
}

static uint64_t
pic_get64(const unsigned char *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--) {
        v = v << 8 | p[i];
    }
    return v;
}

/* --- sizes and checks shared by encoder and decoder --- */

size_t
pic_frame_size(uint32_t n_desc, uint64_t payload_bytes)
{
    uint64_t fixed = PIC_FRAME_HDR + (uint64_t) n_desc * PIC_FRAME_DESC + PIC_FRAME_TRAILER;

    if (n_desc > PIC_FRAME_MAX_DESC || payload_bytes > SIZE_MAX - fixed) {
        return 0;
    }
    return (size_t) (fixed + payload_bytes);
}

static size_t
pic_frame_elsize(unsigned dtype)
{
    return dtype == PIC_FRAME_F32 ? 4 : dtype <= PIC_FRAME_F16 ? 2 : 0;
}

/* Check the descriptors against the payload size; 0 or -1 + err. */
static int
pic_frame_check_desc(const pic_frame_desc *d, uint32_t n, uint64_t payload,
                     int n_layers, char *err, size_t errlen)
{
    uint64_t end_prev = 0;

    for (uint32_t i = 0; i < n; i++) {
        uint64_t count = 1;
        size_t   es = pic_frame_elsize(d[i].dtype);

        if (d[i].kind > PIC_TENSOR_V) {
            snprintf(err, errlen, "descriptor %u: unknown kind %u", i, d[i].kind);
            return -1;
        }
        if (es == 0) {
            snprintf(err, errlen, "descriptor %u: unknown dtype %u", i, d[i].dtype);
            return -1;
        }
        if (d[i].ndim < 1 || d[i].ndim > 4) {
            snprintf(err, errlen, "descriptor %u: ndim %u outside 1..4", i, d[i].ndim);
            return -1;
        }
        if (n_layers > 0 && d[i].layer >= n_layers) {
            snprintf(err, errlen, "descriptor %u: layer %u outside the model's %d", i,
                     d[i].layer, n_layers);
            return -1;
        }
        for (int k = 0; k < 4; k++) {
            if (k >= d[i].ndim) {
                if (d[i].shape[k] != 0) {
                    snprintf(err, errlen, "descriptor %u: dim %d set beyond ndim", i, k);
                    return -1;
                }
                continue;
            }
            if (d[i].shape[k] != 0 && count > UINT64_MAX / d[i].shape[k]) {
                snprintf(err, errlen, "descriptor %u: shape overflows", i);
                return -1;
            }
            count *= d[i].shape[k];
        }
        if (count > UINT64_MAX / es || count * es != d[i].bytes) {
            snprintf(err, errlen, "descriptor %u: shape x %zu bytes != %llu bytes", i, es,
                     (unsigned long long) d[i].bytes);
            return -1;
        }
        if (d[i].offset > payload || d[i].bytes > payload - d[i].offset) {
            snprintf(err, errlen, "descriptor %u: [%llu, +%llu) leaves the payload (%llu)",
                     i, (unsigned long long) d[i].offset, (unsigned long long) d[i].bytes,
                     (unsigned long long) payload);
            return -1;
        }
        if (d[i].offset < end_prev) {
            snprintf(err, errlen, "descriptor %u: overlaps or precedes the previous one", i);
            return -1;
        }
        end_prev = d[i].offset + d[i].bytes;
    }
    return 0;
}

static int
pic_frame_check_counts(uint32_t L, uint32_t h, uint32_t w, char *err, size_t errlen)
{
    if (L == 0 || L > (1u << 24) || h > L || w > L || h + w > L) {
        snprintf(err, errlen, "token count %u with seams h=%u w=%u is impossible", L, h, w);
        return -1;
    }
    return 0;
}

/* --- encode --- */

size_t
pic_frame_encode(const pic_frame *f, void *buf, size_t cap)
{
    size_t         need = pic_frame_size(f->n_desc, f->payload_bytes);
    unsigned char *p = buf, *d;
    char           err[128];

    if (need == 0 || cap < need
        || pic_frame_check_counts(f->n_tokens, f->h, f->w, err, sizeof(err)) != 0
        || pic_frame_check_desc(f->desc, f->n_desc, f->payload_bytes, 0, err,
                                sizeof(err)) != 0) {
        return 0;
    }
    memset(p, 0, PIC_FRAME_HDR);
    memcpy(p, PIC_FRAME_MAGIC, 4);
    pic_put16(p + 4, PIC_FRAME_VERSION);
    pic_put32(p + 8, PIC_FRAME_HDR + f->n_desc * PIC_FRAME_DESC);
    pic_put32(p + 12, f->n_desc);
    pic_put64(p + 16, f->fingerprint);
    memcpy(p + 24, f->key, 16);
    pic_put64(p + 40, f->seg_bytes);
    pic_put32(p + 48, f->n_tokens);
    pic_put32(p + 52, f->h);
    pic_put32(p + 56, f->w);
    pic_put64(p + 64, f->payload_bytes);
    d = p + PIC_FRAME_HDR;
    for (uint32_t i = 0; i < f->n_desc; i++, d += PIC_FRAME_DESC) {
        const pic_frame_desc *s = &f->desc[i];
        memset(d, 0, PIC_FRAME_DESC);
        pic_put16(d, s->layer);
        d[2] = s->kind;
        d[3] = s->dtype;
        d[4] = s->ndim;
        for (int k = 0; k < 4; k++) {
            pic_put32(d + 8 + 4 * k, s->shape[k]);
        }
        pic_put64(d + 24, s->offset);
        pic_put64(d + 32, s->bytes);
    }
    if (f->payload_bytes > 0) {
        memcpy(d, f->payload, f->payload_bytes);
    }
    pic_put64(p + need - PIC_FRAME_TRAILER, XXH3_64bits(p, need - PIC_FRAME_TRAILER));
    return need;
}

/* --- decode --- */

static int
pic_frame_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != 0) {
            return 0;
        }
    }
    return 1;
}

int
pic_frame_decode(const void *buf, size_t len, const pic_frame_expect *x, pic_frame *out,
                 pic_frame_desc *descbuf, uint32_t max_desc, char *err, size_t errlen)
{
    const unsigned char *p = buf, *d;
    uint32_t             n_desc, hdr_bytes;
    uint64_t             payload, sum;
    size_t               need;

    memset(out, 0, sizeof(*out));
    if (buf == NULL || len < PIC_FRAME_HDR + PIC_FRAME_TRAILER) {
        snprintf(err, errlen, "%s: %zu bytes is shorter than a frame header", __func__, len);
        return -1;
    }
    if (memcmp(p, PIC_FRAME_MAGIC, 4) != 0) {
        snprintf(err, errlen, "%s: bad magic", __func__);
        return -1;
    }
    if (pic_get16(p + 4) != PIC_FRAME_VERSION) {
        snprintf(err, errlen, "%s: version %u, expected %d", __func__, pic_get16(p + 4),
                 PIC_FRAME_VERSION);
        return -1;
    }
    if (pic_get16(p + 6) != 0 || pic_get32(p + 60) != 0) {
        snprintf(err, errlen, "%s: reserved header fields are set", __func__);
        return -1;
    }
    n_desc = pic_get32(p + 12);
    hdr_bytes = pic_get32(p + 8);
    payload = pic_get64(p + 64);
    if (n_desc > PIC_FRAME_MAX_DESC || n_desc > max_desc) {
        snprintf(err, errlen, "%s: %u descriptors (limit %u)", __func__, n_desc,
                 max_desc < PIC_FRAME_MAX_DESC ? max_desc : PIC_FRAME_MAX_DESC);
        return -1;
    }
    if (hdr_bytes != PIC_FRAME_HDR + n_desc * PIC_FRAME_DESC) {
        snprintf(err, errlen, "%s: header_bytes %u does not match %u descriptors", __func__,
                 hdr_bytes, n_desc);
        return -1;
    }
    need = pic_frame_size(n_desc, payload);
    if (need == 0 || need != len) {
        snprintf(err, errlen, "%s: frame is %zu bytes, its header says %llu", __func__, len,
                 (unsigned long long) (need ? need : 0));
        return -1;
    }
    if (x->max_payload > 0 && payload > x->max_payload) {
        snprintf(err, errlen, "%s: payload of %llu bytes exceeds %llu", __func__,
                 (unsigned long long) payload, (unsigned long long) x->max_payload);
        return -1;
    }
    sum = XXH3_64bits(p, len - PIC_FRAME_TRAILER);
    if (sum != pic_get64(p + len - PIC_FRAME_TRAILER)) {
        snprintf(err, errlen, "%s: checksum mismatch", __func__);
        return -1;
    }
    out->fingerprint = pic_get64(p + 16);
    memcpy(out->key, p + 24, 16);
    out->seg_bytes = pic_get64(p + 40);
    out->n_tokens = pic_get32(p + 48);
    out->h = pic_get32(p + 52);
    out->w = pic_get32(p + 56);
    out->n_desc = n_desc;
    out->payload_bytes = payload;
    out->payload = p + hdr_bytes;
    d = p + PIC_FRAME_HDR;
    for (uint32_t i = 0; i < n_desc; i++, d += PIC_FRAME_DESC) {
        pic_frame_desc *s = &descbuf[i];
        if (!pic_frame_zero(d + 5, 3)) {
            snprintf(err, errlen, "%s: descriptor %u: reserved bytes are set", __func__, i);
            return -1;
        }
        s->layer = pic_get16(d);
        s->kind = d[2];
        s->dtype = d[3];
        s->ndim = d[4];
        for (int k = 0; k < 4; k++) {
            s->shape[k] = pic_get32(d + 8 + 4 * k);
        }
        s->offset = pic_get64(d + 24);
        s->bytes = pic_get64(d + 32);
    }
    out->desc = descbuf;
    if (pic_frame_check_counts(out->n_tokens, out->h, out->w, err, errlen) != 0
        || pic_frame_check_desc(descbuf, n_desc, payload, x->n_layers, err, errlen) != 0) {
        return -1;
    }
    if (out->fingerprint != x->fingerprint) {
        snprintf(err, errlen, "%s: model fingerprint %016llx, expected %016llx", __func__,
                 (unsigned long long) out->fingerprint, (unsigned long long) x->fingerprint);
        return -1;
    }
    if (x->key != NULL && memcmp(out->key, x->key, 16) != 0) {
        snprintf(err, errlen, "%s: frame carries another segment key", __func__);
        return -1;
    }
    if (x->seg_bytes != 0 && out->seg_bytes != x->seg_bytes) {
        snprintf(err, errlen, "%s: segment length %llu, expected %llu", __func__,
                 (unsigned long long) out->seg_bytes, (unsigned long long) x->seg_bytes);
        return -1;
    }
    return 0;
}

/* --- entries --- */

/* The frame descriptors of e's tensors, as placed by pic_entry_serialize
 * (contiguous at the end of its payload); count, or -1. */
static int
pic_frame_entry_desc(const pic_entry *e, size_t payload, pic_frame_desc *out, int max)
{
    int               nt = pic_entry_tensors(e, NULL, 0);
    pic_entry_tensor *ts;
    uint64_t          total = 0, off;

    if (nt < 0 || nt > max) {
        return -1;
    }
    ts = malloc((size_t) (nt > 0 ? nt : 1) * sizeof(*ts));
    if (ts == NULL) {
        return -1;
    }
    pic_entry_tensors(e, ts, nt);
    for (int i = 0; i < nt; i++) {
        total += ts[i].bytes;
    }
    if (total > payload) {
        free(ts);
        return -1;
    }
    off = payload - total;
    for (int i = 0; i < nt; i++) {
        pic_frame_desc *d = &out[i];
        memset(d, 0, sizeof(*d));
        d->layer = (uint16_t) ts[i].layer;
        d->kind = (uint8_t) ts[i].kind;
        d->dtype = ts[i].dtype == PIC_DTYPE_BF16 ? PIC_FRAME_BF16 : PIC_FRAME_F32;
        d->ndim = (uint8_t) ts[i].ndim;
        for (int k = 0; k < ts[i].ndim && k < 3; k++) {
            d->shape[k] = (uint32_t) ts[i].shape[k];
        }
        d->offset = off;
        d->bytes = ts[i].bytes;
        off += ts[i].bytes;
    }
    free(ts);
    return nt;
}

void *
pic_frame_from_entry(const pic_entry *e, const char *key_hex, uint64_t seg_bytes,
                     size_t *len)
{
    pic_key         k;
    pic_frame       f;
    pic_frame_desc *desc = NULL;
    void           *payload = NULL, *out = NULL;
    size_t          plen = pic_entry_serialized_size(e), flen;
    int             nd;

    memset(&f, 0, sizeof(f));
    if (pic_key_parse_hex(&k, key_hex, strlen(key_hex)) != 0) {
        return NULL;
    }
    pic_key_to_bytes(&k, f.key);
    payload = malloc(plen ? plen : 1);
    desc = malloc(PIC_FRAME_MAX_DESC * sizeof(*desc));
    if (payload == NULL || desc == NULL || pic_entry_serialize(e, payload, plen) != plen) {
        goto done;
    }
    nd = pic_frame_entry_desc(e, plen, desc, PIC_FRAME_MAX_DESC);
    if (nd < 0) {
        goto done;
    }
    f.fingerprint = e->fingerprint;
    f.seg_bytes = seg_bytes;
    f.n_tokens = (uint32_t) e->n_tokens;
    f.h = (uint32_t) e->h;
    f.w = (uint32_t) e->w;
    f.n_desc = (uint32_t) nd;
    f.desc = desc;
    f.payload = payload;
    f.payload_bytes = plen;
    flen = pic_frame_size(f.n_desc, plen);
    out = flen ? malloc(flen) : NULL;
    if (out != NULL && pic_frame_encode(&f, out, flen) != flen) {
        free(out);
        out = NULL;
    }
    if (out != NULL) {
        *len = flen;
    }
done:
    free(payload);
    free(desc);
    return out;
}

/* 1 if the n descriptors agree field by field. */
static int
pic_frame_desc_same(const pic_frame_desc *a, const pic_frame_desc *b, int n)
{
    for (int i = 0; i < n; i++) {
        if (a[i].layer != b[i].layer || a[i].kind != b[i].kind || a[i].dtype != b[i].dtype
            || a[i].ndim != b[i].ndim || a[i].offset != b[i].offset
            || a[i].bytes != b[i].bytes || memcmp(a[i].shape, b[i].shape,
                                                  sizeof(a[i].shape)) != 0) {
            return 0;
        }
    }
    return 1;
}

pic_entry *
pic_frame_to_entry(const pic_model *m, const void *buf, size_t len, const char *key_hex,
                   uint64_t seg_bytes, char *err, size_t errlen)
{
    pic_frame_expect x = { .fingerprint = m->fingerprint, .seg_bytes = seg_bytes,
                           .n_layers = m->cfg.n_layers };
    pic_frame        f;
    pic_frame_desc  *desc = malloc(PIC_FRAME_MAX_DESC * sizeof(*desc));
    pic_frame_desc  *mine = malloc(PIC_FRAME_MAX_DESC * sizeof(*mine));
    pic_entry       *e = NULL;
    pic_key          k;
    uint8_t          key[16];
    int              nd;

    if (desc == NULL || mine == NULL) {
        snprintf(err, errlen, "%s: out of memory", __func__);
        goto fail;
    }
    if (key_hex != NULL) {
        if (pic_key_parse_hex(&k, key_hex, strlen(key_hex)) != 0) {
            snprintf(err, errlen, "%s: malformed key", __func__);
            goto fail;
        }
        pic_key_to_bytes(&k, key);
        x.key = key;
    }
    if (pic_frame_decode(buf, len, &x, &f, desc, PIC_FRAME_MAX_DESC, err, errlen) != 0) {
        goto fail;
    }
    e = pic_entry_deserialize(m, f.payload, f.payload_bytes, err, errlen);
    if (e == NULL) {
        goto fail;
    }
    if ((uint32_t) e->n_tokens != f.n_tokens || (uint32_t) e->h != f.h
        || (uint32_t) e->w != f.w) {
        snprintf(err, errlen, "%s: frame header and entry disagree on L/h/w", __func__);
        goto fail;
    }
    nd = pic_frame_entry_desc(e, f.payload_bytes, mine, PIC_FRAME_MAX_DESC);
    if (nd < 0 || (uint32_t) nd != f.n_desc || !pic_frame_desc_same(mine, desc, nd)) {
        snprintf(err, errlen, "%s: descriptors do not match the entry's tensors", __func__);
        goto fail;
    }
    free(desc);
    free(mine);
    return e;
fail:
    pic_entry_unref(e);
    free(desc);
    free(mine);
    return NULL;
}
