#!/usr/bin/env python3
"""tests/server/http_check.py - HTTP-level checks of `moestream serve` (run by tests/t_http.sh).

Usage: http_check.py BASE_URL API_KEY MODEL ALLOWED_ORIGIN RAM_BYTES STREAMS
(STREAMS 1: the budget streams the trunk, so /metrics must count trunk bytes read)

CORS (preflight without a key, headers on every route for an allowed origin, none for
another), keep-alive (two GETs and a GET after a POST on one TCP connection), the
/v1/embeddings 404, and /metrics parsed and cross-checked against the requests made here.
Prints "http_check: N passed, N failed" last."""
import http.client
import json
import re
import sys
import urllib.parse

base, key, model, origin, ram = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
streams = sys.argv[6] == "1"
u = urllib.parse.urlparse(base)
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def conn():
    return http.client.HTTPConnection(u.hostname, u.port, timeout=60)


def call(c, method, path, body=None, headers=None, auth=True):
    h = dict(headers or {})
    if auth:
        h["Authorization"] = "Bearer " + key
    if body is not None:
        h["Content-Type"] = "application/json"
        body = json.dumps(body)
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    return r, r.read()


# ---- keep-alive: one socket carries several requests -----------------------------------
c = conn()
r1, _ = call(c, "GET", "/v1/models")
sock = c.sock
r2, _ = call(c, "GET", "/health", auth=False)
check(r1.status == 200 and r2.status == 200, "GET /v1/models, /health: %d %d" % (r1.status, r2.status))
check((r1.getheader("Connection") or "").lower() != "close", "GET forced Connection: close")
check(c.sock is sock and sock is not None, "the second GET did not reuse the connection")
chat = {"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6, "temperature": 0}
r3, b3 = call(c, "POST", "/v1/chat/completions", chat)
r4, _ = call(c, "GET", "/v1/models")
check(r3.status == 200 and r4.status == 200 and c.sock is sock, "POST then GET on one connection")
usage = [json.loads(b3)["usage"]]
# the follow-up (sent below with an Origin) reuses the kept session: cached tokens
chat2 = dict(chat, messages=chat["messages"] + [json.loads(b3)["choices"][0]["message"],
                                                {"role": "user", "content": "And then?"}])

# ---- CORS ----------------------------------------------------------------------------
pre = {"Origin": origin, "Access-Control-Request-Method": "POST",
       "Access-Control-Request-Headers": "authorization, content-type"}
r, b = call(c, "OPTIONS", "/v1/chat/completions", headers=pre, auth=False)
check(r.status == 204, "preflight status %d (no key needed)" % r.status)
check(r.getheader("Access-Control-Allow-Origin") == origin, "preflight Allow-Origin")
check("POST" in (r.getheader("Access-Control-Allow-Methods") or ""), "preflight Allow-Methods")
check("authorization" in (r.getheader("Access-Control-Allow-Headers") or "").lower(), "preflight Allow-Headers")
check((r.getheader("Access-Control-Max-Age") or "0").isdigit() and int(r.getheader("Access-Control-Max-Age")) > 0,
      "preflight Max-Age")
r, b = call(c, "OPTIONS", "/v1/models", headers=dict(pre, Origin="http://evil.example"), auth=False)
check(r.status == 204 and r.getheader("Access-Control-Allow-Origin") is None, "preflight of another origin got CORS headers")
for method, path, body, auth, want in [("GET", "/v1/models", None, True, 200), ("GET", "/health", None, False, 200),
                                       ("GET", "/v1/models", None, False, 401), ("POST", "/v1/chat/completions", chat2, True, 200),
                                       ("GET", "/metrics", None, True, 200), ("GET", "/nope", None, True, 404)]:
    r, b = call(c, method, path, body, {"Origin": origin}, auth=auth)
    check(r.status == want, "%s %s with Origin: %d, want %d" % (method, path, r.status, want))
    check(r.getheader("Access-Control-Allow-Origin") == origin and "Origin" in (r.getheader("Vary") or ""),
          "%s %s: no Access-Control-Allow-Origin / Vary" % (method, path))
    if path == "/v1/chat/completions":
        usage.append(json.loads(b)["usage"])
r, b = call(c, "GET", "/v1/models", headers={"Origin": "http://evil.example"})
check(r.status == 200 and r.getheader("Access-Control-Allow-Origin") is None, "another origin got Allow-Origin")
# a streamed reply carries the header too
sc = dict(chat, stream=True, stream_options={"include_usage": True})
r, b = call(c, "POST", "/v1/chat/completions", sc, {"Origin": origin})
check(r.status == 200 and r.getheader("Access-Control-Allow-Origin") == origin, "stream without Allow-Origin")
for line in b.decode().splitlines():
    if line.startswith("data: {") and '"usage"' in line:
        ev = json.loads(line[6:])
        if ev.get("usage") and not ev.get("choices"):
            usage.append(ev["usage"])

# ---- /v1/embeddings ------------------------------------------------------------------
c2 = conn()
r, b = call(c2, "POST", "/v1/embeddings", {"model": model, "input": "x"})
e = json.loads(b).get("error", {})
check(r.status == 404 and "not an embedding model" in e.get("message", "") and e.get("type") and "code" in e,
      "embeddings: %d %s" % (r.status, b[:200]))
c2 = conn()
r, b = call(c2, "POST", "/v1/embeddings", {"model": model, "input": "x"}, auth=False)
check(r.status == 401, "embeddings without a key: %d" % r.status)

# ---- /metrics --------------------------------------------------------------------------
c3 = conn()
r, _ = call(c3, "GET", "/metrics", auth=False)
check(r.status == 401, "/metrics without a key (no --metrics-public): %d" % r.status)
r, b = call(c3, "GET", "/metrics")
check(r.status == 200 and (r.getheader("Content-Type") or "").startswith("text/plain"), "/metrics content type")
text = b.decode()
samples, types = {}, {}
for line in text.splitlines():
    if line.startswith("# TYPE "):
        _, _, name, typ = line.split(" ", 3)
        types[name] = typ
        continue
    if not line or line.startswith("#"):
        continue
    m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)', line)
    check(m is not None, "unparsable line %r" % line)
    if m:
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        samples[(m.group(1), tuple(sorted(labels.items())))] = float(m.group(3))
for (name, _) in samples:
    fam = re.sub(r'_(bucket|sum|count)$', '', name)
    check(name in types or fam in types, "no # TYPE for " + name)


