"""The trust boundaries of DESIGN 4.5, each finding as a test: through
nginx where a client would go, straight to an engine where an attacker in the
network would.  The pool credential is checked against Python's hmac (the
oracle for pic_auth.h's HMAC-SHA256), keys against xxh128sum."""
import json
import subprocess
import urllib.request

import pytest

from tests import harness
from tests.support.gateway import MODEL, MARK, access_lines, doc, gw_conf
from tests.support.pool import KEY_FP, FakePeer, addr, assign, base_plan, body_with, engine, oracle, status  # noqa: F401  (oracle is a fixture)
from tests.support.gateway import gw_status, signed  # noqa: F401


def peer_headers(secret, method, uri, body=b""):
    return {"X-PIC-Auth": harness.pool_tag(secret, "pic-peer-v1", f"{method} {uri}", body)}


def xxh3_64_le(data, tmpdir):
    """XXH3-64 of data as 8 little-endian bytes, by xxhsum (the oracle)."""
    import os
    import subprocess
    path = os.path.join(tmpdir, "frame.bin")
    with open(path, "wb") as f:
        f.write(data)
    out = subprocess.run(["xxhsum", "-H3", path], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1], 16).to_bytes(8, "little")


def assert_error(raw, code):
    err = json.loads(raw)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == code, err


# --- 1. engine-internal endpoints are not reachable through nginx -------------------


def test_internal_endpoints_are_refused_through_nginx(procs):
    e = procs.engine(name="e1", model=MODEL, extra=["--threads", "1"])
    ngx = procs.nginx(gw_conf([addr(e)]))
    fp = status(e)["model"]["fingerprint"]
    key = harness.segment_key(fp, "", b"hello")
    probes = [("GET", f"/v1/pic/segments/{key}?bytes=5&fingerprint={fp}", None),
              ("GET", f"/v1/pic/segments/{key.upper()}?bytes=5", None),
              ("POST", "/v1/pic/prefill",
               {"fingerprint": fp, "segments": [{"key": key, "bytes": 5, "kind": "pic",
                                                 "text": "hello"}]}),
              ("POST", "/v1//pic/%70refill", {"fingerprint": fp, "segments": []})]
    for method, uri, body in probes:
        code, h, raw = harness.http(method, ngx.url + uri, body)
        assert code == 404 and h["Content-Type"] == "application/json", (uri, raw)
        assert_error(raw, "not_found")
    st = gw_status(ngx)["requests"]
    assert st["upstream_errors"] == 0 and st["rejected"] == len(probes)
    assert status(e)["cache"]["prefills_served"] == 0
    assert status(e)["cache"]["segments_served"] == 0


# --- 2. the pool credential ---------------------------------------------------------


def test_peer_endpoints_need_the_pool_credential(procs, logdir):
    path, secret = harness.pool_secret(logdir)
    e = engine(procs, "e1", ("--pool-secret-file", path))
    fp = status(e)["model"]["fingerprint"]
    key = harness.segment_key(fp, "", b"hello")
    uri = f"/v1/pic/segments/{key}?bytes=5&fingerprint={fp}"
    prefill = json.dumps({"fingerprint": fp, "segments": [
        {"key": key, "bytes": 5, "kind": "pic", "text": "hello"}]}).encode()
    for hdrs in ({}, {"X-PIC-Auth": "0" * 64},
                 peer_headers(b"another secret of 32 bytes......", "GET", uri)):
        code, _, raw = harness.http("GET", e.url + uri, headers=hdrs)
        assert code == 403, raw
        assert_error(raw, "pool_auth_failed")
    # a tag for another body or another URI does not carry over
    hdrs = peer_headers(secret, "POST", "/v1/pic/prefill", b"{}")
    code, _, raw = harness.http("POST", e.url + "/v1/pic/prefill", prefill, headers=hdrs)
    assert code == 403
    code, _, _ = harness.http("GET", e.url + uri,
                              headers=peer_headers(secret, "GET", uri + "x"))
    assert code == 403
    assert status(e)["cache"]["auth_failures"] == 5
    # with the credential: served (not held: 404; a short segment: an empty record)
    code, _, raw = harness.http("GET", e.url + uri, headers=peer_headers(secret, "GET", uri))
    assert code == 404, raw
    code, h, raw = harness.http("POST", e.url + "/v1/pic/prefill", prefill,
                                headers=peer_headers(secret, "POST", "/v1/pic/prefill",
                                                     prefill))
    assert code == 200 and raw[:4] == b"PICR", raw
    assert status(e)["cache"]["auth_failures"] == 5


def test_plan_needs_the_gateway_credential(procs, logdir):
    """A plan names peers the engine connects to and keys it stores under:
    without the credential it is refused, and nothing is fetched."""
    path, secret = harness.pool_secret(logdir)
    e1 = engine(procs, "e1", ("--pool-secret-file", path))
    victim = FakePeer(lambda h: h.send_error(500))
    try:
        body = body_with(assign(base_plan(), worker=f"127.0.0.1:{victim.port}"))
        code, _, raw = harness.http("POST", e1.url + "/v1/chat/completions", body)
        assert code == 403, raw
        assert_error(raw, "pool_auth_failed")
        raw_body, hdrs = signed(b"not the pool secret at all......", body)
        code, _, _ = harness.http("POST", e1.url + "/v1/chat/completions", raw_body,
                                  headers=hdrs)
        assert code == 403
        assert victim.requests == []
    finally:
        victim.close()
    raw_body, hdrs = signed(secret, body_with(base_plan()))
    code, _, raw = harness.http("POST", e1.url + "/v1/chat/completions", raw_body,
                                headers=hdrs, timeout=60)
    assert code == 200, raw
    assert status(e1)["cache"]["plans_received"] == 1


