/* base/io_chunk.c - a chunk's life in the I/O layer, shared by every
 * backend (base/io_int.h lists the layer's files; base/io.h is the contract).
 *
 * Owns: the priority FIFOs, the decision for each read attempt and its
 *   accounting, fault injection, landing and the checker threads, and the
 *   device-activity counters (busy_ns / depth_ns).
 * Idea: everything that decides (io_attempt_plan / io_attempt_done: which
 *   descriptor, whether a fault applies, retry or fail, the O_DIRECT
 *   fallback) is shared by the backends and runs under io->mu; only the read
 *   itself (io_backend.c) and the check hook run unlocked.
 *
 *   QUEUED --plan--> in flight --done--> QUEUED again on reissue (retry,
 *                                        short read, EINTR, fallback)
 *                                    \-> landed --> [check queue] --> hook --> DONE
 *                                    \-> DONE (success, failure, or its batch
 *                                         already failed)
 *
 * Fault injection (params.fault, tests): io_attempt_plan makes the chosen
 *   request's first chunk fail (EIO, TRANSIENT), come back short (SHORT) or
 *   every direct read fail with EINVAL (NODIRECT) without touching the
 *   disk; io_attempt_done flips the CORRUPT window after a successful read.
 * Invariants: a chunk is owned by exactly one of the queue, one reader, the
 *   ring, the check queue or one checker; a batch's n_left counts its chunks
 *   not yet DONE.
 * Does not: issue reads (io_backend.c) or manage tickets (io.c).
 */
#include "base/io_int.h"

#include "base/clock.h"

#include <errno.h>
#include <stdio.h>

/* ----------------------------------------------------------------- queue */

/* Chunks wait in one FIFO per priority (the batch's); the backends take the
 * head of the most urgent non-empty one. Under io->mu. */
void io_q_push_back(ms_io *io, io_chunk *c) {
    const int q = c->b->prio;
    c->next = NULL;
    if (io->q_tail[q]) io->q_tail[q]->next = c;
    else io->q_head[q] = c;
    io->q_tail[q] = c;
    io->q_len++;
}

void io_q_push_front(ms_io *io, io_chunk *c) {
    const int q = c->b->prio;
    c->next = io->q_head[q];
    io->q_head[q] = c;
    if (!io->q_tail[q]) io->q_tail[q] = c;
    io->q_len++;
}

io_chunk *io_q_pop(ms_io *io) {
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
int64_t io_q_take_batch(ms_io *io, const io_batch *b, io_chunk **out) {
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
void io_chunk_finish(ms_io *io, io_chunk *c) {
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
    io_chunk_finish(io, c);
}

/* Decide how the next attempt of c is made. Under io->mu. */
void io_attempt_plan(ms_io *io, io_chunk *c) {
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
    io_chunk_finish(io, c);
}

/* Queue landed chunk c for a checker thread. Under io->mu. */
void io_check_push(ms_io *io, io_chunk *c) {
    c->next = NULL;
    if (io->ck_tail) io->ck_tail->next = c;
    else io->ck_head = c;
    io->ck_tail = c;
    pthread_cond_signal(&io->cv_check);
}

void *io_check_worker(void *arg) {
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
 * here), AD_CHECK if it landed and the caller must io_check_push it.
 * Under io->mu. */
int io_attempt_done(ms_io *io, io_chunk *c, int64_t res) {
    char eb[128], msg[200];
    if (res == -EINTR || res == -EAGAIN) {
        if (++c->n_again < IO_MAX_AGAIN) return 1;
        snprintf(msg, sizeof msg, "%s, %d times", io_errtext((int)-res, eb, sizeof eb),
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
        snprintf(msg, sizeof msg, "%s%s after %d attempts", io_errtext((int)-res, eb, sizeof eb),
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
        io_chunk_finish(io, c);
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
void io_reading_add(ms_io *io, int delta) {
    int64_t now = ms_now_ns();
    if (io->reading > 0) {
        io->st.busy_ns += now - io->reading_t;
        io->st.depth_ns += (int64_t)io->reading * (now - io->reading_t);
    }
    io->reading_t = now;
    io->reading += delta;
    MS_ASSERT(io->reading >= 0);
    if (io->reading > io->st.reading_peak) io->st.reading_peak = io->reading;
}

