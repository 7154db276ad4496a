/* cli/main.c - the moestream program: subcommand dispatch and `run`.
 *
 *   moestream run MODEL_DIR --ids 1,2,3 --gen N [--json] [--dump-logits PATH]
 *                 [--threads N] [--ram SIZE] [--recompute] [--quiet]
 *
 * Exit codes: 0 ok, 1 runtime failure, 2 usage or unreadable/invalid model,
 * 4 the run finished but its output is unsound. Includes only the public
 * header (and cli helpers).
 */
#include "moestream.h"

#include "cli/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: moestream COMMAND [options]\n"
        "\n"
        "commands:\n"
        "  run MODEL_DIR --ids 1,2,3 --gen N   greedy generation from token ids\n"
        "      --json               one JSON object on stdout (prompt_ids, generated_ids, stats)\n"
        "      --dump-logits PATH   write the first generated step's logits (float32 LE [vocab])\n"
        "      --threads N          compute threads (default: all cores; output bits do not change)\n"
        "      --ram SIZE           resident-memory ceiling, e.g. 8G (default: no limit)\n"
        "      --recompute          recompute the whole sequence for every token (check mode)\n"
        "      --quiet              no progress or summary on stderr\n"
        "\n"
        "exit codes: 0 ok, 1 runtime failure, 2 usage or invalid model, 4 output unsound\n");
}

typedef struct run_opts {
    const char *model_dir;
    const char *ids;
    int64_t n_gen;
    int json, recompute, quiet, threads;
    int64_t ram;
    const char *dump_logits;
} run_opts;

static int parse_run(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_gen = 16;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED() do { if (!v) { fprintf(stderr, "moestream: %s needs a value\n", a); return -1; } i++; } while (0)
        if (!strcmp(a, "--ids")) { NEED(); o->ids = v; }
        else if (!strcmp(a, "--gen")) {
            NEED();
            char *end;
            o->n_gen = strtoll(v, &end, 10);
            if (*end || o->n_gen < 0) { fprintf(stderr, "moestream: bad --gen '%s'\n", v); return -1; }
        }
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--quiet")) o->quiet = 1;
        else if (!strcmp(a, "--recompute")) o->recompute = 1;
        else if (!strcmp(a, "--dump-logits")) { NEED(); o->dump_logits = v; }
        else if (!strcmp(a, "--threads")) {
            NEED();
            char *end;
            long t = strtol(v, &end, 10);
            if (*end || t < 1 || t > 1024) { fprintf(stderr, "moestream: bad --threads '%s'\n", v); return -1; }
            o->threads = (int)t;
        }
        else if (!strcmp(a, "--ram")) {
            NEED();
            o->ram = cli_parse_size(v);
            if (o->ram < 0) { fprintf(stderr, "moestream: bad --ram '%s' (e.g. 8G, 512M)\n", v); return -1; }
        }
        else if (a[0] == '-') { fprintf(stderr, "moestream: unknown option '%s'\n", a); return -1; }
        else if (!o->model_dir) o->model_dir = a;
        else { fprintf(stderr, "moestream: unexpected argument '%s'\n", a); return -1; }
#undef NEED
    }
    if (!o->model_dir) { fprintf(stderr, "moestream: run needs MODEL_DIR\n"); return -1; }
    if (!o->ids) { fprintf(stderr, "moestream: run needs --ids\n"); return -1; }
    return 0;
}

