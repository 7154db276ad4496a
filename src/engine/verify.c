/* engine/verify.c - ms_verify_checkpoint (include/moestream.h): build, write
 * or check the checksum sidecar of a checkpoint (format/sums.h).
 * The sidecar covers the metadata files the engine reads too
 * (ms_sums_meta_files); a check also reports a packed trunk beside the
 * checkpoint that a run would ignore (stale).
 *
 * Reads the shard headers (ms_ckpt_open), then either hashes every tensor and
 * writes the sidecar atomically, or loads the sidecar, re-hashes every block
 * and logs each tensor whose blocks differ. No config, model or store is
 * involved: this works on any checkpoint the safetensors reader accepts.
 */
#include "moestream.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "format/pack.h"
#include "format/safetensors.h"
#include "format/sums.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct bad_ctx { const ms_logger *log; const ms_sums *sums; } bad_ctx;

static void report_bad(void *user, const ms_tensor_info *t, const char *file, int64_t begin,
                       int64_t end, int64_t n_bad) {
    const bad_ctx *c = user;
    ms_log(c->log, MS_LOG_ERROR, "%s: tensor '%s' bytes [%lld, %lld) of the file: checksum mismatch (%s), %lld of %lld blocks",
           file, t->name, (long long)begin, (long long)end, MS_SUMS_FILE, (long long)n_bad,
           (long long)((t->n_bytes + MS_SUMS_BLOCK_BYTES - 1) / MS_SUMS_BLOCK_BYTES));
}

/* The packed trunk beside the checkpoint, when there is one, against the
 * checkpoint and the sidecar just checked: a pack a run would ignore (packed
 * from other shards or another sidecar, or damaged) is reported with a
 * warning; the run's output does not depend on it. */
static void check_pack(const char *model_dir, const ms_ckpt *ck, const ms_sums *sums, const ms_logger *lg) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", model_dir, MS_PACK_FILE);
    if (access(path, F_OK) != 0) return;
    ms_err e;
    ms_err_clear(&e);
    ms_pack *pk = NULL;
    if (ms_pack_load(path, ck, sums, &pk, &e) == MS_OK)
        ms_log(lg, MS_LOG_INFO, "%s: packed from these checksums (%lld regions)", path, (long long)ms_pack_n_entries(pk));
    else
        ms_log(lg, MS_LOG_WARN, "stale pack: a run ignores it: %s", e.msg);
    ms_pack_free(pk);
}

ms_status ms_verify_checkpoint(const char *model_dir, const char *sums_path, int write,
                               ms_log_fn log, void *log_user, ms_log_level log_level,
                               ms_verify_result *out, char *errbuf, size_t errbuf_len) {
    memset(out, 0, sizeof *out);
    const ms_logger lg = { log, log_user, log_level };
    ms_err err;
    ms_err_clear(&err);
    ms_ckpt *ck = NULL;
    ms_sums *sums = NULL;
    const double t0 = ms_now_s();
    char path[4200];
    ms_status st;
    if (!model_dir) { st = ms_err_set(&err, MS_E_USAGE, "no model directory given"); goto done; }
    snprintf(path, sizeof path, "%s/%s", model_dir, MS_SUMS_FILE);
    if (sums_path) snprintf(path, sizeof path, "%s", sums_path);
    if ((st = ms_ckpt_open(model_dir, &ck, &err)) != MS_OK) goto done;
    out->n_tensors = ms_ckpt_n_tensors(ck);
    for (int64_t i = 0; i < out->n_tensors; i++) out->bytes += ms_ckpt_tensor(ck, i)->n_bytes;
    if (write || access(path, F_OK) != 0) {
        ms_log(&lg, MS_LOG_INFO, "hashing %lld tensors (%.1f GB) of %s into %s", (long long)out->n_tensors,
               (double)out->bytes / 1e9, model_dir, path);
        if ((st = ms_sums_build(ck, &lg, &sums, &err)) != MS_OK) goto done;
        if ((st = ms_sums_hash_meta(sums, model_dir, &err)) != MS_OK) goto done;
        if ((st = ms_sums_write(sums, path, &err)) != MS_OK) {
            ms_err e2;
            ms_err_clear(&e2);
            ms_err_set(&e2, st, "%s; write the sidecar elsewhere with --sums PATH (and pass the same"
                       " --sums PATH to run)", err.msg);
            err = e2;
            goto done;
        }
        out->wrote = 1;
    } else {
        if ((st = ms_sums_load(path, ck, &sums, &err)) != MS_OK) goto done;
        ms_log(&lg, MS_LOG_INFO, "checking %lld tensors (%.1f GB) of %s against %s", (long long)out->n_tensors,
               (double)out->bytes / 1e9, model_dir, path);
        bad_ctx bc = { &lg, sums };
        if ((st = ms_sums_compare(sums, &lg, report_bad, &bc, &out->n_bad_tensors, &out->n_bad_blocks, &err)) != MS_OK)
            goto done;
        int n_bad = 0;
        if ((st = ms_sums_check_meta(sums, model_dir, &lg, &n_bad, &err)) != MS_OK) goto done;
        out->n_bad_files = n_bad;
        check_pack(model_dir, ck, sums, &lg);
    }
    out->n_blocks = ms_sums_n_blocks(sums);
done:
    out->seconds = ms_now_s() - t0;
    if (st != MS_OK && errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "%s", err.msg);
    ms_sums_free(sums);
    ms_ckpt_close(ck);
    return st;
}
