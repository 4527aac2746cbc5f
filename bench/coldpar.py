"""bench/coldpar.py — segment-parallel cold prefill (HYPIC §6.5 shape, DESIGN §3.5).

A cold request (every document a miss): a short system prompt, N documents of
about L tokens each (marked), a short question, on the mid model (models/mid:
hidden 1024, LLLFLLLF, Qwen3.5-0.8B head shapes; random weights: timings only).
Configurations, each with fresh processes and documents never seen before:
  full      one engine, --cache-mode full, pinned to one core, one thread:
            the whole prompt recomputed;
  full2     the same engine given the same total cores as the 2-worker pool:
            two threads on two cores (not pinned), --cache-mode full
            (DESIGN §5: parallel speedups against one core and against an
            engine given the same total cores);
  workers1  a combine engine + 1 worker pinned to a core: the plan assigns
            every document to the worker, which prefills them one at a time
            and streams each entry back as soon as it is built; the combine
            node assembles (seams, query) and answers;
  workers2  the same with 2 workers on 2 cores, documents split by LPT.
The plan is the gateway's wire format (pic_plan.h) built here for the exact
rendered prompt.  TTFT is measured by the client (request sent -> first SSE
chunk).  Breakdown from the engines' /status counters: dispatch forward =
the slowest worker's entry-building seconds; combine forward = the combine
node's assembly seconds (+ its own prefix build); transfer and waiting =
the rest of TTFT.

Goals: speedup_2_workers = T(full) / T(2 workers) >= 1.85 and
scaling_efficiency_2 = T(1 worker) / (2 T(2 workers)) >= 0.9.  Also reported:
speedup_2_workers_vs_2_threads = T(full2) / T(2 workers), the honest baseline at
equal cores (no goal).

QUICK=1: 8 documents of ~128 tokens; full run 8 x ~1k tokens.
"""
import json
import os
import random
import struct
import subprocess
import tempfile

from bench import client  # noqa: E402
from bench.common import ENGINE, QUICK, ROOT, ServeEngine, ensure_model, machine, table, write_results  # noqa: E402

MODEL = os.environ.get("PIC_BENCH_MODEL", os.path.join(ROOT, "models", "mid"))
MARK = "<|pic_sep|>"
N_DOCS = 8
DOC_TOKENS = 128 if QUICK else 1024
REPEAT = 1 if QUICK else 2
SYSTEM = "Answer from the documents."
QUESTION = "Which documents agree?"
WORDS = ("state cache segment prefix seam layer token query document model engine pool "
         "gateway attention recurrent transition operator compose splice position").split()


def count_tokens(text):
    out = subprocess.run([ENGINE, "tokenize", "--model", MODEL, "--text", text],
                         capture_output=True, text=True, check=True).stdout
    return len(out.replace(",", " ").split())


def make_docs(seed):
    """N documents of about DOC_TOKENS tokens each (calibrated once)."""
    rng = random.Random(seed)
    probe = " ".join(rng.choice(WORDS) for _ in range(200))
    per_word = count_tokens(probe) / 200.0
    n_words = max(8, int(DOC_TOKENS / per_word))
    docs = []
    for d in range(N_DOCS):
        words = " ".join(rng.choice(WORDS) for _ in range(n_words))
        docs.append(f"Document {seed}.{d}: {words}.\n")
    return docs


def segment_key(fp, data, tmpdir):
    """DESIGN 4.1 key of a segment (global scope), by xxh128sum: workers
    recompute keys from the text and refuse a plan whose keys do not match."""
    path = os.path.join(tmpdir, "framed.bin")
    fp = fp.encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<I", len(fp)) + fp + struct.pack("<I", 0) + data)
    return subprocess.run(["xxh128sum", path], capture_output=True, text=True,
                          check=True).stdout.split()[0]


def render_and_plan(docs, combine, workers, fp, tmpdir):
    """The Qwen3.5 rendering of the request and a plan cutting it: prefix,
    glue, one "pic" segment per document (assigned by LPT over the workers,
    by token estimate), the dynamic tail."""
    head = f"<|im_start|>system\n{SYSTEM}"
    glue = "<|im_end|>\n<|im_start|>user\n"
    tail = QUESTION + "<|im_end|>\n<|im_start|>assistant\n<think>\n"
    pieces = [(head, "prefix"), (glue, "dynamic")] + [(d, "pic") for d in docs] + \
             [(tail, "dynamic")]
    load = {w: 0 for w in workers}
    segs, off = [], 0
    for i, (text, kind) in enumerate(pieces):
        n = len(text.encode())
        seg = {"key": segment_key(fp, text.encode(), tmpdir), "offset": off,
               "bytes": n, "tokens": (n + 3) // 4, "kind": kind, "holders": [],
               "worker": None}
        if kind == "pic" and workers:
            w = min(workers, key=lambda x: load[x])     # LPT: equal sizes, least loaded
            load[w] += seg["tokens"]
            seg["worker"] = w
        segs.append(seg)
        off += n
    return {"version": 1, "id": "coldpar", "combine": combine, "scope": "", "segments": segs}


