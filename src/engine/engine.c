/* engine/engine.c - implements include/moestream.h.
 *
 * The only place that wires format + store + model (+ later text and sample)
 * together. An engine owns the checkpoint table, the store, the bound model
 * and the thread pool; a session owns one sequence's state and the forward
 * scratch. A session that failed mid-forward is unsound: its state may hold a
 * half-applied token, so every later feed returns MS_E_UNSOUND (sticky).
 * ms_session_decode is the decode step of every front end: plain (feed the
 * pending token, pick once) or speculative (prompt-lookup draft, one
 * recorded verify feed, pick per row while the draft holds, roll back to the
 * last kept position; docs/ARCHITECTURE.md, docs/DETERMINISM.md).
 */
#include "moestream.h"

#include "base/clock.h"
#include "base/progress.h"
#include "base/err.h"
#include "base/io.h"
#include "base/log.h"
#include "base/pool.h"
#include "engine/engine_int.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "store/store.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *ms_status_name(ms_status s) {
    switch (s) {
    case MS_OK: return "ok";
    case MS_E_USAGE: return "usage";
    case MS_E_MODEL: return "invalid model";
    case MS_E_IO: return "I/O error";
    case MS_E_NOMEM: return "out of memory";
    case MS_E_BUDGET: return "over budget";
    case MS_E_UNSOUND: return "unsound";
    case MS_E_INTERNAL: return "internal error";
    case MS_E_CANCELLED: return "cancelled";
    case MS_E_CONTEXT: return "context full";
    }
    return "unknown";
}

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

static int64_t peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
    fclose(f);
    return (int64_t)kb * 1024;
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

