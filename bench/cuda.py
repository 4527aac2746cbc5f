#!/usr/bin/env python3
"""cuda.py — the CUDA backend on the GPU (DESIGN §5).

1. $BUILD/bench/cuda_bench (bench/cuda_bench.c) prints the op table: bf16 GEMM
   TFLOP/s at the prefill shapes (2048 x 1024 x 3584, 2048 x 3584 x 1024, the
   lm_head 2048 x 1024 x 248320) against the bf16 dense peak (989 TFLOP/s, H100
   SXM spec; PEAK=... to change), decode GEMV GB/s of weight bytes against the
   device-to-device copy measured in the same run, the Gated DeltaNet decode
   step and prefill tokens/s per layer, attention prefill / decode per layer.
2. When models/mid exists (make_models.py --preset mid: Qwen3.5-0.8B shapes, 8
   layers), $BUILD/bench/cuda_forward (bench/cuda_forward.c) runs the whole
   forward warm on the GPU: prefill tok/s at 512 and 2048 tokens against the
   bf16 peak, decode tok/s against the copy bandwidth of the bytes a step reads.

Writes bench/results/cuda.json ("summary", "machine", "config", "rows",
"forward").  Without a GPU (or without nvcc at build time) it says so and
writes nothing.  Env: BUILD (default build), QUICK=1 (shorter batches), PEAK.
"""
import json
import os
import subprocess
import sys


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.environ.get("BUILD", "build")
    exe = os.path.join(build, "bench", "cuda_bench")
    if not os.path.exists(exe):
        print("bench-cuda: %s not built (no nvcc): nothing measured" % exe)
        sys.exit(0)
    out = os.path.join(here, "results", "cuda.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    args = [exe, "--json", out]
    if os.environ.get("QUICK") == "1":
        args.append("--quick")
    if os.environ.get("PEAK"):
        args += ["--peak", os.environ["PEAK"]]
    rc = subprocess.call(args)
    if rc != 0 or not os.path.exists(out):
        sys.exit(rc)
    mid = os.path.join(here, "..", "models", "mid")
    fwd = os.path.join(build, "bench", "cuda_forward")
    if os.path.isdir(mid) and os.path.exists(fwd):
        res = json.load(open(out))
        copy = res["summary"]["copy_d2d_gbs"]
        peak = res["machine"]["bf16_peak_tflops"]
        env = dict(os.environ, PIC_CUDA_LIB=os.environ.get(
            "PIC_CUDA_LIB", os.path.abspath(os.path.join(build, "libpic_cuda.so"))))
        r = subprocess.run([fwd, mid, "512,2048", "64", "cuda", "3", str(peak), str(copy)],
                           capture_output=True, text=True, env=env)
        print(r.stdout.strip())
        if r.returncode == 0 and r.stdout.strip().startswith("{"):
            f = json.loads(r.stdout)
            res["forward"] = f
            if "prefill" in f:
                res["summary"]["mid_prefill_tok_s_2048"] = f["prefill"][-1]["tok_s"]
                res["summary"]["mid_prefill_vs_bf16_roof"] = f["prefill"][-1]["vs_roof"]
                res["summary"]["mid_decode_tok_s"] = f["decode"]["tok_s"]
                res["summary"]["mid_decode_vs_copy_roof"] = f["decode"]["vs_roof"]
            json.dump(res, open(out, "w"), indent=1)
        else:
            print("bench-cuda: cuda_forward failed: %s" % r.stderr.strip()[-400:])
    print("wrote %s" % out)


if __name__ == "__main__":
    main()
