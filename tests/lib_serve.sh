# tests/lib_serve.sh - sourced by the server tests (t_parallel.sh, t_mspec.sh, t_pack.sh, ...):
# a scratch directory and start `moestream serve` on a free port.
#
# Sourcing it makes $tmp (a fresh directory) and an EXIT trap that kills every
# server started here and removes $tmp.
# serve_start NAME MODEL_DIR [ARGS...]: runs "$BIN serve MODEL_DIR --port 0 --quiet
#   ARGS" in the background (its PID appended to $PIDS, for the cleanup),
#   waits up to 30 s for 'listening on', and writes its base URL to $tmp/url.NAME
#   (empty when it did not start; its log is $tmp/srv.NAME.log).
# serve_summary FILE: a completion or chat answer (whole, or a stream's events)
#   as one canonical line: text, finish reason, completion and prompt tokens
#   (whole answers), log-probabilities; "unparsable: ..." otherwise.
tmp=$(mktemp -d)
PIDS=
serve_cleanup() { for p in $PIDS; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap serve_cleanup EXIT
serve_start() {
    local name=$1 model=$2
    shift 2
    "$BIN" serve "$model" --port 0 --quiet "$@" > "$tmp/srv.$name.log" 2>&1 &
    PIDS="$PIDS $!"
    disown $!
    for _ in $(seq 300); do grep -qs 'listening on' "$tmp/srv.$name.log" && break; sleep 0.1; done
    grep -o 'listening on http://[^/]*' "$tmp/srv.$name.log" | head -n 1 | sed 's|.*listening on ||' > "$tmp/url.$name"
}
serve_summary() {
    /usr/bin/python3 - "$1" <<'EOF'
import json, sys
raw = open(sys.argv[1]).read()
try:
    if raw.lstrip().startswith("data:"):
        text, fin, lps, usage = "", None, [], None
        for line in raw.splitlines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            d = json.loads(line[6:])
            for ch in d.get("choices", []):
                text += (ch.get("delta") or {}).get("content") or ""
                fin = ch.get("finish_reason") or fin
                lps += ((ch.get("logprobs") or {}).get("content")) or []
            usage = d.get("usage") or usage
        print(repr(text), fin, json.dumps(lps, sort_keys=True))
    else:
        d = json.loads(raw)
        ch = d["choices"][0]
        text = ch["message"]["content"] if "message" in ch else ch["text"]
        print(repr(text), ch["finish_reason"], d["usage"]["completion_tokens"], d["usage"]["prompt_tokens"],
              json.dumps(ch.get("logprobs"), sort_keys=True))
except Exception as e:
    print("unparsable:", e, raw[:200])
EOF
}
