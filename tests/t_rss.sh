#!/usr/bin/env bash
# tests/t_rss.sh - the --ram ceiling holds for real: on a generated model of
# ~140 MB (real layout, hidden 1024, 32 experts/layer), runs at budgets below
# the model's size report a peak RSS (VmHWM, from the kernel) within the
# budget plus RSS_SLACK, and generate the same ids and logits bits as an
# unlimited run; so do --speculate 31, --chunk 150 and the chunk chosen for the budget
# (their memory is planned), and perplexity gives the same nll with one pass per chunk;
# so does each stage of a 2-process pipeline (mpirun) under its own --ram, and a model
# with a full-size tokenizer.json.
# RSS_SLACK covers what the budget cannot see: allocator rounding and the pages the
# kernel counts for shared libraries.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
dir=$BUILD/testdata-mid
RSS_SLACK=$((16 * 1024 * 1024))
. tests/lib.sh
stamp="$(sha1sum tools/msgen.py tools/mslib.py tools/stwrite.py | sha1sum | cut -c1-16)"
if [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$dir"
    /usr/bin/python3 tools/msgen.py "$dir" --preset wide --layers 4 --hidden 1024 --experts 32 --topk 4 \
        --vocab 4096 --kda-heads 8 --kda-dim 128 --mla-heads 8 --q-lora 256 --kv-lora 128 --inter 4096 \
        --moe-inter 512 --latent 512 --seed 5 2>/dev/null || { bad "generation"; echo "t_rss: $pass passed, $fail failed"; exit 1; }
    echo "$stamp" > "$dir/.stamp"
fi
ids=1,17,300,2048,5,99,1000,7
"$BIN" run "$dir" --ids $ids --gen 8 --json --quiet --dump-logits "$BUILD/rss_ref.f32" > "$BUILD/rss_ref.json" || bad "unlimited run"
want=$(grep -o '"generated_ids": \[[^]]*\]' "$BUILD/rss_ref.json")
for ram in 120 150 180; do
    budget=$((ram * 1024 * 1024))
    out=$("$BIN" run "$dir" --ids $ids --gen 8 --json --quiet --ram ${ram}M --dump-logits "$BUILD/rss_$ram.f32"); rc=$?
    [ $rc -eq 0 ] && ok || { bad "--ram ${ram}M exited $rc"; continue; }
    got=$(printf '%s' "$out" | grep -o '"generated_ids": \[[^]]*\]')
    [ "$got" = "$want" ] && ok || bad "--ram ${ram}M ids differ: $got vs $want"
    cmp -s "$BUILD/rss_ref.f32" "$BUILD/rss_$ram.f32" && ok || bad "--ram ${ram}M logits bits differ"
    peak=$(printf '%s' "$out" | grep -o '"peak_rss_bytes": [0-9]*' | grep -o '[0-9]*$')
    streamed=$(printf '%s' "$out" | grep -o '"bytes_read": [0-9]*' | grep -o '[0-9]*$')
    echo "t_rss: --ram ${ram}M: peak RSS $((peak / 1048576)) MiB, read $((streamed / 1048576)) MiB while decoding"
    [ "$peak" -le $((budget + RSS_SLACK)) ] && ok || bad "--ram ${ram}M: peak RSS $peak > budget $budget + slack $RSS_SLACK"
    [ "$streamed" -gt 0 ] && ok || bad "--ram ${ram}M: nothing streamed: the budget did not bind"
done
# --speculate 31: the rollback record and the verify rows are counted in the plan; same bits
budget=$((120 * 1024 * 1024))
out=$("$BIN" run "$dir" --ids $ids --gen 8 --json --quiet --ram 120M --speculate 31 --dump-logits "$BUILD/rss_spec.f32"); rc=$?
[ $rc -eq 0 ] && ok || bad "--ram 120M --speculate 31 exited $rc"
got=$(printf '%s' "$out" | grep -o '"generated_ids": \[[^]]*\]')
[ "$got" = "$want" ] && ok || bad "--speculate 31: ids differ: $got vs $want"
cmp -s "$BUILD/rss_ref.f32" "$BUILD/rss_spec.f32" && ok || bad "--speculate 31: logits bits differ"
peak=$(printf '%s' "$out" | grep -o '"peak_rss_bytes": [0-9]*' | grep -o '[0-9]*$')
[ -n "$peak" ] && [ "$peak" -le $((budget + RSS_SLACK)) ] && ok || bad "--speculate 31: peak RSS $peak > budget $budget + slack $RSS_SLACK"
a=$("$BIN" plan "$dir" --ram 120M | grep -o 'chunks[^:]*: .*'); b=$("$BIN" plan "$dir" --ram 120M --speculate 31 | grep -o 'chunks[^:]*: .*')
[ -n "$a" ] && [ "$a" != "$b" ] && ok || bad "plan --speculate 31 does not count the speculation memory ($a vs $b)"
# --chunk 150: a 150-token prompt in one pass over the weights instead of 5 (--chunk 32):
# the same ids and bits, fewer bytes read, and the larger scratch planned within the
# budget (peak RSS)
long=$(/usr/bin/python3 -c "print(','.join(str((i * 7919 + 13) % 4000 + 1) for i in range(150)))")
budget=$((150 * 1024 * 1024))
o32=$("$BIN" run "$dir" --ids "$long" --gen 4 --json --quiet --ram 150M --chunk 32 --dump-logits "$BUILD/rss_c32.f32"); rc1=$?
o150=$("$BIN" run "$dir" --ids "$long" --gen 4 --json --quiet --ram 150M --chunk 150 --dump-logits "$BUILD/rss_c150.f32"); rc2=$?
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && ok || bad "--chunk runs exited $rc1 / $rc2"
g32=$(printf '%s' "$o32" | grep -o '"generated_ids": \[[^]]*\]'); g150=$(printf '%s' "$o150" | grep -o '"generated_ids": \[[^]]*\]')
[ -n "$g32" ] && [ "$g32" = "$g150" ] && ok || bad "--chunk 150: ids differ: $g150 vs $g32"
cmp -s "$BUILD/rss_c32.f32" "$BUILD/rss_c150.f32" && ok || bad "--chunk 150: logits bits differ"
# the prompt alone (--gen 1 feeds nothing after it): 5 passes against 1. The larger
# scratch pins less of the trunk, so each pass (and each decode token) streams more.
t32=$("$BIN" run "$dir" --ids "$long" --gen 1 --json --quiet --ram 150M --chunk 32 | grep -o '"trunk_bytes_read": [0-9]*' | grep -o '[0-9]*$')
t150=$("$BIN" run "$dir" --ids "$long" --gen 1 --json --quiet --ram 150M --chunk 150 | grep -o '"trunk_bytes_read": [0-9]*' | grep -o '[0-9]*$')
echo "t_rss: 150-token prompt at --ram 150M: trunk read $((${t32:-0} / 1048576)) MiB with --chunk 32, $((${t150:-0} / 1048576)) MiB with --chunk 150"
[ -n "$t150" ] && [ -n "$t32" ] && [ "$t150" -gt 0 ] && [ $((t150 * 2)) -lt "$t32" ] && ok || bad "--chunk 150 read $t150 trunk bytes, --chunk 32 $t32: not fewer passes"
peak=$(printf '%s' "$o150" | grep -o '"peak_rss_bytes": [0-9]*' | grep -o '[0-9]*$')
[ -n "$peak" ] && [ "$peak" -le $((budget + RSS_SLACK)) ] && ok || bad "--chunk 150: peak RSS $peak > budget $budget + slack $RSS_SLACK"
c=$("$BIN" plan "$dir" --ram 150M --chunk 150 | grep -o 'chunks[^:]*: .*'); d=$("$BIN" plan "$dir" --ram 150M --chunk 32 | grep -o 'chunks[^:]*: .*')
[ -n "$c" ] && [ "$c" != "$d" ] && ok || bad "plan --chunk 150 does not count the larger scratch ($c vs $d)"
# the default chunk with --ram is chosen for the budget (a power of two from 32 to 1024):
# the same ids and bits, peak RSS within the budget, and no more trunk bytes for the prompt
# than --chunk 32 (fewer when it chose more than 32)
oa=$("$BIN" run "$dir" --ids "$long" --gen 4 --json --quiet --ram 150M --dump-logits "$BUILD/rss_auto.f32"); rc=$?
ca=$(printf '%s' "$oa" | grep -o '"prefill_chunk": [0-9]*' | grep -o '[0-9]*$')
# (the chunk from the same run as the bytes: the choice measures the process's RSS, which
# moves between runs, and 150M sits near a boundary between 32 and 64 on this model)
ot=$("$BIN" run "$dir" --ids "$long" --gen 1 --json --quiet --ram 150M)
ta=$(printf '%s' "$ot" | grep -o '"trunk_bytes_read": [0-9]*' | grep -o '[0-9]*$')
cta=$(printf '%s' "$ot" | grep -o '"prefill_chunk": [0-9]*' | grep -o '[0-9]*$')
echo "t_rss: --ram 150M chose $ca-token chunks (then $cta): the 150-token prompt read $((${ta:-0} / 1048576)) MiB of trunk"
[ $rc -eq 0 ] && [ "$(printf '%s' "$oa" | grep -o '"generated_ids": \[[^]]*\]')" = "$g32" ] && ok || bad "default chunk: ids differ or exit $rc"
cmp -s "$BUILD/rss_c32.f32" "$BUILD/rss_auto.f32" && ok || bad "default chunk: logits bits differ"
case "$ca" in 32|64|128|256|512|1024) ok ;; *) bad "default chunk at --ram 150M: '$ca'" ;; esac
[ -n "$ta" ] && [ "$ta" -le "$t32" ] && { [ "${cta:-32}" -eq 32 ] || [ "$ta" -lt "$t32" ]; } && ok || bad "default chunk $cta read $ta trunk bytes, --chunk 32 $t32"
peak=$(printf '%s' "$oa" | grep -o '"peak_rss_bytes": [0-9]*' | grep -o '[0-9]*$')
[ -n "$peak" ] && [ "$peak" -le $((budget + RSS_SLACK)) ] && ok || bad "default chunk: peak RSS $peak > budget $budget + slack $RSS_SLACK"
# perplexity scores the prompt in one ms_session_score call, in the engine's chunks, with
# no [n, vocab] logits held: the same nll unlimited and at 150M with 32-token, 150-token
# and the chosen chunks; one pass over the weights per chunk (--chunk 150 reads under half
# the trunk bytes of --chunk 32; the chosen chunk no more); peak RSS within the budget
field() { printf '%s' "$1" | grep -o "\"$2\": [-0-9.e+]*" | grep -o '[-0-9.e+]*$'; }
pu=$("$BIN" perplexity "$dir" --ids "$long" --quiet)
p32=$("$BIN" perplexity "$dir" --ids "$long" --quiet --ram 150M --chunk 32)
p150=$("$BIN" perplexity "$dir" --ids "$long" --quiet --ram 150M --chunk 150)
pa=$("$BIN" perplexity "$dir" --ids "$long" --quiet --ram 150M)
nu=$(field "$pu" nll)
[ -n "$nu" ] && [ "$nu" = "$(field "$p32" nll)" ] && [ "$nu" = "$(field "$p150" nll)" ] && [ "$nu" = "$(field "$pa" nll)" ] \
    && ok || bad "perplexity: nll differs: unlimited '$pu', 32 '$p32', 150 '$p150', chosen '$pa'"
