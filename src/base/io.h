/* base/io.h - the I/O layer: every weight byte the engine reads enters RAM here.
 *
 * Owns: the file descriptors of the weight files, the reader threads (pread
 *   backends) or the io_uring ring and its completion thread, the request
 *   queue, retry / short-read completion, and the fault-injection hook.
 *
 * Idea: a caller describes reads as (file, offset, n_bytes, buf) requests and
 *   submits them as one batch; the layer splits each request into chunks of at
 *   most chunk_bytes, issues the chunks of the batch in (file, offset) order
 *   with up to queue_depth in flight, and hands back a ticket. ms_io_wait(ticket)
 *   blocks until every chunk of the batch is complete (or failed). Every
 *   backend reads the 4 KiB-aligned superset of the requested range, so the
 *   data always lands at the same place whatever the backend:
 *
 *     file:   ... |  page  |  page  | ... |  page  | ...
 *                 ^align_down(offset)                ^align_up(offset + n)
 *                       ^offset             ^offset + n
 *     buf:        [ skew ][ the n requested bytes ][pad]
 *                 ^buf    ^buf + ms_io_skew(offset)
 *                 <------- ms_io_span(offset, n) ------->
 *
 *   Bytes in [buf, buf + skew) and in the pad are overwritten with the file's
 *   neighbouring bytes (or left as they were past end of file); only the
 *   window [buf + skew, buf + skew + n) is the contract.
 *
 * Backends:
 *   MS_IO_PREAD   buffered pread(2) from queue_depth worker threads.
 *   MS_IO_DIRECT  O_DIRECT pread(2) from queue_depth worker threads. Per file it
 *                 falls back to buffered reads when open(O_DIRECT) fails or the
 *                 first direct read of the file fails with EINVAL (tmpfs, some
 *                 network and FUSE filesystems); ms_io_file_is_direct() tells.
 *   MS_IO_URING   one io_uring (liburing) ring with queue_depth read SQEs in
 *                 flight, driven by one completion thread that also submits
 *                 (so a batch progresses while the caller computes); files are
 *                 opened O_DIRECT with the same per-file fallback unless
 *                 uring_buffered is set.
 *   Why O_DIRECT and big chunks: the disk takes a bounded number of segments
 *   per request, so direct reads into 2 MiB huge-page buffers
 *   (base/bufalloc.h) outrun reads into 4 KiB pages (docs/perf/history.md,
 *   "Device in run 3"). With the default chunk_bytes of 2 MiB and a 2 MiB-aligned
 *   buffer, each chunk lands in exactly one huge page.
 *
 * Priorities: a batch is submitted with a priority (ms_io_prio): DEMAND (a
 *   thread is or soon will be blocked on it), AHEAD (read-ahead of data surely
 *   needed later), SPECULATIVE (a prediction that may be wrong). Each
 *   priority has one FIFO of chunks; a free reader takes the head of the most
 *   urgent non-empty one, so a demand read never waits behind queued
 *   read-ahead or guesses, only behind the (at most queue_depth) chunks
 *   already in flight. Waiting on a ticket promotes its queued chunks to
 *   DEMAND (no priority inversion); ms_io_promote does so without waiting. A
 *   guess found wrong is cancelled (ms_io_cancel): its queued chunks are
 *   dropped without a read, so it costs the disk only what was in flight.
 *
 * Failures: a short read has its remainder resubmitted (counted in
 *   short_reads); EINTR / EAGAIN are resubmitted; any other error is retried
 *   up to max_retries times (counted in retries); a chunk that still fails,
 *   or meets end of file before its data, fails its batch with MS_E_IO and a
 *   message naming the file, the request's offset and length, and the cause.
 *   Once a batch has failed its unissued chunks are dropped; ms_io_wait still
 *   returns only when none of its chunks is in flight. The layer never returns
 *   zeros or stale bytes as success: the caller (the store) turns MS_E_IO on an
 *   expert into an unsound run.
 *
 * Fault injection (tests): params.fault names one request by its global index
 *   (0-based, counting every request of every accepted batch since open, in
 *   the caller's array order) and applies a fault to it on top of whichever
 *   backend runs: EIO / TRANSIENT / SHORT act on the first chunk of the request
 *   (injected EIO attempts issue no I/O); CORRUPT flips bytes after a
 *   successful read; NODIRECT applies to every direct read of every request.
 *   A request with n_bytes == 0 issues no read, so faults on
 *   it have no effect; SHORT needs at least 2 bytes from the chunk's aligned
 *   start to the end of its data to be able to shorten anything.
 *
 * Checking as data lands (params.check, requests with check = 1): the caller
 *   (the store, with the checksum sidecar) registers one hook at open; for a
 *   request that asks for it, every time one of its chunks lands the hook runs
 *   on one of the layer's checker threads (2, started at open when a hook is
 *   given; the reading threads go on reading meanwhile), unlocked, before the
 *   chunk counts as complete, so by the time ms_io_wait returns every byte of
 *   the request has been checked (or a mismatch is known). A checked unit (a 1 MiB
 *   checksum block) may straddle chunks, which land in any order, so the hook
 *   is told two ranges of the request's data window:
 *
 *     request data:  [ chunk 0 ][ chunk 1 ][ chunk 2 ][ chunk 3 ]   landed: 0, 2, 1
 *     units:         [  u0  ][  u1  ][  u2  ][  u3  ][  u4  ]
 *     chunk 1 lands: new = chunk 1's data, run = chunks 0..2 (the landed
 *                    stretch around it) -> check u1, u2, u3: the units that lie
 *                    inside run and meet new
 *
 *   Rule for the hook: check every unit inside [run_begin, run_end) that meets
 *   [new_begin, new_end). Landing and taking the run happen in one critical
 *   section, so each unit is checked exactly once: by the chunk whose landing
 *   completed it. The first failed check of a batch (in request order, then
 *   file order) is kept; it does not stop the batch's other reads, and
 *   ms_io_wait_checked hands it back apart from I/O errors, so the caller can
 *   re-read. A hook may only read the run's bytes; it must not call the layer.
 *   Time and bytes checked are counted (check_ns, check_bytes).
 *
 * Invariants:
 *   1. a ticket is complete iff none of its chunks is queued or in flight;
 *   2. ms_io_wait consumes its ticket; a ticket is waited at most once;
 *   3. the first error of a batch is the one reported (ms_err semantics);
 *   4. a chunk's read range is MS_IO_ALIGN-aligned at both ends whenever it is
 *      read with O_DIRECT.
 *
 * Threading: every function may be called from several threads; one mutex
 *   guards the queue, the tickets, the file table and the statistics (reads
 *   themselves run unlocked). Files may be added while reads are in flight.
 *
 * Does not: cache, know what a checksum is (the hook does), decide what to
 *   read, or allocate buffers for the caller (see base/bufalloc.h).
 *   Steady-state submit/wait allocates nothing: finished batches are
 *   recycled with their chunk arrays.
 */
