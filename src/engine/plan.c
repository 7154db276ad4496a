/* engine/plan.c - the engine's memory budget and the `plan` report.
 *
 * --ram is a ceiling on the whole process. It is split, before any weight is
 * read, into:
 *   session   one session's state (KDA S + conv history, the latent MLA cache
 *             at max_context) + forward scratch for one prompt chunk + logits
 *             (+ with max_draft > 0 the rollback record and verify rows that
 *             speculative decoding uses, ms_session_bytes);
 *   overhead  what the process holds before the store allocates (code, libs,
 *             the checkpoint's name table, thread stacks): measured from
 *             /proc/self/statm at open, estimated from the tensor count in a
 *             dry plan, plus MS_SLACK_BYTES;
 *   store     the rest: pinned trunk + ring + expert cache (store/plan.h).
 * Both ms_engine_open (engine/open.c, plan_budget) and ms_plan_describe use
 * ms_session_bytes, ms_store_budget and ms_auto_chunk, so what the `plan`
 * command prints is what the engine does. A pipeline's table takes its split
 * from engine/split.c (no MPI: it works in a build without it).
 */
#include "engine/engine_int.h"

#include "store/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int64_t ms_resolve_chunk(int64_t chunk, int max_draft, char *msg, size_t msg_len) {
    const int64_t want = chunk == 0 ? MS_DEFAULT_CHUNK : chunk;
    const int lo = max_draft > 0 ? max_draft + 1 : 1;
    if (want >= lo && want <= MS_MAX_CHUNK) return want;
    if (msg && msg_len) snprintf(msg, msg_len, "prefill chunk %lld is out of [%d, %d]", (long long)chunk, lo, MS_MAX_CHUNK);
    return -1;
}

int64_t ms_session_bytes(const ms_model *m, int64_t max_ctx, int64_t max_draft, int64_t chunk, int n_seq) {
    const ms_config *c = &m->cfg;
    int64_t spec = 0;
    if (max_draft > 0)
        spec = ms_rollback_bytes(m, max_draft + 1) +
               (max_draft + 1) * (c->vocab_size * (int64_t)sizeof(float) + (int64_t)sizeof(int32_t));
    const int64_t one = ms_state_bytes(m, max_ctx, max_draft) + c->vocab_size * (int64_t)sizeof(float) +
                        max_ctx * (int64_t)sizeof(int32_t) + spec;
    /* a pipeline stage (a part of the model) also holds the messages of a pass:
       the one received or sent, and on stage 0 the groups in flight */
    int64_t msg = 0;
    if (m->layer1 - m->layer0 < m->n_layer) {
        /* a header, and per token a segment entry, the residual stream and the bank (engine/pipe.c) */
        msg = 2 * (1024 + chunk * (24 + c->hidden_size * (int64_t)sizeof(float) * (1 + ms_bank_snapshots(c))));
    }
    return (n_seq > 1 ? n_seq : 1) * one + ms_fwd_bytes(m, chunk, max_ctx) + msg;
}

int64_t ms_store_budget(int64_t ram, int64_t session, int64_t overhead) {
    if (ram <= 0) return 0;
    int64_t left = ram - session - overhead - MS_SLACK_BYTES;
    return left > 0 ? left : -1;
}

/* Bytes a decode token is expected to read under plan p: the streamed trunk
 * once, plus, of its k experts in each MoE layer, the share the cache does
 * not hold (as if it held a random subset of them). */
static int64_t decode_reads(const ms_plan *p, int64_t n_expert, int64_t k) {
    int64_t r = p->streamed_region_bytes;
    if (!p->experts_resident && p->n_expert_regions > 0 && n_expert > 0) {
        const double miss = 1.0 - (double)p->n_expert_slots / (double)p->n_expert_regions;
        if (miss > 0)
            r += (int64_t)(miss * (double)(k * (p->n_expert_regions / n_expert)) * (double)p->expert_slot_bytes);
    }
    return r;
}

/* The store's plan for its share store_ram (-1: nothing left, MS_E_BUDGET
 * with *out zeroed) of a model bound without a store, as ms_store_start will
 * make it; trunk / expert are the store's ceilings (0 = auto). */
