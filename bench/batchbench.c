/* bench/batchbench.c - sequences decoded together (ms_sessions_feed, or with
 * --speculate ms_sessions_decode): time and bytes per token against the number
 * of sequences, in one process.
 *
 * Owns: a measurement program, nothing the engine uses (public header only).
 * Idea: for each P of --parallel (e.g. 1,2,4), open the engine with n_seq = P
 *   under the same --ram, open P sessions, feed sequence j its prompt - the
 *   ids of --ids with every id shifted by 7919 * j (mod the vocabulary), or
 *   line j (mod their number) of --prompts FILE, JSON lines {"prompt": text}
 *   or {"ids": [...]} - P prompts in one ms_sessions_feed call - then decode
 *   --gen greedy tokens per sequence in lockstep: without --speculate one
 *   ms_sessions_feed call per step with one token per sequence; with
 *   --speculate K|auto (and --draft-model DIR) one ms_sessions_decode call per
 *   step, every sequence drafting and all drafts verified in one pass, each
 *   sequence leaving when it has its --gen tokens. --rounds R repeats the
 *   list R times, interleaved, so the configurations share the machine's
 *   slow and fast periods. Per configuration and round it reports the decode
 *   step time, tokens per second over all sequences, trunk and expert bytes
 *   per step and per emitted decode token, passes and tokens per pass (with
 *   --speculate: drafted / accepted by source), and the generated ids
 *   (sequence j's ids are those it gets alone, with or without speculation:
 *   test_batch and test_mspec prove the bits; the report lets a reader check
 *   the ids).
 * Usage: batchbench MODEL_DIR (--ids 1,2,3 | --prompts FILE) [--gen N] [--parallel 1,2,4]
 *          [--speculate K|auto] [--draft-model DIR] [--rounds R] [--ram S] [--threads N]
 *          [--chunk N] [--no-verify] [--no-pack] [--no-predict-experts]
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

/* The prompts: --ids (shifted per sequence) or --prompts' lines. */
typedef struct prompts {
    const int32_t *ids;         /* --ids */
    int64_t n_ids;
    json_t *lines;              /* --prompts: an array of objects */
} prompts;

