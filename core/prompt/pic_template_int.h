/*
 * pic_template_int.h — what the dialect renderers of core/prompt share
 * (pic_render.c: output with regions, client content as documents and
 * joiner glue, role names) and the renderers of the families with a file of
 * their own.  Not for use outside core/prompt.
 */
#ifndef PIC_TEMPLATE_INT_H
#define PIC_TEMPLATE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "pic_buf.h"
#include "pic_error.h"
#include "pic_marker.h"
#include "pic_request.h"
#include "pic_template.h"

/* One piece of a message's content: client bytes, or joiner glue. */
typedef struct {
    size_t start;
    size_t end;
    int    glue;
} pic_piece;

/* A message's content as the template sees it, cut into documents. */
typedef struct {
    pic_buf    buf;             /* the content as the template sees it */
    pic_piece *p;
    size_t     n;
    size_t     cap;
    size_t     lo;              /* [lo, hi): the span left after trimming */
    size_t     hi;
    int        oom;
} pic_rtext;

/* Appends n bytes of s to r's text as one region of kind (glue runs merge);
 * sets r->oom on failure. */
void pic_render_push(pic_render *r, pic_region_kind kind, int32_t index, uint32_t doc,
                     const char *s, size_t n);

/* Appends the NUL-terminated template text s as glue. */
void pic_glue(pic_render *r, const char *s);

/* Makes rt empty (no allocation). */
void pic_rt_init(pic_rtext *rt);

/* Empties rt, keeping its memory. */
void pic_rt_reset(pic_rtext *rt);

/* Frees rt's memory; rt becomes empty. */
void pic_rt_free(pic_rtext *rt);

/* Appends n bytes of s as glue or client bytes; client bytes start a new
 * document when new_doc (else they extend the last one). */
void pic_rt_add(pic_rtext *rt, const char *s, size_t n, int glue, int new_doc);

/* Appends s as client bytes, cut into documents at split's markers (which
 * are dropped); split NULL: one piece. */
void pic_rt_add_split(pic_rtext *rt, const pic_str *s, const pic_marker *split, int new_doc);

/* rt := m's content: a string, or its text parts joined by joiner (glue
 * when split_parts, else client bytes); documents per split/split_parts. */
void pic_rt_content(pic_rtext *rt, const pic_message *m, const char *joiner,
                    const pic_marker *split, int split_parts);

/* Jinja's |trim (Python str.strip()) of the whole content. */
void pic_rt_trim(pic_rtext *rt);

/* The trimmed content's bytes ("" when empty) and length. */
const char *pic_rt_data(const pic_rtext *rt);
size_t pic_rt_len(const pic_rtext *rt);

/* Appends rt's trimmed span to r: client pieces as regions of kind (index,
 * documents numbered from 0), joiners as glue. */
void pic_rt_emit(pic_render *r, const pic_rtext *rt, pic_region_kind kind, int32_t index);

/* The region kind of a message body of role. */
pic_region_kind pic_region_of(pic_role role);

/* The role's name as templates print it ("system", "user", "assistant",
 * "tool"). */
const char *pic_role_name(pic_role role);

/* The Llama 3 dialects (pic_template_llama3.c). */
int pic_render_llama3(const pic_template_opts *o, const pic_request *req, pic_render *r,
                      pic_error *err);

/* The Mistral [INST] dialects (pic_template_mistral.c). */
int pic_render_mistral(const pic_template_opts *o, const pic_request *req, pic_render *r,
                       pic_error *err);

#endif /* PIC_TEMPLATE_INT_H */