static ms_status store_plan(const ms_model *m, int64_t store_ram, int64_t trunk, int64_t expert,
                            ms_plan *out, ms_err *err) {
    memset(out, 0, sizeof *out);
    if (store_ram < 0) return MS_E_BUDGET;
    ms_plan_input in;
    memset(&in, 0, sizeof in);
    in.regions = m->plan_regions;
    in.n_regions = m->n_plan_regions;
    in.ram_bytes = store_ram;
    in.trunk_bytes = trunk;
    in.expert_bytes = expert;
    in.min_expert_slots = (int)m->cfg.num_experts_per_token;
    return ms_plan_compute(&in, out, NULL, err);
}

/* The plan of the store's share of `ram` with chunks of `chunk` tokens;
 * MS_OK when it fits. */
static ms_status chunk_plan(const ms_model *dry, const ms_chunk_budget *b, int64_t chunk, ms_plan *out) {
    const int64_t session = ms_session_bytes(dry, b->max_ctx, b->max_draft, chunk, b->n_seq);
    ms_err err;
    ms_err_clear(&err);
    return store_plan(dry, ms_store_budget(b->ram, session, b->overhead), b->trunk_bytes,
                      b->expert_bytes, out, &err);
}

int64_t ms_overhead_estimate(const ms_model *dry, int64_t tok_bytes) {
    int64_t n_tensors = 0;
    for (int i = 0; i < dry->n_plan_regions; i++) n_tensors += dry->plan_regions[i].cls == MS_REGION_EXPERT ? 6 : 20;
    return MS_BASE_OVERHEAD + 200 * n_tensors + tok_bytes;
}

int64_t ms_auto_chunk(const ms_model *dry, const ms_chunk_budget *b) {
    if (b->ram <= 0) return MS_DEFAULT_CHUNK;
    ms_plan p32, pc;
    if (chunk_plan(dry, b, MS_DEFAULT_CHUNK, &p32) != MS_OK) return MS_DEFAULT_CHUNK;
    const int64_t E = dry->cfg.num_experts, k = dry->cfg.num_experts_per_token;
    const int64_t base = decode_reads(&p32, E, k);
    if (base <= 0) return MS_DEFAULT_CHUNK;
    ms_chunk_budget real = *b;
    real.overhead = b->measured;
    for (int64_t c = MS_AUTO_CHUNK_MAX; c > MS_DEFAULT_CHUNK; c /= 2) {
        if (c > b->max_ctx) continue;
        if (chunk_plan(dry, b, c, &pc) != MS_OK) continue;
        if (decode_reads(&pc, E, k) - base > base / MS_AUTO_CHUNK_COST) continue;
        if (b->measured > 0 && chunk_plan(dry, &real, c, &pc) != MS_OK) continue;
        return c;
    }
    return MS_DEFAULT_CHUNK;
}

static void human(int64_t b, char *buf, size_t n) { ms_plan_human(b, buf, n); }

ms_status ms_draft_model_bytes(const char *dir, int64_t max_ctx, int max_draft, int n_seq, int64_t *weights,
                               int64_t *rest, ms_err *err) {
    *weights = *rest = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    ms_config cfg;
    ms_err ce;
    ms_err_clear(&ce);
    if (ms_config_load(path, &cfg, &ce) != MS_OK) return ms_err_set(err, MS_E_USAGE, "--draft-model %s: %s", dir, ce.msg);
    ms_model m;
    ms_status st = ms_model_bind(&m, &cfg, NULL, NULL, &ce);
    ms_plan plan;
    if (st == MS_OK) st = store_plan(&m, 0, 0, 0, &plan, &ce);     /* no ceiling: every region resident */
    if (st != MS_OK) {
        ms_model_free(&m);
        return ms_err_set(err, MS_E_USAGE, "--draft-model %s: %s", dir, ce.msg);
    }
    const int64_t seq = n_seq > 1 ? n_seq : 1;
    *weights = plan.total_bytes;
    /* its sessions (no speculation of its own: marks instead, which move back up to
       max_draft positions, kept by a sliding layer's ring) and their marks and
       catch-up ids; its forward scratch (chunks of 32); its name table */
    *rest = ms_session_bytes(&m, max_ctx, 0, MS_DEFAULT_CHUNK, n_seq) +
            seq * (ms_state_bytes(&m, max_ctx, max_draft) - ms_state_bytes(&m, max_ctx, 0)) +
            seq * ((int64_t)max_draft * ms_dm_mark_floats(&m) * (int64_t)sizeof(float) + max_ctx * (int64_t)sizeof(int32_t)) +
            ms_overhead_estimate(&m, 0) - MS_BASE_OVERHEAD;
    ms_model_free(&m);
    return MS_OK;
}

