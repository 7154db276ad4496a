/* cli/opts.c - see opts.h. */
#include "cli/opts.h"

#include "moestream.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SIZE_UNITS "a size like 512M, 8G or 8GiB"

/* ---- the shared tables --------------------------------------------------------- */

static int parse_fault(void *dst, const char *v, char *why, size_t why_len) {
    /* KIND:N - inject a fault into the N-th read request (tests) */
    static const char *kinds[] = { "none", "eio", "transient", "short", "corrupt" };
    cli_opts *o = (cli_opts *)((char *)dst - offsetof(cli_opts, fault_kind));
    const char *colon = strchr(v, ':');
    int kind = -1;
    for (int k = 0; colon && k < 5; k++)
        if ((size_t)(colon - v) == strlen(kinds[k]) && !strncmp(v, kinds[k], (size_t)(colon - v))) kind = k;
    char *end = NULL;
    long long n = colon ? strtoll(colon + 1, &end, 10) : -1;
    if (kind < 0 || !colon[1] || *end || n < 0) {
        snprintf(why, why_len, "KIND:N with KIND eio, transient, short or corrupt and N >= 0");
        return -1;
    }
    o->fault_kind = kind;
    o->fault_at_read = n;
    return 0;
}

/* --speculate K or auto (K = MS_SPECULATE_AUTO, the length chosen per pass). */
#define MS_SPECULATE_AUTO 8
static int parse_speculate(void *dst, const char *v, char *why, size_t why_len) {
    cli_opts *o = (cli_opts *)((char *)dst - offsetof(cli_opts, speculate));
    char *end = NULL;
    const long k = strcmp(v, "auto") && *v >= '0' && *v <= '9' ? strtol(v, &end, 10) : -1;
    if (!strcmp(v, "auto")) {
        o->speculate = MS_SPECULATE_AUTO;
        o->speculate_auto = 1;
        return 0;
    }
    if (k < 0 || *end || k > 31) { snprintf(why, why_len, "an integer from 0 to 31, or auto"); return -1; }
    o->speculate = (int)k;
    o->speculate_auto = 0;
    return 0;
}

void cli_opts_generating(cli_opts *o) {
    o->speculate = MS_SPECULATE_AUTO;
    o->speculate_auto = 1;
}

/* --draft-costs PASS,TOKEN: two sizes. */
static int parse_draft_costs(void *dst, const char *v, char *why, size_t why_len) {
    int64_t *c = (int64_t *)dst;
    const char *comma = strchr(v, ',');
    char a[64];
    if (comma && (size_t)(comma - v) < sizeof a) {
        memcpy(a, v, (size_t)(comma - v));
        a[comma - v] = 0;
        c[0] = cli_parse_size(a);
        c[1] = cli_parse_size(comma + 1);
        if (c[0] >= 0 && c[1] > 0) return 0;
    }
    snprintf(why, why_len, "two sizes PASS,TOKEN (the bytes a pass and a fed token cost), e.g. 100.8G,24.06G");
    return -1;
}

#define C(f) offsetof(cli_opts, f)
/* --prompt-cache-ram: a size; 0 = no prompt cache (MS_PROMPT_CACHE_OFF). */
static int parse_prompt_cache(void *dst, const char *v, char *why, size_t why_len) {
    const int64_t b = v ? cli_parse_size(v) : -1;
    if (b < 0) { snprintf(why, why_len, SIZE_UNITS ", or 0 for none"); return -1; }
    *(int64_t *)dst = b ? b : MS_PROMPT_CACHE_OFF;
    return 0;
}

