/* sample/sample.c - see sample.h. */
#include "sample/sample.h"

#include "kernels/kernels.h"
#include "sample/mask.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    float logit;
    int32_t id;
    double p;
} cand;

struct ms_sampler {
    ms_sample_params p;
    int64_t n_vocab;
    uint64_t rng;
    cand *c;                    /* [n_vocab] */
    float *work;                /* [n_vocab] penalised logits */
    uint64_t *key, *key2;       /* [n_vocab] each: the candidates' sort keys (order_candidates) */
    int32_t *bias_ids;          /* [p.n_bias], copies */
    float *bias;
    ms_grammar *grammar;        /* not owned; NULL: no structured output */
    const ms_kern *kern;        /* expf_n: the bits of ms_expf in every table */
};

ms_sample_params ms_sample_default_params(void) {
    ms_sample_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.0f;
    p.top_p = 1.0f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    return p;
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

ms_sampler *ms_sampler_open(const ms_sample_params *p, int64_t n_vocab, char *errbuf, size_t errbuf_len) {
    const char *bad = NULL;
    if (n_vocab < 1) bad = "vocabulary is empty";
    else if (!(p->temperature >= 0.0f) || p->temperature > 100.0f) bad = "temperature must be in [0, 100]";
    else if (p->top_k < 0) bad = "top_k must be >= 0";
    else if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) bad = "top_p must be in (0, 1]";
    else if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) bad = "min_p must be in [0, 1]";
    else if (!(p->repeat_penalty > 0.0f) || p->repeat_penalty > 100.0f) bad = "repeat_penalty must be in (0, 100]";
    else if (p->repeat_last_n < 0) bad = "repeat_last_n must be >= 0";
    else if (!(fabsf(p->frequency_penalty) <= 2.0f) || !(fabsf(p->presence_penalty) <= 2.0f))
        bad = "frequency_penalty and presence_penalty must be in [-2, 2]";
    else if (p->n_bias < 0 || (p->n_bias > 0 && (!p->bias_ids || !p->bias))) bad = "logit bias: no arrays";
    for (int32_t i = 0; !bad && i < p->n_bias; i++)
        if (p->bias_ids[i] < 0 || p->bias_ids[i] >= n_vocab || !(fabsf(p->bias[i]) <= 100.0f))
            bad = "logit bias: ids must be token ids, biases in [-100, 100]";
    if (bad) {
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "sampling: %s", bad);
        return NULL;
    }
    ms_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->rng = p->seed;
    s->kern = ms_kernels_select(NULL);
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->key = malloc((size_t)n_vocab * sizeof *s->key);
    s->key2 = malloc((size_t)n_vocab * sizeof *s->key2);
    s->bias_ids = malloc((size_t)(p->n_bias + 1) * sizeof *s->bias_ids);
    s->bias = malloc((size_t)(p->n_bias + 1) * sizeof *s->bias);
    if (s->bias_ids && s->bias && p->n_bias > 0) {
        memcpy(s->bias_ids, p->bias_ids, (size_t)p->n_bias * sizeof *s->bias_ids);
        memcpy(s->bias, p->bias, (size_t)p->n_bias * sizeof *s->bias);
    }
    s->p.bias_ids = s->bias_ids;
    s->p.bias = s->bias;
    if (!s->c || !s->work || !s->key || !s->key2 || !s->bias_ids || !s->bias) {
        ms_sampler_close(s);
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "sampling: out of memory");
        return NULL;
    }
    return s;
}

void ms_sampler_close(ms_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->work);
    free(s->key);
    free(s->key2);
    free(s->bias_ids);
    free(s->bias);
    free(s);
}

/* A logit's rank as an unsigned integer: larger logits get SMALLER keys, and
 * -0 the key of +0 (they compare equal). Not for NaN (never a candidate). */
static uint32_t desc_key(float x) {
    if (x == 0.0f) x = 0.0f;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = u & 0x80000000u ? ~u : u | 0x80000000u;     /* ascending with the float */
    return ~u;
}

enum { RADIX_BITS = 11, RADIX_PASSES = 3, RADIX_MASK = (1 << RADIX_BITS) - 1 };  /* 3 x 11 bits: the 32-bit key */

/* s->c[0..n) := the candidates w[id] for the n ids in s->key (each key's low
 * 32 bits, in increasing order), ordered by logit descending and, among equal
 * logits, id ascending. A stable least-significant-digit radix sort of the
 * ids on desc_key: equal logits keep the ids' increasing order. The order a
 * comparison sort by (logit desc, id asc) gives (qsort did that: ~25 ms a
 * token for gpt-oss's 201,088 ids on machine B; this, ~1.5 ms). */
