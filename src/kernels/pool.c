/* A persistent thread pool for the many small parallel-fors of decode (a few hundred a token).
 * A parallel-for's n parts are claimed from one atomic word, by the workers and the caller alike:
 * a worker the OS has descheduled (another process on its core, a little core on a phone) holds
 * nothing back, since the caller runs the parts nobody has taken. Workers and the caller spin a
 * few microseconds, then sleep (condition variables), so a busy machine loses no time slices to
 * spinning. A parallel-for runs in the calling thread's floating-point mode (qhx_fp_enter). */
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

/* pause instructions a thread spins before it sleeps: ~30-60 us, short against a time slice;
 * longer spins gained nothing measurable on a quiet machine (bench/README.md, "busy_pool") */
#define SPIN 1000

struct qhx_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    void (*fn)(void *, int, int);
    void *arg;
    unsigned fp_mode;           /* the caller's, for the current parallel-for */
    _Atomic uint64_t work;      /* generation << 32 | the next unclaimed part */
    atomic_int finished;        /* parts of the current generation done */
    int sleepers, waiting, quit;
};

/* a spin-wait hint to the core (another hyperthread gets the pipeline meanwhile) */
static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* Claims and runs parts of generation gen until none is left. */
static void run_parts(qhx_pool *p, uint32_t gen, unsigned *fp_mode) {
    uint64_t w = atomic_load_explicit(&p->work, memory_order_acquire);
    while ((uint32_t)(w >> 32) == gen && (int)(uint32_t)w < p->n) {
        if (!atomic_compare_exchange_weak_explicit(&p->work, &w, w + 1, memory_order_acq_rel, memory_order_acquire)) continue;
        /* a claimed part keeps its generation current: fn and arg are this one's */
        if (fp_mode && p->fp_mode != *fp_mode) qhx_fp_set(*fp_mode = p->fp_mode);
        p->fn(p->arg, (int)(uint32_t)w, p->n);
        if (atomic_fetch_add_explicit(&p->finished, 1, memory_order_acq_rel) + 1 == p->n) {
            pthread_mutex_lock(&p->mu);
            if (p->waiting) pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
        w = atomic_load_explicit(&p->work, memory_order_acquire);
    }
}

static void *worker(void *v) {
    qhx_pool *p = v;
    uint32_t seen = 0;
    unsigned fp_mode = qhx_fp_mode();
    for (;;) {
        uint32_t gen = (uint32_t)(atomic_load_explicit(&p->work, memory_order_acquire) >> 32);
        for (int spin = 0; spin < SPIN && gen == seen; spin++)
            relax(), gen = (uint32_t)(atomic_load_explicit(&p->work, memory_order_acquire) >> 32);
        if (gen == seen) {
            pthread_mutex_lock(&p->mu);
            p->sleepers++;
            while ((gen = (uint32_t)(atomic_load(&p->work) >> 32)) == seen && !p->quit) pthread_cond_wait(&p->wake, &p->mu);
            p->sleepers--;
            const int quit = p->quit;
            pthread_mutex_unlock(&p->mu);
            if (quit) return NULL;
        }
        seen = gen;
        run_parts(p, gen, &fp_mode);
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
    atomic_init(&p->work, (uint64_t)(unsigned)n_threads); /* generation 0, nothing to claim */
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) { free(p); return NULL; }
    for (int i = 1; i < n_threads; i++)
        if (pthread_create(&p->threads[i], NULL, worker, p)) {
            p->n = i; /* run with the workers that did start */
            break;
        }
    atomic_store(&p->work, (uint64_t)(unsigned)p->n);
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
    p->fn = fn;
    p->arg = arg;
    p->fp_mode = qhx_fp_mode();
    atomic_store_explicit(&p->finished, 0, memory_order_relaxed);
    const uint32_t gen = (uint32_t)(atomic_load_explicit(&p->work, memory_order_relaxed) >> 32) + 1;
    atomic_store_explicit(&p->work, (uint64_t)gen << 32, memory_order_release); /* publishes fn, arg, fp_mode */
    pthread_mutex_lock(&p->mu);
    if (p->sleepers) pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    run_parts(p, gen, NULL); /* the caller is already in its mode */
    for (int spin = 0; spin < SPIN && atomic_load_explicit(&p->finished, memory_order_acquire) < p->n; spin++) relax();
    if (atomic_load_explicit(&p->finished, memory_order_acquire) < p->n) {
        pthread_mutex_lock(&p->mu);
        p->waiting = 1;
        while (atomic_load(&p->finished) < p->n) pthread_cond_wait(&p->done, &p->mu);
        p->waiting = 0;
        pthread_mutex_unlock(&p->mu);
    }
}
