/* tests/test_pool.c - base/pool: every index of a job is run exactly once, in
 * whole grains, with the job's writes visible to the caller when
 * ms_pool_for returns; workers take part whether they were spinning (jobs
 * back to back) or asleep (after an idle gap longer than the spin); a pool
 * closes promptly right after a job; a worker that cannot be started is
 * reported with its cause. Runs under ThreadSanitizer too
 * (tests/tsan.list). */
#include "base/pool.h"
#include "check.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleep_us(long us) {
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- coverage: each index once, ranges non-empty and grain-aligned ----- */

enum { N_MAX = 5000 };

typedef struct {
    int64_t n, grain;
    int hits[N_MAX];            /* atomic increments */
    int64_t val[N_MAX];         /* plain writes, read by the caller after the job */
    int bad_range;              /* atomic */
    int64_t tag;
} cover_job;

static void cover_fn(void *ctx, int64_t b, int64_t e) {
    cover_job *j = ctx;
    if (e <= b || b < 0 || e > j->n || b % j->grain != 0 || (e % j->grain != 0 && e != j->n))
        __atomic_fetch_add(&j->bad_range, 1, __ATOMIC_RELAXED);
    for (int64_t i = b; i < e && i < N_MAX && i >= 0; i++) {
        __atomic_fetch_add(&j->hits[i], 1, __ATOMIC_RELAXED);
        j->val[i] = j->tag * 100003 + i;
    }
}

static void test_cover(int nt) {
    ms_pool *p = NULL;
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_pool_open(nt, &p, &err) == MS_OK, "open %d threads: %s", nt, err.msg);
    if (!p) return;
    CHECK(ms_pool_n_threads(p) == nt, "n_threads %d", ms_pool_n_threads(p));
    static cover_job j;
    uint64_t rs = 12345u + (uint64_t)nt;
    int bad_jobs = 0;
    for (int it = 0; it < 3000; it++) {
        rs = rs * 6364136223846793005u + 1442695040888963407u;
        j.n = 1 + (int64_t)((rs >> 33) % N_MAX);
        const int64_t grains[] = { 1, 3, 16, 64 };
        j.grain = grains[(rs >> 20) & 3];
        j.tag = it;
        j.bad_range = 0;
        memset(j.hits, 0, sizeof j.hits);
        ms_pool_for(p, j.n, j.grain, cover_fn, &j);
        int ok = j.bad_range == 0;
        for (int64_t i = 0; i < j.n; i++) ok &= j.hits[i] == 1 && j.val[i] == j.tag * 100003 + i;
        for (int64_t i = j.n; i < N_MAX; i++) ok &= j.hits[i] == 0;
        if (!ok && bad_jobs++ < 3)
            CHECK(0, "%d threads, job %d (n %lld, grain %lld): an index run twice, never, or out of range",
                  nt, it, (long long)j.n, (long long)j.grain);
        if (it % 500 == 499) sleep_us(2000);    /* idle longer than the spin: workers sleep */
    }
    CHECK(bad_jobs == 0, "%d threads: %d bad jobs of 3000", nt, bad_jobs);
    ms_pool_close(p);
}

/* ---- participation: two threads inside fn at once ---------------------- */

typedef struct {
    int inside;                 /* atomic: threads inside fn now */
    int met;                    /* atomic: a thread saw another one inside */
} meet_job;

/* Each chunk waits (up to 2 s) for a second thread to be inside fn at the
 * same time (a chunk leaves before the same thread can take the next), so
 * `met` is set only if a worker takes the second chunk while the caller
 * holds the first. */
static void meet_fn(void *ctx, int64_t b, int64_t e) {
    meet_job *j = ctx;
    __atomic_fetch_add(&j->inside, 1, __ATOMIC_ACQ_REL);
    const double t0 = now_s();
    while (now_s() - t0 < 2.0) {
        if (__atomic_load_n(&j->met, __ATOMIC_ACQUIRE)) break;   /* the other one saw us */
        if (__atomic_load_n(&j->inside, __ATOMIC_ACQUIRE) >= 2) {
            __atomic_store_n(&j->met, 1, __ATOMIC_RELEASE);
            break;
        }
        sleep_us(50);
    }
    __atomic_fetch_sub(&j->inside, 1, __ATOMIC_ACQ_REL);
}

