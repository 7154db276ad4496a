/* engine/engine_int.h - the engine's private structures, shared by the
 * files of src/engine/ (open.c: open/close; engine.c: sessions and feeds;
 * plan.c: the budget; split.c: a pipeline's layer split; text.c, chat.c:
 * tokenizer and chat wrappers; session_io.c: sessions on disk; draft.c:
 * speculation's draft sources; draft_model.c: a draft model; draft_tree.c:
 * a pass's second branch) and by the
 * pipeline above them (pipe.c). Nothing outside src/engine includes it but
 * tests.
 *
 * Direction: the engine does not call the pipeline by name. engine/pipe.c
 * (MPI) sits above the engine: it calls the public API and what is declared
 * here, and registers its ms_pipe_hooks at ms_pipe_boot; the engine reaches
 * the other stages only through them (ms_engine_pipe_*). Built without MPI,
 * engine/pipe_none.c registers nothing. The one remaining edge is the
 * forward's pass to the next stages (ms_pipe_pass, named by
 * engine.c's fwd_ctx). */
#ifndef MS_ENGINE_INT_H
#define MS_ENGINE_INT_H

#include "moestream.h"

#include "base/err.h"
#include "base/log.h"
#include "base/pool.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "format/pack.h"
#include "format/sums.h"
#include "model/model.h"
#include "store/store.h"
#include "text/tokenizer.h"

struct ms_chat_fmt;
#include "engine/draft.h"

#define MS_DEFAULT_CONTEXT 4096
/* Automatic groups of a pipeline's batched pass (ms_engine_params.stage_groups
 * 0): at least this many tokens a group, so prompt passes are split and the
 * decode steps of a few sequences stay in one piece (a step costs about one
 * read of the weights from memory whatever its tokens, and a group adds a
 * stage turn; docs/ARCHITECTURE.md, "Pipeline across machines"). */
#define MS_PIPE_GROUP_TOKENS 16
/* Tokens per pass over the weights when a feed has several
 * (ms_engine_params.prefill_chunk): the automatic choice's smallest and its
 * value without a budget (ms_auto_chunk). */
#define MS_DEFAULT_CHUNK 32
#define MS_MAX_CHUNK 65536
/* Memory the budget keeps free beyond what is counted: libc arenas, thread
 * stacks, page-table and allocator rounding (see engine/plan.c). */
#define MS_SLACK_BYTES ((int64_t)48 << 20)
/* A process's resident size before it loads anything (code, libraries). */
#define MS_BASE_OVERHEAD ((int64_t)16 << 20)

/* n_seq sessions at max_ctx positions and the one forward scratch they share
 * (chunks of `chunk` tokens); max_draft > 0 adds, per session, what
 * ms_session_decode needs to verify up to max_draft drafted tokens per pass
 * (the rollback record, the verify pass's logits rows, the draft). */
int64_t ms_session_bytes(const ms_model *m, int64_t max_ctx, int64_t max_draft, int64_t chunk, int n_seq);
/* The prompt cache's share of the store's budget *store_ram (0: none) for
 * parameters p, the store's plan of the rest under the same ceilings: p's
 * size taken out of *store_ram, or the automatic one (what the plan leaves).
 * MS_E_BUDGET when the store's floor no longer fits (engine/plan.c). */
ms_status ms_prompt_cache_plan(const ms_model *dry, const ms_engine_params *p, int64_t *store_ram,
                               int64_t *cache, ms_err *err);
/* The largest ms_engine_params.n_seq. */
#define MS_MAX_SEQ 64
/* The largest ms_engine_params.max_draft (a verify pass is one chunk, so the
 * chunk must be at least max_draft + 1). */
#define MS_MAX_DRAFT (MS_DEFAULT_CHUNK - 1)
/* The chunk ms_engine_params asks for: 0 -> MS_DEFAULT_CHUNK; -1, with the
 * reason in msg, when out of [max(1, max_draft + 1), MS_MAX_CHUNK]. */
int64_t ms_resolve_chunk(int64_t chunk, int max_draft, char *msg, size_t msg_len);
/* The automatic chunk (ms_engine_params.prefill_chunk 0). A larger chunk reads
 * a long prompt's streamed weights fewer times, but its scratch comes out of
 * the budget: it pins less of the trunk or caches fewer experts, so every
 * decode token may read more. The automatic chunk is the largest power of two
 * up to MS_AUTO_CHUNK_MAX (and max_ctx) whose plan fits and whose expected
 * decode reads (streamed trunk + uncached share of a token's experts) exceed
 * those of the 32-token chunk's plan by at most 1 / MS_AUTO_CHUNK_COST;
 * MS_DEFAULT_CHUNK with no budget, or when a decode token reads nothing. */
