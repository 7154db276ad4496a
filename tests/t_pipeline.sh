#!/usr/bin/env bash
# tests/t_pipeline.sh - a pipeline across processes (mpirun -np N) gives the
# bits of one process.
#
#  1. build/tests/test_pipe --dump (prompt with every row's logits, greedy
#     decode, a session copy decoded side by side with its source in one
#     pass, a reset): the file of every logits row and id is byte-identical
#     between one process and 2 and 3 stages, resident, at the smallest plan,
#     with speculation (drafts, rollbacks in every stage), and with a split
#     given by --stages; on a test checkpoint (6 layers, 2 dense) and on the
#     bundled model (8 layers); the side-by-side prompts went through the
#     stages in groups when resident (the one-token steps in one piece), and
#     nothing at the floor; --stage-groups 1 and 2 force either way; a
#     prompt of several chunks, only its last chunk's logits read, sent its
#     earlier chunks on without waiting (--chunk 4 and 5);
#  2. `run` with a text prompt on the bundled model: the same ids under
#     mpirun -np 2 --ram min, and its JSON stats name each stage's bytes,
#     which add up to bytes_read; `chat` and `batch` print what one process
#     prints;
#  3. refusals: a bad --stages, a command that does not pipeline (verify),
#     stages started with another --speculate; each exits non-zero with its
#     reason; stages with their own --ram (MPMD) give the same ids; a stage 1
#     given a copy of the model with a damaged tokenizer runs (only stage 0
#     loads it), and `plan --pipeline` counts the tokenizer on stage 0 only;
#  4. saved sessions: saved by 2 or 3 stages, byte-identical to one
#     process's file; loaded by 3 stages, the same continuation;
#  5. `plan --pipeline N`: one row per stage, the layers covering the model
#     once in order, DOES NOT FIT per stage (exit 2), --stages honoured, and
#     the released K3 config (tests/data/format) at 4 x 32G pins every trunk
#     and at 4 x min streams every trunk (each stage at its floor);
#  6. `serve` under mpirun -np 2 answers a completion with the text of a
#     one-process server, and SIGTERM ends every process.
# Prints "t_pipeline: N passed, N failed" as its last line.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
TD=${MS_TESTDATA:-$BUILD/testdata}
PY=/usr/bin/python3
. tests/lib_serve.sh
. tests/lib.sh
. tests/lib_mpi.sh
mpi_or_skip t_pipeline
mpi_local t_pipeline

# 1. every logits row, one process against 2 and 3 stages
dump_case() {   # model, np, options...
    local m=$1 np=$2; shift 2
    local tag="$(basename "$m") np$np [$*]"
    if ! "$BUILD/tests/test_pipe" --dump "$m" "$tmp/one" "$@" > "$tmp/one.log" 2>&1; then
        bad "$tag: one process: $(tail -n 3 "$tmp/one.log")"; return
    fi
    if ! $MPI -np "$np" "$BUILD/tests/test_pipe" --dump "$m" "$tmp/many" "$@" > "$tmp/many.log" 2>&1; then
        bad "$tag: pipeline: $(grep -v '^-\|^ \|^$' "$tmp/many.log" | tail -n 3)"; return
    fi
    grep -q 'test_pipe: [0-9]* passed, 0 failed' "$tmp/many.log" && ok || bad "$tag: checks failed in the pipeline"
    local nst
    nst=$(grep -o 'stage bytes:.*' "$tmp/many.log" | wc -w)
    [ "$nst" = $((np + 2)) ] && ok || bad "$tag: $((nst - 2)) stage counters for $np stages"
    [ -s "$tmp/one" ] && cmp -s "$tmp/one" "$tmp/many" && ok || bad "$tag: logits differ from one process"
    # the side-by-side passes go through the stages in groups when every stage holds its
    # trunk (resident), in one piece when a stage streams it (--ram min)
    local gp
    gp=$(grep -o 'grouped passes [0-9]*' "$tmp/many.log" | grep -o '[0-9]*$')
    case "$*" in
        *"--stage-groups 1"*) [ "$gp" = 0 ] && ok || bad "$tag: $gp passes in groups with --stage-groups 1" ;;
        *"--stage-groups 2"*) [ -n "$gp" ] && [ "$gp" -ge 5 ] && ok || bad "$tag: '$gp' passes in groups with --stage-groups 2" ;;
        *"--ram min"*) [ "$gp" = 0 ] && ok || bad "$tag: $gp passes in groups while a stage streams its trunk" ;;
        *"--chunk 4"*) [ "$gp" = 0 ] && ok || bad "$tag: $gp passes in groups of under 16 tokens" ;;
        # automatic: the prompts' pass (>= 16 tokens a group), not the one-token steps
        *) [ "$gp" = 1 ] && ok || bad "$tag: '$gp' passes in groups (want the prompts' one)" ;;
    esac
    # the last prompt (23 tokens, only the last chunk's logits read): its chunks before the
    # last went on without waiting
    local ac want=0
    ac=$(grep -o 'async chunks [0-9]*' "$tmp/many.log" | grep -o '[0-9]*$')
    case "$*" in *"--chunk 5"*) want=4 ;; *"--chunk 4"*) want=5 ;; esac
    [ "$ac" = "$want" ] && ok || bad "$tag: '$ac' prompt chunks sent on without waiting, want $want"
}
for m in "$TD/b" models/k3-tiny; do
    for np in 2 3; do
        dump_case "$m" $np
        dump_case "$m" $np --ram min
        dump_case "$m" $np --speculate 4 --ram min --chunk 5
    done
