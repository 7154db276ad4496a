/* bench/batchbench.c - sequences decoded together (ms_sessions_feed): time and
 * bytes per token against the number of sequences, in one process.
 *
 * Owns: a measurement program, nothing the engine uses (public header only).
 * Idea: for each P of --parallel (e.g. 1,2,4), open the engine with n_seq = P
 *   under the same --ram, open P sessions, feed sequence j the prompt --ids
 *   with every id shifted by 7919 * j (mod the vocabulary) - P different
 *   prompts in one ms_sessions_feed call - then decode --gen greedy steps in
 *   lockstep, one ms_sessions_feed call per step with one token per
 *   sequence. --rounds R repeats the list R times, interleaved, so the
 *   configurations share the machine's slow and fast periods. Per
 *   configuration and round it reports the decode step time, tokens per
 *   second over all sequences, trunk and expert bytes per step and per
 *   token, and the generated ids (sequence j's ids are those it gets alone:
 *   test_batch proves the bits; the report lets a reader check the ids).
 * Usage: batchbench MODEL_DIR --ids 1,2,3 [--gen N] [--parallel 1,2,4]
 *          [--rounds R] [--ram S] [--threads N] [--chunk N] [--no-verify] [--no-pack]
 *          [--no-predict-experts]
 *   Output: one JSON object.
 * Does not: assert anything, sample (greedy only), or print text.
 */
#include "moestream.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

enum { MAX_P = 64, MAX_CONF = 16 };

/* "1,2,3" -> up to max ints; count, or -1 */
static int parse_list(const char *s, int64_t *out, int max) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || n == max) return -1;
        out[n++] = v;
        p = end;
        if (*p == ',') p++;
        else if (*p) return -1;
    }
    return n;
}

/* One configuration: P sequences, n_gen steps. Appends its report to arr. */
static int run_one(const ms_engine_params *base, int P, const int32_t *prompt, int64_t n_prompt,
                   int64_t n_gen, int round, json_t *arr) {
    ms_engine_params ep = *base;
    ep.n_seq = P;
    ms_engine *e;
    char msg[1024];
    if (ms_engine_open(&ep, &e, msg, sizeof msg) != MS_OK) {
        fprintf(stderr, "batchbench: P = %d: %s\n", P, msg);
        return -1;
    }
    ms_model_info info;
    ms_engine_info(e, &info);
    ms_session *ss[MAX_P];
    int32_t *pr[MAX_P], *gen[MAX_P], next[MAX_P];
    const int32_t *ids[MAX_P];
    int64_t n[MAX_P];
    int ok = 1;
    for (int j = 0; j < P; j++) {
        ok &= ms_session_open(e, &ss[j]) == MS_OK;
        pr[j] = malloc((size_t)n_prompt * sizeof **pr);
        gen[j] = malloc((size_t)n_gen * sizeof **gen);
        for (int64_t i = 0; i < n_prompt; i++) pr[j][i] = (int32_t)((prompt[i] + 7919 * (int64_t)j) % info.n_vocab);
        ids[j] = pr[j];
        n[j] = n_prompt;
    }
    ms_stats s0, s1, s2;
    ms_engine_stats_reset(e);
    ms_engine_stats(e, &s0);
    double t0 = now_s();
    ms_status st = ok ? ms_sessions_feed(ss, P, ids, n) : MS_E_INTERNAL;
    const double prefill_s = now_s() - t0;
    ms_engine_stats(e, &s1);
    double decode_s = 0;
    int64_t steps = 0;
    for (int64_t g = 0; st == MS_OK && g < n_gen; g++) {
        for (int j = 0; j < P; j++) {
            next[j] = ms_argmax(ms_session_logits(ss[j]), info.n_vocab);
            gen[j][g] = next[j];
            ids[j] = &next[j];
            n[j] = 1;
        }
        if (g + 1 == n_gen) break;          /* the last token is picked, not fed (as `run`) */
        const double ta = now_s();
        st = ms_sessions_feed(ss, P, ids, n);
        decode_s += now_s() - ta;
        steps++;
    }
    ms_engine_stats(e, &s2);
    json_t *o = json_object();
    json_object_set_new(o, "parallel", json_integer(P));
    json_object_set_new(o, "round", json_integer(round));
    json_object_set_new(o, "status", json_string(ms_status_name(st)));
    if (st != MS_OK) json_object_set_new(o, "error", json_string(ms_session_error(ss[0])));
    json_object_set_new(o, "prefill_chunk", json_integer(info.prefill_chunk));
    json_object_set_new(o, "prefill_tokens", json_integer(P * n_prompt));
    json_object_set_new(o, "prefill_s", json_real(prefill_s));
    json_object_set_new(o, "prefill_bytes", json_integer(s1.trunk_bytes_read - s0.trunk_bytes_read +
                                                          s1.expert_bytes_read - s0.expert_bytes_read));
    json_object_set_new(o, "steps", json_integer(steps));
    json_object_set_new(o, "decode_s", json_real(decode_s));
    const double toks = (double)(steps * P);
    json_object_set_new(o, "s_per_step", json_real(steps ? decode_s / (double)steps : 0));
    json_object_set_new(o, "tokens_per_s", json_real(decode_s > 0 ? toks / decode_s : 0));
    const int64_t tb = s2.trunk_bytes_read - s1.trunk_bytes_read, xb = s2.expert_bytes_read - s1.expert_bytes_read;
    json_object_set_new(o, "decode_trunk_bytes", json_integer(tb));
    json_object_set_new(o, "decode_expert_bytes", json_integer(xb));
    json_object_set_new(o, "bytes_per_token", json_real(toks > 0 ? (double)(tb + xb) / toks : 0));
    json_object_set_new(o, "io_wait_s", json_real(s2.io_wait_s - s1.io_wait_s));
    json_object_set_new(o, "guess_issued", json_integer(s2.guess_issued - s1.guess_issued));
    json_object_set_new(o, "guess_hits", json_integer(s2.guess_hits - s1.guess_hits));
    json_object_set_new(o, "guess_cancelled", json_integer(s2.guess_cancelled - s1.guess_cancelled));
    json_object_set_new(o, "peak_rss_bytes", json_integer(s2.peak_rss_bytes));
    json_t *ga = json_array();
    for (int j = 0; j < P; j++) {
        json_t *g = json_array();
        for (int64_t i = 0; st == MS_OK && i < n_gen; i++) json_array_append_new(g, json_integer(gen[j][i]));
        json_array_append_new(ga, g);
    }
    json_object_set_new(o, "generated_ids", ga);
    json_array_append_new(arr, o);
    for (int j = 0; j < P; j++) {
        ms_session_close(ss[j]);
        free(pr[j]);
        free(gen[j]);
    }
    ms_engine_close(e);
    return st == MS_OK ? 0 : -1;
}

