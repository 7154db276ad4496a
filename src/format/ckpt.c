/* format/ckpt.c - the checkpoint: a directory of shards as one tensor table.
 *
 * Owns: opening a checkpoint directory (the index or the *.safetensors list,
 *   each shard's header read through base/file.h's checked descriptor), the
 *   name -> tensor hash table, and the agreement of index and shards.
 * Idea: all names in one string arena and one open-addressing table (FNV-1a,
 *   linear probing, load <= 1/2) of 8-byte slots: (32-bit hash tag << 32) |
 *   (index + 1). Only a shard's header is read (8 bytes, then 8 + N), and a
 *   length the parser will refuse is not read at all.
 * Invariants:
 *   1. tensors[] is in (shard, absolute offset) order;
 *   2. a name occurs once in the checkpoint; with an index, the index and the
 *      shards agree name by name;
 *   3. every shard was a regular file when its header was read.
 * Does not: read tensor data, keep file descriptors open after ms_ckpt_open,
 *   parse JSON itself (safetensors.c).
 */
#include "format/safetensors.h"
#include "base/file.h"
#include "format/st_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- name table: one arena, open addressing ----------------------------------- */

typedef struct name_tab {
    char *arena;                /* all names, NUL-terminated, back to back */
    int64_t arena_len, arena_cap;
    int64_t *off;               /* off[i]: name i in the arena */
    int64_t n, cap;
    uint64_t *slots;            /* (tag << 32) | (i + 1); 0 = empty */
    int64_t n_slots;            /* power of two, >= 2 * n */
} name_tab;

#define TAB_MAX_NAMES ((int64_t)UINT32_MAX - 1)

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= 1099511628211ULL;
    }
    /* FNV's low bits mix poorly for keys differing only in the last bytes
     * (layers.1 vs layers.2); fold the high half in before masking. */
    return h ^ (h >> 29);
}

static void tab_free(name_tab *t) {
    free(t->arena);
    free(t->off);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static const char *tab_name(const name_tab *t, int64_t i) { return t->arena + t->off[i]; }

/* index of name, or -1 */
static int64_t tab_find_h(const name_tab *t, const char *name, uint64_t h) {
    if (t->n_slots == 0) return -1;
    uint64_t mask = (uint64_t)t->n_slots - 1;
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t s = h & mask;; s = (s + 1) & mask) {
        uint64_t v = t->slots[s];
        if (v == 0) return -1;
        if ((uint32_t)(v >> 32) == tag) {
            int64_t i = (int64_t)(uint32_t)v - 1;
            if (strcmp(tab_name(t, i), name) == 0) return i;
        }
    }
}

static int64_t tab_find(const name_tab *t, const char *name) {
    return tab_find_h(t, name, fnv1a(name));
}

static void slot_put(uint64_t *slots, int64_t n_slots, uint64_t h, int64_t i) {
    uint64_t mask = (uint64_t)n_slots - 1;
    uint64_t s = h & mask;
    while (slots[s] != 0) s = (s + 1) & mask;
    slots[s] = ((h >> 32) << 32) | (uint64_t)(i + 1);
}

/* Append a name known to be absent (h = fnv1a(name)); returns its index or -1
 * on allocation failure / too many names. */
static int64_t tab_add(name_tab *t, const char *name, uint64_t h) {
    if (t->n >= TAB_MAX_NAMES) return -1;
    if ((t->n + 1) * 2 > t->n_slots) {
        int64_t ns = t->n_slots ? t->n_slots * 2 : 1024;
        uint64_t *slots = calloc((size_t)ns, sizeof *slots);
        if (!slots) return -1;
        for (int64_t i = 0; i < t->n; i++) slot_put(slots, ns, fnv1a(tab_name(t, i)), i);
        free(t->slots);
        t->slots = slots;
        t->n_slots = ns;
    }
    if (t->n == t->cap) {
        int64_t nc = t->cap ? t->cap * 2 : 1024;
        int64_t *off = realloc(t->off, (size_t)nc * sizeof *off);
        if (!off) return -1;
        t->off = off;
        t->cap = nc;
    }
    size_t len = strlen(name) + 1;
    if ((size_t)(t->arena_cap - t->arena_len) < len) {
        int64_t nc = t->arena_cap ? t->arena_cap : 65536;
        while ((size_t)(nc - t->arena_len) < len) nc *= 2;
        char *a = realloc(t->arena, (size_t)nc);
        if (!a) return -1;
        t->arena = a;
        t->arena_cap = nc;
    }
    memcpy(t->arena + t->arena_len, name, len);
    t->off[t->n] = t->arena_len;
    t->arena_len += (int64_t)len;
    slot_put(t->slots, t->n_slots, h, t->n);
    return t->n++;
}

