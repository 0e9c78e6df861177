#define _XOPEN_SOURCE 700
#include "util/outdir.h"
#include "util/error.h"
#include "util/mapfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags);
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

/* Removes DIR.tmp-PID and DIR.old-PID left by writers that were killed (their PID is gone). */
static void remove_stale(const char *dir) {
    char *parent = strdup(dir);
    if (!parent) return;
    char *slash = strrchr(parent, '/');
    const char *base = slash ? dir + (slash - parent) + 1 : dir;
    const char *where = !slash ? "." : slash == parent ? "/" : (*slash = 0, parent);
    DIR *d = opendir(where);
    if (!d) {
        free(parent);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        const size_t n = strlen(base);
        if (strncmp(e->d_name, base, n) || (strncmp(e->d_name + n, ".tmp-", 5) && strncmp(e->d_name + n, ".old-", 5))) continue;
        char *end;
        long pid = strtol(e->d_name + n + 5, &end, 10);
        if (*end || pid <= 0 || pid == getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char *path = qhx_path_join(where, e->d_name);
        if (path) qhx_outdir_remove(path);
        free(path);
    }
    closedir(d);
    free(parent);
}

/* DIR.tmp-PID or DIR.old-PID, malloc'd (NULL: out of memory) */
static char *sibling(const char *dir, const char *what) {
    const size_t n = strlen(dir);
    char *s = malloc(n + 32);
    if (s) memcpy(s, dir, n), snprintf(s + n, 32, ".%s-%d", what, (int)getpid());
    return s;
}

qhx_status qhx_outdir_begin(const char *dir, int force, char **tmp) {
    struct stat st;
    *tmp = NULL;
    if (!*dir) return qhx_fail(QHX_ERR_ARG, "output directory name is empty");
    if (stat(dir, &st) == 0 && !force) return qhx_fail(QHX_ERR_IO, "%s: already exists (use --force to replace it)", dir);
    char *t = sibling(dir, "tmp");
    if (!t) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    qhx_outdir_remove(t); /* a leftover of an earlier process with our pid */
    remove_stale(dir);
    if (mkdir(t, 0755) != 0) {
        qhx_status rc = qhx_fail(QHX_ERR_IO, "%s: %s", t, strerror(errno));
        free(t);
        return rc;
    }
    *tmp = t;
    return QHX_OK;
}

qhx_status qhx_outdir_publish(const char *tmp, const char *dir) {
    struct stat st;
    char *old = sibling(dir, "old");
    if (!old) return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    /* One atomic swap where the filesystem can: at every instant dir is the old or the new one. */
    if (stat(dir, &st) == 0 && renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
        qhx_outdir_remove(tmp); /* the old one, now under the temporary name */
        free(old);
        return QHX_OK;
    }
    const int replaced = stat(dir, &st) == 0 && rename(dir, old) == 0;
    if (rename(tmp, dir) != 0) {
        qhx_status rc = qhx_fail(QHX_ERR_IO, "%s: %s", dir, strerror(errno));
        if (replaced) rename(old, dir);
        free(old);
        return rc;
    }
    if (replaced) qhx_outdir_remove(old);
    free(old);
    return QHX_OK;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

void qhx_outdir_remove(const char *dir) { nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS); }
