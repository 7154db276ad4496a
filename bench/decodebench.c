/* bench/decodebench.c - one budget's prefill and decode, phase by phase.
 *
 * Owns: a measurement program, nothing the engine uses. It includes only the
 *   public header, so it measures exactly what a program gets.
 * Idea: `moestream run --json` prints counters summed over prefill and
 *   decode; a benchmark needs them apart (decode bytes per token, I/O wait
 *   per token). This driver makes the same calls as `moestream run --ids
 *   ... --gen N` (open, reset the counters, feed the prompt in one call,
 *   greedy argmax, feed each generated token alone) and snapshots
 *   ms_engine_stats after the prompt and after every decode token, plus the
 *   process CPU time (getrusage), so the report can split wall time into I/O
 *   wait, computation and CPU use per phase, and counts page faults per
 *   phase (a fault during steady-state decode is memory touched for the first
 *   time in that token). Output: one JSON object.
 * Usage: decodebench MODEL_DIR --ids 1,2,3 [--gen N] [--ram S] [--trunk-ram S]
 *          [--expert-ram S] [--io pread|direct|uring] [--queue-depth N] [--io-chunk S]
 *          [--threads N] [--cache s3fifo|lru] [--no-readahead]
 *   --gen N: N tokens are generated, N - 1 of them fed back (as `run`).
 *   --speculate K: decode steps draft up to K tokens by prompt lookup and verify
 *   them in one pass (ms_session_decode, as `run --speculate K`); the report
 *   then counts passes, drafted and accepted tokens, and each entry of
 *   decode_tokens is one pass (its "tokens" = tokens it emitted). --ram min:
 *   the smallest plan. --no-verify: do not load the checksum sidecar. --no-pack:
 *   read the trunk from the shards even when MODEL_DIR/moestream.pack exists.
 *   --pick-among N: the argmax over the first N prompt ids only, a picker
 *   that makes random-weight models cycle, so drafts get accepted on a
 *   full-width benchmark checkpoint (the bytes per pass are what it measures).
 * Does not: assert anything, sample (greedy only), or print text.
 */
#include "moestream.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include "bench_util.h"

/* Process CPU use (all threads): user + system seconds, and page faults.
 * A page fault in steady-state decode means memory was mapped or touched
 * for the first time during the token: a per-token allocation. */
typedef struct cpu_use {
    double s;
    int64_t minflt, majflt;
} cpu_use;

static cpu_use cpu_now(void) {
    struct rusage ru;
    cpu_use c = { 0.0, 0, 0 };
    if (getrusage(RUSAGE_SELF, &ru) != 0) return c;
    c.s = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
          (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    c.minflt = ru.ru_minflt;
    c.majflt = ru.ru_majflt;
    return c;
}

static cpu_use cpu_diff(cpu_use a, cpu_use b) {
    return (cpu_use){ b.s - a.s, b.minflt - a.minflt, b.majflt - a.majflt };
}

/* "1,2,3" -> malloc'd ids; count, or -1 */
static int64_t parse_ids(const char *s, int32_t **out) {
    int64_t n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return -1;
    int64_t k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX) { free(ids); return -1; }
        ids[k++] = (int32_t)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) { free(ids); return -1; }
    }
    *out = ids;
    return k;
}

