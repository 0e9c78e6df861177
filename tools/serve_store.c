/* Stored responses (serve.h: rstore_*): the Responses API keeps a response unless its request says
 * store: false, so that a later request continues the conversation by previous_response_id and
 * GET / DELETE /v1/responses/ID reach it. Each entry holds the conversation as input items (the
 * chain before it, its own input, its output: what a client would hand back) and the response
 * object. Memory only, newest kept: past the byte budget the least recently used go, and a
 * request naming one of them gets the 404 an unknown id gets. */
#include "serve.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *id;
    json_t *items, *response;
    size_t bytes;
    unsigned long used;
} stored;

struct resp_store {
    pthread_mutex_t lock;
    stored *e;
    int n, cap;
    size_t budget, bytes;
    unsigned long clock;
};

resp_store *rstore_new(size_t budget) {
    resp_store *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    pthread_mutex_init(&st->lock, NULL);
    st->budget = budget;
    return st;
}

static void drop(resp_store *st, int i) {
    free(st->e[i].id);
    json_decref(st->e[i].items);
    json_decref(st->e[i].response);
    st->bytes -= st->e[i].bytes;
    st->e[i] = st->e[--st->n];
}

void rstore_free(resp_store *st) {
    if (!st) return;
    while (st->n) drop(st, 0);
    free(st->e);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

static int find(const resp_store *st, const char *id) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->e[i].id, id)) return i;
    return -1;
}

/* the bytes an entry holds, as its JSON */
static size_t size_of(const json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    const size_t n = s ? strlen(s) : 0;
    free(s);
    return n;
}

void rstore_put(resp_store *st, const char *id, json_t *items, json_t *response) {
    if (!st) { /* no store (the request fuzzer's server) */
        json_decref(items), json_decref(response);
        return;
    }
    stored s = {strdup(id), items, response, size_of(items) + size_of(response) + strlen(id), 0};
    pthread_mutex_lock(&st->lock);
    const int old = find(st, id);
    if (old >= 0) drop(st, old);
    if (!s.id || s.bytes > st->budget || (st->n == st->cap && !(st->e = realloc(st->e, sizeof *st->e * (st->cap = st->cap * 2 + 8))))) {
        pthread_mutex_unlock(&st->lock);
        free(s.id), json_decref(items), json_decref(response);
        return;
    }
    s.used = ++st->clock;
    st->e[st->n++] = s;
    st->bytes += s.bytes;
    while (st->bytes > st->budget) { /* the least recently used go */
        int lru = 0;
        for (int i = 1; i < st->n; i++)
            if (st->e[i].used < st->e[lru].used) lru = i;
        drop(st, lru);
    }
    pthread_mutex_unlock(&st->lock);
}

json_t *rstore_get(resp_store *st, const char *id, int items) {
    if (!st) return NULL;
    pthread_mutex_lock(&st->lock);
    const int i = find(st, id);
    json_t *j = NULL;
    if (i >= 0) {
        st->e[i].used = ++st->clock;
        j = json_deep_copy(items ? st->e[i].items : st->e[i].response); /* a copy: the caller may change it */
    }
    pthread_mutex_unlock(&st->lock);
    return j;
}

int rstore_delete(resp_store *st, const char *id) {
    if (!st) return 0;
    pthread_mutex_lock(&st->lock);
    const int i = find(st, id);
    if (i >= 0) drop(st, i);
    pthread_mutex_unlock(&st->lock);
    return i >= 0;
}
