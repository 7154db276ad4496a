/* cli/main.c - the moestream program: subcommand dispatch, `run`,
 * `tokenize`, `perplexity`.
 *
 * Exit codes: 0 ok, 1 runtime failure, 2 usage or unreadable/invalid model,
 * 4 the run finished but its output is unsound. Includes only the public
 * header (and cli helpers).
 */
#include "moestream.h"

#include "cli/cmds.h"
#include "cli/util.h"
#include "server/server.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: moestream COMMAND MODEL_DIR [options]\n"
        "\n"
        "commands:\n"
        "  run MODEL_DIR        generate: --prompt TEXT | --prompt-file PATH | --ids 1,2,3 | stdin\n"
        "      --max-tokens N       tokens to generate (alias --gen; default 64)\n"
        "      --ignore-eos         do not stop at <|end_of_msg|> (only text prompts stop there)\n"
        "      --temperature T --top-k K --top-p P --min-p P --repeat-penalty R --seed S\n"
        "      --frequency-penalty F --presence-penalty P   (OpenAI's, over the last 64 tokens)\n"
        "                           sampling (default greedy)\n"
        "      --json               one JSON object on stdout (prompt_ids, generated_ids, text, stats)\n"
        "      --dump-logits PATH   write the first generated step's logits (float32 LE [vocab])\n"
        "      --recompute          recompute the whole sequence for every token (check mode)\n"
        "      --save-session PATH  save the session state after the run\n"
        "      --load-session PATH  resume a saved session, then feed the prompt and continue\n"
        "  chat MODEL_DIR       interactive multi-turn chat in the K3 chat format; the state is kept\n"
        "                       between turns, so each turn reads only its new tokens\n"
        "      --system TEXT --thinking on|off --effort low|high|max --show-reasoning\n"
        "      --max-tokens N and the sampling options of run; /reset, /save PATH, /exit\n"
        "  batch MODEL_DIR [--input FILE] [--parallel N] [--max-tokens N] [sampling]   JSON lines\n"
        "                       {\"prompt\"|\"ids\", \"max_tokens\", \"seed\"} in, one result line each out\n"
        "                       (input order); N requests decoded together, each as 'run' gives it\n"
        "  serve MODEL_DIR      OpenAI-compatible HTTP server [--host 127.0.0.1] [--port 8080]\n"
        "                       [--api-key KEY] (see docs/SERVER.md)\n"
        "  tokenize MODEL_DIR   text on stdin -> JSON array of ids (--decode: ids -> text)\n"
        "  perplexity MODEL_DIR --file PATH | --ids LIST [--max-tokens N]   JSON {n_tokens, nll,\n"
        "                       perplexity, prefill_chunk, seconds, bytes read, peak RSS}: one\n"
        "                       pass over the weights per prompt chunk (text: stdin without --file)\n"
        "  plan MODEL_DIR|config.json --ram SIZE   the memory plan, without reading weights\n"
        "                       (--pipeline N [--stages ...]: each of N machines' plan and reads)\n"
        "  trace TRACE_FILE --capacity N [--policy lru|s3fifo|belady|all]   replay an expert trace\n"
        "  verify MODEL_DIR [--sums PATH] [--write]   checksum sidecar: without one (or with\n"
        "                       --write) hash every tensor and write MODEL_DIR/moestream.sums;\n"
        "                       with one, re-hash and name every tensor that differs (exit 4)\n"
        "  pack MODEL_DIR [--out PATH] [--sums PATH]   write MODEL_DIR/moestream.pack: the trunk\n"
        "                       (bf16) stored without loss in ~0.75 of its bytes; a streamed trunk\n"
        "                       is then read from it (same output bits; --no-pack to compare)\n"
        "\n"
        "common options:\n"
        "  --threads N          compute threads (default: all cores; output bits do not change)\n"
        "  --kernels NAME       the kernel table: auto (default: the best for this CPU), ref,\n"
        "                       avx2, avx512, avx512-l2 (same bits, other speed; run --json names it)\n"
        "  --ram SIZE           resident-memory ceiling, e.g. 8G; min = the smallest plan,\n"
        "                       auto = 90%% of MemAvailable, all = no limit (the default)\n"
        "  --quiet              no progress or summary on stderr\n"
        "  --trunk-ram SIZE     ceiling on pinned trunk + ring   --expert-ram SIZE  ceiling on the expert cache\n"
        "  --io pread|direct|uring  I/O backend (default direct)  --queue-depth N  reads in flight (32)\n"
        "  --cache s3fifo|lru   expert cache policy (s3fifo)     --no-readahead     synchronous trunk reads\n"
        "  --trace PATH         append every expert request to PATH\n"
        "  --prompt-cache-ram SIZE  RAM for snapshots of prompts' state reused by later prompts\n"
        "                       sharing a prefix (0 = none; default: what the plan leaves of --ram,\n"
        "                       none at --ram min, 2G without --ram; same output bits)\n"
        "  --no-predict-experts do not prefetch the next layer's experts predicted by its\n"
        "                       router (they are by default, while decoding)\n"
        "  --speculate K        decode: verify up to K tokens drafted by prompt lookup in one\n"
        "                       pass over the weights (0 = off, the default; same output bits)\n"
        "  --chunk N            prompt tokens per pass over the weights: a streamed model reads\n"
        "                       its weights once per chunk, so larger chunks read a long prompt\n"
        "                       fewer times; the scratch they need is planned within --ram (see\n"
        "                       'plan'); same output bits. Default: with --ram, the largest power\n"
        "                       of two from 32 to 1024 that costs a decode token at most 1/32\n"
        "                       more reads; 32 without --ram\n"
        "  --parallel N         sequences decoded together, one pass over the weights for all\n"
        "                       (serve, batch; plan shows it): the plan counts N sessions (default 1)\n"
        "  --sums PATH          checksum sidecar (default MODEL_DIR/moestream.sums when present):\n"
        "                       every weight byte read is verified   --no-verify  do not verify\n"
        "  --pack PATH          packed trunk (default MODEL_DIR/moestream.pack when present): the\n"
        "                       trunk is read from it, ~0.75 of the bytes, same bits   --no-pack\n"
        "  --stages L1,L2,...   under mpirun -np N (a pipeline across machines: run, chat, batch,\n"
        "                       perplexity, serve, tokenize): the layers where stages 1..N-1 begin;\n"
        "                       default: equal bytes per token per stage. Every process reads its\n"
        "                       own MODEL_DIR under its own --ram; the output bits are one process's\n"
        "  --stage-groups N     a pipeline's passes of several sequences (batch, serve --parallel) go\n"
        "                       through the stages in up to N groups at once (default: one per stage\n"
        "                       when every stage holds its trunk in RAM, else 1)\n"
        "\n"
        "exit codes: 0 ok, 1 runtime failure, 2 usage or invalid model, 4 output unsound\n");
}

