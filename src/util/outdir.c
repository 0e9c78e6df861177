#define _XOPEN_SOURCE 700
#include "util/outdir.h"
#include "util/error.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

qhx_status qhx_outdir_begin(const char *dir, int force, char *tmp, size_t cap) {
    struct stat st;
    if (!*dir) return qhx_fail(QHX_ERR_ARG, "output directory name is empty");
    if (stat(dir, &st) == 0 && !force) return qhx_fail(QHX_ERR_IO, "%s: already exists (use --force to replace it)", dir);
    if ((size_t)snprintf(tmp, cap, "%s.tmp-%d", dir, (int)getpid()) >= cap)
        return qhx_fail(QHX_ERR_ARG, "%s: path too long", dir);
    qhx_outdir_remove(tmp); /* a leftover of an earlier process with our pid */
    if (mkdir(tmp, 0755) != 0) return qhx_fail(QHX_ERR_IO, "%s: %s", tmp, strerror(errno));
    return QHX_OK;
}

qhx_status qhx_outdir_publish(const char *tmp, const char *dir) {
    char old[4200];
    struct stat st;
    snprintf(old, sizeof old, "%s.old-%d", dir, (int)getpid());
    const int replaced = stat(dir, &st) == 0 && rename(dir, old) == 0;
    if (rename(tmp, dir) != 0) {
        qhx_status rc = qhx_fail(QHX_ERR_IO, "%s: %s", dir, strerror(errno));
        if (replaced) rename(old, dir);
        return rc;
    }
    if (replaced) qhx_outdir_remove(old);
    return QHX_OK;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

void qhx_outdir_remove(const char *dir) { nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS); }
