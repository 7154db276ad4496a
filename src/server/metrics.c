/* server/metrics.c - GET /metrics: the server's counters in the Prometheus
 * text format (version 0.0.4).
 *
 * Owns: the metric state: requests by route and status (counted by http.c
 *   when a request completes), tokens (prompt, cached, completion) and the
 *   time-to-first-token and per-token latency histograms (fed by the worker),
 *   and a copy of the engine's counters (ms_engine_stats) that the worker
 *   takes after every job: the engine is only ever called from the worker.
 * Invariants: every field is under mu; a scrape never calls the engine, so
 *   it does not wait for a pass over the weights.
 * Does not: authenticate (http.c: --api-key unless --metrics-public), or
 *   keep anything per client or per request id (bounded memory).
 */
#include "server/srv.h"

#include <stdio.h>
#include <string.h>

#define N_ROUTE_STATUS 64

static const double ttft_le[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60 };
static const double tok_le[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5 };
#define N_TTFT (sizeof ttft_le / sizeof ttft_le[0])
#define N_TOK (sizeof tok_le / sizeof tok_le[0])

typedef struct hist {
    uint64_t n[16];             /* per bucket (not cumulative); the last: above every bound */
    uint64_t count;
    double sum;
} hist;

static struct {
    pthread_mutex_t mu;
    struct { const char *route; int status; uint64_t n; } req[N_ROUTE_STATUS];
    int n_req;
    uint64_t prompt, cached, completion, jobs;
    hist ttft, tok;
    ms_stats est;               /* the engine's, as of the last job's end */
} m = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void observe(hist *h, const double *le, size_t n_le, double v) {
    size_t b = 0;
    while (b < n_le && v > le[b]) b++;
    h->n[b]++;
    h->count++;
    h->sum += v;
}

void srv_metrics_request(const char *route, int status) {
    pthread_mutex_lock(&m.mu);
    int i = 0;
    while (i < m.n_req && !(m.req[i].status == status && !strcmp(m.req[i].route, route))) i++;
    if (i == m.n_req && m.n_req < N_ROUTE_STATUS) {
        m.req[i].route = route;
        m.req[i].status = status;
        m.n_req++;
    }
    if (i < m.n_req) m.req[i].n++;
    pthread_mutex_unlock(&m.mu);
}

void srv_metrics_token(double t_submit, double *t_last) {
    const double now = srv_now();
    pthread_mutex_lock(&m.mu);
    if (*t_last == 0) observe(&m.ttft, ttft_le, N_TTFT, now - t_submit);
    else observe(&m.tok, tok_le, N_TOK, now - *t_last);
    pthread_mutex_unlock(&m.mu);
    *t_last = now;
}

void srv_metrics_engine(const ms_stats *est) {
    pthread_mutex_lock(&m.mu);
    m.est = *est;
    pthread_mutex_unlock(&m.mu);
}

void srv_metrics_job(srv *s, int choice, int64_t n_prompt, int64_t n_cached, int64_t n_completion) {
    ms_stats est;
    ms_engine_stats(s->e, &est);        /* the worker's thread: the engine's only caller */
    pthread_mutex_lock(&m.mu);
    if (choice == 0) {
        m.prompt += (uint64_t)n_prompt;
        m.cached += (uint64_t)n_cached;
        m.jobs++;
    }
    m.completion += (uint64_t)n_completion;
    m.est = est;
    pthread_mutex_unlock(&m.mu);
}

static void put_hist(srv_buf *b, const char *name, const char *help, const hist *h, const double *le, size_t n_le) {
    char line[256];
    snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    srv_buf_adds(b, line);
    uint64_t cum = 0;
    for (size_t i = 0; i <= n_le; i++) {
        cum += h->n[i];
        if (i < n_le) snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name, le[i], (unsigned long long)cum);
        else snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
        srv_buf_adds(b, line);
    }
    snprintf(line, sizeof line, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
    srv_buf_adds(b, line);
}

static void put(srv_buf *b, const char *name, const char *type, const char *help, double v) {
    char line[320];
    snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
    srv_buf_adds(b, line);
}

