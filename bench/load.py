"""bench/load.py — the engine server under load on the RAG workload (DESIGN §5).

Workload (deterministic, seed 20261123): a pool of D documents (~DOC_TOKENS
tokens each, text), Zipf(1.1) popularity; each request is a chat with a fixed
system prompt and a user message of k documents drawn by popularity, in a
fresh random order (re-ranked), joined with the <|pic_sep|> marker, plus a
short question.  Open loop: Poisson arrivals at each offered rate for a fixed
time; every request streams (SSE) MAX_TOKENS tokens (ignore_eos).

Columns, one engine process per mode, same machine, same request sequence:
  pic     --cache-mode pic    (segment entries composed anywhere, seams recomputed)
  prefix  --cache-mode prefix (exact prefix only: the system prompt is reused)
  full    --cache-mode full   (every prompt token recomputed)
Per (mode, rate): p50/p99 TTFT (request sent -> first SSE chunk), generated
tokens/s, completed / refused (429) / failed requests, mean cached tokens.
Each engine is warmed with WARMUP requests first (not measured): PIC is
measured in its steady state, as a long-running server would be.

Model: models/demo (tests/tools/make_models.py --preset demo; random weights:
speed only, nothing about answer quality).  The engine runs with --threads
equal to the cores; the load generator shares the machine (figures are
ratios within one run).

QUICK=1: 3 rates x 6 s per mode, fewer documents; under two minutes.
"""
import http.client
import json
import os
import random
import tempfile
import threading
import time

from bench import client  # noqa: E402
from bench.common import QUICK, ROOT, ServeEngine, ensure_model, machine, table, write_results  # noqa: E402

MODEL = os.environ.get("PIC_BENCH_MODEL", os.path.join(ROOT, "models", "demo"))
MARK = "<|pic_sep|>"
SEED = 20261123
MODES = ["pic", "prefix", "full"]
RATES = [1.0, 2.0, 4.0] if QUICK else [0.5, 1.0, 2.0, 4.0, 8.0]
DURATION = 6.0 if QUICK else 30.0
N_DOCS = 12 if QUICK else 40
K = 3 if QUICK else 4
DOC_WORDS = 150 if QUICK else 300
MAX_TOKENS = 16
WARMUP = 10 if QUICK else 40
SLO_P99_S = 2.0

WORDS = ("state cache segment prefix seam layer token query document model engine pool "
         "gateway attention recurrent transition operator compose splice position index "
         "vector matrix kernel thread request stream answer retrieval ranking chunk").split()


def workload(n_requests):
    """The request bodies, identical for every mode."""
    rng = random.Random(SEED)
    docs = []
    for d in range(N_DOCS):
        words = [rng.choice(WORDS) for _ in range(DOC_WORDS)]
        docs.append(f"Document {d}: " + " ".join(words) + ".\n")
    weights = [1.0 / (i + 1) ** 1.1 for i in range(N_DOCS)]
    system = "You answer questions from the retrieved documents. Cite them. " * 4
    bodies = []
    for r in range(n_requests):
        picked = []
        while len(picked) < K:
            d = rng.choices(range(N_DOCS), weights)[0]
            if d not in picked:
                picked.append(d)
        rng.shuffle(picked)
        user = MARK.join([docs[d] for d in picked] + [f"Question {r}: what do they say?"])
        bodies.append({"model": "demo", "stream": True, "max_tokens": MAX_TOKENS,
                       "temperature": 0, "ignore_eos": True,
                       "stream_options": {"include_usage": True},
                       "messages": [{"role": "system", "content": system.strip()},
                                    {"role": "user", "content": user}]})
    return bodies


class Engine(ServeEngine):
    def __init__(self, mode, threads, logdir):
        super().__init__(mode, MODEL, logdir, start_timeout=60, extra=[
            "--id", mode, "--cache-mode", mode, "--threads", str(threads), "--batch", "8",
            "--queue", "64", "--cache-bytes", str(1 << 30)])



def one_request(port, body, out):
    """Stream one request; out gets ttft (s), total (s), tokens, cached, status."""
    rec = {"status": 0, "ttft": None, "total": None, "tokens": 0, "cached": 0}
    try:
        r = client.stream(port, body, timeout=120)
        rec.update(status=r["status"], ttft=r["ttft"], total=r["total"])
        if r["usage"] is not None:
            rec["tokens"] = r["usage"]["completion_tokens"]
            rec["cached"] = r["usage"]["prompt_tokens_details"]["cached_tokens"]
    except (OSError, http.client.HTTPException):
        rec["status"] = -1
    out.append(rec)


