/* The fp32 kernels on the AVX-512 vector layer. */
#ifdef QHX_HAVE_AVX512
#include "kernels/vec_avx512.h"
#include "kernels/fp32_ops.h"
#endif