ms_status ms_prompt_cache_plan(const ms_model *dry, const ms_engine_params *p, int64_t *store_ram,
                               int64_t *cache, ms_err *err) {
    *cache = 0;
    const int64_t want = p->prompt_cache_bytes;
    if (want < 0 && want != MS_PROMPT_CACHE_OFF)
        return ms_err_set(err, MS_E_USAGE, "bad prompt cache size %lld", (long long)want);
    if (want == MS_PROMPT_CACHE_OFF) return MS_OK;
    if (p->ram_bytes == MS_RAM_MIN || p->ram_bytes == 0) {
        /* no budget to take it from: what was asked (at the floor, none by default) */
        *cache = want > 0 ? want : p->ram_bytes == 0 ? MS_PROMPT_CACHE_DEFAULT : 0;
        return MS_OK;
    }
    ms_plan pl;
    ms_err pe;
    ms_err_clear(&pe);
    if (want > 0) {
        /* asked for: out of the store's share, which must still hold its floor */
        if (*store_ram - want <= 0 ||
            store_plan(dry, *store_ram - want, p->trunk_bytes, p->expert_bytes, &pl, &pe) != MS_OK)
            return ms_err_set(err, MS_E_BUDGET, "a prompt cache of %lld bytes leaves the store %lld of its %lld bytes: "
                              "below its smallest plan", (long long)want, (long long)(*store_ram - want),
                              (long long)*store_ram);
        *store_ram -= want;
        *cache = want;
        return MS_OK;
    }
    /* automatic: what the store's plan leaves (the store keeps its share, so its
       plan is the one it makes without a cache; the cache gives way first) */
    if (store_plan(dry, *store_ram, p->trunk_bytes, p->expert_bytes, &pl, &pe) == MS_OK && pl.total_bytes < *store_ram)
        *cache = *store_ram - pl.total_bytes;
    return MS_OK;
}

/* The smallest plan, found as ms_engine_open finds it at --ram min: a plan at
 * 1 byte is refused and reports its floor, and the plan at the floor is the
 * one used. */
static ms_status floor_plan(const ms_model *m, ms_plan *plan, ms_err *err) {
    const ms_status st = store_plan(m, 1, 0, 0, plan, err);
    ms_err_clear(err);
    return st == MS_E_BUDGET && plan->floor_bytes > 0 ? store_plan(m, plan->floor_bytes, 0, 0, plan, err)
                                                      : ms_err_set(err, MS_E_INTERNAL, "cannot find the smallest plan");
}

ms_status ms_plan_describe(const char *path, int64_t ram_bytes, int64_t max_context,
                           int max_draft, int64_t prefill_chunk, int n_seq, char *out, size_t n) {
    return ms_plan_describe_stages(path, ram_bytes, max_context, max_draft, prefill_chunk, n_seq, 0, NULL, out, n);
}

/* The draft model's line of the table (dir NULL: none), at out + at; where:
 * what follows it (NULL: nothing). */
static size_t draft_line(const char *dir, int64_t weights, int64_t rest, const char *where, char *out, size_t at,
                         size_t n) {
    if (!dir) return 0;
    char a[32], b[32], c[32];
    human(weights + rest, a, sizeof a);
    human(weights, b, sizeof b);
    human(rest, c, sizeof c);
    return (size_t)snprintf(out + at, n > at ? n - at : 0,
                            "  draft model %s (resident: weights %s; its sessions' state, marks, scratch %s): %s%s%s\n",
                            dir, b, c, a, where ? " " : "", where ? where : "");
}

