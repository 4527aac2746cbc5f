"""Exact first vs the other cache modes on agent traffic (DESIGN §3.4, §5).

One engine per cache mode, all started at once with the same threads; every request of
the same deterministic workloads goes to each engine in turn (one request at a time), so
that the load of a shared machine falls on every mode alike:

  agent_loop  S sessions (interleaved) of an append-only tool loop: system prompt + tool
              schemas + task, then per turn an assistant tool call and a tool result
              appended; every turn is a request (max_tokens 1: its latency ~ TTFT).
  mixed       a shared system prompt, then documents drawn from a small pool and
              re-ranked per request (the agentic "rerank" shape), then a question.

Modes: full (recompute everything), prefix (the prefix tree only), pic (PIC entries
only: cold segments built and composed), exact (the tree first, then existing PIC
entries, then recompute: the default).  Per mode and workload: TTFT p50/p99, prompt
tokens computed per request (usage.pic.recomputed_tokens), exact and PIC shares, the
engine's cache bytes per cached token, and whether each request's greedy continuation
(8 tokens) equals the full-recompute engine's, and how far the log-probabilities of the
first generated position (the logits at the last prompt position, log-softmaxed:
`logprobs` + `top_logprobs` over HTTP) are from the full-recompute engine's.

Summary keys: agent_loop_exact_share (goal >= 0.85), agent_loop_ttft_speedup_vs_full
(p50 full / p50 exact over turns after the first; goal >= 8),
agent_loop_ttft_speedup_vs_full_paired (the median over those turns of full's TTFT over
exact's for the same request, the two timed seconds apart: the figure least moved by a
machine whose speed drifts from one minute to the next; config.ttft_ms holds every timed
request), agent_loop_flop_ratio_full_over_exact
(model FLOPs of those turns, full over exact: the speedup's compute bound),
agent_loop_forward_ratio_full_over_exact (the same p50 ratio of the forward alone:
bench/warm_bench.c, no server, tokenizer or cache, same threads, run after the engines
stopped, on each turn's shapes: the whole prompt from position 0 for full, the recomputed
tokens after the rest for exact: the speedup's bound with this engine's kernels, below the
FLOP ratio where a short forward deep in the context is slower per FLOP),
agent_loop_speedup_over_forward_ratio (what serving keeps of that bound: HTTP, rendering,
tokenizing, restore, checkpoints, insert),
agent_loop_forward_cold_ratio_full_over_exact and agent_loop_speedup_over_cold_forward_ratio
(the same with each timed forward started cold, COLD_GAP_MS after the one before, as a
served request starts after an idle spell: threads parked, cores idle; where serving keeps
much more of this bound than of the hot one, the missing wall time is the cold start, not
serving's own work, which PIC_TRACE=1 times per request),
agent_loop_logit_max_abs_err (max |logprob - logprob_full| over the top TOP_LOGPROBS
tokens both engines list at the last prompt position of every turn after the first;
log-softmax shifts all logits of a row alike, so this bounds the error of the logits
relative to their log-sum-exp; goal <= 1e-4), agent_loop_greedy_match,
mixed_ttft_speedup_vs_pic_only (p50 pic / p50 exact; goal >= 1),
mixed_ttft_mean_speedup_vs_pic_only (the same over the mean),
exact_entries_built_after_requests (entries of client-delimited documents the exact-first
engine's keeper built after their first sighting; every timed request waits until none is
pending, so no mode is timed beside another's background work).

AGENT_GATEWAY=1 (make bench-agent AGENT_GATEWAY=1): every mode is nginx with the module in
front of two engines of that mode (tests/harness.py's processes, the gateway
configuration of the integration tests with CDC and minimum segment sized from the
engines); same workloads, keys and table, config.gateway true, written to
bench/results/<name>_gateway.json.

Random-weight models: the figures are about compute and reuse, not answer quality.
Sets (AGENT_SET, named in the JSON's config.set):
  quick      (QUICK=1) the demo model, 2 sessions x 4 turns, 15 mixed requests, short
             texts (< 2 minutes) -> bench/results/agent.json;
  mid-short  the mid model on the quick set's texts and sessions, 9 mixed requests (about
             8 minutes on two idle cores, 2 more for the forward-alone bound: the issue's
             model within one quiet window)
             -> bench/results/agent_mid-short.json;
  full       (default without QUICK) the mid model, 5 sessions x 6 turns, long texts
             (38-45 minutes on two idle Zen 4 cores) -> bench/results/agent.json.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

from bench import client  # noqa: E402
from bench.common import QUICK, ServeEngine, machine, table, write_results  # noqa: E402
from bench.common import BUILD, ensure_model, need_binary  # noqa: E402

SET = os.environ.get("AGENT_SET") or ("quick" if QUICK else "full")
GATEWAY = os.environ.get("AGENT_GATEWAY", "0") == "1"
if SET not in ("quick", "mid-short", "full"):
    sys.exit(f"AGENT_SET={SET}: one of quick, mid-short, full")
SHORT = SET != "full"               # the quick set's texts and sessions
MODEL = "demo" if SET == "quick" else "mid"
SESSIONS = 2 if SHORT else 5
TURNS = 4 if SHORT else 6
MIXED = {"quick": 15, "mid-short": 9, "full": 24}[SET]
MODES = ["full", "prefix", "pic", "exact"]
TOP_LOGPROBS = 20
WARM_BENCH = os.path.join(BUILD, "bench", "warm_bench")
WORDS = ["agent", "tool", "result", "cache", "segment", "prefix", "engine", "token", "state",
         "nginx", "plan", "worker", "index", "memory", "document", "query"]


def text(seed, n):
    """Deterministic English-ish text of about n bytes."""
    out, x, size = [], seed * 2654435761 % 2**32, 0
    while size < n:
        x = (x * 1103515245 + 12345) % 2**31
        out.append(WORDS[(x >> 16) % len(WORDS)])
        size += len(out[-1]) + 1
    return " ".join(out)


TOOLS = [{"type": "function", "function": {
    "name": f"tool{i}", "description": text(50 + i, 600 if SHORT else 3000),
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
    for i in range(2)]
SYSTEM = "You are a coding agent. " + text(7, 1500 if SHORT else 8000)


def agent_requests():
    """The agent loop: (label, body) in send order, sessions interleaved."""
    out = []
    for t in range(TURNS):
        for s in range(SESSIONS):
            msgs = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"task {s}: " + text(100 + s, 400)}]
            for k in range(t):
                cid = f"call_{s}_{k}"
                msgs.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": cid, "type": "function",
                     "function": {"name": "tool0", "arguments": json.dumps({"q": str(k)})}}]})
                msgs.append({"role": "tool", "tool_call_id": cid,
                             "content": text(1000 + 31 * s + k, 500 if SHORT else 2500)})
            out.append((f"s{s}t{t}", t, {"messages": msgs, "tools": TOOLS}))
    return out


def mixed_requests():
    docs = [text(300 + i, 1000 if SHORT else 4000) for i in range(4)]
    out = []
    for r in range(MIXED):
        pick = [docs[(r + k) % 4] for k in range(3)][::(1 if r % 2 else -1)]
        content = "<|pic_sep|>".join(pick + [f"question {r}?"])
        out.append((f"m{r}", 1 if r else 0, {"messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": content}]}))
    return out


def forward_flops(cfg, n, p0):
    """Model FLOPs of a forward of n tokens at positions p0.. with the last token's logits
    (engine/compute/forward.c pic_forward_flops, dense FFN): projections, attention over
    the causal keys, the GDN recurrence, lm_head."""
    c = cfg.get("text_config", cfg)
    H, I = c["hidden_size"], c["intermediate_size"]
    Hk, Hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
    C, vd = 2 * Hk * dk + Hv * dv, Hv * dv
    qd = c["num_attention_heads"] * c["head_dim"]
    kvd = c["num_key_value_heads"] * c["head_dim"]
    f = 2.0 * H * c["vocab_size"]
    for lt in c["layer_types"]:
        if lt == "linear_attention":
            p = H * (C + vd + 2 * Hv) + vd * H
            f += n * 6.0 * Hv * dk * dv
        else:
            p = H * (2 * qd + 2 * kvd) + qd * H
            f += 4.0 * qd * (n * p0 + n * (n + 1) / 2.0)
        f += 2.0 * (p + 3 * H * I) * n
    return f


def post(eng, body, max_tokens, **extra):
    """One greedy chat request to eng: (seconds, answer)."""
    return client.post(eng.port, dict(body, model="m", max_tokens=max_tokens, temperature=0,
                                      **extra))


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


class Gateway:
    """AGENT_GATEWAY=1: one cache mode served by nginx with the module in front of two
    engines (tests/harness.py starts them, as the integration tests do); requests go to
    nginx (port), status() adds up the engines' figures that the bench reads."""

    def __init__(self, mode, model, logdir, extra):
        from tests import harness
        self.engines = []
        try:
            for i in range(2):
                self.engines.append(harness.Engine(logdir, name=f"agent-{mode}-e{i + 1}",
                                                   model=model, extra=extra))
            self.ngx = harness.Nginx(logdir, harness.gateway_conf(
                [f"127.0.0.1:{e.port}" for e in self.engines], cdc=None, min_segment=None,
                # a full recompute of a few thousand tokens on models/mid
                # takes minutes on two cores shared by eight engines
                loc="proxy_read_timeout 900s;"),
                name=f"nginx-{mode}")
        except BaseException:
            self.stop()
            raise
        self.port = self.ngx.port
        self.harness = harness

    def status(self):
        sts = [json.loads(self.harness.http("GET", e.url + "/status")[2]) for e in self.engines]
        return {"memory": {"bytes": sum(engine_bytes(st) for st in sts)},
                "prefix": {"deferred_builds": {k: sum(
                    st.get("prefix", {}).get("deferred_builds", {}).get(k, 0) for st in sts)
                    for k in ("pending", "built")}}}

    def stop(self):
        for p in [getattr(self, "ngx", None)] + self.engines[::-1]:
            if p is not None:
                p.stop()
        bad = [ln for p in [getattr(self, "ngx", None)] + self.engines if p is not None
               for ln in p.bad_lines()]
        if bad:
            print("unexpected log lines:\n" + "\n".join(bad[:10]), file=sys.stderr)


