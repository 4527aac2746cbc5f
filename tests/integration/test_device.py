"""test_device.py — the forward's host <-> device boundary without a GPU.

`--device cpu-dev` runs the CPU ops behind the device-memory contract
(pic_backend_cpu_dev: host = 0), so pic-engine takes every path a GPU backend
takes — weights uploaded once (pic_model_to_backend), state and workspace in
backend memory, token ids uploaded, logits downloaded, no fused host-only decode
step — and must give the CPU's logits bit for bit, for every fixture preset
(dense, MoE, Qwen3-Next) and every way of feeding the tokens.  `--device cuda`
where libpic_cuda.so or a GPU is missing fails with a message naming it.
The GPU itself is checked on a lent machine with the same fixtures
(tests/fixtures oracle, same bounds as test_oracle.py), not here.
"""
import concurrent.futures
import json
import os
import subprocess

import pytest

from tests import harness  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PIC_BUILD", "build")
ENGINE = os.path.join(ROOT, BUILD, "pic-engine") if not os.path.isabs(BUILD) \
    else os.path.join(BUILD, "pic-engine")
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
PRESETS = ["tiny-qwen35", "tiny-qwen35-moe", "tiny-qwen3next", "tiny-realheads",
           "tiny-bamba", "tiny-granite-h", "tiny-granite-h-dense"]
IDS = [(i * 37 + 11) % 2000 for i in range(150)]


def _logits(tmp_path, preset, device, extra, env=None):
    out = tmp_path / ("%s-%s.f32" % (preset, device))
    cmd = [ENGINE, "logits", "--model", os.path.join(MODELS, preset),
           "--tokens", ",".join(map(str, IDS)), "--out", str(out), "--device", device] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, **(env or {})))
    return r, out


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("how", [[], ["--decode-from", "100"], ["--split-at", "70"]],
                         ids=["prefill", "decode", "split"])
@pytest.mark.parametrize("weights", ["auto", "bf16", "bf16dot"])
def test_device_path_equals_cpu_bit_for_bit(tmp_path, preset, how, weights):
    extra = ["--weights", weights] + how
    rd, dev = _logits(tmp_path, preset, "cpu-dev", extra)
    assert rd.returncode == 0, rd.stderr
    rc, cpu = _logits(tmp_path, preset, "cpu", extra)
    assert rc.returncode == 0, rc.stderr
    a, b = dev.read_bytes(), cpu.read_bytes()
    assert len(a) == len(IDS) * 2009 * 4
    assert a == b


def test_cuda_without_library_says_so(tmp_path):
    r, out = _logits(tmp_path, "tiny-qwen35", "cuda", [],
                     env={"PIC_CUDA_LIB": str(tmp_path / "missing" / "libpic_cuda.so")})
    assert r.returncode == 1
    assert "cannot load" in r.stderr and "libpic_cuda.so" in r.stderr
    assert not out.exists()


def test_unknown_device_is_refused(tmp_path):
    r, out = _logits(tmp_path, "tiny-qwen35", "tpu", [])
    assert r.returncode != 0
    assert "unknown device 'tpu'" in r.stderr
    assert not out.exists()


def _completion(eng, content, n=12):
    code, _, raw = harness.http("POST", eng.url + "/v1/chat/completions",
                                json.dumps({"model": "m", "messages": [{"role": "user", "content": content}],
                                            "max_tokens": n, "temperature": 0}),
                                headers={"Content-Type": "application/json"}, timeout=60)
    assert code == 200, raw
    return json.loads(raw)


@pytest.mark.parametrize("preset", ["tiny-qwen35", "tiny-qwen3next", "tiny-granite-h"])
def test_serve_on_device_path_equals_cpu(procs, preset):
    """`serve --device cpu-dev --cache-mode full`: prefill, batched decode of
    concurrent requests and sampling from downloaded logits give the CPU
    engine's greedy text and token counts."""
    model = os.path.join(MODELS, preset)
    common = ("--threads", "1", "--cache-mode", "full", "--weights", "auto")
    dev = procs.engine(name="dev", model=model, extra=common + ("--device", "cpu-dev"))
    cpu = procs.engine(name="cpu", model=model, extra=common)
    prompts = ["tell me about caching %d" % i for i in range(4)]
    with concurrent.futures.ThreadPoolExecutor(4) as ex:     # decode batched on the device
        got = list(ex.map(lambda p: _completion(dev, p), prompts))
    for p, a in zip(prompts, got):
        b = _completion(cpu, p)
        assert a["choices"][0]["message"] == b["choices"][0]["message"]
        assert a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"]
        assert a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"]
    assert "device cpu-dev" in open(dev.log_path).read()


def test_serve_on_a_device_needs_full_recompute(tmp_path):
    """The prefix tree, PIC entries and checkpoints hold host states: a device
    engine in another cache mode refuses to start, saying why."""
    r = subprocess.run([ENGINE, "serve", "--host", "127.0.0.1", "--port", "0", "--model",
                        os.path.join(MODELS, "tiny-qwen35"), "--device", "cpu-dev",
                        "--insecure-pool"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "--cache-mode full" in r.stderr


@pytest.mark.parametrize("preset", PRESETS)
def test_generate_on_device_path_equals_cpu(preset):
    """`generate --device cpu-dev`: prefill, sampling from downloaded logits and
    decode steps on backend states give the CPU's greedy ids."""
    outs = []
    for device in ("cpu-dev", "cpu"):
        r = subprocess.run([ENGINE, "generate", "--model", os.path.join(MODELS, preset),
                            "--tokens", ",".join(map(str, IDS[:40])), "--max-tokens", "24",
                            "--ids", "--ignore-eos", "--weights", "auto", "--device", device],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout.strip())
    assert outs[0] == outs[1] and len(outs[0].split(",")) == 24
