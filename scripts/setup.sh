#!/usr/bin/env bash
# scripts/setup.sh - installs the Debian packages moestream needs, if missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
# The list and the reason for each package are in docs/DEPENDENCIES.md.
set -eu
PKGS="build-essential clang libclang-rt-14-dev libjansson-dev libpcre2-dev liburing-dev libmicrohttpd-dev libxxhash-dev libedit-dev libopenmpi-dev openmpi-bin python3-numpy curl iproute2 tmux chromium"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -x /usr/bin/python3 ] || missing="$missing python3"
[ -z "$missing" ] && exit 0
cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" = 0 ]; then
    echo "setup: installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || true
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
    echo "setup: missing Debian packages:$missing"
    echo "setup: run as root: apt-get update && $cmd"
    exit 1
fi
