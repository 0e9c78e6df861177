/* The fp32 kernels on the NEON vector layer. */
#ifdef QHX_HAVE_NEON
#include "kernels/vec_neon.h"
#include "kernels/fp32_ops.h"
#endif
