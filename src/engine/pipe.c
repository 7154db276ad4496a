/* engine/pipe.c - a pipeline of processes over MPI (include/moestream.h,
 * "a pipeline across processes"; docs/ARCHITECTURE.md, "Pipeline across
 * machines").
 *
 * Stage 0 runs the command: tokenizer, sessions, sampling, the embedding, its
 * layers, the final norms and lm_head. Stage r > 0 runs layers
 * [start[r], start[r + 1]) and keeps, per session of stage 0, the state of
 * those layers only, and its layers' part of each prompt-cache entry
 * (engine/prefix_cache.h: stage 0 keeps the index and tells it to store,
 * restore or drop a part; the entries on disk are stage 0's files, whose
 * other layers travel as a saved session's do: STATE_GET / STATE_PUT, in
 * pieces). Every process opens its own copy of the checkpoint under
 * its own budget, so the machines' RAM adds up and each disk reads only its
 * stage's bytes.
 *
 * Messages go round a ring, 0 -> 1 -> ... -> N-1 -> 0, one at a time: stage 0
 * sends one and waits for it to come back before it sends the next (a mutex
 * makes the operations of several threads take turns). The messages and
 * their layouts: engine/pipe_msg.h.
 * A stage that fails sets the header's status and message; the stages after
 * it pass the message on untouched, and stage 0 returns the failure (the
 * session is then unsound, as after a failed read in one process). Activations
 * travel as the float bits the next layer reads, so the output is the one
 * process's, bit for bit (tests/t_pipeline.sh).
 *
 * Waiting polls (MPI_Improbe / MPI_Test) with naps growing to 200 us instead
 * of MPI's busy wait, so a waiting stage leaves its cores to its I/O threads.
 * At open every stage r > 0 reports to stage 0 (READY: status, layers, prompt
 * chunk, model hash, and what its checksum sidecar says of the weights, so
 * machines holding different weights under the same tensor table are refused
 * where both have a sidecar); on any failure stage 0 sends QUIT to the stages that
 * opened, and every process ends.
 *
 * Direction: this file sits above the engine. It calls the public API
 * (ms_engine_open, ms_session_*, ms_engine_stats) and engine_int.h, and
 * registers its hooks (ms_pipe_hooks) at ms_pipe_boot; the engine calls it
 * only through them, and through the forward's pass callbacks
 * (ms_pipe_pass). The layer split is engine/split.c
 * (no MPI). A build without MPI (make MPI=0) has engine/pipe_none.c instead.
 */
#include "engine/engine_int.h"
#include "engine/pipe_msg.h"
#include "engine/prefix_cache.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    int booted, rank, size;
    pthread_mutex_t mu;
    uint8_t *buf;               /* the message being built or received */
    size_t cap;
    int64_t group_passes;       /* stage 0: passes sent in more than one group (ms_stats) */
    int64_t async_chunks;       /* stage 0: prompt chunks sent on without waiting (ms_stats) */
    int stages_up;              /* stage 0: the other stages serve an engine of this process */
} g = { 0, 0, 1, PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0, 0 };

static void quit_stages(const int *ok);
static void register_stages(void);

static void finish(void) {
    /* the process ends without closing its engine (an exit on an error path):
       the other stages would wait for it forever, and MPI_Finalize with them */
    if (g.booted && g.stages_up) quit_stages(NULL);
    if (g.booted) MPI_Finalize();
    g.booted = 0;
}

int ms_pipe_boot(int *argc, char ***argv) {
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!n) n = getenv("PMI_SIZE");
    if (!n || atoi(n) <= 1) return 0;
    int prov = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &prov) != MPI_SUCCESS) return -1;
    g.booted = 1;
    atexit(finish);
    MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g.size);
    /* mpirun binds each process to one core by default (it assumes a process a
       core); a stage is a machine's engine with its own threads, so a binding to
       a single core is widened to every online core (a wider binding, e.g.
       --bind-to socket, is kept) */
    cpu_set_t mask;
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (sched_getaffinity(0, sizeof mask, &mask) == 0 && CPU_COUNT(&mask) == 1 && online > 1) {
        CPU_ZERO(&mask);
        for (long i = 0; i < online && i < CPU_SETSIZE; i++) CPU_SET((int)i, &mask);
        sched_setaffinity(0, sizeof mask, &mask);
    }
    if (prov < MPI_THREAD_SERIALIZED || g.size > MS_MAX_STAGES) {
        fprintf(stderr, "moestream: %s\n", g.size > MS_MAX_STAGES ? "more pipeline stages than MS_MAX_STAGES (64)"
                                                                  : "MPI gives no MPI_THREAD_SERIALIZED");
        return -1;
    }
    if (g.size > 1) register_stages();
    return 0;
}

