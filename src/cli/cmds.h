/* cli/cmds.h - what the subcommand files of the moestream program share:
 * the common options, engine opening, text streaming, stats printing. */
#ifndef MS_CLI_CMDS_H
#define MS_CLI_CMDS_H

#include "moestream.h"

#include <stdint.h>
#include <stdio.h>

typedef struct cli_opts {
    const char *model_dir;
    int threads, quiet;
    int64_t ram;
    int64_t max_context;
    int64_t trunk_bytes, expert_bytes;
    const char *io_backend, *cache_policy, *trace_path;
    int io_queue_depth, no_readahead, fault_kind, no_predict_experts;
    int64_t fault_at_read;
    const char *sums_path;      /* --sums PATH */
    int no_verify;              /* --no-verify */
    const char *pack_path;      /* --pack PATH */
    int no_pack;                /* --no-pack */
    int speculate;              /* --speculate K: draft up to K tokens per decode pass */
    int parallel;               /* --parallel N: sequences served together (the plan counts
                                   N sessions' state; 0 = 1) */
    int64_t chunk;              /* --chunk N: prompt tokens per pass over the weights (0 = the
                                   engine's choice: for --ram, else 32) */
    const char *stages;         /* --stages L1,L2,...: a pipeline's split (under mpirun) */
    const char *kernels;        /* --kernels NAME: the kernel table (auto, ref, avx2, avx512, avx512-l2) */
    int stage_groups;           /* --stage-groups N (0 = automatic) */
    int64_t prompt_cache;       /* --prompt-cache-ram SIZE (0 = the engine's choice) */
} cli_opts;

/* Consume argv[*i] (and its value) if it is a common option or MODEL_DIR:
 * returns 1 if consumed, 0 if not a common option, -1 on a bad value. */
int cli_parse_common(cli_opts *o, int argc, char **argv, int *i);
/* Open the engine for o; prints the error and returns its status on failure. */
ms_status cli_open(const cli_opts *o, ms_engine **e);

/* Decoded text of generated tokens, streamed without splitting a UTF-8 character. */
typedef struct cli_text {
    char *all;                  /* every byte so far, NUL-terminated */
    size_t n, cap, printed;
} cli_text;
void cli_text_init(cli_text *t);
void cli_text_add(cli_text *t, const ms_engine *e, int32_t id, FILE *out);
void cli_text_flush(cli_text *t, FILE *out);

void cli_print_stats_json(FILE *f, const ms_stats *st);
int cmd_chat(int argc, char **argv);
/* cli/batch.c */
int cmd_batch(int argc, char **argv);
void cli_print_stats_human(FILE *f, const ms_stats *st);

#endif