#ifndef MS_BASE_IO_H
#define MS_BASE_IO_H

#include "base/err.h"

#include <stdint.h>

#define MS_IO_ALIGN 4096
#define MS_IO_MAX_QUEUE_DEPTH 1024
#define MS_IO_MAX_CHUNK_BYTES ((int64_t)1 << 30)

typedef enum ms_io_kind {
    MS_IO_PREAD = 0, /* buffered pread from worker threads */
    MS_IO_DIRECT,    /* O_DIRECT pread from worker threads, buffered fallback per file */
    MS_IO_URING      /* io_uring, O_DIRECT unless uring_buffered, same fallback */
} ms_io_kind;

typedef enum ms_fault_kind {
    MS_FAULT_NONE = 0,
    MS_FAULT_EIO,       /* every attempt of that request fails with EIO */
    MS_FAULT_TRANSIENT, /* the first attempt fails with EIO, the retry succeeds */
    MS_FAULT_SHORT,     /* the first attempt returns fewer bytes; the layer completes it */
    MS_FAULT_CORRUPT,   /* the read succeeds but data bytes [corrupt_begin, corrupt_end)
                           of the request (relative to its offset, clipped to n_bytes)
                           are XOR 0xFF: silent corruption only the caller can detect */
    MS_FAULT_NODIRECT   /* every O_DIRECT read fails with EINVAL, as on a filesystem
                           that accepts open(O_DIRECT) but refuses the reads; exercises
                           the per-file buffered fallback. at_read is ignored */
} ms_fault_kind;