/* ------------------------------------------------------------------------ */

int cli_parse_common(cli_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(a, "--quiet")) { o->quiet = 1; return 1; }
    if (!strcmp(a, "--no-readahead")) { o->no_readahead = 1; return 1; }
    if (!strcmp(a, "--no-predict-experts")) { o->no_predict_experts = 1; return 1; }
    if (!strcmp(a, "--predict-experts")) { o->no_predict_experts = 0; return 1; }   /* the default */
    if (!strcmp(a, "--no-verify")) { o->no_verify = 1; return 1; }
    if (!strcmp(a, "--no-pack")) { o->no_pack = 1; return 1; }
    if (!strcmp(a, "--sums") || !strcmp(a, "--pack") || !strcmp(a, "--stages") || !strcmp(a, "--kernels")) {
        if (!v) { fprintf(stderr, "moestream: %s needs a value\n", a); return -1; }
        (*i)++;
        if (!strcmp(a, "--sums")) o->sums_path = v;
        else if (!strcmp(a, "--pack")) o->pack_path = v;
        else if (!strcmp(a, "--kernels")) o->kernels = v;
        else o->stages = v;
        return 1;
    }
    if (!strcmp(a, "--io") || !strcmp(a, "--cache") || !strcmp(a, "--trace") || !strcmp(a, "--fault") ||
        !strcmp(a, "--trunk-ram") || !strcmp(a, "--expert-ram") || !strcmp(a, "--queue-depth") ||
        !strcmp(a, "--prompt-cache-ram")) {
        if (!v) { fprintf(stderr, "moestream: %s needs a value\n", a); return -1; }
        (*i)++;
        if (!strcmp(a, "--io")) o->io_backend = v;
        else if (!strcmp(a, "--cache")) o->cache_policy = v;
        else if (!strcmp(a, "--trace")) o->trace_path = v;
        else if (!strcmp(a, "--queue-depth")) o->io_queue_depth = atoi(v);
        else if (!strcmp(a, "--fault")) {
            /* KIND:N - inject a fault into the N-th read request (tests) */
            static const char *kinds[] = { "none", "eio", "transient", "short", "corrupt" };
            const char *colon = strchr(v, ':');
            o->fault_kind = -1;
            for (int k = 0; colon && k < 5; k++)
                if ((size_t)(colon - v) == strlen(kinds[k]) && !strncmp(v, kinds[k], (size_t)(colon - v))) o->fault_kind = k;
            if (o->fault_kind < 0) { fprintf(stderr, "moestream: bad --fault '%s' (KIND:N, KIND = eio|transient|short|corrupt)\n", v); return -1; }
            o->fault_at_read = strtoll(colon + 1, NULL, 10);
        } else {
            int64_t b = cli_parse_size(v);
            if (!strcmp(a, "--prompt-cache-ram") && b >= 0) { o->prompt_cache = b ? b : MS_PROMPT_CACHE_OFF; return 1; }
            if (b <= 0) { fprintf(stderr, "moestream: bad %s '%s'\n", a, v); return -1; }
            if (!strcmp(a, "--trunk-ram")) o->trunk_bytes = b; else o->expert_bytes = b;
        }
        return 1;
    }
    /* integer options: name, range, where */
    static const struct { const char *name, *what; long lo, hi; } ints[] = {
        { "--chunk", "N", 1, 65536 }, { "--stage-groups", "N", 0, 64 }, { "--parallel", "N", 1, 64 },
        { "--speculate", "K", 0, 31 } };
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        if (strcmp(a, ints[k].name)) continue;
        char *end;
        const long x = v ? strtol(v, &end, 10) : -1;
        if (!v || *end || x < ints[k].lo || x > ints[k].hi) {
            fprintf(stderr, "moestream: %s needs %s in [%ld, %ld]\n", a, ints[k].what, ints[k].lo, ints[k].hi);
            return -1;
        }
        (*i)++;
        if (k == 0) o->chunk = x;
        else if (k == 1) o->stage_groups = (int)x;
        else if (k == 2) o->parallel = (int)x;
        else o->speculate = (int)x;
        return 1;
    }
    if (!strcmp(a, "--threads") || !strcmp(a, "--ram") || !strcmp(a, "--max-context")) {
        if (!v) { fprintf(stderr, "moestream: %s needs a value\n", a); return -1; }
        (*i)++;
        if (!strcmp(a, "--threads")) {
            char *end;
            long t = strtol(v, &end, 10);
            if (*end || t < 1 || t > 1024) { fprintf(stderr, "moestream: bad --threads '%s'\n", v); return -1; }
            o->threads = (int)t;
        } else if (!strcmp(a, "--ram")) {
            o->ram = cli_parse_ram(v);
            if (o->ram < 0 && o->ram != MS_RAM_MIN) {
                fprintf(stderr, "moestream: bad --ram '%s' (a size like 8G or 512M; min, auto or all)\n", v);
                return -1;
            }
        } else {
            char *end;
            long long t = strtoll(v, &end, 10);
            if (*end || t < 1) { fprintf(stderr, "moestream: bad --max-context '%s'\n", v); return -1; }
            o->max_context = t;
        }
        return 1;
    }
    if (a[0] != '-') {
        if (o->model_dir) { fprintf(stderr, "moestream: unexpected argument '%s'\n", a); return -1; }
        o->model_dir = a;
        return 1;
    }
    return 0;
}

