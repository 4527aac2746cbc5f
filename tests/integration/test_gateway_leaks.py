"""test_gateway_leaks.py — a gateway worker holds no more after 10·N requests of
a path than after N: the per-request leak check.

One nginx worker in front of a real pic-engine (the segment sizes derived from
the engine's break-even, as by default) with the Redis index (a pipelined
lookup every planned request), probes running all along.  Each
path is driven W times to warm the worker up (pools, the allocator's free
lists, the derived CDC tables, keepalive connections), then N times, then 9·N
more; the worker's anonymous resident memory (RssAnon) is read after each
stage.  A path that keeps L bytes a request grows it by 9·N·L between the
last two readings; the bound is SLACK, what the allocator may still take
from the system without a leak (glibc's heap top moves in 128 KiB steps,
M_TOP_PAD; nginx's request pools are 4 KiB pages; measured here: at most
20 KiB on any path), so at N = 100 anything from ~300 bytes a request
fails.  LeakSanitizer (make test-asan) catches
lost memory at exit on the same paths; this check also catches memory that
stays reachable and grows (a list never pruned), and runs in make test.

Negative control (by hand, not kept: it needs a leaking build): a 600-byte
malloc a request in the body handler failed the check on every path that
reaches it, at N = 60 already (chat, stream, thread pool, bad request;
bad JSON grew 196 KiB, under the bound at that N).  Reloads: the master after
R and 10·R reloads, the same bound.
"""
import json
import os
import time

import pytest

from tests import harness
from tests.support.gateway import MARK, doc, gw_conf

TINY = os.path.join(harness.ROOT, "tests", "fixtures", "models", "tiny-qwen35")
WARM, N = 20, 100
SLACK = 256 * 1024          # two of glibc's 128 KiB heap-top steps


def _rss_anon(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon for pid %d" % pid)


def _chat(content, **kw):
    return dict({"model": "m", "max_tokens": 1, "temperature": 0, "messages": [
        {"role": "system", "content": "You answer from the documents."},
        {"role": "user", "content": content}]}, **kw)


# path -> (method, url path, body, the status it must answer)
PATHS = {
    "chat": ("POST", "/v1/chat/completions",
             _chat(MARK.join([doc(1, 900), doc(2, 900), "which document?"])), 200),
    "stream": ("POST", "/v1/chat/completions",
               _chat(doc(3, 700) + " and?", stream=True), 200),
    "thread pool": ("POST", "/v1/chat/completions",
                    _chat(MARK.join([doc(10 + i, 3000) for i in range(8)] + ["which?"])), 200),
    "bad json": ("POST", "/v1/chat/completions", b'{"model": "m", "messages": [', 400),
    "bad request": ("POST", "/v1/chat/completions", {"model": "m", "messages": "no"}, 400),
    "status": ("GET", "/pic/status", None, 200),
    "prometheus": ("GET", "/pic/status?format=prometheus", None, 200),
    "passthrough": ("GET", "/plain/v1/models", None, 200),
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    if harness.ASAN:
        pytest.skip("ASan's quarantine holds freed memory: LeakSanitizer checks these "
                    "paths in this build")
    logdir = str(tmp_path_factory.mktemp("leaks"))
    red = harness.Redis(logdir)
    eng = harness.Engine(logdir, name="e", model=TINY, extra=[
        "--threads", "1", "--redis", f"127.0.0.1:{red.port}"])
    ngx = None
    try:
        ngx = harness.Nginx(logdir, gw_conf(
            [f"127.0.0.1:{eng.port}"], cdc=None, min_segment=None,
            loc="pic_thread_pool default min=16k; client_body_buffer_size 64k;",
            http=f"pic_health_check interval=200ms; pic_redis 127.0.0.1:{red.port};"),
            workers=1)
        harness.wait_for(lambda: json.loads(harness.http("GET", ngx.url + "/pic/status")[2])
                         ["engines"][0].get("break_even_tokens"), timeout=10,
                         what="the probe read the engine's break-even")
        yield ngx
    finally:
        bad = []
        for p in (ngx, eng, red):
            if p is not None:
                p.stop()
                bad += p.bad_lines()
        assert not bad, "\n".join(bad[:20])


def _drive(ngx, path, times):
    method, url, body, want = PATHS[path]
    for _ in range(times):
        code, _, raw = harness.http(method, ngx.url + url, body=body, timeout=30)
        assert code == want, (path, code, raw[:300])


@pytest.mark.parametrize("path", list(PATHS))
def test_a_worker_holds_no_more_after_ten_times_the_requests(gateway, path):
    (pid,) = gateway.workers()
    _drive(gateway, path, WARM)
    _drive(gateway, path, N)
    time.sleep(0.1)
    after_n = _rss_anon(pid)
    _drive(gateway, path, 9 * N)
    time.sleep(0.1)
    after_10n = _rss_anon(pid)
    grown = after_10n - after_n
    assert grown <= SLACK, "%s: the worker grew %d bytes over %d more requests (%.0f a request)" % (
        path, grown, 9 * N, grown / (9 * N))


RELOADS = 5


def test_the_master_holds_no_more_after_ten_times_the_reloads(gateway):
    """A reload builds a new configuration cycle in the master (the module's
    directives, zones reused, the derived pools) and frees the old one; after
    10·R reloads the master holds no more than after R (the same bound: a
    cycle kept per reload would grow it by its pools, well above SLACK over
    9·R reloads).  Measured: -4 KiB over 45 reloads; by hand, a 16 KiB malloc
    per configuration (init_main_conf) grew it 720 KiB and failed."""
    pid = gateway.popen.pid
    for _ in range(RELOADS):
        gateway.reload()
    after_r = _rss_anon(pid)
    for _ in range(9 * RELOADS):
        gateway.reload()
    _drive(gateway, "chat", 1)
    grown = _rss_anon(pid) - after_r
    assert grown <= SLACK, "the master grew %d bytes over %d more reloads" % (
        grown, 9 * RELOADS)