typedef struct ms_io_fault {
    ms_fault_kind kind;
    int64_t at_read; /* 0-based global index of the request (see header comment) */
    int64_t corrupt_begin, corrupt_end;
} ms_io_fault;

/* Check the bytes of one request as a chunk of it lands (see "Checking as data
 * lands"): `run` points at file offset run_begin of file `file`, bytes
 * [run_begin, run_end) are in memory and stay put until the ticket is waited;
 * check every unit inside the run that meets [new_begin, new_end). Return
 * MS_OK and the bytes checked in *n_checked, or a negative status with the
 * message in err. Runs on I/O threads, several at once: must be thread-safe
 * and must not call into the layer. */
typedef ms_status (*ms_io_check_fn)(void *user, int file, int64_t run_begin, int64_t run_end,
                                    int64_t new_begin, int64_t new_end, const uint8_t *run,
                                    int64_t *n_checked, ms_err *err);

typedef struct ms_io_params {
    ms_io_kind kind;
    int queue_depth;     /* chunks in flight: SQEs (uring) or worker threads (pread),
                            1 .. MS_IO_MAX_QUEUE_DEPTH */
    int64_t chunk_bytes; /* requests are split into chunks of at most this many bytes
                            (rounded up to MS_IO_ALIGN; default 2 MiB), so several are
                            in flight; MS_IO_ALIGN .. MS_IO_MAX_CHUNK_BYTES */
    int max_retries;     /* extra attempts after a failed read, 0..100; default 3 */
    int uring_buffered;  /* MS_IO_URING only: 1 = read through the page cache */
    ms_io_fault fault;   /* MS_FAULT_NONE outside tests */
    ms_io_check_fn check; /* NULL: no request may ask for a check */
    void *check_user;
    /* tests: called under the layer's lock each time a chunk is taken for a
       read attempt, with its file and read offset (issue order); NULL = none */
    void (*on_issue)(void *user, int file, int64_t offset);
    void *on_issue_user;
} ms_io_params;

/* Defaults: MS_IO_DIRECT, queue_depth 4, chunk_bytes 2 MiB, max_retries 3,
 * uring_buffered 0, no fault. Pure. */
ms_io_params ms_io_default_params(void);

/* "pread", "direct", "uring" ("?" for an unknown value). Pure. */
const char *ms_io_kind_name(ms_io_kind kind);

typedef struct ms_io ms_io;

/* Validate *p, start the backend's threads (and ring; and the checker threads
 * when p->check is set) and return the layer in
 * *out. Errors: MS_E_USAGE for a parameter out of range; MS_E_IO when io_uring
 * is unavailable (seccomp, ENOSYS, EPERM, memlock...) - the message says
 * "io_uring unavailable", the errno text, and that the caller should fall back
 * to the pread / O_DIRECT backend; MS_E_NOMEM / MS_E_INTERNAL when memory or a
 * thread cannot be had. On failure *out is NULL and nothing is left running.
 * Allocates; the caller owns the result and frees it with ms_io_close. */
ms_status ms_io_open(const ms_io_params *p, ms_io **out, ms_err *err);

/* Wait until every queued chunk has finished (outstanding tickets are drained,
 * not cancelled), stop the threads, close the files and free everything. Call
 * once, after the last submit; tickets not yet waited are discarded. NULL is a
 * no-op. */
void ms_io_close(ms_io *io);

/* Open `path` (a regular file) for reading and give it the next file index
 * (0, 1, 2, ... in call order) in *file_index. Opens a buffered descriptor and,
 * for the direct / uring backends, an O_DIRECT one (any failure of the latter
 * means buffered reads for that file, not an error). The size is taken once,
 * here: weight files must not change while open. Errors: MS_E_IO (cannot open,
 * not a regular file), MS_E_NOMEM. Thread-safe. Allocates. */
