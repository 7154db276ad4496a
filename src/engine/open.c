/* engine/open.c - ms_engine_open and ms_engine_close.
 *
 * Owns the order in which an engine comes up, one named step each:
 *   1. resolve_params   check and complete the parameters (nothing is read);
 *   2. open_checkpoint  config.json, the tensor table, and which layers this
 *                       process runs (a pipeline stage, or all of them);
 *   3. open_sidecars    the weights' identity (ms_weights_identity), the
 *                       checksum sidecar and the metadata files it covers,
 *                       then the packed trunk (only with the sidecar: a pack
 *                       is only as good as the check of what it decodes to),
 *                       then the tokenizer (when the model ships one) and
 *                       the draft model's checked against it;
 *   4. plan_budget      the store's share of --ram once the sessions and the
 *                       process are counted, and the automatic prompt chunk;
 *   5. open_store       the I/O options, the store, the model bound to it
 *                       once (--ram min: the store plans at its own floor);
 *   6. start_runtime    the store's plan and resident reads, the load-time
 *                       checks, the thread pool, the forward scratch, the
 *                       draft sources and the draft model (a
 *                       second engine on this one's thread pool, whose
 *                       vocabulary steps 2 and 3 checked and whose bytes
 *                       step 4 counted).
 * A failure at any step closes what the earlier ones opened (ms_engine_close
 * takes a partly opened engine). The sidecars and the tokenizer come before
 * the budget because they are part of the process's resident size.
 * Does not: feed, plan `plan` reports (engine/plan.c), talk to other stages
 * itself (the pipeline's hooks do, engine_int.h).
 */
#include "moestream.h"

#include "base/err.h"
#include "base/io.h"
#include "base/log.h"
#include "base/pool.h"
#include "engine/engine_int.h"
#include "engine/prefix_cache.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "store/store.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const ms_pipe_hooks *registered;     /* ms_engine_set_pipe: the pipeline of this process */

void ms_engine_set_pipe(const ms_pipe_hooks *h) { registered = h; }

ms_engine_params ms_engine_default_params(void) {
    ms_engine_params p;
    memset(&p, 0, sizeof p);
    p.log_level = MS_LOG_INFO;
    return p;
}

static int64_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return MS_BASE_OVERHEAD;
    long long size = 0, resident = 0;
    int ok = fscanf(f, "%lld %lld", &size, &resident) == 2;
    fclose(f);
    return ok ? (int64_t)resident * sysconf(_SC_PAGESIZE) : MS_BASE_OVERHEAD;
}

/* Identity of a model for sessions on disk: the parsed config and the tensor
 * table (names, dtypes, shapes, places). Weight bytes are not hashed. */
static uint64_t model_hash(const ms_config *c, const ms_ckpt *ck) {
    uint64_t h = ms_fnv1a(MS_FNV_INIT, c, sizeof *c);
    for (int64_t i = 0; i < ms_ckpt_n_tensors(ck); i++) {
        const ms_tensor_info *t = ms_ckpt_tensor(ck, i);
        h = ms_fnv1a(h, t->name, strlen(t->name) + 1);
        h = ms_fnv1a(h, &t->dtype, sizeof t->dtype);
        h = ms_fnv1a(h, t->shape, (size_t)t->n_dim * sizeof t->shape[0]);
        h = ms_fnv1a(h, &t->n_bytes, sizeof t->n_bytes);
    }
    return h;
}

uint64_t ms_fnv1a(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}

/* 1. e->p completed (context, sessions, chunk), the kernel table and the
 * thread count chosen; MS_E_USAGE naming the bad parameter. */