static void print_ids(FILE *f, const int32_t *ids, int64_t n) {
    fputc('[', f);
    for (int64_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", ids[i]);
    fputc(']', f);
}

static int cmd_run(int argc, char **argv) {
    run_opts o;
    if (parse_run(argc, argv, &o) != 0) { usage(stderr); return EXIT_USAGE; }
    int32_t *prompt = NULL;
    int64_t n_prompt = cli_parse_ids(o.ids, &prompt);
    if (n_prompt <= 0) {
        fprintf(stderr, "moestream: --ids needs a comma-separated list of token ids\n");
        return EXIT_USAGE;
    }
    ms_engine_params ep = ms_engine_default_params();
    ep.model_dir = o.model_dir;
    ep.n_threads = o.threads;
    ep.ram_bytes = o.ram;
    ep.max_context = n_prompt + o.n_gen + 1;
    if (ep.max_context < 4096) ep.max_context = 4096;
    ep.log = o.quiet ? NULL : cli_log;
    ep.log_level = MS_LOG_WARN;
    char msg[1024];
    ms_engine *e;
    ms_status st = ms_engine_open(&ep, &e, msg, sizeof msg);
    if (st != MS_OK) {
        fprintf(stderr, "moestream: %s\n", msg);
        free(prompt);
        return cli_exit_code(st);
    }
    ms_model_info info;
    ms_engine_info(e, &info);
    ms_session *s;
    if ((st = ms_session_open(e, &s)) != MS_OK) {
        fprintf(stderr, "moestream: %s\n", ms_engine_error(e));
        ms_engine_close(e);
        free(prompt);
        return cli_exit_code(st);
    }
    int64_t n_all = n_prompt + o.n_gen;
    int32_t *all = malloc((size_t)(n_all > 0 ? n_all : 1) * sizeof *all);
    memcpy(all, prompt, (size_t)n_prompt * sizeof *all);
    int64_t n_have = n_prompt;
    ms_engine_stats_reset(e);
    st = ms_session_feed(s, prompt, n_prompt, NULL);
    int rc = EXIT_OK;
    for (int64_t ig = 0; st == MS_OK && ig < o.n_gen; ig++) {
        const float *lg = ms_session_logits(s);
        if (ig == 0 && o.dump_logits) {
            FILE *f = fopen(o.dump_logits, "wb");
            if (!f || fwrite(lg, sizeof(float), (size_t)info.n_vocab, f) != (size_t)info.n_vocab) {
                fprintf(stderr, "moestream: cannot write %s\n", o.dump_logits);
                rc = EXIT_RUNTIME;
            }
            if (f) fclose(f);
        }
        int32_t next = ms_argmax(lg, info.n_vocab);
        all[n_have++] = next;
        if (ig + 1 == o.n_gen) break;
        if (o.recompute) {
            ms_session_reset(s);
            st = ms_session_feed(s, all, n_have, NULL);
        } else {
            st = ms_session_feed(s, &next, 1, NULL);
        }
    }
    if (st != MS_OK) {
        fprintf(stderr, "moestream: %s: %s\n", ms_status_name(st), ms_session_error(s));
        rc = cli_exit_code(st);
    }
    ms_stats stt;
    ms_engine_stats(e, &stt);
    int64_t n_gen = n_have - n_prompt;
    double s_per_tok = stt.n_tokens_decode ? stt.decode_s / (double)stt.n_tokens_decode : 0.0;
    int64_t n_tok = stt.n_tokens_decode + stt.n_tokens_prefill;
    if (o.json) {
        printf("{\"prompt_ids\": ");
        print_ids(stdout, prompt, n_prompt);
        printf(", \"generated_ids\": ");
        print_ids(stdout, all + n_prompt, n_gen);
        printf(", \"status\": \"%s\"", ms_status_name(st));
        printf(", \"stats\": {\"prefill_tokens\": %lld, \"prefill_s\": %.6f, \"decode_tokens\": %lld, "
               "\"decode_s\": %.6f, \"s_per_token\": %.6f, \"bytes_read\": %lld, \"trunk_bytes_read\": %lld, "
               "\"expert_bytes_read\": %lld, \"bytes_read_per_token\": %.1f, \"reads_issued\": %lld, "
               "\"expert_requests\": %lld, \"expert_hits\": %lld, \"io_wait_s\": %.6f, "
               "\"scale255_groups\": %lld, \"peak_rss_bytes\": %lld}}\n",
               (long long)stt.n_tokens_prefill, stt.prefill_s, (long long)stt.n_tokens_decode,
               stt.decode_s, s_per_tok, (long long)(stt.trunk_bytes_read + stt.expert_bytes_read),
               (long long)stt.trunk_bytes_read, (long long)stt.expert_bytes_read,
               n_tok ? (double)(stt.trunk_bytes_read + stt.expert_bytes_read) / (double)n_tok : 0.0,
               (long long)stt.reads_issued, (long long)stt.expert_requests, (long long)stt.expert_hits,
               stt.io_wait_s, (long long)stt.scale255_groups, (long long)stt.peak_rss_bytes);
    } else {
        for (int64_t i = 0; i < n_gen; i++) printf("%s%d", i ? "," : "", all[n_prompt + i]);
        printf("\n");
    }
    if (!o.quiet)
        fprintf(stderr, "moestream: prefill %lld tokens in %.3f s; decode %lld tokens, %.4f s/token; "
                "read %.1f MB (trunk %.1f, experts %.1f); peak RSS %.1f MB\n",
                (long long)stt.n_tokens_prefill, stt.prefill_s, (long long)stt.n_tokens_decode, s_per_tok,
                (double)(stt.trunk_bytes_read + stt.expert_bytes_read) / 1e6,
                (double)stt.trunk_bytes_read / 1e6, (double)stt.expert_bytes_read / 1e6,
                (double)stt.peak_rss_bytes / 1e6);
    free(all);
    free(prompt);
    ms_session_close(s);
    ms_engine_close(e);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return EXIT_USAGE; }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) { usage(stdout); return EXIT_OK; }
    fprintf(stderr, "moestream: unknown command '%s'\n", cmd);
    usage(stderr);
    return EXIT_USAGE;
}
