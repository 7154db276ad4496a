#!/usr/bin/env bash
# tests/t_page.sh - the chat page at / of `moestream serve`, in a real headless browser:
# Debian's chromium (scripts/setup.sh installs it) driven by tests/page/page.mjs with
# puppeteer-core pinned in tests/page/package-lock.json (`npm ci` into $MS_BUILD/page-node;
# no browser download: executablePath /usr/bin/chromium). Screenshots go to
# $MS_BUILD/page-test/ (chat.png, chat-4.png) as artifacts.
# Without chromium or npm this test FAILS and says why (it never passes silently).
# Env: MS_BUILD (build), MS_BIN ($MS_BUILD/moestream), CHROMIUM (/usr/bin/chromium).
# Prints "t_page: N passed, N failed" last.
set -u
cd "$(dirname "$0")/.."
BUILD=${MS_BUILD:-build}
BIN=${MS_BIN:-$BUILD/moestream}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
NODE_DIR=$BUILD/page-node
OUT=$BUILD/page-test
KEY=t-page-key-$$
. tests/lib_serve.sh
. tests/lib.sh
[ -x "$BIN" ] || { bad "$BIN not found (make first)"; finish; }
[ -x "$CHROMIUM" ] || { bad "no chromium at $CHROMIUM: install it with scripts/setup.sh (Debian package chromium)"; finish; }
command -v node >/dev/null && command -v npm >/dev/null || { bad "node/npm not found"; finish; }

mkdir -p "$NODE_DIR" || { bad "cannot create $NODE_DIR"; finish; }
if ! cmp -s tests/page/package-lock.json "$NODE_DIR/package-lock.json" || [ ! -d "$NODE_DIR/node_modules/puppeteer-core" ]; then
    cp tests/page/package.json tests/page/package-lock.json "$NODE_DIR/" || { bad "cannot copy the lock file"; finish; }
    if ! (cd "$NODE_DIR" && PUPPETEER_SKIP_DOWNLOAD=1 timeout 300 npm ci --no-audit --no-fund --loglevel=error >npm.log 2>&1); then
        tail -n 5 "$NODE_DIR/npm.log"
        rm -f "$NODE_DIR/package-lock.json"
        bad "npm ci failed (registry unreachable?)"; finish
    fi
fi

serve_start p models/k3-tiny --api-key "$KEY" --ram 256M
U=$(cat "$tmp/url.p")
[ -n "$U" ] || { tail -n 5 "$tmp/srv.p.log"; bad "the server did not start"; finish; }
rm -rf "$OUT" && mkdir -p "$OUT"
out=$(timeout 240 node tests/page/page.mjs "$NODE_DIR" "$U" "$KEY" k3-tiny "$CHROMIUM" "$OUT" 2>&1)
line=$(printf '%s\n' "$out" | grep -E '^page: [0-9]+ passed, [0-9]+ failed$' | tail -n 1)
if [ -z "$line" ]; then printf '%s\n' "$out" | tail -n 20; bad "page.mjs printed no result line"
else
    printf '%s\n' "$out" | grep '^FAIL' | head -n 30
    pass=$((pass + $(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')))
    fail=$((fail + $(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+')))
fi
[ -s "$OUT/chat.png" ] && pass=$((pass + 1)) || bad "no screenshot $OUT/chat.png"
rm -rf "$OUT/profile"
grep -E 'AddressSanitizer|LeakSanitizer|runtime error' "$tmp/srv.p.log" && bad "sanitizer report in the server's log" || pass=$((pass + 1))
finish
