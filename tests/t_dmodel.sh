#!/usr/bin/env bash
# tests/t_dmodel.sh - --draft-model in the programs gives the bits of plain decoding.
#
# On the bundled model (models/k3-tiny) and its draft (models/k3-tiny-draft):
#  1. `run`, greedy and seeded sampling with a repetition penalty, at the
#     smallest plan and resident, 1 and 2 threads: --speculate 4 and auto with
#     --draft-model print the ids of --speculate 0, the same first-step logits
#     (--dump-logits) and a byte-identical saved session; the JSON stats count
#     drafts of the source "model" (drafted_by_source, draft_model_tokens);
#     and with every kernel table the CPU runs, the ids, logits and session
#     of plain decoding;
#  2. `serve --speculate auto --draft-model` answers completions (greedy and
#     seeded) with the text and token counts of `serve` without it, and
#     /metrics counts drafted tokens of source="model";
#  3. `plan --draft-model` shows the draft's line and a larger total, and
#     under --pipeline 2 the line says stage 0 holds it and stage 0's planned
#     bytes grow;
#  4. refused, exit 2, naming both directories: a draft of another vocabulary
#     (a generated model), a draft with --speculate 0; without --speculate
#     it drafts (auto is the default);
#  5. `chat` from a pipe answers two messages alike with and without it; under
#     mpirun -np 2 (a build with MPI) `run` gives the one-process ids with drafts
#     of the model (it runs on the first stage);
#  6. tests/t_bundled.sh passes on models/k3-tiny-draft (its layout, the engine's
#     perplexity against the float64 reference, a trained model's perplexity).
# Prints "t_dmodel: N passed, N failed" as its last line.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
TD=${MS_TESTDATA:-$BUILD/testdata}
PY=/usr/bin/python3
M=models/k3-tiny
D=models/k3-tiny-draft
tmp=$(mktemp -d)
PIDS=
cleanup() { for p in $PIDS; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
. tests/lib.sh

P1="And the LORD spake unto Moses, saying,"
field() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2"; }

# ---- 1. run ------------------------------------------------------------------------------
for ram in min all; do
    for samp in greedy seeded; do
        sargs=()
        [ $samp = seeded ] && sargs=(--temperature 0.8 --top-k 20 --repeat-penalty 1.1 --seed 99)
        for k in 0 4 auto; do
            for th in 1 2; do
                [ $k = 0 ] && [ $th = 2 ] && continue
                dargs=()
                [ $k != 0 ] && dargs=(--draft-model $D)
                n=$k.$th
                "$BIN" run $M --ram $ram --threads $th --prompt "$P1" --max-tokens 32 --ignore-eos --json --quiet \
                    --speculate $k "${dargs[@]}" "${sargs[@]}" --dump-logits "$tmp/l$n.f32" \
                    --save-session "$tmp/s$n.bin" > "$tmp/r$n.json" 2> "$tmp/e$n.txt" ||
                    bad "$ram $samp: run --speculate $k --threads $th exited $?: $(cat "$tmp/e$n.txt")"
            done
        done
        ids0=$(field "$tmp/r0.1.json" 'd["generated_ids"]')
        [ "$(field "$tmp/r0.1.json" 'len(d["generated_ids"])')" = 32 ] && ok || bad "$ram $samp: plain run did not generate 32 tokens"
        for n in 4.1 4.2 auto.1 auto.2; do
            [ "$(field "$tmp/r$n.json" 'd["generated_ids"]')" = "$ids0" ] && ok || bad "$ram $samp: --speculate $n + draft model: ids differ"
            cmp -s "$tmp/l0.1.f32" "$tmp/l$n.f32" && ok || bad "$ram $samp: $n: first logits differ"
            cmp -s "$tmp/s0.1.bin" "$tmp/s$n.bin" && ok || bad "$ram $samp: $n: saved sessions differ"
        done
        # fixed K drafts with the model every pass; auto as long as it is expected to pay
        [ "$(field "$tmp/r4.1.json" 'd["stats"]["drafted_by_source"]["model"] > 0 and d["stats"]["draft_model_tokens"] > 0')" = True ] &&
            ok || bad "$ram $samp: --speculate 4: no draft of the model counted"
        [ "$(field "$tmp/r4.1.json" 'd["stats"]["drafted_by_source"]["model"] == d["stats"]["drafted"]')" = True ] &&
            ok || bad "$ram $samp: --speculate 4: drafts from another source than the model"
    done
done

# every kernel table this CPU runs, the draft model's too (--kernels is the
# engine's, and the draft's): the ids, first logits and session of plain decoding
run1() {    # name, flags...
    local n=$1; shift
    "$BIN" run $M --ram min --prompt "$P1" --max-tokens 24 --ignore-eos --json --quiet --dump-logits "$tmp/kl$n.f32" \
        --save-session "$tmp/ks$n.bin" "$@" > "$tmp/kr$n.json" 2> "$tmp/ke$n.txt"
}
run1 plain --speculate 0 || bad "kernels: plain run exited $?: $(cat "$tmp/keplain.txt")"
ran=0
for kt in ref avx2 avx512 avx512-l2; do
    if ! run1 $kt --kernels $kt --speculate auto --draft-model $D; then
        grep -q "lacks it" "$tmp/ke$kt.txt" && continue
        bad "kernels $kt: run exited: $(cat "$tmp/ke$kt.txt")"; continue
    fi
    ran=$((ran + 1))
    [ "$(field "$tmp/kr$kt.json" 'd["generated_ids"]')" = "$(field "$tmp/krplain.json" 'd["generated_ids"]')" ] &&
        cmp -s "$tmp/klplain.f32" "$tmp/kl$kt.f32" && cmp -s "$tmp/ksplain.bin" "$tmp/ks$kt.bin" && ok ||
        bad "kernels $kt with the draft model: ids, first logits or session differ from plain decoding"
    [ "$(field "$tmp/kr$kt.json" 'd["kernels"] == "'$kt'" and d["stats"]["drafted_by_source"]["model"] > 0')" = True ] && ok ||
        bad "kernels $kt: not the table asked for, or no draft of the model"
done
[ $ran -ge 2 ] && ok || bad "kernels: only $ran tables ran (ref and at least one other expected on x86-64)"

# ---- 2. serve ----------------------------------------------------------------------------
start() {   # name, flags... -> URL in $tmp/url.name
    local name=$1; shift
    "$BIN" serve $M --port 0 --quiet "$@" > "$tmp/srv$name.log" 2>&1 &
    PIDS="$PIDS $!"
    for _ in $(seq 300); do grep -qs 'listening on' "$tmp/srv$name.log" && break; sleep 0.1; done
    grep -o 'listening on http://[^/]*' "$tmp/srv$name.log" | head -n 1 | sed 's|.*listening on ||' > "$tmp/url.$name"
}
start plain; start draft --speculate auto --draft-model $D
u0=$(cat "$tmp/url.plain"); ud=$(cat "$tmp/url.draft")
if [ -n "$u0" ] && [ -n "$ud" ]; then
    ans() { curl -s "$1/v1/completions" -d "$2" | $PY -c "import json,sys; d=json.load(sys.stdin); print(repr(d['choices'][0]['text']), d['choices'][0]['finish_reason'], d['usage']['completion_tokens'])"; }
    for body in "{\"model\":\"k3-tiny\",\"prompt\":\"$P1\",\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true}" \
                "{\"model\":\"k3-tiny\",\"prompt\":\"In the beginning\",\"max_tokens\":33,\"temperature\":0.9,\"seed\":5}"; do
        a=$(ans "$u0" "$body"); b=$(ans "$ud" "$body")
        [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "serve --draft-model: '$b' != '$a' for $body"
    done
    dr=$(curl -s "$ud/metrics" | sed -n 's/^moestream_drafted_tokens_total{source="model"} //p')
    [ -n "$dr" ] && [ "$dr" -gt 0 ] && ok || bad "serve --draft-model: /metrics drafted tokens of the model: '$dr'"
else
    bad "the servers did not start: $(tail -n 3 "$tmp/srvplain.log" "$tmp/srvdraft.log")"
fi

# ---- 3. plan -----------------------------------------------------------------------------
"$BIN" plan $M --ram min --speculate 4 > "$tmp/p0.txt"
"$BIN" plan $M --ram min --speculate 4 --draft-model $D > "$tmp/p1.txt"
grep -q "draft model $D (resident" "$tmp/p1.txt" && ! grep -q "draft model" "$tmp/p0.txt" && ok || bad "plan: the draft's line"
t0=$(sed -n 's/^total planned: \([0-9.]*\) MiB/\1/p' "$tmp/p0.txt"); t1=$(sed -n 's/^total planned: \([0-9.]*\) MiB/\1/p' "$tmp/p1.txt")
[ -n "$t0" ] && [ -n "$t1" ] && $PY -c "import sys; sys.exit(0 if float('$t1') > float('$t0') else 1)" && ok ||
    bad "plan: the draft adds nothing to the total ($t0 MiB, $t1 MiB)"
"$BIN" plan $M --ram 80M --pipeline 2 > "$tmp/q0.txt"
"$BIN" plan $M --ram 80M --pipeline 2 --draft-model $D > "$tmp/q1.txt"
grep -q "draft model $D (resident.*(stage 0 holds it" "$tmp/q1.txt" && ! grep -q "draft model" "$tmp/q0.txt" && ok ||
    bad "plan --pipeline 2: the draft's line"
s0=$(awk '$1 == 0 {print $3}' "$tmp/q0.txt"); s1=$(awk '$1 == 0 {print $3}' "$tmp/q1.txt")
r0=$(awk '$1 == 1 {print $3}' "$tmp/q0.txt"); r1=$(awk '$1 == 1 {print $3}' "$tmp/q1.txt")
[ -n "$s0" ] && [ -n "$r0" ] && [ "$r0" = "$r1" ] && $PY -c "import sys; sys.exit(0 if float('$s1') > float('$s0') else 1)" && ok ||
    bad "plan --pipeline 2: stage 0 holds the draft ($s0 -> $s1 MiB), stage 1 not ($r0 -> $r1 MiB)"

# ---- 4. refused --------------------------------------------------------------------------
"$BIN" run $M --prompt x --speculate 4 --draft-model "$TD/a" > /dev/null 2> "$tmp/ce.txt"; rc=$?
[ $rc = 2 ] && grep -q -- "--draft-model $TD/a" "$tmp/ce.txt" && grep -q "$M" "$tmp/ce.txt" && ok ||
    bad "a draft of another vocabulary: exit $rc, '$(cat "$tmp/ce.txt")'"
"$BIN" run $M --prompt x --draft-model $D --speculate 0 > /dev/null 2> "$tmp/ce.txt"; rc=$?
[ $rc = 2 ] && grep -q -- "--speculate" "$tmp/ce.txt" && ok || bad "--draft-model with --speculate 0: exit $rc, '$(cat "$tmp/ce.txt")'"
# without --speculate: auto, the default of the commands that generate
"$BIN" run $M --prompt x --max-tokens 4 --draft-model $D --json --quiet > "$tmp/cd.txt" 2>&1; rc=$?
[ $rc = 0 ] && grep -q '"draft_model_tokens"' "$tmp/cd.txt" && ok || bad "--draft-model, --speculate left out (auto): exit $rc, '$(head -c 300 "$tmp/cd.txt")'"

# ---- 5. chat, and a pipeline of two processes ----------------------------------------
printf 'Who was Moses?\nAnd then?\n' | "$BIN" chat $M --quiet --max-tokens 40 > "$tmp/c0.txt" 2>&1
printf 'Who was Moses?\nAnd then?\n' | "$BIN" chat $M --quiet --max-tokens 40 --speculate auto --draft-model $D > "$tmp/c1.txt" 2>&1
[ -s "$tmp/c0.txt" ] && cmp -s "$tmp/c0.txt" "$tmp/c1.txt" && ok || bad "chat --draft-model: the answers differ"
. tests/lib_mpi.sh
if mpi_built; then
    # the draft model runs on the first stage, beside the sampler
    mpirun -np 2 "$BIN" run $M --prompt "$P1" --max-tokens 32 --ignore-eos --json --quiet --speculate 4 \
        --draft-model $D > "$tmp/mp.json" 2> "$tmp/mp.txt" || bad "mpirun -np 2 run --draft-model: exit $?: $(tail -n 3 "$tmp/mp.txt")"
    "$BIN" run $M --prompt "$P1" --max-tokens 32 --ignore-eos --json --quiet > "$tmp/sp.json"
    [ "$(field "$tmp/mp.json" 'd["generated_ids"]')" = "$(field "$tmp/sp.json" 'd["generated_ids"]')" ] &&
        [ "$(field "$tmp/mp.json" 'd["stats"]["drafted_by_source"]["model"] > 0')" = True ] && ok ||
        bad "mpirun -np 2 run --draft-model: ids differ from one process, or no draft of the model"
fi

# ---- 6. the draft's own checkpoint --------------------------------------------------------
# tests/t_bundled.sh on it: layout, engine perplexity = the float64 reference's, trained
MS_BUNDLED_MODEL=$D bash tests/t_bundled.sh > "$tmp/bundled.txt" 2>&1
tail -n 1 "$tmp/bundled.txt" | grep -q ', 0 failed$' && ok || bad "t_bundled on $D: $(grep FAIL "$tmp/bundled.txt" | head -n 3)"

echo "t_dmodel: $pass passed, $fail failed"