ms_status ms_io_add_file(ms_io *io, const char *path, int *file_index, ms_err *err);

/* Size in bytes of file `file_index` as seen by ms_io_add_file, or -1 for an
 * unknown index. Thread-safe. */
int64_t ms_io_file_size(const ms_io *io, int file_index);

/* 1 if reads of file `file_index` currently go through O_DIRECT, 0 if they are
 * buffered (backend, fallback at open, or fallback at the first read), -1 for
 * an unknown index. Thread-safe. */
int ms_io_file_is_direct(const ms_io *io, int file_index);

/* Path given to ms_io_add_file (owned by io), or NULL for an unknown index. */
const char *ms_io_file_path(const ms_io *io, int file_index);

/* Priorities (see "Priorities"): a batch's chunks wait in its priority's
 * FIFO; a free reader takes the head of the most urgent non-empty FIFO. */
typedef enum ms_io_prio {
    MS_IO_PRIO_DEMAND = 0,      /* someone is or will soon be blocked on it */
    MS_IO_PRIO_AHEAD = 1,       /* read-ahead of data surely needed later */
    MS_IO_PRIO_SPECULATIVE = 2, /* a guess (expert prediction): may turn out unneeded */
    MS_IO_N_PRIO = 3
} ms_io_prio;

typedef struct ms_io_req {
    int file;        /* index from ms_io_add_file */
    int64_t offset;  /* byte offset of the data in the file, >= 0 */
    int64_t n_bytes; /* >= 0; offset + n_bytes <= file size */
    uint8_t *buf;    /* MS_IO_ALIGN-aligned, capacity >= ms_io_span(offset, n_bytes);
                        the data lands at buf + ms_io_skew(offset) */
    int check;       /* 1: run params.check on the data as it lands */
} ms_io_req;

/* Bytes of buffer a request needs: align_up(offset + n) - align_down(offset)
 * (0 when n == 0). offset, n >= 0 and offset + n <= INT64_MAX - MS_IO_ALIGN. */
static inline int64_t ms_io_span(int64_t offset, int64_t n) {
    if (n <= 0) return 0;
    int64_t begin = offset - offset % MS_IO_ALIGN;
    int64_t end = (offset + n + MS_IO_ALIGN - 1) / MS_IO_ALIGN * MS_IO_ALIGN;
    return end - begin;
}

/* Where a request's data starts inside its buffer: offset % MS_IO_ALIGN. */
static inline int64_t ms_io_skew(int64_t offset) { return offset % MS_IO_ALIGN; }

/* Queue the n requests of reqs[] as one batch and return at once with its
 * ticket (> 0) in *ticket. reqs[] may be reused on return; the buffers belong
 * to the layer until the ticket is waited and must not overlap each other.
 * Chunks are issued in (file, offset) order. n == 0 is a valid, empty batch.
 * Errors found here reject the whole batch (nothing is queued, no ticket, the
 * requests do not count for fault injection): MS_E_USAGE (unknown file,
 * negative offset or length, unaligned buffer, reqs/ticket NULL, check asked
 * for without a hook), MS_E_IO (a
 * request reaching past the end of its file: reads past EOF are errors, never
 * zeros), MS_E_NOMEM. Errors of the reads themselves are reported by
 * ms_io_wait. Thread-safe. Allocates only when the batch is larger than any
 * recycled one. */
ms_status ms_io_submit(ms_io *io, const ms_io_req *reqs, int n, uint64_t *ticket,
                       ms_err *err);

/* ms_io_submit with a priority (ms_io_prio; ms_io_submit is MS_IO_PRIO_DEMAND).
 * MS_E_USAGE for a priority out of range. */
ms_status ms_io_submit_prio(ms_io *io, const ms_io_req *reqs, int n, int prio, uint64_t *ticket,
                            ms_err *err);

/* 1 when every chunk of `ticket` is complete (a wait would not block), 0 when
 * some are queued or in flight, -1 for a ticket that is unknown, already waited
 * or being waited. Does not consume the ticket. Thread-safe. */
