/* tests/test_budget.c - the same logits bits at every RAM budget, I/O backend
 * and cache policy, and faults that never produce a silent wrong token.
 *
 * For tiny models a and c (K3) and oss_b (gpt-oss) of $MS_TESTDATA (keep_last: a and c;
 * floor_guesses: oss_c):
 *   - the budget ladder: the trunk and expert shares from the floor (nothing
 *     pinned, the minimum ring, the minimum expert cache) through part of the
 *     trunk pinned, all of it pinned with a tiny expert cache, to everything
 *     resident; at each rung every I/O backend, both cache policies, read-ahead
 *     on and off, expert prediction on (io_uring runs: token by token with LRU, in
 *     chunks with S3-FIFO): teacher-forced logits of every position BIT-identical to the
 *     everything-resident run; byte counters consistent with the plan (0 trunk
 *     bytes when resident, > 0 when streamed);
 *   - scoring (ms_session_score) at every rung: log-probability bits equal to
 *     ms_logprob on the resident logits, in one call or two, any chunk and
 *     thread count; ms_logprob against a two-pass log-softmax (score_ladder);
 *   - faults: for every read index of a short streamed run, an injected EIO,
 *     short read and transient failure: the run either completes with the
 *     same bits or fails with MS_E_UNSOUND and a message naming the layer
 *     (or the open fails) - never a different result with MS_OK;
 *   - silent corruption (fault kind 4: bytes of one request flipped after a
 *     successful read) at every read index, with a checksum sidecar written
 *     for the test (not into the model directory): every run must give the
 *     same bits (the corruption is transient, so the store's one re-read
 *     cures it) and the loop must have re-read something (verify_retries >
 *     0), both with the corrupt window at the start of the request and at the
 *     offset of an expert's first scale tensor inside its region (there it
 *     flips `...experts.N.w1.weight_scale` bytes of expert reads);
 *   - the expert predictor at the floor (floor_guesses): where the routers
 *     are small regions, which every plan pins (oss_c), it guesses at the end
 *     of every layer, before the next layer's attention is read, with the
 *     resident run's bits;
 *   - the predictor on a prompt chunk (chunk_guesses): the next layer's
 *     guesses at the end of each layer, with the resident run's bits.
 */
#include "moestream.h"

#include "check.h"
#include "engine/engine_int.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "format/sums.h"
#include "model/model.h"
#include "store/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct shape {
    int64_t ring_floor;         /* two slots of the largest trunk region */
    int64_t trunk_all;          /* every trunk region pinned */
    int64_t expert_slot, expert_all;
    int64_t k;
    int64_t n_layer;
} shape;

static int model_shape(const char *dir, shape *sh) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    ms_config cfg;
    ms_err err;
    ms_err_clear(&err);
    if (ms_config_load(path, &cfg, &err) != MS_OK) { fprintf(stderr, "%s\n", err.msg); return -1; }
    ms_model m;
    if (ms_model_bind(&m, &cfg, NULL, NULL, &err) != MS_OK) { fprintf(stderr, "%s\n", err.msg); return -1; }
    int64_t max_trunk = 0, trunk = 0, slot = 0, n_exp = 0;
    for (int i = 0; i < m.n_plan_regions; i++) {
        const ms_plan_region *r = &m.plan_regions[i];
        if (r->cls == 1) { trunk += ms_plan_alloc_bytes(r->bytes); if (r->bytes > max_trunk) max_trunk = r->bytes; }
        if (r->cls == 2) { n_exp++; if (r->bytes > slot) slot = r->bytes; }
    }
    /* the smallest trunk share the engine accepts (the planner may pin a
     * region to shrink the ring slot, so this is found by asking) */
    int64_t lo = 1, hi = ms_plan_alloc_bytes(2 * max_trunk) * 4 + trunk;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        ms_engine_params p = ms_engine_default_params();
        p.model_dir = dir;
        p.trunk_bytes = mid;
        p.expert_bytes = (int64_t)1 << 40;
        ms_engine *e;
        char msg[512];
        if (ms_engine_open(&p, &e, msg, sizeof msg) == MS_OK) { ms_engine_close(e); hi = mid; } else lo = mid + 1;
    }
    sh->ring_floor = lo;
    sh->trunk_all = ms_plan_alloc_bytes(trunk) + 4096 * 64;
    sh->expert_slot = slot;
    sh->expert_all = ms_plan_alloc_bytes(slot * n_exp);
    sh->k = cfg.num_experts_per_token;
    sh->n_layer = cfg.num_hidden_layers;
    ms_model_free(&m);
    return 0;
}

typedef struct run_cfg {
    int64_t trunk, expert;
    const char *io, *policy;
    int no_readahead, fault_kind;
    int64_t fault_at;
    int predict;                /* 0: the ids as chunks, no predictor; 1: one token at a time,
                                   predictor on; 2: the same, off; 3: chunks, predictor on */
    const char *sums;
    int64_t corrupt_begin, corrupt_end;
    int64_t chunk;              /* prefill_chunk (0 = the default 32) */
} run_cfg;

