/* tests/test_sample.c - the samplers: greedy, top-k, top-p, min-p, repetition,
 * frequency and presence penalties, logit bias, seeds, that sampling
 * follows the softmax distribution, and that every draw is the one the
 * sampler's definition gives (a comparison sort and ms_expf, below). */
#include "moestream.h"

#include "check.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static ms_sampler *mk(float temp, int top_k, float top_p, float min_p, float rep, uint64_t seed, int64_t V) {
    ms_sample_params p = ms_sample_default_params();
    p.temperature = temp; p.top_k = top_k; p.top_p = top_p; p.min_p = min_p;
    p.repeat_penalty = rep; p.seed = seed;
    char msg[256];
    ms_sampler *s = ms_sampler_open(&p, V, msg, sizeof msg);
    CHECK(s != NULL, "open: %s", msg);
    return s;
}

/* ---- the definition (sample/sample.h), written out plainly ----
 * Candidates: every id whose logit is neither NaN nor -inf, ordered by qsort
 * on (logit desc, id asc); top-k; p_i = ms_expf((l_i - l_0) / T) in double,
 * summed in that order, divided by the sum; top-p; min-p; one splitmix64
 * draw over what is left. The sampler must give the same id on every draw. */
typedef struct rcand { float logit; int32_t id; double p; } rcand;

static int rcmp(const void *a, const void *b) {
    const rcand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static uint64_t rsplitmix(uint64_t *st) {
    uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int32_t ref_pick(const float *lg, int64_t V, float T, int top_k, float top_p, float min_p, uint64_t *rng,
                        rcand *c) {
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++)
        if (!isnan(lg[i]) && lg[i] != -INFINITY) { c[n].logit = lg[i]; c[n].id = (int32_t)i; n++; }
    if (n == 0) return 0;
    qsort(c, (size_t)n, sizeof *c, rcmp);
    if (top_k > 0 && top_k < n) n = top_k;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) { c[i].p = (double)ms_expf((c[i].logit - c[0].logit) / T); sum += c[i].p; }
    for (int64_t i = 0; i < n; i++) c[i].p /= sum;
    if (top_p < 1.0f) {
        double acc = 0.0;
        for (int64_t i = 0; i < n; i++) { acc += c[i].p; if (acc >= (double)top_p) { n = i + 1; break; } }
    }
    if (min_p > 0.0f) {
        int64_t keep = 1;
        while (keep < n && c[keep].p >= (double)min_p * c[0].p) keep++;
        n = keep;
    }
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) total += c[i].p;
    const double u = (double)(rsplitmix(rng) >> 11) * (1.0 / 9007199254740992.0) * total;
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) { acc += c[i].p; if (u < acc) return c[i].id; }
    return c[n - 1].id;
}

/* Logits with many exact ties (a few distinct values), -0 beside +0, NaN and
 * -inf holes, and a wide spread; then the sampler against ref_pick for many
 * draws under several settings, at a small vocabulary and at gpt-oss's. */
