/*
 * reasoning.h — a thinking model's output split into reasoning and content
 * at <think> / </think>, whatever token boundaries fall where.
 *
 * As the Qwen3 / Qwen3.5 templates read an assistant turn back
 * (pic_template.c): reasoning is the text between the tags without
 * leading and trailing newlines, content is what follows </think> without
 * leading newlines.  A Qwen3.5 generation prompt ends inside an open
 * `<think>\n` (thinking on), so the output starts as reasoning; otherwise a
 * `<think>` at the very start of the output (after white space) opens it
 * (and one repeated there after the prompt's is dropped).
 * Output whose think block never closes is all reasoning.
 */
#ifndef PIC_REASONING_H
#define PIC_REASONING_H

#include <stddef.h>

#include "pic_buf.h"

typedef enum {
    PIC_THINK_START = 0,        /* nothing seen: a <think> may open */
    PIC_THINK_REASONING,        /* inside the think block */
    PIC_THINK_CONTENT,          /* after it (or there was none) */
} pic_think_state;

typedef struct {
    pic_think_state state;
    int             strip_nl;   /* drop the newlines that open this part */
    int             fresh;      /* reasoning opened by the prompt, nothing
                                 * out yet: a repeated <think> is dropped */
    pic_buf         hold;       /* text that may still be a tag's start */
} pic_thinkstream;

/* Start a splitter; in_think: the prompt ends inside an open <think>. */
void pic_think_init(pic_thinkstream *t, int in_think);

/* Free its buffer. */
void pic_think_free(pic_thinkstream *t);

/* Feed text; appends what is certain to reasoning and content.  final
 * flushes what is held.  -1 on ENOMEM. */
int pic_think_feed(pic_thinkstream *t, const char *text, size_t len, int final,
                   pic_buf *reasoning, pic_buf *content);

/* 1 when a prompt (rendered chat text) ends inside an open think block. */
int pic_think_prompt_open(const char *prompt, size_t len);

#endif /* PIC_REASONING_H */
