/* engine/draft.h - where ms_session_decode's drafts come from, and how many
 * drafted tokens a pass verifies (engine/draft.c).
 *
 * Owns: prompt lookup (the fixed-length drafts of --speculate K); the counted
 *   index over token sequences (an engine's history of earlier outputs, the
 *   --draft-corpus text); the chaining of a draft from continuation counts;
 *   the choice rule (the draft length with the most expected emitted tokens
 *   per byte); the engine-wide drafter that holds the sources, their running
 *   acceptance and the measured costs of a pass; with a tree, the second
 *   branch beside a chain (ms_drafter_branch).
 * Invariants: every draft is a function of the ids given and of the order of
 *   earlier events (outputs remembered, passes counted); nothing here touches
 *   the logits or the picker, so no draft changes an emitted bit.
 * Does not: feed, verify or roll back (engine/engine.c).
 */
#ifndef MS_ENGINE_DRAFT_H
#define MS_ENGINE_DRAFT_H

#include "moestream.h"

#include "base/err.h"
#include "text/tokenizer.h"

#include <pthread.h>
#include <stdint.h>

/* prompt lookup's longest n-gram (--speculate K) */
#define MS_DRAFT_NGRAM 3
/* the counted index's longest suffix */
#define MS_DRAFT_MAX_NGRAM 8
/* candidate occurrences examined per drafted token, newest first */
#define MS_DRAFT_SCAN 4096
/* distinct continuations counted per drafted token (more: counted in the total only) */
#define MS_DRAFT_CANDS 32
/* tokens the engine's history of outputs holds; when full it keeps its newer half */
#define MS_DRAFT_HISTORY_MAX ((int64_t)1 << 20)
/* a --draft-corpus file's largest size, and the tokens of it the index keeps */
#define MS_DRAFT_CORPUS_MAX_BYTES ((int64_t)8 << 20)
#define MS_DRAFT_CORPUS_MAX_TOKENS ((int64_t)2 << 20)
/* ids of context kept before a remembered output (its match for a later prompt) */
#define MS_DRAFT_LEAD 8
#define MS_DRAFT_BUCKETS (1 << 16)
/* --speculate auto's max_draft, and the longest draft a pass takes */
#define MS_DRAFT_AUTO_MAX 8
#define MS_MAX_DRAFT_IDS 32

/* Prompt lookup: the most recent earlier occurrence of the last n ids of
 * h = tok[0..n_past) + pending (n = MS_DRAFT_NGRAM, else fewer, down to 1)
 * and up to `want` ids that followed it, read from h extended by the draft
 * itself (a cycle shorter than `want` is drafted for its whole length).
 * Returns the count written to out. Pure. */
int64_t ms_draft_lookup(const int32_t *tok, int64_t n_past, int32_t pending, int64_t want, int32_t *out);

/* A sequence of ids (-1 separates runs: no match crosses one) indexed by the
 * id before each position: the positions that follow an id, newest first. */
typedef struct ms_draft_index {
    int32_t *tok;               /* [cap] */
    int32_t *prev;              /* [cap] the previous position whose preceding id hashes alike; -1 */
    int32_t *head;              /* [MS_DRAFT_BUCKETS] the newest one; -1 */
    int64_t n, cap, max;
    int64_t dropped;            /* ids let go at the bound so far */
} ms_draft_index;

/* An empty index of at most max ids (max >= 2); -1 when out of memory. */
int ms_draft_index_init(ms_draft_index *x, int64_t max);
void ms_draft_index_free(ms_draft_index *x);
/* Append ids (-1: a separator). At max ids the index keeps its newer half
 * first. -1 when out of memory (the index stays as it was before the id). */
int ms_draft_index_add(ms_draft_index *x, const int32_t *ids, int64_t n);
/* Bytes the index holds allocated. */
int64_t ms_draft_index_bytes(const ms_draft_index *x);

/* A draft chained from continuation counts: h = ctx[0..n_ctx) + pending,
 * extended by each drafted id. Per step: the longest suffix of h (up to
 * MS_DRAFT_MAX_NGRAM ids) found followed by an id in the source (x, or h
 * itself when x is NULL; of x, positions below `below` only), among the MS_DRAFT_SCAN newest occurrences of h's
 * last id; the id that follows it most often (ties: the newest) is drafted,
 * q[i] = its count / the count of every continuation of that suffix. Up to
 * want ids into out; returns how many. Pure. */