static ms_status open_cfg(const char *dir, const run_cfg *rc, int n_threads, ms_engine **e,
                          char *msg, size_t msg_len) {
    ms_engine_params p = ms_engine_default_params();
    p.model_dir = dir;
    p.n_threads = n_threads;
    p.trunk_bytes = rc->trunk;
    p.expert_bytes = rc->expert;
    p.io_backend = rc->io;
    p.cache_policy = rc->policy;
    p.no_readahead = rc->no_readahead;
    p.fault_kind = rc->fault_kind;
    p.fault_at_read = rc->fault_at;
    p.no_predict_experts = rc->predict != 1 && rc->predict != 3;  /* 2: one token at a time, no predictor */
    p.sums_path = rc->sums;
    p.fault_corrupt_begin = rc->corrupt_begin;
    p.fault_corrupt_end = rc->corrupt_end;
    p.prefill_chunk = rc->chunk;
    return ms_engine_open(&p, e, msg, msg_len);
}

/* Teacher-forced logits [n, V] under cfg; NULL when open or feed failed
 * (status and message returned). */
static float *run(const char *dir, const run_cfg *rc, const int32_t *ids, int64_t n, int64_t *V,
                  ms_status *status, char *msg, size_t msg_len, ms_stats *stats) {
    ms_engine *e;
    *status = open_cfg(dir, rc, 2, &e, msg, msg_len);
    if (*status != MS_OK) return NULL;
    ms_model_info info;
    ms_engine_info(e, &info);
    *V = info.n_vocab;
    ms_session *s;
    float *lg = NULL;
    if ((*status = ms_session_open(e, &s)) == MS_OK) {
        lg = malloc((size_t)(n * *V) * sizeof *lg);
        if (rc->predict == 1 || rc->predict == 2) {
            /* one token at a time: decoding, where the predictor guesses a layer's
               experts from its first router input on */
            *status = MS_OK;
            for (int64_t i = 0; i < n && *status == MS_OK; i++) {
                *status = ms_session_feed(s, ids + i, 1, NULL);
                if (*status == MS_OK) memcpy(lg + i * *V, ms_session_logits(s), (size_t)*V * sizeof *lg);
            }
        } else {
            *status = ms_session_feed(s, ids, n, lg);
        }
        if (*status != MS_OK) {
            snprintf(msg, msg_len, "%s", ms_session_error(s));
            free(lg);
            lg = NULL;
        }
        ms_session_close(s);
    }
    if (stats) ms_engine_stats(e, stats);
    ms_engine_close(e);
    return lg;
}

/* ms_session_score of ids under cfg into lp [n] and the top SCORE_K into
 * tid / tlp [n * SCORE_K]: in one call, or (split > 0) in two, ids[0..split)
 * then the rest. The session's logits afterwards go to last [V]. Status and
 * message returned. */
enum { SCORE_K = 5 };
static ms_status score(const char *dir, const run_cfg *rc, int n_threads, int64_t split, const int32_t *ids,
                       int64_t n, double *lp, int32_t *tid, double *tlp, float *last, int64_t V, char *msg,
                       size_t msg_len, ms_stats *stats) {
    ms_engine *e;
    ms_status st = open_cfg(dir, rc, n_threads, &e, msg, msg_len);
    if (st != MS_OK) return st;
    ms_session *s;
    if ((st = ms_session_open(e, &s)) == MS_OK) {
        st = ms_session_score(s, ids, split > 0 ? split : n, lp, SCORE_K, tid, tlp);
        if (st == MS_OK && split > 0)
            st = ms_session_score(s, ids + split, n - split, lp + split, SCORE_K, tid + split * SCORE_K,
                                  tlp + split * SCORE_K);
        if (st == MS_OK) memcpy(last, ms_session_logits(s), (size_t)V * sizeof *last);
        else snprintf(msg, msg_len, "%s", ms_session_error(s));
        ms_session_close(s);
    }
    if (stats) ms_engine_stats(e, stats);
    ms_engine_close(e);
    return st;
}

static const int32_t IDS[] = { 3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 38, 32, 79, 50, 28, 84, 19 };
#define N_IDS ((int64_t)(sizeof IDS / sizeof IDS[0]))

/* Offset, inside an expert region, of the first expert's w1 scale tensor
 * (the region starts at the lowest offset of its six tensors), or -1.
 * gpt-oss: an expert is six slices of fused tensors, each its own request,
 * the first (gate_up's blocks) 2I x H / 2 bytes: 4 KiB into it. */
static int64_t scale_offset(const char *dir, ms_ckpt *ck) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    ms_config cfg;
    ms_err err;
    ms_err_clear(&err);
    if (ms_config_load(path, &cfg, &err) != MS_OK) return -1;
    if (cfg.family == MS_FAMILY_GPT_OSS) return cfg.intermediate_size * cfg.hidden_size > 4096 + 64 ? 4096 : -1;
    const char *part[] = { "w1.weight_packed", "w1.weight_scale", "w2.weight_packed",
                           "w2.weight_scale", "w3.weight_packed", "w3.weight_scale" };
    int64_t lo = -1, scale = -1;
    for (int k = 0; k < 6; k++) {
        char name[256];
        snprintf(name, sizeof name, "language_model.model.layers.%lld.block_sparse_moe.experts.0.%s",
                 (long long)cfg.first_k_dense_replace, part[k]);
        const ms_tensor_info *t = ms_ckpt_find(ck, name);
        if (!t) return -1;
        if (lo < 0 || t->offset < lo) lo = t->offset;
        if (k == 1) scale = t->offset;
    }
    return scale - lo;
}

