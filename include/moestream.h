/* moestream.h - the one public header of the moestream engine.
 *
 * moestream runs Kimi K3 (and checkpoints in its released layout) on a CPU
 * machine. The engine holds the weights (resident or streamed); a session
 * holds one sequence's state (KDA state, conv history, latent MLA cache).
 * Programs (cli/, server/) include only this header.
 *
 * Threading: an engine may be shared by sessions, but calls that compute
 * (ms_session_feed) must not run concurrently on one engine; the engine uses
 * its own thread pool internally. Output bits do not depend on n_threads.
 *
 * Errors: every call returns an ms_status; a message for the last failure is
 * available from ms_engine_error()/ms_session_error(). A session whose result
 * is no longer sound (e.g. an expert could not be read) enters a sticky
 * MS_E_UNSOUND state: every later feed fails with it.
 */
#ifndef MOESTREAM_H
#define MOESTREAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ms_status {
    MS_OK = 0,
    MS_E_USAGE = -1,     /* bad argument or flag */
    MS_E_MODEL = -2,     /* unreadable or invalid model / checkpoint / config */
    MS_E_IO = -3,        /* an I/O operation failed */
    MS_E_NOMEM = -4,     /* allocation failed */
    MS_E_BUDGET = -5,    /* the plan does not fit the RAM budget */
    MS_E_UNSOUND = -6,   /* the result is no longer sound (sticky) */
    MS_E_INTERNAL = -7,
    MS_E_CANCELLED = -8,
    MS_E_CONTEXT = -9    /* session context is full */
} ms_status;

const char *ms_status_name(ms_status s);

typedef enum ms_log_level {
    MS_LOG_ERROR = 0, MS_LOG_WARN = 1, MS_LOG_INFO = 2, MS_LOG_DEBUG = 3
} ms_log_level;

typedef void (*ms_log_fn)(void *user, ms_log_level level, const char *line);

typedef struct ms_engine ms_engine;
typedef struct ms_session ms_session;

#define MS_RAM_MIN ((int64_t)-1)

/* A byte size as the engine's options take it ("8G", "512MiB", "1.5T", "4096":
 * K/M/G/T are powers of 1024, an optional "i" and trailing B; no sign); -1 when
 * s is not one. Every command line of the project parses sizes with it. */
int64_t ms_parse_size(const char *s);

