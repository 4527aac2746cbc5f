"""test_trained_model.py — the committed trained model models/pic-qa.

Its logits against transformers (fp32 and fp64) are checked by test_oracle.py
(tests/fixtures/oracle/pic-qa.*, written by tests/tools/oracle.py).  Here:

* its config.json / generation_config.json are what the project's checkpoint writer
  (tests/tools/make_models.py through train/ckpt.py) produces for its tokenizer;
* the engine's own chat template (core/prompt/pic_template.c) renders held-out task
  items as train/tasks.py's renderer does (the text the model was trained on): greedy
  ids from `generate --chat` equal those from `generate --tokens` of render()'s ids;
* train_state.json records the training counters and held-out accuracy per task.
* through nginx and two engines it answers held-out items as a full-recompute engine
  does, and `make run`'s example
  (scripts/ask-pic-qa.json, then scripts/ask-pic-qa-reordered.json) at `make run`'s defaults: right in
  both orders, the second served in part from cache.
"""
import json
import re
import os
import subprocess
import tempfile
import time

import pytest

from tests import harness

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PIC_BUILD", "build")
ENGINE = os.path.join(ROOT, BUILD, "pic-engine") if not os.path.isabs(BUILD) \
    else os.path.join(BUILD, "pic-engine")
MODEL = os.path.join(ROOT, "models", "pic-qa")

from train import tasks  # noqa: E402
from train import ckpt  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def test_config_is_the_writers():
    with tempfile.TemporaryDirectory() as tmp:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            with open(os.path.join(MODEL, f), "rb") as src, \
                    open(os.path.join(tmp, f), "wb") as dst:
                dst.write(src.read())
        ckpt.write_json_files(tmp)
        for f in ("config.json", "generation_config.json"):
            assert open(os.path.join(tmp, f)).read() == open(os.path.join(MODEL, f)).read(), f
    cfg = json.load(open(os.path.join(MODEL, "config.json")))
    tc = cfg["text_config"]
    assert cfg["model_type"] == "qwen3_5" and tc["tie_word_embeddings"]
    assert tc["layer_types"].count("full_attention") * 3 == \
        tc["layer_types"].count("linear_attention")


