/* bench/samplebench.c - the time of one sampled token's pick.
 *
 * Owns: a measurement, nothing the engine uses. ms_sampler_next on logits
 *   shaped like a model's (normal, sd 3; a few exact ties) at a vocabulary of
 *   V ids (default 201,088: gpt-oss; K3's is 163,840), greedy and under the
 *   settings a server sees (temperature 1 = the API's default, top-p, top-k),
 *   in thread CPU time: the pick runs on the decoding thread between the head
 *   and the next pass, so its time adds to every token's.
 * Usage: build/bench/samplebench [V] (or `make bench-sample`).
 * Does not: assert anything; numbers go to docs/PERFORMANCE.md by hand.
 */
#include "moestream.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "bench_util.h"

int main(int argc, char **argv) {
    const int64_t V = argc > 1 ? strtoll(argv[1], NULL, 10) : 201088;
    if (V < 1) { fprintf(stderr, "usage: samplebench [VOCAB]\n"); return 2; }
    float *lg = malloc((size_t)V * sizeof *lg);
    if (!lg) return 1;
    uint64_t r = 1;
    for (int64_t i = 0; i < V; i++) {   /* Box-Muller on a 64-bit LCG: no libc rand state */
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        const double u1 = ((double)(r >> 11) + 1.0) / 9007199254740994.0;
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        const double u2 = (double)(r >> 11) / 9007199254740992.0;
        lg[i] = (float)(3.0 * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
        if (i % 50 == 0) lg[i] = 1.0f;  /* ties */
    }
    static const struct { const char *name; float T, top_p; int top_k; } set[] = {
        { "greedy", 0.0f, 1.0f, 0 }, { "temperature 1", 1.0f, 1.0f, 0 },
        { "temperature 0.7, top-p 0.9", 0.7f, 0.9f, 0 }, { "temperature 0.7, top-k 40", 0.7f, 1.0f, 40 },
    };
    for (size_t k = 0; k < sizeof set / sizeof set[0]; k++) {
        ms_sample_params p = ms_sample_default_params();
        p.temperature = set[k].T; p.top_p = set[k].top_p; p.top_k = set[k].top_k; p.seed = 7;
        char msg[128];
        ms_sampler *s = ms_sampler_open(&p, V, msg, sizeof msg);
        if (!s) { fprintf(stderr, "%s\n", msg); return 1; }
        const int reps = 40;
        int64_t sum = 0;
        const double t0 = thread_cpu_s();
        for (int i = 0; i < reps; i++) sum += ms_sampler_next(s, lg, NULL, 0);
        const double t = (thread_cpu_s() - t0) / reps;
        printf("sample %-28s vocab %lld: %7.3f ms per token (ids sum %lld)\n", set[k].name, (long long)V, t * 1e3,
               (long long)sum);
        ms_sampler_close(s);
    }
    free(lg);
    return 0;
}
