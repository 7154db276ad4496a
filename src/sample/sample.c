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
    int32_t *bias_ids;          /* [p.n_bias], copies */
    float *bias;
    ms_grammar *grammar;        /* not owned; NULL: no structured output */
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
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->bias_ids = malloc((size_t)(p->n_bias + 1) * sizeof *s->bias_ids);
    s->bias = malloc((size_t)(p->n_bias + 1) * sizeof *s->bias);
    if (s->bias_ids && s->bias && p->n_bias > 0) {
        memcpy(s->bias_ids, p->bias_ids, (size_t)p->n_bias * sizeof *s->bias_ids);
        memcpy(s->bias, p->bias, (size_t)p->n_bias * sizeof *s->bias);
    }
    s->p.bias_ids = s->bias_ids;
    s->p.bias = s->bias;
    if (!s->c || !s->work || !s->bias_ids || !s->bias) {
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
    free(s->bias_ids);
    free(s->bias);
    free(s);
}

static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
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
        s->c[n].logit = w[i];
        s->c[n].id = (int32_t)i;
        n++;
    }
    if (n == 0) return 0;
    qsort(s->c, (size_t)n, sizeof *s->c, cmp_cand);
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;
    /* softmax(logit / T), relative to the largest */
    const float top = s->c[0].logit;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        s->c[i].p = (double)ms_expf((s->c[i].logit - top) / p->temperature);
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
