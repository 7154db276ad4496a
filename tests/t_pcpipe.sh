#!/usr/bin/env bash
# tests/t_pcpipe.sh - the prompt cache in a pipeline across processes (mpirun
# -np 2 and 3): every stage keeps its layers' part of each entry, and a cached
# run gives a cold one-process run's bits.
#
#  1. build/tests/test_pcpipe --dump (a system prompt with a question, another
#     question, the same prompt again, its last message edited, a follow-up;
#     each prompt's last logits row and 6 greedy steps' rows and ids): the
#     file is byte-identical to a one-process run without the cache, on the
#     test models b (K3: KDA and MLA layers) and oss_b (gpt-oss), resident and
#     at --ram min; the pipeline's run restored prefixes (its checks: the
#     identical prompt whole, the others more than the system prompt), every
#     stage's part of the cache holds what stage 0 counts for it, within its
#     share; nothing was refused ("not kept");
#  2. a share too small for every entry (--cache): entries evicted, the same
#     bits, every stage still within its share; stages started with their own
#     shares (MPMD): stage 1's small one makes stage 0 evict although its own
#     has room, and stage 1 with none (--cache off) turns the cache off;
#  3. `batch` on the bundled model under mpirun -np 2 and 3 (chats sharing a
#     system prompt, an identical one, a follow-up and its last message
#     edited): the generated ids and text of a one-process run without the
#     cache, and cached_tokens > 0 on every line after the first (the
#     identical prompt: all of it); also --parallel 2 --ram min --chunk 3
#     (the first two side by side, both cold: the later three) and, in 3
#     stages, with --speculate 3 (drafts and rollbacks after restores);
#  4. `serve` under mpirun -np 2: a second chat sharing the system prompt
#     (about 96 tokens) reports cached_tokens of at least 90 and answers what a cache-less
#     one-process server answers;
#  5. --prompt-cache DIR in a pipeline: a warning that the disk cache is not
#     kept there, the same ids, exit 0; plan --pipeline 3 shows each stage's
#     share.
# Last line: "t_pcpipe: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
TD=${MS_TESTDATA:-$BUILD/testdata}
PY=/usr/bin/python3
M=models/k3-tiny
. tests/lib_serve.sh
. tests/lib.sh
. tests/lib_mpi.sh
mpi_or_skip t_pcpipe
mpi_local t_pcpipe

# 1, 2. every recorded row, a cold process against a cached pipeline
dump_case() {   # model, np, options...
    local m=$1 np=$2
    shift 2
    local tag="$(basename "$m") np$np [$*]" ram=
    case "$*" in *"--ram min"*) ram="--ram min" ;; esac
    if ! "$BUILD/tests/test_pcpipe" --dump "$m" "$tmp/cold" --cache off $ram > "$tmp/cold.log" 2>&1; then
        bad "$tag: the cold run: $(tail -n 3 "$tmp/cold.log")"; return
    fi
    $MPI -np "$np" "$BUILD/tests/test_pcpipe" --dump "$m" "$tmp/warm" "$@" > "$tmp/warm.log" 2>&1
    grep -q 'test_pcpipe: [1-9][0-9]* passed, 0 failed' "$tmp/warm.log" && ok ||
        bad "$tag: the pipeline's checks: $(grep -v '^-\|^ \|^$' "$tmp/warm.log" | tail -n 4)"
    [ -s "$tmp/cold" ] && cmp -s "$tmp/cold" "$tmp/warm" && ok || bad "$tag: rows differ from the cold one-process run"
    ! grep -q 'not kept' "$tmp/warm.log" && ok || bad "$tag: a stage refused its part: $(grep 'not kept' "$tmp/warm.log" | head -n 2)"
}
for m in "$TD/b" "$TD/oss_b"; do
    for np in 2 3; do
        dump_case "$m" $np
        dump_case "$m" $np --ram min --cache 1000000
    done
done
for np in 2 3; do
    dump_case "$TD/b" $np --cache 100000 --want-evictions
    dump_case "$TD/oss_b" $np --ram min --cache 200000 --want-evictions