/* Kind 4 at every read index, with checksums: identical bits, retries seen. */
static void corrupt_matrix(const char *dir, const char *name, const shape *sh, int64_t ef,
                           const float *ref, int64_t V) {
    char tmp[] = "/tmp/ms_test_budget_XXXXXX", sums[4200];
    if (!mkdtemp(tmp)) { CHECK(0, "mkdtemp"); return; }
    snprintf(sums, sizeof sums, "%s/%s.sums", tmp, name);
    ms_verify_result vr;
    char msg[1024];
    ms_status st = ms_verify_checkpoint(dir, sums, 1, NULL, NULL, MS_LOG_INFO, &vr, msg, sizeof msg);
    CHECK(st == MS_OK && vr.wrote, "%s: writing the sidecar: %s", name, msg);
    ms_ckpt *ck = NULL;
    ms_err err;
    ms_err_clear(&err);
    int64_t scale_rel = ms_ckpt_open(dir, &ck, &err) == MS_OK ? scale_offset(dir, ck) : -1;
    ms_ckpt_close(ck);
    CHECK(scale_rel > 0, "%s: no expert scale tensor found", name);
    int n_same = 0, n_runs = 0;
    int64_t retries[2] = { 0, 0 }, failures = 0;
    for (int64_t at = 0; st == MS_OK && scale_rel > 0 && at < 400; at++) {
        const int w = (int)(at % 2);
        run_cfg rc = { sh->ring_floor, ef, "pread", "lru", 0, 4, at, 0, sums,
                       w ? scale_rel : 0, w ? scale_rel + 64 : 64, 0 };
        int64_t V2 = 0;
        ms_stats stt;
        memset(&stt, 0, sizeof stt);
        ms_status rs;
        float *lg = run(dir, &rc, IDS, 6, &V2, &rs, msg, sizeof msg, &stt);
        n_runs++;
        if (lg && V2 == V && memcmp(lg, ref, (size_t)(6 * V) * sizeof *lg) == 0) n_same++;
        else fprintf(stderr, "%s: corrupt at %lld (window %s): %s\n", name, (long long)at, w ? "scale" : "start",
                     lg ? "DIFFERENT BITS" : msg);
        CHECK(!lg || stt.verify_on, "%s: the sidecar was not used", name);
        retries[w] += stt.verify_retries;
        failures += stt.verify_failures;
        free(lg);
    }
    printf("%s: corruption at %d read indices: %d identical; %lld + %lld re-reads (window at the request's"
           " start / at an expert's w1 scale), %lld failures\n", name, n_runs, n_same, (long long)retries[0],
           (long long)retries[1], (long long)failures);
    CHECK(n_same == n_runs, "%s: %d of %d corrupt runs did not give the same bits", name, n_runs - n_same, n_runs);
    CHECK(retries[0] > 0 && retries[1] > 0, "%s: no corruption was detected (retries %lld, %lld): the matrix is not exercised",
          name, (long long)retries[0], (long long)retries[1]);
    CHECK(failures == 0, "%s: %lld verify failures on transient corruption", name, (long long)failures);
    unlink(sums);
    rmdir(tmp);
}

/* Scoring (ms_session_score) at every rung of the ladder: log-probabilities
 * bit-identical to ms_logprob on the everything-resident logits ref [N_IDS, V]
 * - in one call with the default chunk on 2 threads, and in two calls (7 +
 * 13 tokens, the second call's first token scored from the session's logits)
 * with 3-token chunks on 1 thread, with the top 5 of each row equal to
 * ms_logprob_top's (itself checked against a selection by hand); logprob[0]
 * NAN (nothing fed before); the
 * session's logits afterwards those of the last row. ms_logprob itself is
 * checked against a two-pass log-softmax in long double. At the floor a
 * score reads exactly the trunk bytes of a feed of the same chunks (all
 * logits kept), and 3-token chunks (3 + 3 + 1, then 3 x 4 + 1: 8 passes)
 * read far more than one chunk. */