/* Stage r's process overhead (ms_overhead_estimate): the tokenizer's tok
 * bytes on stage 0 alone, the one that tokenizes (engine/open.c, 3c). */
static int64_t stage_overhead(const ms_model *part, int r, int64_t tok) {
    return ms_overhead_estimate(part, r == 0 ? tok : 0);
}

/* A pipeline of n_stages machines, each with ram_bytes: every stage's plan,
 * and the bytes each reads per decode token (ms_plan_describe_stages). */
static ms_status describe_stages(const ms_model *m, const char *cfg_path, int64_t ram_bytes, int64_t max_context,
                                 int max_draft, int64_t prefill_chunk, int n_seq, int n_stages, const char *spec,
                                 const char *draft_dir, int64_t draft_weights, int64_t draft_rest, int64_t tok,
                                 char *out, size_t n) {
    const int64_t draft = draft_weights + draft_rest;      /* stage 0's: the stage that decodes */
    ms_err err;
    ms_err_clear(&err);
    const ms_config *cfg = &m->cfg;
    int start[MS_MAX_STAGES + 1];
    ms_status st = ms_pipe_split_model(m, spec, n_stages, start, &err);
    if (st != MS_OK) { snprintf(out, n, "%s\n", err.msg); return st; }
    ms_model part[MS_MAX_STAGES];
    int bound = 0;
    /* every stage's scratch holds a pass: the pipeline's chunk is the smallest */
    int64_t chunk = prefill_chunk;
    for (int r = 0; r < n_stages && st == MS_OK; r++, bound++) {
        st = ms_model_bind_part(&part[r], cfg, NULL, NULL, start[r], start[r + 1], r == 0, &err);
        if (st == MS_OK && prefill_chunk == 0) {
            const ms_chunk_budget cb = { ram_bytes, stage_overhead(&part[r], r, tok), max_context, max_draft, n_seq, 0, 0, 0 };
            const int64_t c = ms_auto_chunk(&part[r], &cb);
            if (chunk == 0 || c < chunk) chunk = c;
        }
    }
    if (st != MS_OK) {
        snprintf(out, n, "%s\n", err.msg);
        for (int r = 0; r < bound; r++) ms_model_free(&part[r]);
        return st;
    }
    char a[32], b[32], c[32], d[32], e[32];
    human(ram_bytes, a, sizeof a);
    size_t at = (size_t)snprintf(out, n,
                                 "model: %s: %lld layers, hidden %lld, %lld experts x %lld layers, vocab %lld\n"
                                 "pipeline: %d stage%s (mpirun -np %d), each with its own budget: %s; %lld-token chunks\n"
                                 "stage  layers     planned    trunk pinned   streamed/pass  expert slots  reads/decode token\n",
                                 cfg_path, (long long)cfg->num_hidden_layers, (long long)cfg->hidden_size,
                                 (long long)cfg->num_experts, (long long)(cfg->num_hidden_layers - cfg->first_k_dense_replace),
                                 (long long)cfg->vocab_size, n_stages, n_stages > 1 ? "s" : "", n_stages,
                                 ram_bytes > 0 ? a : ram_bytes == MS_RAM_MIN ? "min (its smallest plan)" : "none",
                                 (long long)chunk);
    int64_t all = 0, worst = 0, cache[MS_MAX_STAGES] = { 0 };
    ms_status ret = MS_OK;
    for (int r = 0; r < n_stages; r++) {
        const ms_model *pm = &part[r];
        const int64_t overhead = stage_overhead(pm, r, tok);
        const int64_t session = ms_session_bytes(pm, max_context, max_draft, chunk, n_seq) + (r == 0 ? draft : 0);
        ms_plan plan;
        ms_err pe;
        ms_err_clear(&pe);
        const ms_status ps = ram_bytes == MS_RAM_MIN ? floor_plan(pm, &plan, &pe)
                             : store_plan(pm, ms_store_budget(ram_bytes, session, overhead), 0, 0, &plan, &pe);
        char layers[32];
        snprintf(layers, sizeof layers, "%d-%d%s", start[r], start[r + 1] - 1, r == 0 ? "+head" : "");
        if (ps != MS_OK) {
            ms_plan fl;
            store_plan(pm, 1, 0, 0, &fl, &pe);      /* refused; its floor is filled in */
            human(fl.floor_bytes + session + overhead + MS_SLACK_BYTES, b, sizeof b);
            at += (size_t)snprintf(out + at, n > at ? n - at : 0, "%5d  %-9s  DOES NOT FIT: its smallest plan needs %s\n",
                                   r, layers, b);
            ret = ps;
            continue;
        }
        const int64_t reads = decode_reads(&plan, cfg->num_experts, cfg->num_experts_per_token);
        /* its share of the prompt cache: what its plan leaves (ms_prompt_cache_plan) */
        cache[r] = ram_bytes > 0 ? ms_store_budget(ram_bytes, session, overhead) - plan.total_bytes
                   : ram_bytes == MS_RAM_MIN ? 0 : MS_PROMPT_CACHE_DEFAULT;
        all += reads;
        if (reads > worst) worst = reads;
        human(plan.total_bytes + session + overhead + MS_SLACK_BYTES, b, sizeof b);
        human(plan.trunk_pinned_region_bytes, c, sizeof c);
        human(plan.trunk_region_bytes, d, sizeof d);
        human(plan.streamed_region_bytes, e, sizeof e);
        char cc[32], slots[48];
        snprintf(slots, sizeof slots, "%d/%d", plan.n_expert_slots, plan.n_expert_regions);
        human(reads, cc, sizeof cc);
        at += (size_t)snprintf(out + at, n > at ? n - at : 0, "%5d  %-9s  %9s  %s of %s  %13s  %12s  %s\n", r, layers, b, c,
                               d, e, slots, cc);
    }
    if (draft_dir) at += draft_line(draft_dir, draft_weights, draft_rest, "(stage 0 holds it: in its planned bytes)",
                                    out, at, n);
    if (ret == MS_OK) {
        human(worst, b, sizeof b);
        human(all, c, sizeof c);
        at += (size_t)snprintf(out + at, n > at ? n - at : 0,
                               "reads per decode token: %s on the busiest stage, %s in all (each stage reads its own disk;"
                               " the stages run one after another on a token)\n", b, c);
        at += (size_t)snprintf(out + at, n > at ? n - at : 0, "prompt cache per stage:");
        for (int r = 0; r < n_stages; r++) {
            human(cache[r] > 0 ? cache[r] : 0, b, sizeof b);
            at += (size_t)snprintf(out + at, n > at ? n - at : 0, " %d: %s%s", r, b, r + 1 < n_stages ? "," : "");
        }
        at += (size_t)snprintf(out + at, n > at ? n - at : 0,
                               " (%s; each stage holds its layers' part of an entry, kept only where every share"
                               " holds it; --prompt-cache-ram sets each)\n",
                               ram_bytes > 0 ? "what each plan leaves" : ram_bytes == MS_RAM_MIN ? "none at the floor"
                                                                                    : "no budget: the default cap");
    }
    for (int r = 0; r < n_stages; r++) ms_model_free(&part[r]);
    return ret;
}