static ms_status resolve_params(ms_engine *e, const ms_engine_params *p, ms_err *err) {
    e->p = *p;
    e->log = (ms_logger){ p->log, p->log_user, p->log_level };
    if (e->p.max_context <= 0) e->p.max_context = MS_DEFAULT_CONTEXT;
    if (e->p.n_seq <= 0) e->p.n_seq = 1;
    if (e->p.n_seq > MS_MAX_SEQ) return ms_err_set(err, MS_E_USAGE, "n_seq %d is out of [1, %d]", e->p.n_seq, MS_MAX_SEQ);
    if (e->p.max_draft < 0 || e->p.max_draft > MS_MAX_DRAFT)
        return ms_err_set(err, MS_E_USAGE, "max_draft %d is out of [0, %d]", e->p.max_draft, MS_MAX_DRAFT);
    /* auto's drafts fit a chunk given smaller than they are: up to chunk - 1 ids (none at 1) */
    if (e->p.draft_auto && p->prefill_chunk > 0 && p->prefill_chunk <= e->p.max_draft) {
        e->p.max_draft = (int)p->prefill_chunk - 1;
        e->p.draft_auto = e->p.max_draft > 0;
    }
    e->p.prefill_chunk = ms_resolve_chunk(p->prefill_chunk, e->p.max_draft, err->msg, sizeof err->msg);
    e->state_back = e->p.max_draft;
    if (e->p.prefill_chunk < 0) {
        err->status = MS_E_USAGE;
        return MS_E_USAGE;
    }
    /* the kernel table, before anything is read (binding the model resets
       e->model, which takes it afterwards) */
    e->kern = ms_kernels_select(p->kernels);
    if (!e->kern)
        return ms_err_set(err, MS_E_USAGE, "kernels '%s': %s", p->kernels,
                          ms_kernels_known(p->kernels) ? "this CPU (or build) lacks it"
                                                      : "unknown (auto, ref, avx2, avx512, avx512-l2)");
    /* default: the cores this process may run on (a cpuset or a binding), else all online */
    int n_threads = p->n_threads;
    if (n_threads <= 0) {
        cpu_set_t mask;
        n_threads = sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    }
    e->n_threads = n_threads < 1 ? 1 : n_threads;
    if (!p->model_dir) return ms_err_set(err, MS_E_USAGE, "no model directory given");
    if (p->draft_corpus && e->p.max_draft == 0)
        return ms_err_set(err, MS_E_USAGE, "--draft-corpus %s: drafts need speculation (--speculate K or auto, not 0)", p->draft_corpus);
    if (p->draft_model && e->p.max_draft == 0)
        return ms_err_set(err, MS_E_USAGE, "--draft-model %s: drafts need speculation (--speculate K or auto, not 0)", p->draft_model);
    if (p->draft_tree && !p->draft_auto)
        return ms_err_set(err, MS_E_USAGE, "--draft-tree 1: a second branch needs --speculate auto");
    if (p->draft_tree && e->pipe)
        return ms_err_set(err, MS_E_USAGE, "--draft-tree 1: not in a pipeline (one process only)");
    e->p.draft_tree = p->draft_tree && e->p.draft_auto;     /* none when the chunk leaves no draft */
    if (p->draft_corpus) return ms_draft_corpus_check(p->draft_corpus, err);
    return MS_OK;
}

/* 2. config.json and the tensor table; the part of the model this process
 * runs (e->stage, n_stages, stage_start: a pipeline's stage, split as
 * p.stages says or balanced on bytes per token at the floor; one stage
 * without a pipeline). */
static ms_status open_checkpoint(ms_engine *e, ms_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", e->p.model_dir);
    ms_status st;
    if ((st = ms_config_load(path, &e->cfg, err)) != MS_OK) return st;
    if ((st = ms_ckpt_open(e->p.model_dir, &e->ckpt, err)) != MS_OK) return st;
    e->stage = e->pipe ? e->pipe->rank : 0;
    e->n_stages = e->pipe ? e->pipe->size : 1;
    ms_model full;
    if ((st = ms_model_bind(&full, &e->cfg, NULL, NULL, err)) == MS_OK)
        st = ms_pipe_split_model(&full, e->p.stages, e->n_stages, e->stage_start, err);
    ms_model_free(&full);
    /* the draft model runs where the decoding does, on the first stage */
    if (st == MS_OK && e->p.draft_model && e->stage == 0) st = ms_dm_check_config(e, err);
    return st;
}