def test_an_engine_without_a_credential_keeps_its_pool_closed(procs, logdir):
    """Secure by default: an engine started with no pool option serves the
    OpenAI API standalone but refuses plans and peer endpoints (403) instead of
    trusting whoever can connect; --insecure-pool is the explicit opt-out and
    contradicts a credential."""
    e = procs.engine(name="closed", model=MODEL, extra=["--threads", "1"],
                     secure_default=True)
    code, _, raw = harness.http("POST", e.url + "/v1/chat/completions", {
        "model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
        timeout=60)
    assert code == 200, raw
    fp = status(e)["model"]["fingerprint"]
    if not KEY_FP:
        KEY_FP.append(fp)
    victim = FakePeer(lambda h: h.send_error(500))
    try:
        body = body_with(assign(base_plan(), worker=f"127.0.0.1:{victim.port}"))
        code, _, raw = harness.http("POST", e.url + "/v1/chat/completions", body)
        assert code == 403, raw
        assert_error(raw, "pool_auth_failed")
        assert victim.requests == []
    finally:
        victim.close()
    key = harness.segment_key(fp, "", b"hello")
    code, _, raw = harness.http("GET", e.url + f"/v1/pic/segments/{key}?bytes=5")
    assert code == 403, raw
    assert_error(raw, "pool_auth_failed")
    code, _, raw = harness.http("POST", e.url + "/v1/pic/prefill", {
        "fingerprint": fp, "segments": [{"key": key, "bytes": 5, "kind": "pic",
                                         "text": "hello"}]})
    assert code == 403, raw
    st = status(e)["cache"]
    assert st["pool_auth"] is False and st["pool_open"] is False
    assert st["auth_failures"] == 3
    path, _ = harness.pool_secret(logdir)
    r = subprocess.run([harness.ENGINE_BIN, "serve", "--port", "0", "--insecure-pool",
                        "--pool-secret-file", path], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and "contradicts" in r.stderr


def test_pool_with_a_secret_prefills_and_pulls_signed(procs, logdir, oracle):
    """Engines sharing the secret sign requests and frames; an engine with
    another secret is not a peer (its refusal is recomputed locally)."""
    path, secret = harness.pool_secret(logdir)
    other, _ = harness.pool_secret(logdir, "other.secret")
    sec = ("--pool-secret-file", path)
    e1, e2 = engine(procs, "e1", sec), engine(procs, "e2", sec)
    e3 = engine(procs, "e3", ("--pool-secret-file", other))
    raw_body, hdrs = signed(secret, body_with(assign(base_plan(), worker=addr(e2))))
    code, _, raw = harness.http("POST", e1.url + "/v1/chat/completions", raw_body,
                                headers=hdrs, timeout=60)
    assert code == 200 and json.loads(raw)["choices"][0]["message"]["content"] == oracle
    st1, st2 = status(e1)["cache"], status(e2)["cache"]
    assert st2["prefills_served"] == 1 and st2["auth_failures"] == 0
    assert st1["segment_peer"] == 3 and st1["peer_failures"] == 0
    # e2 now holds the documents: pulled with the credential
    e4 = engine(procs, "e4", sec)
    raw_body, hdrs = signed(secret, body_with(assign(base_plan(), holder=addr(e2))))
    code, _, raw = harness.http("POST", e4.url + "/v1/chat/completions", raw_body,
                                headers=hdrs, timeout=60)
    assert code == 200 and json.loads(raw)["choices"][0]["message"]["content"] == oracle
    assert status(e4)["cache"]["segment_peer"] == 3
    assert status(e2)["cache"]["segments_served"] == 3
    # e3 is outside the pool: it refuses e1, e1 computes the segments itself
    raw_body, hdrs = signed(secret, body_with(assign(base_plan(), worker=addr(e3))))
    e5 = engine(procs, "e5", sec)
    code, _, raw = harness.http("POST", e5.url + "/v1/chat/completions", raw_body,
                                headers=hdrs, timeout=60)
    assert code == 200 and json.loads(raw)["choices"][0]["message"]["content"] == oracle
    assert status(e3)["cache"]["auth_failures"] == 1
    assert status(e3)["cache"]["prefills_served"] == 0
    assert status(e5)["cache"]["segment_remote_failed"] == 3


def test_forged_frame_is_not_stored(procs, logdir, oracle):
    """A man in the middle flips one payload bit of a real, signed frame: the
    checksum is recomputed to match, the tag is not: rejected, recomputed."""
    path, secret = harness.pool_secret(logdir)
    sec = ("--pool-secret-file", path)
    e1, e2 = engine(procs, "e1", sec), engine(procs, "e2", sec)
    raw_body, hdrs = signed(secret, body_with(base_plan()))
    assert harness.http("POST", e2.url + "/v1/chat/completions", raw_body, headers=hdrs,
                        timeout=60)[0] == 200

    def forge(h):
        req = urllib.request.Request(f"http://127.0.0.1:{e2.port}{h.path}",
                                     headers={"X-PIC-Auth": h.headers["X-PIC-Auth"]})
        with urllib.request.urlopen(req) as r:
            data = bytearray(r.read())
        frame, tag = data[:-32], data[-32:]
        frame[len(frame) // 2] ^= 0x04
        frame[-8:] = xxh3_64_le(bytes(frame[:-8]), logdir)   # the checksum follows
        out = bytes(frame + tag)
        h.send_response(200)
        h.send_header("Content-Length", str(len(out)))
        h.end_headers()
        h.wfile.write(out)

    fake = FakePeer(forge)
    try:
        raw_body, hdrs = signed(secret, body_with(assign(base_plan(),
                                                         holder=f"127.0.0.1:{fake.port}")))
        code, _, raw = harness.http("POST", e1.url + "/v1/chat/completions", raw_body,
                                    headers=hdrs, timeout=60)
    finally:
        fake.close()
    assert code == 200 and json.loads(raw)["choices"][0]["message"]["content"] == oracle
    assert len(fake.requests) == 3
    st = status(e1)["cache"]
    assert st["segment_peer"] == 0 and st["segment_remote_failed"] == 3
    with open(e1.log_path) as f:
        assert "frame without a valid pool credential" in f.read()


def test_prefill_recomputes_keys_and_obeys_the_context(procs):
    e = engine(procs, "e1", ("--ctx", "64"))
    fp = status(e)["model"]["fingerprint"]
    text = "A document long enough to be worth caching as a segment of its own. " * 3
    good = harness.segment_key(fp, "t1", text.encode())
    seg = {"key": good, "bytes": len(text), "kind": "pic", "text": text}
    # a key that is not its text's (here: the global scope's) is refused
    for bad in ({"scope": "", "segments": [seg]},
                {"scope": "t1", "segments": [dict(seg, key=harness.segment_key(
                    fp, "", text.encode()))]}):
        code, _, raw = harness.http("POST", e.url + "/v1/pic/prefill",
                                    dict(bad, fingerprint=fp))
        assert code == 400, raw
        assert_error(raw, None)
    # the right key, but more tokens than the context: 422, nothing built
    long_text = text * 6
    seg = {"key": harness.segment_key(fp, "t1", long_text.encode()), "bytes": len(long_text),
           "kind": "pic", "text": long_text}
    code, _, raw = harness.http("POST", e.url + "/v1/pic/prefill",
                                {"fingerprint": fp, "scope": "t1", "segments": [seg]})
    assert code == 422, raw
    assert status(e)["cache"]["entries"] == 0


# --- 3. the scope never degrades to global ----------------------------------------


def test_plan_that_does_not_fit_is_served_uncached(procs, logdir):
    """Tenant t1's plan does not match the engine's rendering: before, the
    engine cut the prompt itself under the global scope, so a later global
    request was told (cached_tokens) what t1 had sent."""
    from tests.support.pool import DOC_A, DOC_B, SYSTEM, plan_for
    path, secret = harness.pool_secret(logdir)
    e = engine(procs, "e1", ("--pool-secret-file", path))
    msgs = [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": MARK.join([DOC_A, DOC_B, "q?"])}]
    body = {"model": "m", "max_tokens": 2, "temperature": 0, "messages": msgs,
            "pic": plan_for(None, [DOC_A, DOC_B], "another question?", scope="t1" * 16)}
    raw_body, hdrs = signed(secret, body)
    code, _, raw = harness.http("POST", e.url + "/v1/chat/completions", raw_body,
                                headers=hdrs, timeout=60)
    assert code == 200, raw
    st = status(e)["cache"]
    assert st["plans_ignored"] == 1 and st["entries"] == 0
    plain = {"model": "m", "max_tokens": 2, "temperature": 0, "messages": msgs}
    code, _, raw = harness.http("POST", e.url + "/v1/chat/completions", plain, timeout=60)
    assert json.loads(raw)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_gateway_signs_plans_keys_scopes_and_drops_client_pic_headers(procs, logdir):
    path, secret = harness.pool_secret(logdir)
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"], loc="pic_scope $http_authorization;",
                              http=f"pic_pool_secret_file {path};"))
    body = {"model": "m", "messages": [{"role": "system", "content": doc(31)},
                                       {"role": "user", "content": "q"}]}
    code, _, raw = harness.http("POST", ngx.url + "/v1/chat/completions", body, headers={
        "Content-Type": "application/json", "Authorization": "Bearer alice",
        "X-PIC-Timeout-Ms": "1", "X-PIC-Auth": "f" * 64})
    assert code == 200, raw
    sent, hdrs = fake.bodies[-1], {k.lower(): v for k, v in fake.headers[-1].items()}
    assert "x-pic-timeout-ms" not in hdrs
    assert hdrs["x-pic-auth"] == harness.pool_tag(secret, "pic-plan-v1", "", sent)
    scope = json.loads(sent)["pic"]["scope"]
    assert scope == harness.pool_tag(secret, "pic-scope-v1", "", b"Bearer alice")[:32]


def test_planned_requests_through_nginx_with_a_secret(procs, logdir):
    path, secret = harness.pool_secret(logdir)
    sec = ["--threads", "1", "--pool-secret-file", path]
    e1 = procs.engine(name="e1", model=MODEL, extra=sec)
    e2 = procs.engine(name="e2", model=MODEL, extra=sec)
    ngx = procs.nginx(gw_conf([addr(e1), addr(e2)], http=f"pic_pool_secret_file {path};"))
    # keys use the fingerprint the probes report: both requests after it
    harness.wait_for(lambda: all(e["id"] for e in gw_status(ngx)["engines"]), timeout=10,
                     what="engine ids from probes")
    body = {"model": "m", "max_tokens": 2, "temperature": 0,
            "messages": [{"role": "system", "content": doc(41, 900)},
                         {"role": "user", "content": "q"}]}
    cached = []
    for _ in range(2):
        code, _, raw = harness.http("POST", ngx.url + "/v1/chat/completions", body,
                                    headers={"X-PIC-Timeout-Ms": "1"}, timeout=60)
        assert code == 200, raw
        cached.append(json.loads(raw)["usage"]["prompt_tokens_details"]["cached_tokens"])
    assert cached[0] == 0 and cached[1] > 0
    for e in (e1, e2):
        st = status(e)
        assert st["cache"]["auth_failures"] == 0 and st["scheduler"]["expired"] == 0
    assert sum(status(e)["cache"]["plans_received"] for e in (e1, e2)) == 2


# --- 4. clients never set engine deadlines ----------------------------------------


def test_client_deadline_header_is_ignored(procs, logdir):
    path, secret = harness.pool_secret(logdir)
    for e in (engine(procs, "open"), engine(procs, "locked", ("--pool-secret-file", path))):
        body = {"model": "m", "prompt": "Hello", "max_tokens": 3, "temperature": 0,
                "ignore_eos": True}
        code, _, raw = harness.http("POST", e.url + "/v1/completions", body,
                                    headers={"X-PIC-Timeout-Ms": "1"}, timeout=60)
        assert code == 200, raw
        assert status(e)["scheduler"]["expired"] == 0


# --- 4. health: only connection-level failures and probes take an engine out ------


def test_client_hang_up_does_not_eject_the_engine(procs):
    import socket

    from tests.support.gateway import access_lines
    fake = procs._add(harness.FakeBackend("hang"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]))
    req = json.dumps({"model": "m", "prompt": "hello"}).encode()
    s = socket.create_connection(("127.0.0.1", ngx.port), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(req), req))
    harness.wait_for(lambda: len(fake.bodies) == 1, timeout=10, what="request at the engine")
    s.close()                                    # the client gives up before any header
    harness.wait_for(lambda: len(access_lines(ngx)) == 1, timeout=10, what="request logged")
    assert access_lines(ngx)[0]["status"] == "499"
    st = gw_status(ngx)
    assert st["engines"][0]["healthy"] and st["engines"][0]["failures"] == 0
    assert st["requests"]["upstream_errors"] == 0