done

# stages with their own shares (MPMD): stage 1's small share evicts while stage 0's has room;
# stage 1 with none turns the cache off
mpmd_case() {   # stage 0's options -- stage 1's options
    local a=() b=() tag="b np2 MPMD [$*]"
    while [ $# -gt 0 ] && [ "$1" != -- ]; do a+=("$1"); shift; done
    shift
    b=("$@")
    $MPI -np 1 "$BUILD/tests/test_pcpipe" --dump "$TD/b" "$tmp/warm" "${a[@]}" : \
         -np 1 "$BUILD/tests/test_pcpipe" --dump "$TD/b" "$tmp/warm" "${b[@]}" > "$tmp/warm.log" 2>&1
    grep -q 'test_pcpipe: [1-9][0-9]* passed, 0 failed' "$tmp/warm.log" && ok ||
        bad "$tag: the pipeline's checks: $(grep -v '^-\|^ \|^$' "$tmp/warm.log" | tail -n 4)"
    cmp -s "$tmp/cold" "$tmp/warm" && ! grep -q 'not kept' "$tmp/warm.log" && ok ||
        bad "$tag: rows differ from the cold one-process run, or a part was refused"
}
"$BUILD/tests/test_pcpipe" --dump "$TD/b" "$tmp/cold" --cache off > /dev/null 2>&1
mpmd_case --cache 4000000 --want-evictions -- --cache 100000
mpmd_case --cache 4000000 --want-off -- --cache off

# 3. batch: chats sharing a system prompt
SYS="You are a careful assistant. Answer in the words of the old books: and the LORD spake unto Moses, saying, speak unto the children of Israel, and say unto them, when any man of you bring an offering unto the LORD, ye shall bring your offering of the cattle, even of the herd, and of the flock."
$PY - "$SYS" > "$tmp/in.jsonl" <<'EOF'
import json, sys
s = {"role": "system", "content": sys.argv[1]}
u = lambda t: {"role": "user", "content": t}
a = {"role": "assistant", "content": "And the LORD spake."}
for msgs in ([s, u("Who spake unto Moses?")], [s, u("What offering?")], [s, u("Who spake unto Moses?")],
             [s, u("Who spake unto Moses?"), a, u("And then?")], [s, u("Who spake unto Moses?"), a, u("And after?")]):
    print(json.dumps({"messages": msgs, "max_tokens": 8}))
EOF
lines() {  # batch output -> index, ids, prompt tokens, content, cached tokens (tab-separated)
    $PY -c 'import json,sys; [print(d["index"], json.dumps(d["generated_ids"]), d["prompt_tokens"], json.dumps(d["content"]), d["cached_tokens"], sep="\t") for d in map(json.loads, sys.stdin)]'
}
"$BIN" batch $M --input "$tmp/in.jsonl" --prompt-cache-ram 0 --quiet 2> /dev/null | lines > "$tmp/bc"
batch_case() {  # np, options...
    local np=$1
    shift
    $MPI -np "$np" "$BIN" batch $M --input "$tmp/in.jsonl" "$@" --quiet 2> "$tmp/bw.err" | lines > "$tmp/bw"
    diff <(cut -f1-4 "$tmp/bw") <(cut -f1-4 "$tmp/bc") > /dev/null && [ "$(wc -l < "$tmp/bc")" = 5 ] && ok ||
        bad "batch np$np [$*]: not the cold one-process lines: $(paste -d'|' "$tmp/bw" "$tmp/bc") $(head -c 300 "$tmp/bw.err")"
    local n_hit want=4
    n_hit=$(awk -F'\t' 'NR > 1 && $5 > 0' "$tmp/bw" | wc -l)
    case "$*" in *"--parallel 2"*) want=3 ;; esac     # the first two run side by side: both cold
    [ "$n_hit" -ge $want ] && ok ||
        bad "batch np$np [$*]: $n_hit of the 4 later lines restored a prefix: $(cut -f1,3,5 "$tmp/bw" | tr '\t\n' ' ;')"
    # one at a time: the identical prompt restores all of itself
    [ $want = 3 ] || { [ "$(awk -F'\t' 'NR == 3 {print $3 == $5}' "$tmp/bw")" = 1 ] && ok ||
        bad "batch np$np [$*]: the identical prompt: $(sed -n 3p "$tmp/bw" | cut -f3,5)"; }
}
batch_case 2
batch_case 3
batch_case 3 --speculate 3
batch_case 2 --parallel 2 --ram min --chunk 3 --prompt-cache-ram 64M

