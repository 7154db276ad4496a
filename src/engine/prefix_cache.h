/* engine/prefix_cache.h - the prompt cache: snapshots of a session's whole
 * state at chosen positions, kept in RAM within the budget, so that a later
 * prompt sharing a prefix restores the longest one it matches and feeds only
 * the rest (ms_session_reuse, ms_session_remember in the public header).
 *
 * Owns: the entries (ids[0, n), the logits row after position n - 1, and
 *   every layer's state at n as ms_state_layer lays it out: a KDA layer's S and
 *   conv history, an MLA layer's latent cache (gpt-oss: keys and values) for
 *   positions [0, n)).
 * In a pipeline (mpirun -np N): stage 0 keeps the index (ids, logits row,
 *   priorities, every eviction) and its own layers' state; stage r > 0 keeps
 *   its layers' part of each entry, keyed by the id stage 0 gave it, within its
 *   own share of its --ram (its ms_prompt_cache_plan, reported to stage 0 at
 *   open: ms_pcache_set_share). Stage 0 tells the stages to store, restore or
 *   drop a part (MS_PIPE_PC_STORE / RESTORE / DROP, engine/pipe.c): a part's
 *   size is computable on stage 0 from the config and the split (the state of
 *   stage r's layers at n positions), so it counts every stage's use.
 * Invariants:
 *   1. An entry holds exactly the state a session has after feeding ids[0, n)
 *      from a reset (it is a copy of one, in a pipeline every stage's part of
 *      the same session at the same n), so restoring it and feeding the rest
 *      gives the bits a cold feed gives (feeds split anywhere give the same
 *      bits: docs/DETERMINISM.md, items 3 and 11).
 *   2. Every stage's use <= its share: stage 0 admits an entry only when each
 *      stage's part fits its share once lower priorities are evicted (an entry
 *      larger than some stage's share is not kept); a stage whose share is 0
 *      turns the cache off (ms_pcache_shared).
 *   3. Eviction is GreedyDual-Size: an entry's priority is the clock at its
 *      last use plus the tokens a hit saves per byte it holds on stage 0; the
 *      lowest goes first (on every stage) and sets the clock.
 * Does not: keep entries on disk. The same snapshots on disk, in one process
 *   and in a pipeline (stage 0's directory): engine/prefix_disk.c, declared
 *   below (ms_pdisk_*).
 */
#ifndef MS_ENGINE_PREFIX_CACHE_H
#define MS_ENGINE_PREFIX_CACHE_H

#include "base/err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ms_pcache ms_pcache;
struct ms_session;
struct ms_state;
struct ms_engine;

/* A cache of at most cap_bytes for e (its model, opened; on a stage r > 0 of a
 * pipeline it holds that stage's parts): NULL with cap_bytes <= 0 or out of
 * memory (no cache). */
ms_pcache *ms_pcache_init(struct ms_engine *e, int64_t cap_bytes);
void ms_pcache_free(ms_pcache *pc);
/* Stage 0: stage r's share (its cap), from its READY. */
void ms_pcache_set_share(ms_pcache *pc, int r, int64_t cap_bytes);
/* Whether every stage has a share (> 0): else nothing would ever be kept. */
int ms_pcache_shared(const ms_pcache *pc);
/* Whether an entry of n positions fits every stage's share without evicting. */
int ms_pcache_room(const ms_pcache *pc, int64_t n);
/* Whether an entry of n positions could be kept at all (every stage's part
 * within its share, evicting what it must): 0 without a cache. */
int ms_pcache_fits(const ms_pcache *pc, int64_t n);
/* The longest entry whose ids are a prefix of ids[0, n): its length (0: none),
 * and in *lcp the longest prefix ids[0, n) shares with any entry's ids. */
int64_t ms_pcache_lookup(ms_pcache *pc, const int32_t *ids, int64_t n, int64_t *lcp);
/* Copy the entry of length len found by lookup into s (state, ids, logits;
 * the other stages their parts); it counts as a hit. A stage's failure: its
 * status, and s is unsound (sticky). */
ms_status ms_pcache_restore(ms_pcache *pc, const int32_t *ids, int64_t len, struct ms_session *s);
/* Keep a copy of s's state at its n_past (a no-op when an entry of the same
 * ids is already held; it is touched). */
void ms_pcache_store(ms_pcache *pc, const struct ms_session *s);
int64_t ms_pcache_used(const ms_pcache *pc);
int64_t ms_pcache_cap(const ms_pcache *pc);
int ms_pcache_count(const ms_pcache *pc);
/* Entries evicted so far; stage 0: what stage r's parts take by its count
 * (stage r reports its own in ms_stats.stage_prompt_cache_bytes: equal). */
int64_t ms_pcache_evictions(const ms_pcache *pc);
int64_t ms_pcache_stage_used(const ms_pcache *pc, int r);

/* A stage r > 0's side of MS_PIPE_PC_* (engine/pipe.c): keep st's layers at
 * its n_past as entry id; restore entry id into st (n_past set); drop it
 * (missing_ok: an unknown id passes). MS_E_INTERNAL, the reason in msg, for
 * an unknown or repeated id or a part over the stage's share (stage 0 out of
 * step); MS_E_NOMEM. */
ms_status ms_pcache_part_store(ms_pcache *pc, int64_t id, const struct ms_state *st, char *msg, size_t len);
ms_status ms_pcache_part_restore(ms_pcache *pc, int64_t id, struct ms_state *st, char *msg, size_t len);
ms_status ms_pcache_part_drop(ms_pcache *pc, int64_t id, int missing_ok, char *msg, size_t len);

/* ---- the prompt cache on disk (engine/prefix_disk.c: the file format, the
 * checks, the eviction) ---- */
typedef struct ms_pdisk ms_pdisk;
struct ms_engine;
/* A cache in directory dir (created if missing) of at most cap_bytes (0:
 * MS_PROMPT_CACHE_DISK_DEFAULT) for engine e, opened (its model hash, weights
 * identity and state dimensions known); temporary files of dead writers are
 * removed. fault_write (tests): that write (1 = the first) fails with ENOSPC
 * halfway. MS_E_IO when dir cannot be created or opened. */
ms_status ms_pdisk_open(struct ms_engine *e, const char *dir, int64_t cap_bytes, int64_t fault_write, ms_pdisk **out,
                        ms_err *err);
void ms_pdisk_close(ms_pdisk *pd);
/* Restore into s the longest entry of this model whose ids are a prefix of
 * ids[0, n) and that is longer than `above` (and fits s): its length, 0 when
 * none passed the checks. Entries that fail them are warned about and removed;
 * if one was half read into s, *clobbered = 1 and s is reset. In a pipeline
 * the other stages' layers go to them: -1 when one of them failed (s is
 * unsound: sticky, the reason in its error). */
int64_t ms_pdisk_restore(ms_pdisk *pd, const int32_t *ids, int64_t n, int64_t above, struct ms_session *s,
                         int *clobbered);
/* Write s's state at its n_past as an entry (a no-op for an unsound session
 * or without logits; an entry already there is touched); in a pipeline the
 * other stages' layers are fetched from them. A failure (a full disk, a stage
 * that cannot give its part) is a warning and leaves no file behind; s is
 * untouched. */
void ms_pdisk_store(ms_pdisk *pd, const struct ms_session *s);
/* Whether an entry of n positions is within the cache's size (0 without a
 * cache). */
int ms_pdisk_fits(const ms_pdisk *pd, int64_t n);

#endif
