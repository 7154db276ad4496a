#!/usr/bin/env bash
# tests/t_schema.sh - structured output from the command line (run
# --json-schema) on the bundled model: every document that ends validates
# against its schema (tests/schema/check.py, written independently of the C
# matcher), the bits of greedy and seeded runs equal a second run, a schema
# outside the subset is refused naming the keyword, and a run cut by
# --max-tokens inside a document stops there. The server part also checks
# tool calls against their tools' schemas (tests/server/tool_calls.py).
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
PY=${PYTHON:-/usr/bin/python3}
M=models/k3-tiny
. tests/lib_serve.sh          # $tmp, serve_start, cleanup on exit
. tests/lib.sh
MAXT=48

gen() {   # gen SCHEMA SEED TEMP OUT -> JSON of the run
    "$BIN" run "$M" --prompt "Answer in JSON." --json-schema "$1" --seed "$2" --temperature "$3" \
        --max-tokens $MAXT --json --quiet > "$4" 2>"$tmp/err" || bad "run $1 seed $2: $(head -c 300 "$tmp/err")"
}

i=0; ended=0
while IFS= read -r line; do
    i=$((i + 1))
    echo "$line" > "$tmp/s$i.json"
    for seed in 1 2 3; do
        gen "$tmp/s$i.json" $seed 0.9 "$tmp/o.json"
        $PY - "$tmp/o.json" "$tmp/doc.txt" $MAXT <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
open(sys.argv[2], "w", encoding="utf-8").write(d["text"])
sys.exit(0 if len(d["generated_ids"]) < int(sys.argv[3]) else 3)
PYEOF
        rc=$?
        if [ $rc -eq 0 ]; then
            ended=$((ended + 1))
            out=$($PY tests/schema/check.py "$tmp/s$i.json" "$tmp/doc.txt") && ok || bad "schema $i seed $seed: $out"
        elif [ $rc -eq 3 ]; then
            # cut by --max-tokens: the text is a prefix the matcher accepted, not a document
            ok
        else
            bad "schema $i seed $seed: unreadable run output"
        fi
    done
done < tests/schema/corpus.jsonl
[ "$i" -ge 30 ] && ok || bad "the corpus has $i schemas (want >= 30)"
[ "$ended" -gt 0 ] && ok || bad "no constrained run ended with a document"
echo "t_schema: $ended of $((i * 3)) sampled runs ended with a document inside $MAXT tokens"

# bit-reproducible: greedy and seeded, twice each
for t in 0 0.9; do
    gen "$tmp/s13.json" 7 $t "$tmp/a.json"; gen "$tmp/s13.json" 7 $t "$tmp/b.json"
    $PY -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); sys.exit(a['generated_ids']!=b['generated_ids'])" \
        "$tmp/a.json" "$tmp/b.json" && ok || bad "temperature $t: a second run differs"
done

# refusal names the keyword; exit 2 (usage)
echo '{"type":"object","properties":{"zip":{"type":"string","pattern":"^[0-9]+$"}}}' > "$tmp/bad.json"
"$BIN" run "$M" --prompt x --json-schema "$tmp/bad.json" --quiet >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "'pattern'" "$tmp/err" && ok || bad "refusal: exit $rc, $(cat "$tmp/err")"

# max-tokens inside a document: exactly that many tokens, and not a complete document
echo '{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]}' > "$tmp/arr.json"
"$BIN" run "$M" --prompt x --json-schema "$tmp/arr.json" --max-tokens 3 --json --quiet > "$tmp/o.json" 2>"$tmp/err"
$PY - "$tmp/o.json" <<'PYEOF' && ok || bad "max-tokens inside a document"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["generated_ids"]) == 3, d["generated_ids"]
try:
    json.loads(d["text"]); sys.exit("a complete document in 3 tokens: " + d["text"])
except ValueError:
    pass
PYEOF

