"""bench/decode_batch.py — aggregate decode tokens/s with N concurrent requests.

Two `pic-engine serve` (1 worker, all cores, --batch 8), one per mode, run side by side
(bursts alternate between them, so both see the same machine load):
  batch       the decode tokens of a scheduler round go through one pic_forward_batch
              (every weight matrix streamed once per round);
  roundrobin  --no-batch-decode: one pic_forward(n = 1) per running request per round
              (the weights streamed once per request).
For N in {1, 2, 4, 8} concurrent requests (different short prompts, greedy, ignore_eos,
G generated tokens each, started together), aggregate tokens/s = N*G / wall time from
the start to the last response; fastest of REPEAT rounds per mode.  The prompts are short, so the
figure is decode.  Models: models/demo (hidden 256, 8 layers) and models/mid (hidden
1024, 8 layers, Qwen3.5-0.8B head shapes; the case where decode is bound by memory
bandwidth).  Summary: batch8_over_roundrobin (on the largest model run) and per model.

QUICK=1: the demo model only, G = 32, REPEAT = 1; under two minutes.
"""
import os
import tempfile
import threading
import time

from bench import client  # noqa: E402
from bench.common import QUICK, ServeEngine, ensure_model, machine, table, write_results  # noqa: E402

MODELS = ["demo"] if QUICK else ["demo", "mid"]
CONCURRENCY = [1, 2, 4, 8]
GEN = {"demo": 32 if QUICK else 128, "mid": 24}
REPEAT = {"demo": 1 if QUICK else 5, "mid": 2}
PROMPTS = ["Once upon a time", "The quick brown fox jumps over", "1 2 3 4 5",
           "Hello world", "In the beginning", "A B C D", "Tell me about caches",
           "Numbers: 7 11 13"]


class Engine(ServeEngine):
    def __init__(self, model, mode, threads, logdir):
        super().__init__(f"{os.path.basename(model)}-{mode}", model, logdir, start_timeout=120,
                         extra=["--id", mode, "--cache-mode", "full", "--threads", str(threads),
                                "--batch", "8", "--queue", "64"] +
                         (["--no-batch-decode"] if mode == "roundrobin" else []))

    def complete(self, prompt, n):
        body = {"model": "m", "prompt": prompt, "max_tokens": n, "temperature": 0,
                "ignore_eos": True}
        _, doc = client.post(self.port, body, timeout=600, path="/v1/completions")
        return doc["usage"]["completion_tokens"], doc["choices"][0]["text"]


def burst(eng, n, gen):
    """n requests started together; (wall s, tokens, texts)."""
    go = threading.Barrier(n + 1)
    out = [None] * n

    def run(i):
        go.wait()
        out[i] = eng.complete(PROMPTS[i % len(PROMPTS)], gen)

    th = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in th:
        t.start()
    go.wait()
    t0 = time.perf_counter()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    if any(o is None for o in out):
        raise RuntimeError("a request failed")
    return wall, sum(o[0] for o in out), [o[1] for o in out]


def main():
    info = machine()
    print(f"machine: {info}", flush=True)
    threads = int(info.get("cores", os.cpu_count() or 1))
    rows, summary = [], {}
    logdir = tempfile.mkdtemp(prefix="bench-decode-batch-")

    for name in MODELS:
        model = ensure_model(name)
        gen, rep = GEN[name], REPEAT[name]
        best, texts = {}, {}
        engs = {}
        try:
            for mode in ("batch", "roundrobin"):
                engs[mode] = Engine(model, mode, threads, logdir)
            for eng in engs.values():
                eng.complete("warm up", 4)
            for n in CONCURRENCY:
                walls = {mode: [] for mode in engs}
                for _ in range(rep):            # alternate the modes: same load for both
                    for mode, eng in engs.items():
                        wall, toks, tx = burst(eng, n, gen)
                        assert toks == n * gen, (toks, n, gen)
                        walls[mode].append(wall)
                        texts[(mode, n)] = tx
                for mode in engs:
                    best[(mode, n)] = min(walls[mode])
                    print(f"{name} {mode:10s} N={n}: {n * gen / best[(mode, n)]:8.1f} tok/s "
                          f"(walls {', '.join(f'{w:.3f}' for w in walls[mode])})", flush=True)
            for mode, eng in engs.items():
                sch = eng.get("/status")["scheduler"]
                print(f"  {mode}: decode_steps {sch['decode_steps']}, "
                      f"decode_batches {sch['decode_batches']}", flush=True)
        finally:
            for eng in engs.values():
                eng.stop()
        for n in CONCURRENCY:
            b, r = n * gen / best[("batch", n)], n * gen / best[("roundrobin", n)]
            rows.append({"model": name, "N": n, "gen": gen, "batch_tok_s": round(b, 1),
                         "roundrobin_tok_s": round(r, 1), "speedup": round(b / r, 3),
                         "same_text": texts[("batch", n)] == texts[("roundrobin", n)]})
        summary[f"{name}_batch8_over_roundrobin"] = rows[-1]["speedup"]
        summary[f"{name}_batch8_over_batch1"] = round(
            best[("batch", 1)] * 8 / best[("batch", 8)], 3)
    table(rows, ["model", "N", "gen", "batch_tok_s", "roundrobin_tok_s", "speedup",
                 "same_text"], title="aggregate decode tokens/s")
    summary["batch8_over_roundrobin"] = summary[f"{MODELS[-1]}_batch8_over_roundrobin"]
    config = {"models": MODELS, "concurrency": CONCURRENCY, "gen": GEN, "repeat": REPEAT,
              "threads": threads, "workers": 1, "max_batch": 8, "cache_mode": "full"}
    write_results("decode_batch", summary, config, info, rows=rows)


if __name__ == "__main__":
    main()
