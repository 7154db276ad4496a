#!/usr/bin/env bash
# tests/t_realwidth.sh - a real-width smoke test: one KDA layer (with the dense
# MLP, intermediate 33792), one MLA layer and one MoE layer (16 experts of
# 3584/3072, top-16) at the released dimensions (hidden 7168, 96 heads), from
# random weights in the released layout. Catches 32-bit overflow and scratch
# sizing bugs: the run must finish with finite logits (a non-finite logit
# exits 4), and 1 and 2 threads must give the same logits bits. Then with a
# checksum sidecar and a pack (written once per generated model): at the
# floor, with and without the pack, the same logits bits again.
# The model and its pack take 5.9 GB: they are removed when the test ends
# (generating, checksumming and packing them again takes ~40 s) unless
# MS_KEEP_WIDE=1 keeps them for the next run.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
dir=$BUILD/testdata-wide
. tests/lib.sh

stamp="$(sha1sum tools/msgen.py tools/mslib.py tools/stwrite.py | sha1sum | cut -c1-16)"
need_kb=$((6500 * 1024))
if [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$dir"
    mkdir -p "$BUILD"
    have_kb=$(df -Pk "$BUILD" | awk 'NR == 2 { print $4 }')
    if [ "$have_kb" -lt "$need_kb" ]; then
        bad "the real-width model and its pack need 6.5 GB free where $BUILD is; $((have_kb / 1024)) MB are"
        echo "t_realwidth: $pass passed, $fail failed"; exit 1
    fi
    /usr/bin/python3 tools/msgen.py "$dir" --preset wide --layers 2 --mla 2 --experts 16 \
        --vocab 1024 --seed 3 >/dev/null || { rm -rf "$dir"; bad "generation failed"; echo "$pass passed, $fail failed"; exit 1; }
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

# The packed trunk at real width: images of many 2 MiB reads and 1 MiB hash
# blocks each, landing out of order on two checker threads and decoded as they
# land (store/land.c, check_unpack). At the floor every trunk region streams from
# the pack; the logits must be the bits of the run without it.
if [ ! -s "$dir/moestream.pack" ]; then
    "$BIN" verify "$dir" --quiet > /dev/null 2>&1 || bad "verify (writing the sidecar)"
    "$BIN" pack "$dir" --quiet > /dev/null 2>&1 || bad "pack"
fi
out3=$("$BIN" run "$dir" --ids 1,2,3 --gen 3 --threads 2 --ram min --dump-logits "$BUILD/wide3.f32" --json --quiet); rc3=$?
out4=$("$BIN" run "$dir" --ids 1,2,3 --gen 3 --threads 2 --ram min --no-pack --dump-logits "$BUILD/wide4.f32" --json --quiet); rc4=$?
[ $rc3 -eq 0 ] && [ $rc4 -eq 0 ] && ok || bad "floor runs with / without the pack exited $rc3 / $rc4"
cmp -s "$BUILD/wide3.f32" "$BUILD/wide4.f32" && ok || bad "logits bits differ with the pack"
cmp -s "$BUILD/wide3.f32" "$BUILD/wide1.f32" && ok || bad "logits bits differ between the floor and no budget"
num() { printf '%s' "$1" | grep -o "\"$2\": [0-9]*" | head -1 | grep -o '[0-9]*$'; }
pr=$(num "$out3" trunk_packed_read); ub=$(num "$out3" trunk_unpacked_bytes); fb=$(num "$out3" pack_fallbacks)
tb3=$(num "$out3" trunk_bytes_read); tb=$(num "$out4" trunk_bytes_read)
# regions the pack does not hold (too small to shrink) are read from the shards as before
if [ -n "$pr" ] && [ "$pr" -gt 0 ] && [ "$pr" -lt "$ub" ] && [ "$fb" = 0 ] && [ $((tb3 - pr + ub)) = "$tb" ]; then ok
else bad "pack read $pr of $tb3 trunk bytes standing for $ub (no pack: $tb), $fb fallbacks"; fi
[ "${MS_KEEP_WIDE:-0}" = 1 ] || rm -rf "$dir"
rm -f "$BUILD"/wide[1-4].f32
echo "t_realwidth: $pass passed, $fail failed"
[ $fail -eq 0 ]