static void score_ladder(const char *dir, const char *name, const float *ref, int64_t V,
                         const int64_t (*rungs)[2], int n_rungs) {
    double want[N_IDS];
    want[0] = NAN;
    int n_far = 0;
    for (int64_t i = 1; i < N_IDS; i++) {
        const float *row = ref + (i - 1) * V;
        want[i] = ms_logprob(row, V, IDS[i]);
        long double mx = row[0], z = 0.0L;
        for (int64_t v = 1; v < V; v++) if (row[v] > mx) mx = row[v];
        for (int64_t v = 0; v < V; v++) z += expl((long double)row[v] - mx);
        const long double two_pass = ((long double)row[IDS[i]] - mx) - logl(z);
        n_far += !(fabsl((long double)want[i] - two_pass) <= 1e-12L * (1.0L + fabsl(two_pass)));
    }
    CHECK(n_far == 0, "%s: ms_logprob differs from a two-pass log-softmax at %d of %lld rows", name, n_far,
          (long long)N_IDS - 1);
    /* the top SCORE_K per row: ms_logprob_top against a selection by hand
     * (largest logit, ties to the lower id) and ms_logprob of each */
    int32_t want_tid[N_IDS * SCORE_K];
    double want_tlp[N_IDS * SCORE_K];
    int n_top_bad = 0;
    for (int j = 0; j < SCORE_K; j++) { want_tid[j] = -1; want_tlp[j] = NAN; }
    for (int64_t i = 1; i < N_IDS; i++) {
        const float *row = ref + (i - 1) * V;
        int32_t *ti = want_tid + i * SCORE_K;
        double *tl = want_tlp + i * SCORE_K;
        n_top_bad += ms_logprob_top(row, V, IDS[i], SCORE_K, ti, tl) != want[i];
        for (int j = 0; j < SCORE_K; j++) {
            int64_t best = -1;
            for (int64_t v = 0; v < V; v++) {
                int taken = 0;
                for (int q = 0; q < j; q++) taken |= ti[q] == v;
                if (!taken && (best < 0 || row[v] > row[best])) best = v;
            }
            n_top_bad += ti[j] != best || tl[j] != ms_logprob(row, V, (int32_t)best);
        }
    }
    CHECK(n_top_bad == 0, "%s: ms_logprob_top: %d wrong entries", name, n_top_bad);
    double lp[N_IDS], tlp[N_IDS * SCORE_K];
    int32_t tid[N_IDS * SCORE_K];
    float *last = malloc((size_t)V * sizeof *last);
    char msg[1024];
    int64_t tb[2] = { 0, 0 };
    for (int r = 0; r < n_rungs; r++)
        for (int var = 0; var < 2; var++) {
            run_cfg rc = { rungs[r][0], rungs[r][1], "uring", "s3fifo", 0, 0, 0, 0, NULL, 0, 0, var ? 3 : 0 };
            ms_stats sst;
            for (int64_t i = 0; i < N_IDS; i++) lp[i] = 0.0;
            ms_status st = score(dir, &rc, var ? 1 : 2, var ? 7 : 0, IDS, N_IDS, lp, tid, tlp, last, V, msg,
                                 sizeof msg, &sst);
            CHECK(st == MS_OK, "%s: score at rung %d variant %d: %s", name, r, var, msg);
            if (st != MS_OK) continue;
            CHECK(isnan(lp[0]) && memcmp(lp + 1, want + 1, (size_t)(N_IDS - 1) * sizeof *lp) == 0,
                  "%s: score at rung %d variant %d: log-probabilities differ from the resident logits'", name, r, var);
            int top_same = memcmp(tid, want_tid, sizeof tid) == 0 &&
                           memcmp(tlp + SCORE_K, want_tlp + SCORE_K, sizeof tlp - SCORE_K * sizeof *tlp) == 0;
            for (int j = 0; j < SCORE_K; j++) top_same &= isnan(tlp[j]) != 0;
            CHECK(top_same, "%s: score at rung %d variant %d: the top %d differ from ms_logprob_top's", name, r, var,
                  SCORE_K);
            CHECK(memcmp(last, ref + (N_IDS - 1) * V, (size_t)V * sizeof *last) == 0,
                  "%s: score at rung %d variant %d: the session's logits are not the last row's", name, r, var);
            if (r == 0) tb[var] = sst.trunk_bytes_read;
        }
    {
        run_cfg rc = { rungs[0][0], rungs[0][1], "uring", "s3fifo", 0, 0, 0, 0, NULL, 0, 0, 0 };
        int64_t V2;
        ms_status st;
        ms_stats fst;
        float *lg = run(dir, &rc, IDS, N_IDS, &V2, &st, msg, sizeof msg, &fst);
        CHECK(lg && tb[0] > 0 && fst.trunk_bytes_read == tb[0] && tb[1] > 5 * tb[0],
              "%s: at the floor scoring read %lld trunk bytes in one chunk (a feed %lld), %lld in 8", name,
              (long long)tb[0], (long long)fst.trunk_bytes_read, (long long)tb[1]);
        free(lg);
    }
    printf("%s: scoring: %d rungs x 2 ways, same log-probability bits; trunk bytes at the floor %lld "
           "(1 chunk, as a feed) vs %lld (8)\n", name, n_rungs, (long long)tb[0], (long long)tb[1]);
    /* usage errors leave the session usable */
    run_cfg rc = { rungs[n_rungs - 1][0], rungs[n_rungs - 1][1], NULL, NULL, 0, 0, 0, 0, NULL, 0, 0, 0 };
    ms_engine *e;
    if (open_cfg(dir, &rc, 2, &e, msg, sizeof msg) == MS_OK) {
        ms_session *s;
        if (ms_session_open(e, &s) == MS_OK) {
            const int32_t bad_id[] = { 1, (int32_t)V };
            CHECK(ms_session_score(s, IDS, 0, lp, 0, NULL, NULL) == MS_E_USAGE, "%s: score of 0 tokens", name);
            CHECK(ms_session_score(s, IDS, 2, NULL, 0, NULL, NULL) == MS_E_USAGE, "%s: score without an output", name);
            CHECK(ms_session_score(s, IDS, 2, lp, 3, NULL, NULL) == MS_E_USAGE, "%s: score without a top output", name);
            CHECK(ms_session_score(s, IDS, 2, lp, MS_TOP_MAX + 1, tid, tlp) == MS_E_USAGE, "%s: score top_k too large",
                  name);
            CHECK(ms_session_score(s, bad_id, 2, lp, 0, NULL, NULL) == MS_E_USAGE, "%s: score of an id out of range",
                  name);
            CHECK(ms_session_score(s, IDS, 1, lp, 0, NULL, NULL) == MS_OK && isnan(lp[0]), "%s: score of 1 token",
                  name);
            CHECK(ms_session_score(s, IDS + 1, 1, lp, SCORE_K, tid, tlp) == MS_OK && lp[0] == want[1] &&
                      memcmp(tid, want_tid + SCORE_K, SCORE_K * sizeof *tid) == 0 &&
                      memcmp(tlp, want_tlp + SCORE_K, SCORE_K * sizeof *tlp) == 0,
                  "%s: score after a feed: %.17g, want %.17g", name, lp[0], want[1]);
            ms_session_close(s);
        }
        ms_engine_close(e);
    }
    free(last);
}

/* The everything-resident run's teacher-forced logits [N_IDS, V], which
 * every other run must equal bit for bit; NULL (a failed check) if it fails. */
