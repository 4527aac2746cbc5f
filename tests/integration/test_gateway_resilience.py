"""The gateway when peers misbehave: redis as the cluster index (hits learned
from it, killed and restarted mid-run, hanging), engines killed mid-run and
coming back, reload keeping the shm zone, SSE passed through unbuffered, an
engine that dies mid-stream or never answers."""
import json
import os
import socket
import threading
import time

import pytest

from tests import harness
from tests.support.gateway import client, doc, engines, gw_conf, planned_lines, xxh128_key
from tests.support.gateway import post, prompt, status  # noqa: F401
from tests.support.redis import redis_raw as redis_cmd


# --- redis ------------------------------------------------------------------------


def test_redis_registration_makes_hits_and_routes_to_the_holder(procs, logdir):
    red = procs.redis()
    fa = procs._add(harness.FakeBackend("capture", name="fa"))
    fb = procs._add(harness.FakeBackend("capture", name="fb"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fa.port}", f"127.0.0.1:{fb.port}"],
                              http=f"pic_redis 127.0.0.1:{red.port};", cdc="512 1024 4096"))
    harness.wait_for(lambda: status(ngx)["redis"]["up"], timeout=5, what="redis up")
    harness.wait_for(lambda: all(e["id"] for e in status(ngx)["engines"]), timeout=5,
                     what="engine ids from probes")
    # engine fb registers a document it holds (as engines do on insert)
    e = doc(51, 400)
    key = xxh128_key(b"m", b"", e.encode(), logdir)
    assert redis_cmd(red.port, "SADD", "pic:seg:" + key, "fb").startswith(b":1")
    code, _, _ = post(ngx, {"model": "m", "prompt": prompt("a short header", e, "the query")})
    assert code == 200
    line, = planned_lines(ngx, 1)
    assert line["combine"] == f"127.0.0.1:{fb.port}", "the holder combines"
    plan = json.loads(fb.bodies[-1])["pic"]
    seg = [s for s in plan["segments"] if s["key"] == key]
    assert seg and seg[0]["holders"] == [f"127.0.0.1:{fb.port}"]
    st = status(ngx)
    assert st["redis"]["lookups"] == 1 and st["redis"]["hits"] == 1
    assert st["requests"]["fallback"] == 0
    assert int(line["hit"]) == len(e)
    # what redis said is now in the shm index: no lookup for it again
    assert redis_cmd(red.port, "DEL", "pic:seg:" + key).startswith(b":1")
    code, _, _ = post(ngx, {"model": "m", "prompt": prompt("another header", e, "q2")})
    line2 = planned_lines(ngx, 2)[1]
    assert line2["combine"] == f"127.0.0.1:{fb.port}" and int(line2["hit"]) == len(e)


def test_engine_announcements_keep_the_index_warm(procs, logdir):
    red = procs.redis()
    fa = procs._add(harness.FakeBackend("capture", name="fa"))
    fb = procs._add(harness.FakeBackend("capture", name="fb"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fa.port}", f"127.0.0.1:{fb.port}"],
                              http=f"pic_redis 127.0.0.1:{red.port};", cdc="512 1024 4096"))
    harness.wait_for(lambda: all(e["id"] for e in status(ngx)["engines"]), timeout=5,
                     what="engine ids from probes")
    harness.wait_for(lambda: int(redis_cmd(red.port, "PUBSUB", "NUMSUB", "pic:events")
                                 .split(b"\r\n")[-2][1:]) == 1, timeout=5,
                     what="the zone's subscriber")
    e = doc(57, 400)
    key = xxh128_key(b"m", b"", e.encode(), logdir)
    # fb announces the entry (no pic:seg set at all): the shm index learns it
    redis_cmd(red.port, "PUBLISH", "pic:events", f"add fb {key}")
    harness.wait_for(lambda: status(ngx)["zone"]["index_entries"] >= 1, timeout=5,
                     what="announcement applied")
    assert post(ngx, {"model": "m", "prompt": prompt("head one", e, "q1")})[0] == 200
    line, = planned_lines(ngx, 1)
    assert line["combine"] == f"127.0.0.1:{fb.port}" and int(line["hit"]) == len(e)
    assert status(ngx)["redis"]["lookups"] <= 1, "the hit came from shm, not a lookup"
    # both engines now hold it (fb announced, the combine computed); both evict
    applied = status(ngx)["redis"]["events"]
    redis_cmd(red.port, "PUBLISH", "pic:events", f"evict fb {key}")
    redis_cmd(red.port, "PUBLISH", "pic:events", f"evict fa {key}")
    harness.wait_for(lambda: status(ngx)["redis"]["events"] == applied + 2, timeout=5,
                     what="both evictions applied")
    assert post(ngx, {"model": "m", "prompt": prompt("head two", e, "q2")})[0] == 200
    assert int(planned_lines(ngx, 2)[1]["hit"]) == 0, "evicted everywhere: a miss"


