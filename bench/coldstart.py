"""A served turn started cold against the same turn started hot (DESIGN §5).

bench/agent.py finds the exact-first engine's TTFT well above its forward alone on an idle
machine, while PIC_TRACE=1 places under 1 ms of a demo turn outside the forward. The forward
alone runs straight after its warm-up; a served turn starts after an idle spell (the
engine's OpenMP threads parked, the cores idle). This bench times the same served work both
ways, side by side in one run, with the same engine binary and settings:

  exact  two exact-first engines fed the same agent loop (bench/agent.py's sessions and
         turns); before each timed turn engine "cold" idles GAP seconds, engine "hot" serves
         an unrelated warm-up request (a short prompt of its own, which shares no block with
         the sessions) immediately before.  Both hold the same tree, so the work is the same.
  full   one full-recompute engine: each turn's body after GAP seconds of idle (cold), then
         the same body at once again (hot): the same work twice.

Summary keys (p50 over the turns after the first): exact_cold_over_hot and
full_cold_over_hot (TTFT cold / hot: 1.0 means no cold-start cost), and the agent loop's
speedup of exact first over full recompute served cold (as bench/agent.py times it) and hot.
QUICK=1: the demo model (about 30 s); else the mid model on the same texts (AGENT_SET
mid-short's).  THREADS=N: threads per engine (default: the cores).  The engines' OpenMP
settings come from the environment as for any run (e.g. OMP_PROC_BIND=true binds each
thread of a team to its own core: config.omp_proc_bind). Random weights: the figures are about time, not text.
"""
import os
import tempfile
import time

from bench.common import QUICK, ServeEngine, ensure_model, machine, table, write_results  # noqa: E402

os.environ.setdefault("AGENT_SET", "quick" if QUICK else "mid-short")
from bench import agent  # noqa: E402  (its sessions and turns: the quick texts, demo or mid)

GAP = float(os.environ.get("COLD_GAP_S", "0.3"))    # idle before a cold turn
MODEL = agent.MODEL


def main():
    t_start = time.time()
    info = machine()
    threads = int(os.environ.get("THREADS") or info.get("cores", os.cpu_count() or 1))
    model = ensure_model(MODEL)
    logdir = tempfile.mkdtemp(prefix="bench-coldstart-")
    extra = ["--threads", str(threads), "--cache-bytes", str(6 << 30)]
    warm = {"messages": [{"role": "user", "content": agent.text(999, 1500)}]}
    engines, rows = {}, []
    try:
        for name, mode in (("cold", "exact"), ("hot", "exact"), ("full", "full")):
            engines[name] = ServeEngine(f"coldstart-{name}", model, logdir, start_timeout=300,
                                        extra=["--id", name, "--cache-mode", mode] + extra)
        for label, turn, body in agent.agent_requests():
            time.sleep(GAP)
            ec, _ = agent.post(engines["cold"], body, 1)
            agent.post(engines["hot"], warm, 1)
            eh, _ = agent.post(engines["hot"], body, 1)
            time.sleep(GAP)
            fc, _ = agent.post(engines["full"], body, 1)
            fh, _ = agent.post(engines["full"], body, 1)
            for name in ("cold", "hot"):        # both trees: the turn's session state
                agent.post(engines[name], body, 8)
            rows.append({"turn": label, "t": turn, "exact_cold_ms": 1e3 * ec,
                         "exact_hot_ms": 1e3 * eh, "full_cold_ms": 1e3 * fc,
                         "full_hot_ms": 1e3 * fh})
            print(f"{label}: exact cold {1e3 * ec:.1f} hot {1e3 * eh:.1f} ms, "
                  f"full cold {1e3 * fc:.1f} hot {1e3 * fh:.1f} ms", flush=True)
    finally:
        for eng in engines.values():
            eng.stop()
    rs = [r for r in rows if r["t"] > 0]

    def p50(k):
        return agent.pct([r[k] for r in rs], 0.5)

    table(rows, ["turn", "exact_cold_ms", "exact_hot_ms", "full_cold_ms", "full_hot_ms"],
          f"served turns cold ({GAP} s idle before) and hot (machine shared)")
    summary = {"exact_cold_over_hot": p50("exact_cold_ms") / p50("exact_hot_ms"),
               "full_cold_over_hot": p50("full_cold_ms") / p50("full_hot_ms"),
               "agent_loop_speedup_cold": p50("full_cold_ms") / p50("exact_cold_ms"),
               "agent_loop_speedup_hot": p50("full_hot_ms") / p50("exact_hot_ms"),
               "exact_ttft_p50_ms": {"cold": p50("exact_cold_ms"), "hot": p50("exact_hot_ms")},
               "full_ttft_p50_ms": {"cold": p50("full_cold_ms"), "hot": p50("full_hot_ms")}}
    config = {"model": MODEL, "threads": threads, "gap_s": GAP,
              "sessions": agent.SESSIONS, "turns": agent.TURNS,
              "timing": "one non-streamed request with max_tokens 1 per turn (~TTFT); "
                        "p50 over the turns after the first",
              "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY",
                                                "passive, GOMP_SPINCOUNT=2000 (engine default)"),
              "omp_proc_bind": os.environ.get("OMP_PROC_BIND", "unset"),
              "wall_s": round(time.time() - t_start, 1)}
    write_results("coldstart", summary, config, info, rows=rows)


if __name__ == "__main__":
    main()