static float *resident_logits(const char *dir, const char *name, int64_t *V, ms_stats *rs) {
    ms_status st;
    char msg[1024];
    run_cfg base = { 0, 0, NULL, NULL, 0, 0, 0, 0, NULL, 0, 0, 0 };
    float *ref = run(dir, &base, IDS, N_IDS, V, &st, msg, sizeof msg, rs);
    CHECK(ref != NULL, "%s: resident run: %s", name, msg);
    return ref;
}

static void ladder(const char *dir, const char *name) {
    shape sh;
    if (model_shape(dir, &sh) != 0) { CHECK(0, "%s: shape", name); return; }
    int64_t V = 0;
    ms_status st;
    char msg[1024];
    ms_stats rs;
    float *ref = resident_logits(dir, name, &V, &rs);
    if (!ref) return;
    CHECK(rs.trunk_bytes_read == 0 && rs.expert_bytes_read == 0,
          "%s: everything resident but %lld + %lld bytes read while decoding", name,
          (long long)rs.trunk_bytes_read, (long long)rs.expert_bytes_read);
    const int64_t ef = sh.expert_slot * sh.k * 2;      /* a couple of layers' worth */
    const int64_t rungs[][2] = {
        { sh.ring_floor, ef },                                  /* floor: nothing pinned */
        { sh.ring_floor + sh.trunk_all / 4, ef },               /* part of the trunk pinned */
        { sh.ring_floor + sh.trunk_all / 2, ef * 2 },
        { sh.ring_floor + sh.trunk_all * 3 / 4, sh.expert_all / 2 },
        { sh.trunk_all * 2, ef },                               /* all pinned, tiny expert cache */
        { sh.trunk_all * 2, sh.expert_all * 2 },                /* everything resident */
    };
    const char *ios[] = { "pread", "direct", "uring" };
    const char *pols[] = { "lru", "s3fifo" };
    int n_runs = 0, n_same = 0;
    for (size_t r = 0; r < sizeof rungs / sizeof rungs[0]; r++)
        for (int io = 0; io < 3; io++)
            for (int pol = 0; pol < 2; pol++)
                for (int ra = 0; ra < 2; ra++) {
                    /* io_uring runs also prefetch predicted experts, token by token (lru)
                       and in chunks (s3fifo): guesses never change bits */
                    run_cfg rc = { rungs[r][0], rungs[r][1], ios[io], pols[pol], ra, 0, 0,
                                   io == 2 ? (pol == 0 ? 1 : 3) : 0, NULL, 0, 0, 0 };
                    int64_t V2 = 0;
                    ms_stats stt;
                    float *lg = run(dir, &rc, IDS, N_IDS, &V2, &st, msg, sizeof msg, &stt);
                    n_runs++;
                    int same = lg && V2 == V && memcmp(lg, ref, (size_t)(N_IDS * V) * sizeof *lg) == 0;
                    n_same += same;
                    if (!same)
                        fprintf(stderr, "%s: rung %zu (trunk %lld, experts %lld) %s %s ra=%d: %s\n", name, r,
                                (long long)rungs[r][0], (long long)rungs[r][1], ios[io], pols[pol], !ra,
                                lg ? "different bits" : msg);
                    if (lg && r == 0)
                        CHECK(stt.trunk_bytes_read > 0 && stt.expert_bytes_read > 0,
                              "%s: at the floor the trunk and experts must stream (read %lld, %lld)", name,
                              (long long)stt.trunk_bytes_read, (long long)stt.expert_bytes_read);
                    free(lg);
                }
    CHECK(n_same == n_runs, "%s: %d of %d budget/backend/policy runs gave different bits", name, n_runs - n_same, n_runs);
    score_ladder(dir, name, ref, V, rungs, (int)(sizeof rungs / sizeof rungs[0]));

    /* prompt chunks at the floor: chunks of 7, 10 and 20 tokens are 3, 2 and 1 passes
     * over the 20-token prompt (the default 32 is one). The same bits; and every pass
     * streams the same trunk bytes (the last one also reads ahead for the next token),
     * so 3 passes read exactly twice as much more than 1 as 2 passes do. */
    {
        const int64_t chunks[] = { 7, 10, 20 };
        int64_t tb[3] = { 0, 0, 0 };
        for (int ci = 0; ci < 3; ci++) {
            run_cfg rc = { sh.ring_floor, ef, "pread", "lru", 0, 0, 0, 0, NULL, 0, 0, chunks[ci] };
            int64_t V2 = 0;
            ms_stats stc;
            float *lg = run(dir, &rc, IDS, N_IDS, &V2, &st, msg, sizeof msg, &stc);
            CHECK(lg && V2 == V && memcmp(lg, ref, (size_t)(N_IDS * V) * sizeof *lg) == 0,
                  "%s: prefill chunk %lld: %s", name, (long long)chunks[ci], lg ? "different bits" : msg);
            tb[ci] = stc.trunk_bytes_read;
            free(lg);
        }
        CHECK(tb[1] > tb[2] && tb[0] - tb[2] == 2 * (tb[1] - tb[2]),
              "%s: trunk bytes with 3 / 2 / 1 passes: %lld / %lld / %lld (one pass each per chunk)", name,
              (long long)tb[0], (long long)tb[1], (long long)tb[2]);
        /* out of range: 0 is the default; at least max_draft + 1, at most 65536 */
        const struct { int64_t chunk; int draft; ms_status want; } bad_chunks[] = {
            { -1, 0, MS_E_USAGE }, { 65537, 0, MS_E_USAGE }, { 4, 8, MS_E_USAGE }, { 9, 8, MS_OK }, { 0, 31, MS_OK },
        };
        for (size_t bi = 0; bi < sizeof bad_chunks / sizeof bad_chunks[0]; bi++) {
            ms_engine_params p = ms_engine_default_params();
            p.model_dir = dir;
            p.prefill_chunk = bad_chunks[bi].chunk;
            p.max_draft = bad_chunks[bi].draft;
            ms_engine *e = NULL;
            ms_status so = ms_engine_open(&p, &e, msg, sizeof msg);
            CHECK(so == bad_chunks[bi].want, "%s: prefill_chunk %lld with max_draft %d: status %d, want %d (%s)", name,
                  (long long)bad_chunks[bi].chunk, bad_chunks[bi].draft, (int)so, (int)bad_chunks[bi].want, msg);
            if (e) ms_engine_close(e);
        }
    }

    /* the next-layer predictor with the trunk pinned and room in the expert
     * cache: it must issue reads of its own (more prefetches than the same
     * token-at-a-time run without it) and change no bit */
    {
        ms_stats sp[2];
        for (int pr = 1; pr <= 2; pr++) {
            run_cfg rc = { sh.trunk_all * 2, sh.expert_all / 2, "pread", "lru", 0, 0, 0, pr, NULL, 0, 0, 0 };
            int64_t V2 = 0;
            float *lg = run(dir, &rc, IDS, N_IDS, &V2, &st, msg, sizeof msg, &sp[pr - 1]);
            CHECK(lg && V2 == V && memcmp(lg, ref, (size_t)(N_IDS * V) * sizeof *lg) == 0,
                  "%s: predictor %s: %s", name, pr == 1 ? "on" : "off", lg ? "different bits" : msg);
            free(lg);
        }
        CHECK(sp[0].prefetch_issued > sp[1].prefetch_issued,
              "%s: the predictor issued no read of its own (%lld prefetches with it, %lld without)", name,
              (long long)sp[0].prefetch_issued, (long long)sp[1].prefetch_issued);
        printf("%s: predictor: %lld prefetches (%lld used) vs %lld (%lld) without, same bits\n", name,
               (long long)sp[0].prefetch_issued, (long long)sp[0].prefetch_hits,
               (long long)sp[1].prefetch_issued, (long long)sp[1].prefetch_hits);
    }
    printf("%s: %d runs over 6 budgets x 3 backends x 2 policies x read-ahead on/off: identical bits\n", name, n_same);

    /* faults at every read index of a short streamed run */
    int n_ok = 0, n_unsound = 0, n_open_fail = 0, n_bad = 0;
    for (int kind = 1; kind <= 3; kind++)
        for (int64_t at = 0; at < 400; at++) {
            run_cfg rc = { sh.ring_floor, ef, "pread", "lru", 0, kind, at, (int)(at % 2), NULL, 0, 0, 0 };
            int64_t V2 = 0;
            float *lg = run(dir, &rc, IDS, 6, &V2, &st, msg, sizeof msg, NULL);
            if (lg) {
                if (memcmp(lg, ref, (size_t)(6 * V) * sizeof *lg) == 0) n_ok++;
                else { n_bad++; fprintf(stderr, "%s: fault %d at %lld: DIFFERENT BITS with MS_OK\n", name, kind, (long long)at); }
                free(lg);
            } else if (st == MS_E_UNSOUND) {
                n_unsound++;
                if (!strstr(msg, "layer")) { n_bad++; fprintf(stderr, "%s: unsound without naming the layer: %s\n", name, msg); }
                if (kind != 1) { n_bad++; fprintf(stderr, "%s: recoverable fault %d at %lld made the run fail: %s\n", name, kind, (long long)at, msg); }
            } else if (st != MS_OK) {
                n_open_fail++;
                if (kind != 1) { n_bad++; fprintf(stderr, "%s: recoverable fault %d at %lld failed the open: %s\n", name, kind, (long long)at, msg); }
            }
        }
    printf("%s: faults: %d identical, %d unsound (exit 4), %d refused at open, %d bad\n", name, n_ok, n_unsound, n_open_fail, n_bad);
    CHECK(n_bad == 0, "%s: %d fault runs ended wrongly", name, n_bad);
    CHECK(n_unsound > 0, "%s: no injected EIO hit a read during decoding: the fault matrix is not exercised", name);
    corrupt_matrix(dir, name, &sh, ef, ref, V);
    free(ref);
}

