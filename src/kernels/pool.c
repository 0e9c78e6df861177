/* A persistent thread pool: workers sleep on a condition variable between parallel-fors and spin
 * briefly first, because decode issues a few hundred small parallel-fors per token. A
 * parallel-for runs in the calling thread's floating-point mode (qhx_fp_enter). */
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct qhx_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    void (*fn)(void *, int, int);
    void *arg;
    atomic_uint generation;   /* bumped once per parallel-for */
    atomic_int pending;       /* workers still running the current one */
    unsigned fp_mode;         /* the caller's, for the current one */
    int quit;
};

typedef struct {
    qhx_pool *p;
    int index;
} worker_arg;

/* a spin-wait hint to the core (another hyperthread gets the pipeline meanwhile) */
static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static void *worker(void *v) {
    worker_arg *wa = v;
    qhx_pool *p = wa->p;
    const int index = wa->index;
    free(wa);
    unsigned seen = 0, fp_mode = qhx_fp_mode();
    for (;;) {
        for (int spin = 0; spin < 20000 && atomic_load(&p->generation) == seen; spin++) relax();
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->generation) == seen && !p->quit) pthread_cond_wait(&p->wake, &p->mu);
        if (p->quit) { pthread_mutex_unlock(&p->mu); return NULL; }
        seen = atomic_load(&p->generation);
        pthread_mutex_unlock(&p->mu);
        if (p->fp_mode != fp_mode) qhx_fp_set(fp_mode = p->fp_mode);
        p->fn(p->arg, index, p->n);
        if (atomic_fetch_sub(&p->pending, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

qhx_pool *qhx_pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    qhx_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) { free(p); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa || (wa->p = p, wa->index = i, pthread_create(&p->threads[i], NULL, worker, wa))) {
            free(wa);
            p->n = i; /* run with the workers that did start */
            break;
        }
    }
    return p;
}

void qhx_pool_free(qhx_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

int qhx_pool_size(const qhx_pool *p) { return p ? p->n : 1; }

void qhx_pool_run(qhx_pool *p, void (*fn)(void *arg, int i, int n), void *arg) {
    if (!p || p->n == 1) { fn(arg, 0, 1); return; }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->fp_mode = qhx_fp_mode();
    atomic_store(&p->pending, p->n - 1);
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    for (int spin = 0; spin < 200000 && atomic_load(&p->pending) > 0; spin++) relax();
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
