"""test_gguf.py — the engine's GGUF reader (engine/model/gguf.c, gguf_quant.c) against
gguf-py, llama.cpp's own reader (PyPI `gguf`), through `pic-engine gguf`.

* The real file make run serves (SmolLM2-135M-Instruct Q4_1): every metadata pair
  (scalars and strings by value, arrays by element type and length) and every tensor
  (name, ggml type, dims) as gguf.GGUFReader reads them; its Q8_0, Q4_1 and F32 tensors
  dequantize to exactly gguf.quants.dequantize's floats.
* Files written with gguf.GGUFWriter holding a tensor of each type the reader takes
  (quantized by gguf.quants.quantize where it can; random blocks with finite fp16
  scales where it cannot): bit-identical to gguf.quants.dequantize.
* Hostile files (truncated at every field of the header, bad magic and version, huge
  counts, unknown value and tensor types, nested arrays, overflowing and zero dims,
  misaligned, out-of-range and overlapping tensors, duplicate names): a clear error
  naming the defect, exit status 1, never a signal; and as --model they fail the load
  the same way.
"""
import json
import struct
import subprocess
import sys

import numpy as np
import pytest

from tests import harness

gguf = pytest.importorskip("gguf")      # make deps installs it: absent means no deps
from gguf import GGMLQuantizationType as Q  # noqa: E402

ENGINE = harness.ENGINE_BIN
GGUF = harness.smollm2_gguf()


def _engine(*args, timeout=120):
    return subprocess.run([ENGINE] + list(args), capture_output=True, text=True,
                          timeout=timeout)


def _dump(path):
    r = _engine("gguf", path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _tensor(path, name, tmp_path):
    out = tmp_path / ("%s.f32" % name.replace("/", "_"))
    r = _engine("gguf", path, "--tensor", name, "--out", str(out))
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype=np.float32)


def test_real_file_metadata_and_tensors_as_gguf_py_reads_them():
    assert GGUF is not None, "run make deps (it links models/SmolLM2-135M-Instruct.Q4_1.gguf)"
    ours = _dump(GGUF)
    r = gguf.GGUFReader(GGUF)
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    assert sorted(ours["metadata"]) == sorted(keys)
    for k in keys:
        f, v = r.fields[k], ours["metadata"][k]
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            assert v["length"] == len(f.data), k
            assert v["array_of"] == f.types[1].name.lower().replace("float", "f")\
                .replace("int", "i").replace("ui", "u").replace("string", "string"), (k, v)
        else:
            want = f.contents()
            if isinstance(want, float):     # F32 values; JSON prints 15 digits
                assert np.float32(v) == np.float32(want), k
            else:
                assert v == want, k
    assert [t["name"] for t in ours["tensors"]] == [t.name for t in r.tensors]
    for a, b in zip(ours["tensors"], r.tensors):
        assert a["type"] == b.tensor_type.name, a
        assert a["ne"] == [int(x) for x in b.shape], a
        assert a["bytes"] == int(b.n_bytes), a


def test_real_file_tensors_dequantize_as_gguf_py(tmp_path):
    assert GGUF is not None, "run make deps"
    r = gguf.GGUFReader(GGUF)
    by = {t.name: t for t in r.tensors}
    names = ["token_embd.weight", "blk.0.attn_q.weight", "blk.7.ffn_down.weight",
             "blk.29.attn_k.weight", "output_norm.weight", "blk.3.attn_norm.weight"]
    assert {by[n].tensor_type for n in names} == {Q.Q8_0, Q.Q4_1, Q.F32}
    for n in names:
        want = gguf.quants.dequantize(by[n].data, by[n].tensor_type).astype(np.float32)
        got = _tensor(GGUF, n, tmp_path)
        assert got.shape == (want.size,), n
        assert np.array_equal(got.view(np.uint32), want.reshape(-1).view(np.uint32)), n


def _write(path, tensors, kv=None, arch="llama"):
    w = gguf.GGUFWriter(str(path), arch)
    for k, v in (kv or {}).items():
        w.add_uint32(k, v)
    for name, arr, raw in tensors:
        if raw is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_shape=arr.shape, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# (type, elements per block, bytes per block, byte offsets of fp16 scales)
