/* The AVX2 vector layer: 8 fp32 lanes, FMA, F16C. What kernels/fp32_ops.h is written over
 * (the idea of ggml's simd-mappings.h); a new ISA is a new one of these. Compiled through target
 * attributes, so the rest of the build stays baseline x86-64. */
#ifndef QHX_VEC_AVX2_H
#define QHX_VEC_AVX2_H
#include <immintrin.h>
#include <string.h>

#define QV_ISA avx2
#define QV_LANES 8
#define QV_TARGET __attribute__((target("avx2,fma,f16c")))
#define QV_INLINE static inline __attribute__((always_inline)) QV_TARGET
#define QV_PREFILL_TOKENS 3 /* 4 rows x 3 tokens of accumulators + 3 activations + 1 weight = 16 registers */
/* widen 4 rows once for prefill: a 4 x 4 tile widening in registers would spill the 16 */
#define QV_PREFILL_WIDEN 1
#define QV_GEMM_ROWS 4
#define QV_DECODE_ROWS 1 /* rows side by side in a batched decode over row-major rows: 16 registers hold one row's 4 x 2 accumulators */

typedef __m256 qv_f32;
typedef __m256 qv_mask;

QV_INLINE qv_f32 qv_zero(void) { return _mm256_setzero_ps(); }
QV_INLINE qv_f32 qv_set1(float a) { return _mm256_set1_ps(a); }
QV_INLINE qv_f32 qv_load(const float *p) { return _mm256_loadu_ps(p); }
QV_INLINE void qv_store(float *p, qv_f32 v) { _mm256_storeu_ps(p, v); }
/* the first n (< QV_LANES) values, the other lanes zero; and the store of the first n */
QV_INLINE qv_f32 qv_load_n(const float *p, int n) {
    float t[QV_LANES] = {0};
    memcpy(t, p, sizeof(float) * (size_t)n);
    return _mm256_loadu_ps(t);
}
QV_INLINE void qv_store_n(float *p, qv_f32 v, int n) {
    float t[QV_LANES];
    _mm256_storeu_ps(t, v);
    memcpy(p, t, sizeof(float) * (size_t)n);
}
/* QV_LANES weights widened to fp32 (exact) */
QV_INLINE qv_f32 qv_load_i8(const void *p) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p))); }
QV_INLINE qv_f32 qv_load_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
QV_INLINE qv_f32 qv_load_bf16(const void *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

QV_INLINE qv_f32 qv_add(qv_f32 a, qv_f32 b) { return _mm256_add_ps(a, b); }
QV_INLINE qv_f32 qv_sub(qv_f32 a, qv_f32 b) { return _mm256_sub_ps(a, b); }
QV_INLINE qv_f32 qv_mul(qv_f32 a, qv_f32 b) { return _mm256_mul_ps(a, b); }
QV_INLINE qv_f32 qv_div(qv_f32 a, qv_f32 b) { return _mm256_div_ps(a, b); }
QV_INLINE qv_f32 qv_min(qv_f32 a, qv_f32 b) { return _mm256_min_ps(a, b); }
QV_INLINE qv_f32 qv_max(qv_f32 a, qv_f32 b) { return _mm256_max_ps(a, b); }
QV_INLINE qv_f32 qv_fma(qv_f32 a, qv_f32 b, qv_f32 c) { return _mm256_fmadd_ps(a, b, c); }   /* a b + c */
QV_INLINE qv_f32 qv_fnma(qv_f32 a, qv_f32 b, qv_f32 c) { return _mm256_fnmadd_ps(a, b, c); } /* c - a b */
/* to the nearest integer, ties to even */
QV_INLINE qv_f32 qv_round(qv_f32 a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* 2^n for integral n in [-126, 127] */
QV_INLINE qv_f32 qv_pow2(qv_f32 n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
QV_INLINE qv_mask qv_gt(qv_f32 a, qv_f32 b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
QV_INLINE qv_f32 qv_select(qv_mask m, qv_f32 yes, qv_f32 no) { return _mm256_blendv_ps(no, yes, m); }

/* the scalar twin's lane order: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)) */
QV_INLINE float qv_reduce(qv_f32 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

#endif
