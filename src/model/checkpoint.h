/* A Hugging Face checkpoint directory: config.json plus one or more safetensors files, opened
 * (mapped) and bound to the decoder's weight table with every shape and dtype checked. */
#ifndef QHX_CHECKPOINT_H
#define QHX_CHECKPOINT_H
#include "format/hfconfig.h"
#include "format/safetensors.h"
#include "model/qwen35.h"

typedef struct {
    qhx_config cfg;
    qhx_safetensors *files;
    int n_files;
    qhx_weights *w;
    char dir[1024];
} qhx_checkpoint;

qhx_status qhx_checkpoint_open(qhx_checkpoint *ck, const char *dir);
void qhx_checkpoint_close(qhx_checkpoint *ck);

#endif
