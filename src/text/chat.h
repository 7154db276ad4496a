/* text/chat.h - the Kimi K3 chat format ("XTML"): rendering a conversation
 * to token ids, and parsing the model's output back into reasoning, response
 * text and tool calls.
 *
 * Owns: the conversation data model (ms_chat_msg, ms_chat_call, ms_chat_opts),
 *   the renderer (spec/kimi-k3.md section 6), incremental rendering for
 *   multi-turn sessions, closing a generated assistant turn, and the tolerant
 *   output parser (ms_chat_parser / ms_chat_parse).
 *
 * Idea: the renderer builds a list of segments, S = one special token looked
 *   up by name (ms_tok_special_id) and T = plain text encoded with specials
 *   disabled (ms_tok_encode), exactly as the spec writes them:
 *
 *     open(tag, attrs) = S<|open|> T"tag" T' k="v"' ... S<|sep|>
 *     close(tag)       = S<|close|> T"tag" S<|sep|>
 *     end              = S<|end_of_msg|>
 *
 *   Every T is encoded on its own: "tag" and each ' k="v"' attribute are
 *   separate T segments, and text is never merged across a special (nor
 *   across two T's). An empty T produces no ids. Attribute values escape
 *   '&' as "&amp;" and '"' as "&quot;" (nothing else). The readable text form
 *   (ms_chat_render_text) is the same segments concatenated, specials by name.
 *
 *   A full render is:  [tool-declare] [thinking-effort] messages [gen prompt]
 *
 *   - tool-declare (when opts.tools_json holds a non-empty array):
 *       open(message, role="system", type="tool-declare")
 *       T"# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n"
 *         + JSON + "\n```"  (one T segment)   close(message) end
 *     JSON is the tools array, every element in the OpenAI form
 *     {"type":"function","function":{...}} (a bare function object, one with
 *     "name" and no "function", is wrapped into that form), written compact
 *     (separators "," and ":", no spaces) with keys sorted by code point at
 *     every level, non-ASCII left as UTF-8, floats as Python's repr (see
 *     "JSON text" below).
 *   - thinking-effort (only when opts.thinking and opts.effort != NONE):
 *       open(message, role="system", type="thinking-effort")
 *       T"Use thinking effort: high."   (low / high / max)   close(message) end
 *   - system / user:  open(message, role=R) T content close(message) end
 *   - assistant: open(message, role="assistant")
 *       [open(think) T reasoning close(think)]          if reasoning != NULL
 *       open(response) T content close(response)         always
 *       [open(tools) calls... close(tools)]              if n_calls > 0
 *       close(message) end
 *     one call: open(call, tool=NAME, index=K) then
 *       - arguments a JSON object: per member, in the order written,
 *         open(argument, key=KEY, type=TYPE) T value close(argument), where
 *         TYPE is string|number|boolean|null|object|array of the JSON value
 *         and the value text is the string itself (unescaped UTF-8) for a
 *         string, else the compact JSON text of the value (member order as
 *         written, floats as Python repr);
 *       - arguments NULL, empty or only whitespace: the empty object, i.e.
 *         no argument segments at all;
 *       - arguments not valid JSON (including integers beyond int64, which
 *         jansson refuses): open(json, type="object") T raw close(json);
 *         valid JSON that is not an object: the same json form with
 *         type= its own type name (e.g. "array");
 *       then close(call).
 *   - tool result: open(message, role="tool", tool=NAME, index=K) T content
 *       close(message) end
 *   - generation prompt: open(message, role="assistant") then open(think) if
 *       opts.thinking else open(response). Generation stops at <|end_of_msg|>.
 *
 * Multi-turn sessions (the engine keeps its KDA/MLA state and feeds only new
 *   ids):
 *
 *     ids(turn 1)  = ms_chat_render(msgs[0..k), gen prompt on)
 *     model output = gen[]  (fed to the model, stop token NOT fed)
 *     ids(turn 2)  = ms_chat_close_turn(gen) + ms_chat_render_append(new msgs)
 *
 *   Consistency (tested):
 *     render(all) == render(first k, no gen prompt) + render_append(rest)
 *   and when the model's output gen[] is the canonical rendering of its
 *   assistant message A up to any point where only closing markup is missing,
 *     render(msgs) + gen + close_turn(gen) == render(msgs + A) (no gen prompt)
 *   (with thinking on this needs A.reasoning != NULL; with it off, == NULL,
 *   because the generation prompt already opened think resp. response).
 *   ms_chat_close_turn never re-renders what the model produced: the model's
 *   own token ids stay in the session even if they are not the canonical
 *   encoding of its text. It completes whatever markup is still open, in
 *   order: a half-written open/close tag gets its <|sep|>, then every open
 *   tag is closed innermost first, an empty open(response) close(response)
 *   is added if the message has neither a response nor tool calls, then
 *   close(message) and <|end_of_msg|>. If gen already ends with
 *   <|end_of_msg|> (the caller chose to feed the stop token) nothing is added.
 *   The preamble (tool-declare, thinking-effort) is rendered once, by
 *   ms_chat_render; changing tools or effort mid-conversation therefore needs
 *   a fresh render (and a fresh session).
 *
 * Parsing (ms_chat_parser): the ids generated after the generation prompt are
 *   read as events (text, open(tag attrs), close(tag), end) against a tag
 *   stack that starts as [message, think] (thinking) or [message, response].
 *   Text inside think goes to reasoning, inside response to content, inside
 *   argument/json to the current tool call. It is the inverse of the
 *   renderer: argument segments are re-assembled into a JSON object (typed by
 *   their type attribute, written compact in the order generated, floats as
 *   Python repr); a json segment's raw text is returned verbatim. The parser
 *   never fails on bad input: a tag in the wrong place implicitly closes what
 *   it must (open(tools) inside response closes the response), an unmatched
 *   close is ignored, an argument whose text does not parse as its type
 *   becomes a JSON string; each such repair sets MS_CHAT_GARBLED. Output cut
 *   off with tags open sets MS_CHAT_TRUNCATED and keeps what was parsed.
 *
 * JSON text: written by our own small writer over jansson values (jansson
 *   parses). jansson's JSON_COMPACT | JSON_SORT_KEYS output has the same
 *   separators (",", ":", no spaces; checked by test_chat), but it prints
 *   reals with 17 significant digits (0.1 -> 0.10000000000000001), which is
 *   not what a Python reference renderer writes and would waste the model's
 *   tokens; our writer prints the shortest round-trip repr as Python does
 *   (0.1, 1e+16, 1e-05, 100000.0). Strings are escaped as Python's
 *   json.dumps(ensure_ascii=False): \" \\ \n \r \t \b \f, other control bytes
 *   as \u00XX (lowercase hex), everything else raw.
 *
 * Invariants: ids produced by the renderer contain specials only where the
 *   spec places them; user text never yields a special id. Output arrays are
 *   only appended to, so a failed call leaves *n_ids where it was.
 * Thread safety: all functions are reentrant; a parser object belongs to one
 *   thread at a time.
 * Does not: decide context limits, keep sessions, sample, or talk HTTP; it
 *   does not drop reasoning of earlier turns (the caller passes reasoning
 *   NULL for turns whose reasoning it wants dropped).
 */
