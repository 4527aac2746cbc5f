/*
 * pic_render.c — what every dialect's renderer writes with: the rendered
 * text with its regions, client content cut into documents, role names
 * (pic_template.h, pic_template_int.h).
 */
#include <stdlib.h>
#include <string.h>

#include "pic_template.h"
#include "pic_template_int.h"
#include "pic_utf8.h"

const char *
pic_region_kind_name(pic_region_kind k)
{
    switch (k) {
    case PIC_REGION_GLUE:        return "glue";
    case PIC_REGION_SYSTEM:      return "system";
    case PIC_REGION_TOOL_SCHEMA: return "tool_schema";
    case PIC_REGION_USER:        return "user";
    case PIC_REGION_ASSISTANT:   return "assistant";
    case PIC_REGION_TOOL_RESULT: return "tool_result";
    case PIC_REGION_PROMPT:      return "prompt";
    }
    return "unknown";
}

/* --- output with regions --- */

void
pic_render_init(pic_render *r)
{
    pic_buf_init(&r->text);
    r->regions = NULL;
    r->n_regions = 0;
    r->cap_regions = 0;
    r->oom = 0;
}

void
pic_render_free(pic_render *r)
{
    pic_buf_free(&r->text);
    free(r->regions);
    pic_render_init(r);
}

void
pic_render_push(pic_render *r, pic_region_kind kind, int32_t index, uint32_t doc,
                const char *s, size_t n)
{
    if (n == 0 || r->oom) {
        return;
    }
    size_t start = r->text.len;
    if (pic_buf_append(&r->text, s, n) != 0) {
        r->oom = 1;
        return;
    }
    pic_region *last = r->n_regions ? &r->regions[r->n_regions - 1] : NULL;
    if (kind == PIC_REGION_GLUE && last && last->kind == PIC_REGION_GLUE) {
        last->end = r->text.len;            /* glue runs merge */
        return;
    }
    if (pic_grow((void **) &r->regions, &r->cap_regions, r->n_regions + 1,
                 sizeof(*r->regions)) != 0) {
        r->oom = 1;
        return;
    }
    pic_region *g = &r->regions[r->n_regions++];
    g->kind = kind;
    g->index = kind == PIC_REGION_GLUE ? -1 : index;
    g->doc = doc;
    g->start = start;
    g->end = r->text.len;
}

void
pic_glue(pic_render *r, const char *s)
{
    pic_render_push(r, PIC_REGION_GLUE, -1, 0, s, strlen(s));
}

/* --- rich text: client content as documents and joiner glue --- */

void
pic_rt_init(pic_rtext *rt)
{
    memset(rt, 0, sizeof(*rt));
    pic_buf_init(&rt->buf);
}

void
pic_rt_reset(pic_rtext *rt)
{
    pic_buf_reset(&rt->buf);
    rt->n = 0;
    rt->lo = rt->hi = 0;
}

void
pic_rt_free(pic_rtext *rt)
{
    pic_buf_free(&rt->buf);
    free(rt->p);
    pic_rt_init(rt);
}

void
pic_rt_add(pic_rtext *rt, const char *s, size_t n, int glue, int new_doc)
{
    if (n == 0 || rt->oom) {
        return;
    }
    size_t start = rt->buf.len;
    if (pic_buf_append(&rt->buf, s, n) != 0) {
        rt->oom = 1;
        return;
    }
    rt->hi = rt->buf.len;
    pic_piece *last = rt->n ? &rt->p[rt->n - 1] : NULL;
    if (last && last->glue == glue && (glue || !new_doc)) {
        last->end = rt->buf.len;
        return;
    }
    if (pic_grow((void **) &rt->p, &rt->cap, rt->n + 1, sizeof(*rt->p)) != 0) {
        rt->oom = 1;
        return;
    }
    rt->p[rt->n].start = start;
    rt->p[rt->n].end = rt->buf.len;
    rt->p[rt->n].glue = glue;
    rt->n++;
}

void
pic_rt_add_split(pic_rtext *rt, const pic_str *s, const pic_marker *split, int new_doc)
{
    if (!split) {
        pic_rt_add(rt, s->ptr, s->len, 0, new_doc);
        return;
    }
    size_t pos = 0, a, b;
    while (pic_marker_next(split, s->ptr, s->len, &pos, &a, &b)) {
        pic_rt_add(rt, s->ptr + a, b - a, 0, new_doc);
        new_doc = 1;
    }
}

/* The message content as the template sees it: a string, or the text parts
 * joined by `joiner` ("\n" for Qwen3 as vLLM flattens them, "" for
 * Qwen3.5's render_content); documents per opts. */
void
pic_rt_content(pic_rtext *rt, const pic_message *m, const char *joiner,
               const pic_marker *split, int split_parts)
{
    pic_rt_reset(rt);
    if (m->content_kind == PIC_CONTENT_STRING) {
        pic_rt_add_split(rt, &m->content, split, 1);
    } else if (m->content_kind == PIC_CONTENT_PARTS) {
        for (size_t j = 0; j < m->n_parts; j++) {
            if (j && joiner[0]) {
                pic_rt_add(rt, joiner, strlen(joiner), split_parts, 0);
            }
            pic_rt_add_split(rt, &m->parts[j], split, split_parts || j == 0);
        }
    }
    rt->lo = 0;
    rt->hi = rt->buf.len;
}

/* Jinja's |trim: Python str.strip() of the whole content. */
void
pic_rt_trim(pic_rtext *rt)
{
    if (rt->buf.len) {
        pic_utf8_py_strip(rt->buf.data, rt->buf.len, &rt->lo, &rt->hi);
    }
}

const char *
pic_rt_data(const pic_rtext *rt)
{
    return rt->buf.data ? rt->buf.data + rt->lo : "";
}

size_t
pic_rt_len(const pic_rtext *rt)
{
    return rt->hi - rt->lo;
}

void
pic_rt_emit(pic_render *r, const pic_rtext *rt, pic_region_kind kind, int32_t index)
{
    uint32_t doc = 0;
    if (rt->oom) {
        r->oom = 1;
        return;
    }
    for (size_t i = 0; i < rt->n; i++) {
        size_t a = rt->p[i].start > rt->lo ? rt->p[i].start : rt->lo;
        size_t b = rt->p[i].end < rt->hi ? rt->p[i].end : rt->hi;
        if (a >= b) {
            continue;
        }
        if (rt->p[i].glue) {
            pic_render_push(r, PIC_REGION_GLUE, -1, 0, rt->buf.data + a, b - a);
        } else {
            pic_render_push(r, kind, index, doc++, rt->buf.data + a, b - a);
        }
    }
}

/* --- roles --- */

pic_region_kind
pic_region_of(pic_role role)
{
    switch (role) {
    case PIC_ROLE_SYSTEM:    return PIC_REGION_SYSTEM;
    case PIC_ROLE_USER:      return PIC_REGION_USER;
    case PIC_ROLE_ASSISTANT: return PIC_REGION_ASSISTANT;
    case PIC_ROLE_TOOL:      return PIC_REGION_TOOL_RESULT;
    }
    return PIC_REGION_USER;
}

const char *
pic_role_name(pic_role role)
{
    switch (role) {
    case PIC_ROLE_SYSTEM:    return "system";
    case PIC_ROLE_USER:      return "user";
    case PIC_ROLE_ASSISTANT: return "assistant";
    case PIC_ROLE_TOOL:      return "tool";
    }
    return "user";
}
