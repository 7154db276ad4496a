/* sample/json_schema_compile.c - JSON Schema text -> node table (see
 * json_schema.h for the subset, json_schema_int.h for the table).
 *
 * Owns: refusing what is outside the subset with a message that names the
 *   keyword and where it is (a JSON pointer), and every allocation of a schema.
 * Invariants: node 0 is the root; every N_REF resolves to a node that is not
 *   itself a chain of refs back to it; every enum / anyOf is non-empty (a
 *   schema nothing can satisfy would be a dead end for the matcher).
 * Does not: match bytes (json_schema.c).
 */
#include "sample/json_schema_int.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODES 4096
#define MAX_PATH 256

typedef struct cctx {
    ms_json_schema *js;
    const json_t *defs;        /* the root's $defs or definitions, or NULL */
    const char *defs_key;
    char *err;
    size_t err_len;
    int failed;
} cctx;

static int fail(cctx *c, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    if (c->err && c->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->err_len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int32_t new_node(cctx *c, int type) {
    ms_json_schema *js = c->js;
    if (js->n_node >= MAX_NODES) return fail(c, "schema too large: more than %d nodes", MAX_NODES);
    if (js->n_node == js->cap_node) {
        int32_t cap = js->cap_node ? js->cap_node * 2 : 16;
        jnode *nn = realloc(js->node, (size_t)cap * sizeof *nn);
        if (!nn) return fail(c, "out of memory");
        js->node = nn;
        js->cap_node = cap;
    }
    jnode *n = &js->node[js->n_node];
    memset(n, 0, sizeof *n);
    n->type = type;
    n->items = -1;
    n->ref = -1;
    n->n_prop = -1;
    return js->n_node++;
}

static int add_lit(cctx *c, int32_t ni, const char *text, size_t len) {
    jnode *n = &c->js->node[ni];
    if (n->n_lit >= MS_JSON_MAX_SET) return fail(c, "an enum has more than %d values", MS_JSON_MAX_SET);
    if (len == 0 || len > 4096) return fail(c, "an enum value is too long");
    char **l = realloc(n->lit, (size_t)(n->n_lit + 1) * sizeof *l);
    if (!l) return fail(c, "out of memory");
    n->lit = l;
    uint16_t *ll = realloc(n->lit_len, (size_t)(n->n_lit + 1) * sizeof *ll);
    if (!ll) return fail(c, "out of memory");
    n->lit_len = ll;
    if (!(l[n->n_lit] = malloc(len))) return fail(c, "out of memory");
    memcpy(l[n->n_lit], text, len);
    ll[n->n_lit++] = (uint16_t)len;
    return 0;
}

static int32_t compile_node(cctx *c, const json_t *v, const char *path, int depth);

/* Keywords this compiler knows; annotations are accepted and ignored. */
static int known_keyword(const char *k) {
    static const char *const kw[] = {"type", "properties", "required", "additionalProperties", "items",
                                     "enum", "const", "anyOf", "$ref", "$defs", "definitions",
                                     "description", "title", "$schema", "$id", "$comment", "default",
                                     "examples", NULL};
    for (int i = 0; kw[i]; i++)
        if (!strcmp(k, kw[i])) return 1;
    return 0;
}

static int type_matches(const char *ty, const json_t *v) {
    if (!strcmp(ty, "string")) return json_is_string(v);
    if (!strcmp(ty, "integer")) return json_is_integer(v);
    if (!strcmp(ty, "number")) return json_is_number(v);
    if (!strcmp(ty, "boolean")) return json_is_boolean(v);
    if (!strcmp(ty, "null")) return json_is_null(v);
    if (!strcmp(ty, "object")) return json_is_object(v);
    if (!strcmp(ty, "array")) return json_is_array(v);
    return 0;
}

static int32_t compile_enum(cctx *c, const json_t *v, const char *path) {
    const json_t *en = json_object_get(v, "enum");
    const json_t *cn = json_object_get(v, "const");
    const json_t *ty = json_object_get(v, "type");
    if (en && cn) return fail(c, "'enum' and 'const' together at %s", path);
    if (en && (!json_is_array(en) || json_array_size(en) == 0))
        return fail(c, "'enum' must be a non-empty array at %s", path);
    int32_t ni = new_node(c, N_LIT);
    if (ni < 0) return -1;
    size_t n = en ? json_array_size(en) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = en ? json_array_get(en, i) : cn;
        if (json_is_string(ty) && !type_matches(json_string_value(ty), e))
            return fail(c, "'enum' value %zu does not have the schema's type '%s' at %s", i, json_string_value(ty), path);
        char *t = json_dumps(e, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!t) return fail(c, "out of memory");
        int rc = add_lit(c, ni, t, strlen(t));
        free(t);
        if (rc < 0) return -1;
    }
    return ni;
}

static int32_t compile_props(cctx *c, int32_t ni, const json_t *v, const char *path, int depth) {
    const json_t *props = json_object_get(v, "properties");
    const json_t *req = json_object_get(v, "required");
    const json_t *ap = json_object_get(v, "additionalProperties");
    if (ap && !json_is_boolean(ap))
        return fail(c, "unsupported keyword 'additionalProperties' at %s: only true or false is supported", path);
    if (req && !json_is_array(req)) return fail(c, "'required' must be an array at %s", path);
    if (!props) {
        if (req && json_array_size(req)) return fail(c, "'required' without 'properties' at %s", path);
        if (ap && json_is_false(ap) && !json_is_object(props)) {
            c->js->node[ni].n_prop = 0;   /* no members at all */
        }
        return ni;
    }
    if (!json_is_object(props)) return fail(c, "'properties' must be an object at %s", path);
    size_t np = json_object_size(props);
    if (np > MS_JSON_MAX_SET) return fail(c, "more than %d properties at %s", MS_JSON_MAX_SET, path);
    char **names = calloc(np ? np : 1, sizeof *names);
    uint16_t *lens = calloc(np ? np : 1, sizeof *lens);
    int32_t *nodes = calloc(np ? np : 1, sizeof *nodes);
    jnode *n = &c->js->node[ni];
    n->prop_name = names;
    n->prop_len = lens;
    n->prop_node = nodes;
    n->n_prop = 0;
    if (!names || !lens || !nodes) return fail(c, "out of memory");
    const char *k;
    const json_t *pv;
    int32_t ip = 0;
    json_object_foreach((json_t *)props, k, pv) {
        size_t kl = strlen(k);
        for (size_t i = 0; i < kl; i++)
            if ((unsigned char)k[i] < 0x20 || k[i] == '"' || k[i] == '\\')
                return fail(c, "property name '%s' at %s needs escapes (not supported)", k, path);
        if (kl > 1024) return fail(c, "property name too long at %s", path);
        if (!(names[ip] = strdup(k))) return fail(c, "out of memory");
        lens[ip] = (uint16_t)kl;
        c->js->node[ni].n_prop = ip + 1;
        char sub[MAX_PATH];
        snprintf(sub, sizeof sub, "%s/properties/%s", path, k);
        int32_t child = compile_node(c, pv, sub, depth + 1);
        if (child < 0) return -1;
        c->js->node[ni].prop_node[ip++] = child;   /* the table may have moved */
    }
    size_t i;
    const json_t *r;
    json_array_foreach(req, i, r) {
        int32_t hit = -1;
        for (int32_t p = 0; json_is_string(r) && p < ip; p++)
            if (!strcmp(names[p], json_string_value(r))) hit = p;
        if (hit < 0) return fail(c, "'required' names a property not in 'properties' at %s", path);
        c->js->node[ni].required |= 1ull << hit;
    }
    return ni;
}

static int32_t compile_type(cctx *c, const char *ty, const json_t *v, const char *path, int depth) {
    if (!strcmp(ty, "string")) return new_node(c, N_STR);
    if (!strcmp(ty, "number")) return new_node(c, N_NUM);
    if (!strcmp(ty, "integer")) return new_node(c, N_INT);
    if (!strcmp(ty, "boolean") || !strcmp(ty, "null")) {
        int32_t ni = new_node(c, N_LIT);
        if (ni < 0) return -1;
        if (!strcmp(ty, "null")) return add_lit(c, ni, "null", 4) < 0 ? -1 : ni;
        if (add_lit(c, ni, "true", 4) < 0 || add_lit(c, ni, "false", 5) < 0) return -1;
        return ni;
    }
    if (!strcmp(ty, "object")) {
        int32_t ni = new_node(c, N_OBJ);
        return ni < 0 ? -1 : compile_props(c, ni, v, path, depth);
    }
    if (!strcmp(ty, "array")) {
        int32_t ni = new_node(c, N_ARR);
        if (ni < 0) return -1;
        const json_t *it = json_object_get(v, "items");
        int32_t item = c->js->any_val;
        if (it) {
            char sub[MAX_PATH];
            snprintf(sub, sizeof sub, "%s/items", path);
            if ((item = compile_node(c, it, sub, depth + 1)) < 0) return -1;
        }
        c->js->node[ni].items = item;
        return ni;
    }
    return fail(c, "unsupported type '%s' at %s", ty, path);
}

static int32_t compile_ref(cctx *c, const json_t *ref, const char *path) {
    if (!json_is_string(ref)) return fail(c, "'$ref' must be a string at %s", path);
    const char *r = json_string_value(ref);
    int32_t ni = new_node(c, N_REF);
    if (ni < 0) return -1;
    if (!strcmp(r, "#")) { c->js->node[ni].ref = 0; return ni; }
    const char *name = NULL;
    if (!strncmp(r, "#/$defs/", 8)) name = r + 8;
    else if (!strncmp(r, "#/definitions/", 14)) name = r + 14;
    if (!name || !c->defs || strcmp(c->defs_key, name == r + 8 ? "$defs" : "definitions"))
        return fail(c, "unsupported '$ref' \"%s\" at %s: only \"#\" and \"#/$defs/NAME\" are supported", r, path);
    /* defs were compiled first, in the root's key order, into nodes 2.. */
    int32_t idx = 0;
    const char *k;
    const json_t *dv;
    json_object_foreach((json_t *)c->defs, k, dv) {
        if (!strcmp(k, name)) { c->js->node[ni].ref = -2 - idx; return ni; }
        idx++;
    }
    return fail(c, "'$ref' \"%s\" at %s names no definition", r, path);
}

static int32_t compile_node(cctx *c, const json_t *v, const char *path, int depth) {
    if (depth > 64) return fail(c, "schema nested too deeply at %s", path);
    if (json_is_true(v)) return c->js->any_val;
    if (!json_is_object(v)) return fail(c, "a schema must be an object at %s", path);
    const char *k;
    const json_t *x;
    json_object_foreach((json_t *)v, k, x) {
        if (!known_keyword(k)) return fail(c, "unsupported keyword '%s' at %s", k, path);
        if ((!strcmp(k, "$defs") || !strcmp(k, "definitions")) && depth > 0)
            return fail(c, "unsupported keyword '%s' at %s: only at the root", k, path);
    }
    const json_t *ref = json_object_get(v, "$ref");
    const json_t *any = json_object_get(v, "anyOf");
    const json_t *ty = json_object_get(v, "type");
    if (ref) return compile_ref(c, ref, path);
    if (json_object_get(v, "enum") || json_object_get(v, "const")) return compile_enum(c, v, path);
    if (any) {
        if (!json_is_array(any) || json_array_size(any) == 0) return fail(c, "'anyOf' must be a non-empty array at %s", path);
        if (ty) return fail(c, "'anyOf' together with 'type' at %s is not supported", path);
        int32_t ni = new_node(c, N_ANYOF);
        if (ni < 0) return -1;
        size_t na = json_array_size(any);
        int32_t *alt = calloc(na, sizeof *alt);
        if (!alt) return fail(c, "out of memory");
        c->js->node[ni].alt = alt;
        for (size_t i = 0; i < na; i++) {
            char sub[MAX_PATH];
            snprintf(sub, sizeof sub, "%s/anyOf/%zu", path, i);
            int32_t a = compile_node(c, json_array_get(any, i), sub, depth + 1);
            if (a < 0) return -1;
            c->js->node[ni].alt[i] = a;
            c->js->node[ni].n_alt = (int32_t)i + 1;
        }
        return ni;
    }
    if (json_is_string(ty)) return compile_type(c, json_string_value(ty), v, path, depth);
    if (json_is_array(ty)) {           /* ["string", "null"]: anyOf over single types */
        size_t nt = json_array_size(ty);
        if (nt == 0) return fail(c, "'type' is an empty array at %s", path);
        int32_t ni = new_node(c, N_ANYOF);
        int32_t *alt = calloc(nt, sizeof *alt);
        if (ni < 0 || !alt) { free(alt); return ni < 0 ? -1 : fail(c, "out of memory"); }
        c->js->node[ni].alt = alt;
        for (size_t i = 0; i < nt; i++) {
            const json_t *t = json_array_get(ty, i);
            if (!json_is_string(t)) return fail(c, "'type' must hold strings at %s", path);
            int32_t a = compile_type(c, json_string_value(t), v, path, depth);
            if (a < 0) return -1;
            c->js->node[ni].alt[i] = a;
            c->js->node[ni].n_alt = (int32_t)i + 1;
        }
        return ni;
    }
    if (ty) return fail(c, "'type' must be a string or an array at %s", path);
    if (json_object_get(v, "properties")) return compile_type(c, "object", v, path, depth);
    return c->js->any_val;
}

void ms_json_schema_free(ms_json_schema *js) {
    if (!js) return;
    for (int32_t i = 0; i < js->n_node; i++) {
        jnode *n = &js->node[i];
        for (int32_t p = 0; p < n->n_prop; p++) free(n->prop_name[p]);
        for (int32_t l = 0; l < n->n_lit; l++) free(n->lit[l]);
        free(n->prop_name);
        free(n->prop_len);
        free(n->prop_node);
        free(n->alt);
        free(n->lit);
        free(n->lit_len);
    }
    free(js->node);
    free(js);
}

/* Built-in nodes: 0 root (filled last), 1 any value, then a free object. */
static int builtins(cctx *c) {
    if (new_node(c, N_ANY) != 0) return -1;
    c->js->any_val = new_node(c, N_ANY);
    if (c->js->any_val < 0) return -1;
    if (add_lit(c, c->js->any_val, "true", 4) < 0 || add_lit(c, c->js->any_val, "false", 5) < 0 ||
        add_lit(c, c->js->any_val, "null", 4) < 0)
        return -1;
    c->js->node[c->js->any_val].items = c->js->any_val;   /* an array inside any value */
    c->js->any_obj = new_node(c, N_OBJ);
    return c->js->any_obj < 0 ? -1 : 0;
}

/* Refs were compiled as -2 - (index of the definition); point them at the
 * definitions' nodes, then refuse chains of refs that loop without a value. */
static int resolve_refs(cctx *c, const int32_t *def_node, int32_t n_def) {
    ms_json_schema *js = c->js;
    for (int32_t i = 0; i < js->n_node; i++)
        if (js->node[i].type == N_REF && js->node[i].ref <= -2) {
            int32_t d = -2 - js->node[i].ref;
            if (d >= n_def) return fail(c, "internal: bad definition index");
            js->node[i].ref = def_node[d];
        }
    for (int32_t i = 0; i < js->n_node; i++) {
        int32_t at = i, steps = 0;
        while (js->node[at].type == N_REF || (js->node[at].type == N_ANYOF && js->node[at].n_alt == 1)) {
            at = js->node[at].type == N_REF ? js->node[at].ref : js->node[at].alt[0];
            if (++steps > js->n_node) return fail(c, "'$ref' loops without a value");
        }
    }
    return 0;
}

ms_json_schema *ms_json_schema_compile(const char *schema, size_t n, char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    ms_json_schema *js = calloc(1, sizeof *js);
    cctx c = {.js = js, .err = err, .err_len = err_len};
    json_t *root = NULL;
    int32_t *def_node = NULL;
    if (!js) { fail(&c, "out of memory"); return NULL; }
    if (builtins(&c) < 0) goto bad;
    if (!schema) {                                   /* json_object: any object at the root */
        js->node[0] = js->node[js->any_obj];
        return js;
    }
    json_error_t je;
    root = json_loadb(schema, n, JSON_REJECT_DUPLICATES, &je);
    if (!root) { fail(&c, "the schema is not valid JSON: %s", je.text); goto bad; }
    c.defs_key = json_object_get(root, "$defs") ? "$defs" : "definitions";
    c.defs = json_object_get(root, c.defs_key);
    if (c.defs && !json_is_object(c.defs)) { fail(&c, "'%s' must be an object", c.defs_key); goto bad; }
    int32_t n_def = c.defs ? (int32_t)json_object_size(c.defs) : 0;
    def_node = calloc((size_t)(n_def ? n_def : 1), sizeof *def_node);
    if (!def_node) { fail(&c, "out of memory"); goto bad; }
    const char *k;
    const json_t *dv;
    int32_t id = 0;
    json_object_foreach((json_t *)c.defs, k, dv) {
        char sub[MAX_PATH];
        snprintf(sub, sizeof sub, "#/%s/%s", c.defs_key, k);
        if ((def_node[id++] = compile_node(&c, dv, sub, 1)) < 0) goto bad;
    }
    int32_t r = compile_node(&c, root, "#", 0);
    if (r < 0) goto bad;
    js->node[0] = js->node[r];        /* shallow: node r's arrays now belong to node 0 */
    memset(&js->node[r], 0, sizeof js->node[r]);
    js->node[r].type = N_REF;
    js->node[r].ref = 0;
    if (resolve_refs(&c, def_node, n_def) < 0) goto bad;
    free(def_node);
    json_decref(root);
    return js;
bad:
    free(def_node);
    json_decref(root);
    ms_json_schema_free(js);
    return NULL;
}