const cli_opt cli_common_opts[] = {
    { "--threads", CLI_INT, C(threads), "N", 1, 1024, "all cores", "compute threads (the output bits do not change)", 0, NULL, NULL },
    { "--kernels", CLI_CHOICE, C(kernels), "auto|ref|avx2|avx512|avx512-l2", 0, 0, "auto",
      "kernel table (auto: the best for this CPU; same bits)", 0, NULL, NULL },
    { "--ram", CLI_RAM, C(ram), "SIZE", 0, 0, "all",
      "resident-memory ceiling: 512M, 8G, 8GiB; min, auto (90% of MemAvailable), all", 0, NULL, NULL },
    { "--max-context", CLI_I64, C(max_context), "N", 1, INT32_MAX, "4096",
      "positions a session holds (prompt + output)", 0, NULL, "--ctx" },
    { "--quiet", CLI_FLAG, C(quiet), NULL, 0, 0, NULL, "no progress or summary on stderr", 1, NULL, NULL },
    { "--verbose", CLI_FLAG, C(verbose), NULL, 0, 0, NULL, "the engine's info lines on stderr (model, memory plan)", 1, NULL, NULL },
    { "--progress", CLI_FLAG, C(progress), NULL, 0, 0, NULL,
      "progress of every step at once (else steps over 0.5 s), generation live; stderr a terminal only", 1, NULL, NULL },
    { "--trunk-ram", CLI_SIZE, C(trunk_bytes), "SIZE", 1, 9e18, NULL, "ceiling on pinned trunk + ring", 0, NULL, NULL },
    { "--expert-ram", CLI_SIZE, C(expert_bytes), "SIZE", 1, 9e18, NULL, "ceiling on the expert cache", 0, NULL, NULL },
    { "--prompt-cache-ram", CLI_CUSTOM, C(prompt_cache), "SIZE", 0, 0, "what the plan leaves of --ram",
      "RAM for snapshots of prompts' state reused by later prompts sharing a prefix (0 = none)", 0,
      parse_prompt_cache, NULL },
    { "--prompt-cache", CLI_STR, C(prompt_cache_dir), "DIR", 0, 0, NULL,
      "also keep those snapshots as files in DIR: a restarted server or a new run starts warm", 0, NULL, NULL },
    { "--prompt-cache-size", CLI_SIZE, C(prompt_cache_size), "SIZE", 1, 9e18, "20G",
      "ceiling on the bytes of the files in --prompt-cache DIR", 0, NULL, NULL },
    { "--fault-cache-write", CLI_I64, C(prompt_cache_fault), "N", 1, 1e9, NULL, NULL, 0, NULL, NULL },
    { "--io", CLI_CHOICE, C(io_backend), "pread|direct|uring", 0, 0, "direct", "I/O backend", 0, NULL, NULL },
    { "--queue-depth", CLI_INT, C(io_queue_depth), "N", 1, 4096, "32", "reads in flight", 0, NULL, NULL },
    { "--cache", CLI_CHOICE, C(cache_policy), "s3fifo|lru", 0, 0, "s3fifo", "expert cache policy", 0, NULL, NULL },
    { "--no-readahead", CLI_FLAG, C(no_readahead), NULL, 0, 0, NULL, "synchronous trunk reads", 1, NULL, NULL },
    { "--trace", CLI_STR, C(trace_path), "PATH", 0, 0, NULL, "append every expert request to PATH", 0, NULL, NULL },
    { "--no-predict-experts", CLI_FLAG, C(no_predict_experts), NULL, 0, 0, NULL,
      "do not prefetch the experts the next layer's router predicts", 1, NULL, NULL },
    { "--predict-experts", CLI_FLAG, C(no_predict_experts), NULL, 0, 0, NULL, NULL, 0, NULL, NULL },
    { "--speculate", CLI_CUSTOM, C(speculate), "K|auto", 0, 0, "auto where tokens are generated; 0 = off",
      "decode: verify up to K drafted tokens per pass (same bits); auto: up to 8, as many as pay;"
      " --draft-corpus FILE: also draft from this text; --draft-model DIR: from this smaller model;"
      " --draft-tree 1 (auto): also verify a second branch where the index forks (one more session's"
      " memory: a small --ram pins less, so a pass may read more)",
      0, parse_speculate, NULL },
    /* in --speculate's help (--help stays within 60 lines) */
    { "--draft-tree", CLI_INT, C(draft_tree), "0|1", 0, 1, NULL, NULL, 0, NULL, NULL },
    { "--draft-corpus", CLI_STR, C(draft_corpus), "FILE", 0, 0, NULL, NULL, 0, NULL, NULL },
    { "--draft-model", CLI_STR, C(draft_model), "DIR", 0, 0, NULL, NULL, 0, NULL, NULL },
    /* a projection's costs for auto (docs/PERFORMANCE.md), not in the help */
    { "--draft-costs", CLI_CUSTOM, C(draft_costs), "PASS,TOKEN", 0, 0, NULL, NULL, 0, parse_draft_costs, NULL },
    { "--chunk", CLI_I64, C(chunk), "N", 1, 65536, "chosen for --ram, else 32",
      "prompt tokens per pass over the weights (same bits)", 0, NULL, NULL },
    { "--parallel", CLI_INT, C(parallel), "N", 1, 64, "1",
      "sequences decoded together, one pass over the weights for all", 0, NULL, NULL },
    { "--sums", CLI_STR, C(sums_path), "PATH", 0, 0, "MODEL_DIR/moestream.sums",
      "checksum sidecar: every weight byte read is verified", 0, NULL, NULL },
    { "--no-verify", CLI_FLAG, C(no_verify), NULL, 0, 0, NULL, "do not verify checksums", 1, NULL, NULL },
    { "--pack", CLI_STR, C(pack_path), "PATH", 0, 0, "MODEL_DIR/moestream.pack",
      "packed trunk: ~0.75 of the trunk bytes, same bits", 0, NULL, NULL },
    { "--no-pack", CLI_FLAG, C(no_pack), NULL, 0, 0, NULL, "read the trunk from the shards only", 1, NULL, NULL },
    { "--stages", CLI_STR, C(stages), "L1,L2,...", 0, 0, "equal bytes per stage",
      "under mpirun: the layers where stages 1..N-1 begin", 0, NULL, NULL },
    { "--stage-groups", CLI_INT, C(stage_groups), "N", 0, 64, "0 = automatic",
      "a pipeline's passes of several sequences go through the stages in up to N groups", 0, NULL, NULL },
    { "--fault", CLI_CUSTOM, C(fault_kind), "KIND:N", 0, 0, NULL, NULL, 0, parse_fault, NULL },
    { NULL, 0, 0, NULL, 0, 0, NULL, NULL, 0, NULL, NULL }
};
#undef C

