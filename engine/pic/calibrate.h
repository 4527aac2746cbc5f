/*
 * calibrate.h — choose the seam width for a checkpoint from the drift it
 * measures (DESIGN.md §3.3, §5; issue 11 item 5).
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

/* Measure every width of o over prompts (n_prompts >= 1) into rows (o->n_ws)
 * and return the index of the chosen row: the first whose kl_mean <=
 * o->kl_bound, else the one with the least drift (then *met = 0).  CPU;
 * threads as set with pic_kernels_set_threads.  progress, when not NULL, is
 * called after each prompt.  -1 + err on bad input or OOM. */
int pic_calibrate(const pic_model *m, const pic_calib_prompt *prompts, int n_prompts,
                  const pic_calib_opts *o, pic_calib_row *rows, int *met,
                  void (*progress)(int done, int total, void *arg), void *arg,
                  char *err, size_t errlen);

/* The calibration file's document for model m (fingerprint, name), o, the
 * prompts' count and tokens, rows (o->n_ws) and the chosen index; NULL on
 * OOM. */
cJSON *pic_calib_json(const pic_model *m, const char *model_name, const pic_calib_opts *o,
                      int n_prompts, long prompt_tokens, const pic_calib_row *rows,
                      int chosen, int met);

/* Read calibration file path for model m: *w = the chosen width and *doc =
 * the parsed document (the caller's; cJSON_Delete it).  -1 + err when the
 * file cannot be read, is not a calibration, was measured on another
 * checkpoint (fingerprint), or names a width above PIC_ENTRY_MAX_W. */
int pic_calib_load(const char *path, const pic_model *m, int *w, cJSON **doc, char *err,
                   size_t errlen);

#endif /* PIC_CALIBRATE_H */