s32=$(field "$p32" trunk_bytes_read); s150=$(field "$p150" trunk_bytes_read); sa=$(field "$pa" trunk_bytes_read)
ca=$(field "$pa" prefill_chunk)
echo "t_rss: perplexity of 150 tokens at --ram 150M: nll $nu; trunk read $((${s32:-0} / 1048576)) MiB with --chunk 32, $((${s150:-0} / 1048576)) MiB with --chunk 150, $((${sa:-0} / 1048576)) MiB with the chosen $ca"
[ -n "$s150" ] && [ -n "$s32" ] && [ "$s150" -gt 0 ] && [ $((s150 * 2)) -lt "$s32" ] && ok || bad "perplexity --chunk 150 read $s150 trunk bytes, --chunk 32 $s32: not fewer passes"
[ -n "$sa" ] && [ "$sa" -le "$s32" ] && { [ "${ca:-32}" -eq 32 ] || [ "$sa" -lt "$s32" ]; } && ok || bad "perplexity: chosen chunk $ca read $sa trunk bytes, --chunk 32 $s32"
for o in "$p150" "$pa"; do
    peak=$(field "$o" peak_rss_bytes)
    [ -n "$peak" ] && [ "$peak" -le $((budget + RSS_SLACK)) ] && ok || bad "perplexity: peak RSS $peak > budget $budget + slack $RSS_SLACK ($o)"