def engine_bytes(st):
    """Cache bytes an engine's /status reports (the one budget, else tree + pool)."""
    return st.get("memory", {}).get("bytes", (
        st.get("prefix", {}).get("bytes", 0) + st.get("cache", {}).get("bytes", 0)))


def _keeper_busy(eng):
    """The engine's keeper still has work a request left it: deferred entry builds, or
    checkpoint buffers to fault into its stock."""
    p = eng.status().get("prefix", {})
    return (p.get("deferred_builds", {}).get("pending", 0)
            or p.get("spare_checkpoints", 0) < p.get("spare_checkpoints_max", 0))


def settle(engines, timeout=120):
    """Wait until no engine's keeper has work left from the last request (exact first
    builds the entries of client-delimited documents on its keeper thread after a request,
    and faults a few checkpoint buffers in while idle): every timed request then finds the
    machine as idle as the others do, whichever engine ran before it."""
    t0 = time.time()
    for eng in engines.values():
        while _keeper_busy(eng) and time.time() - t0 < timeout:
            time.sleep(0.01)


COLD_GAP_MS = 250                   # idle before each cold forward (threads parked, cores idle)


def forward_seconds(model, threads, depth, n, reps, gap_ms=0):
    """Best wall seconds of the forward of n tokens after depth (bench/warm_bench.c: one
    pic_forward as the server feeds a prompt, logits of the last token, on a fresh copy of
    the prefilled state each repetition, after an untimed warm-up; gap_ms > 0: each
    repetition after that much idle time)."""
    r = subprocess.run([WARM_BENCH, model, str(depth), str(n), str(threads), str(reps), "pp",
                        str(gap_ms)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("agent.py: warm_bench failed:\n" + r.stderr[-2000:])
    return json.loads(r.stdout)["seconds"]


def settle_memory(timeout=60.0):
    """Wait until the kernel has taken back what the stopped engines held: MemAvailable
    (/proc/meminfo) rising by under 1% over a second, or timeout seconds; returns the
    seconds waited.  The forwards timed right after four engines with up to 6 GiB of cache
    each stopped read ~25% slow while the memory was reclaimed."""
    def avail():
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1])
        return 0
    t0, last = time.time(), avail()
    while time.time() - t0 < timeout:
        time.sleep(1.0)
        now = avail()
        if now <= last * 1.01:
            break
        last = now
    return time.time() - t0