@pytest.mark.allow_log(r"redis .* failed")
def test_redis_killed_and_restarted_mid_run_no_client_errors(procs):
    red = procs.redis()
    e1, e2 = engines(procs)
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{e1.port}", f"127.0.0.1:{e2.port}"],
                              http=f"pic_redis 127.0.0.1:{red.port};"))
    harness.wait_for(lambda: status(ngx)["redis"]["up_workers"] == 2, timeout=5,
                     what="both workers connected")
    c = client(ngx)

    def ask(i):
        r = c.chat.completions.create(model="tiny", max_tokens=1, messages=[
            {"role": "system", "content": doc(60 + (i % 3 if i < 10 else i), 300)},
            {"role": "user", "content": f"q{i}"}])
        assert r.choices

    for i in range(3):
        ask(i)
    assert status(ngx)["redis"]["lookups"] >= 1
    red.kill()
    for i in range(3, 7):
        ask(i)
    st = status(ngx)
    assert not st["redis"]["up"] and st["requests"]["fallback"] >= 4
    assert st["requests"]["errors"] == 0
    red2 = procs.redis(name="redis2", port=red.port)
    harness.wait_for(lambda: status(ngx)["redis"]["up_workers"] == 2, timeout=10,
                     what="reconnected")
    before = status(ngx)["redis"]["lookups"]
    for i in range(7, 10):
        ask(i + 10)
    st = status(ngx)
    assert st["requests"]["errors"] == 0 and st["requests"]["planned"] == 10
    assert st["redis"]["lookups"] > before, "lookups resume after the restart"
    assert red2.ping()


class HangingRedis:
    """Accepts connections, answers each one's first command (the gateway's
    handshake PING), then reads commands and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    @staticmethod
    def _serve(c):
        data = b""
        try:
            while b"PING\r\n" not in data:
                chunk = c.recv(4096)
                if not chunk:
                    return
                data += chunk
            c.sendall(b"+PONG\r\n")
            while c.recv(4096):
                pass
        except OSError:
            pass

    def close(self):
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.mark.allow_log(r"answered no lookup")
def test_redis_that_never_answers_costs_a_few_timeouts(procs):
    hang = HangingRedis()
    try:
        fake = procs._add(harness.FakeBackend("capture"))
        ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"],
                                  http=f"pic_redis 127.0.0.1:{hang.port};",
                                  loc="pic_redis_timeout 150ms;"))
        # both workers connected: a worker still connecting skips its lookup
        # (no timeout paid), and the first request may land on it
        harness.wait_for(lambda: status(ngx)["redis"]["up_workers"] == 2, timeout=5,
                         what="both workers connected")
        took = []
        for i in range(8):
            t = time.time()
            code, _, _ = post(ngx, {"model": "m", "prompt": prompt(doc(70 + i, 300),
                                                                   doc(90 + i, 300), "q")})
            took.append(time.time() - t)
            assert code == 200
        st = status(ngx)
        assert st["requests"]["fallback"] == 8 and st["requests"]["errors"] == 0
        assert json.loads(fake.bodies[-1])["pic"]["segments"]
        # each worker pays at most 3 timeouts, then pauses its lookups
        assert 3 <= st["redis"]["timeouts"] <= 6, st["redis"]
        assert sorted(took)[0] < 0.14, took
        assert all(0.14 <= t < 2.0 for t in took[:1]), took
    finally:
        hang.close()


def test_redis_over_a_unix_socket(procs, logdir):
    sock = os.path.join(logdir, "redis.sock")
    red = procs._add(harness.Proc("redis-unix", [
        harness.REDIS_BIN, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "777",
        "--save", "",
        "--appendonly", "no", "--dir", logdir], logdir))
    harness.wait_for(lambda: os.path.exists(sock), what="redis socket", proc=red)
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"], http=f"pic_redis unix:{sock};"))
    harness.wait_for(lambda: status(ngx)["redis"]["up_workers"] == 2, timeout=5,
                     what="connected over the socket")
    assert post(ngx, {"model": "m", "prompt": prompt(doc(55, 400), "q")})[0] == 200
    assert status(ngx)["redis"]["lookups"] == 1


def test_redis_name_is_refused_at_configuration(logdir):
    conf = f"""