def test_engine_own_504_does_not_eject_it(procs):
    e = procs.engine(name="e1", model=MODEL,
                     extra=["--threads", "1", "--request-timeout-ms", "1"])
    ngx = procs.nginx(gw_conf([addr(e)]))
    body = {"model": "m", "prompt": doc(51, 300), "max_tokens": 2000, "ignore_eos": True}
    for _ in range(2):
        code, _, raw = harness.http("POST", ngx.url + "/v1/completions", body, timeout=60)
        assert code == 504 and json.loads(raw)["error"]["message"], raw
    st = gw_status(ngx)
    assert st["engines"][0]["healthy"] and st["engines"][0]["failures"] == 0
    assert st["requests"]["upstream_errors"] == 0


# --- 5. accounting, re-entry, caps ------------------------------------------------


def redirect_conf(dead, live):
    """A pic location whose engine is down hands over (error_page) to another
    pic location: the planned body goes on as is."""
    return f"""
    pic_zone pic 4m;
    pic_health_check off;               # the dead engine is planned for, once
    upstream first {{ pic_balancer; server {dead}; }}
    upstream second {{ pic_balancer; server {live}; }}
    server {{
        listen 127.0.0.1:$PORT;
        location = /__pic_ready {{ return 204; }}
        location /pic/status {{ pic_status; }}
        location /v1/ {{
            pic on;
            pic_upstream first;
            proxy_pass http://first;
            proxy_next_upstream off;
            proxy_intercept_errors on;
            error_page 502 504 = @second;
        }}
        location @second {{
            pic on;
            pic_upstream second;
            proxy_pass http://second;
        }}
    }}
"""


@pytest.mark.allow_log(r"connect\(\) failed|unhealthy|no live upstreams")
def test_internal_redirect_keeps_the_plan_and_gives_back_the_load(procs):
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(redirect_conf(f"127.0.0.1:{harness.free_port()}",
                                    f"127.0.0.1:{fake.port}"))
    body = {"model": "m", "prompt": doc(61, 500), "max_tokens": 1}
    code, _, raw = harness.http("POST", ngx.url + "/v1/completions", body)
    assert code == 200, raw
    sent = json.loads(fake.bodies[-1])
    assert sent.pop("pic")["version"] == 1 and sent == body       # planned once
    # the count taken for the first engine is given back (before: 1 for good)
    harness.wait_for(lambda: [e["inflight"] for e in gw_status(ngx)["engines"]] == [0, 0],
                     timeout=5, what="in-flight counts back to 0")


def test_too_many_segments_is_413_not_500(procs):
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]))
    prompt = MARK.join("d%d" % i for i in range(70000))
    # 70,000 segments are cut, keyed and counted before the refusal (linear
    # in the segments; the timeout is for the sanitized build)
    code, h, raw = harness.http("POST", ngx.url + "/v1/completions",
                                {"model": "m", "prompt": prompt, "max_tokens": 1}, timeout=180)
    assert code == 413 and h["Content-Type"] == "application/json", raw[:300]
    assert_error(raw, "too_many_segments")
    assert fake.bodies == []


