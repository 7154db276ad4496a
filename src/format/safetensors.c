/* format/safetensors.c - safetensors headers and the index, parsed from memory.
 *
 * Owns: the checks of spec section 1 on every shard header and on
 *   model.safetensors.index.json (the files are opened and the checkpoint
 *   table built in ckpt.c).
 * Idea: a shard file is
 *
 *     +----------------+------------------------+---------------------------+
 *     | N (u64 LE, 8 B)| N bytes of JSON header | data section              |
 *     +----------------+------------------------+---------------------------+
 *     0                8                        8 + N                       file_bytes
 *
 *   and a tensor's data_offsets [begin, end) are relative to the data section;
 *   everything handed out is ABSOLUTE (8 + N + begin). A header whose
 *   non-empty ranges fill the data section without a gap states the file's
 *   size, so a file shorter than that is reported as truncated, with both
 *   sizes; otherwise a range past the end is that tensor's error.
 * Invariants:
 *   1. tensors are handed to the callback in (begin, end, name) order;
 *   2. every tensor's [offset, offset + n_bytes) lies in its shard's data
 *      section, and the non-empty ranges of one shard do not overlap;
 *   3. a name occurs once in a header (duplicate keys are refused).
 * Does not: open files, read tensor data, keep state between calls.
 */
#include "format/safetensors.h"
#include "format/json_util.h"
#include "format/st_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const char *const dtype_names[MS_DT_COUNT] = {
    [MS_DT_F32] = "F32", [MS_DT_BF16] = "BF16", [MS_DT_F16] = "F16",
    [MS_DT_U8] = "U8", [MS_DT_I8] = "I8", [MS_DT_I32] = "I32",
    [MS_DT_I64] = "I64", [MS_DT_F64] = "F64", [MS_DT_BOOL] = "BOOL",
    [MS_DT_U16] = "U16", [MS_DT_I16] = "I16", [MS_DT_U32] = "U32",
    [MS_DT_U64] = "U64", [MS_DT_F8_E4M3] = "F8_E4M3", [MS_DT_F8_E5M2] = "F8_E5M2",
};

static const int64_t dtype_sizes[MS_DT_COUNT] = {
    [MS_DT_F32] = 4, [MS_DT_BF16] = 2, [MS_DT_F16] = 2, [MS_DT_U8] = 1,
    [MS_DT_I8] = 1, [MS_DT_I32] = 4, [MS_DT_I64] = 8, [MS_DT_F64] = 8,
    [MS_DT_BOOL] = 1, [MS_DT_U16] = 2, [MS_DT_I16] = 2, [MS_DT_U32] = 4,
    [MS_DT_U64] = 8, [MS_DT_F8_E4M3] = 1, [MS_DT_F8_E5M2] = 1,
};

/* The safetensors name of a dtype ("BF16"); "?" for a value out of range.
 * Static string; thread-safe. */
const char *ms_dtype_name(ms_dtype dt) {
    if ((int)dt < 0 || dt >= MS_DT_COUNT) return "?";
    return dtype_names[dt];
}

/* Bytes per element of a dtype; -1 for a value out of range. Thread-safe. */
int64_t ms_dtype_size(ms_dtype dt) {
    if ((int)dt < 0 || dt >= MS_DT_COUNT) return -1;
    return dtype_sizes[dt];
}

