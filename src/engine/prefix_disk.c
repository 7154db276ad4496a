/* engine/prefix_disk.c - the prompt cache on disk (ms_engine_params.
 * prompt_cache_dir; the calls are declared in prefix_cache.h).
 *
 * Owns: the entry files of one directory: writing them, finding the longest
 *   one whose ids are a prefix of a prompt, checking one before its state is
 *   used, and keeping the directory under its cap.
 * Idea: the directory is the index. An entry's name says whose it is and what
 *   prefix it holds, so a lookup is one readdir and a hash of the prompt's
 *   prefixes, and the directory is always current for every process sharing
 *   it (a restarted server, several `run`s):
 *
 *     <model hash, 16 hex>-<XXH3-64 of ids[0, n), 16 hex>-<n>.mspc
 *
 *   offset  field (host byte order: little-endian on every supported CPU)
 *   0       magic "MSPCACH2" (format 2; format 1 kept every position of a
 *           sliding layer, and is stale like any other version)
 *   8       u64 model hash (config + tensor table), u64 weights' sums digest,
 *           u64 weights' sampled fingerprint (ms_weights_identity)
 *   32      i64 n, n_vocab, n_layer, n_kda, kda_floats (S + conv of one KDA
 *           layer), n_mla, mla_pos (floats per position of one MLA layer),
 *           state_floats (every layer's state at n positions)
 *   96      i32 ids[n]
 *           f32 logits[n_vocab] (the row after position n - 1)
 *           every layer's state in layer order, as ms_state_layer lays it out
 *   end     u64 XXH3-64 of every byte before it
 *
 * Invariants:
 *   1. An entry's state is used only after every check passed: the name parses
 *      and names this model, the magic and format, the model hash, the weights'
 *      identity (ms_weights_id_same), the dimensions, n (the name's, at most
 *      max_context), the file's exact size, the ids compared one by one with
 *      the prompt's (a hash collision is a miss, never a restore), and the
 *      checksum of the whole file. A failed check is a warning and the file is
 *      removed; the state it was read into is reset (ms_session_reuse then
 *      falls back to the RAM cache or a cold feed), so the bits never change.
 *   2. A file appears under an entry's name only whole: it is written as
 *      .tmp-<pid>-<k>.mspc, then renamed; on any write failure (a full disk)
 *      the temporary file is removed. Files of dead writers (a crash) are
 *      removed when a cache is opened. No fsync: a file torn by a power loss
 *      fails the checksum (invariant 1).
 *   3. After a write, the entry files of the directory (every model's) take at
 *      most cap_bytes, or the write did not happen: the files with the lowest
 *      tokens saved per byte held per second since their last use (a hit
 *      touches the file's mtime) are removed first. (Processes writing to one
 *      directory at the same moment can each count without the other's entry
 *      in flight: the cap can be passed by those until the next write.)
 * In a pipeline: the directory is stage 0's (only it opens one), and a file
 *   is the one-process file whatever the split, so pipelines and single
 *   processes share entries. A layer another stage holds is fetched from it
 *   to be written (OP_STATE_GET) and sent to it as it is read (OP_STATE_PUT:
 *   its state, not its position); the other stages' sessions take the
 *   entry's position (MS_PIPE_SET_PAST) only once every check of invariant 1
 *   passed, and a refused entry resets the session on every stage. A stage
 *   that fails: a write is not made (a warning), a restore leaves the session
 *   unsound (sticky, as the RAM cache's MS_PIPE_PC_RESTORE).
 * Does not: lock (processes sharing a directory race only to a miss: a name
 *   is replaced whole or removed whole), hold anything in RAM but a readdir's
 *   listing, a prompt's ids and (in a pipeline) one layer's state.
 */
#include "engine/engine_int.h"
#include "engine/prefix_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define PD_MAGIC "MSPCACH2"
#define PD_SUFFIX ".mspc"
#define PD_TMP ".tmp-"

typedef struct pd_head {
    char magic[8];
    uint64_t model_hash, sums, sample;
    int64_t n, n_vocab, n_layer, n_kda, kda_floats, n_mla, mla_pos, state_floats;
} pd_head;

typedef struct pd_file {
    char name[64];
    uint64_t model, hash;
    int64_t n, bytes;
    double used_s;                      /* mtime: the last write or hit */
} pd_file;