/* The automatic chunk (prefill_chunk 0): 32 without a budget, and with a
 * budget that holds everything; with --ram, a power of two from 32 to 1024,
 * and never a budget refused that fits 32-token chunks. The ladder runs on
 * ms_plan_describe, which makes the same choice (ms_auto_chunk) from an
 * estimated process size instead of the measured one, so it repeats exactly
 * (under sanitizers too; t_rss checks the engine's choice in fresh
 * processes). These tiny models keep 32 (any larger scratch costs them more
 * than 1/32 of a decode token's reads); t_rss and t_cli see larger choices. */
static void auto_chunk(const char *dir, const char *name) {
    char msg[512];
    ms_engine *e;
    ms_model_info info;
    ms_engine_params p = ms_engine_default_params();
    p.model_dir = dir;
    for (int pass = 0; pass < 2; pass++) {
        p.ram_bytes = pass == 0 ? 0 : (int64_t)16 << 30;
        if (ms_engine_open(&p, &e, msg, sizeof msg) != MS_OK) { CHECK(0, "%s: %s", name, msg); return; }
        ms_engine_info(e, &info);
        CHECK(info.prefill_chunk == 32, "%s: %s: chunk %lld", name, pass == 0 ? "no budget" : "everything resident",
              (long long)info.prefill_chunk);
        ms_engine_close(e);
    }
    static char out[16384];
    /* the smallest budget whose plan fits 32-token chunks */
    int64_t lo = 1, hi = (int64_t)4 << 30;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (ms_plan_describe(dir, mid, 0, 0, 32, 1, out, sizeof out) == MS_OK) hi = mid; else lo = mid + 1;
    }
    shape sh;
    if (model_shape(dir, &sh) != 0) { CHECK(0, "%s: shape", name); return; }
    int n_ok = 0;
    char seen[256] = "";
    for (int step = 0; step <= 12; step++) {       /* past everything resident */
        const int64_t ram = lo + (sh.trunk_all + sh.expert_all) * step / 8;
        const ms_status st = ms_plan_describe(dir, ram, 0, 0, 0, 1, out, sizeof out);
        const char *at = strstr(out, "scratch for ");
        long long c = at ? atoll(at + strlen("scratch for ")) : -1;
        CHECK(st == MS_OK, "%s: --ram %lld fits 32-token chunks but not the chosen chunk (%lld): %s", name,
              (long long)ram, c, out);
        CHECK(c >= 32 && c <= 1024 && (c & (c - 1)) == 0 && strstr(out, "chunks, chosen for the budget"),
              "%s: --ram %lld: chunk %lld", name, (long long)ram, c);
        n_ok += st == MS_OK;
        snprintf(seen + strlen(seen), sizeof seen - strlen(seen), " %lld", c);
    }
    printf("%s: chunks chosen from the 32-token floor (%lld bytes) up:%s\n", name, (long long)lo, seen);
    CHECK(n_ok == 13, "%s: %d of 13 budgets fit", name, n_ok);
}