def test_one_request_opens_a_bounded_number_of_peer_connections(procs):
    """A plan naming a holder for each of 24 documents: at most 16 pulls."""
    from tests.support.pool import SYSTEM, plan_for
    docs = ["Document %02d: %s\n" % (i, doc(100 + i, 160)) for i in range(24)]
    e1 = engine(procs, "e1")
    fake = FakePeer(lambda h: h.send_error(404))
    try:
        plan = plan_for(None, docs, "q?")
        for s in plan["segments"]:
            if s["kind"] == "pic":
                s["holders"] = [f"127.0.0.1:{fake.port}"]
        body = {"model": "m", "max_tokens": 2, "temperature": 0, "pic": plan,
                "messages": [{"role": "system", "content": SYSTEM},
                             {"role": "user", "content": MARK.join(docs + ["q?"])}]}
        code, _, raw = harness.http("POST", e1.url + "/v1/chat/completions", body, timeout=120)
    finally:
        fake.close()
    assert code == 200, raw
    assert len(fake.requests) == 16
    assert status(e1)["cache"]["peer_fetches"] == 16


def test_a_refused_request_fans_out_to_no_peer(procs):
    """Batch and queue full: the 429 comes before any prefill is sent."""
    import threading
    release = threading.Event()
    stall = FakePeer(lambda h: release.wait(60))
    idle = FakePeer(lambda h: h.send_error(500))
    e1 = engine(procs, "e1", ("--batch", "1", "--queue", "0", "--peer-timeout-ms", "20000"))
    first = threading.Thread(target=lambda: harness.http(
        "POST", e1.url + "/v1/chat/completions",
        body_with(assign(base_plan(), worker=f"127.0.0.1:{stall.port}")), timeout=60))
    try:
        first.start()
        harness.wait_for(lambda: status(e1)["scheduler"]["running"] == 1, what="slot taken")
        code, _, raw = harness.http("POST", e1.url + "/v1/chat/completions",
                                    body_with(assign(base_plan(),
                                                     worker=f"127.0.0.1:{idle.port}")))
        assert code == 429, raw
        assert idle.requests == []
    finally:
        release.set()
        first.join(60)
        stall.close()
        idle.close()


# --- 6. bodies larger than nginx's default buffer stay in memory ------------------


def test_large_body_is_never_buffered_to_a_file(procs):
    """A 300 KB prompt (nginx's default client_body_buffer_size is 16k): the
    body stays in memory, no temp file for the worker to read back.  Sent
    chunked too: the body's last (empty) buffer used to be "read from its
    file" (NULL), which crashed the worker on any chunked body."""
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]))
    body = {"model": "m", "prompt": " ".join(doc(71 + i, 3000) for i in range(100)),
            "max_tokens": 1}
    import http.client
    data = json.dumps(body).encode()
    code, _, raw = harness.http("POST", ngx.url + "/v1/completions", data, timeout=30)
    assert code == 200, raw
    conn = http.client.HTTPConnection("127.0.0.1", ngx.port, timeout=30)
    conn.request("POST", "/v1/completions", body=iter([data[:100000], data[100000:]]),
                 headers={"Content-Type": "application/json"}, encode_chunked=True)
    r = conn.getresponse()
    assert r.status == 200, r.read()
    conn.close()
    assert len(fake.bodies) == 2
    with open(ngx.error_log) as f:
        assert "buffered to a temporary file" not in f.read()


# --- 5. engine slots: reused past the slot count, forgotten in O(1) -----------------


def fresh_ports(n, used):
    """n loopback ports nothing listens on, none of them in used (a name the
    zone has seen would keep its slot)."""
    out = []
    while len(out) < n:
        p = harness.free_port()
        if p not in used:
            used.add(p)
            out.append(p)
    return out


@pytest.mark.allow_log(r"connect\(\) failed|unhealthy|no live upstreams")
def test_engine_slots_are_reused_through_reloads(procs):
    """Autoscaling: each configuration names 16 engines the last one did not
    (one live, fifteen that refuse connections); six reloads name 96 engines
    over the zone's lifetime, more than its 64 slots, and every generation is
    still served by its live engine.  A document the first live engine held
    is not believed of the engine that later takes its slot."""
    http = "pic_health_check interval=100ms timeout=2s;"   # the dead refuse at once; the live
                                                            # one must not time out under load
    live = procs._add(harness.FakeBackend("capture", name="live0"))
    used = {live.port}
    dead = fresh_ports(15, used)
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{live.port}"]
                              + [f"127.0.0.1:{p}" for p in dead], http=http))
    d = doc(61, 600)
    body = {"model": "m", "prompt": MARK.join(["header %d", d, "q"])}

    def served(g, hit_expected):
        names = {f"127.0.0.1:{live.port}"} | {f"127.0.0.1:{p}" for p in dead}
        harness.wait_for(lambda: gw_status(ngx)["zone"]["generation"] == g, timeout=10,
                         what=f"generation {g}")
        harness.wait_for(
            lambda: {e["name"]: e["healthy"] for e in gw_status(ngx)["engines"]}
            == {n: n == f"127.0.0.1:{live.port}" for n in names},
            timeout=10, what=f"generation {g}: probes")
        n0 = len(access_lines(ngx))
        b = dict(body, prompt=body["prompt"].replace("%d", str(g)))
        code, _, raw = harness.http("POST", ngx.url + "/v1/completions", body=b)
        assert code == 200, raw
        harness.wait_for(lambda: len(access_lines(ngx)) > n0, timeout=5, what="log line")
        row = access_lines(ngx)[-1]
        assert row["combine"] == f"127.0.0.1:{live.port}", row
        if hit_expected is not None:
            assert (int(row["hit"]) > 0) == hit_expected, row

    served(0, False)
    body["prompt"] = body["prompt"].replace("header", "another header")
    served(0, True)                    # the first live engine holds the document
    for g in range(1, 6):
        # never a port an earlier generation named (the zone would keep its
        # slot: one reuse fewer); the OS may hand out a dead one again
        live = procs._add(harness.FakeBackend("capture", name=f"live{g}",
                                              port=fresh_ports(1, used)[0]))
        dead = fresh_ports(15, used)
        with open(ngx.conf, "w") as f:
            f.write(harness.nginx_conf(ngx.prefix, gw_conf(
                [f"127.0.0.1:{live.port}"] + [f"127.0.0.1:{p}" for p in dead],
                http=http).replace("$PORT", str(ngx.port))))
        ngx.reload()
        # generation 4 is the first past 64 names: its live engine takes the
        # slot the first live engine had, which must not inherit its entries
        served(g, False if g == 4 else None)
    zone = gw_status(ngx)["zone"]
    assert zone["engine_slots"] == 64 and zone["slots_reused"] == 32, zone


# --- 6. redis: one subscriber per zone, one round trip per lookup -------------------


