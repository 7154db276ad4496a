#!/usr/bin/env python3
"""tests/server/slow_check.py - slow and many clients against `moestream serve`
(used by tests/t_slow.sh; standard library only, raw sockets).

  slow_check.py slowloris HOST PORT N DEADLINE   N connections that send one header
      byte about every second (one in ten: whole headers of a POST, then one body byte
      a second), spread over the source addresses 127.0.0.10..19 (a
      connection that is cut is opened again at once, as an attacker would), while
      /health is probed from 127.0.0.1 every 0.2 s for 2 x DEADLINE + 2 s. Checks:
      every probe gets 200 within 2 s; every trickling connection is closed by the
      server between DEADLINE - 0.5 s and DEADLINE + 2.5 s after it opened.
  slow_check.py per_ip HOST PORT LIMIT      LIMIT + 8 idle connections from 127.0.0.20:
      the ones past LIMIT are closed at once, the first LIMIT are not; /health from
      another address is answered.
  slow_check.py burst HOST PORT N MODEL     N chat requests sent at the same moment (each
      on its own connection, from 127.0.0.30..39): every one gets a response; 200s and,
      for the rest, 429 / 503 with Retry-After and an OpenAI error object; none dropped.
  slow_check.py keepalive HOST PORT DEADLINE   a kept-alive connection idle for longer
      than DEADLINE is still served; its next request, trickled, is cut DEADLINE after
      its first byte.
  slow_check.py dupkey HOST PORT MODEL      a body with a repeated key: 400
      invalid_request_error naming the key (also one nested a level down).

Each check prints "ok: ..." or "FAIL: ..."; the last line is "NAME: N passed, N failed".
"""
import json
import select
import socket
import sys
import threading
import time

passed = 0
failed = 0


