"""Engines as a pool (DESIGN §3.5): a combine node executes the gateway's plan,
pulling held segments from holders and having cold ones prefilled by their
assigned workers, which stream frames back.  The oracle for every case is
the same plan executed by a fresh engine alone (no holders, no workers): the
entries are the same computation, so the greedy answer must be identical —
also when a worker is dead, stalls past its deadline, dies mid-stream, or a
holder sends a corrupt frame (the combine node then computes the segment
itself and counts the event in /status).  Fake peers are used only for what
a real engine cannot be made to do (a corrupt frame, a connection cut after
the first record)."""
import json
import os
import signal
import socket
import threading
import time
import urllib.request

import pytest

from tests import harness
from tests.support.pool import DOC_A, DOC_B
from tests.support.pool import FakePeer, TINY, addr, ask, assign, base_plan, body_with, engine, oracle, status  # noqa: F401


pytestmark = pytest.mark.skipif(not os.path.isdir(TINY), reason="fixture models missing")


def test_worker_prefills_and_streams_entries(procs, oracle):
    e1, e2 = engine(procs, "e1"), engine(procs, "e2")
    text, usage = ask(e1, assign(base_plan(), worker=addr(e2)))
    assert text == oracle
    s1, s2 = status(e1)["cache"], status(e2)["cache"]
    assert s2["prefills_served"] == 1 and s2["frames_sent"] == 3
    assert s1["segment_peer"] == 3 and s1["peer_failures"] == 0
    assert s1["segment_built"] == 1, "only the prefix was built on the combine node"
    # cold work done by a worker is not a cache hit
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    # the combine node keeps what it received: the next request hits locally
    text2, usage2 = ask(e1, base_plan())
    assert text2 == oracle and usage2["prompt_tokens_details"]["cached_tokens"] > 300


def test_holder_is_pulled_and_counted_as_cached(procs, oracle):
    e1, e2 = engine(procs, "e1"), engine(procs, "e2")
    assert ask(e2, base_plan())[0] == oracle           # e2 now holds the documents
    text, usage = ask(e1, assign(base_plan(), holder=addr(e2)))
    assert text == oracle
    assert status(e2)["cache"]["segments_served"] == 3
    st = status(e1)["cache"]
    assert st["segment_peer"] == 3 and st["peer_failures"] == 0
    assert usage["prompt_tokens_details"]["cached_tokens"] > 300


def test_dead_worker_costs_nothing_but_the_attempt(procs, oracle):
    e1, e2 = engine(procs, "e1"), engine(procs, "e2")
    dead = addr(e2)
    e2.kill()
    text, _ = ask(e1, assign(base_plan(), worker=dead))
    assert text == oracle
    st = status(e1)["cache"]
    assert st["peer_failures"] == 1 and st["segment_remote_failed"] == 3
    assert st["segment_built"] == 4


@pytest.mark.allow_log("peer")
def test_stalled_worker_hits_the_deadline(procs, oracle):
    e1, e2 = engine(procs, "e1"), engine(procs, "e2")
    os.kill(e2.popen.pid, signal.SIGSTOP)
    try:
        t0 = time.time()
        text, _ = ask(e1, assign(base_plan(), worker=addr(e2)))
        took = time.time() - t0
    finally:
        os.kill(e2.popen.pid, signal.SIGCONT)
    assert text == oracle
    assert 1.4 < took < 10, took
    assert status(e1)["cache"]["peer_failures"] == 1


def test_exact_first_composes_worker_entries_past_the_first_composed_segment(procs):
    """Exact first (DESIGN §3.5): the combine node recomputes exactly up to
    the first segment it composes from an entry that existed before the
    request (here DOC_A, pulled from a holder); a worker's fresh entries
    past it (DOC_B, DOC_C) are waited for and composed, as the gateway
    plans them.  Oracle: the same plan with all three pulled from the
    holder, which composes the same entries (same answer, same PIC
    tokens)."""
    holder, worker = engine(procs, "holder"), engine(procs, "worker")
    ask(holder, base_plan())                            # holds DOC_A, DOC_B, DOC_C
    ref = engine(procs, "ref", ("--cache-mode", "exact"))
    text_ref, usage_ref = ask(ref, assign(base_plan(), holder=addr(holder)))
    pic_ref = usage_ref["pic"]["pic_tokens"]
    assert pic_ref > 300, usage_ref

    e1 = engine(procs, "e1", ("--cache-mode", "exact"))
    plan = assign(base_plan(), worker=addr(worker))
    first = next(s for s in plan["segments"] if s["kind"] == "pic")
    first["worker"], first["holders"] = None, [addr(holder)]
    text, usage = ask(e1, plan)
    assert text == text_ref
    assert usage["pic"]["pic_tokens"] == pic_ref, usage
    assert status(worker)["cache"]["prefills_served"] == 1
    assert status(worker)["cache"]["frames_sent"] == 2
    st = status(e1)["cache"]
    assert st["segment_peer"] == 3 and st["peer_failures"] == 0


