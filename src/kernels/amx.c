/* AMX for W8 matrices in prefill (the "amx-bf16" set): activations rounded to bf16, the int8
 * weights widened to bf16 (exact), products summed in fp32 inside Intel's tile unit. One
 * tdpbf16ps multiplies a 16-token x 32-column tile by a 32-column x 16-row tile into 16 x 16 fp32
 * sums, 8192 multiply-adds an instruction (vpdpbusd: 64), and the sums stay in the tile over every
 * column: nothing leaves the tile unit until a row block is done.
 *
 * Why bf16 and not int8 tiles: the -q8 sets' activations carry one scale per 32 columns, so int8
 * sums must leave the tile unit once per block to be scaled; that round trip (tdpbssd, a 1 KiB
 * tile store, the loads back) ran no faster than vpdpbusd (245 vs 240-360 GMAC/s in
 * bench/kernel_bench on a Sapphire Rapids VM). bf16 activations are also the more exact rounding
 * (at most 2^-8 of each value, where int8 loses up to half a step, 2^-8 of the block's largest), and
 * they are what the Hugging Face reference computes with for bf16 checkpoints.
 *
 * Prefill packs up to 128 rows at a time into B tiles (kernels/vnni_pack.h, then widened), 32-row
 * sub-panels that stay in L2 while every pair of 16-token tiles passes over each of them in turn;
 * the activations come in tile order (qhx_acts), so every tile load reads 1 KiB in a row. Decode
 * (one token) streams the W8 layout with fp32 activations (the avx512 set's kernel), bound by
 * memory, not by multiplies.
 *
 * Linux hands out the tile registers' 8 KiB of state only to a process that asks
 * (arch_prctl ARCH_REQ_XCOMP_PERM); the set counts as supported only once that succeeded. Each
 * thread configures its tiles at the start of a call and releases them at the end. */
#include "format/w8.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"

#if defined(QHX_HAVE_AVX512) && defined(__linux__)
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c,amx-tile,amx-bf16")))
#define VNNI_PACK_TARGET TARGET
#include "kernels/vnni_pack.h"

#define LANES 16                    /* rows of a B tile, tokens of an A tile */
#define PANEL 32                    /* rows of a sub-panel: two B tiles a block */
#define BTILE (QHX_W8_BLOCK / 2 * 64) /* bytes of one B tile: 16 column pairs x 16 rows of bf16 */
#define ATILE (LANES * QHX_W8_BLOCK)  /* bf16 values of one A tile: 16 tokens x 32 columns */

/* Tile registers, literal numbers (the intrinsics paste them into the instruction): C[token
 * tile][row half], A per token tile, B per row half. */
#define TC00 0
#define TC01 1
#define TC10 2
#define TC11 3
#define TA0 4
#define TA1 5
#define TB0 6
#define TB1 7

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

TARGET static void configure(void) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) c.rows[i] = LANES, c.colsb[i] = 64; /* C: 16 fp32, A: 32 bf16, B: 16 bf16 pairs */
    _tile_loadconfig(&c);
}

/* Column block b of 16 rows as one B tile: row k2 lane n = row n's columns 2 k2, 2 k2 + 1 in bf16. */
TARGET static inline __attribute__((always_inline)) void pack_tile(const int8_t *data, size_t gbytes, size_t g0,
                                                                   size_t groups, size_t b, int8_t *out) {
    __m512i u[8];
    qhx_vnni_pack16(data, gbytes, g0, groups, b, u); /* unit k lane n: row n's columns 4k..4k+3 */
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
        /* the unit's 64 bytes as floats, in order */
        const __m512 f[4] = {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(u[k], 0))),
                             _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(u[k], 1))),
                             _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(u[k], 2))),
                             _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(u[k], 3)))};
        /* dword d of lo/hi: columns 4k + 2 (d % 2), + 1 of row d / 2 (lo: rows 0-7, hi: 8-15) */
        const __m512i lo = (__m512i)_mm512_cvtne2ps_pbh(f[1], f[0]), hi = (__m512i)_mm512_cvtne2ps_pbh(f[3], f[2]);
        _mm512_store_si512(out + (2 * k) * 64, _mm512_permutex2var_epi32(lo, even, hi));
        _mm512_store_si512(out + (2 * k + 1) * 64, _mm512_permutex2var_epi32(lo, odd, hi));
    }
}

