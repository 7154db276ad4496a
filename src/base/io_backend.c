/* base/io_backend.c - the backends of the I/O layer: they move chunks from
 * the queue through the kernel and back (base/io_int.h lists the layer's
 * files; base/io.h is the contract).
 *
 * Owns: the pread workers (MS_IO_PREAD, MS_IO_DIRECT: queue_depth threads,
 *   one pread(2) each at a time, at most io->depth of them reading) and the
 *   io_uring thread with its ring and eventfd (MS_IO_URING; at most io->depth
 *   SQEs in flight).
 * Idea: a backend takes the head of the most urgent queue, asks
 *   io_attempt_plan how to read it, reads unlocked, and hands the result to
 *   io_attempt_done, which says whether the chunk is DONE, must be reissued
 *   or goes to the checkers:
 *
 *     submit --> [queue] --> pread worker x queue_depth --+
 *                   ^    \-> uring thread (<= qd SQEs) ---+--> io_attempt_done()
 *                   |                                      |     |
 *                   +------ reissue (retry / short / EINTR) <----+
 *
 *   The uring thread blocks in io_uring_submit_and_wait; a read SQE on an
 *   eventfd (user_data NULL) stays armed so that submit and close can wake it
 *   by writing the eventfd. The ring therefore has queue_depth + 1 entries.
 * Invariants: a chunk in flight is owned by its reader (or the ring) alone;
 *   a paused layer issues nothing new.
 * Does not: decide retries, faults or fallbacks (io_chunk.c).
 */
#include "base/io_int.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------- pread backend */

void *io_pread_worker(void *arg) {
    ms_io *io = arg;
    pthread_mutex_lock(&io->mu);
    for (;;) {
        while ((!io->q_len || io->paused || io->reading >= io->depth) && !io->stop)
            pthread_cond_wait(&io->cv_work, &io->mu);
        io_chunk *c = io_q_pop(io);
        if (!c) break; /* stop and drained */
        for (;;) {
            if (c->b->failed) { /* another chunk already failed the batch */
                io_chunk_finish(io, c);
                break;
            }
            io_attempt_plan(io, c);
            int64_t res;
            if (c->cur_inject) {
                res = -(int64_t)c->cur_inject;
            } else {
                int fd = c->cur_fd;
                int64_t off = c->off, len = c->end - c->off;
                uint8_t *dst = c->base + (off - c->abeg);
                io_reading_add(io, 1);
                pthread_mutex_unlock(&io->mu);
                ssize_t r = pread(fd, dst, (size_t)len, (off_t)off);
                res = r < 0 ? -(int64_t)errno : (int64_t)r;
                pthread_mutex_lock(&io->mu);
                io_reading_add(io, -1);
            }
            int ad = io_attempt_done(io, c, res);
            if (ad == AD_CHECK) io_check_push(io, c);
            if (ad != AD_REISSUE) break;
        }
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

/* --------------------------------------------------------- uring backend */

ms_status io_ring_open(ms_io *io, ms_err *err) {
    char eb[128];
    io->efd = eventfd(0, EFD_CLOEXEC);
    if (io->efd < 0)
        return ms_err_set(err, MS_E_IO, "io: eventfd for io_uring failed: %s",
                          io_errtext(errno, eb, sizeof eb));
    int rc = io_uring_queue_init((unsigned)io->p.queue_depth + 1, &io->ring, 0);
    if (rc < 0)
        return ms_err_set(err, MS_E_IO,
                          "io_uring unavailable: io_uring_queue_init failed: %s (errno %d); "
                          "use the O_DIRECT or pread backend instead",
                          io_errtext(-rc, eb, sizeof eb), -rc);
    io->ring_ok = 1;
    return MS_OK;
}

void io_ring_close(ms_io *io) {
    /* exiting the ring cancels the armed eventfd read before efd_buf is freed */
    if (io->ring_ok) io_uring_queue_exit(&io->ring);
    if (io->efd >= 0) close(io->efd);
}

static void uring_arm_eventfd(ms_io *io) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
    MS_ASSERT(sqe != NULL); /* the ring has queue_depth + 1 entries */
    io_uring_prep_read(sqe, io->efd, &io->efd_buf, sizeof io->efd_buf, 0);
    io_uring_sqe_set_data(sqe, NULL);
    io->efd_armed = 1;
}

void io_ring_wake(ms_io *io) {
    uint64_t one = 1;
    ssize_t w;
    do w = write(io->efd, &one, sizeof one);
    while (w < 0 && errno == EINTR);
    /* EAGAIN means the counter is saturated: a wake-up is pending anyway */
}

void *io_ring_thread(void *arg) {
    ms_io *io = arg;
    int n_bad = 0;
    pthread_mutex_lock(&io->mu);
    for (;;) {
        while (io->inflight < io->depth && io->q_len && !io->paused) {
            io_chunk *c = io_q_pop(io);
            if (c->b->failed) {
                io_chunk_finish(io, c);
                continue;
            }
            io_attempt_plan(io, c);
            if (c->cur_inject) {
                if (io_attempt_done(io, c, -(int64_t)c->cur_inject) == AD_REISSUE) io_q_push_front(io, c);
                continue;
            }
            struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
            MS_ASSERT(sqe != NULL);
            io_uring_prep_read(sqe, c->cur_fd, c->base + (c->off - c->abeg),
                               (unsigned)(c->end - c->off), (uint64_t)c->off);
            io_uring_sqe_set_data(sqe, c);
            io->inflight++;
            io_reading_add(io, 1);
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
            io_reading_add(io, -1);
            int ad = io_attempt_done(io, c, cqe->res);
            if (ad == AD_REISSUE) io_q_push_front(io, c);
            else if (ad == AD_CHECK) io_check_push(io, c);
        }
        io_uring_cq_advance(&io->ring, n_seen);
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

