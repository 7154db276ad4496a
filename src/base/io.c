/* base/io.c - the I/O layer: batches, chunks, the pread workers, the io_uring
 * completion thread and fault injection. See io.h for the contract.
 *
 * Structure: a submitted batch becomes an array of chunks (one aligned piece
 *   of at most chunk_bytes of one request), sorted by (file, offset) and
 *   appended to one FIFO queue. The backends only move chunks from the queue
 *   through the kernel and back:
 *
 *     submit --> [queue] --> pread worker x queue_depth --+
 *                   ^    \-> uring thread (<= qd SQEs) ---+--> attempt_done()
 *                   |                                      |     |
 *                   +------ reissue (retry / short / EINTR) <----+
 *                                                  done --> batch.n_left-- --> wait
 *
 *   A chunk of a request that asks for a check lands (landed = 1, its run
 *   taken) in attempt_done and goes to the check queue; one of
 *   IO_CHECK_THREADS checker threads runs the hook on it unlocked
 *   (chunk_check), then it is DONE. The reading threads never hash, so the
 *   reads in flight stay at queue_depth while earlier chunks are hashed:
 *
 *     attempt_done --landed--> [check queue] --> checker x IO_CHECK_THREADS
 *                                                  --> hook --> DONE
 *   Chunks are kept in request order in the batch (a request's chunks are
 *   neighbours, which the run walks); `order` is the sorted issue order.
 *
 *   Everything that decides (attempt_plan / attempt_done: which descriptor,
 *   whether a fault applies, retry or fail, the O_DIRECT fallback) is shared
 *   by the backends and runs under io->mu; only the read itself runs unlocked.
 *
 * Chunk lifecycle: QUEUED -> (planned, in flight) -> QUEUED again on reissue,
 *   or DONE (success, failure, or cancelled because its batch already failed).
 *   A chunk is owned by exactly one of: the queue, one worker, the ring.
 *
 * The uring thread blocks in io_uring_submit_and_wait; a read SQE on an
 *   eventfd (user_data NULL) stays armed so that submit and close can wake it
 *   by writing the eventfd. The ring therefore has queue_depth + 1 entries.
 */
#include "base/io.h"

#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Threads that run the check hook (started only with params.check): hashing
 * runs at ~6 GB/s per core against the disk's ~2 GB/s, so two keep up with a
 * fast disk and leave the rest of the cores to the compute threads. */
#define IO_CHECK_THREADS 2

/* EINTR / EAGAIN resubmissions of one chunk before it counts as a failure. */
#define IO_MAX_AGAIN 1000

typedef struct io_file {
    char *path;
    int fd_buf;        /* always open */
    int fd_direct;     /* O_DIRECT descriptor or -1 */
    int use_direct;    /* 0 after the fallback; guarded by io->mu */
    int direct_proven; /* a direct read succeeded: EINVAL is no longer a fallback cue */
    int64_t size;
} io_file;

struct io_batch;

typedef struct io_chunk {
    struct io_chunk *next; /* queue link */
    struct io_batch *b;
    io_file *f;
    int file;              /* file index, for ordering */
    uint8_t *base;         /* buffer address of file offset abeg */
    int64_t abeg;          /* align_down(request offset) */
    int64_t dbeg, dend;    /* the request's data window [offset, offset + n) */
    int64_t start, end;    /* this chunk's read range */
    int64_t off;           /* next file offset to read, start <= off < need */
    int64_t need;          /* min(end, dend): complete once off >= need */
    int64_t req_index;     /* global request index, for fault injection */
    int first;             /* first chunk of its request */
    int last;              /* last chunk of its request */
    int check;             /* its request asked for a check */
    int landed;            /* its bytes are in the buffer (check requests only) */
    int64_t req_pos;       /* index of its request in the batch */
    int64_t run_b, run_e;  /* the landed stretch of data around it, taken at landing */
    int n_issued, n_failed, n_again;
    int force_buffered;    /* remainder of a short direct read at an unaligned offset */
    /* the attempt being made (set by attempt_plan) */
    int cur_fd, cur_direct, cur_short;
    int cur_inject; /* errno the attempt fails with, no I/O issued; 0 = real read */
} io_chunk;

typedef struct io_batch {
    struct io_batch *next;
    uint64_t ticket;
    int64_t n_left; /* chunks not yet DONE */
    int failed;
    int waiting;
    int prio;              /* ms_io_prio: the queue its chunks wait in */
    ms_err err;
    io_chunk *chunks;      /* request order */
    io_chunk **order;      /* issue order: (file, offset) */
    int64_t n_chunks, cap_chunks;
    int check_failed;      /* a check failed; the first (req_pos, offset) one kept */
    int64_t ck_req, ck_off;
    ms_err check_err;
} io_batch;

struct ms_io {
    ms_io_params p;
    pthread_mutex_t mu;
    pthread_cond_t cv_work; /* pread workers: queue non-empty or stop */
    pthread_cond_t cv_done; /* some batch reached n_left == 0 */
    io_file **files;
    int n_files, cap_files;
    io_chunk *q_head[MS_IO_N_PRIO], *q_tail[MS_IO_N_PRIO];   /* one FIFO per priority */
    int64_t q_len;          /* chunks in all queues */
    io_batch *active, *spare;
    uint64_t next_ticket;
    int64_t next_req_index;
    int stop;
    int paused;             /* ms_io_pause: readers take no new chunk */
    ms_io_stats st;
    /* reads in flight on the device, every backend (pread calls running,
     * SQEs submitted), and when that count last changed: busy_ns / depth_ns */
    int reading;
    int64_t reading_t;
    pthread_t *threads;
    int n_threads;
    /* checking (params.check): landed chunks waiting for the hook */
    io_chunk *ck_head, *ck_tail;
    pthread_cond_t cv_check;    /* check queue non-empty or ck_stop */
    int ck_stop;
    pthread_t ck_threads[IO_CHECK_THREADS];
    int n_ck_threads;
    /* MS_IO_URING */
    int ring_ok;
    struct io_uring ring;
    int efd;
    uint64_t efd_buf;
    int efd_armed;
    int inflight;
};