done
dump_case "$TD/b" 3 --stages 1,5 --ram min
dump_case models/k3-tiny 2 --stages 7 --speculate 3
dump_case models/k3-tiny 2 --stage-groups 1
dump_case models/k3-tiny 3 --chunk 4
dump_case "$TD/b" 2 --chunk 4 --ram min
dump_case "$TD/b" 2 --ram min --stage-groups 2
# stage 0 ends without closing its engine (exit on an error path): the other stages end too
timeout 60 $MPI -np 2 "$BUILD/tests/test_pipe" --dump models/k3-tiny "$tmp/many" --leave 1 > "$tmp/leave.log" 2>&1
rc=$?
[ $rc -eq 0 ] && ok || bad "stage 0 left without closing: exit $rc (124: the stages hung)"
# the speculation case did draft and roll back (else it proves little)
"$BUILD/tests/test_pipe" --dump models/k3-tiny "$tmp/one" --speculate 4 --ram min --chunk 5 > "$tmp/spec.log" 2>&1
grep -q 'drafted [1-9][0-9]* accepted [0-9]* rolled back [1-9]' "$tmp/spec.log" && ok \
    || bad "the scenario drafted nothing or never rolled back: $(grep drafted "$tmp/spec.log")"

# 2. run, text in and out
P="And the LORD spake unto Moses, saying"
"$BIN" run models/k3-tiny --prompt "$P" --max-tokens 16 --ram min --json --quiet > "$tmp/r1.json" 2>&1
$MPI -np 2 "$BIN" run models/k3-tiny --prompt "$P" --max-tokens 16 --ram min --json --quiet > "$tmp/r2.json" 2> "$tmp/r2.err"
ids() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['generated_ids'])" "$1" 2>/dev/null; }
a=$(ids "$tmp/r1.json"); b=$(ids "$tmp/r2.json")
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "run: ids '$a' one process, '$b' two stages ($(head -c 300 "$tmp/r2.err"))"
$PY - "$tmp/r2.json" <<'EOF' && ok || bad "run: stage bytes in the JSON stats"
import json, sys
s = json.load(open(sys.argv[1]))["stats"]
st = s["stage_bytes_read"]
assert len(st) == 2, st
assert sum(x["trunk"] + x["experts"] for x in st) == s["bytes_read"], (st, s["bytes_read"])
assert all(x["trunk"] > 0 for x in st), st     # both stages stream at the floor
EOF

# chat (stdin reaches stage 0) and batch (sequences side by side) print what one process prints
printf 'Who spake unto Moses?\n/exit\n' | timeout 120 "$BIN" chat models/k3-tiny --max-tokens 12 --quiet > "$tmp/c1" 2>&1
printf 'Who spake unto Moses?\n/exit\n' | timeout 120 $MPI -np 2 "$BIN" chat models/k3-tiny --max-tokens 12 --quiet > "$tmp/c2" 2>&1
[ -s "$tmp/c1" ] && cmp -s "$tmp/c1" "$tmp/c2" && ok || bad "chat: two stages printed '$(head -c 200 "$tmp/c2")', one process '$(head -c 200 "$tmp/c1")'"
printf '{"prompt":"And God said"}\n{"ids":[1,2,3],"max_tokens":5}\n{"prompt":"In the beginning"}\n' > "$tmp/bq"
"$BIN" batch models/k3-tiny --input "$tmp/bq" --parallel 3 --max-tokens 8 --speculate 0 --quiet > "$tmp/b1" 2>/dev/null
$MPI -np 3 "$BIN" batch models/k3-tiny --input "$tmp/bq" --parallel 3 --max-tokens 8 --speculate 0 --quiet > "$tmp/b3" 2>/dev/null
[ "$(wc -l < "$tmp/b1")" = 3 ] && cmp -s "$tmp/b1" "$tmp/b3" && ok || bad "batch: three stages printed other lines"