done
"$BIN" plan "$dir" --ram 150M | grep -q 'chunks, chosen for the budget' && ok || bad "plan --ram 150M does not say its chunk was chosen for the budget"
"$BIN" plan "$dir" | grep -q 'scratch for 32-token chunks)' && ok || bad "plan without --ram: the chunk is not 32"
"$BIN" plan "$dir" --ram 150M --chunk 70000 > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && ok || bad "--chunk 70000 must be a usage error (exit $rc)"
"$BIN" run "$dir" --ids 1,2 --gen 1 --quiet --speculate 8 --chunk 4 > /dev/null 2>&1; rc=$?
[ $rc -eq 2 ] && ok || bad "--chunk 4 with --speculate 8 must be a usage error (exit $rc)"
# the chunk chosen for the budget never refuses a budget that fits 32-token chunks
seen=""
for ram in 118 122 126 130 135 140 150 165 180 200; do
    out=$("$BIN" run "$dir" --ids 1,2,3 --gen 2 --json --quiet --ram ${ram}M 2>/dev/null); rc=$?
    if [ $rc -ne 0 ]; then
        "$BIN" run "$dir" --ids 1,2,3 --gen 2 --quiet --ram ${ram}M --chunk 32 > /dev/null 2>&1 && bad "--ram ${ram}M fits --chunk 32 but not the chosen chunk (exit $rc)" || ok
        seen="$seen ${ram}M:-"
    else
        ok; got=$(printf '%s' "$out" | grep -o '"prefill_chunk": [0-9]*' | grep -o '[0-9]*$'); seen="$seen ${ram}M:$got"
        # the choice plans with the estimated process size, as `plan` does, and only
        # steps down when the measured one does not fit it: never above plan's
        pl=$("$BIN" plan "$dir" --ram ${ram}M | grep -o 'scratch for [0-9]*-token' | grep -o '[0-9]*')
        [ -n "$got" ] && [ -n "$pl" ] && [ "$got" -le "$pl" ] && ok || bad "--ram ${ram}M: run chose $got-token chunks, plan $pl"
    fi