static int dtype_parse(const char *s, ms_dtype *out) {
    for (int i = 0; i < MS_DT_COUNT; i++) {
        if (strcmp(s, dtype_names[i]) == 0) {
            *out = (ms_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* "[3, 4]" into buf (large enough for MS_MAX_DIMS 20-digit dims). */
#define SHAPE_STR_BYTES (MS_MAX_DIMS * 22 + 4)
static void shape_str(char *buf, const int64_t *shape, int n_dim) {
    size_t at = 0;
    buf[at++] = '[';
    for (int i = 0; i < n_dim; i++)
        at += (size_t)snprintf(buf + at, SHAPE_STR_BYTES - at, "%s%lld",
                               i ? ", " : "", (long long)shape[i]);
    snprintf(buf + at, SHAPE_STR_BYTES - at, "]");
}

/* ---- one shard header ------------------------------------------------------ */

typedef struct st_entry {
    ms_tensor_info info;
    int64_t begin, end;         /* relative to the data section */
} st_entry;

static int entry_cmp(const void *pa, const void *pb) {
    const st_entry *a = pa, *b = pb;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    return strcmp(a->info.name, b->info.name);
}


/* A non-negative JSON integer, or -1 with *why set. */
static int64_t json_nonneg(const json_t *v, const char **why) {
    if (!json_is_integer(v)) {
        *why = ms_json_type_name(v);
        return -1;
    }
    json_int_t x = json_integer_value(v);
    if (x < 0) {
        *why = "a negative integer";
        return -1;
    }
    return (int64_t)x;
}

/* One tensor entry on its own (dtype, shape, sizes, offsets); where its range
 * lies in the file is check_ranges' business. */
static ms_status check_entry(const char *file, const char *name, const json_t *v,
                             int shard_index, st_entry *e, ms_err *err) {
    memset(e, 0, sizeof *e);
    e->info.name = name;
    e->info.shard = shard_index;
    if (!json_is_object(v))
        return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': entry: expected an object, found %s",
                          file, name, ms_json_type_name(v));

    const json_t *jd = json_object_get(v, "dtype");
    if (!json_is_string(jd))
        return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': dtype: expected a string, found %s",
                          file, name, ms_json_type_name(jd));
    if (dtype_parse(json_string_value(jd), &e->info.dtype) != 0)
        return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': unknown dtype '%.40s'",
                          file, name, json_string_value(jd));

    const json_t *js = json_object_get(v, "shape");
    if (!json_is_array(js))
        return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': shape: expected an array, found %s",
                          file, name, ms_json_type_name(js));
    size_t n_dim = json_array_size(js);
    if (n_dim > MS_MAX_DIMS)
        return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': shape has %zu dims, at most %d supported",
                          file, name, n_dim, MS_MAX_DIMS);
    e->info.n_dim = (int)n_dim;
    int64_t numel = 1;
    for (size_t i = 0; i < n_dim; i++) {
        const char *why = NULL;
        int64_t d = json_nonneg(json_array_get(js, i), &why);
        if (d < 0)
            return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': shape[%zu]: expected a non-negative integer, found %s",
                              file, name, i, why);
        e->info.shape[i] = d;
    }
    char shp[SHAPE_STR_BYTES];
    shape_str(shp, e->info.shape, e->info.n_dim);
    for (size_t i = 0; i < n_dim; i++) {
        if (ms_mul_i64(numel, e->info.shape[i], &numel) != 0)
            return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': shape %s: element count overflows int64",
                              file, name, shp);
    }
    e->info.numel = numel;
    int64_t need;
    if (ms_mul_i64(numel, ms_dtype_size(e->info.dtype), &need) != 0)
        return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': %s %s: byte count overflows int64",
                          file, name, ms_dtype_name(e->info.dtype), shp);
    e->info.n_bytes = need;

    const json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': data_offsets: expected an array of 2 integers, found %s%s",
                          file, name, ms_json_type_name(jo),
                          json_is_array(jo) ? " of another length" : "");
    const char *why = NULL;
    int64_t begin = json_nonneg(json_array_get(jo, 0), &why);
    if (begin < 0)
        return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': data_offsets[0]: expected a non-negative integer, found %s",
                          file, name, why);
    int64_t end = json_nonneg(json_array_get(jo, 1), &why);
    if (end < 0)
        return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': data_offsets[1]: expected a non-negative integer, found %s",
                          file, name, why);
    if (begin > end)
        return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': data_offsets [%lld, %lld): begin > end",
                          file, name, (long long)begin, (long long)end);
    if (end - begin != need)
        return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': data_offsets [%lld, %lld) hold %lld bytes but %s %s needs %lld",
                          file, name, (long long)begin, (long long)end, (long long)(end - begin),
                          ms_dtype_name(e->info.dtype), shp, (long long)need);
    e->begin = begin;
    e->end = end;
    return MS_OK;
}

/* The first (in offset order) of the n_ent sorted entries that ends past a
 * data section of data_bytes, reported. When the non-empty ranges fill
 * [0, end of the last) without a gap, the header describes the file's size
 * exactly and the file is shorter: it is reported as truncated (an
 * interrupted download), with the size expected. Otherwise one tensor's
 * offsets point outside the data. */
static ms_status check_beyond(const char *file, const st_entry *ents, size_t n_ent,
                              int64_t data_offset, int64_t data_bytes, ms_err *err) {
    const st_entry *first = NULL;
    int64_t cover = 0, max_end = 0;
    int gap = 0;
    for (size_t i = 0; i < n_ent; i++) {
        const st_entry *e = &ents[i];
        if (!first && e->end > data_bytes) first = e;
        if (e->end > max_end) max_end = e->end;
        if (e->begin == e->end) continue;
        if (e->begin > cover) gap = 1;
        if (e->end > cover) cover = e->end;
    }
    if (!first) return MS_OK;
    if (!gap)
        return ms_err_set(err, MS_E_MODEL, F_ ": truncated: %lld bytes, expected %lld as its header says "
                          "(tensor '" T_ "' at data_offsets [%lld, %lld) and what follows lie past the end)",
                          file, (long long)(data_offset + data_bytes), (long long)(data_offset + max_end),
                          first->info.name, (long long)first->begin, (long long)first->end);
    return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': data_offsets [%lld, %lld) end beyond the data section of %lld bytes",
                      file, first->info.name, (long long)first->begin, (long long)first->end, (long long)data_bytes);
}

