/* base/io.c - the I/O layer's front: parameters, files, open / close, and the
 * batches callers submit, wait for, poll, promote and cancel. See io.h for
 * the contract; base/io_int.h lists the layer's other files (io_chunk.c: a
 * chunk's life and fault injection; io_backend.c: pread workers, io_uring).
 *
 * Structure: a submitted batch becomes an array of chunks (one aligned piece
 *   of at most chunk_bytes of one request), sorted by (file, offset) and
 *   appended to its priority's FIFO. The backends move chunks from the
 *   queues through the kernel and back; a chunk that is DONE decrements its
 *   batch's n_left, and a wait returns when that reaches 0:
 *
 *     submit --> [queues] --> backends --> io_attempt_done --> DONE
 *                                  |              \--landed--> checkers --> DONE
 *                                  +<-- reissue ---+
 *                                      DONE --> batch.n_left-- --> wait
 *
 *   A chunk of a request that asks for a check lands (landed = 1, its run
 *   taken) in io_attempt_done and goes to the check queue; one of
 *   IO_CHECK_THREADS checker threads runs the hook on it unlocked, then it
 *   is DONE. The reading threads never hash, so the reads in flight stay at
 *   queue_depth while earlier chunks are hashed.
 *   Chunks are kept in request order in the batch (a request's chunks are
 *   neighbours, which the run walks); `order` is the sorted issue order.
 *
 * Chunk lifecycle: QUEUED -> (planned, in flight) -> QUEUED again on reissue,
 *   or DONE (success, failure, or cancelled because its batch already failed).
 *   A chunk is owned by exactly one of: the queue, one worker, the ring.
 * Batches: finished ones are kept on a spare list with their chunk arrays
 *   and reused, so steady-state submit / wait allocates nothing.
 */
#include "base/io_int.h"

#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- params */

ms_io_params ms_io_default_params(void) {
    ms_io_params p;
    memset(&p, 0, sizeof p);
    p.kind = MS_IO_DIRECT;
    /* 32: on a fast virtio disk more reads in flight kept decoding faster up
     * to 32 (not beyond), and at 16 the engine already kept the queue full, so
     * the disk, not the engine, set the pace (docs/perf/history.md, "32 reads
     * in flight by default"). A read in flight holds no memory of its own (it
     * lands in its destination); the pread backend runs a worker thread per
     * slot. */
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
    io->depth = p->queue_depth;
    io->efd = -1;
    pthread_mutex_init(&io->mu, NULL);
    pthread_cond_init(&io->cv_work, NULL);
    pthread_cond_init(&io->cv_done, NULL);
    pthread_cond_init(&io->cv_check, NULL);

    int n_threads = p->kind == MS_IO_URING ? 1 : p->queue_depth;
    if (p->kind == MS_IO_URING && (st = io_ring_open(io, err)) != MS_OK) goto fail;
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
                                p->kind == MS_IO_URING ? io_ring_thread : io_pread_worker, io);
        if (rc) {
            char eb[128];
            st = ms_err_set(err, MS_E_INTERNAL, "io: cannot start I/O thread %d: %s", i,
                            io_errtext(rc, eb, sizeof eb));
            if (ta_ok) pthread_attr_destroy(&ta);
            goto fail;
        }
        io->n_threads++;
    }
    if (ta_ok) pthread_attr_destroy(&ta);
    for (int i = 0; p->check && i < IO_CHECK_THREADS; i++) {
        int rc = pthread_create(&io->ck_threads[i], NULL, io_check_worker, io);
        if (rc) {
            char eb[128];
            st = ms_err_set(err, MS_E_INTERNAL, "io: cannot start check thread %d: %s", i,
                            io_errtext(rc, eb, sizeof eb));
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
    if (io->ring_ok && io->n_threads) io_ring_wake(io);
    for (int i = 0; i < io->n_threads; i++) pthread_join(io->threads[i], NULL);
    /* the readers are gone, so nothing lands any more: drain the checks */
    pthread_mutex_lock(&io->mu);
    io->ck_stop = 1;
    pthread_cond_broadcast(&io->cv_check);
    pthread_mutex_unlock(&io->mu);
    for (int i = 0; i < io->n_ck_threads; i++) pthread_join(io->ck_threads[i], NULL);
    io_ring_close(io);
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
                          io_errtext(errno, eb, sizeof eb));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        ms_status st = ms_err_set(err, MS_E_IO, "cannot stat %s: %s", path,
                                  io_errtext(errno, eb, sizeof eb));
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

/* Wake as many pread workers as can take one of n new chunks (the room left
 * under io->depth): waking all queue_depth of them costs the submitting
 * thread its core on a small machine (~0.7 ms a submit at 32 workers on 2
 * cores). A worker that finishes a read takes the next chunk itself.
 * Under io->mu. */
static void wake_readers(ms_io *io, int64_t n) {
    int64_t room = io->depth - io->reading;
    if (n > room) n = room;
    for (int64_t k = 0; k < n; k++) pthread_cond_signal(&io->cv_work);
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
    for (int64_t k = 0; k < b->n_chunks; k++) io_q_push_back(io, b->order[k]);
    *ticket = b->ticket;
    if (b->n_chunks && io->p.kind != MS_IO_URING) wake_readers(io, b->n_chunks);
    pthread_mutex_unlock(&io->mu);
    if (b->n_chunks && io->p.kind == MS_IO_URING) io_ring_wake(io);
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
    io_q_take_batch(io, b, &l);
    b->prio = MS_IO_PRIO_DEMAND;
    while (l) {
        io_chunk *next = l->next;
        io_q_push_back(io, l);
        l = next;
    }
}

void ms_io_set_depth(ms_io *io, int depth) {
    pthread_mutex_lock(&io->mu);
    if (depth < 1) depth = 1;
    if (depth > io->p.queue_depth) depth = io->p.queue_depth;
    const int more = depth > io->depth;
    io->depth = depth;
    if (more && io->p.kind != MS_IO_URING) pthread_cond_broadcast(&io->cv_work);
    pthread_mutex_unlock(&io->mu);
    if (more && io->p.kind == MS_IO_URING) io_ring_wake(io);
}

int ms_io_depth(const ms_io *io) {
    ms_io *m = (ms_io *)io;
    pthread_mutex_lock(&m->mu);
    const int d = m->depth;
    pthread_mutex_unlock(&m->mu);
    return d;
}

void ms_io_pause(ms_io *io, int paused) {
    pthread_mutex_lock(&io->mu);
    io->paused = paused != 0;
    if (!io->paused && io->p.kind != MS_IO_URING) pthread_cond_broadcast(&io->cv_work);
    pthread_mutex_unlock(&io->mu);
    if (!paused && io->p.kind == MS_IO_URING) io_ring_wake(io);
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
    if (io_q_take_batch(io, b, &l) > 0) {
        b->failed = 1;
        ms_err_set(&b->err, MS_E_IO, "read cancelled (ticket %llu)", (unsigned long long)ticket);
    }
    for (; l; l = l->next) {
        /* the data bytes it would have read: [off, need) minus the skew */
        const int64_t from = l->off > l->dbeg ? l->off : l->dbeg;
        if (l->need > from) dropped += l->need - from;
        io->st.cancelled_chunks++;
        io_chunk_finish(io, l);
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
    io_reading_add(m, 0);      /* count the open stretch up to now */
    *st = io->st;
    pthread_mutex_unlock(&m->mu);
}
