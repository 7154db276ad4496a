#!/usr/bin/env bash
# tests/t_mspec.sh - several sequences speculating in one pass
# (ms_sessions_decode) in `batch` and `serve`: the bits of plain decoding.
#
# On the bundled model (models/k3-tiny):
#  1. `batch --speculate auto --parallel 3` (resident and --ram min) and
#     `batch --speculate 4 --draft-model models/k3-tiny-draft --parallel 4
#     --ram min` on five lines (greedy text that repeats itself, seeded
#     sampling, a stop string, ids, different lengths): every result's
#     generated_ids and text equal `moestream run --speculate 0` on the
#     same prompt, --max-tokens and sampling, and the whole lines equal
#     `batch --speculate 0` but for the speculation fields they add
#     (decode_passes, drafted, accepted, both by source), with drafts
#     accepted (and the draft model's among them);
#  2. passes shared: three requests, all prompts read in the first step, so
#     every later step is one ms_sessions_decode pass: with --parallel 1 the
#     results' decode_passes add up to the passes the engine counts
#     (speculation: ... in N passes), with --parallel 3 to more (a pass fed
#     several requests' drafts), the ids unchanged;
#  3. `serve --parallel 2 --speculate 4`: five requests sent at once (greedy
#     and seeded completions, a stop string, a streamed chat with logprobs, a
#     length limit) answer exactly as the same requests sent one at a time
#     to `serve --parallel 1 --speculate 0` (text, finish reason,
#     token counts, log-probabilities); every answer's usage.speculation is
#     there (drafts accepted over all), and the answers' decode_passes add up
#     to more than the server's decode steps (/health): steps served both
#     slots' drafts at once (with two slots, a step that feeds both slots'
#     decode tokens is a speculative one: a slot reading its prompt makes the
#     step ms_sessions_feed's, with one decode token in it).
# Last line: "t_mspec: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh                         # BUILD, BIN, PY, ok / bad / finish
. tests/lib_serve.sh                   # $tmp, serve_start, serve_summary, the cleanup
M=models/k3-tiny
D=models/k3-tiny-draft
[ -x "$BIN" ] || { bad "$BIN not found"; finish; }

P1="And the LORD spake unto Moses, saying, And the LORD spake unto"
cat > "$tmp/in.jsonl" <<EOF
{"prompt": "$P1", "max_tokens": 40, "temperature": 0}
{"prompt": "In the beginning God created", "seed": 7}
{"prompt": "And it came to pass", "max_tokens": 30, "temperature": 0, "stop": ["Moses"]}
{"ids": [5, 6, 7, 8, 5, 6, 7, 8], "max_tokens": 12, "temperature": 0}
{"prompt": "Blessed is the man", "max_tokens": 50, "temperature": 0, "ignore_eos": true}
EOF
SAMPLE="--temperature 0.8 --top-k 40 --repeat-penalty 1.1 --seed 11 --max-tokens 25"

# ---- 1. batch against run -------------------------------------------------------------
"$BIN" batch $M --input "$tmp/in.jsonl" --parallel 3 --speculate 0 $SAMPLE --quiet > "$tmp/plain" 2> "$tmp/e" || bad "batch: $(cat "$tmp/e")"
runs=("--parallel 3 --speculate auto" "--parallel 3 --speculate auto --ram min"
      "--parallel 4 --speculate 4 --draft-model $D --ram min")
for r in "${!runs[@]}"; do
    "$BIN" batch $M --input "$tmp/in.jsonl" ${runs[$r]} $SAMPLE --quiet > "$tmp/spec$r" 2> "$tmp/e" \
        || bad "batch ${runs[$r]}: exit $?: $(cat "$tmp/e")"
    # the same lines as without --speculate, once the speculation fields are taken out
    $PY - "$tmp/plain" "$tmp/spec$r" <<'EOF' && ok || bad "batch ${runs[$r]}: results differ from batch without --speculate"
