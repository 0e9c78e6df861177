/* A plain streaming read: the yardstick the benchmarks hold decode to (`qhx bench`'s read pass,
 * bench/attend_bench's loop), one loop so both measure the same thing. */
#ifndef QHX_READLOOP_H
#define QHX_READLOOP_H
#include <stddef.h>
#include <stdint.h>

/* reads the n bytes from p with the widest loads the CPU has, in whole blocks of 128 bytes on x86-64
 * (64 on aarch64, 32 without vectors: a shorter tail goes unread); returns a sum of them, so the
 * compiler cannot drop the reads */
uint64_t qhx_read_stream(const unsigned char *p, size_t n);

#endif