/* ---- the checkpoint ------------------------------------------------------------- */

struct ms_ckpt {
    ms_shard_info *shards;
    int n_shards;
    name_tab names;             /* tensor i is names entry i */
    ms_tensor_info *tensors;
    int64_t n_tensors, cap_tensors;
    int has_index;
};

int ms_ckpt_has_index(const ms_ckpt *c) { return c->has_index; }

/* Add a tensor parsed from shard `info->shard`; refuses a name seen before. */
static int ckpt_add_tensor(void *user, const ms_tensor_info *info, ms_err *err) {
    ms_ckpt *c = user;
    uint64_t h = fnv1a(info->name);
    int64_t prev = tab_find_h(&c->names, info->name, h);
    if (prev >= 0)
        return ms_err_set(err, MS_E_MODEL, "tensor '" T_ "' is in both %.100s and %.100s",
                          info->name, c->shards[c->tensors[prev].shard].file,
                          c->shards[info->shard].file);
    if (c->n_tensors == c->cap_tensors) {
        int64_t nc = c->cap_tensors ? c->cap_tensors * 2 : 1024;
        ms_tensor_info *t = realloc(c->tensors, (size_t)nc * sizeof *t);
        if (!t) return ms_err_set(err, MS_E_NOMEM, "cannot allocate %lld tensor records", (long long)nc);
        c->tensors = t;
        c->cap_tensors = nc;
    }
    int64_t i = tab_add(&c->names, info->name, h);
    if (i < 0)
        return ms_err_set(err, MS_E_NOMEM, "cannot add tensor '" T_ "' to the name table", info->name);
    MS_ASSERT(i == c->n_tensors);
    c->tensors[i] = *info;
    c->tensors[i].name = NULL;  /* set once the arena stops moving */
    c->n_tensors++;
    return 0;
}

/* Read a shard's first 8 bytes, then (if the length is sane) the header, into
 * a malloc'd buffer; the fd is closed before returning. A length the parser
 * will refuse is not read: the parser reports it from the 8 bytes. */
static ms_status read_shard_header(ms_shard_info *sh, const char *why_named,
                                   uint8_t **out, size_t *out_n, ms_err *err) {
    *out = NULL;
    *out_n = 0;
    int fd = open(sh->path, MS_FILE_OPEN_FLAGS);   /* a FIFO must not hang the open */
    if (fd < 0) {
        int e = errno;
        return ms_err_set(err, e == ENOENT ? MS_E_MODEL : MS_E_IO, "%.200s: cannot open shard%s: %s",
                          sh->path, why_named, strerror(e));
    }
    ms_status st = MS_OK;
    uint8_t *buf = NULL;
    st = ms_file_check_fd(fd, sh->path, INT64_MAX, &sh->file_bytes, err);
    if (st < 0) goto done;
    size_t first = sh->file_bytes < 8 ? (size_t)sh->file_bytes : 8;
    uint8_t len8[8];
    st = ms_file_pread_full(fd, len8, first, 0, sh->path, err);
    if (st < 0) goto done;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | len8[i];
    size_t total = first;
    if (first == 8 && hlen <= (uint64_t)ST_MAX_HEADER_BYTES && 8 + (int64_t)hlen <= sh->file_bytes)
        total = 8 + (size_t)hlen;
    buf = malloc(total ? total : 1);
    if (!buf) {
        st = ms_err_set(err, MS_E_NOMEM, "%.200s: cannot allocate %zu header bytes", sh->path, total);
        goto done;
    }
    memcpy(buf, len8, first);
    if (total > first) {
        st = ms_file_pread_full(fd, buf + 8, total - 8, 8, sh->path, err);
        if (st < 0) goto done;
    }
    *out = buf;
    *out_n = total;
    buf = NULL;
done:
    free(buf);
    close(fd);
    return st;
}

