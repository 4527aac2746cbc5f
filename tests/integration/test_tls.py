"""TLS inside the pool: engines serve TLS with
--tls-cert/--tls-key and accept only clients with a pool certificate
(--tls-client-ca); pulls and remote prefills between engines are TLS clients
with the pool certificate; the gateway reaches engines with nginx's own
proxy_ssl_* and probes them with pic_probe_ssl.  Certificates are made at
test time with the openssl CLI; Python's ssl module is the independent
client.  The answers are checked against one engine computing alone
(test_server_pool's oracle)."""
import json
import os
import socket

import pytest

from tests import harness
from tests.support.gateway import MARK, doc, gw_conf
from tests.support.gateway import gw_status, signed
from tests.support.pool import TINY, addr, assign, base_plan, body_with, oracle  # noqa: F401
from tests.support.pki import Pki  # noqa: F401


@pytest.fixture
def pki(logdir):
    d = os.path.join(logdir, "pki")
    os.makedirs(d, exist_ok=True)
    return Pki(d)


def tls_engine(procs, pki, name, extra=(), ca="pool-ca"):
    """An engine serving TLS with the pool certificate `name`.  The peer timeout
    stays the engine's default (30 s): a remote prefill on a loaded machine may
    take seconds, and the refusals these tests expect fail at the handshake."""
    return procs.engine(model=TINY, name=name, tls=pki.client("probe-" + name), extra=(
        "--threads", "1", "--cache-mode", "pic")
        + pki.engine_args(name, ca) + tuple(extra))


def tls_status(e):
    code, _, raw = harness.http("GET", e.url + "/status", context=e.tls)
    assert code == 200, raw
    return json.loads(raw)


def test_tls_engines_prefill_and_pull_over_tls(procs, logdir, pki, oracle):
    """e1 has its documents prefilled by e2 and e4 pulls them from e2, all
    over TLS with pool certificates; an engine whose certificate is not
    signed by the pool CA is not a peer (e1 computes the segments itself)."""
    path, secret = harness.pool_secret(logdir)
    sec = ("--pool-secret-file", path)
    e1, e2 = tls_engine(procs, pki, "e1", sec), tls_engine(procs, pki, "e2", sec)
    body, hdrs = signed(secret, body_with(assign(base_plan(), worker=addr(e2))))
    code, _, raw = harness.http("POST", e1.url + "/v1/chat/completions", body, headers=hdrs,
                                timeout=60, context=e1.tls)
    assert code == 200 and json.loads(raw)["choices"][0]["message"]["content"] == oracle
    s1, s2 = tls_status(e1)["cache"], tls_status(e2)["cache"]
    assert s2["prefills_served"] == 1 and s2["frames_sent"] == 3
    assert s1["segment_peer"] == 3 and s1["peer_failures"] == 0

    e4 = tls_engine(procs, pki, "e4", sec)
    body, hdrs = signed(secret, body_with(assign(base_plan(), holder=addr(e2))))
    code, _, raw = harness.http("POST", e4.url + "/v1/chat/completions", body, headers=hdrs,
                                timeout=60, context=e4.tls)
    assert code == 200 and json.loads(raw)["choices"][0]["message"]["content"] == oracle
    assert tls_status(e4)["cache"]["segment_peer"] == 3
    assert tls_status(e2)["cache"]["segments_served"] == 3

    # a rogue engine (certificate of another CA; it would accept e5) is refused by e5
    trusting = pki.client("probe-rogue")
    trusting.load_verify_locations(pki.rogue_ca)      # Python may talk to it
    rogue = procs.engine(model=TINY, name="rogue", tls=trusting, extra=(
        "--threads", "1", "--cache-mode", "pic", "--tls-cert", pki.cert("rogue", "rogue-ca")[0],
        "--tls-key", os.path.join(pki.dir, "rogue.key"), "--tls-client-ca", pki.ca) + sec)
    e5 = tls_engine(procs, pki, "e5", sec)
    body, hdrs = signed(secret, body_with(assign(base_plan(), worker=addr(rogue))))
    code, _, raw = harness.http("POST", e5.url + "/v1/chat/completions", body, headers=hdrs,
                                timeout=60, context=e5.tls)
    assert code == 200 and json.loads(raw)["choices"][0]["message"]["content"] == oracle
    assert tls_status(e5)["cache"]["segment_remote_failed"] == 3
    assert tls_status(rogue)["cache"]["prefills_served"] == 0


def test_an_engine_refuses_clients_without_a_pool_certificate(procs, pki):
    e = tls_engine(procs, pki, "e1")
    for ctx in (pki.client(None), pki.client("rogue", "rogue-ca")):
        # the handshake or the first read fails: no HTTP answer at all
        with pytest.raises(OSError):
            harness.http("GET", e.url + "/v1/models", context=ctx, timeout=10)
    # plain HTTP to the TLS port: no HTTP answer, the connection is closed
    with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: e1\r\n\r\n")
        got = b""
        while True:
            try:
                chunk = s.recv(4096)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
        assert not got.startswith(b"HTTP/"), got[:80]
    # the engine still serves the pool
    code, _, raw = harness.http("GET", e.url + "/v1/models", context=e.tls)
    assert code == 200 and json.loads(raw)["data"], raw


