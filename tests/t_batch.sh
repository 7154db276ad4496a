#!/usr/bin/env bash
# tests/t_batch.sh - `moestream batch`: JSON lines in, one result per line out,
# requests decoded together, each exactly as `moestream run` gives it.
#
# On the bundled model: nine lines (text and id prompts, per-line max_tokens
# and seed, an empty line, a malformed one, one too long for the context, a chat,
# a chat with a bad role), seeded sampling with a repetition penalty:
#   - --parallel 1, --parallel 3 and --parallel 4 --ram min --chunk 3 print the same
#     results but for the draft counts (speculation, auto by default, is on);
#     so do --parallel 1 and --parallel 3 --ram min with --draft-tree 1, whose
#     lines (only theirs) add tree_passes / tree_drafted / tree_accepted;
#   - every result's generated_ids equal `moestream run --json` on the same prompt,
#     --max-tokens and --seed; text results' text equals run's; finish reasons;
#     the chat's content equals `moestream chat`'s answer to the same user line;
#   - results come in input order, errors as {"index", "error"}, exit 0;
#   - a line's own sampling keys, seed, max_tokens and ignore_eos give run's tokens with the
#     same flags; an unknown key or a bad value is that line's error, named; a NUL byte in a
#     line does not end the input;
#   - a bad option exits 2.
# Last line: "t_batch: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
PY=/usr/bin/python3
M=models/k3-tiny
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. tests/lib.sh

cat > "$tmp/in.jsonl" <<'EOF'
{"prompt": "And the LORD spake unto Moses, saying,", "max_tokens": 20}
{"prompt": "In the beginning God created", "seed": 7}
{"ids": [5, 6, 7, 8], "max_tokens": 12}

{"prompt": "And it came to pass", "max_tokens": 30, "seed": 3}
{"bad": 1}
{"prompt": "Blessed is the man"}
{"ids": [1, 2, 3], "max_tokens": 100000}
{"messages": [{"role": "user", "content": "In the beginning"}], "max_tokens": 20, "seed": 5}
{"messages": [{"role": "wizard", "content": "x"}]}
EOF
SAMPLE="--temperature 0.8 --top-k 40 --repeat-penalty 1.1 --seed 11 --max-tokens 25"
"$BIN" batch $M --input "$tmp/in.jsonl" --parallel 1 $SAMPLE --quiet > "$tmp/p1" 2> "$tmp/e1"; r1=$?
"$BIN" batch $M --input "$tmp/in.jsonl" --parallel 3 $SAMPLE --quiet > "$tmp/p3" 2> "$tmp/e3"; r3=$?
"$BIN" batch $M --parallel 4 --ram min --chunk 3 $SAMPLE --quiet < "$tmp/in.jsonl" > "$tmp/p4" 2> "$tmp/e4"; r4=$?
[ $r1 = 0 ] && [ $r3 = 0 ] && [ $r4 = 0 ] && ok || bad "exit codes $r1 $r3 $r4: $(cat "$tmp/e1" "$tmp/e3" "$tmp/e4" | head -n 3)"
# --draft-tree 1: a request decoding alone in a step may verify a second branch
"$BIN" batch $M --input "$tmp/in.jsonl" --parallel 1 --draft-tree 1 $SAMPLE --quiet > "$tmp/pt1" 2> "$tmp/et1"; rt1=$?
"$BIN" batch $M --input "$tmp/in.jsonl" --parallel 3 --ram min --draft-tree 1 $SAMPLE --quiet > "$tmp/pt3" 2> "$tmp/et3"; rt3=$?
[ $rt1 = 0 ] && [ $rt3 = 0 ] && ok || bad "--draft-tree 1: exit codes $rt1 $rt3: $(cat "$tmp/et1" "$tmp/et3" | head -n 3)"
grep -q '"tree_passes"' "$tmp/pt1" && ! grep -q '"tree_passes"' "$tmp/p1" && ok || bad "tree_* fields: with --draft-tree 1 only"
# speculation is on (auto, the default): a request's draft counts depend on its
# company (the shared history, the pass's share); everything else is compared
nospec() {
    $PY -c "
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    for k in ('decode_passes', 'drafted', 'accepted', 'drafted_by_source', 'accepted_by_source', 'tree_passes',
              'tree_drafted', 'tree_accepted'):
        d.pop(k, None)
    print(json.dumps(d))" "$1" > "$1.ns"
}
for n in 1 3 4 t1 t3; do nospec "$tmp/p$n"; done
grep -q '"decode_passes"' "$tmp/p1" && ok || bad "batch without --speculate does not speculate (auto is the default)"
[ -s "$tmp/p1" ] && cmp -s "$tmp/p1.ns" "$tmp/p3.ns" && ok || bad "--parallel 3 printed other results than --parallel 1"
[ -s "$tmp/p1" ] && cmp -s "$tmp/p1.ns" "$tmp/p4.ns" && ok || bad "--parallel 4 --ram min --chunk 3 printed other results than --parallel 1"
for n in t1 t3; do
    [ -s "$tmp/p1" ] && cmp -s "$tmp/p1.ns" "$tmp/p$n.ns" && ok || bad "--draft-tree 1 ($n) printed other results than --parallel 1"
