/* Synthetic checkpoints: real Qwen3.5 shapes with seeded random weights, in exact HF format. */
#ifndef QHX_SYNTH_H
#define QHX_SYNTH_H
#include <stdint.h>
#include "qhexrt.h"

/* The i-th preset's name and description; returns 0 past the last one. */
int qhx_synth_preset_info(int i, const char **name, const char **about);

/* Writes DIR atomically (a temporary directory renamed at the end). Refuses an existing DIR unless
 * force. Shows progress on stderr when `progress` is set. */
qhx_status qhx_synth(const char *preset, uint64_t seed, const char *dir, int force, int progress);

#endif
