/*
 * pic_cdc.h — content-defined chunking (DESIGN.md §2.1, Irminsul S1/S2).
 *
 * FastCDC with normalised chunking over a Gear rolling hash
 * (h = (h << 1) + gear[byte], restarted at each chunk's min_size): a cut
 * may follow a byte where the top bits of h are zero — log2(avg)+2 bits
 * before avg_size, log2(avg)-2 bits from avg_size on — never before
 * min_size, and is forced at max_size.  The caller restarts chunking at
 * every marker / region edge, so identical content yields identical chunks
 * wherever it sits (S2).  The gear table comes from a fixed splitmix64
 * stream computed into the pic_cdc struct at init: deterministic across
 * builds and hosts, no global state.  The scan tests two hash values per
 * step, both one shift-add from the previous pair (h1 = 2h + g[a],
 * h2 = 4h + 2g[a] + g[b]), which halves the serial dependency chain and
 * gives the same cuts as the byte loop; ~1.3x the byte loop on the
 * development machine.  (A lane-parallel variant hashing every byte in
 * four chains, and 4- and 8-value steps, measured slower.)
 *
 * Token-friendly cuts.  A candidate cut is nudged forward, within `nudge`
 * bytes (and never past max_size), to the next whitespace run: after the
 * run when it ends in a newline, else before the run's last space (BPE
 * pre-tokenisers attach one leading space to the next word, and group
 * newline runs), so a segment boundary rarely splits a token.  Without
 * whitespace in reach the cut only moves to a UTF-8 character boundary.
 *
 * Tail merging (FastCDC): a cut that would leave fewer than min_size bytes
 * of the region is dropped, and the rest joins the chunk, so a region ends
 * in no runt too small to cache.  Every chunk of a region longer than
 * min_size is therefore >= min_size; every chunk but a region's last is
 * <= max_size, and the last one is < max_size + min_size.
 *
 * S1 fallback (pic_cdc_windows): for a chunk that missed, fixed-size
 * sub-windows start at content-defined anchors (the Gear hash over the
 * preceding 64 bytes hits a mask), so content shared with a cached chunk at
 * another offset produces the same windows and the same keys.
 */
#ifndef PIC_CDC_H
#define PIC_CDC_H

#include <stddef.h>
#include <stdint.h>

#include "pic_error.h"
#include "pic_key.h"

typedef struct {
    uint32_t min_size;      /* no cut before this many bytes (default 256) */
    uint32_t avg_size;      /* target average; a power of two (default 1024) */
    uint32_t max_size;      /* forced cut (default 4096) */
    uint32_t nudge;         /* whitespace search window after a cut (default 32, 0 = off) */
} pic_cdc_params;

typedef struct {
    pic_cdc_params p;
    uint64_t       strong;      /* before avg: cut if h < strong (top log2(avg)+2 bits zero) */
    uint64_t       weak;        /* from avg on: cut if h < weak (top log2(avg)-2 bits zero) */
    uint64_t       gear[256];   /* splitmix64 stream, fixed seed */
} pic_cdc;

typedef struct {
    uint32_t off;           /* window start inside the chunk */
    uint32_t len;           /* window length (the fixed size) */
    pic_key  key;
} pic_cdc_window;

/* Fills p with the defaults (256 / 1024 / 4096, nudge 32). */
void pic_cdc_params_default(pic_cdc_params *p);

/* Validates p (NULL = defaults: 16 <= min < avg < max <= 1 GiB, avg a power
 * of two, max - min >= 8, nudge <= 4096) and builds the gear table into c.
 * Returns 0, or -1 with a 400 in err. */
int pic_cdc_init(pic_cdc *c, const pic_cdc_params *p, pic_error *err);

/* Length of the first chunk of the region data[0..n): n when n <= min_size,
 * else a content-defined cut in [min_size, min(n, max_size)], or n when
 * that cut would leave fewer than min_size bytes (tail merging). */
size_t pic_cdc_cut(const pic_cdc *c, const char *data, size_t n);

/* Upper bound on the number of chunks pic_cdc_chunks can produce for n bytes. */
size_t pic_cdc_max_chunks(const pic_cdc *c, size_t n);

/* Chunks the region data[0..n): writes the end offset of every chunk into
 * ends (capacity cap) and returns the chunk count (0 for n == 0), or the
 * count needed when it exceeds cap (then only cap ends are written).  A
 * region of at most min_size bytes is one chunk. */
size_t pic_cdc_chunks(const pic_cdc *c, const char *data, size_t n,
                      size_t *ends, size_t cap);

/* S1: keys of fixed-size windows of `win` bytes (16..65536) at content-
 * defined anchors in data[0..n) (an anchor needs 64 bytes of history;
 * windows do not overlap).  Writes up to cap windows to out and returns
 * the number found (may exceed cap, like pic_cdc_chunks). */
size_t pic_cdc_windows(const pic_cdc *c, const pic_key_ctx *kc, const char *data,
                       size_t n, uint32_t win, pic_cdc_window *out, size_t cap);

#endif /* PIC_CDC_H */