/* 3a. The sampled fingerprint of the weights; the checksum sidecar
 * (p.sums_path, or MS_SUMS_FILE beside the checkpoint when there is one;
 * none with no_verify), the metadata files it covers checked against it, and
 * its digest as the weights' identity. */
static ms_status open_sums(ms_engine *e, ms_err *err) {
    const ms_engine_params *p = &e->p;
    ms_status st = ms_weights_fingerprint(e->ckpt, &e->weights_id.sample, err);
    if (st != MS_OK || p->no_verify) return st;
    char sums_path[4200];
    snprintf(sums_path, sizeof sums_path, "%s/%s", p->model_dir, MS_SUMS_FILE);
    const char *sp_path = p->sums_path ? p->sums_path : sums_path;
    if (!p->sums_path && access(sp_path, F_OK) != 0) {
        ms_log(&e->log, MS_LOG_INFO, "checksums: no %s: weight bytes are not verified"
               " (run 'moestream verify %s' once to write it)", MS_SUMS_FILE, p->model_dir);
        return MS_OK;
    }
    if ((st = ms_sums_load(sp_path, e->ckpt, &e->sums, err)) != MS_OK) return st;
    if ((st = ms_sums_check_meta(e->sums, p->model_dir, &e->log, NULL, err)) != MS_OK) return st;
    e->weights_id.sums = ms_sums_content_hash(e->sums);
    ms_log(&e->log, MS_LOG_INFO, "checksums: %s (%lld blocks): every weight read is verified",
           sp_path, (long long)ms_sums_n_blocks(e->sums));
    return MS_OK;
}

/* 3b. The packed trunk (p.pack_path, or MS_PACK_FILE beside the checkpoint
 * when there is one): read only with the sidecar. A pack the user named
 * must load; one found beside the checkpoint is skipped with a warning. */
static ms_status open_pack(ms_engine *e, ms_err *err) {
    const ms_engine_params *p = &e->p;
    char pk_path[4200];
    snprintf(pk_path, sizeof pk_path, "%s/%s", p->model_dir, MS_PACK_FILE);
    const char *path_used = p->pack_path ? p->pack_path : pk_path;
    if (p->no_pack || (!p->pack_path && access(path_used, F_OK) != 0)) return MS_OK;
    if (!e->sums) {
        /* a pack is only as good as the check of what it decodes to */
        if (p->pack_path)
            return ms_err_set(err, MS_E_USAGE, "a packed trunk is read only with its checksum sidecar"
                              " (%s)", p->no_verify ? "not with --no-verify" : "run 'moestream verify' first");
        ms_log(&e->log, MS_LOG_WARN, "packed trunk %s ignored: it is read only with the checksum sidecar (%s)",
               path_used, p->no_verify ? "--no-verify" : "none");
        return MS_OK;
    }
    ms_err pe;
    ms_err_clear(&pe);
    if (ms_pack_load(path_used, e->ckpt, e->sums, &e->pack, &pe) != MS_OK) {
        if (p->pack_path) return ms_err_set(err, pe.status, "%s", pe.msg);
        ms_log(&e->log, MS_LOG_WARN, "packed trunk ignored: %s", pe.msg);
        return MS_OK;
    }
    ms_log(&e->log, MS_LOG_INFO, "packed trunk: %s (%lld regions, decoder %s)", path_used,
           (long long)ms_pack_n_entries(e->pack), ms_pack_decoder_name());
    return MS_OK;
}

/* 3c. The tokenizer, when the model ships one (tiktoken.model, else
 * tokenizer.json: ms_tok_find), and the draft model's checked against it.
 * Before the budget: what it holds (~20 MB for o200k's tokenizer.json) is part
 * of the process's resident size, and the parse's transient peak (~8x the
 * file) comes before anything is pinned. Stage 0 of a pipeline only: the
 * later stages are fed activations and never tokenize (and so neither hold
 * it nor spend the parse's ~0.7 s and 126 MB peak). */
