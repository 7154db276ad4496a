/* cli/common.c - what the subcommands of the moestream program share:
 * opening the engine from the common options, streaming decoded text, and
 * printing token ids and the run statistics.
 *
 * Owns: the mapping of cli_opts onto ms_engine_params (also used by `serve`),
 *   the two stats formats (the JSON object of --json and the human summary
 *   lines on stderr).
 * Does not: parse options (cli/opts.c), run a model.
 */
#include "moestream.h"

#include "cli/cmds.h"
#include "cli/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_engine_params(const cli_opts *o, ms_engine_params *ep_out) {
    ms_engine_params ep = ms_engine_default_params();
    ep.model_dir = o->model_dir;
    ep.n_threads = o->threads;
    ep.ram_bytes = o->ram;
    ep.max_context = o->max_context;
    ep.trunk_bytes = o->trunk_bytes;
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
    ep.draft_auto = o->speculate_auto;
    ep.draft_tree = o->draft_tree;
    ep.draft_pass_bytes = (double)o->draft_costs[0];
    ep.draft_token_bytes = (double)o->draft_costs[1];
    ep.draft_corpus = o->draft_corpus;
    ep.draft_model = o->draft_model;
    ep.n_seq = o->parallel;
    ep.prefill_chunk = o->chunk;
    ep.prompt_cache_bytes = o->prompt_cache;
    ep.prompt_cache_dir = o->prompt_cache_dir;
    ep.prompt_cache_disk_bytes = o->prompt_cache_size;
    ep.prompt_cache_fault_write = o->prompt_cache_fault;
    ep.log = o->quiet ? NULL : cli_log;
    ep.log_level = o->verbose ? MS_LOG_INFO : MS_LOG_WARN;
    ep.stages = o->stages;
    ep.stage_groups = o->stage_groups;
    *ep_out = ep;
}

ms_status cli_open(const cli_opts *o, ms_engine **e) {
    if (!o->model_dir) { fprintf(stderr, "moestream: MODEL_DIR is missing\n"); return MS_E_USAGE; }
    ms_engine_params ep;
    cli_engine_params(o, &ep);
    ms_pipe_serve_if_worker(&ep);           /* a pipeline's stage r > 0 serves and ends here */
    char msg[1024];
    ms_status st = ms_engine_open(&ep, e, msg, sizeof msg);
    if (st != MS_OK) fprintf(stderr, "moestream: %s\n", msg);
    return st;
}