static ms_status engine_open(const ms_engine_params *p, ms_engine **out, char *errbuf, size_t errbuf_len) {
    *out = NULL;
    ms_err err;
    ms_err_clear(&err);
    ms_engine *e = calloc(1, sizeof *e);
    if (!e) {
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "out of memory");
        return MS_E_NOMEM;
    }
    e->p = *p;
    e->log = (ms_logger){ p->log, p->log_user, p->log_level };
    if (e->p.max_context <= 0) e->p.max_context = MS_DEFAULT_CONTEXT;
    if (e->p.n_seq <= 0) e->p.n_seq = 1;
    if (e->p.n_seq > MS_MAX_SEQ) {
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "n_seq %d is out of [1, %d]", e->p.n_seq, MS_MAX_SEQ);
        free(e);
        return MS_E_USAGE;
    }
    if (e->p.max_draft < 0 || e->p.max_draft > MS_MAX_DRAFT) {
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "max_draft %d is out of [0, %d]", e->p.max_draft, MS_MAX_DRAFT);
        free(e);
        return MS_E_USAGE;
    }
    e->p.prefill_chunk = ms_resolve_chunk(p->prefill_chunk, e->p.max_draft, errbuf, errbuf_len);
    if (e->p.prefill_chunk < 0) {
        free(e);
        return MS_E_USAGE;
    }
    /* the kernel table, before anything is read (binding the model below resets
       e->model, which takes it afterwards) */
    const ms_kern *kern = ms_kernels_select(p->kernels);
    if (!kern) {
        if (errbuf && errbuf_len)
            snprintf(errbuf, errbuf_len, "kernels '%s': %s", p->kernels,
                     ms_kernels_known(p->kernels) ? "this CPU (or build) lacks it"
                                                 : "unknown (auto, ref, avx2, avx512, avx512-l2)");
        free(e);
        return MS_E_USAGE;
    }
    /* default: the cores this process may run on (a cpuset or a binding), else all online */
    int n_threads = p->n_threads;
    if (n_threads <= 0) {
        cpu_set_t mask;
        n_threads = sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    }
    if (n_threads < 1) n_threads = 1;
    ms_status st = MS_OK;
    char path[4096];
    if (!p->model_dir) {
        st = ms_err_set(&err, MS_E_USAGE, "no model directory given");
        goto fail;
    }
    snprintf(path, sizeof path, "%s/config.json", p->model_dir);
    if ((st = ms_config_load(path, &e->cfg, &err)) != MS_OK) goto fail;
    if ((st = ms_ckpt_open(p->model_dir, &e->ckpt, &err)) != MS_OK) goto fail;
    {
        /* the part of the model this process runs (a pipeline stage, or all of it) */
        ms_model full;
        if ((st = ms_model_bind(&full, &e->cfg, NULL, NULL, &err)) == MS_OK) st = ms_pipe_plan(e, &full, &err);
        ms_model_free(&full);
        if (st != MS_OK) goto fail;
    }
    const int layer0 = e->stage_start[e->stage], layer1 = e->stage_start[e->stage + 1], head = e->stage == 0;
    /* the checksum sidecar, before the budget is measured (its hashes are part of
     * the process's resident size: 8 bytes per MiB of checkpoint) */
    if (!p->no_verify) {
        char sums_path[4200];
        snprintf(sums_path, sizeof sums_path, "%s/%s", p->model_dir, MS_SUMS_FILE);
        const char *sp_path = p->sums_path ? p->sums_path : sums_path;
        if (p->sums_path || access(sp_path, F_OK) == 0) {
            if ((st = ms_sums_load(sp_path, e->ckpt, &e->sums, &err)) != MS_OK) goto fail;
            ms_log(&e->log, MS_LOG_INFO, "checksums: %s (%lld blocks): every weight read is verified",
                   sp_path, (long long)ms_sums_n_blocks(e->sums));
        } else {
            ms_log(&e->log, MS_LOG_INFO, "checksums: no %s: weight bytes are not verified"
                   " (run 'moestream verify %s' once to write it)", MS_SUMS_FILE, p->model_dir);
        }
    }
    char pk_path[4200];
    snprintf(pk_path, sizeof pk_path, "%s/%s", p->model_dir, MS_PACK_FILE);
    const char *path_used = p->pack_path ? p->pack_path : pk_path;
    if (!p->no_pack && (p->pack_path || access(path_used, F_OK) == 0)) {
        if (!e->sums) {
            /* a pack is only as good as the check of what it decodes to */
            if (p->pack_path) {
                st = ms_err_set(&err, MS_E_USAGE, "a packed trunk is read only with its checksum sidecar"
                                " (%s)", p->no_verify ? "not with --no-verify" : "run 'moestream verify' first");
                goto fail;
            }
            ms_log(&e->log, MS_LOG_WARN, "packed trunk %s ignored: it is read only with the checksum sidecar (%s)",
                   path_used, p->no_verify ? "--no-verify" : "none");
        } else {
            ms_err pe;
            ms_err_clear(&pe);
            if (ms_pack_load(path_used, e->ckpt, e->sums, &e->pack, &pe) != MS_OK) {
                if (p->pack_path) { st = ms_err_set(&err, pe.status, "%s", pe.msg); goto fail; }
                ms_log(&e->log, MS_LOG_WARN, "packed trunk ignored: %s", pe.msg);
            } else {
                ms_log(&e->log, MS_LOG_INFO, "packed trunk: %s (%lld regions, decoder %s)", path_used,
                       (long long)ms_pack_n_entries(e->pack), ms_pack_decoder_name());
            }
        }
    }
    /* the budget left for weights once one session and the process are counted */
    int64_t store_ram = 0;
    if (p->ram_bytes < 0 && p->ram_bytes != MS_RAM_MIN) {
        st = ms_err_set(&err, MS_E_USAGE, "bad ram budget %lld", (long long)p->ram_bytes);
        goto fail;
    }
    if (p->ram_bytes == MS_RAM_MIN) {
        store_ram = 1;                      /* refused below; the plan then holds its floor */
    } else if (p->ram_bytes > 0) {
        ms_model dry;
        if ((st = ms_model_bind_part(&dry, &e->cfg, NULL, NULL, layer0, layer1, head, &err)) != MS_OK) {
            ms_model_free(&dry);
            goto fail;
        }
        const int64_t rss = rss_bytes();    /* once: the choice checks its chunk against what the store gets */
        if (p->prefill_chunk == 0) {
            const ms_chunk_budget b = { p->ram_bytes, ms_overhead_estimate(&dry), e->p.max_context, e->p.max_draft,
                                        e->p.n_seq,
                                        p->trunk_bytes, p->expert_bytes, rss };
            e->p.prefill_chunk = ms_auto_chunk(&dry, &b);
        }
        int64_t session = ms_session_bytes(&dry, e->p.max_context, e->p.max_draft, e->p.prefill_chunk, e->p.n_seq);
        ms_model_free(&dry);
        store_ram = ms_store_budget(p->ram_bytes, session, rss);
        if (store_ram < 0) {
            st = ms_err_set(&err, MS_E_BUDGET, "budget %lld bytes is below what %d session%s (%lld bytes) and the process (%lld bytes + %lld slack) need",
                            (long long)p->ram_bytes, e->p.n_seq, e->p.n_seq > 1 ? "s" : "", (long long)session, (long long)rss, (long long)MS_SLACK_BYTES);
            goto fail;
        }
    }
    ms_io_params iop = ms_io_default_params();
    if (p->io_backend) {
        if (!strcmp(p->io_backend, "pread")) iop.kind = MS_IO_PREAD;
        else if (!strcmp(p->io_backend, "direct")) iop.kind = MS_IO_DIRECT;
        else if (!strcmp(p->io_backend, "uring")) iop.kind = MS_IO_URING;
        else { st = ms_err_set(&err, MS_E_USAGE, "unknown I/O backend '%s' (pread, direct, uring)", p->io_backend); goto fail; }
    }
    if (p->io_queue_depth > 0) iop.queue_depth = p->io_queue_depth;
    if (p->io_chunk_bytes < 0) { st = ms_err_set(&err, MS_E_USAGE, "negative I/O chunk size"); goto fail; }
    if (p->io_chunk_bytes > 0) iop.chunk_bytes = p->io_chunk_bytes;
    if (p->fault_kind < 0 || p->fault_kind > 4) { st = ms_err_set(&err, MS_E_USAGE, "unknown fault kind %d", p->fault_kind); goto fail; }
    iop.fault.kind = (ms_fault_kind)p->fault_kind;
    iop.fault.at_read = p->fault_at_read;
    iop.fault.corrupt_begin = 0;
    iop.fault.corrupt_end = 64;
    if (p->fault_corrupt_begin || p->fault_corrupt_end) {
        if (p->fault_corrupt_begin < 0 || p->fault_corrupt_end < p->fault_corrupt_begin) {
            st = ms_err_set(&err, MS_E_USAGE, "bad corrupt window [%lld, %lld)",
                            (long long)p->fault_corrupt_begin, (long long)p->fault_corrupt_end);
            goto fail;
        }
        iop.fault.corrupt_begin = p->fault_corrupt_begin;
        iop.fault.corrupt_end = p->fault_corrupt_end;
    }
    ms_store_params sp = ms_store_default_params();
    sp.ram_bytes = store_ram;
    sp.trunk_bytes = p->trunk_bytes;
    sp.expert_bytes = p->expert_bytes;
    sp.policy = p->cache_policy;
    sp.no_readahead = p->no_readahead;
    sp.trace_path = p->trace_path;
    sp.io = &iop;
    sp.sums = e->sums;
    sp.pack = e->pack;
    sp.log = p->ram_bytes == MS_RAM_MIN ? NULL : &e->log;   /* the floor probe's refusal is expected */
    sp.min_expert_slots = (int)e->cfg.num_experts_per_token;
    if ((st = ms_store_open(&sp, e->ckpt, &e->store, &err)) != MS_OK) goto fail;
    e->model.kern = NULL;
    st = ms_model_bind_part(&e->model, &e->cfg, e->ckpt, e->store, layer0, layer1, head, &err);
    e->model_bound = 1;                 /* a failed bind leaves a freeable model */
    if (st != MS_OK) goto fail;
    if (p->ram_bytes == MS_RAM_MIN) {
        /* the smallest plan: ask the store for its floor, then start over with it */
        ms_err probe;
        ms_err_clear(&probe);
        if (ms_store_start(e->store, &probe) != MS_E_BUDGET || !ms_store_get_plan(e->store)) {
            st = ms_err_set(&err, MS_E_INTERNAL, "cannot find the smallest plan: %s", probe.msg);
            goto fail;
        }
        sp.ram_bytes = ms_store_get_plan(e->store)->floor_bytes;
        sp.log = &e->log;
        ms_store_close(e->store);
        e->store = NULL;
        ms_model_free(&e->model);
        e->model_bound = 0;
        if ((st = ms_store_open(&sp, e->ckpt, &e->store, &err)) != MS_OK) goto fail;
        st = ms_model_bind_part(&e->model, &e->cfg, e->ckpt, e->store, layer0, layer1, head, &err);
        e->model_bound = 1;
        if (st != MS_OK) goto fail;
    }
    e->model.kern = kern;
    if ((st = ms_store_start(e->store, &err)) != MS_OK) goto fail;
    if ((st = ms_model_validate(&e->model, e->store, &err)) != MS_OK) goto fail;
    if ((st = ms_pool_open(n_threads, &e->pool, &err)) != MS_OK) goto fail;
    if ((st = ms_fwd_init(&e->fwd, &e->model, e->p.prefill_chunk, &err)) != MS_OK) goto fail;
    e->batch_ids = malloc((size_t)e->p.prefill_chunk * sizeof *e->batch_ids);
    e->batch_seg = malloc((size_t)e->p.prefill_chunk * sizeof *e->batch_seg);
    if (!e->batch_ids || !e->batch_seg) { st = ms_err_set(&err, MS_E_NOMEM, "out of memory"); goto fail; }
    snprintf(path, sizeof path, "%s/tiktoken.model", p->model_dir);
    if (access(path, F_OK) == 0 &&
        (st = ms_tok_load(p->model_dir, e->cfg.vocab_size, &e->tok, &err)) != MS_OK) goto fail;
    e->model_hash = model_hash(&e->cfg, e->ckpt);
    ms_engine_stats_reset(e);               /* counters describe feeds, not loading */
    ms_log(&e->log, MS_LOG_INFO, "model: %lld layers (%lld MLA, %lld KDA), hidden %lld, %lld experts (top %lld), vocab %lld; kernels %s; %d threads",
           (long long)e->cfg.num_hidden_layers, (long long)e->cfg.n_mla_layers,
           (long long)e->cfg.n_kda_layers, (long long)e->cfg.hidden_size,
           (long long)e->cfg.num_experts, (long long)e->cfg.num_experts_per_token,
           (long long)e->cfg.vocab_size, e->model.kern->name, n_threads);
    ms_log(&e->log, MS_LOG_INFO, "prompt chunks of %lld tokens%s", (long long)e->p.prefill_chunk,
           p->prefill_chunk == 0 ? (p->ram_bytes > 0 ? " (chosen for the budget)" : " (no budget: the default)") : "");
    if (e->n_stages > 1)
        ms_log(&e->log, MS_LOG_INFO, "pipeline stage %d of %d: layers %d..%d%s", e->stage, e->n_stages, layer0,
               layer1 - 1, head ? ", embedding, lm_head" : "");
    *out = e;
    return MS_OK;