static int str_ptr_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n > k && strcmp(s + n - k, suf) == 0;
}

/* dir + "/" + file, malloc'd */
static char *path_join(const char *dir, const char *file) {
    size_t a = strlen(dir), b = strlen(file);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, file, b + 1);
    return p;
}

/* Shard list from sorted file names (borrowed). */
static ms_status set_shards(ms_ckpt *c, const char *dir, char **files, int64_t n, ms_err *err) {
    if (n > 1000000)
        return ms_err_set(err, MS_E_MODEL, "%.200s: %lld shards, more than supported", dir, (long long)n);
    c->shards = calloc((size_t)(n ? n : 1), sizeof *c->shards);
    if (!c->shards) return ms_err_set(err, MS_E_NOMEM, "cannot allocate %lld shard records", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        ms_shard_info *sh = &c->shards[i];
        sh->path = path_join(dir, files[i]);
        if (!sh->path) return ms_err_set(err, MS_E_NOMEM, "cannot allocate a shard path");
        sh->file = sh->path + strlen(dir) + 1;
        c->n_shards++;
    }
    return MS_OK;
}

/* The index as read: names -> file index (into `files`), files deduplicated. */
typedef struct index_map {
    name_tab names;             /* tensor names */
    int32_t *file_of;           /* per name: index into files */
    int64_t cap_file_of;
    name_tab files;             /* distinct shard file names */
} index_map;

static int index_add(void *user, const char *name, const char *file, ms_err *err) {
    index_map *m = user;
    uint64_t hf = fnv1a(file);
    int64_t f = tab_find_h(&m->files, file, hf);
    if (f < 0) {
        if (m->files.n >= INT32_MAX / 2)
            return ms_err_set(err, MS_E_MODEL, ST_INDEX_FILE ": too many shard files");
        f = tab_add(&m->files, file, hf);
        if (f < 0) return ms_err_set(err, MS_E_NOMEM, ST_INDEX_FILE ": out of memory");
    }
    if (m->names.n == m->cap_file_of) {
        int64_t nc = m->cap_file_of ? m->cap_file_of * 2 : 1024;
        int32_t *p = realloc(m->file_of, (size_t)nc * sizeof *p);
        if (!p) return ms_err_set(err, MS_E_NOMEM, ST_INDEX_FILE ": out of memory");
        m->file_of = p;
        m->cap_file_of = nc;
    }
    /* names are unique: the parser refuses duplicate keys */
    int64_t i = tab_add(&m->names, name, fnv1a(name));
    if (i < 0) return ms_err_set(err, MS_E_NOMEM, ST_INDEX_FILE ": out of memory");
    m->file_of[i] = (int32_t)f;
    return 0;
}

/* Read the index, set the shards (its distinct files, sorted) and return the
 * shard each indexed name is mapped to in m->file_of (remapped to shard order). */
static ms_status open_index(ms_ckpt *c, const char *dir, const char *index_path,
                            index_map *m, ms_err *err) {
    char *text = NULL;
    size_t n = 0;
    ms_status st = ms_file_read(index_path, ST_MAX_INDEX_BYTES, &text, &n, err);
    if (st < 0) return st;
    st = ms_index_parse(text, n, ST_INDEX_FILE, index_add, m, err);
    free(text);
    if (st < 0) return st;
    int64_t nf = m->files.n;
    if (nf == 0)
        return ms_err_set(err, MS_E_MODEL, "%.200s: weight_map names no tensor", index_path);
    char **files = malloc((size_t)nf * sizeof *files);
    int32_t *rank = malloc((size_t)nf * sizeof *rank);
    if (!files || !rank) {
        free(files);
        free(rank);
        return ms_err_set(err, MS_E_NOMEM, "cannot allocate the shard list");
    }
    for (int64_t i = 0; i < nf; i++) files[i] = m->files.arena + m->files.off[i];
    qsort(files, (size_t)nf, sizeof *files, str_ptr_cmp);
    for (int64_t i = 0; i < nf; i++) rank[tab_find(&m->files, files[i])] = (int32_t)i;
    for (int64_t i = 0; i < m->names.n; i++) m->file_of[i] = rank[m->file_of[i]];
    st = set_shards(c, dir, files, nf, err);
    free(files);
    free(rank);
    return st;
}