typedef struct ms_engine_params {
    const char *model_dir;      /* directory holding config.json + safetensors */
    int n_threads;              /* compute threads; 0 = number of online CPUs */
    int64_t ram_bytes;          /* hard ceiling on resident memory; 0 = no limit;
                                   MS_RAM_MIN = the smallest plan that fits */
    int64_t max_context;        /* positions a session may hold; 0 = 4096 */
    int n_seq;                  /* sessions the memory plan counts (0 = 1): sequences served
                                   together (ms_sessions_feed), each with its own state at
                                   max_context positions; all share one forward scratch */
    /* store and I/O knobs (0 / NULL = default); none of them changes output bits */
    int64_t trunk_bytes;        /* > 0: ceiling on pinned trunk + ring */
    int64_t expert_bytes;       /* > 0: ceiling on the expert cache */
    const char *io_backend;     /* "direct" (default), "pread", "uring" */
    int io_queue_depth;         /* reads in flight (default 32) */
    int64_t io_chunk_bytes;     /* reads are split into pieces of at most this many bytes,
                                   rounded up to 4 KiB (default 2 MiB; at most 1 GiB) */
    const char *cache_policy;   /* "s3fifo" (default), "lru" */
    int no_readahead;           /* 1: read streamed trunk regions synchronously */
    const char *trace_path;     /* append every expert request here */
    const char *kernels;        /* the kernel table: NULL or "auto" = the best this CPU runs;
                                   "ref", "avx2", "avx512", "avx512-l2" to choose one (a CPU
                                   that lacks it: MS_E_USAGE at open). Every table gives the
                                   same bits (docs/DETERMINISM.md); only the speed differs */
    int no_predict_experts;     /* 1: do not prefetch predicted experts. By default, during
                                   decode, the next layer's router (when it is in memory) is
                                   applied to this layer's input and its choices are read as
                                   guesses (behind every needed read; cancelled when wrong) */
    /* checksums (moestream.sums, see ms_verify_checkpoint): when the sidecar is there,
       every weight byte read from disk is verified before it is used */
    const char *sums_path;      /* NULL = MODEL_DIR/moestream.sums if it exists (else no
                                   verification); a path given here must exist */
    int no_verify;              /* 1: do not load the sidecar, verify nothing */
    /* packed trunk (moestream.pack, see ms_pack_checkpoint): when it is there and the
       checksum sidecar is loaded, the trunk regions it holds are read from it (~0.75 of
       their bytes), decoded without loss and checked against the sidecar; the bytes the
       model sees, and so every output bit, are the same. Without the sidecar (none, or
       no_verify) a pack found in MODEL_DIR is ignored with a warning */
    const char *pack_path;      /* NULL = MODEL_DIR/moestream.pack if it exists; a path
                                   given here must exist and match the checkpoint and its
                                   sidecar */
    int no_pack;                /* 1: read the trunk from the shards only */
    /* speculative decoding (ms_session_decode, ms_sessions_decode): > 0 lets every session verify up to
       max_draft drafted tokens per pass (at most 31); the memory this takes per
       session (~ n_kda_layers x (KDA state + (max_draft + 1) x (4P + nh) floats) +
       (max_draft + 1) logits rows, and max_draft positions more in a sliding layer's
       ring of keys) is counted in the plan. 0 = no speculation. */
    int max_draft;
    /* with max_draft > 0: 1 = every pass drafts the length that maximises the expected
       emitted tokens per byte (this run's measured bytes per pass and per fed token; at a
       resident budget the bytes the compute touches; a pass verifying k sessions' drafts
       weighs 1/k of its trunk for each), from the source expected to gain
       most (--speculate auto); 0 = every pass drafts what its source offers, up to the
       n_draft asked (--speculate K). The bits do not change either way. With draft_auto
       and a prefill_chunk given below max_draft + 1, max_draft is prefill_chunk - 1 (at
       chunk 1: no speculation) instead of the chunk being refused. */
    int draft_auto;
    /* with draft_auto: 1 = a pass of ms_session_decode may verify a second branch
       (`--draft-tree 1`): when the counted index offers a second candidate b1 for the
       first drafted position and the choice rule expects [pending, b1, b2, ...], fed
       beside the chain in the same pass (one read of the weights; the extra pending costs
       no expert bytes), to emit more tokens per byte than the chain alone. The branch is
       verified in a copy of the session the engine holds: one more session's memory (state
       at max_context, logits, rollback record and rows), counted in the plan, so at small
       budgets less of the trunk is pinned and every pass may read more. The bits do not
       change. ms_sessions_decode with several sessions keeps chains. 0 = chains only.
       MS_E_USAGE without draft_auto or in a pipeline. */
    int draft_tree;
    /* with draft_auto: > 0 = the bytes a pass and a fed token cost, given instead of this
       run's measured ones (`--draft-costs`): what auto would choose for another model or
       budget, from this one's drafts (docs/PERFORMANCE.md projects K3 so). 0 = measured. */
    double draft_pass_bytes, draft_token_bytes;
    /* with max_draft > 0: a text file (at most 8 MiB) tokenized at open, a draft source
       beside the session's own tokens and the engine's earlier outputs; its index (at
       most 2 Mi tokens, 8 bytes each) and the history of outputs (at most 1 Mi tokens,
       8 bytes each) are not counted in the plan. NULL = none. MS_E_USAGE at open when
       the file cannot be read or is too large (before the model loads) or the model has
       no tokenizer. */
    const char *draft_corpus;
    /* with max_draft > 0: a draft model, the directory of another checkpoint the engine
       runs (same layout, any size) whose vocabulary and tokenizer are the model's: same
       vocab_size and the same bytes for every id (refused at open otherwise, MS_E_USAGE
       naming both). It is kept resident, run by the same kernels and threads, and drafts
       greedily ahead of the model (one more source, MS_DRAFT_MODEL; with draft_auto its
       length is chosen by the same rule, q per token its own probability of the id it
       drafted); each session has its own state of it, advanced over the tokens kept.
       Its weights, its sessions' state and their marks are counted in the plan (out of
       ram_bytes). Only the bytes the model reads change; every emitted bit is the same.
       NULL = none. */
    const char *draft_model;
    /* prompt chunks: a feed of several tokens runs through the model prefill_chunk tokens
       at a time, and each chunk is one pass over the weights: a streamed trunk, and the
       experts the chunk's tokens use, are read once per chunk. A prompt of n tokens
       therefore reads the streamed bytes ceil(n / prefill_chunk) times. The forward
       scratch grows with the chunk and is counted in the plan. Output bits do not depend
       on it. 0 = automatic: with a ram_bytes budget, the largest power of two from 32 to
       1024 whose scratch costs a decode token at most 1/32 more expected reads (see
       docs/ARCHITECTURE.md, "Prompt chunks"); 32 without a budget. Otherwise in
       [1, 65536] and at least max_draft + 1 (a verify pass is one chunk);
       ms_engine_info tells the chunk in use. */
    int64_t prefill_chunk;
    /* fault injection, for tests: fail request #fault_at_read of the run */
    int fault_kind;             /* 0 none, 1 EIO, 2 transient, 3 short, 4 corrupt */
    int64_t fault_at_read;
    int64_t fault_corrupt_begin, fault_corrupt_end;  /* kind 4: bytes [begin, end) of the
                                   request (relative to its offset) are flipped; 0, 0 = [0, 64) */
    ms_log_fn log;              /* NULL = silent */
    void *log_user;
    ms_log_level log_level;
    /* a pipeline across processes (ms_pipe_boot): the layers where stages 1, 2, ...
       begin, as "L1,L2,..." (n_stages - 1 increasing layer indices); NULL = split so
       that each stage reads about the same bytes per token (docs/ARCHITECTURE.md,
       "Pipeline across machines"). Ignored without a pipeline. */
    const char *stages;
    /* a pipeline's batched passes (several sessions fed together) go through the stages
       in up to stage_groups groups, each sent on as soon as the first stage is done with
       it, so the stages work at once; 0 = automatic: one group per stage when every stage
       holds its trunk in RAM (a group then costs no extra reads) and the pass has at least
       16 tokens per group (a prompt; a decode step of a few sequences costs about one read
       of the weights from memory whatever its tokens, and is not split), else 1 (one
       piece). N > 0: up to N groups for any pass of several sessions. The bits do not
       change. */
    int stage_groups;
    /* the prompt cache (ms_session_reuse, ms_session_remember): snapshots of sessions'
       state kept in RAM so that a prompt sharing a prefix with an earlier one feeds only
       the rest. Bytes it may hold: 0 = automatic (with ram_bytes: what the store's plan
       leaves of the budget, possibly nothing; with MS_RAM_MIN: none; without a budget:
       MS_PROMPT_CACHE_DEFAULT); > 0: that much, taken from the store's share of ram_bytes
       (MS_E_BUDGET when the store's floor no longer fits); MS_PROMPT_CACHE_OFF: none.
       In a pipeline every stage sizes its own share so and keeps its layers' part of
       each entry; a stage with none turns the cache off. The bits do not change
       (docs/ARCHITECTURE.md, "Prompt cache"). */
    int64_t prompt_cache_bytes;
    /* the prompt cache on disk: snapshots also written as files in this directory
       (created if missing), so that another process of the same model (a restarted
       server, a new `run`) starts warm. NULL = none. Looked up after the RAM cache; a
       hit is loaded into the session (and the RAM cache). Every file names the model
       and weights it belongs to and carries a checksum: a damaged, truncated, foreign
       or stale one is ignored with a warning and removed, never used. In a pipeline
       stage 0 keeps the directory; an entry's file is the same whatever the split, so
       one process and pipelines share a directory. The bits do not change
       (docs/ARCHITECTURE.md, "Prompt cache on disk"). */
    const char *prompt_cache_dir;
    /* bytes the directory's entries may take: 0 = MS_PROMPT_CACHE_DISK_DEFAULT */
    int64_t prompt_cache_disk_bytes;
    /* tests only: the prompt_cache_fault_write-th file the disk cache writes (1 = the
       first) fails with ENOSPC after half its bytes; 0 = none */
    int64_t prompt_cache_fault_write;
} ms_engine_params;
#define MS_PROMPT_CACHE_OFF ((int64_t)-1)
#define MS_PROMPT_CACHE_DEFAULT ((int64_t)2 << 30)
#define MS_PROMPT_CACHE_DISK_DEFAULT ((int64_t)20 << 30)

