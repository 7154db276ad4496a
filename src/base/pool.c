/* base/pool.c - see pool.h. A job is published with a generation counter.
 * The job's range is cut into CHUNKS_PER_THREAD x n_threads chunks (whole
 * grains); the caller and every worker take the next chunk with an atomic
 * counter until none is left, so a thread whose core is busy elsewhere takes
 * fewer chunks instead of holding the others up. The caller waits until
 * every participant has left the job.
 *
 * Waiting spins before it sleeps: an idle worker watches the generation, and
 * the caller the count of workers still in the job, for up to SPIN_NS before
 * blocking on a condition variable. Decode issues jobs back to back (a few
 * microseconds apart) and many are short (an expert's matrix: ~0.2 ms on 2
 * threads); waking a sleeping thread costs tens of microseconds, more in a
 * VM, and it would be paid twice per job (the worker's start, the caller's
 * end). The spin is short because on a 2-core machine a spinning worker
 * takes the core the I/O threads need: a long spin slowed the floor rung,
 * a short one helped fully resident and cost nothing at the floor
 * (docs/perf/history.md, "thread pool, spin before sleeping"). A
 * thread that finds nothing within SPIN_NS sleeps as before, so an idle
 * engine (waiting on I/O or on a client) does not burn its cores. */
#include "base/pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ms_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    uint64_t generation;        /* written under mu, read by spinners atomically */
    int stop;
    int left;                   /* workers still in the current job (atomic) */
    /* current job */
    ms_pool_fn fn;
    void *ctx;
    int64_t n, grain;
    int n_chunks, n_parts;
    int next;                   /* next chunk to take (atomic) */
};

/* 16 rather than 4: with everything resident, decode on machine C (2 vCPU)
 * ran 0.357 vs 0.378 s/token (medians of 6 alternating rounds, faster in all
 * 6 pairs); 64 was no better (0.370-0.386). Finer chunks even out the end of
 * a job when the hypervisor steals part of one core. */
enum { CHUNKS_PER_THREAD = 16 };
enum { SPIN_NS = 30000 };       /* 30 us */

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spin, for at most SPIN_NS, until the generation differs from `seen`
 * (which = 0) or until no worker is left in the job (which = 1). */
static void spin(const ms_pool *p, int which, uint64_t seen) {
    int64_t t0 = 0;
    for (int i = 0;; i++) {
        if (which == 0 ? __atomic_load_n(&p->generation, __ATOMIC_ACQUIRE) != seen
                       : __atomic_load_n(&p->left, __ATOMIC_ACQUIRE) == 0)
            return;
        cpu_relax();
        if ((i & 63) == 63) {
            const int64_t t = mono_ns();
            if (!t0) t0 = t;
            else if (t - t0 > SPIN_NS) return;
        }
    }
}

static void chunk_range(const ms_pool *p, int ic, int64_t *b, int64_t *e) {
    int64_t n_grains = (p->n + p->grain - 1) / p->grain;
    int64_t g0 = n_grains * ic / p->n_chunks, g1 = n_grains * (ic + 1) / p->n_chunks;
    *b = g0 * p->grain;
    *e = g1 * p->grain < p->n ? g1 * p->grain : p->n;
}

/* Take chunks until none is left. Called without the lock; p->fn, p->ctx and
 * the job's sizes are stable until every participant has finished. */
static void run_chunks(ms_pool *p) {
    for (;;) {
        int ic = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
        if (ic >= p->n_chunks) return;
        int64_t b, e;
        chunk_range(p, ic, &b, &e);
        if (e > b) p->fn(p->ctx, b, e);
    }
}

typedef struct { ms_pool *p; int index; } worker_arg;

static void *worker(void *arg) {
    worker_arg *wa = arg;
    ms_pool *p = wa->p;
    int ip = wa->index;
    free(wa);
    uint64_t seen = 0;
    for (;;) {
        spin(p, 0, seen);
        pthread_mutex_lock(&p->mu);
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        const int part = ip < p->n_parts;
        pthread_mutex_unlock(&p->mu);
        if (!part) continue;
        run_chunks(p);
        if (__atomic_sub_fetch(&p->left, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&p->mu);     /* the caller may be asleep */
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

ms_status ms_pool_open(int n_threads, ms_pool **out, ms_err *err) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    ms_pool *p = calloc(1, sizeof *p);
    if (!p) return ms_err_set(err, MS_E_NOMEM, "thread pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) { free(p); return ms_err_set(err, MS_E_NOMEM, "thread pool: out of memory"); }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { p->n_threads = i; ms_pool_close(p); return ms_err_set(err, MS_E_NOMEM, "thread pool: out of memory"); }
        wa->p = p; wa->index = i;
        const int rc = pthread_create(&p->threads[i], NULL, worker, wa);
        if (rc != 0) {
            char eb[128];
            free(wa);
            p->n_threads = i;
            ms_pool_close(p);
            /* GNU strerror_r (_GNU_SOURCE): thread-safe, returns the text */
            return ms_err_set(err, MS_E_INTERNAL, "thread pool: cannot create thread %d: %s", i,
                              strerror_r(rc, eb, sizeof eb));
        }
    }
    *out = p;
    return MS_OK;
}

void ms_pool_close(ms_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    free(p->threads);
    free(p);
}

int ms_pool_n_threads(const ms_pool *p) { return p ? p->n_threads : 1; }

void ms_pool_for(ms_pool *p, int64_t n, int64_t grain, ms_pool_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t n_grains = (n + grain - 1) / grain;
    int n_parts = (!p || p->n_threads == 1) ? 1 : (int)(n_grains < p->n_threads ? n_grains : p->n_threads);
    if (n_parts <= 1) { fn(ctx, 0, n); return; }
    int64_t n_chunks = (int64_t)n_parts * CHUNKS_PER_THREAD;
    pthread_mutex_lock(&p->mu);
    p->fn = fn; p->ctx = ctx; p->n = n; p->grain = grain;
    p->n_chunks = (int)(n_grains < n_chunks ? n_grains : n_chunks);
    p->n_parts = n_parts;
    __atomic_store_n(&p->left, n_parts - 1, __ATOMIC_RELAXED);
    __atomic_store_n(&p->next, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->generation, p->generation + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p);
    spin(p, 1, 0);
    if (__atomic_load_n(&p->left, __ATOMIC_ACQUIRE) == 0) return;
    pthread_mutex_lock(&p->mu);
    while (__atomic_load_n(&p->left, __ATOMIC_ACQUIRE) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