ms_status cli_open(const cli_opts *o, ms_engine **e) {
    if (!o->model_dir) { fprintf(stderr, "moestream: MODEL_DIR is missing\n"); return MS_E_USAGE; }
    ms_engine_params ep = ms_engine_default_params();
    ep.model_dir = o->model_dir;
    ep.n_threads = o->threads;
    ep.ram_bytes = o->ram;
    ep.max_context = o->max_context;
    ep.trunk_bytes = o->trunk_bytes;
    ep.prompt_cache_bytes = o->prompt_cache;
    ep.expert_bytes = o->expert_bytes;
    ep.io_backend = o->io_backend;
    ep.io_queue_depth = o->io_queue_depth;
    ep.cache_policy = o->cache_policy;
    ep.kernels = o->kernels;
    ep.no_readahead = o->no_readahead;
    ep.trace_path = o->trace_path;
    ep.no_predict_experts = o->no_predict_experts;
    ep.fault_kind = o->fault_kind;
    ep.fault_at_read = o->fault_at_read;
    ep.sums_path = o->sums_path;
    ep.no_verify = o->no_verify;
    ep.pack_path = o->pack_path;
    ep.no_pack = o->no_pack;
    ep.max_draft = o->speculate;
    ep.n_seq = o->parallel;
    ep.prefill_chunk = o->chunk;
    ep.log = o->quiet ? NULL : cli_log;
    ep.log_level = MS_LOG_WARN;
    ep.stages = o->stages;
    ep.stage_groups = o->stage_groups;
    ms_pipe_serve_if_worker(&ep);           /* a pipeline's stage r > 0 serves and ends here */
    char msg[1024];
    ms_status st = ms_engine_open(&ep, e, msg, sizeof msg);
    if (st != MS_OK) fprintf(stderr, "moestream: %s\n", msg);
    return st;
}

/* ------------------------------------------------------------------------ */
/* run                                                                       */

typedef struct run_opts {
    cli_opts c;
    const char *ids, *prompt, *prompt_file, *dump_logits, *save, *load;
    int64_t n_gen;
    int json, recompute, ignore_eos;
    ms_sample_params sp;
} run_opts;

static int parse_run(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_gen = 64;
    o->sp = ms_sample_default_params();
    for (int i = 0; i < argc; i++) {
        int r = cli_parse_common(&o->c, argc, argv, &i);
        if (r < 0) return -1;
        if (r > 0) continue;
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if ((r = cli_parse_sample(&o->sp, a, v)) != 0) {
            if (r < 0) return -1;
            i++;
            continue;
        }
#define NEED() do { if (!v) { fprintf(stderr, "moestream: %s needs a value\n", a); return -1; } i++; } while (0)
        if (!strcmp(a, "--ids")) { NEED(); o->ids = v; }
        else if (!strcmp(a, "--prompt")) { NEED(); o->prompt = v; }
        else if (!strcmp(a, "--prompt-file")) { NEED(); o->prompt_file = v; }
        else if (!strcmp(a, "--gen") || !strcmp(a, "--max-tokens")) {
            NEED();
            char *end;
            o->n_gen = strtoll(v, &end, 10);
            if (*end || o->n_gen < 0) { fprintf(stderr, "moestream: bad %s '%s'\n", a, v); return -1; }
        }
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--recompute")) o->recompute = 1;
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = 1;
        else if (!strcmp(a, "--dump-logits")) { NEED(); o->dump_logits = v; }
        else if (!strcmp(a, "--save-session")) { NEED(); o->save = v; }
        else if (!strcmp(a, "--load-session")) { NEED(); o->load = v; }
        else { fprintf(stderr, "moestream: unknown option '%s'\n", a); return -1; }
#undef NEED
    }
    int n_inputs = (o->ids != NULL) + (o->prompt != NULL) + (o->prompt_file != NULL);
    if (n_inputs > 1) { fprintf(stderr, "moestream: give one of --ids, --prompt, --prompt-file\n"); return -1; }
    return 0;
}

