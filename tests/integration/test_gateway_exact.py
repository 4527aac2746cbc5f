"""Routing for exact first (DESIGN §3.4, §3.5, §6): the gateway
knows which engine holds the longest exact prefix of a request by prefix chain
keys at segment boundaries (chain_i = xxh3_128(chain_{i-1} || key_i), no
tokenizing in nginx), recorded when an engine served a request and shared
through redis (pic:pfx:{chain}); it prefers that engine over PIC hit bytes
(pic_exact_weight) within pic_imbalance of the least load, falls back when the
holder dies, and sends no remote prefill for the segments an exact-first
combine node recomputes anyway (up to the first segment it composes)."""
import http.client
import json
import os
import subprocess
import threading
import time

import openai
import pytest

from tests import harness
from tests.support.gateway import access_lines, doc, gw_conf, planned_lines, xxh128_key
from tests.support.gateway import post, prompt, status
from tests.support.pool import addr
from tests.support.redis import redis_raw as redis_cmd
from tests.support.gateway import fresh, ready  # noqa: F401

TINY = os.path.join(harness.ROOT, "tests", "fixtures", "models", "tiny-qwen35")


def chain_keys(keys, tmpdir):
    """Oracle of the gateway's prefix chain: xxh128sum over the previous
    chain's 16 canonical bytes (zeros first) and the segment key's."""
    out, prev = [], bytes(16)
    path = os.path.join(tmpdir, "chain.bin")
    for k in keys:
        with open(path, "wb") as f:
            f.write(prev + bytes.fromhex(k))
        h = subprocess.run(["xxh128sum", path], capture_output=True, text=True,
                           check=True).stdout.split()[0]
        out.append(h)
        prev = bytes.fromhex(h)
    return out


def fakes(procs, mode="exact"):
    fa = procs._add(harness.FakeBackend("capture", name="fa"))
    fb = procs._add(harness.FakeBackend("capture", name="fb"))
    for f in (fa, fb):
        f.cache_mode = mode
    return fa, fb


def engine_pair(procs, loc=""):
    """(e1, e2, nginx, OpenAI client): redis, two real TINY engines (one thread
    each) and a ready gateway over them; loc: more directives of the pic location."""
    red = procs.redis()
    e1 = procs.engine(name="e1", model=TINY, extra=["--threads", "1"])
    e2 = procs.engine(name="e2", model=TINY, extra=["--threads", "1"])
    ngx = procs.nginx(gw_conf([addr(e1), addr(e2)], http=f"pic_redis 127.0.0.1:{red.port};",
                              loc="pic_redis_timeout 5s; " + loc))
    ready(ngx)
    return e1, e2, ngx, openai.OpenAI(base_url=ngx.url + "/v1", api_key="none", max_retries=0,
                                      timeout=120)


def session(s, turns, sys_text=None, last=None):
    """Agent loop messages of session s after `turns` tool calls; `last`
    replaces the content of the last tool result."""
    msgs = [{"role": "system", "content": sys_text or f"Agent {s}. " + doc(33 + s, 2500)},
            {"role": "user", "content": f"task {s}: " + doc(100 + s, 300)}]
    for t in range(turns):
        cid = f"call_{s}_{t}"
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": "search", "arguments": json.dumps({"q": f"step {t}"})}}]})
        msgs.append({"role": "tool", "tool_call_id": cid,
                     "content": last if last and t == turns - 1
                     else doc(1000 + 17 * s + t, 2000)})
    return msgs


# --- real engines -----------------------------------------------------------------


