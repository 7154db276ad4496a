#!/usr/bin/env bash
# tests/t_oss.sh - a gpt-oss checkpoint through the command line, end to end.
#
# Owns: a temporary copy of $MS_TESTDATA/oss_b (mktemp, removed at exit).
# Checks:
#   1. plan on the released configs (tests/data/format/gpt-oss-{120b,20b}) at 4G,
#      8G, 16G and 64G: exit 0, slots of 12.7 MiB (one expert's six slices, 12.62
#      MiB, each at its page offset), no trunk ring (the whole always-read part
#      pinned from 4G up), the session's keys and values (a sliding layer's ring:
#      the window of 128 and the default 8 a rollback may go back);
#      the bench checkpoints tools/ossgen.py plans for --preset 20b and 120b: the
#      release's shard files (3, 15) and its bytes (13,761,264,768, 65,248,815,744);
#   2. run --ids at every budget (everything, 96M, min), --threads 1 and 2, --chunk
#      1 and 32, --kernels ref: the reference's greedy ids, and the first logits
#      bits equal to the resident run's;
#   3. verify writes the sidecar (fused experts hashed per slice), a run at --ram
#      min verifies every read and gives the same ids; a byte flipped in an
#      expert's gate_up scales is found by verify (exit 4, naming the tensor) and
#      by a run that reads it (exit 4), while `tokenize` (which reads no weight)
#      cuts text there as on the intact copy; pack, then a run from the pack: same ids;
#   4. a session saved after the prompt and resumed with more ids equals one run
#      over both;
#   5. --speculate 4 and auto: the plain run's ids;
#   6. under mpirun -np 2 (when the build has MPI), resident and --ram min: the
#      same ids.
# Last line: "t_oss: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
TD=${MS_TESTDATA:-$BUILD/testdata}
PY=/usr/bin/python3
. tests/lib.sh
. tests/lib_mpi.sh
[ -x "$BIN" ] || { bad "$BIN is not built"; finish; }
[ -d "$TD/oss_b" ] || { bad "$TD/oss_b missing"; finish; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
m=$tmp/oss_b
mkdir -p "$m"
cp "$TD"/oss_b/*.json "$TD"/oss_b/*.safetensors "$m"/
PROMPT=$($PY -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["prompt_ids"])))' "$TD/oss_b/golden/golden.json")
WANT=$($PY -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["greedy_ids"])))' "$TD/oss_b/golden/golden.json")
N=$(echo "$WANT" | tr ',' '\n' | wc -l)

ids_of() { $PY -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["generated_ids"])))' "$1" 2>/dev/null; }
# run NAME ARGS...: run --json into $tmp/NAME.json; its ids must be WANT
run_ids() {
    local name=$1; shift
    if "$BIN" run "$@" --ids "$PROMPT" --max-tokens "$N" --json --quiet > "$tmp/$name.json" 2> "$tmp/$name.err" &&
       [ "$(ids_of "$tmp/$name.json")" = "$WANT" ]; then ok
    else bad "$name: ids $(ids_of "$tmp/$name.json"), want $WANT; $(tail -n 2 "$tmp/$name.err")"; fi
}

# 1. plan on the released configs
for cfg in 120b 20b; do
    for r in 4G 8G 16G 64G; do
        if "$BIN" plan tests/data/format/gpt-oss-$cfg-config.json --ram $r > "$tmp/plan" 2>&1 &&
           grep -q "slots of 12.7 MiB" "$tmp/plan" && grep -Eq "^  trunk ring +0 " "$tmp/plan" &&
           grep -q "keys and values at 4096 positions, 136 in a sliding layer" "$tmp/plan"; then ok
        else bad "plan $cfg --ram $r: $(head -c 1500 "$tmp/plan")"; fi
    done
done

# the full-width bench checkpoints (tools/ossgen.py --preset 20b / 120b, planned only):
# the release's shard files and its bytes to the byte (spec/gpt-oss.md, section 1)
for want in "20b 3 00002 13761264768" "120b 15 00014 65248815744"; do
    set -- $want
    if $PY tools/ossgen.py "$tmp/gen-$1" --preset "$1" --dry-run > "$tmp/dry" 2>&1 &&
       [ "$(grep -c "^model-[0-9]*-of-$3.safetensors: " "$tmp/dry")" = "$2" ] &&
       grep -qx "total $4 bytes" "$tmp/dry" && [ ! -e "$tmp/gen-$1" ]; then ok
    else bad "ossgen --preset $1 --dry-run: $(tail -n 3 "$tmp/dry")"; fi
done

# 2. budgets, threads, chunks, kernels: the reference's ids, the same first logits bits
run_ids all "$m" --dump-logits "$tmp/l.all"
run_ids r96 "$m" --ram 96M --dump-logits "$tmp/l.96"
run_ids min "$m" --ram min --threads 1 --chunk 1 --dump-logits "$tmp/l.min"
run_ids t2 "$m" --threads 2 --chunk 32 --kernels ref --dump-logits "$tmp/l.t2"
for k in 96 min t2; do
    if cmp -s "$tmp/l.all" "$tmp/l.$k"; then ok; else bad "first logits of $k differ from the resident run's"; fi
done

# 3. checksums and the pack
if "$BIN" verify "$m" --write > "$tmp/v.out" 2>&1 && [ -s "$m/moestream.sums" ]; then ok
else bad "verify --write: $(cat "$tmp/v.out")"; fi
run_ids verified "$m" --ram min
if $PY -c 'import json,sys; s=json.load(open(sys.argv[1]))["stats"]; sys.exit(0 if s["verify"] and s["bytes_read"] > 0 else 1)' "$tmp/verified.json"; then ok
else bad "the run at --ram min did not verify its reads: $(head -c 600 "$tmp/verified.json")"; fi
if "$BIN" pack "$m" --quiet > "$tmp/p.out" 2>&1 && [ -s "$m/moestream.pack" ]; then ok
else bad "pack: $(cat "$tmp/p.out")"; fi
run_ids packed "$m" --ram min
if $PY -c 'import json,sys; s=json.load(open(sys.argv[1]))["stats"]; sys.exit(0 if s["pack"] and s["trunk_packed_read"] > 0 else 1)' "$tmp/packed.json"; then ok
else bad "the run did not read the pack: $(head -c 600 "$tmp/packed.json")"; fi
rm -f "$m/moestream.pack"
cp -r "$m" "$tmp/bad"
flip_tensor "$tmp/bad" model.layers.1.mlp.experts.gate_up_proj_scales
"$BIN" verify "$tmp/bad" > "$tmp/vb.out" 2>&1; rc=$?
if [ $rc = 4 ] && grep -q "gate_up_proj_scales" "$tmp/vb.out"; then ok
else bad "verify of a flipped expert byte: exit $rc, $(tail -n 3 "$tmp/vb.out")"; fi
"$BIN" run "$tmp/bad" --ram min --ids "$PROMPT" --max-tokens "$N" --quiet > /dev/null 2> "$tmp/rb.err"; rc=$?
if [ $rc = 4 ] && grep -q "gate_up_proj_scales.*checksum mismatch" "$tmp/rb.err"; then ok
else bad "a run reading the flipped expert: exit $rc, $(tail -n 3 "$tmp/rb.err")"; fi
# tokenize reads no weight (without --ram it used to load them all, and stop at the flipped byte)
printf 'hello, world' | "$BIN" tokenize "$tmp/bad" > "$tmp/tb.out" 2> "$tmp/tb.err"; rc=$?
printf 'hello, world' | "$BIN" tokenize "$m" > "$tmp/tg.out" 2> /dev/null
if [ $rc = 0 ] && [ -s "$tmp/tb.out" ] && cmp -s "$tmp/tb.out" "$tmp/tg.out"; then ok
else bad "tokenize on the copy with a flipped expert byte: exit $rc, $(tail -n 2 "$tmp/tb.err")"; fi

# 4. a session saved after the prompt, resumed with more ids
MORE=5,6,7
"$BIN" run "$m" --ids "$PROMPT,$MORE" --max-tokens 8 --json --quiet > "$tmp/one.json" 2>/dev/null
"$BIN" run "$m" --ids "$PROMPT" --max-tokens 1 --save-session "$tmp/s.bin" --quiet > /dev/null 2>&1
"$BIN" run "$m" --load-session "$tmp/s.bin" --ids "$MORE" --max-tokens 8 --json --quiet > "$tmp/two.json" 2>/dev/null
A=$(ids_of "$tmp/one.json"); B=$(ids_of "$tmp/two.json")
# the saved session holds the prompt and its first generated token; feed that token too
"$BIN" run "$m" --ids "$PROMPT,$(echo "$WANT" | cut -d, -f1),$MORE" --max-tokens 8 --json --quiet > "$tmp/three.json" 2>/dev/null
C=$(ids_of "$tmp/three.json")
if [ -n "$A" ] && [ -n "$B" ] && [ "$B" = "$C" ]; then ok
else bad "a resumed session: $B, one run over the same ids: $C"; fi

# 5. speculation
run_ids spec4 "$m" --speculate 4
run_ids specauto "$m" --speculate auto --ram min

# 6. a pipeline of two processes
if mpi_built; then
    for r in all min; do
        if timeout 120 mpirun -np 2 --oversubscribe "$BIN" run "$m" --ram $r --ids "$PROMPT" --max-tokens "$N" --json --quiet \
               > "$tmp/mpi.json" 2> "$tmp/mpi.err" && [ "$(ids_of "$tmp/mpi.json")" = "$WANT" ]; then ok
        else bad "mpirun -np 2 --ram $r: $(ids_of "$tmp/mpi.json"); $(tail -n 3 "$tmp/mpi.err")"; fi
    done
fi
finish