static void print_ids(FILE *f, const int32_t *ids, int64_t n) {
    fputc('[', f);
    for (int64_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", ids[i]);
    fputc(']', f);
}

void cli_print_stats_json(FILE *f, const ms_stats *st) {
    int64_t n_tok = st->n_tokens_decode + st->n_tokens_prefill;
    double s_per_tok = st->n_tokens_decode ? st->decode_s / (double)st->n_tokens_decode : 0.0;
    fprintf(f, "{\"cached_tokens\": %lld, \"prompt_cache_hits\": %lld, \"prompt_cache_bytes\": %lld, ",
            (long long)st->prompt_tokens_reused, (long long)st->prompt_cache_hits, (long long)st->prompt_cache_bytes);
    fprintf(f, "\"prefill_tokens\": %lld, \"prefill_s\": %.6f, \"decode_tokens\": %lld, "
            "\"decode_s\": %.6f, \"s_per_token\": %.6f, \"bytes_read\": %lld, \"trunk_bytes_read\": %lld, "
            "\"expert_bytes_read\": %lld, \"bytes_read_per_token\": %.1f, \"reads_issued\": %lld, "
            "\"expert_requests\": %lld, \"expert_hits\": %lld, \"io_wait_s\": %.6f, "
            "\"io_busy_s\": %.6f, \"io_inflight_s\": %.6f, "
            "\"scale255_groups\": %lld, \"readahead_issued\": %lld, \"readahead_used\": %lld, "
            "\"prefetch_issued\": %lld, \"prefetch_hits\": %lld, \"peak_rss_bytes\": %lld, "
            "\"verify\": %s, \"verify_bytes\": %lld, \"verify_retries\": %lld, \"verify_failures\": %lld, "
            "\"verify_s\": %.6f, \"verify_sync_s\": %.6f, \"decode_passes\": %lld, \"drafted\": %lld, \"accepted\": %lld, "
            "\"pack\": %s, \"packed_regions\": %lld, \"trunk_packed_read\": %lld, \"trunk_unpacked_bytes\": %lld, \"unpack_s\": %.6f, "
            "\"pack_fallbacks\": %lld, \"stage_bytes_read\": [",
            (long long)st->n_tokens_prefill, st->prefill_s, (long long)st->n_tokens_decode,
            st->decode_s, s_per_tok, (long long)(st->trunk_bytes_read + st->expert_bytes_read),
            (long long)st->trunk_bytes_read, (long long)st->expert_bytes_read,
            n_tok ? (double)(st->trunk_bytes_read + st->expert_bytes_read) / (double)n_tok : 0.0,
            (long long)st->reads_issued, (long long)st->expert_requests, (long long)st->expert_hits,
            st->io_wait_s, st->io_busy_s, st->io_inflight_s, (long long)st->scale255_groups,
            (long long)st->readahead_issued,
            (long long)st->readahead_used, (long long)st->prefetch_issued, (long long)st->prefetch_hits,
            (long long)st->peak_rss_bytes, st->verify_on ? "true" : "false", (long long)st->verify_bytes,
            (long long)st->verify_retries, (long long)st->verify_failures, st->verify_s, st->verify_sync_s,
            (long long)st->spec_passes, (long long)st->spec_drafted, (long long)st->spec_accepted,
            st->pack_on ? "true" : "false", (long long)st->packed_regions, (long long)st->trunk_packed_read,
            (long long)st->trunk_unpacked_bytes,
            st->unpack_s, (long long)st->pack_fallbacks);
    /* a pipeline's bytes per stage (each process reads its own disk) */
    for (int r = 0; r < st->n_stages; r++)
        fprintf(f, "%s{\"trunk\": %lld, \"experts\": %lld, \"peak_rss\": %lld}", r ? ", " : "",
                (long long)st->stage_trunk_bytes[r], (long long)st->stage_expert_bytes[r],
                (long long)st->stage_peak_rss[r]);
    fputs("]}", f);
}

void cli_print_stats_human(FILE *f, const ms_stats *st) {
    double s_per_tok = st->n_tokens_decode ? st->decode_s / (double)st->n_tokens_decode : 0.0;
    fprintf(f, "moestream: prefill %lld tokens in %.3f s; decode %lld tokens, %.4f s/token; "
            "read %.1f MB (trunk %.1f, experts %.1f) in %lld reads; expert hits %lld/%lld; "
            "read-ahead used %lld/%lld; I/O wait %.3f s; peak RSS %.1f MB\n",
            (long long)st->n_tokens_prefill, st->prefill_s, (long long)st->n_tokens_decode, s_per_tok,
            (double)(st->trunk_bytes_read + st->expert_bytes_read) / 1e6,
            (double)st->trunk_bytes_read / 1e6, (double)st->expert_bytes_read / 1e6,
            (long long)st->reads_issued, (long long)st->expert_hits, (long long)st->expert_requests,
            (long long)st->readahead_used, (long long)st->readahead_issued,
            st->io_wait_s, (double)st->peak_rss_bytes / 1e6);
    if (st->verify_on)
        fprintf(f, "moestream: verified %.1f MB (since open) in %.3f s (%.3f s on the compute thread); "
                "checksum retries %lld, failures %lld\n",
                (double)st->verify_bytes / 1e6, st->verify_s, st->verify_sync_s, (long long)st->verify_retries,
                (long long)st->verify_failures);
    if (st->pack_on)
        fprintf(f, "moestream: packed trunk: %lld regions; %.1f MB read stood for %.1f MB of the checkpoint;"
                " decoded in %.3f s (I/O threads); fallbacks %lld\n", (long long)st->packed_regions,
                (double)st->trunk_bytes_read / 1e6,
                (double)(st->trunk_bytes_read - st->trunk_packed_read + st->trunk_unpacked_bytes) / 1e6,
                st->unpack_s, (long long)st->pack_fallbacks);
    if (st->spec_drafted > 0)
        fprintf(f, "moestream: speculation: %lld tokens in %lld passes (%.2f per pass); drafted %lld, accepted %lld (%.1f%%); "
                "read per token %.1f MB (trunk %.1f, experts %.1f)\n",
                (long long)st->n_tokens_decode, (long long)st->spec_passes,
                st->spec_passes ? (double)st->n_tokens_decode / (double)st->spec_passes : 0.0,
                (long long)st->spec_drafted, (long long)st->spec_accepted,
                100.0 * (double)st->spec_accepted / (double)st->spec_drafted,
                st->n_tokens_decode ? (double)(st->trunk_bytes_read + st->expert_bytes_read) / 1e6 / (double)st->n_tokens_decode : 0.0,
                st->n_tokens_decode ? (double)st->trunk_bytes_read / 1e6 / (double)st->n_tokens_decode : 0.0,
                st->n_tokens_decode ? (double)st->expert_bytes_read / 1e6 / (double)st->n_tokens_decode : 0.0);
}

/* Streams decoded text: holds back a trailing incomplete UTF-8 sequence. */
void cli_text_init(cli_text *t) { memset(t, 0, sizeof *t); }

void cli_text_add(cli_text *t, const ms_engine *e, int32_t id, FILE *out) {
    const char *b;
    int64_t n = ms_token_bytes(e, id, &b);
    if (n <= 0) return;
    if (t->n + (size_t)n + 1 > t->cap) {
        size_t cap = (t->n + (size_t)n + 1) * 2;
        char *p = realloc(t->all, cap);
        if (!p) return;
        t->all = p;
        t->cap = cap;
    }
    memcpy(t->all + t->n, b, (size_t)n);
    t->n += (size_t)n;
    t->all[t->n] = '\0';
    if (out) {
        size_t ready = cli_utf8_complete(t->all, t->n);
        if (ready > t->printed) {
            fwrite(t->all + t->printed, 1, ready - t->printed, out);
            fflush(out);
            t->printed = ready;
        }
    }
}

void cli_text_flush(cli_text *t, FILE *out) {
    if (out && t->n > t->printed) fwrite(t->all + t->printed, 1, t->n - t->printed, out);
    t->printed = t->n;
    if (out) fflush(out);
}

static int cmd_run(int argc, char **argv) {
    run_opts o;
    if (parse_run(argc, argv, &o) != 0) { usage(stderr); return EXIT_USAGE; }
    char *text = NULL;
    size_t text_len = 0;
    int text_mode = 0;
    if (o.prompt) { text = strdup(o.prompt); text_len = strlen(text); text_mode = 1; }
    else if (o.prompt_file) {
        FILE *f = fopen(o.prompt_file, "rb");
        if (!f || !(text = cli_read_all(f, &text_len))) {
            fprintf(stderr, "moestream: cannot read %s\n", o.prompt_file);
            if (f) fclose(f);
            return EXIT_USAGE;
        }
        fclose(f);
        text_mode = 1;
    } else if (!o.ids && !o.load) {
        if (isatty(0)) { fprintf(stderr, "moestream: run needs --prompt, --prompt-file, --ids or text on stdin\n"); return EXIT_USAGE; }
        if (!(text = cli_read_all(stdin, &text_len))) { fprintf(stderr, "moestream: cannot read stdin\n"); return EXIT_USAGE; }
        text_mode = 1;
    }
    int32_t *prompt = NULL;
    int64_t n_prompt = 0;
    if (o.ids) {
        n_prompt = cli_parse_ids(o.ids, &prompt);
        if (n_prompt <= 0) {
            fprintf(stderr, "moestream: --ids needs a comma-separated list of token ids\n");
            return EXIT_USAGE;
        }
    }
    if (o.c.max_context == 0) {
        o.c.max_context = 4096;
        if (o.ids && n_prompt + o.n_gen + 1 > 4096) o.c.max_context = n_prompt + o.n_gen + 1;
    }
    ms_engine *e;
    ms_status st = cli_open(&o.c, &e);
    if (st != MS_OK) { free(prompt); free(text); return cli_exit_code(st); }
    ms_model_info info;
    ms_engine_info(e, &info);
    if (text_mode) {
        if (!ms_engine_has_tokenizer(e)) {
            fprintf(stderr, "moestream: %s has no tokenizer (tiktoken.model); use --ids\n", o.c.model_dir);
            ms_engine_close(e); free(text);
            return EXIT_USAGE;
        }
        st = ms_tokenize(e, text, text_len, &prompt, &n_prompt);
        free(text);
        if (st != MS_OK) { fprintf(stderr, "moestream: tokenizing the prompt failed\n"); ms_engine_close(e); return EXIT_RUNTIME; }
    }
    char msg[256];
    ms_sampler *smp = ms_sampler_open(&o.sp, info.n_vocab, msg, sizeof msg);
    if (!smp) { fprintf(stderr, "moestream: %s\n", msg); ms_engine_close(e); free(prompt); return EXIT_USAGE; }
    ms_session *s;
    if ((st = ms_session_open(e, &s)) != MS_OK) {
        fprintf(stderr, "moestream: %s\n", ms_engine_error(e));
        ms_sampler_close(smp); ms_engine_close(e); free(prompt);
        return cli_exit_code(st);
    }
    int rc = EXIT_OK;
    if (o.load && (st = ms_session_load(s, o.load)) != MS_OK) {
        fprintf(stderr, "moestream: %s\n", ms_session_error(s));
        ms_session_close(s); ms_sampler_close(smp); ms_engine_close(e); free(prompt);
        return cli_exit_code(st);
    }
    if (n_prompt == 0 && !ms_session_logits(s)) {
        fprintf(stderr, "moestream: the prompt is empty\n");
        ms_session_close(s); ms_sampler_close(smp); ms_engine_close(e); free(prompt);
        return EXIT_USAGE;
    }
    const int32_t eos = (int32_t)info.eos_id;
    int64_t n_gen = 0;
    int32_t *gen = malloc((size_t)(o.n_gen + 1) * sizeof *gen);
    cli_text out;
    cli_text_init(&out);
    FILE *stream = (text_mode && !o.json) ? stdout : NULL;
    ms_engine_stats_reset(e);
    /* a prompt of its own goes through the prompt cache; after --load it continues the session */
    if (n_prompt > 0) st = o.load ? ms_session_feed(s, prompt, n_prompt, NULL) : ms_session_feed_prompt(s, prompt, n_prompt, NULL);
    /* the stop rules: the EOS of a text prompt, the --max-tokens limit */
    cli_pick rp = { smp, gen, 0, o.n_gen, eos, text_mode && !o.ignore_eos, 0 };
    int32_t pending = -1;                   /* chosen, not fed yet */
    int32_t *step = malloc((size_t)(o.c.speculate + 1) * sizeof *step);
    if (!gen || !step) st = MS_E_NOMEM;
    while (st == MS_OK && !rp.stopped && rp.n_gen < o.n_gen) {
        if (rp.n_gen == 0 && o.dump_logits) {
            const float *lg = ms_session_logits(s);
            FILE *f = fopen(o.dump_logits, "wb");
            if (!f || fwrite(lg, sizeof(float), (size_t)info.n_vocab, f) != (size_t)info.n_vocab) {
                fprintf(stderr, "moestream: cannot write %s\n", o.dump_logits);
                rc = EXIT_RUNTIME;
            }
            if (f) fclose(f);
        }
        if (o.recompute && pending >= 0) {
            int64_t n_all;
            const int32_t *all = ms_session_tokens(s, &n_all);
            int32_t *copy = malloc((size_t)(n_all + 1) * sizeof *copy);
            memcpy(copy, all, (size_t)n_all * sizeof *copy);
            copy[n_all] = pending;
            ms_session_reset(s);
            st = ms_session_feed(s, copy, n_all + 1, NULL);
            free(copy);
            pending = -1;
            if (st != MS_OK) break;
        }
        /* drafts past the length limit would only be thrown away */
        int64_t room = o.n_gen - rp.n_gen - 1;
        int n_draft = o.c.speculate < room ? o.c.speculate : (int)room;
        int64_t before = rp.n_gen, n_step = 0;
        st = ms_session_decode(s, pending, n_draft, cli_picker, &rp, step, &n_step);
        for (int64_t i = before; i < rp.n_gen; i++) {
            if (gen[i] == eos && rp.stop_eos) break;      /* raw --ids runs do not stop */
            if (text_mode || ms_engine_has_tokenizer(e)) cli_text_add(&out, e, gen[i], stream);
        }
        if (n_step > 0) pending = step[n_step - 1];
    }
    n_gen = rp.n_gen;
    free(step);
    cli_text_flush(&out, stream);
    if (stream) { fputc('\n', stream); fflush(stream); }
    if (st != MS_OK) {
        fprintf(stderr, "moestream: %s: %s\n", ms_status_name(st), ms_session_error(s));
        rc = cli_exit_code(st);
    }
    if (st == MS_OK && o.save) {
        /* the last generated token is not fed yet: feed it so the saved state is complete */
        if (n_gen > 0)
            st = ms_session_feed(s, &gen[n_gen - 1], 1, NULL);
        if (st == MS_OK) st = ms_session_save(s, o.save);
        if (st != MS_OK) { fprintf(stderr, "moestream: %s\n", ms_session_error(s)); rc = cli_exit_code(st); }
    }
    ms_stats stt;
    ms_engine_stats(e, &stt);
    if (o.json) {
        printf("{\"prompt_ids\": ");
        print_ids(stdout, prompt, n_prompt);
        printf(", \"generated_ids\": ");
        print_ids(stdout, gen, n_gen);
        if (ms_engine_has_tokenizer(e)) {
            printf(", \"text\": ");
            cli_json_string(stdout, out.all ? out.all : "", out.n);
        }
        ms_model_info mi;
        ms_engine_info(e, &mi);
        printf(", \"status\": \"%s\", \"prefill_chunk\": %lld, \"kernels\": \"%s\", \"stats\": ",
               ms_status_name(st), (long long)mi.prefill_chunk, mi.kernels);
        cli_print_stats_json(stdout, &stt);
        printf("}\n");
    } else if (!text_mode) {
        for (int64_t i = 0; i < n_gen; i++) printf("%s%d", i ? "," : "", gen[i]);
        printf("\n");
    }
    if (!o.c.quiet) cli_print_stats_human(stderr, &stt);
    free(out.all);
    free(gen);
    free(prompt);
    ms_session_close(s);
    ms_sampler_close(smp);
    ms_engine_close(e);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* tokenize, perplexity                                                      */

static int cmd_tokenize(int argc, char **argv) {
    cli_opts c;
    memset(&c, 0, sizeof c);
    int decode = 0;
    for (int i = 0; i < argc; i++) {
        int r = cli_parse_common(&c, argc, argv, &i);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        if (!strcmp(argv[i], "--decode")) decode = 1;
        else { fprintf(stderr, "moestream: unknown option '%s'\n", argv[i]); return EXIT_USAGE; }
    }
    c.quiet = 1;
    size_t len;
    char *in = cli_read_all(stdin, &len);
    if (!in) { fprintf(stderr, "moestream: cannot read stdin\n"); return EXIT_RUNTIME; }
    ms_engine *e;
    ms_status st = cli_open(&c, &e);
    if (st != MS_OK) { free(in); return cli_exit_code(st); }
    int rc = EXIT_OK;
    if (!ms_engine_has_tokenizer(e)) {
        fprintf(stderr, "moestream: %s has no tokenizer (tiktoken.model)\n", c.model_dir);
        rc = EXIT_USAGE;
    } else if (decode) {
        for (char *p = in; *p; p++) if (*p == '[' || *p == ']' || *p == '\n' || *p == '\t') *p = ' ';
        int32_t *ids;
        int64_t n = cli_parse_ids(in, &ids);
        char *txt;
        size_t tl;
        if (n < 0) { fprintf(stderr, "moestream: --decode reads a JSON array of ids\n"); rc = EXIT_USAGE; }
        else if (ms_detokenize(e, ids, n, &txt, &tl) != MS_OK) { fprintf(stderr, "moestream: bad token id\n"); rc = EXIT_USAGE; }
        else { fwrite(txt, 1, tl, stdout); free(txt); }
        free(ids);
    } else {
        int32_t *ids;
        int64_t n;
        if ((st = ms_tokenize(e, in, len, &ids, &n)) != MS_OK) { fprintf(stderr, "moestream: tokenize failed\n"); rc = EXIT_RUNTIME; }
        else { print_ids(stdout, ids, n); printf("\n"); free(ids); }
    }
    free(in);
    ms_engine_close(e);
    return rc;
}

/* perplexity: the text (or --ids) scored in one ms_session_score call, so
 * the engine takes it in its own prompt chunks (chosen for the budget), one
 * pass over the weights per chunk, and never holds [n, n_vocab] logits. */
static int cmd_perplexity(int argc, char **argv) {
    cli_opts c;
    memset(&c, 0, sizeof c);
    const char *file = NULL, *id_list = NULL;
    int64_t max_tokens = 0;
    for (int i = 0; i < argc; i++) {
        int r = cli_parse_common(&c, argc, argv, &i);
        if (r < 0) return EXIT_USAGE;
        if (r > 0) continue;
        if (!strcmp(argv[i], "--file") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(argv[i], "--ids") && i + 1 < argc) id_list = argv[++i];
        else if (!strcmp(argv[i], "--max-tokens") && i + 1 < argc) max_tokens = strtoll(argv[++i], NULL, 10);
        else { fprintf(stderr, "moestream: unknown option '%s'\n", argv[i]); return EXIT_USAGE; }
    }
    if (file && id_list) { fprintf(stderr, "moestream: give --file or --ids, not both\n"); return EXIT_USAGE; }
    int32_t *ids = NULL;
    int64_t n = 0;
    char *in = NULL;
    size_t len = 0;
    if (id_list) {
        if ((n = cli_parse_ids(id_list, &ids)) < 2) {
            fprintf(stderr, "moestream: --ids needs at least 2 comma-separated token ids\n");
            free(ids);
            return EXIT_USAGE;
        }
    } else {
        FILE *f = file ? fopen(file, "rb") : stdin;
        in = f ? cli_read_all(f, &len) : NULL;
        if (f && f != stdin) fclose(f);
        if (!in) { fprintf(stderr, "moestream: cannot read %s\n", file ? file : "stdin"); return EXIT_USAGE; }
    }
    ms_engine *e;
    ms_status st = cli_open(&c, &e);
    if (st != MS_OK) { free(in); free(ids); return cli_exit_code(st); }
    if (!id_list && (!ms_engine_has_tokenizer(e) || ms_tokenize(e, in, len, &ids, &n) != MS_OK || n < 2)) {
        fprintf(stderr, "moestream: need a tokenizer and at least 2 tokens of text\n");
        free(in); free(ids); ms_engine_close(e);
        return EXIT_USAGE;
    }
    free(in);
    if (max_tokens > 1 && n > max_tokens) n = max_tokens;
    double *lp = malloc((size_t)n * sizeof *lp);
    ms_session *s = NULL;
    int rc = EXIT_OK;
    ms_engine_stats_reset(e);
    if (!lp) { fprintf(stderr, "moestream: out of memory\n"); rc = EXIT_RUNTIME; }
    else if ((st = ms_session_open(e, &s)) != MS_OK) { fprintf(stderr, "moestream: %s\n", ms_engine_error(e)); rc = cli_exit_code(st); }
    else if ((st = ms_session_score(s, ids, n, lp, 0, NULL, NULL)) != MS_OK) { fprintf(stderr, "moestream: %s\n", ms_session_error(s)); rc = cli_exit_code(st); }
    else {
        double nll = 0.0;
        for (int64_t i = 1; i < n; i++) nll -= lp[i];
        const double mean = nll / (double)(n - 1);
        ms_model_info info;
        ms_stats sts;
        ms_engine_info(e, &info);
        ms_engine_stats(e, &sts);
        printf("{\"n_tokens\": %lld, \"nll\": %.10f, \"perplexity\": %.10f, \"prefill_chunk\": %lld, "
               "\"seconds\": %.3f, \"trunk_bytes_read\": %lld, \"expert_bytes_read\": %lld, "
               "\"peak_rss_bytes\": %lld}\n",
               (long long)n, mean, exp(mean), (long long)info.prefill_chunk, sts.prefill_s,
               (long long)sts.trunk_bytes_read, (long long)sts.expert_bytes_read, (long long)sts.peak_rss_bytes);
    }
    ms_session_close(s);
    free(lp);
    free(ids);
    ms_engine_close(e);
    return rc;
}

static int cmd_trace(int argc, char **argv) {
    const char *path = NULL, *policy = "all";
    int capacity = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--policy") && i + 1 < argc) policy = argv[++i];
        else if (!strcmp(argv[i], "--capacity") && i + 1 < argc) capacity = atoi(argv[++i]);
        else if (argv[i][0] != '-' && !path) path = argv[i];
        else { fprintf(stderr, "moestream: unknown option '%s'\n", argv[i]); return EXIT_USAGE; }
    }
    if (!path || capacity < 1) { fprintf(stderr, "moestream: trace TRACE_FILE --capacity SLOTS [--policy lru|s3fifo|belady|all]\n"); return EXIT_USAGE; }
    const char *all[] = { "lru", "s3fifo", "belady" };
    int n = !strcmp(policy, "all") ? 3 : 1;
    printf("policy    capacity   requests       hits   hit rate\n");
    for (int i = 0; i < n; i++) {
        const char *pol = n == 3 ? all[i] : policy;
        ms_trace_stats r;
        char msg[512];
        ms_status st = ms_trace_replay_file(path, pol, capacity, &r, msg, sizeof msg);
        if (st != MS_OK) { fprintf(stderr, "moestream: %s\n", msg); return cli_exit_code(st); }
        printf("%-8s %9d %10lld %10lld   %6.2f%%\n", pol, capacity, (long long)r.requests, (long long)r.hits, 100.0 * r.hit_rate);
    }
    return EXIT_OK;
}

static int cmd_verify(int argc, char **argv) {
    const char *dir = NULL, *sums = NULL;
    int write = 0, quiet = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--write")) write = 1;
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (!strcmp(argv[i], "--sums") && i + 1 < argc) sums = argv[++i];
        else if (argv[i][0] != '-' && !dir) dir = argv[i];
        else { fprintf(stderr, "moestream: verify: unknown option '%s'\n", argv[i]); return EXIT_USAGE; }
    }
    if (!dir) { fprintf(stderr, "moestream: verify MODEL_DIR [--sums PATH] [--write]\n"); return EXIT_USAGE; }
    ms_verify_result r;
    char msg[1024];
    /* mismatches are logged at error level: they are printed even with --quiet */
    ms_status st = ms_verify_checkpoint(dir, sums, write, cli_log, NULL, quiet ? MS_LOG_ERROR : MS_LOG_INFO,
                                        &r, msg, sizeof msg);
    if (st != MS_OK) {
        fprintf(stderr, "moestream: %s\n", msg);
        return st == MS_E_IO && !strstr(msg, "--sums") ? EXIT_RUNTIME : EXIT_USAGE;
    }
    const double gb = (double)r.bytes / 1e9, rate = r.seconds > 0 ? gb / r.seconds : 0.0;
    if (r.wrote) {
        char path[4200];
        snprintf(path, sizeof path, "%s/moestream.sums", dir);
        printf("wrote %s: %lld tensors, %lld blocks, %.3f GB hashed in %.2f s (%.2f GB/s)\n",
               sums ? sums : path, (long long)r.n_tensors, (long long)r.n_blocks, gb, r.seconds, rate);
        return EXIT_OK;
    }
    if (r.n_bad_tensors) {
        printf("MISMATCH: %lld tensors (%lld blocks) differ from the checksums; %.3f GB checked in %.2f s\n",
               (long long)r.n_bad_tensors, (long long)r.n_bad_blocks, gb, r.seconds);
        return EXIT_UNSOUND;
    }
    printf("ok: %lld tensors, %lld blocks, %.3f GB match the checksums (%.2f s, %.2f GB/s)\n",
           (long long)r.n_tensors, (long long)r.n_blocks, gb, r.seconds, rate);
    return EXIT_OK;
}