def forward_p50(model, threads, results):
    """p50 over the agent loop's turns after the first of the forward alone, per mode:
    full recomputes each whole prompt from position 0, exact its recomputed tokens after
    the rest (no engine runs meanwhile); hot (straight after the warm-up) and cold
    (COLD_GAP_MS of idle before each repetition: keys full_cold, exact_cold).  The mid
    model: three of those turns (first, middle, last), each warm_bench loading the model
    and running the forward twice."""
    reps = 3 if MODEL == "demo" else 1     # the same repetitions for both modes
    out = {}
    waited = settle_memory()
    # an untimed forward first: the first timed one no longer follows the engines' exit
    first = [r for r in results["full"]["agent_loop"] if r["turn"] > 0][:1]
    for r in first:
        forward_seconds(model, threads, r["prompt"] - max(1, r["recomputed"]),
                        max(1, r["recomputed"]), 1)
    print(f"forward phase: memory settled in {waited:.1f} s, one untimed forward", flush=True)
    for m in ("full", "exact"):
        rs = [r for r in results[m]["agent_loop"] if r["turn"] > 0]
        if MODEL != "demo" and len(rs) > 3:
            rs = [rs[0], rs[len(rs) // 2], rs[-1]]
        for key, gap in ((m, 0), (m + "_cold", COLD_GAP_MS)):
            out[key] = pct([forward_seconds(model, threads,
                                            r["prompt"] - max(1, r["recomputed"]),
                                            max(1, r["recomputed"]), reps, gap)
                            for r in rs], 0.5)
    return out


def run_modes(model, threads, logdir, workloads):
    engines, res = {}, {m: {} for m in MODES}
    try:
        for mode in MODES:
            extra = ["--cache-mode", mode, "--threads", str(threads),
                     "--cache-bytes", str(6 << 30)]
            if GATEWAY:
                engines[mode] = Gateway(mode, model, logdir, extra)
            else:
                engines[mode] = ServeEngine(f"agent-{mode}", model, logdir,
                                            start_timeout=300, extra=["--id", mode] + extra)
        for wname, reqs in workloads.items():
            for mode in MODES:
                res[mode][wname] = []
            for label, turn, body in reqs:
                for mode in MODES:
                    eng = engines[mode]
                    settle(engines)
                    dt, doc = post(eng, body, 1)        # the timed request (~TTFT)
                    u = doc["usage"]
                    _, g = post(eng, body, 8, logprobs=True,  # greedy continuation, untimed
                                top_logprobs=TOP_LOGPROBS)
                    first = g["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
                    res[mode][wname].append({
                        "label": label, "turn": turn, "ttft": dt,
                        "prompt": u["prompt_tokens"],
                        "cached": u["prompt_tokens_details"]["cached_tokens"],
                        "exact": u.get("pic", {}).get("exact_tokens", 0),
                        "recomputed": u.get("pic", {}).get("recomputed_tokens",
                                                           u["prompt_tokens"]),
                        "pic": u.get("pic", {}).get("pic_tokens", 0),
                        "text": g["choices"][0]["message"]["content"],
                        "top": {tuple(t["bytes"]): t["logprob"] for t in first}})
        for mode, eng in engines.items():
            st = eng.status()
            res[mode]["bytes"] = engine_bytes(st)
            res[mode]["deferred_built"] = st.get("prefix", {}).get("deferred_builds", {}).get(
                "built", 0)
    finally:
        for eng in engines.values():
            eng.stop()
    return res


def main():
    t_start = time.time()
    info = machine()
    threads = int(info.get("cores", os.cpu_count() or 1))
    model = ensure_model(MODEL)
    logdir = tempfile.mkdtemp(prefix="bench-agent-")
    workloads = {"agent_loop": agent_requests(), "mixed": mixed_requests()}
    print(f"machine: {info}\nmodel {MODEL}: {len(workloads['agent_loop'])} agent-loop and "
          f"{len(workloads['mixed'])} mixed requests per mode", flush=True)
    need_binary(WARM_BENCH)
    results = run_modes(model, threads, logdir, workloads)
    fwd = forward_p50(model, threads, results)

    rows, summary = [], {}
    errs = {}
    for w in workloads:
        for m in MODES:
            e = 0.0
            for r, f in zip(results[m][w], results["full"][w]):
                both = set(r["top"]) & set(f["top"])
                if r["turn"] == 0:
                    continue
                if not both:
                    e = None                # no token in common: far off
                    break
                e = max(e, max(abs(r["top"][k] - f["top"][k]) for k in both))
            errs[(w, m)] = e
        ref = [r["text"] for r in results["full"][w]]
        for m in MODES:
            rs = [r for r in results[m][w] if r["turn"] > 0]
            prompt = sum(r["prompt"] for r in rs)
            cached = sum(r["cached"] for r in rs)
            row = {"workload": w, "mode": m,
                   "ttft_p50_ms": 1e3 * pct([r["ttft"] for r in rs], 0.5),
                   "ttft_p99_ms": 1e3 * pct([r["ttft"] for r in rs], 0.99),
                   "ttft_mean_ms": 1e3 * sum(r["ttft"] for r in rs) / max(1, len(rs)),
                   "computed_per_req": (prompt - cached) / max(1, len(rs)),
                   "exact_share": sum(r["exact"] for r in rs) / max(1, prompt),
                   "pic_share": sum(r["pic"] for r in rs) / max(1, prompt),
                   "bytes_per_cached_token": results[m]["bytes"] / max(1, cached),
                   "greedy_match": sum(r["text"] == t for r, t in
                                       zip(results[m][w], ref)) / len(ref),
                   "logprob_max_abs_err": errs[(w, m)]}
            rows.append(row)
    table(rows, ["workload", "mode", "ttft_p50_ms", "ttft_p99_ms", "computed_per_req",
                 "exact_share", "pic_share", "bytes_per_cached_token", "greedy_match",
                 "logprob_max_abs_err"],
          "exact first vs full / prefix / PIC only (turns after the first; machine shared)")
    by = {(r["workload"], r["mode"]): r for r in rows}
    summary["agent_loop_exact_share"] = by[("agent_loop", "exact")]["exact_share"]
    summary["agent_loop_ttft_speedup_vs_full"] = (by[("agent_loop", "full")]["ttft_p50_ms"]
                                                  / by[("agent_loop", "exact")]["ttft_p50_ms"])
    # the same speedup per turn: full's TTFT over exact's of the same request, the two
    # timed seconds apart (every request goes to each mode in turn), so a machine whose
    # speed drifts between minutes weighs on both sides of each ratio alike; the median
    pairs = [f["ttft"] / e["ttft"] for f, e in zip(results["full"]["agent_loop"],
                                                   results["exact"]["agent_loop"])
             if f["turn"] > 0]
    summary["agent_loop_ttft_speedup_vs_full_paired"] = pct(pairs, 0.5)
    # the compute bound of that speedup: model FLOPs of full recompute over those of exact
    # first (its recomputed tokens sit at the prompt's end), turns after the first
    cfg = json.load(open(os.path.join(model, "config.json")))
    fl = {m: sum(forward_flops(cfg, max(1, r["recomputed"]), r["prompt"] - max(1, r["recomputed"]))
                 for r in results[m]["agent_loop"] if r["turn"] > 0) for m in ("full", "exact")}
    summary["agent_loop_flop_ratio_full_over_exact"] = fl["full"] / fl["exact"]
    # the bound with this engine's kernels: the same p50 ratio of the forward alone
    summary["agent_loop_forward_ratio_full_over_exact"] = fwd["full"] / fwd["exact"]
    summary["agent_loop_speedup_over_forward_ratio"] = (
        summary["agent_loop_ttft_speedup_vs_full"]
        / summary["agent_loop_forward_ratio_full_over_exact"])
    # the same bound with every forward started cold, as a served request starts
    summary["agent_loop_forward_cold_ratio_full_over_exact"] = (fwd["full_cold"]
                                                                / fwd["exact_cold"])
    summary["agent_loop_speedup_over_cold_forward_ratio"] = (
        summary["agent_loop_ttft_speedup_vs_full"]
        / summary["agent_loop_forward_cold_ratio_full_over_exact"])
    # what each mode's TTFT p50 is of its forward alone, hot and cold (1.0: serving adds
    # nothing to the forward)
    for m in ("full", "exact"):
        for key in (m, m + "_cold"):
            summary[f"agent_loop_ttft_over_forward_{key}"] = (
                by[("agent_loop", m)]["ttft_p50_ms"] / (1e3 * fwd[key]))
    summary["agent_loop_logit_max_abs_err"] = by[("agent_loop", "exact")]["logprob_max_abs_err"]
    summary["mixed_logit_max_abs_err"] = by[("mixed", "exact")]["logprob_max_abs_err"]
    summary["agent_loop_greedy_match"] = by[("agent_loop", "exact")]["greedy_match"]
    summary["mixed_ttft_speedup_vs_pic_only"] = (by[("mixed", "pic")]["ttft_p50_ms"]
                                                 / by[("mixed", "exact")]["ttft_p50_ms"])
    # the mean shows what p50 cannot: the first two sightings of each document, where
    # exact first recomputes it in place and then builds its entry (the door), and the
    # repeats the tree serves whole
    summary["mixed_ttft_mean_speedup_vs_pic_only"] = (by[("mixed", "pic")]["ttft_mean_ms"]
                                                      / by[("mixed", "exact")]["ttft_mean_ms"])
    # entries of client-delimited documents the exact-first engine(s) built after the
    # requests (keeper thread; settle() waits for them before every timed request)
    summary["exact_entries_built_after_requests"] = results["exact"]["deferred_built"]
    summary["mixed_exact_share"] = by[("mixed", "exact")]["exact_share"]
    summary["mixed_pic_share"] = by[("mixed", "exact")]["pic_share"]
    config = {"set": SET, "gateway": GATEWAY, "engines_per_mode": 2 if GATEWAY else 1,
              "model": MODEL, "sessions": SESSIONS, "turns": TURNS, "mixed": MIXED,
              "threads": threads, "modes": MODES,
              "timing": "one non-streamed request with max_tokens 1 per turn (~TTFT), "
                        "every mode alike; the engines run side by side, each request "
                        "sent to every mode in turn",
              "logit_err": f"untimed greedy request with logprobs, top_logprobs "
                           f"{TOP_LOGPROBS}: max |logprob - full's| at the last prompt "
                           f"position over the tokens both list, turns after the first",
              "forward": "bench/warm_bench MODEL DEPTH N THREADS REPS pp GAP_MS per turn "
                         "after the first (the mid model: the first, middle and last of "
                         "them; full: DEPTH 0, N the prompt; exact: N its recomputed "
                         "tokens), best of REPS, after the engines stopped; p50 per mode; "
                         f"GAP_MS 0 (hot) and {COLD_GAP_MS} (cold: *_cold)",
              "forward_p50_ms": {m: round(1e3 * v, 2) for m, v in fwd.items()},
              "wall_s": round(time.time() - t_start, 1)}
    name = "agent" if SET != "mid-short" else "agent_mid-short"
    # every timed request, so that any other statistic can be read off a run
    config["ttft_ms"] = {w: {m: [[r["label"], r["turn"], round(1e3 * r["ttft"], 1)]
                                 for r in results[m][w]] for m in MODES} for w in workloads}
    write_results(name + ("_gateway" if GATEWAY else ""), summary, config, info, rows=rows)


if __name__ == "__main__":
    main()
