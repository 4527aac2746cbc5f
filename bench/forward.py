#!/usr/bin/env python3
"""forward.py — forward-pass throughput of pic-engine on the generated `mid` model
(Qwen3.5-0.8B head shapes: hidden 1024, 8 layers of which 2 full attention,
vocab 248320, tied embeddings; random weights), next to the machine anchors
measured in the same process.

Figures (all ratios of numbers taken side by side in one run):
  * prefill tokens/s at 512, 2k, 8k tokens (QUICK=1: 512, 2k) and the model
    FLOP/s at 2k over sgemm FLOP/s: the best 2048^3 OpenBLAS sgemm of the run,
    run both with OpenBLAS's own threads and as the engine runs it (one
    OpenBLAS thread per OpenMP thread, output columns split), each measured
    before and after the model runs;
    model FLOPs = 2 x parameters touched per token (projections, routed
    experts only) + causal attention scores and sums + the GDN recurrence at
    6 dk dv per value head and token (the minimal recurrent count; the chunked
    kernel does more work than it is credited for);
  * decode tokens/s (median step) after a 512-token prefill over the
    weight-streaming roofline = read bandwidth / bytes one decode step reads
    (every projection matrix once in the format held — lm_head included, the
    embedding table through it when tied, else one row —, small fp32 weights,
    GDN state and conv window read and written, KV up to the position).
    read bandwidth = best streaming sum over 512 MiB by as many threads as
    decode uses, each over its own share; the memcpy rate (one thread, bytes
    copied per second) is reported too;
  * peak RSS over the weight bytes held (peak includes the loader's transient
    mapping of the checkpoint), and RSS after load.

Writes bench/results/forward.json with "summary", "machine", "config", "raw".
Env: BUILD (default build), QUICK=1, THREADS (default: all cores),
WEIGHTS (auto, f32, bf16, q8: pic-engine --weights; default auto),
OMP_WAIT_POLICY (default: the engine's, passive with GOMP_SPINCOUNT=2000, a ~25 us
spin before sleeping; a team that spins for ever on a shared 2-core machine turns every
preempted thread into a stall).
"""
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BUILD = os.environ.get("BUILD") or os.environ.get("PIC_BUILD") or "build"
BUILD = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
from bench.common import ensure_model, need_binary  # noqa: E402
QUICK = os.environ.get("QUICK", "") not in ("", "0")
THREADS = int(os.environ.get("THREADS", "0") or 0)
MODEL = os.path.join(ROOT, "models", "mid")
HELPER = os.path.join(BUILD, "bench", "forward_bench")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    need_binary(HELPER)
    ensure_model(MODEL)
    lens = [512, 2048] if QUICK else [512, 2048, 8192]
    steps = 9 if QUICK else 17
    reps = 2
    t0 = time.time()
    env = dict(os.environ)
    env["PIC_WEIGHTS"] = os.environ.get("WEIGHTS", "auto")
    r = subprocess.run([HELPER, MODEL, ",".join(map(str, lens)), str(steps), str(THREADS), str(reps)],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit("forward.py: helper failed:\n" + r.stderr)
    raw = json.loads(r.stdout)
    wall = time.time() - t0

    sgemm = raw["sgemm_gflops_best"]      # best of the runs before and after the model
    by_n = {p["tokens"]: p for p in raw["prefill"]}
    wb = raw["weight_bytes"]
    db = raw["decode_bytes_per_token"]
    roof = raw["read_gbps"] * 1e9 / db
    roof_memcpy = raw["memcpy_gbps"] * 1e9 / db
    dec = raw["decode"]["tok_s"]
    summary = {
        "prefill_flops_over_sgemm_2k": round(by_n[2048]["gflops"] / sgemm, 4),
        "decode_over_roofline": round(dec / roof, 4),
        "decode_over_memcpy_roofline": round(dec / roof_memcpy, 4),
        "prefill_tok_s": {str(n): round(p["tok_s"], 2) for n, p in sorted(by_n.items())},
        "prefill_gflops": {str(n): round(p["gflops"], 2) for n, p in sorted(by_n.items())},
        "decode_tok_s": round(dec, 3),
        "decode_roofline_tok_s": round(roof, 3),
        "weights": raw["weights"],
        "decode_bytes_per_token": int(db),
        "peak_rss_over_weight_bytes": round(raw["peak_rss_bytes"] / wb, 3),
        "rss_after_load_over_weight_bytes": round(raw["rss_after_load_bytes"] / wb, 3),
        "goals": {"prefill_flops_over_sgemm_2k": 0.6, "decode_over_roofline": 0.6},
    }
    with open(os.path.join(MODEL, "config.json")) as f:
        mcfg = json.load(f)
    text = mcfg.get("text_config", mcfg)
    out = {
        "summary": summary,
        "machine": {"cores": os.cpu_count(), "cpu": cpu_model(), "threads": raw["threads"],
                    "sgemm_gflops": sgemm, "memcpy_gbps": raw["memcpy_gbps"],
                    "read_gbps": raw["read_gbps"]},
        "config": {"model": "models/mid (tests/tools/make_models.py --preset mid, random weights)",
                   "hidden": text.get("hidden_size"), "layers": text.get("num_hidden_layers"),
                   "layer_types": text.get("layer_types"), "vocab": text.get("vocab_size"),
                   "prefill_lengths": lens, "decode_steps": steps,
                   "decode_context": raw["decode"]["context"], "quick": QUICK,
                   "prefill_repeats": reps, "decode_figure": "median step",
                   "omp_wait_policy": env.get("OMP_WAIT_POLICY",
                                              "passive, GOMP_SPINCOUNT=2000 (engine default)"),
                   "weights": raw["weights"], "weight_bytes": wb,
                   "decode_bytes_per_token": db, "logits": "last position only",
                   "wall_seconds": round(wall, 1)},
        "raw": raw,
    }
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "forward.json"), "w") as f:
        json.dump(out, f, indent=1)

    print("forward bench: %s, %d threads, mid model (%.2f GB %s; decode reads %.2f GB/token)"
          % (cpu_model(), raw["threads"], wb / 1e9, raw["weights"], db / 1e9))
    print("  anchors: sgemm %.1f GFLOP/s (OpenBLAS threads %s, column split %s), "
          "memcpy %.1f GB/s, read %.1f GB/s"
          % (sgemm, "/".join("%.0f" % x for x in raw["openblas_threaded_gflops"]),
             "/".join("%.0f" % x for x in raw["engine_split_gemm_gflops"]),
             raw["memcpy_gbps"], raw["read_gbps"]))
    print("  %-14s %10s %10s %10s" % ("phase", "tok/s", "GFLOP/s", "/sgemm"))
    for n, p in sorted(by_n.items()):
        print("  %-14s %10.1f %10.1f %10.3f" % ("prefill %d" % n, p["tok_s"], p["gflops"],
                                                p["gflops"] / sgemm))
    print("  %-14s %10.2f %10s %10s   roofline %.2f tok/s -> %.3f (memcpy-based %.3f)"
          % ("decode @%d" % raw["decode"]["context"], dec, "-", "-", roof,
             dec / roof, dec / roof_memcpy))
    print("  peak RSS %.2f GB = %.2fx weight bytes (after load %.2fx)"
          % (raw["peak_rss_bytes"] / 1e9, summary["peak_rss_over_weight_bytes"],
             summary["rss_after_load_over_weight_bytes"]))
    print("  summary: prefill_flops_over_sgemm_2k=%.3f decode_over_roofline=%.3f (goals 0.6)"
          % (summary["prefill_flops_over_sgemm_2k"], summary["decode_over_roofline"]))


if __name__ == "__main__":
    main()
