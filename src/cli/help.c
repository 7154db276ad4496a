/* cli/help.c - `moestream --help` (the commands, one line each) and
 * `moestream --version` (version, commit, kernel tables).
 *
 * Each command's own help (`moestream CMD --help`) is printed by cli_parse
 * from that command's tables (cli/opts.h), so it cannot drift from what the
 * command accepts.
 */
#include "moestream.h"

#include "cli/cmds.h"

#include "commit.h"                         /* MS_COMMIT, written by the Makefile */

#include <stdio.h>

#define MOESTREAM_VERSION "0.1.0"

void cli_usage(FILE *f) {
    fprintf(f,
        "usage: moestream COMMAND [MODEL_DIR] [options]     (moestream COMMAND --help: its options)\n"
        "\n"
        "commands:\n"
        "  run MODEL_DIR         generate from --prompt TEXT, --prompt-file PATH, --ids 1,2,3 or stdin\n"
        "  chat MODEL_DIR        interactive multi-turn chat (K3: XTML, gpt-oss: harmony)\n"
        "  batch MODEL_DIR       JSON lines in, one result line each out; requests decoded together\n"
        "  serve MODEL_DIR       OpenAI-compatible HTTP server (docs/SERVER.md)\n"
        "  tokenize MODEL_DIR    text on stdin (or each FILE) -> JSON array of ids (--decode: ids -> text)\n"
        "  perplexity MODEL_DIR  score a text: nll and perplexity as JSON\n"
        "  plan MODEL_DIR        the memory plan --ram gives, without reading weights\n"
        "  trace TRACE_FILE      replay an expert trace through the cache policies\n"
        "  verify MODEL_DIR      write or check the checksum sidecar\n"
        "  pack MODEL_DIR        write the packed trunk (~0.75 of the bytes, same bits)\n"
        "  --version             version, commit, kernel tables\n"
        "\n"
        "Every command that opens a model takes the same engine options, e.g. --ram SIZE\n"
        "(512M, 8G, 8GiB; min = the smallest plan, auto = 90%% of MemAvailable, all = no limit),\n"
        "--threads N, --kernels NAME, --max-context N, --quiet; a bad value is refused (exit 2).\n"
        "\n"
        "exit codes: 0 ok, 1 runtime failure, 2 usage or invalid model, 4 output unsound\n");
}

void cli_version(FILE *f) {
    const char *best = ms_kernels_choice(NULL);
    fprintf(f, "moestream %s (commit %s)\n", MOESTREAM_VERSION, MS_COMMIT[0] ? MS_COMMIT : "unknown");
    fprintf(f, "kernels compiled in: %s\n", ms_kernels_built());
    fprintf(f, "this CPU: %s (--kernels auto)\n", best ? best : "none");
}
