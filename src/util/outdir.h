/* Output directories that appear complete or not at all: written under a temporary name next to
 * the destination, then renamed into place; an existing destination survives until the new one is
 * complete. */
#ifndef QHX_OUTDIR_H
#define QHX_OUTDIR_H
#include <stddef.h>
#include "qhexrt.h"

/* Refuses an existing dir unless force; creates the temporary directory (*tmp, malloc'd), and
 * removes the temporary directories of earlier writers that were killed. */
qhx_status qhx_outdir_begin(const char *dir, int force, char **tmp);
/* Renames tmp to dir; an existing dir is swapped out atomically (renameat2 RENAME_EXCHANGE, or two
 * renames where the filesystem cannot) and then deleted. */
qhx_status qhx_outdir_publish(const char *tmp, const char *dir);
/* Deletes a directory tree this process wrote. */
void qhx_outdir_remove(const char *dir);

#endif
