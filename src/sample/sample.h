/* sample/sample.h - token samplers and their seeded RNG.
 *
 * Owns: turning a logits vector into the next token id under the sampling
 *   parameters of the public header (ms_sample_params).
 * Idea: the pipeline is fixed: repetition penalty -> (temperature <= 0:
 *   greedy argmax, ties to the lower id) -> top-k -> softmax(logits / T) ->
 *   top-p -> min-p -> one draw from a splitmix64 stream seeded by `seed`.
 *   Candidates are ordered by (logit desc, id asc), probabilities use the
 *   engine's own ms_expf and double sums, so the same logits bits and seed
 *   give the same token on every machine.
 * Does not: allocate after ms_sampler_open.
 */
#ifndef MS_SAMPLE_SAMPLE_H
#define MS_SAMPLE_SAMPLE_H

#include "moestream.h"

#endif
