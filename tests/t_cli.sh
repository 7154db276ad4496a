#!/usr/bin/env bash
# tests/t_cli.sh - the moestream program: ids equal to the reference's, JSON
# output, logits dump, exit codes, sessions saved and resumed bit-identically,
# --kernels.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
TD=${MS_TESTDATA:-$BUILD/testdata}
PY=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. tests/lib.sh
expect_rc() { local want=$1; shift; "$@" >/dev/null 2>"$tmp/err"; local rc=$?; [ $rc -eq "$want" ] && ok || bad "exit $rc (want $want): $* : $(head -c 300 "$tmp/err")"; }
jget() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(','.join(str(x) for x in d[sys.argv[2]]) if isinstance(d[sys.argv[2]], list) else d[sys.argv[2]])" "$@"; }

for m in a b c; do
    g=$TD/$m/golden/golden.json
    prompt=$(jget "$g" prompt_ids); want=$(jget "$g" greedy_ids)
    n=$(echo "$want" | tr ',' '\n' | wc -l)
    got=$("$BIN" run "$TD/$m" --ids "$prompt" --gen "$n" --quiet)
    [ "$got" = "$want" ] && ok || bad "$m: ids '$got' != reference '$want'"
    got=$("$BIN" run "$TD/$m" --ids "$prompt" --gen "$n" --recompute --quiet)
    [ "$got" = "$want" ] && ok || bad "$m: recompute ids '$got' != reference"
done

# --json and --dump-logits
g=$TD/a/golden/golden.json
prompt=$(jget "$g" prompt_ids)
"$BIN" run "$TD/a" --ids "$prompt" --gen 4 --json --dump-logits "$tmp/l.f32" --quiet > "$tmp/out.json"
$PY - "$tmp/out.json" "$tmp/l.f32" "$TD/a/golden/gen_logits0.f32" <<'PYEOF' && ok || bad "json / logits dump"
import json, sys
import numpy as np
d = json.load(open(sys.argv[1]))
assert [k for k in ("prompt_ids", "generated_ids", "stats") if k in d] == ["prompt_ids", "generated_ids", "stats"], d.keys()
assert len(d["generated_ids"]) == 4
for k in ("s_per_token", "bytes_read", "prefill_s", "peak_rss_bytes", "io_busy_s", "io_inflight_s"):
    assert k in d["stats"], k
st = d["stats"]
assert 0 <= st["io_busy_s"] <= st["io_inflight_s"] or st["io_inflight_s"] == st["io_busy_s"] == 0, st
a = np.fromfile(sys.argv[2], dtype="<f4"); b = np.fromfile(sys.argv[3], dtype="<f4")
assert a.shape == b.shape, (a.shape, b.shape)
err = float(np.abs(a - b).max()); scale = float(np.abs(b).max())
assert err <= 1e-3 * scale, (err, scale)
PYEOF

