#!/usr/bin/env bash
# tests/t_rss.sh - the --ram ceiling holds for real: on a generated model of
# ~140 MB (real layout, hidden 1024, 32 experts/layer), runs at budgets below
# the model's size report a peak RSS (VmHWM, from the kernel) within the
# budget plus RSS_SLACK, and generate the same ids and logits bits as an
# unlimited run. RSS_SLACK covers what the budget cannot see: allocator
# rounding and the pages the kernel counts for shared libraries.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
dir=$BUILD/testdata-mid
RSS_SLACK=$((16 * 1024 * 1024))
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
stamp="$(sha1sum tools/msgen.py tools/mslib.py | sha1sum | cut -c1-16)"
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
a=$("$BIN" plan "$dir" --ram 120M | grep -o 'scratch): .*'); b=$("$BIN" plan "$dir" --ram 120M --speculate 31 | grep -o 'scratch): .*')
[ -n "$a" ] && [ "$a" != "$b" ] && ok || bad "plan --speculate 31 does not count the speculation memory ($a vs $b)"
echo "t_rss: $pass passed, $fail failed"
[ $fail -eq 0 ]