@pytest.mark.skipif(not os.path.isdir(TINY), reason="fixture models missing")
def test_sessions_stay_on_their_exact_prefix_over_pic_bytes(procs):
    """Three interleaved agent sessions on two real engines: every turn is
    combined where the session's prefix lives, also the turn whose new tool
    result is a document another engine was just given (PIC hit bytes alone
    would send it there: routing.exact_decided counts it); the engines serve
    those turns from their prefix trees."""
    e1, e2, ngx, c = engine_pair(procs)
    n_lines = 0

    def ask(msgs):
        nonlocal n_lines
        r = c.chat.completions.create(model="m", messages=msgs, max_tokens=1, temperature=0)
        n_lines += 1
        return r, planned_lines(ngx, n_lines)[-1]

    home, sid = {}, {}
    followups = 0                       # requests of a session after its first
    for t in range(3):
        for s in range(3):
            if t == 0:
                # a new session per try until session 1 starts on the engine
                # session 0 did not (cold requests spread by rendezvous)
                for k in range(12):
                    sid[s] = 10 * s + k
                    r, line = ask(session(sid[s], t))
                    if s != 1 or line["combine"] != home[0]:
                        break
            elif t == 2:
                # a document the other engine is given first, then this
                # session's next tool result: a bait of PIC bytes, twice (an
                # exact-first engine pools a document on its second sighting,
                # and the gateway records only what the engine says it
                # pooled).  The bait request is all new text (no hit): an
                # exact-first combine recomputes it whole and names no worker
                # (end == segments), so only that engine holds the bait.
                # (With a hit, LPT gives the cold rest to both engines, split
                # by the load the probes last saw: the bait is then held on
                # both, or not, as the workers' redis events come.)
                for k in range(12):
                    bait = fresh(f"bait {s}.{k}", 6000)
                    _, line = ask([{"role": "system",
                                    "content": fresh(f"bait system {s}.{k}", 300)},
                                   {"role": "user", "content": bait},
                                   {"role": "user", "content": bait},
                                   {"role": "user", "content": "ok?"}])
                    assert int(line["hit"]) == 0 and line["end"] == line["segments"], (s, k, line)
                    if line["combine"] != home[s]:
                        break
                assert line["combine"] != home[s], "no bait landed on the other engine"
                decided = status(ngx)["routing"]["exact_decided"]
                r, line = ask(session(sid[s], t, last=bait))
                followups += 1
                assert line["combine"] == home[s], f"session {s} left its engine for a bait"
                assert status(ngx)["routing"]["exact_decided"] == decided + 1, \
                    f"PIC bytes alone would have chosen the other engine: {line}"
                assert int(line["hit"]) > int(line["exact"]) // 4
            else:
                r, line = ask(session(sid[s], t))
                followups += t > 0
            home.setdefault(s, line["combine"])
            assert line["combine"] == home[s], f"session {s} turn {t} left its engine"
            u = r.usage.model_dump()
            if t > 0:
                # the engine serves from its tree what the gateway knew it held
                share = int(line["exact"]) / int(line["prompt"])
                print(f"session {s} turn {t}: {u['pic']}, gateway exact share {share:.3f}")
                assert share > 0.1
                assert u["pic"]["exact_tokens"] >= 0.7 * share * u["prompt_tokens"]
    assert len(set(home.values())) == 2, "the sessions use both engines"
    st = status(ngx)
    assert st["routing"]["exact_routed"] == followups
    assert sum(e["exact_requests"] for e in st["engines"]) == followups
    assert all(e["cache_mode"] == "exact" for e in st["engines"])


@pytest.mark.skipif(not os.path.isdir(TINY), reason="fixture models missing")
def test_second_sighting_goes_where_the_first_was_seen(procs):
    """An exact-first engine pools a document on its second sighting and only
    then names it in X-PIC-Held, so a first sighting makes no holder.  The
    gateway keeps it as a weak hint (never a holder: the second request has no
    hit bytes): the second request with the document goes to the engine that
    saw it, also when its new system prompt alone would send it to the other
    engine (routing.seen_decided), and the third one hits there.  S1 windows
    are off: they too remember where content was combined."""
    e1, e2, ngx, c = engine_pair(procs, loc="pic_s1_fallback off;")
    n_lines = 0

    def ask(system, d, q):
        nonlocal n_lines
        r = c.chat.completions.create(model="m", max_tokens=1, temperature=0, messages=[
            {"role": "system", "content": system}, {"role": "user", "content": d},
            {"role": "user", "content": q}])
        n_lines += 1
        return r, planned_lines(ngx, n_lines)[-1]

    decided = False
    for k in range(16):
        d = fresh(f"seen doc {k}", 4000)
        _, first = ask(fresh(f"seen system a{k}", 300), d, "q1?")
        assert int(first["hit"]) == 0, first
        before = status(ngx)["routing"]
        _, second = ask(fresh(f"seen system b{k}", 300), d, "q2?")
        after = status(ngx)["routing"]
        assert second["combine"] == first["combine"], (k, first, second)
        assert int(second["hit"]) == 0, "a sighting is not a holder"
        assert after["seen_routed"] == before["seen_routed"] + 1
        if after["seen_decided"] > before["seen_decided"]:
            decided = True
            break
    assert decided, "no system prompt alone would have chosen the other engine"
    r, third = ask(fresh(f"seen system c{k}", 300), d, "q3?")
    assert third["combine"] == first["combine"]
    assert int(third["hit"]) >= len(d) // 2, third
    assert r.usage.model_dump()["pic"]["pic_tokens"] > 0