load_module {harness.MODULE_SO};
error_log stderr;
events {{}}
http {{ pic_zone pic 1m; pic_redis redis.example.com:6379; server {{ listen 127.0.0.1:1; }} }}
"""
    rc, out = harness.nginx_test_config(conf, logdir)
    assert rc != 0 and "names are not resolved" in out


# --- engines ----------------------------------------------------------------------


def test_cache_affinity_yields_to_load(procs):
    """The holder of a document combines, until its load exceeds the least
    loaded engine's by more than pic_imbalance."""
    fa = procs._add(harness.FakeBackend("capture", name="fa"))
    fb = procs._add(harness.FakeBackend("capture", name="fb"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fa.port}", f"127.0.0.1:{fb.port}"],
                              http="pic_health_check interval=100ms;",
                              loc="pic_imbalance 4;"))
    big = doc(120, 1500)

    def combine(i):
        assert post(ngx, {"model": "m", "prompt": prompt(f"header {i}", big, f"q{i}")})[0] == 200
        return planned_lines(ngx, i + 1)[i]["combine"]

    first = combine(0)
    holder, other = (fa, fb) if first.endswith(f":{fa.port}") else (fb, fa)
    assert combine(1) == first, "the holder combines"
    holder.load = 4
    harness.wait_for(lambda: [e["load"] for e in status(ngx)["engines"]
                              if e["id"] == holder.name] == [4], timeout=5, what="load seen")
    assert combine(2) == first, "load 4 is within pic_imbalance 4"
    holder.load = 5
    harness.wait_for(lambda: [e["load"] for e in status(ngx)["engines"]
                              if e["id"] == holder.name] == [5], timeout=5, what="load seen")
    assert combine(3) == f"127.0.0.1:{other.port}", "an overloaded holder is skipped"
    plan = json.loads(other.bodies[-1])["pic"]
    assert any(s["holders"] == [first] for s in plan["segments"]), \
        "the plan still names the holder, for the combine node to pull from"


# --- engines (failures) -----------------------------------------------------------


@pytest.mark.allow_log(r"connect\(\) failed|upstream prematurely closed|recv\(\) failed"
                       r"|unhealthy|upstream server temporarily disabled")
def test_engine_killed_mid_run_traffic_moves(procs):
    e1, e2 = engines(procs)
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{e1.port}", f"127.0.0.1:{e2.port}"],
                              http="pic_health_check interval=200ms timeout=500ms;"))
    c = client(ngx)
    docs = [doc(80 + i, 300) for i in range(6)]
    for d in docs:
        c.chat.completions.create(model="tiny", max_tokens=1, messages=[
            {"role": "system", "content": d}, {"role": "user", "content": "q"}])
    e1.kill()

    def again(d):
        r = c.chat.completions.create(model="tiny", max_tokens=1, messages=[
            {"role": "system", "content": d}, {"role": "user", "content": "again"}])
        assert r.choices, "no client error: nginx retries the next engine"

    # right after the kill: plans may still name e1; nginx retries the next engine
    for d in docs[:2]:
        again(d)
    harness.wait_for(lambda: [e["healthy"] for e in status(ngx)["engines"]
                              if e["name"].endswith(f":{e1.port}")] == [False],
                     timeout=5, what="e1 marked unhealthy")
    for d in docs[2:]:
        again(d)
    lines = planned_lines(ngx, 12)
    assert all(line["status"] == "200" for line in lines)
    assert all(line["combine"] == f"127.0.0.1:{e2.port}" for line in lines[8:]), \
        "once marked down, no plan picks the dead engine"


@pytest.mark.allow_log(r"connect\(\) failed|unhealthy|upstream server temporarily disabled")
def test_engine_back_after_probe_rejoins(procs):
    port = harness.free_port()
    fa = procs._add(harness.FakeBackend("capture", name="fa", port=port))
    fb = procs._add(harness.FakeBackend("capture", name="fb"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{port}", f"127.0.0.1:{fb.port}"],
                              http="pic_health_check interval=100ms timeout=300ms;"))

    def healthy():
        return {e["name"]: e["healthy"] for e in status(ngx)["engines"]}

    harness.wait_for(lambda: all(healthy().values()), timeout=5, what="both healthy")
    fa.stop()
    harness.wait_for(lambda: not healthy()[f"127.0.0.1:{port}"], timeout=5, what="fa down")
    for i in range(4):
        assert post(ngx, {"model": "m", "prompt": prompt(doc(90 + i, 300), "q")})[0] == 200
    assert fb.bodies and len(fb.bodies) == 4
    procs._add(harness.FakeBackend("capture", name="fa", port=port))
    harness.wait_for(lambda: all(healthy().values()), timeout=5, what="fa back")