static int cmd_pack(int argc, char **argv) {
    const char *dir = NULL, *out = NULL, *sums = NULL;
    int quiet = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--sums") && i + 1 < argc) sums = argv[++i];
        else if (argv[i][0] != '-' && !dir) dir = argv[i];
        else { fprintf(stderr, "moestream: pack: unknown option '%s'\n", argv[i]); return EXIT_USAGE; }
    }
    if (!dir) { fprintf(stderr, "moestream: pack MODEL_DIR [--out PATH] [--sums PATH]\n"); return EXIT_USAGE; }
    ms_pack_result r;
    char msg[1024];
    ms_status st = ms_pack_checkpoint(dir, out, sums, cli_log, NULL, quiet ? MS_LOG_ERROR : MS_LOG_INFO,
                                      &r, msg, sizeof msg);
    if (st != MS_OK) { fprintf(stderr, "moestream: %s\n", msg); return cli_exit_code(st); }
    char path[4200];
    snprintf(path, sizeof path, "%s/moestream.pack", dir);
    const int64_t saved = r.packed_raw_bytes - r.packed_bytes;
    printf("wrote %s: %d of %d trunk regions packed, %.3f GB -> %.3f GB (%.4f of the packed regions;"
           " %.4f of the trunk) in %.2f s\n", out ? out : path, r.n_packed, r.n_regions,
           (double)r.packed_raw_bytes / 1e9, (double)r.packed_bytes / 1e9,
           r.packed_raw_bytes ? (double)r.packed_bytes / (double)r.packed_raw_bytes : 1.0,
           r.raw_bytes ? (double)(r.raw_bytes - saved) / (double)r.raw_bytes : 1.0, r.seconds);
    return EXIT_OK;
}

