/* qhx serve's scheduling (tools/serve.h): a bounded queue for the slots, a ticket lock that gives
 * the model to one evaluation at a time in arrival order (prompts, verify passes, a batched step),
 * the batched decode steps of every slot in its decode loop, and the time a long prefill yields
 * to them between its pieces. */
#include "cli.h"
#include "serve.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* A place in the queue for a slot, or -1 when the queue is full (503). */
int queue_enter(server *sv) {
    pthread_mutex_lock(&sv->lock);
    int ok = sv->n_waiting < MAX_QUEUE && !sv->stopping;
    if (ok) sv->n_waiting++;
    pthread_mutex_unlock(&sv->lock);
    return ok ? 0 : -1;
}

/* Whether the client behind fd (its socket, or a stream's pipe, whose reader libmicrohttpd
 * closes when the client goes) has gone. */
int client_gone(int fd) {
    struct pollfd p = {fd, POLLRDHUP, 0};
    return fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Waits (in the queue) for a free slot; -1 if the server is stopping or the client behind fd
 * (-1: none) leaves meanwhile, so a request nobody waits for gives its place up. */
int slot_take(server *sv, int fd) {
    pthread_mutex_lock(&sv->lock);
    int k = -1;
    for (;;) {
        for (int i = 0; i < sv->n_slots && k < 0; i++)
            if (!sv->slot_busy[i]) k = i;
        if (k >= 0 || sv->stopping || client_gone(fd)) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000; /* a look at the client every 100 ms */
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&sv->cv, &sv->lock, &ts);
    }
    sv->n_waiting--;
    if (k >= 0) { sv->slot_busy[k] = 1; sv->n_running++; }
    pthread_mutex_unlock(&sv->lock);
    return k;
}

void slot_give(server *sv, int k) {
    pthread_mutex_lock(&sv->lock);
    sv->slot_busy[k] = 0;
    sv->n_running--;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->lock);
}

void turn_begin(server *sv) {
    pthread_mutex_lock(&sv->lock);
    unsigned long me = sv->turn_next++;
    while (sv->turn_now != me) pthread_cond_wait(&sv->cv, &sv->lock);
    pthread_mutex_unlock(&sv->lock);
}

void turn_end(server *sv) {
    pthread_mutex_lock(&sv->lock);
    sv->turn_now++;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->lock);
}

typedef struct step_req {
    qhx_session *s;
    int32_t tok;
    float *logits;
    qhx_status rc;
    int taken, done;
} step_req;

/* Runs every posted step as one qhx_sessions_step (called with sv->lock held; returns with it). */
static void lead(server *sv) {
    step_req *batch[64];
    qhx_session *ss[64];
    int32_t toks[64];
    const int n = sv->n_posted;
    for (int i = 0; i < n; i++) batch[i] = sv->posted[i], batch[i]->taken = 1, ss[i] = batch[i]->s, toks[i] = batch[i]->tok;
    sv->n_posted = 0;
    sv->leading = 1;
    pthread_mutex_unlock(&sv->lock);
    turn_begin(sv);
    const double t0 = now_s();
    const qhx_status rc = qhx_sessions_step(ss, toks, n, sv->batch_logits);
    if (rc) fprintf(stderr, "qhx serve: a batched decode step failed: %s\n", qhx_last_error());
    const double took = now_s() - t0;
    turn_end(sv);
    const size_t V = (size_t)sv->mi.vocab_size;
    for (int i = 0; i < n && !rc; i++) memcpy(batch[i]->logits, sv->batch_logits + i * V, sizeof(float) * V);
    pthread_mutex_lock(&sv->lock);
    for (int i = 0; i < n; i++) batch[i]->rc = rc, batch[i]->done = 1;
    sv->leading = 0;
    sv->decode_s += took;
    pthread_cond_broadcast(&sv->cv);
}

qhx_status sched_step(server *sv, qhx_session *s, int32_t tok, float *logits, int *registered) {
    step_req me = {s, tok, logits, QHX_OK, 0, 0};
    turn_end(sv);
    pthread_mutex_lock(&sv->lock);
    if (!*registered) *registered = 1, sv->n_decoding++;
    sv->posted[sv->n_posted++] = &me;
    while (!me.done) {
        if (!me.taken && !sv->leading && sv->n_posted == sv->n_decoding) lead(sv);
        else pthread_cond_wait(&sv->cv, &sv->lock);
    }
    pthread_mutex_unlock(&sv->lock);
    turn_begin(sv);
    return me.rc;
}

void sched_step_done(server *sv, int *registered) {
    pthread_mutex_lock(&sv->lock);
    if (*registered) {
        *registered = 0;
        sv->n_decoding--;
        pthread_cond_broadcast(&sv->cv);
    }
    pthread_mutex_unlock(&sv->lock);
}

int sched_yield_time(server *sv, double piece) {
    pthread_mutex_lock(&sv->lock);
    const double target = sv->decode_s + piece, until = now_s() + piece;
    while (!sv->stopping && sv->n_decoding > 0 && sv->decode_s < target && now_s() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 2000000; /* re-check every 2 ms: the condition variable is the slots' */
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&sv->cv, &sv->lock, &ts);
    }
    const int stop = sv->stopping;
    pthread_mutex_unlock(&sv->lock);
    return stop;
}
