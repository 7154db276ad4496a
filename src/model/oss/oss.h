/* model/oss/oss.h - the gpt-oss parts of the forward pass (private to
 * src/model): what forward.c calls for a gpt-oss layer.
 *
 * Owns: the interfaces of attn.c (attention half of a layer) and moe.c (the
 *   MoE with biases); the binding is oss/bind.c (model/bind_int.h).
 * Invariants: as forward_int.h - the same bits whoever calls, whatever the
 *   chunk, batch or thread split.
 * Does not: leave src/model.
 */
#ifndef MS_MODEL_OSS_OSS_H
#define MS_MODEL_OSS_OSS_H

#include "model/forward_int.h"

/* RoPE inv_freq [head_dim / 2] in double (attn.c's header defines it). */
void ms_oss_rope_freqs(const ms_config *c, double *inv_freq);

/* The first half of layer L: f->x = RMSNorm(run); run += attention(f->x).
 * Each segment's keys and values go into its state's cache. */
ms_status ms_oss_attention_part(ms_fwd_ctx *c, ms_fwd *f, const ms_fseg *seg, int nseg, const ms_layer *L,
                                int64_t T, ms_err *err);

/* The MoE of layer L (its FFN region at base: the post-attention norm and the
 * router): f->x = RMSNorm(run; post-attention norm), the MoE's input, then
 * f->ffn [T, H] out. keep: as ms_moe_forward. Fails only when an expert read
 * fails. */
ms_status ms_oss_moe_forward(ms_fwd_ctx *c, ms_fwd *f, const ms_layer *L, const uint8_t *base, int64_t T, int keep,
                             ms_err *err);

/* Router: the top-k experts of logits [E] (k <= E), ties to the lower
 * index: top-k of the router logits plus bias. Shared with the expert I/O's
 * guesses so they pick what the router will. */
void ms_oss_router_logits(ms_fwd_ctx *c, float *logits, const ms_layer *L, const uint8_t *base, const float *X,
                          int64_t T, float *bias_buf);

#endif
