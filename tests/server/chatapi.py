"""tests/server/chatapi.py - what the Python checks of the chat API share.

Owns: the pass / fail tally every check prints as "NAME: N passed, N failed",
  and one POST to /chat/completions with the status and the reply (parsed, or
  raw bytes when streamed).
Does not: start servers (tests/lib_serve.sh) or know a model.
"""
import json
import sys
import urllib.error
import urllib.request


class Tally:
    def __init__(self):
        self.passed = self.failed = 0

    def ok(self, cond, what):
        """Count one check; print it when it fails. Returns cond."""
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL:", what)
        return cond

    def finish(self, name):
        print(f"{name}: {self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)


def post_chat(url, body, timeout=300):
    """(status, reply) for body POSTed to url/chat/completions: the parsed JSON,
    or the raw bytes of a streamed reply."""
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status = r.read(), r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    if body.get("stream"):
        return status, raw
    return status, json.loads(raw)


def fold_stream(raw):
    """A streamed chat reply (SSE bytes) folded: (finish_reason, reasoning, content,
    calls [{name, arguments}] in index order, usage)."""
    finish, reasoning, content, calls, usage = None, "", "", {}, None
    for line in raw.decode().split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        d = json.loads(line[6:])
        if d.get("usage"):
            usage = d["usage"]
        for c in d.get("choices", []):
            delta = c.get("delta", {})
            reasoning += delta.get("reasoning_content") or ""
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                e = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
                fn = tc.get("function", {})
                e["name"] += fn.get("name") or ""
                e["arguments"] += fn.get("arguments") or ""
            finish = c.get("finish_reason") or finish
    return finish, reasoning, content, [calls[k] for k in sorted(calls)], usage