done

# each result against `run`
$PY - "$tmp/in.jsonl" "$tmp/p3" > "$tmp/cases" <<'EOF'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
res = [json.loads(l) for l in open(sys.argv[2])]
assert [r["index"] for r in res] == list(range(len(lines))), "order"
for i, (l, r) in enumerate(zip(lines, res)):
    q = json.loads(l)
    if "error" in r:
        print("\t".join(["ERR", str(i)]))
        continue
    if "messages" in q:
        print("\t".join(["CHAT", str(i), str(q["max_tokens"]), str(q["seed"]), r["finish_reason"],
                         json.dumps(r["content"]), q["messages"][0]["content"]]))
        continue
    opt, val = ("--prompt", q["prompt"]) if "prompt" in q else ("--ids", ",".join(map(str, q["ids"])))
    print("\t".join(["RUN", str(i), str(q.get("max_tokens", 25)), str(q.get("seed", 11)), r["finish_reason"],
                     json.dumps(r["generated_ids"]), json.dumps(r.get("text")), opt, val]))
EOF
[ $? = 0 ] && ok || bad "results not in input order, or unparsable: $(head -c 300 "$tmp/p3")"
n_err=0
while IFS=$'\t' read -r kind i max seed fin gen text opt val; do
    if [ "$kind" = ERR ]; then n_err=$((n_err + 1)); continue; fi
    if [ "$kind" = CHAT ]; then     # gen = the content, text = the user line
        ans=$(printf '%s\n/exit\n' "$text" | "$BIN" chat $M --temperature 0.8 --top-k 40 --repeat-penalty 1.1 \
              --seed "$seed" --max-tokens "$max" --quiet 2>/dev/null | $PY -c "import json,sys; print(json.dumps(sys.stdin.read()[:-1]))")
        [ -n "$ans" ] && [ "$ans" = "$gen" ] && ok || bad "line $i: batch chat content $gen, chat $ans"
        continue
    fi
    out=$("$BIN" run $M "$opt" "$val" --temperature 0.8 --top-k 40 --repeat-penalty 1.1 --seed "$seed" \
          --max-tokens "$max" --json --quiet)
    want=$(printf '%s' "$out" | $PY -c "import json,sys; d=json.load(sys.stdin); print(json.dumps(d['generated_ids']))")
    [ "$want" = "$gen" ] && ok || bad "line $i: batch generated $gen, run $want"
    if [ "$opt" = --prompt ]; then
        wt=$(printf '%s' "$out" | $PY -c "import json,sys; d=json.load(sys.stdin); print(json.dumps(d['text']))")
        [ "$wt" = "$text" ] && ok || bad "line $i: batch text $text, run $wt"
    fi
    n=$(printf '%s' "$gen" | $PY -c "import json,sys; print(len(json.load(sys.stdin)))")
    { [ "$fin" = length ] && [ "$n" = "$max" ]; } || { [ "$fin" = stop ] && [ "$n" -le "$max" ]; } && ok \
        || bad "line $i: finish $fin after $n of $max tokens"
done < "$tmp/cases"
[ "$n_err" = 3 ] && ok || bad "expected 3 error results (malformed, too long, bad role), got $n_err"
# results are numbered by non-empty line: the malformed one is 4, the too long one 6
grep -q '"index": 4, "error": "give one of' "$tmp/p3" && ok || bad "the malformed line's error: $(sed -n 5p "$tmp/p3")"
grep -q '"index": 6, "error": ".*exceed the context' "$tmp/p3" && ok || bad "the too-long line's error: $(sed -n 7p "$tmp/p3")"
grep -q '"index": 8, "error": "message 0: unknown role' "$tmp/p3" && ok || bad "the bad role's error: $(sed -n 9p "$tmp/p3")"

