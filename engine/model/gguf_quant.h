/*
 * gguf_quant.h — the ggml tensor types a GGUF file may hold: their block
 * geometry and their dequantization to fp32, written from the formats'
 * definitions (d, m fp16 scales; 4/5/6/8-bit codes; 256-value super-blocks
 * with 6-bit packed sub-block scales for the K types).  The arithmetic is
 * ggml's, in its order, so the floats are the ones llama.cpp and gguf-py
 * produce.
 */
#ifndef PIC_GGUF_QUANT_H
#define PIC_GGUF_QUANT_H

#include <stddef.h>
#include <stdint.h>

enum {
    PIC_GGML_F32 = 0, PIC_GGML_F16 = 1, PIC_GGML_Q4_0 = 2, PIC_GGML_Q4_1 = 3,
    PIC_GGML_Q5_0 = 6, PIC_GGML_Q5_1 = 7, PIC_GGML_Q8_0 = 8, PIC_GGML_Q4_K = 12,
    PIC_GGML_Q5_K = 13, PIC_GGML_Q6_K = 14, PIC_GGML_BF16 = 30,
};

/* Values per block and bytes per block of ggml type t; 0 for a type this
 * reader does not dequantize. */
int pic_ggml_block_size(int t);
size_t pic_ggml_block_bytes(int t);

/* The type's ggml name ("Q4_1"), or "unknown". */
const char *pic_ggml_type_name(int t);

/* dst(n) ← the values of n / block_size blocks at src; n a multiple of the
 * block size.  -1 for a type not dequantized here. */
int pic_ggml_dequant(int t, const void *src, float *dst, size_t n);

#endif /* PIC_GGUF_QUANT_H */
