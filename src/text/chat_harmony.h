/* text/chat_harmony.h - gpt-oss's chat format ("harmony"): rendering a
 * conversation to token ids, closing a generated turn, and parsing the
 * model's output back into reasoning, content and tool calls.
 *
 * Owns: the harmony renderer and parser over chat.h's data model
 *   (ms_chat_msg, ms_chat_opts, ms_chat_reply), and the table of chat formats
 *   (ms_chat_fmt) through which the engine picks XTML or harmony by family.
 *
 * Idea: a message is  <|start|>HEADER<|message|>BODY END  where END is
 *   <|end|>, <|return|> (the last answer) or <|call|> (a tool call). Segments
 *   as in chat.h: S = one special looked up by name, T = the text between two
 *   specials encoded as ONE piece with specials disabled (so user text that
 *   spells "<|start|>" stays text). This is what tokenizing the template's
 *   output string gives when no special name appears in the text. Layout
 *   (specials written by name; [..] optional):
 *
 *   system     <|start|>system<|message|>You are ChatGPT, a large language
 *              model trained by OpenAI.\nKnowledge cutoff: 2024-06\n
 *              [Current date: DATE\n]\nReasoning: EFFORT\n\n# Valid channels:
 *              analysis, commentary, final. Channel must be included for every
 *              message.[\nCalls to these tools must go to the commentary
 *              channel: 'functions'.]<|end|>
 *   developer  (when msgs[0] is a system message or tools are given)
 *              <|start|>developer<|message|>[# Instructions\n\nSYSTEM\n\n]
 *              [# Tools\n\n## functions\n\nnamespace functions {\n\n TOOLS
 *              } // namespace functions]<|end|>
 *   user       <|start|>user<|message|>CONTENT<|end|>
 *   assistant  final answer:  <|start|>assistant<|channel|>final<|message|>
 *              CONTENT<|end|>; the last message of a render without
 *              generation prompt: [<|start|>assistant<|channel|>analysis
 *              <|message|>REASONING<|end|>] then the final with <|return|>;
 *              reasoning of earlier turns is dropped, as the template does.
 *              With tool calls: unless a later assistant message without calls
 *              follows, analysis REASONING (or CONTENT when there is no
 *              reasoning; with both, CONTENT goes to a commentary message);
 *              then per call  <|start|>assistant to=functions.NAME<|channel|>
 *              commentary json<|message|>ARGS<|call|>  (ARGS verbatim; blank =
 *              "{}").
 *   tool       <|start|>functions.NAME to=assistant<|channel|>commentary
 *              <|message|>CONTENT<|end|>
 *   prompt     <|start|>assistant
 *
 *   EFFORT is low / medium / high (NONE -> medium, the template's default;
 *   MAX -> high). Later system messages become developer messages with the
 *   same "# Instructions" header. TOOLS: per tool "// DESCRIPTION\n" then
 *   "type NAME = (_: {\n" + per parameter ["// DESC\n"] NAME["?"]: TYPE
 *   [", // default: JSON"] ",\n" + "}) => any;\n\n", or "() => any;\n\n"
 *   without parameters; TYPE in the template's TypeScript-like notation.
 *
 * Parsing: the ids after the generation prompt (header already open, role
 *   assistant). Header text before <|channel|> holds the role (after a new
 *   <|start|>) and "to=RECIPIENT"; after <|channel|> the channel and maybe
 *   "to=..." and a content type; <|constrain|> introduces the content type.
 *   Bodies go by channel: analysis -> reasoning, final and commentary without
 *   recipient -> content, a recipient -> a tool call (name without the
 *   "functions." prefix, arguments the body verbatim, index = its position).
 *   <|return|>, <|call|> and <|endoftext|> end the output (later ids are
 *   ignored). Never fails on garbled input: misplaced ids are skipped with
 *   MS_CHAT_GARBLED; output that stops inside a message is MS_CHAT_TRUNCATED.
 *
 * Invariants: specials only where the layout puts them; the ids array is only
 *   appended to and *n_ids is restored on error.
 * Thread safety: reentrant. Does not: keep sessions, sample, or know about
 *   model families (the engine maps a family to a format).
 */