static ms_status open_tokenizer(ms_engine *e, ms_err *err) {
    ms_status st = MS_OK;
    if (ms_tok_find(e->p.model_dir) != MS_TOK_NONE) st = ms_tok_load(e->p.model_dir, e->cfg.vocab_size, &e->tok, err);
    if (st == MS_OK && e->p.draft_model) st = ms_dm_check_tokenizer(e, err);
    return st;
}

/* 4. *store_ram: the budget left for weights once the sessions and the
 * process are counted (0: no budget; 1 with --ram min, which the store
 * plans at its floor); with a budget and p (the caller's parameters) asking
 * for the automatic chunk, e->p.prefill_chunk chosen for it (ms_auto_chunk). */
static ms_status plan_budget(ms_engine *e, const ms_engine_params *p, int64_t *store_ram, ms_err *err) {
    *store_ram = 0;
    if (p->ram_bytes < 0 && p->ram_bytes != MS_RAM_MIN)
        return ms_err_set(err, MS_E_USAGE, "bad ram budget %lld", (long long)p->ram_bytes);
    if (p->ram_bytes == MS_RAM_MIN || p->ram_bytes == 0) {
        if (p->ram_bytes == MS_RAM_MIN) *store_ram = 1;     /* below any plan: the store takes its floor */
        return ms_prompt_cache_plan(NULL, p, store_ram, &e->pcache_bytes, err);
    }
    const int layer0 = e->stage_start[e->stage], layer1 = e->stage_start[e->stage + 1];
    ms_model dry;
    ms_status st = ms_model_bind_part(&dry, &e->cfg, NULL, NULL, layer0, layer1, e->stage == 0, err);
    if (st != MS_OK) {
        ms_model_free(&dry);
        return st;
    }
    const int64_t rss = rss_bytes();        /* once: the choice checks its chunk against what the store gets */
    if (p->prefill_chunk == 0) {
        const ms_chunk_budget b = { p->ram_bytes, ms_overhead_estimate(&dry, ms_tok_bytes(e->tok)), e->p.max_context,
                                    e->p.max_draft, e->p.n_seq + e->p.draft_tree, p->trunk_bytes, p->expert_bytes, rss };
        e->p.prefill_chunk = ms_auto_chunk(&dry, &b);
    }
    /* draft_tree: the second branch's session is one more */
    int64_t session = ms_session_bytes(&dry, e->p.max_context, e->p.max_draft, e->p.prefill_chunk,
                                       e->p.n_seq + e->p.draft_tree);
    int64_t dm_weights = 0, dm_rest = 0;
    if (e->p.draft_model && e->stage == 0 &&
        (st = ms_draft_model_bytes(e->p.draft_model, e->p.max_context, e->p.max_draft, e->p.n_seq, &dm_weights,
                                   &dm_rest, err)) != MS_OK) {
        ms_model_free(&dry);
        return st;
    }
    session += dm_weights + dm_rest;        /* resident beside the sessions (engine/draft_model.c) */
    *store_ram = ms_store_budget(p->ram_bytes, session, rss);
    if (*store_ram >= 0) st = ms_prompt_cache_plan(&dry, p, store_ram, &e->pcache_bytes, err);
    ms_model_free(&dry);
    if (st != MS_OK) return st;
    if (*store_ram < 0)
        return ms_err_set(err, MS_E_BUDGET, "budget %lld bytes is below what %d session%s%s (%lld bytes%s) and the process (%lld bytes + %lld slack) need",
                          (long long)p->ram_bytes, e->p.n_seq, e->p.n_seq > 1 ? "s" : "",
                          e->p.draft_tree ? " + a second branch's" : "", (long long)session,
                          dm_weights + dm_rest > 0 ? ", the draft model's included" : "",
                          (long long)rss, (long long)MS_SLACK_BYTES);
    return MS_OK;
}

