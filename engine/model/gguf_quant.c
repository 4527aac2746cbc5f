/*
 * gguf_quant.c — block geometry and fp32 dequantization of the ggml types
 * (gguf_quant.h).  Scalar C: it runs once per tensor at load.
 */
/* every product and sum rounded on its own, as ggml's C and gguf-py's numpy
 * compute them (a fused q·d + m rounds once) */
#pragma GCC optimize("fp-contract=off")

#include "gguf_quant.h"

#include <string.h>

#include "safetensors.h"

#define QK      32          /* values per block of the legacy types */
#define QK_K    256         /* values per super-block of the K types */

/* little-endian loads: the blocks are unaligned inside the mapping */
static float
ld_f16(const uint8_t *p)
{
    return pic_f16_to_f32((uint16_t) (p[0] | p[1] << 8));
}

static uint32_t
ld_u32(const uint8_t *p)
{
    return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16
           | (uint32_t) p[3] << 24;
}

int
pic_ggml_block_size(int t)
{
    switch (t) {
    case PIC_GGML_F32: case PIC_GGML_F16: case PIC_GGML_BF16:
        return 1;
    case PIC_GGML_Q4_0: case PIC_GGML_Q4_1: case PIC_GGML_Q5_0: case PIC_GGML_Q5_1:
    case PIC_GGML_Q8_0:
        return QK;
    case PIC_GGML_Q4_K: case PIC_GGML_Q5_K: case PIC_GGML_Q6_K:
        return QK_K;
    }
    return 0;
}

size_t
pic_ggml_block_bytes(int t)
{
    switch (t) {
    case PIC_GGML_F32:  return 4;
    case PIC_GGML_F16:  return 2;
    case PIC_GGML_BF16: return 2;
    case PIC_GGML_Q4_0: return 2 + QK / 2;                      /* d, qs */
    case PIC_GGML_Q4_1: return 4 + QK / 2;                      /* d, m, qs */
    case PIC_GGML_Q5_0: return 2 + 4 + QK / 2;                  /* d, qh, qs */
    case PIC_GGML_Q5_1: return 4 + 4 + QK / 2;                  /* d, m, qh, qs */
    case PIC_GGML_Q8_0: return 2 + QK;                          /* d, qs */
    case PIC_GGML_Q4_K: return 4 + 12 + QK_K / 2;               /* d, dmin, scales, qs */
    case PIC_GGML_Q5_K: return 4 + 12 + QK_K / 8 + QK_K / 2;    /* + qh */
    case PIC_GGML_Q6_K: return QK_K / 2 + QK_K / 4 + QK_K / 16 + 2; /* ql, qh, sc, d */
    }
    return 0;
}

const char *
pic_ggml_type_name(int t)
{
    switch (t) {
    case PIC_GGML_F32:  return "F32";
    case PIC_GGML_F16:  return "F16";
    case PIC_GGML_BF16: return "BF16";
    case PIC_GGML_Q4_0: return "Q4_0";
    case PIC_GGML_Q4_1: return "Q4_1";
    case PIC_GGML_Q5_0: return "Q5_0";
    case PIC_GGML_Q5_1: return "Q5_1";
    case PIC_GGML_Q8_0: return "Q8_0";
    case PIC_GGML_Q4_K: return "Q4_K";
    case PIC_GGML_Q5_K: return "Q5_K";
    case PIC_GGML_Q6_K: return "Q6_K";
    }
    return "unknown";
}

/* Sub-block j's 6-bit scale and min of a Q4_K / Q5_K super-block: the
 * first four in the low 6 bits of bytes 0–3 / 4–7, the last four split
 * between nibbles of bytes 8–11 and the top 2 bits of bytes 0–7. */