class TurnCounter:
    """A TCP proxy in front of redis-server that counts, per client
    connection, the turns: how many times the client starts sending after
    the server has answered (a pipelined batch is one turn, however it is
    cut into segments; a command per round trip is one turn each), and of
    those the lookups (turns that start with SMEMBERS)."""

    def __init__(self, upstream_port):
        import socket
        import threading
        self.upstream = upstream_port
        self.conns = []                       # [{"turns", "sub", "last"}]
        self.allowed = []
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        import threading
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.upstream))
            st = {"turns": 0, "sub": False, "last": None, "lookups": 0}
            with self.lock:
                self.conns.append(st)
            threading.Thread(target=self._pump, args=(c, u, st, "c"), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, st, "s"), daemon=True).start()

    def _pump(self, src, dst, st, side):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                for s in (src, dst):
                    try:
                        s.close()
                    except OSError:
                        pass
                return
            with self.lock:
                if side == "c":
                    if st["last"] != "c":
                        st["turns"] += 1
                        if b"SMEMBERS" in data.upper():
                            st["lookups"] += 1
                    if b"SUBSCRIBE" in data.upper():
                        st["sub"] = True
                st["last"] = side
            try:
                dst.sendall(data)
            except OSError:
                return

    def lookup_turns(self):
        """Turns that asked SMEMBERS (writes such as the gateways' pic:pfx
        records after an answer are turns of their own)."""
        with self.lock:
            return sum(c["lookups"] for c in self.conns if not c["sub"])

    def stop(self, *a, **kw):
        self.sock.close()

    def bad_lines(self):
        return []


def numsub(port, password=None):
    from tests.support.redis import redis_raw as redis_cmd
    if password:
        return redis_auth_cmd(port, password, "PUBSUB", "NUMSUB", "pic:events")[1]
    return int(redis_cmd(port, "PUBSUB", "NUMSUB", "pic:events").split(b"\r\n")[-2][1:])


def test_one_lookup_is_one_round_trip_whatever_the_segment_count(procs):
    red = procs.redis()
    proxy = procs._add(TurnCounter(red.port))
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"],
                              http=f"pic_redis 127.0.0.1:{proxy.port};"))
    harness.wait_for(lambda: gw_status(ngx)["redis"]["up_workers"] == 2, timeout=5,
                     what="both workers connected")
    before = proxy.lookup_turns()
    docs = [doc(300 + i, 300) for i in range(12)]
    code, _, raw = harness.http("POST", ngx.url + "/v1/completions",
                                body={"model": "m", "prompt": MARK.join(docs + ["q"])})
    assert code == 200, raw
    st = gw_status(ngx)["redis"]
    assert st["lookups"] == 1 and st["keys"] >= 12, st
    assert proxy.lookup_turns() - before == 1, "one pipelined write, one round trip"


def test_one_worker_of_the_zone_applies_redis_events(procs, logdir):
    from tests.support.redis import redis_raw as redis_cmd
    red = procs.redis()
    fake = procs._add(harness.FakeBackend("capture", name="fa"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"],
                              http=f"pic_redis 127.0.0.1:{red.port};"))
    harness.wait_for(lambda: numsub(red.port) == 1, timeout=5, what="a subscriber")
    pid = gw_status(ngx)["redis"]["subscriber_pid"]
    assert pid > 0
    # every event reaches exactly one subscriber (PUBLISH counts receivers)
    keys = [harness.segment_key("m", "", doc(400 + i, 300).encode()) for i in range(8)]
    for k in keys:
        assert redis_cmd(red.port, "PUBLISH", "pic:events", f"add fa {k}") == b":1\r\n"
    harness.wait_for(lambda: gw_status(ngx)["redis"]["events"] == len(keys), timeout=5,
                     what="events applied")
    assert gw_status(ngx)["zone"]["index_entries"] >= len(keys)
    # a reload hands the subscription to a worker of the new configuration
    ngx.reload()
    harness.wait_for(lambda: gw_status(ngx)["zone"]["generation"] == 1, timeout=10,
                     what="reload")
    harness.wait_for(lambda: gw_status(ngx)["redis"]["subscriber_pid"] not in (0, pid)
                     and numsub(red.port) == 1, timeout=10, what="a new subscriber")
    assert redis_cmd(red.port, "PUBLISH", "pic:events", f"evict fa {keys[0]}") == b":1\r\n"
    harness.wait_for(lambda: gw_status(ngx)["redis"]["events"] == len(keys) + 1, timeout=5,
                     what="event applied after the reload")


# --- 6. holders recorded on the engine's confirmation --------------------------------


def send_doc(ngx, head, d):
    """POST a completion of [head, d, "q"] through ngx; (status, response
    headers, the access log's hit bytes) once its log line is written."""
    n0 = len(access_lines(ngx))
    code, hdrs, _ = harness.http("POST", ngx.url + "/v1/completions",
                                 body={"model": "m", "prompt": MARK.join([head, d, "q"])})
    harness.wait_for(lambda: len(access_lines(ngx)) > n0, timeout=5, what="log line")
    return code, hdrs, int(access_lines(ngx)[-1]["hit"])


def test_holders_are_recorded_when_the_engine_confirms(procs):
    """Without redis the combine node's 200 (its X-PIC-Held) is the confirmation: a plan the
    engine refused (429) records nobody as holding its segments."""
    fake = procs._add(harness.FakeBackend("busy", name="fa"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]))
    d = doc(71, 600)

    def send(head):
        code, _, hit = send_doc(ngx, head, d)
        return code, hit

    assert send("header one") == (429, 0)
    assert send("header two") == (429, 0), "a refused plan recorded its segments"
    fake.mode = "capture"
    assert send("header three") == (200, 0)
    code, hit = send("header four")
    assert code == 200 and hit >= 500, "the engine's 200 recorded what it computed"


def held_conf(servers, **kw):
    """gw_conf whose location also logs what the engine said it holds
    ($upstream_http_x_pic_held, logs/held.log) and the client's view."""
    return gw_conf(servers, http="log_format held '$pic_plan_id $upstream_http_x_pic_held "
                                 "$sent_http_x_pic_held';" + kw.pop("http", ""),
                   loc="access_log logs/pic.log pic; access_log logs/held.log held;"
                       + kw.pop("loc", ""), **kw)


def held_lines(ngx):
    """(plan id, what the engine sent, what the client got) per planned request."""
    import os
    with open(os.path.join(ngx.prefix, "logs", "held.log")) as f:
        return [tuple(line.split()) for line in f if not line.startswith("- ")]


