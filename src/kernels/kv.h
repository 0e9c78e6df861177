/* How a session's KV cache stores a head's row (qhx_kv_form), the one place that says it: the
 * forward writes rows through qhx_kv_store, attention reads them through the kernel set's attend
 * and kv_widen, snapshots and state files copy them as bytes.
 *   f32: hd floats.  f16: hd halves (round to nearest even).  q8: hd int8 in blocks of 32 (the
 *   last block zero-padded), then one fp32 scale a block (max|x| / 127), as llama.cpp's Q8_0. */
#ifndef QHX_KV_H
#define QHX_KV_H
#include "kernels/q8.h"
#include "qhexrt.h"
#include "util/half.h"
#include <stddef.h>
#include <stdint.h>

/* what QHX_KV_DEFAULT means */
#define QHX_KV_DEFAULT_FORM QHX_KV_F16

/* the scales of a q8 head row start here */
static inline size_t qhx_kv_q8_scales(int hd) { return qhx_q8_padded((size_t)hd); }

static inline size_t qhx_kv_head_bytes(qhx_kv_form form, int hd) {
    switch (form) {
    case QHX_KV_F16: return 2 * (size_t)hd;
    case QHX_KV_Q8: return qhx_kv_q8_scales(hd) + sizeof(float) * (((size_t)hd + QHX_Q8_BLOCK - 1) / QHX_Q8_BLOCK);
    default: return sizeof(float) * (size_t)hd;
    }
}

static inline const char *qhx_kv_form_name(qhx_kv_form form) {
    return form == QHX_KV_F16 ? "f16" : form == QHX_KV_Q8 ? "q8" : "f32";
}

/* One head's row x[hd] into dst in the form. Plain C, so every kernel set stores the same bytes. */
static inline void qhx_kv_store(qhx_kv_form form, const float *x, int hd, unsigned char *dst) {
    if (form == QHX_KV_F16) {
        for (int i = 0; i < hd; i++) {
            const uint16_t h = qhx_f32_to_f16(x[i]);
            memcpy(dst + 2 * i, &h, 2);
        }
    } else if (form == QHX_KV_Q8) {
        float s[64];
        const size_t nb = ((size_t)hd + QHX_Q8_BLOCK - 1) / QHX_Q8_BLOCK;
        for (size_t b = 0; b < nb; b += 64) { /* a head of up to 2048 values a pass */
            const size_t c0 = b * QHX_Q8_BLOCK, n = (size_t)hd - c0 < 64 * QHX_Q8_BLOCK ? (size_t)hd - c0 : 64 * QHX_Q8_BLOCK;
            qhx_q8_quantize(x + c0, n, (int8_t *)dst + c0, s);
            memcpy(dst + qhx_kv_q8_scales(hd) + sizeof(float) * b, s, sizeof(float) * ((n + QHX_Q8_BLOCK - 1) / QHX_Q8_BLOCK));
        }
    } else {
        memcpy(dst, x, sizeof(float) * (size_t)hd);
    }
}

/* value i of a head's row, widened (the scalar kernels' reader) */
static inline float qhx_kv_at(qhx_kv_form form, const unsigned char *row, int hd, int i) {
    if (form == QHX_KV_F16) {
        uint16_t h;
        memcpy(&h, row + 2 * i, 2);
        return qhx_f16_to_f32(h);
    }
    if (form == QHX_KV_Q8) {
        float s;
        memcpy(&s, row + qhx_kv_q8_scales(hd) + sizeof(float) * (size_t)(i / QHX_Q8_BLOCK), sizeof s);
        return (float)((const int8_t *)row)[i] * s;
    }
    float f;
    memcpy(&f, row + sizeof(float) * (size_t)i, sizeof f);
    return f;
}

#endif