int ms_io_poll(ms_io *io, uint64_t ticket);

/* Move the chunks of `ticket` still queued to the tail of the DEMAND FIFO (in
 * their order); ms_io_wait does this itself. No-op for an unknown ticket.
 * Thread-safe. */
void ms_io_promote(ms_io *io, uint64_t ticket);

/* Drop the chunks of `ticket` still queued (none of their bytes is read);
 * chunks in flight finish as they would. Returns the data bytes dropped (0:
 * nothing was queued, the batch completes as if never cancelled), or -1 for an
 * unknown / waited ticket. When anything was dropped the batch has failed: its
 * wait returns MS_E_IO "read cancelled", its buffers hold partial data, and it
 * must still be waited (ms_io_poll tells when that no longer blocks). Counted
 * in cancelled_chunks / cancelled_bytes. Thread-safe. */
int64_t ms_io_cancel(ms_io *io, uint64_t ticket);

/* At most `depth` reads in flight from now on (clamped to 1 .. queue_depth;
 * the reads already in flight finish): the queue's order then decides what
 * lands first, since reads in flight together land together. The store
 * lowers it when only experts stream (store/store.c, expert_depth).
 * Thread-safe. */
void ms_io_set_depth(ms_io *io, int depth);
/* The current limit (queue_depth unless ms_io_set_depth lowered it). */
int ms_io_depth(const ms_io *io);

/* 1: readers take no new chunk (those in flight finish); 0: resume. Lets a
 * test queue several batches and then watch the order they are read in.
 * Thread-safe. */
void ms_io_pause(ms_io *io, int paused);

/* Block until every request of `ticket` is complete, then consume the ticket.
 * Returns MS_OK when every byte of every request is in its buffer, else the
 * batch's first error (MS_E_IO, message naming the file and offset); in both
 * cases nothing of the batch is still in flight. MS_E_USAGE for a ticket that
 * is unknown, already waited, or being waited by another thread. Thread-safe.
 * Time spent here is added to the wait_ns statistic. */
ms_status ms_io_wait(ms_io *io, uint64_t ticket, ms_err *err);

/* ms_io_wait that hands a failed check back apart: returns the batch's I/O
 * status as ms_io_wait does; when every read succeeded, *check receives the
 * first failed check of the batch (status MS_OK when every check passed or
 * none was asked for). check is cleared first; NULL makes a failed check the
 * returned status, which is what ms_io_wait does. */
ms_status ms_io_wait_checked(ms_io *io, uint64_t ticket, ms_err *check, ms_err *err);

/* ms_io_submit + ms_io_wait. */
ms_status ms_io_read(ms_io *io, const ms_io_req *reqs, int n, ms_err *err);

typedef struct ms_io_stats {
    int64_t bytes_read;   /* bytes transferred by successful reads (incl. alignment) */
    int64_t reads_issued; /* pread syscalls or read SQEs (injected failures excluded) */
    int64_t requests;     /* requests of accepted batches */
    int64_t retries;      /* reissues after a failed attempt */
    int64_t short_reads;  /* reissues of a remainder after a short read */
    int64_t wait_ns;      /* time callers spent in ms_io_wait */
    int64_t checks;       /* calls of the check hook */
    int64_t check_ns;     /* time I/O threads spent in the check hook */
    int64_t check_bytes;  /* bytes the hook reported checked and matching */
    int64_t cancelled_chunks, cancelled_bytes;  /* dropped by ms_io_cancel (data bytes) */
    int64_t busy_ns;      /* wall time with at least one read in flight (a pread call
                             running, an SQE submitted and not completed): the device
                             busy as far as the engine can see it */
    int64_t depth_ns;     /* the reads in flight integrated over time: depth_ns / busy_ns
                             is the mean number in flight while busy (<= queue_depth) */
    int64_t reading_peak; /* the most reads in flight at once (<= the depth at the time) */
} ms_io_stats;

/* Snapshot of the counters since open. Thread-safe. */
void ms_io_get_stats(const ms_io *io, ms_io_stats *st);

#endif
