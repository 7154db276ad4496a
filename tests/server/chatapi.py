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
