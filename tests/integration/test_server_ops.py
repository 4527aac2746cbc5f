"""What an operator watches on the engine: progress lines
while the model loads and readiness (/healthz 503 "loading", then 200), and
per-request prefill progress in /status while a long prompt runs.

Oracles: the safetensors headers read here in Python (tensor count and byte
sizes, independent of the engine's reader) and the `tokenizers` library for
the prompt's token count.  No timing is asserted: the load is held at its
first tensor by a file the test removes (--load-hold), and prefill progress
is checked for order and final values, whatever the polls happened to see.
"""
import glob
import http.client
import json
import os
import re
import struct
import threading

import pytest
import tokenizers

from tests import harness

TINY = os.path.join(harness.ROOT, "tests", "fixtures", "models", "tiny-qwen35")

pytestmark = pytest.mark.skipif(not os.path.isdir(TINY), reason="fixture models missing")

LINE_RE = re.compile(r"pic_model_load: (held at|loading|loaded) (\d+)/(\d+) tensors, "
                     r"(\d+)/(\d+) bytes \(\d+%, ([0-9.]+) s\)")


def text_tensors(model_dir):
    """{name: bytes} of the text model's tensors, from the safetensors headers."""
    tensors = {}
    for path in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            head = json.loads(f.read(n))
        head.pop("__metadata__", None)
        tensors.update({k: v["data_offsets"][1] - v["data_offsets"][0]
                        for k, v in head.items()})
    prefix = ("model.language_model." if "model.language_model.embed_tokens.weight"
              in tensors else "model.")
    return prefix, {k: v for k, v in tensors.items()
                    if not k.startswith(("model.visual.", "mtp."))
                    and (k.startswith(prefix) or k == "lm_head.weight")}


def test_model_load_reports_progress_and_readiness(procs, logdir):
    prefix, tensors = text_tensors(TINY)
    total_bytes = sum(tensors.values())
    embed = tensors[prefix + "embed_tokens.weight"]     # the first tensor loaded
    hold = os.path.join(logdir, "hold")
    open(hold, "w").close()
    port = harness.free_port()
    port_file = os.path.join(logdir, "engine.port")
    eng = procs._add(harness.Proc("engine", [
        harness.ENGINE_BIN, "serve", "--model", TINY, "--host", "127.0.0.1",
        "--port", str(port), "--port-file", port_file, "--id", "loader",
        "--load-hold", hold], logdir))
    url = f"http://127.0.0.1:{port}"

    def held():
        code, _, body = harness.http("GET", url + "/healthz", timeout=2)
        return code == 503 and json.loads(body)["loading"]["tensors_done"] == 1

    harness.wait_for(held, what="the load held at its first tensor", proc=eng)
    code, _, body = harness.http("GET", url + "/healthz")
    doc = json.loads(body)
    assert code == 503 and doc["status"] == "loading" and doc["model_loaded"] is False
    assert doc["loading"]["phase"] == "tensors"
    assert doc["loading"]["tensors_total"] == len(tensors)
    assert doc["loading"]["bytes_total"] == total_bytes
    assert doc["loading"]["bytes_done"] == embed

    # nothing but health, status and metrics answers while loading
    code, _, body = harness.http("GET", url + "/status")
    doc = json.loads(body)
    assert code == 503 and doc["status"] == "loading" and doc["model"] is None
    assert doc["loading"]["tensors_done"] == 1
    for method, path, req in [("GET", "/v1/models", None),
                              ("POST", "/v1/chat/completions",
                               {"model": "m", "messages": [{"role": "user", "content": "hi"}]})]:
        code, _, body = harness.http(method, url + path, body=req)
        err = json.loads(body)["error"]
        assert code == 503 and err["code"] == "model_loading", (path, body)
        assert set(err) == {"message", "type", "param", "code"}
    code, _, body = harness.http("GET", url + "/metrics")
    assert code == 200 and b"pic_engine_loading 1" in body
    assert f"pic_engine_load_bytes_total {total_bytes}".encode() in body
    assert not os.path.exists(port_file)        # written once ready

    os.unlink(hold)
    harness.wait_for(lambda: harness.http("GET", url + "/healthz", timeout=2)[0] == 200,
                     what="ready", proc=eng)
    doc = json.loads(harness.http("GET", url + "/healthz")[2])
    assert doc["status"] == "ok" and doc["model_loaded"] is True and "loading" not in doc
    assert int(open(port_file).read()) == port
    code, _, body = harness.http("POST", url + "/v1/completions",
                                 body={"model": "m", "prompt": "Hello", "max_tokens": 2})
    assert code == 200, body

    lines = [LINE_RE.search(line) for line in open(eng.log_path, errors="replace")]
    lines = [m.groups() for m in lines if m]
    kinds = [k for k, *_ in lines]
    assert kinds[0] == "held at" and kinds[-1] == "loaded", kinds
    dones = [(int(t), int(b)) for _, t, _, b, _, _ in lines]
    assert dones == sorted(dones)
    assert all(int(tt) == len(tensors) and int(bt) == total_bytes
               for _, _, tt, _, bt, _ in lines)
    assert dones[0] == (1, embed) and dones[-1] == (len(tensors), total_bytes)
    # the periodic lines are at least PIC_LOAD_LINE_MS apart (0.1 s rounding)
    times = [float(s) for k, *_, s in lines if k == "loading"]
    assert all(b - a >= 0.15 for a, b in zip(times, times[1:])), times