#define MS_AUTO_CHUNK_MAX 1024
#define MS_AUTO_CHUNK_COST 32
typedef struct ms_chunk_budget {
    int64_t ram, overhead;              /* --ram (0 = none) and the process overhead the
                                           choice plans with (ms_overhead_estimate) */
    int64_t max_ctx;
    int max_draft;
    int n_seq;
    int64_t trunk_bytes, expert_bytes;  /* the store's ceilings (0 = auto) */
    int64_t measured;                   /* > 0: the overhead the store will get (the
                                           process's RSS): a chunk above 32 must fit it too */
} ms_chunk_budget;
/* The choice plans with the estimated overhead, not the measured RSS, so it
 * is the same in every run of the same command (the RSS moves by a megabyte
 * or so between runs, and a budget near a boundary flipped between two
 * chunks) and `plan` shows what the engine does. */
int64_t ms_auto_chunk(const ms_model *dry, const ms_chunk_budget *b);
/* The process overhead `plan` and the chunk choice assume: MS_BASE_OVERHEAD
 * plus ~200 bytes per tensor for the checkpoint's name table, plus tok_bytes,
 * the tokenizer's (ms_tok_bytes; it is loaded before the budget). */
int64_t ms_overhead_estimate(const ms_model *dry, int64_t tok_bytes);
/* The store's share of `ram` (0 = no limit), -1 when nothing is left. */
int64_t ms_store_budget(int64_t ram, int64_t session, int64_t overhead);

typedef struct ms_pipe_hooks ms_pipe_hooks;    /* the pipeline's calls, below */

/* ---- the identity of the weights (engine/ident.c; docs/SECURITY.md,
 * "Identity of the weights") ----
 * What a saved session, a pipeline stage or a prompt-cache entry records of
 * the weights that computed it. sums: the digest of the checksum sidecar's
 * block hashes (ms_sums_content_hash; 0 when the engine runs without one);
 * sample: a fingerprint of every shard's name, size, first and last 4 KiB and
 * of the tensor table (never 0 once opened). */
typedef struct ms_weights_id {
    uint64_t sums, sample;
} ms_weights_id;
/* The identity of e's weights, computed once at open. Pure. */
ms_weights_id ms_weights_identity(const ms_engine *e);
/* Whether a and b name the same weights: their sums digests when both have
 * one (every byte), else their samples. Pure. */
int ms_weights_id_same(ms_weights_id a, ms_weights_id b);
/* "sums 0123456789abcdef, sampled 0123456789abcdef" (or "sampled ..., no
 * sidecar") into buf; returns buf. */
const char *ms_weights_id_str(ms_weights_id id, char *buf, size_t len);
/* The sampled fingerprint of ck (reads 8 KiB per shard). MS_E_IO / MS_E_MODEL
 * naming a shard that cannot be opened or read. */
ms_status ms_weights_fingerprint(const ms_ckpt *ck, uint64_t *out, ms_err *err);