/* The I/O layer's options from p (backend, queue depth, chunk, faults). */
static ms_status io_params(const ms_engine_params *p, ms_io_params *iop, ms_err *err) {
    *iop = ms_io_default_params();
    if (p->io_backend) {
        if (!strcmp(p->io_backend, "pread")) iop->kind = MS_IO_PREAD;
        else if (!strcmp(p->io_backend, "direct")) iop->kind = MS_IO_DIRECT;
        else if (!strcmp(p->io_backend, "uring")) iop->kind = MS_IO_URING;
        else return ms_err_set(err, MS_E_USAGE, "unknown I/O backend '%s' (pread, direct, uring)", p->io_backend);
    }
    if (p->io_queue_depth > 0) iop->queue_depth = p->io_queue_depth;
    if (p->io_chunk_bytes < 0) return ms_err_set(err, MS_E_USAGE, "negative I/O chunk size");
    if (p->io_chunk_bytes > 0) iop->chunk_bytes = p->io_chunk_bytes;
    if (p->fault_kind < 0 || p->fault_kind > 4) return ms_err_set(err, MS_E_USAGE, "unknown fault kind %d", p->fault_kind);
    iop->fault.kind = (ms_fault_kind)p->fault_kind;
    iop->fault.at_read = p->fault_at_read;
    iop->fault.corrupt_begin = 0;
    iop->fault.corrupt_end = 64;
    if (p->fault_corrupt_begin || p->fault_corrupt_end) {
        if (p->fault_corrupt_begin < 0 || p->fault_corrupt_end < p->fault_corrupt_begin)
            return ms_err_set(err, MS_E_USAGE, "bad corrupt window [%lld, %lld)",
                              (long long)p->fault_corrupt_begin, (long long)p->fault_corrupt_end);
        iop->fault.corrupt_begin = p->fault_corrupt_begin;
        iop->fault.corrupt_end = p->fault_corrupt_end;
    }
    return MS_OK;
}

/* 5. The store under store_ram, and this process's part of the model bound
 * to it, once. */
static ms_status open_store(ms_engine *e, int64_t store_ram, ms_err *err) {
    const ms_engine_params *p = &e->p;
    ms_io_params iop;
    ms_status st;
    if ((st = io_params(p, &iop, err)) != MS_OK) return st;
    ms_store_params sp = ms_store_default_params();
    sp.ram_bytes = store_ram;
    sp.ram_floor = p->ram_bytes == MS_RAM_MIN;  /* the smallest plan there is */
    sp.trunk_bytes = p->trunk_bytes;
    sp.expert_bytes = p->expert_bytes;
    sp.policy = p->cache_policy;
    sp.no_readahead = p->no_readahead;
    sp.trace_path = p->trace_path;
    sp.io = &iop;                           /* read by ms_store_open only */
    sp.sums = e->sums;
    sp.pack = e->pack;
    sp.log = &e->log;
    sp.min_expert_slots = (int)e->cfg.num_experts_per_token;
    if ((st = ms_store_open(&sp, e->ckpt, &e->store, err)) != MS_OK) return st;
    const int layer0 = e->stage_start[e->stage], layer1 = e->stage_start[e->stage + 1];
    e->model.kern = NULL;
    st = ms_model_bind_part(&e->model, &e->cfg, e->ckpt, e->store, layer0, layer1, e->stage == 0, err);
    e->model_bound = 1;                     /* a failed bind leaves a freeable model */
    if (st == MS_OK) e->model.kern = e->kern;
    return st;
}

/* 6. The store's plan and resident reads, the load-time checks, the thread
 * pool, the forward scratch and a feed's buffers. */
/* 6b. The draft sources (speculation): the bytes a pass and a token touch
 * (the trunk's regions; the experts' share a token uses) for the choice
 * rule when nothing is read, and the corpus. */
