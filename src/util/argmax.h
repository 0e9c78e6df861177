/* The index of the largest of n floats, the first one on ties (torch.argmax's rule); NaN never
 * wins. The running maximum stays in a register: comparing against x[best] made every step wait
 * on a load that depends on the step before (~7 cycles a logit, ~0.5 ms over a 248k vocabulary). */
#ifndef QHX_ARGMAX_H
#define QHX_ARGMAX_H
#include <stdint.h>

static inline int32_t qhx_argmax(const float *x, int n) {
    int32_t best = 0;
    float top = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > top) top = x[i], best = i;
    return best;
}

#endif