void cli_print_ids(FILE *f, const int32_t *ids, int64_t n) {
    fputc('[', f);
    for (int64_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", ids[i]);
    fputc(']', f);
}

void cli_print_stats_json(FILE *f, const ms_stats *st) {
    int64_t n_tok = st->n_tokens_decode + st->n_tokens_prefill;
    double s_per_tok = st->n_tokens_decode ? st->decode_s / (double)st->n_tokens_decode : 0.0;
    fprintf(f, "{\"cached_tokens\": %lld, \"prompt_cache_hits\": %lld, \"prompt_cache_bytes\": %lld, "
            "\"prompt_disk_hits\": %lld, \"prompt_disk_writes\": %lld, \"prompt_disk_write_failures\": %lld, "
            "\"prompt_disk_rejected\": %lld, ",
            (long long)st->prompt_tokens_reused, (long long)st->prompt_cache_hits, (long long)st->prompt_cache_bytes,
            (long long)st->prompt_disk_hits, (long long)st->prompt_disk_writes, (long long)st->prompt_disk_write_failures,
            (long long)st->prompt_disk_rejected);
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
            "\"pack_fallbacks\": %lld, ",
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
    /* drafted / accepted tokens by the source of the draft */
    for (int k = 0; k < 2; k++) {
        fprintf(f, "\"%s_by_source\": {", k ? "accepted" : "drafted");
        for (int i = 0; i < MS_DRAFT_SOURCES; i++)
            fprintf(f, "%s\"%s\": %lld", i ? ", " : "", ms_draft_source_name(i),
                    (long long)(k ? st->spec_src_accepted[i] : st->spec_src_drafted[i]));
        fputs("}, ", f);
    }
    fprintf(f, "\"tree_passes\": %lld, \"tree_drafted\": %lld, \"tree_accepted\": %lld, ",
            (long long)st->spec_tree_passes, (long long)st->spec_tree_drafted, (long long)st->spec_tree_accepted);
    fprintf(f, "\"draft_model_tokens\": %lld, \"draft_model_s\": %.6f, ", (long long)st->draft_model_tokens,
            st->draft_model_s);
    fputs("\"stage_bytes_read\": [", f);
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
    if (st->prompt_cache_hits > 0 || st->prompt_disk_writes > 0 || st->prompt_disk_write_failures > 0 ||
        st->prompt_disk_rejected > 0)
        fprintf(f, "moestream: prompt cache: %lld tokens reused in %lld restores (%lld from disk); "
                "disk entries written %lld, failed %lld, refused %lld\n", (long long)st->prompt_tokens_reused,
                (long long)st->prompt_cache_hits, (long long)st->prompt_disk_hits, (long long)st->prompt_disk_writes,
                (long long)st->prompt_disk_write_failures, (long long)st->prompt_disk_rejected);
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
    if (st->spec_drafted > 0) {
        fprintf(f, "moestream: drafts accepted by source:");
        for (int i = 0; i < MS_DRAFT_SOURCES; i++)
            fprintf(f, "%s %s %lld/%lld", i ? "," : "", ms_draft_source_name(i), (long long)st->spec_src_accepted[i],
                    (long long)st->spec_src_drafted[i]);
        fputc('\n', f);
    }
    if (st->spec_tree_passes > 0)
        fprintf(f, "moestream: second branches: %lld passes verified one; accepted %lld/%lld of their drafted tokens\n",
                (long long)st->spec_tree_passes, (long long)st->spec_tree_accepted, (long long)st->spec_tree_drafted);
    if (st->draft_model_tokens > 0)
        fprintf(f, "moestream: draft model: %lld tokens fed in %.3f s\n", (long long)st->draft_model_tokens,
                st->draft_model_s);
}

/* ---- stop strings -------------------------------------------------------------- */

int cli_stop_add(cli_stop *st, const char *s, char *why, size_t why_len) {
    const size_t len = strlen(s);
    if (st->n >= CLI_MAX_STOP || len == 0 || len > CLI_MAX_STOP_BYTES) {
        snprintf(why, why_len, "up to %d non-empty strings of at most %d bytes", CLI_MAX_STOP, CLI_MAX_STOP_BYTES);
        return -1;
    }
    st->s[st->n++] = s;
    if (len > st->max_len) st->max_len = len;
    return 0;
}

int64_t cli_stop_find(const cli_stop *st, const char *text, size_t n, size_t from) {
    int64_t best = -1;
    for (int k = 0; st && k < st->n; k++) {
        const size_t len = strlen(st->s[k]);
        for (size_t p = from; p + len <= n; p++)
            if (!memcmp(text + p, st->s[k], len)) {
                if (best < 0 || (int64_t)p < best) best = (int64_t)p;
                break;
            }
    }
    return best;
}

/* ---- decoded text ----------------------------------------------------------------- */

/* Streams decoded text: holds back a trailing incomplete UTF-8 sequence and, with stop
 * strings, the bytes a stop string could still begin with (the longest one less a byte);
 * a stop string found ends the text where it begins. */
void cli_text_init(cli_text *t) { memset(t, 0, sizeof *t); t->cut = -1; }

void cli_text_add(cli_text *t, const ms_engine *e, int32_t id, FILE *out) {
    const char *b;
    int64_t n = ms_token_bytes(e, id, &b);
    if (n <= 0 || t->cut >= 0) return;
    if (t->n + (size_t)n + 1 > t->cap) {
        size_t cap = (t->n + (size_t)n + 1) * 2;
        char *p = realloc(t->all, cap);
        if (!p) return;
        t->all = p;
        t->cap = cap;
    }
    memcpy(t->all + t->n, b, (size_t)n);
    const size_t before = t->n;
    t->n += (size_t)n;
    t->all[t->n] = '\0';
    size_t limit = t->n;
    if (t->stop && t->stop->n > 0) {
        const size_t from = before + 1 > t->stop->max_len ? before + 1 - t->stop->max_len : 0;
        t->cut = cli_stop_find(t->stop, t->all, t->n, from);
        limit = t->cut >= 0 ? (size_t)t->cut : t->n + 1 > t->stop->max_len ? t->n + 1 - t->stop->max_len : 0;
    }
    if (out) {
        size_t ready = cli_utf8_complete(t->all, limit);
        if (ready > t->printed) {
            fwrite(t->all + t->printed, 1, ready - t->printed, out);
            fflush(out);
            t->printed = ready;
        }
    }
}

void cli_text_flush(cli_text *t, FILE *out) {
    const size_t end = t->cut >= 0 ? (size_t)t->cut : t->n;
    if (out && end > t->printed) fwrite(t->all + t->printed, 1, end - t->printed, out);
    t->printed = end;
    if (out) fflush(out);
}
