#!/usr/bin/env python3
"""bench/tokenizer.py — encode throughput: pic-engine's tokenizer vs `tokenizers`.

Same tokenizer.json (tests/tools/make_tokenizer.py, qwen3_5 layout), same
corpus, same thread count on both sides:
  whole    the corpus as one string, 1 thread
           (pic: `tokenize --time N`; tokenizers: Tokenizer.encode)
  lines/T  each line a separate encode, T threads
           (pic: `--time N --lines --threads T`; tokenizers: encode_batch_fast
           with RAYON_NUM_THREADS=T, in its own process)
The corpus is mixed text found on the machine (GPL licence texts, Python
stdlib sources) plus CJK / emoji / combining-mark lines, fixed and ordered.
Both sides must produce the same number of ids (checked).

Prints a table and writes bench/results/tokenizer.json.  QUICK=1: ~1 MB corpus,
fewer repeats (well under 2 minutes).
"""
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.path.join(ROOT, os.environ.get("PIC_BUILD", os.environ.get("BUILD", "build")))
ENGINE = os.path.join(BUILD, "pic-engine")
QUICK = os.environ.get("QUICK", "0") not in ("", "0")
from tests.tools.make_tokenizer import make_tokenizer  # noqa: E402

EXTRA = ("我们今天去公园散步，天气非常好。机器学习是人工智能的一个分支。\n"
         "日本語のテキストも含まれています。한국어 문장도 포함되어 있습니다.\n"
         "Emoji 😀 👩‍💻 👨‍👩‍👧‍👦 🇫🇷 👍🏽 and Cafe\u0301 re\u0301sume\u0301 nai\u0308ve.\n")


def build_corpus(target_bytes):
    parts = []
    files = sorted(glob.glob("/usr/share/common-licenses/*")) + \
        sorted(glob.glob("/usr/lib/python3*/[a-m]*.py"))
    for path in files:
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            try:
                parts.append(f.read().decode("utf-8"))
            except UnicodeDecodeError:
                continue
        parts.append(EXTRA)
    if not parts:
        parts = [EXTRA]
    text, i = "", 0
    out = []
    size = 0
    while size < target_bytes:
        s = parts[i % len(parts)]
        out.append(s)
        size += len(s.encode())
        i += 1
    text = "".join(out)
    raw = text.encode()[:target_bytes]
    return raw.decode("utf-8", "ignore")


def split_lines(text):
    lines = text.split("\n")
    out = [ln + "\n" for ln in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


TOKENIZERS_WORKER = r"""
import json, sys, time
from tokenizers import Tokenizer
path, corpus, mode, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tok = Tokenizer.from_file(path)
text = open(corpus, encoding="utf-8", newline="").read()
if mode == "whole":
    run = lambda: len(tok.encode(text).ids)
else:
    ls = text.split("\n")
    lines = [l + "\n" for l in ls[:-1]] + ([ls[-1]] if ls[-1] else [])
    enc = getattr(tok, "encode_batch_fast", tok.encode_batch)
    run = lambda: sum(len(e.ids) for e in enc(lines))
n = run()  # warm-up (caches, thread pool)
t0 = time.perf_counter()
for _ in range(repeat):
    n2 = run()
dt = time.perf_counter() - t0
print(json.dumps({"ids": n, "seconds": dt}))
"""


def run_tokenizers(path, corpus, mode, threads, repeat):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    p = subprocess.run([sys.executable, "-c", TOKENIZERS_WORKER, path, corpus, mode,
                        str(repeat)], capture_output=True, text=True, env=env, check=True)
    return json.loads(p.stdout)


def run_pic(path, corpus, mode, threads, repeat):
    args = [ENGINE, "tokenize", "--tokenizer", path, "--file", corpus, "--time", "1"]
    if mode == "lines":
        args += ["--lines", "--threads", str(threads)]
    subprocess.run(args, capture_output=True, check=True)          # warm-up (page cache)
    args[args.index("--time") + 1] = str(repeat)
    p = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(p.stdout)


def main():
    if not os.path.exists(ENGINE):
        sys.exit(f"{ENGINE} not found: build it first (make engine)")
    size = (1 << 20) if QUICK else (4 << 20)
    repeat = 2 if QUICK else 5
    ncpu = os.cpu_count() or 1
    thread_counts = sorted({1, min(2, ncpu), ncpu}) if not QUICK else sorted({1, min(2, ncpu)})
    with tempfile.TemporaryDirectory() as tmp:
        tok_path = make_tokenizer(os.path.join(tmp, "tok"), "qwen3_5")
        text = build_corpus(size)
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        nbytes = os.path.getsize(corpus)
        rows = []
        configs = [("whole", 1)] + [("lines", t) for t in thread_counts]
        for mode, threads in configs:
            pic = run_pic(tok_path, corpus, mode, threads, repeat)
            ref = run_tokenizers(tok_path, corpus, mode, threads, repeat)
            pic_mbs = nbytes * repeat / pic["seconds"] / 1e6
            ref_mbs = nbytes * repeat / ref["seconds"] / 1e6
            rows.append({"mode": mode, "threads": threads, "ids": pic["ids"],
                         "ids_match": pic["ids"] == ref["ids"],
                         "pic_mb_per_s": round(pic_mbs, 2),
                         "tokenizers_mb_per_s": round(ref_mbs, 2),
                         "speedup": round(pic_mbs / ref_mbs, 2)})
    print(f"corpus {nbytes / 1e6:.2f} MB, {repeat} repeats, tokenizers "
          f"{__import__('tokenizers').__version__}")
    print(f"{'mode':<8} {'thr':>3} {'ids':>9} {'same':>5} {'pic MB/s':>9} "
          f"{'tokenizers MB/s':>16} {'speedup':>8}")
    for r in rows:
        print(f"{r['mode']:<8} {r['threads']:>3} {r['ids']:>9} {str(r['ids_match']):>5} "
              f"{r['pic_mb_per_s']:>9.2f} {r['tokenizers_mb_per_s']:>16.2f} "
              f"{r['speedup']:>7.2f}x")
    result = {
        "summary": {
            "whole_pic_mb_per_s": rows[0]["pic_mb_per_s"],
            "whole_tokenizers_mb_per_s": rows[0]["tokenizers_mb_per_s"],
            "whole_speedup": rows[0]["speedup"],
            "all_ids_match": all(r["ids_match"] for r in rows),
        },
        "machine": {"cpu_count": ncpu, "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine()},
        "config": {"corpus_bytes": nbytes, "repeat": repeat, "quick": QUICK,
                   "tokenizer": "make_tokenizer qwen3_5 (2000 BPE + 9 added)",
                   "tokenizers_version": __import__("tokenizers").__version__,
                   "engine": ENGINE},
        "rows": rows,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "tokenizer.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    return 0 if result["summary"]["all_ids_match"] else 1


if __name__ == "__main__":
    sys.exit(main())