@pytest.mark.allow_log(r"unhealthy")
def test_probe_thresholds_keep_a_flapping_engine_in_and_a_returning_one_out(procs):
    """probe_fails=3: one or two failed probes in a row leave an engine in
    rotation, the third takes it out; probe_passes=2: back only after two good
    probes in a row.  Read from /status snapshots, each one consistent."""
    fa = procs._add(harness.FakeBackend("capture", name="fa"))
    fb = procs._add(harness.FakeBackend("capture", name="fb"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fa.port}", f"127.0.0.1:{fb.port}"],
                              http="pic_health_check interval=150ms timeout=1s "
                                   "probe_fails=3 probe_passes=2;"))
    name = f"127.0.0.1:{fa.port}"

    def snap():
        e, = [e for e in status(ngx)["engines"] if e["name"] == name]
        return e

    harness.wait_for(lambda: snap()["probe_passes"] >= 1, timeout=5, what="fa probed")
    seen = []

    def record(pred):
        e = snap()
        seen.append((e["healthy"], e["probe_fails"], e["probe_passes"]))
        return pred(e)

    fa.status_code = 503
    harness.wait_for(lambda: record(lambda e: not e["healthy"]), timeout=5,
                     what="fa out")
    out = [s for s in seen if s[1] < 3]
    assert all(h for h, _, _ in out), seen
    assert {1, 2} <= {f for _, f, _ in out}, "the first two failures were seen: %r" % seen
    assert all(f >= 3 for h, f, _ in seen if not h), seen
    assert post(ngx, {"model": "m", "prompt": prompt(doc(5, 300), "q")})[0] == 200
    assert not fa.bodies, "an engine taken out by probes gets no request"

    seen.clear()
    fa.status_code = 200
    harness.wait_for(lambda: record(lambda e: e["healthy"]), timeout=5,
                     what="fa back")
    assert any(not h and p == 1 for h, _, p in seen), "one good probe is not enough: %r" % seen
    assert all(p >= 2 for h, _, p in seen if h), seen


@pytest.mark.allow_log(r"upstream timed out|unhealthy")
def test_probe_passes_count_from_the_outage(procs):
    """An engine a failed request took out while its probes kept passing comes
    back after probe_passes good probes counted from the outage, not at once."""
    fa = procs._add(harness.FakeBackend("hang", name="fa"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fa.port}"],
                              http="pic_health_check interval=150ms timeout=1s probe_passes=2;",
                              loc="proxy_read_timeout 300ms;"))

    def snap():
        e, = status(ngx)["engines"]
        return e

    harness.wait_for(lambda: snap()["probe_passes"] >= 3, timeout=5, what="three good probes")
    assert post(ngx, {"model": "m", "prompt": "hello"})[0] == 504
    fa.mode = "capture"
    seen = []

    def back():
        e = snap()
        seen.append((e["healthy"], e["probe_passes"]))
        return e["healthy"]

    harness.wait_for(back, timeout=5, what="fa back")
    assert not seen[0][0], "the failed request took it out: %r" % seen
    assert all(p < 2 for h, p in seen if not h) and (False, 1) in seen, seen


