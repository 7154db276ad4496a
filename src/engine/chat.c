/* engine/chat.c - the public chat API: maps public messages onto
 * text/chat.h's data model and back, through the chat format of the model's
 * family (ms_engine_chat_fmt: K3's XTML, gpt-oss's harmony). Owns no state
 * beyond the ids computed at open (message end, stop ids). */
#include "engine/engine_int.h"

#include "text/chat.h"
#include "text/chat_harmony.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ms_status no_tok(char *errbuf, size_t n) {
    if (errbuf && n) snprintf(errbuf, n, "this model ships no tokenizer (tiktoken.model or tokenizer.json)");
    return MS_E_USAGE;
}

/* A third family is one more case here. */
const ms_chat_fmt *ms_engine_chat_fmt(const ms_engine *e) {
    switch (e->cfg.family) {
    case MS_FAMILY_GPT_OSS: return &ms_chat_fmt_harmony;
    case MS_FAMILY_K3: break;
    }
    return &ms_chat_fmt_xtml;
}

void ms_engine_text_ids(ms_engine *e) {
    const ms_chat_fmt *f = ms_engine_chat_fmt(e);
    e->eom_id = e->tok ? ms_tok_special_id(e->tok, f->msg_end_name) : -1;
    e->n_stop_ids = 0;
    if (e->cfg.eos_token_id >= 0 && e->cfg.eos_token_id < e->cfg.vocab_size)
        e->stop_ids[e->n_stop_ids++] = (int32_t)e->cfg.eos_token_id;
    if (e->tok) {
        int32_t more[4];
        const int n = ms_chat_fmt_stop_ids(f, e->tok, more, 4);
        for (int i = 0; i < n; i++) {
            int dup = 0;
            for (int k = 0; k < e->n_stop_ids; k++) dup |= e->stop_ids[k] == more[i];
            if (!dup) e->stop_ids[e->n_stop_ids++] = more[i];
        }
    }
}

int ms_stop_ids(const ms_engine *e, int32_t *ids, int max) {
    int n = 0;
    for (int i = 0; i < e->n_stop_ids && n < max; i++) ids[n++] = e->stop_ids[i];
    return n;
}

const char *ms_chat_format_name(const ms_engine *e) { return ms_engine_chat_fmt(e)->name; }

int ms_is_stop(const ms_engine *e, int32_t id) {
    for (int i = 0; i < e->n_stop_ids; i++)
        if (e->stop_ids[i] == id) return 1;
    return 0;
}