struct ms_engine {
    ms_engine_params p;
    ms_logger log;
    ms_config cfg;
    ms_ckpt *ckpt;
    ms_sums *sums;              /* NULL: no sidecar (or no_verify); outlives the store */
    ms_pack *pack;              /* NULL: no packed trunk (or no_pack); outlives the store */
    ms_store *store;
    ms_model model;
    int model_bound;
    const ms_kern *kern;        /* the kernel table (e->model takes it once bound) */
    int n_threads;
    ms_pool *pool;
    int pool_borrowed;          /* 1: pool is another engine's (a draft model's engine) */
    ms_stats stats;
    int64_t scale255;
    ms_tok *tok;                /* NULL when the model ships no tokenizer */
    ms_fwd *fwd;                /* the forward scratch every session's feed uses (calls that
                                   compute never run concurrently on one engine) */
    int32_t *batch_ids;         /* ms_sessions_feed: a pass's ids [prefill_chunk] */
    ms_fseg *batch_seg;         /* and its segments [prefill_chunk] (one token each at most) */
    uint64_t model_hash;        /* config.json + tensor table: identifies sessions on disk */
    ms_weights_id weights_id;   /* the weights themselves (ms_weights_identity) */
    /* a pipeline (engine/pipe.c): this process is stage `stage` of n_stages and runs
       layers [stage_start[stage], stage_start[stage + 1]); one stage without */
    const ms_pipe_hooks *pipe;  /* NULL: one process */
    int stage, n_stages;
    int stage_start[MS_MAX_STAGES + 1];
    int pipe_up;                /* stage 0: every stage opened, sessions are named to them */
    int pipe_groups;            /* stage 0: groups a batched pass is sent in (ms_next_stage.max_groups) */
    int64_t next_pipe_id;
    struct ms_pcache *pcache;   /* the prompt cache (engine/prefix_cache.c); NULL: none */
    int64_t pcache_bytes;       /* its size, from the budget (ms_prompt_cache_plan) */
    struct ms_pdisk *pdisk;     /* the prompt cache on disk (engine/prefix_disk.c); NULL: none */
    int32_t eom_id;             /* the chat format's message end (<|end_of_msg|>, <|end|>),
                                   where prompt marks fall; -1: none */
    int32_t stop_ids[5];        /* eos_token_id + the chat format's stop tokens (ms_stop_ids) */
    int n_stop_ids;
    ms_drafter *draft;          /* ms_session_decode's draft sources (engine/draft.c); NULL
                                   without speculation */
    struct ms_engine *dm;       /* the draft model's engine (engine/draft_model.c); NULL: none */
    int64_t dm_mark_floats;     /* floats of one mark of its state (ms_dm_mark_floats) */
    int64_t state_back;         /* how far its sessions' positions may move back: p.max_draft,
                                   a draft model's engine the main engine's (ms_state_init) */
    struct ms_session *tree_b;  /* draft_tree: the session a pass's second branch is verified
                                   in (engine/draft_tree.c); NULL: chains only */
    char error[512];
};

struct ms_session {
    ms_engine *e;
    ms_state st;
    float *logits;              /* [n_vocab] */
    int32_t *tokens;            /* [max_ctx] ids fed so far */
    int has_logits;
    int prompt_progress;        /* ms_session_feed_prompt reports the whole prompt: feed() does not */
    /* speculative decoding (engine p.max_draft > 0) */
    int64_t max_draft;          /* 0: no record, ms_session_decode never drafts */
    ms_rollback rb;
    float *ver_logits;          /* [max_draft + 1, n_vocab] the verify pass's rows */
    int32_t *ver_ids;           /* [max_draft + 1] pending token + draft */
    int64_t draft_sid;          /* names its runs in the engine's history (ms_drafter_remember) */
    int64_t draft_end;          /* where its run in the history ends */
    struct ms_dm_sess *dm;      /* its state of the draft model (NULL: none) */
    /* the decode step under way (ms_sessions_decode): the ids drafted
       (ver_ids[1..ver_m]), their source and the draft model's offer */
    int64_t ver_m;
    int ver_src;
    double ver_p[MS_MAX_DRAFT_IDS];  /* auto: the choice rule's probability of each drafted id */
    ms_draft_offer ver_offer;
    ms_decode_counts dec;       /* ms_session_decode_counts */
    ms_status sticky;
    char error[512];
};


/* ms_session_feed, with record = 1: record the feed (n <= s->max_draft + 1,
 * one chunk) so ms_session_rollback can keep a prefix of it. */
ms_status ms_session_feed_rec(ms_session *s, const int32_t *ids, int64_t n, float *all_logits,
                              int record);
/* Keep the first n_keep tokens of the last recorded feed; ms_session_logits
 * becomes `logits` (the row of position n_keep - 1, [n_vocab]). MS_E_USAGE when
 * the last feed was not recorded or n_keep is out of [1, its length]. */
ms_status ms_session_rollback(ms_session *s, int64_t n_keep, const float *logits);

/* Index of the first non-finite logit of row [V], or -1. */
int64_t ms_first_nonfinite(const float *row, int64_t V);
/* ms_sessions_decode's verification of session s after its pass (engine.c):
 * its rows picked in order while its draft holds, then rolled back to just
 * after the last position kept; its counters, the engine's and the
 * drafter's. pre 1: out[0] was picked from row 0 already (with *stop =
 * pre_stop): the picks go on from row 1. */
ms_status ms_decode_verify(ms_session *s, ms_pick_fn pick, void *user, int32_t *out, int64_t *n_out, int pre,
                           int pre_stop);

/* ---- a second branch (engine/draft_tree.c; ms_engine_params.draft_tree) ---- */
/* e->tree_b, a session of e without a draft model state. MS_E_USAGE without
 * draft_auto or in a pipeline. */