/* The ranges are the sampler's own (ms_sampler_open checks them again). */
#define S(f) offsetof(ms_sample_params, f)
const cli_opt cli_sample_opts[] = {
    { "--temperature", CLI_FLOAT, S(temperature), "T", 0, 100, "0 = greedy", "sampling temperature", 0, NULL, NULL },
    { "--top-k", CLI_INT, S(top_k), "K", 0, INT32_MAX, "0 = off", "keep the K most likely tokens", 0, NULL, NULL },
    { "--top-p", CLI_FLOAT, S(top_p), "P", 0, 1, "1", "nucleus: the smallest set holding P of the mass", 1, NULL, NULL },
    { "--min-p", CLI_FLOAT, S(min_p), "P", 0, 1, "0", "drop tokens below P times the top one", 0, NULL, NULL },
    { "--repeat-penalty", CLI_FLOAT, S(repeat_penalty), "R", 0, 100, "1", "divide repeated tokens' logits by R", 1, NULL, NULL },
    { "--frequency-penalty", CLI_FLOAT, S(frequency_penalty), "F", -2, 2, "0",
      "OpenAI's, over the last 64 tokens", 0, NULL, NULL },
    { "--presence-penalty", CLI_FLOAT, S(presence_penalty), "P", -2, 2, "0", "OpenAI's, over the last 64 tokens", 0, NULL, NULL },
    { "--seed", CLI_U64, S(seed), "S", 0, 9.2e18, "0", "the sampler's seed", 0, NULL, NULL },
    { NULL, 0, 0, NULL, 0, 0, NULL, NULL, 0, NULL, NULL }
};
#undef S

/* ---- values ---------------------------------------------------------------------- */

int64_t cli_parse_size(const char *s) { return ms_parse_size(s); }

int64_t cli_parse_ram(const char *s) {
    if (!strcmp(s, "min")) return MS_RAM_MIN;
    if (!strcmp(s, "all") || !strcmp(s, "max")) return 0;
    if (!strcmp(s, "auto")) {
        FILE *f = fopen("/proc/meminfo", "r");
        long long kb = -1;
        char line[256];
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
        if (f) fclose(f);
        return kb > 0 ? (int64_t)kb * 1024 / 10 * 9 : -2;
    }
    int64_t b = cli_parse_size(s);
    return b > 0 ? b : -2;
}