char *srv_metrics_text(srv *s) {
    srv_buf b = {0};
    char line[256];
    const int64_t depth = srv_queue_depth(s);
    pthread_mutex_lock(&m.mu);
    srv_buf_adds(&b, "# HELP moestream_requests_total HTTP requests answered, by route and status\n"
                     "# TYPE moestream_requests_total counter\n");
    for (int i = 0; i < m.n_req; i++) {
        snprintf(line, sizeof line, "moestream_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
                 m.req[i].route, m.req[i].status, (unsigned long long)m.req[i].n);
        srv_buf_adds(&b, line);
    }
    put(&b, "moestream_generations_total", "counter", "generation requests the engine finished (any outcome)", (double)m.jobs);
    put(&b, "moestream_prompt_tokens_total", "counter", "prompt tokens of finished generations", (double)m.prompt);
    put(&b, "moestream_cached_tokens_total", "counter", "prompt tokens reused from a kept session (not read again)", (double)m.cached);
    put(&b, "moestream_completion_tokens_total", "counter", "tokens generated (every choice)", (double)m.completion);
    put_hist(&b, "moestream_time_to_first_token_seconds", "from the request's submission to its first sampled token",
             &m.ttft, ttft_le, N_TTFT);
    put_hist(&b, "moestream_token_latency_seconds", "between two sampled tokens of one request", &m.tok, tok_le, N_TOK);
    snprintf(line, sizeof line, "# HELP moestream_disk_read_bytes_total weight bytes read from disk, by part\n"
             "# TYPE moestream_disk_read_bytes_total counter\n"
             "moestream_disk_read_bytes_total{part=\"trunk\"} %lld\nmoestream_disk_read_bytes_total{part=\"experts\"} %lld\n",
             (long long)m.est.trunk_bytes_read, (long long)m.est.expert_bytes_read);
    srv_buf_adds(&b, line);
    /* speculation: drafted and accepted tokens by the source of the draft */
    for (int k = 0; k < 2; k++) {
        snprintf(line, sizeof line, "# HELP moestream_%s_tokens_total drafted tokens %s, by source\n"
                 "# TYPE moestream_%s_tokens_total counter\n", k ? "accepted" : "drafted",
                 k ? "accepted" : "verified", k ? "accepted" : "drafted");
        srv_buf_adds(&b, line);
        for (int i = 0; i < MS_DRAFT_SOURCES; i++) {
            snprintf(line, sizeof line, "moestream_%s_tokens_total{source=\"%s\"} %lld\n", k ? "accepted" : "drafted",
                     ms_draft_source_name(i), (long long)(k ? m.est.spec_src_accepted[i] : m.est.spec_src_drafted[i]));
            srv_buf_adds(&b, line);
        }
    }
    put(&b, "moestream_tree_passes_total", "counter", "decode passes that verified a second branch (--draft-tree)",
        (double)m.est.spec_tree_passes);
    put(&b, "moestream_tree_drafted_tokens_total", "counter", "drafted tokens verified in second branches",
        (double)m.est.spec_tree_drafted);
    put(&b, "moestream_tree_accepted_tokens_total", "counter", "drafted tokens of second branches accepted",
        (double)m.est.spec_tree_accepted);
    put(&b, "moestream_expert_requests_total", "counter", "(layer, expert) uses", (double)m.est.expert_requests);
    put(&b, "moestream_expert_cache_hits_total", "counter", "expert uses served from memory without a read", (double)m.est.expert_hits);
    put(&b, "moestream_peak_rss_bytes", "gauge", "the process's peak resident memory", (double)m.est.peak_rss_bytes);
    pthread_mutex_unlock(&m.mu);
    put(&b, "moestream_queue_depth", "gauge", "requests waiting for or running on the engine", (double)depth);
    put(&b, "moestream_ram_budget_bytes", "gauge", "the memory plan's --ram ceiling (0: no limit)", (double)s->ram_budget);
    put(&b, "moestream_parallel_slots", "gauge", "requests served together (--parallel)", (double)s->o.c.parallel);
    return b.p;
}