fail:
    if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "%s", err.msg);
    ms_engine_close(e);
    /* a model that cannot be read at open is an unreadable model, not a run-time I/O fault */
    return st == MS_E_IO ? MS_E_MODEL : st;
}

ms_status ms_engine_open(const ms_engine_params *p, ms_engine **out, char *errbuf, size_t errbuf_len) {
    char msg[512] = "";
    ms_status st = engine_open(p, out, msg, sizeof msg);
    if (ms_pipe_size() > 1) {
        /* every stage opened, or none stays */
        st = ms_pipe_meet(*out, st, msg, sizeof msg);
        if (st != MS_OK && *out) { ms_engine_close(*out); *out = NULL; }
    }
    if (st != MS_OK && errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "%s", msg);
    return st;
}

void ms_engine_close(ms_engine *e) {
    if (!e) return;
    ms_pipe_close(e);
    ms_fwd_free(e->fwd);
    free(e->batch_ids);
    free(e->batch_seg);
    ms_pool_close(e->pool);
    ms_tok_free(e->tok);
    if (e->model_bound) ms_model_free(&e->model);
    ms_store_close(e->store);
    ms_sums_free(e->sums);
    ms_pack_free(e->pack);
    ms_ckpt_close(e->ckpt);
    free(e);
}

const char *ms_engine_error(const ms_engine *e) { return e ? e->error : ""; }