# the server: response_format json_object / json_schema over a part of the corpus
serve_start s "$M"
URL=$(cat "$tmp/url.s")
[ -n "$URL" ] && ok || bad "server did not start: $(tail -3 "$tmp/srv.s.log")"
post() { curl -s -o "$2" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$1" "$URL/v1/chat/completions"; }
req() {   # req SCHEMA_FILE|"" SEED TEMP MAXT OUT_BODY
    $PY - "$1" "$2" "$3" "$4" > "$tmp/req.json" <<'PYEOF'
import json, sys
schema, seed, temp, maxt = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
rf = {"type": "json_object"} if not schema else \
     {"type": "json_schema", "json_schema": {"name": "t", "strict": True, "schema": json.load(open(schema))}}
print(json.dumps({"model": "k3-tiny", "messages": [{"role": "user", "content": "Answer in JSON."}],
                  "response_format": rf, "seed": seed, "temperature": temp, "max_tokens": maxt}))
PYEOF
    post "$tmp/req.json" "$5"
}
srv_check() {   # srv_check SCHEMA_FILE BODY MAXT -> validates when finish_reason is stop
    $PY - "$1" "$2" "$3" <<'PYEOF'
import json, subprocess, sys
schema, body, maxt = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = json.load(open(body))
c = d["choices"][0]
u = d["usage"]["completion_tokens"]
assert u <= maxt, f"completion_tokens {u} > max_tokens {maxt}"
if c["finish_reason"] == "length":
    sys.exit(0)
assert c["finish_reason"] == "stop", c["finish_reason"]
open(body + ".txt", "w", encoding="utf-8").write(c["message"]["content"])
if schema:
    r = subprocess.run([sys.executable, "tests/schema/check.py", schema, body + ".txt"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
else:
    assert isinstance(json.loads(c["message"]["content"]), dict)
PYEOF
}
for k in 0 2 6 9 13 17 18 28 32; do
    f=""; [ $k -gt 0 ] && f="$tmp/s$k.json"
    for seed in 1 2; do
        code=$(req "$f" $seed 0.9 $MAXT "$tmp/r.json")
        [ "$code" = 200 ] && srv_check "$f" "$tmp/r.json" $MAXT && ok || bad "server schema $k seed $seed: $code $(head -c 300 "$tmp/r.json")"
    done
done
# bits: the same request twice
for t in 0 0.9; do
    req "$tmp/s13.json" 5 $t $MAXT "$tmp/a.json" >/dev/null; req "$tmp/s13.json" 5 $t $MAXT "$tmp/b.json" >/dev/null
    $PY -c "import json,sys; a,b=(json.load(open(p))['choices'][0]['message']['content'] for p in sys.argv[1:]); sys.exit(a!=b)" \
        "$tmp/a.json" "$tmp/b.json" && ok || bad "server temperature $t: a second request differs"
done
# refusal: 400 naming the keyword
code=$(req "$tmp/bad.json" 1 0 8 "$tmp/r.json")
[ "$code" = 400 ] && grep -q "'pattern'" "$tmp/r.json" && ok || bad "server refusal: $code $(cat "$tmp/r.json")"
# max_tokens inside the document: finish_reason length, completion_tokens == max_tokens
code=$(req "$tmp/arr.json" 1 0 3 "$tmp/r.json")
$PY - "$tmp/r.json" <<'PYEOF' && [ "$code" = 200 ] && ok || bad "server max_tokens inside a document: $code $(head -c 300 "$tmp/r.json")"
import json, sys
d = json.load(open(sys.argv[1]))
c = d["choices"][0]
assert c["finish_reason"] == "length", c
assert d["usage"]["completion_tokens"] == 3, d["usage"]
PYEOF

# tool calls (tests/server/tool_calls.py): every presented call validates against
# its tool's parameters (required / named / auto, several seeds), max_tokens inside
# a call, streamed = not streamed, bits twice and under --ram min
serve_start m "$M" --ram min
URL_MIN=$(cat "$tmp/url.m")
[ -n "$URL_MIN" ] && ok || bad "server --ram min did not start: $(tail -3 "$tmp/srv.m.log")"
$PY tests/server/tool_calls.py "$URL/v1" "$M" tests/schema/tools.jsonl "$URL_MIN/v1" > "$tmp/tools.out" 2>&1; rc=$?
grep -v '^tool_calls: [0-9]* passed' "$tmp/tools.out"
[ $rc -eq 0 ] && ok || bad "tool calls: $(grep -c '^FAIL' "$tmp/tools.out") checks failed"

echo "t_schema: $pass passed, $fail failed"
[ $fail -eq 0 ]