/* A byte count as --help and messages write it: 4096, 16K, 4M, 8G. */
static void fmt_bytes(char *buf, size_t n, double b) {
    static const char *units = "KMGT";
    int u = -1;
    while (u < 3 && b >= 1024 && fmod(b, 1024) == 0) { b /= 1024; u++; }
    if (u < 0) snprintf(buf, n, "%.0f", b);
    else snprintf(buf, n, "%.0f%c", b, units[u]);
}

static void accepted(const cli_opt *o, char *why, size_t n) {
    char a[32], b[32];
    switch (o->kind) {
    case CLI_INT: case CLI_I64: case CLI_U64:
        if (o->hi >= 2e9) snprintf(why, n, "an integer >= %.0f", o->lo);
        else snprintf(why, n, "an integer from %.0f to %.0f", o->lo, o->hi);
        break;
    case CLI_FLOAT: case CLI_DOUBLE:
        snprintf(why, n, "a number %s %g, at most %g", o->set ? "above" : "from", o->lo, o->hi);
        break;
    case CLI_SIZE:
        fmt_bytes(a, sizeof a, o->lo);
        fmt_bytes(b, sizeof b, o->hi);
        if (o->hi >= 9e18) snprintf(why, n, SIZE_UNITS ", at least %s", a);
        else snprintf(why, n, SIZE_UNITS ", from %s to %s", a, b);
        break;
    case CLI_RAM: snprintf(why, n, SIZE_UNITS ", or min, auto, all"); break;
    case CLI_ONOFF: snprintf(why, n, "on or off"); break;
    case CLI_CHOICE: {
        size_t k = (size_t)snprintf(why, n, "unknown (");
        for (const char *p = o->meta; *p && k + 3 < n; p++) {
            if (*p == '|') { why[k++] = ','; why[k++] = ' '; }
            else why[k++] = *p;
        }
        why[k++] = ')';
        why[k] = '\0';
        break;
    }
    default: snprintf(why, n, "a value"); break;
    }
}

/* 1 when v is one of the '|'-separated words of list. */
static int is_choice(const char *list, const char *v) {
    const size_t len = strlen(v);
    for (const char *p = list; p && *p;) {
        const char *bar = strchr(p, '|');
        const size_t w = bar ? (size_t)(bar - p) : strlen(p);
        if (w == len && !strncmp(p, v, len)) return 1;
        p = bar ? bar + 1 : NULL;
    }
    return 0;
}

int cli_opt_set(const cli_opt *o, void *base, const char *v, char *why, size_t why_len) {
    void *dst = (char *)base + o->off;
    char *end = NULL;
    int ok = v && *v;
    errno = 0;
    switch (o->kind) {
    case CLI_FLAG: *(int *)dst = o->set; return 0;
    case CLI_STR: if (ok) *(const char **)dst = v; break;
    case CLI_CHOICE: if ((ok = is_choice(o->meta, v))) *(const char **)dst = v; break;
    case CLI_ONOFF:
        ok = !strcmp(v, "on") || !strcmp(v, "off");
        if (ok) *(int *)dst = !strcmp(v, "on");
        break;
    case CLI_INT: case CLI_I64: case CLI_U64: {
        /* strtoll / strtoull would take a sign or spaces before the digits */
        ok = ok && ((*v >= '0' && *v <= '9') || (*v == '-' && o->lo < 0));
        const long long x = ok ? strtoll(v, &end, 10) : 0;
        ok = ok && !*end && !errno && (double)x >= o->lo && (double)x <= o->hi;
        if (ok && o->kind == CLI_INT) *(int *)dst = (int)x;
        if (ok && o->kind == CLI_I64) *(int64_t *)dst = (int64_t)x;
        if (ok && o->kind == CLI_U64) *(uint64_t *)dst = (uint64_t)x;
        break;
    }
    case CLI_FLOAT: case CLI_DOUBLE: {
        const double x = ok ? strtod(v, &end) : NAN;
        ok = ok && !*end && isfinite(x) && (o->set ? x > o->lo : x >= o->lo) && x <= o->hi;
        if (ok && o->kind == CLI_FLOAT) *(float *)dst = (float)x;
        if (ok && o->kind == CLI_DOUBLE) *(double *)dst = x;
        break;
    }
    case CLI_SIZE: {
        const int64_t b = ok ? cli_parse_size(v) : -1;
        ok = b >= 0 && (double)b >= o->lo && (double)b <= o->hi;
        if (ok) *(int64_t *)dst = b;
        break;
    }
    case CLI_RAM: {
        const int64_t b = ok ? cli_parse_ram(v) : -2;
        ok = b != -2;
        if (ok) *(int64_t *)dst = b;
        else if (v && !strcmp(v, "auto")) { snprintf(why, why_len, "auto: MemAvailable is not in /proc/meminfo"); return -1; }
        break;
    }
    case CLI_CUSTOM:
        return ok ? o->parse(dst, v, why, why_len) : (accepted(o, why, why_len), -1);
    }
    if (!ok) accepted(o, why, why_len);
    return ok ? 0 : -1;
}