# 4. serve: a second chat sharing the system prompt
chat() { $PY -c 'import json,sys; print(json.dumps({"model": "k3-tiny", "messages": [{"role": "system", "content": sys.argv[1]}, {"role": "user", "content": sys.argv[2]}], "max_tokens": 10, "temperature": 0}))' "$SYS" "$1"; }
reply() {   # url, question -> content | cached tokens
    chat "$2" | curl -s --max-time 120 "$1/v1/chat/completions" -H 'Content-Type: application/json' -d @- |
        $PY -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps(d["choices"][0]["message"]["content"]), "|", d["usage"]["prompt_tokens_details"]["cached_tokens"])' 2>/dev/null
}
serve_start one $M --prompt-cache-ram 0
$MPI -np 2 "$BIN" serve $M --port 0 --quiet > "$tmp/srv.pipe.log" 2>&1 &
mpid=$!
for _ in $(seq 300); do grep -q 'listening on' "$tmp/srv.pipe.log" && break; sleep 0.1; done
u1=$(cat "$tmp/url.one")
u2=$(grep -o 'listening on http://[^/]*' "$tmp/srv.pipe.log" | head -n 1 | sed 's|.*listening on ||')
reply "$u2" "Who spake unto Moses?" > "$tmp/s2a"
r2=$(reply "$u2" "And the flock?"); r1=$(reply "$u1" "And the flock?")
[ -n "$u2" ] && [ -n "$r1" ] && [ "${r2%|*}" = "${r1%|*}" ] && ok || bad "serve np2: '$r2', one process '$r1'"
[ -n "$r2" ] && [ "${r2##*| }" -ge 90 ] && ok || bad "serve np2: the second chat restored '${r2##*| }' tokens, want >= 90"
kill -TERM $mpid 2>/dev/null
for _ in $(seq 200); do kill -0 $mpid 2>/dev/null || break; sleep 0.1; done
if kill -0 $mpid 2>/dev/null; then bad "serve: the pipeline did not end on SIGTERM"; kill -KILL $mpid; fi
wait $mpid 2>/dev/null

# 5. the disk cache stays one-process; plan shows each stage's share
"$BIN" run $M --ids 1,2,3,4,5 --max-tokens 4 --json --quiet --prompt-cache-ram 0 > "$tmp/r1.json" 2>/dev/null
$MPI -np 2 "$BIN" run $M --ids 1,2,3,4,5 --max-tokens 4 --json --prompt-cache "$tmp/pcdir" > "$tmp/r2.json" 2> "$tmp/r2.err"
rc=$?
ids() { $PY -c "import json,sys; print(json.load(open(sys.argv[1]))['generated_ids'])" "$1" 2>/dev/null; }
[ $rc = 0 ] && [ -n "$(ids "$tmp/r1.json")" ] && [ "$(ids "$tmp/r1.json")" = "$(ids "$tmp/r2.json")" ] &&
    grep -q "prompt cache on disk is not kept in a pipeline" "$tmp/r2.err" && ok ||
    bad "--prompt-cache DIR under mpirun: exit $rc, ids '$(ids "$tmp/r2.json")', stderr $(head -c 300 "$tmp/r2.err")"
"$BIN" plan $M --ram 100M --pipeline 3 | grep -qE '^prompt cache per stage: 0: [0-9.]+ MiB, 1: [0-9.]+ MiB, 2: [0-9.]+ MiB ' && ok ||
    bad "plan --pipeline 3 shows no share per stage: $("$BIN" plan $M --ram 100M --pipeline 3 | tail -n 2)"
finish