/* counters of one phase: b minus a */
static json_t *phase_json(const ms_stats *a, const ms_stats *b, int64_t n_tokens, double wall,
                          cpu_use cpu) {
    json_t *j = json_object();
    json_object_set_new(j, "tokens", json_integer(n_tokens));
    json_object_set_new(j, "s", json_real(wall));
    json_object_set_new(j, "cpu_s", json_real(cpu.s));
    json_object_set_new(j, "minor_faults", json_integer(cpu.minflt));
    json_object_set_new(j, "major_faults", json_integer(cpu.majflt));
    json_object_set_new(j, "io_wait_s", json_real(b->io_wait_s - a->io_wait_s));
    json_object_set_new(j, "io_busy_s", json_real(b->io_busy_s - a->io_busy_s));
    json_object_set_new(j, "io_inflight_s", json_real(b->io_inflight_s - a->io_inflight_s));
    json_object_set_new(j, "trunk_bytes", json_integer(b->trunk_bytes_read - a->trunk_bytes_read));
    json_object_set_new(j, "expert_bytes", json_integer(b->expert_bytes_read - a->expert_bytes_read));
    json_object_set_new(j, "reads", json_integer(b->reads_issued - a->reads_issued));
    json_object_set_new(j, "expert_requests", json_integer(b->expert_requests - a->expert_requests));
    json_object_set_new(j, "expert_hits", json_integer(b->expert_hits - a->expert_hits));
    json_object_set_new(j, "prefetch_issued", json_integer(b->prefetch_issued - a->prefetch_issued));
    json_object_set_new(j, "prefetch_hits", json_integer(b->prefetch_hits - a->prefetch_hits));
    json_object_set_new(j, "guess_issued", json_integer(b->guess_issued - a->guess_issued));
    json_object_set_new(j, "guess_hits", json_integer(b->guess_hits - a->guess_hits));
    json_object_set_new(j, "guess_cancelled", json_integer(b->guess_cancelled - a->guess_cancelled));
    json_object_set_new(j, "trunk_packed_read", json_integer(b->trunk_packed_read - a->trunk_packed_read));
    json_object_set_new(j, "trunk_unpacked_bytes", json_integer(b->trunk_unpacked_bytes - a->trunk_unpacked_bytes));
    json_object_set_new(j, "unpack_s", json_real(b->unpack_s - a->unpack_s));
    return j;
}

/* greedy, stopping after n_gen tokens; with among > 0, argmax over the
 * first `among` prompt ids only (ties to the first) */
typedef struct greedy { int32_t *gen; int64_t n, max, V; const int32_t *among; int n_among; } greedy;

static int32_t pick_greedy(void *user, const float *logits, const int32_t *hist, int64_t n_hist, int *stop) {
    (void)hist; (void)n_hist;
    greedy *g = user;
    int32_t id = ms_argmax(logits, g->V);
    if (g->n_among > 0) {
        id = g->among[0];
        for (int i = 1; i < g->n_among; i++)
            if (logits[g->among[i]] > logits[id]) id = g->among[i];
    }
    g->gen[g->n++] = id;
    if (g->n == g->max) *stop = 1;
    return id;
}

static void print_usage(FILE *f) {
    fprintf(f, "usage: decodebench MODEL_DIR --ids 1,2,3 [--gen N] [--ram S] [--trunk-ram S]\n"
               "         [--expert-ram S] [--io pread|direct|uring] [--queue-depth N] [--io-chunk S]\n"
               "         [--threads N] [--cache s3fifo|lru] [--no-readahead] [--speculate K] [--chunk N]\n"
               "         [--no-verify] [--no-pack] [--pick-among N] [--kernels NAME]\n"
               "         (--ram min: the smallest plan)\n");
}