void ms_engine_info(const ms_engine *e, ms_model_info *info) {
    memset(info, 0, sizeof *info);
    info->n_vocab = e->cfg.vocab_size;
    info->n_layer = e->cfg.num_hidden_layers;
    info->n_embd = e->cfg.hidden_size;
    info->n_expert = e->cfg.num_experts;
    info->n_expert_used = e->cfg.num_experts_per_token;
    info->bos_id = e->cfg.bos_token_id;
    info->eos_id = e->cfg.eos_token_id;
    info->pad_id = e->cfg.pad_token_id;
    info->max_context = e->p.max_context;
    info->prefill_chunk = e->p.prefill_chunk;
    info->kernels = e->model.kern->name;
}

void ms_engine_stats(const ms_engine *e, ms_stats *st) {
    *st = e->stats;
    ms_store_stats ss;
    ms_store_get_stats(e->store, &ss);
    st->trunk_bytes_read = ss.trunk_bytes_read + ss.global_bytes_read;
    st->expert_bytes_read = ss.expert_bytes_read;
    st->reads_issued = ss.reads_issued;
    st->expert_requests = ss.expert_requests;
    st->expert_hits = ss.expert_hits;
    st->io_wait_s = 1e-9 * (double)ss.io_wait_ns;
    st->io_busy_s = 1e-9 * (double)ss.io_busy_ns;
    st->io_inflight_s = 1e-9 * (double)ss.io_depth_ns;
    st->scale255_groups = e->scale255;
    st->readahead_issued = ss.ra_issued;
    st->readahead_used = ss.ra_used;
    st->prefetch_issued = ss.prefetch_issued;
    st->prefetch_hits = ss.prefetch_hits;
    st->guess_issued = ss.guess_issued;
    st->guess_hits = ss.guess_hits;
    st->guess_cancelled = ss.guess_cancelled;
    st->peak_rss_bytes = peak_rss_bytes();
    st->verify_on = e->sums != NULL;
    st->pack_on = e->pack != NULL;
    st->packed_regions = ss.packed_regions;
    st->trunk_packed_read = ss.trunk_packed_read;
    st->trunk_unpacked_bytes = ss.trunk_unpacked_bytes;
    st->unpack_s = (double)ss.unpack_ns * 1e-9;
    st->pack_fallbacks = ss.pack_fallbacks;
    ms_pipe_add_stats(e, st);
    st->verify_bytes = ss.verify_bytes;
    st->verify_retries = ss.verify_retries;
    st->verify_failures = ss.verify_failures;
    st->verify_s = 1e-9 * (double)ss.verify_ns;
    st->verify_sync_s = 1e-9 * (double)ss.verify_sync_ns;
}

void ms_engine_stats_reset(ms_engine *e) {
    memset(&e->stats, 0, sizeof e->stats);
    e->scale255 = 0;
    ms_store_reset_stats(e->store);
    ms_pipe_op(e, MS_PIPE_STATS_RESET, 0, 0, NULL, 0);
}

ms_status ms_session_open(ms_engine *e, ms_session **out) {
    *out = NULL;
    ms_err err;
    ms_err_clear(&err);
    ms_session *s = calloc(1, sizeof *s);
    if (!s) return MS_E_NOMEM;
    s->e = e;
    ms_status st;
    if ((st = ms_state_init(&s->st, &e->model, e->p.max_context, &err)) != MS_OK) goto fail;
    s->logits = malloc((size_t)e->cfg.vocab_size * sizeof(float));
    s->tokens = malloc((size_t)e->p.max_context * sizeof(int32_t));
    if (!s->logits || !s->tokens) { st = ms_err_set(&err, MS_E_NOMEM, "out of memory"); goto fail; }
    if (e->p.max_draft > 0) {
        s->max_draft = e->p.max_draft;
        if ((st = ms_rollback_init(&s->rb, &e->model, s->max_draft + 1, &err)) != MS_OK) goto fail;
        s->ver_logits = malloc((size_t)((s->max_draft + 1) * e->cfg.vocab_size) * sizeof(float));
        s->ver_ids = malloc((size_t)(s->max_draft + 1) * sizeof(int32_t));
        if (!s->ver_logits || !s->ver_ids) { st = ms_err_set(&err, MS_E_NOMEM, "out of memory"); goto fail; }
    }
    if (e->pipe_up) {
        /* the other stages keep their layers' state of it under this name */
        s->st.pipe_id = ++e->next_pipe_id;
        char msg[512];
        if ((st = ms_pipe_op(e, MS_PIPE_OPEN, s->st.pipe_id, 0, msg, sizeof msg)) != MS_OK) {
            ms_err_set(&err, st, "%s", msg);
            ms_pipe_op(e, MS_PIPE_CLOSE, s->st.pipe_id, 0, NULL, 0);     /* in the stages that opened it */
            goto fail;
        }
    }
    *out = s;
    return MS_OK;
fail:
    snprintf(e->error, sizeof e->error, "%s", err.msg);
    if (s->st.kda_S) ms_state_free(&s->st, &e->model);
    if (s->rb.kda) ms_rollback_free(&s->rb, &e->model);
    free(s->ver_logits);
    free(s->ver_ids);
    free(s->logits);
    free(s->tokens);
    free(s);
    return st;
}

