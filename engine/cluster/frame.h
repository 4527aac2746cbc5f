/*
 * frame.h — the binary frame that carries one segment entry between engines
 * (DESIGN.md §4.3): worker → combine node after a cold prefill, holder →
 * requester on a segment pull.
 *
 * Layout, all integers little-endian:
 *
 *   off  size  field
 *     0     4  magic "PICF"
 *     4     2  version (1)
 *     6     2  flags (0; reserved)
 *     8     4  header_bytes = 72 + 40 × n_desc
 *    12     4  n_desc (≤ PIC_FRAME_MAX_DESC)
 *    16     8  model fingerprint
 *    24    16  segment key: xxh3-128 as 16 bytes, the 32 hex chars in order
 *    40     8  segment byte length (the length tag that travels with the key)
 *    48     4  n_tokens  (L)
 *    52     4  h         (head seam)
 *    56     4  w         (seam width)
 *    60     4  reserved (0)
 *    64     8  payload_bytes
 *    72        descriptors, 40 bytes each:
 *                u16 layer, u8 kind (pic_tensor_kind), u8 dtype (0 f32, 1 bf16,
 *                2 f16), u8 ndim (1..4), u8[3] reserved (0), u32 shape[4]
 *                (unused dims 0), u64 offset (in the payload), u64 bytes
 *    header_bytes  payload (payload_bytes): for an entry, pic_entry_serialize's
 *                output; the descriptors locate each tensor inside it
 *    end − 8   8  xxh3-64 of every byte before it
 *
 * The descriptors let a receiver (or a transport that moves tensors
 * separately, such as NCCL into device memory) know every tensor's place,
 * type and shape before touching the payload.
 *
 * The decoder treats the frame as hostile: exact total length, magic,
 * version, reserved fields zero, counts bounded, every descriptor's dtype,
 * ndim, shape × element size = bytes, offset + bytes inside the payload,
 * descriptors in offset order without overlap, checksum, then the
 * expectations of the caller (fingerprint, key, length, layer bound).  Any
 * failure is an error with a reason; the caller recomputes the segment.
 */
#ifndef PIC_FRAME_H
#define PIC_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "entry.h"
#include "model.h"

#define PIC_FRAME_MAGIC      "PICF"
#define PIC_FRAME_VERSION    1
#define PIC_FRAME_HDR        72
#define PIC_FRAME_DESC       40
#define PIC_FRAME_TRAILER    8
#define PIC_FRAME_MAX_DESC   (5 * PIC_MAX_LAYERS)

typedef enum {
    PIC_FRAME_F32 = 0,
    PIC_FRAME_BF16,
    PIC_FRAME_F16,
} pic_frame_dtype;

typedef struct {
    uint16_t layer;
    uint8_t  kind;              /* pic_tensor_kind */
    uint8_t  dtype;             /* pic_frame_dtype */
    uint8_t  ndim;
    uint32_t shape[4];
    uint64_t offset;            /* in the payload */
    uint64_t bytes;
} pic_frame_desc;

typedef struct {
    uint64_t              fingerprint;
    uint8_t               key[16];
    uint64_t              seg_bytes;
    uint32_t              n_tokens, h, w;
    uint32_t              n_desc;
    const pic_frame_desc *desc;         /* (n_desc) */
    const void           *payload;      /* (payload_bytes) */
    uint64_t              payload_bytes;
} pic_frame;

/* What the receiver requires of a frame. */
typedef struct {
    uint64_t       fingerprint;         /* must match */
    const uint8_t *key;                 /* 16 bytes, or NULL: any */
    uint64_t       seg_bytes;           /* 0: any */
    int            n_layers;            /* descriptors' layer bound; 0: none */
    uint64_t       max_payload;         /* 0: no bound */
} pic_frame_expect;

/* Bytes of a frame with n_desc descriptors and payload_bytes of payload;
 * 0 on overflow or too many descriptors. */
size_t pic_frame_size(uint32_t n_desc, uint64_t payload_bytes);

/* Write f into buf (cap bytes); returns the frame's size, or 0 if cap is
 * too small or f is inconsistent (checked as the decoder would). */
size_t pic_frame_encode(const pic_frame *f, void *buf, size_t cap);

/* Check and parse buf (len bytes) against x; on success returns 0 and out
 * points into buf (desc are copied into descbuf, room for max_desc).  -1 +
 * err (naming the failed check) otherwise. */
int pic_frame_decode(const void *buf, size_t len, const pic_frame_expect *x,
                     pic_frame *out, pic_frame_desc *descbuf, uint32_t max_desc,
                     char *err, size_t errlen);


/* --- entries --- */

/* The frame of entry e under (key_hex, seg_bytes): malloc'ed, *len bytes;
 * NULL on a bad key or ENOMEM. */
void *pic_frame_from_entry(const pic_entry *e, const char *key_hex, uint64_t seg_bytes,
                           size_t *len);

/* Decode a frame (buf, len) that must carry key_hex / seg_bytes (0: any)
 * for model m, and rebuild its entry (refs 1): frame checks, then
 * pic_entry_deserialize's own checks, then the descriptors must agree with
 * the entry's tensors.  NULL + err on any failure. */
pic_entry *pic_frame_to_entry(const pic_model *m, const void *buf, size_t len,
                              const char *key_hex, uint64_t seg_bytes, char *err,
                              size_t errlen);

#endif /* PIC_FRAME_H */
