#!/usr/bin/env bash
# tests/t_verify.sh - checksums end to end: `moestream verify`, and a weight byte
# corrupted on disk is never used (issue 7: exit 4 or the refusal at open, one line
# naming the file, the tensor and the byte range; never a silent wrong token).
#
# Owns: a temporary copy of $MS_TESTDATA/a (mktemp, removed at exit); writes nothing
#   into models/ or the test data.
# Idea:
#   1. verify writes the sidecar (exit 0), a second verify finds everything equal
#      (exit 0); a run with it verifies ("verify": true) and gives the ids of a
#      --no-verify run, at --ram min and at full residency;
#   2. one byte flipped inside the w1.weight_scale tensor of the first expert the
#      floor run demands (found with --trace): verify exits 4 naming that tensor;
#      run --ram min exits 4 (the expert read fails mid-run after its one re-read);
#      run --ram all exits 2 (the resident load at open refuses it); each prints
#      exactly one line (besides info / warning) naming the file, the tensor, the
#      byte range and "checksum mismatch (moestream.sums)"; with --no-verify the
#      corrupted byte goes unnoticed (exit 0): without a sidecar nothing is detected;
#   3. a byte flipped in a streamed trunk tensor (layer 2's shared-expert down
#      projection): run --ram min exits 4 naming it;
#   4. refused sidecars: another checkpoint's (exit 2, "different checkpoint"), a
#      truncated one (exit 2, "truncated"); a sidecar that cannot be written says to
#      use --sums (exit 2).
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
TD=${MS_TESTDATA:-$BUILD/testdata}
PY=/usr/bin/python3
. tests/lib.sh
[ -x "$BIN" ] || { bad "$BIN is not built"; finish; }
[ -d "$TD/a" ] || { bad "$TD/a missing"; finish; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
m=$tmp/m
mkdir -p "$m"
cp "$TD"/a/*.json "$TD"/a/*.safetensors "$m"/
IDS="--ids 1,2,3,4,5 --gen 8"

# lines: stderr without info / warning lines
lines() { grep -vE '^(moestream: )?(info|warning)' "$1"; }
# one_line FILE CODE WANT_RC TENSOR: exactly one line, naming shard file, tensor, range
one_line() {
    local f=$1 rc=$2 want=$3 tensor=$4 why=""
    [ "$rc" -eq "$want" ] || why="$why exit $rc (want $want);"
    lines "$f" > "$f.l"
    [ "$(wc -l < "$f.l")" -eq 1 ] || why="$why $(wc -l < "$f.l") lines (want 1);"
    grep -qF "'$tensor'" "$f.l" || why="$why does not name '$tensor';"
    grep -qE 'model-0000[0-9]-of-0000[0-9]\.safetensors' "$f.l" || why="$why does not name the file;"
    grep -qE 'bytes \[[0-9]+, [0-9]+\)' "$f.l" || why="$why no byte range;"
    grep -qF 'checksum mismatch (moestream.sums)' "$f.l" || why="$why no 'checksum mismatch (moestream.sums)';"
    echo "$why"
}

# --- 1. write, re-check, run ------------------------------------------------------
"$BIN" verify "$m" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && [ -s "$m/moestream.sums" ] && grep -q '^wrote' "$tmp/out" && ok ||
    bad "verify (write) exit $rc: $(cat "$tmp/out" "$tmp/err" | head -c 400)"
ls "$m"/moestream.sums.tmp.* >/dev/null 2>&1 && bad "verify left a temporary file" || ok
"$BIN" verify "$m" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -q '^ok:' "$tmp/out" && ok || bad "verify (check) exit $rc: $(cat "$tmp/out" "$tmp/err" | head -c 400)"
for ram in min all; do
    "$BIN" run "$m" $IDS --ram $ram --json --quiet >"$tmp/v.json" 2>"$tmp/err"; rc=$?
    "$BIN" run "$m" $IDS --ram $ram --json --quiet --no-verify >"$tmp/n.json" 2>>"$tmp/err"; rc2=$?
    if [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && $PY - "$tmp/v.json" "$tmp/n.json" <<'EOF'
import json, sys
v, n = (json.load(open(p)) for p in sys.argv[1:3])
s = v["stats"]
ok = (v["generated_ids"] == n["generated_ids"] and s["verify"] is True and s["verify_bytes"] > 0
      and s["verify_failures"] == 0 and n["stats"]["verify"] is False and n["stats"]["verify_bytes"] == 0)
sys.exit(0 if ok else 1)
EOF
    then ok; else bad "run --ram $ram with the sidecar: exit $rc/$rc2, $(head -c 300 "$tmp/v.json") $(head -c 300 "$tmp/err")"; fi
done

# --- 2. a corrupted expert scale byte ---------------------------------------------
"$BIN" run "$m" $IDS --ram min --quiet --trace "$tmp/trace" >/dev/null 2>&1
tensor=$($PY - "$m/config.json" "$tmp/trace" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))["text_config"]
first = [l.split()[1] for l in open(sys.argv[2]) if not l.startswith("#")][0]
r, want = 1, int(first)        # region 0 = embed_tokens; per layer: attention, FFN, experts
for il in range(c["num_hidden_layers"]):
    r += 2
    if il >= c["first_k_dense_replace"]:
        if want < r + c["num_experts"]:
            print("language_model.model.layers.%d.block_sparse_moe.experts.%d.w1.weight_scale" % (il, want - r))
            break
        r += c["num_experts"]
EOF
)
if [ -z "$tensor" ]; then bad "no expert found in the floor run's trace"; finish; fi
flip_tensor "$m" "$tensor"
"$BIN" verify "$m" >"$tmp/out" 2>"$tmp/err"; rc=$?
why=$(one_line "$tmp/err" $rc 4 "$tensor")
grep -q '^MISMATCH: 1 tensors' "$tmp/out" || why="$why no MISMATCH summary;"
[ -z "$why" ] && ok || bad "verify of a corrupted expert:$why $(head -c 500 "$tmp/err")"
"$BIN" run "$m" $IDS --ram min --quiet >"$tmp/out" 2>"$tmp/err"; rc=$?
why=$(one_line "$tmp/err" $rc 4 "$tensor")
[ -z "$why" ] && ok || bad "run --ram min on a corrupted expert:$why $(head -c 500 "$tmp/err")"
"$BIN" run "$m" $IDS --ram min >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 4 ] && grep -q 'reading it again' "$tmp/err" && grep -q 'checksum retries [1-9][0-9]*, failures [1-9]' "$tmp/err" && ok ||
    bad "the mismatch was not read again first, or the summary does not count it: $(tail -n 2 "$tmp/err")"
"$BIN" run "$m" $IDS --ram all --quiet >"$tmp/out" 2>"$tmp/err"; rc=$?
why=$(one_line "$tmp/err" $rc 2 "$tensor")
[ -z "$why" ] && ok || bad "run --ram all on a corrupted expert:$why $(head -c 500 "$tmp/err")"
"$BIN" run "$m" $IDS --ram min --no-verify --quiet >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && ok || bad "--no-verify on a corrupted expert exits $rc (without checksums nothing is detected)"
flip_tensor "$m" "$tensor"      # repaired

# --- 3. a corrupted streamed trunk byte -------------------------------------------
trunk=language_model.model.layers.2.block_sparse_moe.shared_experts.down_proj.weight
flip_tensor "$m" "$trunk"
"$BIN" run "$m" $IDS --ram min --quiet >"$tmp/out" 2>"$tmp/err"; rc=$?
why=$(one_line "$tmp/err" $rc 4 "$trunk")
[ -z "$why" ] && ok || bad "run --ram min on a corrupted trunk tensor:$why $(head -c 500 "$tmp/err")"
flip_tensor "$m" "$trunk"
"$BIN" verify "$m" --quiet >/dev/null 2>&1 && ok || bad "the repaired copy does not verify"

# --- 4. refused sidecars ----------------------------------------------------------
mkdir -p "$tmp/c"
cp "$TD"/c/*.json "$TD"/c/*.safetensors "$tmp/c"/
"$BIN" verify "$tmp/c" --sums "$tmp/c.sums" --quiet >/dev/null 2>&1 || bad "verify --sums (write) failed"
"$BIN" run "$m" $IDS --sums "$tmp/c.sums" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && [ "$(lines "$tmp/err" | wc -l)" -eq 1 ] && grep -q 'different checkpoint' "$tmp/err" && ok ||
    bad "another checkpoint's sidecar: exit $rc, $(head -c 400 "$tmp/err")"
"$BIN" verify "$m" --sums "$tmp/c.sums" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q 'different checkpoint' "$tmp/err" && ok || bad "verify with another checkpoint's sidecar: exit $rc"
head -c 100 "$m/moestream.sums" > "$tmp/cut.sums"
"$BIN" run "$m" $IDS --sums "$tmp/cut.sums" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q 'truncated' "$tmp/err" && ok || bad "truncated sidecar: exit $rc, $(head -c 400 "$tmp/err")"
"$BIN" run "$m" $IDS --sums "$tmp/none.sums" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q 'none.sums' "$tmp/err" && ok || bad "missing --sums file: exit $rc, $(head -c 400 "$tmp/err")"
"$BIN" verify "$m" --write --sums "$tmp/no/such/dir.sums" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q -- '--sums' "$tmp/err" && ok || bad "unwritable sidecar: exit $rc, $(head -c 400 "$tmp/err")"
finish