void ms_session_close(ms_session *s) {
    if (!s) return;
    ms_pipe_op(s->e, MS_PIPE_CLOSE, s->st.pipe_id, 0, NULL, 0);
    ms_state_free(&s->st, &s->e->model);
    if (s->rb.kda) ms_rollback_free(&s->rb, &s->e->model);
    free(s->ver_logits);
    free(s->ver_ids);
    free(s->logits);
    free(s->tokens);
    free(s);
}

const char *ms_session_error(const ms_session *s) { return s ? s->error : ""; }

/* Index of the first non-finite logit of row [V], or -1. */
static int64_t first_nonfinite(const float *row, int64_t V) {
    for (int64_t i = 0; i < V; i++)
        if (!isfinite(row[i])) return i;
    return -1;
}

/* The session's state may hold a half-applied chunk (or logits nobody may
 * use): nothing after it is sound, and every later call says so. */
static ms_status make_unsound(ms_session *s, const char *msg) {
    snprintf(s->error, sizeof s->error, "%s", msg);
    s->sticky = MS_E_UNSOUND;
    s->has_logits = 0;
    s->rb.n_rec = 0;
    return MS_E_UNSOUND;
}

_Static_assert(MS_TOP_MAX == MS_LSE_TOP_MAX, "the public and the fold's top-k bounds");

/* Where ms_session_score puts a feed's scores. */
typedef struct score_out {
    double *lp;                 /* [n] */
    int k;                      /* top entries per row */
    int32_t *top_ids;           /* [n * k] */
    double *top_lp;             /* [n * k] */
} score_out;

/* The feed behind ms_session_feed and ms_session_decode. record: keep what
 * ms_session_rollback needs (one chunk). count: add the feed to the prefill /
 * decode counters (ms_session_decode counts its own). check: reject non-finite
 * final logits (a verify pass checks each row it uses instead). score: also
 * write each fed token's log-probability (ms_session_score). *dt: seconds. */
/* Whether s may read ids[0, n) (the why into msg): no tokens or a bad id
 * (MS_E_USAGE), a full context (MS_E_CONTEXT). */
static ms_status check_tokens(const ms_session *s, const int32_t *ids, int64_t n, char *msg, size_t len) {
    const int64_t V = s->e->cfg.vocab_size;
    if (!ids || n < 1) {
        snprintf(msg, len, "feed: no tokens");
        return MS_E_USAGE;
    }
    if (s->st.n_past + n > s->st.max_ctx) {
        snprintf(msg, len, "context full: %lld + %lld tokens > max_context %lld",
                 (long long)s->st.n_past, (long long)n, (long long)s->st.max_ctx);
        return MS_E_CONTEXT;
    }
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) {
            snprintf(msg, len, "token id %d at position %lld is out of range [0, %lld)", ids[i], (long long)i,
                     (long long)V);
            return MS_E_USAGE;
        }
    return MS_OK;
}

/* What every forward of the engine runs with (rec: record it for a rollback). */
static ms_fwd_ctx fwd_ctx(ms_engine *e, ms_rollback *rec) {
    return (ms_fwd_ctx){ .m = &e->model, .store = e->store, .pool = e->pool,
                         .predict = !e->p.no_predict_experts, .rec = rec,
                         .pass_on = e->pipe_up ? ms_pipe_pass_on : NULL, .pass_user = e,
                         .pass_groups = e->pipe_up ? e->pipe_groups : 1,
                         .pass_group_tokens = e->p.stage_groups > 0 ? 1 : MS_PIPE_GROUP_TOKENS,
                         .pass_group = e->pipe_up ? ms_pipe_pass_group : NULL };
}

/* Weight bytes this process has read (for the progress of a prompt). */
static int64_t weight_bytes_read(const ms_engine *e) {
    ms_store_stats ss;
    ms_store_get_stats(e->store, &ss);
    return ss.trunk_bytes_read + ss.global_bytes_read + ss.expert_bytes_read;
}