ms_engine_params ms_engine_default_params(void);

/* ---- a pipeline across processes (MPI) ----
 * Started with `mpirun -np N ... moestream COMMAND ...`, every process runs
 * the same command line: process 0 (the first stage) runs the command and
 * holds the embedding, lm_head and the first layers; process r > 0 holds the
 * next layers, and its ms_engine_open... serves them until process 0 closes
 * its engine. Each process reads its own copy of the checkpoint (on its own
 * disk) under its own --ram budget. Every output bit is the one process's. */
#define MS_MAX_STAGES 64
/* Join the pipeline if the process was started by mpirun with N > 1
 * (MPI_Init); otherwise do nothing. 0 on success. A build without MPI
 * (make MPI=0) started that way prints "built without MPI" and exits the
 * process with status 2. */
int ms_pipe_boot(int *argc, char ***argv);
int ms_pipe_rank(void);                     /* 0 without a pipeline */
int ms_pipe_size(void);                     /* 1 without a pipeline */
/* In a stage r > 0: open the engine for p (its layers only), serve the
 * first stage until it closes its engine, and exit the process (status 0,
 * or the open's failure). In the first stage, or without a pipeline: return.
 * A build without MPI exits with status 2 ("built without MPI") when p asks
 * for a pipeline's options (stages, stage_groups). */
void ms_pipe_serve_if_worker(const ms_engine_params *p);

/* Open the model in p->model_dir. On failure returns a negative status,
 * *out is NULL and `errbuf` (if not NULL) holds a one-line message. */
ms_status ms_engine_open(const ms_engine_params *p, ms_engine **out,
                         char *errbuf, size_t errbuf_len);
void ms_engine_close(ms_engine *e);
/* The kernel tables this build holds ("ref avx2 avx512 avx512-l2"), and the
 * one ms_engine_open takes for ms_engine_params.kernels (NULL or "auto": the
 * best this CPU runs); NULL when the CPU or the build lacks it. */
const char *ms_kernels_built(void);
const char *ms_kernels_choice(const char *kernels);
const char *ms_engine_error(const ms_engine *e);

typedef struct ms_model_info {
    int64_t n_vocab;
    int64_t n_layer;
    int64_t n_embd;
    int64_t n_expert;
    int64_t n_expert_used;
    int64_t bos_id, eos_id, pad_id;
    int64_t max_context;
    int64_t prefill_chunk;      /* tokens per pass over the weights (the automatic choice
                                   when ms_engine_params.prefill_chunk was 0) */
    const char *kernels;        /* the kernel table in use ("avx512", ...; static storage) */
} ms_model_info;

void ms_engine_info(const ms_engine *e, ms_model_info *info);

/* Where ms_session_decode's drafts come from: the session's own tokens, the
 * engine's earlier outputs (every session's decode steps), the draft corpus. */
enum { MS_DRAFT_CONTEXT = 0, MS_DRAFT_HISTORY = 1, MS_DRAFT_CORPUS = 2, MS_DRAFT_MODEL = 3, MS_DRAFT_SOURCES = 4 };
/* Their names in reports ("context", "history", "corpus", "model"); "?" for another value. */
const char *ms_draft_source_name(int src);

