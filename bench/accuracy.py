"""accuracy.py — answer accuracy of the trained model (models/pic-qa) under PIC.

Held-out items of train/tasks.py (seeds below tasks.HELDOUT_SEEDS, never trained on)
are split into segments as a RAG / agent prompt is cached: the part before the first
document (system, tools, request), each document or tool turn, and the query tail
(question + generation prompt).  Each segment is tokenized alone.  `pic-lab run`
(bench/pic_lab.c) serves every item in every mode from the same segments:

  full      full recompute of the whole prompt (the reference)
  prefix    exact-prefix reuse
  naive     cached entries added without transition operators or seams
  pic w=W   PIC with seam width W in {0, 4, 8, 16, 32}

with f32 and bf16 entries, and decodes greedily.  Exact match: the greedy answer
(up to <|im_end|>, decoded) is the item's answer, tasks.answer_ok (the rule of
train/heldout.py and the tests: the text, whatever token ids produced it).  Per
task and mode: accuracy with a 95% Wilson interval, and against full recompute the
teacher-forced KL and argmax agreement on the answer tokens, the first divergence of
greedy decoding and, per layer, the median rel-L2 of the prompt's end state
(state_rel_l2: a linear layer's recurrent state, an attention layer's K over every
position).

Summary keys (the goals): full_accuracy_single_hop, pic_points_below_full
(at the default seams, f32, over single + distract + tool), naive_points_below_full,
bf16_vs_f32_points (PIC at the default seams), multihop_full / multihop_pic.  The default
seams are the ones `pic-engine serve` takes for the model: its pic_calibration.json's
choice (`make calibrate`: `served.w` for tool turns and other segments, `served.w_doc`
for client-delimited documents), else 8; a RAG item's segments are its documents (served
as marked documents are), a tool item's its turns, so "pic default" takes, per item, the
"pic w=W" run of its class.

Through nginx (`gw` rows, the served configuration: one `pic-engine serve` at its
defaults, the default seam and bf16 entries, behind a `pic on` location): each item is sent as
generated, then as a later agent sends it (another system header; documents of a RAG
item in reverse order), so its documents and tool results, seen again at another
place, are composed from PIC entries (usage.pic.pic_tokens); a `--cache-mode full`
engine answers the same second request (the reference).  Configurations:

  gw markers   documents delimited by `<|pic_sep|>` (one segment each), the gateway's
               default sizes (pic_cdc / pic_min_segment from the engine's break-even
               L*: on models/pic-qa L* = 438 tokens, so segments under 876 bytes, every
               level-0 document, are recomputed: pic_share 0)
  gw cdc       no markers: the gateway's default cuts (structural edges + CDC)
  gw markers64 markers, `pic_min_segment 64;`: every document a PIC segment
               (w32: the engine with `--seam 32`, documents too; one width: with
               `--seam-doc W`, W the served width of the other segments; f32:
               `--entry-dtype f32`)
  gw cdc64     no markers, `pic_cdc 64 256 1024; pic_min_segment 64;`: CDC cuts
               inside documents
Exact match of the shifted request per task, the share of its prompt served from PIC
entries, and the answers equal to the full engine's.  PIC_ACC_GATEWAY=0 skips them.

Usage: make bench-accuracy [QUICK=1]   (PIC_ACC_MODEL=DIR, PIC_ACC_N=items per task;
PIC_ACC_FIRST=S: seeds [S, S + N); PIC_ACC_WS=8,16: seam widths (the default seam always
kept: the summary's); PIC_ACC_DTYPES=f32: entry dtypes (f32 always kept); PIC_ACC_GATEWAY=0;
PIC_ACC_NAME=NAME: bench/results/NAME.json; PIC_WEIGHTS=FORMAT: every mode's weight
format, recorded as config.weights)
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

from bench.common import (PIC_LAB, QUICK, ROOT, ServeEngine, machine, need_binary, table, wilson,
                    write_results)

from train import tasks  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

MODEL = os.environ.get("PIC_ACC_MODEL", os.path.join(ROOT, "models", "pic-qa"))
N = int(os.environ.get("PIC_ACC_N", "10" if QUICK else "50"))
LEVEL = int(os.environ.get("PIC_ACC_LEVEL", "0"))
FIRST = int(os.environ.get("PIC_ACC_FIRST", "0"))


def served_seam(model):
    """The seam widths (w, w_doc) `pic-engine serve --model MODEL` takes at its
    defaults: the other PIC segments', client-delimited documents'."""
    try:
        with open(os.path.join(model, "pic_calibration.json")) as f:
            doc = json.load(f)
        if "served" in doc:
            return int(doc["served"]["w"]), int(doc["served"]["w_doc"])
        return int(doc["chosen"]["w"]), int(doc["chosen"]["w"])
    except (OSError, ValueError, KeyError):
        return 8, 8


DEFAULT_W, DEFAULT_W_DOC = served_seam(MODEL)
WS = sorted({DEFAULT_W, DEFAULT_W_DOC} | {int(w) for w in os.environ.get(
    "PIC_ACC_WS", "8" if QUICK else "0,4,8,16,32").split(",")})
DTYPES = ["f32"] + [d for d in os.environ.get(
    "PIC_ACC_DTYPES", "f32" if QUICK else "f32,bf16").split(",") if d not in ("f32", "")]
NAME = os.environ.get("PIC_ACC_NAME", "accuracy")
GATEWAY = os.environ.get("PIC_ACC_GATEWAY", "1") != "0"
MARK = tasks.PIC_MARK
GW_TASKS = ["single", "distract", "tool", "multihop"]
GW_CONFIGS = [  # (name, markers, gateway conf, engine options)
    ("gw markers", True, "", []), ("gw cdc", False, "", []),
    ("gw markers64", True, "pic_min_segment 64;", []),
    ("gw markers64 w32", True, "pic_min_segment 64;", ["--seam", "32"]),
    ("gw markers64 one width", True, "pic_min_segment 64;", ["--seam-doc", str(DEFAULT_W)]),
    ("gw markers64 f32", True, "pic_min_segment 64;", ["--entry-dtype", "f32"]),
    ("gw cdc64", False, "pic_cdc 64 256 1024; pic_min_segment 64;", [])]


def segments(it):
    """The prompt text of an item cut into cacheable pieces (concatenation = prompt)."""
    text = tasks.prompt_text(it)
    cuts = []
    if it["tools"] is None:
        # documents: "[k] " blocks of the last user message
        for k in range(1, len(it["docs"]) + 1):
            i = text.find("\n\n[%d] " % k)
            if i >= 0:
                cuts.append(i + 2)
        q = text.rfind("\n\nQuestion: ")
        if q >= 0:
            cuts.append(q + 2)
    else:
        # agent turns: each <|im_start|> after the system turn, last user turn = query
        i = text.find("<|im_start|>", 1)
        while i >= 0:
            cuts.append(i)
            i = text.find("<|im_start|>", i + 1)
        last_user = text.rfind("<|im_start|>user")
        cuts = [c for c in cuts if c <= last_user] or [text.rfind("<|im_start|>assistant")]
    cuts = sorted(set(c for c in cuts if 0 < c < len(text)))
    bounds = [0] + cuts + [len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def run_task(tok, eos, task, dtype):
    """pic-lab over N held-out items of one task: {mode key: [per-item result]}."""
    docs, reqs, golds, rag = [], [], [], []
    for s in range(FIRST, FIRST + N):
        it = tasks.item(task, s, LEVEL)
        rag.append(it["tools"] is None)
        segs = [tok.encode(x).ids for x in segments(it)]
        gold = tok.encode(it["answer"]).ids + [eos]
        base = len(docs)
        docs.extend(segs[:-1])
        reqs.append({"docs": list(range(base, len(docs))), "query": segs[-1],
                     "teacher": gold[:-1], "greedy": len(gold) + 4, "compare": True,
                     "ws": WS, "modes": ["full", "prefix", "naive", "pic"]})
        golds.append((gold, it["answer"]))
    spec = {"ws": WS, "dtype": dtype, "whole": True, "docs": docs, "requests": reqs}
    p = subprocess.run([PIC_LAB, "run", "--model", MODEL, "--threads", "0"],
                       input=json.dumps(spec), stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    if p.returncode != 0:
        sys.exit("pic-lab run failed on %s/%s" % (task, dtype))
    out = json.loads(p.stdout)
    res = {}
    for rq, (gold, answer) in zip(out["requests"], golds):
        for r in rq["runs"]:
            key = r["mode"] if r["mode"] in ("full", "prefix", "naive") else \
                "%s w=%d" % (r["mode"], r["w"])
            g = r.get("greedy", [])
            fd = r.get("first_divergence", -1)
            res.setdefault(key, []).append({
                "ok": tasks.answer_ok(tok.decode(g[:g.index(eos)] if eos in g else g), answer),
                "kl": r.get("kl_mean", 0.0), "agree": r.get("argmax_match", 1.0),
                "first_div": fd if fd < len(gold) else -1,
                "rel": [la["rel_l2"] for la in r.get("layers", [])]})
    # the served default: documents at the documents' width, tool turns at the other
    res["pic default"] = [res["pic w=%d" % (DEFAULT_W_DOC if d else DEFAULT_W)][i]
                          for i, d in enumerate(rag)]
    return res


# --- through nginx ------------------------------------------------------------------

def gw_bodies(it, marked):
    """(first, shifted) request bodies of an item: as generated, then with another
    system header and, for documents, in reverse order (same question); marked:
    every document between <|pic_sep|> markers (the rendered prompt is the same)."""
    import random
    body = tasks.request_json(it)
    msgs = body["messages"]

    def docs_msg(order):
        return tasks.docs_message(it, order, MARK if marked else None)

    rag = it["tools"] is None
    first = [dict(m) for m in msgs]
    if rag:
        first[-1] = dict(first[-1], content=docs_msg(range(len(it["docs"]))))
    second = [dict(m) for m in first]
    if rag:
        second[-1] = dict(second[-1], content=docs_msg(range(len(it["docs"]) - 1, -1, -1)))
    hdr = "You are %s, the agent of the %s desk. Answer from the context." % (
        tasks._name(random.Random(it["seed"])), tasks._name(random.Random(-it["seed"])))
    if second[0]["role"] == "system":
        second[0] = dict(second[0], content=hdr)
    else:
        second.insert(0, {"role": "system", "content": hdr})
    return dict(body, messages=first), dict(body, messages=second)


def post(port, body):
    """The answer text and usage of a greedy chat completion."""
    body = dict(body, model="pic-qa", max_tokens=16, temperature=0)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", "/v1/chat/completions", json.dumps(body),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read()
    c.close()
    if r.status != 200:
        sys.exit("POST /v1/chat/completions: %d %s" % (r.status, raw[:300]))
    j = json.loads(raw)
    return (j["choices"][0]["message"].get("content") or "").strip(), j["usage"]


def gw_conf(engine_port, extra):
    return """
    pic_zone pic 16m;
    upstream engines { pic_balancer; server 127.0.0.1:%d; keepalive 8; }
    server {
        listen 127.0.0.1:$PORT;
        location = /__pic_ready { return 204; }
        location /pic/status { pic_status; }
        location /v1/ {
            pic on;
            pic_upstream engines;
            %s
            proxy_pass http://engines;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
""" % (engine_port, extra)


def run_gateway():
    """Rows of the nginx configurations (and the full engine's reference)."""
    from tests import harness          # the processes of the integration tests
    tmp = tempfile.mkdtemp(prefix="pic-acc-")
    items = {t: [tasks.item(t, s, LEVEL) for s in range(FIRST, FIRST + N)] for t in GW_TASKS}
    full = ServeEngine("full", MODEL, tmp, extra=["--cache-mode", "full", "--threads", "1"])
    ref = {t: [post(full.port, gw_bodies(it, False)[1])[0] for it in items[t]]
           for t in GW_TASKS}
    full.stop()
    rows = [{"task": t, "mode": "gw full", "n": N,
             "accuracy": sum(tasks.answer_ok(a, it["answer"])
                             for a, it in zip(ref[t], items[t])) / N,
             "pic_share": 0.0, "same_as_full": 1.0, "differ": []} for t in GW_TASKS]
    for name, marked, extra, eopts in GW_CONFIGS:
        eng = ServeEngine(name.replace(" ", "-"), MODEL, tmp, extra=["--threads", "1"] + eopts)
        ngx = harness.Nginx(tmp, gw_conf(eng.port, extra), name="nginx-" + name.replace(" ", "-"),
                            workers=1)
        t0 = time.time()
        while True:     # the gateway's probe has read the engine (id, break-even)
            st = json.loads(harness.http("GET", ngx.url + "/pic/status")[2])
            if st.get("engines") and all(e.get("id") for e in st["engines"]):
                break
            if time.time() - t0 > 60:
                sys.exit("nginx did not probe the engine (%s)" % tmp)
            time.sleep(0.1)
        for t in GW_TASKS:
            ok = same = pic = prompt = 0
            diff = []
            for it, r in zip(items[t], ref[t]):
                a, b = gw_bodies(it, marked)
                post(ngx.port, a)
                ans, usage = post(ngx.port, b)
                ok += tasks.answer_ok(ans, it["answer"])
                same += ans == r
                if ans != r:
                    diff.append(it["seed"])
                pic += usage.get("pic", {}).get("pic_tokens", 0)
                prompt += usage["prompt_tokens"]
            rows.append({"task": t, "mode": name, "n": N, "accuracy": ok / N,
                         "pic_share": pic / max(prompt, 1), "same_as_full": same / N,
                         "differ": diff})
        ngx.stop()
        eng.stop()
    for r in rows:
        r["ci_lo"], r["ci_hi"] = wilson(round(r["accuracy"] * N), N)
    return rows


def main():
    need_binary(PIC_LAB)
    if FIRST + N > tasks.HELDOUT_SEEDS:
        sys.exit("seeds [%d, %d) are not all held out (< %d)" % (FIRST, FIRST + N,
                                                               tasks.HELDOUT_SEEDS))
    if not os.path.exists(os.path.join(MODEL, "model.safetensors")):
        sys.exit("%s missing (the committed model: models/pic-qa)" % MODEL)
    tok = Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
    eos = next(a["id"] for a in json.load(open(os.path.join(MODEL, "tokenizer.json")))
               ["added_tokens"] if a["content"] == "<|im_end|>")
    info = machine()
    t0 = time.time()
    rows = []
    acc = {}
    for dtype in DTYPES:
        for task in tasks.TASKS:
            res = run_task(tok, eos, task, dtype)
            for key, rs in res.items():
                k = sum(r["ok"] for r in rs)
                lo, hi = wilson(k, len(rs))
                fd = [r["first_div"] for r in rs if r["first_div"] >= 0]
                row = {"dtype": dtype, "task": task, "mode": key, "n": len(rs),
                       "accuracy": k / len(rs), "ci_lo": lo, "ci_hi": hi,
                       "kl_mean": sum(r["kl"] for r in rs) / len(rs),
                       "argmax_agree": sum(r["agree"] for r in rs) / len(rs),
                       "diverged": len(fd),
                       "state_rel_l2": [sorted(v)[len(v) // 2] for v in
                                        zip(*[r["rel"] for r in rs])]}
                rows.append(row)
                acc[(dtype, task, key)] = row["accuracy"]

    table(rows, ["dtype", "task", "mode", "n", "accuracy", "ci_lo", "ci_hi", "kl_mean",
                 "argmax_agree", "diverged"], title="exact-match accuracy (95% Wilson)")

    def pts(mode, dtype="f32", ts=("single", "distract", "tool")):
        return 100.0 * sum(acc[(dtype, t, "full")] - acc[(dtype, t, mode)] for t in ts) / len(ts)

    pic = "pic default"
    summary = {
        "full_accuracy_single_hop": acc[("f32", "single", "full")],
        "pic_points_below_full": pts(pic),
        "naive_points_below_full": pts("naive"),
        "prefix_points_below_full": pts("prefix"),
        "multihop_full": acc[("f32", "multihop", "full")],
        "multihop_pic": acc[("f32", "multihop", pic)],
    }
    if "bf16" in DTYPES:
        summary["bf16_vs_f32_points"] = 100.0 * sum(
            acc[("f32", t, pic)] - acc[("bf16", t, pic)]
            for t in ("single", "distract", "tool")) / 3
    gw_rows = []
    if GATEWAY:
        gw_rows = run_gateway()
        table(gw_rows, ["task", "mode", "n", "accuracy", "ci_lo", "ci_hi", "pic_share",
                        "same_as_full"],
              title="through nginx: exact match of the shifted request (95% Wilson)")
        gw = {(r["mode"], r["task"]): r["accuracy"] for r in gw_rows}
        for name, _, _, _ in GW_CONFIGS:
            key = "_".join(name.split()[1:])
            summary["gw_%s_points_below_full" % key] = 100.0 * sum(
                gw[("gw full", t)] - gw[(name, t)] for t in ("single", "distract", "tool")) / 3
    config = {"model": os.path.relpath(MODEL, ROOT), "items_per_task": N, "level": LEVEL,
              "heldout_seeds": [FIRST, FIRST + N], "ws": WS, "dtypes": DTYPES, "default_w": DEFAULT_W,
              "default_w_doc": DEFAULT_W_DOC,
              "weights": os.environ.get("PIC_WEIGHTS") or "auto",
              "seconds": round(time.time() - t0, 1)}
    if GATEWAY:
        config["gateway"] = {"engine": "defaults (seam %d, documents %d, bf16 entries), "
                                       "--threads 1" % (DEFAULT_W, DEFAULT_W_DOC),
                             "configs": {n: {"markers": m, "conf": e or "defaults",
                                             "engine": " ".join(o) or "defaults"}
                                         for n, m, e, o in GW_CONFIGS},
                             "tasks": GW_TASKS}
    write_results(NAME, summary, config, info, rows=rows, gw_rows=gw_rows)


if __name__ == "__main__":
    main()
