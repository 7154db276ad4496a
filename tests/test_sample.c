/* tests/test_sample.c - the samplers: greedy, top-k, top-p, min-p, repetition
 * penalty, seeds, and that sampling follows the softmax distribution. */
#include "moestream.h"

#include "check.h"

#include <math.h>
#include <stdlib.h>

static ms_sampler *mk(float temp, int top_k, float top_p, float min_p, float rep, uint64_t seed, int64_t V) {
    ms_sample_params p = ms_sample_default_params();
    p.temperature = temp; p.top_k = top_k; p.top_p = top_p; p.min_p = min_p;
    p.repeat_penalty = rep; p.seed = seed;
    char msg[256];
    ms_sampler *s = ms_sampler_open(&p, V, msg, sizeof msg);
    CHECK(s != NULL, "open: %s", msg);
    return s;
}

int main(void) {
    const float lg[6] = { 1.0f, 3.0f, 3.0f, 0.5f, -1.0f, 2.0f };
    /* greedy: ties to the lower id */
    ms_sampler *g = mk(0, 0, 1, 0, 1, 1, 6);
    CHECK(ms_sampler_next(g, lg, NULL, 0) == 1, "greedy tie goes to the lower id");
    ms_sampler_close(g);
    /* top_k = 1 with temperature is greedy too */
    ms_sampler *k1 = mk(1.0f, 1, 1, 0, 1, 7, 6);
    int ok = 1;
    for (int i = 0; i < 50; i++) ok &= ms_sampler_next(k1, lg, NULL, 0) == 1;
    CHECK(ok, "top_k=1 always picks the best");
    ms_sampler_close(k1);
    /* same seed -> same sequence; different seed -> (almost surely) different */
    ms_sampler *a = mk(1.0f, 0, 1, 0, 1, 42, 6), *b = mk(1.0f, 0, 1, 0, 1, 42, 6), *c = mk(1.0f, 0, 1, 0, 1, 43, 6);
    int same = 1, diff = 0;
    for (int i = 0; i < 200; i++) {
        int32_t x = ms_sampler_next(a, lg, NULL, 0), y = ms_sampler_next(b, lg, NULL, 0), z = ms_sampler_next(c, lg, NULL, 0);
        same &= x == y;
        diff |= x != z;
    }
    CHECK(same, "same seed, same tokens");
    CHECK(diff, "different seeds give different streams");
    ms_sampler_close(a); ms_sampler_close(b); ms_sampler_close(c);
    /* frequencies follow softmax(logits / T) */
    const double T = 0.7;
    double pr[6], z = 0;
    for (int i = 0; i < 6; i++) { pr[i] = exp(lg[i] / T); z += pr[i]; }
    int cnt[6] = {0};
    ms_sampler *d = mk((float)T, 0, 1, 0, 1, 5, 6);
    const int N = 200000;
    for (int i = 0; i < N; i++) cnt[ms_sampler_next(d, lg, NULL, 0)]++;
    ms_sampler_close(d);
    double worst = 0;
    for (int i = 0; i < 6; i++) {
        double e = pr[i] / z, f = (double)cnt[i] / N, sd = sqrt(e * (1 - e) / N);
        double zs = fabs(f - e) / (sd > 0 ? sd : 1);
        if (zs > worst) worst = zs;
    }
    CHECK(worst < 5.0, "sampled frequencies off by %.1f standard deviations", worst);
    /* top_p: two equal tokens hold ~all the mass; 0.4 is reached by the first (lower id) */
    const float lp[4] = { 10.0f, 10.0f, 0.0f, 0.0f };
    ms_sampler *tp = mk(1.0f, 0, 0.4f, 0, 1, 9, 4);
    int only01 = 1, seen0 = 0;
    for (int i = 0; i < 500; i++) { int32_t x = ms_sampler_next(tp, lp, NULL, 0); only01 &= x == 0; seen0 |= x == 0; }
    CHECK(only01 && seen0, "top_p 0.4 over two equal tokens keeps only the first (lower id)");
    ms_sampler_close(tp);
    /* min_p: tokens far below the best are dropped */
    const float lm[3] = { 5.0f, 4.9f, -5.0f };
    ms_sampler *mp = mk(1.0f, 0, 1, 0.5f, 1, 3, 3);
    int no2 = 1, saw1 = 0;
    for (int i = 0; i < 2000; i++) { int32_t x = ms_sampler_next(mp, lm, NULL, 0); no2 &= x != 2; saw1 |= x == 1; }
    CHECK(no2 && saw1, "min_p drops the unlikely token and keeps the close one");
    ms_sampler_close(mp);
    /* repetition penalty can flip a greedy choice */
    const float lr[3] = { 2.0f, 1.9f, 0.0f };
    ms_sampler *rp = mk(0, 0, 1, 0, 1.5f, 1, 3);
    int32_t h[2] = { 0, 0 };
    CHECK(ms_sampler_next(rp, lr, h, 2) == 1, "penalised token 0 loses to token 1");
    CHECK(ms_sampler_next(rp, lr, NULL, 0) == 0, "without history token 0 wins");
    ms_sampler_close(rp);
    /* bad parameters are refused */
    ms_sample_params bad = ms_sample_default_params();
    bad.top_p = 0.0f;
    char msg[128];
    CHECK(ms_sampler_open(&bad, 10, msg, sizeof msg) == NULL, "top_p 0 refused");
    bad = ms_sample_default_params(); bad.temperature = -1.0f;
    CHECK(ms_sampler_open(&bad, 10, msg, sizeof msg) == NULL, "negative temperature refused");
    return CHECK_DONE("test_sample");
}