/* Without an index: every regular *.safetensors file in dir, sorted by name. */
static ms_status list_shards(ms_ckpt *c, const char *dir, ms_err *err) {
    DIR *d = opendir(dir);
    if (!d) return ms_err_set(err, MS_E_IO, "%.200s: cannot open directory: %s", dir, strerror(errno));
    char **files = NULL;
    int64_t n = 0, cap = 0;
    ms_status st = MS_OK;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!has_suffix(de->d_name, ST_SUFFIX)) continue;
        char *p = path_join(dir, de->d_name);
        struct stat sb;
        int ok = p && stat(p, &sb) == 0 && S_ISREG(sb.st_mode);   /* follows symlinks */
        free(p);
        if (!ok) continue;
        if (n == cap) {
            int64_t nc = cap ? cap * 2 : 64;
            char **f = realloc(files, (size_t)nc * sizeof *f);
            if (!f) {
                st = ms_err_set(err, MS_E_NOMEM, "cannot allocate the shard list");
                goto done;
            }
            files = f;
            cap = nc;
        }
        files[n] = strdup(de->d_name);
        if (!files[n]) {
            st = ms_err_set(err, MS_E_NOMEM, "cannot allocate the shard list");
            goto done;
        }
        n++;
    }
    if (n == 0) {
        st = ms_err_set(err, MS_E_MODEL, "%.200s: no " ST_INDEX_FILE " and no *" ST_SUFFIX " file", dir);
        goto done;
    }
    qsort(files, (size_t)n, sizeof *files, str_ptr_cmp);
    st = set_shards(c, dir, files, n, err);
done:
    for (int64_t i = 0; i < n; i++) free(files[i]);
    free(files);
    closedir(d);
    return st;
}

/* With an index: every shard tensor indexed to its shard, every indexed name
 * present. Run after all shards are read, so a name in two shards is reported
 * as such (naming both files) rather than as an index mismatch. */
static ms_status check_index(const ms_ckpt *c, const index_map *m, ms_err *err) {
    for (int64_t i = 0; i < c->n_tensors; i++) {
        const ms_tensor_info *t = &c->tensors[i];
        int64_t j = tab_find(&m->names, t->name);
        if (j < 0)
            return ms_err_set(err, MS_E_MODEL, "%.100s: tensor '" T_ "' is not in " ST_INDEX_FILE,
                              c->shards[t->shard].file, t->name);
        if (m->file_of[j] != t->shard)
            return ms_err_set(err, MS_E_MODEL, "%.100s: tensor '" T_ "' is here but " ST_INDEX_FILE " maps it to %.100s",
                              c->shards[t->shard].file, t->name, c->shards[m->file_of[j]].file);
    }
    for (int64_t j = 0; j < m->names.n; j++) {
        const char *name = tab_name(&m->names, j);
        if (tab_find(&c->names, name) < 0)
            return ms_err_set(err, MS_E_MODEL, ST_INDEX_FILE ": tensor '" T_ "' is mapped to %.100s, which has no such tensor",
                              name, c->shards[m->file_of[j]].file);
    }
    return MS_OK;
}

/* Open a checkpoint directory; see safetensors.h. On success *out owns every
 * name and path (valid until ms_ckpt_close) and no file descriptor stays open.
 * Errors: MS_E_MODEL (invalid header / index, missing shard, name clash; the
 * message names the file and tensor), MS_E_IO, MS_E_NOMEM, MS_E_USAGE; *out is
 * NULL then. Allocates ~ (tensors x 100 + names) bytes. Thread-safe for
 * distinct calls; the result is read-only and may be shared by threads. */