class Engine(ServeEngine):
    def __init__(self, name, core, logdir, extra=()):
        super().__init__(name, MODEL, logdir, core=core, extra=[
            "--id", name, "--threads", "1", "--peer-timeout-ms", "600000",
            "--request-timeout-ms", "0"] + list(extra))



def ttft(port, docs, plan=None):
    body = {"model": "mid", "stream": True, "max_tokens": 1, "temperature": 0,
            "ignore_eos": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": MARK.join(docs + [QUESTION])}]}
    if plan is not None:
        body["pic"] = plan
    r = client.stream(port, body, timeout=1200)
    if r["status"] != 200:
        raise RuntimeError(f"HTTP {r['status']}: {r['body'][:300]}")
    return r["ttft"], r["usage"]


def run_full(docs, logdir, threads=1):
    name = "full" if threads == 1 else f"full{threads}"
    if threads == 1:
        eng = Engine(name, 0, logdir, ["--cache-mode", "full"])
    else:
        eng = ServeEngine(name, MODEL, logdir, extra=[
            "--id", name, "--threads", str(threads), "--cache-mode", "full",
            "--request-timeout-ms", "0"])
    try:
        t, usage = ttft(eng.port, docs)
    finally:
        eng.stop()
    return {"config": name, "ttft_s": t, "prompt_tokens": usage["prompt_tokens"]}


def run_workers(n, docs, logdir):
    # PIC only: an exact-first combine node composes no fresh worker entry
    # (docs/ROUTING.md), and the gateway sends it no cold segment at all
    workers = [Engine(f"w{i}", i % 2, logdir, ["--cache-mode", "pic"]) for i in range(n)]
    comb = Engine("combine", 0, logdir, ["--cache-mode", "pic"])
    try:
        plan = render_and_plan(docs, comb.addr, [w.addr for w in workers],
                               comb.status()["model"]["fingerprint"], logdir)
        t, usage = ttft(comb.port, docs, plan)
        cs = comb.status()["cache"]
        ws = [w.status()["cache"] for w in workers]
    finally:
        comb.stop()
        for w in workers:
            w.stop()
    if cs["plans_ignored"] or cs["segment_peer"] != N_DOCS:
        raise RuntimeError(f"the plan was not executed as designed: {cs}")
    dispatch = max(w["build_s"] for w in ws)
    combine = cs["assemble_s"] + cs["build_s"]
    return {"config": f"workers{n}", "ttft_s": t, "prompt_tokens": usage["prompt_tokens"],
            "dispatch_forward_s": dispatch, "combine_forward_s": combine,
            "transfer_wait_s": max(0.0, t - dispatch - combine),
            "frames": sum(w["frames_sent"] for w in ws)}


def main():
    ensure_model(MODEL)
    info = machine(threads=1)
    print(f"machine: {info}", flush=True)
    logdir = tempfile.mkdtemp(prefix="pic-coldpar-")
    random.seed(7)
    best = {}
    rows = []
    for rep in range(REPEAT):
        for cfg in ("full", "full2", "workers1", "workers2"):
            docs = make_docs(1000 * rep + len(rows))    # never seen before
            if cfg.startswith("full"):
                row = run_full(docs, logdir, 2 if cfg == "full2" else 1)
            else:
                row = run_workers(int(cfg[-1]), docs, logdir)
            row["rep"] = rep
            rows.append(row)
            print(json.dumps(row), flush=True)
            if cfg not in best or row["ttft_s"] < best[cfg]["ttft_s"]:
                best[cfg] = row
    t_full, t_full2, t1, t2 = (best[c]["ttft_s"]
                               for c in ("full", "full2", "workers1", "workers2"))
    summary = {
        "ttft_full_s": t_full, "ttft_full_2_threads_s": t_full2,
        "ttft_1_worker_s": t1, "ttft_2_workers_s": t2,
        "speedup_1_worker": t_full / t1, "speedup_2_workers": t_full / t2,
        "speedup_2_workers_vs_2_threads": t_full2 / t2,
        "scaling_efficiency_2": t1 / (2 * t2),
        "breakdown_2_workers_s": {k: best["workers2"][k] for k in
                                  ("dispatch_forward_s", "transfer_wait_s",
                                   "combine_forward_s")},
        "goals": {"speedup_2_workers": ">= 1.85", "scaling_efficiency_2": ">= 0.9"},
    }
    summary["goals_met"] = {"speedup_2_workers": summary["speedup_2_workers"] >= 1.85,
                            "scaling_efficiency_2": summary["scaling_efficiency_2"] >= 0.9}
    table(rows, ["config", "rep", "prompt_tokens", "ttft_s", "dispatch_forward_s",
                 "transfer_wait_s", "combine_forward_s"],
          title=f"cold request, {N_DOCS} x ~{DOC_TOKENS} tokens, every segment a miss")
    write_results("coldpar", summary, {
        "model": os.path.relpath(MODEL, ROOT), "docs": N_DOCS, "doc_tokens": DOC_TOKENS,
        "repeat": REPEAT, "engine_threads": 1, "cache_mode_workers": "pic", "pinning": "taskset: worker i on core i % 2, "
        "combine and full on core 0; full2 not pinned, 2 threads", "entry_dtype": "bf16", "seam": 8,
        "weights": "random (mid preset): timings only"}, info, rows=rows)


if __name__ == "__main__":
    main()