int main(int argc, char **argv) {
    ms_engine_params ep = ms_engine_default_params();
    const char *ids_arg = NULL, *par_arg = "1,2,4";
    int64_t n_gen = 8, rounds = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-') { ep.model_dir = a; continue; }
        if (!strcmp(a, "--no-verify")) { ep.no_verify = 1; continue; }
        if (!strcmp(a, "--no-pack")) { ep.no_pack = 1; continue; }
        if (!strcmp(a, "--no-predict-experts")) { ep.no_predict_experts = 1; continue; }
        if (!v) { fprintf(stderr, "batchbench: %s needs a value\n", a); return 2; }
        i++;
        if (!strcmp(a, "--ids")) ids_arg = v;
        else if (!strcmp(a, "--gen")) n_gen = strtoll(v, NULL, 10);
        else if (!strcmp(a, "--parallel")) par_arg = v;
        else if (!strcmp(a, "--rounds")) rounds = strtoll(v, NULL, 10);
        else if (!strcmp(a, "--threads")) ep.n_threads = atoi(v);
        else if (!strcmp(a, "--chunk")) ep.prefill_chunk = strtoll(v, NULL, 10);
        else if (!strcmp(a, "--ram") && !strcmp(v, "min")) ep.ram_bytes = MS_RAM_MIN;
        else if (!strcmp(a, "--ram") && (ep.ram_bytes = parse_size(v)) < 0) {
            fprintf(stderr, "batchbench: bad --ram '%s'\n", v);
            return 2;
        } else if (strcmp(a, "--ram")) { fprintf(stderr, "batchbench: unknown option '%s'\n", a); return 2; }
    }
    int64_t prompt64[4096], par[MAX_CONF];
    const int n_prompt = ids_arg ? parse_list(ids_arg, prompt64, 4096) : -1;
    const int n_par = parse_list(par_arg, par, MAX_CONF);
    if (!ep.model_dir || n_prompt < 1 || n_par < 1 || n_gen < 1 || rounds < 1) {
        fprintf(stderr, "usage: batchbench MODEL_DIR --ids 1,2,3 [--gen N] [--parallel 1,2,4] [--rounds R]\n"
                        "         [--ram S|min] [--threads N] [--chunk N] [--no-verify] [--no-pack] [--no-predict-experts]\n");
        return 2;
    }
    for (int i = 0; i < n_par; i++)
        if (par[i] < 1 || par[i] > MAX_P) { fprintf(stderr, "batchbench: --parallel values in [1, %d]\n", MAX_P); return 2; }
    int32_t prompt[4096];
    for (int i = 0; i < n_prompt; i++) prompt[i] = (int32_t)prompt64[i];
    ep.max_context = n_prompt + n_gen + 1;
    json_t *arr = json_array();
    int rc = 0;
    for (int64_t r = 0; r < rounds; r++)
        for (int i = 0; i < n_par; i++)
            if (run_one(&ep, (int)par[i], prompt, n_prompt, n_gen, (int)r, arr) != 0) rc = 1;
    json_t *out = json_object();
    json_object_set_new(out, "gen", json_integer(n_gen));
    json_object_set_new(out, "prompt_tokens", json_integer(n_prompt));
    json_object_set_new(out, "runs", arr);
    char *text = json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (text) { printf("%s\n", text); free(text); }
    json_decref(out);
    return rc;
}