#ifndef MS_TEXT_CHAT_H
#define MS_TEXT_CHAT_H

#include "base/err.h"
#include "text/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef enum ms_chat_role {
    MS_CHAT_SYSTEM = 0,
    MS_CHAT_USER = 1,
    MS_CHAT_ASSISTANT = 2,
    MS_CHAT_TOOL = 3
} ms_chat_role;

typedef enum ms_chat_effort {
    MS_CHAT_EFFORT_NONE = 0, /* no thinking-effort message */
    MS_CHAT_EFFORT_LOW = 1,
    MS_CHAT_EFFORT_HIGH = 2,
    MS_CHAT_EFFORT_MAX = 3,
    MS_CHAT_EFFORT_MEDIUM = 4 /* harmony (gpt-oss) only; K3 refuses it */
} ms_chat_effort;

/* One tool call made by the assistant. Strings are borrowed (NUL-terminated
 * UTF-8) for the duration of the render call. */
typedef struct ms_chat_call {
    const char *name;      /* tool name; required, may not be NULL */
    const char *arguments; /* JSON text of the arguments object; NULL or blank = {} */
    int64_t index;         /* K >= 0; by convention the call's 0-based position
                              in its message; a tool result names it again */
} ms_chat_call;

/* One message. Fields not used by a role must be left NULL / 0. */
typedef struct ms_chat_msg {
    ms_chat_role role;
    const char *content;        /* UTF-8; NULL = "" */
    const char *reasoning;      /* assistant only; NULL = no think block,
                                   "" = an empty think block */
    const ms_chat_call *calls;  /* assistant only; n_calls entries */
    int64_t n_calls;
    const char *tool_name;      /* tool only (required): the tool that answered */
    int64_t tool_index;         /* tool only: K of the call answered, >= 0 */
} ms_chat_msg;