def check(cond, what, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok:", what)
    else:
        failed += 1
        print("FAIL:", what, detail)


def connect(host, port, src=None, timeout=5.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    if src:
        s.bind((src, 0))
    s.connect((host, port))
    return s


def read_response(s, timeout):
    """(status, headers dict lower-case, body bytes) of one response, or (None, err, b'')."""
    s.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                return None, "EOF before the headers (%d bytes)" % len(data), b""
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        n = int(hdrs.get("content-length", "-1"))
        while n >= 0 and len(body) < n:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
        return status, hdrs, body
    except (socket.timeout, OSError) as e:
        return None, "%s after %d bytes" % (type(e).__name__, len(data)), b""


def request(host, port, method, path, body=None, src=None, timeout=10.0):
    s = connect(host, port, src, timeout)
    try:
        req = "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % (method, path)
        data = b""
        if body is not None:
            data = body.encode() if isinstance(body, str) else body
            req += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
        s.sendall(req.encode() + b"\r\n" + data)
        return read_response(s, timeout)
    finally:
        s.close()


def is_error_object(body, typ=None):
    try:
        e = json.loads(body)["error"]
        return all(k in e for k in ("message", "type", "param", "code")) and (typ is None or e["type"] == typ)
    except Exception:
        return False


# ---- slowloris -----------------------------------------------------------------------

HEADER = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4096
POST_HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: 100000\r\n\r\n")


class Trickler(threading.Thread):
    """One attacker connection, re-opened whenever the server closes it: it
    trickles its headers, or (body=True) sends whole headers and trickles the body."""

    def __init__(self, host, port, src, until, body=False):
        super().__init__(daemon=True)
        self.host, self.port, self.src, self.until, self.body = host, port, src, until, body
        self.lifetimes = []          # seconds from connect to the server's close, unanswered
        self.answered = 0            # connections the server answered (a spare one's 503) and closed
        self.open_fail = 0

    def run(self):
        while time.monotonic() < self.until:
            try:
                s = connect(self.host, self.port, self.src, 3.0)
            except OSError:
                self.open_fail += 1
                time.sleep(0.2)
                continue
            t0 = time.monotonic()
            closed = answered = False
            i = 0
            if self.body:
                try:
                    s.sendall(POST_HEAD)
                except OSError:
                    pass
            while time.monotonic() < self.until:
                try:
                    s.send(HEADER[i:i + 1])
                    i = (i + 1) % len(HEADER)
                    r, _, _ = select.select([s], [], [], 1.0)
                    if r and not s.recv(4096, socket.MSG_PEEK):
                        closed = True
                    elif r:
                        s.recv(4096)       # an answer (503 on a spare connection): it closes next
                        answered = True
                except OSError:
                    closed = True
                if closed:
                    if answered:
                        self.answered += 1
                        time.sleep(0.1)
                    else:
                        self.lifetimes.append(time.monotonic() - t0)
                    break
            s.close()


def slowloris(host, port, n, deadline):
    run_for = 2 * deadline + 2.0
    until = time.monotonic() + run_for + 1.0
    ts = [Trickler(host, port, "127.0.0.%d" % (10 + i % 10), until, body=i % 10 == 9) for i in range(n)]
    for t in ts:
        t.start()
    time.sleep(0.5)
    probes, slow_probes, worst = 0, [], 0.0
    end = time.monotonic() + run_for
    while time.monotonic() < end:
        t0 = time.monotonic()
        st, h, body = request(host, port, "GET", "/health", src="127.0.0.1", timeout=2.0)
        dt = time.monotonic() - t0
        worst = max(worst, dt)
        probes += 1
        if st != 200:
            slow_probes.append((round(time.monotonic() - end + run_for, 2), st, h if st is None else body[:80]))
        time.sleep(0.2)
    for t in ts:
        t.join(timeout=5)
    print("  %d /health probes during the slowloris, slowest %.3f s" % (probes, worst))
    check(probes >= 5 and not slow_probes, "every /health probe answered 200 within 2 s while %d connections trickle" % n,
          slow_probes[:5])
    lives = [x for t in ts for x in t.lifetimes]
    print("  %d trickling connections cut by the server; lifetimes %.2f..%.2f s; %d answered (spare); %d failed to open" %
          (len(lives), min(lives) if lives else -1, max(lives) if lives else -1, sum(t.answered for t in ts),
           sum(t.open_fail for t in ts)))
    check(len(lives) >= n, "at least %d trickling connections were cut by the server" % n, len(lives))
    bad = [x for x in lives if x < deadline - 0.5 or x > deadline + 2.5]
    check(lives and not bad, "each closed %.1f..%.1f s after it opened (the deadline is total, not idle)" %
          (deadline - 0.5, deadline + 2.5), sorted(bad)[:10])


# ---- keep-alive -------------------------------------------------------------------------

def keepalive(host, port, deadline):
    one = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    s = connect(host, port, "127.0.0.40", 5.0)
    s.sendall(one)
    st, _, _ = read_response(s, 5.0)
    time.sleep(deadline + 1.0)             # idle longer than the deadline: --idle-timeout's business
    s.sendall(one)
    st2, h2, _ = read_response(s, 5.0)
    check(st == 200 and st2 == 200, "a kept-alive connection idle for longer than the deadline is served again",
          (st, st2, h2))
    t0 = time.monotonic()                  # the next request trickles: cut a deadline after its first byte
    gone = None
    for i in range(int(deadline * 4) + 20):
        try:
            s.send(b"GET /health HTTP/1.1\r\nX-Slow: "[i:i + 1] or b"a")
            r, _, _ = select.select([s], [], [], 0.5)
            if r and not s.recv(4096):
                gone = time.monotonic() - t0
                break
        except OSError:
            gone = time.monotonic() - t0
            break
    s.close()
    check(gone is not None and deadline - 0.5 <= gone <= deadline + 2.0,
          "its next request, trickled, is cut about the deadline after its first byte", gone)


# ---- per-address limit -----------------------------------------------------------------

def per_ip(host, port, limit):
    socks = []
    for _ in range(limit + 8):
        try:
            socks.append(connect(host, port, "127.0.0.20", 3.0))
        except OSError:
            socks.append(None)
    time.sleep(0.5)
    closed = []
    for s in socks:
        if s is None:
            closed.append(True)
            continue
        r, _, _ = select.select([s], [], [], 0)
        try:
            closed.append(bool(r) and not s.recv(1, socket.MSG_PEEK))
        except OSError:
            closed.append(True)
    check(not any(closed[:limit]), "the first %d connections of one address stay open" % limit, closed[:limit])
    check(all(closed[limit:]), "connections past --max-conn-per-ip %d are closed at once" % limit, closed[limit:])
    st, _, body = request(host, port, "GET", "/health", src="127.0.0.21", timeout=2.0)
    check(st == 200, "another address is still served", (st, body[:100]))
    for s in socks:
        if s:
            s.close()


# ---- burst -------------------------------------------------------------------------------

def burst(host, port, n, model):
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "burst"}],
                       "max_tokens": 16, "ignore_eos": True, "temperature": 0})
    res = [None] * n
    go = threading.Event()

    def one(i):
        try:
            s = connect(host, port, "127.0.0.%d" % (30 + i % 10), timeout=60.0)
        except OSError as e:
            res[i] = (None, "connect: %s" % e, b"")
            return
        go.wait()
        try:
            data = body.encode()
            s.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Content-Length: %d\r\n\r\n" % len(data)).encode() + data)
            res[i] = read_response(s, 60.0)
        except OSError as e:
            res[i] = (None, "send: %s" % e, b"")
        finally:
            s.close()

    ts = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in ts:
        t.start()
    time.sleep(1.0)
    go.set()
    for t in ts:
        t.join(timeout=90)
    counts = {}
    for r in res:
        counts[r[0] if r else None] = counts.get(r[0] if r else None, 0) + 1
    print("  %d simultaneous requests: %s" % (n, ", ".join("%s x %d" % (k, v) for k, v in sorted(counts.items(), key=str))))
    dropped = [r[1] if r else "no result" for r in res if not r or r[0] is None]
    check(not dropped, "every one of %d simultaneous requests got a response" % n, dropped[:5])
    ok200 = [r for r in res if r and r[0] == 200]
    busy = [r for r in res if r and r[0] in (429, 503)]
    check(ok200 and busy, "some are served (200) and some refused as busy (429/503)", counts)
    check(len(ok200) + len(busy) == n, "no other status", counts)
    ra = [r for r in busy if not (r[1].get("retry-after", "").isdigit() and int(r[1]["retry-after"]) >= 1)]
    check(busy and not ra, "every busy answer has Retry-After (seconds)", [r[1] for r in ra[:3]])
    eo = [r for r in busy if not is_error_object(r[2])]
    check(busy and not eo, "every busy answer is an OpenAI error object", [r[2][:100] for r in eo[:3]])


