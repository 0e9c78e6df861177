/* chat requests (qhx_chat_render): any JSON, any shape. */
#include "qhexrt.h"
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *p, size_t n) {
    char *out;
    if (qhx_chat_render((const char *)p, n, &out, NULL) == QHX_OK) free(out);
    return 0;
}
