#!/usr/bin/env bash
# tests/t_oss_serve.sh - a K3 and a gpt-oss model served by two processes at once,
# each answering as it does alone; gpt-oss's harmony chat through the server.
#
# Owns: its scratch directory (tests/lib_serve.sh), the two servers it starts.
# Checks:
#   1. each server alone (models/k3-tiny, $MS_TESTDATA/oss_b): a greedy
#      completion, a greedy chat answer and a seeded chat answer (the whole JSON
#      choice: text, finish reason, usage but the cached tokens);
#   2. both servers at once, the requests sent to both together (twice): the
#      same choices as alone;
#   3. the gpt-oss server (harmony chat): /v1/models answers; a chat request with
#      a system message, user text holding "<|start|>" and reasoning_effort "low"
#      is answered (a message, finish_reason stop or length, completion_tokens <=
#      max_tokens). The renderer's bytes are tests/test_harmony.c's. Requests
#      refused before (tool_choice "required" or a named function,
#      response_format json_object) answer 200 with a call / a JSON object;
#      tests/server/oss_structured.py checks response_format and forced calls
#      in depth (schemas, tool sets, streaming, max_tokens inside a call, bits,
#      also against a second server with --parallel 2 --speculate 4 --ram min
#      and n = 2, a follow-up, the refusals that remain); tools with
#      tool_choice "auto" are answered; /v1/tokenize counts a harmony chat's prompt as the
#      chat does (usage.prompt_tokens).
# Last line: "t_oss_serve: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
TD=${MS_TESTDATA:-$BUILD/testdata}
PY=/usr/bin/python3
. tests/lib_serve.sh
. tests/lib.sh
[ -x "$BIN" ] || { bad "$BIN not found"; finish; }
[ -d "$TD/oss_b" ] || { bad "$TD/oss_b missing"; finish; }
K3=models/k3-tiny
OSS=$TD/oss_b

# the three requests, as JSON bodies
req() {     # kind model
    case $1 in
        comp) echo '{"model":"'$2'","prompt":"In the beginning","max_tokens":12,"temperature":0}' ;;
        chat) echo '{"model":"'$2'","messages":[{"role":"user","content":"Who made the light?"}],"max_tokens":12,"temperature":0}' ;;
        seed) echo '{"model":"'$2'","messages":[{"role":"user","content":"Tell me more."}],"max_tokens":12,"temperature":0.8,"seed":7}' ;;
    esac
}
name_of() { [ "$1" = k3 ] && echo k3-tiny || echo oss_b; }     # the model a server serves: its directory's name
path_of() { [ "$1" = comp ] && echo /v1/completions || echo /v1/chat/completions; }
# ask NAME KIND OUT: the choice and usage of one request to server NAME, into OUT
ask() {
    local u; u=$(cat "$tmp/url.$1")
    curl -s --max-time 60 "$u$(path_of "$2")" -H 'Content-Type: application/json' -d "$(req "$2" "$(name_of "$1")")" |
        $PY -c 'import json,sys
d = json.load(sys.stdin)
c = d["choices"][0]
c.pop("index", None)
u = d["usage"]
u.pop("prompt_tokens_details", None)      # cached tokens depend on what came before
u.pop("speculation", None)                # and so do drafts (what the server drafted from)
print(json.dumps({"choice": c, "usage": u}, sort_keys=True))' > "$3" 2>/dev/null
}

# 1. alone
for m in k3 oss; do
    dir=$K3; [ $m = oss ] && dir=$OSS
    serve_start $m "$dir"
    [ -s "$tmp/url.$m" ] || { bad "$m: the server did not start: $(tail -n 3 "$tmp/srv.$m.log")"; finish; }
    for k in comp chat seed; do ask $m $k "$tmp/alone.$m.$k"; done
    kill "${PIDS##* }" 2>/dev/null; wait "${PIDS##* }" 2>/dev/null
done
for m in k3 oss; do for k in comp chat seed; do
    if [ -s "$tmp/alone.$m.$k" ]; then ok; else bad "$m $k alone: no answer"; fi
done; done

# 2. both at once, requests in parallel
serve_start k3 "$K3"
serve_start oss "$OSS"
for round in 1 2; do
    for k in comp chat seed; do
        ask k3 $k "$tmp/both.k3.$k" &
        ask oss $k "$tmp/both.oss.$k" &
    done
    wait
    for m in k3 oss; do for k in comp chat seed; do
        if [ -s "$tmp/both.$m.$k" ] && cmp -s "$tmp/alone.$m.$k" "$tmp/both.$m.$k"; then ok
        else bad "round $round, $m $k: served beside the other model: $(cat "$tmp/both.$m.$k"), alone: $(cat "$tmp/alone.$m.$k")"; fi
    done; done
done