/* Counters since the engine was opened (or since ms_engine_stats_reset). */
typedef struct ms_stats {
    int64_t n_tokens_prefill;   /* tokens fed through multi-token feeds */
    int64_t n_tokens_decode;    /* tokens fed one at a time */
    double prefill_s, decode_s; /* wall time inside feeds */
    double io_wait_s;           /* time the compute thread waited for weights */
    double io_busy_s;           /* time with at least one weight read in flight: the device
                                   busy as far as the engine sees it (wall time less this
                                   is time the disk idled) */
    double io_inflight_s;       /* reads in flight integrated over time (read-seconds);
                                   / io_busy_s = the mean number in flight while busy */
    int64_t trunk_bytes_read;
    int64_t expert_bytes_read;
    int64_t reads_issued;
    int64_t expert_requests;    /* (layer, expert) uses */
    int64_t expert_hits;        /* uses served from memory without any read */
    int64_t scale255_groups;    /* MXFP4 groups with scale byte 255 (add zero) */
    int64_t readahead_issued;   /* trunk regions read ahead */
    int64_t readahead_used;     /* acquires served by a read-ahead (the rest waited for a demand read) */
    int64_t prefetch_issued;    /* expert reads started by a hint */
    int64_t prefetch_hits;      /* expert uses served by a prefetch */
    int64_t guess_issued;       /* part of prefetch_issued: next-layer predictions (predict_experts) */
    int64_t guess_hits;         /* part of prefetch_hits: predictions that were right */
    int64_t guess_cancelled;    /* predictions found wrong while queued: their unread bytes
                                   were never read (nor counted in expert_bytes_read) */
    int64_t peak_rss_bytes;     /* from the kernel, filled by ms_engine_stats */
    /* checksum verification: counted since the engine was opened (loading included),
       not reset by ms_engine_stats_reset; all 0 without a sidecar */
    int verify_on;              /* 1: a sidecar is loaded and every read is verified */
    int64_t verify_bytes;       /* bytes whose block hashes matched */
    int64_t verify_retries;     /* reads repeated after a mismatch (a transient one is cured) */
    int64_t verify_failures;    /* reads failed because the repeat mismatched too */
    double verify_s;            /* time spent hashing (mostly on the I/O threads, as data lands) */
    double verify_sync_s;       /* part of verify_s spent on the compute thread (0 by default) */
    /* ms_session_decode, ms_sessions_decode: passes that fed tokens (each reads the
       weights once, whatever the sessions it serves), drafted tokens verified, drafted
       tokens accepted; tokens emitted by those passes = n_tokens_decode */
    int64_t spec_passes, spec_drafted, spec_accepted;
    /* the same drafted / accepted tokens by where the draft came from (MS_DRAFT_*) */
    int64_t spec_src_drafted[MS_DRAFT_SOURCES], spec_src_accepted[MS_DRAFT_SOURCES];
    /* second branches (ms_engine_params.draft_tree): the passes that verified one, the
       drafted tokens they verified in it (also in spec_drafted) and those of them kept
       (also in spec_accepted) */
    int64_t spec_tree_passes, spec_tree_drafted, spec_tree_accepted;
    /* the draft model (ms_engine_params.draft_model): tokens it was fed (the tokens the
       sessions kept, caught up, and the ones it drafted from) and the time it took */
    int64_t draft_model_tokens;
    double draft_model_s;
    /* packed trunk: trunk_bytes_read counts the packed bytes read; these are the
       checkpoint bytes they stood for, and the decode time (on the I/O threads) */
    int pack_on;                /* 1: a pack is loaded */
    int64_t packed_regions;     /* trunk regions read from it */
    int64_t trunk_packed_read;  /* part of trunk_bytes_read read from the pack */
    int64_t trunk_unpacked_bytes; /* the checkpoint bytes those stood for */
    double unpack_s;
    int64_t pack_fallbacks;     /* regions given up (decode error or checksum mismatch) */
    /* a pipeline: trunk_bytes_read and expert_bytes_read above are the sums over its
       stages (every other counter is the first stage's); these are each stage's */
    int n_stages;               /* 1 without a pipeline */
    int64_t stage_group_passes; /* batched passes sent through the stages in groups, several
                                   in flight at once (when every stage holds its trunk) */
    int64_t stage_async_chunks; /* prompt chunks sent on to the next stage without waiting for
                                   them: the next chunk starts while the later stages work */
    int64_t stage_trunk_bytes[MS_MAX_STAGES], stage_expert_bytes[MS_MAX_STAGES];
    int64_t stage_peak_rss[MS_MAX_STAGES];  /* each stage's process (peak_rss_bytes: stage 0's) */
    int64_t stage_prompt_cache_bytes[MS_MAX_STAGES];    /* a pipeline: what each stage's part of
                                                           the prompt cache holds now */
    /* the prompt cache: prompt tokens restored instead of fed, restores, and what it holds
       now (bytes and entries; not reset) out of prompt_cache_cap */
    int64_t prompt_tokens_reused, prompt_cache_hits;
    int64_t prompt_cache_bytes, prompt_cache_cap;
    int prompt_cache_entries;
    /* the prompt cache on disk: restores from it, entries written, writes that failed (a
       full disk: a warning, nothing partial left), entries refused at a check (damaged,
       truncated, foreign, stale: a warning each) */
    int64_t prompt_disk_hits, prompt_disk_writes, prompt_disk_write_failures, prompt_disk_rejected;
} ms_stats;

void ms_engine_stats(const ms_engine *e, ms_stats *st);
void ms_engine_stats_reset(ms_engine *e);

ms_status ms_session_open(ms_engine *e, ms_session **out);
void ms_session_close(ms_session *s);
const char *ms_session_error(const ms_session *s);

/* Feed n >= 1 tokens, all in one pass over the weights per chunk. After
 * success ms_session_logits() holds the logits after the last token. If
 * all_logits is not NULL it receives [n, n_vocab] logits, one row per fed
 * token. Bits are identical whether tokens are fed one at a time or together. */
ms_status ms_session_feed(ms_session *s, const int32_t *ids, int64_t n,
                          float *all_logits);

/* Feed k >= 1 distinct sessions of one engine together: session ss[i] reads
 * its n[i] >= 1 tokens ids[i], as ms_session_feed would, but every pass over
 * the weights serves up to prefill_chunk tokens of all of them (each
 * session's tokens stay in order; passes are filled in session order). So k
 * sequences decoding side by side read a streamed trunk once per step, not
 * k times, and their experts once per step each. Bits: each session's state
 * and logits are exactly those ms_session_feed gives it alone, whatever the
 * company, order or budget (docs/DETERMINISM.md). Afterwards each
 * ms_session_logits() holds the logits after its last token. Nothing is fed
 * when an argument is bad (MS_E_USAGE, MS_E_CONTEXT; every session's error
 * tells why); when a pass fails, every session of the call is unsound; a
 * session whose logits come out non-finite is unsound (its
 * ms_session_logits() NULL) and the call returns MS_E_UNSOUND, the others
 * being fed. Counted as k decode tokens when every n[i] is 1, else as prefill. */
ms_status ms_sessions_feed(ms_session *const *ss, int k, const int32_t *const *ids, const int64_t *n);

/* Feed n >= 1 tokens as ms_session_feed does (one pass over the weights per
 * chunk) and score them: logprob[i] = log p(ids[i] | everything before it),
 * natural log, for i in [0, n); with top_k > 0 (at most MS_TOP_MAX) also the
 * top_k most likely ids at each position i and their log-probabilities,
 * best first, ties to the lower id (top_ids / top_logprob [n * top_k]; -1 /
 * NAN where the vocabulary is smaller). Position 0 is NAN (ids -1) when the
 * session holds no logits yet (nothing fed). The engine reduces each row of
 * logits as the lm_head makes it, a tile of the vocabulary at a time, so no
 * [n, n_vocab] array is held (K3: 671 MB for 1024 tokens). Bits: those of
 * ms_logprob / ms_logprob_top on the rows ms_session_feed's all_logits would
 * hold, whatever the budget, chunk, thread count or how the text is split
 * across calls. Afterwards ms_session_logits() holds the logits after the
 * last token. */
#define MS_TOP_MAX 20
ms_status ms_session_score(ms_session *s, const int32_t *ids, int64_t n, double *logprob, int top_k,
                           int32_t *top_ids, double *top_logprob);

/* log p(id) under logits[0, n): log-softmax in double, one pass in index
 * order (a running maximum and a sum rescaled when it grows). */
double ms_logprob(const float *logits, int64_t n, int32_t id);

/* ms_logprob of id, from the same single pass that also writes the k
 * (<= MS_TOP_MAX) most likely ids under logits[0, n), best first, ties to the
 * lower id, with their log-probabilities (-1 / NAN past n). */
