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
#     --speculate auto, alone and with --draft-corpus (the model's held-out
#     text), give the same ids, first logits and saved session too;
#  3. `serve --speculate 4` and `serve --speculate auto` answer completions
#     (greedy and seeded) with the same text and token counts (the usage
#     but its "speculation") as `serve` without it; the auto server accepts no history draft for a first
#     request and some when the same request comes again (GET /metrics);
#  4. a corpus the answer quotes (the prompt and its plain answer): the ids of
#     plain decoding at the smallest plan and resident, drafts accepted from
#     the corpus source, fewer passes (and bytes) than auto without it; a
#     corpus of unrelated words: the same ids;
#  5. a bad --draft-corpus (missing, a directory, over 8 MiB, a model without
#     tokenizer, no --speculate) is exit 2 naming the flag, before the model
#     loads (a missing model directory is not what is reported);
#  6. without --speculate `run` drafts (auto is the default) and `plan`
#     counts the rollback records; --chunk 4 shortens auto's drafts to 3,
#     --chunk 1 turns them off, --speculate 8 --chunk 4 is refused;
#     --draft-costs: a free pass gets no draft, a dear one long drafts; the
#     ids of --speculate 0 throughout;
#  7. --draft-tree 1 on fork corpora (after every 8 ids of the plain answer
#     to P1, a wrong id 3 times and the right one twice; or two wrong ones),
#     greedy and seeded, at the smallest plan and resident, chunks 32 and 12:
#     the ids, first logits and saved session of --speculate 0; second
#     branches taken and kept (the wrong corpus: taken); fewer passes and
#     bytes than chains on the forks; with --draft-model too (the same ids and
#     session, branches and the model's drafts kept); --speculate 3 --draft-tree 1 refused
#     (exit 2); `plan --draft-tree 1` counts one more session; a server with
#     it answers with plain decoding's text and reports the branches in
#     usage.speculation and /metrics.
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
        for k in 0 1 3 8 auto autoc; do
            kargs=(--speculate $k)
            [ $k = autoc ] && kargs=(--speculate auto --draft-corpus $M/heldout.txt)
            "$BIN" run $M --ram $ram --prompt "$P1" --max-tokens 40 --ignore-eos --json --quiet \
                "${kargs[@]}" "${sargs[@]}" --dump-logits "$tmp/l$k.f32" \
                --save-session "$tmp/s$k.bin" > "$tmp/r$k.json" 2> "$tmp/e$k.txt" || bad "run --speculate $k exited $?: $(cat "$tmp/e$k.txt")"
        done
        ids0=$(field "$tmp/r0.json" 'd["generated_ids"]')
        [ "$(field "$tmp/r0.json" 'len(d["generated_ids"])')" = 40 ] && ok || bad "$ram $samp: plain run did not generate 40 tokens"
        acc=0; dr=0
        for k in auto autoc; do
            [ "$(field "$tmp/r$k.json" 'd["generated_ids"]')" = "$ids0" ] && ok || bad "$ram $samp: --speculate $k: ids differ"
            cmp -s "$tmp/l0.f32" "$tmp/l$k.f32" && ok || bad "$ram $samp: --speculate $k: first logits differ"
            cmp -s "$tmp/s0.bin" "$tmp/s$k.bin" && ok || bad "$ram $samp: --speculate $k: saved sessions differ"
        done
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
    for _ in $(seq 300); do grep -qs 'listening on' "$tmp/srv$1.log" && break; sleep 0.1; done
    grep -o 'listening on http://[^/]*' "$tmp/srv$1.log" | head -n 1 | sed 's|.*listening on ||' > "$tmp/url$1"
}
start 0; start 4; start auto
u0=$(cat "$tmp/url0"); u4=$(cat "$tmp/url4"); ua=$(cat "$tmp/urlauto")
if [ -n "$u0" ] && [ -n "$u4" ] && [ -n "$ua" ]; then
    for body in "{\"model\":\"k3-tiny\",\"prompt\":\"$P1\",\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true}" \
                "{\"model\":\"k3-tiny\",\"prompt\":\"$P1\",\"max_tokens\":33,\"temperature\":0.9,\"seed\":5}" \
                "{\"model\":\"k3-tiny\",\"prompt\":\"$P1\",\"max_tokens\":40,\"temperature\":0,\"stop\":[\"Moses\"]}"; do
        a=$(curl -s "$u0/v1/completions" -d "$body" | $PY -c "import json,sys; d=json.load(sys.stdin); print(repr(d['choices'][0]['text']), d['choices'][0]['finish_reason'], {k: v for k, v in d['usage'].items() if k != 'speculation'})")
        b=$(curl -s "$u4/v1/completions" -d "$body" | $PY -c "import json,sys; d=json.load(sys.stdin); print(repr(d['choices'][0]['text']), d['choices'][0]['finish_reason'], {k: v for k, v in d['usage'].items() if k != 'speculation'})")
        [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "serve --speculate 4: '$b' != '$a' for $body"
        c=$(curl -s "$ua/v1/completions" -d "$body" | $PY -c "import json,sys; d=json.load(sys.stdin); print(repr(d['choices'][0]['text']), d['choices'][0]['finish_reason'], {k: v for k, v in d['usage'].items() if k != 'speculation'})")
        [ -n "$a" ] && [ "$a" = "$c" ] && ok || bad "serve --speculate auto: '$c' != '$a' for $body"
    done
    # the auto server, a new prompt twice: history drafts are accepted the second time only
    hist() { curl -s "$ua/metrics" | sed -n "s/^moestream_accepted_tokens_total{source=\"history\"} //p"; }
    h0=$(hist)
    P2="And it came to pass after these things, that God did tempt Abraham"
    body="{\"model\":\"k3-tiny\",\"prompt\":\"$P2\",\"max_tokens\":48,\"temperature\":0,\"ignore_eos\":true}"
    a=$(curl -s "$u0/v1/completions" -d "$body" | $PY -c "import json,sys; d=json.load(sys.stdin); print(repr(d['choices'][0]['text']), d['usage']['completion_tokens'])")
    for i in 1 2; do   # (the repeat's prompt comes from the prompt cache: cached_tokens differ)
        b=$(curl -s "$ua/v1/completions" -d "$body" | $PY -c "import json,sys; d=json.load(sys.stdin); print(repr(d['choices'][0]['text']), d['usage']['completion_tokens'])")
        [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "serve --speculate auto, request $i: '$b' != '$a'"
        eval "h$i=\$(hist)"
    done
    [ -n "$h0" ] && [ -n "$h1" ] && [ -n "$h2" ] && [ $((h2 - h1)) -gt $((h1 - h0)) ] && [ $((h2 - h1)) -gt 0 ] && ok || \
        bad "serve --speculate auto: history drafts accepted: $h0, after the first request $h1, after the same again $h2"
else
    bad "the servers did not start: $(tail -n 3 "$tmp/srv0.log" "$tmp/srv4.log" "$tmp/srvauto.log")"
fi
# ---- 4. a corpus the answer quotes -------------------------------------------------------
P2="And it came to pass after these things, that God did tempt Abraham"
"$BIN" run $M --prompt "$P2" --max-tokens 48 --ignore-eos --json --quiet > "$tmp/q0.json"
$PY - "$tmp/q0.json" "$P2" "$tmp/quote.txt" "$tmp/words.txt" <<'PYEOF'
import json, random, sys
d = json.load(open(sys.argv[1]))
open(sys.argv[3], "w").write("Some other text first.\n" + sys.argv[2] + d["text"] + "\nAnd more after it.\n")
r = random.Random(5)
w = ["alpha", "quartz", "nebula", "copper", "violin", "glacier", "syntax", "orbit", "lantern", "mosaic"]
open(sys.argv[4], "w").write(" ".join(r.choice(w) for _ in range(3000)) + "\n")
PYEOF
qids=$(field "$tmp/q0.json" 'd["generated_ids"]')
for ram in min all; do
    for c in quote words; do
        "$BIN" run $M --ram $ram --prompt "$P2" --max-tokens 48 --ignore-eos --json --quiet --speculate auto \
            --draft-corpus "$tmp/$c.txt" > "$tmp/q$c.json" 2> "$tmp/qe.txt" || bad "corpus $c $ram: exit $?: $(cat "$tmp/qe.txt")"
        [ "$(field "$tmp/q$c.json" 'd["generated_ids"]')" = "$qids" ] && ok || bad "corpus $c $ram: ids differ from plain decoding"
    done
    "$BIN" run $M --ram $ram --prompt "$P2" --max-tokens 48 --ignore-eos --json --quiet --speculate auto > "$tmp/qa.json"
    [ "$(field "$tmp/qquote.json" 'd["stats"]["accepted_by_source"]["corpus"] > 0')" = True ] && ok || \
        bad "corpus $ram: no corpus draft accepted"
    [ "$(field "$tmp/qquote.json" 'd["stats"]["decode_passes"]')" -lt "$(field "$tmp/qa.json" 'd["stats"]["decode_passes"]')" ] && ok || \
        bad "corpus $ram: no fewer passes than without the corpus"
    if [ $ram = min ]; then
        [ "$(field "$tmp/qquote.json" 'd["stats"]["bytes_read"]')" -lt "$(field "$tmp/qa.json" 'd["stats"]["bytes_read"]')" ] && ok || \
            bad "corpus min: no fewer bytes read than without the corpus"
    fi
done

# ---- 5. a bad --draft-corpus ---------------------------------------------------------------
truncate -s 9M "$tmp/big.txt"
for c in "$tmp/missing.txt" "$tmp" "$tmp/big.txt"; do
    "$BIN" run "$tmp/no-model" --prompt x --speculate auto --draft-corpus "$c" > /dev/null 2> "$tmp/ce.txt"; rc=$?
    [ $rc = 2 ] && grep -q -- "--draft-corpus $c" "$tmp/ce.txt" && ok || bad "--draft-corpus $c: exit $rc, '$(cat "$tmp/ce.txt")'"
done
"$BIN" run $M --prompt x --draft-corpus "$tmp/quote.txt" --speculate 0 > /dev/null 2> "$tmp/ce.txt"; rc=$?
[ $rc = 2 ] && grep -q -- "--speculate" "$tmp/ce.txt" && ok || bad "--draft-corpus with --speculate 0: exit $rc, '$(cat "$tmp/ce.txt")'"
"$BIN" run "${MS_TESTDATA:-$BUILD/testdata}/a" --ids 1,2,3 --speculate auto --draft-corpus "$tmp/quote.txt" > /dev/null 2> "$tmp/ce.txt"; rc=$?
[ $rc = 2 ] && grep -q -- "no tokenizer" "$tmp/ce.txt" && ok || bad "--draft-corpus, model without tokenizer: exit $rc, '$(cat "$tmp/ce.txt")'"

# ---- 6. the default, a small chunk, given costs -------------------------------------------
# run, chat, serve and plan speculate (auto) unless told --speculate 0; a
# chunk smaller than auto's 8 + 1 shortens auto's drafts (chunk 1: none)
# instead of being refused; an explicit K still needs K + 1; --draft-costs
# steer auto: a pass that costs nothing (only experts read) is never worth
# a draft, a costly pass is
r6() {  # name, flags...
    local n=$1; shift
    "$BIN" run $M --ram min --prompt "$P1" --max-tokens 40 --ignore-eos --json --quiet "$@" > "$tmp/d$n.json" 2> "$tmp/de$n.txt"
}
r6 plain --speculate 0; r6 dflt; r6 c4 --chunk 4; r6 c1 --chunk 1; r6 free --draft-costs 0,1M; r6 dear --draft-costs 1G,1M
idsp=$(field "$tmp/dplain.json" 'd["generated_ids"]')
for n in dflt c4 c1 free dear; do
    [ -s "$tmp/d$n.json" ] && [ "$(field "$tmp/d$n.json" 'd["generated_ids"]')" = "$idsp" ] && ok ||
        bad "default speculation $n: ids differ or no output: $(cat "$tmp/de$n.txt")"
done
[ "$(field "$tmp/ddflt.json" 'd["stats"]["drafted"] > 0 and d["stats"]["decode_passes"] < d["stats"]["decode_tokens"]')" = True ] &&
    ok || bad "run without --speculate drafted nothing (auto is the default)"
[ "$(field "$tmp/dplain.json" 'd["stats"]["drafted"]')" = 0 ] && ok || bad "--speculate 0 drafted"
[ "$(field "$tmp/dc4.json" 'd["stats"]["drafted"] > 0 and d["stats"]["drafted"] <= 3 * d["stats"]["decode_passes"]')" = True ] &&
    ok || bad "--chunk 4: auto's drafts not 1..3 ids a pass"
[ "$(field "$tmp/dc1.json" 'd["stats"]["drafted"]')" = 0 ] && ok || bad "--chunk 1: auto drafted"
[ "$(field "$tmp/dfree.json" 'd["stats"]["drafted"]')" = 0 ] && ok || bad "--draft-costs 0,1M: auto drafted where a pass is free"
[ "$(field "$tmp/ddear.json" 'd["stats"]["drafted"] > d["stats"]["accepted"] and d["stats"]["accepted"] > 0')" = True ] &&
    ok || bad "--draft-costs 1G,1M: auto did not draft long where a pass is dear"
"$BIN" run $M --prompt x --speculate 8 --chunk 4 > /dev/null 2> "$tmp/ce.txt"; rc=$?
[ $rc = 2 ] && grep -q "prefill chunk 4 is out of \[9," "$tmp/ce.txt" && ok || bad "--speculate 8 --chunk 4: exit $rc, '$(cat "$tmp/ce.txt")'"
"$BIN" run $M --prompt x --draft-costs 5 > /dev/null 2> "$tmp/ce.txt"; rc=$?
[ $rc = 2 ] && grep -q -- "--draft-costs" "$tmp/ce.txt" && ok || bad "--draft-costs 5: exit $rc, '$(cat "$tmp/ce.txt")'"
"$BIN" plan $M --ram min > "$tmp/p.txt"; "$BIN" plan $M --ram min --speculate 0 > "$tmp/p0.txt"
ss() { sed -n 's/^  session (.*): \([0-9.]*\) MiB$/\1/p' "$1"; }
[ -n "$(ss "$tmp/p.txt")" ] && $PY -c "import sys; sys.exit(0 if float('$(ss "$tmp/p.txt")') > float('$(ss "$tmp/p0.txt")') else 1)" &&
    ok || bad "plan: the default plan's session ($(ss "$tmp/p.txt") MiB) holds no more than --speculate 0's ($(ss "$tmp/p0.txt") MiB)"

# ---- 7. a second branch (--draft-tree 1) ------------------------------------------------
# fork corpora (bench/fork_corpus.py): after every 8 ids of the plain answer to P1 (greedy,
# seeded), a wrong id 3 times and the right one twice, lines of the model's text; and one
# where both continuations are wrong
forks() {   # answer.json corpus.txt [--wrong]
    $PY bench/fork_corpus.py "$BIN" "$M" "$@"
}
for samp in greedy seeded; do
    sargs=()
    [ $samp = seeded ] && sargs=(--temperature 0.8 --top-k 20 --repeat-penalty 1.1 --seed 99)
    "$BIN" run $M --prompt "$P1" --max-tokens 48 --ignore-eos --json --quiet --speculate 0 "${sargs[@]}" > "$tmp/tp$samp.json"
    forks "$tmp/tp$samp.json" "$tmp/fork$samp.txt" || bad "fork corpus $samp"
    forks "$tmp/tp$samp.json" "$tmp/wrong$samp.txt" --wrong || bad "wrong corpus $samp"
    for ram in min all; do
        for chunk in 32 12; do
            c="$ram $samp --chunk $chunk"
            for k in 0 tree wrong; do
                kargs=(--speculate 0)
                [ $k = tree ] && kargs=(--draft-tree 1 --draft-corpus "$tmp/fork$samp.txt")
                [ $k = wrong ] && kargs=(--draft-tree 1 --draft-corpus "$tmp/wrong$samp.txt")
                "$BIN" run $M --ram $ram --chunk $chunk --prompt "$P1" --max-tokens 48 --ignore-eos --json --quiet \
                    "${kargs[@]}" "${sargs[@]}" --dump-logits "$tmp/tl$k.f32" --save-session "$tmp/ts$k.bin" \
                    > "$tmp/tr$k.json" 2> "$tmp/te.txt" || bad "$c: run $k exited $?: $(cat "$tmp/te.txt")"
            done
            ids0=$(field "$tmp/tr0.json" 'd["generated_ids"]')
            [ "$ids0" = "$(field "$tmp/tp$samp.json" 'd["generated_ids"]')" ] && ok || bad "$c: --speculate 0 differs from the first plain run"
            for k in tree wrong; do
                [ "$(field "$tmp/tr$k.json" 'd["generated_ids"]')" = "$ids0" ] && ok || bad "$c: --draft-tree 1 ($k): ids differ"
                cmp -s "$tmp/tl0.f32" "$tmp/tl$k.f32" && ok || bad "$c: --draft-tree 1 ($k): first logits differ"
                cmp -s "$tmp/ts0.bin" "$tmp/ts$k.bin" && ok || bad "$c: --draft-tree 1 ($k): saved sessions differ"
            done
            [ "$(field "$tmp/trtree.json" 'd["stats"]["tree_passes"] > 0 and d["stats"]["tree_accepted"] > 0 and d["stats"]["tree_drafted"] >= d["stats"]["tree_accepted"]')" = True ] && ok ||
                bad "$c: no second branch taken and kept: $(field "$tmp/trtree.json" '[d["stats"][k] for k in ("tree_passes", "tree_drafted", "tree_accepted")]')"
            [ "$(field "$tmp/trwrong.json" 'd["stats"]["tree_passes"] > 0')" = True ] && ok || bad "$c: the wrong corpus took no second branch"
        done
    done
done
# fewer passes and bytes than chains on the forks (greedy, smallest plan)
"$BIN" run $M --ram min --prompt "$P1" --max-tokens 48 --ignore-eos --json --quiet --draft-corpus "$tmp/forkgreedy.txt" > "$tmp/tchain.json"
"$BIN" run $M --ram min --prompt "$P1" --max-tokens 48 --ignore-eos --json --quiet --draft-corpus "$tmp/forkgreedy.txt" --draft-tree 1 > "$tmp/ttree.json"
[ "$(field "$tmp/ttree.json" 'd["stats"]["decode_passes"]')" -lt "$(field "$tmp/tchain.json" 'd["stats"]["decode_passes"]')" ] &&
    [ "$(field "$tmp/ttree.json" 'd["stats"]["bytes_read"]')" -lt "$(field "$tmp/tchain.json" 'd["stats"]["bytes_read"]')" ] && ok ||
    bad "forks: --draft-tree 1 made no fewer passes or read no fewer bytes than chains"
# with a draft model too (its state follows the session whichever branch won)
"$BIN" run $M --ram min --prompt "$P1" --max-tokens 48 --ignore-eos --json --quiet --draft-tree 1 --draft-corpus "$tmp/forkgreedy.txt" \
    --draft-model models/k3-tiny-draft --save-session "$tmp/tsdm.bin" > "$tmp/tdm.json" 2> "$tmp/te.txt" || bad "draft model + tree: exit $?: $(cat "$tmp/te.txt")"
"$BIN" run $M --ram min --prompt "$P1" --max-tokens 48 --ignore-eos --json --quiet --speculate 0 --save-session "$tmp/ts0.bin" > /dev/null
[ "$(field "$tmp/tdm.json" 'd["generated_ids"]')" = "$(field "$tmp/tpgreedy.json" 'd["generated_ids"]')" ] && cmp -s "$tmp/ts0.bin" "$tmp/tsdm.bin" &&
    [ "$(field "$tmp/tdm.json" 'd["stats"]["tree_accepted"] > 0 and d["stats"]["accepted_by_source"]["model"] > 0')" = True ] && ok ||
    bad "draft model + tree: ids, session or counters: $(field "$tmp/tdm.json" 'd["stats"]')"
# refused without auto; counted in the plan; a server's usage reports the branches
"$BIN" run $M --prompt x --speculate 3 --draft-tree 1 > /dev/null 2> "$tmp/ce.txt"; rc=$?
[ $rc = 2 ] && grep -q -- "--draft-tree" "$tmp/ce.txt" && ok || bad "--draft-tree 1 --speculate 3: exit $rc, '$(cat "$tmp/ce.txt")'"
"$BIN" plan $M --ram min --draft-tree 1 > "$tmp/pt.txt"
st() { sed -n 's/^  1 session + a second branch.s (.*): \([0-9.]*\) MiB$/\1/p' "$1"; }
[ -n "$(st "$tmp/pt.txt")" ] && $PY -c "import sys; sys.exit(0 if float('$(st "$tmp/pt.txt")') > float('$(ss "$tmp/p.txt")') else 1)" &&
    ok || bad "plan --draft-tree 1: the sessions' line ($(st "$tmp/pt.txt") MiB) holds no more than one session's ($(ss "$tmp/p.txt") MiB)"
"$BIN" serve $M --port 0 --draft-tree 1 --draft-corpus "$tmp/forkgreedy.txt" --quiet > "$tmp/srvt.log" 2>&1 &
PIDS="$PIDS $!"
for _ in $(seq 300); do grep -qs 'listening on' "$tmp/srvt.log" && break; sleep 0.1; done
ut=$(grep -o 'listening on http://[^/]*' "$tmp/srvt.log" | head -n 1 | sed 's|.*listening on ||')
body="{\"model\":\"k3-tiny\",\"prompt\":\"$P1\",\"max_tokens\":48,\"temperature\":0,\"ignore_eos\":true}"
a=$(field "$tmp/tpgreedy.json" 'repr(d["text"])')
b=$(curl -s "$ut/v1/completions" -d "$body" | $PY -c "import json,sys; d=json.load(sys.stdin); s=d['usage']['speculation']; print(repr(d['choices'][0]['text']), s['tree_passes'] > 0 and s['tree_accepted'] > 0)")
[ -n "$ut" ] && [ "$b" = "$a True" ] && ok || bad "serve --draft-tree 1: '$b', want '$a True'"
[ -n "$ut" ] && [ "$(curl -s "$ut/metrics" | sed -n 's/^moestream_tree_passes_total //p')" -gt 0 ] 2>/dev/null && ok || bad "serve --draft-tree 1: /metrics counts no second branch"

echo "t_spec: $pass passed, $fail failed"
