/* bench/membw.c - the machine's memory read bandwidth, the ceiling of the matvec kernels.
 *
 * Owns: a measurement program, nothing the engine uses.
 * Idea: a matrix-vector product at batch 1 reads every weight byte once, so
 *   its ceiling is the rate at which cores can stream bytes from DRAM. One
 *   scalar stream underestimates that (a core needs several misses in flight:
 *   the matvec kernels, reading several rows at once, beat it), so this reads
 *   a 1 GiB buffer (far beyond any last-level cache) as S interleaved streams
 *   (S = 1, 2, 4, 8: like S matrix rows) of 16-byte vector loads (baseline
 *   x86-64, no ISA flags), split over T = 1 and 2 threads, best of 4 passes.
 *   Output: one JSON line per (streams, threads) and a last line with the
 *   best per thread count.
 * Does not: write memory in the timed loop, pin threads, or assert anything.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

typedef long long v2i __attribute__((vector_size(16)));

enum { MAX_STREAMS = 8, MAX_THREADS = 2 };

typedef struct job {
    const unsigned char *p;
    size_t n_bytes;
    int n_streams;
    v2i acc;
} job;

static void *read_job(void *arg) {
    job *j = arg;
    size_t per = j->n_bytes / (size_t)j->n_streams / 64 * 64;
    const v2i *q[MAX_STREAMS];
    v2i s[MAX_STREAMS];
    memset(s, 0, sizeof s);
    for (int k = 0; k < j->n_streams; k++) q[k] = (const v2i *)(const void *)(j->p + per * (size_t)k);
    for (size_t i = 0; i < per / sizeof(v2i); i += 4)
        for (int k = 0; k < j->n_streams; k++)
            s[k] ^= q[k][i] ^ q[k][i + 1] ^ q[k][i + 2] ^ q[k][i + 3];
    v2i t = { 0, 0 };
    for (int k = 0; k < j->n_streams; k++) t ^= s[k];
    j->acc = t;
    return NULL;
}

int main(void) {
    const size_t big = (size_t)1 << 30;
    unsigned char *buf = aligned_alloc(4096, big);
    if (!buf) { fprintf(stderr, "membw: out of memory\n"); return 1; }
    for (size_t i = 0; i < big; i += 8) memcpy(buf + i, &i, 8);  /* touch every page */
    double best_t[MAX_THREADS + 1] = { 0 };
    long long sink = 0;
    for (int ns = 1; ns <= MAX_STREAMS; ns *= 2)
        for (int nt = 1; nt <= MAX_THREADS; nt++) {
            double best = 1e30;
            for (int rep = 0; rep < 4; rep++) {
                job jobs[MAX_THREADS];
                pthread_t th[MAX_THREADS];
                for (int i = 0; i < nt; i++)
                    jobs[i] = (job){ .p = buf + big / (size_t)nt * (size_t)i, .n_bytes = big / (size_t)nt,
                                     .n_streams = ns };
                double t0 = now_s();
                for (int i = 1; i < nt; i++) pthread_create(&th[i], NULL, read_job, &jobs[i]);
                read_job(&jobs[0]);
                for (int i = 1; i < nt; i++) pthread_join(th[i], NULL);
                double t = now_s() - t0;
                if (t < best) best = t;
                for (int i = 0; i < nt; i++) sink ^= jobs[i].acc[0] ^ jobs[i].acc[1];
            }
            double gbps = (double)big / best / 1e9;
            if (gbps > best_t[nt]) best_t[nt] = gbps;
            json_t *o = json_pack("{s:i, s:i, s:f}", "streams", ns, "threads", nt, "gbps", gbps);
            char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
            if (s) printf("%s\n", s);
            free(s);
            json_decref(o);
        }
    json_t *o = json_pack("{s:f, s:f, s:i}", "best_1_thread_gbps", best_t[1], "best_2_threads_gbps",
                          best_t[2], "sink", (int)(sink & 1));
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (s) printf("%s\n", s);
    free(s);
    json_decref(o);
    free(buf);
    return 0;
}
