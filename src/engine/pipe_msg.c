/* engine/pipe_msg.c - the READY handshake of the pipeline across processes:
 * what a stage r > 0 reports after its open and stage 0's verdict on it
 * (engine/pipe_msg.h). No MPI here: engine/pipe.c sends and receives.
 * Does not: decide the pipeline's groups or close stages (pipe.c).
 */
#include "engine/pipe_msg.h"
#include "engine/prefix_cache.h"

#include <stdio.h>

uint64_t ms_pipe_sums_digest(const ms_engine *e) {
    return e->sums ? ms_sums_content_hash(e->sums) : 0;
}

int64_t ms_pipe_streamed(const ms_engine *e) {
    const ms_plan *p = ms_store_get_plan(e->store);
    return p ? p->streamed_region_bytes : 0;
}

void ms_pipe_ready_fill(ready *rd, const ms_engine *e, ms_status own, const char *msg) {
    memset(rd, 0, sizeof *rd);
    rd->status = own;
    if (own != MS_OK) {
        snprintf(rd->err, sizeof rd->err, "%s", msg ? msg : "");
        return;
    }
    rd->layer0 = e->stage_start[e->stage];
    rd->layer1 = e->stage_start[e->stage + 1];
    rd->chunk = e->p.prefill_chunk;
    rd->max_context = e->p.max_context;
    rd->max_draft = e->p.max_draft;
    rd->streamed = ms_pipe_streamed(e);
    rd->hash = e->model_hash;
    rd->sums = ms_pipe_sums_digest(e);
    rd->sample = e->weights_id.sample;
    rd->pcache_cap = ms_pcache_cap(e->pcache);
}

ms_status ms_pipe_ready_check(const ready *rd, int r, ms_engine *e, uint64_t sums, int64_t *streamed, char *b,
                              size_t len) {
    if (rd->status != MS_OK) {
        snprintf(b, len, "pipeline stage %d: %s", r, rd->err);
        return (ms_status)rd->status;
    }
    if (!e) return MS_OK;
    if (rd->hash != e->model_hash) {
        snprintf(b, len, "pipeline stage %d opened another checkpoint (config or tensor table differ)", r);
        return MS_E_MODEL;
    }
    const ms_weights_id theirs = { rd->sums, rd->sample }, ours = { sums, e->weights_id.sample };
    if (!ms_weights_id_same(theirs, ours)) {
        char x[96], y[96];
        snprintf(b, len, "pipeline stage %d's checkpoint holds other weights than stage 0's (the same tensor "
                 "table; stage %d: %s; stage 0: %s): every machine needs the same checkpoint", r, r,
                 ms_weights_id_str(theirs, x, sizeof x), ms_weights_id_str(ours, y, sizeof y));
        return MS_E_MODEL;
    }
    if (rd->layer0 != e->stage_start[r] || rd->layer1 != e->stage_start[r + 1]) {
        snprintf(b, len, "pipeline stage %d runs layers %d..%d, stage 0 expected %d..%d", r, rd->layer0,
                 rd->layer1 - 1, e->stage_start[r], e->stage_start[r + 1] - 1);
        return MS_E_INTERNAL;
    }
    if (rd->max_context != e->p.max_context || rd->max_draft != e->p.max_draft) {
        snprintf(b, len, "pipeline stage %d has max_context %lld and --speculate %d, stage 0 %lld and %d"
                 " (every stage holds part of each session: they must agree)", r, (long long)rd->max_context,
                 rd->max_draft, (long long)e->p.max_context, e->p.max_draft);
        return MS_E_USAGE;
    }
    if (rd->chunk < e->p.prefill_chunk) e->p.prefill_chunk = rd->chunk;    /* every stage's scratch holds the pass */
    ms_pcache_set_share(e->pcache, r, rd->pcache_cap);
    *streamed += rd->streamed;
    if (!sums != !rd->sums)
        ms_log(&e->log, MS_LOG_WARN, "pipeline stage %d has %s checksum sidecar and stage 0 %s: their weights "
               "were compared by sampled fingerprint only (moestream verify on every machine)", r,
               rd->sums ? "a" : "no", sums ? "has one" : "has none");
    return MS_OK;
}
