#!/usr/bin/env python3
"""cuda.py — the CUDA backend's ops on the GPU (#15, DESIGN §5): runs
$BUILD/bench/cuda_bench (bench/cuda_bench.c), which prints the table and
writes bench/results/cuda.json: bf16 GEMM TFLOP/s at the prefill shapes
(2048 x 1024 x 3584, 2048 x 3584 x 1024, the lm_head 2048 x 1024 x 248320)
against the bf16 dense peak (989 TFLOP/s, H100 SXM spec; PEAK=... to change),
decode GEMV GB/s of weight bytes against the device-to-device copy measured in
the same run, the Gated DeltaNet decode step and prefill tokens/s per layer,
attention prefill / decode tokens/s per layer.

Without a GPU (or without nvcc at build time) it says so and writes nothing.
Env: BUILD (default build), QUICK=1 (shorter batches), PEAK (TFLOP/s).
"""
import os
import subprocess
import sys

build = os.environ.get("BUILD", "build")
exe = os.path.join(build, "bench", "cuda_bench")
if not os.path.exists(exe):
    print("bench-cuda: %s not built (no nvcc): nothing measured" % exe)
    sys.exit(0)
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
os.makedirs(out, exist_ok=True)
args = [exe, "--json", os.path.join(out, "cuda.json")]
if os.environ.get("QUICK") == "1":
    args.append("--quick")
if os.environ.get("PEAK"):
    args += ["--peak", os.environ["PEAK"]]
sys.exit(subprocess.call(args))
