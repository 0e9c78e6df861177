/* config.json, nested or flat (qhx_config_parse), and the text config a manifest carries. */
#include "format/hfconfig.h"
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    qhx_config *c = calloc(1, sizeof *c);
    if (c && qhx_config_parse(c, "fuzz", (const char *)p, n) == QHX_OK) free(qhx_config_to_json(c)), qhx_config_free(c);
    free(c);
    return 0;
}
