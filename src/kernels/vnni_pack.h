/* W8 weights into the "VNNI" order that vpdpbusd and AMX's tdpbssd multiply: for 16 rows and one
 * 32-column block, unit k lane i (a dword) = row i's bytes 4k..4k+3, k = 0..7. Eight units are
 * one AVX-512 register each, or together one 8 x 64-byte AMX B tile. In the W8 layout
 * (format/w8.h) a row group's block is 4 rows x 8 dwords, so this is a 16 x 8 dword transpose.
 * Include after defining VNNI_PACK_TARGET (the including file's target attribute). */
#ifndef QHX_VNNI_PACK_H
#define QHX_VNNI_PACK_H
#include "format/w8.h"

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

/* Column block b of the 16 rows from group g0 on; groups at or past `groups` read as zero rows. */
static inline __attribute__((always_inline)) VNNI_PACK_TARGET void qhx_vnni_pack16(const int8_t *data, size_t gbytes, size_t g0,
                                                                                  size_t groups, size_t b, __m512i out[8]) {
    /* x[G][h] lane 4k + i = row i of group G, dword 4h + k */
    const __m512i lo = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(4));
    __m512i x[4][2];
    _Pragma("GCC unroll 4") for (int G = 0; G < 4; G++) {
        if (g0 + G < groups) {
            const int8_t *p = data + (g0 + G) * gbytes + b * QHX_W8_GROUP * QHX_W8_BLOCK;
            const __m512i a = _mm512_loadu_si512(p), c = _mm512_loadu_si512(p + 64);
            x[G][0] = _mm512_permutex2var_epi32(a, lo, c);
            x[G][1] = _mm512_permutex2var_epi32(a, hi, c);
        } else {
            x[G][0] = x[G][1] = _mm512_setzero_si512();
        }
    }
    /* unit 4h + k: 128-bit chunk k of x[0..3][h], a 4 x 4 transpose of chunks */
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
        const __m512i t0 = _mm512_shuffle_i32x4(x[0][h], x[1][h], 0x44), t1 = _mm512_shuffle_i32x4(x[0][h], x[1][h], 0xee);
        const __m512i t2 = _mm512_shuffle_i32x4(x[2][h], x[3][h], 0x44), t3 = _mm512_shuffle_i32x4(x[2][h], x[3][h], 0xee);
        out[4 * h + 0] = _mm512_shuffle_i32x4(t0, t2, 0x88);
        out[4 * h + 1] = _mm512_shuffle_i32x4(t0, t2, 0xdd);
        out[4 * h + 2] = _mm512_shuffle_i32x4(t1, t3, 0x88);
        out[4 * h + 3] = _mm512_shuffle_i32x4(t1, t3, 0xdd);
    }
}

#endif