# 3. refusals
$MPI -np 2 "$BIN" run models/k3-tiny --ids 1,2,3 --max-tokens 2 --stages 9 --quiet > "$tmp/e1" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q -- "--stages '9'" "$tmp/e1" && ok || bad "bad --stages: exit $rc, $(head -c 300 "$tmp/e1")"
$MPI -np 2 "$BIN" verify models/k3-tiny > "$tmp/e2" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "does not run as a pipeline" "$tmp/e2" && ok || bad "verify under mpirun: exit $rc"
# stages that disagree on what a session holds (MPMD: each its own options)
$MPI -np 1 "$BIN" run models/k3-tiny --ids 1,2,3 --max-tokens 2 --quiet : \
     -np 1 "$BIN" run models/k3-tiny --ids 1,2,3 --max-tokens 2 --quiet --speculate 2 > "$tmp/e3" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "must agree" "$tmp/e3" && ok || bad "stages with other --speculate: exit $rc, $(head -c 300 "$tmp/e3")"
# ... and per-machine budgets are theirs to choose: the same ids
$MPI -np 1 "$BIN" run models/k3-tiny --prompt "$P" --max-tokens 16 --json --quiet : \
     -np 1 "$BIN" run models/k3-tiny --prompt "$P" --max-tokens 16 --json --quiet --ram min > "$tmp/r3.json" 2>/dev/null
c=$(ids "$tmp/r3.json")
[ -n "$c" ] && [ "$a" = "$c" ] && ok || bad "a stage at its floor, the other resident: ids '$c', want '$a'"

# only stage 0 tokenizes: a later stage opens without the tokenizer (given a copy of the
# model whose tiktoken.model is damaged, and no checksum sidecar, which would refuse that
# file, it still runs, with the same ids), and the plan counts the tokenizer on stage 0
# alone (a stage 1 without one needs the same)
mkdir -p "$tmp/badtok" "$tmp/notok"
for f in models/k3-tiny/*; do
    case $f in
        */tiktoken.model) ;;
        */moestream.sums) ln -sf "$PWD/$f" "$tmp/notok/" ;;
        *) ln -sf "$PWD/$f" "$tmp/badtok/"; ln -sf "$PWD/$f" "$tmp/notok/" ;;
    esac
done
printf 'not a tokenizer\n' > "$tmp/badtok/tiktoken.model"
$MPI -np 1 "$BIN" run models/k3-tiny --prompt "$P" --max-tokens 16 --json --quiet : \
     -np 1 "$BIN" run "$tmp/badtok" --prompt "$P" --max-tokens 16 --json --quiet > "$tmp/r4.json" 2> "$tmp/r4.err"
c=$(ids "$tmp/r4.json")
[ -n "$c" ] && [ "$a" = "$c" ] && ok || bad "stage 1 with a damaged tokenizer: ids '$c', want '$a' ($(head -c 300 "$tmp/r4.err"))"
need() { "$BIN" plan "$1" --ram 1M --pipeline 2 2>/dev/null | grep -E "^ +$2 " | grep -o 'needs [0-9.]* [KMG]iB'; }
n0=$(need models/k3-tiny 0); n1=$(need models/k3-tiny 1); m0=$(need "$tmp/notok" 0); m1=$(need "$tmp/notok" 1)
[ -n "$n1" ] && [ "$n1" = "$m1" ] && [ -n "$n0" ] && [ "$n0" != "$m0" ] && ok ||
    bad "plan --pipeline 2: stage 0 needs '$n0' ('$m0' without a tokenizer), stage 1 '$n1' ('$m1')"

# saved sessions: a file saved by a pipeline is byte for byte the one-process file, and
# loading it (in one process or a pipeline) goes on with the same ids
"$BIN" run models/k3-tiny --ids 1,2,3,4,5,6,7 --max-tokens 6 --save-session "$tmp/s1.bin" --quiet > /dev/null 2>&1
for np in 2 3; do
    $MPI -np $np "$BIN" run models/k3-tiny --ids 1,2,3,4,5,6,7 --max-tokens 6 --save-session "$tmp/s$np.bin" --quiet \
        > /dev/null 2> "$tmp/e4"
    [ -s "$tmp/s1.bin" ] && cmp -s "$tmp/s1.bin" "$tmp/s$np.bin" && ok || bad "session saved by $np stages differs ($(head -c 200 "$tmp/e4"))"