/* Sort the entries by range and check where the ranges lie: inside the data
 * section (check_beyond), and the non-empty ones without overlap. Sets each
 * entry's absolute offset. */
static ms_status check_ranges(const char *file, st_entry *ents, size_t n_ent,
                              int64_t data_offset, int64_t data_bytes, ms_err *err) {
    qsort(ents, n_ent, sizeof *ents, entry_cmp);
    ms_status st = check_beyond(file, ents, n_ent, data_offset, data_bytes, err);
    if (st < 0) return st;
    /* overlap: sorted by (begin, end), a non-empty range overlaps an earlier
     * one iff it starts before the furthest end seen so far. Empty ranges hold
     * no bytes and overlap nothing. */
    int64_t max_end = 0;
    const st_entry *max_owner = NULL;
    for (size_t i = 0; i < n_ent; i++) {
        st_entry *e = &ents[i];
        e->info.offset = data_offset + e->begin;   /* cannot overflow: end <= file_bytes - data_offset */
        if (e->begin == e->end) continue;
        if (max_owner && e->begin < max_end)
            return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': data_offsets [%lld, %lld) overlap tensor '%.120s' at [%lld, %lld)",
                              file, e->info.name, (long long)e->begin, (long long)e->end,
                              max_owner->info.name, (long long)max_owner->begin, (long long)max_end);
        if (!max_owner || e->end > max_end) {
            max_end = e->end;
            max_owner = e;
        }
    }
    return MS_OK;
}

/* The 8-byte header length against the limit, the file and the buffer; sets
 * *data_offset = 8 + N. */
static ms_status header_span(const uint8_t *buf, size_t n, int64_t file_bytes, const char *file,
                             int64_t *data_offset, ms_err *err) {
    if (!buf && n > 0)
        return ms_err_set(err, MS_E_USAGE, F_ ": no buffer", file);
    if (n < 8 || file_bytes < 8)
        return ms_err_set(err, MS_E_MODEL, F_ ": truncated: %lld bytes, a safetensors file needs at least 8",
                          file, (long long)(n < 8 ? (int64_t)n : file_bytes));
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > (uint64_t)ST_MAX_HEADER_BYTES)
        return ms_err_set(err, MS_E_MODEL, F_ ": header length %llu is more than the %lld bytes allowed",
                          file, (unsigned long long)hlen, ST_MAX_HEADER_BYTES);
    *data_offset = 8 + (int64_t)hlen;
    if (*data_offset > file_bytes)
        return ms_err_set(err, MS_E_MODEL, F_ ": truncated: header length %llu needs %lld bytes but the file has %lld",
                          file, (unsigned long long)hlen, (long long)*data_offset, (long long)file_bytes);
    if ((uint64_t)*data_offset > (uint64_t)n)
        return ms_err_set(err, MS_E_USAGE, F_ ": header length %llu needs %lld bytes but the buffer holds %zu",
                          file, (unsigned long long)hlen, (long long)*data_offset, n);
    return MS_OK;
}

/* "__metadata__": an object of strings. */
static ms_status check_metadata(const char *file, const json_t *val, ms_err *err) {
    if (!json_is_object(val))
        return ms_err_set(err, MS_E_MODEL, F_ ": __metadata__: expected an object, found %s",
                          file, ms_json_type_name(val));
    const char *mk;
    json_t *mv;
    json_object_foreach((json_t *)val, mk, mv) {
        if (!json_is_string(mv))
            return ms_err_set(err, MS_E_MODEL, F_ ": __metadata__ '%.100s': expected a string, found %s",
                              file, mk, ms_json_type_name(mv));
    }
    return MS_OK;
}

/* Every entry of the parsed header object into ents[] (room for all keys). */
static ms_status collect_entries(json_t *root, const char *file, int shard_index,
                                 st_entry *ents, size_t *n_ent, ms_err *err) {
    *n_ent = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        ms_status st = strcmp(key, "__metadata__") == 0
                           ? check_metadata(file, val, err)
                           : check_entry(file, key, val, shard_index, &ents[(*n_ent)++], err);
        if (st < 0) return st;
    }
    return MS_OK;
}

/* Parse and check one shard header; see safetensors.h. Calls `add` once per
 * tensor in data-offset order; info->name points into the parsed JSON and is
 * valid only during the call (copy it to keep it). Errors: MS_E_MODEL with a
 * message naming the file and (where there is one) the tensor; MS_E_NOMEM;
 * MS_E_USAGE for bad arguments; or the negative value `add` returned.
 * Allocates only temporaries; thread-safe. */
