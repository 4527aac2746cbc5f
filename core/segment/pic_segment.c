/*
 * pic_segment.c — request → rendered prompt → keyed segments
 * (see pic_segment.h).
 */
#include <stdlib.h>
#include <string.h>

#include "pic_buf.h"
#include "pic_segment.h"

const char *
pic_seg_kind_name(pic_seg_kind k)
{
    switch (k) {
    case PIC_SEG_PREFIX:  return "prefix";
    case PIC_SEG_PIC:     return "pic";
    case PIC_SEG_DYNAMIC: return "dynamic";
    }
    return "unknown";
}

int
pic_seg_kind_parse(const char *name, pic_seg_kind *out)
{
    for (int k = PIC_SEG_PREFIX; k <= PIC_SEG_DYNAMIC; k++) {
        if (!strcmp(name, pic_seg_kind_name((pic_seg_kind) k))) {
            *out = (pic_seg_kind) k;
            return 0;
        }
    }
    return -1;
}

uint32_t
pic_segment_token_estimate(size_t bytes)
{
    size_t t = bytes / 4 + (bytes % 4 != 0);
    return t > UINT32_MAX ? UINT32_MAX : (uint32_t) t;
}

void
pic_segmentation_init(pic_segmentation *s)
{
    pic_render_init(&s->render);
    s->segs = NULL;
    s->n_segs = 0;
}

void
pic_segmentation_free(pic_segmentation *s)
{
    pic_render_free(&s->render);
    free(s->segs);
    pic_segmentation_init(s);
}

typedef struct {
    pic_segment *v;
    size_t       n;
    size_t       cap;
} pic_segment_list;

static pic_segment *
pic_seg_push(pic_segment_list *sv)
{
    if (pic_grow((void **) &sv->v, &sv->cap, sv->n + 1, sizeof(*sv->v)) != 0) {
        return NULL;
    }
    pic_segment *s = &sv->v[sv->n++];
    memset(s, 0, sizeof(*s));
    return s;
}

/* Appends the segments of one piece [start, end): glue whole, content cut
 * by CDC.  `reg` is the piece's content region (NULL for glue); newest:
 * the newest message's regions (pic_render_newest). */
static int
pic_seg_piece(const pic_segment_cfg *cfg, const pic_render *r, const pic_region *reg,
              size_t start, size_t end, const pic_render_span *newest, pic_segment_list *sv)
{
    size_t at = start;
    while (at < end) {
        size_t len = end - at;
        if (reg && cfg->cdc) {
            len = pic_cdc_cut(cfg->cdc, r->text.data + at, end - at);
        }
        pic_segment *s = pic_seg_push(sv);
        if (!s) {
            return -1;
        }
        s->start = at;
        s->len = len;
        s->flags = reg ? (at + len < end ? PIC_SEG_FLAG_CDC : 0) : PIC_SEG_FLAG_GLUE;
        if (reg && pic_render_client_doc(r, at)) {
            s->flags |= PIC_SEG_FLAG_DOC;
        }
        if (pic_render_ahead_of(r, newest, at)) {
            s->flags |= PIC_SEG_FLAG_AHEAD;
        }
        s->region = reg ? reg->kind : PIC_REGION_GLUE;
        s->index = reg ? reg->index : -1;
        s->doc = reg ? reg->doc : 0;
        at += len;
    }
    return 0;
}