/* ---------------------------------------------------------------- params */

ms_io_params ms_io_default_params(void) {
    ms_io_params p;
    memset(&p, 0, sizeof p);
    p.kind = MS_IO_DIRECT;
    /* 32: on machine C's virtio disk (2.0-2.5 GB/s) 16 reads in flight decoded the
     * floor rung x1.16 faster than 4, and 32 faster again than 16 in 4 of 5
     * alternating rounds (the disk delivered 2.48 against 2.25 GB/s while busy,
     * medians; 64 no better), the rung where experts stream 2 of 3; at 16 the
     * engine kept the queue full (15.9 of 16 in flight on average while the disk
     * was busy), so the disk, not the engine, set the pace (docs/PERFORMANCE.md,
     * "Machine C" and "Machine C, second session"). A read in flight holds no
     * memory of its own (it lands in its destination); the pread backend runs a
     * worker thread per slot. */
    p.queue_depth = 32;
    p.chunk_bytes = (int64_t)2 << 20;
    p.max_retries = 3;
    p.uring_buffered = 0;
    p.fault.kind = MS_FAULT_NONE;
    return p;
}

const char *ms_io_kind_name(ms_io_kind kind) {
    switch (kind) {
    case MS_IO_PREAD: return "pread";
    case MS_IO_DIRECT: return "direct";
    case MS_IO_URING: return "uring";
    }
    return "?";
}

static const char *errtext(int e, char *buf, size_t n) {
    /* GNU strerror_r (_GNU_SOURCE): thread-safe, returns the text pointer */
    return strerror_r(e, buf, n);
}

/* ----------------------------------------------------------------- queue */

/* Chunks wait in one FIFO per priority (the batch's); the backends take the
 * head of the most urgent non-empty one. Under io->mu. */
static void q_push_back(ms_io *io, io_chunk *c) {
    const int q = c->b->prio;
    c->next = NULL;
    if (io->q_tail[q]) io->q_tail[q]->next = c;
    else io->q_head[q] = c;
    io->q_tail[q] = c;
    io->q_len++;
}

static void q_push_front(ms_io *io, io_chunk *c) {
    const int q = c->b->prio;
    c->next = io->q_head[q];
    io->q_head[q] = c;
    if (!io->q_tail[q]) io->q_tail[q] = c;
    io->q_len++;
}

static io_chunk *q_pop(ms_io *io) {
    for (int q = 0; q < MS_IO_N_PRIO; q++) {
        io_chunk *c = io->q_head[q];
        if (!c) continue;
        io->q_head[q] = c->next;
        if (!io->q_head[q]) io->q_tail[q] = NULL;
        c->next = NULL;
        io->q_len--;
        return c;
    }
    return NULL;
}

/* Take the queued chunks of batch b out of their queue, in queue order, onto
 * the list *out (linked through next). Returns how many. Under io->mu. */
static int64_t q_take_batch(ms_io *io, const io_batch *b, io_chunk **out) {
    const int q = b->prio;
    io_chunk **pp = &io->q_head[q], *prev = NULL, **tail = out;
    int64_t n = 0;
    *out = NULL;
    while (*pp) {
        io_chunk *c = *pp;
        if (c->b != b) { prev = c; pp = &c->next; continue; }
        *pp = c->next;
        c->next = NULL;
        *tail = c;
        tail = &c->next;
        n++;
    }
    io->q_tail[q] = prev;
    if (!io->q_head[q]) io->q_tail[q] = NULL;
    io->q_len -= n;
    return n;
}

/* --------------------------------------------------- chunk state machine */

/* Mark c DONE. Under io->mu. */
static void chunk_finish(ms_io *io, io_chunk *c) {
    io_batch *b = c->b;
    MS_ASSERT(b->n_left > 0);
    if (--b->n_left == 0) pthread_cond_broadcast(&io->cv_done);
}

static void chunk_fail(ms_io *io, io_chunk *c, const char *cause) {
    io_batch *b = c->b;
    b->failed = 1;
    ms_err_set(&b->err, MS_E_IO,
               "read of %s failed at offset %lld (request offset %lld, %lld bytes): %s",
               c->f->path, (long long)c->off, (long long)c->dbeg,
               (long long)(c->dend - c->dbeg), cause);
    chunk_finish(io, c);
}

/* Decide how the next attempt of c is made. Under io->mu. */
static void attempt_plan(ms_io *io, io_chunk *c) {
    const io_file *f = c->f;
    const ms_io_fault *ft = &io->p.fault;
    int hit = c->first && ft->kind != MS_FAULT_NONE && ft->at_read == c->req_index;
    c->cur_direct = f->fd_direct >= 0 && f->use_direct && !c->force_buffered;
    c->cur_fd = c->cur_direct ? f->fd_direct : f->fd_buf;
    c->cur_inject = 0;
    if (hit && (ft->kind == MS_FAULT_EIO || (ft->kind == MS_FAULT_TRANSIENT && c->n_issued == 0)))
        c->cur_inject = EIO;
    if (ft->kind == MS_FAULT_NODIRECT && c->cur_direct) c->cur_inject = EINVAL;
    c->cur_short = hit && ft->kind == MS_FAULT_SHORT && c->n_issued == 0;
    c->n_issued++;
    if (!c->cur_inject) io->st.reads_issued++;
    if (io->p.on_issue) io->p.on_issue(io->p.on_issue_user, c->file, c->off);
}

