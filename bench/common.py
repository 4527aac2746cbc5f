"""Shared benchmark plumbing (DESIGN §5): machine facts, tables, results JSON.

Every benchmark NAME runs as `make bench-NAME` (QUICK=1 for a short run) and
writes bench/results/NAME.json with top-level "summary", "machine", "config"
(and usually "rows").  Figures are ratios measured side by side in one run.
"""
import datetime
import http.client
import json
import math
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.path.join(ROOT, os.environ.get("PIC_BUILD", os.environ.get("BUILD", "build")))
ENGINE = os.path.join(BUILD, "pic-engine")
PIC_LAB = os.path.join(BUILD, "pic-lab")  # bench/pic_lab.c
QUICK = os.environ.get("QUICK", "") not in ("", "0")
RESULTS = os.path.join(ROOT, "bench", "results")


def need_binary(path):
    """Exit with a clear message when a binary of `make all` is missing."""
    if not os.access(path, os.X_OK):
        sys.exit("%s missing: run `make BUILD=%s all` first" % (path, os.path.relpath(BUILD, ROOT)))


def ensure_model(model):
    """Directory of the benchmark checkpoint `model` (a preset name of
    tests/tools/make_models.py, e.g. "mid", or a directory named after one),
    generated once when missing."""
    d = model if os.sep in model else os.path.join(ROOT, "models", model)
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        name = os.path.basename(os.path.normpath(d))
        print(f"making {d} (tests/tools/make_models.py --preset {name})", flush=True)
        py = os.path.join(ROOT, ".venv", "bin", "python")
        subprocess.run([py if os.path.exists(py) else sys.executable,
                        os.path.join(ROOT, "tests", "tools", "make_models.py"),
                        "--preset", name, "--out", os.path.dirname(d)], check=True)
    return d


def machine(threads=0):
    """cores, cpu, sgemm GFLOP/s and memcpy GB/s, measured now with the engine's BLAS."""
    out = subprocess.run([ENGINE, "sysinfo", "--threads", str(threads)] +
                         (["--quick"] if QUICK else []),
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def wilson(k, n, z=1.96):
    """95% Wilson interval of k successes out of n."""
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def table(rows, cols, title=None):
    """Print rows (list of dicts) as an aligned text table with the given columns."""
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)
    widths = [max(len(c), *(len(fmt(r.get(c, ""))) for r in rows)) if rows else len(c)
              for c in cols]
    if title:
        print(f"\n{title}")
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(fmt(r.get(c, "")).rjust(w) for c, w in zip(cols, widths)))


def write_results(name, summary, config, machine_info, **extra):
    """Write bench/results/NAME.json and print the summary; returns the path."""
    os.makedirs(RESULTS, exist_ok=True)
    doc = {"benchmark": name, "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "quick": QUICK, "summary": summary, "machine": machine_info, "config": config}
    doc.update(extra)
    path = os.path.join(RESULTS, f"{name}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"\nsummary: {json.dumps(summary)}\nwrote {path}")
    return path


class ServeEngine:
    """`pic-engine serve` on a free loopback port, log under logdir; stop() ends it.

    extra: further serve options; core: pin to that CPU with taskset (None: no pin)."""

    def __init__(self, name, model, logdir, extra=(), core=None, start_timeout=300):
        self.name = name
        self.port_file = os.path.join(logdir, f"{name}.port")
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        self.log = open(os.path.join(logdir, f"{name}.log"), "ab")
        argv = [ENGINE, "serve", "--model", model, "--port", "0",
                "--port-file", self.port_file] + list(extra)
        if "--pool-secret-file" not in extra:
            argv.append("--insecure-pool")          # loopback pools, no credential
        if core is not None:
            argv = ["taskset", "-c", str(core)] + argv
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        t0 = time.time()
        while not (os.path.exists(self.port_file) and open(self.port_file).read().strip()):
            if self.p.poll() is not None or time.time() - t0 > start_timeout:
                raise RuntimeError(f"engine {name} did not start (log: {self.log.name})")
            time.sleep(0.05)
        self.port = int(open(self.port_file).read())
        self.addr = f"127.0.0.1:{self.port}"

    def get(self, path, timeout=30):
        """GET path and decode the JSON answer."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        c.request("GET", path)
        doc = json.loads(c.getresponse().read())
        c.close()
        return doc

    def status(self):
        return self.get("/status")

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
        self.log.close()
