/* cli/tools.c - the commands that do not generate: `plan` (the memory plan
 * without reading weights), `trace` (replay an expert trace), `verify`
 * (checksum sidecar) and `pack` (the packed trunk).
 *
 * Owns: their options, output lines and exit codes.
 * Does not: open an engine (each calls one library entry point).
 */
#include "moestream.h"

#include "cli/cmds.h"
#include "cli/progress.h"
#include "cli/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cli_opt END = { NULL, 0, 0, NULL, 0, 0, NULL, NULL, 0, NULL, NULL };

int cmd_plan(int argc, char **argv) {
    cli_opts c;
    memset(&c, 0, sizeof c);
    cli_opts_generating(&c);             /* the plan of the commands that generate */
    int stages = 0;                         /* 0: the one-process plan; N: --pipeline N */
    const cli_opt table[] = {
        { "--pipeline", CLI_INT, 0, "N", 1, MS_MAX_STAGES, NULL, "each of N machines' plan and reads per token", 0, NULL, NULL },
        END };
    const cli_cmd cmd = { "plan", "MODEL_DIR|config.json [--ram SIZE] [options]",
                          "The memory plan --ram gives, without reading a weight: the same plan `run` uses\n"
                          "(--ram min: the smallest; a budget that does not fit is refused, exit 2).\n",
                          &c.model_dir, 1,
                          { { "options", table, &stages }, { "engine", cli_common_opts, &c }, { NULL, NULL, NULL } } };
    int r = cli_parse(&cmd, argc, argv);
    if (r != 0) return r > 0 ? EXIT_OK : EXIT_USAGE;
    if (!c.model_dir) { fprintf(stderr, "moestream plan: needs MODEL_DIR or a config.json\n"); return EXIT_USAGE; }
    static char buf[1 << 16];
    if (c.speculate_auto && c.chunk > 0 && c.chunk <= c.speculate) c.speculate = (int)c.chunk - 1;  /* as the engine */
    ms_status st = ms_plan_describe_tree(c.model_dir, c.draft_model, c.ram, c.max_context, c.speculate, c.chunk,
                                         c.parallel, c.draft_tree && c.speculate_auto, stages, c.stages, buf, sizeof buf);
    /* a plan that does not fit is still a plan: once, on stdout */
    fputs(buf, st == MS_OK || st == MS_E_BUDGET ? stdout : stderr);
    return cli_exit_code(st);
}

typedef struct trace_opts {
    const char *path, *policy;
    int capacity;
} trace_opts;

int cmd_trace(int argc, char **argv) {
    trace_opts o = { NULL, "all", 0 };
#define T(f) offsetof(trace_opts, f)
    const cli_opt table[] = {
        { "--capacity", CLI_INT, T(capacity), "N", 1, 1 << 30, NULL, "expert slots of the cache replayed (needed)", 0, NULL, NULL },
        { "--policy", CLI_CHOICE, T(policy), "lru|s3fifo|belady|all", 0, 0, "all", "the cache policy", 0, NULL, NULL },
        END };
#undef T
    const cli_cmd cmd = { "trace", "TRACE_FILE --capacity N [--policy P]",
                          "Replay an expert trace (run --trace PATH) through a cache of N slots: hits per policy.\n",
                          &o.path, 1, { { "options", table, &o }, { NULL, NULL, NULL } } };
    int r = cli_parse(&cmd, argc, argv);
    if (r != 0) return r > 0 ? EXIT_OK : EXIT_USAGE;
    if (!o.path || o.capacity < 1) { fprintf(stderr, "moestream trace: needs TRACE_FILE and --capacity N (moestream trace --help)\n"); return EXIT_USAGE; }
    const char *all[] = { "lru", "s3fifo", "belady" };
    const int n = !strcmp(o.policy, "all") ? 3 : 1;
    ms_trace_stats res[3];
    for (int i = 0; i < n; i++) {           /* every replay first: an error prints no table */
        char msg[512];
        ms_status st = ms_trace_replay_file(o.path, n == 3 ? all[i] : o.policy, o.capacity, &res[i], msg, sizeof msg);
        if (st != MS_OK) { fprintf(stderr, "moestream: %s\n", msg); return cli_exit_code(st); }
    }
    printf("policy    capacity   requests       hits   hit rate\n");
    for (int i = 0; i < n; i++)
        printf("%-8s %9d %10lld %10lld   %6.2f%%\n", n == 3 ? all[i] : o.policy, o.capacity,
               (long long)res[i].requests, (long long)res[i].hits, 100.0 * res[i].hit_rate);
    return EXIT_OK;
}

/* verify and pack: MODEL_DIR, --sums, --quiet, and one option of their own */
typedef struct file_opts {
    const char *dir, *sums, *out;
    int write, quiet, progress;
} file_opts;

#define F(f) offsetof(file_opts, f)
static const cli_opt verify_table[] = {
    { "--sums", CLI_STR, F(sums), "PATH", 0, 0, "MODEL_DIR/moestream.sums", "the checksum sidecar", 0, NULL, NULL },
    { "--write", CLI_FLAG, F(write), NULL, 0, 0, NULL, "hash every tensor and write the sidecar", 1, NULL, NULL },
    { "--quiet", CLI_FLAG, F(quiet), NULL, 0, 0, NULL, "no progress lines", 1, NULL, NULL },
    { "--progress", CLI_FLAG, F(progress), NULL, 0, 0, NULL, "progress drawn from the start (stderr a terminal)", 1, NULL, NULL },
    END };
