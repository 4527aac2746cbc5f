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
import os
import subprocess

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PIC_BUILD", "build")
ENGINE = os.path.join(ROOT, BUILD, "pic-engine") if not os.path.isabs(BUILD) \
    else os.path.join(BUILD, "pic-engine")
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
PRESETS = ["tiny-qwen35", "tiny-qwen35-moe", "tiny-qwen3next", "tiny-realheads"]
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
@pytest.mark.parametrize("weights", ["auto", "bf16"])
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