ms_status ms_st_parse_header(const uint8_t *buf, size_t n, int64_t file_bytes,
                             const char *file, int shard_index,
                             ms_st_add_fn add, void *user, ms_err *err) {
    if (!file) file = "(safetensors)";
    int64_t data_offset = 0;
    ms_status st = header_span(buf, n, file_bytes, file, &data_offset, err);
    if (st < 0) return st;
    const int64_t hlen = data_offset - 8, data_bytes = file_bytes - data_offset;

    const char *text = (const char *)buf + 8;
    json_error_t je;
    json_t *root = json_loadb(text, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        char key[256];
        if (ms_json_dup_key(text, (size_t)hlen, &je, key, sizeof key) == 0)
            return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': duplicate name in the header",
                              file, key);
        return ms_err_set(err, MS_E_MODEL, F_ ": header is not valid JSON (byte %d): %.200s",
                          file, je.position, je.text);
    }
    st_entry *ents = NULL;
    size_t n_ent = 0;
    if (!json_is_object(root)) {
        st = ms_err_set(err, MS_E_MODEL, F_ ": header is a JSON %s, expected an object",
                        file, ms_json_type_name(root));
        goto done;
    }
    size_t cap = json_object_size(root);
    ents = calloc(cap ? cap : 1, sizeof *ents);
    if (!ents) {
        st = ms_err_set(err, MS_E_NOMEM, F_ ": cannot allocate %zu header entries", file, cap);
        goto done;
    }
    st = collect_entries(root, file, shard_index, ents, &n_ent, err);
    if (st == MS_OK) st = check_ranges(file, ents, n_ent, data_offset, data_bytes, err);
    for (size_t i = 0; st == MS_OK && add && i < n_ent; i++) {
        int r = add(user, &ents[i].info, err);
        if (r < 0) st = (ms_status)r;
    }
done:
    free(ents);
    json_decref(root);
    return st;
}

/* ---- the index --------------------------------------------------------------- */

static int bad_shard_file(const char *f) {
    return f[0] == '\0' || strchr(f, '/') != NULL || strstr(f, "..") != NULL;
}

/* Parse model.safetensors.index.json text; see safetensors.h. Calls `add` per
 * weight_map entry in file order; name and file point into the parsed JSON and
 * are valid only during the call. Refuses: invalid JSON, duplicate names, a
 * missing or ill-typed weight_map, a shard file that is empty or contains '/'
 * or "..". Errors: MS_E_MODEL naming `file` and the tensor; MS_E_NOMEM; or
 * the negative value `add` returned. Allocates only temporaries; thread-safe. */
ms_status ms_index_parse(const char *text, size_t n, const char *file,
                         ms_index_add_fn add, void *user, ms_err *err) {
    if (!file) file = ST_INDEX_FILE;
    if (!text && n > 0)
        return ms_err_set(err, MS_E_USAGE, F_ ": no buffer", file);
    json_error_t je;
    json_t *root = json_loadb(text ? text : "", n, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        char key[256];
        if (ms_json_dup_key(text, n, &je, key, sizeof key) == 0)
            return ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': listed twice", file, key);
        return ms_err_set(err, MS_E_MODEL, F_ ": not valid JSON (byte %d): %.200s",
                          file, je.position, je.text);
    }
    ms_status st = MS_OK;
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(root)) {
        st = ms_err_set(err, MS_E_MODEL, F_ ": top level is a JSON %s, expected an object",
                        file, ms_json_type_name(root));
    } else if (!wm) {
        st = ms_err_set(err, MS_E_MODEL, F_ ": weight_map missing", file);
    } else if (!json_is_object(wm)) {
        st = ms_err_set(err, MS_E_MODEL, F_ ": weight_map: expected an object, found %s",
                        file, ms_json_type_name(wm));
    } else {
        const char *key;
        json_t *val;
        json_object_foreach(wm, key, val) {
            if (!json_is_string(val)) {
                st = ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': shard: expected a string, found %s",
                                file, key, ms_json_type_name(val));
                break;
            }
            const char *sf = json_string_value(val);
            if (bad_shard_file(sf)) {
                st = ms_err_set(err, MS_E_MODEL, F_ ": tensor '" T_ "': shard file '%.100s' is not a plain file name (empty, '/' or '..')",
                                file, key, sf);
                break;
            }
            if (add) {
                int r = add(user, key, sf, err);
                if (r < 0) {
                    st = (ms_status)r;
                    break;
                }
            }
        }
    }
    json_decref(root);
    return st;
}