static ms_status open_drafter(ms_engine *e, ms_err *err) {
    double trunk = 0, experts = 0;
    for (int r = 0; r < ms_store_n_regions(e->store); r++) {
        ms_region_class cls;
        ms_store_region_layout(e->store, r, &cls, NULL, NULL);
        if (cls == MS_REGION_EXPERT) experts += (double)ms_store_region_bytes(e->store, r);
        else trunk += (double)ms_store_region_bytes(e->store, r);
    }
    const double per_tok = e->cfg.num_experts > 0
        ? experts * (double)e->cfg.num_experts_per_token / (double)e->cfg.num_experts : 0;
    e->draft = calloc(1, sizeof *e->draft);
    if (!e->draft) return ms_err_set(err, MS_E_NOMEM, "out of memory");
    const int given = e->p.draft_pass_bytes > 0 || e->p.draft_token_bytes > 0;
    ms_status st = given ? ms_drafter_init(e->draft, e->p.draft_auto, e->p.draft_pass_bytes, e->p.draft_token_bytes, err)
                         : ms_drafter_init(e->draft, e->p.draft_auto, trunk, per_tok, err);
    e->draft->given = given;
    if (st != MS_OK) { free(e->draft); e->draft = NULL; return st; }
    if (e->p.draft_corpus && e->stage == 0)     /* the stage that decodes */
        st = ms_drafter_corpus(e->draft, e->p.draft_corpus, e->tok, err);
    if (st == MS_OK && e->draft->corpus.n > 0)
        ms_log(&e->log, MS_LOG_INFO, "draft corpus %s: %lld tokens", e->p.draft_corpus, (long long)e->draft->corpus.n);
    return st;
}

static ms_status start_runtime(ms_engine *e, ms_err *err) {
    ms_status st;
    if ((st = ms_store_start(e->store, err)) != MS_OK) return st;
    if ((st = ms_model_validate(&e->model, e->store, err)) != MS_OK) return st;
    if (!e->pool_borrowed && (st = ms_pool_open(e->n_threads, &e->pool, err)) != MS_OK) return st;
    if ((st = ms_fwd_init(&e->fwd, &e->model, e->p.prefill_chunk, err)) != MS_OK) return st;
    e->batch_ids = malloc((size_t)e->p.prefill_chunk * sizeof *e->batch_ids);
    e->batch_seg = malloc((size_t)e->p.prefill_chunk * sizeof *e->batch_seg);
    if (!e->batch_ids || !e->batch_seg) return ms_err_set(err, MS_E_NOMEM, "out of memory");
    e->model_hash = model_hash(&e->cfg, e->ckpt);
    /* the prompt cache: its share of the budget (plan_budget); in a pipeline
       every stage holds its layers' part of the entries in RAM
       (prefix_cache.h); the directory is stage 0's, which gathers and hands
       out the other stages' parts of an entry (prefix_disk.c) */
    ms_engine_text_ids(e);
    e->pcache = ms_pcache_init(e, e->pcache_bytes);
    if (e->stage == 0 && e->p.prompt_cache_dir &&
        (st = ms_pdisk_open(e, e->p.prompt_cache_dir, e->p.prompt_cache_disk_bytes, e->p.prompt_cache_fault_write,
                            &e->pdisk, err)) != MS_OK)
        return st;
    if (e->p.max_draft > 0 && (st = open_drafter(e, err)) != MS_OK) return st;
    if (e->p.draft_model && e->stage == 0 && (st = ms_dm_open(e, err)) != MS_OK) return st;
    if (e->p.draft_tree && (st = ms_tree_open(e, err)) != MS_OK) return st;
    ms_engine_stats_reset(e);               /* counters describe feeds, not loading */
    return MS_OK;
}

