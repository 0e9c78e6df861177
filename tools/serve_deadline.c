/* Deadlines for what a client sends (--timeout S): a request's headers within S seconds of the
 * connection opening or of its last reply ending, and its body within S more. libmicrohttpd knows
 * only an idle timeout, which a client sending a byte every few seconds never reaches, so a slow
 * client could hold a connection (and with 128 of them, the server). One watcher thread shuts
 * down the socket of a connection past its deadline; the connection's own thread then sees its
 * input end. A reply has no deadline: generating takes as long as it takes. */
#include "serve.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* MHD_OPTION_NOTIFY_CONNECTION: a connection opened (its headers' deadline starts) or closed */
void deadline_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode code) {
    server *sv = cls;
    pthread_mutex_lock(&sv->dl.lock);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        for (int i = 0; ci && i < MAX_CONNECTIONS; i++)
            if (!sv->dl.w[i].c) {
                sv->dl.w[i] = (watched){c, ci->connect_fd, now_s() + sv->dl.timeout, "headers"};
                *socket_context = &sv->dl.w[i];
                break;
            }
    } else if (*socket_context) {
        memset(*socket_context, 0, sizeof(watched));
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&sv->dl.lock);
}

void deadline_set(server *sv, struct MHD_Connection *c, const char *what) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    watched *w = ci ? ci->socket_context : NULL;
    if (!w) return;
    pthread_mutex_lock(&sv->dl.lock);
    w->deadline = what ? now_s() + sv->dl.timeout : 0;
    w->what = what;
    pthread_mutex_unlock(&sv->dl.lock);
}

static void *watcher(void *arg) {
    server *sv = arg;
    pthread_mutex_lock(&sv->dl.lock);
    while (!sv->dl.stop) {
        const double t = now_s();
        for (int i = 0; i < MAX_CONNECTIONS; i++) {
            watched *w = &sv->dl.w[i];
            if (!w->c || !w->deadline || t < w->deadline) continue;
            fprintf(stderr, "qhx serve: closed a connection: its request's %s took longer than %g s (--timeout)\n", w->what, sv->dl.timeout);
            shutdown(w->fd, SHUT_RDWR);
            w->deadline = 0;
            sv->dl.closed++;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250000000; /* deadlines are kept to a quarter of a second */
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&sv->dl.cv, &sv->dl.lock, &ts);
    }
    pthread_mutex_unlock(&sv->dl.lock);
    return NULL;
}

int deadline_start(server *sv) {
    pthread_mutex_init(&sv->dl.lock, NULL);
    pthread_cond_init(&sv->dl.cv, NULL);
    return pthread_create(&sv->dl.thread, NULL, watcher, sv);
}

void deadline_stop(server *sv) {
    pthread_mutex_lock(&sv->dl.lock);
    sv->dl.stop = 1;
    pthread_cond_signal(&sv->dl.cv);
    pthread_mutex_unlock(&sv->dl.lock);
    pthread_join(sv->dl.thread, NULL);
}
