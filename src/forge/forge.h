/* Forge internals shared with tests and benchmarks (the entry point, qhx_forge, is public). */
#ifndef QHX_FORGE_H
#define QHX_FORGE_H
#include <stdint.h>
#include "qhexrt.h"
#include "qhexrt_tools.h"

#define QHX_FORGE_DEFAULT_CEILING (2ull << 30) /* the 4B shape -> 2 shards of ~1.8 GB, as in the seed */

/* The quantizer, shared with the tests: one symmetric int8 row, scale = max|w| / 127. */
float qhx_quantize_row(const float *w, int n, int8_t *q);
/* One W4 group of n <= 256 weights: codes q in [0, 15] with w ~ d q + m, d and m fp16 values;
 * asym = 0 keeps m = -8 d (src/forge/quantize.c says how the scale is chosen). */
void qhx_quantize_w4(const float *w, int n, int asym, uint8_t *q, float *d, float *m);

#endif
