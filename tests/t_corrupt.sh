#!/usr/bin/env bash
# tests/t_corrupt.sh - corrupted checkpoints are refused with exit 2 and one
# line that names the file, the tensor and what was expected versus found.
#
# Owns: $MS_BUILD/corrupt-src (a preset-a model from tools/msgen.py, regenerated
#   when the tools change) and $MS_BUILD/corrupt-cases (tools/mscorrupt.py).
# Idea: tools/mscorrupt.py writes one case directory per corruption and a
#   MANIFEST.json saying what each refusal must contain; this script runs
#       $MS_BIN run CASE --ids 1,2,3 --gen 2
#   per case and requires, on stderr without "moestream: info"/"warning" lines,
#   exactly one line that
#     - contains one of the case's file names (shard file, index or config.json),
#     - contains the tensor name, quoted, when a tensor is involved (for a
#       truncated shard: any tensor the cut removed),
#     - matches the case's expected-vs-found wording (e.g. "expected BF16 [..],
#       found F16 [..]", "hold N bytes but .. needs M").
#   Each case counts one pass or one failure; a failure prints the message seen.
#   The valid source model must run (exit 0), so a broken generator cannot make
#   every case "pass" for the wrong reason.
# Does not: fuzz (tests/fuzz/), test the library API directly (test_format.c).
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
PY=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
src=$BUILD/corrupt-src
cases=$BUILD/corrupt-cases
. tests/lib.sh

stamp="$(cat tools/msgen.py tools/mslib.py tools/stwrite.py tools/mscorrupt.py | sha1sum | cut -c1-16)"
if [ "$(cat "$cases/.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$src" "$cases"
    if ! $PY tools/msgen.py "$src" --preset a >/dev/null 2>"$BUILD/corrupt-gen.log" ||
       ! $PY tools/mscorrupt.py "$src" "$cases" 2>>"$BUILD/corrupt-gen.log"; then
        bad "generating the corpus failed: $(tail -n 3 "$BUILD/corrupt-gen.log")"
        finish
    fi
    echo "$stamp" > "$cases/.stamp"
fi
[ -x "$BIN" ] || { bad "$BIN is not built"; finish; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

"$BIN" run "$src" --ids 1,2,3 --gen 2 --quiet >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && ok || bad "the valid source model exits $rc: $(head -c 300 "$tmp/err")"

# name TAB files TAB tensors (|-separated; tensors "-" for none) TAB wording
$PY - "$cases/MANIFEST.json" > "$tmp/cases" <<'PYEOF' || { bad "cannot read the manifest"; finish; }
import json, sys
for c in json.load(open(sys.argv[1])):
    print("\t".join([c["name"], "|".join(c["files"]), "|".join(c["tensors"]) or "-", c["wording"]]))
PYEOF
[ -s "$tmp/cases" ] || { bad "the manifest lists no case"; finish; }

while IFS=$'\t' read -r name files tensors wording; do
    "$BIN" run "$cases/$name" --ids 1,2,3 --gen 2 >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?
    grep -vE '^(moestream: )?(info|warning)' "$tmp/err" > "$tmp/lines"
    n=$(wc -l < "$tmp/lines")
    msg=$(head -c 600 "$tmp/lines" | tr '\n' ' ')
    why=""
    [ $rc -eq 2 ] || why="$why exit $rc (want 2);"
    [ "$n" -eq 1 ] || why="$why $n stderr lines (want 1);"
    hit=0
    IFS='|' read -ra fl <<< "$files"
    for f in "${fl[@]}"; do grep -qF -- "$f" "$tmp/lines" && hit=1; done
    [ $hit -eq 1 ] || why="$why does not name the file ($files);"
    if [ "$tensors" != "-" ]; then
        hit=0
        IFS='|' read -ra tl <<< "$tensors"
        for x in "${tl[@]}"; do grep -qF -- "'$x'" "$tmp/lines" && hit=1; done
        [ $hit -eq 1 ] || why="$why does not name the tensor ($(echo "$tensors" | cut -c1-120));"
    fi
    grep -qE -- "$wording" "$tmp/lines" || why="$why no expected-vs-found wording (/$wording/);"
    if [ -z "$why" ]; then ok; else bad "$name:$why message: $msg"; fi
done < "$tmp/cases"
finish