double ms_logprob_top(const float *logits, int64_t n, int32_t id, int k, int32_t *ids, double *logprobs);

/* ---- decoding (plain or speculative) ---- */

/* Chooses the next token from logits [n_vocab]; history = the n_history ids
 * those logits follow (what ms_session_tokens would return in a plain loop).
 * Set *stop = 1 to end the step after this token (a stop token, the length
 * limit, a stop string): no later token is chosen and the session is left as a
 * plain loop that stops there leaves it. */
typedef int32_t (*ms_pick_fn)(void *user, const float *logits, const int32_t *history,
                              int64_t n_history, int *stop);

/* One decode step, the loop every front end runs. `pending` is the token
 * chosen last and not fed yet (-1: none, the first token after a prompt: pick
 * once from ms_session_logits, feed nothing). Otherwise, without a draft (or
 * with n_draft = 0): feed `pending`, pick once. With n_draft > 0 (clamped to
 * the engine's max_draft and the context), draft up to n_draft tokens: by
 * prompt lookup (the most recent earlier occurrence of the last 3, else 2,
 * else 1 ids of the history + pending, and what followed it), else from the
 * engine's earlier outputs or the draft corpus (ms_engine_params.draft_corpus);
 * with a draft model (ms_engine_params.draft_model), by it, greedily, first;
 * with draft_auto, from the source and of the length (possibly 0) expected to
 * emit most tokens per byte read (docs/ARCHITECTURE.md, "Drafts"); feed pending + draft
 * in ONE pass over the weights, then pick from each row in turn while the
 * token picked equals the next drafted one, and roll the session back to just
 * after the last position kept. With draft_tree, a pass may also feed a
 * second branch [pending, b1, ...] (b1 another candidate for the first drafted
 * position) in a copy of the session; the first row picks between them (its
 * bits are the same in both), the picker then reads only the rows of the
 * branch whose first id it picked, and the session becomes that branch (its
 * buffers are exchanged with the copy's: the pointers ms_session_logits and
 * ms_session_tokens returned before the step may no longer be the session's).
 * The tokens picked land in out[0..*n_out)
 * (capacity n_draft + 1, at least 1); the last one is the new pending token.
 * Exactness: the picker is called with exactly the logits bits and history a
 * plain one-token-per-feed loop would give it, the same number of times; the
 * session afterwards (state, logits, ids) equals that loop's (docs/DETERMINISM.md).
 * The tokens a step feeds join the engine's history of outputs (a later
 * session, or a later request of a server, drafts from it).
 * Errors: those of ms_session_feed (the session is then unsound); tokens
 * picked before the failure are in out. Several sessions in one pass:
 * ms_sessions_decode. */
ms_status ms_session_decode(ms_session *s, int32_t pending, int n_draft, ms_pick_fn pick,
                            void *user, int32_t *out, int64_t *n_out);

/* One decode step of k >= 1 distinct sessions of one engine together: session
 * ss[i] does what ms_session_decode(ss[i], pending[i], n_draft[i], pick,
 * user[i], out[i], &n_out[i]) does alone - the same draft sources, the same
 * choice of length with draft_auto, the same picks, rollback and counters -
 * but every session's [pending, draft] goes into ONE pass over the weights
 * (ms_sessions_feed's: a streamed trunk is read once for all of them, their
 * experts once each), each session's rows and rollback record its own. A
 * session with pending -1 picks once from its logits and feeds nothing. Its
 * drafts are cut so that all of them fit one pass (at most prefill_chunk / k -
 * 1 ids each, k the sessions that feed; with more sessions than the chunk
 * holds tokens, passes of whole sessions), and with draft_auto each weighs a
 * pass's trunk as shared by the k (docs/ARCHITECTURE.md, "Drafts"); with k >
 * 1 the drafts are chains (draft_tree's second branch only for k = 1). Then each
 * session's rows are picked in session order (pick(user[i], ...)), as
 * ms_session_decode picks. out[i] has room for n_draft[i] + 1 ids (at least 1).
 * Bits: each session's emitted ids, logits and state afterwards are exactly
 * those of a plain one-token-per-feed loop with the same picker, whatever the
 * company, the order, budget, threads or chunk (docs/DETERMINISM.md); the
 * pickers of different sessions must not share state (each gets its own
 * history and rows). Errors: nothing is fed when an argument is bad
 * (MS_E_USAGE, MS_E_CONTEXT for a pending id past the context; every
 * session's error says which session and why) or a session is unsound (its
 * status); when a pass fails every session that fed is unsound; a session
 * whose row comes out non-finite where a plain loop would read it, or whose
 * rollback fails (a pipeline), is unsound (its ms_session_logits() NULL, the
 * ids picked before in out[i]) and the call returns MS_E_UNSOUND, the others
 * being decoded. ms_session_decode is this call with k = 1. */
ms_status ms_sessions_decode(ms_session *const *ss, int k, const int32_t *pending, const int *n_draft,
                             ms_pick_fn pick, void *const *user, int32_t *const *out, int64_t *n_out);

/* What the decode steps (ms_session_decode, ms_sessions_decode) of one session
 * did since it was opened (never reset: a caller reporting one request takes
 * the difference across it): the passes its tokens were fed in, the tokens
 * those passes emitted for it, and its drafted / accepted ids by the source
 * of the draft (MS_DRAFT_*). Engine-wide sums: ms_stats.spec_*. */
typedef struct ms_decode_counts {
    int64_t passes, tokens;
    int64_t drafted[MS_DRAFT_SOURCES], accepted[MS_DRAFT_SOURCES];
    /* second branches (ms_stats.spec_tree_*): passes, drafted, accepted */
    int64_t tree_passes, tree_drafted, tree_accepted;
} ms_decode_counts;
void ms_session_decode_counts(const ms_session *s, ms_decode_counts *out);

/* Logits [n_vocab] after the last fed token; NULL before any feed. */
const float *ms_session_logits(const ms_session *s);
int64_t ms_session_n_past(const ms_session *s);

/* Forget all tokens (state back to the start of a sequence). */
void ms_session_reset(ms_session *s);