import json, sys
keys = ("decode_passes", "drafted", "accepted", "drafted_by_source", "accepted_by_source")
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == 5 and all(set(keys) <= set(x) for x in b), b
assert a == [{k: v for k, v in x.items() if k not in keys} for x in b]
EOF
done
# the draft sources: accepted drafts auto, and the draft model's with --draft-model
$PY - "$tmp/spec0" "$tmp/spec2" <<'EOF' && ok || bad "batch: no drafts accepted: $(cut -c1-200 "$tmp/spec0" "$tmp/spec2")"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
m = [json.loads(l) for l in open(sys.argv[2])]
assert sum(x["accepted"] for x in a) > 0 and sum(x["drafted"] for x in a) >= sum(x["accepted"] for x in a)
assert sum(x["accepted_by_source"]["model"] for x in m) > 0
for x in a + m:
    assert x["drafted"] == sum(x["drafted_by_source"].values()) and x["accepted"] == sum(x["accepted_by_source"].values())
EOF
# each line against run (without --speculate)
$PY - "$tmp/in.jsonl" "$tmp/spec0" > "$tmp/cases" <<'EOF'
import json, sys
for l, r in zip(open(sys.argv[1]), open(sys.argv[2])):
    q, r = json.loads(l), json.loads(r)
    opt, val = ("--prompt", q["prompt"]) if "prompt" in q else ("--ids", ",".join(map(str, q["ids"])))
    args = ["--max-tokens", str(q.get("max_tokens", 25)), "--seed", str(q.get("seed", 11))]
    if "temperature" in q: args += ["--temperature", str(q["temperature"])]
    for s in q.get("stop", []): args += ["--stop", s]
    if q.get("ignore_eos"): args += ["--ignore-eos"]
    print("\t".join([opt, val, " ".join(args)]))
EOF
i=0
while IFS=$'\t' read -r opt val args; do
    out=$("$BIN" run $M "$opt" "$val" --speculate 0 --temperature 0.8 --top-k 40 --repeat-penalty 1.1 $args --json --quiet)
    want=$(printf '%s' "$out" | $PY -c "import json,sys; d=json.load(sys.stdin); print(json.dumps([d['generated_ids'], d.get('text')]))")
    for r in "${!runs[@]}"; do
        got=$(sed -n "$((i + 1))p" "$tmp/spec$r" | $PY -c "import json,sys; d=json.load(sys.stdin); print(json.dumps([d['generated_ids'], d.get('text')]))")
        [ -n "$want" ] && [ "$got" = "$want" ] && ok || bad "line $i, batch ${runs[$r]}: $got, run $want"
    done
    i=$((i + 1))
done < "$tmp/cases"
[ $i = 5 ] && ok || bad "$i lines compared with run"

# ---- 2. passes shared -----------------------------------------------------------------
head -n 3 "$tmp/in.jsonl" > "$tmp/in3.jsonl"
passes() {  # batch's stderr -> the passes the engine counted
    sed -n 's/.*speculation: [0-9]* tokens in \([0-9]*\) passes.*/\1/p' "$1"
}
sum_passes() { $PY -c "import json,sys; print(sum(json.loads(l)['decode_passes'] for l in open(sys.argv[1])))" "$1"; }
ids() { $PY -c "import json,sys; print([json.loads(l)['generated_ids'] for l in open(sys.argv[1])])" "$1"; }
for P in 1 3; do
    "$BIN" batch $M --input "$tmp/in3.jsonl" --parallel $P --speculate auto $SAMPLE > "$tmp/s$P" 2> "$tmp/se$P"
done
p1=$(passes "$tmp/se1"); p3=$(passes "$tmp/se3"); s1=$(sum_passes "$tmp/s1"); s3=$(sum_passes "$tmp/s3")
[ -n "$p1" ] && [ "$s1" = "$p1" ] && ok || bad "--parallel 1: the results' decode_passes $s1, the engine's passes '$p1'"
[ -n "$p3" ] && [ "$s3" -gt "$p3" ] && ok || bad "--parallel 3: the results' decode_passes $s3, the engine's passes '$p3': no pass fed two requests"
[ "$(ids "$tmp/s1")" = "$(ids "$tmp/s3")" ] && [ "$(ids "$tmp/s1")" = "$(ids <(head -n 3 "$tmp/plain"))" ] && ok \
    || bad "passes shared: other ids"
echo "batch, 3 requests: $s1 decode passes one at a time, $s3 request-passes in $p3 passes at --parallel 3"

