/* The AVX-512F vector layer: 16 fp32 lanes; ragged tails through masks. See vec_avx2.h. */
#ifndef QHX_VEC_AVX512_H
#define QHX_VEC_AVX512_H
#include <immintrin.h>

#define QV_ISA avx512
#define QV_LANES 16
#define QV_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))
#define QV_INLINE static inline __attribute__((always_inline)) QV_TARGET
#define QV_PREFILL_TOKENS 4 /* 4 x 4 accumulators + 4 activations + 4 weights of 32 registers */
/* prefill widens in registers: 60-68 against 47-50 GMAC/s widening 4 rows once (fp32 rows
 * outgrow L1; kernel_bench prefill 64, 2 threads, Zen 5, 3 alternating runs) */
#define QV_PREFILL_WIDEN 0
#define QV_GEMM_ROWS 8
#define QV_DECODE_ROWS 4 /* rows side by side in a batched decode over row-major rows: 4 x 2 tokens x 2 accumulators + 8 weights + 2 activations */

typedef __m512 qv_f32;
typedef __mmask16 qv_mask;

QV_INLINE qv_f32 qv_zero(void) { return _mm512_setzero_ps(); }
QV_INLINE qv_f32 qv_set1(float a) { return _mm512_set1_ps(a); }
QV_INLINE qv_f32 qv_load(const float *p) { return _mm512_loadu_ps(p); }
QV_INLINE void qv_store(float *p, qv_f32 v) { _mm512_storeu_ps(p, v); }
QV_INLINE qv_f32 qv_load_n(const float *p, int n) { return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p); }
QV_INLINE void qv_store_n(float *p, qv_f32 v, int n) { _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), v); }
QV_INLINE qv_f32 qv_load_i8(const void *p) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p))); }
QV_INLINE qv_f32 qv_load_f16(const void *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
QV_INLINE qv_f32 qv_load_bf16(const void *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

QV_INLINE qv_f32 qv_add(qv_f32 a, qv_f32 b) { return _mm512_add_ps(a, b); }
QV_INLINE qv_f32 qv_sub(qv_f32 a, qv_f32 b) { return _mm512_sub_ps(a, b); }
QV_INLINE qv_f32 qv_mul(qv_f32 a, qv_f32 b) { return _mm512_mul_ps(a, b); }
QV_INLINE qv_f32 qv_div(qv_f32 a, qv_f32 b) { return _mm512_div_ps(a, b); }
QV_INLINE qv_f32 qv_min(qv_f32 a, qv_f32 b) { return _mm512_min_ps(a, b); }
QV_INLINE qv_f32 qv_max(qv_f32 a, qv_f32 b) { return _mm512_max_ps(a, b); }
QV_INLINE qv_f32 qv_fma(qv_f32 a, qv_f32 b, qv_f32 c) { return _mm512_fmadd_ps(a, b, c); }
QV_INLINE qv_f32 qv_fnma(qv_f32 a, qv_f32 b, qv_f32 c) { return _mm512_fnmadd_ps(a, b, c); }
QV_INLINE qv_f32 qv_round(qv_f32 a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
QV_INLINE qv_f32 qv_pow2(qv_f32 n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
QV_INLINE qv_mask qv_gt(qv_f32 a, qv_f32 b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
QV_INLINE qv_f32 qv_select(qv_mask m, qv_f32 yes, qv_f32 no) { return _mm512_mask_blend_ps(m, no, yes); }
QV_INLINE float qv_reduce(qv_f32 v) { return _mm512_reduce_add_ps(v); }

#endif
