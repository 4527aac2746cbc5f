/*
 * assemble.h — build a request's run state from segments and cached
 * entries (DESIGN.md §3.3), in one of four modes.
 *
 * Segments are laid end to end from position 0.  A segment with a usable
 * entry contributes its interior from the entry; everything else — head
 * and tail seams, segments without an entry, the trailing query — is
 * recomputed.  The recomputed tokens form runs [H1], [T1 H2], …, [Tn Q]
 * (runs merge across segments without entries), each prefilled through all
 * layers at its global positions.  Before the run that follows interior I:
 *  - its attention K/V go to slots off+i0 .. off+i1−1, K rotated from local
 *    to global position by R(off) (partial NeoX RoPE, R(a)R(b) = R(a+b));
 *  - every linear layer advances S ← T_I S + S_I|0 (PIC) or S ← S + S_I|0
 *    (naive) and takes the interior's conv tail as its conv window.
 * A whole entry (no T) of the first segment, at position 0 with an empty
 * state, is the exact prefix: S ← S_C|0, KV as stored.
 *
 * Modes:
 *  - PIC_MODE_FULL: every token recomputed (entries ignored);
 *  - PIC_MODE_PREFIX: only a whole entry of segment 0 is used;
 *  - PIC_MODE_NAIVE: every entry composed as S ← S + S|0 (no T);
 *  - PIC_MODE_PIC: entries with T composed, whole entries only as prefix.
 * Entries that do not fit (other model, other tokens, no T in PIC mode away
 * from position 0) are recomputed instead and counted in n_rejected: a
 * request never fails because of a cache entry.
 *
 * After the call s holds an ordinary decode state at s->pos = Σ n (linear
 * states, conv windows, full KV): decode continues with pic_forward.
 *
 * Thread safety: pic_assemble only reads the model and the entries, and
 * writes s; any number of calls may run at once on distinct states.
 */
#ifndef PIC_ASSEMBLE_H
#define PIC_ASSEMBLE_H

#include <stddef.h>

#include "entry.h"
#include "model.h"
#include "pic_kernels.h"
#include "state.h"

typedef enum {
    PIC_MODE_FULL = 0,
    PIC_MODE_PREFIX,
    PIC_MODE_NAIVE,
    PIC_MODE_PIC,
} pic_mode;

typedef struct {
    const int       *tokens;        /* (n) */
    int              n;
    const pic_entry *entry;         /* NULL: recompute the segment */
} pic_asm_segment;

typedef struct {
    int    n_tokens;                /* prompt tokens (Σ n) */
    int    n_recomputed;            /* tokens run through the forward */
    int    n_reused;                /* tokens whose state came from entries */
    int    n_prefix;                /* of which from the exact prefix */
    int    n_runs;                  /* forward calls */
    int    n_composed;              /* entries composed (prefix included) */
    int    n_rejected;              /* entries that did not fit: recomputed */
    int    n_partial;               /* tokens run through the first layers only
                                     * (selective recompute's selection, blend.h) */
    double compose_flops;           /* T·S GEMM FLOPs */
    double t_kv;                    /* seconds placing / rotating interior KV */
    double t_compose;               /* seconds composing linear states */
    double t_forward;               /* seconds in recompute runs */
    double t_total;
} pic_assemble_stats;

/* Assemble segs (n_seg, laid from position 0) into s (reset first) in
 * mode; logits (V) of the last prompt token when logits != NULL (a last
 * segment whose entry leaves no token to recompute is then recomputed).
 * st may be NULL.  be NULL: CPU.  -1 + err on bad input or OOM (s is then
 * unspecified: reset it). */
int pic_assemble(const pic_model *m, const pic_backend *be, pic_state *s,
                 const pic_asm_segment *segs, int n_seg, pic_mode mode,
                 float *logits, pic_assemble_stats *st, char *err,
                 size_t errlen);

/* pic_assemble continuing a state that already holds positions [0, p0)
 * (s->pos == p0, exactly computed or restored: the exact prefix of
 * DESIGN §3.4): segs are laid from p0, nothing is reset, and a whole entry
 * is the exact prefix only at position 0.  -1 + err as pic_assemble (also
 * when s->pos != p0). */
int pic_assemble_at(const pic_model *m, const pic_backend *be, pic_state *s, int p0,
                    const pic_asm_segment *segs, int n_seg, pic_mode mode,
                    float *logits, pic_assemble_stats *st, char *err, size_t errlen);

/* Advance every linear layer of s over entry e's interior: S ← T S + S|0
 * (use_T and e->has_T) or S ← S + S|0, and the conv window ← e's conv tail;
 * adds the GEMM FLOPs to *flops when not NULL.  -1 on OOM. */
int pic_assemble_compose(pic_state *s, const pic_entry *e, int use_T, double *flops);

/* pic_assemble_compose for linear layer l only (other layers: no-op). */
int pic_assemble_compose_layer(const pic_entry *e, pic_state *s, int l, int use_T,
                               double *flops);

/* Write e's interior K/V into s at global offset off (slots off+i0 ..
 * off+i1−1), K rotated by R(off).  s must have those slots reserved.
 * -1 on OOM. */
int pic_assemble_place_kv(const pic_model *m, pic_state *s, const pic_entry *e, int off);

/* *total = the tokens of segs (n_seg >= 1, each segment non-empty, under
 * 2^28 in all); 0, or -1 + err naming the bad segment. */
int pic_assemble_total(const pic_asm_segment *segs, int n_seg, int *total, char *err,
                       size_t errlen);

/* "full", "prefix", "naive", "pic". */
const char *pic_mode_name(pic_mode mode);

/* Parse a mode name; -1 if unknown. */
int pic_mode_parse(const char *name, pic_mode *mode);

#endif /* PIC_ASSEMBLE_H */