int64_t ms_draft_chain(const ms_draft_index *x, int64_t below, const int32_t *ctx, int64_t n_ctx, int32_t pending,
                       int64_t want, int32_t *out, double *q);

/* The choice rule: the k in [0, K] maximising the expected tokens a pass
 * emits per cost, (1 + sum_{i<=k} prod_{j<=i} p[j]) / (c_pass + (k + 1) c_tok),
 * p[j] the probability that drafted token j is accepted, c_pass what a pass
 * costs whatever it feeds, c_tok what each fed token adds. Ties go to the
 * shorter draft; 0 when the costs are not positive. *gain (may be NULL) gets
 * the chosen value. Pure. */
int ms_draft_choose(const double *p, int K, double c_pass, double c_tok, double *gain);

/* The choice rule with a second branch (ms_engine_params.draft_tree): beside
 * the chain of ka ids (pa: their probabilities, as above), a branch whose
 * first id is another candidate for the chain's first position, pb[0] its
 * probability of being the id picked (so pb[0] + pa[0] <= 1) and pb[j > 0]
 * as a chain's. The branch emits 1 + its accepted ids exactly when its first
 * id is picked, so it adds sum_{i<=k} prod_{j<=i} pb[j] expected tokens for k
 * fed tokens (the pending token it repeats is read with the chain's): the k
 * in [0, Kb] maximising (chain's expected + that) / (c_pass + (ka + 1 + k)
 * c_tok); 0 (no branch) unless one beats the chain alone, and when the costs
 * are not positive. *gain (may be NULL): the chosen value. Pure. */
int ms_draft_branch_choose(const double *pa, int ka, const double *pb, int Kb, double c_pass, double c_tok,
                           double *gain);

/* What a draft model offers a pass: n ids drafted greedily after h, and q[i]
 * its probability of ids[i] (engine/draft_model.c). */
typedef struct ms_draft_offer {
    int64_t n;
    int32_t ids[MS_MAX_DRAFT_IDS];
    double q[MS_MAX_DRAFT_IDS];
} ms_draft_offer;

/* The engine's drafter (one per engine with max_draft > 0). */
typedef struct ms_drafter {
    pthread_mutex_t mu;         /* guards everything below: sessions may decode on several threads */
    int auto_len;               /* 1: every pass drafts the length the choice rule picks */
    ms_draft_index hist;        /* earlier outputs (ms_drafter_remember) */
    ms_draft_index corpus;      /* --draft-corpus (n 0: none); fixed after open */
    int64_t owner;              /* the session whose run the history ends with (0: none) */
    int64_t run0, run_dropped;  /* where that run begins, and hist.dropped then */
    int64_t next_sid;
    /* running acceptance per source (never reset: it steers drafts, not reports) */
    int64_t drafted[MS_DRAFT_SOURCES], accepted[MS_DRAFT_SOURCES], rejected[MS_DRAFT_SOURCES];
    double model_q;             /* the draft model's probabilities of the ids of it verified, summed */
    /* decode passes measured: bytes read, passes and tokens fed (a pass shared by
       several sequences counts once) */
    int64_t m_trunk, m_expert, m_passes, m_fed;
    /* what a pass and a token touch when nothing is read (resident); with
       given: the costs always used, never the measured ones */
    double c_pass0, c_tok0;
    int given;
} ms_drafter;

/* A drafter with an empty history; c_pass0 / c_tok0 the compute costs.
 * MS_E_NOMEM. */
ms_status ms_drafter_init(ms_drafter *d, int auto_len, double c_pass0, double c_tok0, ms_err *err);
void ms_drafter_free(ms_drafter *d);
/* The corpus: the file's text tokenized with tok (NULL: the model has no
 * tokenizer). MS_E_USAGE naming --draft-corpus and path when the model has no
 * tokenizer or the file cannot be read or is too large. */
ms_status ms_drafter_corpus(ms_drafter *d, const char *path, const ms_tok *tok, ms_err *err);
/* MS_E_USAGE naming --draft-corpus and path unless it is a readable regular
 * file of at most MS_DRAFT_CORPUS_MAX_BYTES (checked before the model loads). */
