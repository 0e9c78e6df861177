/* Each block is decoded in the order and with the float operations of ggml's dequantize_row_*
 * reference functions, so a value here is the value llama.cpp computes with on its reference path. */
#include "format/ggml_quant.h"
#include "util/half.h"

#include <string.h>

#define QK 32   /* values per block of the Q4_0 ... Q8_0 family */
#define QK_K 256 /* values per super-block of the k-quants */

static const char *const names[] = {
    [0] = "F32", [1] = "F16", [2] = "Q4_0", [3] = "Q4_1", [6] = "Q5_0", [7] = "Q5_1", [8] = "Q8_0",
    [9] = "Q8_1", [10] = "Q2_K", [11] = "Q3_K", [12] = "Q4_K", [13] = "Q5_K", [14] = "Q6_K", [15] = "Q8_K",
    [16] = "IQ2_XXS", [17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S", [20] = "IQ4_NL", [21] = "IQ3_S",
    [22] = "IQ2_S", [23] = "IQ4_XS", [24] = "I8", [25] = "I16", [26] = "I32", [27] = "I64", [28] = "F64",
    [29] = "IQ1_M", [30] = "BF16", [34] = "TQ1_0", [35] = "TQ2_0", [39] = "MXFP4",
};

const char *qhx_ggml_type_name(uint32_t type) {
    return type < sizeof names / sizeof *names ? names[type] : NULL;
}

int qhx_ggml_block_values(uint32_t type) {
    switch (type) {
    case QHX_GGML_F32: case QHX_GGML_F16: case QHX_GGML_BF16: return 1;
    case QHX_GGML_Q4_0: case QHX_GGML_Q4_1: case QHX_GGML_Q5_0: case QHX_GGML_Q5_1: case QHX_GGML_Q8_0: return QK;
    case QHX_GGML_Q4_K: case QHX_GGML_Q5_K: case QHX_GGML_Q6_K: return QK_K;
    default: return 0;
    }
}

size_t qhx_ggml_block_bytes(uint32_t type) {
    switch (type) {
    case QHX_GGML_F32: return 4;
    case QHX_GGML_F16: case QHX_GGML_BF16: return 2;
    case QHX_GGML_Q4_0: return 2 + QK / 2;              /* d, 32 nibbles */
    case QHX_GGML_Q4_1: return 4 + QK / 2;              /* d, m, 32 nibbles */
    case QHX_GGML_Q5_0: return 2 + 4 + QK / 2;          /* d, 32 high bits, 32 nibbles */
    case QHX_GGML_Q5_1: return 4 + 4 + QK / 2;
    case QHX_GGML_Q8_0: return 2 + QK;                  /* d, 32 int8 */
    case QHX_GGML_Q4_K: return 4 + 12 + QK_K / 2;       /* d, dmin, 8 6-bit scale/min pairs, nibbles */
    case QHX_GGML_Q5_K: return 4 + 12 + QK_K / 8 + QK_K / 2;
    case QHX_GGML_Q6_K: return QK_K / 2 + QK_K / 4 + QK_K / 16 + 2; /* low nibbles, high 2 bits, int8 scales, d */
    default: return 0;
    }
}

const char *qhx_ggml_supported(void) { return "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K"; }

static float half_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return qhx_f16_to_f32(h);
}

/* Scale and min j (of 8) of a Q4_K / Q5_K super-block: 6 bits each, packed in 12 bytes. */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q4_0 / Q4_1 / Q5_0 / Q5_1: value j of 32 is nibble j of byte j (low), value j + 16 its high
 * nibble; the fifth bit, where there is one, is bit j of a 32-bit word. */
static void dequant_q4_q5(const uint8_t *b, float *y, int has_min, int has_high) {
    const float d = half_at(b);
    const float m = has_min ? half_at(b + 2) : 0;
    b += has_min ? 4 : 2;
    uint32_t qh = 0;
    if (has_high) memcpy(&qh, b, 4), b += 4;
    const int offset = has_min ? 0 : has_high ? 16 : 8;
    for (int j = 0; j < QK / 2; j++) {
        const int h0 = has_high ? (int)(((qh >> j) << 4) & 0x10) : 0;
        const int h1 = has_high ? (int)((qh >> (j + 12)) & 0x10) : 0;
        const int x0 = ((b[j] & 0x0F) | h0) - offset;
        const int x1 = ((b[j] >> 4) | h1) - offset;
        if (has_min) {
            y[j] = x0 * d + m;
            y[j + QK / 2] = x1 * d + m;
        } else {
            y[j] = x0 * d;
            y[j + QK / 2] = x1 * d;
        }
    }
}

static void dequant_q8_0(const uint8_t *b, float *y) {
    const float d = half_at(b);
    for (int j = 0; j < QK; j++) y[j] = (int8_t)b[2 + j] * d;
}

/* Q4_K and Q5_K: 8 sub-blocks of 32, each value d*scale*q - dmin*min; pairs of sub-blocks share
 * 32 bytes (low nibbles the first, high nibbles the second); Q5_K's fifth bits lie in qh. */
static void dequant_q45_k(const uint8_t *b, float *y, int five) {
    const float d = half_at(b), min = half_at(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *q = b + 16 + (five ? QK_K / 8 : 0);
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < QK_K; j += 64, is += 2) {
        uint8_t sc, m;
        scale_min_k4(is, scales, &sc, &m);
        const float d1 = d * sc, m1 = min * m;
        scale_min_k4(is + 1, scales, &sc, &m);
        const float d2 = d * sc, m2 = min * m;
        for (int l = 0; l < 32; l++) *y++ = d1 * ((q[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++) *y++ = d2 * ((q[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
        q += 32;
        u1 <<= 2, u2 <<= 2;
    }
}

/* Q6_K: 16 sub-blocks of 16 with int8 scales; 4 low bits in ql, 2 high bits in qh, offset 32. */
static void dequant_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + QK_K / 2;
    const int8_t *sc = (const int8_t *)(b + QK_K / 2 + QK_K / 4);
    const float d = half_at(b + QK_K / 2 + QK_K / 4 + QK_K / 16);
    for (int n = 0; n < QK_K; n += 128) {
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is + 0] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
        y += 128, ql += 64, qh += 32, sc += 8;
    }
}

void qhx_ggml_dequant(uint32_t type, const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    const int64_t bv = qhx_ggml_block_values(type);
    const size_t bb = qhx_ggml_block_bytes(type);
    for (int64_t i = 0; bv && i < n; i += bv, b += bb, dst += bv) {
        uint16_t h;
        switch (type) {
        case QHX_GGML_F32: memcpy(dst, b, 4); break;
        case QHX_GGML_F16: memcpy(&h, b, 2), *dst = qhx_f16_to_f32(h); break;
        case QHX_GGML_BF16: memcpy(&h, b, 2), *dst = qhx_bf16_to_f32(h); break;
        case QHX_GGML_Q4_0: dequant_q4_q5(b, dst, 0, 0); break;
        case QHX_GGML_Q4_1: dequant_q4_q5(b, dst, 1, 0); break;
        case QHX_GGML_Q5_0: dequant_q4_q5(b, dst, 0, 1); break;
        case QHX_GGML_Q5_1: dequant_q4_q5(b, dst, 1, 1); break;
        case QHX_GGML_Q8_0: dequant_q8_0(b, dst); break;
        case QHX_GGML_Q4_K: dequant_q45_k(b, dst, 0); break;
        case QHX_GGML_Q5_K: dequant_q45_k(b, dst, 1); break;
        case QHX_GGML_Q6_K: dequant_q6_k(b, dst); break;
        }
    }
}
