/* Synthetic checkpoints: real Qwen3.5 shapes with seeded random weights, in exact HF format. */
#ifndef QHX_SYNTH_H
#define QHX_SYNTH_H
#include <stdint.h>
#include "qhexrt.h"

typedef struct {
    const char *name, *about;
} qhx_synth_preset;

extern const qhx_synth_preset qhx_synth_presets[]; /* terminated by {NULL} */

/* Writes DIR atomically (a temporary directory renamed at the end). Refuses an existing DIR unless
 * force. Shows progress on stderr when `progress` is set. */
qhx_status qhx_synth(const char *preset, uint64_t seed, const char *dir, int force, int progress);

#endif
