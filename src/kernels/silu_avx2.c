/* SiLU over a vector with an AVX2 exp (the SIMD sets' `silu`): the MLP's 9216 a token and the
 * conv's and gated norm's SiLUs were one libm expf call each, 5-8 % of prefill. */
#include "kernels/kernels.h"

#ifdef QHX_HAVE_AVX2
#include <immintrin.h>
#include <string.h>

#define TARGET __attribute__((target("avx2,fma")))

/* e^x: Cody-Waite reduction by ln 2 in two parts, then Cephes' expf polynomial on |r| <= ln 2 / 2
 * (relative error a few 1e-8 against double). Below -87 it returns e^-87 (beside 1 in SiLU's
 * denominator, both vanish); above 88.5, infinity (so SiLU goes to -0 as it should). */
TARGET static inline __m256 exp8(__m256 x) {
    const __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(88.5f), _CMP_GT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.5f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_blendv_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), _mm256_set1_ps(__builtin_inff()), over);
}

TARGET static inline __m256 silu8(__m256 x) {
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

TARGET void qhx_avx2_silu(float *x, const float *mul, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 y = silu8(_mm256_loadu_ps(x + i));
        _mm256_storeu_ps(x + i, mul ? _mm256_mul_ps(y, _mm256_loadu_ps(mul + i)) : y);
    }
    if (i < n) { /* the tail through the same lanes, so every element gets the same arithmetic */
        float t[8] = {0}, m[8] = {0};
        memcpy(t, x + i, sizeof(float) * (n - i));
        if (mul) memcpy(m, mul + i, sizeof(float) * (n - i));
        const __m256 y = silu8(_mm256_loadu_ps(t));
        _mm256_storeu_ps(t, mul ? _mm256_mul_ps(y, _mm256_loadu_ps(m)) : y);
        memcpy(x + i, t, sizeof(float) * (n - i));
    }
}
#endif