/* Sequence j's prompt ids (malloc'd) into *out, *n; -1 when it cannot be made. */
static int prompt_of(ms_engine *e, const prompts *pr, int j, int64_t V, int32_t **out, int64_t *n) {
    if (pr->ids) {
        *out = malloc((size_t)pr->n_ids * sizeof **out);
        if (!*out) return -1;
        for (int64_t i = 0; i < pr->n_ids; i++) (*out)[i] = (int32_t)((pr->ids[i] + 7919 * (int64_t)j) % V);
        *n = pr->n_ids;
        return 0;
    }
    const json_t *o = json_array_get(pr->lines, (size_t)j % json_array_size(pr->lines));
    const json_t *t = json_object_get(o, "prompt"), *ids = json_object_get(o, "ids");
    if (json_is_string(t))
        return ms_tokenize(e, json_string_value(t), json_string_length(t), out, n) == MS_OK ? 0 : -1;
    if (!json_is_array(ids) || json_array_size(ids) == 0) return -1;
    *n = (int64_t)json_array_size(ids);
    *out = malloc((size_t)*n * sizeof **out);
    for (int64_t i = 0; *out && i < *n; i++) (*out)[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
    return *out ? 0 : -1;
}

/* The greedy picker of one sequence (--speculate): its ids, up to max. */
typedef struct gpick {
    int64_t V, n, max;
    int32_t *gen;
    int stopped;
} gpick;

static int32_t greedy(void *user, const float *logits, const int32_t *hist, int64_t n_hist, int *stop) {
    gpick *p = user;
    const int32_t id = ms_argmax(logits, p->V);
    p->gen[p->n++] = id;
    if (p->n >= p->max) *stop = p->stopped = 1;
    return id;
}

/* The decode of --speculate: one ms_sessions_decode call per step for every
 * sequence that still needs tokens (drafts cut to what it needs). */
static ms_status decode_spec(ms_session **ss, int P, int spec, int64_t V, int32_t **gen, int64_t n_gen,
                             double *decode_s, int64_t *steps) {
    gpick pk[MAX_P];
    int32_t pending[MAX_P], buf[MAX_P][33], *out[MAX_P];
    int nd[MAX_P], who[MAX_P];
    void *user[MAX_P];
    ms_session *cs[MAX_P];
    int64_t n_out[MAX_P];
    for (int j = 0; j < P; j++) {
        pk[j] = (gpick){ V, 0, n_gen, gen[j], 0 };
        pending[j] = -1;
    }
    ms_status st = MS_OK;
    for (;;) {
        int k = 0, feeding = 0;
        for (int j = 0; j < P; j++) {
            if (pk[j].stopped) continue;
            const int64_t room = n_gen - pk[j].n - 1;
            cs[k] = ss[j];
            user[k] = &pk[j];
            out[k] = buf[k];
            nd[k] = room < spec ? (int)room : spec;
            feeding += pending[j] >= 0;
            who[k++] = j;
        }
        if (k == 0) break;
        int32_t cp[MAX_P];
        for (int q = 0; q < k; q++) cp[q] = pending[who[q]];
        const double ta = now_s();
        st = ms_sessions_decode(cs, k, cp, nd, greedy, user, out, n_out);
        if (feeding) { *decode_s += now_s() - ta; (*steps)++; }
        if (st != MS_OK) break;
        for (int q = 0; q < k; q++) pending[who[q]] = out[q][n_out[q] - 1];
    }
    return st;
}

/* One configuration: P sequences, n_gen tokens each. Appends its report to arr. */
static int run_one(const ms_engine_params *base, int P, const prompts *pr, int64_t n_gen, int spec, int round,
                   json_t *arr) {
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
    int32_t *pr_ids[MAX_P], *gen[MAX_P], next[MAX_P];
    const int32_t *ids[MAX_P];
    int64_t n[MAX_P], n_prompt_all = 0;
    int ok = 1;
    for (int j = 0; j < P; j++) {
        ok &= ms_session_open(e, &ss[j]) == MS_OK;
        pr_ids[j] = NULL;
        ok &= prompt_of(e, pr, j, info.n_vocab, &pr_ids[j], &n[j]) == 0;
        gen[j] = malloc((size_t)n_gen * sizeof **gen);
        ids[j] = pr_ids[j];
        n_prompt_all += ok ? n[j] : 0;
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
    if (spec >= 0 && st == MS_OK) {
        st = decode_spec(ss, P, spec, info.n_vocab, gen, n_gen, &decode_s, &steps);
    } else {
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
    }
    ms_engine_stats(e, &s2);
    json_t *o = json_object();
    json_object_set_new(o, "parallel", json_integer(P));
    json_object_set_new(o, "round", json_integer(round));
    json_object_set_new(o, "status", json_string(ms_status_name(st)));
    if (st != MS_OK) json_object_set_new(o, "error", json_string(ms_session_error(ss[0])));
    json_object_set_new(o, "prefill_chunk", json_integer(info.prefill_chunk));
    json_object_set_new(o, "prefill_tokens", json_integer(n_prompt_all));
    json_object_set_new(o, "prefill_s", json_real(prefill_s));
    json_object_set_new(o, "prefill_bytes", json_integer(s1.trunk_bytes_read - s0.trunk_bytes_read +
                                                          s1.expert_bytes_read - s0.expert_bytes_read));
    json_object_set_new(o, "steps", json_integer(steps));
    json_object_set_new(o, "decode_s", json_real(decode_s));
    /* the decode tokens: every sequence's n_gen - 1 (its first token is picked after the prompt) */
    const double toks = (double)(P * (n_gen - 1));
    json_object_set_new(o, "s_per_step", json_real(steps ? decode_s / (double)steps : 0));
    json_object_set_new(o, "tokens_per_s", json_real(decode_s > 0 ? toks / decode_s : 0));
    const int64_t tb = s2.trunk_bytes_read - s1.trunk_bytes_read, xb = s2.expert_bytes_read - s1.expert_bytes_read;
    json_object_set_new(o, "decode_trunk_bytes", json_integer(tb));
    json_object_set_new(o, "decode_expert_bytes", json_integer(xb));
    json_object_set_new(o, "bytes_per_token", json_real(toks > 0 ? (double)(tb + xb) / toks : 0));
    json_object_set_new(o, "trunk_bytes_per_token", json_real(toks > 0 ? (double)tb / toks : 0));
    json_object_set_new(o, "expert_bytes_per_token", json_real(toks > 0 ? (double)xb / toks : 0));
    /* passes over the weights: one per step without --speculate (P <= the chunk) */
    const int64_t passes = spec >= 0 ? s2.spec_passes - s1.spec_passes : steps;
    json_object_set_new(o, "passes", json_integer(passes));
    json_object_set_new(o, "tokens_per_pass", json_real(passes > 0 ? toks / (double)passes : 0));
    if (spec >= 0) {
        json_object_set_new(o, "drafted", json_integer(s2.spec_drafted - s1.spec_drafted));
        json_object_set_new(o, "accepted", json_integer(s2.spec_accepted - s1.spec_accepted));
        json_t *bd = json_object(), *ba = json_object();
        for (int i = 0; i < MS_DRAFT_SOURCES; i++) {
            json_object_set_new(bd, ms_draft_source_name(i), json_integer(s2.spec_src_drafted[i] - s1.spec_src_drafted[i]));
            json_object_set_new(ba, ms_draft_source_name(i), json_integer(s2.spec_src_accepted[i] - s1.spec_src_accepted[i]));
        }
        json_object_set_new(o, "drafted_by_source", bd);
        json_object_set_new(o, "accepted_by_source", ba);
        json_object_set_new(o, "draft_model_tokens", json_integer(s2.draft_model_tokens - s1.draft_model_tokens));
    }
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
        free(pr_ids[j]);
        free(gen[j]);
    }
    ms_engine_close(e);
    return st == MS_OK ? 0 : -1;
}

int main(int argc, char **argv) {
    ms_engine_params ep = ms_engine_default_params();
    const char *ids_arg = NULL, *par_arg = "1,2,4", *prompts_arg = NULL;
    int64_t n_gen = 8, rounds = 1;
    int spec = -1;              /* --speculate: -1 none (ms_sessions_feed steps) */
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
        else if (!strcmp(a, "--prompts")) prompts_arg = v;
        else if (!strcmp(a, "--gen")) n_gen = strtoll(v, NULL, 10);
        else if (!strcmp(a, "--parallel")) par_arg = v;
        else if (!strcmp(a, "--rounds")) rounds = strtoll(v, NULL, 10);
        else if (!strcmp(a, "--threads")) ep.n_threads = atoi(v);
        else if (!strcmp(a, "--chunk")) ep.prefill_chunk = strtoll(v, NULL, 10);
        else if (!strcmp(a, "--draft-model")) ep.draft_model = v;
        else if (!strcmp(a, "--speculate") && !strcmp(v, "auto")) spec = ep.max_draft = 8, ep.draft_auto = 1;
        else if (!strcmp(a, "--speculate")) {
            spec = ep.max_draft = atoi(v);
            if (spec < 0 || spec > 31) { fprintf(stderr, "batchbench: --speculate 0..31 or auto\n"); return 2; }
        } else if (!strcmp(a, "--ram") && !strcmp(v, "min")) ep.ram_bytes = MS_RAM_MIN;
        else if (!strcmp(a, "--ram") && (ep.ram_bytes = parse_size(v)) < 0) {
            fprintf(stderr, "batchbench: bad --ram '%s'\n", v);
            return 2;
        } else if (strcmp(a, "--ram")) { fprintf(stderr, "batchbench: unknown option '%s'\n", a); return 2; }
    }
    int64_t prompt64[4096], par[MAX_CONF];
    const int n_prompt = ids_arg ? parse_list(ids_arg, prompt64, 4096) : -1;
    const int n_par = parse_list(par_arg, par, MAX_CONF);
    prompts pr = { NULL, 0, NULL };
    int64_t longest = n_prompt;
    if (prompts_arg) {
        FILE *f = fopen(prompts_arg, "rb");
        pr.lines = json_array();
        char line[1 << 16];
        while (f && fgets(line, sizeof line, f)) {
            json_t *o = json_loads(line, 0, NULL);
            if (!json_is_object(o)) { json_decref(o); continue; }
            const json_t *t = json_object_get(o, "prompt"), *ids = json_object_get(o, "ids");
            const int64_t len = json_is_string(t) ? (int64_t)json_string_length(t) + 1 : (int64_t)json_array_size(ids);
            if (len > longest) longest = len;       /* a text has at most a token per byte (+ BOS) */
            json_array_append_new(pr.lines, o);
        }
        if (f) fclose(f);
        if (!f || json_array_size(pr.lines) == 0) { fprintf(stderr, "batchbench: no prompts in %s\n", prompts_arg); return 2; }
    }
    if (!ep.model_dir || (n_prompt < 1 && !prompts_arg) || n_par < 1 || n_gen < 1 || rounds < 1) {
        fprintf(stderr, "usage: batchbench MODEL_DIR (--ids 1,2,3 | --prompts FILE) [--gen N] [--parallel 1,2,4]\n"
                        "         [--speculate K|auto] [--draft-model DIR] [--rounds R] [--ram S|min] [--threads N]\n"
                        "         [--chunk N] [--no-verify] [--no-pack] [--no-predict-experts]\n");
        return 2;
    }
    for (int i = 0; i < n_par; i++)
        if (par[i] < 1 || par[i] > MAX_P) { fprintf(stderr, "batchbench: --parallel values in [1, %d]\n", MAX_P); return 2; }
    int32_t prompt[4096];
    for (int i = 0; i < n_prompt; i++) prompt[i] = (int32_t)prompt64[i];
    if (!prompts_arg) { pr.ids = prompt; pr.n_ids = n_prompt; }
    ep.max_context = longest + n_gen + 1;
    json_t *arr = json_array();
    int rc = 0;
    for (int64_t r = 0; r < rounds; r++)
        for (int i = 0; i < n_par; i++)
            if (run_one(&ep, (int)par[i], &pr, n_gen, spec, (int)r, arr) != 0) rc = 1;
    json_t *out = json_object();
    json_object_set_new(out, "gen", json_integer(n_gen));
    json_object_set_new(out, "prompt_tokens", json_integer(n_prompt));
    if (spec >= 0) json_object_set_new(out, "speculate", ep.draft_auto ? json_string("auto") : json_integer(spec));
    if (ep.draft_model) json_object_set_new(out, "draft_model", json_string(ep.draft_model));
    json_object_set_new(out, "runs", arr);
    char *text = json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (text) { printf("%s\n", text); free(text); }
    json_decref(out);
    json_decref(pr.lines);
    return rc;
}
