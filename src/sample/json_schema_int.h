/* sample/json_schema_int.h - the compiled schema shared by the compiler
 * (json_schema_compile.c) and the matcher (json_schema.c). Not for callers.
 *
 * A schema is a table of nodes; node 0 is the root. A $ref is a node of type
 * N_REF whose `ref` is the target's index (resolved after compiling, so
 * recursion is a cycle through the table, never through the C stack).
 */
#ifndef MS_SAMPLE_JSON_SCHEMA_INT_H
#define MS_SAMPLE_JSON_SCHEMA_INT_H

#include "sample/json_schema.h"

enum {
    N_ANY,        /* any JSON value */
    N_OBJ,        /* object: n_prop >= 0 listed properties only; n_prop < 0 any members */
    N_ARR,        /* array of `items` */
    N_STR, N_NUM, N_INT,
    N_LIT,        /* one of lit[0..n_lit): boolean, null, enum, const */
    N_ANYOF,      /* one of alt[0..n_alt) */
    N_REF         /* same as node `ref` */
};

typedef struct jnode {
    int type;
    int32_t items;             /* N_ARR */
    int32_t ref;               /* N_REF */
    int32_t n_prop;            /* N_OBJ */
    char **prop_name;
    uint16_t *prop_len;
    int32_t *prop_node;
    uint64_t required;
    int32_t n_alt;             /* N_ANYOF */
    int32_t *alt;
    int32_t n_lit;             /* N_LIT, and N_ANY's true / false / null */
    char **lit;
    uint16_t *lit_len;
} jnode;

struct ms_json_schema {
    jnode *node;
    int32_t n_node, cap_node;
    int32_t any_obj, any_val;  /* a free object and any value, for N_ANY's children */
};

#endif