ms_status ms_draft_corpus_check(const char *path, ms_err *err);
/* A new session's id for ms_drafter_remember. */
int64_t ms_drafter_sid(ms_drafter *d);
/* The costs the choice rule weighs for one sequence whose pass is shared by
 * `share` >= 1 sequences (ms_sessions_decode: each sequence's [pending,
 * draft] in one pass): c_pass = the pass's cost (the trunk bytes a decode
 * pass read, measured on this run's passes, or c_pass0 when given or before
 * any pass read anything) / share, since the trunk is read once for all of
 * them; c_tok = the expert bytes per fed token (measured, else c_tok0).
 * Under the mutex. */
void ms_drafter_costs(ms_drafter *d, int share, double *c_pass, double *c_tok);
/* The draft for session sid's h = tok[0..n_past) + pending: up to want ids
 * into out, the source in *src (the history without sid's own current run);
 * model: the draft model's offer (NULL or n 0: none); share: the sequences
 * whose drafts the same pass verifies (1: alone). Fixed length (auto_len
 * 0): the draft model's offer when there is one, else prompt lookup, else the
 * history's chain, else the corpus's, as long as it goes. Auto: each source's chain,
 * p[i] = q[i] x its running acceptance ((accepted + 1) / (accepted +
 * rejections + 2), a drafted id's chance once those before it held), cut to the length the choice rule
 * picks with this run's costs for that share (ms_drafter_costs); the source
 * with the best gain (0 ids when none is expected to pay); p (NULL: not
 * wanted): auto's probability of each id drafted (fixed length: unset). */
int64_t ms_drafter_draft(ms_drafter *d, int64_t sid, const int32_t *tok, int64_t n_past, int32_t pending,
                         int64_t want, int share, const ms_draft_offer *model, int32_t *out, int *src, double *p);
/* A second branch beside the chain a[0..ma) (auto's, pa its probabilities,
 * p of ms_drafter_draft) for session sid's h = tok[0..n_past) + pending: for
 * each count source (context, history, corpus), its most frequent
 * continuation of h other than a[0] (q its share of the counts), chained on,
 * p = q x the source's running acceptance, cut by ms_draft_branch_choose with
 * one sequence's costs; the source with the best gain. Up to want ids into
 * out, the source in *src; 0 when no branch is expected to pay. */
int64_t ms_drafter_branch(ms_drafter *d, int64_t sid, const int32_t *tok, int64_t n_past, int32_t pending,
                          const int32_t *a, const double *pa, int64_t ma, int64_t want, int32_t *out, int *src);
/* While a draft model drafts (auto only; fixed length: always 1): whether a
 * draft longer than the k ids drafted so far (q: its probabilities of them)
 * could emit more tokens per byte than the best cut of those k, with the
 * model source's running acceptance and this run's costs for `share`
 * sequences a pass. Deterministic in its inputs and the drafter's counts; 0
 * at MS_MAX_DRAFT_IDS. */
int ms_drafter_model_more(ms_drafter *d, const double *q, int64_t k, int share);
/* After a decode pass verified `drafted` ids of one sequence of source src
 * (nothing counted when drafted is 0), `accepted` of them kept (fewer: one
 * rejection). */
void ms_drafter_verified(ms_drafter *d, int src, int64_t drafted, int64_t accepted);
/* After `passes` decode passes (one ms_sessions_decode call: every sequence's
 * tokens, whole segments to a pass) that fed `fed` tokens in all and read
 * trunk / expert bytes. */
void ms_drafter_measured(ms_drafter *d, int64_t passes, int64_t trunk, int64_t expert, int64_t fed);
/* After a pass that verified ids of the draft model: q_sum, its probabilities
 * of the ids verified (the accepted ones and the first rejected) summed. The
 * model source's acceptance is its calibration: (accepted + 1) / (q_sum's
 * total + 1), the ratio of the ids it got right to the ids its probabilities
 * promised, so p = min(1, q x that) (its q already says how likely an id is,
 * which the count sources' running rate would count twice). */
void ms_drafter_model_verified(ms_drafter *d, double q_sum);
/* Sequence sid (an ms_session) fed tok[n0..n1) in a decode step: append them
 * to the history, after a separator and up to MS_DRAFT_LEAD ids before n0
 * when the history does not end with sequence sid's ids up to n0 (*end:
 * where that sequence's ids in the history end). */
void ms_drafter_remember(ms_drafter *d, int64_t sid, int64_t *end, const int32_t *tok, int64_t n0, int64_t n1);

#endif