def test_corrupt_frame_from_a_holder_is_recomputed(procs, oracle):
    e1, e2 = engine(procs, "e1"), engine(procs, "e2")
    ask(e2, base_plan())

    def corrupt(h):
        # the real holder's frame with one payload bit flipped
        with urllib.request.urlopen(f"http://127.0.0.1:{e2.port}{h.path}") as r:
            frame = bytearray(r.read())
        frame[len(frame) // 2] ^= 0x04
        h.send_response(200)
        h.send_header("Content-Length", str(len(frame)))
        h.end_headers()
        h.wfile.write(bytes(frame))

    fake = FakePeer(corrupt)
    try:
        text, usage = ask(e1, assign(base_plan(), holder=f"127.0.0.1:{fake.port}"))
    finally:
        fake.close()
    assert text == oracle
    assert len(fake.requests) == 3
    st = status(e1)["cache"]
    assert st["segment_remote_failed"] == 3 and st["segment_peer"] == 0
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0


def test_worker_dying_mid_stream(procs, oracle):
    """The first record arrives, then the connection is cut: the first
    segment is used, the other two are computed by the combine node."""
    e1, e2 = engine(procs, "e1"), engine(procs, "e2")

    def die(h):
        req = urllib.request.Request(f"http://127.0.0.1:{e2.port}/v1/pic/prefill",
                                     data=h.body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req) as r:
            data = r.read()
        n = int.from_bytes(data[8:16], "little")
        first = data[:16 + n]
        h.send_response(200)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.write(b"%x\r\n" % len(first) + first + b"\r\n")
        h.wfile.flush()
        h.connection.shutdown(socket.SHUT_RDWR)

    fake = FakePeer(die)
    try:
        text, _ = ask(e1, assign(base_plan(), worker=f"127.0.0.1:{fake.port}"))
    finally:
        fake.close()
    assert text == oracle
    st = status(e1)["cache"]
    assert st["segment_peer"] == 1 and st["segment_remote_failed"] == 2
    assert st["peer_failures"] == 1


def test_peer_endpoints_refuse_what_they_cannot_serve(procs):
    e2 = engine(procs, "e2")
    fp = status(e2)["model"]["fingerprint"]
    code, _, raw = harness.http("GET", e2.url + "/v1/pic/segments/" + "0" * 32
                                + f"?bytes=10&fingerprint={fp}")
    assert code == 404 and json.loads(raw)["error"]["message"]
    code, _, _ = harness.http("GET", e2.url + "/v1/pic/segments/xyz?bytes=10")
    assert code == 400
    code, _, _ = harness.http("POST", e2.url + "/v1/pic/prefill", b"{nope")
    assert code == 400
    seg = {"key": harness.segment_key(fp, "", b"hello"), "bytes": 5, "kind": "pic",
           "text": "hello"}
    code, _, _ = harness.http("POST", e2.url + "/v1/pic/prefill",
                              {"fingerprint": "0" * 16, "segments": [seg]})
    assert code == 409
    bad = dict(seg, bytes=6)
    code, _, _ = harness.http("POST", e2.url + "/v1/pic/prefill",
                              {"fingerprint": fp, "segments": [bad]})
    assert code == 400
    # a short segment cannot be built: its record says so (length 0)
    code, h, raw = harness.http("POST", e2.url + "/v1/pic/prefill",
                                {"fingerprint": fp, "segments": [seg]})
    assert code == 200 and h["Content-Type"] == "application/x-pic-frames"
    assert raw[:4] == b"PICR" and int.from_bytes(raw[8:16], "little") == 0
    assert len(raw) == 16


def test_a_prefilled_document_takes_the_document_seam(procs):
    """A remote prefill's "doc": true (a client-delimited document) builds the
    entry with the worker's document seam width (the frame's w), the others
    with its seam; "doc" must be a boolean."""
    e = procs.engine(model=TINY, name="wd", extra=(
        "--threads", "1", "--cache-mode", "pic", "--seam", "16", "--seam-doc", "0"))
    fp = status(e)["model"]["fingerprint"]
    text = DOC_A * 4

    def frame_w(extra):
        seg = dict({"key": harness.segment_key(fp, "", text.encode()),
                    "bytes": len(text.encode()), "kind": "pic", "text": text}, **extra)
        code, _, raw = harness.http("POST", e.url + "/v1/pic/prefill",
                                    {"fingerprint": fp, "segments": [seg]})
        assert code == 200, raw[:200]
        n = int.from_bytes(raw[8:16], "little")
        assert raw[:4] == b"PICR" and n > 0 and raw[16:20] == b"PICF"
        return int.from_bytes(raw[16 + 52:16 + 56], "little"), \
            int.from_bytes(raw[16 + 56:16 + 60], "little")
    assert frame_w({"doc": True}) == (3, 0)         # head max(0, conv 4 - 1), no tail
    text = DOC_B * 4                                 # another key: not the pooled entry
    assert frame_w({}) == (16, 16)
    seg = {"key": harness.segment_key(fp, "", b"hello"), "bytes": 5, "kind": "pic",
           "text": "hello", "doc": "yes"}
    code, _, raw = harness.http("POST", e.url + "/v1/pic/prefill",
                                {"fingerprint": fp, "segments": [seg]})
    assert code == 400 and b"doc" in raw


def test_shutdown_with_a_fetch_in_flight(procs):
    """SIGTERM while the combine node waits for a stalled worker: a clean exit
    (no leak or sanitizer report in the log, exit status 0)."""
    e1, e2 = engine(procs, "e1", ("--peer-timeout-ms", "60000")), engine(procs, "e2")
    os.kill(e2.popen.pid, signal.SIGSTOP)
    def request():
        try:
            harness.http("POST", e1.url + "/v1/chat/completions",
                         body_with(assign(base_plan(), worker=addr(e2))), timeout=30)
        except OSError:
            pass                        # the server went away: expected

    try:
        t = threading.Thread(target=request)
        t.start()
        harness.wait_for(lambda: status(e1)["cache"]["peer_fetches"] == 1, what="fetching")
        e1.stop()
        assert e1.popen.returncode == 0
        t.join(30)
    finally:
        os.kill(e2.popen.pid, signal.SIGCONT)
