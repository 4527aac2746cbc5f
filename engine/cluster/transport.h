/*
 * transport.h — how segment entries move between engines (DESIGN.md §3.5,
 * §4.3).  Control is HTTP/JSON; entries are frames (frame.h).  A transport
 * is a table of operations, so that a GPU path (control over HTTP, the
 * frame payload over NCCL straight into device memory, located by the
 * frame's tensor descriptors) can sit beside the TCP one without the
 * combine node's logic changing.
 *
 * Two operations, both asynchronous on the server's event loop; their
 * callbacks run on the loop:
 *
 *   pull     GET  /v1/pic/segments/{key}?bytes=N on a holder: one frame.
 *   prefill  POST /v1/pic/prefill on a worker ({"fingerprint", "scope",
 *            "segments"}; the worker recomputes each key): the worker prefills the
 *            given segments one at a time, in order, and streams each
 *            entry back as soon as it is built (pipelining), as records
 *                u32 "PICR" | u32 index | u64 frame_len | frame
 *            (index: the segment's position in the request's list;
 *            frame_len 0: that segment failed there; compute it yourself).
 *
 * Every operation ends with exactly one done callback (ok or not: error,
 * timeout, bad record), always from a later turn of the loop (never from
 * inside pull, prefill or cancel); for each segment either on_frame with
 * the bytes (index: its position in the operation, 0 for a pull) or
 * nothing (a segment without a frame when done fires has failed).  Frames
 * are handed over as malloc'ed buffers the callee owns; they are only
 * length-checked here: the worker thread decodes and checks them
 * (pic_frame_to_entry) before use.  cancel stops an operation without any
 * further callback.
 */
#ifndef PIC_TRANSPORT_H
#define PIC_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "pic_auth.h"
#include "tls.h"

#define PIC_RECORD_MAGIC 0x52434950u    /* "PICR" little-endian */
#define PIC_RECORD_HDR   16
#define PIC_FRAME_MAX_BYTES ((uint64_t) 1 << 32)   /* hard bound of max_frame */

typedef struct pic_transport    pic_transport;
typedef struct pic_transport_op pic_transport_op;

/* A segment to prefill remotely. */
typedef struct {
    int         index;          /* the caller's segment index (for its own use) */
    const char *key;            /* 32 hex */
    uint64_t    bytes;          /* the segment's byte length */
    const char *kind;           /* "pic" or "prefix" */
    int         doc;            /* 1: a client-delimited document (the document seam) */
    const char *text;           /* the segment's bytes (UTF-8, bytes long) */
} pic_remote_segment;

/* A frame for segment `index` arrived (buf malloc'ed: the callee frees). */
typedef void (*pic_transport_frame_fn)(void *arg, int index, void *buf, size_t len);

/* The operation is over; ok = 0 on any failure (the caller recomputes
 * what has no frame). */
typedef void (*pic_transport_done_fn)(void *arg, int ok, const char *why);

typedef struct {
    const char *name;           /* "tcp", "nccl", ... */

    /* Pull entry (key, bytes) from peer "host:port". */
    pic_transport_op *(*pull)(pic_transport *t, const char *peer, const char *key,
                              uint64_t bytes, const char *fingerprint, int timeout_ms,
                              pic_transport_frame_fn on_frame,
                              pic_transport_done_fn on_done, void *arg);

    /* Ask worker "host:port" to prefill segs (n) and stream their entries. */
    pic_transport_op *(*prefill)(pic_transport *t, const char *peer,
                                 const pic_remote_segment *segs, int n,
                                 const char *fingerprint, const char *scope, int timeout_ms,
                                 pic_transport_frame_fn on_frame,
                                 pic_transport_done_fn on_done, void *arg);

    /* Stop op: no callback after this returns. */
    void (*cancel)(pic_transport_op *op);

    /* Free the transport (every op must be over or cancelled). */
    void (*free)(pic_transport *t);
} pic_transport_ops;

struct pic_transport {
    const pic_transport_ops *ops;
    struct event_base       *base;
    void                    *priv;
    const pic_auth          *auth;      /* pool credential; NULL or len 0: none */
    uint64_t                 max_frame; /* larger frames are refused (<= PIC_FRAME_MAX_BYTES) */
    SSL_CTX                 *tls;       /* set: every peer is reached over TLS (tls.h);
                                         * borrowed */
};

/* The TCP transport: HTTP/1.1 over loopback or the network (evhttp client
 * on base).  With a credential (auth->len > 0) every request carries its
 * X-PIC-Auth tag ("pic-peer-v1" over "METHOD URI" and the body) and every
 * frame received must be followed by its 32-byte "pic-frame-v1" tag, which
 * is checked and stripped before on_frame; frames above max_frame bytes
 * (0: 256 MiB) end the operation.  auth is borrowed.  NULL on ENOMEM. */
pic_transport *pic_transport_tcp_new(struct event_base *base, const pic_auth *auth,
                                     uint64_t max_frame);

#endif /* PIC_TRANSPORT_H */
