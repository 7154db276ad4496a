#!/usr/bin/env python3
"""tests/server/tool_calls.py - tool calls whose arguments follow the tool's
JSON Schema (docs/SERVER.md, "Tool calls"), against a running server on the
bundled model.

Usage: tool_calls.py URL MODEL_DIR TOOLS.jsonl [URL_OTHER_BUDGET]

For every tool set of the corpus (tests/schema/tools.jsonl: nested objects,
arrays, enums, anyOf, $ref / $defs, a tool without parameters) and for
tool_choice "required", a named function and "auto", with several seeds:
every tool call the reply presents names a declared tool and its arguments
parse as JSON and validate against that tool's parameters (tests/schema/
check.py, the validator of response_format's test, written independently of
the C matcher). The bundled model was trained on plain text and never opens a
call by itself, so "auto" runs nudge it with logit_bias on <|open|> and on
"c" (a tag that starts with 'c' can only be a call); what it writes inside the
call is still its own, under the mask.
Also: max_tokens reached inside a call (finish_reason "length", no call
presented, completion_tokens <= max_tokens, streamed and not), streamed calls
equal the non-streamed ones, the same request twice gives the same bytes
(greedy and seeded), and the same at another --ram (URL_OTHER_BUDGET), and a
keyword outside the subset is a 400 that names it. Prints "N passed, N failed"."""
import base64
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schema"))
from check import validate  # noqa: E402
from chatapi import Tally, fold_stream, post_chat  # noqa: E402

URL, MODEL_DIR, CORPUS = sys.argv[1], sys.argv[2], sys.argv[3]
URL2 = sys.argv[4] if len(sys.argv) > 4 else None
NO_PARAMS = {"type": "object", "properties": {}, "additionalProperties": False}
MAXT = 96
T = Tally()
ok = T.ok


def post(body, url=None):
    return post_chat(url or URL, body)


def stream(body, url=None):
    """The streamed reply folded: (status, finish_reason, content, calls, usage)."""
    status, raw = post(dict(body, stream=True, stream_options={"include_usage": True}), url)
    finish, _, content, calls, usage = fold_stream(raw)
    return status, finish, content, calls, usage


def token_ids():
    """<|open|> and the token "c" of the bundled tokenizer (for the auto nudge)."""
    cfg = json.load(open(os.path.join(MODEL_DIR, "tokenizer_config.json")))
    open_id = next(int(k) for k, v in cfg["added_tokens_decoder"].items() if v["content"] == "<|open|>")
    c_id = None
    for line in open(os.path.join(MODEL_DIR, "tiktoken.model")):
        b64, rank = line.split()
        if base64.b64decode(b64) == b"c":
            c_id = int(rank)
    return open_id, c_id