ms_status ms_tree_open(ms_engine *e, ms_err *err);
void ms_tree_close(ms_engine *e);
/* After session s drafted its chain for a step that feeds `pending` (at most
 * n_draft ids asked): whether a second branch pays (ms_drafter_branch); if
 * so e->tree_b is s as it is now, its draft [pending, b1, ...] ready to be
 * fed in the same pass (its ver_ids, ver_m, ver_src), and 1 is returned. */
int ms_tree_branch(ms_session *s, int32_t pending, int n_draft);
/* After the pass that fed s and e->tree_b: row 0 picked once; the branch
 * whose first drafted id it is verified on (tree_b becomes s by exchanging
 * their buffers when it is the second), the other dropped; counters. */
ms_status ms_tree_verify(ms_session *s, ms_pick_fn pick, void *user, int32_t *out, int64_t *n_out);

/* ---- the draft model (engine/draft_model.c) ---- */
typedef struct ms_dm_sess ms_dm_sess;
/* Before the model's weights are read: MS_E_USAGE naming both directories when
 * the draft's config.json cannot be read or its vocab_size is not e's. */
ms_status ms_dm_check_config(const ms_engine *e, ms_err *err);
/* After e's tokenizer, before the budget is split: MS_E_USAGE naming both
 * when the draft's tokenizer is not e's. The same files are the same; else
 * the draft's is loaded, a digest of every id's bytes compared (both without
 * one: equal), and freed, so that its parse's peak comes before anything is
 * pinned and nothing of it stays. */
ms_status ms_dm_check_tokenizer(const ms_engine *e, ms_err *err);
/* Open e->p.draft_model as e->dm (resident, e's kernels and threads; no
 * tokenizer: ms_dm_check_tokenizer checked it). */
ms_status ms_dm_open(ms_engine *e, ms_err *err);
void ms_dm_close(ms_engine *e);
/* Floats of one mark: the recurrent state (KDA S and conv history) of m. */
int64_t ms_dm_mark_floats(const ms_model *m);
/* s->dm: a session of the draft engine, its marks (e->p.max_draft of them) and
 * a catch-up buffer (max_context ids). */
ms_status ms_dm_sess_open(ms_session *s, ms_err *err);
void ms_dm_sess_close(ms_dm_sess *d);
/* The draft model's offer for s's h = ids + pending: up to want ids drafted
 * greedily (fewer when ms_drafter_model_more says a longer one cannot pay for
 * one of `share` sequences a pass), with its probability of each. Counts
 * draft_model_tokens / _s. Returns o->n. */
int64_t ms_dm_draft(ms_session *s, int32_t pending, int64_t want, int share, ms_draft_offer *o);
/* The resident bytes of draft model `dir` for n_seq sessions of max_ctx
 * positions and max_draft marks each: its weights, its sessions' state, the
 * marks and catch-up buffers, its forward scratch and name table
 * (engine/plan.c). MS_E_USAGE naming dir when its config cannot be read. */
ms_status ms_draft_model_bytes(const char *dir, int64_t max_ctx, int max_draft, int n_seq, int64_t *weights,
                               int64_t *rest, ms_err *err);
/* ms_engine_open for one process, whatever pipeline this process runs in, on
 * the threads of `pool` (NULL: its own; else it must outlive the engine),
 * loading the model's tokenizer or not (`tokenizer` 0: the engine takes ids
 * only, as the draft model's engine). */
ms_status ms_engine_open_alone(const ms_engine_params *p, ms_pool *pool, int tokenizer, ms_engine **out,
                               char *errbuf, size_t errbuf_len);

/* FNV-1a 64 over bytes, continuing from h (start with MS_FNV_INIT). */
#define MS_FNV_INIT 0xcbf29ce484222325ull
uint64_t ms_fnv1a(uint64_t h, const void *data, size_t n);

/* ---- a pipeline's layer split (engine/split.c, no MPI) ---- */
/* The stages' first layers for n stages over n_layer layers whose reads per
 * token cost cost[il] each, stage 0 also head_cost: start[0] = 0 < start[1]
 * < ... < start[n] = n_layer, contiguous, the largest stage cost as small as
 * can be (ties: the first in the order of start[1], start[2], ...). -1 if
 * n > n_layer. */
int ms_pipe_split(const int64_t *cost, int n_layer, int64_t head_cost, int n, int *start);
/* The same for n stages of the model `dry` (bound whole), spec as --stages
 * (NULL: balanced on the bytes per token at the floor); start[n + 1]. */