def test_holders_are_exactly_what_the_engine_says_it_pooled(procs):
    """A real exact-first engine does not pool a document while it serves
    its first sighting (recomputed inside the exact run; a client-delimited
    one is pooled by the keeper after that request, pic_plan_defer, an
    unmarked one on its second sighting): its X-PIC-Held says so, the
    gateway records exactly that (the first 200 records nothing, the second
    the document), and no client ever sees the header."""
    e1 = procs.engine(name="e1", model=MODEL, extra=["--threads", "1"])
    ngx = procs.nginx(held_conf([addr(e1)]))
    harness.wait_for(lambda: all(e["id"] for e in gw_status(ngx)["engines"]), timeout=10,
                     what="engine ids from probes")
    d = doc(91, 900)

    def send(head, stream=False):
        n0 = len(access_lines(ngx))
        body = {"model": "m", "max_tokens": 2, "temperature": 0, "stream": stream,
                "prompt": MARK.join([head, d, "which document?"])}
        code, hdrs, raw = harness.http("POST", ngx.url + "/v1/completions", body, timeout=60)
        assert code == 200, raw
        assert not any(k.lower() == "x-pic-held" for k in hdrs), hdrs
        harness.wait_for(lambda: len(access_lines(ngx)) > n0, timeout=5, what="log line")
        row = access_lines(ngx)[-1]
        plan, sent, seen = [x for x in held_lines(ngx) if x[0] == row["plan"]][0]
        assert seen == "-", "the client got X-PIC-Held"
        return int(row["hit"]), harness.held_set(sent, int(row["segments"]))

    hit, held = send("first header")
    assert hit == 0 and held == set(), "a first sighting is not pooled"
    hit, held = send("second header", stream=True)
    assert hit == 0, "the first 200 recorded segments the engine did not pool"
    assert held, "the second sighting has the document's entries"
    hit, held3 = send("third header")
    assert 0 < hit < len(d) + len(MARK), "exactly the pooled segments are recorded"
    assert held3 == held


def test_a_malformed_held_header_records_nothing(procs):
    """An answer whose X-PIC-Held is not the format (or names a segment the
    plan does not have) records no holder, and the client never sees it."""
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]))
    d = doc(93, 600)

    def send(head):
        code, hdrs, hit = send_doc(ngx, head, d)
        assert code == 200 and not any(k.lower() == "x-pic-held" for k in hdrs), hdrs
        return hit

    for bad in ("zz", "f" * 40, "", "1,2"):
        fake.held = lambda plan, bad=bad: bad
        assert send("header " + bad) == 0
    fake.held = lambda plan: None                   # an engine that says nothing
    assert send("header none") == 0
    fake.held = lambda plan: harness.held_hex([s["kind"] != "dynamic"
                                               for s in plan["segments"]])
    assert send("header good") == 0
    assert send("header after") >= 500


def test_with_redis_the_engines_announcements_record_holders(procs, logdir):
    """An engine's "add" event on pic:events records it as a holder, even of a
    segment whose plans it refused."""
    from tests.support.redis import redis_raw as redis_cmd
    from tests.support.gateway import xxh128_key
    red = procs.redis()
    fake = procs._add(harness.FakeBackend("busy", name="fa"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"], cdc="512 1024 4096",
                              http=f"pic_redis 127.0.0.1:{red.port};"))
    harness.wait_for(lambda: all(e["id"] for e in gw_status(ngx)["engines"]), timeout=5,
                     what="engine ids from probes")
    harness.wait_for(lambda: numsub(red.port) == 1, timeout=5, what="a subscriber")
    d = doc(73, 400)
    key = xxh128_key(b"m", b"", d.encode(), logdir)

    def send(head):
        code, _, hit = send_doc(ngx, head, d)
        return code, hit

    assert send("header one") == (429, 0)
    assert send("header two") == (429, 0), "a plan naming fa is not fa's confirmation"
    assert redis_cmd(red.port, "PUBLISH", "pic:events", f"add fa {key}") == b":1\r\n"
    harness.wait_for(lambda: gw_status(ngx)["redis"]["events"] == 1, timeout=5,
                     what="announcement applied")
    assert send("header three") == (429, len(d))


# --- 7. bodies parsed, rendered and keyed off the event loop -------------------------


def test_large_bodies_are_keyed_on_the_thread_pool_as_on_the_loop(procs):
    """pic_thread_pool: a body of min= bytes or more is parsed, rendered, cut
    and keyed on a thread; the plan is the one the event loop makes (same
    segments, same keys), a bad body the same 400, a small body stays on the
    loop."""
    fake = procs._add(harness.FakeBackend("capture"))
    threaded = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"],
                                   loc="pic_thread_pool default min=16k;"), name="threaded")
    loop = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]), name="loop")
    docs = [doc(500 + i, 20000) for i in range(10)]
    body = {"model": "m", "max_tokens": 1, "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": MARK.join(docs + ["which document?"])}]}
    plans = []
    for ngx in (threaded, loop):
        code, _, raw = harness.http("POST", ngx.url + "/v1/chat/completions", body=body)
        assert code == 200, raw
        plan = json.loads(fake.bodies[-1])["pic"]
        plans.append([(s["key"], s["bytes"], s["kind"]) for s in plan["segments"]])
    assert len(plans[0]) > 10 and plans[0] == plans[1]
    assert gw_status(threaded)["requests"]["offloaded"] == 1
    assert gw_status(loop)["requests"]["offloaded"] == 0
    bad = b'{"model": "m", "messages": [' + b'{"role": "user", "content": "x"},' * 800 + b"]"
    answers = []
    for ngx in (threaded, loop):
        code, _, raw = harness.http("POST", ngx.url + "/v1/chat/completions", body=bad)
        assert code == 400, raw
        answers.append(json.loads(raw)["error"])
    assert answers[0] == answers[1]
    assert gw_status(threaded)["requests"]["offloaded"] == 2
    code, _, _ = harness.http("POST", threaded.url + "/v1/chat/completions", body={
        "model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
    assert code == 200
    assert gw_status(threaded)["requests"]["offloaded"] == 2, "a small body stays on the loop"


def test_clients_that_hang_up_while_their_body_is_on_the_thread_pool(procs):
    """Many clients send a large body and hang up at once, while it is parsed,
    cut and keyed on the thread pool (r->main->blocked): every request still
    ends and is logged once, the engine's in-flight count returns to 0, no
    worker dies, the next request is served, and the workers exit at teardown
    with no socket left open (an [alert] would fail the test)."""
    import socket
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"],
                              loc="pic_thread_pool default min=16k;"))
    pids = sorted(ngx.workers())
    n = 40
    for i in range(n):
        docs = [f"part {j} of {i}: " + doc(700 + i, 2000) * 15 for j in range(8)]
        req = json.dumps({"model": "m", "max_tokens": 1, "messages": [
            {"role": "user", "content": MARK.join(docs + ["which one?"])}]}).encode()
        s = socket.create_connection(("127.0.0.1", ngx.port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(req), req))
        s.close()                   # the body is sent whole, then FIN
    harness.wait_for(lambda: len(access_lines(ngx)) == n, timeout=60, what="every request ended")
    assert {r["status"] for r in access_lines(ngx)} <= {"200", "499"}, access_lines(ngx)
    st = gw_status(ngx)
    assert st["requests"]["offloaded"] == n
    harness.wait_for(lambda: gw_status(ngx)["engines"][0]["inflight"] == 0, timeout=10,
                     what="the engine's in-flight count back to 0")
    assert sorted(ngx.workers()) == pids, "a worker died"
    body = {"model": "m", "max_tokens": 1, "messages": [
        {"role": "user", "content": MARK.join([doc(999, 2000) * 15, "q"])}]}
    code, _, raw = harness.http("POST", ngx.url + "/v1/chat/completions", body=body)
    assert code == 200, raw
    assert gw_status(ngx)["requests"]["offloaded"] == n + 1


def h2_frame(kind, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) \
        + stream.to_bytes(4, "big") + payload