done
"$BIN" run models/k3-tiny --load-session "$tmp/s1.bin" --ids 9,10 --max-tokens 8 --json --quiet > "$tmp/l1.json" 2>&1
$MPI -np 3 "$BIN" run models/k3-tiny --load-session "$tmp/s2.bin" --ids 9,10 --max-tokens 8 --json --quiet \
    > "$tmp/l3.json" 2>&1
a1=$(ids "$tmp/l1.json"); a3=$(ids "$tmp/l3.json")
[ -n "$a1" ] && [ "$a1" = "$a3" ] && ok || bad "loaded session: ids '$a1' one process, '$a3' three stages"

# plan --pipeline: each stage's plan; the layers cover the model once, in order; what does
# not fit says so (exit 2); the K3 config at 4 x 32G pins every stage's trunk
"$BIN" plan models/k3-tiny --ram 100M --pipeline 3 > "$tmp/p3" 2>&1
rc=$?
$PY - "$tmp/p3" <<'EOF' && [ $rc -eq 0 ] && ok || bad "plan --pipeline 3: exit $rc: $(cat "$tmp/p3")"
import re, sys
rows = re.findall(r"^\s+(\d+)\s+(\d+)-(\d+)(\+head)?\s", open(sys.argv[1]).read(), re.M)
assert [int(r[0]) for r in rows] == [0, 1, 2], rows
assert int(rows[0][1]) == 0 and rows[0][3] == "+head" and int(rows[-1][2]) == 7, rows
for a, b in zip(rows, rows[1:]):
    assert int(b[1]) == int(a[2]) + 1, rows
EOF
"$BIN" plan models/k3-tiny --ram 1M --pipeline 2 > "$tmp/p2" 2>/dev/null
rc=$?
[ $rc -eq 2 ] && [ "$(grep -c 'DOES NOT FIT' "$tmp/p2")" = 2 ] && ok || bad "plan --pipeline 2 at 1M: exit $rc"
"$BIN" plan models/k3-tiny --pipeline 2 --stages 3 | grep -qE '^ +1 +3-7 ' && ok || bad "plan --stages 3"
"$BIN" plan tests/data/format/kimi-k3-config.json --ram 32G --pipeline 4 > "$tmp/pk" 2>&1
[ "$(grep -cE '^ +[0-3] .* 0 B +[0-9]+/[0-9]+ ' "$tmp/pk")" = 4 ] && ok || bad "K3 at 4 x 32G: $(cat "$tmp/pk")"
# --ram min: each stage at its own floor (as each stage opens), not unbounded: K3's
# stages pin no trunk and stream it all, with 16 expert slots each
"$BIN" plan tests/data/format/kimi-k3-config.json --ram min --pipeline 4 > "$tmp/pm" 2>&1
grep -q 'own budget: min' "$tmp/pm" && [ "$(grep -cE '^ +[0-3] .* 0 B of ([0-9.]+) GiB +\1 GiB +16/[0-9]+ ' "$tmp/pm")" = 4 ] \
    && ok || bad "K3 at 4 x min: $(cat "$tmp/pm")"

# 6. serve
serve_start one models/k3-tiny
$MPI -np 2 "$BIN" serve models/k3-tiny --port 0 --quiet > "$tmp/srv.pipe.log" 2>&1 &
mpid=$!
for _ in $(seq 300); do grep -qs 'listening on' "$tmp/srv.pipe.log" && break; sleep 0.1; done
u1=$(cat "$tmp/url.one")
u2=$(grep -o 'listening on http://[^/]*' "$tmp/srv.pipe.log" | head -n 1 | sed 's|.*listening on ||')
body='{"model":"k3-tiny","prompt":"And the LORD spake","max_tokens":12,"temperature":0}'
text() { curl -s --max-time 120 "$1/v1/completions" -H 'Content-Type: application/json' -d "$body" \
         | $PY -c "import json,sys; print(json.load(sys.stdin)['choices'][0]['text'])" 2>/dev/null; }
t1=$(text "$u1"); t2=$(text "$u2")
[ -n "$u2" ] && [ -n "$t1" ] && [ "$t1" = "$t2" ] && ok || bad "serve: '$t1' one process, '$t2' two stages ($(tail -n 3 "$tmp/srv.pipe.log"))"
kill -TERM $mpid 2>/dev/null
for _ in $(seq 200); do kill -0 $mpid 2>/dev/null || break; sleep 0.1; done
if kill -0 $mpid 2>/dev/null; then bad "serve: the pipeline did not end on SIGTERM"; kill -KILL $mpid; else ok; fi
wait $mpid 2>/dev/null

echo "t_pipeline: $pass passed, $fail failed"
[ $fail -eq 0 ]