/* Make dst a copy of src (both sessions of one engine): its ids, state and
 * logits, so that dst goes on exactly as src would (a fork: several
 * continuations of one prompt read the prompt once). Copies, reads no
 * weights. MS_E_USAGE for sessions of different engines or dst == src; src's
 * sticky error is copied too. */
ms_status ms_session_copy(ms_session *dst, const ms_session *src);

/* ---- the prompt cache (ms_engine_params.prompt_cache_bytes) ----
 * Snapshots of a session's whole state (ids, KDA state and conv history, the
 * latent MLA cache, the logits) at chosen positions. A prompt enters as:
 * ms_session_reuse, then feeds cut at ms_session_prompt_mark with
 * ms_session_remember after each (ms_session_feed_prompt does all of it).
 * Restoring reads no weights; what follows gives the bits a cold feed gives. */
/* Make s hold the longest prefix of ids[0, n) it can get without computing:
 * its own state when its ids are a prefix of ids (and it has logits), or the
 * longest cached snapshot that is, whichever is longer; otherwise s is reset.
 * *n_have: the positions s holds now (feed ids[*n_have, n) next). */
ms_status ms_session_reuse(ms_session *s, const int32_t *ids, int64_t n, int64_t *n_have);
/* Where a feed of ids, now at position `from`, should stop next to take a
 * snapshot worth keeping: after the first chat message (<|end_of_msg|>; a
 * shared system prompt), after the last message before the end (an edited or
 * regenerated last message), where ids part from the longest prefix they share
 * with a cached snapshot; else n. Each cut can cost one more pass over the
 * weights, so only these, and only where a snapshot of that length fits the
 * cache in RAM or on disk. A value in (from, n]. */
int64_t ms_session_prompt_mark(const ms_session *s, const int32_t *ids, int64_t n, int64_t from);
/* Keep a snapshot of s at its position in the prompt cache (if_room: only
 * when nothing must be evicted for it, as at the end of a prompt chunk). A
 * no-op without a cache, or for an unsound session. */
void ms_session_remember(ms_session *s, int if_room);
/* ms_session_reuse, then ids[*n_cached, n) fed with ms_session_feed, cut at
 * ms_session_prompt_mark with a snapshot after each piece. At least one token
 * is fed unless the whole of ids was restored (the logits come with it). */
ms_status ms_session_feed_prompt(ms_session *s, const int32_t *ids, int64_t n, int64_t *n_cached);

/* Index of the largest logit; ties go to the lower index. */
int32_t ms_argmax(const float *logits, int64_t n);

/* ---- text (models that ship tiktoken.model + tokenizer_config.json, or a
 * Hugging Face tokenizer.json) ---- */

/* 1 if the model directory had a tokenizer. */
int ms_engine_has_tokenizer(const ms_engine *e);

/* Encode bytes with special tokens DISABLED (a user typing "<|open|>" gets
 * ordinary tokens). *ids is malloc'd (free with free()). */
ms_status ms_tokenize(const ms_engine *e, const char *text, size_t len,
                      int32_t **ids, int64_t *n_ids);
/* Decode ids to bytes (specials by name); *out malloc'd, NUL-terminated. */
ms_status ms_detokenize(const ms_engine *e, const int32_t *ids, int64_t n,
                        char **out, size_t *len);
/* The bytes of one token (owned by the engine); -1 for a bad id. */
int64_t ms_token_bytes(const ms_engine *e, int32_t id, const char **bytes);
/* Id of a special token by name ("<|end_of_msg|>"), -1 if none. */
int32_t ms_special_id(const ms_engine *e, const char *name);

/* The ids that end a generated answer: the model's eos_token_id and the stop
 * tokens of its chat format, looked up by name (gpt-oss: <|return|>,
 * <|call|>, <|endoftext|>; K3: eos_token_id, which is <|end_of_msg|>).
 * Writes up to max ids, returns how many. */
int ms_stop_ids(const ms_engine *e, int32_t *ids, int max);
/* 1 if id is one of ms_stop_ids. */
int ms_is_stop(const ms_engine *e, int32_t id);
/* The chat format of the model's family: "xtml" (Kimi K3) or "harmony"
 * (gpt-oss). Static storage. */
const char *ms_chat_format_name(const ms_engine *e);

/* ---- chat (by model family: K3's XTML, spec/kimi-k3.md section 6; gpt-oss's
 * harmony, spec/gpt-oss.md section 4; docs/TOKENIZER.md) ---- */

typedef struct ms_tool_call {
    const char *name;           /* the tool */
    const char *arguments;      /* JSON text of the arguments object */
    int64_t index;              /* K: the call's position in its message */
} ms_tool_call;

typedef struct ms_message {
    const char *role;           /* "system" | "user" | "assistant" | "tool" */
    const char *content;        /* UTF-8, NULL = "" */
    const char *reasoning;      /* assistant: the think block, NULL = none */
    const ms_tool_call *tool_calls;     /* assistant */
    int64_t n_tool_calls;
    const char *tool_name;      /* tool: which tool answered */
    int64_t tool_index;         /* tool: K of the call answered */
} ms_message;

typedef struct ms_chat_format {
    const char *tools_json;     /* JSON array of tool definitions, NULL = none */
    int thinking;               /* 1: the assistant thinks first */
    const char *effort;         /* "low" | "high" | "max" | NULL (with thinking);
                                   gpt-oss: "low" | "medium" | "high" | NULL (medium) */
    int add_generation_prompt;  /* 1: end with the assistant's opening */
} ms_chat_format;

/* Render messages to token ids. append = 0: a whole conversation (with the
 * tool declaration and effort preamble); append = 1: only these messages, to
 * follow ids the session already holds (after ms_chat_close). *ids malloc'd.
 * MS_E_USAGE for a bad message (message in errbuf). */
ms_status ms_chat_tokens(const ms_engine *e, const ms_message *msgs, int64_t n,
                         const ms_chat_format *f, int append, int32_t **ids, int64_t *n_ids,
                         char *errbuf, size_t errbuf_len);
/* The ids that close an assistant turn the model generated (gen = what it
 * produced after the generation prompt, up to and including <|end_of_msg|>
 * if it stopped there), so the next turn can be appended. */
ms_status ms_chat_close(const ms_engine *e, const int32_t *gen, int64_t n_gen, int thinking,
                        int32_t **ids, int64_t *n_ids);