static const cli_opt pack_table[] = {
    { "--out", CLI_STR, F(out), "PATH", 0, 0, "MODEL_DIR/moestream.pack", "where the packed trunk goes", 0, NULL, NULL },
    { "--sums", CLI_STR, F(sums), "PATH", 0, 0, "MODEL_DIR/moestream.sums", "the checksum sidecar", 0, NULL, NULL },
    { "--quiet", CLI_FLAG, F(quiet), NULL, 0, 0, NULL, "no progress lines", 1, NULL, NULL },
    { "--progress", CLI_FLAG, F(progress), NULL, 0, 0, NULL, "progress drawn from the start (stderr a terminal)", 1, NULL, NULL },
    END };
#undef F

int cmd_verify(int argc, char **argv) {
    file_opts o = { 0 };
    const cli_cmd cmd = { "verify", "MODEL_DIR [--sums PATH] [--write]",
                          "Without a sidecar (or with --write): hash every tensor and write MODEL_DIR/moestream.sums.\n"
                          "With one: re-hash and name every tensor that differs (exit 4).\n",
                          &o.dir, 1, { { "options", verify_table, &o }, { NULL, NULL, NULL } } };
    int r = cli_parse(&cmd, argc, argv);
    if (r != 0) return r > 0 ? EXIT_OK : EXIT_USAGE;
    if (!o.dir) { fprintf(stderr, "moestream verify: MODEL_DIR is missing (moestream verify --help)\n"); return EXIT_USAGE; }
    ms_verify_result res;
    char msg[1024];
    /* mismatches are logged at error level: they are printed even with --quiet */
    cli_progress_start(o.quiet, 0, o.progress);
    ms_status st = ms_verify_checkpoint(o.dir, o.sums, o.write, cli_log, NULL, o.quiet ? MS_LOG_ERROR : MS_LOG_INFO,
                                        &res, msg, sizeof msg);
    cli_progress_stop();
    if (st != MS_OK) {
        fprintf(stderr, "moestream: %s\n", msg);
        return st == MS_E_IO && !strstr(msg, "--sums") ? EXIT_RUNTIME : EXIT_USAGE;
    }
    const double gb = (double)res.bytes / 1e9, rate = res.seconds > 0 ? gb / res.seconds : 0.0;
    if (res.wrote) {
        char path[4200];
        snprintf(path, sizeof path, "%s/moestream.sums", o.dir);
        printf("wrote %s: %lld tensors, %lld blocks, %.3f GB hashed in %.2f s (%.2f GB/s)\n",
               o.sums ? o.sums : path, (long long)res.n_tensors, (long long)res.n_blocks, gb, res.seconds, rate);
        return EXIT_OK;
    }
    if (res.n_bad_tensors || res.n_bad_files) {
        printf("MISMATCH: %lld tensors (%lld blocks) differ from the checksums; %.3f GB checked in %.2f s\n",
               (long long)res.n_bad_tensors, (long long)res.n_bad_blocks, gb, res.seconds);
        return EXIT_UNSOUND;
    }
    printf("ok: %lld tensors, %lld blocks, %.3f GB match the checksums (%.2f s, %.2f GB/s)\n",
           (long long)res.n_tensors, (long long)res.n_blocks, gb, res.seconds, rate);
    return EXIT_OK;
}

int cmd_pack(int argc, char **argv) {
    file_opts o = { 0 };
    const cli_cmd cmd = { "pack", "MODEL_DIR [--out PATH] [--sums PATH]",
                          "Write MODEL_DIR/moestream.pack: the bf16 trunk without loss in ~0.75 of its bytes; a\n"
                          "streamed trunk is then read from it (same output bits; --no-pack to compare).\n",
                          &o.dir, 1, { { "options", pack_table, &o }, { NULL, NULL, NULL } } };
    int r = cli_parse(&cmd, argc, argv);
    if (r != 0) return r > 0 ? EXIT_OK : EXIT_USAGE;
    if (!o.dir) { fprintf(stderr, "moestream pack: MODEL_DIR is missing (moestream pack --help)\n"); return EXIT_USAGE; }
    ms_pack_result res;
    char msg[1024];
    cli_progress_start(o.quiet, 0, o.progress);
    ms_status st = ms_pack_checkpoint(o.dir, o.out, o.sums, cli_log, NULL, o.quiet ? MS_LOG_ERROR : MS_LOG_INFO,
                                      &res, msg, sizeof msg);
    cli_progress_stop();
    if (st != MS_OK) { fprintf(stderr, "moestream: %s\n", msg); return cli_exit_code(st); }
    char path[4200];
    snprintf(path, sizeof path, "%s/moestream.pack", o.dir);
    const int64_t saved = res.packed_raw_bytes - res.packed_bytes;
    printf("wrote %s: %d of %d trunk regions packed, %.3f GB -> %.3f GB (%.4f of the packed regions;"
           " %.4f of the trunk) in %.2f s\n", o.out ? o.out : path, res.n_packed, res.n_regions,
           (double)res.packed_raw_bytes / 1e9, (double)res.packed_bytes / 1e9,
           res.packed_raw_bytes ? (double)res.packed_bytes / (double)res.packed_raw_bytes : 1.0,
           res.raw_bytes ? (double)(res.raw_bytes - saved) / (double)res.raw_bytes : 1.0, res.seconds);
    return EXIT_OK;
}
