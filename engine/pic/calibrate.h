/*
 * calibrate.h — choose the seam width for a checkpoint from the drift it
 * measures (DESIGN.md §3.3, §5).
 *
 * How much of a PIC answer depends on the recomputed seams is a property of
 * the model: a checkpoint that reads a tool result in the light of a
 * question asked before it needs wider seams than one that looks values up.
 * pic_calibrate serves sample prompts (segmented as the engine serves them)
 * twice per candidate width w: by full recompute, the reference, and with
 * every PIC segment composed from a seam entry of width w (the prefix
 * segment from its exact-prefix entry, dynamic segments recomputed).  The
 * drift of w is the KL divergence from full recompute's next-token
 * distribution at the answer positions (the last prompt token and full
 * recompute's greedy answer, teacher-forced, up to a stop token or
 * answer_tokens), averaged per prompt, then over prompts.  The chosen width
 * is the smallest whose drift is within the bound: the most reuse the
 * checkpoint affords.
 *
 * Per class.  Client-delimited documents (PIC_SEG_FLAG_DOC) and the other
 * PIC segments (tool results, system prompts, CDC chunks) need not afford
 * the same width: a model that looks a value up in a document may read a
 * tool result in the light of the question asked before it.  Each class is
 * also measured alone (its segments composed at w, the other class's
 * recomputed).  Drift adds up over segments to first order, so the drift of
 * a pair of widths (documents, others) is estimated as the sum of the two
 * classes' drifts over every prompt, and the share of the prompts served
 * from entries adds up exactly; the pair with the largest share whose
 * estimate is within the bound (one that serves more than the one width)
 * is then measured over every prompt, and serve takes it when it is within
 * the bound, else the one width for both classes.  A class may also be
 * recomputed in a pair (no drift, no share: the other class measured
 * alone); when no width is within the bound for both classes together and no
 * pair is, every class is recomputed (PIC_CALIB_RECOMPUTE): a checkpoint
 * that leans on cross-segment attention is served exactly (prefix reuse
 * only) rather than wrong.
 *
 * A calibration file (JSON, object "pic.calibration") records the model's
 * fingerprint, the options, every width's figures and the choice;
 * `pic-engine calibrate` writes it, `pic-engine serve` reads it
 * (pic_calib_load) and shows it in /status.
 */
#ifndef PIC_CALIBRATE_H
#define PIC_CALIBRATE_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "entry.h"
#include "model.h"
#include "pic_segment.h"

#define PIC_CALIB_MAX_WS 16

/* A served width that is none: the class's segments are recomputed (no
 * width met the bound). */
#define PIC_CALIB_RECOMPUTE (-1)

/* Default drift bound: mean KL (nats) on the answer tokens. */
#define PIC_CALIB_KL_BOUND 1e-3

typedef struct {
    int          ws[PIC_CALIB_MAX_WS];  /* candidate widths, ascending, each <= PIC_ENTRY_MAX_W */
    int          n_ws;
    pic_dtype    dtype;                 /* storage of the seam entries */
    int          answer_tokens;         /* answer positions compared per prompt (>= 1) */
    double       kl_bound;              /* > 0 */
} pic_calib_opts;

/* One sample prompt as the engine serves it: consecutive segments. */
typedef struct {
    int                 n_seg;
    const int         **tokens;     /* [n_seg] each (n[i]) */
    const int          *n;          /* [n_seg] */
    const pic_seg_kind *kind;       /* [n_seg] PREFIX: exact prefix (segment 0), PIC: seam
                                     * entry, DYNAMIC: recomputed */
    const unsigned char *doc;       /* [n_seg] 1: a client-delimited document
                                     * (PIC_SEG_FLAG_DOC); NULL: none is */
} pic_calib_prompt;

/* One candidate width's figures over every prompt. */
typedef struct {
    int    w;
    double kl_mean;         /* drift: mean over prompts of the mean KL on their answer tokens */
    double kl_max;          /* largest KL at any answer position */
    double argmax_match;    /* answer positions whose most likely token agrees, fraction */
    double greedy_same;     /* prompts whose greedy answer equals full recompute's, fraction */
    double pic_share;       /* prompt tokens served from seam entries, fraction */
} pic_calib_row;

/* One class of segments at every width of the options. */
typedef struct {
    pic_calib_row rows[PIC_CALIB_MAX_WS];   /* one per o->ws */
    int           prompts;      /* prompts measured: with a segment of the class (all: every one) */
    long          tokens;       /* their tokens */
} pic_calib_class;

/* What a calibration measured and chose. */
typedef struct {
    pic_calib_class all;        /* every PIC segment at the width */
    pic_calib_class doc;        /* client-delimited documents at it, the others recomputed */
    pic_calib_class other;      /* the other PIC segments at it, documents recomputed */
    int             chosen;     /* all's row: the first kl_mean <= bound, else the least drift */
    int             met;        /* that row is within the bound */
    int             have_split; /* a pair of widths was measured (below) */
    int             split_w_doc;    /* the documents' width of the pair (-1: recomputed;
                                     * split.w the others', likewise) */
    double          split_estimate; /* its drift estimated from the classes alone */
    pic_calib_row   split;      /* the pair measured over every prompt (w: the others') */
    int             split_met;  /* split.kl_mean <= bound */
    int             w, w_doc;   /* served: the pair when it is measured within the
                                 * bound, else all's choice for both when met, else
                                 * PIC_CALIB_RECOMPUTE for both */
} pic_calib_result;

/* Measure every width of o over prompts (n_prompts >= 1), per class and
 * together, into *r (above).  CPU; threads as set with
 * pic_kernels_set_threads.  progress, when not NULL, is called after each
 * prompt of each pass (the split's is a second pass: done counts again).
 * 0, or -1 + err on bad input or OOM. */
int pic_calibrate(const pic_model *m, const pic_calib_prompt *prompts, int n_prompts,
                  const pic_calib_opts *o, pic_calib_result *r,
                  void (*progress)(int done, int total, void *arg), void *arg,
                  char *err, size_t errlen);

/* The calibration file's document for model m (fingerprint, name), o, the
 * prompts' count and tokens and the result; NULL on OOM. */
cJSON *pic_calib_json(const pic_model *m, const char *model_name, const pic_calib_opts *o,
                      int n_prompts, long prompt_tokens, const pic_calib_result *r);

/* Read calibration file path for model m: *w = the served width of PIC
 * segments, *w_doc = that of client-delimited documents (both the chosen
 * width in a file without a per-class choice) and *doc = the parsed document
 * (the caller's; cJSON_Delete it); either served width may be
 * PIC_CALIB_RECOMPUTE.  -1 + err when the file cannot be read, is not a
 * calibration, was measured on another checkpoint (fingerprint), or names a
 * width above PIC_ENTRY_MAX_W. */
int pic_calib_load(const char *path, const pic_model *m, int *w, int *w_doc, cJSON **doc,
                   char *err, size_t errlen);

#endif /* PIC_CALIBRATE_H */
