/* The prefix cache's state files (src/prefix_store.h): one file a snapshot, named by its tokens'
 * XXH3 and position, written whole under a temporary name and renamed (qhx_snapshot_save), so a
 * reader never meets half a file. The index (each file's tokens, from its header, checked as a
 * load checks it) is built at open; a file is read whole, its checksum checked, only when a prompt
 * resumes from it. Eviction weighs files as the memory tier weighs snapshots: tokens saved a
 * byte, halved with age. A file being written is in the index but not offered, so one writer
 * writes it. */
#include "prefix_store.h"
#include "model/snapshot.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/mapfile.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define SUFFIX ".qhxstate"

typedef struct {
    char *path;
    int32_t *tokens;
    int pos;
    int writing; /* its file is being written: not offered, not deleted */
    uint64_t bytes;
    unsigned long used;
} file_entry;

struct pc_store {
    pthread_mutex_t lock;
    qhx_model *m;
    char *dir;
    file_entry *e;
    int n;
    size_t cap;
    uint64_t budget, bytes;
    int others; /* state files at open this model cannot take */
    unsigned long clock, hits, writes, deleted;
};

static void entry_free(file_entry *f) {
    free(f->path);
    free(f->tokens);
}

static double worth(const pc_store *st, const file_entry *f) {
    const double age = (double)(st->clock - f->used) / 8.0;
    return (double)f->pos / ((double)f->bytes / 1e6 + 1e-9) / (1.0 + age * age);
}

/* Takes the least worth files out of the index until the rest fit; their paths go to *gone (NULL
 * terminated) for the caller to delete outside the lock. */
static char **over_budget(pc_store *st) {
    char **gone = calloc((size_t)st->n + 1, sizeof *gone);
    int k = 0;
    while (gone && st->bytes > st->budget) {
        int worst = -1;
        for (int i = 0; i < st->n; i++)
            if (!st->e[i].writing && (worst < 0 || worth(st, &st->e[i]) < worth(st, &st->e[worst]))) worst = i;
        if (worst < 0) break;
        st->bytes -= st->e[worst].bytes;
        gone[k++] = st->e[worst].path;
        free(st->e[worst].tokens);
        st->e[worst] = st->e[--st->n];
        st->deleted++;
    }
    return gone;
}

static void delete_all(char **gone) {
    for (int i = 0; gone && gone[i]; i++) {
        unlink(gone[i]);
        free(gone[i]);
    }
    free(gone);
}

/* A temporary file whose writer (this process's own are never here at open) is gone:
 * NAME.qhxstate.tmp-PID, PID not running. */
static int stale_tmp(const char *name) {
    const char *t = strstr(name, SUFFIX ".tmp-");
    if (!t) return 0;
    char *end;
    const long pid = strtol(t + strlen(SUFFIX ".tmp-"), &end, 10);
    return *end == 0 && pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static int ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

qhx_status pc_store_open(qhx_model *m, const char *dir, uint64_t budget, pc_store **out) {
    *out = NULL;
    if (!m || !dir || !*dir) return qhx_fail(QHX_ERR_ARG, "prefix cache: a directory needs a model and a path");
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) /* the files hold prompts: the owner's alone */
        return qhx_fail(QHX_ERR_IO, "%s: %s", dir, strerror(errno));
    DIR *d = opendir(dir);
    if (!d) return qhx_fail(QHX_ERR_IO, "%s: %s", dir, strerror(errno));
    if (access(dir, W_OK | X_OK)) { /* found now, not as every write fails unseen */
        const int e = errno;
        closedir(d);
        return qhx_fail(QHX_ERR_IO, "%s: cannot write there: %s", dir, strerror(e));
    }
    pc_store *st = calloc(1, sizeof *st);
    if (!st || !(st->dir = strdup(dir))) {
        free(st);
        closedir(d);
        return qhx_fail(QHX_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&st->lock, NULL);
    st->m = m, st->budget = budget;
    for (struct dirent *de; (de = readdir(d));) {
        char *path = qhx_path_join(dir, de->d_name);
        struct stat sb;
        file_entry f = {.path = path};
        if (path && stale_tmp(de->d_name)) unlink(path);
        if (!path || !ends_with(de->d_name, SUFFIX) || stat(path, &sb) || !S_ISREG(sb.st_mode)) {
            entry_free(&f);
            continue;
        }
        if (qhx_state_file_peek(m, path, &f.tokens, &f.pos) || f.pos <= 0 || qhx_reserve(&st->e, &st->cap, (size_t)st->n + 1, sizeof *st->e)) {
            st->others += !f.tokens; /* another model's, kernel set's or KV form's, or no state file */
            entry_free(&f);
            continue;
        }
        f.bytes = (uint64_t)sb.st_size;
        st->e[st->n++] = f;
        st->bytes += f.bytes;
    }
    closedir(d);
    qhx_clear_error(); /* files passed over are not this open's failure */
    delete_all(over_budget(st));
    *out = st;
    return QHX_OK;
}

void pc_store_free(pc_store *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++) entry_free(&st->e[i]);
    free(st->e);
    free(st->dir);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

static int find(const pc_store *st, const int32_t *ids, int pos) {
    for (int i = 0; i < st->n; i++)
        if (st->e[i].pos == pos && !memcmp(st->e[i].tokens, ids, sizeof(int32_t) * pos)) return i;
    return -1;
}

static int find_path(const pc_store *st, const char *path) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->e[i].path, path)) return i;
    return -1;
}