def test_prometheus_groups_each_engine_metric_once(procs):
    """The gateway's per-engine metrics: one family each (HELP, TYPE, a line per
    engine), as Prometheus' text format requires, with the counts of /status."""
    fa = procs._add(harness.FakeBackend("capture", name="fa"))
    fb = procs._add(harness.FakeBackend("capture", name="fb"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fa.port}", f"127.0.0.1:{fb.port}"],
                              http="pic_health_check interval=100ms timeout=1s;"))
    harness.wait_for(lambda: all(e["probes"] for e in status(ngx)["engines"]), timeout=5,
                     what="both probed")
    assert post(ngx, {"model": "m", "prompt": prompt(doc(7, 300), "q")})[0] == 200
    harness.wait_for(lambda: sum(e["requests"] for e in status(ngx)["engines"]) == 1,
                     timeout=5, what="the request counted")
    text = harness.http("GET", ngx.url + "/pic/status?format=prometheus")[2].decode()
    fams = harness.prometheus_families(text)
    names = {f"127.0.0.1:{fa.port}", f"127.0.0.1:{fb.port}"}
    for fam in ("pic_engine_healthy", "pic_engine_inflight", "pic_engine_requests",
                "pic_engine_failures", "pic_engine_probes", "pic_engine_probe_failures"):
        samples = [s for s in fams[fam].samples if not s.name.endswith("_created")]
        assert {s.labels["engine"] for s in samples} == names and len(samples) == 2, fam
    assert sum(s.value for s in fams["pic_engine_requests"].samples) == 1
    assert {s.labels["id"] for s in fams["pic_engine_healthy"].samples} == {"fa", "fb"}
    assert all(s.value == 1 for s in fams["pic_engine_healthy"].samples)
    assert fams["pic_requests"].type == "counter"


# --- reload, streaming ------------------------------------------------------------


def test_reload_keeps_the_index(procs):
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]))
    body = {"model": "m", "prompt": prompt("header one", doc(100, 600), "q1")}
    assert post(ngx, body)[0] == 200
    entries = status(ngx)["zone"]["index_entries"]
    assert entries > 0
    ngx.reload()
    harness.wait_for(lambda: status(ngx)["zone"]["generation"] == 1, timeout=10, what="reload")
    body["prompt"] = prompt("header two", doc(100, 600), "q2")
    assert post(ngx, body)[0] == 200
    st = status(ngx)
    assert st["zone"]["index_entries"] >= entries
    assert st["requests"]["planned"] == 2
    line = planned_lines(ngx, 2)[1]
    assert int(line["hit"]) >= 500, "the document learned before the reload hits"


def raw_stream(ngx, body):
    """Send a request on a raw socket; yield (seconds since sent, bytes) as
    they arrive, until the server closes."""
    req = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", ngx.port), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
              % (len(req), req))
    t0 = time.time()
    with s:
        while True:
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                return
            if not data:
                return
            yield time.time() - t0, data


def test_sse_passes_through_unbuffered(procs):
    fake = procs._add(harness.FakeBackend("slow", delay=0.3, chunks=5))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]))
    got, t_first = b"", None
    for t, data in raw_stream(ngx, {"model": "m", "stream": True,
                                    "messages": [{"role": "user", "content": "x"}]}):
        got += data
        if t_first is None and b"data: " in got:
            t_first = t
    t_all = t
    assert b" 200 " in got.split(b"\r\n")[0]
    # the backend sleeps 0.3 s after each of 5 chunks: unbuffered, the first
    # one arrives at least four sleeps before the end
    assert t_all - t_first >= 1.0, (t_first, t_all)
    assert b"data: [DONE]" in got
    harness.wait_for(lambda: status(ngx)["ttft_ms"]["count"] == 1, timeout=5,
                     what="ttft recorded at the end of the request")


@pytest.mark.allow_log(r"upstream prematurely closed|recv\(\) failed|unhealthy")
def test_engine_dying_mid_stream_does_not_hurt_the_gateway(procs):
    fake = procs._add(harness.FakeBackend("die"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]))
    got = b"".join(d for _, d in raw_stream(ngx, {
        "model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}))
    assert b" 200 " in got.split(b"\r\n")[0]
    assert b"tok0" in got and b"[DONE]" not in got
    assert not got.endswith(b"0\r\n\r\n"), "the client sees the stream cut, not a clean end"
    # the gateway still serves
    fake.mode = "capture"
    assert post(ngx, {"model": "m", "prompt": "hello there"})[0] == 200


@pytest.mark.allow_log(r"upstream timed out|unhealthy")
def test_engine_that_never_answers_is_504_json(procs):
    fake = procs._add(harness.FakeBackend("hang"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"], loc="proxy_read_timeout 500ms;"))
    code, hdrs, body = post(ngx, {"model": "m", "prompt": "hello"})
    assert code == 504 and hdrs["Content-Type"] == "application/json"
    assert json.loads(body)["error"]["code"] == "timeout"
    harness.wait_for(lambda: status(ngx)["requests"]["upstream_errors"] == 1, timeout=5,
                     what="upstream error counted")
    st = status(ngx)
    assert st["requests"]["upstream_errors"] == 1