/* Index of the region holding byte off (n_regions: past the end). */
static size_t
pic_render_region_at(const pic_render *r, size_t off)
{
    size_t lo = 0, hi = r->n_regions;

    while (lo < hi) {               /* regions partition the text */
        size_t mid = lo + (hi - lo) / 2;

        if (r->regions[mid].end <= off) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < r->n_regions && r->regions[lo].start <= off ? lo : r->n_regions;
}

void
pic_render_newest(const pic_render *r, pic_render_span *out)
{
    size_t l = r->n_regions;

    while (l > 0 && r->regions[l - 1].kind == PIC_REGION_GLUE) {
        l--;
    }
    out->last = l;
    out->first = l > 0 ? l - 1 : 0;
    /* several content regions when the message was split into documents,
     * the glue between them inside */
    for (size_t j = l > 0 ? l - 1 : 0; j-- > 0;) {
        if (r->regions[j].kind == PIC_REGION_GLUE) {
            continue;
        }
        if (r->regions[j].kind != r->regions[l - 1].kind
            || r->regions[j].index != r->regions[l - 1].index) {
            break;
        }
        out->first = j;
    }
}

int
pic_render_ahead_of(const pic_render *r, const pic_render_span *newest, size_t off)
{
    size_t i = pic_render_region_at(r, off), last = newest->last;

    if (i == r->n_regions || r->regions[i].kind == PIC_REGION_ASSISTANT || last == 0) {
        return 0;
    }
    if (r->regions[i].kind == PIC_REGION_GLUE) {
        /* template text (tool instructions, role headers) recurs in every
         * request of its shape; after the newest message's start it is the
         * generation prompt's or the newest turn's */
        return i < newest->first;
    }
    return r->regions[i].kind != r->regions[last - 1].kind
           || r->regions[i].index != r->regions[last - 1].index;
}

int
pic_render_ahead(const pic_render *r, size_t off)
{
    pic_render_span newest;

    pic_render_newest(r, &newest);
    return pic_render_ahead_of(r, &newest, off);
}

int
pic_render_client_doc(const pic_render *r, size_t off)
{
    size_t lo = 0, hi = r->n_regions;

    while (lo < hi) {               /* the region holding off: regions partition the text */
        size_t mid = lo + (hi - lo) / 2;

        if (r->regions[mid].end <= off) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo >= r->n_regions || r->regions[lo].start > off
        || r->regions[lo].kind == PIC_REGION_GLUE) {
        return 0;
    }
    const pic_region *g = &r->regions[lo];
    if (g->doc > 0) {
        return 1;
    }
    /* document 0: split when the message's next content region (past any
     * joiner glue) is its document 1 */
    for (size_t j = lo + 1; j < r->n_regions; j++) {
        const pic_region *h = &r->regions[j];
        int               same = h->kind == g->kind && h->index == g->index;

        /* past joiner glue and document 0's own parts (pic_docsplit) */
        if (h->kind != PIC_REGION_GLUE && !(same && h->doc == 0)) {
            return same && h->doc == 1;
        }
    }
    return 0;
}

int
pic_segment_request(const pic_segment_cfg *cfg, const pic_request *req,
                    pic_segmentation *out, pic_error *err)
{
    pic_template_opts opts = { cfg->dialect, cfg->marker, cfg->split_parts };
    pic_segment_list      sv = { NULL, 0, 0 };

    pic_segmentation_free(out);
    if (pic_template_render(&opts, req, &out->render, err) != 0) {
        return -1;
    }
    if (cfg->unmarked_docs && pic_docsplit_render(&out->render, PIC_DOCSPLIT_SOFT_MIN) != 0) {
        pic_segmentation_free(out);
        return pic_error_oom(err, __func__);
    }
    const pic_render *r = &out->render;

    /* pieces: leading glue joins the first content region (the role header
     * and the system prompt form the exact prefix), except a tool schema:
     * then the tools preamble is a piece of its own, so that every schema's
     * bytes, and key, are the same at any rank in any subset of tools */
    size_t i = 0, lead = 0;
    if (r->n_regions > 1 && r->regions[0].kind == PIC_REGION_GLUE
        && r->regions[1].kind != PIC_REGION_TOOL_SCHEMA) {
        lead = r->regions[0].end;
        i = 1;
    }
    size_t          last_content_seg = SIZE_MAX;
    pic_render_span newest;
    pic_render_newest(r, &newest);
    for (; i < r->n_regions; i++) {
        const pic_region *g = &r->regions[i];
        int               glue = g->kind == PIC_REGION_GLUE;
        size_t            start = lead ? 0 : g->start;
        lead = 0;
        if (pic_seg_piece(cfg, r, glue ? NULL : g, start, g->end, &newest, &sv) != 0) {
            goto oom;
        }
        if (!glue) {
            last_content_seg = sv.n - 1;
        }
    }
    /* kinds and keys */
    size_t tail = last_content_seg == SIZE_MAX ? 0 : last_content_seg;
    for (size_t k = 0; k < sv.n; k++) {
        pic_segment *s = &sv.v[k];
        if (k >= tail) {
            s->kind = PIC_SEG_DYNAMIC;
        } else if (k == 0) {
            s->kind = PIC_SEG_PREFIX;
        } else if (s->len < cfg->min_pic_bytes) {
            s->kind = PIC_SEG_DYNAMIC;
        } else {
            s->kind = PIC_SEG_PIC;
        }
        s->tokens = pic_segment_token_estimate(s->len);
        pic_key_compute(cfg->keys, r->text.data + s->start, s->len, &s->key);
    }
    out->segs = sv.v;
    out->n_segs = sv.n;
    return 0;

oom:
    free(sv.v);
    pic_segmentation_free(out);
    return pic_error_oom(err, __func__);
}

int
pic_segmentation_marked(const pic_segmentation *s, const pic_marker *m, pic_buf *out)
{
    for (size_t i = 0; i < s->n_segs; i++) {
        if (i) {
            pic_buf_append(out, m->str, m->len);
        }
        pic_marker_escape(m, s->render.text.data + s->segs[i].start, s->segs[i].len, out);
    }
    return out->oom ? -1 : 0;
}