static void
scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t) ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t) ((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void
dq_q4_0(const uint8_t *b, float *y)
{
    float d = ld_f16(b);

    for (int j = 0; j < QK / 2; j++) {
        y[j] = (float) ((b[2 + j] & 0xF) - 8) * d;
        y[j + QK / 2] = (float) ((b[2 + j] >> 4) - 8) * d;
    }
}

static void
dq_q4_1(const uint8_t *b, float *y)
{
    float d = ld_f16(b), m = ld_f16(b + 2);

    for (int j = 0; j < QK / 2; j++) {
        y[j] = (float) (b[4 + j] & 0xF) * d + m;
        y[j + QK / 2] = (float) (b[4 + j] >> 4) * d + m;
    }
}

static void
dq_q5_0(const uint8_t *b, float *y)
{
    float    d = ld_f16(b);
    uint32_t qh = ld_u32(b + 2);

    for (int j = 0; j < QK / 2; j++) {
        int h0 = (int) ((qh >> j) << 4) & 0x10, h1 = (int) (qh >> (j + 12)) & 0x10;

        y[j] = (float) (((b[6 + j] & 0xF) | h0) - 16) * d;
        y[j + QK / 2] = (float) (((b[6 + j] >> 4) | h1) - 16) * d;
    }
}

static void
dq_q5_1(const uint8_t *b, float *y)
{
    float    d = ld_f16(b), m = ld_f16(b + 2);
    uint32_t qh = ld_u32(b + 4);

    for (int j = 0; j < QK / 2; j++) {
        int h0 = (int) ((qh >> j) << 4) & 0x10, h1 = (int) (qh >> (j + 12)) & 0x10;

        y[j] = (float) ((b[8 + j] & 0xF) | h0) * d + m;
        y[j + QK / 2] = (float) ((b[8 + j] >> 4) | h1) * d + m;
    }
}

static void
dq_q8_0(const uint8_t *b, float *y)
{
    float d = ld_f16(b);

    for (int j = 0; j < QK; j++) {
        y[j] = (float) (int8_t) b[2 + j] * d;
    }
}

static void
dq_q4_k(const uint8_t *b, float *y)
{
    float          d = ld_f16(b), dmin = ld_f16(b + 2);
    const uint8_t *scales = b + 4, *q = b + 16;
    uint8_t        sc, m;

    for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, q += 32) {
        scale_min_k4(is, scales, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        scale_min_k4(is + 1, scales, &sc, &m);
        float d2 = d * sc, m2 = dmin * m;

        for (int l = 0; l < 32; l++) {
            *y++ = d1 * (float) (q[l] & 0xF) - m1;
        }
        for (int l = 0; l < 32; l++) {
            *y++ = d2 * (float) (q[l] >> 4) - m2;
        }
    }
}

static void
dq_q5_k(const uint8_t *b, float *y)
{
    float          d = ld_f16(b), dmin = ld_f16(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 16 + QK_K / 8;
    uint8_t        sc, m, u1 = 1, u2 = 2;

    for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, ql += 32) {
        scale_min_k4(is, scales, &sc, &m);
        float d1 = d * sc, m1 = dmin * m;
        scale_min_k4(is + 1, scales, &sc, &m);
        float d2 = d * sc, m2 = dmin * m;

        for (int l = 0; l < 32; l++) {
            *y++ = d1 * (float) ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
        }
        for (int l = 0; l < 32; l++) {
            *y++ = d2 * (float) ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
        u1 = (uint8_t) (u1 << 2);
        u2 = (uint8_t) (u2 << 2);
    }
}

static void
dq_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + QK_K / 2;
    const int8_t  *sc = (const int8_t *) (b + QK_K / 2 + QK_K / 4);
    float          d = ld_f16(b + QK_K / 2 + QK_K / 4 + QK_K / 16);

    for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = (int) ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
            int q2 = (int) ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
            int q3 = (int) ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
            int q4 = (int) ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;

            y[l] = d * (float) sc[is] * (float) q1;
            y[l + 32] = d * (float) sc[is + 2] * (float) q2;
            y[l + 64] = d * (float) sc[is + 4] * (float) q3;
            y[l + 96] = d * (float) sc[is + 6] * (float) q4;
        }
    }
}

int
pic_ggml_dequant(int t, const void *src, float *dst, size_t n)
{
    const uint8_t *b = src;
    int            bs = pic_ggml_block_size(t);
    size_t         bb = pic_ggml_block_bytes(t);

    if (bs == 0 || n % (size_t) bs != 0) {
        return -1;
    }
    switch (t) {
    case PIC_GGML_F32:
        memcpy(dst, src, n * sizeof(float));
        return 0;
    case PIC_GGML_F16:
        for (size_t i = 0; i < n; i++) {
            dst[i] = ld_f16(b + 2 * i);
        }
        return 0;
    case PIC_GGML_BF16:
        for (size_t i = 0; i < n; i++) {
            dst[i] = pic_bf16_to_f32((uint16_t) (b[2 * i] | b[2 * i + 1] << 8));
        }
        return 0;
    }
    for (size_t k = 0; k < n / (size_t) bs; k++, b += bb, dst += bs) {
        switch (t) {
        case PIC_GGML_Q4_0: dq_q4_0(b, dst); break;
        case PIC_GGML_Q4_1: dq_q4_1(b, dst); break;
        case PIC_GGML_Q5_0: dq_q5_0(b, dst); break;
        case PIC_GGML_Q5_1: dq_q5_1(b, dst); break;
        case PIC_GGML_Q8_0: dq_q8_0(b, dst); break;
        case PIC_GGML_Q4_K: dq_q4_k(b, dst); break;
        case PIC_GGML_Q5_K: dq_q5_k(b, dst); break;
        case PIC_GGML_Q6_K: dq_q6_k(b, dst); break;
        }
    }
    return 0;
}
