/* The one seeded generator: splitmix64 (Steele, Lea and Flood), a full-period 64-bit stream from
 * any seed. Synthetic weights, the forge's gate inputs and the sampler's seeding all draw from it,
 * so a seed means the same numbers everywhere. */
#ifndef QHX_RNG_H
#define QHX_RNG_H
#include <math.h>
#include <stdint.h>

static inline uint64_t qhx_splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* a standard normal draw (Box-Muller over two splitmix64 draws; u1 in (0, 1], so log is finite) */
static inline double qhx_gauss(uint64_t *s) {
    const double u1 = ((qhx_splitmix64(s) >> 11) + 1.0) / 9007199254740993.0, u2 = (qhx_splitmix64(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