# ---- duplicate keys -------------------------------------------------------------------------

def dupkey(host, port, model):
    m = json.dumps(model)
    cases = [
        ('{"model":%s,"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"max_tokens":3}' % m, "max_tokens"),
        ('{"model":%s,"messages":[{"role":"user","content":"a","content":"b"}],"max_tokens":2}' % m, "content"),
    ]
    for body, key in cases:
        st, h, b = request(host, port, "POST", "/v1/chat/completions", body)
        ok = st == 400 and is_error_object(b, "invalid_request_error") and ("'%s'" % key) in json.loads(b)["error"]["message"]
        check(ok, "duplicate key '%s' refused with 400 naming it" % key, (st, b[:200]))
    body = '{"model":%s,"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"temperature":0}' % m
    st, h, b = request(host, port, "POST", "/v1/chat/completions", body)
    check(st == 200, "the same body without the repeat is served", (st, b[:200]))


def main():
    cmd = sys.argv[1]
    host, port = sys.argv[2], int(sys.argv[3])
    if cmd == "slowloris":
        slowloris(host, port, int(sys.argv[4]), float(sys.argv[5]))
    elif cmd == "per_ip":
        per_ip(host, port, int(sys.argv[4]))
    elif cmd == "burst":
        burst(host, port, int(sys.argv[4]), sys.argv[5])
    elif cmd == "keepalive":
        keepalive(host, port, float(sys.argv[4]))
    elif cmd == "dupkey":
        dupkey(host, port, sys.argv[4])
    print("%s: %d passed, %d failed" % (cmd, passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
