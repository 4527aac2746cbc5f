"""The gateway under test: its nginx conf, engines behind it, its status, access log
and keys (shared by the gateway suites and bench/agent.py's gateway mode)."""
import json
import os
import random
import struct
import subprocess

from tests import harness


MODEL = os.path.join(harness.ROOT, "tests", "fixtures", "models", "tiny-qwen35")


MARK = "<|pic_sep|>"


# the gateway's nginx http{} body, shared with bench/agent.py's gateway mode
gw_conf = harness.gateway_conf


def engines(procs, n=2, mode=None):
    """n real engines; mode "pic" pools every segment the first time it is seen
    (an exact-first engine, the default, pools a segment on its second sighting
    outside an exact prefix, and the gateway records only what an engine says
    it pooled: X-PIC-Held)."""
    extra = ["--threads", "1"] + (["--cache-mode", mode] if mode else [])
    return [procs.engine(name=f"e{i + 1}", model=MODEL, extra=extra) for i in range(n)]


def status(ngx):
    code, _, body = harness.http("GET", ngx.url + "/pic/status")
    assert code == 200
    return json.loads(body)


def access_lines(ngx):
    """The planned requests of the pic.log access log, as dicts."""
    rows = []
    with open(os.path.join(ngx.prefix, "logs", "pic.log")) as f:
        for line in f:
            row = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
            row["status"] = line.split()[0]
            if row.get("plan", "-") != "-":
                rows.append(row)
    return rows


def probed(ngx):
    """Wait until the probes have told the gateway every engine's id (and with
    it the model fingerprint the keys are made under: a request planned before
    the first probe answers keys its segments under the model's name, so the
    next request's keys would not find them)."""
    harness.wait_for(lambda: all(e["id"] for e in status(ngx)["engines"]), timeout=5,
                     what="engine ids from probes")


def planned_lines(ngx, n):
    """The first n planned log lines, once nginx has written them."""
    harness.wait_for(lambda: len(access_lines(ngx)) >= n, timeout=5, what=f"{n} log lines")
    return access_lines(ngx)[:n]


def doc(seed, n=600):
    """Deterministic English-ish text of about n bytes."""
    words = ["agent", "tool", "result", "cache", "segment", "prefix", "engine", "token",
             "state", "nginx", "plan", "worker", "index", "memory", "document", "query"]
    out, x = [], seed * 2654435761 % 2**32
    while sum(len(w) + 1 for w in out) < n:
        x = (x * 1103515245 + 12345) % 2**31
        out.append(words[(x >> 16) % len(words)])
    return " ".join(out)


def client(ngx):
    from openai import OpenAI
    return OpenAI(base_url=ngx.url + "/v1", api_key="none", max_retries=0, timeout=60)


def xxh128_key(fp, scope, data, tmpdir):
    """Oracle for DESIGN 4.1 keys: xxh128sum over the framed bytes."""
    path = os.path.join(tmpdir, "framed.bin")
    with open(path, "wb") as f:
        f.write(struct.pack("<I", len(fp)) + fp + struct.pack("<I", len(scope)) + scope + data)
    out = subprocess.run(["xxh128sum", path], capture_output=True, text=True, check=True)
    return out.stdout.split()[0]


# the lockdown and TLS suites' name for it
gw_status = status


def signed(secret, body, timeout=""):
    """A gateway request's body and headers: X-PIC-Auth over (timeout, body)."""
    raw = json.dumps(body).encode()
    hdrs = {"X-PIC-Auth": harness.pool_tag(secret, "pic-plan-v1", timeout, raw)}
    if timeout:
        hdrs["X-PIC-Timeout-Ms"] = timeout
    return raw, hdrs


def post(ngx, body, path="/v1/completions"):
    return harness.http("POST", ngx.url + path, body=body)


def prompt(*docs):
    return MARK.join(docs)


def fresh(tag, n):
    """About n bytes of doc()'s words that share no segment with doc()'s
    texts: doc()'s generator is an LCG whose low bits repeat, so two seeds
    can give overlapping texts (doc(5107, 6000) holds doc(1000, 2000))."""
    rng = random.Random(tag)
    words = doc(0, 200).split()
    out = []
    while sum(len(w) + 1 for w in out) < n:
        out.append(rng.choice(words))
    return " ".join(out)


def ready(ngx, n=2):
    """Engine ids and cache modes learned by the probes; every worker
    connected to redis when there is one."""
    harness.wait_for(lambda: len(status(ngx)["engines"]) == n
                     and all(e["id"] and e["cache_mode"] != "unknown"
                             for e in status(ngx)["engines"]),
                     timeout=5, what="engine ids and cache modes from probes")
    if status(ngx)["redis"]["configured"]:
        harness.wait_for(lambda: status(ngx)["redis"]["up_workers"] == 2, timeout=5,
                         what="both workers connected to redis")
