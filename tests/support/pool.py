"""The engine pool under test without a gateway: plans as the gateway sends them,
engines in PIC mode, a fake peer."""
import copy
import http.server
import json
import os
import threading

import pytest

from tests import harness
from tests.support.gateway import MARK
from tests.support.redis import redis_cmd


SYSTEM = "You are a careful assistant that answers from the documents. " * 6


# documents end in a newline: a segment boundary then falls where the
# tokenizer splits anyway, so per-segment token ids equal whole-text ids
DOC_A = ("Alpha document: caches keep states of segments for reuse later. " * 8)[:-1] + "\n"


DOC_B = ("Bravo document: recurrent layers compose transition operators. " * 8)[:-1] + "\n"


def engine_segments(port, eid):
    keys = redis_cmd(port, "KEYS", "pic:seg:*") or []
    return {k[len("pic:seg:"):] for k in keys
            if redis_cmd(port, "SISMEMBER", k, eid) == 1}


def plan_for(eng, docs, q, system=SYSTEM, fp=None, scope=""):
    """A plan as the gateway would send it for the Qwen3.5 rendering (contents
    stripped, markers removed): prefix, glue, one "pic" segment per document,
    the dynamic tail.  Keys are arbitrary unless fp (the engines' key
    fingerprint) is given: a combine node checks entries by their tokens, but
    a worker's prefill recomputes each key from its text."""
    system = system.strip()
    text = (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n"
            + "".join(docs) + q + "<|im_end|>\n<|im_start|>assistant\n<think>\n")
    raw = text.encode()
    cuts = [len(f"<|im_start|>system\n{system}".encode())]
    pos = len(f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n".encode())
    cuts.append(pos)
    for d in docs:
        pos += len(d.encode())
        cuts.append(pos)
    cuts.append(len(raw))
    # prefix, glue, one "pic" segment per document, the dynamic tail
    kinds = ["prefix", "dynamic"] + ["pic"] * len(docs) + ["dynamic"]
    segs, start = [], 0
    for i, (end, kind) in enumerate(zip(cuts, kinds)):
        key = ("%032x" % (0xabc0 + i) if fp is None or kind == "dynamic"
               else harness.segment_key(fp, scope, raw[start:end]))
        segs.append({"key": key, "offset": start, "bytes": end - start,
                     "tokens": (end - start + 3) // 4, "kind": kind, "holders": [],
                     "worker": None})
        start = end
    return {"version": 1, "id": "p1", "combine": "e1", "scope": scope, "segments": segs}


TINY = os.path.join(harness.ROOT, "tests", "fixtures", "models", "tiny-qwen35")


DOC_C = ("Charlie document: seams are recomputed at every boundary of a splice. " * 8
         )[:-1] + "\n"


DOCS = [DOC_A, DOC_B, DOC_C]


QUESTION = "which document mentions seams?"


KEY_FP = []        # the engines' key fingerprint (same model, seam and dtype for all)


def engine(procs, name, extra=()):
    # peers and plans as such: PIC only (exact first would recompute the
    # fresh entries these tests count; see test_exact_first.py)
    eng = procs.engine(model=TINY, name=name, extra=(
        "--threads", "1", "--peer-timeout-ms", "1500", "--cache-mode", "pic") + tuple(extra))
    if not KEY_FP:
        KEY_FP.append(status(eng)["model"]["fingerprint"])
    return eng


def status(eng):
    return json.loads(harness.http("GET", eng.url + "/status")[2])


def body_with(plan):
    return {"model": "m", "max_tokens": 8, "temperature": 0, "ignore_eos": True,
            "messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": MARK.join(DOCS + [QUESTION])}],
            "pic": plan}


def base_plan():
    """Real keys: a worker recomputes them from the text it is sent."""
    return plan_for(None, DOCS, QUESTION, fp=KEY_FP[0])


def assign(plan, worker=None, holder=None):
    plan = copy.deepcopy(plan)
    for s in plan["segments"]:
        if s["kind"] == "pic":
            s["worker"] = worker
            s["holders"] = [holder] if holder else []
    return plan


def ask(eng, plan):
    code, _, raw = harness.http("POST", eng.url + "/v1/chat/completions", body_with(plan),
                                timeout=60)
    assert code == 200, raw
    doc = json.loads(raw)
    return doc["choices"][0]["message"]["content"], doc["usage"]


@pytest.fixture
def oracle(procs):
    """The answer of the plan computed by one engine alone."""
    alone = engine(procs, "alone")
    text, usage = ask(alone, base_plan())
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    return text


def addr(eng):
    return f"127.0.0.1:{eng.port}"


class FakePeer:
    """An engine impostor on a thread: `handler(req)` writes the answer."""

    def __init__(self, handler):
        outer = self
        self.requests = []

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.requests.append(self.path)
                handler(self)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                self.body = self.rfile.read(n)
                outer.requests.append(self.path)
                handler(self)

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()