# exit codes
expect_rc 2 "$BIN"
expect_rc 2 "$BIN" frobnicate
expect_rc 2 "$BIN" run "$TD/a" --ids 1,2 --bogus
expect_rc 2 "$BIN" run "$TD/a" --ids x,y
expect_rc 2 "$BIN" run "$tmp/nonexistent" --ids 1,2 --quiet
expect_rc 2 "$BIN" run "$TD/a" --ids 999999 --gen 1 --quiet
mkdir "$tmp/broken"; cp "$TD/a"/*.safetensors "$TD/a"/*.json "$tmp/broken/"
$PY -c "import json,sys; p=sys.argv[1]; d=json.load(open(p)); del d['text_config']['hidden_size']; json.dump(d, open(p,'w'))" "$tmp/broken/config.json"
expect_rc 2 "$BIN" run "$tmp/broken" --ids 1,2 --quiet
grep -q "hidden_size" "$tmp/err" && ok || bad "missing-field message does not name the field: $(cat "$tmp/err")"

# sessions: save after N1 tokens, resume for N2 more == one run of N1 + N2
full=$("$BIN" run "$TD/b" --ids 5,6,7 --gen 12 --quiet)
first=$("$BIN" run "$TD/b" --ids 5,6,7 --gen 5 --save-session "$tmp/s.bin" --quiet)
rest=$("$BIN" run "$TD/b" --load-session "$tmp/s.bin" --gen 7 --quiet)
[ "$first,$rest" = "$full" ] && ok || bad "resumed session '$first' + '$rest' != '$full'"
expect_rc 2 "$BIN" run "$TD/c" --load-session "$tmp/s.bin" --gen 2 --quiet
grep -q "different model" "$tmp/err" && ok || bad "mismatched session message: $(cat "$tmp/err")"
head -c 100 "$tmp/s.bin" > "$tmp/short.bin"
expect_rc 2 "$BIN" run "$TD/b" --load-session "$tmp/short.bin" --gen 2 --quiet
# sampling: the same seed gives the same tokens at every budget (and a different seed does not)
s1=$("$BIN" run models/k3-tiny --prompt "And the LORD said" --max-tokens 24 --temperature 0.9 --top-p 0.95 --seed 7 --ram min --quiet)
s2=$("$BIN" run models/k3-tiny --prompt "And the LORD said" --max-tokens 24 --temperature 0.9 --top-p 0.95 --seed 7 --quiet)
s3=$("$BIN" run models/k3-tiny --prompt "And the LORD said" --max-tokens 24 --temperature 0.9 --top-p 0.95 --seed 8 --quiet)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && ok || bad "seed 7 at --ram min '$s1' != unlimited '$s2'"
[ "$s2" != "$s3" ] && ok || bad "seeds 7 and 8 gave the same text"

# --ram presets and the memory plan
got=$("$BIN" run "$TD/c" --ids 5,6,7 --gen 10 --ram min --trace "$tmp/trace.txt" --quiet)
want=$("$BIN" run "$TD/c" --ids 5,6,7 --gen 10 --quiet)
[ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "--ram min ids '$got' != '$want'"
"$BIN" trace "$tmp/trace.txt" --capacity 8 > "$tmp/replay.txt" && ok || bad "trace replay failed"
$PY - "$tmp/replay.txt" <<'PYEOF' && ok || bad "trace replay: Belady must bound the online policies: $(cat "$tmp/replay.txt")"
import sys
rows = {l.split()[0]: int(l.split()[3]) for l in open(sys.argv[1]).read().splitlines()[1:]}
assert set(rows) == {"lru", "s3fifo", "belady"}, rows
assert rows["belady"] >= rows["lru"] and rows["belady"] >= rows["s3fifo"] and rows["belady"] > 0, rows
PYEOF
cfg=tests/data/format/kimi-k3-config.json
"$BIN" plan "$cfg" --ram 8G > "$tmp/plan8.txt" 2>&1 && grep -q "total planned" "$tmp/plan8.txt" && ok || bad "the released model's plan at 8G does not fit: $(cat "$tmp/plan8.txt")"
expect_rc 2 "$BIN" plan "$cfg" --ram 2G
# the chunk chosen for the budget: at 8G the released model streams ~100 GiB of trunk per
# token, so 1024-token chunks cost a decode token ~2%; without --ram, 32; --chunk overrides
grep -q "scratch for 1024-token chunks, chosen for the budget" "$tmp/plan8.txt" && ok || bad "plan at 8G: $(grep -o 'scratch for[^:]*' "$tmp/plan8.txt")"
"$BIN" plan "$cfg" | grep -q "scratch for 32-token chunks)" && ok || bad "plan without --ram: not 32-token chunks"
"$BIN" plan "$cfg" --ram 8G --chunk 64 | grep -q "scratch for 64-token chunks)" && ok || bad "plan --chunk 64 at 8G"
"$BIN" plan "$cfg" --ram 2G 2>/dev/null | grep -q "DOES NOT FIT" && ok || bad "plan at 2G does not say it does not fit"
# --kernels: the table is named in the JSON; ref gives the logits bits of the automatic
# choice; an unknown name is a usage error (exit 2) that lists the known ones
"$BIN" run models/k3-tiny --ids 1,2,3 --gen 6 --json --dump-logits "$tmp/k0.f32" --quiet > "$tmp/k0.json"
"$BIN" run models/k3-tiny --ids 1,2,3 --gen 6 --json --dump-logits "$tmp/k1.f32" --kernels ref --quiet > "$tmp/k1.json"
[ "$(jget "$tmp/k1.json" kernels)" = ref ] && [ -n "$(jget "$tmp/k0.json" kernels)" ] && ok \
    || bad "--kernels ref: JSON names '$(jget "$tmp/k1.json" kernels)', auto '$(jget "$tmp/k0.json" kernels)'"
[ "$(jget "$tmp/k0.json" generated_ids)" = "$(jget "$tmp/k1.json" generated_ids)" ] && [ -s "$tmp/k0.f32" ] \
    && cmp -s "$tmp/k0.f32" "$tmp/k1.f32" && ok || bad "--kernels ref: other ids or logits than the automatic table"
expect_rc 2 "$BIN" run models/k3-tiny --ids 1,2,3 --gen 2 --kernels sse9
grep -q "unknown (auto, ref, avx2, avx512, avx512-l2)" "$tmp/err" && ok || bad "--kernels sse9: $(cat "$tmp/err")"

echo "t_cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
