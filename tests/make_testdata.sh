#!/usr/bin/env bash
# tests/make_testdata.sh OUTDIR - the tiny checkpoints and golden files of the test suite.
#
# Owns: OUTDIR and everything in it. Writes
#   OUTDIR/a, b, c, d         tiny models (tools/msgen.py presets) + golden/ (tools/msref.py)
#   OUTDIR/d_odd              preset d with every shard's header 1 byte longer: the same
#                               tensors, most of them (BF16 included) at odd file offsets
#   OUTDIR/trap_NAME          one fixture per trap of spec/kimi-k3.md:
#                               golden/        the correct reference
#                               golden_wrong/  the reference with that one rule wrong
#                               margin.json    max |wrong - correct| logit, the max |logit|
#   OUTDIR/oss_a, oss_b, oss_c
#                             tiny gpt-oss models (tools/ossgen.py presets oa, ob, oc) +
#                               golden/ (tools/ossref.py), in the Hugging Face release
#                               layout; oss_c's routers are small beside its attention
#   OUTDIR/trap_oss_NAME      one fixture per trap of spec/gpt-oss.md (osslib.TRAPS), laid
#                               out as trap_NAME
#   OUTDIR/draft_a, draft_a0  draft models for a (--draft-model; presets e, e0): a's
#                               vocabulary, 4 layers; draft_a0's greedy id is always 0
#   OUTDIR/MANIFEST           the model directories, one per line
#   OUTDIR/STAMP              hash of tools/*.py and this script
# golden/ holds golden.json, tf_logits.f32 [n_tf, V], gen_logits0.f32 [V] (see msref.py).
# Idea: idempotent and cheap. Nothing is done when STAMP matches; otherwise everything is
#   rebuilt in OUTDIR.tmp (two jobs at a time) and swapped in only when all of it worked,
#   so a failed run never leaves a half-current OUTDIR behind.
# Checks while building: msref --check on a, b, c, d and d_odd, ossref --check on oss_a,
#   oss_b and oss_c (greedy == teacher-forced argmax, deterministic, incremental == from scratch),
#   every top-2 logit gap >= MIN_ARGMAX_GAP, and every trap's wrong logits differ from the
#   correct ones by more than MIN_TRAP_MARGIN. Exits non-zero on any failure.
set -u
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
OUT=$(realpath -m "$1")
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
export PYTHONDONTWRITEBYTECODE=1     # leave no __pycache__ in tools/
MIN_TRAP_MARGIN=0.1          # logits are O(1..10); engine tolerances are ~1e-3
MIN_ARGMAX_GAP=0.001         # correct goldens: no near-tie an fp32 engine could flip