# ---- 3. serve --parallel 2 --speculate 4 ------------------------------------------------
serve_start one $M --parallel 1 --speculate 0
serve_start par $M --parallel 2 --speculate 4
u1=$(cat "$tmp/url.one"); u2=$(cat "$tmp/url.par")
if [ -z "$u1" ] || [ -z "$u2" ]; then
    bad "the servers did not start: $(tail -n 3 "$tmp/srv.one.log" "$tmp/srv.par.log")"
    finish
fi
P2="In the beginning God created"
P3="And it came to pass"
BODIES=(
    "completions|{\"model\":\"k3-tiny\",\"prompt\":\"$P1\",\"max_tokens\":48,\"temperature\":0,\"ignore_eos\":true}"
    "completions|{\"model\":\"k3-tiny\",\"prompt\":\"$P2\",\"max_tokens\":33,\"temperature\":0.9,\"seed\":5}"
    "completions|{\"model\":\"k3-tiny\",\"prompt\":\"$P3\",\"max_tokens\":40,\"temperature\":0,\"stop\":[\"Moses\"]}"
    "chat/completions|{\"model\":\"k3-tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"$P1\"}],\"max_tokens\":30,\"temperature\":0,\"stream\":true,\"logprobs\":true,\"top_logprobs\":2}"
    "completions|{\"model\":\"k3-tiny\",\"prompt\":\"$P1 Aaron\",\"max_tokens\":50,\"temperature\":0,\"ignore_eos\":true,\"frequency_penalty\":0.5}"
)
post() {    # url, endpoint|body, out file
    local ep=${2%%|*} body=${2#*|}
    curl -s --max-time 120 "$1/v1/$ep" -H 'Content-Type: application/json' -d "$body" > "$3"
}
steps() { curl -s "$1/health" | $PY -c "import json,sys; print(json.load(sys.stdin)['decode_steps'])"; }
st0=$(steps "$u2")
pids=
for i in "${!BODIES[@]}"; do post "$u2" "${BODIES[$i]}" "$tmp/par.$i" & pids="$pids $!"; done
wait $pids
st1=$(steps "$u2")
for i in "${!BODIES[@]}"; do post "$u1" "${BODIES[$i]}" "$tmp/one.$i"; done
for i in "${!BODIES[@]}"; do
    a=$(serve_summary "$tmp/one.$i"); b=$(serve_summary "$tmp/par.$i")
    case "$a" in unparsable*|"") bad "request $i: no answer from --parallel 1: $a"; continue ;; esac
    [ "$a" = "$b" ] && ok || bad "request $i: --parallel 2 --speculate 4 answered '$b', --parallel 1 alone '$a'"
done
# usage.speculation of every answer (a stream's in its last chunk)
spec=$($PY - "$tmp"/par.* <<'EOF'
import json, sys
tot = [0, 0, 0]
for f in sys.argv[1:]:
    raw, u = open(f).read(), None
    if raw.lstrip().startswith("data:"):
        for line in raw.splitlines():
            if line.startswith("data: {"):
                u = json.loads(line[6:]).get("usage") or u
    else:
        u = json.loads(raw)["usage"]
    s = u["speculation"]
    assert s["drafted"] == sum(s["drafted_by_source"].values()) and s["accepted"] <= s["drafted"], s
    tot = [tot[0] + s["decode_passes"], tot[1] + s["drafted"], tot[2] + s["accepted"]]
print(*tot)
EOF
)
read -r sp sd sa <<< "$spec"
[ -n "$sa" ] && [ "$sa" -gt 0 ] && ok || bad "serve: usage.speculation: '$spec' (no draft accepted)"
[ -n "$sp" ] && [ -n "$st1" ] && [ "$sp" -gt $((st1 - st0)) ] && ok \
    || bad "serve: the answers' decode_passes $sp in $((st1 - st0)) decode steps: no step served both slots"
echo "serve --parallel 2 --speculate 4: $sp request-passes in $((st1 - st0)) decode steps; drafted $sd, accepted $sa"
grep -q "ERROR: AddressSanitizer\|runtime error:\|ThreadSanitizer" "$tmp"/srv.*.log && bad "a sanitizer report in the server logs" || ok
finish