static void log_opened(const ms_engine *e, const ms_engine_params *p) {
    const int layer0 = e->stage_start[e->stage], layer1 = e->stage_start[e->stage + 1];
    ms_log(&e->log, MS_LOG_INFO, "model: %lld layers (%lld MLA, %lld KDA), hidden %lld, %lld experts (top %lld), vocab %lld; kernels %s; %d threads",
           (long long)e->cfg.num_hidden_layers, (long long)e->cfg.n_mla_layers,
           (long long)e->cfg.n_kda_layers, (long long)e->cfg.hidden_size,
           (long long)e->cfg.num_experts, (long long)e->cfg.num_experts_per_token,
           (long long)e->cfg.vocab_size, e->model.kern->name, e->n_threads);
    ms_log(&e->log, MS_LOG_INFO, "prompt chunks of %lld tokens%s", (long long)e->p.prefill_chunk,
           p->prefill_chunk == 0 ? (p->ram_bytes > 0 ? " (chosen for the budget)" : " (no budget: the default)") : "");
    if (e->n_stages > 1)
        ms_log(&e->log, MS_LOG_INFO, "pipeline stage %d of %d: layers %d..%d%s", e->stage, e->n_stages, layer0,
               layer1 - 1, e->stage == 0 ? ", embedding, lm_head" : "");
}

/* pipe: the pipeline the engine is a stage of (NULL: one process); pool: the
 * thread pool it computes on (NULL: its own) */
static ms_status engine_open(const ms_engine_params *p, const ms_pipe_hooks *pipe, ms_pool *pool, int tokenizer,
                             ms_engine **out, char *errbuf, size_t errbuf_len) {
    *out = NULL;
    ms_engine *e = calloc(1, sizeof *e);
    if (!e) {
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "out of memory");
        return MS_E_NOMEM;
    }
    e->pipe = pipe;
    e->pool = pool;
    e->pool_borrowed = pool != NULL;
    ms_err err;
    ms_err_clear(&err);
    int64_t store_ram = 0;
    ms_status st = resolve_params(e, p, &err);
    if (st == MS_OK) st = open_checkpoint(e, &err);
    if (st == MS_OK) st = open_sums(e, &err);
    if (st == MS_OK) st = open_pack(e, &err);
    if (st == MS_OK && tokenizer && e->stage == 0) st = open_tokenizer(e, &err);
    if (st == MS_OK) st = plan_budget(e, p, &store_ram, &err);
    if (st == MS_OK) st = open_store(e, store_ram, &err);
    if (st == MS_OK) st = start_runtime(e, &err);
    if (st != MS_OK) {
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "%s", err.msg);
        ms_engine_close(e);
        /* a model that cannot be read at open is an unreadable model, not a run-time I/O fault */
        return st == MS_E_IO ? MS_E_MODEL : st;
    }
    log_opened(e, p);
    *out = e;
    return MS_OK;
}

ms_status ms_engine_open(const ms_engine_params *p, ms_engine **out, char *errbuf, size_t errbuf_len) {
    char msg[512] = "";
    ms_status st = engine_open(p, registered, NULL, 1, out, msg, sizeof msg);
    if (registered) {
        /* every stage opened, or none stays */
        st = registered->meet(*out, st, msg, sizeof msg);
        if (st != MS_OK && *out) { ms_engine_close(*out); *out = NULL; }
    }
    if (st != MS_OK && errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "%s", msg);
    return st;
}

ms_status ms_engine_open_alone(const ms_engine_params *p, ms_pool *pool, int tokenizer, ms_engine **out,
                               char *errbuf, size_t errbuf_len) {
    return engine_open(p, NULL, pool, tokenizer, out, errbuf, errbuf_len);
}

void ms_engine_close(ms_engine *e) {
    if (!e) return;
    if (e->tree_b) ms_tree_close(e);
    if (e->pipe_up) e->pipe->close(e);
    if (e->dm) ms_dm_close(e);
    if (e->draft) { ms_drafter_free(e->draft); free(e->draft); }
    ms_pcache_free(e->pcache);
    ms_pdisk_close(e->pdisk);
    ms_fwd_free(e->fwd);
    free(e->batch_ids);
    free(e->batch_seg);
    if (!e->pool_borrowed) ms_pool_close(e->pool);
    ms_tok_free(e->tok);
    if (e->model_bound) ms_model_free(&e->model);
    ms_store_close(e->store);
    ms_sums_free(e->sums);
    ms_pack_free(e->pack);
    ms_ckpt_close(e->ckpt);
    free(e);
}