typedef struct ms_reply {
    char *reasoning;            /* malloc'd ("" if none) */
    char *content;              /* malloc'd */
    ms_tool_call *tool_calls;   /* malloc'd array; its strings are malloc'd */
    int64_t n_tool_calls;
    int truncated;              /* the output stopped with markup still open */
} ms_reply;

/* Split what the model generated after the generation prompt into reasoning,
 * answer and tool calls (arguments re-assembled as JSON). Never fails on
 * garbled output: whatever parses is returned. */
ms_status ms_chat_parse_reply(const ms_engine *e, const int32_t *ids, int64_t n, int thinking,
                              ms_reply *out);
void ms_reply_free(ms_reply *r);

/* ---- sessions on disk ---- */

/* Save a session (tokens fed so far, KDA state, conv history, MLA cache, the
 * last logits) to `path`. The file's header identifies the model (a hash of
 * config.json and the tensor table) and its weights (docs/SECURITY.md,
 * "Identity of the weights"), and is refused by a different model or other
 * weights. MS_E_IO with the errno text when the file cannot be written. */
ms_status ms_session_save(const ms_session *s, const char *path);
/* Load a saved session into s (which must belong to the same model and
 * weights). MS_E_USAGE, with s unchanged or reset, for a file of another
 * format, model, weights or dimensions, more positions than max_context, a
 * bad checksum or an id outside the vocabulary. */
ms_status ms_session_load(ms_session *s, const char *path);
/* Token ids fed so far (owned by the session; valid until the next feed). */
const int32_t *ms_session_tokens(const ms_session *s, int64_t *n);

/* ---- progress of slow steps ---- */

/* What a slow step has done so far. Steps and their units:
 *   "open"    ms_engine_open reading the weights it keeps in memory: bytes
 *   "verify"  ms_verify_checkpoint hashing the checkpoint: bytes
 *   "pack"    ms_pack_checkpoint reading the trunk regions: bytes (of the checkpoint)
 *   "prompt"  a feed or score of more than one token (ms_session_feed,
 *             ms_session_score): tokens; chunk / n_chunks = passes over the weights */
typedef struct ms_progress {
    const char *step;
    int64_t done, total;        /* in the step's unit; done == total on the last report */
    int64_t chunk, n_chunks;    /* "prompt": passes done / to do (0 for the other steps) */
    int64_t bytes;              /* bytes read from disk so far in the step ("prompt": the
                                   weights this process read for it; else = done) */
    double elapsed_s;           /* since the step began */
} ms_progress;

typedef void (*ms_progress_fn)(void *user, const ms_progress *p);

/* Report the progress of the slow steps the CALLING THREAD runs to fn (NULL:
 * stop reporting), from then on: a report when the step starts (done = 0) and
 * after each piece of work (a read window, a region, a prompt chunk), the last
 * with done == total. fn runs on the calling thread, inside the call; it must
 * not call the engine. Other threads (a server's workers) are not affected.
 * Nothing else changes: not a bit of any result, not the log. */
void ms_progress_set(ms_progress_fn fn, void *user);

/* ---- checksums ---- */

typedef struct ms_verify_result {
    int wrote;                  /* 1: the sidecar was built and written */
    int64_t n_tensors, n_blocks, bytes;
    int64_t n_bad_tensors, n_bad_blocks;    /* mismatches (0 after a write) */
    int64_t n_bad_files;        /* metadata files (config.json, the index, the tokenizer
                                   files) that differ from the sidecar (0 after a write) */
    double seconds;
} ms_verify_result;

/* Build or check the checksum sidecar of the checkpoint in model_dir.
 * sums_path NULL = MODEL_DIR/moestream.sums. When the sidecar does not exist
 * or `write` is 1: read every tensor, hash it in 1 MiB blocks and write the
 * sidecar atomically (temporary file + rename); config.json, the index and
 * the tokenizer files are hashed into it too. Otherwise: load it (refused
 * when truncated, damaged or of another checkpoint), re-hash every block and
 * log one MS_LOG_ERROR line per tensor that mismatches ("FILE: tensor 'NAME'
 * bytes [A, B) of the file: checksum mismatch (moestream.sums), K of N
 * blocks") and per metadata file that does ("DIR/FILE: checksum mismatch
 * (moestream.sums): ..."), and warn about a moestream.pack beside the
 * checkpoint that a run would ignore; the counts are in *out. Progress goes
 * to the function set with ms_progress_set, or else to the log at
 * MS_LOG_INFO every 5 s. Returns MS_OK when the sidecar was written or
 * compared (mismatches included: see out->n_bad_tensors), MS_E_MODEL for an
 * invalid checkpoint or sidecar, MS_E_IO when a file cannot be read or the
 * sidecar cannot be written (message in errbuf). */
ms_status ms_verify_checkpoint(const char *model_dir, const char *sums_path, int write,
                               ms_log_fn log, void *log_user, ms_log_level log_level,
                               ms_verify_result *out, char *errbuf, size_t errbuf_len);

typedef struct ms_pack_result {
    int n_regions, n_packed;    /* trunk regions seen / packed */
    int64_t raw_bytes;          /* trunk bytes of the checkpoint */
    int64_t packed_bytes;       /* image bytes of the packed regions */
    int64_t packed_raw_bytes;   /* checkpoint bytes those images stand for */
    double seconds;
} ms_pack_result;

/* Write the packed trunk of the checkpoint in model_dir to pack_path (NULL =
 * MODEL_DIR/moestream.pack), atomically: every trunk region (the layers'
 * dense parts and the lm_head) is read from the shards, verified with the
 * checksum sidecar (sums_path as in ms_engine_params; it must exist: run
 * ms_verify_checkpoint first, MS_E_USAGE otherwise), and stored without loss
 * in ~0.75 of its bytes (docs/ARCHITECTURE.md, "Packed trunk"); progress goes to the
 * function set with ms_progress_set, or else to the log every 5 s. Needs the
 * model's config (its regions come from the model's binding). MS_E_MODEL
 * for a bad checkpoint, MS_E_IO when a file cannot be read or written
 * (message in errbuf). */