#ifndef MS_TEXT_CHAT_HARMONY_H
#define MS_TEXT_CHAT_HARMONY_H

#include "text/chat.h"

/* Same contracts as ms_chat_render / _append / _text (chat.h); MS_E_MODEL
 * when the tokenizer lacks <|start|>, <|end|>, <|message|>, <|channel|>,
 * <|return|> or <|call|>. */
ms_status ms_harmony_render(const ms_tok *t, const ms_chat_msg *msgs, int64_t n_msgs, const ms_chat_opts *o,
                            int32_t **ids, int64_t *n_ids, int64_t *cap, ms_err *err);
ms_status ms_harmony_render_append(const ms_tok *t, const ms_chat_msg *msgs, int64_t n_msgs,
                                   const ms_chat_opts *o, int32_t **ids, int64_t *n_ids, int64_t *cap,
                                   ms_err *err);
ms_status ms_harmony_render_text(const ms_chat_msg *msgs, int64_t n_msgs, const ms_chat_opts *o, char **out,
                                 size_t *len, ms_err *err);
ms_status ms_harmony_render_append_text(const ms_chat_msg *msgs, int64_t n_msgs, const ms_chat_opts *o,
                                        char **out, size_t *len, ms_err *err);

/* Close a generated turn (gen = ids after the generation prompt, stop id not
 * fed): inside a header <|message|><|end|>, inside a tool call's body
 * <|call|>, inside another body <|end|>; nothing after an end. `thinking` is
 * ignored (gpt-oss always reasons). */
ms_status ms_harmony_close_turn(const ms_tok *t, const int32_t *gen, int64_t n_gen, int thinking,
                                int32_t **ids, int64_t *n_ids, int64_t *cap, ms_err *err);

/* One-shot parse (see above); the caller releases *out with ms_chat_reply_free.
 * `thinking` is ignored. Errors: MS_E_MODEL (no <|start|>/<|message|>),
 * MS_E_NOMEM; *out is zeroed on error. */
ms_status ms_harmony_parse(const ms_tok *t, const int32_t *ids, int64_t n, int thinking, ms_chat_reply *out,
                           ms_err *err);

/* ---- chat formats, one per model family ---------------------------------- */

typedef struct ms_chat_fmt {
    const char *name;   /* "xtml" | "harmony" */
    ms_status (*render)(const ms_tok *, const ms_chat_msg *, int64_t, const ms_chat_opts *, int32_t **, int64_t *,
                        int64_t *, ms_err *);
    ms_status (*render_append)(const ms_tok *, const ms_chat_msg *, int64_t, const ms_chat_opts *, int32_t **,
                               int64_t *, int64_t *, ms_err *);
    ms_status (*close_turn)(const ms_tok *, const int32_t *, int64_t, int, int32_t **, int64_t *, int64_t *,
                            ms_err *);
    ms_status (*parse)(const ms_tok *, const int32_t *, int64_t, int, ms_chat_reply *, ms_err *);
    const char *stop_names[4];  /* the specials that end generation besides the
                                   model's eos_token_id (NULL-padded) */
    const char *msg_end_name;   /* the special that ends a message (prompt-cache marks) */
    ms_chat_effort default_effort;  /* when the caller names none */
} ms_chat_fmt;

extern const ms_chat_fmt ms_chat_fmt_xtml;     /* Kimi K3 (chat.h) */
extern const ms_chat_fmt ms_chat_fmt_harmony;  /* gpt-oss (this header) */

/* The stop ids of a format in this tokenizer (names it lacks are skipped,
 * duplicates dropped); returns how many were written (at most max). */
int ms_chat_fmt_stop_ids(const ms_chat_fmt *f, const ms_tok *t, int32_t *out, int max);

#endif