def check_call(tools, call, where):
    """A presented call: a declared tool, arguments that validate."""
    by_name = {t["function"]["name"]: t["function"].get("parameters") or NO_PARAMS for t in tools}
    name, args = call["name"], call["arguments"]
    if not ok(name in by_name, f"{where}: call of undeclared tool {name!r}"):
        return
    try:
        doc = json.loads(args, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        validate(by_name[name], doc, by_name[name])
        ok(True, "")
    except ValueError as e:
        ok(False, f"{where}: arguments of {name} do not validate: {e}: {args[:200]!r}")


def calls_of(msg):
    return [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in msg.get("tool_calls") or []]


def check_reply(tools, body, d, where):
    """Every presented call validates; the usage and the finish agree."""
    c = d["choices"][0]
    calls = calls_of(c["message"])
    ok(d["usage"]["completion_tokens"] <= body["max_tokens"],
       f"{where}: completion_tokens {d['usage']['completion_tokens']} > max_tokens {body['max_tokens']}")
    ok(c["finish_reason"] in ("stop", "length", "tool_calls"), f"{where}: finish_reason {c['finish_reason']}")
    ok((c["finish_reason"] == "tool_calls") == (len(calls) > 0 and c["finish_reason"] != "length"),
       f"{where}: finish_reason {c['finish_reason']} with {len(calls)} calls")
    for call in calls:
        check_call(tools, call, where)
    return c["finish_reason"], calls


def main():
    open_id, c_id = token_ids()
    sets = [json.loads(line) for line in open(CORPUS) if line.strip()]
    ok(len(sets) >= 10, f"the tool corpus has {len(sets)} sets (want >= 10)")
    msgs = [{"role": "user", "content": "Use a tool."}]
    n_calls = {"required": 0, "named": 0, "auto": 0}
    for i, tools in enumerate(sets):
        named = {"type": "function", "function": {"name": tools[0]["function"]["name"]}}
        for mode, choice, seeds in (("required", "required", (1, 2)), ("named", named, (3,)), ("auto", "auto", (4,))):
            for seed in seeds:
                body = {"model": "k3-tiny", "messages": msgs, "tools": tools, "tool_choice": choice,
                        "seed": seed, "temperature": 0.9, "max_tokens": MAXT}
                if mode == "auto":
                    body["logit_bias"] = {str(open_id): 30, str(c_id): 20}
                where = f"set {i} {mode} seed {seed}"
                status, d = post(body)
                if not ok(status == 200, f"{where}: status {status}: {str(d)[:300]}"):
                    continue
                finish, calls = check_reply(tools, body, d, where)
                n_calls[mode] += len(calls)
                if mode == "named" and calls:
                    ok(calls[0]["name"] == named["function"]["name"], f"{where}: first call {calls[0]['name']}")
                if mode != "auto" and finish != "length":
                    ok(len(calls) >= 1, f"{where}: tool_choice {mode} ended '{finish}' without a call")
                if seed == 1 or (mode == "auto" and i % 3 == 0):     # streamed: the same calls, the same end
                    st, sfinish, _, scalls, usage = stream(body)
                    ok(st == 200 and sfinish == finish and scalls == calls and usage
                       and usage["completion_tokens"] == d["usage"]["completion_tokens"],
                       f"{where}: streamed {sfinish} {scalls} != {finish} {calls}")
    print(f"tool_calls: calls presented (all validated): {n_calls}")
    for mode, n in n_calls.items():
        ok(n > 0, f"no {mode} run presented a complete call")
    check_length(sets, open_id, c_id)
    check_bits(sets, open_id, c_id)
    check_refusals(sets)
    T.finish("tool_calls")


def check_length(sets, open_id, c_id):
    """max_tokens inside the forced markup or the arguments: "length", no call."""
    multi = sets[6]
    named = {"type": "function", "function": {"name": "add"}}
    msgs = [{"role": "user", "content": "Use a tool."}]
    for choice, tools in (("required", multi), (named, sets[0]), ("auto", multi)):
        for mt in (1, 5, 9, 20):
            body = {"model": "k3-tiny", "messages": msgs, "tools": tools, "tool_choice": choice,
                    "seed": 1, "temperature": 0, "max_tokens": mt}
            if choice == "auto":
                body["logit_bias"] = {str(open_id): 30, str(c_id): 20}
            where = f"max_tokens {mt} tool_choice {choice if isinstance(choice, str) else 'named'}"
            status, d = post(body)
            if not ok(status == 200, f"{where}: status {status} {str(d)[:300]}"):
                continue
            c = d["choices"][0]
            ok(c["finish_reason"] == "length" and not c["message"].get("tool_calls"),
               f"{where}: finish {c['finish_reason']}, calls {c['message'].get('tool_calls')}")
            ok(d["usage"]["completion_tokens"] == mt, f"{where}: completion_tokens {d['usage']['completion_tokens']}")
            st, sfinish, _, scalls, usage = stream(body)
            ok(st == 200 and sfinish == "length" and scalls == [] and usage and usage["completion_tokens"] == mt,
               f"{where}: streamed {sfinish} {scalls} {usage}")


def choices(d):
    """The choices without the call ids (they carry the response's id)."""
    out = json.loads(json.dumps(d.get("choices")))
    for c in out or []:
        for tc in c["message"].get("tool_calls") or []:
            tc.pop("id", None)
    return out


def check_bits(sets, open_id, c_id):
    """The same request twice, and at another budget: the same choices."""
    msgs = [{"role": "user", "content": "Use a tool."}]
    for temp, seed in ((0, 1), (0.9, 7)):
        for choice, tools in (("required", sets[6]), ("required", sets[11]), ("auto", sets[3])):
            body = {"model": "k3-tiny", "messages": msgs, "tools": tools, "tool_choice": choice,
                    "seed": seed, "temperature": temp, "max_tokens": MAXT}
            if choice == "auto":
                body["logit_bias"] = {str(open_id): 30, str(c_id): 20}
            where = f"bits temperature {temp} {choice}"
            a, b = choices(post(body)[1]), choices(post(body)[1])
            ok(a and a == b, f"{where}: a second request differs")
            if URL2:
                o = choices(post(body, URL2)[1])
                ok(o == a, f"{where}: another --ram differs: {str(o)[:300]}")


def check_refusals(sets):
    msgs = [{"role": "user", "content": "x"}]
    bad = [{"type": "function", "function": {"name": "z", "parameters": {
        "type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]+$"}}}}}]
    for choice in ("auto", "required"):
        status, d = post({"model": "k3-tiny", "messages": msgs, "tools": bad, "tool_choice": choice, "max_tokens": 4})
        err = d.get("error", {}) if isinstance(d, dict) else {}
        ok(status == 400 and "'pattern'" in err.get("message", "") and err.get("param") == "tools",
           f"refusal of 'pattern' ({choice}): {status} {d}")
    status, d = post({"model": "k3-tiny", "messages": msgs, "tools": sets[0], "tool_choice": "required",
                      "response_format": {"type": "json_object"}, "max_tokens": 4})
    ok(status == 400, f"response_format with tool_choice required: {status} {d}")


if __name__ == "__main__":
    main()