def val(name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


req = lambda route, status: val("moestream_requests_total", route=route, status=str(status)) or 0
# the chat requests above: 2 plain + 1 streamed, all 200; models: 3 x 200 (the first two GETs
# and the POST-then-GET) + 1 CORS + 1 other origin; 401 once; embeddings 404 once (+1 401)
check(req("chat", 200) == 3, "chat 200 count %s" % req("chat", 200))
check(req("models", 200) == 4, "models 200 count %s" % req("models", 200))
check(req("models", 401) == 1, "models 401 count %s" % req("models", 401))
check(req("preflight", 204) == 2, "preflight count %s" % req("preflight", 204))
check(req("embeddings", 404) == 1 and req("embeddings", 401) == 1, "embeddings counts")
check(req("metrics", 401) == 1 and req("metrics", 200) == 1, "metrics counts (this scrape's is counted after it)")
check(req("other", 404) == 1, "unknown path count")
n_prompt = sum(x["prompt_tokens"] for x in usage)
n_out = sum(x["completion_tokens"] for x in usage)
n_cached = sum(x["prompt_tokens_details"]["cached_tokens"] for x in usage)
check(len(usage) == 3, "usage objects %d" % len(usage))
check(val("moestream_generations_total") == 3, "generations %s" % val("moestream_generations_total"))
check(val("moestream_prompt_tokens_total") == n_prompt, "prompt tokens %s vs %d" % (val("moestream_prompt_tokens_total"), n_prompt))
check(val("moestream_completion_tokens_total") == n_out, "completion tokens %s vs %d" % (val("moestream_completion_tokens_total"), n_out))
check(val("moestream_cached_tokens_total") == n_cached and n_cached > 0,
      "cached tokens %s vs %d (the same prompt again reuses the session)" % (val("moestream_cached_tokens_total"), n_cached))
for h, count in [("moestream_time_to_first_token_seconds", 3), ("moestream_token_latency_seconds", n_out - 3)]:
    bks = sorted(((float("inf") if dict(l)["le"] == "+Inf" else float(dict(l)["le"])), v)
                 for (n, l), v in samples.items() if n == h + "_bucket")
    check(len(bks) >= 5 and all(a[1] <= b[1] for a, b in zip(bks, bks[1:])), h + " buckets not cumulative")
    check(bks and bks[-1][1] == val(h + "_count") == count, "%s count %s, want %d" % (h, val(h + "_count"), count))
    check((val(h + "_sum") or 0) > 0, h + " sum")
check(val("moestream_disk_read_bytes_total", part="trunk") is not None and
      val("moestream_disk_read_bytes_total", part="experts") is not None, "disk bytes by part")
check(not streams or (val("moestream_disk_read_bytes_total", part="trunk") or 0) > 0,
      "no trunk bytes read while the trunk streams")
check(val("moestream_expert_cache_hits_total") is not None and
      val("moestream_expert_cache_hits_total") <= val("moestream_expert_requests_total"), "expert hits")
check(val("moestream_queue_depth") == 0, "queue depth %s" % val("moestream_queue_depth"))
check(val("moestream_ram_budget_bytes") == ram, "budget %s, want %d" % (val("moestream_ram_budget_bytes"), ram))
check((val("moestream_peak_rss_bytes") or 0) > 1 << 20, "peak RSS")
print("http_check: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
