"""test_device_gateway.py — nginx with the module in front of a device engine.

`pic-engine serve --device D --cache-mode full` (D = $PIC_DEVICE, default
`cpu-dev`: the CPU ops behind the device-memory contract, so CI takes the path a
GPU engine takes) behind the gateway: the README's request (scripts/ask-pic-qa.json,
models/pic-qa) answers what a CPU engine answers, whole and streamed.  On a
machine with a GPU and build/libpic_cuda.so, PIC_DEVICE=cuda runs the same test
on the GPU.
"""
import json
import os

from tests import harness  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(ROOT, "models", "pic-qa")
DEVICE = os.environ.get("PIC_DEVICE", "") or "cpu-dev"


def _ask(url, body):
    code, _, raw = harness.http("POST", url + "/v1/chat/completions", json.dumps(body),
                                headers={"Content-Type": "application/json"}, timeout=120)
    assert code == 200, raw
    return raw


def test_gateway_serves_a_device_engine(procs):
    common = ("--threads", "2", "--cache-mode", "full")
    dev = procs.engine(name="dev", model=MODEL, extra=common + ("--device", DEVICE))
    cpu = procs.engine(name="cpu", model=MODEL, extra=common)
    ngx = procs.nginx(harness.gateway_conf([f"127.0.0.1:{dev.port}"]))
    for name in ("ask-pic-qa.json", "ask-pic-qa-reordered.json"):
        body = json.load(open(os.path.join(ROOT, "scripts", name)))
        got = json.loads(_ask(ngx.url, body))
        want = json.loads(_ask(cpu.url, body))
        assert got["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"]
        assert got["usage"]["prompt_tokens"] == want["usage"]["prompt_tokens"]
    body["stream"] = True
    raw = _ask(ngx.url, body)
    raw = raw.decode() if isinstance(raw, bytes) else raw
    chunks = [json.loads(line[6:]) for line in raw.splitlines()
              if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or ""
                   for c in chunks if c.get("choices"))
    assert text == want["choices"][0]["message"]["content"]
    assert raw.rstrip().endswith("data: [DONE]")
    assert "device " + DEVICE in open(dev.log_path).read()
