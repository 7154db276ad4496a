/* text/chat_harmony_int.h - what the harmony files share (chat_harmony.h).
 *
 * Owns: the special-token indices and names, the sink of the renderer
 *   (chat_harmony.c) and the parser state that the parser and
 *   ms_harmony_close_turn use (chat_harmony_parse.c).
 * Invariants: a sink's status is sticky; pend holds the text since the last
 *   special (encoded as one piece when the next special comes).
 * Does not: leave text/ (included only by the harmony files).
 */
#ifndef MS_TEXT_CHAT_HARMONY_INT_H
#define MS_TEXT_CHAT_HARMONY_INT_H

#include "text/chat_harmony.h"
#include "text/chat_int.h"

/* The first H_N_RENDER are required to render; the rest only parse. */
enum { H_START, H_END, H_MESSAGE, H_CHANNEL, H_RETURN, H_CALL, H_CONSTRAIN, H_ENDOFTEXT, H_N };
enum { H_N_RENDER = H_CONSTRAIN };
extern const char *const harmony_sp_name[H_N];

/* Ids of the specials (-1 for the optional ones the tokenizer lacks);
 * MS_E_MODEL naming the first of the n_required it lacks. */
ms_status harmony_lookup(const ms_tok *t, int32_t sp[H_N], int n_required, ms_err *err);

typedef struct hsink {
    const ms_tok *tok;      /* NULL: text mode */
    int32_t sp[H_N];
    int32_t **ids;
    int64_t *n_ids, *cap;
    strbuf txt;             /* text mode output */
    strbuf pend;            /* text since the last special */
    ms_err *err;
    ms_status st;
} hsink;

/* Flush the pending text, then one special (its id, or its name). */
void harmony_emit_s(hsink *s, int which);

#endif
