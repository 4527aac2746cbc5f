"""Shared benchmark plumbing (DESIGN §5): machine facts, tables, results JSON.

Every benchmark NAME runs as `make bench-NAME` (QUICK=1 for a short run) and
writes bench/results/NAME.json with top-level "summary", "machine", "config"
(and usually "rows").  Figures are ratios measured side by side in one run.
"""
import datetime
import json
import os
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.path.join(ROOT, os.environ.get("PIC_BUILD", os.environ.get("BUILD", "build")))
ENGINE = os.path.join(BUILD, "pic-engine")
QUICK = os.environ.get("QUICK", "") not in ("", "0")
RESULTS = os.path.join(ROOT, "bench", "results")


def machine(threads=0):
    """cores, cpu, sgemm GFLOP/s and memcpy GB/s, measured now with the engine's BLAS."""
    out = subprocess.run([ENGINE, "sysinfo", "--threads", str(threads)] +
                         (["--quick"] if QUICK else []),
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


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
