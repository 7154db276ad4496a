#!/bin/bash
# tests/fuzz/cpu_limit.sh - run a command until it ends or has used SECONDS of CPU time.
#
# Usage: bash tests/fuzz/cpu_limit.sh SECONDS command [args...]
# Idea: libFuzzer's -max_total_time limits wall time, which says little on a
#   shared machine; this reads the command's user + system time from
#   /proc/PID/stat every 5 s and sends SIGINT once it reaches SECONDS
#   (libFuzzer then prints its final stats and exits 72). Exit status: the
#   command's, but 0 when it stopped because of this limit. SECONDS <= 0: no limit.
# Does not: count the CPU time of the command's children (libFuzzer runs in one
#   process); stop the command more precisely than the 5 s poll.
limit=$1; shift
[ "$limit" -gt 0 ] || exec "$@"
"$@" &
pid=$!
trap 'kill -INT $pid 2>/dev/null' INT TERM
hz=$(getconf CLK_TCK)
stopped=0
while kill -0 $pid 2>/dev/null; do
    sleep 5
    { read -r -a f < /proc/$pid/stat; } 2>/dev/null || break
    # fields 14 and 15 (utime, stime); field 2 (comm) holds no spaces for a binary path
    if [ $(( (${f[13]} + ${f[14]}) / hz )) -ge "$limit" ] && [ $stopped -eq 0 ]; then
        echo "cpu_limit: $limit CPU-seconds used, stopping" >&2
        kill -INT $pid; stopped=1
    fi
done
wait $pid; rc=$?
[ $stopped -eq 1 ] && [ $rc -eq 72 ] && rc=0
exit $rc
