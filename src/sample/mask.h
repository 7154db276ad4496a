/* sample/mask.h - the token mask of structured output; the public half is
 * ms_grammar in moestream.h, this is what the sampler calls (see mask.c).
 * Not thread-safe: one grammar per sampler. No allocation after open. */
#ifndef MS_SAMPLE_MASK_H
#define MS_SAMPLE_MASK_H

#include "moestream.h"
#include "sample/json_schema.h"

/* logits[id] = -inf for every id the document cannot take next. */
void ms_grammar_mask(ms_grammar *g, float *logits);
/* Advance the document by the picked id. */
void ms_grammar_accept(ms_grammar *g, int32_t id);
int64_t ms_grammar_n_vocab(const ms_grammar *g);

#endif