def hpack_literal(name, value):
    """A header as an HPACK literal without indexing, new name, no Huffman
    (RFC 7541 6.2.2; lengths below 127)."""
    name, value = name.encode(), value.encode()
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def test_http2_clients_that_hang_up_while_their_bodies_are_on_the_thread_pool(procs):
    """HTTP/2: each connection sends ten streams with bodies for the thread
    pool, then ends the connection.  nginx marks every stream's connection
    as failed (c->error) at once, also those whose body is still on a
    thread: each ends when its task comes back (the terminated-while-
    threaded path), is logged once, gives the engine's in-flight count
    back; no worker dies and no socket is left at exit."""
    import socket
    fake = procs._add(harness.FakeBackend("capture"))
    conf = gw_conf([f"127.0.0.1:{fake.port}"], loc="pic_thread_pool default min=16k;")
    h2_port = harness.free_port()
    ngx = procs.nginx(conf.replace("listen 127.0.0.1:$PORT;", "listen 127.0.0.1:$PORT; "
                                   f"listen 127.0.0.1:{h2_port} http2;"))
    pids = sorted(ngx.workers())
    conns, streams = 24, 10
    for c in range(conns):
        s = socket.create_connection(("127.0.0.1", h2_port), timeout=30)
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b""))
        # wait for nginx's connection window update (it opens the window
        # past 64 KB) before sending 10 x 48 KB
        data = b""
        while True:
            while len(data) < 9 or len(data) < 9 + int.from_bytes(data[:3], "big"):
                data += s.recv(65536)
            n, kind, sid = int.from_bytes(data[:3], "big"), data[3], \
                int.from_bytes(data[5:9], "big")
            data = data[9 + n:]
            if kind == 8 and sid == 0:
                break
        out = b""
        for k in range(streams):
            body = json.dumps({"model": "m", "max_tokens": 1, "messages": [
                {"role": "user", "content": MARK.join(
                    [f"conn {c} stream {k} " + doc(800 + k, 2000) * 22, "q"])}]}).encode()
            assert 16384 < len(body) < 65000
            hdrs = b"".join(hpack_literal(n, v) for n, v in (
                (":method", "POST"), (":scheme", "http"), (":path", "/v1/chat/completions"),
                (":authority", "x"), ("content-type", "application/json"),
                ("content-length", str(len(body)))))
            sid = 2 * k + 1
            out += h2_frame(1, 0x4, sid, hdrs) + h2_frame(0, 0x1, sid, body)
        s.sendall(out)
        s.shutdown(socket.SHUT_WR)          # the client is gone
        while s.recv(65536):                # nginx closes once every stream ended
            pass
        s.close()
    total = conns * streams

    def ended():
        # every /v1 stream's line, planned or not (one that ended while on
        # the thread was never planned); nothing else is logged meanwhile
        import os
        with open(os.path.join(ngx.prefix, "logs", "pic.log")) as f:
            return [line.split()[0] for line in f if not line.startswith("204 ")]

    harness.wait_for(lambda: len(ended()) == total, timeout=60, what="every stream ended")
    assert set(ended()) <= {"200", "499"}
    # how many bodies reached the thread pool before their stream was failed
    # depends on when nginx read the end of the connection: at most all
    offloaded = gw_status(ngx)["requests"]["offloaded"]
    assert offloaded <= total
    harness.wait_for(lambda: gw_status(ngx)["engines"][0]["inflight"] == 0, timeout=10,
                     what="the engine's in-flight count back to 0")
    assert sorted(ngx.workers()) == pids, "a worker died"
    body = json.dumps({"model": "m", "max_tokens": 1, "messages": [
        {"role": "user", "content": MARK.join([doc(999, 2000) * 15, "q"])}]})
    out = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "-o", "/dev/null",
                          "-w", "%{http_code}", "-H", "Content-Type: application/json",
                          "--data-binary", "@-",
                          f"http://127.0.0.1:{h2_port}/v1/chat/completions"],
                         input=body, capture_output=True, text=True, timeout=30)
    assert out.stdout == "200", out
    assert gw_status(ngx)["requests"]["offloaded"] == offloaded + 1


def test_clients_that_hang_up_while_redis_answers_their_lookup(procs):
    """The Redis-lookup wait (ngx_http_pic_lookup_handler): Redis is frozen
    (SIGSTOP: a real redis-server that answers nothing until SIGCONT, where
    DEBUG SLEEP and CLIENT PAUSE end on their own clock and Redis 7.0 blocks
    CLIENT UNPAUSE itself under PAUSE ALL), HTTP/1.1 clients and HTTP/2
    connections send requests whose segments the index does not know; once
    the gateway has sent every lookup they all hang up; once nginx has
    failed every HTTP/2 stream (c->error), Redis answers.  Every request
    ends (an HTTP/2 stream failed during the wait without reaching the
    engine), the engine's in-flight count is back to 0, no worker died, the
    next request is served and no socket is left at exit (teardown)."""
    import os
    import signal
    import socket
    fake = procs._add(harness.FakeBackend("capture"))
    redis = procs.redis()
    conf = gw_conf([f"127.0.0.1:{fake.port}"], loc="pic_redis_timeout 120s;",
                   http=f"pic_redis 127.0.0.1:{redis.port};")
    h2_port = harness.free_port()
    conf = conf.replace("location /pic/status { pic_status; }",     # polled: not logged
                        "location /pic/status { pic_status; access_log off; }")
    assert "access_log off" in conf
    ngx = procs.nginx(conf.replace("listen 127.0.0.1:$PORT;", "listen 127.0.0.1:$PORT; "
                                   f"listen 127.0.0.1:{h2_port} http2;"))
    harness.wait_for(lambda: gw_status(ngx)["redis"]["up_workers"] == 2, timeout=20,
                     what="both workers connected to redis")
    pids = sorted(ngx.workers())
    before = gw_status(ngx)["redis"]["lookups"]
    n1, conns, streams = 16, 6, 8

    def body(tag):
        return json.dumps({"model": "m", "max_tokens": 1, "messages": [
            {"role": "user", "content": MARK.join([f"{tag} " + doc(len(tag), 1200), "q"])}]
        }).encode()

    def h2_ends():
        # the HTTP/2 connections nginx saw end ("recv() failed (104: ...)" or
        # "client prematurely closed connection"), by connection number
        import re
        with open(ngx.error_log) as f:
            return len({m.group(1) for m in re.finditer(
                r"\] \d+#\d+: \*(\d+) [^\n]*while processing HTTP/2 connection", f.read())})

    os.kill(redis.popen.pid, signal.SIGSTOP)
    try:
        h1 = []
        for i in range(n1):
            s = socket.create_connection(("127.0.0.1", ngx.port), timeout=30)
            b = body(f"http1 client {i}")
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                      % len(b) + b)
            h1.append(s)
        h2 = []
        for c in range(conns):
            s = socket.create_connection(("127.0.0.1", h2_port), timeout=30)
            out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b"")
            for k in range(streams):
                b = body(f"http2 conn {c} stream {k}")
                hdrs = b"".join(hpack_literal(n, v) for n, v in (
                    (":method", "POST"), (":scheme", "http"), (":path", "/v1/chat/completions"),
                    (":authority", "x"), ("content-type", "application/json"),
                    ("content-length", str(len(b)))))
                out += h2_frame(1, 0x4, 2 * k + 1, hdrs) + h2_frame(0, 0x1, 2 * k + 1, b)
            s.sendall(out)
            h2.append(s)
        total = n1 + conns * streams
        harness.wait_for(lambda: gw_status(ngx)["redis"]["lookups"] - before == total,
                         timeout=30, what="every lookup sent to the frozen redis")
        assert h2_ends() == 0
        for s in h1 + h2:
            s.close()                       # every client is gone
        # nginx has read the end of each HTTP/2 connection (and failed its streams)
        harness.wait_for(lambda: h2_ends() == conns, timeout=30,
                         what="nginx saw every HTTP/2 connection end")
    finally:
        os.kill(redis.popen.pid, signal.SIGCONT)

    def ended():
        with open(os.path.join(ngx.prefix, "logs", "pic.log")) as f:
            return [line.split()[0] for line in f if not line.startswith("204 ")]

    harness.wait_for(lambda: len(ended()) == total, timeout=60, what="every request ended")
    assert set(ended()) <= {"200", "499"}, ended()
    # the failed HTTP/2 streams ended in the lookup handler, never reaching the engine
    assert not any(b"http2 conn" in b for b in fake.bodies)
    harness.wait_for(lambda: gw_status(ngx)["engines"][0]["inflight"] == 0, timeout=10,
                     what="the engine's in-flight count back to 0")
    assert sorted(ngx.workers()) == pids, "a worker died"
    code, _, raw = harness.http("POST", ngx.url + "/v1/chat/completions", body("after"))
    assert code == 200, raw