TYPES = [
    (Q.F16, 1, 2, None), (Q.BF16, 1, 2, None), (Q.Q4_0, 32, 18, [0]), (Q.Q4_1, 32, 20, [0, 2]),
    (Q.Q5_0, 32, 22, [0]), (Q.Q5_1, 32, 24, [0, 2]), (Q.Q8_0, 32, 34, [0]),
    (Q.Q4_K, 256, 144, [0, 2]), (Q.Q5_K, 256, 176, [0, 2]), (Q.Q6_K, 256, 210, [208]),
]


def _blocks(t, bs, bb, scales, rows, cols, rng):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    try:
        q = gguf.quants.quantize(x, t)
    except (NotImplementedError, TypeError, ValueError, KeyError):
        # random codes, finite scales: every bit of the block format read
        raw = rng.integers(0, 256, size=(rows, cols // bs * bb), dtype=np.uint8)
        for r in range(rows):
            for b in range(cols // bs):
                for off in scales or []:
                    h = np.float16(rng.uniform(0.01, 0.1)).view(np.uint16)
                    raw[r, b * bb + off:b * bb + off + 2] = [h & 0xFF, h >> 8]
        q = raw
    return q


@pytest.mark.parametrize("t,bs,bb,scales", TYPES, ids=[t[0].name for t in TYPES])
def test_every_type_dequantizes_as_gguf_py(t, bs, bb, scales, tmp_path):
    rng = np.random.default_rng(int(t))
    q = _blocks(t, bs, bb, scales, 3, 512, rng)
    path = tmp_path / "t.gguf"
    _write(path, [("x", q, t)])
    want = gguf.quants.dequantize(q, t).astype(np.float32).reshape(-1)
    got = _tensor(str(path), "x", tmp_path)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), \
        (t.name, np.abs(got - want).max())


def _header(version=3, n_t=0, n_kv=0):
    return b"GGUF" + struct.pack("<IQQ", version, n_t, n_kv)


def _s(x):
    x = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(x)) + x


def _kv_u32(k, v):
    return _s(k) + struct.pack("<II", 4, v)


def _tinfo(name, dims, typ, off):
    return _s(name) + struct.pack("<I", len(dims)) + b"".join(
        struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", typ, off)


def _pad(b, align=32):
    return b + b"\0" * (-len(b) % align)


def _one_tensor(dims=(32,), typ=0, off=0, data=128, extra_info=b"", n_t=1):
    head = _header(n_t=n_t) + _tinfo("t", list(dims), typ, off) + extra_info
    return _pad(head) + b"\0" * data


HOSTILE = [
    ("empty", b"", "24 bytes"),
    ("bad magic", b"GGUX" + b"\0" * 40, "bad magic"),
    ("version 1", _header(version=1) + b"\0" * 16, "version 1"),
    ("version 4", _header(version=4) + b"\0" * 16, "version 4"),
    ("huge tensor count", _header(n_t=1 << 40) + b"\0" * 16, "tensors"),
    ("huge kv count", _header(n_kv=1 << 40) + b"\0" * 16, "metadata"),
    ("kv past the end", _header(n_kv=3) + _kv_u32("a", 1) + b"\0" * 8, "truncated"),
    ("string past the end", _header(n_kv=1) + struct.pack("<Q", 1 << 20) + b"abc" + b"\0" * 20,
     "truncated"),
    ("huge string", _header(n_kv=1) + struct.pack("<Q", 1 << 40) + b"\0" * 20, "string of"),
    ("unknown value type", _header(n_kv=1) + _s("k") + struct.pack("<I", 99) + b"\0" * 16,
     "value type 99"),
    ("nested array", _header(n_kv=1) + _s("k") + struct.pack("<IIQ", 9, 9, 1) + b"\0" * 16,
     "arrays of arrays"),
    ("array past the end", _header(n_kv=1) + _s("k") + struct.pack("<IIQ", 9, 6, 1 << 20)
     + b"\0" * 16, "past the end"),
    ("duplicate key", _header(n_kv=2) + _kv_u32("k", 1) + _kv_u32("k", 2) + b"\0" * 16,
     "appears twice"),
    ("bad alignment", _header(n_kv=1) + _kv_u32("general.alignment", 3) + b"\0" * 16,
     "alignment"),
    ("unknown tensor type", _one_tensor(typ=77), "ggml type 77"),
    ("zero dim", _one_tensor(dims=(0,)), "dimension 0"),
    ("five dims", _header(n_t=1) + _s("t") + struct.pack("<I", 5) + b"\0" * 64, "dimensions"),
    ("overflowing dims", _one_tensor(dims=(1 << 35, 1 << 35)), "out of range"),
    ("partial block", _one_tensor(dims=(33,), typ=2), "whole Q4_0 blocks"),
    ("misaligned offset", _one_tensor(off=4), "not aligned"),
    ("tensor past the end", _one_tensor(dims=(1024,), data=64), "past the end"),
    ("offset past the end", _one_tensor(off=1 << 40), "past the end"),
    ("overlapping tensors", _one_tensor(extra_info=_tinfo("u", [32], 0, 64), n_t=2, data=512)
     .replace(_tinfo("t", [32], 0, 0), _tinfo("t", [64], 0, 32)), "overlap"),
    ("duplicate tensor", _one_tensor(extra_info=_tinfo("t", [32], 0, 128), n_t=2, data=256),
     "appears twice"),
]


@pytest.mark.parametrize("name,data,msg", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_file_is_refused_by_name(name, data, msg, tmp_path):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    r = _engine("gguf", str(path))
    assert r.returncode == 1, (name, r.returncode, r.stderr)
    assert msg in r.stderr, (name, r.stderr)


def test_truncated_real_header_at_every_field_fails_cleanly(tmp_path):
    assert GGUF is not None, "run make deps"
    with open(GGUF, "rb") as f:
        head = f.read(1 << 21)
    r = gguf.GGUFReader(GGUF)
    cuts = sorted({int(f.offset) + d for f in r.fields.values() for d in (0, 3)}
                  | {int(t.field.offset) for t in r.tensors})
    for cut in cuts[::max(1, len(cuts) // 60)]:
        path = tmp_path / "cut.gguf"
        path.write_bytes(head[:cut])
        res = _engine("gguf", str(path))
        assert res.returncode == 1, (cut, res.returncode, res.stderr)
        assert res.stderr.strip(), cut


def test_hostile_file_as_model_fails_the_load(tmp_path):
    path = tmp_path / "m.gguf"
    _write(path, [("blk.0.attn_norm.weight", np.ones(32, np.float32), None)])
    r = _engine("generate", "--model", str(path), "--prompt", "hi", "--max-tokens", "1")
    assert r.returncode != 0 and r.returncode < 128, r
    assert "llama.embedding_length" in r.stderr, r.stderr
    path.write_bytes(b"GGUF" + b"\xff" * 60)
    r = _engine("generate", "--model", str(path), "--prompt", "hi", "--max-tokens", "1")
    assert r.returncode != 0 and r.returncode < 128, r
    assert "GGUF version" in r.stderr, r.stderr


def _copy_as_f32(src, dst):
    """src rewritten with every tensor dequantized to F32 (metadata as it is)."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(dst), bytes(r.fields["general.architecture"].parts[-1]).decode())
    V = gguf.GGUFValueType
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        if f.types[0] == V.ARRAY:
            if f.types[1] == V.STRING:
                val = [bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in f.data]
            else:
                val = [f.parts[i][0].item() for i in f.data]
            w.add_key_value(f.name, val, V.ARRAY, sub_type=f.types[1])
        elif f.types[0] == V.STRING:
            w.add_key_value(f.name, bytes(f.parts[-1]).decode("utf-8"), V.STRING)
        else:
            w.add_key_value(f.name, f.parts[-1][0].item(), f.types[0])
    for t in r.tensors:
        w.add_tensor(t.name, gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_load_leaves_the_files_pages_out_of_the_resident_set(tmp_path):
    """An F32 file loaded at f32: the engine holds its own copy of every weight, so the
    mapped file's pages are released as each tensor is converted; the peak resident set
    stays under the weights plus half the file (holding both would be weights + file)."""
    assert GGUF is not None, "run make deps"
    f32 = tmp_path / "smollm2-f32.gguf"
    _copy_as_f32(GGUF, f32)
    size = f32.stat().st_size
    weights = 4 * sum(int(t.n_elements) for t in gguf.GGUFReader(str(f32)).tensors)
    peak_kb = subprocess.run(
        [sys.executable, "-c", "import resource, subprocess, sys; "
         "rc = subprocess.run(sys.argv[1:]).returncode; "
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if rc == 0 else -1)",
         ENGINE, "logits", "--model", str(f32), "--weights", "f32", "--threads", "1",
         "--tokens", "1,2,3", "--out", str(tmp_path / "logits.f32")],
        capture_output=True, text=True, timeout=120).stdout.strip()
    assert int(peak_kb) > 0, peak_kb
    assert int(peak_kb) * 1024 < weights + size / 2, (peak_kb, weights, size)
