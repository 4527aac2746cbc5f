"""accuracy_smollm2.py — what PIC costs a real model's answers: SmolLM2-135M-Instruct
(the GGUF file make run serves, run by pic-lab with --weights f32: the dequantized
model) on retrieval items built from real prose.

Items (seeded; nothing here was ever trained on): k = 4 or 8 documents of 80–170
tokens, each a paragraph of real English (the licence texts in /usr/share/common-licenses
and the Python standard library's module docstrings, 60–140 tokens) under a title naming
a place ("About the Harwick Library"), with one planted fact ("The Harwick Library has
registry number 48213.") as its first sentence (PIC_ACC_FACT_AT=N: at a random one of
the first N+1 boundaries); the question asks the registry number of one of them ("What
is the registry number of the Harwick Library?").  The shape is chosen so that full
recompute solves the task (longer unrelated paragraphs, the fact deeper, or the question
also before the documents took this 135M model to 0.55–0.75 on 12–20 items).  The fact
is not worded as the question is: with the fact "The registry number of the Harwick
Library is 48213." the model's answer, which restates "The registry number of the …",
mostly copied the first document's sentence (6 of 8 misses on trial items named the
first document's place); worded apart, the only "registry number of the" is the
question's, so the restated name is the asked one (trial seed 7300, k = 4: 22 → 24 of
30; the asked name repeated at the end: 17, the question also first: 19).
PIC_ACC_SEED picks other items for such trials (the reported ones are SEED's).  The prompt is SmolLM2's own chat template (its default
system prompt, the documents and the question in one user message).  Segments, as a
RAG prompt is cached: the part before the first document, each document, the question
with the generation prompt; each tokenized alone.

Modes, every item alike (pic-lab run, one process, the same segments):
  full       full recompute (the reference)
  prefix     exact-prefix reuse
  naive      every document's cached K/V placed (keys re-rotated exactly), no repair
  pic w=W    the same, with the first and last W tokens of each document recomputed
             with full context (EPIC-style seams), W in {4, 16, 32, 64}
  blend r=R  selective recompute (CacheBlend-style, engine/pic/blend.h): layers 0-1 of
             every token in context, then the R share of the documents' tokens whose
             layer-1 K/V moved most through every layer, R in {0.1, 0.2, 0.3, 0.5}

Exact match: the first 5-digit number of the greedy answer (24 tokens) is the asked
office's.  Per k and mode: accuracy with a 95% Wilson interval, the wrong answers that
are another document's number, the teacher-forced KL and argmax agreement against
full recompute over full recompute's own greedy answer, and the share of document
tokens recomputed (in token-layers: blend's selection pass counts 2/L of every
document token).  Summary keys: full_accuracy_k4/k8, naive_points_below_full_k4/k8,
best_points_below_full_at_30pct_k4/k8 (the best mode recomputing at most 30% of the
document tokens), and per mode points_below_full.

Usage: make bench-accuracy_smollm2 [QUICK=1]   (PIC_ACC_N=items per k, default 30;
QUICK: 8; PIC_ACC_K=4,8; PIC_ACC_WS=4,16,32,64; PIC_ACC_RS=0.1,0.2,0.3,0.5)

Through nginx (PIC_ACC_GATEWAY=1, the same items): one engine per mode behind the
module at `make run`'s settings, each item sent as a RAG client sends it (the documents
unmarked in one user message, the gateway's and the engine's own segmentation), first
with the documents in reverse order (which leaves their entries), then, once the
engine's deferred builds are done, in the item's order: "gw full" (--cache-mode full),
"gw served" (the served defaults: the committed calibration), "gw w=16"
(--seam-doc 16).  Rows: exact match and the share of document tokens served from PIC
entries (usage.pic.pic_tokens).

`accuracy_smollm2.py --calibration-prompts FILE [N]` writes N items per k (default 8;
other seeds than the bench's) as chat requests for `pic-engine calibrate`: the
documents unmarked in one user message, as RAG clients send them, SmolLM2's
default system prompt from its template (`make calibrate-smollm2`).
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

from bench.common import BUILD, ENGINE, QUICK, ROOT, machine, need_binary, table, wilson, write_results  # noqa

from tokenizers import Tokenizer  # noqa: E402

PIC_LAB = os.path.join(BUILD, "pic-lab")
GGUF = os.environ.get("PIC_SMOLLM2_GGUF") or os.path.join(
    ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
N = int(os.environ.get("PIC_ACC_N", "8" if QUICK else "30"))
KS = [int(x) for x in os.environ.get("PIC_ACC_K", "4,8").split(",")]
WS = [int(x) for x in os.environ.get("PIC_ACC_WS", "4,16,32,64").split(",")]
RS = [float(x) for x in os.environ.get("PIC_ACC_RS", "0.1,0.2,0.3,0.5").split(",") if x]
SEED = int(os.environ.get("PIC_ACC_SEED", "9100"))   # another seed: trial items, never reported
CAL_SEED = 5100                 # calibration requests: never the bench's items
FACT_AT = int(os.environ.get("PIC_ACC_FACT_AT", "0"))  # the fact after sentence FACT_AT at most
MAX_TOK = int(os.environ.get("PIC_ACC_MAXTOK", "140"))
QFIRST = os.environ.get("PIC_ACC_QFIRST", "0") not in ("", "0")
FULL_ONLY = os.environ.get("PIC_ACC_FULL_ONLY", "") not in ("", "0")
GATEWAY = os.environ.get("PIC_ACC_GATEWAY", "") not in ("", "0")
GW_MODES = [("gw full", ["--cache-mode", "full"]), ("gw served", []),
            ("gw w=16", ["--seam-doc", "16"])]
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
KINDS = ["Library", "Bakery", "Rowing Club", "Railway", "Museum", "Observatory", "Dairy",
         "Brewery", "Harbour", "Theatre", "Orchard", "Mill", "Quarry", "School", "Clinic",
         "Archive"]
NAMES = ["Harwick", "Dunmore", "Ashford", "Kelby", "Marlow", "Fenwick", "Ostrava",
         "Brenton", "Calder", "Whitby", "Lindholm", "Parnell", "Rydal", "Selwyn",
         "Tarrant", "Umber", "Varden", "Wexley", "Yarrow", "Zeller", "Aldwin", "Bramley",
         "Corwen", "Delving", "Elstow", "Farrow", "Gilmore", "Hadley", "Ingram", "Jessop",
         "Keswick", "Loxley", "Morland", "Norbury", "Orwell", "Penrith", "Quarry Hill",
         "Redmire", "Stanway", "Thornby", "Ulverston", "Vickery", "Walden", "Yelland"]
STDLIB = ["argparse", "asyncio", "collections", "configparser", "csv", "datetime",
          "decimal", "difflib", "email", "fractions", "functools", "heapq", "http.client",
          "imaplib", "inspect", "json", "logging", "mailbox", "multiprocessing", "optparse",
          "pickle", "pydoc", "queue", "random", "re", "sched", "shelve", "smtplib",
          "socketserver", "sqlite3", "string", "subprocess", "tarfile", "textwrap",
          "threading", "turtle", "unittest", "urllib.request", "uuid", "wave", "zipfile"]


def paragraphs(tok):
    """Real prose paragraphs of 60–320 tokens (room for the title and the fact)."""
    texts = []
    lic = "/usr/share/common-licenses"
    for name in sorted(os.listdir(lic)) if os.path.isdir(lic) else []:
        p = os.path.join(lic, name)
        if os.path.isfile(p) and not os.path.islink(p):
            texts.append(open(p, errors="replace").read())
    import importlib
    for m in STDLIB:
        try:
            d = importlib.import_module(m).__doc__ or ""
        except Exception:
            d = ""
        texts.append(d)
    out, seen = [], set()
    for t in texts:
        for para in re.split(r"\n\s*\n", t):
            s = " ".join(para.split())
            letters = sum(c.isalpha() or c == " " for c in s)
            if len(s) < 200 or letters < 0.85 * len(s) or s in seen:
                continue
            n = len(tok.encode(s, add_special_tokens=False).ids)
            if 60 <= n <= MAX_TOK:
                seen.add(s)
                out.append(s)
    return out


def item(rng, paras, k):
    names = ["%s %s" % (n, kd) for n, kd in zip(rng.sample(NAMES, k), rng.sample(KINDS, k))]
    nums = rng.sample(range(10000, 99999), k)
    docs = []
    for name, num, para in zip(names, nums, rng.sample(paras, k)):
        sents = re.split(r"(?<=[.;:])\s+", para)
        at = rng.randrange(min(len(sents), FACT_AT) + 1)
        sents.insert(at, "The %s has registry number %d." % (name, num))
        docs.append("About the %s\n%s\n\n" % (name, " ".join(sents)))
    ask = rng.randrange(k)
    q = "What is the registry number of the %s?" % names[ask]
    question = "Question: %s Answer with the number only." % q
    head = "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%sDocuments:\n\n" % (
        SYSTEM, ("Answer this question from the documents below: %s\n\n" % q) if QFIRST else "")
    tail = "%s<|im_end|>\n<|im_start|>assistant\n" % question
    return {"segments": [head] + docs + [tail], "answer": str(nums[ask]), "question": question,
            "others": [str(x) for i, x in enumerate(nums) if i != ask]}


def calibration_prompts(path, n):
    """n items per k as OpenAI chat bodies (JSON Lines) into path."""
    with tempfile.TemporaryDirectory() as d:
        tj = os.path.join(d, "tokenizer.json")
        subprocess.run([ENGINE, "gguf", GGUF, "--tokenizer-json", tj], check=True)
        paras = paragraphs(Tokenizer.from_file(tj))
    with open(path, "w") as f:
        for k in KS:
            rng = random.Random(CAL_SEED + k)
            for _ in range(n):
                it = item(rng, paras, k)
                content = "Documents:\n\n" + "".join(it["segments"][1:-1]) + it["question"]
                f.write(json.dumps({"messages": [{"role": "user", "content": content}],
                                    "max_tokens": 24}) + "\n")


def chat_body(it, order):
    """An item as a RAG client sends it: its documents (in order) unmarked in one
    user message, then the question; SmolLM2's template adds its system prompt."""
    docs = it["segments"][1:-1]
    content = "Documents:\n\n" + "".join(docs[i] for i in order) + it["question"]
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 24,
            "temperature": 0}


