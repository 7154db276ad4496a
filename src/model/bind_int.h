/* model/bind_int.h - what the families' bindings share (private to
 * src/model): bind.c (K3, and the common machinery) and oss/bind.c.
 *
 * Owns: the binder (a checkpoint and store, or a dry run from a config
 *   alone), tensor groups that become one store region each, and the
 *   lookups that check a tensor's dtype and shape (bind.c).
 * Invariants: see bind.c (regions in the order of use; every bound tensor
 *   has a region and an offset in it).
 * Does not: leave src/model.
 */
#ifndef MS_MODEL_BIND_INT_H
#define MS_MODEL_BIND_INT_H

#include "model/model.h"

#define MAX_REGION_TENSORS 64

enum { DT_BF16 = 1 << MS_DT_BF16, DT_F32 = 1 << MS_DT_F32, DT_U8 = 1 << MS_DT_U8 };

/* The tensors of one region to be. */
typedef struct group {
    int n;
    ms_tensor_info synth[MAX_REGION_TENSORS];   /* dry run, and slices (ms_bind_slice) */
    ms_wt *wt[MAX_REGION_TENSORS];
    const ms_tensor_info *ti[MAX_REGION_TENSORS];
    int64_t *ext_off[MAX_REGION_TENSORS];   /* where to store the offset instead of wt */
} group;

/* What a binding works against: a real checkpoint and store, or (dry run,
 * ck == NULL and store == NULL) tensors synthesised from the config with the
 * expected shapes laid out contiguously, and regions recorded as sizes only
 * (m->plan_regions) - so a plan can be made from a config.json alone. */
typedef struct binder {
    ms_model *m;
    const ms_ckpt *ck;
    ms_store *store;
    int64_t synth_off;
} binder;

#define D1(a) 1, (int64_t[]){ (a) }
#define D2(a, b) 2, (int64_t[]){ (a), (b) }
#define D3(a, b, c) 3, (int64_t[]){ (a), (b), (c) }
#define D4(a, b, c, d) 4, (int64_t[]){ (a), (b), (c), (d) }

/* The tensor `name` of the checkpoint, or NULL (always NULL in a dry run). */
const ms_tensor_info *ms_bind_find(const binder *bd, const char *name);
/* Look up `name`, check its dtype is in dt_mask and its shape is dims[0..nd)
 * (flat: only the element count must be dims[0]), add it to group g with its
 * view wt (or, wt NULL, its offset into *ext_off once placed). NULL with err
 * set (MS_E_MODEL naming the tensor) otherwise. */
const ms_tensor_info *ms_bind_want(binder *bd, group *g, ms_wt *wt, int64_t *ext_off, const char *name,
                                   int dt_mask, int nd, const int64_t *dims, int flat, ms_err *err);
/* Slice [e] of a tensor whose first dimension counts experts (checked by
 * ms_bind_want into another group), added to group g: its offset into *ext_off. */
void ms_bind_slice(group *g, int64_t *ext_off, const ms_tensor_info *fused, int64_t e);
/* Group g as one store region of class cls (ranges: its tensors by file
 * offset, coalesced where adjacent); every member's offset filled. The
 * region id, or a negative ms_status with err set. */
int ms_bind_region(binder *bd, ms_region_class cls, group *g, ms_err *err);
/* The embedding, GLOBAL and read by rows; lm_head, split by rows into TRUNK
 * regions about the size of the largest layer region (bind after the layers). */
ms_status ms_bind_embed(binder *bd, const char *name, ms_err *err);
ms_status ms_bind_lm_head(binder *bd, const char *name, ms_err *err);

/* gpt-oss (oss/bind.c): the part [m->layer0, m->layer1) (+ head) of bd->m,
 * whose model_init has run. */
ms_status ms_oss_bind(binder *bd, ms_err *err);

#endif
