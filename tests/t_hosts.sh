#!/usr/bin/env bash
# tests/t_hosts.sh - the pipeline across hosts: every stage on its own network
# stack, the stages talking TCP.
#
# Each test host is a network namespace (its own interfaces, address and host
# name) on a bridge; mpirun starts its daemons there the way it starts them on
# other machines, through its rsh agent (here a script that runs the command
# with `ip netns exec HOST` instead of ssh), and the stages use Open MPI's TCP
# transport (--mca btl self,tcp) over the bridge. Each host also has its own
# mount namespace, in which $tmp/model shows that host's copy of the
# checkpoint (the bundled model unless a case gives it another), as when
# every machine keeps its own copy under the same path. Still shared: the
# CPUs and the rest of the file system.
#
#  1. build/tests/test_pipe --dump (every logits row and id of the t_pipeline
#     scenario) on 3 hosts resident and on 2 hosts at the smallest plan with
#     speculation: byte-identical to one process; each host's namespace held
#     a stage;
#  2. `run` with a text prompt on 2 hosts: the ids of one process, also with
#     a budget per host (mpirun's ':' syntax: host 1 at its floor, streaming,
#     host 2 without a budget, holding its layers);
#  3. `serve` on 2 hosts: the completion of a one-process server (asked from
#     inside host 1's namespace), and SIGTERM to mpirun ends every process on
#     both hosts;
#  4. a stage's process killed (-9) on host 2 while serving: mpirun ends the
#     job (non-zero exit) within 60 s and nothing is left on either host;
#  5. host 2 lost during a request (every process in its namespace killed,
#     Open MPI's daemon with them): the request fails instead of hanging,
#     mpirun ends non-zero, nothing is left on host 1;
#  6. every host with its own copy of the checkpoint: an identical copy on
#     host 2 gives the ids of one process (without its checksum sidecar too,
#     with a warning that the weights go unchecked); another checkpoint there is
#     refused at start, and so is a copy whose weights differ under the same
#     tensor table (one byte of a layer of stage 1 changed, its checksum
#     sidecar rebuilt to match), which would otherwise run and give other
#     ids (checked with --no-verify).
# Needs root and network namespaces. Without them it says why and counts
# nothing, unless MS_REQUIRE_NETNS=1 (.ci/run sets it), which makes that one
# failure.
# Prints "t_hosts: N passed, N failed" as its last line.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
TD=${MS_TESTDATA:-$BUILD/testdata}
PY=/usr/bin/python3
. tests/lib_serve.sh
. tests/lib.sh
. tests/lib_mpi.sh
mpi_or_skip t_hosts