/* 1 when a (with or without "--", '_' for '-') spells name. */
static int same_name(const char *name, const char *a) {
    if (!name) return 0;
    if (a[0] == '-' && a[1] == '-') a += 2;
    name += 2;
    for (; *name && *a; name++, a++)
        if (*name != *a && !(*name == '-' && *a == '_')) return 0;
    return !*name && !*a;
}

const cli_opt *cli_opt_find(const cli_opt *table, const char *name) {
    for (const cli_opt *o = table; o && o->name; o++)
        if (same_name(o->name, name) || same_name(o->alias, name)) return o;
    return NULL;
}

/* ---- argv ------------------------------------------------------------------------ */

int cli_parse(const cli_cmd *cmd, int argc, char **argv) {
    int n_pos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { cli_help(cmd, stdout); return 1; }
        if (a[0] != '-' || !a[1]) {
            if (n_pos >= cmd->n_pos) {
                fprintf(stderr, "moestream %s: unexpected argument '%s'\n", cmd->name, a);
                return -1;
            }
            cmd->pos[n_pos++] = a;
            continue;
        }
        /* --flag=value: the name is the part before '=' */
        char name[64];
        const char *eq = strchr(a, '=');
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        const cli_opt *o = NULL;
        void *base = NULL;
        for (const cli_group *g = cmd->groups; !o && g->opts; g++)
            if ((o = cli_opt_find(g->opts, name)) && name[1] == '-') base = g->base;
            else o = NULL;
        if (!o) {
            fprintf(stderr, "moestream %s: unknown option '%s' (moestream %s --help lists them)\n", cmd->name, name, cmd->name);
            return -1;
        }
        char why[160];
        const char *v = eq ? eq + 1 : NULL;
        if (o->kind == CLI_FLAG) {
            if (v) { fprintf(stderr, "moestream %s: %s takes no value\n", cmd->name, name); return -1; }
        } else if (!v) {
            if (i + 1 >= argc) {
                accepted(o, why, sizeof why);
                fprintf(stderr, "moestream %s: %s needs a value (%s)\n", cmd->name, name, o->kind == CLI_STR ? o->meta : why);
                return -1;
            }
            v = argv[++i];
        }
        if (cli_opt_set(o, base, v, why, sizeof why) != 0) {
            fprintf(stderr, "moestream %s: bad %s '%s': %s\n", cmd->name, name, v, why);
            return -1;
        }
    }
    return 0;
}

void cli_help(const cli_cmd *cmd, FILE *f) {
    fprintf(f, "usage: moestream %s %s\n", cmd->name, cmd->synopsis);
    if (cmd->about) fprintf(f, "%s", cmd->about);
    for (const cli_group *g = cmd->groups; g->opts; g++) {
        fprintf(f, "\n%s:\n", g->title);
        for (const cli_opt *o = g->opts; o->name; o++) {
            if (!o->help) continue;
            char lhs[96];
            const char *meta = o->kind == CLI_ONOFF ? "on|off" : o->meta;
            snprintf(lhs, sizeof lhs, "%s%s%s", o->name, meta ? " " : "", meta ? meta : "");
            if (strlen(lhs) > 22) fprintf(f, "  %s\n  %-22s", lhs, "");
            else fprintf(f, "  %-22s", lhs);
            fprintf(f, " %s", o->help);
            if (o->def) fprintf(f, " (default %s)", o->def);
            if (o->alias) fprintf(f, " [also %s]", o->alias);
            fputc('\n', f);
        }
    }
}
