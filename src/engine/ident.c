/* engine/ident.c - the identity of the weights an engine opened
 * (ms_weights_identity, engine_int.h).
 *
 * Owns: the sampled fingerprint of a checkpoint and the comparison of two
 *   identities. What is hashed is documented in docs/SECURITY.md, "Identity
 *   of the weights".
 * Idea: a saved session, a pipeline stage and a prompt-cache entry on disk
 *   (engine/prefix_disk.c) only make sense with the weights that computed them. With a
 *   checksum sidecar every weight byte is named by its digest (the XXH3-64 of
 *   its block hashes, ms_sums_content_hash). Without one the engine cannot
 *   afford to hash 1.5 TB at open, so it samples: per shard its name, its
 *   size and its first and last 4 KiB, then the tensor table's hash. That
 *   catches another download, a truncated copy or another revision; it does
 *   not catch one byte changed in the middle of a shard (the sidecar does).
 * Invariants: both values are computed once at open and never change;
 *   sample is never 0 for an opened engine (0 means "unknown").
 * Does not: read anything but the first and last 4 KiB of each shard.
 */
#include "engine/engine_int.h"

#include "base/file.h"
#include "format/le.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define SAMPLE_BYTES 4096

ms_status ms_weights_fingerprint(const ms_ckpt *ck, uint64_t *out, ms_err *err) {
    *out = 0;
    XXH3_state_t *x = XXH3_createState();
    if (!x) return ms_err_set(err, MS_E_NOMEM, "out of memory");
    XXH3_64bits_reset(x);
    XXH3_64bits_update(x, "moestream weights sample 1", 27);
    uint8_t w[8], buf[SAMPLE_BYTES];
    const int ns = ms_ckpt_n_shards(ck);
    ms_put64(w, (uint64_t)ns);
    XXH3_64bits_update(x, w, 8);
    ms_status st = MS_OK;
    for (int i = 0; i < ns && st == MS_OK; i++) {
        const ms_shard_info *sh = ms_ckpt_shard(ck, i);
        int fd;
        int64_t size;
        if ((st = ms_file_open(sh->path, INT64_MAX, &fd, &size, err)) != MS_OK) break;
        XXH3_64bits_update(x, sh->file, strlen(sh->file) + 1);
        ms_put64(w, (uint64_t)size);
        XXH3_64bits_update(x, w, 8);
        const int64_t n = size < SAMPLE_BYTES ? size : SAMPLE_BYTES;
        st = ms_file_pread_full(fd, buf, (size_t)n, 0, sh->path, err);
        if (st == MS_OK) XXH3_64bits_update(x, buf, (size_t)n);
        if (st == MS_OK) st = ms_file_pread_full(fd, buf, (size_t)n, size - n, sh->path, err);
        if (st == MS_OK) XXH3_64bits_update(x, buf, (size_t)n);
        close(fd);
    }
    ms_put64(w, ms_sums_table_hash(ck));
    XXH3_64bits_update(x, w, 8);
    const uint64_t h = XXH3_64bits_digest(x);
    XXH3_freeState(x);
    if (st == MS_OK) *out = h ? h : 1;
    return st;
}

ms_weights_id ms_weights_identity(const ms_engine *e) { return e->weights_id; }

int ms_weights_id_same(ms_weights_id a, ms_weights_id b) {
    if (a.sums && b.sums) return a.sums == b.sums;
    return a.sample == b.sample;
}

const char *ms_weights_id_str(ms_weights_id id, char *buf, size_t len) {
    if (id.sums)
        snprintf(buf, len, "sums %016llx, sampled %016llx", (unsigned long long)id.sums, (unsigned long long)id.sample);
    else
        snprintf(buf, len, "sampled %016llx, no sidecar", (unsigned long long)id.sample);
    return buf;
}