struct ms_pdisk {
    ms_engine *e;
    char *dir;
    int dirfd;
    int64_t cap_bytes;
    int64_t fault_write, n_writes;      /* test hook (ms_engine_params.prompt_cache_fault_write) */
    pd_head want;                       /* this model's header, n and state_floats 0 */
};

static void warn(const ms_pdisk *pd, const char *name, const char *what) {
    ms_log(&pd->e->log, MS_LOG_WARN, "prompt cache: %s/%s: %s", pd->dir, name, what);
}

/* ---- what an entry of this model looks like ---- */

static pd_head model_head(const ms_engine *e) {
    pd_head h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, PD_MAGIC, 8);
    h.model_hash = e->model_hash;
    h.sums = e->weights_id.sums;
    h.sample = e->weights_id.sample;
    h.n_vocab = e->cfg.vocab_size;
    h.n_layer = e->model.n_layer;
    for (int il = 0; il < e->model.n_layer; il++) {
        float *part[2];
        int64_t k[2];
        ms_state_layer(NULL, &e->model, il, 1, part, k);
        if (e->model.layers[il].pos_index >= 0) { h.n_mla++; h.mla_pos = k[0] + k[1]; }
        else { h.n_kda++; h.kda_floats = k[0] + k[1]; }
    }
    return h;
}

static int64_t file_bytes(const pd_head *h) {
    return (int64_t)sizeof *h + h->n * (int64_t)sizeof(int32_t) + (h->n_vocab + h->state_floats) * (int64_t)sizeof(float) +
           (int64_t)sizeof(uint64_t);
}

static pd_head entry_head(const ms_pdisk *pd, int64_t n) {
    pd_head h = pd->want;
    h.n = n;
    h.state_floats = ms_state_floats(&pd->e->model, 0, pd->e->model.n_layer, n);
    return h;
}

static void entry_name(char *out, size_t len, uint64_t model, uint64_t hash, int64_t n) {
    snprintf(out, len, "%016llx-%016llx-%lld" PD_SUFFIX, (unsigned long long)model, (unsigned long long)hash, (long long)n);
}

static uint64_t ids_hash(const int32_t *ids, int64_t n) { return XXH3_64bits(ids, (size_t)n * sizeof *ids); }

/* ---- the directory ---- */

static int parse_name(const char *name, pd_file *f) {
    unsigned long long model, hash;
    long long n;
    int used = 0;
    const size_t len = strlen(name);
    if (len >= sizeof f->name || sscanf(name, "%16llx-%16llx-%lld%n", &model, &hash, &n, &used) != 3 ||
        strcmp(name + used, PD_SUFFIX) != 0 || n < 1)
        return 0;
    memcpy(f->name, name, len + 1);
    f->model = model;
    f->hash = hash;
    f->n = n;
    return 1;
}

/* Every entry file of the directory (any model's): *out malloc'd, their
 * count; 0 with *out NULL when there are none or the directory cannot be
 * read. */
static int scan(const ms_pdisk *pd, pd_file **out) {
    *out = NULL;
    const int fd = dup(pd->dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) { if (fd >= 0) close(fd); return 0; }
    rewinddir(d);
    int n = 0, cap = 0;
    pd_file *all = NULL;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        pd_file f;
        struct stat sb;
        if (!parse_name(de->d_name, &f) || fstatat(pd->dirfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(sb.st_mode))
            continue;
        f.bytes = (int64_t)sb.st_size;
        f.used_s = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
        if (n == cap) {
            pd_file *g = realloc(all, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *g);
            if (!g) break;
            all = g;
        }
        all[n++] = f;
    }
    closedir(d);
    *out = all;
    return n;
}

/* Temporary files left by writers that died (invariant 2). */
static void remove_leftovers(const ms_pdisk *pd) {
    const int fd = dup(pd->dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) { if (fd >= 0) close(fd); return; }
    rewinddir(d);                       /* the descriptor's offset is pd->dirfd's */
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        long pid;
        const size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, PD_TMP, strlen(PD_TMP)) != 0 || len < strlen(PD_SUFFIX) ||
            strcmp(de->d_name + len - strlen(PD_SUFFIX), PD_SUFFIX) != 0 ||
            sscanf(de->d_name + strlen(PD_TMP), "%ld", &pid) != 1)
            continue;
        if (pid == (long)getpid() || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) unlinkat(pd->dirfd, de->d_name, 0);
    }
    closedir(d);
}