int ms_pipe_rank(void) { return g.booted ? g.rank : 0; }
int ms_pipe_size(void) { return g.booted ? g.size : 1; }

static void fatal(const char *what) {
    fprintf(stderr, "moestream: stage %d: %s\n", g.rank, what);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

static void nap(long *ns) {
    struct timespec ts = { 0, *ns };
    nanosleep(&ts, NULL);
    if (*ns < 200000) *ns *= 2;
}

/* *buf with room for n bytes (grown, never shrunk). */
static uint8_t *grow(uint8_t **buf, size_t *cap, size_t n) {
    if (n > *cap) {
        uint8_t *p = realloc(*buf, n);
        if (!p) fatal("out of memory for a pipeline message");
        *buf = p;
        *cap = n;
    }
    return *buf;
}

static uint8_t *room(size_t n) { return grow(&g.buf, &g.cap, n); }

static void wait_req(MPI_Request *rq) {
    int done = 0;
    for (long ns = 1000;; nap(&ns)) {
        MPI_Test(rq, &done, MPI_STATUS_IGNORE);
        if (done) return;
    }
}

/* A nonblocking send of p[0, n) (p must stay until *rq completes). */
static void start_send(const void *p, size_t n, int dst, int tag, MPI_Request *rq) {
    if (n > INT_MAX) fatal("a pipeline message over 2 GiB (a smaller --chunk sends less)");
    MPI_Isend(p, (int)n, MPI_BYTE, dst, tag, MPI_COMM_WORLD, rq);
}

static void send_bytes(const void *p, size_t n, int dst, int tag) {
    MPI_Request rq;
    start_send(p, n, dst, tag, &rq);
    wait_req(&rq);
}

/* The next message from src with tag (MPI_ANY_*: any) into g.buf; its size. */
static size_t recv_bytes(int src, int tag, int *tag_out) {
    MPI_Message mh;
    MPI_Status stt;
    int flag = 0;
    for (long ns = 1000;; nap(&ns)) {
        MPI_Improbe(src, tag, MPI_COMM_WORLD, &flag, &mh, &stt);
        if (flag) break;
    }
    int n = 0;
    MPI_Get_count(&stt, MPI_BYTE, &n);
    MPI_Mrecv(room((size_t)n > sizeof(hdr) ? (size_t)n : sizeof(hdr)), n, MPI_BYTE, &mh, MPI_STATUS_IGNORE);
    if (tag_out) *tag_out = stt.MPI_TAG;
    return (size_t)n;
}

/* ---- open ---- */

/* QUIT to the stages r > 0 with ok[r] (ok NULL: all); they close and end. */
static void quit_stages(const int *ok) {
    for (int r = 1; r < g.size; r++)
        if (!ok || ok[r]) send_bytes("", 0, r, TAG_QUIT);
    g.stages_up = 0;
}

static ms_status stages_meet(ms_engine *e, ms_status own, char *msg, size_t len) {
    if (!g.booted) return own;
    if (g.rank > 0) {
        ready rd;
        ms_pipe_ready_fill(&rd, e, own, msg);
        send_bytes(&rd, sizeof rd, 0, TAG_READY);
        return own;
    }
    int ok[MS_MAX_STAGES] = { 0 };
    ms_status first = MS_OK;
    int64_t streamed = own == MS_OK ? ms_pipe_streamed(e) : 0;
    const uint64_t sums = own == MS_OK ? ms_pipe_sums_digest(e) : 0;
    char why[600] = "";
    for (int r = 1; r < g.size; r++) {
        const size_t n = recv_bytes(r, TAG_READY, NULL);
        ready rd;
        memset(&rd, 0, sizeof rd);
        memcpy(&rd, g.buf, n < sizeof rd ? n : sizeof rd);
        rd.err[sizeof rd.err - 1] = '\0';
        ok[r] = rd.status == MS_OK;
        char b[600] = "";
        const ms_status bad = ms_pipe_ready_check(&rd, r, own == MS_OK ? e : NULL, sums, &streamed, b, sizeof b);
        if (bad != MS_OK && first == MS_OK) { first = bad; snprintf(why, sizeof why, "%s", b); }
    }
    if (own == MS_OK && first == MS_OK) {
        e->pipe_up = 1;
        g.stages_up = 1;
        /* batched passes in groups, one per stage, when no stage streams its
           trunk: a group costs a stage no reads then, only its turn */
        e->pipe_groups = e->p.stage_groups > 0 ? e->p.stage_groups : streamed == 0 ? g.size : 1;
        if (e->pipe_groups > MS_PIPE_MAX_GROUPS) e->pipe_groups = MS_PIPE_MAX_GROUPS;
        if (e->pcache && !ms_pcache_shared(e->pcache)) {
            /* a stage with no share could keep no entry's part: no cache at all */
            ms_log(&e->log, MS_LOG_INFO, "prompt cache off: a pipeline stage has no share of its budget for it");
            ms_pcache_free(e->pcache);
            e->pcache = NULL;
        }
        return MS_OK;
    }
    quit_stages(ok);
    if (own != MS_OK) return own;
    if (msg && len) snprintf(msg, len, "%s", why);
    return first;
}

static void stages_close(ms_engine *e) {
    if (!e->pipe_up) return;
    pthread_mutex_lock(&g.mu);
    quit_stages(NULL);
    pthread_mutex_unlock(&g.mu);
    e->pipe_up = 0;
}

/* ---- stage 0 ---- */

/* The answer in g.buf (nr bytes) to a message of operation op: MS_OK, or
 * the failure a stage set in its header (or a malformed one) in err. */
static ms_status answer(size_t nr, int op, ms_err *err) {
    const hdr *h = (const hdr *)g.buf;
    if (nr < sizeof *h || h->op != op) return ms_err_set(err, MS_E_INTERNAL, "pipeline: a malformed answer (%zu bytes)", nr);
    if (h->status == MS_OK) return MS_OK;
    char m[sizeof h->err];
    memcpy(m, h->err, sizeof m);
    m[sizeof m - 1] = '\0';
    return ms_err_set(err, (ms_status)h->status, "%s", m);
}

/* Send g.buf[0, n) round the ring and receive what comes back (answer).
 * Under g.mu. */
static ms_status round_trip(size_t n, int op, ms_err *err, size_t *n_back) {
    send_bytes(g.buf, n, 1, TAG_RING);
    *n_back = recv_bytes(g.size - 1, TAG_RING, NULL);
    return answer(*n_back, op, err);
}

static ms_status stages_op(ms_engine *e, int op, int64_t a0, int64_t a1, char *msg, size_t len) {
    if (!e->pipe_up) return MS_OK;
    if (op == MS_PIPE_STATS_RESET) g.group_passes = g.async_chunks = 0;
    ms_err err;
    ms_err_clear(&err);
    pthread_mutex_lock(&g.mu);
    hdr *h = (hdr *)room(sizeof *h);
    memset(h, 0, sizeof *h);
    h->op = op;
    h->a0 = a0;
    h->a1 = a1;
    size_t nb;
    const ms_status st = round_trip(sizeof *h, op, &err, &nb);
    pthread_mutex_unlock(&g.mu);
    if (st != MS_OK && msg && len) snprintf(msg, len, "%s", err.msg);
    return st;
}

/* A FORWARD message for the segments' T tokens (run, and nb snapshots of the
 * bank per token) into *buf (grown); its size. */
static size_t build_forward(uint8_t **buf, size_t *cap, const ms_fwd_ctx *c, const ms_fseg *seg, int nseg, int64_t T,
                            float *run, float *bank, int64_t nb_max, int nb) {
    const ms_engine *e = c->pass_user;
    const int64_t H = e->cfg.hidden_size;
    const size_t n = forward_bytes(H, nseg, T, nb);
    uint8_t *b = grow(buf, cap, n);
    hdr *h = (hdr *)b;
    memset(h, 0, sizeof *h);
    h->op = OP_FORWARD;
    h->nseg = nseg;
    h->nb = nb;
    h->T = T;
    h->flags = c->predict ? F_PREDICT : 0;
    seg_desc *sd = (seg_desc *)(b + sizeof *h);
    for (int i = 0; i < nseg; i++) sd[i] = (seg_desc){ seg[i].st->pipe_id, seg[i].T, seg[i].st->n_past, seg[i].rec != NULL };
    move_acts(acts_of(b, nseg), run, bank, T, H, nb_max, nb, 1);
    return n;
}

/* The last stage's answer to a FORWARD message (g.buf, nr bytes, its header
 * checked by round_trip or take): its activations into run / bank. */
static ms_status take_forward(const ms_engine *e, size_t nr, int nseg, int64_t T, float *run, float *bank,
                              int64_t nb_max, int *nb, ms_err *err) {
    const int64_t H = e->cfg.hidden_size;
    const hdr *h = (const hdr *)g.buf;
    const int nb2 = h->nb;
    if (h->T != T || h->nseg != nseg || nb2 < *nb || nb2 > nb_max || nr != forward_bytes(H, nseg, T, nb2))
        return ms_err_set(err, MS_E_INTERNAL, "pipeline: the last stage answered %zu bytes (%d snapshots)", nr, nb2);
    move_acts(acts_of(g.buf, nseg), run, bank, T, H, nb_max, nb2, 0);
    *nb = nb2;
    return MS_OK;
}

/* Messages in flight from stage 0 without waiting for their answers: the
 * groups of one batched pass (MS_PASS_SEND / MS_PASS_RECV), or the chunks
 * of one prompt whose outputs nobody reads (MS_PASS_ASYNC). Each stays in its own
 * slot's buffer until its send completes. g.mu is held from the first send
 * until every answer is back (held). */
static struct {
    uint8_t *buf[MS_PIPE_MAX_GROUPS];
    size_t cap[MS_PIPE_MAX_GROUPS];
    MPI_Request rq[MS_PIPE_MAX_GROUPS];
    int live[MS_PIPE_MAX_GROUPS];
    int64_t sent, got;
    int held;
    ms_status first;            /* the first failure among answers taken while sending */
    char why[448];
} grp;

static void wait_send(int k) {
    if (grp.live[k]) wait_req(&grp.rq[k]);
    grp.live[k] = 0;
}

static void send_next(const ms_fwd_ctx *c, const ms_fseg *seg, int nseg, int64_t T, float *run, float *bank,
                      int64_t nb_max, int nb) {
    if (!grp.held) {
        pthread_mutex_lock(&g.mu);
        grp.held = 1;
        grp.first = MS_OK;
    }
    const int k = (int)(grp.sent % MS_PIPE_MAX_GROUPS);
    MS_ASSERT(grp.sent - grp.got < MS_PIPE_MAX_GROUPS);
    wait_send(k);
    const size_t n = build_forward(&grp.buf[k], &grp.cap[k], c, seg, nseg, T, run, bank, nb_max, nb);
    start_send(grp.buf[k], n, 1, TAG_RING, &grp.rq[k]);
    grp.live[k] = 1;
    grp.sent++;
}

/* The oldest answer: into run / bank (NULL: looked at and dropped). */
static ms_status take_next(const ms_engine *e, int nseg, int64_t T, float *run, float *bank, int64_t nb_max, int *nb,
                           ms_err *err) {
    MS_ASSERT(grp.got < grp.sent);
    const size_t nr = recv_bytes(g.size - 1, TAG_RING, NULL);
    grp.got++;
    const ms_status st = answer(nr, OP_FORWARD, err);
    return st == MS_OK && run ? take_forward(e, nr, nseg, T, run, bank, nb_max, nb, err) : st;
}

/* Every answer still out, dropped; the first failure among them (and those
 * taken earlier). g.mu stays held. */
static ms_status drain(ms_err *err) {
    ms_status st = grp.first;
    if (st != MS_OK) ms_err_set(err, st, "%s", grp.why);
    while (grp.got < grp.sent) {
        ms_err e2;
        ms_err_clear(&e2);
        const ms_status r = take_next(NULL, 0, 0, NULL, NULL, 0, NULL, &e2);
        if (r != MS_OK && st == MS_OK) { st = r; ms_err_set(err, r, "%s", e2.msg); }
    }
    for (int k = 0; k < MS_PIPE_MAX_GROUPS; k++) wait_send(k);
    grp.sent = grp.got = 0;
    grp.first = MS_OK;
    return st;
}

static void release(void) {
    grp.held = 0;
    pthread_mutex_unlock(&g.mu);
}

/* MS_PASS_ROUND: one FORWARD message there and back, after the answers to
 * the prompt's earlier chunks still out. */
static ms_status pass_round(const ms_fwd_ctx *c, const ms_fseg *seg, int nseg, int64_t T, float *run, float *bank,
                            int64_t nb_max, int *nb, ms_err *err) {
    ms_status st = MS_OK;
    if (grp.held) {
        /* the prompt's earlier chunks are still out: their answers first */
        st = drain(err);
    } else {
        pthread_mutex_lock(&g.mu);
    }
    if (st == MS_OK) {
        const size_t n = build_forward(&g.buf, &g.cap, c, seg, nseg, T, run, bank, nb_max, *nb);
        size_t nr;
        st = round_trip(n, OP_FORWARD, err, &nr);
        if (st == MS_OK) st = take_forward(c->pass_user, nr, nseg, T, run, bank, nb_max, nb, err);
    }
    release();
    return st;
}

ms_status ms_pipe_pass(const ms_fwd_ctx *c, ms_pass_op op, const ms_fseg *seg, int nseg, int64_t T, float *run,
                       float *bank, int64_t nb_max, int *nb, ms_err *err) {
    const ms_engine *e = c->pass_user;
    switch (op) {
    case MS_PASS_ROUND:
        return pass_round(c, seg, nseg, T, run, bank, nb_max, nb, err);
    case MS_PASS_SEND:
        MS_ASSERT(!grp.held || grp.sent > grp.got);
        send_next(c, seg, nseg, T, run, bank, nb_max, *nb);
        return MS_OK;
    case MS_PASS_ASYNC:
        /* a prompt chunk nobody reads the output of: at most one a stage
           boundary in flight (deeper would not go faster, and each is a
           message of memory) */
        while (grp.sent - grp.got >= (e->n_stages > 1 ? e->n_stages - 1 : 1)) {
            ms_err e2;
            ms_err_clear(&e2);
            const ms_status r = take_next(e, 0, 0, NULL, NULL, 0, NULL, &e2);
            if (r != MS_OK && grp.first == MS_OK) { grp.first = r; snprintf(grp.why, sizeof grp.why, "%.400s", e2.msg); }
        }
        send_next(c, seg, nseg, T, run, bank, nb_max, *nb);
        g.async_chunks++;
        return MS_OK;
    case MS_PASS_RECV:
        break;
    }
    const ms_status st = take_next(e, nseg, T, run, bank, nb_max, nb, err);
    if (grp.got == grp.sent) {
        if (grp.sent > 1) g.group_passes++;
        ms_err e2;
        ms_err_clear(&e2);
        drain(&e2);
        release();
    }
    return st;
}

static ms_status stages_drain(ms_engine *e, char *msg, size_t len) {
    if (!grp.held) return MS_OK;
    ms_err err;
    ms_err_clear(&err);
    const ms_status st = drain(&err);
    release();
    if (st != MS_OK && msg && len) snprintf(msg, len, "%s", err.msg);
    return st;
}

/* Floats of a layer's state per STATE_GET / STATE_PUT message: a layer's
 * state can pass a message's limit (start_send: an MLA layer's cache at a
 * long context), so it travels in pieces. */
static int64_t state_piece = STATE_PIECE_FLOATS;

void ms_pipe_set_state_piece(int64_t floats) { state_piece = floats > 0 ? floats : STATE_PIECE_FLOATS; }

static ms_status stages_layer_state(ms_engine *e, int get, int64_t id, int il, int64_t n_past, float *buf, int64_t n,
                              char *msg, size_t len) {
    ms_err err;
    ms_err_clear(&err);
    ms_status st = MS_OK;
    pthread_mutex_lock(&g.mu);
    for (int64_t at = 0; at < n && st == MS_OK; at += state_piece) {
        const int64_t count = n - at < state_piece ? n - at : state_piece;
        const size_t bytes = (size_t)count * sizeof(float);
        hdr *h = (hdr *)room(sizeof *h + (get ? 0 : bytes));
        memset(h, 0, sizeof *h);
        h->op = get ? OP_STATE_GET : OP_STATE_PUT;
        h->a0 = id;
        h->a1 = il;
        h->T = n_past;
        h->at = at;
        h->count = count;
        if (!get) memcpy(g.buf + sizeof *h, buf + at, bytes);
        size_t nr;
        st = round_trip(sizeof *h + (get ? 0 : bytes), h->op, &err, &nr);
        if (st == MS_OK && nr != sizeof(hdr) + (get ? bytes : 0))
            st = ms_err_set(&err, MS_E_INTERNAL, "pipeline: layer %d's state came back as %zu bytes, not %zu", il,
                            nr - sizeof(hdr), get ? bytes : (size_t)0);
        if (st == MS_OK && get) memcpy(buf + at, g.buf + sizeof(hdr), bytes);
    }
    pthread_mutex_unlock(&g.mu);
    if (st != MS_OK && msg && len) snprintf(msg, len, "%s", err.msg);
    return st;
}

static void stages_add_stats(const ms_engine *e, ms_stats *st) {
    st->stage_group_passes = g.group_passes;
    st->stage_async_chunks = g.async_chunks;
    st->stage_prompt_cache_bytes[0] = ms_pcache_used(e->pcache);
    ms_err err;
    ms_err_clear(&err);
    pthread_mutex_lock(&g.mu);
    const size_t n = sizeof(hdr) + (size_t)g.size * STATS_PER_STAGE * sizeof(int64_t);
    hdr *h = (hdr *)room(n);
    memset(g.buf, 0, n);
    h->op = OP_STATS;
    size_t nr;
    if (round_trip(n, OP_STATS, &err, &nr) == MS_OK && nr == n) {
        const int64_t *v = (const int64_t *)(g.buf + sizeof(hdr));
        for (int r = 1; r < g.size; r++) {
            const int64_t *w = v + STATS_PER_STAGE * r;
            st->stage_trunk_bytes[r] = w[0];
            st->stage_expert_bytes[r] = w[1];
            st->stage_peak_rss[r] = w[2];
            st->stage_prompt_cache_bytes[r] = w[3];
            st->trunk_bytes_read += w[0];
            st->expert_bytes_read += w[1];
        }
    }
    pthread_mutex_unlock(&g.mu);
}

/* ---- stages r > 0 ---- */

typedef struct stage_sessions {
    int64_t *id;
    ms_session **s;
    int n, cap;
} stage_sessions;

static ms_session *find(const stage_sessions *t, int64_t id) {
    for (int i = 0; i < t->n; i++)
        if (t->id[i] == id) return t->s[i];
    return NULL;
}

static ms_status fail(hdr *h, ms_status st, const char *fmt, const char *what) {
    h->status = st;
    char m[400];
    snprintf(m, sizeof m, fmt, what);
    snprintf(h->err, sizeof h->err, "pipeline stage %d: %s", g.rank, m);
    return st;
}

/* Run a FORWARD message's tokens through this stage's layers; the message
 * to pass on is left in g.buf, its size in *n. */
static void stage_forward(ms_engine *e, const stage_sessions *t, size_t *n) {
    hdr *h = (hdr *)g.buf;
    const int64_t H = e->cfg.hidden_size, T = h->T;
    const int nseg = h->nseg, nb = h->nb;
    const int64_t nb_max = ms_fwd_nb_max(e->fwd);
    if (nseg < 1 || nseg > e->p.prefill_chunk || T < 1 || T > e->p.prefill_chunk || nb < 0 || nb > nb_max ||
        *n != forward_bytes(H, nseg, T, nb)) {
        fail(h, MS_E_INTERNAL, "%s", "a malformed forward message");
        *n = sizeof *h;
        return;
    }
    const seg_desc *sd = (const seg_desc *)(g.buf + sizeof *h);
    ms_fseg *seg = e->batch_seg;           /* [prefill_chunk] >= nseg */
    int64_t sum = 0;
    int bad_rec = 0;                        /* a record the session cannot hold */
    for (int i = 0; i < nseg; i++) {
        ms_session *s = find(t, sd[i].id);
        if (!s || s->st.n_past != sd[i].n_past || sd[i].T < 1) {
            fail(h, MS_E_INTERNAL, "%s", s ? "a session out of step with stage 0" : "an unknown session");
            *n = sizeof *h;
            return;
        }
        s->rb.n_rec = 0;                    /* any feed ends the previous record */
        bad_rec |= sd[i].record && (s->max_draft == 0 || sd[i].T > s->rb.max_T);
        seg[i] = (ms_fseg){ &s->st, sd[i].T, NULL, NULL, sd[i].record ? &s->rb : NULL };
        sum += sd[i].T;
    }
    if (sum != T || bad_rec) {
        fail(h, MS_E_INTERNAL, "%s", "a malformed forward message");
        *n = sizeof *h;
        return;
    }
    float *run = ms_fwd_run(e->fwd), *bank = ms_fwd_bank(e->fwd);
    move_acts(acts_of(g.buf, nseg), run, bank, T, H, nb_max, nb, 0);
    ms_fwd_ctx ctx = { .m = &e->model, .store = e->store, .pool = e->pool,
                       .predict = (h->flags & F_PREDICT) != 0, .stage_nb = nb };
    ms_err err;
    ms_err_clear(&err);
    const ms_status st = ms_forward_stage(&ctx, e->fwd, seg, nseg, &err);
    e->scale255 += ctx.scale255;
    if (st != MS_OK) {
        fail(h, st, "%.300s", err.msg);
        *n = sizeof *h;
        return;
    }
    /* the same header and segments, this stage's activations */
    *n = forward_bytes(H, nseg, T, ctx.stage_nb);
    uint8_t *b = room(*n);
    ((hdr *)b)->nb = ctx.stage_nb;
    move_acts(acts_of(b, nseg), run, bank, T, H, nb_max, ctx.stage_nb, 1);
}

/* Floats [at, at + count) of a layer's state in its two parts (len[k]
 * floats at part[k]) to the message's bytes at b (to_msg), or back. */
static void move_piece(float *const part[2], const int64_t len[2], int64_t at, int64_t count, uint8_t *b, int to_msg) {
    for (int64_t k = 0, base = 0; k < 2; base += len[k], k++) {
        const int64_t lo = at > base ? at : base, hi = at + count < base + len[k] ? at + count : base + len[k];
        if (hi <= lo) continue;             /* an MLA layer has no second part */
        uint8_t *p = b + (size_t)(lo - at) * sizeof(float);
        if (to_msg) memcpy(p, part[k] + (lo - base), (size_t)(hi - lo) * sizeof(float));
        else memcpy(part[k] + (lo - base), p, (size_t)(hi - lo) * sizeof(float));
    }
}

/* A piece of a layer's state: GET appends it to the message, PUT takes it
 * out (the stages that do not hold the layer pass the message on as it is). */
static void stage_state(ms_engine *e, const stage_sessions *t, size_t *n) {
    hdr *h = (hdr *)g.buf;
    const ms_model *m = &e->model;
    const int il = (int)h->a1;
    if (il < m->layer0 || il >= m->layer1) return;
    ms_session *s = find(t, h->a0);
    const int put = h->op == OP_STATE_PUT;
    float *part[2];
    int64_t len[2];
    ms_state_layer(s ? &s->st : NULL, m, il, h->T, part, len);
    const int64_t at = h->at, count = h->count;
    const size_t bytes = count > 0 ? (size_t)count * sizeof(float) : 0;
    if (!s || h->T < 0 || h->T > s->st.max_ctx || at < 0 || count < 1 || at + count > len[0] + len[1] ||
        *n != sizeof *h + (put ? bytes : 0)) {
        fail(h, MS_E_INTERNAL, "%s", s ? "a malformed state message" : "an unknown session");
        *n = sizeof *h;
        return;
    }
    move_piece(part, len, at, count, room(sizeof *h + bytes) + sizeof(hdr), !put);
    *n = sizeof(hdr) + (put ? 0 : bytes);
}

static void stage_op(ms_engine *e, stage_sessions *t, size_t *n) {
    hdr *h = (hdr *)g.buf;
    if (h->op == OP_STATE_GET || h->op == OP_STATE_PUT) {
        stage_state(e, t, n);
        return;
    }
    ms_session *s = h->op == OP_STATS || h->op == MS_PIPE_OPEN || h->op == MS_PIPE_STATS_RESET ||
                    h->op == MS_PIPE_PC_DROP ? NULL : find(t, h->a0);
    char m[400] = "";
    switch (h->op) {
    case MS_PIPE_OPEN: {
        if (find(t, h->a0)) { fail(h, MS_E_INTERNAL, "%s", "a session opened twice"); break; }
        if (t->n == t->cap) {
            const int cap = t->cap ? 2 * t->cap : 8;
            int64_t *id = realloc(t->id, (size_t)cap * sizeof *id);
            if (id) t->id = id;
            ms_session **ss = id ? realloc(t->s, (size_t)cap * sizeof *ss) : NULL;
            if (!ss) { fail(h, MS_E_NOMEM, "%s", "out of memory"); break; }
            t->s = ss;
            t->cap = cap;
        }
        ms_session *ns;
        const ms_status st = ms_session_open(e, &ns);
        if (st != MS_OK) { fail(h, st, "session: %.300s", e->error); break; }
        t->id[t->n] = h->a0;
        t->s[t->n++] = ns;
        break;
    }
    case MS_PIPE_CLOSE:
        for (int i = 0; i < t->n; i++)
            if (t->id[i] == h->a0) {
                ms_session_close(t->s[i]);
                t->id[i] = t->id[--t->n];
                t->s[i] = t->s[t->n];
                break;
            }
        break;
    case MS_PIPE_RESET:
        if (s) ms_session_reset(s);
        break;
    case MS_PIPE_COPY: {
        ms_session *src = find(t, h->a1);
        if (!s || !src) { fail(h, MS_E_INTERNAL, "%s", "copy of an unknown session"); break; }
        ms_state_copy(&s->st, &src->st, &e->model);
        s->rb.n_rec = 0;
        break;
    }
    case MS_PIPE_ROLLBACK:
        if (!s || s->rb.n_rec < h->a1 || h->a1 < 1) { fail(h, MS_E_INTERNAL, "%s", "a rollback out of step"); break; }
        ms_state_rollback(&s->st, &s->rb, &e->model, e->pool, h->a1);
        break;
    case MS_PIPE_STATS_RESET:
        ms_engine_stats_reset(e);
        break;
    case MS_PIPE_SET_PAST:      /* a session loaded from a file */
        if (s && h->a1 >= 0 && h->a1 <= s->st.max_ctx) { s->st.n_past = h->a1; s->rb.n_rec = 0; }
        else if (s) fail(h, MS_E_INTERNAL, "%s", "a position past the context");
        break;
    case MS_PIPE_PC_STORE:      /* the prompt cache's parts (engine/prefix_cache.h) */
        if (s && ms_pcache_part_store(e->pcache, h->a1, &s->st, m, sizeof m) != MS_OK) fail(h, MS_E_INTERNAL, "%s", m);
        break;
    case MS_PIPE_PC_RESTORE:
        if (s && ms_pcache_part_restore(e->pcache, h->a1, &s->st, m, sizeof m) != MS_OK) fail(h, MS_E_INTERNAL, "%s", m);
        else if (s) s->rb.n_rec = 0;
        break;
    case MS_PIPE_PC_DROP:
        if (ms_pcache_part_drop(e->pcache, h->a1, h->a0 == 1, m, sizeof m) != MS_OK) fail(h, MS_E_INTERNAL, "%s", m);
        break;
    case OP_STATS: {
        if (*n != sizeof *h + (size_t)g.size * STATS_PER_STAGE * sizeof(int64_t)) {
            fail(h, MS_E_INTERNAL, "%s", "a malformed message");
            break;
        }
        ms_stats st;
        ms_engine_stats(e, &st);
        int64_t *v = (int64_t *)(g.buf + sizeof *h);
        int64_t *w = v + STATS_PER_STAGE * g.rank;
        w[0] = st.trunk_bytes_read;
        w[1] = st.expert_bytes_read;
        w[2] = st.peak_rss_bytes;
        w[3] = ms_pcache_used(e->pcache);
        return;
    }
    default:
        fail(h, MS_E_INTERNAL, "%s", "an unknown operation");
    }
    if (!s && h->status == MS_OK && (h->op == MS_PIPE_RESET || h->op == MS_PIPE_ROLLBACK || h->op == MS_PIPE_SET_PAST ||
                                     h->op == MS_PIPE_PC_STORE || h->op == MS_PIPE_PC_RESTORE))
        fail(h, MS_E_INTERNAL, "%s", "an unknown session");
    *n = sizeof *h;
}

static void serve_stage(ms_engine *e) {
    stage_sessions t = { 0 };
    for (;;) {
        int tag;
        size_t n = recv_bytes(MPI_ANY_SOURCE, MPI_ANY_TAG, &tag);
        if (tag == TAG_QUIT) break;
        hdr *h = (hdr *)g.buf;
        if (tag != TAG_RING || n < sizeof *h) fatal("a malformed pipeline message");
        if (h->status == MS_OK) {
            if (h->op == OP_FORWARD) stage_forward(e, &t, &n);
            else stage_op(e, &t, &n);
        }
        send_bytes(g.buf, n, (g.rank + 1) % g.size, TAG_RING);
    }
    for (int i = 0; i < t.n; i++) ms_session_close(t.s[i]);
    free(t.id);
    free(t.s);
}

void ms_pipe_serve_if_worker(const ms_engine_params *p) {
    if (!g.booted || g.rank == 0) return;
    /* mpirun passes ^C and SIGTERM to every process: stage 0 decides (a server
       finishes its requests), and the other stages end when it closes */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    ms_engine *e = NULL;
    char msg[512];
    const ms_status st = ms_engine_open(p, &e, msg, sizeof msg);
    if (st != MS_OK) {
        fprintf(stderr, "moestream: pipeline stage %d: %s\n", g.rank, msg);
        exit(2);
    }
    serve_stage(e);
    ms_engine_close(e);
    exit(0);
}

/* ---- the engine's hooks ---- */

static ms_pipe_hooks hooks = { 0, 1, stages_meet, stages_op, stages_layer_state, stages_drain, stages_add_stats,
                               stages_close };

static void register_stages(void) {
    hooks.rank = g.rank;
    hooks.size = g.size;
    ms_engine_set_pipe(&hooks);
}

const int ms_pipe_built = 1;