# names unique to this run (interface names have at most 15 characters)
rid=$(( $$ % 100000 ))
br=msb$rid
ns() { echo "mst$rid-h$1"; }
net="10.$(( 200 + rid % 50 )).$(( rid / 50 % 250 ))"
hosts_down() {
    for h in 1 2 3; do
        for p in $(ip netns pids "$(ns $h)" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
        ip netns del "$(ns $h)" 2>/dev/null
    done
    ip link del "$br" 2>/dev/null
}
trap 'hosts_down; serve_cleanup' EXIT
hosts_up() {
    ip link add "$br" type bridge && ip addr add "$net.1/24" dev "$br" && ip link set "$br" up || return 1
    for h in 1 2 3; do
        ip netns add "$(ns $h)" &&
        ip link add "msv$rid-$h" type veth peer name eth0 netns "$(ns $h)" &&
        ip link set "msv$rid-$h" master "$br" && ip link set "msv$rid-$h" up &&
        ip netns exec "$(ns $h)" ip addr add "$net.$((h + 1))/24" dev eth0 &&
        ip netns exec "$(ns $h)" ip link set eth0 up &&
        ip netns exec "$(ns $h)" ip link set lo up || return 1
    done
}
why=
if [ "$(id -u)" != 0 ]; then why="not root"
elif ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then why="ip (iproute2) or unshare missing"
elif ! command -v mpirun >/dev/null; then why="mpirun missing (make setup installs openmpi-bin)"
elif ! hosts_up > "$tmp/up.log" 2>&1; then why="network namespaces refused: $(head -c 200 "$tmp/up.log")"
fi
if [ -n "$why" ]; then
    echo "t_hosts: cannot make test hosts here ($why)"
    [ "${MS_REQUIRE_NETNS:-0}" = 1 ] && bad "MS_REQUIRE_NETNS=1 and no test hosts"
    echo "t_hosts: $pass passed, $fail failed"
    [ $fail -eq 0 ]; exit
fi

# mpirun's rsh agent: "agent HOST COMMAND..." runs COMMAND on HOST, as ssh would (through a
# shell), in HOST's namespaces with HOST as its host name and $tmp/model showing $tmp/fs/HOST
# (when a case made one) or the bundled model
mkdir -p "$tmp/model" "$tmp/fs"
cat > "$tmp/agent" <<EOF
#!/bin/sh
h=\$1; shift
exec ip netns exec "mst$rid-\$h" unshare --uts --mount --propagation private /bin/sh -c \\
    "hostname \$h; if [ -d $tmp/fs/\$h ]; then d=$tmp/fs/\$h; else d=$PWD/models/k3-tiny; fi; mount --bind \\\$d $tmp/model; \$*"
EOF
chmod +x "$tmp/agent"
MPI="mpirun --mca plm_rsh_agent $tmp/agent --mca btl self,tcp --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24"
on() { ip netns exec "$(ns "$1")" "${@:2}"; }             # a command on test host N
left() { ip netns pids "$(ns "$1")" 2>/dev/null | wc -l; }   # processes on test host N

# 1. every logits row over TCP, one process against 3 and 2 hosts
seen=0
watch_hosts() {   # while $1 runs: did every host of $2..$n hold a test_pipe process?
    local pid=$1; shift
    local h all=0
    while kill -0 "$pid" 2>/dev/null; do
        all=1
        for h in "$@"; do
            ip netns pids "$(ns $h)" 2>/dev/null | xargs -r ps -o comm= -p 2>/dev/null | grep -q test_pipe || all=0
        done
        [ $all = 1 ] && { seen=1; return; }
        sleep 0.05
    done
}
dump_case() {   # hosts (1,2,3), options...
    local hl=$1; shift
    local n=$(( $(echo "$hl" | tr -cd , | wc -c) + 1 ))
    local tag="hosts h$hl [$*]"
    "$BUILD/tests/test_pipe" --dump models/k3-tiny "$tmp/one" "$@" > "$tmp/one.log" 2>&1 \
        || { bad "$tag: one process: $(tail -n 3 "$tmp/one.log")"; return; }
    seen=0
    timeout 300 $MPI --host "$(echo "h$hl" | sed 's/,/,h/g')" -np "$n" \
        "$BUILD/tests/test_pipe" --dump models/k3-tiny "$tmp/many" "$@" > "$tmp/many.log" 2>&1 &
    local mp=$!
    watch_hosts $mp $(echo "$hl" | tr , ' ')
    wait $mp
    local rc=$?
    [ $rc -eq 0 ] && grep -q 'test_pipe: [0-9]* passed, 0 failed' "$tmp/many.log" && ok \
        || { bad "$tag: exit $rc: $(grep -v '^ \|^$' "$tmp/many.log" | tail -n 4)"; return; }
    [ -s "$tmp/one" ] && cmp -s "$tmp/one" "$tmp/many" && ok || bad "$tag: logits differ from one process"
    [ $seen = 1 ] && ok || bad "$tag: not every host held a stage"
}
dump_case 1,2,3
dump_case 1,2 --speculate 4 --ram min --chunk 5

# 2. run, text in and out
P="And the LORD spake unto Moses, saying"
ids() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['generated_ids'])" "$1" 2>/dev/null; }
"$BIN" run models/k3-tiny --prompt "$P" --max-tokens 16 --ram min --json --quiet > "$tmp/r1.json" 2>&1
timeout 120 $MPI --host h1,h2 -np 2 "$BIN" run models/k3-tiny --prompt "$P" --max-tokens 16 --ram min \
    --json --quiet > "$tmp/r2.json" 2> "$tmp/r2.err"
a=$(ids "$tmp/r1.json"); b=$(ids "$tmp/r2.json")
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "run: ids '$a' one process, '$b' on two hosts ($(head -c 300 "$tmp/r2.err"))"
# each host with its own options (mpirun's ':' syntax): its own budget
timeout 120 $MPI -np 1 --host h1 "$BIN" run models/k3-tiny --prompt "$P" --max-tokens 16 --ram min --json --quiet \
    : -np 1 --host h2 "$BIN" run models/k3-tiny --prompt "$P" --max-tokens 16 --json --quiet \
    > "$tmp/r3.json" 2> "$tmp/r3.err"
