#!/usr/bin/env bash
# tests/t_realwidth.sh - a real-width smoke test: one KDA layer (with the dense
# MLP, intermediate 33792), one MLA layer and one MoE layer (16 experts of
# 3584/3072, top-16) at the released dimensions (hidden 7168, 96 heads), from
# random weights in the released layout. Catches 32-bit overflow and scratch
# sizing bugs: the run must finish with finite logits (a non-finite logit
# exits 4), and 1 and 2 threads must give the same logits bits.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
dir=$BUILD/testdata-wide
pass=0; fail=0
ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

stamp="$(sha1sum tools/msgen.py tools/mslib.py | sha1sum | cut -c1-16)"
if [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$dir"
    /usr/bin/python3 tools/msgen.py "$dir" --preset wide --layers 2 --mla 2 --experts 16 \
        --vocab 1024 --seed 3 >/dev/null || { bad "generation failed"; echo "$pass passed, $fail failed"; exit 1; }
    echo "$stamp" > "$dir/.stamp"
fi
out1=$("$BIN" run "$dir" --ids 1,2,3 --gen 3 --threads 1 --dump-logits "$BUILD/wide1.f32" --json --quiet); rc1=$?
[ $rc1 -eq 0 ] && ok || bad "1-thread run exited $rc1"
out2=$("$BIN" run "$dir" --ids 1,2,3 --gen 3 --threads 2 --dump-logits "$BUILD/wide2.f32" --json --quiet); rc2=$?
[ $rc2 -eq 0 ] && ok || bad "2-thread run exited $rc2"
ids1=$(printf '%s' "$out1" | grep -o '"generated_ids": \[[^]]*\]')
ids2=$(printf '%s' "$out2" | grep -o '"generated_ids": \[[^]]*\]')
[ -n "$ids1" ] && [ "$ids1" = "$ids2" ] && ok || bad "ids differ: '$ids1' vs '$ids2'"
cmp -s "$BUILD/wide1.f32" "$BUILD/wide2.f32" && ok || bad "logits bits differ between 1 and 2 threads"
[ "$(stat -c %s "$BUILD/wide1.f32" 2>/dev/null)" = 4096 ] && ok || bad "logits file is not 1024 floats"
echo "t_realwidth: $pass passed, $fail failed"
[ $fail -eq 0 ]