/* XOR 0xFF over the part of the injected corruption window that lies in c. */
static void apply_corruption(const ms_io_fault *ft, io_chunk *c) {
    int64_t n = c->dend - c->dbeg;
    int64_t lo = ft->corrupt_begin < n ? c->dbeg + ft->corrupt_begin : c->dend;
    int64_t hi = ft->corrupt_end < n ? c->dbeg + ft->corrupt_end : c->dend;
    if (lo < c->start) lo = c->start;
    if (lo < c->dbeg) lo = c->dbeg;
    if (hi > c->end) hi = c->end;
    for (int64_t x = lo; x < hi; x++) c->base[x - c->abeg] ^= 0xFF;
}

enum { AD_DONE = 0, AD_REISSUE = 1, AD_CHECK = 2 };

/* c's bytes are in its buffer: mark it landed and take the landed stretch of
 * its request's data around it. Under io->mu (the run and the mark are one
 * step: see "Checking as data lands" in io.h). */
static void chunk_land(io_chunk *c) {
    c->landed = 1;
    const io_chunk *l = c, *r = c;
    while (!l->first && (l - 1)->landed) l--;
    while (!r->last && (r + 1)->landed) r++;
    c->run_b = l->start > c->dbeg ? l->start : c->dbeg;
    c->run_e = r->end < c->dend ? r->end : c->dend;
}

/* Run the check hook on landed chunk c (unlocked), keep a failure, then mark c
 * DONE. Called and returns under io->mu. */
static void chunk_check(ms_io *io, io_chunk *c) {
    io_batch *b = c->b;
    if (!b->failed) {   /* a failed batch is not checked: its bytes are not handed out */
        const int64_t nb = c->start > c->dbeg ? c->start : c->dbeg;
        ms_err e;
        ms_err_clear(&e);
        int64_t n_ok = 0;
        pthread_mutex_unlock(&io->mu);
        const int64_t t0 = ms_now_ns();
        ms_status st = io->p.check(io->p.check_user, c->file, c->run_b, c->run_e, nb, c->need,
                                   c->base + (c->run_b - c->abeg), &n_ok, &e);
        const int64_t dt = ms_now_ns() - t0;
        pthread_mutex_lock(&io->mu);
        io->st.checks++;
        io->st.check_ns += dt;
        if (st == MS_OK) {
            io->st.check_bytes += n_ok;
        } else if (!b->check_failed || c->req_pos < b->ck_req ||
                   (c->req_pos == b->ck_req && nb < b->ck_off)) {
            b->check_failed = 1;
            b->ck_req = c->req_pos;
            b->ck_off = nb;
            ms_err_clear(&b->check_err);
            ms_err_set(&b->check_err, st < 0 ? st : MS_E_INTERNAL, "%s",
                       e.status ? e.msg : "check failed");
        }
    }
    chunk_finish(io, c);
}

/* Queue landed chunk c for a checker thread. Under io->mu. */
static void check_push(ms_io *io, io_chunk *c) {
    c->next = NULL;
    if (io->ck_tail) io->ck_tail->next = c;
    else io->ck_head = c;
    io->ck_tail = c;
    pthread_cond_signal(&io->cv_check);
}