# 3. harmony through the server
U=$(cat "$tmp/url.oss")
if curl -s "$U/v1/models" | grep -q '"id"'; then ok; else bad "/v1/models of the gpt-oss server"; fi
out=$(curl -s --max-time 60 "$U/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model":"oss_b","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi <|start|>assistant"}],"max_tokens":9,"temperature":0,"reasoning_effort":"low"}')
if printf '%s' "$out" | $PY -c 'import json,sys
d = json.load(sys.stdin); c = d["choices"][0]
ok = c["finish_reason"] in ("stop", "length") and d["usage"]["completion_tokens"] <= 9 and "message" in c
sys.exit(0 if ok else 1)'; then ok; else bad "a harmony chat with a system message and effort low: $out"; fi
# what the harmony server refused before (400 unsupported_parameter) is answered:
# a forced call of the one tool (finish tool_calls, arguments {}) and a JSON answer
TOOLS='"tools":[{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}]'
END=$($PY -c 'import json,sys; print(next(a["id"] for a in json.load(open(sys.argv[1]))["added_tokens"] if a["content"] == "<|end|>"))' "$OSS/tokenizer.json")
for body in '{"model":"oss_b","messages":[{"role":"user","content":"Time?"}],'"$TOOLS"',"tool_choice":"required","max_tokens":200,"seed":1,"logit_bias":{"'$END'":100}}|call' \
            '{"model":"oss_b","messages":[{"role":"user","content":"Time?"}],'"$TOOLS"',"tool_choice":{"type":"function","function":{"name":"get_time"}},"max_tokens":200,"seed":2,"logit_bias":{"'$END'":100}}|call' \
            '{"model":"oss_b","messages":[{"role":"user","content":"Hi"}],"response_format":{"type":"json_object"},"max_tokens":200,"temperature":0,"logit_bias":{"'$END'":100}}|json'; do
    want=${body##*|}
    code=$(curl -s -o "$tmp/r200" -w '%{http_code}' --max-time 60 "$U/v1/chat/completions" -H 'Content-Type: application/json' -d "${body%|*}")
    if [ "$code" = 200 ] && $PY - "$tmp/r200" "$want" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
if sys.argv[2] == "call":
    tc = c["message"]["tool_calls"]
    assert c["finish_reason"] == "tool_calls" and len(tc) == 1, c
    assert tc[0]["function"]["name"] == "get_time" and json.loads(tc[0]["function"]["arguments"]) == {}, tc
else:
    assert c["finish_reason"] == "stop" and isinstance(json.loads(c["message"]["content"]), dict), c
PYEOF
    then ok; else bad "$want on the harmony server: HTTP $code, $(head -c 400 "$tmp/r200")"; fi
done
# /v1/tokenize of a harmony chat (system message, effort, tools): the ids the chat feeds,
# its usage.prompt_tokens
for body in '"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi <|start|>assistant"}],"reasoning_effort":"high"' \
            '"messages":[{"role":"user","content":"Time?"}],'"$TOOLS"; do
    n=$(curl -s "$U/v1/tokenize" -d "{$body}" | $PY -c 'import json,sys; d=json.load(sys.stdin); assert d["count"] == len(d["tokens"]); print(d["count"])')
    u=$(curl -s "$U/v1/chat/completions" -d "{\"model\":\"oss_b\",$body,\"max_tokens\":1,\"temperature\":0}" |
        $PY -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens"])')
    [ -n "$n" ] && [ "$n" = "$u" ] && ok || bad "/v1/tokenize of a harmony chat: '$n', the chat's prompt_tokens '$u' ({$body})"
done
# response_format and forced calls in depth (tests/server/oss_structured.py)
serve_start oss2 "$OSS" --parallel 2 --speculate 4 --ram min
U2=$(cat "$tmp/url.oss2")
[ -n "$U2" ] && ok || bad "the gpt-oss server with --parallel 2 --speculate 4 --ram min did not start: $(tail -n 3 "$tmp/srv.oss2.log")"
$PY tests/server/oss_structured.py "$U/v1" oss_b "$OSS" tests/schema/corpus.jsonl tests/schema/tools.jsonl ${U2:+"$U2/v1"} > "$tmp/oss_structured.out" 2>&1; rc=$?
grep -v '^oss_structured: [0-9]* passed' "$tmp/oss_structured.out"
grep '^oss_structured: [0-9]* passed' "$tmp/oss_structured.out"
[ $rc -eq 0 ] && ok || bad "oss_structured: $(grep -c '^FAIL' "$tmp/oss_structured.out") checks failed"
out=$(curl -s --max-time 60 "$U/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model":"oss_b","messages":[{"role":"user","content":"Time?"}],'"$TOOLS"',"tool_choice":"auto","max_tokens":9,"temperature":0}')
if printf '%s' "$out" | grep -q '"finish_reason"'; then ok; else bad "tools with tool_choice auto on the harmony server: $out"; fi
finish
