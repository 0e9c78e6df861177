/* The W8 weight layout of bundles ("w8-r4b32"): int8 matrices with one fp32 scale per row, stored
 * so the decode kernel reads one sequential stream. Rows go in groups of 4; within a group, column
 * block b (32 columns) of its 4 rows lies in 128 consecutive bytes:
 *
 *   group g: [row 4g, cols 0-31][row 4g+1, cols 0-31][row 4g+2, ...][row 4g+3, ...][row 4g, cols 32-63]...
 *
 * A ragged last group is padded with zero rows, a ragged last block with zero columns, so kernels
 * never test bounds inside a block. W[r][c] = data[qhx_w8_at(cols, r, c)] * scale[r]. */
#ifndef QHX_W8_H
#define QHX_W8_H
#include "util/tensor.h"
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define QHX_LAYOUT_W8 "w8-r4b32"
#define QHX_W8_GROUP 4
#define QHX_W8_BLOCK 32

static inline size_t qhx_w8_padded_cols(size_t cols) { return qhx_round_up(cols, QHX_W8_BLOCK); }

/* bytes of a rows x cols matrix in this layout */
static inline uint64_t qhx_w8_bytes(uint64_t rows, uint64_t cols) {
    return (uint64_t)qhx_round_up(rows, QHX_W8_GROUP) * qhx_w8_padded_cols(cols);
}

/* bytes of one group of 4 rows */
static inline size_t qhx_w8_group_bytes(size_t cols) { return QHX_W8_GROUP * qhx_w8_padded_cols(cols); }

static inline size_t qhx_w8_at(size_t cols, size_t r, size_t c) {
    return r / QHX_W8_GROUP * qhx_w8_group_bytes(cols) + c / QHX_W8_BLOCK * (QHX_W8_GROUP * QHX_W8_BLOCK) +
           r % QHX_W8_GROUP * QHX_W8_BLOCK + c % QHX_W8_BLOCK;
}

/* row r (counted from the start of `packed`, which is zeroed beforehand) from a plain row */
static inline void qhx_w8_put_row(int8_t *packed, size_t cols, size_t r, const int8_t *row) {
    for (size_t c = 0; c < cols; c += QHX_W8_BLOCK)
        memcpy(packed + qhx_w8_at(cols, r, c), row + c, cols - c < QHX_W8_BLOCK ? cols - c : QHX_W8_BLOCK);
}

/* row r as a plain row of cols bytes */
static inline void qhx_w8_get_row(const int8_t *packed, size_t cols, size_t r, int8_t *row) {
    for (size_t c = 0; c < cols; c += QHX_W8_BLOCK)
        memcpy(row + c, packed + qhx_w8_at(cols, r, c), cols - c < QHX_W8_BLOCK ? cols - c : QHX_W8_BLOCK);
}

/* the 4 rows of the group holding row r (a multiple of 4) as plain rows, cols bytes apart */
static inline void qhx_w8_get_group(const int8_t *packed, size_t cols, size_t r, int8_t *rows) {
    for (size_t i = 0; i < QHX_W8_GROUP; i++) qhx_w8_get_row(packed, cols, r + i, rows + i * cols);
}

#endif