"$BIN" batch $M --input "$tmp/in.jsonl" --no-such-option > /dev/null 2>&1; [ $? = 2 ] && ok || bad "a bad option did not exit 2"
"$BIN" batch $M --input "$tmp/missing.jsonl" > /dev/null 2>&1; [ $? = 2 ] && ok || bad "a missing input did not exit 2"
# per-line keys: every sampling option run has a flag for, seed, max_tokens, ignore_eos; the
# command's own sampling flags are the defaults a line overrides
cat > "$tmp/keys.jsonl" <<'EOF'
{"prompt": "In the beginning God created", "temperature": 0.7, "top_p": 0.9, "top_k": 50, "seed": 3, "max_tokens": 12}
{"prompt": "And it came to pass", "min_p": 0.05, "repeat_penalty": 1.3, "frequency_penalty": 0.5, "presence_penalty": -0.5, "seed": 9, "max_tokens": 10}
{"prompt": "Blessed is the man", "temperature": 0, "max_tokens": 8, "ignore_eos": true}
{"prompt": "x", "temp": 1}
{"prompt": "x", "top_k": -3}
{"ids": [1, 2], "top_p": "high"}
{"prompt": "And the LORD said", "temperature": 0, "max_tokens": 30, "stop": ["zzz", "thou"]}
EOF
"$BIN" batch $M --input "$tmp/keys.jsonl" --temperature 1.2 --seed 5 --max-tokens 30 --quiet > "$tmp/k" 2> "$tmp/ke"; rk=$?
[ $rk = 0 ] && [ "$(wc -l < "$tmp/k")" = 7 ] && ok || bad "per-line keys: exit $rk, $(wc -l < "$tmp/k") results: $(head -c 300 "$tmp/ke")"
kline() { sed -n "$1p" "$tmp/k" | $PY -c "import json,sys; print(json.dumps(json.load(sys.stdin).get('generated_ids')))"; }
krun() { "$BIN" run $M --json --quiet "$@" | $PY -c "import json,sys; print(json.dumps(json.load(sys.stdin)['generated_ids']))"; }
[ "$(kline 1)" = "$(krun --prompt "In the beginning God created" --temperature 0.7 --top-p 0.9 --top-k 50 --seed 3 --max-tokens 12)" ] \
    && ok || bad "line 1 (temperature, top_p, top_k, seed, max_tokens) differs from run: $(kline 1)"
[ "$(kline 2)" = "$(krun --prompt "And it came to pass" --temperature 1.2 --min-p 0.05 --repeat-penalty 1.3 \
      --frequency-penalty 0.5 --presence-penalty -0.5 --seed 9 --max-tokens 10)" ] \
    && ok || bad "line 2 (min_p, penalties, seed over the command's temperature) differs from run: $(kline 2)"
[ "$(kline 3)" = "$(krun --prompt "Blessed is the man" --temperature 0 --max-tokens 8 --ignore-eos)" ] \
    && ok || bad "line 3 (temperature 0, ignore_eos) differs from run: $(kline 3)"
# the line's temperature is used: with the command's it would give other tokens
[ "$(kline 1)" != "$(krun --prompt "In the beginning God created" --temperature 1.2 --top-p 0.9 --top-k 50 --seed 3 --max-tokens 12)" ] \
    && ok || bad "line 1's temperature was not used"
# stop strings: run --stop's tokens and text; the text ends where the stop begins
want=$("$BIN" run $M --prompt "And the LORD said" --temperature 0 --max-tokens 30 --stop zzz --stop thou --json --quiet)
[ "$(kline 7)" = "$(printf '%s' "$want" | $PY -c "import json,sys; print(json.dumps(json.load(sys.stdin)['generated_ids']))")" ] \
    && ok || bad "line 7 (stop) differs from run --stop: $(kline 7)"
sed -n 7p "$tmp/k" | $PY -c "
import json, sys
r = json.load(sys.stdin); w = json.loads(sys.argv[1])
assert r['finish_reason'] == 'stop' and r['text'] == w['text'] and 'thou' not in r['text'] and len(r['generated_ids']) < 30, (r, w)
" "$want" && ok || bad "line 7's text / finish: $(sed -n 7p "$tmp/k")"
grep -q '"index": 3, "error": "unknown key \\"temp\\"' "$tmp/k" && ok || bad "unknown key: $(sed -n 4p "$tmp/k")"
grep -q '"index": 4, "error": "bad top_k: ' "$tmp/k" && ok || bad "bad top_k: $(sed -n 5p "$tmp/k")"
grep -q '"index": 5, "error": "bad top_p: ' "$tmp/k" && ok || bad "bad top_p: $(sed -n 6p "$tmp/k")"
# no byte of the input is dropped: a NUL inside a line is that line's error, the next lines run
printf '{"ids": [1, 2], "max_tokens": 2}\n{"ids": [1,\0 2]}\n{"ids": [3, 4], "max_tokens": 2}\n' > "$tmp/nul.jsonl"
"$BIN" batch $M --input "$tmp/nul.jsonl" --quiet > "$tmp/n" 2>/dev/null
[ "$(wc -l < "$tmp/n")" = 3 ] && grep -q '"index": 1, "error"' "$tmp/n" && grep -q '"index": 2, "prompt_tokens": 2' "$tmp/n" && ok \
    || bad "a NUL byte cut the input: $(cat "$tmp/n")"

echo "t_batch: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