# --- Redis AUTH (requirepass, ACL users) ---------------------------------------------


def secret_in(logdir, name, text):
    import os
    path = os.path.join(logdir, name)
    with open(path, "w") as f:
        f.write(text + "\n")
    return path


def redis_auth_cmd(port, password, *args, user=None):
    """One command after AUTH on a fresh connection: its reply, decoded (RESP)."""
    import socket

    def enc(*a):
        return b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x)
                                             for x in (y.encode() for y in a))

    def read(f):
        line = f.readline()[:-2]
        kind, rest = line[:1], line[1:]
        if kind == b"*":
            return [read(f) for _ in range(int(rest))]
        if kind == b"$":
            return None if int(rest) < 0 else f.read(int(rest) + 2)[:-2]
        if kind == b":":
            return int(rest)
        return line

    auth = ("AUTH", user, password) if user else ("AUTH", password)
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(enc(*auth) + enc(*args))
        f = s.makefile("rb")
        assert read(f) == b"+OK"
        return read(f)


def file_text(path):
    with open(path, errors="replace") as f:
        return f.read()


def test_gateway_and_engine_authenticate_to_redis(procs, logdir):
    """Redis with requirepass and an ACL user limited to pic:* keys and
    channels: the engine (--redis-user, --redis-password-file) registers and
    announces what it pools, the gateway (pic_redis ... user= password_file=)
    looks up and its subscriber hears the announcements; the password is in
    no log and no status page."""
    import secrets
    pw = "pic-" + secrets.token_hex(12)
    red = procs.redis(password="admin-" + secrets.token_hex(12),
                      extra=["--user", "pic", "on", ">" + pw, "~pic:*", "&pic:*", "+@all"])
    path = secret_in(logdir, "redis.pw", pw)
    e1 = procs.engine(name="e1", model=MODEL, extra=[
        "--threads", "1", "--cache-mode", "pic", "--redis", f"127.0.0.1:{red.port}",
        "--redis-user", "pic", "--redis-password-file", path])
    ngx = procs.nginx(gw_conf([addr(e1)], cdc="512 1024 4096",
                              http=f"pic_redis 127.0.0.1:{red.port} user=pic "
                                   f"password_file={path};"))
    harness.wait_for(lambda: status(e1)["registry"]["connected"], timeout=10,
                     what="engine registered")
    harness.wait_for(lambda: gw_status(ngx)["redis"]["up"] and numsub(red.port, red.password) == 1,
                     timeout=10, what="gateway connected and subscribed")
    assert b"e1" in redis_auth_cmd(red.port, pw, "SMEMBERS", "pic:engines", user="pic")
    body = {"model": "m", "max_tokens": 1, "temperature": 0,
            "prompt": MARK.join(["header", doc(95, 2000), "q"])}
    code, _, raw = harness.http("POST", ngx.url + "/v1/completions", body, timeout=60)
    assert code == 200, raw
    harness.wait_for(lambda: gw_status(ngx)["redis"]["events"] > 0, timeout=10,
                     what="the engine's add event through the authenticated subscriber")
    st = gw_status(ngx)["redis"]
    assert st["lookups"] >= 1 and st["errors"] == 0
    reg = status(e1)["registry"]
    assert reg["auth"] is True and reg["auth_failures"] == 0
    for text in [json.dumps(gw_status(ngx)), json.dumps(status(e1)),
                 file_text(ngx.error_log), file_text(e1.log_path)]:
        assert pw not in text


@pytest.mark.allow_log(r"refused the credentials of pic_redis|wants a password \(NOAUTH")
def test_a_wrong_or_missing_redis_password_is_an_error_and_requests_complete(procs, logdir):
    """A wrong password (gateway and engine) and none where Redis wants one:
    each says so once in its log (Redis' reason, never the password), stays
    off Redis, and requests are still answered."""
    red = procs.redis(password="the-right-one")
    wrong = secret_in(logdir, "wrong.pw", "not-the-right-one")
    e1 = procs.engine(name="e1", model=MODEL, extra=[
        "--threads", "1", "--redis", f"127.0.0.1:{red.port}", "--redis-password-file", wrong])
    e2 = procs.engine(name="e2", model=MODEL, extra=[
        "--threads", "1", "--redis", f"127.0.0.1:{red.port}"])
    bad = procs.nginx(gw_conf([addr(e1), addr(e2)],
                              http=f"pic_redis 127.0.0.1:{red.port} password_file={wrong};"),
                      name="wrong")
    none = procs.nginx(gw_conf([addr(e1), addr(e2)], http=f"pic_redis 127.0.0.1:{red.port};"),
                       name="none")
    for proc, line in ((bad, "refused the credentials of pic_redis: WRONGPASS"),
                       (none, "wants a password (NOAUTH"),
                       (e1, "refused the credentials (WRONGPASS"),
                       (e2, "wants a password (NOAUTH")):
        log = proc.error_log if proc in (bad, none) else proc.log_path
        harness.wait_for(lambda: line in file_text(log), timeout=10, what=line)
    for ngx in (bad, none):
        body = {"model": "m", "max_tokens": 1, "prompt": MARK.join(["h", doc(96), "q"])}
        code, _, raw = harness.http("POST", ngx.url + "/v1/completions", body, timeout=60)
        assert code == 200, raw
        assert gw_status(ngx)["redis"]["up"] is False
        text = file_text(ngx.error_log)
        assert "not-the-right-one" not in text and "the-right-one" not in text
    assert status(e1)["registry"]["auth_failures"] >= 1
    assert not status(e1)["registry"]["connected"] and not status(e2)["registry"]["connected"]
    assert "not-the-right-one" not in file_text(e1.log_path)