def _generate(how):
    p = subprocess.run([ENGINE, "generate", "--model", MODEL] + how +
                       ["--max-tokens", "6", "--ids", "--ignore-eos", "--threads", "2"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


@pytest.mark.parametrize("task", tasks.TASKS)
def test_engine_template_is_the_training_template(task):
    tok = Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
    it = tasks.item(task, 7, 0)                 # a held-out seed
    ids = tok.encode(tasks.prompt_text(it)).ids
    a = _generate(["--chat", json.dumps(tasks.request_json(it))])
    b = _generate(["--tokens", ",".join(map(str, ids))])
    assert a == b and a


def test_train_state_records_heldout_accuracy():
    st = json.load(open(os.path.join(MODEL, "train_state.json")))
    assert st["state"]["tokens"] > 0
    assert set(st["heldout"]) == set(tasks.TASKS)
    assert all(0.0 <= v <= 1.0 for v in st["heldout"].values())


# --- answers through nginx ----------------------------------------------------------

def _ask(url, body):
    body = dict(body, model="pic-qa", max_tokens=16, temperature=0)
    st, _, raw = harness.http("POST", url + "/v1/chat/completions", body=body, timeout=120)
    assert st == 200, raw
    j = json.loads(raw)
    return j["choices"][0]["message"]["content"].strip(), j["usage"]


MARK = "<|pic_sep|>"      # a client-delimited document: one segment (docs/ROUTING.md)


def _marked(it, reverse=False):
    """The item's request with every document between markers (the rendered prompt
    is the item's own), its documents reversed if `reverse` (same question)."""
    body = tasks.request_json(it)
    user = body["messages"][-1]
    intro, _, rest = user["content"].partition("\n\n")
    q = rest[rest.rindex("\n\nQuestion: ") + 2:]
    docs = ["[%d] %s" % (i + 1, d) for i, d in enumerate(it["docs"])]
    docs = docs[::-1] if reverse else docs
    user = dict(user, content=intro + "\n\n" + "".join(MARK + d + "\n\n" for d in docs) + MARK + q)
    return dict(body, messages=body["messages"][:-1] + [user])


def _reordered(it):
    return _marked(it, reverse=True)


def test_the_model_answers_through_nginx(procs):
    """Held-out single-hop items through nginx and two pic-qa engines (PIC on,
    documents between markers): 12 held-out items as generated, then with their
    documents reversed.  The first sighting of a client-delimited document leaves
    its PIC entry (the engine's keeper builds it after the request: waited for), so
    the reversed pass is served in part from PIC entries.  In each pass the gateway
    answers as many right as a full-recompute engine does (within one) and at least
    4 of 12 (step 641 answered none)."""
    from tests.support.gateway import gw_conf
    full = procs.engine(name="full", model=MODEL, extra=["--cache-mode", "full", "--threads", "1"])
    es = [procs.engine(name=n, model=MODEL, extra=["--threads", "1"]) for n in ("e1", "e2")]
    ngx = procs.nginx(gw_conf(["127.0.0.1:%d" % e.port for e in es]))
    harness.wait_for(lambda: len(json.loads(harness.http("GET", ngx.url + "/pic/status")[2])["engines"]) == 2
               and all(e["id"] for e in json.loads(harness.http("GET", ngx.url + "/pic/status")[2])["engines"]),
               timeout=10, what="engine ids from probes")

    def builds():
        st = [json.loads(harness.http("GET", e.url + "/status")[2])["prefix"]["deferred_builds"]
              for e in es]
        return sum(b["built"] for b in st), sum(b["pending"] for b in st)

    items = [tasks.item("single", s, 0) for s in range(20, 32)]    # held-out seeds
    pic_tokens = []
    for body_of in (_marked, _reordered):
        if body_of is _reordered:
            # the first pass's entries are built after its answers: let the
            # keepers finish (nothing pending, the built count steady) first
            last = [None, 0.0]

            def settled():
                now = builds()
                if now != last[0]:
                    last[:] = [now, time.time()]
                return now[1] == 0 and now[0] > 0 and time.time() - last[1] >= 0.5
            harness.wait_for(settled, timeout=60, what="entry builds")
        right_gw = right_full = pic = 0
        for it in items:
            a_gw, usage = _ask(ngx.url, body_of(it))
            a_full, _ = _ask(full.url, body_of(it))
            right_gw += tasks.answer_ok(a_gw, it["answer"])
            right_full += tasks.answer_ok(a_full, it["answer"])
            pic += usage.get("pic", {}).get("pic_tokens", 0)
        pic_tokens.append(pic)
        assert right_gw >= right_full - 1 and right_gw >= 4, \
            (body_of.__name__, right_gw, right_full)
    assert pic_tokens[1] > 0, pic_tokens   # the reversed documents came from PIC entries


ASK = os.path.join(ROOT, "scripts", "ask-pic-qa.json")               # make run's example
ASK_REORDERED = os.path.join(ROOT, "scripts", "ask-pic-qa-reordered.json")


def test_make_run_example_is_served_from_cache_when_reordered(procs):
    """Issue 11 item 6: `make run`'s example through nginx at `make run`'s defaults
    (no pic_cdc / pic_min_segment: sized from the engines' break-even length L*) and
    two pic-qa engines (exact first).  scripts/ask-pic-qa-reordered.json is scripts/ask-pic-qa.json
    with its two documents (text parts of the user message: one segment each)
    swapped; each is longer than the minimum segment, L*/2 tokens at 4 bytes a token.
    Both are answered right (164584); the first sighting of each document leaves its
    PIC entry (the engine's keeper builds it after the request: waited for), so the
    second request's usage reports PIC tokens for both documents and cached tokens
    beyond its exact prefix, and /pic/status (the dashboard's source) counts them."""
    from tests.support.gateway import gw_conf
    first, second = (json.load(open(p)) for p in (ASK, ASK_REORDERED))
    parts = [[p["text"] for p in b["messages"][-1]["content"]] for b in (first, second)]
    assert parts[1] == parts[0][:1] + parts[0][1:-1][::-1] + parts[0][-1:]
    docs = parts[0][1:-1]
    assert len(docs) == 2
    es = [procs.engine(name=n, model=MODEL, extra=["--threads", "1"]) for n in ("e1", "e2")]
    ngx = procs.nginx(gw_conf(["127.0.0.1:%d" % e.port for e in es], cdc=None, min_segment=None))

    def pool():
        return json.loads(harness.http("GET", ngx.url + "/pic/status")[2])

    harness.wait_for(lambda: len(pool()["engines"]) == 2
                     and all(e["break_even_tokens"] > 0 for e in pool()["engines"]),
                     timeout=10, what="the engines' break-even lengths from probes")
    min_bytes = min(e["break_even_tokens"] for e in pool()["engines"]) // 2 * 4
    assert all(len(d.encode()) > min_bytes for d in docs), (min_bytes, [len(d) for d in docs])

    def ask(body):
        st, _, raw = harness.http("POST", ngx.url + "/v1/chat/completions", body=body,
                                  timeout=120)
        assert st == 200, raw
        j = json.loads(raw)
        return j["choices"][0]["message"]["content"].strip(), j["usage"]

    def built():
        return sum(json.loads(harness.http("GET", e.url + "/status")[2])["prefix"]
                   ["deferred_builds"]["built"] for e in es)

    a1, u1 = ask(first)
    assert tasks.answer_ok(a1, "164584"), a1
    harness.wait_for(lambda: built() >= len(docs), timeout=60,
                     what="the keeper's entries of both documents")
    a2, u2 = ask(second)
    assert tasks.answer_ok(a2, "164584"), a2
    # both documents composed (each begins like the other, "[": the exact prefix
    # reaches a token into the first, inside its head seam, which does not stop
    # its entry being used); each entry serves all but its two seams, of the width
    # the engines took for documents from models/pic-qa/pic_calibration.json
    served = json.load(open(os.path.join(MODEL, "pic_calibration.json")))["served"]
    w = served["w_doc"]
    for e in es:
        pic = json.loads(harness.http("GET", e.url + "/v1/models")[2])["data"][0]["pic"]
        assert (pic["seam"], pic["seam_source"]) == (served["w"], "calibration"), pic
        assert (pic["seam_doc"], pic["seam_doc_source"]) == (w, "calibration"), pic
    assert [(e["seam"], e["seam_source"], e["seam_doc"]) for e in pool()["engines"]] \
        == [(served["w"], "calibration", w)] * 2
    tok = Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
    doc_tokens = [len(tok.encode(d, add_special_tokens=False).ids) for d in docs]
    k = json.load(open(os.path.join(MODEL, "config.json")))["text_config"]["linear_conv_kernel_dim"]
    head = max(w, k - 1)                # pic_entry_head: the conv window reaches back
    # each document's inline "[n] " label is a small segment of its own (the
    # gateway's document boundaries), recomputed: a label changes with the rank
    labels = [len(tok.encode(re.match(r"\[\d+\] ", d).group(0), add_special_tokens=False).ids)
              for d in docs]
    assert u2["pic"]["pic_tokens"] >= sum(doc_tokens) - (head + w) * len(docs) - sum(labels), \
        (u2, doc_tokens, labels)
    assert u2["prompt_tokens_details"]["cached_tokens"] > u2["pic"]["exact_tokens"], u2
    assert pool()["tokens"]["pic"] >= u2["pic"]["pic_tokens"]