/* After a prompt pass, the experts of its last token are still in the cache
 * (S3-FIFO, the default), even where the pass used far more experts than
 * the cache holds: the expert I/O policy marks them used as they come in
 * (ms_xio_acquire), so the later layers' experts of the same pass do not
 * evict them (ms_xio_chunk_end, src/model/expert_io.c).
 * Which experts the last token used is read from the expert trace of a run
 * that feeds the prompt one token at a time (the routing is the same: same
 * bits at every chunk); its last n_moe * k requests are that token's.
 * `slots` leaves every layer a share of at least k beside one layer's
 * working set (all its experts). */
static void keep_last(const char *dir, const char *name, int slots) {
    shape sh;
    if (model_shape(dir, &sh) != 0) { CHECK(0, "%s: shape", name); return; }
    char path[4200], tmp[] = "/tmp/ms_test_keep_XXXXXX";
    if (!mkdtemp(tmp)) { CHECK(0, "mkdtemp"); return; }
    snprintf(path, sizeof path, "%s/trace", tmp);
    ms_config cfg;
    ms_err err;
    ms_err_clear(&err);
    char cpath[4200];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    if (ms_config_load(cpath, &cfg, &err) != MS_OK) { CHECK(0, "%s", err.msg); return; }
    const int64_t n_moe = cfg.num_hidden_layers - cfg.first_k_dense_replace, k = cfg.num_experts_per_token;
    CHECK((slots - cfg.num_experts) / n_moe >= k && slots < n_moe * cfg.num_experts, "%s: %d slots", name, slots);
    int last[512];
    int n_last = 0;
    for (int pass = 0; pass < 2; pass++) {
        ms_engine_params p = ms_engine_default_params();
        p.model_dir = dir;
        p.n_threads = 2;
        p.expert_bytes = slots * sh.expert_slot;
        p.prefill_chunk = pass == 0 ? 1 : N_IDS;
        p.trace_path = pass == 0 ? path : NULL;
        ms_engine *e;
        char msg[512];
        if (ms_engine_open(&p, &e, msg, sizeof msg) != MS_OK) { CHECK(0, "%s: %s", name, msg); break; }
        CHECK(ms_store_expert_capacity(e->store) == slots, "%s: %d slots", name, ms_store_expert_capacity(e->store));
        ms_session *ss;
        if (ms_session_open(e, &ss) == MS_OK) {
            CHECK(ms_session_feed(ss, IDS, N_IDS, NULL) == MS_OK, "%s: feed: %s", name, ms_session_error(ss));
            ms_session_close(ss);
        }
        if (pass == 1) {
            int kept = 0;
            for (int i = 0; i < n_last; i++) kept += ms_store_expert_state(e->store, last[i]) == MS_EXPERT_READY;
            CHECK(n_last == n_moe * k && kept == n_last,
                  "%s, %d slots: %d of the last prompt token's %d experts are cached after one %lld-token pass",
                  name, slots, kept, n_last, (long long)N_IDS);
        }
        ms_engine_close(e);
        if (pass == 0) {            /* the last token's requests: the trace's last n_moe * k lines */
            FILE *f = fopen(path, "r");
            if (!f) { CHECK(0, "%s: no trace", name); break; }
            int ring[512], n = 0;
            long long b;
            int r;
            char line[256];
            while (fgets(line, sizeof line, f))
                if (line[0] != '#' && sscanf(line, "%lld %d", &b, &r) == 2) ring[n++ % 512] = r;
            fclose(f);
            CHECK(n == N_IDS * n_moe * k && n_moe * k <= 512, "%s: %d requests traced", name, n);
            for (int64_t i = n - n_moe * k; i < n && i >= 0; i++) last[n_last++] = ring[i % 512];
        }
    }
    unlink(path);
    rmdir(tmp);
}

