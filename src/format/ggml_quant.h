/* ggml's tensor types as GGUF files store them: block sizes, byte sizes, names, and each block
 * layout decoded to fp32 exactly as ggml's reference dequantizers compute it (the layouts of
 * ggml-common.h, rewritten here from their definitions). */
#ifndef QHX_GGML_QUANT_H
#define QHX_GGML_QUANT_H
#include <stddef.h>
#include <stdint.h>

enum {
    QHX_GGML_F32 = 0, QHX_GGML_F16 = 1, QHX_GGML_Q4_0 = 2, QHX_GGML_Q4_1 = 3, QHX_GGML_Q5_0 = 6,
    QHX_GGML_Q5_1 = 7, QHX_GGML_Q8_0 = 8, QHX_GGML_Q4_K = 12, QHX_GGML_Q5_K = 13, QHX_GGML_Q6_K = 14,
    QHX_GGML_BF16 = 30
};

/* "Q4_K" etc., or NULL for an id ggml does not define. */
const char *qhx_ggml_type_name(uint32_t type);
/* Values per block and bytes per block of a type this reader decodes; 0 when it decodes none. */
int qhx_ggml_block_values(uint32_t type);
size_t qhx_ggml_block_bytes(uint32_t type);
/* The types it decodes, for messages: "F32, F16, ..." */
const char *qhx_ggml_supported(void);

/* Decodes n values (a whole number of blocks) of a decodable type at src into dst. */
void qhx_ggml_dequant(uint32_t type, const void *src, float *dst, int64_t n);

#endif
