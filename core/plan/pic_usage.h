/*
 * pic_usage.h — what a foreign OpenAI-compatible server says it reused, read
 * from its answer as it streams past, in pieces cut anywhere: the numbers of
 * "cached_tokens" (usage.prompt_tokens_details: vLLM, SGLang, OpenAI and
 * llama-server), "prompt_tokens" (usage) and llama-server's "cache_n" and
 * "prompt_n" (timings: the prompt tokens it took from its cache and those it
 * computed).  A small JSON lexer keeps string state, so a key's name inside
 * a string value (escaped quotes) never matches; the last occurrence of each
 * key wins (a stream's final chunk carries the totals).
 */
#ifndef PIC_USAGE_H
#define PIC_USAGE_H

#include <stddef.h>
#include <stdint.h>

#define PIC_USAGE_CACHED      0      /* usage.prompt_tokens_details.cached_tokens */
#define PIC_USAGE_PROMPT      1      /* usage.prompt_tokens */
#define PIC_USAGE_CACHE_N     2      /* timings.cache_n (llama-server) */
#define PIC_USAGE_PROMPT_N    3      /* timings.prompt_n (llama-server) */
#define PIC_USAGE_KEYS        4
#define PIC_USAGE_NAME_MAX    16     /* longest key name kept */

typedef struct {
    uint64_t      val[PIC_USAGE_KEYS];   /* the last value of each key */
    unsigned char seen[PIC_USAGE_KEYS];  /* ... when it was met */

    /* lexer state, across pieces */
    int           state;
    int           key;                   /* the key being read, or -1 */
    size_t        name_len;
    char          name[PIC_USAGE_NAME_MAX];
    uint64_t      num;
    int           digits;
} pic_usage;

/* An empty scanner. */
void pic_usage_init(pic_usage *u);

/* Scan the next piece of the answer, p[0..len). */
void pic_usage_scan(pic_usage *u, const unsigned char *p, size_t len);

/* The prompt tokens the server served from its cache: cached_tokens, else
 * cache_n; -1 when it said neither. */
int64_t pic_usage_cached(const pic_usage *u);

/* The prompt's tokens: prompt_tokens, else cache_n + prompt_n; -1 when
 * unknown. */
int64_t pic_usage_prompt(const pic_usage *u);

#endif /* PIC_USAGE_H */