void pc_store_put(pc_store *st, const qhx_snapshot *snap, const int32_t *ids, int pos) {
    char name[64];
    snprintf(name, sizeof name, "%016llx-%d" SUFFIX, (unsigned long long)XXH3_64bits(ids, sizeof(int32_t) * pos), pos);
    file_entry f = {.path = qhx_path_join(st->dir, name), .tokens = malloc(sizeof(int32_t) * pos), .pos = pos, .writing = 1};
    pthread_mutex_lock(&st->lock);
    const int have = find(st, ids, pos);
    if (have >= 0) st->e[have].used = ++st->clock;
    /* another sequence of the same hash and length would take this name: leave that one be */
    if (have >= 0 || !f.path || !f.tokens || find_path(st, f.path) >= 0 ||
        qhx_reserve(&st->e, &st->cap, (size_t)st->n + 1, sizeof *st->e)) {
        pthread_mutex_unlock(&st->lock);
        entry_free(&f);
        return;
    }
    memcpy(f.tokens, ids, sizeof(int32_t) * pos);
    f.used = ++st->clock;
    st->e[st->n++] = f;
    pthread_mutex_unlock(&st->lock);

    const qhx_status rc = qhx_snapshot_save(snap, f.path);
    struct stat sb;
    const int ok = !rc && !stat(f.path, &sb);
    pthread_mutex_lock(&st->lock);
    const int i = find_path(st, f.path);
    char **gone = NULL;
    if (i >= 0 && ok) {
        st->e[i].writing = 0;
        st->e[i].bytes = (uint64_t)sb.st_size;
        st->bytes += st->e[i].bytes;
        st->writes++;
        gone = over_budget(st);
    } else if (i >= 0) {
        entry_free(&st->e[i]);
        st->e[i] = st->e[--st->n];
    }
    pthread_mutex_unlock(&st->lock);
    delete_all(gone);
    qhx_clear_error();
}

/* snap is the state after exactly ids[0, pos): the file is what its index entry said */
static int holds(const qhx_snapshot *snap, const int32_t *ids, int pos) {
    qhx_snapshot_info info;
    qhx_snapshot_get_info(snap, &info);
    int32_t *t = info.pos == pos ? malloc(sizeof(int32_t) * ((size_t)pos + 1)) : NULL;
    const int same = t && qhx_snapshot_tokens(snap, t, pos) == pos && !memcmp(t, ids, sizeof(int32_t) * pos);
    free(t);
    return same;
}

int pc_store_get(pc_store *st, const int32_t *ids, const int *splits, int n, int above, qhx_snapshot **out) {
    *out = NULL;
    for (int k = n - 1; k >= 0 && splits[k] > above; k--) {
        pthread_mutex_lock(&st->lock);
        const int i = find(st, ids, splits[k]);
        char *path = i >= 0 && !st->e[i].writing ? strdup(st->e[i].path) : NULL;
        if (path) st->e[i].used = ++st->clock;
        pthread_mutex_unlock(&st->lock);
        if (!path) continue;
        qhx_snapshot *snap = NULL;
        const qhx_status rc = qhx_snapshot_load(st->m, path, &snap);
        if (!rc && holds(snap, ids, splits[k])) {
            pthread_mutex_lock(&st->lock);
            st->hits++;
            pthread_mutex_unlock(&st->lock);
            free(path);
            *out = snap;
            return splits[k];
        }
        qhx_snapshot_free(snap);
        /* damaged: out of the index and off the disk; gone (deleted by another process): out of
         * the index; anything else (out of memory) may pass */
        const int damaged = rc == QHX_ERR_FORMAT, gone = access(path, F_OK) != 0;
        pthread_mutex_lock(&st->lock);
        const int j = find_path(st, path);
        if (j >= 0 && !st->e[j].writing && (damaged || gone)) {
            st->bytes -= st->e[j].bytes;
            entry_free(&st->e[j]);
            st->e[j] = st->e[--st->n];
            if (damaged) st->deleted++, unlink(path);
        }
        pthread_mutex_unlock(&st->lock);
        free(path);
        qhx_clear_error();
    }
    return 0;
}

void pc_store_get_stats(pc_store *st, pc_store_stats *out) {
    pthread_mutex_lock(&st->lock);
    *out = (pc_store_stats){st->budget, st->bytes, st->n, st->others, st->hits, st->writes, st->deleted};
    pthread_mutex_unlock(&st->lock);
}
