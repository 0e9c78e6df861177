/* A plain streaming read: the yardstick the benchmarks hold decode to (`qhx bench`'s read pass,
 * bench/attend_bench's loop), one loop so both measure the same thing. */
#ifndef QHX_READLOOP_H
#define QHX_READLOOP_H
#include <stddef.h>
#include <stdint.h>

/* reads n bytes from p (whole 128-byte blocks) with the widest loads the CPU has; returns a sum
 * of them, so the compiler cannot drop the reads */
uint64_t qhx_read_stream(const unsigned char *p, size_t n);

#endif
