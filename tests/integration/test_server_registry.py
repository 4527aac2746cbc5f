"""pic-engine serve registers itself in a real redis-server (DESIGN §4.2):
the pic:eng:{id} hash with its TTL, the pic:engines set; Redis stopped → the
engine goes on serving; Redis back → registration recovers; clean shutdown
deletes the hash.  (Segment add/evict/resync and frozen-Redis detection are
covered in tests/unit/test_registry.c against a real redis-server too.)"""
import json
import os
import signal

import openai
import pytest

from tests import harness
from tests.support.redis import redis_cmd  # noqa: F401

TINY = os.path.join(harness.ROOT, "tests", "fixtures", "models", "tiny-qwen35")

pytestmark = pytest.mark.skipif(not os.path.isdir(TINY), reason="fixture models missing")


def engine_hash(port, eid):
    flat = redis_cmd(port, "HGETALL", f"pic:eng:{eid}") or []
    return dict(zip(flat[0::2], flat[1::2]))


def status(eng):
    return json.loads(harness.http("GET", eng.url + "/status")[2])


def start_engine(procs, rds, name="e1"):
    return procs.engine(model=TINY, name=name, extra=(
        "--threads", "1", "--batch", "3", "--redis", f"127.0.0.1:{rds.port}",
        "--heartbeat-ms", "100", "--registry-ttl", "2"))


def chat_ok(eng):
    c = openai.OpenAI(base_url=eng.url + "/v1", api_key="none", max_retries=0, timeout=30)
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                  max_tokens=4, temperature=0)
    return r.choices[0].finish_reason in ("stop", "length")


def test_engine_registers_hash_and_discovery(procs):
    rds = procs.redis()
    eng = start_engine(procs, rds)
    harness.wait_for(lambda: engine_hash(rds.port, "e1").get("addr"), what="registration")
    h = engine_hash(rds.port, "e1")
    st = status(eng)
    assert h["addr"] == f"127.0.0.1:{eng.port}"
    assert h["capacity"] == "3"
    assert h["model"] == st["model"]["fingerprint"]
    assert h["version"] == st["version"]
    assert float(h["load"]) == 0.0
    assert 1 <= redis_cmd(rds.port, "TTL", "pic:eng:e1") <= 2
    assert "e1" in redis_cmd(rds.port, "SMEMBERS", "pic:engines")
    assert st["registry"]["connected"] is True
    harness.wait_for(lambda: status(eng)["registry"]["heartbeats_ok"] >= 3, what="heartbeats")
    # a clean shutdown says goodbye
    eng.stop()
    assert redis_cmd(rds.port, "EXISTS", "pic:eng:e1") == 0


def test_serving_survives_redis_outage_and_registration_recovers(procs):
    rds = procs.redis()
    port = rds.port
    eng = start_engine(procs, rds)
    harness.wait_for(lambda: status(eng)["registry"]["connected"], what="connected")
    rds.stop(signal.SIGKILL)
    harness.wait_for(lambda: not status(eng)["registry"]["connected"], what="noticed")
    for _ in range(3):
        assert chat_ok(eng)
    st = status(eng)
    assert st["registry"]["disconnects"] >= 1 and st["http"]["errors"] == 0
    rds2 = procs.redis(name="redis2", port=port)
    want = f"127.0.0.1:{eng.port}"
    harness.wait_for(lambda: engine_hash(rds2.port, "e1").get("addr") == want,
                     what="re-registration", timeout=15)
    assert "e1" in redis_cmd(port, "SMEMBERS", "pic:engines")
    assert status(eng)["registry"]["connected"] is True
    assert chat_ok(eng)


def test_engine_started_before_redis(procs):
    port = harness.free_port()

    class Late:
        pass
    late = Late()
    late.port = port
    eng = start_engine(procs, late)
    assert chat_ok(eng)
    st = status(eng)["registry"]
    assert st["connected"] is False and st["connect_failures"] >= 1
    rds = procs.redis(port=port)
    harness.wait_for(lambda: engine_hash(rds.port, "e1").get("addr"),
                     what="late registration", timeout=15)


def test_engine_expires_when_killed(procs):
    """No goodbye from a killed engine: the TTL removes it."""
    rds = procs.redis()
    eng = start_engine(procs, rds)
    harness.wait_for(lambda: engine_hash(rds.port, "e1").get("addr"), what="registration")
    eng.kill()
    harness.wait_for(lambda: redis_cmd(rds.port, "EXISTS", "pic:eng:e1") == 0, what="expiry",
                     timeout=6)