static ms_status feed(ms_session *s, const int32_t *ids, int64_t n, float *all_logits,
                      const score_out *score, int record, int count, int check, double *dt_out) {
    if (s->sticky != MS_OK) return s->sticky;
    const ms_status usable = check_tokens(s, ids, n, s->error, sizeof s->error);
    if (usable != MS_OK) return usable;
    ms_engine *e = s->e;
    const int64_t V = e->cfg.vocab_size;
    if (record && (s->max_draft == 0 || n > s->rb.max_T || n > e->p.prefill_chunk)) {
        snprintf(s->error, sizeof s->error, "recorded feed of %lld tokens: the session records at most %lld",
                 (long long)n, (long long)(s->max_draft ? s->rb.max_T : 0));
        return MS_E_USAGE;
    }
    s->rb.n_rec = 0;                        /* any feed ends the previous record */
    if (score && s->has_logits) {
        score->lp[0] = ms_logprob_top(s->logits, V, ids[0], score->k, score->top_ids, score->top_lp);
    } else if (score) {
        score->lp[0] = NAN;
        for (int j = 0; j < score->k; j++) { score->top_ids[j] = -1; score->top_lp[j] = NAN; }
    }
    ms_err err;
    ms_err_clear(&err);
    ms_fwd_ctx ctx = fwd_ctx(e, record ? &s->rb : NULL);
    double t0 = ms_now_s();
    ms_status st = MS_OK;
    const int64_t chunk = e->p.prefill_chunk;
    ms_progress_step ps;                    /* a prompt (not a decode step's verify pass) */
    const int prog = n > 1 && !record && ms_progress_on();
    const int64_t b0 = prog ? weight_bytes_read(e) : 0;
    if (prog) ms_progress_begin(&ps, "prompt", n, (n + chunk - 1) / chunk);
    for (int64_t i = 0; i < n && st == MS_OK; i += chunk) {
        int64_t T = n - i < chunk ? n - i : chunk;
        if (i > 0 && prog) ms_progress_report(&ps, i, i / chunk, weight_bytes_read(e) - b0);
        memcpy(s->tokens + s->st.n_past, ids + i, (size_t)T * sizeof *ids);
        float *out = all_logits ? all_logits + i * V : s->logits;
        if (score) {
            ctx.score_target = ids + i + 1;
            ctx.score_n = n - i - 1 < T ? n - i - 1 : T;
            ctx.score_lp = score->lp + i + 1;
            ctx.score_k = score->k;
            ctx.score_top_ids = score->top_ids ? score->top_ids + (i + 1) * score->k : NULL;
            ctx.score_top_lp = score->top_lp ? score->top_lp + (i + 1) * score->k : NULL;
        }
        /* a pipeline: a chunk before the last whose output nobody reads goes on
           through the stages while this one starts the next */
        ctx.pass_async = e->pipe_up && i + T < n && !all_logits && !score && !record;
        st = ms_forward(&ctx, e->fwd, &s->st, ids + i, T, out, all_logits != NULL, &err);
        if (st == MS_OK && all_logits)
            memcpy(s->logits, all_logits + (i + T - 1) * V, (size_t)V * sizeof(float));
    }
    if (e->pipe_up) {
        /* chunks still out after a failure (the last chunk collects them otherwise) */
        char msg[512];
        const ms_status ds = ms_pipe_drain(e, msg, sizeof msg);
        if (ds != MS_OK && st == MS_OK) st = ms_err_set(&err, ds, "%s", msg);
    }
    double dt = ms_now_s() - t0;
    if (dt_out) *dt_out = dt;
    if (st == MS_OK && prog) ms_progress_report(&ps, n, (n + chunk - 1) / chunk, weight_bytes_read(e) - b0);
    e->scale255 += ctx.scale255;
    if (count) {
        if (n == 1) { e->stats.n_tokens_decode++; e->stats.decode_s += dt; }
        else { e->stats.n_tokens_prefill += n; e->stats.prefill_s += dt; }
    }
    int64_t bad;
    if (st == MS_OK && check && (bad = first_nonfinite(s->logits, V)) >= 0)
        st = ms_err_set(&err, MS_E_UNSOUND, "non-finite logit %lld after position %lld",
                        (long long)bad, (long long)s->st.n_past);
    for (int64_t i = 1; st == MS_OK && score && i < n; i++)
        if (!isfinite(score->lp[i]))
            st = ms_err_set(&err, MS_E_UNSOUND, "non-finite log-probability at position %lld",
                            (long long)(s->st.n_past - n + i));
    if (st != MS_OK) return make_unsound(s, err.msg);
    s->has_logits = 1;
    return MS_OK;
}

ms_status ms_session_score(ms_session *s, const int32_t *ids, int64_t n, double *logprob, int top_k,
                           int32_t *top_ids, double *top_logprob) {
    if (!logprob || top_k < 0 || top_k > MS_TOP_MAX || (top_k > 0 && (!top_ids || !top_logprob))) {
        snprintf(s->error, sizeof s->error, "score: no output array, or top_k %d outside [0, %d]", top_k, MS_TOP_MAX);
        return MS_E_USAGE;
    }
    const score_out so = { logprob, top_k, top_ids, top_logprob };
    return feed(s, ids, n, NULL, &so, 0, 1, 1, NULL);
}

double ms_logprob_top(const float *logits, int64_t n, int32_t id, int k, int32_t *ids, double *logprobs) {
    ms_lse l;
    ms_lse_init(&l, k);
    ms_lse_fold(&l, logits, n, 0);
    if (l.k > 0) ms_lse_top(&l, l.k, ids, logprobs);
    return ms_lse_logprob(&l, logits[id]);
}

double ms_logprob(const float *logits, int64_t n, int32_t id) {
    return ms_logprob_top(logits, n, id, 0, NULL, NULL);
}

ms_status ms_session_feed(ms_session *s, const int32_t *ids, int64_t n, float *all_logits) {
    return feed(s, ids, n, all_logits, NULL, 0, 1, 1, NULL);
}

/* ms_sessions_feed's arguments (the message in ss[0]'s error); *all_one: every
 * n[i] is 1; *total: the tokens. */
static ms_status batch_check(ms_session *const *ss, int k, const int32_t *const *ids, const int64_t *n,
                             int *all_one, int64_t *total) {
    ms_session *s0 = ss[0];
    *all_one = 1;
    *total = 0;
    for (int i = 0; i < k; i++) {
        const ms_session *s = ss[i];
        const char *why = NULL;
        if (!s || s->e != s0->e) why = "not a session of the first session's engine";
        for (int j = 0; !why && j < i; j++)
            if (ss[j] == s) why = "given twice";
        if (why) {
            snprintf(s0->error, sizeof s0->error, "feed: session %d: %s", i, why);
            return MS_E_USAGE;
        }
        char msg[300];
        ms_status bad = s->sticky != MS_OK ? s->sticky : check_tokens(s, ids[i], n[i], msg, sizeof msg);
        if (bad != MS_OK) {
            snprintf(s0->error, sizeof s0->error, "session %d: %.400s", i, s->sticky != MS_OK ? s->error : msg);
            return bad;
        }
        *all_one &= n[i] == 1;
        *total += n[i];
    }
    return MS_OK;
}

