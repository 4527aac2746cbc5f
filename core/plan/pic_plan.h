/*
 * pic_plan.h — the plan: the gateway's instructions to the combine engine
 * (DESIGN.md §2.1 "Plans", §4.3: plans are JSON).
 *
 * Wire format, version 1 (one JSON object; field order as below on encode,
 * any order on decode; no other fields allowed):
 *
 *   {
 *     "version": 1,
 *     "id": "7f3a9c01",            plan id: 1-64 chars of [A-Za-z0-9_.-]
 *     "combine": "e1",             engine that assembles and decodes
 *     "scope": "",                 cache scope the keys were made under
 *     "segments": [                prompt order, covering the prompt exactly
 *       { "key": "<32 hex>",       segment key (pic_key.h), lowercase
 *         "offset": 0,             byte offset in the rendered prompt
 *         "bytes": 812,            byte length, checked together with the key
 *         "tokens": 203,           token estimate (<= bytes)
 *         "kind": "prefix",        "prefix" (index 0 only) | "pic" | "dynamic"
 *         "holders": ["e1"],       engines holding the entry (0-8, distinct)
 *         "worker": "e2" }         engine assigned to prefill it cold, or null
 *     ]                            (never for "dynamic" segments)
 *   }
 *
 * Engine ids are 1-64 chars of [A-Za-z0-9_.:@/-] ("e1", "10.0.0.5:8081").
 * Decoding treats the text as hostile: strict JSON (pic_json_parse, depth
 * 8), exact types, every limit and cross-check above (offsets contiguous
 * from 0, at most 65536 segments and 256 distinct engines); any violation
 * is a 400 naming the field.  In memory, engine ids live once in
 * plan->engines and segments refer to them by index.
 */
#ifndef PIC_PLAN_H
#define PIC_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "pic_buf.h"
#include "pic_error.h"
#include "pic_key.h"
#include "pic_segment.h"

#define PIC_PLAN_VERSION     1
#define PIC_PLAN_ID_MAX      64
#define PIC_ENGINE_ID_MAX    64
#define PIC_PLAN_HOLDERS_MAX 8
#define PIC_PLAN_SEGS_MAX    65536
#define PIC_PLAN_ENGINES_MAX 256

typedef struct {
    char id[PIC_ENGINE_ID_MAX + 1];
} pic_engine_id;

typedef struct {
    pic_key      key;                               /* key.len = bytes */
    uint64_t     offset;
    uint32_t     tokens;
    pic_seg_kind kind;
    uint16_t     n_holders;
    uint16_t     holders[PIC_PLAN_HOLDERS_MAX];     /* indices into engines */
    int32_t      worker;                            /* index into engines, -1 = none */
} pic_plan_segment;

typedef struct {
    uint32_t       version;
    char           id[PIC_PLAN_ID_MAX + 1];
    int32_t        combine;                         /* index into engines */
    char           scope[PIC_KEY_PART_MAX + 1];
    pic_engine_id *engines;
    size_t         n_engines;
    pic_plan_segment *segs;
    size_t         n_segs;
    size_t         cap_engines;
} pic_plan;

/* Makes p an empty version-1 plan (combine = -1, no allocation). */
void pic_plan_init(pic_plan *p);

/* Frees p's arrays; p becomes empty. */
void pic_plan_free(pic_plan *p);

/* 1 if s[0..n) is a valid engine id, else 0. */
int pic_engine_id_valid(const char *s, size_t n);

/* Index of engine `id` in p->engines, adding it if new.  Returns the index,
 * or -1 with err set (invalid id, table full, OOM). */
int32_t pic_plan_engine(pic_plan *p, const char *id, pic_error *err);

/* Fills p's segments from a segmentation (keys, offsets, tokens, kinds; no
 * holders, no workers), with plan id and scope (NULL = "").  p must be
 * freshly initialised.  Returns 0, or -1 with err set. */
int pic_plan_from_segmentation(pic_plan *p, const pic_segmentation *s,
                               const char *id, const char *scope, pic_error *err);

/* Assigns every PIC or PREFIX segment with no holder, from index `from` on,
 * to one of m workers (engine indices workers[0..m), initial loads
 * loads[0..m) or NULL) by LPT over token estimates (pic_lpt.h: the weight).
 * Segments before `from` keep worker -1: an exact-first combine engine
 * recomputes them itself (the extension of its exact prefix up to the
 * first segment it composes; docs/ROUTING.md).  Returns 0, or -1 with err
 * set. */
int pic_plan_assign_lpt(pic_plan *p, const int32_t *workers, const uint64_t *loads,
                        size_t m, size_t from, pic_error *err);

/* Appends p as compact JSON (the wire format above).  Validates p first:
 * returns 0, or -1 with err set (an invalid plan, or OOM). */
int pic_plan_encode(const pic_plan *p, pic_buf *out, pic_error *err);

/* Decodes the wire format from json[0..len) into p (freed first).  Returns
 * 0, or -1 with a 400 (or 500 OOM) in err; p is left empty on error. */
int pic_plan_decode(pic_plan *p, const char *json, size_t len, pic_error *err);

/* --- what the combine engine holds after a plan (X-PIC-Held) ---
 *
 * A 200 to a planned request carries "X-PIC-Held: <hex>": the plan's
 * segments whose entry the combine engine's pool holds once the prompt is
 * assembled (hits, entries it built, entries a peer sent).  Hex digit k,
 * most significant digit first, covers segments 4k..4k+3, bit 0 (value 1)
 * being segment 4k; trailing zero digits are dropped and "0" means none.
 * The gateway records exactly those holders and strips the header.  At
 * most PIC_PLAN_HELD_MAX digits: segments past 4 * PIC_PLAN_HELD_MAX are
 * never reported (under-reporting only costs a later miss). */
#define PIC_PLAN_HELD_HEADER "X-PIC-Held"
#define PIC_PLAN_HELD_MAX    2048          /* hex digits: 8192 segments */

/* Writes the held set of n segments (held[i] != 0: segment i) as hex into
 * out (room for PIC_PLAN_HELD_MAX + 1 bytes, NUL-terminated); returns the
 * length (>= 1). */
size_t pic_plan_held_format(const unsigned char *held, size_t n, char *out);

/* Reads hex[0..len) into held[0..n) (0/1).  Returns 0, or -1 when it is not
 * the format above (empty, too long, not hex, a bit past segment n - 1);
 * held is then all zero. */
int pic_plan_held_parse(const char *hex, size_t len, size_t n, unsigned char *held);

#endif /* PIC_PLAN_H */