typedef struct ms_chat_opts {
    const char *tools_json;     /* NULL / "" = no tools; else a JSON array of
                                   tool definitions (OpenAI form or bare
                                   function objects) */
    int thinking;               /* 1: generation prompt opens think */
    ms_chat_effort effort;      /* used only when thinking is on */
    int add_generation_prompt;  /* 1: end with the generation prompt */
    const char *date;           /* harmony: "Current date: DATE" in the system
                                   message; NULL = no such line (K3: unused) */
} ms_chat_opts;

/* Defaults: no tools, thinking off, effort HIGH, generation prompt on.
 * No allocation. */
ms_chat_opts ms_chat_default_opts(void);

/* "system" / "user" / "assistant" / "tool" -> role; -1 for anything else. */
int ms_chat_role_from_name(const char *name);
/* "low" / "medium" / "high" / "max" -> effort; "none" -> NONE; -1 for
 * anything else. */
int ms_chat_effort_from_name(const char *name);

/* Render a whole conversation (preamble + msgs + optional generation prompt)
 * and APPEND its ids to the growable array (*ids, *n_ids, *cap) in the
 * convention of ms_tok_encode (realloc'd; the caller frees *ids with free()).
 * n_msgs may be 0. Errors: MS_E_USAGE (a message breaks the data model, the
 * tools JSON is not an array of objects, bad role / effort; the message names
 * the message index), MS_E_MODEL (the tokenizer lacks one of <|open|>,
 * <|close|>, <|sep|>, <|end_of_msg|>), MS_E_NOMEM. On error *n_ids is left
 * unchanged (the array may have been grown). Allocates; reentrant. */
ms_status ms_chat_render(const ms_tok *t, const ms_chat_msg *msgs, int64_t n_msgs,
                         const ms_chat_opts *o, int32_t **ids, int64_t *n_ids,
                         int64_t *cap, ms_err *err);

/* Render only msgs (no preamble) + the optional generation prompt, appended
 * like ms_chat_render. For a conversation rendered earlier WITHOUT generation
 * prompt: render(all) == render(first k, no gen prompt) + render_append(rest).
 * After a generated turn call ms_chat_close_turn first. Same errors. */
ms_status ms_chat_render_append(const ms_tok *t, const ms_chat_msg *msgs, int64_t n_msgs,
                                const ms_chat_opts *o, int32_t **ids, int64_t *n_ids,
                                int64_t *cap, ms_err *err);

/* The readable forms of ms_chat_render / ms_chat_render_append: the same
 * segments concatenated, specials written by name. *out is malloc'd and NUL
 * terminated (not counted in *len; len may be NULL); caller frees. Needs no
 * tokenizer. Errors: MS_E_USAGE, MS_E_NOMEM (then *out = NULL). */
ms_status ms_chat_render_text(const ms_chat_msg *msgs, int64_t n_msgs, const ms_chat_opts *o,
                              char **out, size_t *len, ms_err *err);
ms_status ms_chat_render_append_text(const ms_chat_msg *msgs, int64_t n_msgs,
                                     const ms_chat_opts *o, char **out, size_t *len,
                                     ms_err *err);

