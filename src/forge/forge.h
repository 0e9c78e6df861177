/* Forge internals shared with tests and benchmarks (the entry point, qhx_forge, is public). */
#ifndef QHX_FORGE_H
#define QHX_FORGE_H
#include <stdint.h>
#include "qhexrt.h"
#include "qhexrt_tools.h"

#define QHX_FORGE_DEFAULT_CEILING (2ull << 30) /* the 4B shape -> 2 shards of ~1.8 GB, as in the seed */

/* The quantizer, shared with the tests: one symmetric int8 row, scale = max|w| / 127. */
float qhx_quantize_row(const float *w, int n, int8_t *q);

#endif