static int cmd_plan(int argc, char **argv) {
    cli_opts c;
    memset(&c, 0, sizeof c);
    int stages = 0;                         /* 0: the one-process plan; N: --pipeline N */
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--pipeline")) {
            char *end;
            long k = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
            if (k < 1 || k > MS_MAX_STAGES || *end) { fprintf(stderr, "moestream: --pipeline needs N in [1, %d]\n", MS_MAX_STAGES); return EXIT_USAGE; }
            stages = (int)k;
            i++;
            continue;
        }
        int r = cli_parse_common(&c, argc, argv, &i);
        if (r < 0) return EXIT_USAGE;
        if (r == 0) { fprintf(stderr, "moestream: unknown option '%s'\n", argv[i]); return EXIT_USAGE; }
    }
    if (!c.model_dir) { fprintf(stderr, "moestream: plan needs MODEL_DIR or a config.json\n"); return EXIT_USAGE; }
    static char buf[1 << 16];
    ms_status st = ms_plan_describe_stages(c.model_dir, c.ram, c.max_context, c.speculate, c.chunk, c.parallel, stages,
                                           c.stages, buf, sizeof buf);
    fputs(buf, st == MS_OK ? stdout : stderr);
    if (st == MS_E_BUDGET) fputs(buf, stdout);
    return cli_exit_code(st);
}