STAMP=$(cat tools/*.py tests/make_testdata.sh | sha256sum | cut -d' ' -f1)
if [ -f "$OUT/STAMP" ] && [ "$(cat "$OUT/STAMP")" = "$STAMP" ]; then
    exit 0
fi

TMP=$OUT.tmp
rm -rf "$TMP"
mkdir -p "$TMP/logs" || exit 1

# ~8 prompt ids, 24 greedy tokens, ~40 teacher-forced ids; all < 256 (the smallest vocab;
# the gpt-oss presets keep their specials above these ids too).
PROMPT=17,200,33,99,3,250,7,128
GEN=24
TF_IDS=1,45,212,9,77,130,64,255,0,18,91,160,33,33,33,240,5,71,199,2,143,88,31,220,14,66,101,178,47,250,6,123,39,190,58,11,234,82,150,27

TRAPS=$($PY -c 'import sys; sys.path.insert(0, "tools"); import mslib; print(" ".join(mslib.TRAPS))') || exit 1
OSS_TRAPS=$($PY -c 'import sys; sys.path.insert(0, "tools"); import osslib; print(" ".join(osslib.TRAPS))') || exit 1

check_gaps() {      # golden dir: every greedy step and teacher-forced argmax well separated
    $PY -c '
import json, sys
g = json.load(open(sys.argv[1] + "/golden.json"))
gap = min(g["greedy_top2_gaps"] + g["tf_top2_gaps"])
print("%s: smallest top-2 logit gap %.4g" % (sys.argv[1], gap))
sys.exit(0 if gap >= float(sys.argv[2]) else 1)' "$1" "$MIN_ARGMAX_GAP"
}

job_model() {       # name [preset header-pad]
    local d=$TMP/$1
    $PY tools/msgen.py "$d" --preset "${2:-$1}" --header-pad "${3:-0}" --check-template &&
    $PY tools/msref.py "$d" --ids $PROMPT --gen $GEN --tf-ids $TF_IDS --out "$d/golden" --check &&
    check_gaps "$d/golden"
}

check_margin() {    # fixture dir: golden_wrong/ far from golden/; writes margin.json
    $PY - "$1" "$MIN_TRAP_MARGIN" <<'EOF'
import json, sys
import numpy as np
d, need = sys.argv[1], float(sys.argv[2])
def load(sub):
    return np.concatenate([np.fromfile("%s/%s/%s" % (d, sub, f), dtype="<f4")
                           for f in ("gen_logits0.f32", "tf_logits.f32")])
right, wrong = load("golden"), load("golden_wrong")
diff = float(np.max(np.abs(wrong - right))) if np.all(np.isfinite(wrong)) else float("inf")
m = {"max_abs_diff": diff, "max_abs_logit": float(np.max(np.abs(right)))}
json.dump(m, open(d + "/margin.json", "w"))
print("margin %s: %s" % (d, m))
sys.exit(0 if diff > need else 1)
EOF
}

job_trap() {        # trap name; msgen picks the fixture's base preset (a or c)
    local t=$1 d=$TMP/trap_$1
    $PY tools/msgen.py "$d" --trap "$t" &&
    $PY tools/msref.py "$d" --ids $PROMPT --gen $GEN --tf-ids $TF_IDS --out "$d/golden" &&
    check_gaps "$d/golden" &&
    $PY tools/msref.py "$d" --ids $PROMPT --gen $GEN --tf-ids $TF_IDS --out "$d/golden_wrong" --trap "$t" &&
    check_margin "$d"
}

job_oss_model() {   # name preset: a gpt-oss model (tools/ossgen.py, tools/ossref.py)
    local d=$TMP/$1
    $PY tools/ossgen.py "$d" --preset "$2" --check-template &&
    $PY tools/ossref.py "$d" --ids $PROMPT --gen $GEN --tf-ids $TF_IDS --out "$d/golden" --check &&
    check_gaps "$d/golden"
}

job_oss_trap() {    # gpt-oss trap name; ossgen picks the fixture's base preset (oa)
    local t=$1 d=$TMP/trap_oss_$1
    $PY tools/ossgen.py "$d" --trap "$t" &&
    $PY tools/ossref.py "$d" --ids $PROMPT --gen $GEN --tf-ids $TF_IDS --out "$d/golden" &&
    check_gaps "$d/golden" &&
    $PY tools/ossref.py "$d" --ids $PROMPT --gen $GEN --tf-ids $TF_IDS --out "$d/golden_wrong" --trap "$t" &&
    check_margin "$d"
}

NJ=$(nproc 2>/dev/null || echo 2)
spawn() {           # name, command...
    local name=$1; shift
    while [ "$(jobs -rp | wc -l)" -ge "$NJ" ]; do wait -n; done
    ( "$@" > "$TMP/logs/$name.log" 2>&1 && touch "$TMP/logs/$name.ok" ) &
}

t0=$(date +%s)
NAMES=""
for p in a b c d; do spawn "$p" job_model "$p"; NAMES="$NAMES $p"; done
spawn d_odd job_model d_odd d 1; NAMES="$NAMES d_odd"
spawn draft_a $PY tools/msgen.py "$TMP/draft_a" --preset e; NAMES="$NAMES draft_a"
spawn draft_a0 $PY tools/msgen.py "$TMP/draft_a0" --preset e0; NAMES="$NAMES draft_a0"
for t in $TRAPS; do spawn "trap_$t" job_trap "$t"; NAMES="$NAMES trap_$t"; done
spawn oss_a job_oss_model oss_a oa; NAMES="$NAMES oss_a"
spawn oss_b job_oss_model oss_b ob; NAMES="$NAMES oss_b"
spawn oss_c job_oss_model oss_c oc; NAMES="$NAMES oss_c"
for t in $OSS_TRAPS; do spawn "trap_oss_$t" job_oss_trap "$t"; NAMES="$NAMES trap_oss_$t"; done
wait

fail=0
for n in $NAMES; do
    if [ ! -f "$TMP/logs/$n.ok" ]; then
        echo "make_testdata: $n FAILED:" >&2
        tail -n 20 "$TMP/logs/$n.log" >&2
        fail=1
    fi
done
[ $fail -eq 0 ] || exit 1

for n in $NAMES; do echo "$n"; done > "$TMP/MANIFEST"
echo "$STAMP" > "$TMP/STAMP"
rm -rf "$OUT" && mv "$TMP" "$OUT" || exit 1
echo "make_testdata: $OUT: $(echo $NAMES | wc -w) models in $(( $(date +%s) - t0 )) s" >&2
exit 0