def test_client_documents_are_pooled_after_their_first_sighting(procs):
    """Documents the client delimited with <|pic_sep|>, through the gateway's
    plan: the combine engine recomputes them exactly on their first sighting
    (nothing composed), knows them as client documents from its own render of
    the request (the plan carries no flag) and its keeper pools their entries
    after the request; the second sighting, reordered, goes to that engine
    and composes them as cached tokens (nothing built on its path)."""
    e1, e2, ngx, c = engine_pair(procs)
    system, a, b = fresh("cd system", 300), fresh("cd doc a", 1500), fresh("cd doc b", 1500)

    def ask(docs, q):
        r = c.chat.completions.create(model="m", max_tokens=1, temperature=0, messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": "<|pic_sep|>".join(docs + [q])}])
        return r.usage.model_dump(), planned_lines(ngx, ask.n)[ask.n - 1]
    ask.n = 1

    u1, first = ask([a, b], "q1?")
    assert u1["pic"]["pic_tokens"] == 0, u1
    e = {addr(e1): e1, addr(e2): e2}[first["combine"]]
    d = json.loads(harness.http("GET", e.url + "/status")[2])["prefix"]["deferred_builds"]
    assert d["queued"] >= 2, d

    def built():
        d = json.loads(harness.http("GET", e.url + "/status")[2])["prefix"]["deferred_builds"]
        return d["pending"] == 0 and d["built"] == d["queued"]

    harness.wait_for(built, timeout=60, what="the deferred builds", proc=e)
    ask.n = 2
    u2, second = ask([b, a], "q2?")
    print("first:", first, u1["pic"], "second:", second, u2["pic"])
    assert second["combine"] == first["combine"]
    assert u2["pic"]["pic_tokens"] > 0
    assert (u2["prompt_tokens_details"]["cached_tokens"]
            == u2["pic"]["exact_tokens"] + u2["pic"]["pic_tokens"])


def test_unmarked_documents_behind_labels_are_cached_and_reused(procs):
    """RAG as frameworks send it: ~250-token documents in one user message, no
    markers, each behind a label that changes per request ("Document [j]:", j
    its rank), the gateway sizing segments from the engines (value floor, not
    L*/2).  The first request is recomputed exactly; the combine engine knows
    the labelled parts as documents from its own render and pools them after
    the request; the second, with the documents re-ranked under other labels
    and a new one among them, composes the bodies it saw as cached tokens."""
    from tokenizers import Tokenizer
    red = procs.redis()
    e1 = procs.engine(name="e1", model=TINY, extra=["--threads", "1"])
    e2 = procs.engine(name="e2", model=TINY, extra=["--threads", "1"])
    ngx = procs.nginx(gw_conf([addr(e1), addr(e2)], http=f"pic_redis 127.0.0.1:{red.port};",
                              loc="pic_redis_timeout 5s;", cdc=None, min_segment=None))
    ready(ngx)
    harness.wait_for(lambda: all(x["break_even_tokens"] > 0 for x in status(ngx)["engines"]),
                     timeout=5, what="L* learned by the probes")
    c = openai.OpenAI(base_url=ngx.url + "/v1", api_key="none", max_retries=0, timeout=120)
    docs = [fresh(f"rag doc {k}", 1000) for k in range(4)]
    tok = Tokenizer.from_file(os.path.join(TINY, "tokenizer.json"))

    def ask(order, q):
        body = "Use the documents below.\n\n" + "".join(
            f"Document [{j + 1}]:\n{docs[k]}\n\n" for j, k in enumerate(order)) + q
        r = c.chat.completions.create(model="m", max_tokens=1, temperature=0, messages=[
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": body}])
        ask.n += 1
        return r.usage.model_dump(), planned_lines(ngx, ask.n)[ask.n - 1]
    ask.n = 0

    u1, first = ask([0, 1, 2], "Question: q1?")
    assert u1["pic"]["pic_tokens"] == 0, u1
    e = {addr(e1): e1, addr(e2): e2}[first["combine"]]

    def built():
        d = json.loads(harness.http("GET", e.url + "/status")[2])["prefix"]["deferred_builds"]
        return d["queued"] >= 3 and d["pending"] == 0 and d["built"] == d["queued"]

    harness.wait_for(built, timeout=60, what="the deferred builds", proc=e)
    u2, second = ask([2, 3, 0], "Question: q2?")
    seen = sum(len(tok.encode(docs[k]).ids) for k in (2, 0))
    composed = u2["prompt_tokens_details"]["cached_tokens"] - u2["pic"]["exact_tokens"]
    print("first:", first, u1["pic"], "second:", second, u2["pic"], "seen tokens", seen)
    assert second["combine"] == first["combine"]
    # all but the seams: CDC sized from this tiny model's L* cuts each body in
    # ~4 chunks, each recomputing its head and tail seams (8 tokens each)
    assert composed >= 0.7 * seen, (u2, seen)


# --- routing rules on fake engines ------------------------------------------------


def test_prefix_holders_are_learned_through_redis(procs, logdir):
    """Gateway A routes a request and records its prefix chain in redis; a
    second gateway B (its own shm zone) learns from pic:pfx:{chain} that fa
    holds the prefix, and combines there although fb holds more PIC bytes.
    The chain keys in redis are checked against xxh128sum."""
    red = procs.redis()
    fa, fb = fakes(procs)
    conf = gw_conf([addr(fa), addr(fb)], http=f"pic_redis 127.0.0.1:{red.port};",
                   cdc="512 1024 4096", loc="pic_redis_timeout 5s;")
    a, b = procs.nginx(conf, name="nginx-a"), procs.nginx(conf, name="nginx-b")
    ready(a)
    ready(b)
    h, d1, d2, d3 = doc(201, 200), doc(202, 450), doc(203, 450), doc(204, 450)
    assert post(a, {"model": "m", "prompt": prompt(h, d1, "q1")})[0] == 200
    first, = planned_lines(a, 1)
    holder, other = (fa, fb) if first["combine"] == addr(fa) else (fb, fa)
    keys = [xxh128_key(b"m", b"", x.encode(), logdir) for x in (h, d1)]
    chains = chain_keys(keys, logdir)
    harness.wait_for(lambda: holder.name.encode() in redis_cmd(red.port, "SMEMBERS",
                                                                "pic:pfx:" + chains[1]),
                     timeout=5, what="the prefix recorded in redis")
    ttl = int(redis_cmd(red.port, "TTL", "pic:pfx:" + chains[1])[1:].split(b"\r\n")[0])
    assert 0 < ttl <= 3600
    for d in (d2, d3):
        k = xxh128_key(b"m", b"", d.encode(), logdir)
        assert redis_cmd(red.port, "SADD", "pic:seg:" + k, other.name).startswith(b":1")
    assert post(b, {"model": "m", "prompt": prompt(h, d1, d2, d3, "q2")})[0] == 200
    line, = planned_lines(b, 1)
    assert line["combine"] == addr(holder), "the exact prefix (from redis) decides"
    assert int(line["exact"]) == len(h) + len(d1)
    assert int(line["hit"]) == len(d2) + len(d3)
    st = status(b)
    assert st["routing"]["exact_decided"] == 1 and st["routing"]["exact_routed"] == 1
    eng = {e["id"]: e for e in st["engines"]}
    assert eng[holder.name]["exact_requests"] == 1


@pytest.mark.parametrize("weight", [0, 2])
def test_exact_weight_zero_routes_by_pic_bytes(procs, logdir, weight):
    """pic_exact_weight 0 turns the preference off: the PIC holder combines."""
    red = procs.redis()
    fa, fb = fakes(procs)
    ngx = procs.nginx(gw_conf([addr(fa), addr(fb)], http=f"pic_redis 127.0.0.1:{red.port};",
                              cdc="512 1024 4096",
                              loc=f"pic_exact_weight {weight}; pic_redis_timeout 5s;"))
    ready(ngx)
    h, d1, d2, d3 = doc(211, 200), doc(212, 450), doc(213, 450), doc(214, 450)
    assert post(ngx, {"model": "m", "prompt": prompt(h, d1, "q1")})[0] == 200
    holder = planned_lines(ngx, 1)[0]["combine"]
    other = fb if holder == addr(fa) else fa
    for d in (d2, d3):
        k = xxh128_key(b"m", b"", d.encode(), logdir)
        redis_cmd(red.port, "SADD", "pic:seg:" + k, other.name)
    assert post(ngx, {"model": "m", "prompt": prompt(h, d1, d2, d3, "q2")})[0] == 200
    line = planned_lines(ngx, 2)[1]
    assert line["combine"] == (holder if weight else addr(other))


def turner(ngx, s):
    """turn(t): session s after t tool calls, through ngx; its access-log line."""
    c = openai.OpenAI(base_url=ngx.url + "/v1", api_key="none", max_retries=0, timeout=30)

    def turn(t):
        c.chat.completions.create(model="m", messages=session(s, t), max_tokens=1)
        return planned_lines(ngx, t + 1)[t]
    return turn


def test_overloaded_holder_is_not_chosen(procs):
    """The prefix holder combines the next turn, until its load exceeds the
    least loaded engine's by more than pic_imbalance; then the other engine
    serves it.  That exact-first engine composed the session's segments from
    the holder's entries, so its own exact prefix stops where the first one
    begins: once the load is even again, the session goes back to the holder
    of the deepest exact prefix."""
    fa, fb = fakes(procs)
    ngx = procs.nginx(gw_conf([addr(fa), addr(fb)], http="pic_health_check interval=100ms;",
                              loc="pic_imbalance 4;"))
    ready(ngx)
    turn = turner(ngx, 0)

    first = turn(0)["combine"]
    holder, other = (fa, fb) if first == addr(fa) else (fb, fa)
    line = turn(1)
    assert line["combine"] == first and int(line["exact"]) > 0
    holder.load = 5
    harness.wait_for(lambda: [e["load"] for e in status(ngx)["engines"]
                              if e["id"] == holder.name] == [5], timeout=5, what="load seen")
    line = turn(2)
    assert line["combine"] == addr(other), "an overloaded holder is skipped"
    assert int(line["exact"]) == 0
    holder.load = 0
    harness.wait_for(lambda: [e["load"] for e in status(ngx)["engines"]
                              if e["id"] == holder.name] == [0], timeout=5, what="load seen")
    line = turn(3)
    assert line["combine"] == first, "back to the deepest exact prefix"
    assert int(line["exact"]) > 0


@pytest.mark.allow_log(r"connect\(\) failed|unhealthy|upstream server temporarily disabled")
def test_dead_holder_falls_back(procs):
    """The holder of a session's prefix dies: the next turn is served by the
    other engine (nginx retries it at once, then plans leave the dead one),
    which then holds the prefix."""
    fa, fb = fakes(procs)
    # a dead engine refuses at once; a probe of the live one that times out under
    # load would mark it down (max_fails 1), and its return forgets what it holds
    ngx = procs.nginx(gw_conf([addr(fa), addr(fb)],
                              http="pic_health_check interval=100ms timeout=2s;"))
    ready(ngx)
    c = openai.OpenAI(base_url=ngx.url + "/v1", api_key="none", max_retries=0, timeout=30)
    for t in range(2):
        c.chat.completions.create(model="m", messages=session(1, t), max_tokens=1)
    holder = planned_lines(ngx, 2)[1]["combine"]
    dead, live = (fa, fb) if holder == addr(fa) else (fb, fa)
    dead.stop()
    r = c.chat.completions.create(model="m", messages=session(1, 2), max_tokens=1)
    assert r.choices, "no client error"
    harness.wait_for(lambda: [e["healthy"] for e in status(ngx)["engines"]
                              if e["name"] == holder] == [False], timeout=5,
                     what="the holder marked down")
    c.chat.completions.create(model="m", messages=session(1, 3), max_tokens=1)
    lines = planned_lines(ngx, 4)
    assert lines[2]["status"] == "200" and lines[3]["status"] == "200"
    assert lines[3]["combine"] == addr(live)
    assert int(lines[3]["exact"]) > 0, "the engine that served turn 2 holds the prefix now"


@pytest.mark.allow_log(r"unhealthy|timed out")
def test_slow_probe_keeps_the_holders_prefix_a_restart_drops_it(procs):
    """An engine whose probes tell its uptime misses one probe (busy): it is
    out for a moment, and back it still holds the session's prefix, so the
    next turn goes to it on its exact prefix.  Its uptime then says it
    restarted: the index forgets what it held."""
    fa, fb = fakes(procs)
    for f in (fa, fb):
        f.started = time.time() - 3600
    ngx = procs.nginx(gw_conf([addr(fa), addr(fb)],
                              http="pic_health_check interval=100ms timeout=300ms;"))
    ready(ngx)
    turn = turner(ngx, 5)

    holder = turn(0)["combine"]
    line = turn(1)
    assert line["combine"] == holder and int(line["exact"]) > 0, line
    f = fa if holder == addr(fa) else fb

    def healthy():
        return [e["healthy"] for e in status(ngx)["engines"] if e["name"] == holder]

    f.status_delay = 1.0                  # a probe times out: out of rotation
    harness.wait_for(lambda: healthy() == [False], timeout=5, what="the holder marked down")
    f.status_delay = 0.0
    harness.wait_for(lambda: healthy() == [True], timeout=5, what="the holder back")
    line = turn(2)
    assert line["combine"] == holder and int(line["exact"]) > 0, \
        "back after a slow probe, it still holds the prefix: %r" % line
    f.started = time.time()               # the same id, uptime 0: it restarted
    time.sleep(1.0)                       # ten probes
    line = turn(3)
    assert int(line["exact"]) == 0, "a restarted engine's prefix is forgotten: %r" % line


def test_next_turn_finds_the_prefix_while_the_answer_is_still_open(procs):
    """An agent loop sends its next turn as soon as it has the answer
    ("data: [DONE]"), on a new connection (so maybe another nginx worker),
    while nginx has not finished the previous request: its engine has not
    ended the stream, there was no log phase yet.  The prefix was recorded
    when the engine's 200 header came, before the client saw a byte, so the
    next turn goes to the holder on its exact prefix."""
    fa, fb = fakes(procs)
    hold = threading.Event()
    fa.hold_end = fb.hold_end = hold
    ngx = procs.nginx(gw_conf([addr(fa), addr(fb)]))
    ready(ngx)
    conn = http.client.HTTPConnection("127.0.0.1", ngx.port, timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions",
                     json.dumps({"model": "m", "messages": session(2, 0), "stream": True,
                                 "max_tokens": 1}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        got = b""
        while b"data: [DONE]" not in got:
            chunk = resp.read1(65536)
            assert chunk, "the stream ended before [DONE]"
            got += chunk
        holder = fa if len(fa.bodies) == 1 else fb
        assert len(holder.bodies) == 1 and len(fa.bodies) + len(fb.bodies) == 1
        c = openai.OpenAI(base_url=ngx.url + "/v1", api_key="none", max_retries=0, timeout=30)
        c.chat.completions.create(model="m", messages=session(2, 1), max_tokens=1)
        line, = planned_lines(ngx, 1)
        assert line["combine"] == addr(holder) and int(line["exact"]) > 0, line
        assert len(access_lines(ngx)) == 1, "the first turn is still open"
    finally:
        hold.set()
    assert got + resp.read() and planned_lines(ngx, 2)[1]["status"] == "200"
    conn.close()
    st = status(ngx)
    assert st["routing"]["exact_routed"] == 1
    assert [e["exact_requests"] for e in st["engines"] if e["id"] == holder.name] == [1]


# --- no remote prefill for what an exact-first combine recomputes (DESIGN §3.5) ----


def plan_of(fake):
    return json.loads(fake.bodies[-1])["pic"]


@pytest.mark.parametrize("mode", ["exact", "pic"])
def test_no_worker_for_segments_that_extend_the_exact_prefix(procs, logdir, mode):
    """Cold segments before the first segment the combine node composes are
    recomputed by an exact-first combine node: no worker is named for them.
    Past it (after a hit), cold segments still go to workers; a PIC-only
    engine composes from the start, so every cold segment may."""
    red = procs.redis()
    fa, fb = fakes(procs, mode)
    ngx = procs.nginx(gw_conf([addr(fa), addr(fb)], http=f"pic_redis 127.0.0.1:{red.port};",
                              cdc="512 1024 4096", loc="pic_redis_timeout 5s;"))
    ready(ngx)
    h, d1, d2, d3, d4 = (doc(220 + i, n) for i, n in enumerate([200, 450, 450, 450, 450]))
    k2 = xxh128_key(b"m", b"", d2.encode(), logdir)
    redis_cmd(red.port, "SADD", "pic:seg:" + k2, "fa")
    assert post(ngx, {"model": "m", "prompt": prompt(h, d1, d2, d3, d4, "the question")})[0] \
        == 200
    line, = planned_lines(ngx, 1)
    assert line["combine"] == addr(fa), "the holder combines"
    segs = plan_of(fa)["segments"]
    by = {s["key"]: s for s in segs}
    keys = [xxh128_key(b"m", b"", x.encode(), logdir) for x in (d1, d3, d4)]
    if mode == "exact":
        assert by[keys[0]]["worker"] is None, "d1 extends the exact prefix: recomputed"
        assert int(line["end"]) == 2
        assert status(ngx)["routing"]["segments_kept_exact"] == 1
    else:
        assert by[keys[0]]["worker"] is not None
        assert int(line["end"]) == 0
    assert by[keys[1]]["worker"] is not None and by[keys[2]]["worker"] is not None
    assert by[k2]["holders"] == [addr(fa)] and by[k2]["worker"] is None


def test_cold_request_to_exact_first_engines_names_no_worker(procs):
    """All cold: an exact-first combine node composes nothing it did not have
    before the request, so no segment is sent to a worker (rendezvous
    fallback without redis alike)."""
    fa, fb = fakes(procs)
    ngx = procs.nginx(gw_conf([addr(fa), addr(fb)], cdc="512 1024 4096"))
    ready(ngx)
    assert post(ngx, {"model": "m", "prompt": prompt(*(doc(240 + i, 450) for i in range(5)),
                                                     "q")})[0] == 200
    line, = planned_lines(ngx, 1)
    combine = fa if line["combine"] == addr(fa) else fb
    assert all(s["worker"] is None for s in plan_of(combine)["segments"])


# --- sizing (docs/SIZING.md) -------------------------------------------------------


@pytest.mark.skipif(not os.path.isdir(TINY), reason="fixture models missing")
def test_engine_status_reports_pool_capacity(procs):
    """/status cache.capacity follows the cost model computed here from
    config.json: fixed = GDN layers x (T + S|0 in the entry dtype + the fp32
    conv tail), kv = attention layers x 2 Hkv hd; entries and tokens of the
    budget at the break-even length while the pool is empty."""
    with open(os.path.join(TINY, "config.json")) as f:
        cfg = json.load(f)
    t = cfg.get("text_config", cfg)
    lin = sum(x == "linear_attention" for x in t["layer_types"])
    att = len(t["layer_types"]) - lin
    Hv, Hk = t["linear_num_value_heads"], t["linear_num_key_heads"]
    dk, dv, K = t["linear_key_head_dim"], t["linear_value_head_dim"], t["linear_conv_kernel_dim"]
    budget = 64 << 20
    for dtype, es in (("bf16", 2), ("f32", 4)):
        e = procs.engine(name=f"cap-{dtype}", model=TINY,
                         extra=["--threads", "1", "--entry-dtype", dtype,
                                "--cache-bytes", str(budget)])
        cap = json.loads(harness.http("GET", e.url + "/status")[2])["cache"]["capacity"]
        fixed = lin * (Hv * dk * (dk + dv) * es + (2 * Hk * dk + Hv * dv) * (K - 1) * 4)
        kv = att * 2 * t["num_key_value_heads"] * t["head_dim"] * es
        assert cap["entry_fixed_bytes"] == fixed and cap["kv_bytes_per_token"] == kv
        assert abs(cap["break_even_tokens"] - fixed / kv) < 1e-9
        assert cap["entries"] == budget // (2 * fixed)
        assert abs(cap["tokens"] - budget / (2 * fixed) * fixed / kv) <= fixed / kv + 1


@pytest.mark.skipif(not os.path.isdir(TINY), reason="fixture models missing")
def test_segment_sizes_follow_the_engines_break_even(procs):
    """Without pic_cdc and pic_min_segment the gateway sizes segments from
    the break-even length L* its probes read from the engines' /status
    (cache.capacity.break_even_tokens; docs/SIZING.md): CDC average the
    power of two at or below 2 L* at 4 bytes a token, minimum half of it,
    maximum four times it, minimum PIC segment the value floor (64 tokens,
    or L*/2 when smaller).  Oracle: a gateway
    configured with those numbers, computed here, cuts the same requests
    into the same segments; the built-in defaults do not."""
    e = procs.engine(name="e", model=TINY, extra=["--threads", "1"])
    cap = json.loads(harness.http("GET", e.url + "/status")[2])["cache"]["capacity"]
    lstar = int(cap["break_even_tokens"] + 0.5)
    avg = 64
    while avg * 2 <= 2 * 4 * lstar:
        avg *= 2
    auto = procs.nginx(gw_conf([addr(e)], cdc=None, min_segment=None), name="nginx-auto")
    same = procs.nginx(gw_conf([addr(e)], cdc=f"{avg // 2} {avg} {4 * avg}",
                               min_segment=max(min(4 * lstar // 2, 4 * 64), 16)),
                     name="nginx-same")
    builtin = procs.nginx(gw_conf([addr(e)], cdc="256 1024 4096", min_segment=128),
                          name="nginx-builtin")
    harness.wait_for(lambda: [x["break_even_tokens"] for x in status(auto)["engines"]]
                     == [lstar], timeout=5, what="L* learned by the probes")
    # and its seam width, with where it took it (no calibration file, no --seam)
    assert [(x["seam"], x["seam_source"], x["seam_doc"]) for x in status(auto)["engines"]] \
        == [(8, "default", 8)]
    bodies = [{"model": "m", "max_tokens": 1, "messages": [
        {"role": "system", "content": fresh(f"sizing system {i}", 2000)},
        {"role": "user", "content": fresh(f"sizing doc {i}", 6000)},
        {"role": "user", "content": fresh(f"sizing note {i}", 40 + 60 * i)},
        {"role": "user", "content": "q?"}]} for i in range(3)]
    seen = {}
    for ngx in (auto, same, builtin):
        for b in bodies:
            assert post(ngx, b, "/v1/chat/completions")[0] == 200
        st = status(ngx)["segments"]
        seen[ngx] = ([line["segments"] for line in planned_lines(ngx, len(bodies))],
                     st["total"], st["dynamic"])
    assert seen[auto] == seen[same]
    assert seen[auto] != seen[builtin]