ms_status ms_plan_describe_stages(const char *path, int64_t ram_bytes, int64_t max_context, int max_draft,
                                  int64_t prefill_chunk, int n_seq, int n_stages, const char *stages, char *out,
                                  size_t n) {
    return ms_plan_describe_draft(path, NULL, ram_bytes, max_context, max_draft, prefill_chunk, n_seq, n_stages, stages,
                                  out, n);
}

ms_status ms_plan_describe_draft(const char *path, const char *draft_model, int64_t ram_bytes, int64_t max_context,
                                 int max_draft, int64_t prefill_chunk, int n_seq, int n_stages, const char *stages,
                                 char *out, size_t n) {
    return ms_plan_describe_tree(path, draft_model, ram_bytes, max_context, max_draft, prefill_chunk, n_seq, 0,
                                 n_stages, stages, out, n);
}

/* The tokenizer the engine loads before its budget (engine/open.c), counted
 * as it does: loaded, its bytes taken, freed (0 bytes: none in model_dir). */
static ms_status tokenizer_bytes(const char *model_dir, int64_t n_vocab, int64_t *bytes, ms_err *err) {
    *bytes = 0;
    if (ms_tok_find(model_dir) == MS_TOK_NONE) return MS_OK;
    ms_tok *t;
    const ms_status st = ms_tok_load(model_dir, n_vocab, &t, err);
    if (st != MS_OK) return st;
    *bytes = ms_tok_bytes(t);
    ms_tok_free(t);
    return MS_OK;
}

