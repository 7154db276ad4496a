/* engine/pipe_msg.h - the messages of the pipeline across processes, private
 * to engine/pipe.c and engine/pipe_msg.c (no MPI in here).
 *
 * A message is a header, then per operation:
 *   FORWARD   nseg x {session id, T, n_past, record}, run [T, H], bank [T, nb, H]
 *             (the activations after the previous stage's last layer; each
 *             stage replaces them with its own, and the last one's come back
 *             to stage 0, which goes on with the final norms and lm_head;
 *             a segment with record 1 is recorded for a rollback in every stage);
 *   OPEN, CLOSE, RESET, COPY, ROLLBACK, SET_PAST, STATS_RESET, PC_STORE,
 *             PC_RESTORE, PC_DROP (the prompt cache's parts in RAM)   the
 *             header only;
 *   STATE_GET, STATE_PUT   a piece [at, at + count) of one layer's state of a
 *             session at T positions (saved sessions, the prompt cache on
 *             disk), at most STATE_PIECE_FLOATS floats: the stage holding the
 *             layer appends it / takes it out;
 *   STATS     int64 [N][STATS_PER_STAGE]: each stage fills its trunk and
 *             expert bytes, its peak RSS and its prompt cache's bytes.
 * At open every stage r > 0 sends stage 0 a READY (status, layers, prompt
 * chunk, model hash, what its checksum sidecar says of the weights, its
 * share of the prompt cache).
 * Invariant: every process of a pipeline runs the same build, so the structs
 * travel as their bytes.
 */
#ifndef MS_ENGINE_PIPE_MSG_H
#define MS_ENGINE_PIPE_MSG_H

#include "engine/engine_int.h"

#include <stdint.h>
#include <string.h>

enum { TAG_RING = 11, TAG_READY = 12, TAG_QUIT = 13 };
enum { OP_FORWARD = 100, OP_STATS = 101, OP_STATE_GET = 102, OP_STATE_PUT = 103 };
enum { F_PREDICT = 2 };
enum { STATS_PER_STAGE = 4 };
/* a piece of a layer's state (64 MiB): far under a message's limit (2 GiB) */
#define STATE_PIECE_FLOATS ((int64_t)1 << 24)

typedef struct hdr {
    int32_t op, status;         /* status: MS_OK, or the first failure on the way (err) */
    int32_t nseg, nb;           /* FORWARD: segments, snapshots in the bank */
    int32_t flags, pad;
    int64_t T, a0, a1;
    int64_t at, count;          /* STATE_GET / PUT: the piece of the layer's floats */
    char err[448];
} hdr;

typedef struct seg_desc {
    int64_t id, T, n_past;
    int64_t record;             /* 1: record the segment (ms_fseg.rec) */
} seg_desc;

typedef struct ready {
    int32_t status, layer0, layer1, max_draft;
    int64_t chunk, max_context;
    int64_t streamed;           /* trunk bytes the stage streams per pass (0: it holds its trunk) */
    uint64_t hash;
    uint64_t sums;              /* ms_sums_content_hash of its sidecar (0: weights not verified) */
    uint64_t sample;            /* the sampled fingerprint of its weights (ms_weights_identity) */
    int64_t pcache_cap;         /* its share of the prompt cache (0: none) */
    char err[448];
} ready;

/* A FORWARD message: header, segments, then the activations (see the top). */
static inline size_t forward_bytes(int64_t H, int nseg, int64_t T, int nb) {
    return sizeof(hdr) + (size_t)nseg * sizeof(seg_desc) + (size_t)T * (size_t)H * sizeof(float) * (size_t)(1 + nb);
}

static inline uint8_t *acts_of(uint8_t *msg, int nseg) { return msg + sizeof(hdr) + (size_t)nseg * sizeof(seg_desc); }

/* run [T, H] and nb snapshots of bank [T, nb_max, H] to the message's bytes
 * at p (to_msg), or back. */
static inline void move_acts(uint8_t *p, float *run, float *bank, int64_t T, int64_t H, int64_t nb_max, int nb, int to_msg) {
    const size_t row = (size_t)H * sizeof(float);
    if (to_msg) memcpy(p, run, (size_t)T * row);
    else memcpy(run, p, (size_t)T * row);
    p += (size_t)T * row;
    for (int64_t t = 0; t < T; t++, p += (size_t)nb * row) {
        if (to_msg) memcpy(p, bank + t * nb_max * H, (size_t)nb * row);
        else memcpy(bank + t * nb_max * H, p, (size_t)nb * row);
    }
}

/* A stage r > 0's READY after its open (own: its status; msg: why it failed). */
void ms_pipe_ready_fill(ready *rd, const ms_engine *e, ms_status own, const char *msg);
/* Stage 0's verdict on stage r's READY: MS_OK, or why the pipeline cannot
 * run (into b). e: stage 0's engine, NULL when its own open failed (only the
 * stage's status counts then). On MS_OK takes the smaller prompt chunk into
 * e and the stage's prompt-cache share into e->pcache, adds the stage's
 * streamed bytes to *streamed, and warns when only one
 * of the two has a checksum sidecar. Refuses other weights: the identities
 * (ms_weights_id_same: the sums digests when both have a sidecar, else the
 * sampled fingerprints) must agree. sums: stage 0's ms_pipe_sums_digest. */
ms_status ms_pipe_ready_check(const ready *rd, int r, ms_engine *e, uint64_t sums, int64_t *streamed, char *b,
                              size_t len);
/* What a READY says of e's weights and its trunk. */
uint64_t ms_pipe_sums_digest(const ms_engine *e);
int64_t ms_pipe_streamed(const ms_engine *e);

#endif