def run_gateway(tok, paras, k):
    """Rows of the nginx modes for k documents (the items of run_k)."""
    from bench.common import ServeEngine
    from tests import harness
    rng = random.Random(SEED + k)
    items = [item(rng, paras, k) for _ in range(N)]
    tmp = tempfile.mkdtemp(prefix="pic-acc-gw-")
    rows = []
    for name, extra in GW_MODES:
        eng = ServeEngine(name.replace(" ", "-").replace("=", ""), GGUF, tmp,
                          extra=["--threads", "0"] + extra)
        ngx = harness.Nginx(tmp, harness.gateway_conf([eng.addr], cdc=None, min_segment=None),
                            name="nginx-" + name.replace(" ", "-").replace("=", ""), workers=1)
        harness.wait_for(lambda: all(e.get("id") for e in json.loads(
            harness.http("GET", ngx.url + "/pic/status")[2]).get("engines") or [{}]),
            timeout=60, what="the gateway's probe")
        res = []
        for it in items:
            n_doc = sum(len(tok.encode(d, add_special_tokens=False).ids)
                        for d in it["segments"][1:-1])
            if name != "gw full":
                _post(ngx.url, chat_body(it, list(reversed(range(k)))))
                harness.wait_for(lambda: eng.get("/status")["prefix"]["deferred_builds"]
                                 ["pending"] == 0, timeout=300, what="the deferred builds")
            ans, usage = _post(ngx.url, chat_body(it, range(k)))
            got = first_number(ans)
            res.append({"ok": got == it["answer"], "other": got in it["others"],
                        "pic": usage.get("pic", {}).get("pic_tokens", 0) / max(1, n_doc)})
        ngx.stop()
        eng.stop()
        ok = sum(x["ok"] for x in res)
        lo, hi = wilson(ok, len(res))
        rows.append({"k": k, "mode": name, "n": len(res), "exact_match": ok / len(res),
                     "ci95_lo": lo, "ci95_hi": hi,
                     "wrong_is_other_doc": sum(x["other"] and not x["ok"] for x in res),
                     "doc_tokens_from_entries": sum(x["pic"] for x in res) / len(res)})
    return rows


