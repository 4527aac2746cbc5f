/*
 * gguf.h — a read-only, mmap-backed reader for GGUF files (llama.cpp's
 * model format, versions 2 and 3): the metadata key/value table and the
 * tensor table, with the tensor bytes left in the mapping.
 *
 * The file is hostile input: every count, length, type, dimension and
 * offset is checked against the file and against overflow before use, and
 * nothing is allocated from a header count without a bound.  Errors name
 * the file and the field.  Arrays are indexed once at open, so element i of
 * a string array (tokenizer.ggml.tokens, .merges) is O(1).
 */
#ifndef PIC_GGUF_H
#define PIC_GGUF_H

#include <stddef.h>
#include <stdint.h>

#define PIC_GGUF_MAX_DIMS    4
#define PIC_GGUF_MAX_KV      4096           /* metadata pairs */
#define PIC_GGUF_MAX_TENSORS 1048576
#define PIC_GGUF_MAX_ARRAY   (1u << 24)     /* elements of one array */
#define PIC_GGUF_MAX_STRING  (1u << 26)     /* bytes of one string */

/* metadata value types, as the file writes them */
typedef enum {
    PIC_GGUF_U8 = 0, PIC_GGUF_I8, PIC_GGUF_U16, PIC_GGUF_I16, PIC_GGUF_U32,
    PIC_GGUF_I32, PIC_GGUF_F32, PIC_GGUF_BOOL, PIC_GGUF_STRING, PIC_GGUF_ARRAY,
    PIC_GGUF_U64, PIC_GGUF_I64, PIC_GGUF_F64,
} pic_gguf_vtype;

typedef struct {
    const char    *name;                    /* NUL-terminated copy */
    int            type;                    /* ggml type (gguf_quant.h) */
    int            ndim;
    int64_t        ne[PIC_GGUF_MAX_DIMS];   /* ggml order: ne[0] contiguous */
    uint64_t       numel;
    uint64_t       nbytes;
    const uint8_t *data;                    /* (nbytes) inside the mapping */
} pic_gguf_tensor;

typedef struct pic_gguf pic_gguf;

/* Map and validate path; NULL + err on any defect. */
pic_gguf *pic_gguf_open(const char *path, char *err, size_t errlen);

/* Validate len bytes at buf (not copied: buf must outlive the result). */
pic_gguf *pic_gguf_open_mem(const void *buf, size_t len, char *err, size_t errlen);

/* Unmap and free (NULL is fine). */
void pic_gguf_close(pic_gguf *g);

/* The file's path ("(memory)" for open_mem), its bytes and GGUF version. */
const char *pic_gguf_path(const pic_gguf *g);
const uint8_t *pic_gguf_bytes(const pic_gguf *g, size_t *len);
int pic_gguf_version(const pic_gguf *g);

/* Metadata: the number of pairs, pair i's key and type; key's index or -1. */
size_t pic_gguf_kv_count(const pic_gguf *g);
const char *pic_gguf_kv_key(const pic_gguf *g, size_t i);
int pic_gguf_kv_type(const pic_gguf *g, size_t i);
int pic_gguf_find(const pic_gguf *g, const char *key);

/* key as an integer (any integer type or bool, value in range) / a float
 * (F32, F64 or an integer) / a string (bytes, not NUL-terminated); 0, or -1
 * when absent or of another type. */
int pic_gguf_get_i64(const pic_gguf *g, const char *key, int64_t *out);
int pic_gguf_get_f64(const pic_gguf *g, const char *key, double *out);
int pic_gguf_get_str(const pic_gguf *g, const char *key, const char **s, size_t *len);

/* key as an array: element type and count; 0, or -1 when not an array. */
int pic_gguf_get_arr(const pic_gguf *g, const char *key, int *type, size_t *n);

/* Element i of array key: a string / a number (integer or float types);
 * 0, or -1 out of range or of another type. */
int pic_gguf_arr_str(const pic_gguf *g, const char *key, size_t i, const char **s,
                     size_t *len);
int pic_gguf_arr_f64(const pic_gguf *g, const char *key, size_t i, double *out);

/* Tensors, in file order; name's tensor or NULL. */
size_t pic_gguf_tensor_count(const pic_gguf *g);
const pic_gguf_tensor *pic_gguf_tensor_get(const pic_gguf *g, size_t i);
const pic_gguf_tensor *pic_gguf_tensor_find(const pic_gguf *g, const char *name);

#endif /* PIC_GGUF_H */
