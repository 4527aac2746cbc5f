/*
 * tokenizer.h — byte-level BPE tokenizer read from a Hugging Face
 * tokenizer.json (MODEL.md §6): the same ids as the `tokenizers` library.
 *
 * Pipeline of an encode: added tokens matched verbatim first (longest match,
 * honouring special / normalized / lstrip / rstrip / single_word), then on
 * the text between them: normaliser (NFC/NFD/NFKC/NFKD via utf8proc), the
 * pre-tokenizer's regex splits (PCRE2, UTF + UCP), GPT-2 byte<->unicode
 * mapping, BPE merges by rank.  No BOS is added; the post-processor may only
 * be ByteLevel (which adds nothing).
 *
 * A loaded tokenizer is read-only apart from an internal word cache guarded by
 * striped mutexes: any number of threads may encode and decode concurrently
 * with one pic_tokenizer.  A pic_detok belongs to one thread (one stream).
 *
 * tokenizer.json is hostile input: every type, count and id is checked; a bad
 * file gives NULL and a message in err, never a crash.
 */
#ifndef PIC_TOKENIZER_H
#define PIC_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct pic_tokenizer pic_tokenizer;

/* return codes of encode / decode */
enum {
    PIC_TOKENIZER_OK       =  0,
    PIC_TOKENIZER_EUTF8    = -1,   /* input text is not valid UTF-8 */
    PIC_TOKENIZER_ENOMEM   = -2,   /* allocation failed */
    PIC_TOKENIZER_EREGEX   = -3,   /* regex engine error (match limit, ...) */
    PIC_TOKENIZER_EINVAL   = -4,   /* bad argument */
};

/* encode flags */
enum {
    PIC_TOKENIZER_SPLIT_SPECIAL = 1 << 0,  /* special added tokens are plain text
                                             (tokenizers' encode_special_tokens);
                                             non-special added tokens still match */
};

/* Load tokenizer.json at path (size capped at 512 MiB); NULL and a message in
 * err (if errlen > 0) on any error. */
pic_tokenizer *pic_tokenizer_load(const char *path, char *err, size_t errlen);

/* Same, from a JSON text of len bytes in memory (need not be NUL-terminated). */
pic_tokenizer *pic_tokenizer_load_json(const char *json, size_t len,
                                       char *err, size_t errlen);

/* Free a tokenizer (NULL is fine).  No encode/decode may be running on it. */
void pic_tokenizer_free(pic_tokenizer *t);

/* Encode len bytes of UTF-8 text, added/special tokens parsed in the text.
 * On PIC_TOKENIZER_OK *ids is a malloc'ed array of *n_ids ids (free() it;
 * NULL when *n_ids == 0); on error *ids = NULL, *n_ids = 0.  Thread-safe. */
int pic_tokenizer_encode(const pic_tokenizer *t, const char *text, size_t len,
                         int32_t **ids, size_t *n_ids);

/* pic_tokenizer_encode with PIC_TOKENIZER_* flags. */
int pic_tokenizer_encode_flags(const pic_tokenizer *t, const char *text, size_t len,
                               unsigned flags, int32_t **ids, size_t *n_ids);

/* Callback of pic_tokenizer_split: one pre-tokenized word (its bytes in the
 * normalised text, before the byte-level mapping; added_id = -1) or one
 * matched added token (its span in the text, lstrip/rstrip spaces included;
 * added_id = its id).  A non-zero return stops the split. */
typedef int (*pic_tokenizer_piece_fn)(void *ctx, const char *piece, size_t len,
                                      int32_t added_id);

/* Run encode's pipeline up to BPE and hand every piece, in order, to fn
 * (for tests and debugging).  Returns PIC_TOKENIZER_OK, an encode error,
 * or fn's non-zero value. */
int pic_tokenizer_split(const pic_tokenizer *t, const char *text, size_t len,
                        unsigned flags, pic_tokenizer_piece_fn fn, void *ctx);

/* Id of a token given by its vocab string (byte-level form, e.g. "Ġthe") or an
 * added token's content ("<|im_end|>"); -1 if there is none. */
int pic_tokenizer_token_id(const pic_tokenizer *t, const char *piece);

/* Number of id slots: 1 + the largest id of the vocab and added tokens. */
size_t pic_tokenizer_vocab_size(const pic_tokenizer *t);

/* 1 if id is an added token marked special (<|im_end|>, ...), else 0. */
int pic_tokenizer_is_special(const pic_tokenizer *t, int32_t id);

/* Vocab string of id (byte-level form, or the added token's content); NULL if
 * the id is unused.  Valid until pic_tokenizer_free. */
const char *pic_tokenizer_token_str(const pic_tokenizer *t, int32_t id);

/* Raw bytes id decodes to (not necessarily valid UTF-8 alone); NULL if the
 * id is unused.  Valid until pic_tokenizer_free. */
const char *pic_tokenizer_token_bytes(const pic_tokenizer *t, int32_t id, size_t *len);

/* Walk the ids (n) of one encoded text span by span: from token *t, whose
 * first byte is byte *byte of the text, advance past every token that
 * begins before byte end (all that remain when last), updating both.  The
 * tokens passed are the span's: those whose first byte lies in it. */
void pic_tokenizer_advance(const pic_tokenizer *t, const int32_t *ids, size_t n,
                           size_t end, int last, size_t *tok, size_t *byte);

/* One-shot decode as tokenizers' decode(): bytes of every id concatenated,
 * invalid UTF-8 replaced by U+FFFD (maximal subparts, as Rust's
 * from_utf8_lossy), unused ids skipped, special ids skipped iff skip_special.
 * *out is malloc'ed and NUL-terminated (free() it), *out_len excludes the NUL. */
int pic_tokenizer_decode(const pic_tokenizer *t, const int32_t *ids, size_t n_ids,
                         int skip_special, char **out, size_t *out_len);

/* --- streaming decode --- */

/* Incremental decoder: feed ids one at a time, get back only complete UTF-8
 * (a partial sequence is held until completed; an impossible one becomes
 * U+FFFD).  Concatenating every feed and the flush gives exactly
 * pic_tokenizer_decode of all the ids. */
typedef struct {
    const pic_tokenizer *tok;
    int                  skip_special;
    int32_t              keep_id;   /* a special id that gives its text anyway; -1 none */
    unsigned char        pend[4];   /* held-back prefix of a UTF-8 sequence */
    size_t               n_pend;
    char                *buf;       /* (cap) output of the last feed/flush */
    size_t               cap;
} pic_detok;

/* Start a stream on t (special ids produce no text iff skip_special). */
void pic_detok_init(pic_detok *d, const pic_tokenizer *t, int skip_special);

/* Let special id (-1: none) produce its text although specials are skipped:
 * a tool-call opening such as Mistral's [TOOL_CALLS], which the call parser
 * must see. */
void pic_detok_keep(pic_detok *d, int32_t id);

/* Feed one id; returns the text it completes (NUL-terminated, *len bytes, maybe
 * 0), owned by d and valid until the next feed/flush/free; NULL on ENOMEM. */
const char *pic_detok_feed(pic_detok *d, int32_t id, size_t *len);

/* End of stream: returns the held-back bytes as U+FFFD (or ""), as feed. */
const char *pic_detok_flush(pic_detok *d, size_t *len);

/* Free the stream's buffer (the pic_detok itself is the caller's). */
void pic_detok_free(pic_detok *d);

#endif