def test_stopping_while_loading_ends_cleanly(procs, logdir):
    hold = os.path.join(logdir, "hold")
    open(hold, "w").close()
    port = harness.free_port()
    eng = procs._add(harness.Proc("engine", [
        harness.ENGINE_BIN, "serve", "--model", TINY, "--port", str(port),
        "--load-hold", hold], logdir))
    url = f"http://127.0.0.1:{port}"
    harness.wait_for(lambda: harness.http("GET", url + "/healthz", timeout=2)[0] == 503,
                     what="loading", proc=eng)
    eng.stop()
    assert eng.popen.returncode == 0
    assert "load cancelled" in eng.log_tail()


def test_status_shows_prefill_progress(procs):
    eng = procs.engine(model=TINY)
    prompt = " ".join(f"item{i} is number {i * 7 % 1000}." for i in range(900))
    n = len(tokenizers.Tokenizer.from_file(os.path.join(TINY, "tokenizer.json"))
            .encode(prompt, add_special_tokens=False).ids)
    assert n > 4 * 512                  # several prefill steps (PIC_UBATCH)
    seen, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            doc = json.loads(harness.http("GET", eng.url + "/status")[2])
            seen.extend((r["prefill"]["done"], r["prefill"]["total"], r["state"])
                        for r in doc["requests_in_flight"])

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    conn = http.client.HTTPConnection("127.0.0.1", eng.port, timeout=60)
    conn.request("POST", "/v1/completions", json.dumps({
        "model": "m", "prompt": prompt, "stream": True, "max_tokens": 100000,
        "ignore_eos": True}), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    while not resp.readline().startswith(b"data: {"):
        pass                            # the first token: the prompt is in
    doc = json.loads(harness.http("GET", eng.url + "/status")[2])
    stop.set()
    t.join()
    conn.close()                        # the engine cancels the rest
    [r] = doc["requests_in_flight"]
    assert r["kind"] == "completion" and r["stream"] is True
    assert r["state"] == "decode" and r["prefill"] == {"done": n, "total": n}
    assert r["generated_tokens"] >= 1

    dones = [d for d, _, _ in seen]
    assert dones == sorted(dones)
    assert all(total in (0, n) and d <= n for d, total, _ in seen)
    assert all(state == "decode" for d, total, state in seen if total and d == total)
    harness.wait_for(lambda: json.loads(harness.http("GET", eng.url + "/status")[2])
                     ["requests_in_flight"] == [], what="the request to end")