ms_status ms_pdisk_open(ms_engine *e, const char *dir, int64_t cap_bytes, int64_t fault_write, ms_pdisk **out,
                        ms_err *err) {
    *out = NULL;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return ms_err_set(err, MS_E_IO, "prompt cache directory %s: cannot create it: %s", dir, strerror(errno));
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ms_err_set(err, MS_E_IO, "prompt cache directory %s: cannot open it: %s", dir, strerror(errno));
    ms_pdisk *pd = calloc(1, sizeof *pd);
    if (!pd || !(pd->dir = strdup(dir))) {
        free(pd);
        close(fd);
        return ms_err_set(err, MS_E_NOMEM, "out of memory");
    }
    pd->e = e;
    pd->dirfd = fd;
    pd->cap_bytes = cap_bytes > 0 ? cap_bytes : MS_PROMPT_CACHE_DISK_DEFAULT;
    pd->fault_write = fault_write;
    pd->want = model_head(e);
    remove_leftovers(pd);
    pd_file *all;
    const int nf = scan(pd, &all);
    int64_t bytes = 0, n_own = 0;
    for (int i = 0; i < nf; i++) {
        bytes += all[i].bytes;
        n_own += all[i].model == pd->want.model_hash;
    }
    free(all);
    ms_log(&e->log, MS_LOG_INFO, "prompt cache on disk: %s, %d entries (%lld of this model), %.1f of %.1f MB", dir, nf,
           (long long)n_own, (double)bytes / 1e6, (double)pd->cap_bytes / 1e6);
    *out = pd;
    return MS_OK;
}

void ms_pdisk_close(ms_pdisk *pd) {
    if (!pd) return;
    close(pd->dirfd);
    free(pd->dir);
    free(pd);
}

/* ---- reading an entry ---- */

/* Read n bytes at *off into p and hash them: 0, or -1 at a failure or the
 * end of the file. */