def run_rate(port, bodies, rate, duration, rng):
    """Open-loop Poisson arrivals; returns the records and the wall time."""
    recs, threads = [], []
    t_start = time.perf_counter()
    t_next, i = t_start, 0
    while t_next - t_start < duration and i < len(bodies):
        delay = t_next - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        th = threading.Thread(target=one_request, args=(port, bodies[i], recs))
        th.start()
        threads.append(th)
        i += 1
        t_next += rng.expovariate(rate)
    for th in threads:
        th.join(180)
    return recs, time.perf_counter() - t_start, i


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    ensure_model(MODEL)
    info = machine()
    cores = os.cpu_count() or 1
    print(f"machine: {info}", flush=True)
    per_rate = int(max(RATES) * DURATION * 1.5) + 8
    bodies = workload(WARMUP + per_rate * len(RATES))
    rows, summary = [], {"ttft_p50_ms": {}, "ttft_p99_ms": {}, "tokens_per_s": {},
                         "sustained_rate": {}}
    logdir = tempfile.mkdtemp(prefix="pic-load-")
    for mode in MODES:
        eng = Engine(mode, cores, logdir)
        try:
            warm = []
            for b in bodies[:WARMUP]:
                one_request(eng.port, b, warm)
            at = WARMUP
            summary["ttft_p50_ms"][mode], summary["ttft_p99_ms"][mode] = {}, {}
            summary["tokens_per_s"][mode] = {}
            sustained = 0.0
            for rate in RATES:
                recs, wall, sent = run_rate(eng.port, bodies[at:at + per_rate], rate, DURATION,
                                            random.Random(SEED + int(rate * 100)))
                at += sent
                ok = [r for r in recs if r["status"] == 200 and r["ttft"] is not None]
                ttft = [r["ttft"] for r in ok]
                row = {"mode": mode, "rate": rate, "sent": sent, "ok": len(ok),
                       "429": sum(r["status"] == 429 for r in recs),
                       "failed": sum(r["status"] not in (200, 429) for r in recs),
                       "ttft_p50_ms": pct(ttft, 0.5) * 1e3, "ttft_p99_ms": pct(ttft, 0.99) * 1e3,
                       "tok_per_s": sum(r["tokens"] for r in ok) / wall,
                       "cached_mean": sum(r["cached"] for r in ok) / max(1, len(ok))}
                rows.append(row)
                print(json.dumps(row), flush=True)
                summary["ttft_p50_ms"][mode][str(rate)] = row["ttft_p50_ms"]
                summary["ttft_p99_ms"][mode][str(rate)] = row["ttft_p99_ms"]
                summary["tokens_per_s"][mode][str(rate)] = row["tok_per_s"]
                if row["ok"] == sent and row["ttft_p99_ms"] <= SLO_P99_S * 1e3:
                    sustained = max(sustained, rate)
            summary["sustained_rate"][mode] = sustained
            st = eng.status()
            print(f"{mode}: cache {st.get('cache')}", flush=True)
        finally:
            eng.stop()
    lo = str(RATES[0])
    summary["p50_ttft_speedup_pic_vs_full_at_lowest_rate"] = (
        summary["ttft_p50_ms"]["full"][lo] / summary["ttft_p50_ms"]["pic"][lo])
    summary["p50_ttft_speedup_pic_vs_prefix_at_lowest_rate"] = (
        summary["ttft_p50_ms"]["prefix"][lo] / summary["ttft_p50_ms"]["pic"][lo])
    summary["slo_p99_ttft_s"] = SLO_P99_S
    table(rows, ["mode", "rate", "sent", "ok", "429", "failed", "ttft_p50_ms", "ttft_p99_ms",
                 "tok_per_s", "cached_mean"],
          title="RAG load: TTFT and throughput vs offered rate (req/s)")
    write_results("load", summary, {
        "model": os.path.relpath(MODEL, ROOT), "rates": RATES, "duration_s": DURATION,
        "docs": N_DOCS, "k": K, "doc_words": DOC_WORDS, "max_tokens": MAX_TOKENS,
        "warmup": WARMUP, "engine_threads": cores, "batch": 8, "queue": 64,
        "zipf": 1.1, "seed": SEED}, info, rows=rows)


if __name__ == "__main__":
    main()
