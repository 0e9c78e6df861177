/* The W4 weight layout of bundles ("w4-r4b32"): 4-bit codes q in [0, 15] in blocks of 32 columns,
 * W[r][c] = d * (q - 8) with one fp16 d per row and block (4.5 bits a weight, as ggml's Q4_0; the
 * forge chooses each d by least squares, src/forge/quantize.c; docs/bundle.md has the measurements
 * behind the choice). Rows go in groups of 4, as in W8, so decode reads one sequential stream: a
 * row group is its nb code blocks of 64 bytes (nb = the column count over 32, rounded up to a
 * multiple of 4), then its scales, 16 per 4 blocks:
 *
 *   group g: [block 0: row 4g cols 0-31 (16 bytes), row 4g+1 ..., row 4g+3][block 1] ...
 *            [d: blocks 0-3 of row 4g, blocks 0-3 of row 4g+1, ... row 4g+3][blocks 4-7 ...] ...
 *
 * Within a row's 16 bytes, byte k holds column k in its low nibble and column k + 16 in its high
 * one. The scales go row by row within 4 blocks because a kernel that sums each row's block in
 * its own lane holds 4 rows x 4 blocks in one 16-lane register: one fp16 load scales them all.
 * Padding (rows of a ragged last group, columns past the last) is zero codes with d = 0, inside a
 * block code 8: every padded weight is 0, so kernels never test bounds inside a group. */
#ifndef QHX_W4_H
#define QHX_W4_H
#include "util/half.h"
#include "util/tensor.h"
#include <stddef.h>
#include <stdint.h>

#define QHX_LAYOUT_W4 "w4-r4b32"
#define QHX_W4_GROUP 4     /* rows */
#define QHX_W4_BLOCK 32    /* columns a scale */
#define QHX_W4_UNIT 4      /* blocks whose scales go together */
#define QHX_W4_CODE_BYTES (QHX_W4_GROUP * QHX_W4_BLOCK / 2)

static inline size_t qhx_w4_blocks(size_t cols) { return qhx_round_up((cols + QHX_W4_BLOCK - 1) / QHX_W4_BLOCK, QHX_W4_UNIT); }
static inline size_t qhx_w4_group_bytes(size_t cols) { return qhx_w4_blocks(cols) * (QHX_W4_CODE_BYTES + QHX_W4_GROUP * 2); }
static inline uint64_t qhx_w4_bytes(uint64_t rows, uint64_t cols) {
    return (uint64_t)qhx_round_up(rows, QHX_W4_GROUP) / QHX_W4_GROUP * qhx_w4_group_bytes(cols);
}

/* the 16 code bytes of row r's block b, and its scale, from the start of the matrix */
static inline size_t qhx_w4_codes_at(size_t cols, size_t r, size_t b) {
    return r / QHX_W4_GROUP * qhx_w4_group_bytes(cols) + b * QHX_W4_CODE_BYTES + r % QHX_W4_GROUP * (QHX_W4_BLOCK / 2);
}
static inline size_t qhx_w4_scale_at(size_t cols, size_t r, size_t b) {
    return r / QHX_W4_GROUP * qhx_w4_group_bytes(cols) + qhx_w4_blocks(cols) * QHX_W4_CODE_BYTES +
           (b / QHX_W4_UNIT * QHX_W4_GROUP * QHX_W4_UNIT + r % QHX_W4_GROUP * QHX_W4_UNIT + b % QHX_W4_UNIT) * 2;
}

/* block b of row r from its 32 codes (the columns past cols code 8) and scale */
static inline void qhx_w4_put(uint8_t *packed, size_t cols, size_t r, size_t b, const uint8_t q[QHX_W4_BLOCK], float d) {
    uint8_t *p = packed + qhx_w4_codes_at(cols, r, b);
    for (int k = 0; k < QHX_W4_BLOCK / 2; k++) p[k] = (uint8_t)(q[k] | q[k + 16] << 4);
    const uint16_t h = qhx_f32_to_f16(d);
    memcpy(packed + qhx_w4_scale_at(cols, r, b), &h, 2);
}

/* row r's codes (cols of them), and one scale a block (ceil(cols / 32)) */
static inline void qhx_w4_get_row(const uint8_t *packed, size_t cols, size_t r, uint8_t *q, float *d) {
    for (size_t b = 0; b * QHX_W4_BLOCK < cols; b++) {
        const uint8_t *p = packed + qhx_w4_codes_at(cols, r, b);
        for (size_t k = 0; k < QHX_W4_BLOCK / 2; k++) {
            const size_t c = b * QHX_W4_BLOCK + k;
            if (c < cols) q[c] = p[k] & 15;
            if (c + 16 < cols) q[c + 16] = p[k] >> 4;
        }
        uint16_t h;
        memcpy(&h, packed + qhx_w4_scale_at(cols, r, b), 2);
        d[b] = qhx_f16_to_f32(h);
    }
}

/* row r as fp32 weights: exact (an fp16 times an integer in [-8, 7] fits fp32's mantissa) */
static inline void qhx_w4_row_f32(const uint8_t *packed, size_t cols, size_t r, float *out) {
    for (size_t b = 0; b * QHX_W4_BLOCK < cols; b++) {
        const uint8_t *p = packed + qhx_w4_codes_at(cols, r, b);
        uint16_t h;
        memcpy(&h, packed + qhx_w4_scale_at(cols, r, b), 2);
        const float d = qhx_f16_to_f32(h);
        for (size_t k = 0; k < QHX_W4_BLOCK / 2; k++) {
            const size_t c = b * QHX_W4_BLOCK + k;
            if (c < cols) out[c] = d * (float)((p[k] & 15) - 8);
            if (c + 16 < cols) out[c + 16] = d * (float)((p[k] >> 4) - 8);
        }
    }
}

#endif
