#!/usr/bin/env python3
"""tests/server/oss_structured.py - response_format and tool calls on a
gpt-oss model (chat format harmony; docs/SERVER.md, "gpt-oss (harmony)"),
against a running server.

Usage: oss_structured.py URL MODEL_NAME MODEL_DIR SCHEMAS.jsonl TOOLS.jsonl [URL_OTHER]

URL_OTHER: the same model served with other knobs (t_oss_serve.sh: --parallel 2
--speculate 4 --ram min), which must give the same bytes.

The tiny test model writes its analysis channel until max_tokens unless told
to close it: most requests carry logit_bias on <|end|> (the analysis ends after
a few tokens, or at once with +100); inside the final / call message the mask
leaves <|end|> out, so the bias does not reach the JSON. Checks:
- response_format json_object and json_schema (schemas of the corpus, several
  seeds): every reply that ends with "stop" has content that parses as JSON
  and validates (tests/schema/check.py, written apart from the C matcher);
  enough of them end so; some carry reasoning (analysis first) and some not;
- tool_choice a named function and "required" (one tool, several tools) over
  the tool corpus: every reply that ends with "tool_calls" carries exactly one
  call, of the named tool or one of the tools, whose arguments validate
  against its parameters; "required" with several tools picks more than one
  of them over the seeds;
- streamed = not streamed (reasoning, content, calls, finish, usage), and the
  same request twice gives the same bytes (greedy and seeded);
- max_tokens inside a call's header or arguments: "length", no call, streamed
  or not; completion_tokens == max_tokens;
- tool_choice "auto" (the tiny model opens calls when logit_bias nudges " to"
  and "="): over the tool corpus and 4 seeds every call presented names one of
  the tools and its arguments validate; a reply with a call ends "tool_calls"
  with that one call; at least 10 replies present one and at least 5 tools
  get called (the constraint is exercised); streamed = not streamed; cut by
  max_tokens inside a call's arguments: "length", no call;
- tool_choice "none", nudged the same way: no call is presented;
- a call sent back with its tool result continues the conversation (200);
  one in the renderer's header form is read on from the kept state;
- at URL_OTHER: the same choices, and n = 2 gives the choices of seed and
  seed + 1 sent alone ("required", json_schema and "auto");
- what stays refused: response_format with a forced tool_choice, a tool
  parameter keyword outside the subset ('pattern'), a tool name a harmony
  header cannot carry.
Prints "oss_structured: N passed, N failed"."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schema"))
from check import validate  # noqa: E402
from chatapi import Tally, fold_stream, post_chat  # noqa: E402

URL, MODEL, MODEL_DIR, SCHEMAS, TOOLS = sys.argv[1:6]
URL2 = sys.argv[6] if len(sys.argv) > 6 else None
NO_PARAMS = {"type": "object", "properties": {}, "additionalProperties": False}
T = Tally()
ok = T.ok


def post(body, url=None):
    return post_chat(url or URL, body)


def stream(body):
    """The streamed reply folded: status, finish, reasoning, content, calls, usage."""
    status, raw = post(dict(body, stream=True, stream_options={"include_usage": True}))
    return (status,) + fold_stream(raw)


def special_id(name):
    tok = json.load(open(os.path.join(MODEL_DIR, "tokenizer.json")))
    return next(a["id"] for a in tok["added_tokens"] if a["content"] == name)


def parse_strict(text):
    return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))


def calls_of(msg):
    return [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in msg.get("tool_calls") or []]


def same_streamed(body, d, where):
    """The streamed reply folds to the non-streamed one."""
    c = d["choices"][0]
    m = c["message"]
    st, finish, reasoning, content, calls, usage = stream(body)
    ok(st == 200 and finish == c["finish_reason"] and content == (m.get("content") or "")
       and reasoning == (m.get("reasoning_content") or "") and calls == calls_of(m)
       and usage and usage["completion_tokens"] == d["usage"]["completion_tokens"],
       f"{where}: streamed {finish} {content!r} {calls} != {c['finish_reason']} {m.get('content')!r} {calls_of(m)}")


def check_json(END):
    schemas = [json.loads(line) for line in open(SCHEMAS) if line.strip()]
    msgs = [{"role": "user", "content": "Answer in JSON."}]
    ended = with_reasoning = direct = 0
    for k in (0, 1, 2, 6, 9, 13, 17, 18, 28, 31):
        for seed, bias in ((1, 100), (2, 6), (3, 3)):
            rf = {"type": "json_object"} if k == 0 else \
                 {"type": "json_schema", "json_schema": {"name": "t", "strict": True, "schema": schemas[k]}}
            schema = {"type": "object"} if k == 0 else schemas[k]
            body = {"model": MODEL, "messages": msgs, "response_format": rf, "seed": seed, "temperature": 0.9,
                    "max_tokens": 320, "logit_bias": {str(END): bias}}
            where = f"schema {k} seed {seed}"
            st, d = post(body)
            if not ok(st == 200, f"{where}: status {st} {str(d)[:300]}"):
                continue
            c = d["choices"][0]
            ok(d["usage"]["completion_tokens"] <= 320, f"{where}: completion_tokens {d['usage']}")
            ok(c["finish_reason"] in ("stop", "length") and not c["message"].get("tool_calls"),
               f"{where}: finish {c['finish_reason']}")
            if c["finish_reason"] == "stop":
                ended += 1
                text = c["message"]["content"] or ""
                try:
                    validate(schema, parse_strict(text), schema)
                    ok(True, "")
                except ValueError as e:
                    ok(False, f"{where}: content does not validate: {e}: {text[:200]!r}")
                u = d["usage"]
                n_reason = u["completion_tokens_details"]["reasoning_tokens"]
                if c["message"].get("reasoning_content"):
                    with_reasoning += 1
                    ok(0 < n_reason < u["completion_tokens"], f"{where}: reasoning_tokens {n_reason} of {u}")
                else:
                    direct += 1
            elif c["message"].get("reasoning_content") and not c["message"].get("content"):
                u = d["usage"]        # cut in the analysis (all tokens are reasoning) or the header after it
                ok(0 < u["completion_tokens_details"]["reasoning_tokens"] <= u["completion_tokens"], f"{where}: {u}")
            if seed == 1 or k == 13:
                same_streamed(body, d, where)
    print(f"oss_structured: {ended} of 30 json replies ended ({with_reasoning} after an analysis, "
          f"{direct} without one)")
    ok(ended >= 15, f"only {ended} of 30 json replies ended inside max_tokens")
    ok(with_reasoning > 0, "no json reply came after a non-empty analysis")


def validate_calls(tools, names, calls, where):
    """Each call names one of names (tools' names) and its arguments validate
    against that tool's parameters. The number of calls that do."""
    by_name = {t["function"]["name"]: t["function"].get("parameters") or NO_PARAMS for t in tools}
    good = 0
    for call in calls:
        if not ok(call["name"] in names, f"{where}: call of {call['name']!r}, allowed {names}"):
            continue
        try:
            p = by_name[call["name"]]
            validate(p, parse_strict(call["arguments"]), p)
            good += ok(True, "")
        except ValueError as e:
            ok(False, f"{where}: arguments of {call['name']} do not validate: {e}: {call['arguments'][:200]!r}")
    return good


def check_reply_calls(tools, names, d, maxt, where):
    c = d["choices"][0]
    calls = calls_of(c["message"])
    ok(d["usage"]["completion_tokens"] <= maxt, f"{where}: completion_tokens {d['usage']}")
    ok(c["finish_reason"] in ("length", "tool_calls"), f"{where}: finish {c['finish_reason']}")
    ok((c["finish_reason"] == "tool_calls") == (len(calls) == 1), f"{where}: {c['finish_reason']} with {calls}")
    validate_calls(tools, names, calls, where)
    return calls


def check_tools(END):
    sets = [json.loads(line) for line in open(TOOLS) if line.strip()]
    msgs = [{"role": "user", "content": "Use a tool."}]
    n_calls = {"named": 0, "required": 0}
    picked = set()
    for i, tools in enumerate(sets):
        all_names = [t["function"]["name"] for t in tools]
        for mode, seeds in (("named", (1,)), ("required", (2, 3, 4))):
            for seed in seeds:
                choice = "required"
                names = all_names
                if mode == "named":
                    names = [all_names[-1]]
                    choice = {"type": "function", "function": {"name": names[0]}}
                body = {"model": MODEL, "messages": msgs, "tools": tools, "tool_choice": choice, "seed": seed,
                        "temperature": 0.9, "max_tokens": 200, "logit_bias": {str(END): 100 if seed % 2 else 5}}
                where = f"tools {i} {mode} seed {seed}"
                st, d = post(body)
                if not ok(st == 200, f"{where}: status {st} {str(d)[:300]}"):
                    continue
                calls = check_reply_calls(tools, names, d, 200, where)
                n_calls[mode] += len(calls)
                if len(all_names) > 1 and mode == "required":
                    picked.update(c["name"] for c in calls)
                if seed in (1, 2):
                    same_streamed(body, d, where)
    print(f"oss_structured: calls presented (all validated): {n_calls}; required with several tools picked {sorted(picked)}")
    for mode, n in n_calls.items():
        ok(n >= 5, f"only {n} {mode} runs presented a complete call")
    ok(len(picked) >= 2, f"tool_choice required with several tools always picked {sorted(picked)}")
    return sets


def check_length(sets, END):
    """Cut at 1, 3, half and all but one of a complete call's tokens: the last
    cut is inside the arguments (before <|call|>), the first ones in the header."""
    msgs = [{"role": "user", "content": "Use a tool."}]
    for choice in ({"type": "function", "function": {"name": "add"}}, "required"):
        body = {"model": MODEL, "messages": msgs, "tools": sets[0] if choice != "required" else sets[6],
                "tool_choice": choice, "seed": 1, "temperature": 0, "max_tokens": 300, "logit_bias": {str(END): 100}}
        st, d = post(body)
        full = d["usage"]["completion_tokens"] if st == 200 else 0
        if not ok(st == 200 and d["choices"][0]["finish_reason"] == "tool_calls" and full > 8,
                  f"max_tokens: the whole call: {st} {str(d)[:300]}"):
            continue
        for mt in (1, 3, full // 2, full - 1):
            cut_presents_none(dict(body, max_tokens=mt),
                              f"max_tokens {mt} of {full} {'named' if choice != 'required' else 'required'}")


def cut_presents_none(body, where):
    """body's reply, cut by its max_tokens inside a call: "length", no call,
    completion_tokens == max_tokens, streamed or not."""
    mt = body["max_tokens"]
    st, d = post(body)
    if not ok(st == 200, f"{where}: status {st} {str(d)[:300]}"):
        return
    c = d["choices"][0]
    ok(c["finish_reason"] == "length" and not c["message"].get("tool_calls")
       and d["usage"]["completion_tokens"] == mt, f"{where}: {c} {d['usage']}")
    sst, sfinish, _, _, scalls, usage = stream(body)
    ok(sst == 200 and sfinish == "length" and scalls == [] and usage and usage["completion_tokens"] == mt,
       f"{where}: streamed {sfinish} {scalls} {usage}")


def choices(d):
    out = json.loads(json.dumps(d.get("choices")))
    for c in out or []:
        for tc in c["message"].get("tool_calls") or []:
            tc.pop("id", None)
    return out


def check_bits(sets, END):
    msgs = [{"role": "user", "content": "Use a tool."}]
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    nudge = {str(vocab_id(" to")): 10, str(vocab_id("=")): 10, str(END): 3}     # "auto": calls get opened
    for temp, seed in ((0, 1), (0.9, 7), (0.9, 3)):
        for extra in ({"tools": sets[6], "tool_choice": "required"},
                      {"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}},
                      {"tools": sets[6], "tool_choice": "auto", "logit_bias": nudge}):
            body = dict({"model": MODEL, "messages": msgs, "seed": seed, "temperature": temp, "max_tokens": 120,
                         "logit_bias": {str(END): 8}}, **extra)
            a, b = choices(post(body)[1]), choices(post(body)[1])
            ok(a and a == b, f"bits temperature {temp} {list(extra)}: a second request differs: {a} {b}")
            if not URL2:
                continue
            o = choices(post(body, URL2)[1])
            ok(o == a, f"bits temperature {temp} {list(extra)}: other knobs differ: {o} {a}")
            two = choices(post(dict(body, n=2), URL2)[1])
            alone = choices(post(dict(body, seed=seed + 1))[1])
            for c in two or []:
                c.pop("index", None)
            for c in a + alone:
                c.pop("index", None)
            ok(two == a + alone, f"bits temperature {temp} {list(extra)}: n = 2 {two} != alone {a + alone}")


def check_follow_up(sets, END):
    """The forced call sent back with its result: the conversation goes on."""
    tools = sets[0]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Add 2 and 3."}], "tools": tools,
            "tool_choice": "required", "seed": 5, "temperature": 0.9, "max_tokens": 200,
            "logit_bias": {str(END): 100}}
    st, d = post(body)
    m = d["choices"][0]["message"] if st == 200 else {}
    if not ok(st == 200 and m.get("tool_calls"), f"follow-up: the first request: {st} {str(d)[:300]}"):
        return
    msgs = body["messages"] + [m, {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": "5"}]
    st, d2 = post({"model": MODEL, "messages": msgs, "tools": tools, "max_tokens": 8, "temperature": 0})
    ok(st == 200 and d2["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls"),
       f"follow-up with the tool result: {st} {str(d2)[:300]}")
    st, d3 = post({"model": MODEL, "messages": msgs, "tools": tools, "tool_choice": "required", "max_tokens": 200,
                   "temperature": 0, "logit_bias": {str(END): 100}})
    ok(st == 200 and d3["choices"][0]["finish_reason"] in ("length", "tool_calls"),
       f"follow-up, a second forced call: {st} {str(d3)[:300]}")


def vocab_id(text):
    """The id of one ordinary token by its bytes (tokenizer.json's byte-level names)."""
    names = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra = 0
    char = {}
    for b in range(256):
        if b in names:
            char[b] = chr(b)
        else:
            char[b] = chr(256 + extra)
            extra += 1
    tok = json.load(open(os.path.join(MODEL_DIR, "tokenizer.json")))
    return tok["model"]["vocab"]["".join(char[b] for b in text.encode())]


def check_reuse():
    """A call in the renderer's header form, sent back as returned: the follow-up
    reads on from the kept state (everything but the <|call|> the reply stopped on).
    The nudge: the first header takes " to" (the renderer's form at once, no
    analysis) and the arguments of a tool without parameters get no white space."""
    tools = [{"type": "function", "function": {"name": "get_time"}}]
    msgs = [{"role": "user", "content": "Time?"}]
    bias = {str(vocab_id(" to")): 100}
    for w in (" ", "\n", "\t", "\r"):
        bias[str(vocab_id(w))] = -100
    st, d = post({"model": MODEL, "messages": msgs, "tools": tools, "tool_choice": "required", "max_tokens": 100,
                  "temperature": 0, "logit_bias": bias})
    m = d["choices"][0]["message"] if st == 200 else {}
    if not ok(st == 200 and [c["function"] for c in m.get("tool_calls") or []] == [{"name": "get_time", "arguments": "{}"}],
              f"reuse: the call: {st} {str(d)[:300]}"):
        return
    msgs = msgs + [m, {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": "noon"}]
    st, d2 = post({"model": MODEL, "messages": msgs, "tools": tools, "max_tokens": 4, "temperature": 0})
    u = d["usage"]
    want = u["prompt_tokens"] + u["completion_tokens"] - 1
    ok(st == 200 and d2["usage"]["prompt_tokens_details"]["cached_tokens"] == want,
       f"reuse: the follow-up read {str(d2.get('usage'))} (want {want} cached)")


def auto_body(tools, seed, bias, to_id, eq_id, END, maxt=160, temperature=0.9):
    """tool_choice "auto": the tiny model opens a call ("to=" in a header) only
    when " to" and "=" are nudged; what it writes after "to=" is its own, under
    the mask."""
    return {"model": MODEL, "messages": [{"role": "user", "content": "Use a tool."}], "tools": tools,
            "tool_choice": "auto", "seed": seed, "temperature": temperature, "max_tokens": maxt,
            "logit_bias": {str(to_id): bias[0], str(eq_id): bias[1], str(END): 3}}


def check_auto(sets, END):
    """Every call an "auto" reply presents names one of the tools and its
    arguments validate; a reply with a call ends "tool_calls" with exactly that
    one; enough replies present calls (the constraint is exercised) and more
    than one tool gets called; streamed = not streamed. Returns a body whose
    reply presents a call (for the max_tokens cuts)."""
    to_id, eq_id = vocab_id(" to"), vocab_id("=")
    n_calls = n_replies = 0
    called = set()
    with_call = None
    for i, tools in enumerate(sets):
        names = [t["function"]["name"] for t in tools]
        for seed, bias in ((1, (10, 10)), (2, (6, 8)), (3, (10, 10)), (4, (6, 8))):
            body = auto_body(tools, seed, bias, to_id, eq_id, END)
            where = f"auto tools {i} seed {seed}"
            st, d = post(body)
            if not ok(st == 200, f"{where}: status {st} {str(d)[:300]}"):
                continue
            n_replies += 1
            c = d["choices"][0]
            calls = calls_of(c["message"])
            ok(d["usage"]["completion_tokens"] <= 160, f"{where}: completion_tokens {d['usage']}")
            ok((c["finish_reason"] == "tool_calls") == (len(calls) == 1) and len(calls) <= 1,
               f"{where}: {c['finish_reason']} with {calls}")
            good = validate_calls(tools, names, calls, where)
            n_calls += good
            called.update(c["name"] for c in calls if c["name"] in names)
            if good and with_call is None and d["usage"]["completion_tokens"] > 20:
                with_call = (body, d["usage"]["completion_tokens"])
            if seed in (1, 2):
                same_streamed(body, d, where)
    print(f"oss_structured: auto: {n_calls} of {n_replies} replies presented a call (all validated), "
          f"tools called {sorted(called)}")
    ok(n_calls >= 10, f"auto: only {n_calls} replies presented a call: the constraint was hardly exercised")
    ok(len(called) >= 5, f"auto: calls of {sorted(called)} only")
    return with_call


def check_auto_length(with_call):
    """max_tokens inside an "auto" call's arguments (the last tokens before
    its <|call|>): "length", no call, streamed or not."""
    if not ok(with_call is not None, "auto: no reply with a call to cut"):
        return
    body, full = with_call
    for mt in (full - 1, full - 3):
        cut_presents_none(dict(body, max_tokens=mt), f"auto max_tokens {mt} of {full}")


def check_none(sets, END):
    """tool_choice "none": the tools are left out and a call the model writes
    anyway (nudged as for "auto") is not presented, streamed or not."""
    to_id, eq_id = vocab_id(" to"), vocab_id("=")
    for i in (0, 3, 6, 9):
        for seed, bias in ((1, (10, 10)), (2, (6, 8)), (3, (10, 10)), (4, (6, 8))):
            body = dict(auto_body(sets[i], seed, bias, to_id, eq_id, END), tool_choice="none")
            where = f"none tools {i} seed {seed}"
            st, d = post(body)
            if not ok(st == 200, f"{where}: status {st} {str(d)[:300]}"):
                continue
            c = d["choices"][0]
            ok(not c["message"].get("tool_calls") and c["finish_reason"] in ("stop", "length"),
               f"{where}: {c['finish_reason']} with {calls_of(c['message'])}")
            if seed == 4:
                same_streamed(body, d, where)


def check_refusals(sets):
    msgs = [{"role": "user", "content": "x"}]
    bad = [{"type": "function", "function": {"name": "z", "parameters": {
        "type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]+$"}}}}}]
    st, d = post({"model": MODEL, "messages": msgs, "tools": bad, "tool_choice": "required", "max_tokens": 4})
    err = d.get("error", {}) if isinstance(d, dict) else {}
    ok(st == 400 and "'pattern'" in err.get("message", "") and err.get("param") == "tools", f"'pattern': {st} {d}")
    st, d = post({"model": MODEL, "messages": msgs, "tools": sets[0], "tool_choice": "required",
                  "response_format": {"type": "json_object"}, "max_tokens": 4})
    ok(st == 400 and d["error"]["param"] == "response_format", f"response_format with tool_choice required: {st} {d}")
    spaced = [{"type": "function", "function": {"name": "get time"}}]
    st, d = post({"model": MODEL, "messages": msgs, "tools": spaced, "tool_choice": "required", "max_tokens": 4})
    ok(st == 400 and d["error"]["param"] == "tools", f"a tool name with a space: {st} {d}")


def main():
    END = special_id("<|end|>")
    check_json(END)
    sets = check_tools(END)
    check_length(sets, END)
    check_bits(sets, END)
    check_auto_length(check_auto(sets, END))
    check_none(sets, END)
    check_follow_up(sets, END)
    check_reuse()
    check_refusals(sets)
    T.finish("oss_structured")


if __name__ == "__main__":
    main()