ms_status ms_pipe_split_model(const ms_model *dry, const char *spec, int n, int *start, ms_err *err);

/* ---- the pipeline across processes (engine/pipe.c, above the engine) ---- */
enum { MS_PIPE_OPEN = 1, MS_PIPE_CLOSE, MS_PIPE_RESET, MS_PIPE_COPY, MS_PIPE_ROLLBACK, MS_PIPE_STATS_RESET,
       MS_PIPE_SET_PAST, MS_PIPE_PC_STORE, MS_PIPE_PC_RESTORE, MS_PIPE_PC_DROP };
/* What the engine asks of the other stages. Stage 0's calls; each is made
 * only while its engine's pipe_up is set (every stage opened). */
struct ms_pipe_hooks {
    int rank, size;             /* this process's stage, and the number of stages (> 1) */
    /* After a stage's open (own = its status): a stage r > 0 tells stage 0;
     * stage 0 hears every stage, takes the smallest prompt chunk, sets
     * pipe_up and pipe_groups, and on any failure closes the stages that
     * opened. Returns own, or the first failed stage's status (its message
     * in msg). Called on every stage, e NULL when own failed. */
    ms_status (*meet)(ms_engine *e, ms_status own, char *msg, size_t len);
    /* Apply a session operation on every other stage (a0, a1: the session
     * ids; ROLLBACK: a1 = n_keep; OPEN: a1 = 1 to record for speculation;
     * the prompt cache's parts (engine/prefix_cache.h), a1 = the entry id:
     * PC_STORE / PC_RESTORE a0 = the session, PC_DROP a0 = 1 when a stage
     * without the part passes). */
    ms_status (*op)(ms_engine *e, int op, int64_t a0, int64_t a1, char *msg, size_t len);
    /* One layer's state of session `id` (layer il, held by another stage)
     * read from it (get) or written to it (put), n floats in buf: a KDA
     * layer's S then its conv history, or an MLA layer's latent cache for
     * positions [0, n_past). */
    ms_status (*layer_state)(ms_engine *e, int get, int64_t id, int il, int64_t n_past, float *buf, int64_t n,
                             char *msg, size_t len);
    /* After a feed: the answers to its prompt chunks still out
     * (ms_fwd_ctx.pass_async), dropped; the first failure among them. */
    ms_status (*drain)(ms_engine *e, char *msg, size_t len);
    /* Add the other stages' byte counters and the pipeline's pass counts to st. */
    void (*add_stats)(const ms_engine *e, ms_stats *st);
    /* At ms_engine_close: the other stages close and their processes end. */
    void (*close)(ms_engine *e);
};
/* The pipeline this process runs in (ms_pipe_boot calls it once, before any
 * engine opens; a process of its own never does). */
void ms_engine_set_pipe(const ms_pipe_hooks *h);
/* The engine's calls to the other stages: MS_OK (nothing to do) while e has
 * no pipeline up. */
ms_status ms_engine_pipe_op(ms_engine *e, int op, int64_t a0, int64_t a1, char *msg, size_t len);
ms_status ms_engine_pipe_layer_state(ms_engine *e, int get, int64_t id, int il, int64_t n_past, float *buf,
                                     int64_t n, char *msg, size_t len);
/* 1 when this build has the pipeline (Open MPI), 0 for make MPI=0. */
extern const int ms_pipe_built;
/* ms_fwd_ctx.next.pass for stage 0 (pass_user = the engine): the other
 * stages do op (model.h, ms_pass_op) on a pass's activations. */
ms_status ms_pipe_pass(const ms_fwd_ctx *c, ms_pass_op op, const ms_fseg *seg, int nseg, int64_t T, float *run,
                       float *bank, int64_t nb_max, int *nb, ms_err *err);
/* Tests: a layer's state crosses the pipeline in pieces of `floats` (0: the
 * default, STATE_PIECE_FLOATS in engine/pipe_msg.h), so small models take the
 * path of a long context's layers. Stage 0's; a no-op without MPI. */
void ms_pipe_set_state_piece(int64_t floats);
/* Weight bytes this process has read so far (the progress of a prompt). */
int64_t ms_engine_weight_bytes_read(const ms_engine *e);

/* The chat format of the engine's model family (engine/chat.c): the one place
 * a family is mapped to its chat format. Never NULL. */
const struct ms_chat_fmt *ms_engine_chat_fmt(const ms_engine *e);
/* e->eom_id and e->stop_ids from the tokenizer (by name) and the format. */
void ms_engine_text_ids(ms_engine *e);

#endif