ms_status ms_pack_checkpoint(const char *model_dir, const char *pack_path, const char *sums_path,
                             ms_log_fn log, void *log_user, ms_log_level log_level,
                             ms_pack_result *out, char *errbuf, size_t errbuf_len);

/* ---- memory plan ---- */

/* Describe how the model at `path` (a model directory or a config.json) would
 * use `ram_bytes` (0 = no limit) with one session of max_context positions
 * (0 = default), max_draft and prefill_chunk (0 = default; ms_engine_params):
 * what is pinned, streamed, cached. Reads no weights. Writes a human table into
 * out. MS_E_BUDGET when it does not fit (the table says what it needs),
 * MS_E_MODEL for a bad config, MS_E_USAGE for a bad chunk. */
ms_status ms_plan_describe(const char *path, int64_t ram_bytes, int64_t max_context,
                           int max_draft, int64_t prefill_chunk, int n_seq, char *out, size_t n);
/* With n_stages >= 1: a table for a pipeline of n_stages machines (mpirun
 * -np n_stages), each with ram_bytes: the split (stages as
 * ms_engine_params.stages, NULL = balanced), each stage's plan and the bytes
 * it reads per decode token. n_stages 0: ms_plan_describe. */
ms_status ms_plan_describe_stages(const char *path, int64_t ram_bytes, int64_t max_context, int max_draft,
                                  int64_t prefill_chunk, int n_seq, int n_stages, const char *stages, char *out,
                                  size_t n);
/* ms_plan_describe_stages with a draft model (ms_engine_params.draft_model, NULL =
 * none): its resident bytes (weights, n_seq sessions' state at max_context and
 * their marks) are a line of the table and come out of ram_bytes before the
 * store's share (a pipeline: the first stage's). Reads the draft's config.json
 * only; MS_E_MODEL naming it when that cannot be read. */
ms_status ms_plan_describe_draft(const char *path, const char *draft_model, int64_t ram_bytes, int64_t max_context,
                                 int max_draft, int64_t prefill_chunk, int n_seq, int n_stages, const char *stages,
                                 char *out, size_t n);
/* ms_plan_describe_draft with draft_tree (ms_engine_params.draft_tree): 1 adds the
 * second branch's session to the sessions' line (one process only: MS_E_USAGE
 * with n_stages >= 1). */
ms_status ms_plan_describe_tree(const char *path, const char *draft_model, int64_t ram_bytes, int64_t max_context,
                                int max_draft, int64_t prefill_chunk, int n_seq, int draft_tree, int n_stages,
                                const char *stages, char *out, size_t n);

/* ---- expert request traces (ms_engine_params.trace_path) ---- */

typedef struct ms_trace_stats {
    int64_t requests, hits, misses, batches;
    double hit_rate;
} ms_trace_stats;

/* Replay a trace through the expert cache directory with `policy` ("lru",
 * "s3fifo", or "belady": the offline optimum, MIN) and `capacity` slots.
 * MS_E_USAGE for an unknown policy, MS_E_IO / MS_E_MODEL for a bad file
 * (message in errbuf). */
ms_status ms_trace_replay_file(const char *path, const char *policy, int capacity,
                               ms_trace_stats *out, char *errbuf, size_t errbuf_len);

/* ---- sampling ---- */
typedef struct ms_sample_params {
    float temperature;          /* <= 0: greedy (the default) */
    int32_t top_k;              /* 0 = off */
    float top_p;                /* 1 = off */
    float min_p;                /* 0 = off: drop tokens with p < min_p * p_max */
    float repeat_penalty;       /* 1 = off: logits of recent tokens / (or *) this */
    int32_t repeat_last_n;      /* how many recent tokens the penalties look at */
    float frequency_penalty;    /* 0 = off: minus this x the id's count in the last
                                   repeat_last_n tokens (OpenAI's, over that window) */
    float presence_penalty;     /* 0 = off: minus this once if the id is among them */
    const int32_t *bias_ids;    /* logit_bias: n_bias (id, bias) pairs added to the logits */
    const float *bias;          /* (after the penalties); copied by ms_sampler_open */
    int32_t n_bias;
    uint64_t seed;
} ms_sample_params;

ms_sample_params ms_sample_default_params(void);

typedef struct ms_sampler ms_sampler;

/* NULL on bad parameters (message in errbuf) or out of memory. */
ms_sampler *ms_sampler_open(const ms_sample_params *p, int64_t n_vocab, char *errbuf, size_t errbuf_len);
void ms_sampler_close(ms_sampler *s);
/* Next token from logits [n_vocab]; history = the ids so far (for the
 * repetition penalty). Advances the RNG by exactly one draw when sampling. */
int32_t ms_sampler_next(ms_sampler *s, const float *logits, const int32_t *history, int64_t n_history);

/* ---- structured output (docs/SERVER.md, response_format) ----
 * A grammar constrains the tokens a sampler may pick to those whose bytes
 * continue a JSON document valid for a schema (the subset of OpenAI's strict
 * mode; sample/json_schema.h). Disallowed logits become -inf before the
 * sampler's usual steps, so greedy and seeded sampling stay reproducible. */
typedef struct ms_grammar ms_grammar;

/* schema: JSON Schema text of n bytes, or NULL for "any JSON object".
 * end_id: the token that ends the reply; allowed only once the document is
 * complete (every other special token is never allowed). MS_E_USAGE with a
 * message naming the keyword for a schema outside the subset. The engine
 * must outlive the grammar. */
ms_status ms_grammar_open(const ms_engine *e, const char *schema, size_t n, int32_t end_id,
                          ms_grammar **out, char *errbuf, size_t errbuf_len);
void ms_grammar_close(ms_grammar *g);
/* Compile `schema` only, to refuse one outside the subset before any work
 * (MS_E_USAGE, message naming the keyword); no tokenizer, no vocabulary walk. */
ms_status ms_grammar_check(const char *schema, size_t n, char *errbuf, size_t errbuf_len);
/* 1 once the bytes picked so far form a complete document. */
int ms_grammar_done(const ms_grammar *g);
/* From now on s picks only what g allows and advances g by each pick; NULL
 * detaches. The grammar is not owned by the sampler. */
void ms_sampler_set_grammar(ms_sampler *s, ms_grammar *g);

#ifdef __cplusplus
}
#endif
#endif