ms_status ms_chat_tokens(const ms_engine *e, const ms_message *msgs, int64_t n,
                         const ms_chat_format *f, int append, int32_t **ids, int64_t *n_ids,
                         char *errbuf, size_t errbuf_len) {
    *ids = NULL;
    *n_ids = 0;
    if (!e->tok) return no_tok(errbuf, errbuf_len);
    ms_err err;
    ms_err_clear(&err);
    ms_chat_msg *m = calloc((size_t)(n > 0 ? n : 1), sizeof *m);
    int64_t n_calls = 0;
    for (int64_t i = 0; i < n; i++) n_calls += msgs[i].n_tool_calls;
    ms_chat_call *calls = calloc((size_t)(n_calls > 0 ? n_calls : 1), sizeof *calls);
    if (!m || !calls) { free(m); free(calls); return MS_E_NOMEM; }
    ms_status st = MS_OK;
    int64_t at = 0;
    for (int64_t i = 0; i < n && st == MS_OK; i++) {
        int role = msgs[i].role ? ms_chat_role_from_name(msgs[i].role) : -1;
        if (role < 0) { st = ms_err_set(&err, MS_E_USAGE, "message %lld: unknown role '%s'", (long long)i, msgs[i].role ? msgs[i].role : "(none)"); break; }
        m[i].role = (ms_chat_role)role;
        m[i].content = msgs[i].content;
        m[i].reasoning = msgs[i].reasoning;
        m[i].tool_name = msgs[i].tool_name;
        m[i].tool_index = msgs[i].tool_index;
        m[i].calls = calls + at;
        m[i].n_calls = msgs[i].n_tool_calls;
        for (int64_t j = 0; j < msgs[i].n_tool_calls; j++, at++) {
            calls[at].name = msgs[i].tool_calls[j].name;
            calls[at].arguments = msgs[i].tool_calls[j].arguments;
            calls[at].index = msgs[i].tool_calls[j].index;
        }
    }
    const ms_chat_fmt *fmt = ms_engine_chat_fmt(e);
    ms_chat_opts o = ms_chat_default_opts();
    o.effort = fmt->default_effort;
    if (f) {
        o.tools_json = f->tools_json;
        o.thinking = f->thinking;
        o.add_generation_prompt = f->add_generation_prompt;
        if (f->effort && f->effort[0]) {
            int ef = ms_chat_effort_from_name(f->effort);
            if (ef < 0 && st == MS_OK) st = ms_err_set(&err, MS_E_USAGE, "unknown reasoning effort '%s' (low, high, max; "
                                                       "gpt-oss: low, medium, high)", f->effort);
            else o.effort = (ms_chat_effort)ef;
        }
    }
    int64_t cap = 0;
    if (st == MS_OK)
        st = append ? fmt->render_append(e->tok, m, n, &o, ids, n_ids, &cap, &err)
                    : fmt->render(e->tok, m, n, &o, ids, n_ids, &cap, &err);
    free(m);
    free(calls);
    if (st != MS_OK) {
        free(*ids);
        *ids = NULL;
        *n_ids = 0;
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "%s", err.msg);
    }
    return st;
}

ms_status ms_chat_close(const ms_engine *e, const int32_t *gen, int64_t n_gen, int thinking,
                        int32_t **ids, int64_t *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    if (!e->tok) return MS_E_USAGE;
    ms_err err;
    ms_err_clear(&err);
    int64_t cap = 0;
    return ms_engine_chat_fmt(e)->close_turn(e->tok, gen, n_gen, thinking, ids, n_ids, &cap, &err);
}

ms_status ms_chat_parse_reply(const ms_engine *e, const int32_t *ids, int64_t n, int thinking,
                              ms_reply *out) {
    memset(out, 0, sizeof *out);
    if (!e->tok) return MS_E_USAGE;
    ms_err err;
    ms_err_clear(&err);
    ms_chat_reply r;
    ms_status st = ms_engine_chat_fmt(e)->parse(e->tok, ids, n, thinking, &r, &err);
    if (st != MS_OK) return st;
    out->reasoning = r.reasoning ? r.reasoning : strdup("");
    out->content = r.content ? r.content : strdup("");
    r.reasoning = r.content = NULL;
    out->truncated = (r.flags & MS_CHAT_TRUNCATED) != 0;
    if (r.n_calls > 0) {
        out->tool_calls = calloc((size_t)r.n_calls, sizeof *out->tool_calls);
        if (out->tool_calls) {
            out->n_tool_calls = r.n_calls;
            for (int64_t i = 0; i < r.n_calls; i++) {
                out->tool_calls[i].name = r.calls[i].name;
                out->tool_calls[i].arguments = r.calls[i].arguments ? r.calls[i].arguments : strdup("{}");
                out->tool_calls[i].index = r.calls[i].index;
                r.calls[i].name = NULL;
                r.calls[i].arguments = NULL;
            }
        }
    }
    ms_chat_reply_free(&r);
    return MS_OK;
}

void ms_reply_free(ms_reply *r) {
    if (!r) return;
    free(r->reasoning);
    free(r->content);
    for (int64_t i = 0; i < r->n_tool_calls; i++) {
        free((char *)r->tool_calls[i].name);
        free((char *)r->tool_calls[i].arguments);
    }
    free(r->tool_calls);
    memset(r, 0, sizeof *r);
}
