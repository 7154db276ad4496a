/* text/tokenizer.h - byte-level BPE tokenizers in tiktoken's sense: Kimi K3's
 *   (tiktoken.model) and gpt-oss's o200k_harmony (a Hugging Face
 *   tokenizer.json whose merges follow the token ids).
 *
 * Owns: loading tiktoken.model (base64(bytes) SPACE rank per line) and the
 *   special tokens of tokenizer_config.json (added_tokens_decoder), or a
 *   tokenizer.json (vocab, merges, Split regex, added_tokens); the
 *   pre-tokenizer regular expression (PCRE2: K3's, spec section 5, or the
 *   file's), BPE merging by rank, and decoding ids back to bytes.
 * Idea: text is split by the pre-tokenizer, each piece is BPE-merged
 *   separately (lowest-rank adjacent pair first); keys are raw bytes.
 *   ms_tok_encode never produces special tokens: a user typing "<|open|>" gets
 *   ordinary tokens. Special tokens are looked up by name and emitted by the
 *   chat renderer only.
 * Invariants: decode(encode(b)) == b for every byte string b, including
 *   invalid UTF-8 (for a tokenizer.json whose Split drops unmatched text:
 *   every b its pattern leaves no character of unmatched, which holds for
 *   o200k's); ids of specials are >= n_ranks; every id < n_vocab decodes.
 * Thread safety: a loaded tokenizer is read-only; encode/decode may run
 *   concurrently (each call uses its own match data / scratch).
 */
#ifndef MS_TEXT_TOKENIZER_H
#define MS_TEXT_TOKENIZER_H

#include "base/err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ms_tok ms_tok;

/* Which tokenizer file a model directory holds. The rule: tiktoken.model
 * when it exists (then tokenizer_config.json is needed too), else
 * tokenizer.json (Hugging Face, byte-level BPE; specials from its
 * added_tokens), else none. Existence only: whether the file is readable and
 * sane is ms_tok_load's business. */
typedef enum ms_tok_kind { MS_TOK_NONE = 0, MS_TOK_TIKTOKEN = 1, MS_TOK_HF_JSON = 2 } ms_tok_kind;
ms_tok_kind ms_tok_find(const char *model_dir);
/* 1 when DIR_A and DIR_B hold the same kind of tokenizer in files of the same
 * bytes (both none included), so that ms_tok_load gives both the same
 * tokenizer for the same n_vocab; 0 otherwise or when a file cannot be read.
 * Reads the files (tens of MB at most), parses nothing. */
int ms_tok_same_files(const char *dir_a, const char *dir_b);

/* Load the tokenizer of MODEL_DIR chosen by ms_tok_find: tiktoken.model +
 * tokenizer_config.json, or tokenizer.json (docs/TOKENIZER.md).
 * n_vocab: the model's vocab size (ids >= n_vocab are refused; ids without a
 * name in [n_ranks, n_vocab) are "<|reserved_token_{id}|>"). */
ms_status ms_tok_load(const char *model_dir, int64_t n_vocab, ms_tok **out, ms_err *err);
/* Load from memory (for tests and fuzzing): tiktoken text and tokenizer_config
 * JSON text (may be NULL). */
ms_status ms_tok_load_mem(const char *ranks_text, size_t ranks_len,
                          const char *config_json, size_t config_len,
                          int64_t n_vocab, ms_tok **out, ms_err *err);
/* Load a Hugging Face tokenizer.json from memory (tests, fuzzing). The file
 * is untrusted: every problem is MS_E_MODEL with a message naming
 * tokenizer.json and what was expected (docs/TOKENIZER.md). */
ms_status ms_tok_load_hf_mem(const char *json, size_t len, int64_t n_vocab, ms_tok **out, ms_err *err);
void ms_tok_free(ms_tok *t);

int64_t ms_tok_n_vocab(const ms_tok *t);
/* The bytes the tokenizer holds (its tables, names and compiled pattern): what
 * the memory plan counts for it (engine/plan.c). */
int64_t ms_tok_bytes(const ms_tok *t);

/* Encode bytes (any bytes; invalid UTF-8 allowed) with specials disabled.
 * Appends to a growable array: *ids (realloc'd, caller frees with free()),
 * *n_ids (in/out count), *cap (in/out capacity). */
ms_status ms_tok_encode(const ms_tok *t, const char *text, size_t len,
                        int32_t **ids, int64_t *n_ids, int64_t *cap, ms_err *err);

/* The bytes of one token (special tokens: their name, e.g. "<|open|>").
 * Returns the length, sets *bytes (owned by the tokenizer); -1 for a bad id. */
int64_t ms_tok_token_bytes(const ms_tok *t, int32_t id, const char **bytes);

/* Is `id` a special token (id >= number of BPE ranks)? */
int ms_tok_is_special(const ms_tok *t, int32_t id);

/* Id of a special token by its content, e.g. "<|end_of_msg|>"; -1 if none. */
int32_t ms_tok_special_id(const ms_tok *t, const char *name);

/* Decode ids to bytes (specials rendered by name). *out is malloc'd, NUL
 * terminated (not counted in *len); caller frees. */
ms_status ms_tok_decode(const ms_tok *t, const int32_t *ids, int64_t n,
                        char **out, size_t *len, ms_err *err);

#endif