int main(int argc, char **argv) {
    if (ms_pipe_boot(&argc, &argv) != 0) return EXIT_RUNTIME;
    if (argc < 2) { usage(stderr); return EXIT_USAGE; }
    const char *cmd = argv[1];
    if (ms_pipe_size() > 1) {
        /* under mpirun: the commands that run the model run it as a pipeline */
        static const char *piped[] = { "run", "chat", "batch", "perplexity", "serve", "tokenize" };
        int ok = 0;
        for (size_t k = 0; k < sizeof piped / sizeof piped[0]; k++) ok |= !strcmp(cmd, piped[k]);
        if (!ok) {
            if (ms_pipe_rank() == 0)
                fprintf(stderr, "moestream: '%s' does not run as a pipeline (under mpirun); run it in each machine\n", cmd);
            return EXIT_USAGE;
        }
    }
    if (!strcmp(cmd, "run")) return cmd_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "perplexity")) return cmd_perplexity(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "trace")) return cmd_trace(argc - 2, argv + 2);
    if (!strcmp(cmd, "verify")) return cmd_verify(argc - 2, argv + 2);
    if (!strcmp(cmd, "pack")) return cmd_pack(argc - 2, argv + 2);
    if (!strcmp(cmd, "chat")) return cmd_chat(argc - 2, argv + 2);
    if (!strcmp(cmd, "batch")) return cmd_batch(argc - 2, argv + 2);
    if (!strcmp(cmd, "serve")) return ms_serve_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) { usage(stdout); return EXIT_OK; }
    fprintf(stderr, "moestream: unknown command '%s'\n", cmd);
    usage(stderr);
    return EXIT_USAGE;
}