static void test_against_definition(void) {
    static const int64_t vocabs[2] = { 3001, 201088 };
    static const struct { float T; int top_k; float top_p, min_p; } set[] = {
        { 1.0f, 0, 1.0f, 0.0f }, { 0.7f, 0, 0.9f, 0.0f }, { 1.3f, 40, 1.0f, 0.0f },
        { 0.8f, 0, 1.0f, 0.05f }, { 2.0f, 1000, 0.95f, 0.01f },
    };
    for (int iv = 0; iv < 2; iv++) {
        const int64_t V = vocabs[iv];
        float *lg = malloc((size_t)V * sizeof *lg);
        rcand *c = malloc((size_t)V * sizeof *c);
        CHECK(lg && c, "alloc");
        if (!lg || !c) return;
        uint64_t g = 99;
        for (int64_t i = 0; i < V; i++) {
            const uint64_t r = rsplitmix(&g);
            switch (r % 16) {
            case 0: lg[i] = 0.0f; break;
            case 1: lg[i] = -0.0f; break;
            case 2: lg[i] = i % 97 == 0 ? NAN : -INFINITY; break;
            case 3: lg[i] = 4.0f; break;                        /* a tie at the top */
            default: lg[i] = (float)((int)(r >> 40) % 61 - 40) * 0.25f;   /* 61 values: ties */
            }
        }
        for (size_t k = 0; k < sizeof set / sizeof set[0]; k++) {
            ms_sample_params p = ms_sample_default_params();
            p.temperature = set[k].T; p.top_k = set[k].top_k; p.top_p = set[k].top_p; p.min_p = set[k].min_p;
            p.seed = 1234 + k;
            char msg[128];
            ms_sampler *s = ms_sampler_open(&p, V, msg, sizeof msg);
            CHECK(s != NULL, "open: %s", msg);
            if (!s) continue;
            uint64_t rng = p.seed;
            const int draws = V > 10000 ? 12 : 600;
            int differ = 0, first = -1;
            for (int d = 0; d < draws; d++) {
                const int32_t a = ms_sampler_next(s, lg, NULL, 0);
                const int32_t b = ref_pick(lg, V, p.temperature, p.top_k, p.top_p, p.min_p, &rng, c);
                if (a != b && first < 0) first = d;
                differ += a != b;
            }
            CHECK(differ == 0, "V %lld, T %.1f top_k %d top_p %.2f min_p %.2f: %d of %d draws differ from the"
                  " definition (first at draw %d)", (long long)V, set[k].T, set[k].top_k, set[k].top_p,
                  set[k].min_p, differ, draws, first);
            ms_sampler_close(s);
        }
        free(lg);
        free(c);
    }
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
    /* frequency / presence penalties: token 0 seen twice, token 1 once */
    {
        const float lf[3] = { 2.0f, 1.7f, 1.0f };
        const int32_t hf[3] = { 0, 1, 0 };
        ms_sample_params q = ms_sample_default_params();
        q.frequency_penalty = 0.2f;     /* 0: 2.0 - 2 x 0.2 = 1.6, 1: 1.7 - 0.2 = 1.5 */
        char m2[128];
        ms_sampler *f = ms_sampler_open(&q, 3, m2, sizeof m2);
        CHECK(f && ms_sampler_next(f, lf, hf, 3) == 0, "frequency 0.2: token 0 (1.6) still beats token 1 (1.5)");
        ms_sampler_close(f);
        q.frequency_penalty = 0.4f;     /* 0: 1.2, 1: 1.3, 2: 1.0 */
        f = ms_sampler_open(&q, 3, m2, sizeof m2);
        CHECK(f && ms_sampler_next(f, lf, hf, 3) == 1, "frequency 0.4: token 0 counted twice (1.2) loses to 1 (1.3)");
        ms_sampler_close(f);
        q.frequency_penalty = 0.0f;
        q.presence_penalty = 0.8f;      /* once each: 0: 1.2, 1: 0.9, 2: 1.0 */
        f = ms_sampler_open(&q, 3, m2, sizeof m2);
        CHECK(f && ms_sampler_next(f, lf, hf, 3) == 0, "presence 0.8: once per id, token 0 (1.2) wins");
        CHECK(f && ms_sampler_next(f, lf, hf + 1, 2) == 0, "presence: history {1, 0}: 0 (1.2) beats 2 (1.0)");
        ms_sampler_close(f);
        q.presence_penalty = 1.5f;      /* 0: 0.5, 1: 0.2, 2: 1.0 */
        f = ms_sampler_open(&q, 3, m2, sizeof m2);
        CHECK(f && ms_sampler_next(f, lf, hf, 3) == 2, "presence 1.5: the unseen token 2 wins");
        ms_sampler_close(f);
        q.repeat_last_n = 1;            /* window: the last token (0) only: 0: 0.5, 1: 1.7 */
        f = ms_sampler_open(&q, 3, m2, sizeof m2);
        CHECK(f && ms_sampler_next(f, lf, hf, 3) == 1, "presence with a 1-token window: only token 0 penalised");
        ms_sampler_close(f);
        /* logit bias: forces and bans, greedy and sampled */
        const int32_t bid[2] = { 2, 0 };
        const float bv[2] = { 100.0f, -100.0f };
        q = ms_sample_default_params();
        q.bias_ids = bid; q.bias = bv; q.n_bias = 1;
        f = ms_sampler_open(&q, 3, m2, sizeof m2);
        CHECK(f && ms_sampler_next(f, lf, NULL, 0) == 2, "logit bias +100 makes token 2 the greedy pick");
        ms_sampler_close(f);
        q.bias_ids = bid + 1; q.bias = bv + 1; q.temperature = 1.0f; q.seed = 3;
        f = ms_sampler_open(&q, 3, m2, sizeof m2);
        int banned = 0;
        for (int i = 0; f && i < 200; i++) banned += ms_sampler_next(f, lf, NULL, 0) == 0;
        CHECK(f && banned == 0, "logit bias -100 bans token 0 when sampling (%d of 200)", banned);
        ms_sampler_close(f);
        q.n_bias = 1; q.bias = bv;
        const int32_t bad_id[1] = { 3 };
        q.bias_ids = bad_id;
        CHECK(ms_sampler_open(&q, 3, m2, sizeof m2) == NULL, "logit bias on an id out of range refused");
        q = ms_sample_default_params(); q.presence_penalty = 2.5f;
        CHECK(ms_sampler_open(&q, 3, m2, sizeof m2) == NULL, "presence penalty 2.5 refused");
    }
    /* bad parameters are refused */
    ms_sample_params bad = ms_sample_default_params();
    bad.top_p = 0.0f;
    char msg[128];
    CHECK(ms_sampler_open(&bad, 10, msg, sizeof msg) == NULL, "top_p 0 refused");
    bad = ms_sample_default_params(); bad.temperature = -1.0f;
    CHECK(ms_sampler_open(&bad, 10, msg, sizeof msg) == NULL, "negative temperature refused");
    test_against_definition();
    return CHECK_DONE("test_sample");
}