static void test_meet(void) {
    ms_pool *p = NULL;
    ms_err err;
    ms_err_clear(&err);
    CHECK(ms_pool_open(2, &p, &err) == MS_OK, "open: %s", err.msg);
    if (!p) return;
    /* back to back (the worker may still be spinning), then after idle gaps
     * of 1 ms and 50 ms (it has gone to sleep) */
    const long gaps_us[] = { 0, 0, 0, 1000, 50000, 0, 50000 };
    for (size_t g = 0; g < sizeof gaps_us / sizeof gaps_us[0]; g++) {
        sleep_us(gaps_us[g]);
        meet_job j = { 0, 0 };
        const double t0 = now_s();
        ms_pool_for(p, 2, 1, meet_fn, &j);
        const double dt = now_s() - t0;
        CHECK(j.met == 1 && dt < 1.5, "gap %ld us: the worker took part (met %d, %.3f s)", gaps_us[g],
              j.met, dt);
    }
    ms_pool_close(p);
}

/* ---- close right after a job (workers spinning), and an unused pool ----- */

static void noop_fn(void *ctx, int64_t b, int64_t e) {
    int *n = ctx;
    __atomic_fetch_add(n, (int)(e - b), __ATOMIC_RELAXED);
}

static void test_close(void) {
    for (int r = 0; r < 20; r++) {
        ms_pool *p = NULL;
        ms_err err;
        ms_err_clear(&err);
        if (ms_pool_open(3, &p, &err) != MS_OK) { CHECK(0, "open: %s", err.msg); return; }
        int n = 0;
        if (r % 2 == 0) ms_pool_for(p, 100, 1, noop_fn, &n);
        const double t0 = now_s();
        ms_pool_close(p);
        CHECK((r % 2 == 1 || n == 100) && now_s() - t0 < 1.0, "close after a job: n %d, %.3f s", n,
              now_s() - t0);
    }
    /* a NULL pool runs the loop on the caller */
    int n = 0;
    ms_pool_for(NULL, 7, 2, noop_fn, &n);
    CHECK(n == 7, "NULL pool: %d", n);
}

/* ---- a thread that cannot be created: the error names the cause -------- */

/* In a child whose address space is capped just above what it holds, the
 * first worker's stack cannot be mapped: the open fails with the errno's
 * text. It runs before any other thread has been made, as glibc keeps the
 * stacks of joined threads for reuse. Under a sanitizer the runtime's own reservations meet the cap
 * first, so the check runs in the plain builds only. */
static void test_no_thread(void) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    printf("test_pool: address-space cap not tried under a sanitizer\n");
#else
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) { CHECK(0, "fork: %s", strerror(errno)); return; }
    if (pid == 0) {
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1) _exit(3);
        fclose(f);
        const rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (1u << 20);
        const struct rlimit rl = { cap, cap };
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
        ms_pool *p = NULL;
        ms_err err;
        ms_err_clear(&err);
        const ms_status st = ms_pool_open(4, &p, &err);
        char want[256];
        snprintf(want, sizeof want, "thread pool: cannot create thread 1: %s", strerror(EAGAIN));
        if (st == MS_E_INTERNAL && p == NULL && strcmp(err.msg, want) == 0) _exit(0);
        fprintf(stderr, "test_pool: capped open: status %d, \"%s\"\n", (int)st, err.msg);
        _exit(1);
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "capped open: child status %d", ws);
#endif
}

int main(void) {
    test_no_thread();               /* first: glibc reuses the stacks of joined threads */
    for (int nt = 1; nt <= 4; nt++) test_cover(nt);
    test_meet();
    test_close();
    return CHECK_DONE("test_pool");
}