done
echo "t_rss: chunks chosen for the budget:$seen"
# a full-size Hugging Face tokenizer.json (a tiny gpt-oss with o200k's vocabulary size: a
# 16 MB file, whose parse tree takes ~8x that while it loads): the tokenizer is loaded
# before the budget is split and counted there (plan names it), and the parse tree is not
# kept, so a run at --ram 150M peaks within it (before: 190 MB) with the unlimited run's ids
tokdir=$BUILD/testdata-tokrss
stamp="$(sha1sum tools/ossgen.py tools/osslib.py tools/stwrite.py | sha1sum | cut -c1-16)"
if [ "$(cat "$tokdir/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$tokdir"
    /usr/bin/python3 tools/ossgen.py "$tokdir" --preset oa --vocab 201088 > /dev/null 2>&1 && echo "$stamp" > "$tokdir/.stamp"
fi
budget=$((150 * 1024 * 1024))
"$BIN" plan "$tokdir" --ram 150M | grep -Eq 'process overhead \+ slack: .*\(the tokenizer [0-9.]+ MiB\)' && ok ||
    bad "plan --ram 150M on $tokdir does not count the tokenizer: $("$BIN" plan "$tokdir" --ram 150M 2>&1 | head -c 400)"
tw=$("$BIN" run "$tokdir" --prompt "In the beginning" --gen 8 --json --quiet | grep -o '"generated_ids": \[[^]]*\]')
out=$("$BIN" run "$tokdir" --prompt "In the beginning" --gen 8 --json --quiet --ram 150M); rc=$?
peak=$(printf '%s' "$out" | grep -o '"peak_rss_bytes": [0-9]*' | grep -o '[0-9]*$')
echo "t_rss: a 201,088-id tokenizer.json at --ram 150M: peak RSS $((${peak:-0} / 1048576)) MiB"
[ $rc -eq 0 ] && [ -n "$tw" ] && [ "$(printf '%s' "$out" | grep -o '"generated_ids": \[[^]]*\]')" = "$tw" ] && ok ||
    bad "tokenizer.json model at --ram 150M: exit $rc, ids differ from unlimited ($tw)"
[ -n "$peak" ] && [ "$peak" -le $((budget + RSS_SLACK)) ] && ok || bad "tokenizer.json model: peak RSS $peak > budget $budget + slack $RSS_SLACK"
# the same checkpoint as its own draft model: the draft's tokenizer is checked against the
# model's before the budget is split (the same files: nothing loaded) and the draft engine
# keeps none, so a run at --ram 140M peaks within the budget itself (before: 156 MiB, the
# draft's tokenizer.json parsed after the pinning and kept) with the ids of the plain run
budget=$((140 * 1024 * 1024))
tw=$("$BIN" run "$tokdir" --prompt "In the beginning" --gen 8 --json --quiet --speculate 0 | grep -o '"generated_ids": \[[^]]*\]')
out=$("$BIN" run "$tokdir" --prompt "In the beginning" --gen 8 --json --quiet --ram 140M --speculate 2 \
      --draft-model "$tokdir"); rc=$?
peak=$(printf '%s' "$out" | grep -o '"peak_rss_bytes": [0-9]*' | grep -o '[0-9]*$')
echo "t_rss: the 201,088-id model drafting for itself at --ram 140M: peak RSS $((${peak:-0} / 1048576)) MiB"
[ $rc -eq 0 ] && [ -n "$tw" ] && [ "$(printf '%s' "$out" | grep -o '"generated_ids": \[[^]]*\]')" = "$tw" ] && ok ||
    bad "draft model at --ram 140M: exit $rc, ids differ from the plain run ($tw)"
[ -n "$peak" ] && [ "$peak" -le $budget ] && ok || bad "draft model at --ram 140M: peak RSS $peak > budget $budget"
# a pipeline of 2 processes (mpirun): each stage's peak RSS within its own --ram, the
# same ids as the unlimited run in one process (not in a build without MPI)
. tests/lib_mpi.sh
mpi_built && pipe_rams="120 150" || { pipe_rams=; echo "t_rss: the pipeline's budgets not run: this build has no MPI (make MPI=0)"; }
for ram in $pipe_rams; do
    budget=$((ram * 1024 * 1024))
    out=$(mpirun --oversubscribe --mca btl self,vader -np 2 "$BIN" run "$dir" --ids $ids --gen 8 --json --quiet \
          --ram ${ram}M 2>/dev/null); rc=$?
    [ $rc -eq 0 ] && ok || { bad "pipeline at --ram ${ram}M exited $rc"; continue; }
    got=$(printf '%s' "$out" | grep -o '"generated_ids": \[[^]]*\]')
    [ "$got" = "$want" ] && ok || bad "pipeline at --ram ${ram}M: ids $got, want $want"
    peaks=$(printf '%s' "$out" | grep -o '"peak_rss": [0-9]*' | grep -o '[0-9]*$' | tr '\n' ' ')
    echo "t_rss: pipeline at --ram ${ram}M per stage: peak RSS $(for p in $peaks; do printf '%d MiB ' $((p / 1048576)); done)"
    [ "$(echo $peaks | wc -w)" = 2 ] && ok || bad "pipeline at --ram ${ram}M: peaks '$peaks'"
    for p in $peaks; do
        [ "$p" -le $((budget + RSS_SLACK)) ] && ok || bad "pipeline at --ram ${ram}M: a stage's peak RSS $p > budget $budget + slack"
    done
done
echo "t_rss: $pass passed, $fail failed"
[ $fail -eq 0 ]
