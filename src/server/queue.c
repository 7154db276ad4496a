/* server/queue.c - the job queue and its fair order.
 *
 * Owns: the queue of submitted jobs (srv.qmu), the fairness table of clients
 *   (srv.clients: when each was last served), submitting, the depth, and
 *   cancelling every job at once.
 * Fairness: the queue keeps arrival order, but the next job is the one whose
 *   client (the request's "user", else the peer address) was served longest
 *   ago (never served = first); ties go to the earlier arrival. One client
 *   sending many requests at once therefore alternates with the others
 *   instead of going first with all of them.
 * Invariants: every access is under qmu; a job in the queue holds one
 *   reference (taken by srv_submit, handed to the worker by srv_queue_take).
 * Does not: run jobs or touch the engine (worker.c does).
 */
#include "server/srv.h"

#include <stdio.h>
#include <string.h>

static uint64_t client_last(srv *s, const char *key) {
    for (int i = 0; i < SRV_MAX_CLIENTS; i++)
        if (s->clients[i].key[0] && !strcmp(s->clients[i].key, key)) return s->clients[i].last;
    return 0;
}

static void client_touch(srv *s, const char *key, uint64_t when) {
    int slot = 0;
    for (int i = 0; i < SRV_MAX_CLIENTS; i++) {
        if (s->clients[i].key[0] && !strcmp(s->clients[i].key, key)) { slot = i; break; }
        if (s->clients[i].last < s->clients[slot].last) slot = i;   /* else: least recently served */
    }
    snprintf(s->clients[slot].key, sizeof s->clients[slot].key, "%s", key);
    s->clients[slot].last = when;
}

/* Under qmu, queue not empty: the link to the job to run next. */
static srv_job **next_link(srv *s) {
    srv_job **best = NULL;
    uint64_t best_last = UINT64_MAX;
    for (srv_job **p = &s->queue; *p; p = &(*p)->next) {
        uint64_t last = client_last(s, (*p)->client);
        if (last < best_last) { best = p; best_last = last; }
    }
    return best;
}

srv_job *srv_queue_next(srv *s) { return *next_link(s); }

srv_job *srv_queue_take(srv *s) {
    srv_job **best = next_link(s);
    srv_job *j = *best;
    *best = j->next;
    j->next = NULL;
    s->n_queued--;
    client_touch(s, j->client, ++s->n_served);
    return j;
}

int srv_submit(srv *s, srv_job *j) {
    pthread_mutex_lock(&s->qmu);
    if (s->stop_worker || s->n_queued >= s->o.max_queue) {
        pthread_mutex_unlock(&s->qmu);
        return -1;
    }
    srv_job_ref(j);
    j->arrival = ++s->n_arrivals;
    srv_job **p = &s->queue;
    while (*p) p = &(*p)->next;
    *p = j;
    s->n_queued++;
    pthread_cond_broadcast(&s->qcv);
    pthread_mutex_unlock(&s->qmu);
    return 0;
}

int64_t srv_queue_depth(srv *s) {
    pthread_mutex_lock(&s->qmu);
    int64_t n = s->n_queued + s->n_running;
    pthread_mutex_unlock(&s->qmu);
    return n;
}

void srv_cancel_all(srv *s, int reason) {
    pthread_mutex_lock(&s->qmu);
    for (srv_job *j = s->queue; j; j = j->next) atomic_store(&j->cancel, reason);
    for (int i = 0; i < s->n_running; i++) atomic_store(&s->running[i]->cancel, reason);
    pthread_mutex_unlock(&s->qmu);
}