static int take(int fd, void *p, int64_t n, int64_t *off, XXH3_state_t *x) {
    char *dst = p;
    while (n > 0) {
        const ssize_t got = pread(fd, dst, (size_t)n, *off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        XXH3_64bits_update(x, dst, (size_t)got);
        *off += got;
        n -= got;
        dst += got;
    }
    return 0;
}

/* The header checks of invariant 1 for file f (size `size`): NULL, or what
 * is wrong with it (a static string, or why). */
static const char *check_head(const ms_pdisk *pd, const pd_file *f, const pd_head *h, int64_t size, char *why,
                              size_t len) {
    const pd_head want = entry_head(pd, f->n);
    if (memcmp(h->magic, "MSPCACH", 7) != 0) return "not a prompt-cache entry (bad magic)";
    if (memcmp(h->magic, PD_MAGIC, 8) != 0) return "an entry of another format version (stale)";
    if (h->model_hash != want.model_hash) return "an entry of another model (model hash differs)";
    const ms_weights_id saved = { h->sums, h->sample }, here = { want.sums, want.sample };
    if (!ms_weights_id_same(saved, here)) {
        char a[96], b[96];
        snprintf(why, len, "an entry of other weights (stale: the entry's %s; these weights: %s)",
                 ms_weights_id_str(saved, a, sizeof a), ms_weights_id_str(here, b, sizeof b));
        return why;
    }
    if (h->n_vocab != want.n_vocab || h->n_layer != want.n_layer || h->n_kda != want.n_kda ||
        h->kda_floats != want.kda_floats || h->n_mla != want.n_mla || h->mla_pos != want.mla_pos)
        return "state dimensions differ from this model's";
    if (h->n != f->n || h->state_floats != want.state_floats) return "its length differs from its name's";
    if (size != file_bytes(&want)) {
        snprintf(why, len, "%lld bytes, expected %lld (truncated or damaged)", (long long)size, (long long)file_bytes(&want));
        return why;
    }
    return NULL;
}

/* Floats of the largest layer's state at n positions: a buffer for the
 * layers another stage holds (NULL when this process holds every layer). */
static float *stage_scratch(const ms_pdisk *pd, int64_t n, int *oom) {
    const ms_model *m = &pd->e->model;
    *oom = 0;
    if (m->layer0 == 0 && m->layer1 == m->n_layer) return NULL;
    const int64_t mla = n * pd->want.mla_pos, kda = pd->want.kda_floats;
    float *b = malloc((size_t)(mla > kda ? mla : kda) * sizeof(float) + sizeof(float));
    *oom = b == NULL;
    return b;
}

/* Layer il's state at h->n positions from fd into s: a layer another stage
 * holds goes through scratch to that stage (OP_STATE_PUT; its n_past is set
 * only once the whole file passed, load). NULL, or what went wrong: the file
 * (*stage MS_OK) or the stage (*stage its status, the reason in msg). */
static const char *load_layer(ms_pdisk *pd, int fd, const pd_head *h, int il, ms_session *s, float *scratch,
                              int64_t *off, XXH3_state_t *x, ms_status *stage, char *msg, size_t len) {
    float *part[2];
    int64_t k[2];
    ms_state_layer(&s->st, &pd->e->model, il, h->n, part, k);
    const int here = part[0] != NULL;
    if (!here) { part[0] = scratch; part[1] = scratch + k[0]; }
    for (int j = 0; j < 2; j++)
        if (k[j] > 0 && take(fd, part[j], k[j] * (int64_t)sizeof(float), off, x) != 0) return "truncated";
    if (!here)
        *stage = ms_engine_pipe_layer_state(pd->e, 0, s->st.pipe_id, il, h->n, scratch, k[0] + k[1], msg, len);
    return *stage != MS_OK ? "" : NULL;
}

/* Read entry f (f->n <= s's max_context) into s; ids[0, f->n) are the
 * prompt's: 1 restored, 0 not this prefix (a hash collision: nothing of s
 * changed), -1 refused (warned, removed; s may be half written, on every
 * stage: the caller resets it), -2 another stage failed (*stage: its status,
 * the reason in s->error; s is half written: unsound). */
static int load(ms_pdisk *pd, const pd_file *f, const int32_t *ids, ms_session *s, ms_status *stage) {
    char why[256], msg[512];
    const char *bad = NULL;
    *stage = MS_OK;
    /* not a symlink; O_NONBLOCK: a FIFO swapped in since the scan does not
       block the open (it fails S_ISREG below; a regular file's reads ignore it) */
    const int fd = openat(pd->dirfd, f->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return 0;                       /* removed since the scan */
    XXH3_state_t *x = XXH3_createState();
    int32_t *fid = malloc((size_t)f->n * sizeof *fid);
    int oom;
    float *scratch = stage_scratch(pd, f->n, &oom);
    struct stat sb;
    pd_head h;
    int64_t off = 0;
    int r = -1;
    if (!x || !fid || oom || fstat(fd, &sb) != 0) { r = 0; goto out; }   /* no memory: a miss */
    if (!S_ISREG(sb.st_mode)) { bad = "not a regular file"; goto out; }
    XXH3_64bits_reset(x);
    if (take(fd, &h, sizeof h, &off, x) != 0) { bad = "truncated (no header)"; goto out; }
    if ((bad = check_head(pd, f, &h, (int64_t)sb.st_size, why, sizeof why)) != NULL) goto out;
    if (take(fd, fid, h.n * (int64_t)sizeof *fid, &off, x) != 0) { bad = "truncated"; goto out; }
    if (memcmp(fid, ids, (size_t)h.n * sizeof *fid) != 0) {
        if (ids_hash(fid, h.n) != f->hash) bad = "its ids do not match its name (damaged)";
        else r = 0;                             /* another prefix of the same hash */
        goto out;
    }
    if (take(fd, s->logits, h.n_vocab * (int64_t)sizeof(float), &off, x) != 0) { bad = "truncated"; goto out; }
    for (int il = 0; il < pd->e->model.n_layer && !bad; il++)
        bad = load_layer(pd, fd, &h, il, s, scratch, &off, x, stage, msg, sizeof msg);
    uint64_t sum = 0;
    if (!bad && pread(fd, &sum, sizeof sum, off) != (ssize_t)sizeof sum) bad = "truncated (no checksum)";
    if (!bad && sum != XXH3_64bits_digest(x)) bad = "checksum mismatch (damaged)";
    /* every check passed: the other stages' sessions take the position */
    if (!bad) *stage = ms_engine_pipe_op(pd->e, MS_PIPE_SET_PAST, s->st.pipe_id, h.n, msg, sizeof msg);
    if (*stage != MS_OK) {
        bad = NULL;
        r = -2;
        snprintf(s->error, sizeof s->error, "prompt cache: %.400s", msg);
    } else if (!bad) {
        memcpy(s->tokens, fid, (size_t)h.n * sizeof *fid);
        futimens(fd, NULL);                     /* its last use (invariant 3) */
        r = 1;
    }
out:
    if (bad) {
        char text[400];
        snprintf(text, sizeof text, "%s; ignored, removed, recomputed", bad);
        warn(pd, f->name, text);
        unlinkat(pd->dirfd, f->name, 0);
        pd->e->stats.prompt_disk_rejected++;
    }
    close(fd);
    free(fid);
    free(scratch);
    XXH3_freeState(x);
    return r;
}

static int by_n_desc(const void *a, const void *b) {
    const int64_t x = ((const pd_file *)a)->n, y = ((const pd_file *)b)->n;
    return (x < y) - (x > y);
}

int64_t ms_pdisk_restore(ms_pdisk *pd, const int32_t *ids, int64_t n, int64_t above, ms_session *s, int *clobbered) {
    *clobbered = 0;
    if (!pd || n <= above) return 0;
    pd_file *all;
    int nf = scan(pd, &all), nc = 0;
    for (int i = 0; i < nf; i++)                /* this model's entries longer than `above` */
        if (all[i].model == pd->want.model_hash && all[i].n > above && all[i].n <= n && all[i].n <= s->st.max_ctx)
            all[nc++] = all[i];
    if (nc > 1) qsort(all, (size_t)nc, sizeof *all, by_n_desc);
    int64_t got = 0;
    ms_status stage = MS_OK;
    for (int i = 0; i < nc && got == 0 && stage == MS_OK; i++) {
        if (ids_hash(ids, all[i].n) != all[i].hash) continue;
        const int r = load(pd, &all[i], ids, s, &stage);
        if (r == -1) *clobbered = 1;
        if (r > 0) got = all[i].n;
    }
    free(all);
    if (stage != MS_OK) {
        /* a stage failed with its part half written: s is unsound (sticky) */
        s->sticky = stage;
        s->has_logits = 0;
        s->rb.n_rec = 0;
        return -1;
    }
    if (got > 0) {
        s->st.n_past = got;
        s->has_logits = 1;
        s->rb.n_rec = 0;
        s->sticky = MS_OK;
        s->error[0] = '\0';
        pd->e->stats.prompt_disk_hits++;
    } else if (*clobbered) {
        ms_session_reset(s);
    }
    return got;
}

/* ---- writing an entry ---- */

typedef struct pd_out {
    int fd;
    int64_t left;                               /* bytes until the injected ENOSPC (-1: none) */
    XXH3_state_t *x;
    int err;                                    /* errno of the first failure (0: none) */
} pd_out;

static void put(pd_out *o, const void *p, int64_t n) {
    const char *c = p;
    if (!o->err) XXH3_64bits_update(o->x, p, (size_t)n);
    while (!o->err && n > 0) {
        size_t want = (size_t)n;
        if (o->left >= 0 && (int64_t)want > o->left) want = (size_t)o->left;
        const ssize_t w = want ? write(o->fd, c, want) : (errno = ENOSPC, -1);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { o->err = w < 0 ? errno : EIO; break; }
        if (o->left >= 0) o->left -= w;
        c += w;
        n -= w;
    }
}

/* Remove files until `need` more bytes fit the cap (invariant 3). 0 when they do. */
static int make_room(ms_pdisk *pd, int64_t need) {
    pd_file *all;
    const int nf = scan(pd, &all);
    int64_t total = 0;
    for (int i = 0; i < nf; i++) total += all[i].bytes;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const double t = (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
    while (total + need > pd->cap_bytes) {
        int low = -1;
        double lp = 0;
        for (int i = 0; i < nf; i++) {
            if (all[i].bytes < 0) continue;     /* removed */
            const double idle = t - all[i].used_s > 0 ? t - all[i].used_s : 0;
            const double p = (double)all[i].n / (double)(all[i].bytes > 0 ? all[i].bytes : 1) / (idle + 1.0);
            if (low < 0 || p < lp) { low = i; lp = p; }
        }
        if (low < 0) break;
        unlinkat(pd->dirfd, all[low].name, 0);
        total -= all[low].bytes;
        all[low].bytes = -1;
    }
    free(all);
    return total + need <= pd->cap_bytes ? 0 : -1;
}

/* The entry's bytes into o, in the layout of the file's header comment; a
 * layer another stage holds is fetched from it (OP_STATE_GET) into scratch.
 * MS_OK, or that stage's status (the reason in msg; o is then incomplete). */
static ms_status put_entry(pd_out *o, const ms_pdisk *pd, const pd_head *h, const ms_session *s, float *scratch,
                           char *msg, size_t len) {
    put(o, h, sizeof *h);
    put(o, s->tokens, h->n * (int64_t)sizeof(int32_t));
    put(o, s->logits, h->n_vocab * (int64_t)sizeof(float));
    for (int il = 0; il < pd->e->model.n_layer && !o->err; il++) {
        float *part[2];
        int64_t k[2];
        ms_state_layer(&s->st, &pd->e->model, il, h->n, part, k);
        if (!part[0]) {
            const ms_status st =
                ms_engine_pipe_layer_state(pd->e, 1, s->st.pipe_id, il, h->n, scratch, k[0] + k[1], msg, len);
            if (st != MS_OK) return st;
            part[0] = scratch;
            part[1] = scratch + k[0];
        }
        for (int j = 0; j < 2; j++)
            if (k[j] > 0) put(o, part[j], k[j] * (int64_t)sizeof(float));
    }
    const uint64_t sum = XXH3_64bits_digest(o->x);
    put(o, &sum, sizeof sum);
    return MS_OK;
}

int ms_pdisk_fits(const ms_pdisk *pd, int64_t n) {
    if (!pd || n < 1) return 0;
    const pd_head h = entry_head(pd, n);
    return file_bytes(&h) <= pd->cap_bytes;
}

void ms_pdisk_store(ms_pdisk *pd, const ms_session *s) {
    const int64_t n = s->st.n_past;
    if (!pd || n < 1 || !s->has_logits || s->sticky != MS_OK) return;
    const pd_head h = entry_head(pd, n);
    const int64_t bytes = file_bytes(&h);
    if (bytes > pd->cap_bytes) return;                      /* ms_pdisk_fits */
    char name[64], tmp[96], msg[320];
    entry_name(name, sizeof name, h.model_hash, ids_hash(s->tokens, n), n);
    if (utimensat(pd->dirfd, name, NULL, AT_SYMLINK_NOFOLLOW) == 0) return;     /* held: touched */
    if (make_room(pd, bytes) != 0) return;
    /* unique among processes (pid) and among caches of one process (pd) */
    snprintf(tmp, sizeof tmp, PD_TMP "%ld-%lx-%lld" PD_SUFFIX, (long)getpid(), (unsigned long)(uintptr_t)pd,
             (long long)++pd->n_writes);
    pd_out o = { openat(pd->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666), -1, XXH3_createState(), 0 };
    int oom;
    float *scratch = stage_scratch(pd, n, &oom);
    ms_status stage = MS_OK;
    char why[400] = "";
    if (o.fd < 0) o.err = errno;
    if ((!o.x || oom) && !o.err) o.err = ENOMEM;
    if (pd->n_writes == pd->fault_write) o.left = bytes / 2;
    if (!o.err) {
        XXH3_64bits_reset(o.x);
        stage = put_entry(&o, pd, &h, s, scratch, why, sizeof why);
    }
    if (o.fd >= 0 && close(o.fd) != 0 && !o.err) o.err = errno;
    if (!o.err && stage == MS_OK && renameat(pd->dirfd, tmp, pd->dirfd, name) != 0) o.err = errno;
    if (o.err || stage != MS_OK) {
        if (o.fd >= 0) unlinkat(pd->dirfd, tmp, 0);      /* nothing partial stays (invariant 2) */
        /* a stage that could not give its part: the entry is not kept, as in
           RAM (ms_pcache_store); the session itself is untouched */
        snprintf(msg, sizeof msg, "not written: %.240s (the request goes on without it)",
                 o.err ? strerror(o.err) : why);
        warn(pd, name, msg);
        pd->e->stats.prompt_disk_write_failures++;
    } else {
        pd->e->stats.prompt_disk_writes++;
    }
    free(scratch);
    XXH3_freeState(o.x);
}