def test_a_gateway_and_two_tls_engines_serve_a_pic_request_with_a_remote_segment(
        procs, logdir, pki):
    """nginx proxies with proxy_ssl_* and probes over TLS (the probes teach
    it the engines' ids and cache modes); a cold request's documents are
    prefilled by their rendezvous homes, so some land on the engine that is
    not the combine node: a remote prefill between TLS engines."""
    path, _ = harness.pool_secret(logdir)
    sec = ("--pool-secret-file", path)
    e1, e2 = tls_engine(procs, pki, "e1", sec), tls_engine(procs, pki, "e2", sec)
    gw_cert, gw_key = pki.cert("gateway")
    # segment sizes from the engines' break-even length (read by the TLS probes)
    conf = gw_conf([addr(e1), addr(e2)], cdc=None, min_segment=None, http=f"""
    pic_pool_secret_file {path};
    pic_probe_ssl on;
    pic_probe_ssl_certificate {gw_cert};
    pic_probe_ssl_certificate_key {gw_key};
    pic_probe_ssl_trusted_certificate {pki.ca};""", loc=f"""
            proxy_ssl_certificate {gw_cert};
            proxy_ssl_certificate_key {gw_key};
            proxy_ssl_trusted_certificate {pki.ca};
            proxy_ssl_verify on;
            proxy_ssl_name pic-pool;
            proxy_ssl_session_reuse on;""").replace("proxy_pass http://engines;",
                                                    "proxy_pass https://engines;")
    ngx = procs.nginx(conf)
    harness.wait_for(lambda: all(e["id"] and e["cache_mode"] == "pic" and e["healthy"]
                                 for e in gw_status(ngx)["engines"]),
                     timeout=20, what="engine ids and cache modes from TLS probes")
    served = 0
    for attempt in range(8):
        docs = [doc(100 + 10 * attempt + i, 400) for i in range(4)]
        body = {"model": "m", "max_tokens": 2, "temperature": 0,
                "messages": [{"role": "user", "content": MARK.join(docs + ["which?"])}]}
        code, _, raw = harness.http("POST", ngx.url + "/v1/chat/completions", body, timeout=60)
        assert code == 200, raw
        served = sum(tls_status(e)["cache"]["prefills_served"] for e in (e1, e2))
        if served:
            break
    assert served >= 1, "no document was prefilled by the other engine in 8 requests"
    st = [tls_status(e)["cache"] for e in (e1, e2)]
    assert sum(s["peer_frames"] for s in st) >= 1, st
    assert all(s["peer_failures"] == 0 and s["segment_remote_failed"] == 0 for s in st), st
    gw = gw_status(ngx)["engines"]
    assert all(g["probe_failures"] == 0 for g in gw), gw


def test_a_tls_client_that_hangs_up_stops_the_compute(procs, pki):
    """A non-streaming request whose TLS client sends close_notify and
    closes mid-generation is cancelled (the plain-socket peek would take the
    close_notify record for a pipelined request and generate to the end)."""
    e = tls_engine(procs, pki, "e1")
    body = json.dumps({"model": "m", "prompt": "Hello", "max_tokens": 30000,
                       "temperature": 0, "ignore_eos": True}).encode()
    raw = socket.create_connection(("127.0.0.1", e.port), timeout=30)
    s = pki.client("client").wrap_socket(raw, server_hostname="pic-pool")
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    harness.wait_for(lambda: tls_status(e)["scheduler"]["generated_tokens"] > 20,
                     what="tokens flowing")
    s.settimeout(0.5)
    try:
        s.unwrap()                  # sends close_notify; the engine does not answer it
    except (OSError, ValueError):
        pass
    s.close()                       # (wrap_socket detached raw: this is the FIN)
    harness.wait_for(lambda: tls_status(e)["scheduler"]["running"] == 0, what="released",
                     timeout=20)
    st = tls_status(e)
    assert st["scheduler"]["cancelled"] == 1 and st["http"]["disconnects"] == 1, st
    assert st["scheduler"]["generated_tokens"] < 30000


@pytest.mark.allow_log(r"is unhealthy \(the engine's certificate is not a pool certificate\)"
                       r"|no live upstreams|pic: no healthy engine")
def test_a_probe_that_does_not_trust_the_engine_keeps_it_out(procs, pki):
    """pic_probe_ssl_trusted_certificate names a CA the engine's certificate
    does not chain to: the probe fails (with that reason) and the engine is
    never in rotation, though it answers TLS."""
    e = tls_engine(procs, pki, "e1")
    gw_cert, gw_key = pki.cert("gateway")
    ngx = procs.nginx(gw_conf([addr(e)], http=f"""
    pic_probe_ssl on;
    pic_probe_ssl_certificate {gw_cert};
    pic_probe_ssl_certificate_key {gw_key};
    pic_probe_ssl_trusted_certificate {pki.rogue_ca};"""))
    harness.wait_for(lambda: gw_status(ngx)["engines"][0]["probe_failures"] >= 2, timeout=20,
                     what="failed probes")
    g = gw_status(ngx)["engines"][0]
    assert not g["healthy"] and g["id"] == "", g
    with open(ngx.error_log) as f:
        assert "the engine's certificate is not a pool certificate" in f.read()