/* The ids with the predictor off, then on, at the floor one token at a time
 * (the fewest ring slots without read-ahead, k expert slots, LRU) or, with
 * `chunk`, with the trunk pinned and 2k expert slots (S3-FIFO) in one chunk:
 * each run's logit bits must equal the resident run's; its counters in sp[0]
 * (off) and sp[1] (on), the shape in *sh. 0, or -1 (reported) when the shape
 * or the resident run failed. */
static int predictor_off_on(const char *dir, const char *name, int chunk, shape *sh, ms_stats sp[2]) {
    if (model_shape(dir, sh) != 0) { CHECK(0, "%s: shape", name); return -1; }
    int64_t V = 0;
    float *ref = resident_logits(dir, name, &V, NULL);
    if (!ref) return -1;
    const char *what = chunk ? "one chunk" : "floor";
    run_cfg rc = chunk ? (run_cfg){ sh->trunk_all * 2, sh->expert_slot * sh->k * 2, "uring", "s3fifo", 0, 0, 0, 0,
                                    NULL, 0, 0, N_IDS }
                       : (run_cfg){ sh->ring_floor, sh->expert_slot * sh->k, "uring", "lru", 1, 0, 0, 0, NULL, 0, 0, 0 };
    for (int i = 0; i < 2; i++) {
        rc.predict = chunk ? (i ? 3 : 0) : (i ? 1 : 2);
        ms_status st;
        char msg[1024];
        int64_t V2 = 0;
        float *lg = run(dir, &rc, IDS, N_IDS, &V2, &st, msg, sizeof msg, &sp[i]);
        CHECK(lg && V2 == V && memcmp(lg, ref, (size_t)(N_IDS * V) * sizeof *lg) == 0,
              "%s: %s, predictor %s: %s", name, what, i ? "on" : "off", lg ? "different bits" : msg);
        free(lg);
    }
    free(ref);
    return 0;
}

/* The expert predictor at the floor: the trunk streamed through the fewest
 * ring slots without read-ahead, k expert slots, one token at a time. A
 * gpt-oss layer's FFN norm and router are one region; where that region is
 * at most 1/32 of the largest trunk region, every plan pins it (store/plan.h,
 * "small regions"), and the predictor, which runs a router only when it is
 * in memory, guesses the next layer's k experts at the end of every layer of
 * every token, before that layer's attention weights are read (streamed, a
 * router is in memory then only when the ring happened to keep it: oss_a
 * guesses on some tokens only). Logits bits equal the resident run's,
 * predictor on and off. */
static void floor_guesses(const char *dir, const char *name) {
    shape sh;
    ms_stats sp[2];
    if (predictor_off_on(dir, name, 0, &sh, sp) != 0) return;
    const int64_t every = N_IDS * (sh.n_layer - 1) * sh.k;
    CHECK(sp[1].trunk_bytes_read > 0 && sp[1].guess_issued == every && sp[0].guess_issued == 0,
          "%s: floor: %lld trunk bytes read, %lld guesses with the predictor (want %lld: every layer of every "
          "token), %lld without", name, (long long)sp[1].trunk_bytes_read, (long long)sp[1].guess_issued,
          (long long)every, (long long)sp[0].guess_issued);
    printf("%s: floor: %lld guesses (%lld right), same bits\n", name, (long long)sp[1].guess_issued,
           (long long)sp[1].guess_hits);
}

/* The predictor on a prompt chunk: the trunk pinned, a few layers' experts
 * of cache, the ids in one chunk. At the end of each layer the chunk guesses
 * the next layer's experts (every token's choice of the next router applied
 * to its residual stream; the union, the experts more tokens chose first),
 * so the disk goes on to them while that layer's attention runs. Logit bits
 * equal the resident run's with the predictor on and off; on, guesses are
 * issued and some are right; off, none. */
static void chunk_guesses(const char *dir, const char *name) {
    shape sh;
    ms_stats sp[2];
    if (predictor_off_on(dir, name, 1, &sh, sp) != 0) return;
    CHECK(sp[0].guess_issued == 0 && sp[1].guess_issued > 0 && sp[1].guess_hits > 0,
          "%s: one chunk: %lld guesses (%lld right) with the predictor, %lld without", name,
          (long long)sp[1].guess_issued, (long long)sp[1].guess_hits, (long long)sp[0].guess_issued);
    printf("%s: one chunk: %lld guesses (%lld right), %lld expert bytes (%lld without), same bits\n", name,
           (long long)sp[1].guess_issued, (long long)sp[1].guess_hits, (long long)sp[1].expert_bytes_read,
           (long long)sp[0].expert_bytes_read);
}

int main(void) {
    const char *td = getenv("MS_TESTDATA");
    if (!td) { CHECK(0, "MS_TESTDATA not set"); return CHECK_DONE("test_budget"); }
    char path[4096];
    const char *models[] = { "a", "c", "oss_b" };
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", td, models[i]);
        ladder(path, models[i]);
        /* the kept experts are the shared expert I/O policy's: K3's slots are whole
         * pages, so a budget of exactly n slots gives n (oss_b's do not) */
        if (i < 2) keep_last(path, models[i], 40);
        auto_chunk(path, models[i]);
        chunk_guesses(path, models[i]);
    }
    snprintf(path, sizeof path, "%s/oss_c", td);
    floor_guesses(path, "oss_c");
    return CHECK_DONE("test_budget");
}
