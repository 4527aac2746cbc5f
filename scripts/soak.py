#!/usr/bin/env python3
"""make soak: minutes of mixed traffic against nginx + module + two engines +
Redis while an engine is killed and restarted and Redis is restarted (issue
12; not in CI).

Clients (threads, raw sockets): streamed and plain chat completions, clients
that hang up mid-stream, malformed bodies.  Every request must end with an HTTP
status and, for >= 400, an OpenAI-shaped JSON error; 502/503/504 are expected
only while an engine or Redis is down.  Open fds and RSS of the nginx workers
and of the engine that is never killed are sampled every SOAK_SAMPLE seconds
after warm-up (the engines' caches are given 8 MiB budgets, full by then); at
the end (idle again) fds must be back where they were and private RSS
(RssAnon: the shared zone is not a worker's own) within SOAK_RSS_SLACK of its
first sample (plus 2 MiB, or for the engine its 16 MiB of cache budgets).  With ASAN=1 the sanitized nginx,
module and engine run (build them with `make ASAN=1`) and any sanitizer report
fails the run.

  SOAK_SECONDS=300 SOAK_CLIENTS=16 make soak
Writes $BUILD/soak.json (the samples: the RSS curve) and prints a summary.
"""
import json
import os
import random
import shutil
import signal
import socket
import sys
import threading
import time

from tests import harness  # noqa: E402

if harness.ASAN:
    # the sanitizer settings of scripts/test.sh (make test-asan): nginx's own
    # core is suppressed, the module and the engine stay fully checked
    os.environ.setdefault("ASAN_OPTIONS", "detect_leaks=1:detect_odr_violation=0:"
                                          "abort_on_error=0:halt_on_error=1")
    os.environ.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=0:suppressions="
                          + os.path.join(harness.ROOT, "tests", "ubsan.supp"))
    os.environ.setdefault("LSAN_OPTIONS", "suppressions="
                          + os.path.join(harness.ROOT, "tests", "lsan.supp"))

SECONDS = int(os.environ.get("SOAK_SECONDS", "300"))
CLIENTS = int(os.environ.get("SOAK_CLIENTS", "16"))
SAMPLE = float(os.environ.get("SOAK_SAMPLE", "10"))
RSS_SLACK = float(os.environ.get("SOAK_RSS_SLACK", "0.10"))   # of the first sample
MODEL = os.path.join(harness.ROOT, "tests", "fixtures", "models", "tiny-qwen35")
MARK = "<|pic_sep|>"
WORDS = ["agent", "tool", "result", "cache", "segment", "prefix", "engine", "token",
         "state", "nginx", "plan", "worker", "index", "memory", "document", "query"]


def text(rng, n):
    out = []
    while sum(len(w) + 1 for w in out) < n:
        out.append(rng.choice(WORDS))
    return " ".join(out)


def conf(engines, redis_port, secret):
    ups = "\n".join(f"        server 127.0.0.1:{p} max_fails=0;" for p in engines)
    return f"""
    pic_zone pic 16m;
    pic_redis 127.0.0.1:{redis_port};
    pic_pool_secret_file {secret};
    pic_health_check interval=500ms timeout=500ms;
    upstream engines {{
        pic_balancer;
{ups}
        keepalive 8;
    }}
    server {{
        listen 127.0.0.1:$PORT;
        location = /__pic_ready {{ return 204; }}
        location /pic/status {{ pic_status; }}
        location /v1/ {{
            pic on;
            pic_upstream engines;
            pic_cdc 64 256 1024;
            pic_min_segment 64;
            proxy_pass http://engines;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 30s;
        }}
    }}
"""


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.status = {}
        self.bad = []           # (what, detail)
        self.disrupted = False  # an engine or Redis is down (or just came back)

    def add(self, kind, status, detail=""):
        with self.lock:
            self.status[(kind, status)] = self.status.get((kind, status), 0) + 1
            expected = {"good": (200,), "stream": (200,), "hangup": (200, None),
                        "malformed": (400,)}[kind]
            # while an engine is being killed a stream on it is cut, or a
            # request gets 502/503/504; nothing else is expected, ever
            if status not in expected and not (
                    self.disrupted and status in (502, 503, 504, "stream cut")):
                self.bad.append((kind, status, detail[:300]))