ms_status ms_ckpt_open(const char *dir, ms_ckpt **out, ms_err *err) {
    if (!out) return ms_err_set(err, MS_E_USAGE, "ms_ckpt_open: out is NULL");
    *out = NULL;
    if (!dir || !dir[0]) return ms_err_set(err, MS_E_USAGE, "ms_ckpt_open: no directory");
    ms_ckpt *c = calloc(1, sizeof *c);
    if (!c) return ms_err_set(err, MS_E_NOMEM, "cannot allocate a checkpoint");
    index_map m;
    memset(&m, 0, sizeof m);
    ms_status st = MS_OK;
    char *index_path = path_join(dir, ST_INDEX_FILE);
    if (!index_path) {
        st = ms_err_set(err, MS_E_NOMEM, "cannot allocate a path");
        goto done;
    }
    struct stat sb;
    int have_index = stat(index_path, &sb) == 0;
    if (!have_index && errno != ENOENT) {
        st = ms_err_set(err, MS_E_IO, "%.200s: cannot stat: %s", index_path, strerror(errno));
        goto done;
    }
    c->has_index = have_index;
    st = have_index ? open_index(c, dir, index_path, &m, err) : list_shards(c, dir, err);
    if (st < 0) goto done;

    for (int s = 0; s < c->n_shards; s++) {
        uint8_t *buf = NULL;
        size_t n = 0;
        /* with an index, name a tensor the missing shard should hold */
        char why[400] = "";
        if (have_index) {
            int64_t first = -1, count = 0;
            for (int64_t i = 0; i < m.names.n; i++)
                if (m.file_of[i] == s) { if (first < 0) first = i; count++; }
            if (first >= 0)
                snprintf(why, sizeof why, " named by " ST_INDEX_FILE " for tensor '%.200s'%s", tab_name(&m.names, first),
                         count > 1 ? " and others" : "");
            else
                snprintf(why, sizeof why, " named by " ST_INDEX_FILE);
        }
        st = read_shard_header(&c->shards[s], why, &buf, &n, err);
        if (st < 0) goto done;
        ms_shard_info *sh = &c->shards[s];
        st = ms_st_parse_header(buf, n, sh->file_bytes, sh->file, s, ckpt_add_tensor, c, err);
        free(buf);
        if (st < 0) goto done;
        sh->data_offset = (int64_t)n;   /* a parsed header was read whole: n = 8 + N */
    }
    /* the arena no longer moves: hand out names */
    for (int64_t i = 0; i < c->n_tensors; i++) c->tensors[i].name = tab_name(&c->names, i);
    if (have_index) {
        st = check_index(c, &m, err);
        if (st < 0) goto done;
    }
done:
    free(index_path);
    tab_free(&m.names);
    tab_free(&m.files);
    free(m.file_of);
    if (st < 0) {
        ms_ckpt_close(c);
        return st;
    }
    *out = c;
    return MS_OK;
}

/* Free everything; NULL is a no-op. Invalidates every pointer handed out. */
void ms_ckpt_close(ms_ckpt *c) {
    if (!c) return;
    for (int i = 0; i < c->n_shards; i++) free(c->shards[i].path);
    free(c->shards);
    tab_free(&c->names);
    free(c->tensors);
    free(c);
}

/* Tensor by name: O(1) expected; NULL if absent (or c / name NULL). The result
 * lives until ms_ckpt_close. Read-only: safe from many threads. */
const ms_tensor_info *ms_ckpt_find(const ms_ckpt *c, const char *name) {
    if (!c || !name) return NULL;
    int64_t i = tab_find(&c->names, name);
    return i < 0 ? NULL : &c->tensors[i];
}

/* Number of tensors in the checkpoint (0 for NULL). */
int64_t ms_ckpt_n_tensors(const ms_ckpt *c) { return c ? c->n_tensors : 0; }

/* Tensor i in (shard, offset) order; NULL if i is out of range. */
const ms_tensor_info *ms_ckpt_tensor(const ms_ckpt *c, int64_t i) {
    if (!c || i < 0 || i >= c->n_tensors) return NULL;
    return &c->tensors[i];
}

/* Number of shards (0 for NULL). */
int ms_ckpt_n_shards(const ms_ckpt *c) { return c ? c->n_shards : 0; }

/* Shard i (sorted by file name); NULL if i is out of range. */
const ms_shard_info *ms_ckpt_shard(const ms_ckpt *c, int i) {
    if (!c || i < 0 || i >= c->n_shards) return NULL;
    return &c->shards[i];
}