/* Close a generated assistant turn. gen[0..n_gen) are the ids the model
 * produced after the generation prompt and that were fed to it (normally
 * without the stop token); thinking says which generation prompt was used.
 * Appends the ids that complete the message (see the header comment) to
 * (*ids, *n_ids, *cap). Garbled gen never fails. Errors: MS_E_MODEL (missing
 * specials), MS_E_NOMEM. Allocates; reentrant. */
ms_status ms_chat_close_turn(const ms_tok *t, const int32_t *gen, int64_t n_gen, int thinking,
                             int32_t **ids, int64_t *n_ids, int64_t *cap, ms_err *err);

/* ---- parsing the model's output ------------------------------------------ */

/* Flags of a parse (ms_chat_reply.flags). */
enum {
    MS_CHAT_CLOSED = 1u << 0,    /* saw close(message) */
    MS_CHAT_ENDED = 1u << 1,     /* saw <|end_of_msg|> or [EOS]; later ids are ignored */
    MS_CHAT_TRUNCATED = 1u << 2, /* (after finish) output stopped with markup open;
                                    with ENDED: <|end_of_msg|> came before the closes */
    MS_CHAT_GARBLED = 1u << 3    /* something was repaired or skipped */
};

typedef struct ms_chat_call_out {
    char *name;        /* malloc'd, NUL terminated; "" when the tool attribute was missing */
    int64_t index;     /* the index attribute; -1 when missing or not a number */
    char *arguments;   /* JSON text (malloc'd); NULL while the call is still open,
                          always set after finish */
    int complete;      /* 1: close(call) was seen */
} ms_chat_call_out;

typedef struct ms_chat_reply {
    char *reasoning;           /* malloc'd, NUL terminated, reasoning_len bytes */
    size_t reasoning_len;
    int has_reasoning;         /* a think block was open at some point */
    char *content;             /* malloc'd, NUL terminated, content_len bytes */
    size_t content_len;
    ms_chat_call_out *calls;   /* n_calls entries, in order of appearance */
    int64_t n_calls;
    unsigned flags;            /* MS_CHAT_* */
} ms_chat_reply;

typedef struct ms_chat_parser ms_chat_parser;

/* New incremental parser; thinking = which generation prompt preceded the
 * ids. Errors: MS_E_MODEL (missing specials), MS_E_NOMEM. */
ms_status ms_chat_parser_new(const ms_tok *t, int thinking, ms_chat_parser **out, ms_err *err);
/* Free the parser and its reply (NULL is a no-op). */
void ms_chat_parser_free(ms_chat_parser *p);

/* Feed more generated ids. Never fails on content (unknown ids, bad markup
 * are skipped and flagged); errors: MS_E_NOMEM only, after which the parser
 * ignores further input. reasoning/content only grow, so a streaming caller
 * can send the bytes past the lengths it saw last time. */
ms_status ms_chat_parser_feed(ms_chat_parser *p, const int32_t *ids, int64_t n, ms_err *err);

/* The reply parsed so far (owned by the parser; valid until the next feed /
 * finish / free). */
const ms_chat_reply *ms_chat_parser_reply(const ms_chat_parser *p);

/* End of input: finalise open tool calls from what was parsed and set
 * MS_CHAT_TRUNCATED if markup was left open. Errors: MS_E_NOMEM. */
ms_status ms_chat_parser_finish(ms_chat_parser *p, ms_err *err);

/* One-shot parse: new + feed + finish; on success the caller owns *out and
 * releases it with ms_chat_reply_free. On error *out is zeroed. */
ms_status ms_chat_parse(const ms_tok *t, const int32_t *ids, int64_t n, int thinking,
                        ms_chat_reply *out, ms_err *err);
/* Free what ms_chat_parse returned and zero *r (NULL is a no-op). */
void ms_chat_reply_free(ms_chat_reply *r);

/* ---- JSON text (exposed for the server and tests) ------------------------- */

/* Parse `text` (n bytes) and write it back compact: keys sorted when
 * sort_keys, floats as Python repr, strings as described above. *out is
 * malloc'd, NUL terminated. Errors: MS_E_USAGE (not valid JSON; the message
 * says where), MS_E_NOMEM. */
ms_status ms_chat_json_normalize(const char *text, size_t n, int sort_keys, char **out,
                                 ms_err *err);

#endif
