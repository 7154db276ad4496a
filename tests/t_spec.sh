#!/usr/bin/env bash
# tests/t_spec.sh - --speculate in the programs gives the bits of plain decoding.
#
# On the bundled model (models/k3-tiny):
#  1. `run`, greedy and seeded sampling with a repetition penalty, at the
#     smallest plan and resident: --speculate 1, 3 and 8 print the same ids as
#     --speculate 0, the first step's logits (--dump-logits) are equal, the
#     session saved after the run (--save-session) is byte-identical, and the
#     greedy runs accepted drafts (JSON stats: accepted > 0, decode_passes <
#     decode_tokens) and rejected some (accepted < drafted);
#  2. EOS: a text prompt stops at <|end_of_msg|> at the same token with or
#     without --speculate (the answer ends at the same place);
#  3. `serve --speculate 4` answers completions (greedy and seeded) with the
#     same text and token counts as `serve` without it.
# Prints "t_spec: N passed, N failed" as its last line.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
PY=/usr/bin/python3
M=models/k3-tiny
tmp=$(mktemp -d)
PIDS=
cleanup() { for p in $PIDS; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
. tests/lib.sh

P1="And the LORD spake unto Moses, saying, And the LORD spake unto"
field() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2"; }

# ---- 1. run ------------------------------------------------------------------------------
for ram in min all; do
    for samp in greedy seeded; do
        sargs=()
        [ $samp = seeded ] && sargs=(--temperature 0.8 --top-k 20 --repeat-penalty 1.1 --seed 99)
        for k in 0 1 3 8; do
            "$BIN" run $M --ram $ram --prompt "$P1" --max-tokens 40 --ignore-eos --json --quiet \
                --speculate $k "${sargs[@]}" --dump-logits "$tmp/l$k.f32" \
                --save-session "$tmp/s$k.bin" > "$tmp/r$k.json" 2> "$tmp/e$k.txt" || bad "run --speculate $k exited $?: $(cat "$tmp/e$k.txt")"
        done
        ids0=$(field "$tmp/r0.json" 'd["generated_ids"]')
        [ "$(field "$tmp/r0.json" 'len(d["generated_ids"])')" = 40 ] && ok || bad "$ram $samp: plain run did not generate 40 tokens"
        acc=0; dr=0
        for k in 1 3 8; do
            [ "$(field "$tmp/r$k.json" 'd["generated_ids"]')" = "$ids0" ] && ok || bad "$ram $samp: --speculate $k: ids differ"
            cmp -s "$tmp/l0.f32" "$tmp/l$k.f32" && ok || bad "$ram $samp: --speculate $k: first logits differ"
            cmp -s "$tmp/s0.bin" "$tmp/s$k.bin" && ok || bad "$ram $samp: --speculate $k: saved sessions differ"
            acc=$((acc + $(field "$tmp/r$k.json" 'd["stats"]["accepted"]')))
            dr=$((dr + $(field "$tmp/r$k.json" 'd["stats"]["drafted"]')))
            [ "$(field "$tmp/r$k.json" 'd["stats"]["decode_tokens"]')" = 40 ] && ok || bad "$ram $samp: --speculate $k: decode tokens counted"
        done
        [ $acc -lt $dr ] && ok || bad "$ram $samp: no draft rejected ($acc of $dr)"
        if [ $samp = greedy ]; then
            [ $acc -gt 0 ] && ok || bad "$ram greedy: no draft accepted"
            [ "$(field "$tmp/r8.json" 'd["stats"]["decode_passes"] < d["stats"]["decode_tokens"]')" = True ] && ok || \
                bad "$ram greedy: --speculate 8 made no fewer passes than tokens"
        fi
    done
done

# ---- 2. EOS ------------------------------------------------------------------------------
# the 3rd token of the plain greedy answer becomes the stop token: configs are model data,
# so a copy of the model with eos_token_id set to it (weights linked, not copied)
third=$("$BIN" run $M --prompt "$P1" --max-tokens 3 --json --quiet | $PY -c "import json,sys; print(json.load(sys.stdin)['generated_ids'][2])")
mkdir -p "$tmp/m"
for f in $M/*; do ln -s "$(realpath "$f")" "$tmp/m/$(basename "$f")"; done
rm "$tmp/m/config.json" "$tmp/m/moestream.sums"
$PY - "$M/config.json" "$tmp/m/config.json" "$third" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
for t in (c, c.get("text_config", {})):
    if "eos_token_id" in t: t["eos_token_id"] = int(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"), indent=2)
EOF
for k in 0 8; do
    "$BIN" run "$tmp/m" --prompt "$P1" --max-tokens 40 --json --quiet --speculate $k \
        --save-session "$tmp/eos$k.bin" > "$tmp/eos$k.json" 2>/dev/null
done
[ "$(field "$tmp/eos0.json" 'd["generated_ids"][-1]')" = "$third" ] && ok || bad "EOS: the plain run did not stop at $third"
[ "$(field "$tmp/eos8.json" 'd["generated_ids"]')" = "$(field "$tmp/eos0.json" 'd["generated_ids"]')" ] && ok || bad "EOS: --speculate 8 did not stop where plain decoding stops"
cmp -s "$tmp/eos0.bin" "$tmp/eos8.bin" && ok || bad "EOS: saved sessions differ"

# ---- 3. serve ----------------------------------------------------------------------------
start() {   # k -> URL in $tmp/url$k
    "$BIN" serve $M --port 0 --speculate "$1" --quiet > "$tmp/srv$1.log" 2>&1 &
    PIDS="$PIDS $!"
    for _ in $(seq 300); do grep -q 'listening on' "$tmp/srv$1.log" && break; sleep 0.1; done
    grep -o 'listening on http://[^/]*' "$tmp/srv$1.log" | head -n 1 | sed 's|.*listening on ||' > "$tmp/url$1"
}
start 0; start 4
u0=$(cat "$tmp/url0"); u4=$(cat "$tmp/url4")
if [ -n "$u0" ] && [ -n "$u4" ]; then
    for body in "{\"model\":\"k3-tiny\",\"prompt\":\"$P1\",\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true}" \
                "{\"model\":\"k3-tiny\",\"prompt\":\"$P1\",\"max_tokens\":33,\"temperature\":0.9,\"seed\":5}" \
                "{\"model\":\"k3-tiny\",\"prompt\":\"$P1\",\"max_tokens\":40,\"temperature\":0,\"stop\":[\"Moses\"]}"; do
        a=$(curl -s "$u0/v1/completions" -d "$body" | $PY -c "import json,sys; d=json.load(sys.stdin); print(repr(d['choices'][0]['text']), d['choices'][0]['finish_reason'], d['usage'])")
        b=$(curl -s "$u4/v1/completions" -d "$body" | $PY -c "import json,sys; d=json.load(sys.stdin); print(repr(d['choices'][0]['text']), d['choices'][0]['finish_reason'], d['usage'])")
        [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "serve --speculate 4: '$b' != '$a' for $body"
    done
else
    bad "the servers did not start: $(tail -n 3 "$tmp/srv0.log" "$tmp/srv4.log")"
fi
echo "t_spec: $pass passed, $fail failed"
