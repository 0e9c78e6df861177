/* The fp32 kernels on the AVX2 vector layer. */
#ifdef QHX_HAVE_AVX2
#include "kernels/vec_avx2.h"
#include "kernels/fp32_ops.h"
#endif