ms_status ms_sessions_feed(ms_session *const *ss, int k, const int32_t *const *ids, const int64_t *n) {
    if (!ss || k < 1 || !ss[0] || !ids || !n) return MS_E_USAGE;
    ms_session *s0 = ss[0];
    ms_engine *e = s0->e;
    const int64_t V = e->cfg.vocab_size, chunk = e->p.prefill_chunk;
    int all_one;
    int64_t total;
    const ms_status bad = batch_check(ss, k, ids, n, &all_one, &total);
    if (bad != MS_OK) {
        /* every session of the call tells why (nothing was fed) */
        for (int i = 1; i < k; i++)
            if (ss[i] && ss[i]->e == e && ss[i] != s0) snprintf(ss[i]->error, sizeof ss[i]->error, "%s", s0->error);
        return bad;
    }
    int32_t *pid = e->batch_ids;
    ms_fseg *seg = e->batch_seg;
    ms_err err;
    ms_err_clear(&err);
    ms_fwd_ctx ctx = fwd_ctx(e, NULL);
    double t0 = ms_now_s();
    ms_status st = MS_OK;
    /* passes of up to `chunk` tokens (so at most `chunk` segments), filled in
     * session order: sessions before i0 are done, i0 has read `off` of its
     * tokens, the ones after it none */
    for (int i0 = 0, off = 0; i0 < k && st == MS_OK;) {
        const int first = i0;
        const int64_t first_off = off;
        int ns = 0;
        int64_t T = 0;
        for (int i = first; i < k && T < chunk; i++) {
            ms_session *s = ss[i];
            const int64_t from = i == first ? first_off : 0;
            const int64_t take = n[i] - from < chunk - T ? n[i] - from : chunk - T;
            memcpy(pid + T, ids[i] + from, (size_t)take * sizeof *pid);
            memcpy(s->tokens + s->st.n_past, ids[i] + from, (size_t)take * sizeof *pid);
            s->rb.n_rec = 0;                /* any feed ends the previous record */
            seg[ns++] = (ms_fseg){ &s->st, take, s->logits };
            T += take;
            /* the last session of the pass sets where the next one starts */
            if (from + take < n[i]) { i0 = i; off = (int)(from + take); }
            else { i0 = i + 1; off = 0; }
        }
        st = ms_forward_batch(&ctx, e->fwd, seg, ns, pid, &err);
    }
    const double dt = ms_now_s() - t0;
    e->scale255 += ctx.scale255;
    if (all_one) { e->stats.n_tokens_decode += k; e->stats.decode_s += dt; }
    else { e->stats.n_tokens_prefill += total; e->stats.prefill_s += dt; }
    if (st != MS_OK) {
        for (int i = 0; i < k; i++) make_unsound(ss[i], err.msg);
        return MS_E_UNSOUND;
    }
    /* a session whose logits are not finite is unsound (its logits NULL);
       the others are fed */
    ms_status ret = MS_OK;
    for (int i = 0; i < k; i++) {
        int64_t bad = first_nonfinite(ss[i]->logits, V);
        if (bad < 0) { ss[i]->has_logits = 1; continue; }
        char msg[128];
        snprintf(msg, sizeof msg, "non-finite logit %lld after position %lld", (long long)bad,
                 (long long)ss[i]->st.n_past);
        ret = make_unsound(ss[i], msg);
    }
    return ret;
}

ms_status ms_session_feed_rec(ms_session *s, const int32_t *ids, int64_t n, float *all_logits,
                              int record) {
    return feed(s, ids, n, all_logits, NULL, record, 1, 1, NULL);
}

ms_status ms_session_rollback(ms_session *s, int64_t n_keep, const float *logits) {
    if (s->sticky != MS_OK) return s->sticky;
    if (s->rb.n_rec == 0 || n_keep < 1 || n_keep > s->rb.n_rec) {
        snprintf(s->error, sizeof s->error, "rollback to %lld tokens of a recorded feed of %lld",
                 (long long)n_keep, (long long)s->rb.n_rec);
        return MS_E_USAGE;
    }
    char msg[512];
    const ms_status ps = ms_pipe_op(s->e, MS_PIPE_ROLLBACK, s->st.pipe_id, n_keep, msg, sizeof msg);
    if (ps != MS_OK) return make_unsound(s, msg);
    ms_state_rollback(&s->st, &s->rb, &s->e->model, s->e->pool, n_keep);
    if (logits != s->logits)
        memcpy(s->logits, logits, (size_t)s->e->cfg.vocab_size * sizeof(float));
    s->has_logits = 1;
    return MS_OK;
}

/* Prompt lookup: the most recent earlier occurrence of the last n ids of
 * h = tokens[0..n_past) + pending (n = MS_DRAFT_NGRAM, else fewer, down to 1)
 * and up to `want` ids that followed it. The continuation is read from h
 * extended by the draft itself, so a cycle shorter than `want` is drafted for
 * its whole length. Longer n first: a longer match predicts better; n = 1 still
 * catches the short cycles greedy decoding falls into. Deterministic: a
 * function of the ids only. */
