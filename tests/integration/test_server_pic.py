"""The engine serving from its public pool (standalone mode and the gateway's
plan): repeated and shifted documents are served from cached entries and
counted in usage.prompt_tokens_details.cached_tokens (streamed usage too);
entries are registered in Redis under keys that xxh128sum reproduces, and
evictions unregister them; a plan is used when it fits the prompt, refused
when malformed, ignored when it does not fit.  Random weights: the text is
noise; reuse, accounting and exactness of the prefix path are what is
checked."""
import json
import os
import struct
import subprocess

import openai
import pytest

from tests import harness
from tests.support.pool import DOC_A, DOC_B, SYSTEM, engine_segments, plan_for  # noqa: F401

TINY = os.path.join(harness.ROOT, "tests", "fixtures", "models", "tiny-qwen35")
MARK = "<|pic_sep|>"

pytestmark = pytest.mark.skipif(not os.path.isdir(TINY), reason="fixture models missing")


def engine(procs, extra=(), **kw):
    # the public pool's own behaviour: PIC only (exact first, the default, is
    # test_exact_first.py; a later --cache-mode in extra wins)
    return procs.engine(model=TINY, extra=("--threads", "1", "--cache-mode", "pic")
                        + tuple(extra), **kw)


def client(eng):
    return openai.OpenAI(base_url=eng.url + "/v1", api_key="none", max_retries=0, timeout=60)


def status(eng):
    return json.loads(harness.http("GET", eng.url + "/status")[2])


def ask(c, docs, q, system=SYSTEM, **kw):
    msgs = [{"role": "system", "content": system},
            {"role": "user", "content": MARK.join(docs + [q])}]
    return c.chat.completions.create(model="m", messages=msgs, max_tokens=6, temperature=0,
                                     **kw)


def test_repeated_and_shifted_documents_are_cached(procs):
    eng = engine(procs)
    c = client(eng)
    first = ask(c, [DOC_A, DOC_B], "question one?")
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    again = ask(c, [DOC_A, DOC_B], "question two?")
    cached = again.usage.prompt_tokens_details.cached_tokens
    # the system prefix and both documents (interiors) come from the pool
    assert cached > 0.8 * (again.usage.prompt_tokens - 20), again.usage
    # B now first, A second, another system prompt: only shifted documents hit
    shifted = ask(c, [DOC_B, DOC_A], "question three?", system="Be brief.")
    sc = shifted.usage.prompt_tokens_details.cached_tokens
    assert 0 < sc < cached
    st = status(eng)
    assert st["cache"]["cached_tokens"] == cached + sc
    assert st["cache"]["segment_hits"] >= 5 and st["cache"]["segment_built"] >= 3
    assert st["scheduler"]["cached_tokens"] == cached + sc
    # streamed usage reports cached tokens too
    chunks = list(ask(c, [DOC_A, DOC_B], "question four?", stream=True,
                      stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == cached


def test_prefix_mode_equals_full_recompute(procs):
    """The exact-prefix path (whole fp32 entry at position 0, the rest
    recomputed) gives the full-recompute answer."""
    full = client(engine(procs, extra=("--cache-mode", "full"), name="full"))
    pre = client(engine(procs, extra=("--cache-mode", "prefix"), name="prefix"))
    for q in ("what is a state?", "and a seam?"):
        want = ask(full, [DOC_A], q).choices[0].message.content
        for _ in range(2):          # cold, then from the pool
            r = ask(pre, [DOC_A], q)
            assert r.choices[0].message.content == want
    assert r.usage.prompt_tokens_details.cached_tokens > 0


def key_of(fp, scope, data, tmpdir):
    """DESIGN 4.1 key by xxh128sum over the framed bytes (independent oracle)."""
    path = os.path.join(tmpdir, "framed.bin")
    with open(path, "wb") as f:
        f.write(struct.pack("<I", len(fp)) + fp + struct.pack("<I", len(scope)) + scope + data)
    out = subprocess.run(["xxh128sum", path], capture_output=True, text=True, check=True)
    return out.stdout.split()[0]


def test_entries_are_registered_and_evictions_unregistered(procs, logdir):
    rds = procs.redis()
    eng = engine(procs, name="e1", extra=(
        "--redis", f"127.0.0.1:{rds.port}", "--heartbeat-ms", "100",
        "--cache-bytes", "400000"))
    c = client(eng)
    harness.wait_for(lambda: status(eng)["registry"]["connected"], what="registered")
    ask(c, [DOC_A], "q1")
    fp = status(eng)["model"]["fingerprint"].encode()
    want = key_of(fp, b"", DOC_A.encode(), logdir)
    harness.wait_for(lambda: want in engine_segments(rds.port, "e1"), what="doc key in redis")
    # fill the small pool: older entries are evicted and leave the index
    for i in range(6):
        ask(c, [f"Filler {i}: " + DOC_B], f"q{i}", system=f"System number {i}. " * 8)
    st = status(eng)
    assert st["cache"]["evictions"] > 0
    harness.wait_for(lambda: len(engine_segments(rds.port, "e1"))
                     == status(eng)["cache"]["entries"], what="index follows the pool")
    assert want not in engine_segments(rds.port, "e1")
    # evictions reach the registry through the loop's post queue
    harness.wait_for(lambda: (lambda s: s["registry"]["segment_evicts"]
                              == s["cache"]["evictions"])(status(eng)),
                     what="every eviction unregistered")


def test_gateway_plan_is_used_refused_or_ignored(procs):
    eng = engine(procs, name="e1")
    docs = [DOC_A, DOC_B]
    body = {"model": "m", "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": MARK.join(docs + ["q?"])}]}
    body["pic"] = plan_for(eng, docs, "q?")
    code, _, raw = harness.http("POST", eng.url + "/v1/chat/completions", body)
    assert code == 200, raw
    code, _, raw = harness.http("POST", eng.url + "/v1/chat/completions", body)
    usage = json.loads(raw)["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] > 200, usage
    st = status(eng)["cache"]
    assert st["plans_received"] == 2 and st["plans_ignored"] == 0
    # a plan that does not cover this prompt is ignored (served without caching)
    bad = dict(body, pic=plan_for(eng, docs, "a different question?"))
    assert harness.http("POST", eng.url + "/v1/chat/completions", bad)[0] == 200
    assert status(eng)["cache"]["plans_ignored"] == 1
    # a malformed plan is a 400 naming the field
    worse = dict(body, pic={"version": 1, "segments": "nope"})
    code, _, raw = harness.http("POST", eng.url + "/v1/chat/completions", worse)
    assert code == 400 and json.loads(raw)["error"]["param"] == "pic"
