/* base/io_int.h - the I/O layer's private structures, shared by the files
 * of the layer (base/io.h is its contract). Nothing outside src/base/io*.c
 * includes it.
 *
 * Owns: struct ms_io, the batch and chunk types, and the functions one file
 *   of the layer calls in another:
 *
 *   io.c          parameters, files, open / close, submit / wait / poll /
 *                 promote / cancel, statistics
 *   io_chunk.c    a chunk's life shared by every backend: the priority
 *                 queues, each read attempt (descriptor, injected faults,
 *                 retry / short read / O_DIRECT fallback), landing and the
 *                 checker threads, the device's busy time
 *   io_backend.c  the backends that move chunks through the kernel: pread
 *                 workers and the io_uring thread
 *
 * Locking: every field of struct ms_io and of its batches and chunks is
 *   guarded by io->mu, except what a chunk's owner (one reader, the ring, a
 *   checker) touches while it runs unlocked: the read itself and the hook.
 *   Functions below marked "under io->mu" must be called with it held.
 */
#ifndef MS_BASE_IO_INT_H
#define MS_BASE_IO_INT_H

#include "base/io.h"

#include <liburing.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Threads that run the check hook (started only with params.check): one
 * core hashes several times faster than the disk delivers, so two keep up
 * with a fast disk and leave the rest of the cores to the compute threads
 * (docs/perf/history.md, "checksums hashed as data lands"). */
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
    int depth;              /* reads in flight at most (ms_io_set_depth; <= queue_depth) */
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

/* GNU strerror_r (_GNU_SOURCE): thread-safe, returns the text pointer. */
static inline const char *io_errtext(int e, char *buf, size_t n) { return strerror_r(e, buf, n); }

/* ---------------------------------------------------------- io_chunk.c */

/* The priority FIFOs (one per ms_io_prio; the backends take the head of the
 * most urgent non-empty one). Under io->mu. */
void io_q_push_back(ms_io *io, io_chunk *c);
void io_q_push_front(ms_io *io, io_chunk *c);
io_chunk *io_q_pop(ms_io *io);
/* Take the queued chunks of batch b out of their queue, in queue order, onto
 * the list *out (linked through next). Returns how many. Under io->mu. */
int64_t io_q_take_batch(ms_io *io, const io_batch *b, io_chunk **out);

/* Mark c DONE. Under io->mu. */
void io_chunk_finish(ms_io *io, io_chunk *c);
/* Decide how the next attempt of c is made (descriptor, injected fault).
 * Under io->mu. */
void io_attempt_plan(ms_io *io, io_chunk *c);
enum { AD_DONE = 0, AD_REISSUE = 1, AD_CHECK = 2 };
/* Account the result `res` (bytes read, or -errno) of the attempt planned for
 * c. Returns AD_REISSUE if c must be reissued, AD_DONE if it is DONE (finished
 * here), AD_CHECK if it landed and the caller must io_check_push it.
 * Under io->mu. */
int io_attempt_done(ms_io *io, io_chunk *c, int64_t res);
/* Queue landed chunk c for a checker thread. Under io->mu. */
void io_check_push(ms_io *io, io_chunk *c);
/* A checker thread's body (arg: the ms_io). */
void *io_check_worker(void *arg);
/* Account the time since the count of reads in flight last changed, then
 * change it by delta (+1 a read goes to the device, -1 it came back).
 * Under io->mu. */
void io_reading_add(ms_io *io, int delta);

/* -------------------------------------------------------- io_backend.c */

/* A pread worker's body (arg: the ms_io): MS_IO_PREAD and MS_IO_DIRECT. */
void *io_pread_worker(void *arg);
/* MS_IO_URING: set up the eventfd and the ring (io->efd, io->ring, ring_ok);
 * MS_E_IO "io_uring unavailable ..." when the kernel refuses. */
ms_status io_ring_open(ms_io *io, ms_err *err);
/* Exit the ring and close the eventfd (after the thread is joined); a
 * no-op for the other backends. */
void io_ring_close(ms_io *io);
/* The io_uring thread's body (arg: the ms_io). */
void *io_ring_thread(void *arg);
/* Wake the io_uring thread (new chunks, resume, close). Not under io->mu. */
void io_ring_wake(ms_io *io);

#endif