def request(port, body, hang_up=False):
    """POST a chat completion on a raw socket; (status, body bytes)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: soak\r\n"
                  b"Connection: close\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(raw), raw))
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                return None, data
            data += chunk
        status = int(data.split(b" ", 2)[1])
        if hang_up:
            return status, data
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return status, data
    finally:
        s.close()


def client(i, port, stop, stats):
    rng = random.Random(1000 + i)
    docs = [text(random.Random(d), 400) for d in range(12)]
    while not stop.is_set():
        kind = rng.choices(["good", "stream", "hangup", "malformed"], [4, 4, 1, 1])[0]
        msgs = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": MARK.join(rng.sample(docs, 3)
                                                      + [f"question {rng.random()}"])}]
        body = {"model": "m", "max_tokens": 4, "messages": msgs,
                "stream": kind in ("stream", "hangup")}
        if kind == "malformed":
            body = rng.choice([b"{", b'{"model": "m", "messages": 3}', b"\xff\xfe",
                               b'{"model": "m", "messages": [], "pic": {}}'])
        try:
            status, data = request(port, body, hang_up=(kind == "hangup"))
        except OSError as e:
            stats.add(kind, "socket:" + type(e).__name__, str(e))
            continue
        if status is None:
            stats.add(kind, "no response", data.decode(errors="replace"))
            continue
        if status >= 400:
            payload = data.split(b"\r\n\r\n", 1)[1]
            try:
                err = json.loads(payload)["error"]
                assert {"message", "type", "param", "code"} <= set(err)
            except (ValueError, KeyError, AssertionError, TypeError):
                stats.add(kind, "not OpenAI JSON", payload.decode(errors="replace"))
                continue
        elif kind == "stream" and b"data: [DONE]" not in data:
            stats.add(kind, "stream cut", data[-200:].decode(errors="replace"))
            continue
        stats.add(kind, status, data[-300:].decode(errors="replace"))


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(p))
            except (OSError, ValueError, IndexError):
                pass
    return sorted(out)


def usage(pid):
    """(private RSS KiB, open fds) of pid: RssAnon, so that the pages of the
    shared zone a worker touches (the same for every worker) are not
    counted as its own growth."""
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def sample(ngx, eng):
    doc = {"t": time.time()}
    for w in children(ngx.popen.pid):
        try:
            doc[f"nginx-worker-{w}"] = usage(w)
        except (OSError, StopIteration):
            pass
    doc["engine-e1"] = usage(eng.popen.pid)
    return doc


def main():
    logdir = os.path.join(harness.BUILD, "soak")
    shutil.rmtree(logdir, ignore_errors=True)     # a previous run's logs are not this run's
    os.makedirs(logdir, exist_ok=True)
    started = []
    stats = Stats()
    stop = threading.Event()
    try:
        secret, _ = harness.pool_secret(logdir)
        red = harness.Redis(logdir)
        started.append(red)
        # small cache budgets: full during warm-up, so growth after it is a leak
        extra = ["--threads", "1", "--pool-secret-file", secret,
                 "--redis", f"127.0.0.1:{red.port}", "--pool-bytes", str(8 << 20),
                 "--prefix-bytes", str(8 << 20)]
        e1 = harness.Engine(logdir, name="e1", model=MODEL, extra=extra)
        e2 = harness.Engine(logdir, name="e2", model=MODEL, extra=extra)
        started += [e1, e2]
        ngx = harness.Nginx(logdir, conf([e1.port, e2.port], red.port, secret))
        started.append(ngx)
        print(f"soak: {SECONDS}s, {CLIENTS} clients, nginx :{ngx.port}, engines "
              f":{e1.port} :{e2.port}, redis :{red.port}{' (ASan)' if harness.ASAN else ''}")

        threads = [threading.Thread(target=client, args=(i, ngx.port, stop, stats),
                                    daemon=True) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        t0 = time.time()
        warm = max(20.0, SECONDS * 0.2)
        samples, events = [], []
        kill_at, redis_at = SECONDS / 3, 2 * SECONDS / 3
        next_sample = warm
        while time.time() - t0 < SECONDS:
            now = time.time() - t0
            if now >= next_sample:
                samples.append(sample(ngx, e1))
                next_sample += SAMPLE
            if kill_at is not None and now >= kill_at:
                kill_at = None
                events.append((round(now, 1), "engine e2 killed (SIGKILL)"))
                with stats.lock:
                    stats.disrupted = True
                e2.stop(signal.SIGKILL)
                time.sleep(5)
                e2 = harness.Engine(logdir, name="e2", model=MODEL,
                                    extra=extra + ["--port", str(e2.port)])
                started.append(e2)
                events.append((round(time.time() - t0, 1), "engine e2 restarted"))
                time.sleep(5)
                with stats.lock:
                    stats.disrupted = False
            if redis_at is not None and now >= redis_at:
                redis_at = None
                events.append((round(now, 1), "redis restarted"))
                with stats.lock:
                    stats.disrupted = True
                red.stop()
                time.sleep(2)
                red = harness.Redis(logdir, name="redis2", port=red.port)
                started.append(red)
                time.sleep(5)
                with stats.lock:
                    stats.disrupted = False
            time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join(90)
        time.sleep(3)                   # idle again: keepalive settles
        samples.append(sample(ngx, e1))
    finally:
        stop.set()
        for p in reversed(started):
            p.stop()

    failures = list(stats.bad)
    first, last = samples[0], samples[-1]
    growth = {}
    for name in first:
        if name == "t" or name not in last:
            continue
        (rss0, fd0), (rss1, fd1) = first[name], last[name]
        growth[name] = {"rss_kib": [rss0, rss1], "fds": [fd0, fd1]}
        if fd1 > fd0 + 8:               # keepalive 8 per worker may differ
            failures.append((name, "fds grew", f"{fd0} -> {fd1}"))
        # an engine's caches may still be filling at the first sample: its
        # budgets (8 MiB pool + 8 MiB prefix tree) are allowed on top
        budget = 16 * 1024 if name.startswith("engine") else 2048
        if rss1 > rss0 * (1 + RSS_SLACK) + budget:
            failures.append((name, "RSS grew", f"{rss0} -> {rss1} KiB"))
    expected = ("redis", "connect() failed", "prematurely closed", "recv() failed",
                "no live upstreams", "readv() failed")  # while e2 or redis is down
    bad_logs = [line for p in started for line in p.bad_lines()
                if not any(x in line for x in expected)]
    failures += [("log", line, "") for line in bad_logs[:20]]
    counts = {f"{k}:{s}": n for (k, s), n in sorted(stats.status.items(), key=str)}
    doc = {"seconds": SECONDS, "clients": CLIENTS, "asan": harness.ASAN, "events": events,
           "counts": counts, "growth": growth, "samples": samples,
           "failures": [list(map(str, f)) for f in failures]}
    with open(os.path.join(harness.BUILD, "soak.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print("requests:", json.dumps(counts))
    print("events:", events)
    for name, g in growth.items():
        print(f"  {name:24s} RSS {g['rss_kib'][0]:>8} -> {g['rss_kib'][1]:>8} KiB   "
              f"fds {g['fds'][0]:>4} -> {g['fds'][1]:>4}")
    if failures:
        print(f"soak FAILED: {len(failures)} problem(s)")
        for f in failures[:30]:
            print("  ", *f)
        return 1
    print(f"soak passed ({sum(stats.status.values())} requests); "
          f"samples in {harness.BUILD}/soak.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