static void *check_worker(void *arg) {
    ms_io *io = arg;
    pthread_mutex_lock(&io->mu);
    for (;;) {
        while (!io->ck_head && !io->ck_stop) pthread_cond_wait(&io->cv_check, &io->mu);
        io_chunk *c = io->ck_head;
        if (!c) break; /* stop and drained */
        io->ck_head = c->next;
        if (!io->ck_head) io->ck_tail = NULL;
        c->next = NULL;
        chunk_check(io, c);
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

/* Account the result `res` (bytes read, or -errno) of the attempt planned for
 * c. Returns AD_REISSUE if c must be reissued, AD_DONE if it is DONE (finished
 * here), AD_CHECK if it landed and the caller must check_push it.
 * Under io->mu. */
static int attempt_done(ms_io *io, io_chunk *c, int64_t res) {
    char eb[128], msg[200];
    if (res == -EINTR || res == -EAGAIN) {
        if (++c->n_again < IO_MAX_AGAIN) return 1;
        snprintf(msg, sizeof msg, "%s, %d times", errtext((int)-res, eb, sizeof eb),
                 IO_MAX_AGAIN);
        chunk_fail(io, c, msg);
        return 0;
    }
    if (res == -EINVAL && c->cur_direct && !c->f->direct_proven) {
        /* the filesystem refuses O_DIRECT reads: buffered from now on, no retry */
        c->f->use_direct = 0;
        return 1;
    }
    if (res < 0) {
        if (c->n_failed++ < io->p.max_retries) {
            io->st.retries++;
            return 1;
        }
        snprintf(msg, sizeof msg, "%s%s after %d attempts", errtext((int)-res, eb, sizeof eb),
                 c->cur_inject ? " (injected fault)" : "", c->n_failed);
        chunk_fail(io, c, msg);
        return 0;
    }
    if (c->cur_short) {
        int64_t keep = (c->need - c->off) / 2;
        if (keep > 0 && res > keep) res = keep;
    }
    io->st.bytes_read += res;
    if (c->cur_direct && res > 0) c->f->direct_proven = 1;
    if (c->off + res >= c->need) {
        if (io->p.fault.kind == MS_FAULT_CORRUPT && io->p.fault.at_read == c->req_index)
            apply_corruption(&io->p.fault, c);
        if (c->check && !c->b->failed) {
            chunk_land(c);
            return AD_CHECK;
        }
        chunk_finish(io, c);
        return AD_DONE;
    }
    if (res == 0) {
        snprintf(msg, sizeof msg, "end of file at %lld before the data's end %lld (file shrank?)",
                 (long long)c->off, (long long)c->need);
        chunk_fail(io, c, msg);
        return 0;
    }
    io->st.short_reads++;
    c->off += res;
    /* O_DIRECT needs an aligned offset; an unaligned remainder (short read at a
     * non-block boundary) is finished through the page cache */
    if (c->cur_direct && c->off % MS_IO_ALIGN) c->force_buffered = 1;
    return 1;
}

/* ------------------------------------------------------- device activity */

/* Account the time since the count of reads in flight last changed, then
 * change it by delta (+1 a read goes to the device, -1 it came back).
 * Under io->mu. */
static void reading_add(ms_io *io, int delta) {
    int64_t now = ms_now_ns();
    if (io->reading > 0) {
        io->st.busy_ns += now - io->reading_t;
        io->st.depth_ns += (int64_t)io->reading * (now - io->reading_t);
    }
    io->reading_t = now;
    io->reading += delta;
    MS_ASSERT(io->reading >= 0);
}

/* ---------------------------------------------------------- pread backend */

static void *pread_worker(void *arg) {
    ms_io *io = arg;
    pthread_mutex_lock(&io->mu);
    for (;;) {
        while ((!io->q_len || io->paused) && !io->stop) pthread_cond_wait(&io->cv_work, &io->mu);
        io_chunk *c = q_pop(io);
        if (!c) break; /* stop and drained */
        for (;;) {
            if (c->b->failed) { /* another chunk already failed the batch */
                chunk_finish(io, c);
                break;
            }
            attempt_plan(io, c);
            int64_t res;
            if (c->cur_inject) {
                res = -(int64_t)c->cur_inject;
            } else {
                int fd = c->cur_fd;
                int64_t off = c->off, len = c->end - c->off;
                uint8_t *dst = c->base + (off - c->abeg);
                reading_add(io, 1);
                pthread_mutex_unlock(&io->mu);
                ssize_t r = pread(fd, dst, (size_t)len, (off_t)off);
                res = r < 0 ? -(int64_t)errno : (int64_t)r;
                pthread_mutex_lock(&io->mu);
                reading_add(io, -1);
            }
            int ad = attempt_done(io, c, res);
            if (ad == AD_CHECK) check_push(io, c);
            if (ad != AD_REISSUE) break;
        }
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

/* --------------------------------------------------------- uring backend */

static void uring_arm_eventfd(ms_io *io) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
    MS_ASSERT(sqe != NULL); /* the ring has queue_depth + 1 entries */
    io_uring_prep_read(sqe, io->efd, &io->efd_buf, sizeof io->efd_buf, 0);
    io_uring_sqe_set_data(sqe, NULL);
    io->efd_armed = 1;
}

static void uring_wake(ms_io *io) {
    uint64_t one = 1;
    ssize_t w;
    do w = write(io->efd, &one, sizeof one);
    while (w < 0 && errno == EINTR);
    /* EAGAIN means the counter is saturated: a wake-up is pending anyway */
}

static void *uring_thread(void *arg) {
    ms_io *io = arg;
    int n_bad = 0;
    pthread_mutex_lock(&io->mu);
    for (;;) {
        while (io->inflight < io->p.queue_depth && io->q_len && !io->paused) {
            io_chunk *c = q_pop(io);
            if (c->b->failed) {
                chunk_finish(io, c);
                continue;
            }
            attempt_plan(io, c);
            if (c->cur_inject) {
                if (attempt_done(io, c, -(int64_t)c->cur_inject) == AD_REISSUE) q_push_front(io, c);
                continue;
            }
            struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
            MS_ASSERT(sqe != NULL);
            io_uring_prep_read(sqe, c->cur_fd, c->base + (c->off - c->abeg),
                               (unsigned)(c->end - c->off), (uint64_t)c->off);
            io_uring_sqe_set_data(sqe, c);
            io->inflight++;
            reading_add(io, 1);
        }
        if (io->stop && !io->q_len && io->inflight == 0) break;
        if (!io->efd_armed) uring_arm_eventfd(io);
        pthread_mutex_unlock(&io->mu);
        int rc = io_uring_submit_and_wait(&io->ring, 1);
        pthread_mutex_lock(&io->mu);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            /* unexpected: the SQEs stay queued in the ring; back off and retry */
            MS_ASSERT(++n_bad < 10000);
            pthread_mutex_unlock(&io->mu);
            nanosleep(&(struct timespec){0, 1000000}, NULL);
            pthread_mutex_lock(&io->mu);
        } else {
            n_bad = 0;
        }
        struct io_uring_cqe *cqe;
        unsigned head, n_seen = 0;
        io_uring_for_each_cqe(&io->ring, head, cqe) {
            io_chunk *c = io_uring_cqe_get_data(cqe);
            n_seen++;
            if (!c) {
                io->efd_armed = 0;
                continue;
            }
            io->inflight--;
            reading_add(io, -1);
            int ad = attempt_done(io, c, cqe->res);
            if (ad == AD_REISSUE) q_push_front(io, c);
            else if (ad == AD_CHECK) check_push(io, c);
        }
        io_uring_cq_advance(&io->ring, n_seen);
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

/* ------------------------------------------------------------ open/close */

static ms_status check_params(const ms_io_params *p, ms_err *err) {
    if (p->kind != MS_IO_PREAD && p->kind != MS_IO_DIRECT && p->kind != MS_IO_URING)
        return ms_err_set(err, MS_E_USAGE, "io: unknown backend kind %d", (int)p->kind);
    if (p->queue_depth < 1 || p->queue_depth > MS_IO_MAX_QUEUE_DEPTH)
        return ms_err_set(err, MS_E_USAGE, "io: queue_depth must be 1..%d, got %d",
                          MS_IO_MAX_QUEUE_DEPTH, p->queue_depth);
    if (p->chunk_bytes < 1 || p->chunk_bytes > MS_IO_MAX_CHUNK_BYTES)
        return ms_err_set(err, MS_E_USAGE, "io: chunk_bytes must be 1..%lld, got %lld",
                          (long long)MS_IO_MAX_CHUNK_BYTES, (long long)p->chunk_bytes);
    if (p->max_retries < 0 || p->max_retries > 100)
        return ms_err_set(err, MS_E_USAGE, "io: max_retries must be 0..100, got %d",
                          p->max_retries);
    const ms_io_fault *f = &p->fault;
    if (f->kind < MS_FAULT_NONE || f->kind > MS_FAULT_NODIRECT)
        return ms_err_set(err, MS_E_USAGE, "io: unknown fault kind %d", (int)f->kind);
    if (f->kind != MS_FAULT_NONE && f->kind != MS_FAULT_NODIRECT && f->at_read < 0)
        return ms_err_set(err, MS_E_USAGE, "io: fault at_read must be >= 0, got %lld",
                          (long long)f->at_read);
    if (f->kind == MS_FAULT_CORRUPT &&
        (f->corrupt_begin < 0 || f->corrupt_end < f->corrupt_begin))
        return ms_err_set(err, MS_E_USAGE,
                          "io: corrupt window must satisfy 0 <= begin <= end, got [%lld, %lld)",
                          (long long)f->corrupt_begin, (long long)f->corrupt_end);
    return MS_OK;
}

static void free_batches(io_batch *b) {
    while (b) {
        io_batch *next = b->next;
        free(b->chunks);
        free(b->order);
        free(b);
        b = next;
    }
}

ms_status ms_io_open(const ms_io_params *p, ms_io **out, ms_err *err) {
    if (!out) return ms_err_set(err, MS_E_USAGE, "io: ms_io_open needs an output pointer");
    *out = NULL;
    ms_io_params def = ms_io_default_params();
    if (!p) p = &def;
    ms_status st = check_params(p, err);
    if (st) return st;

    ms_io *io = calloc(1, sizeof *io);
    if (!io) return ms_err_set(err, MS_E_NOMEM, "io: out of memory");
    io->p = *p;
    io->p.chunk_bytes = (p->chunk_bytes + MS_IO_ALIGN - 1) / MS_IO_ALIGN * MS_IO_ALIGN;
    io->next_ticket = 1;
    io->efd = -1;
    pthread_mutex_init(&io->mu, NULL);
    pthread_cond_init(&io->cv_work, NULL);
    pthread_cond_init(&io->cv_done, NULL);
    pthread_cond_init(&io->cv_check, NULL);

    int n_threads = p->kind == MS_IO_URING ? 1 : p->queue_depth;
    if (p->kind == MS_IO_URING) {
        io->efd = eventfd(0, EFD_CLOEXEC);
        if (io->efd < 0) {
            char eb[128];
            st = ms_err_set(err, MS_E_IO, "io: eventfd for io_uring failed: %s",
                            errtext(errno, eb, sizeof eb));
            goto fail;
        }
        int rc = io_uring_queue_init((unsigned)p->queue_depth + 1, &io->ring, 0);
        if (rc < 0) {
            char eb[128];
            st = ms_err_set(err, MS_E_IO,
                            "io_uring unavailable: io_uring_queue_init failed: %s (errno %d); "
                            "use the O_DIRECT or pread backend instead",
                            errtext(-rc, eb, sizeof eb), -rc);
            goto fail;
        }
        io->ring_ok = 1;
    }
    io->threads = calloc((size_t)n_threads, sizeof *io->threads);
    if (!io->threads) {
        st = ms_err_set(err, MS_E_NOMEM, "io: out of memory");
        goto fail;
    }
    /* the readers' stacks: 512 KiB instead of the default 8 MiB of address space
     * each (they only issue reads and run completions); with a reader per slot
     * of the queue, 16 default stacks alone would take 128 MiB of address space,
     * which an address-space limit (ulimit -v, tests/t_memlimit.sh) counts */
    pthread_attr_t ta;
    int ta_ok = pthread_attr_init(&ta) == 0;
    if (ta_ok && pthread_attr_setstacksize(&ta, (size_t)512 << 10) != 0) {
        pthread_attr_destroy(&ta);
        ta_ok = 0;
    }
    for (int i = 0; i < n_threads; i++) {
        int rc = pthread_create(&io->threads[i], ta_ok ? &ta : NULL,
                                p->kind == MS_IO_URING ? uring_thread : pread_worker, io);
        if (rc) {
            char eb[128];
            st = ms_err_set(err, MS_E_INTERNAL, "io: cannot start I/O thread %d: %s", i,
                            errtext(rc, eb, sizeof eb));
            if (ta_ok) pthread_attr_destroy(&ta);
            goto fail;
        }
        io->n_threads++;
    }
    if (ta_ok) pthread_attr_destroy(&ta);
    for (int i = 0; p->check && i < IO_CHECK_THREADS; i++) {
        int rc = pthread_create(&io->ck_threads[i], NULL, check_worker, io);
        if (rc) {
            char eb[128];
            st = ms_err_set(err, MS_E_INTERNAL, "io: cannot start check thread %d: %s", i,
                            errtext(rc, eb, sizeof eb));
            goto fail;
        }
        io->n_ck_threads++;
    }
    *out = io;
    return MS_OK;
fail:
    ms_io_close(io);
    return st;
}

void ms_io_close(ms_io *io) {
    if (!io) return;
    pthread_mutex_lock(&io->mu);
    io->stop = 1;
    io->paused = 0;         /* queued chunks are drained, not abandoned */
    pthread_cond_broadcast(&io->cv_work);
    pthread_mutex_unlock(&io->mu);
    if (io->ring_ok && io->n_threads) uring_wake(io);
    for (int i = 0; i < io->n_threads; i++) pthread_join(io->threads[i], NULL);
    /* the readers are gone, so nothing lands any more: drain the checks */
    pthread_mutex_lock(&io->mu);
    io->ck_stop = 1;
    pthread_cond_broadcast(&io->cv_check);
    pthread_mutex_unlock(&io->mu);
    for (int i = 0; i < io->n_ck_threads; i++) pthread_join(io->ck_threads[i], NULL);
    /* exiting the ring cancels the armed eventfd read before efd_buf is freed */
    if (io->ring_ok) io_uring_queue_exit(&io->ring);
    if (io->efd >= 0) close(io->efd);
    for (int i = 0; i < io->n_files; i++) {
        io_file *f = io->files[i];
        close(f->fd_buf);
        if (f->fd_direct >= 0) close(f->fd_direct);
        free(f->path);
        free(f);
    }
    free(io->files);
    free_batches(io->active);
    free_batches(io->spare);
    free(io->threads);
    pthread_cond_destroy(&io->cv_check);
    pthread_cond_destroy(&io->cv_done);
    pthread_cond_destroy(&io->cv_work);
    pthread_mutex_destroy(&io->mu);
    free(io);
}

/* ----------------------------------------------------------------- files */

ms_status ms_io_add_file(ms_io *io, const char *path, int *file_index, ms_err *err) {
    char eb[128];
    if (!io || !path || !file_index)
        return ms_err_set(err, MS_E_USAGE, "io: ms_io_add_file needs io, path and file_index");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ms_err_set(err, MS_E_IO, "cannot open %s: %s", path,
                          errtext(errno, eb, sizeof eb));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        ms_status st = ms_err_set(err, MS_E_IO, "cannot stat %s: %s", path,
                                  errtext(errno, eb, sizeof eb));
        close(fd);
        return st;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return ms_err_set(err, MS_E_IO, "%s is not a regular file", path);
    }
    int fd_direct = -1;
    if (io->p.kind == MS_IO_DIRECT || (io->p.kind == MS_IO_URING && !io->p.uring_buffered))
        fd_direct = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT); /* -1: buffered fallback */

    io_file *f = calloc(1, sizeof *f);
    char *copy = strdup(path);
    if (!f || !copy) {
        free(f);
        free(copy);
        close(fd);
        if (fd_direct >= 0) close(fd_direct);
        return ms_err_set(err, MS_E_NOMEM, "io: out of memory adding %s", path);
    }
    f->path = copy;
    f->fd_buf = fd;
    f->fd_direct = fd_direct;
    f->use_direct = fd_direct >= 0;
    f->size = (int64_t)sb.st_size;

    pthread_mutex_lock(&io->mu);
    if (io->n_files == io->cap_files) {
        int cap = io->cap_files ? io->cap_files * 2 : 16;
        io_file **nf = realloc(io->files, (size_t)cap * sizeof *nf);
        if (!nf) {
            pthread_mutex_unlock(&io->mu);
            close(fd);
            if (fd_direct >= 0) close(fd_direct);
            free(copy);
            free(f);
            return ms_err_set(err, MS_E_NOMEM, "io: out of memory adding %s", path);
        }
        io->files = nf;
        io->cap_files = cap;
    }
    *file_index = io->n_files;
    io->files[io->n_files++] = f;
    pthread_mutex_unlock(&io->mu);
    return MS_OK;
}

/* Lock helpers for the const accessors: the mutex is the one mutable part. */
static io_file *file_locked(const ms_io *io, int i) {
    return i >= 0 && i < io->n_files ? io->files[i] : NULL;
}

int64_t ms_io_file_size(const ms_io *io, int file_index) {
    ms_io *m = (ms_io *)io;
    pthread_mutex_lock(&m->mu);
    io_file *f = file_locked(io, file_index);
    int64_t size = f ? f->size : -1;
    pthread_mutex_unlock(&m->mu);
    return size;
}

int ms_io_file_is_direct(const ms_io *io, int file_index) {
    ms_io *m = (ms_io *)io;
    pthread_mutex_lock(&m->mu);
    io_file *f = file_locked(io, file_index);
    int d = f ? (f->fd_direct >= 0 && f->use_direct) : -1;
    pthread_mutex_unlock(&m->mu);
    return d;
}

const char *ms_io_file_path(const ms_io *io, int file_index) {
    ms_io *m = (ms_io *)io;
    pthread_mutex_lock(&m->mu);
    io_file *f = file_locked(io, file_index);
    const char *path = f ? f->path : NULL; /* stable: freed only by close */
    pthread_mutex_unlock(&m->mu);
    return path;
}

/* --------------------------------------------------------- submit / wait */

static int chunk_cmp(const void *a, const void *b) {
    const io_chunk *x = *(io_chunk *const *)a, *y = *(io_chunk *const *)b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return 0;
}

/* A recycled batch with room for n chunks, or a new one. Under io->mu. */
static io_batch *batch_get(ms_io *io, int64_t n) {
    io_batch **pp = &io->spare, **pick = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->cap_chunks >= n) { pick = pp; break; }
    if (!pick && io->spare) pick = &io->spare;
    io_batch *b;
    if (pick) {
        b = *pick;
        *pick = b->next;
    } else {
        b = calloc(1, sizeof *b);
        if (!b) return NULL;
    }
    if (b->cap_chunks < n) {
        io_chunk *nc = (uint64_t)n > SIZE_MAX / sizeof *nc ? NULL
                                                          : realloc(b->chunks, (size_t)n * sizeof *nc);
        if (nc) b->chunks = nc;
        io_chunk **no = !nc ? NULL : realloc(b->order, (size_t)n * sizeof *no);
        if (no) b->order = no;
        if (!nc || !no) {
            b->next = io->spare; /* keep it for later */
            io->spare = b;
            return NULL;
        }
        b->cap_chunks = n;
    }
    b->next = NULL;
    b->n_chunks = 0;
    b->n_left = 0;
    b->failed = 0;
    b->waiting = 0;
    b->check_failed = 0;
    ms_err_clear(&b->err);
    ms_err_clear(&b->check_err);
    return b;
}

ms_status ms_io_submit(ms_io *io, const ms_io_req *reqs, int n, uint64_t *ticket,
                       ms_err *err) {
    return ms_io_submit_prio(io, reqs, n, MS_IO_PRIO_DEMAND, ticket, err);
}

ms_status ms_io_submit_prio(ms_io *io, const ms_io_req *reqs, int n, int prio, uint64_t *ticket,
                            ms_err *err) {
    if (!io || !ticket || n < 0 || (n > 0 && !reqs))
        return ms_err_set(err, MS_E_USAGE, "io: ms_io_submit needs io, ticket and n >= 0 requests");
    if (prio < 0 || prio >= MS_IO_N_PRIO)
        return ms_err_set(err, MS_E_USAGE, "io: priority must be 0..%d, got %d", MS_IO_N_PRIO - 1,
                          prio);
    const int64_t cb = io->p.chunk_bytes;
    pthread_mutex_lock(&io->mu);
    ms_status st = MS_OK;
    int64_t n_chunks = 0;
    for (int i = 0; i < n && !st; i++) {
        const ms_io_req *r = &reqs[i];
        io_file *f = file_locked(io, r->file);
        if (!f)
            st = ms_err_set(err, MS_E_USAGE, "io: request %d names unknown file %d", i, r->file);
        else if (r->offset < 0 || r->n_bytes < 0)
            st = ms_err_set(err, MS_E_USAGE, "io: request %d on %s has offset %lld, length %lld",
                            i, f->path, (long long)r->offset, (long long)r->n_bytes);
        else if (r->n_bytes > f->size || r->offset > f->size - r->n_bytes)
            st = ms_err_set(err, MS_E_IO,
                            "read past end of file: %s has %lld bytes, request %d wants "
                            "offset %lld + %lld bytes",
                            f->path, (long long)f->size, i, (long long)r->offset,
                            (long long)r->n_bytes);
        else if (r->check && !io->p.check)
            st = ms_err_set(err, MS_E_USAGE, "io: request %d (%s offset %lld) asks for a check, "
                            "but no check hook was given at open", i, f->path, (long long)r->offset);
        else if (r->n_bytes > 0 && (!r->buf || (uintptr_t)r->buf % MS_IO_ALIGN))
            st = ms_err_set(err, MS_E_USAGE,
                            "io: request %d (%s offset %lld) has a buffer not aligned to %d",
                            i, f->path, (long long)r->offset, MS_IO_ALIGN);
        else if (r->n_bytes > 0) {
            if (r->offset + r->n_bytes > INT64_MAX - MS_IO_ALIGN)
                st = ms_err_set(err, MS_E_USAGE, "io: request %d range overflows", i);
            else
                n_chunks += (ms_io_span(r->offset, r->n_bytes) + cb - 1) / cb;
        }
    }
    io_batch *b = NULL;
    if (!st && !(b = batch_get(io, n_chunks)))
        st = ms_err_set(err, MS_E_NOMEM, "io: out of memory queueing %lld chunks",
                        (long long)n_chunks);
    if (st) {
        pthread_mutex_unlock(&io->mu);
        return st;
    }
    for (int i = 0; i < n; i++) {
        const ms_io_req *r = &reqs[i];
        if (r->n_bytes == 0) continue;
        int64_t abeg = r->offset - ms_io_skew(r->offset);
        int64_t aend = abeg + ms_io_span(r->offset, r->n_bytes);
        for (int64_t s = abeg; s < aend; s += cb) {
            io_chunk *c = &b->chunks[b->n_chunks++];
            memset(c, 0, sizeof *c);
            c->b = b;
            c->f = io->files[r->file];
            c->file = r->file;
            c->base = r->buf;
            c->abeg = abeg;
            c->dbeg = r->offset;
            c->dend = r->offset + r->n_bytes;
            c->start = c->off = s;
            c->end = aend - s > cb ? s + cb : aend;
            c->need = c->end < c->dend ? c->end : c->dend;
            c->req_index = io->next_req_index + i;
            c->req_pos = i;
            c->first = s == abeg;
            c->last = c->end == aend;
            c->check = r->check != 0;
        }
    }
    MS_ASSERT(b->n_chunks == n_chunks);
    for (int64_t k = 0; k < b->n_chunks; k++) b->order[k] = &b->chunks[k];
    if (b->n_chunks > 1) qsort(b->order, (size_t)b->n_chunks, sizeof *b->order, chunk_cmp);
    b->n_left = b->n_chunks;
    b->prio = prio;
    b->ticket = io->next_ticket++;
    b->next = io->active;
    io->active = b;
    io->next_req_index += n;
    io->st.requests += n;
    for (int64_t k = 0; k < b->n_chunks; k++) q_push_back(io, b->order[k]);
    *ticket = b->ticket;
    if (b->n_chunks && io->p.kind != MS_IO_URING) pthread_cond_broadcast(&io->cv_work);
    pthread_mutex_unlock(&io->mu);
    if (b->n_chunks && io->p.kind == MS_IO_URING) uring_wake(io);
    return MS_OK;
}

/* The active batch of `ticket`, or NULL. Under io->mu. */
static io_batch *batch_find(ms_io *io, uint64_t ticket) {
    io_batch *b = io->active;
    while (b && b->ticket != ticket) b = b->next;
    return b;
}

/* Move b's queued chunks to the DEMAND queue's tail, keeping their order. */
static void promote_locked(ms_io *io, io_batch *b) {
    if (b->prio == MS_IO_PRIO_DEMAND) return;
    io_chunk *l;
    q_take_batch(io, b, &l);
    b->prio = MS_IO_PRIO_DEMAND;
    while (l) {
        io_chunk *next = l->next;
        q_push_back(io, l);
        l = next;
    }
}

void ms_io_pause(ms_io *io, int paused) {
    pthread_mutex_lock(&io->mu);
    io->paused = paused != 0;
    if (!io->paused && io->p.kind != MS_IO_URING) pthread_cond_broadcast(&io->cv_work);
    pthread_mutex_unlock(&io->mu);
    if (!paused && io->p.kind == MS_IO_URING) uring_wake(io);
}

int ms_io_poll(ms_io *io, uint64_t ticket) {
    pthread_mutex_lock(&io->mu);
    io_batch *b = batch_find(io, ticket);
    int r = !b || b->waiting ? -1 : b->n_left == 0;
    pthread_mutex_unlock(&io->mu);
    return r;
}

void ms_io_promote(ms_io *io, uint64_t ticket) {
    pthread_mutex_lock(&io->mu);
    io_batch *b = batch_find(io, ticket);
    if (b && !b->waiting) promote_locked(io, b);
    pthread_mutex_unlock(&io->mu);
}

int64_t ms_io_cancel(ms_io *io, uint64_t ticket) {
    pthread_mutex_lock(&io->mu);
    io_batch *b = batch_find(io, ticket);
    if (!b || b->waiting) {
        pthread_mutex_unlock(&io->mu);
        return -1;
    }
    io_chunk *l;
    int64_t dropped = 0;
    if (q_take_batch(io, b, &l) > 0) {
        b->failed = 1;
        ms_err_set(&b->err, MS_E_IO, "read cancelled (ticket %llu)", (unsigned long long)ticket);
    }
    for (; l; l = l->next) {
        /* the data bytes it would have read: [off, need) minus the skew */
        const int64_t from = l->off > l->dbeg ? l->off : l->dbeg;
        if (l->need > from) dropped += l->need - from;
        io->st.cancelled_chunks++;
        chunk_finish(io, l);
    }
    io->st.cancelled_bytes += dropped;
    pthread_mutex_unlock(&io->mu);
    return dropped;
}

ms_status ms_io_wait_checked(ms_io *io, uint64_t ticket, ms_err *check, ms_err *err) {
    if (check) ms_err_clear(check);
    if (!io) return ms_err_set(err, MS_E_USAGE, "io: ms_io_wait needs io");
    int64_t t0 = ms_now_ns();
    pthread_mutex_lock(&io->mu);
    io_batch **pp = &io->active;
    while (*pp && (*pp)->ticket != ticket) pp = &(*pp)->next;
    if (!*pp || (*pp)->waiting) {
        pthread_mutex_unlock(&io->mu);
        return ms_err_set(err, MS_E_USAGE, "io: ticket %llu is unknown, already waited or "
                          "being waited", (unsigned long long)ticket);
    }
    io_batch *b = *pp;
    b->waiting = 1;
    promote_locked(io, b);   /* someone waits for it now: no other read goes first */
    while (b->n_left > 0) pthread_cond_wait(&io->cv_done, &io->mu);
    /* unlink: the list may have changed while we slept */
    for (pp = &io->active; *pp != b; pp = &(*pp)->next) MS_ASSERT(*pp != NULL);
    *pp = b->next;
    ms_status st = b->err.status;
    if (st) ms_err_set(err, st, "%s", b->err.msg);
    else if (b->check_failed && check) *check = b->check_err;
    else if (b->check_failed) st = ms_err_set(err, b->check_err.status, "%s", b->check_err.msg);
    b->next = io->spare;
    io->spare = b;
    io->st.wait_ns += ms_now_ns() - t0;
    pthread_mutex_unlock(&io->mu);
    return st;
}

ms_status ms_io_wait(ms_io *io, uint64_t ticket, ms_err *err) {
    return ms_io_wait_checked(io, ticket, NULL, err);
}

ms_status ms_io_read(ms_io *io, const ms_io_req *reqs, int n, ms_err *err) {
    uint64_t ticket;
    ms_status st = ms_io_submit(io, reqs, n, &ticket, err);
    if (st) return st;
    return ms_io_wait(io, ticket, err);
}

void ms_io_get_stats(const ms_io *io, ms_io_stats *st) {
    ms_io *m = (ms_io *)io;
    pthread_mutex_lock(&m->mu);
    reading_add(m, 0);      /* count the open stretch up to now */
    *st = io->st;
    pthread_mutex_unlock(&m->mu);
}