/* out[h][m][n]: token m of token tile a (and b when TWO), row n of half h, summed over nb blocks */
#define TOKEN_TILES(TWO)                                                                                               \
    do {                                                                                                               \
        _tile_zero(TC00);                                                                                              \
        _tile_zero(TC01);                                                                                              \
        if (TWO) { _tile_zero(TC10); _tile_zero(TC11); }                                                               \
        for (size_t b = 0; b < nb; b++) {                                                                              \
            _tile_loadd(TB0, panel + b * 2 * BTILE, 64);                                                               \
            _tile_loadd(TB1, panel + b * 2 * BTILE + BTILE, 64);                                                       \
            _tile_loadd(TA0, a0 + b * ATILE, 64);                                                                      \
            _tile_dpbf16ps(TC00, TA0, TB0);                                                                            \
            _tile_dpbf16ps(TC01, TA0, TB1);                                                                            \
            if (TWO) {                                                                                                 \
                _tile_loadd(TA1, a1 + b * ATILE, 64);                                                                  \
                _tile_dpbf16ps(TC10, TA1, TB0);                                                                        \
                _tile_dpbf16ps(TC11, TA1, TB1);                                                                        \
            }                                                                                                          \
        }                                                                                                              \
        _tile_stored(TC00, out[0][0], 64);                                                                             \
        _tile_stored(TC01, out[0][1], 64);                                                                             \
        if (TWO) { _tile_stored(TC10, out[1][0], 64); _tile_stored(TC11, out[1][1], 64); }                             \
    } while (0)

/* one or two 16-token tiles (a0, a1: their runs of A tiles) over the packed panel */
TARGET static void token_tiles(const int8_t *panel, size_t nb, const uint16_t *a0, const uint16_t *a1,
                               float out[2][2][LANES][LANES]) {
    if (a1) TOKEN_TILES(1);
    else TOKEN_TILES(0);
}

/* Rows packed at once, in 32-row sub-panels: each token pair's A tiles (32 tokens x every column)
 * are read from L3 once and then stay in L2 for the other sub-panels. One sub-panel a pass read
 * all the prompt's activations from L3 again for every 32 rows, which bounded the kernel. */
#define SUPER 128

TARGET static qhx_status amx_matmul(const qhx_tensor *W, const qhx_acts *X, int T, float *Y, int r0, int r1) {
    const size_t cols = (size_t)W->cols, nb = qhx_w8_padded_cols(cols) / QHX_W8_BLOCK, gbytes = qhx_w8_group_bytes(cols);
    const size_t groups = ((size_t)W->rows + QHX_W8_GROUP - 1) / QHX_W8_GROUP, sub_bytes = nb * 2 * BTILE;
    int8_t *panel = aligned_alloc(64, sub_bytes * (SUPER / PANEL));
    if (!panel) return QHX_ERR_NOMEM;
    float out[2][2][LANES][LANES] __attribute__((aligned(64)));
    configure();
    for (int super0 = r0; super0 < r1; super0 += SUPER) {
        const int super1 = r1 - super0 < SUPER ? r1 : super0 + SUPER;
        for (int row0 = super0; row0 < super1; row0 += PANEL) {
            int8_t *sub = panel + (size_t)(row0 - super0) / PANEL * sub_bytes;
            for (size_t b = 0; b < nb; b++)
                for (int h = 0; h < 2; h++)
                    pack_tile(W->data, gbytes, (size_t)(row0 + h * LANES) / QHX_W8_GROUP, groups, b, sub + (b * 2 + h) * BTILE);
        }
        for (int t = 0; t < T; t += 2 * LANES) { /* the last tile's rows past T are zero (qhx_acts) */
            const uint16_t *a0 = X->bf + qhx_acts_bf16_at(X, (size_t)t, 0);
            const uint16_t *a1 = T - t > LANES ? X->bf + qhx_acts_bf16_at(X, (size_t)t + LANES, 0) : NULL;
            for (int row0 = super0; row0 < super1; row0 += PANEL) {
                const int nvalid = super1 - row0 < PANEL ? super1 - row0 : PANEL;
                token_tiles(panel + (size_t)(row0 - super0) / PANEL * sub_bytes, nb, a0, a1, out);
                for (int h = 0; h < 2 && h * LANES < nvalid; h++) {
                    const int n = nvalid - h * LANES < LANES ? nvalid - h * LANES : LANES;
                    const __mmask16 mask = (__mmask16)((1u << n) - 1);
                    const __m512 sw = _mm512_maskz_loadu_ps(mask, W->scale + row0 + h * LANES);
                    for (int m = t; m < T && m < t + 2 * LANES; m++)
                        _mm512_mask_storeu_ps(Y + (size_t)m * W->rows + row0 + h * LANES, mask,
                                              _mm512_mul_ps(_mm512_load_ps(out[(m - t) / LANES][h][(m - t) % LANES]), sw));
                }
            }
        }
    }
    _tile_release();
    free(panel);
    return QHX_OK;
}

/* row t into its tile rows, bf16 nearest even (vcvtneps2bf16; it flushes subnormal inputs to
 * zero, below any activation's resolution here) */
TARGET static void to_bf16(const float *x, size_t cols, const qhx_acts *a, size_t t) {
    for (size_t c = 0; c < a->pad; c += 16) {
        const __mmask16 m = cols - c >= 16 ? 0xffff : c < cols ? (__mmask16)((1u << (cols - c)) - 1) : 0;
        _mm256_store_si256((__m256i *)(a->bf + qhx_acts_bf16_at(a, t, c)), (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + c)));
    }
}

const qhx_acts_ops qhx_acts_amx_bf16 = {.form = QHX_ACTS_BF16, .matmul = amx_matmul, .round = to_bf16, .panel_rows = SUPER};
#endif