#define MS_DRAFT_NGRAM 3
static int64_t draft_lookup(const int32_t *tok, int64_t n_past, int32_t pending, int64_t want,
                            int32_t *out) {
    const int64_t N = n_past + 1;
#define HID(i) ((i) < n_past ? tok[i] : (i) == n_past ? pending : out[(i) - N])
    for (int64_t n = MS_DRAFT_NGRAM; n >= 1; n--) {
        for (int64_t i = N - n - 1; i >= 0; i--) {
            int64_t j = 0;
            while (j < n && HID(i + j) == HID(N - n + j)) j++;
            if (j < n) continue;
            int64_t m = 0;
            for (; m < want; m++) out[m] = HID(i + n + m);   /* i + n + m < N + m */
            return m;
        }
    }
#undef HID
    return 0;
}

ms_status ms_session_decode(ms_session *s, int32_t pending, int n_draft, ms_pick_fn pick,
                            void *user, int32_t *out, int64_t *n_out) {
    *n_out = 0;
    if (s->sticky != MS_OK) return s->sticky;
    ms_engine *e = s->e;
    const int64_t V = e->cfg.vocab_size;
    int stop = 0;
    if (pending < 0) {
        if (!s->has_logits) {
            snprintf(s->error, sizeof s->error, "decode: no logits yet (feed a prompt first)");
            return MS_E_USAGE;
        }
        out[0] = pick(user, s->logits, s->tokens, s->st.n_past, &stop);
        *n_out = 1;
        return MS_OK;
    }
    int64_t m = 0, want = n_draft < s->max_draft ? n_draft : s->max_draft;
    if (want > s->st.max_ctx - s->st.n_past - 1) want = s->st.max_ctx - s->st.n_past - 1;
    if (want > 0) m = draft_lookup(s->tokens, s->st.n_past, pending, want, s->ver_ids + 1);
    double dt = 0.0;
    ms_status st;
    if (m == 0) {
        st = feed(s, &pending, 1, NULL, NULL, 0, 0, 1, &dt);
        e->stats.decode_s += dt;
        if (st != MS_OK) return st;
        e->stats.spec_passes++;
        e->stats.n_tokens_decode++;
        out[0] = pick(user, s->logits, s->tokens, s->st.n_past, &stop);
        *n_out = 1;
        return MS_OK;
    }
    /* verify: [pending, d1..dm] in one pass, every row's logits */
    s->ver_ids[0] = pending;
    st = feed(s, s->ver_ids, m + 1, s->ver_logits, NULL, 1, 0, 0, &dt);
    e->stats.decode_s += dt;
    if (st != MS_OK) return st;
    const int64_t n0 = s->st.n_past - (m + 1);
    int64_t i = 0;
    for (;; i++) {
        const float *row = s->ver_logits + i * V;
        /* the check a plain loop's feed of this position would have made */
        const int64_t bad = first_nonfinite(row, V);
        if (bad >= 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "non-finite logit %lld after position %lld", (long long)bad,
                     (long long)(n0 + i + 1));
            *n_out = i;
            return make_unsound(s, msg);
        }
        out[i] = pick(user, row, s->tokens, n0 + 1 + i, &stop);
        if (stop || i == m || out[i] != s->ver_ids[i + 1]) break;
    }
    const int64_t keep = i + 1;
    e->stats.spec_passes++;
    e->stats.spec_drafted += m;
    e->stats.spec_accepted += i;
    e->stats.n_tokens_decode += keep;
    *n_out = keep;
    if (keep < m + 1) return ms_session_rollback(s, keep, s->ver_logits + i * V);
    s->rb.n_rec = 0;
    return MS_OK;
}

const float *ms_session_logits(const ms_session *s) { return s->has_logits ? s->logits : NULL; }

int64_t ms_session_n_past(const ms_session *s) { return s->st.n_past; }

const int32_t *ms_session_tokens(const ms_session *s, int64_t *n) {
    *n = s->st.n_past;
    return s->tokens;
}

ms_status ms_session_copy(ms_session *dst, const ms_session *src) {
    if (!dst || !src || dst == src || dst->e != src->e) {
        if (dst) snprintf(dst->error, sizeof dst->error, "copy: not two sessions of one engine");
        return MS_E_USAGE;
    }
    ms_engine *e = src->e;
    char msg[512];
    const ms_status ps = ms_pipe_op(e, MS_PIPE_COPY, dst->st.pipe_id, src->st.pipe_id, msg, sizeof msg);
    if (ps != MS_OK) {
        make_unsound(dst, msg);
        return ps;
    }
    ms_state_copy(&dst->st, &src->st, &e->model);
    memcpy(dst->tokens, src->tokens, (size_t)src->st.n_past * sizeof *dst->tokens);
    memcpy(dst->logits, src->logits, (size_t)e->cfg.vocab_size * sizeof *dst->logits);
    dst->has_logits = src->has_logits;
    dst->rb.n_rec = 0;
    dst->sticky = src->sticky;
    snprintf(dst->error, sizeof dst->error, "%s", src->error);
    return MS_OK;
}

void ms_session_reset(ms_session *s) {
    char msg[512];
    const ms_status ps = ms_pipe_op(s->e, MS_PIPE_RESET, s->st.pipe_id, 0, msg, sizeof msg);
    ms_state_reset(&s->st, &s->e->model);
    s->rb.n_rec = 0;
    s->has_logits = 0;
    s->sticky = MS_OK;
    s->error[0] = '\0';
    if (ps != MS_OK) make_unsound(s, msg);
}

int32_t ms_argmax(const float *logits, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return (int32_t)best;
}
