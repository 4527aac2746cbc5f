/*
 * safetensors.h — a read-only, mmap-backed reader for Hugging Face
 * safetensors checkpoints (one file, or shards named by
 * model.safetensors.index.json).
 *
 * The files are hostile input: every header length, shape, dtype and offset
 * is checked against the file and against overflow before use, as ggml's
 * gguf reader does.  Errors name the file and the tensor.
 */
#ifndef PIC_SAFETENSORS_H
#define PIC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define PIC_ST_MAX_DIMS    8
#define PIC_ST_MAX_HEADER  (100u << 20)     /* header JSON bytes */

typedef enum {
    PIC_ST_DTYPE_F32 = 0,
    PIC_ST_DTYPE_F16,
    PIC_ST_DTYPE_BF16,
    PIC_ST_DTYPE_OTHER,     /* a valid safetensors dtype we cannot compute in */
    PIC_ST_DTYPE_EXT,       /* another file format's tensor: read converts */
} pic_st_dtype;

typedef struct pic_st_tensor pic_st_tensor;

/* Elements [first, first+n) of an EXT tensor to fp32 in dst (the range
 * checked by the caller); 0, or -1 + err. */
typedef int (*pic_st_read_fn)(const pic_st_tensor *t, uint64_t first, uint64_t n,
                              float *dst, char *err, size_t errlen);

struct pic_st_tensor {
    const char    *name;                    /* owned by the pic_st */
    const char    *file;                    /* path of the file holding it */
    pic_st_dtype   dtype;
    char           dtype_name[12];          /* as written: "BF16", "I64", ... */
    int            ndim;
    int64_t        shape[PIC_ST_MAX_DIMS];  /* (ndim) */
    uint64_t       numel;                   /* product of shape (1 when ndim 0) */
    uint64_t       nbytes;                  /* numel * element size */
    const uint8_t *data;                    /* (nbytes) inside the mmap, unaligned */
    pic_st_read_fn read;                    /* EXT: the conversion; else NULL */
    const void    *ext;                     /* EXT: read's description of it */
};

typedef struct pic_st pic_st;               /* a checkpoint: one or more files */

/* Map one .safetensors file and validate its header; NULL + err on error. */
pic_st *pic_st_open(const char *path, char *err, size_t errlen);

/* Open a checkpoint directory: model.safetensors.index.json (each shard
 * mapped once), else model.safetensors, else every *.safetensors file. */
pic_st *pic_st_open_dir(const char *dir, char *err, size_t errlen);

/* A checkpoint of one file already in memory (bytes stay the caller's),
 * to be filled with pic_st_add and pic_st_seal: another format's tensors
 * under Hugging Face names.  NULL on OOM. */
pic_st *pic_st_new_view(const char *path, const uint8_t *bytes, size_t len);

/* Add a copy of *t (its name copied; t->file set to the view's path);
 * 0, or -1 on OOM. */
int pic_st_add(pic_st *st, const pic_st_tensor *t);

/* Sort the added tensors by name so pic_st_find works; -1 when two share
 * a name. */
int pic_st_seal(pic_st *st);

/* Unmap and free everything (NULL is fine). */
void pic_st_close(pic_st *st);

/* The tensor called name, or NULL. */
const pic_st_tensor *pic_st_find(const pic_st *st, const char *name);

/* Number of tensors, and the i-th in name order (i < count). */
size_t pic_st_count(const pic_st *st);
const pic_st_tensor *pic_st_get(const pic_st *st, size_t i);

/* Number of mapped files, and file i's path and whole bytes (sorted by path). */
size_t pic_st_file_count(const pic_st *st);
const char *pic_st_file_path(const pic_st *st, size_t i);
const uint8_t *pic_st_file_bytes(const pic_st *st, size_t i, size_t *len);

/* Convert elements [first, first+n) of t (F32/F16/BF16, or EXT through
 * t->read) to fp32 in dst;
 * -1 + err (naming file and tensor) for another dtype or a range outside t.
 * The source pages are released afterwards (pic_st_release). */
int pic_st_read_f32(const pic_st_tensor *t, uint64_t first, uint64_t n,
                    float *dst, char *err, size_t errlen);

/* Drop the whole pages inside mapped bytes [p, p+len) from this process's
 * resident set (they are read again from the page cache if touched), so a
 * load never holds the mapped checkpoint and its fp32 copy at once. */
void pic_st_release(const void *p, size_t len);

/* IEEE half / bfloat16 bit patterns to fp32 (exact). */
float pic_f16_to_f32(uint16_t h);
float pic_bf16_to_f32(uint16_t h);

#endif /* PIC_SAFETENSORS_H */