def _post(url, body):
    from tests import harness
    st, _, raw = harness.http("POST", url + "/v1/chat/completions", body=body, timeout=600)
    if st != 200:
        sys.exit("POST /v1/chat/completions: %d %s" % (st, raw[:300]))
    j = json.loads(raw)
    return j["choices"][0]["message"].get("content") or "", j["usage"]


def lab(spec):
    p = subprocess.run([PIC_LAB, "run", "--model", GGUF, "--threads", "0", "--weights",
                        "f32"], input=json.dumps(spec), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit("pic-lab run failed: %s" % p.stderr[-400:])
    return json.loads(p.stdout)


def first_number(text):
    m = re.search(r"\d{5}", text)
    return m.group(0) if m else None


def run_k(tok, paras, k):
    rng = random.Random(SEED + k)
    items = [item(rng, paras, k) for _ in range(N)]
    enc = [[tok.encode(s, add_special_tokens=False).ids for s in it["segments"]]
           for it in items]
    docs, reqs = [], []
    for segs in enc:
        base = len(docs)
        docs.extend(segs[:-1])
        reqs.append({"docs": list(range(base, len(docs))), "query": segs[-1],
                     "greedy": 24, "compare": True, "modes": ["full"]})
    ref = lab({"dtype": "f32", "whole": True, "docs": docs, "requests": reqs})
    if FULL_ONLY:
        for it, rq in zip(items, ref["requests"]):
            g = rq["runs"][0]["greedy"]
            t = tok.decode(g[:g.index(2)] if 2 in g else g)
            print(first_number(t) == it["answer"], it["answer"], repr(t[:70]), "|",
                  it["question"])
        sys.exit(0)
    teachers = [rq["runs"][0]["greedy"] for rq in ref["requests"]]
    for r, t in zip(reqs, teachers):
        eos = t.index(2) if 2 in t else len(t)
        r.update({"teacher": t[:max(1, eos)], "compare": True, "ws": WS, "rs": RS,
                  "modes": ["full", "prefix", "naive", "pic"] + (["blend"] if RS else [])})
    out = lab({"dtype": "f32", "whole": True, "ws": WS, "docs": docs, "requests": reqs})
    layers = out["model"]["layers"]
    res = {}
    for it, segs, rq in zip(items, enc, out["requests"]):
        doc_tokens = sum(len(s) for s in segs[1:-1])
        head, query = len(segs[0]), len(segs[-1])
        for r in rq["runs"]:
            key = {"pic": lambda: "pic w=%d" % r["w"],
                   "blend": lambda: "blend r=%g" % r["r"]}.get(r["mode"], lambda: r["mode"])()
            g = r.get("greedy", [])
            text = tok.decode(g[:g.index(2)] if 2 in g else g)
            got = first_number(text)
            # document tokens recomputed: what ran through the forward less the
            # query and the head (unless the exact prefix served it); blend's
            # selection pass ran every document token through 2 of the layers
            doc = r.get("recomputed", 0) - query - (head - r.get("prefix_tokens", 0))
            share = max(0, doc) / max(1, doc_tokens)
            if r["mode"] == "blend":
                share += 2.0 / layers
            res.setdefault(key, []).append({
                "ok": got == it["answer"], "other": got in it["others"],
                "kl": r.get("kl_mean", 0.0), "agree": r.get("argmax_match", 1.0),
                "doc_recomputed": min(1.0, share), "answer": text[:60]})
    return res


def main():
    need_binary(PIC_LAB)
    if not os.path.isfile(GGUF):
        sys.exit("%s missing: run make deps" % GGUF)
    with tempfile.TemporaryDirectory() as d:
        tj = os.path.join(d, "tokenizer.json")
        subprocess.run([ENGINE, "gguf", GGUF, "--tokenizer-json", tj], check=True)
        tok = Tokenizer.from_file(tj)
    paras = paragraphs(tok)
    rows, summary, per = [], {}, {}
    if GATEWAY:
        gw = [r for k in KS for r in run_gateway(tok, paras, k)]
        table(gw, ["k", "mode", "n", "exact_match", "ci95_lo", "ci95_hi", "wrong_is_other_doc",
                   "doc_tokens_from_entries"],
              "SmolLM2-135M-Instruct through nginx (the gateway's segmentation)")
        for r in gw:
            key = r["mode"].replace(" ", "_").replace("=", "")
            summary["%s_accuracy_k%d" % (key, r["k"])] = r["exact_match"]
            summary["%s_doc_share_k%d" % (key, r["k"])] = r["doc_tokens_from_entries"]
        write_results("accuracy_smollm2_gateway", summary,
                      {"model": os.path.basename(GGUF), "n_per_k": N, "ks": KS,
                       "seed": SEED, "modes": [m for m, _ in GW_MODES]}, machine(), rows=gw)
        return
    for k in KS:
        res = run_k(tok, paras, k)
        full = sum(x["ok"] for x in res["full"]) / len(res["full"])
        per[k] = {}
        for mode, xs in res.items():
            n, ok = len(xs), sum(x["ok"] for x in xs)
            lo, hi = wilson(ok, n)
            acc = ok / n
            share = sum(x["doc_recomputed"] for x in xs) / n
            row = {"k": k, "mode": mode, "n": n, "exact_match": acc, "ci95_lo": lo,
                   "ci95_hi": hi, "points_below_full": 100 * (full - acc),
                   "wrong_is_other_doc": sum(x["other"] and not x["ok"] for x in xs),
                   "kl_mean": sum(x["kl"] for x in xs) / n,
                   "argmax_agree": sum(x["agree"] for x in xs) / n,
                   "doc_tokens_recomputed": share}
            rows.append(row)
            per[k][mode] = row
        summary["full_accuracy_k%d" % k] = full
        summary["naive_points_below_full_k%d" % k] = per[k]["naive"]["points_below_full"]
        cands = [r for m, r in per[k].items()
                 if m.startswith("pic") or m.startswith("blend") or m == "naive"]
        cands = [r for r in cands if r["doc_tokens_recomputed"] <= 0.30]
        best = min(cands, key=lambda r: r["points_below_full"]) if cands else None
        summary["best_points_below_full_at_30pct_k%d" % k] = \
            best["points_below_full"] if best else None
        summary["best_mode_at_30pct_k%d" % k] = best["mode"] if best else None
    table(rows, ["k", "mode", "n", "exact_match", "ci95_lo", "ci95_hi", "points_below_full",
                 "wrong_is_other_doc", "kl_mean", "argmax_agree", "doc_tokens_recomputed"],
          "SmolLM2-135M-Instruct (f32 dequantized GGUF), retrieval over real prose")
    write_results("accuracy_smollm2", summary,
                  {"model": os.path.basename(GGUF), "weights": "f32", "n_per_k": N,
                   "ks": KS, "ws": WS, "rs": RS, "seed": SEED},
                  machine(), rows=rows)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--calibration-prompts":
        calibration_prompts(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 8)
    else:
        main()
