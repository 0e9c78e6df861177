#define _XOPEN_SOURCE 700
#include "util/outdir.h"
#include "util/error.h"

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
    char parent[4096], prefix[4096 + 512];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    const char *base = slash ? slash + 1 : dir;
    if (slash) *slash = 0; else snprintf(parent, sizeof parent, ".");
    if (!*parent) snprintf(parent, sizeof parent, "/");
    DIR *d = opendir(parent);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        const size_t n = strlen(base);
        if (strncmp(e->d_name, base, n) || (strncmp(e->d_name + n, ".tmp-", 5) && strncmp(e->d_name + n, ".old-", 5))) continue;
        char *end;
        long pid = strtol(e->d_name + n + 5, &end, 10);
        if (*end || pid <= 0 || pid == getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        snprintf(prefix, sizeof prefix, "%s/%s", parent, e->d_name);
        qhx_outdir_remove(prefix);
    }
    closedir(d);
}

qhx_status qhx_outdir_begin(const char *dir, int force, char *tmp, size_t cap) {
    struct stat st;
    if (!*dir) return qhx_fail(QHX_ERR_ARG, "output directory name is empty");
    if (stat(dir, &st) == 0 && !force) return qhx_fail(QHX_ERR_IO, "%s: already exists (use --force to replace it)", dir);
    if ((size_t)snprintf(tmp, cap, "%s.tmp-%d", dir, (int)getpid()) >= cap)
        return qhx_fail(QHX_ERR_ARG, "%s: path too long", dir);
    qhx_outdir_remove(tmp); /* a leftover of an earlier process with our pid */
    remove_stale(dir);
    if (mkdir(tmp, 0755) != 0) return qhx_fail(QHX_ERR_IO, "%s: %s", tmp, strerror(errno));
    return QHX_OK;
}

qhx_status qhx_outdir_publish(const char *tmp, const char *dir) {
    char old[4200];
    struct stat st;
    snprintf(old, sizeof old, "%s.old-%d", dir, (int)getpid());
    /* One atomic swap where the filesystem can: at every instant dir is the old or the new one. */
    if (stat(dir, &st) == 0 && renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
        qhx_outdir_remove(tmp); /* the old one, now under the temporary name */
        return QHX_OK;
    }
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