static void order_candidates(ms_sampler *s, const float *w, int64_t n) {
    uint64_t *k = s->key, *t = s->key2;
    int64_t count[RADIX_PASSES][RADIX_MASK + 1];
    memset(count, 0, sizeof count);
    for (int64_t i = 0; i < n; i++) {
        const uint64_t d = desc_key(w[(uint32_t)k[i]]);
        k[i] |= d << 32;
        for (int ps = 0; ps < RADIX_PASSES; ps++) count[ps][(d >> (ps * RADIX_BITS)) & RADIX_MASK]++;
    }
    for (int ps = 0; ps < RADIX_PASSES; ps++) {
        const int shift = 32 + ps * RADIX_BITS;
        if (count[ps][(k[0] >> shift) & RADIX_MASK] == n) continue;   /* one digit for all: no move */
        int64_t at = 0;
        for (int d = 0; d <= RADIX_MASK; d++) {
            const int64_t c = count[ps][d];
            count[ps][d] = at;
            at += c;
        }
        for (int64_t i = 0; i < n; i++) t[count[ps][(k[i] >> shift) & RADIX_MASK]++] = k[i];
        uint64_t *x = k;
        k = t;
        t = x;
    }
    for (int64_t i = 0; i < n; i++) {
        const int32_t id = (int32_t)(uint32_t)k[i];
        s->c[i].logit = w[id];
        s->c[i].id = id;
    }
}

void ms_sampler_set_grammar(ms_sampler *s, ms_grammar *g) {
    s->grammar = g && ms_grammar_n_vocab(g) == s->n_vocab ? g : NULL;
}

static int32_t pick(ms_sampler *s, const float *logits, const int32_t *hist, int64_t n_hist);

/* With a grammar: the mask goes on after the penalties and the bias, before
 * greedy / sampling, and the pick advances the grammar. */
int32_t ms_sampler_next(ms_sampler *s, const float *logits, const int32_t *hist, int64_t n_hist) {
    int32_t id = pick(s, logits, hist, n_hist);
    if (s->grammar) ms_grammar_accept(s->grammar, id);
    return id;
}

static int32_t pick(ms_sampler *s, const float *logits, const int32_t *hist, int64_t n_hist) {
    const int64_t V = s->n_vocab;
    const ms_sample_params *p = &s->p;
    float *w = s->work;
    memcpy(w, logits, (size_t)V * sizeof *w);
    /* repetition penalty on each distinct recent id, once */
    if (p->repeat_penalty != 1.0f && p->repeat_last_n > 0) {
        int64_t from = n_hist > p->repeat_last_n ? n_hist - p->repeat_last_n : 0;
        for (int64_t i = from; i < n_hist; i++) {
            int32_t id = hist[i];
            if (id < 0 || id >= V) continue;
            int seen = 0;
            for (int64_t j = from; j < i && !seen; j++) seen = hist[j] == id;
            if (seen) continue;
            w[id] = w[id] > 0.0f ? w[id] / p->repeat_penalty : w[id] * p->repeat_penalty;
        }
    }
    /* frequency / presence penalties on each distinct id of the window, once:
       w -= count * frequency_penalty + presence_penalty (float, in that order) */
    if ((p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f) && p->repeat_last_n > 0) {
        int64_t from = n_hist > p->repeat_last_n ? n_hist - p->repeat_last_n : 0;
        for (int64_t i = from; i < n_hist; i++) {
            int32_t id = hist[i];
            if (id < 0 || id >= V) continue;
            int seen = 0, count = 0;
            for (int64_t j = from; j < i && !seen; j++) seen = hist[j] == id;
            if (seen) continue;
            for (int64_t j = i; j < n_hist; j++) count += hist[j] == id;
            w[id] = w[id] - ((float)count * p->frequency_penalty + p->presence_penalty);
        }
    }
    for (int32_t i = 0; i < p->n_bias; i++) w[p->bias_ids[i]] = w[p->bias_ids[i]] + p->bias[i];
    if (s->grammar) ms_grammar_mask(s->grammar, w);
    if (p->temperature <= 0.0f) return ms_argmax(w, V);

    int64_t n = 0;
    for (int64_t i = 0; i < V; i++) {
        if (isnan(w[i])) continue;
        /* masked (a grammar's, or a caller's -inf): never a candidate, so the
           draw cannot land on it through the last-candidate fallback */
        if (w[i] == -INFINITY) continue;
        s->key[n++] = (uint64_t)i;
    }
    if (n == 0) return 0;
    order_candidates(s, w, n);
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    /* softmax(logit / T), relative to the largest */
    const float top = s->c[0].logit;
    float *e = s->work;         /* the logits are in s->c now */
    for (int64_t i = 0; i < n; i++) e[i] = (s->c[i].logit - top) / p->temperature;
    s->kern->expf_n(e, e, n);   /* ms_expf's bits, a vector at a time */
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        s->c[i].p = (double)e[i];
        sum += s->c[i].p;
    }
    for (int64_t i = 0; i < n; i++) s->c[i].p /= sum;
    if (p->top_p < 1.0f) {
        double acc = 0.0;
        int64_t keep = n;
        for (int64_t i = 0; i < n; i++) {
            acc += s->c[i].p;
            if (acc >= (double)p->top_p) { keep = i + 1; break; }
        }
        n = keep;
    }
    if (p->min_p > 0.0f) {
        const double floor_p = (double)p->min_p * s->c[0].p;
        int64_t keep = 1;
        while (keep < n && s->c[keep].p >= floor_p) keep++;
        n = keep;
    }
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) total += s->c[i].p;
    const double u = (double)(splitmix64(&s->rng) >> 11) * (1.0 / 9007199254740992.0) * total;
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) {
        acc += s->c[i].p;
        if (u < acc) return s->c[i].id;
    }
    return s->c[n - 1].id;
}
