/* The NEON vector layer (AArch64 Advanced SIMD): 4 fp32 lanes, 32 registers, FMA, fp16 and bf16
 * widening. What kernels/fp32_ops.h is written over, as vec_avx2.h is on x86-64; NEON is the
 * AArch64 baseline, so nothing needs a target attribute. */
#ifndef QHX_VEC_NEON_H
#define QHX_VEC_NEON_H
#include <arm_neon.h>
#include <string.h>

#define QV_ISA neon
#define QV_LANES 4
#define QV_TARGET
#define QV_INLINE static inline __attribute__((always_inline))
#define QV_PREFILL_TOKENS 4 /* 4 x 4 accumulators + 4 activations + 4 weights of 32 registers */
#define QV_PREFILL_WIDEN 0  /* 32 registers hold a 4 x 4 tile widening in registers */
#define QV_GEMM_ROWS 8
#define QV_DECODE_ROWS 2 /* rows side by side in a batched decode over row-major rows: 2 x 4 tokens x 2 accumulators + 4 weights + 2 activations */

typedef float32x4_t qv_f32;
typedef uint32x4_t qv_mask;

QV_INLINE qv_f32 qv_zero(void) { return vdupq_n_f32(0.0f); }
QV_INLINE qv_f32 qv_set1(float a) { return vdupq_n_f32(a); }
QV_INLINE qv_f32 qv_load(const float *p) { return vld1q_f32(p); }
QV_INLINE void qv_store(float *p, qv_f32 v) { vst1q_f32(p, v); }
/* the first n (< QV_LANES) values, the other lanes zero; and the store of the first n */
QV_INLINE qv_f32 qv_load_n(const float *p, int n) {
    float t[QV_LANES] = {0};
    memcpy(t, p, sizeof(float) * (size_t)n);
    return vld1q_f32(t);
}
QV_INLINE void qv_store_n(float *p, qv_f32 v, int n) {
    float t[QV_LANES];
    vst1q_f32(t, v);
    memcpy(p, t, sizeof(float) * (size_t)n);
}
/* QV_LANES weights widened to fp32 (exact) */
QV_INLINE qv_f32 qv_load_i8(const void *p) {
    int32_t w;
    memcpy(&w, p, 4);
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(w))))));
}
QV_INLINE qv_f32 qv_load_f16(const void *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p))); }
QV_INLINE qv_f32 qv_load_bf16(const void *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)p), 16)); }

QV_INLINE qv_f32 qv_add(qv_f32 a, qv_f32 b) { return vaddq_f32(a, b); }
QV_INLINE qv_f32 qv_sub(qv_f32 a, qv_f32 b) { return vsubq_f32(a, b); }
QV_INLINE qv_f32 qv_mul(qv_f32 a, qv_f32 b) { return vmulq_f32(a, b); }
QV_INLINE qv_f32 qv_div(qv_f32 a, qv_f32 b) { return vdivq_f32(a, b); }
QV_INLINE qv_f32 qv_min(qv_f32 a, qv_f32 b) { return vminq_f32(a, b); }
QV_INLINE qv_f32 qv_max(qv_f32 a, qv_f32 b) { return vmaxq_f32(a, b); }
QV_INLINE qv_f32 qv_fma(qv_f32 a, qv_f32 b, qv_f32 c) { return vfmaq_f32(c, a, b); }  /* a b + c */
QV_INLINE qv_f32 qv_fnma(qv_f32 a, qv_f32 b, qv_f32 c) { return vfmsq_f32(c, a, b); } /* c - a b */
/* to the nearest integer, ties to even */
QV_INLINE qv_f32 qv_round(qv_f32 a) { return vrndnq_f32(a); }
/* 2^n for integral n in [-126, 127] */
QV_INLINE qv_f32 qv_pow2(qv_f32 n) {
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23));
}
QV_INLINE qv_mask qv_gt(qv_f32 a, qv_f32 b) { return vcgtq_f32(a, b); }
QV_INLINE qv_f32 qv_select(qv_mask m, qv_f32 yes, qv_f32 no) { return vbslq_f32(m, yes, no); }

/* (a0 + a2) + (a1 + a3): the pairwise order of the other layers, over 4 lanes */
QV_INLINE float qv_reduce(qv_f32 v) {
    const float32x2_t s = vadd_f32(vget_low_f32(v), vget_high_f32(v));
    return vget_lane_f32(s, 0) + vget_lane_f32(s, 1);
}

#endif