int main(int argc, char **argv) {
    ms_engine_params ep = ms_engine_default_params();
    const char *ids_arg = NULL;
    int64_t n_gen = 8;
    int pick_among = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-') { ep.model_dir = a; continue; }
        if (!strcmp(a, "--no-readahead")) { ep.no_readahead = 1; continue; }
        if (!strcmp(a, "--no-predict-experts")) { ep.no_predict_experts = 1; continue; }
        if (!strcmp(a, "--no-verify")) { ep.no_verify = 1; continue; }
        if (!strcmp(a, "--no-pack")) { ep.no_pack = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { print_usage(stdout); return 0; }
        if (!v) { fprintf(stderr, "decodebench: %s needs a value\n", a); return 2; }
        i++;
        int64_t sz = -2;
        if (!strcmp(a, "--ids")) ids_arg = v;
        else if (!strcmp(a, "--gen")) n_gen = strtoll(v, NULL, 10);
        else if (!strcmp(a, "--threads")) ep.n_threads = atoi(v);
        else if (!strcmp(a, "--queue-depth")) ep.io_queue_depth = atoi(v);
        else if (!strcmp(a, "--io")) ep.io_backend = v;
        else if (!strcmp(a, "--cache")) ep.cache_policy = v;
        else if (!strcmp(a, "--kernels")) ep.kernels = v;
        else if (!strcmp(a, "--ram") && !strcmp(v, "min")) ep.ram_bytes = MS_RAM_MIN;
        else if (!strcmp(a, "--ram")) ep.ram_bytes = sz = parse_size(v);
        else if (!strcmp(a, "--speculate")) ep.max_draft = atoi(v);
        else if (!strcmp(a, "--chunk")) ep.prefill_chunk = strtoll(v, NULL, 10);
        else if (!strcmp(a, "--pick-among")) pick_among = atoi(v);
        else if (!strcmp(a, "--trunk-ram")) ep.trunk_bytes = sz = parse_size(v);
        else if (!strcmp(a, "--expert-ram")) ep.expert_bytes = sz = parse_size(v);
        else if (!strcmp(a, "--io-chunk")) ep.io_chunk_bytes = sz = parse_size(v);
        else { fprintf(stderr, "decodebench: unknown option '%s'\n", a); return 2; }
        if (sz == -1) { fprintf(stderr, "decodebench: bad size '%s' for %s\n", v, a); return 2; }
    }
    int32_t *prompt = NULL;
    int64_t n_prompt = ids_arg ? parse_ids(ids_arg, &prompt) : -1;
    if (!ep.model_dir || n_prompt <= 0 || n_gen < 1) { print_usage(stderr); return 2; }
    ep.max_context = n_prompt + n_gen + 1 > 4096 ? n_prompt + n_gen + 1 : 4096;

    char msg[1024];
    ms_engine *e = NULL;
    double t0 = now_s();
    cpu_use c0 = cpu_now();
    ms_status st = ms_engine_open(&ep, &e, msg, sizeof msg);
    double open_s = now_s() - t0;
    cpu_use open_cpu = cpu_diff(c0, cpu_now());
    if (st != MS_OK) {
        fprintf(stderr, "decodebench: %s\n", msg);
        free(prompt);
        return st == MS_E_BUDGET || st == MS_E_USAGE || st == MS_E_MODEL ? 2 : 1;
    }
    ms_stats s_open;
    ms_engine_stats(e, &s_open);   /* bytes read at open (pinned regions) */
    ms_model_info info;
    ms_engine_info(e, &info);
    ms_session *s = NULL;
    if ((st = ms_session_open(e, &s)) != MS_OK) {
        fprintf(stderr, "decodebench: %s\n", ms_engine_error(e));
        ms_engine_close(e);
        free(prompt);
        return 1;
    }
    int32_t *gen = malloc((size_t)n_gen * sizeof *gen);
    json_t *tok = json_array();
    ms_stats s0, s1, s2, prev, cur;
    ms_engine_stats_reset(e);
    ms_engine_stats(e, &s0);
    t0 = now_s();
    c0 = cpu_now();
    st = ms_session_feed(s, prompt, n_prompt, NULL);
    double prefill_s = now_s() - t0;
    cpu_use prefill_cpu = cpu_diff(c0, cpu_now());
    ms_engine_stats(e, &s1);
    double decode_s = 0.0;
    cpu_use decode_cpu = { 0.0, 0, 0 };
    int64_t n_fed = 0;
    prev = s1;
    /* the first token comes from the prompt's logits (no feed), then one
     * ms_session_decode step per pass, exactly as `run` */
    greedy gr = { gen, 0, n_gen, info.n_vocab, prompt, pick_among < n_prompt ? pick_among : (int)n_prompt };
    int32_t pending = -1, *step = malloc((size_t)(ep.max_draft + 1) * sizeof *step);
    int64_t n_step = 0;
    if (st == MS_OK) st = ms_session_decode(s, -1, 0, pick_greedy, &gr, step, &n_step);
    if (st == MS_OK) pending = step[0];
    while (st == MS_OK && gr.n < n_gen) {
        int64_t room = n_gen - gr.n - 1;
        int n_draft = ep.max_draft < room ? ep.max_draft : (int)room;
        int64_t before = gr.n;
        double ta = now_s();
        cpu_use ca = cpu_now();
        st = ms_session_decode(s, pending, n_draft, pick_greedy, &gr, step, &n_step);
        double dt = now_s() - ta;
        cpu_use dc = cpu_diff(ca, cpu_now());
        if (n_step > 0) pending = step[n_step - 1];
        decode_s += dt;
        decode_cpu.s += dc.s;
        decode_cpu.minflt += dc.minflt;
        decode_cpu.majflt += dc.majflt;
        n_fed += gr.n - before;
        ms_engine_stats(e, &cur);
        json_t *t = phase_json(&prev, &cur, gr.n - before, dt, dc);
        json_array_append_new(tok, t);
        prev = cur;
    }
    int64_t n_out = gr.n;
    free(step);
    ms_engine_stats(e, &s2);

    json_t *out = json_object();
    json_object_set_new(out, "status", json_string(ms_status_name(st)));
    if (st != MS_OK) json_object_set_new(out, "error", json_string(ms_session_error(s)));
    json_object_set_new(out, "n_threads", json_integer(ep.n_threads));
    json_object_set_new(out, "kernels", json_string(info.kernels));
    json_object_set_new(out, "open_s", json_real(open_s));
    json_object_set_new(out, "open_cpu_s", json_real(open_cpu.s));
    json_object_set_new(out, "open_minor_faults", json_integer(open_cpu.minflt));
    json_object_set_new(out, "open_bytes", json_integer(s_open.trunk_bytes_read + s_open.expert_bytes_read));
    json_object_set_new(out, "prefill", phase_json(&s0, &s1, n_prompt, prefill_s, prefill_cpu));
    json_object_set_new(out, "decode", phase_json(&s1, &s2, n_fed, decode_s, decode_cpu));
    json_object_set_new(out, "decode_tokens", tok);
    json_object_set_new(out, "speculate", json_integer(ep.max_draft));
    json_object_set_new(out, "decode_passes", json_integer(s2.spec_passes - s1.spec_passes));
    json_object_set_new(out, "drafted", json_integer(s2.spec_drafted - s1.spec_drafted));
    json_object_set_new(out, "accepted", json_integer(s2.spec_accepted - s1.spec_accepted));
    json_t *g = json_array();
    for (int64_t i = 0; i < n_out; i++) json_array_append_new(g, json_integer(gen[i]));
    json_object_set_new(out, "generated_ids", g);
    json_object_set_new(out, "scale255_groups", json_integer(s2.scale255_groups));
    json_object_set_new(out, "peak_rss_bytes", json_integer(s2.peak_rss_bytes));
    json_object_set_new(out, "verify", json_boolean(s2.verify_on));
    json_object_set_new(out, "pack", json_boolean(s2.pack_on));
    json_object_set_new(out, "packed_regions", json_integer(s2.packed_regions));
    json_object_set_new(out, "pack_fallbacks", json_integer(s2.pack_fallbacks));
    char *text = json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (text) { printf("%s\n", text); free(text); }
    json_decref(out);
    free(gen);
    free(prompt);
    ms_session_close(s);
    ms_engine_close(e);
    return st == MS_OK ? 0 : (st == MS_E_UNSOUND ? 4 : 1);
}