c=$(ids "$tmp/r3.json")
[ -n "$a" ] && [ "$a" = "$c" ] && ok || bad "run, a budget per host: ids '$c', want '$a' ($(head -c 300 "$tmp/r3.err"))"
$PY - "$tmp/r3.json" <<'EOF' && ok || bad "run, a budget per host: stage bytes $(grep -o '"stage_bytes_read[^]]*' "$tmp/r3.json")"
import json, sys
st = json.load(open(sys.argv[1]))["stats"]["stage_bytes_read"]
assert len(st) == 2 and st[0]["trunk"] > 0 and st[1]["trunk"] == 0, st   # host 1 streams, host 2 holds its layers
EOF

# 3-5. serve on two hosts
body='{"model":"k3-tiny","prompt":"And the LORD spake","max_tokens":12,"temperature":0}'
text() {   # URL [host]: the completion's text, asked from the host's namespace (or here)
    local c=(curl -s --max-time 120 "$1/v1/completions" -H 'Content-Type: application/json' -d "$body")
    if [ -n "${2:-}" ]; then on "$2" "${c[@]}"; else "${c[@]}"; fi \
        | $PY -c "import json,sys; print(json.load(sys.stdin)['choices'][0]['text'])" 2>/dev/null
}
serve_hosts() {   # log: serve on h1 (stage 0) and h2; sets mpid and url
    $MPI --host h1,h2 -np 2 "$BIN" serve models/k3-tiny --port 0 --quiet > "$1" 2>&1 &
    mpid=$!
    for _ in $(seq 300); do grep -qs 'listening on' "$1" && break; sleep 0.1; done
    url=$(grep -o 'listening on http://[^/]*' "$1" | head -n 1 | sed 's|.*listening on ||')
}
gone() {   # pid, seconds: did it end within them?
    local i
    for i in $(seq $(( $2 * 10 ))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    return 1
}
stage_pid() {   # the moestream process on host N
    ip netns pids "$(ns "$1")" 2>/dev/null | xargs -r ps -o pid=,comm= -p 2>/dev/null | awk '$2 == "moestream" { print $1 }' | head -n 1
}
serve_start one models/k3-tiny
t1=$(text "$(cat "$tmp/url.one")")

serve_hosts "$tmp/srv.a.log"
t2=$(text "$url" 1)
[ -n "$url" ] && [ -n "$t1" ] && [ "$t1" = "$t2" ] && ok \
    || bad "serve: '$t1' one process, '$t2' on two hosts ($(tail -n 3 "$tmp/srv.a.log"))"
[ -n "$(stage_pid 2)" ] && ok || bad "serve: no stage on host 2"
kill -TERM $mpid 2>/dev/null
if gone $mpid 30; then ok; else bad "serve: mpirun did not end on SIGTERM"; kill -KILL $mpid; fi
wait $mpid 2>/dev/null
sleep 0.5
[ "$(left 1)" = 0 ] && [ "$(left 2)" = 0 ] && ok || bad "serve: processes left after SIGTERM: $(left 1) on host 1, $(left 2) on host 2"

# 4. a stage crashes while the server is idle
serve_hosts "$tmp/srv.b.log"
p2=$(stage_pid 2)
[ -n "$url" ] && [ -n "$p2" ] && ok || bad "crash: the server did not start on two hosts ($(tail -n 3 "$tmp/srv.b.log"))"
[ -n "$p2" ] && kill -KILL "$p2"
if gone $mpid 60; then
    wait $mpid; rc=$?
    [ $rc -ne 0 ] && ok || bad "crash: mpirun exited 0 after a stage was killed"
else
    bad "crash: the job still runs 60 s after its stage 1 was killed"; kill -KILL $mpid; wait $mpid 2>/dev/null
fi
sleep 0.5
[ "$(left 1)" = 0 ] && ok || bad "crash: $(left 1) processes left on host 1"

# 5. host 2 lost in the middle of a request: its daemon and its stage killed together
serve_hosts "$tmp/srv.c.log"
[ -n "$url" ] && ok || bad "lost host: the server did not start ($(tail -n 3 "$tmp/srv.c.log"))"
slow='{"model":"k3-tiny","prompt":"And the LORD spake","max_tokens":4000,"temperature":0,"stream":true}'
on 1 curl -s -N --max-time 120 "$url/v1/completions" -H 'Content-Type: application/json' -d "$slow" > "$tmp/slow.out" 2>&1 &
cpid=$!
for _ in $(seq 100); do grep -q '"text"' "$tmp/slow.out" 2>/dev/null && break; sleep 0.1; done
grep -q '"text"' "$tmp/slow.out" && ok || bad "lost host: the request was not under way ($(head -c 200 "$tmp/slow.out"))"
for p in $(ip netns pids "$(ns 2)"); do kill -KILL "$p" 2>/dev/null; done
if gone $mpid 60; then
    wait $mpid; rc=$?
    [ $rc -ne 0 ] && ok || bad "lost host: mpirun exited 0"
else
    bad "lost host: the job still runs 60 s after host 2 went away"; kill -KILL $mpid; wait $mpid 2>/dev/null
fi
if gone $cpid 30; then ok; else bad "lost host: the client still waits 30 s after the job ended"; kill -KILL $cpid; fi
wait $cpid 2>/dev/null
grep -q '\[DONE\]' "$tmp/slow.out" && bad "lost host: the stream ended as if complete" || ok
sleep 0.5
[ "$(left 1)" = 0 ] && ok || bad "lost host: $(left 1) processes left on host 1"

# 6. a copy of the checkpoint per host
two() {   # output file, options...: `run` on hosts 1 and 2 reading $tmp/model
    local out=$1; shift
    timeout 120 $MPI --host h1,h2 -np 2 "$BIN" run "$tmp/model" --prompt "$P" --max-tokens 16 --json --quiet "$@" \
        > "$out" 2> "$out.err"
}
cp -r models/k3-tiny "$tmp/fs/h2"
two "$tmp/c1.json"; rc=$?
c=$(ids "$tmp/c1.json")
[ $rc -eq 0 ] && [ -n "$a" ] && [ "$a" = "$c" ] && ok || bad "own copies: exit $rc, ids '$c', want '$a' ($(head -c 300 "$tmp/c1.json.err"))"
# host 2's copy without a sidecar: it runs, and stage 0 warns that the weights go unchecked
rm "$tmp/fs/h2/moestream.sums"
timeout 120 $MPI --host h1,h2 -np 2 "$BIN" run "$tmp/model" --prompt "$P" --max-tokens 16 --json \
    > "$tmp/c5.json" 2> "$tmp/c5.json.err"; rc=$?
c=$(ids "$tmp/c5.json")
[ $rc -eq 0 ] && [ "$a" = "$c" ] && grep -q "stage 1 has no checksum sidecar and stage 0 has one" "$tmp/c5.json.err" && ok \
    || bad "a copy without sidecar: exit $rc, ids '$c', stderr: $(head -c 300 "$tmp/c5.json.err")"
rm -rf "$tmp/fs/h2"; cp -r "$TD/b" "$tmp/fs/h2"
two "$tmp/c2.json"; rc=$?
[ $rc -ne 0 ] && grep -q 'stage 1 opened another checkpoint' "$tmp/c2.json" "$tmp/c2.json.err" && ok \
    || bad "another checkpoint on host 2: exit $rc: $(grep -v '^-\|^$' "$tmp/c2.json.err" | head -n 3)"
rm -rf "$tmp/fs/h2"; cp -r models/k3-tiny "$tmp/fs/h2"
$PY - "$tmp/fs/h2" <<'EOF' || bad "could not change a weight of layer 7"
import json, os, struct, sys
d = sys.argv[1]
index = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
name = [n for n in index if n.endswith("layers.7.self_attn.o_proj.weight")][0]   # read by every token
path = os.path.join(d, index[name])
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    start = json.loads(f.read(n))[name]["data_offsets"][0]
    f.seek(8 + n + start + 1)            # the high byte of the first BF16 value
    b = f.read(1)[0]
    f.seek(8 + n + start + 1)
    f.write(bytes([b ^ 0x40]))
EOF
"$BIN" verify "$tmp/fs/h2" --write --quiet > "$tmp/v.log" 2>&1 || bad "verify --write on the changed copy: $(tail -n 2 "$tmp/v.log")"
two "$tmp/c3.json"; rc=$?
[ $rc -ne 0 ] && grep -q "stage 1's checkpoint holds other weights" "$tmp/c3.json" "$tmp/c3.json.err" && ok \
    || bad "other weights on host 2: exit $rc: $(grep -v '^-\|^$' "$tmp/c3.json.err" | head -n 3)"
two "$tmp/c4.json" --no-verify; rc=$?
c=$(ids "$tmp/c4.json")
[ $rc -eq 0 ] && [ -n "$c" ] && [ "$c" != "$a" ] && ok || bad "other weights, unchecked: exit $rc, ids '$c' (one process: '$a'): the case proves nothing"

echo "t_hosts: $pass passed, $fail failed"
[ $fail -eq 0 ]