/* "64.1 MiB" or, with a tokenizer, "83.5 MiB (the tokenizer 19.3 MiB)". */
static void overhead_label(int64_t overhead, int64_t tok, char *out, size_t n) {
    char a[32], b[32];
    human(overhead + MS_SLACK_BYTES, a, sizeof a);
    human(tok, b, sizeof b);
    if (tok > 0) snprintf(out, n, "%s (the tokenizer %s)", a, b);
    else snprintf(out, n, "%s", a);
}

ms_status ms_plan_describe_tree(const char *path, const char *draft_model, int64_t ram_bytes, int64_t max_context,
                                int max_draft, int64_t prefill_chunk, int n_seq, int draft_tree, int n_stages,
                                const char *stages, char *out, size_t n) {
    ms_err err;
    ms_err_clear(&err);
    if (max_draft < 0) max_draft = 0;
    if (n_seq < 1) n_seq = 1;
    draft_tree = draft_tree && max_draft > 0;
    if (draft_tree && n_stages >= 1) {
        snprintf(out, n, "--draft-tree 1: not in a pipeline (one process only)");
        return MS_E_USAGE;
    }
    if (n_seq > MS_MAX_SEQ) {
        snprintf(out, n, "%d sessions: at most %d", n_seq, MS_MAX_SEQ);
        return MS_E_USAGE;
    }
    int64_t chunk = ms_resolve_chunk(prefill_chunk, max_draft, out, n);
    if (chunk < 0) return MS_E_USAGE;
    char cfg_path[4200];
    struct stat sb;
    const int is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    snprintf(cfg_path, sizeof cfg_path, is_dir ? "%s/config.json" : "%s", path);
    if (max_context <= 0) max_context = MS_DEFAULT_CONTEXT;
    int64_t dw = 0, dr = 0;
    if (draft_model && ms_draft_model_bytes(draft_model, max_context, max_draft, n_seq, &dw, &dr, &err) != MS_OK) {
        snprintf(out, n, "%s", err.msg);
        return MS_E_MODEL;
    }
    ms_config cfg;
    ms_status st = ms_config_load(cfg_path, &cfg, &err);
    if (st != MS_OK) { snprintf(out, n, "%s", err.msg); return st == MS_E_IO ? MS_E_MODEL : st; }
    int64_t tok = 0;
    if (is_dir && (st = tokenizer_bytes(path, cfg.vocab_size, &tok, &err)) != MS_OK) { snprintf(out, n, "%s", err.msg); return st; }
    ms_model m;
    st = ms_model_bind(&m, &cfg, NULL, NULL, &err);
    if (st != MS_OK) { snprintf(out, n, "%s", err.msg); ms_model_free(&m); return st; }
    if (n_stages >= 1) {
        st = describe_stages(&m, cfg_path, ram_bytes, max_context, max_draft, prefill_chunk, n_seq, n_stages, stages,
                             draft_model, dw, dr, tok, out, n);
        ms_model_free(&m);
        return st;
    }
    const int64_t overhead = ms_overhead_estimate(&m, tok);
    if (prefill_chunk == 0) {
        const ms_chunk_budget cb = { ram_bytes, overhead, max_context, max_draft, n_seq + draft_tree, 0, 0, 0 };
        chunk = ms_auto_chunk(&m, &cb);
    }
    /* draft_tree: the second branch's session is one more (engine/draft_tree.c) */
    const int64_t session = ms_session_bytes(&m, max_context, max_draft, chunk, n_seq + draft_tree);
    const int64_t store_ram = ms_store_budget(ram_bytes, session + dw + dr, overhead);
    ms_plan plan;
    st = ram_bytes == MS_RAM_MIN ? floor_plan(&m, &plan, &err) : store_plan(&m, store_ram, 0, 0, &plan, &err);
    char a[32], ob[80], c[32], d[32], nseq_label[64], what[96];
    ms_state_what(&m, max_context, max_draft, what, sizeof what);
    if (draft_tree) snprintf(nseq_label, sizeof nseq_label, "%d session%s + a second branch's", n_seq, n_seq > 1 ? "s" : "");
    else snprintf(nseq_label, sizeof nseq_label, "%d sessions", n_seq);
    human(session, a, sizeof a);
    overhead_label(overhead, tok, ob, sizeof ob);
    human(ram_bytes, c, sizeof c);
    size_t at = 0;
    at += (size_t)snprintf(out + at, n > at ? n - at : 0,
                           "model: %s: %lld layers, hidden %lld, %lld experts x %lld layers, vocab %lld\n"
                           "budget: %s\n"
                           "  %s (%s, scratch for %lld-token chunks%s): %s\n"
                           "  process overhead + slack: %s\n",
                           cfg_path, (long long)cfg.num_hidden_layers, (long long)cfg.hidden_size,
                           (long long)cfg.num_experts, (long long)(cfg.num_hidden_layers - cfg.first_k_dense_replace),
                           (long long)cfg.vocab_size,
                           ram_bytes > 0 ? c : ram_bytes == MS_RAM_MIN ? "min (the smallest plan)" : "none (everything resident)",
                           n_seq > 1 || draft_tree ? nseq_label : "session",
                           what, (long long)chunk,
                           prefill_chunk == 0 && ram_bytes > 0 ? ", chosen for the budget" : "", a, ob);
    at += draft_line(draft_model, dw, dr, NULL, out, at, n);
    if (st == MS_OK || st == MS_E_BUDGET) {
        if (st == MS_OK || plan.floor_bytes > 0) {
            at += (size_t)snprintf(out + at, n > at ? n - at : 0, "store:\n");
            if (at < n) at += (size_t)ms_plan_format(&plan, out + at, n - at);
        }
        if (st == MS_E_BUDGET) {
            int64_t need = plan.floor_bytes + session + dw + dr + overhead + MS_SLACK_BYTES;
            human(need, d, sizeof d);
            at += (size_t)snprintf(out + at, n > at ? n - at : 0,
                                   "DOES NOT FIT: the smallest plan needs %s in all, the budget is %s\n", d, c);
        } else {
            const int64_t left = ram_bytes > 0 ? store_ram - plan.total_bytes
                                 : ram_bytes == MS_RAM_MIN ? 0 : MS_PROMPT_CACHE_DEFAULT;
            human(left > 0 ? left : 0, d, sizeof d);
            at += (size_t)snprintf(out + at, n > at ? n - at : 0, "prompt cache: %s (%s; --prompt-cache-ram sets it)\n", d,
                                   ram_bytes > 0 ? "what the store's plan leaves"
                                   : ram_bytes == MS_RAM_MIN ? "none at the floor" : "no budget: the default cap");
            human(plan.total_bytes + session + dw + dr + overhead + MS_SLACK_BYTES + (ram_bytes > 0 && left > 0 ? left : 0), d,
                  sizeof d);
            at += (size_t)snprintf(out + at, n > at ? n - at : 0, "total planned: %s\n", d);
        }
    } else {
        at += (size_t)snprintf(out + at, n > at ? n - at : 0, "%s\n", err.msg);
    }
    ms_model_free(&m);
    return st;
}

ms_status ms_trace_replay_file(const char *path, const char *policy, int capacity,
                               ms_trace_stats *out, char *errbuf, size_t errbuf_len) {
    ms_err err;
    ms_err_clear(&err);
    ms_trace_result r;
    memset(out, 0, sizeof *out);
    ms_status st = ms_trace_replay(path, policy, capacity, &r, &err);
    if (st != MS_OK) {
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "%s", err.msg);
        return st;
    }
    out->requests = r.requests;
    out->hits = r.hits;
    out->misses = r.misses;
    out->batches = r.batches;
    out->hit_rate = r.hit_rate;
    return MS_OK;
}
