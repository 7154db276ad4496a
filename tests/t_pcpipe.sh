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
#  5. --prompt-cache DIR in a pipeline (test_pcpipe --dump --cache off --disk
#     DIR --resume, b and oss_b: first a conversation resumed in one session,
#     whose own state is a prefix of its follow-up, then the scenario):
#     entries written by a 2-stage pipeline are restored by its restart, by
#     one process and by 3 stages (the layers in pieces of 7 floats): every
#     prompt whole, the cold rows; entries written by one process are
#     restored by 2 stages at --ram min; a flipped byte in stage 1's layers of
#     the follow-up's entry (half restored into the resumed session, which
#     must then be reset on every stage) and a truncated entry: warnings
#     naming them, recomputed and rewritten, the cold rows; `run` under
#     mpirun -np 2 writes an entry that one process and 3 stages restore
#     (cached_tokens, the same ids and logits); plan --pipeline 3 shows each
#     stage's share.
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
for _ in $(seq 300); do grep -qs 'listening on' "$tmp/srv.pipe.log" && break; sleep 0.1; done
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

# 5. --prompt-cache DIR in a pipeline: one directory shared by one process and pipelines of
# every split, restarts restore, damaged entries are recomputed
disk_case() {   # tag, np (1: one process), model, dir, options...; the rows against the cold run's
    local tag=$1 np=$2 m=$3 d=$4
    shift 4
    local pre=()
    [ "$np" -gt 1 ] && pre=($MPI -np "$np")
    "${pre[@]}" "$BUILD/tests/test_pcpipe" --dump "$m" "$tmp/dk" --cache off --resume --disk "$d" "$@" > "$tmp/dk.log" 2>&1
    grep -q 'test_pcpipe: [1-9][0-9]* passed, 0 failed' "$tmp/dk.log" && [ -s "$tmp/dk" ] &&
        cmp -s "$tmp/cold" "$tmp/dk" && ok ||
        bad "$tag: rows differ from the cold one-process run: $(grep -v '^-\|^ \|^$' "$tmp/dk.log" | tail -n 4)"
    cached="$(sed -n 's/^resumed //p' "$tmp/dk.log"), $(sed -n 's/^cached //p' "$tmp/dk.log")"
    disk=$(sed -n 's/^disk //p' "$tmp/dk.log")
}
all_cached() {  # tag: every prompt restored whole from the directory, nothing refused
    [ "$cached" = "45 55, 45 46 45 45 55" ] && [ "$disk" = "hits 7 writes 0 failed 0 refused 0" ] && ok ||
        bad "$1: cached '$cached', disk '$disk', want every prompt whole"
}
entry() { ls "$1"/*-"$2".mspc 2>/dev/null | head -n 1; }    # dir n -> the entry of n positions
for m in "$TD/b" "$TD/oss_b"; do
    mb=$(basename "$m")
    "$BUILD/tests/test_pcpipe" --dump "$m" "$tmp/cold" --cache off --resume > /dev/null 2>&1
    # written by a 2-stage pipeline; restored by its restart, one process, 3 stages (in pieces)
    D=$tmp/pd_$mb
    disk_case "$mb np2 writes" 2 "$m" "$D"
    [ "$disk" = "hits 3 writes 4 failed 0 refused 0" ] && [ "$(ls "$D" | wc -l)" = 4 ] && ok ||
        bad "$mb np2 writes: disk '$disk', files: $(ls "$D" | tr '\n' ' ')"
    disk_case "$mb np2 restarted" 2 "$m" "$D" && all_cached "$mb np2 restarted"
    disk_case "$mb one process from np2's" 1 "$m" "$D" && all_cached "$mb one process from np2's"
    disk_case "$mb np3 from np2's" 3 "$m" "$D" --piece 7 && all_cached "$mb np3 from np2's (pieces of 7 floats)"
    # written by one process; restored by 2 stages at --ram min
    E=$tmp/pe_$mb
    disk_case "$mb one process writes" 1 "$m" "$E"
    disk_case "$mb np2 --ram min from one process's" 2 "$m" "$E" --ram min && all_cached "$mb np2 --ram min from one process's"
    # a flipped byte in the state (3/4 in: stage 1's layers at np 2) of the entry the resumed
    # session finds beyond its own prefix (it is half restored, then reset on every stage), a
    # truncated entry
    $PY -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[3 * len(b) // 4] ^= 0x40; open(p, "wb").write(b)' "$(entry "$D" 55)"
    f=$(entry "$D" 46); truncate -s $(($(stat -c %s "$f") / 2)) "$f"
    disk_case "$mb np2 damaged" 2 "$m" "$D"
    grep -q "prompt cache: .*-55.mspc: checksum mismatch (damaged); ignored" "$tmp/dk.log" &&
        grep -q "prompt cache: .*-46.mspc: .*truncated or damaged" "$tmp/dk.log" && [ "$cached" = "45 0, 45 0 45 45 55" ] &&
        [ "$disk" = "hits 5 writes 2 failed 0 refused 2" ] && ok ||
        bad "$mb np2 damaged entries: cached '$cached', disk '$disk', $(grep 'prompt cache' "$tmp/dk.log" | head -n 3)"
    disk_case "$mb np2 after the damage" 2 "$m" "$D" && all_cached "$mb np2 after the damaged entries were rewritten"
done
# run: a pipeline's entry restored by one process and by another split, the same ids and logits
R=$tmp/pcrun
"$BIN" run $M --ids 1,2,3,4,5 --max-tokens 4 --json --dump-logits "$tmp/r0.bin" --quiet --prompt-cache-ram 0 > "$tmp/r0.json" 2>/dev/null
ids() { $PY -c "import json,sys; d = json.load(open(sys.argv[1])); print(d['generated_ids'], d['stats']['cached_tokens'])" "$1" 2>/dev/null; }
want0=$(ids "$tmp/r0.json")
for c in "2 -np 2" "1" "3 -np 3"; do
    k=${c%% *}
    if [ "$k" = 1 ]; then pre=(); else pre=($MPI ${c#* }); fi
    "${pre[@]}" "$BIN" run $M --ids 1,2,3,4,5 --max-tokens 4 --json --dump-logits "$tmp/r$k.bin" --prompt-cache-ram 0 \
        --prompt-cache "$R" > "$tmp/r$k.json" 2> "$tmp/r$k.err"
    rc=$?
    want="${want0% *} 0"; [ "$k" = 2 ] || want="${want0% *} 5"
    [ $rc = 0 ] && [ -n "$want0" ] && [ "$(ids "$tmp/r$k.json")" = "$want" ] && cmp -s "$tmp/r0.bin" "$tmp/r$k.bin" &&
        ! grep -qi "warn" "$tmp/r$k.err" && ok ||
        bad "run --prompt-cache [$c]: exit $rc, ids/cached '$(ids "$tmp/r$k.json")' want '$want', stderr $(grep -i warn "$tmp/r$k.err" | head -c 300)"
done
"$BIN" plan $M --ram 100M --pipeline 3 | grep -qE '^prompt cache per stage: 0: [0-9.]+ MiB, 1: [0-9.]+ MiB, 2: [0-9.]+ MiB ' && ok ||
    bad "plan --pipeline 3 shows no share per stage: $("$BIN" plan $M --ram 100M --pipeline 3 | tail -n 2)"
finish
