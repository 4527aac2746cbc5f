"""test_calibrate.py — `pic-engine calibrate` (engine/pic/calibrate.h) and the
calibration file in `pic-engine serve`.

calibrate serves sample requests by full recompute and with PIC entries of each
candidate seam width, measures the KL on the answer tokens and chooses the
smallest width within the bound; serve takes the choice from --calibration or the
model directory's pic_calibration.json, unless --seam says otherwise, and shows it
in /status and /v1/models.  Per class (client-delimited documents, the other
PIC segments) it measures each alone and serves a pair of widths when the pair
reuses more within the bound.  Checked here: the choices follow the rules from
the figures written, a width that composes nothing drifts nothing, the pair's
drift is the classes' sum where no prompt holds both (full recompute of the
other class is the oracle), serve honours the file (and --seam / --seam-doc)
and refuses one of another checkpoint, bad files are refused with the line.
"""
import json
import os
import subprocess

import pytest

from tests import harness

ROOT = harness.ROOT
ENGINE = harness.ENGINE_BIN
MODEL = os.path.join(ROOT, "models", "pic-qa")

from train import tasks  # noqa: E402


def prompts_file(path, n_tool=3, n_single=2):
    """Held-out task requests (seeds never trained on), documents between markers."""
    with open(path, "w") as f:
        for task, n in (("tool", n_tool), ("single", n_single)):
            for s in range(7000, 7000 + n):
                it = tasks.item(task, s, 0)
                body = tasks.request_json(it)
                if it["tools"] is None:
                    body["messages"][-1] = dict(
                        body["messages"][-1], content=tasks.docs_message(it, marker=tasks.PIC_MARK))
                f.write(json.dumps(body) + "\n")
    return path


def calibrate(*args, model=MODEL):
    return subprocess.run([ENGINE, "calibrate", "--model", model, "--threads", "1"]
                          + list(args), capture_output=True, text=True, timeout=600)


def chosen_by_rule(rows, bound):
    for r in rows:
        if r["kl_mean"] <= bound:
            return r["w"], True
    return min(rows, key=lambda r: r["kl_mean"])["w"], False


def served_by_rule(doc):
    """(w, w_doc) the file's figures give: the pair of class widths (-1: the class
    recomputed, which adds no drift and no share) with the most prompt tokens from
    entries whose estimated drift (the classes' sums over every prompt) is within
    the bound and beats the one width (nothing, when no width met the bound),
    when measured within it; else the one width when met, else both recomputed."""
    bound, n, tokens = doc["kl_bound"], doc["prompts"], doc["prompt_tokens"]
    d, o = doc["classes"]["documents"], doc["classes"]["other"]
    one = next(r for r in doc["seams"] if r["w"] == doc["chosen"]["w"])
    met = doc["chosen"]["met"]
    fallback = (one["w"], one["w"]) if met else (-1, -1)
    off = {"w": -1, "kl_mean": 0.0, "pic_share": 0.0}
    best, pair = (one["pic_share"] if met else 0.0), None
    for rd in [off] + d["seams"]:
        for ro in [off] + o["seams"]:
            est = (rd["kl_mean"] * d["prompts"] + ro["kl_mean"] * o["prompts"]) / n
            share = (rd["pic_share"] * d["prompt_tokens"]
                     + ro["pic_share"] * o["prompt_tokens"]) / tokens
            if (rd["w"] != ro["w"] or rd["w"] < 0) and est <= bound and share > best + 1e-12:
                best, pair = share, (rd["w"], ro["w"], est, share)
    if pair is None:
        assert "split" not in doc
        return fallback
    sp = doc["split"]
    assert (sp["w_doc"], sp["w"]) == pair[:2]
    assert sp["kl_estimate"] == pytest.approx(pair[2], rel=1e-9)
    return (pair[1], pair[0]) if sp["met"] else fallback


def test_the_choice_follows_the_figures(tmp_path):
    p = prompts_file(str(tmp_path / "p.jsonl"))
    out = str(tmp_path / "cal.json")
    r = calibrate("--prompts", p, "--ws", "32,0,8", "--out", out)
    assert r.returncode == 0, r.stderr
    doc = json.load(open(out))
    assert doc["object"] == "pic.calibration" and doc["prompts"] == 5
    assert doc["model"] == "pic-qa" and doc["entry_dtype"] == "bf16"
    rows = doc["seams"]
    assert [x["w"] for x in rows] == [0, 8, 32]
    # wider seams recompute more of every document
    shares = [x["pic_share"] for x in rows]
    assert shares[0] > shares[1] > shares[2] >= 0, shares
    for x in rows:
        assert x["kl_max"] >= x["kl_mean"] >= 0 and 0 <= x["greedy_same"] <= 1
        assert 0 <= x["argmax_match"] <= 1
    w, met = chosen_by_rule(rows, doc["kl_bound"])
    assert doc["chosen"] == {"w": w, "kl_mean": doc["chosen"]["kl_mean"], "met": met}
    assert "<- chosen" in r.stderr
    # per class: the single items' documents (between markers), the tool results
    cl = doc["classes"]
    assert (cl["documents"]["prompts"], cl["other"]["prompts"]) == (2, 3)
    assert cl["documents"]["prompt_tokens"] + cl["other"]["prompt_tokens"] == doc["prompt_tokens"]
    assert [x["w"] for x in cl["documents"]["seams"]] == [0, 8, 32]
    ws = served_by_rule(doc)
    assert (doc["served"]["w"], doc["served"]["w_doc"]) == ws

    # a bound nothing meets: the least drift, said so; a loose one: the narrowest
    r = calibrate("--prompts", p, "--ws", "0,8", "--kl-bound", "1e-12", "--out", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    w, met = chosen_by_rule(doc["seams"], 1e-12)
    assert not met and doc["chosen"]["w"] == w and doc["chosen"]["met"] is False
    assert "no width is within the bound" in r.stderr
    # ... and nothing is served from entries: every class recomputed, said so
    assert (doc["served"]["w"], doc["served"]["w_doc"]) == served_by_rule(doc) == (-1, -1)
    assert "served: documents recomputed, the other PIC segments recomputed" in r.stderr
    r = calibrate("--prompts", p, "--ws", "0,8", "--kl-bound", "10", "--out", "-")
    assert json.loads(r.stdout)["chosen"] == {"w": 0, "kl_mean": json.loads(
        r.stdout)["seams"][0]["kl_mean"], "met": True}


def test_documents_and_tool_results_get_their_own_widths(tmp_path):
    """A bound just above the pair (documents w = 0, tool results w = 16)
    serves a pair at least as good (a class may also be recomputed): more of
    the prompts from entries than one width within the bound.  No prompt
    holds both classes, so the pair measured over every prompt is exactly the
    classes' figures added up (each class's own run recomputes the other, the
    oracle)."""
    p = prompts_file(str(tmp_path / "p.jsonl"))
    r = calibrate("--prompts", p, "--ws", "0,16", "--kl-bound", "10", "--out", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert "split" not in doc and doc["served"] == {"w": 0, "w_doc": 0}   # w 0 everywhere
    d, o = doc["classes"]["documents"], doc["classes"]["other"]
    est = (d["seams"][0]["kl_mean"] * d["prompts"] + o["seams"][1]["kl_mean"] * o["prompts"]) / 5
    assert est < doc["seams"][0]["kl_mean"], (est, doc["seams"])
    bound = est * 1.0001
    r = calibrate("--prompts", p, "--ws", "0,16", "--kl-bound", repr(bound), "--out", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    served = served_by_rule(doc)
    assert (doc["served"]["w"], doc["served"]["w_doc"]) == served
    sp = doc["split"]
    assert sp["met"] and sp["kl_mean"] == pytest.approx(sp["kl_estimate"], rel=1e-6)

    def class_share(c, w):
        return 0.0 if w < 0 else next(x for x in c["seams"] if x["w"] == w)["pic_share"]

    share = (class_share(d, sp["w_doc"]) * d["prompt_tokens"]
             + class_share(o, sp["w"]) * o["prompt_tokens"]) / doc["prompt_tokens"]
    assert sp["pic_share"] == pytest.approx(share, rel=1e-6)
    pair_0_16 = (d["seams"][0]["pic_share"] * d["prompt_tokens"]
                 + o["seams"][1]["pic_share"] * o["prompt_tokens"]) / doc["prompt_tokens"]
    assert sp["pic_share"] >= pair_0_16 - 1e-12 > doc["seams"][1]["pic_share"]
    assert "documents " in r.stderr and "within the bound, served" in r.stderr


def test_a_width_that_composes_nothing_drifts_nothing(tmp_path):
    """Full recompute is the oracle: with no token served from a seam entry (no
    document, or documents too short for an interior at w = 64) the composed
    prompt is the recomputed one, and its answer the same."""
    p = str(tmp_path / "p.jsonl")
    with open(p, "w") as f:
        f.write(json.dumps({"messages": [
            {"role": "system", "content": "You are the retrieval agent. Reply with the value only."},
            {"role": "user", "content": "What is the serial number of the device Marmarto?"}],
            "chat_template_kwargs": {"enable_thinking": False}}) + "\n")
    prompts_file(str(tmp_path / "docs.jsonl"), n_tool=0, n_single=2)
    with open(p, "a") as f:
        f.write(open(str(tmp_path / "docs.jsonl")).read())
    r = calibrate("--prompts", p, "--ws", "0,64", "--out", "-")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["seams"]
    assert rows[0]["pic_share"] > 0.3, rows
    assert rows[1]["pic_share"] == 0, rows          # level-0 documents < 2 * 64 + 16 tokens
    assert rows[1]["kl_mean"] < 1e-6 and rows[1]["greedy_same"] == 1, rows
    assert rows[1]["argmax_match"] == 1, rows


def test_serve_takes_the_width_from_the_calibration(procs, tmp_path):
    p = prompts_file(str(tmp_path / "p.jsonl"), n_tool=1, n_single=1)
    cal = str(tmp_path / "cal.json")
    r = calibrate("--prompts", p, "--ws", "4", "--out", cal)
    assert r.returncode == 0, r.stderr
    doc = json.load(open(cal))
    assert doc["chosen"]["w"] == 4

    eng = procs.engine(name="cal", model=MODEL, extra=["--threads", "1", "--calibration", cal])
    m = json.loads(harness.http("GET", eng.url + "/v1/models")[2])["data"][0]
    assert m["fingerprint"] == doc["fingerprint"]
    assert (m["pic"]["seam"], m["pic"]["seam_source"]) == (4, "calibration")
    st = json.loads(harness.http("GET", eng.url + "/status")[2])["cache"]
    assert st["seam"] == 4 and st["calibration"]["file"] == cal
    assert st["calibration"]["seams"] == doc["seams"]
    assert (st["seam_doc"], st["seam_doc_source"]) == (4, "calibration")

    # a pair in the file: documents take theirs; --seam-doc overrides it alone
    pair = dict(doc, served={"w": 4, "w_doc": 0})
    cal2 = str(tmp_path / "pair.json")
    json.dump(pair, open(cal2, "w"))
    key_fps = {json.loads(harness.http("GET", eng.url + "/status")[2])["model"]["fingerprint"]}
    for extra, want in (([], (4, "calibration", 0, "calibration")),
                        (["--seam-doc", "2"], (4, "calibration", 2, "--seam-doc")),
                        (["--seam", "6"], (6, "--seam", 6, "--seam"))):
        e = procs.engine(name="pair%d" % len(extra), model=MODEL,
                         extra=["--threads", "1", "--calibration", cal2] + extra)
        m = json.loads(harness.http("GET", e.url + "/v1/models")[2])["data"][0]["pic"]
        assert (m["seam"], m["seam_source"], m["seam_doc"], m["seam_doc_source"]) == want
        key_fps.add(json.loads(harness.http("GET", e.url + "/status")[2])["model"]["fingerprint"])
    assert len(key_fps) == 4        # entries of other widths never share a key
    # a class the calibration recomputes (-1): shown as "off", keyed apart
    json.dump(dict(doc, served={"w": 4, "w_doc": -1}), open(cal2, "w"))
    e = procs.engine(name="pairoff", model=MODEL, extra=["--threads", "1", "--calibration", cal2])
    m = json.loads(harness.http("GET", e.url + "/v1/models")[2])["data"][0]["pic"]
    assert (m["seam"], m["seam_doc"], m["seam_doc_source"]) == (4, "off", "calibration")
    assert json.loads(harness.http("GET", e.url + "/status")[2])["model"]["fingerprint"] \
        not in key_fps
    # a pair outside 0..64 stops the engine
    json.dump(dict(doc, served={"w": 4, "w_doc": 65}), open(cal2, "w"))
    pr = subprocess.run([ENGINE, "serve", "--model", MODEL, "--port", "0", "--threads", "1",
                         "--insecure-pool", "--calibration", cal2],
                        capture_output=True, text=True, timeout=60)
    assert pr.returncode != 0 and "served.w_doc" in pr.stderr, pr.stderr[-500:]

    # --seam wins over the file
    eng2 = procs.engine(name="seam", model=MODEL,
                        extra=["--threads", "1", "--calibration", cal, "--seam", "2"])
    m = json.loads(harness.http("GET", eng2.url + "/v1/models")[2])["data"][0]
    assert (m["pic"]["seam"], m["pic"]["seam_source"]) == (2, "--seam")

    # a file of another checkpoint: named on the command line, the engine stops
    doc["fingerprint"] = "0123456789abcdef"
    stale = str(tmp_path / "stale.json")
    json.dump(doc, open(stale, "w"))
    pr = subprocess.run([ENGINE, "serve", "--model", MODEL, "--port", "0", "--threads", "1",
                         "--insecure-pool", "--calibration", stale],
                        capture_output=True, text=True, timeout=60)
    assert pr.returncode != 0 and "another checkpoint" in pr.stderr, pr.stderr[-500:]

    # ... found in the model directory, it is skipped with a warning: seam 8
    mdir = tmp_path / "pic-qa"
    mdir.mkdir()
    for name in os.listdir(MODEL):
        if name != "pic_calibration.json":
            os.symlink(os.path.join(MODEL, name), mdir / name)
    json.dump(doc, open(mdir / "pic_calibration.json", "w"))
    eng3 = procs.engine(name="stale", model=str(mdir), extra=["--threads", "1"])
    m = json.loads(harness.http("GET", eng3.url + "/v1/models")[2])["data"][0]
    assert (m["pic"]["seam"], m["pic"]["seam_source"]) == (8, "default")
    assert "another checkpoint" in eng3.log_tail()
    assert "calibration" not in json.loads(harness.http("GET", eng3.url + "/status")[2])["cache"]


def test_bad_prompt_files_are_refused(tmp_path):
    p = str(tmp_path / "bad.jsonl")
    out = str(tmp_path / "cal.json")
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}]})
    open(p, "w").write("# comment\n" + good + "\n{\"messages\": [\n")
    r = calibrate("--prompts", p, "--out", out)
    assert r.returncode == 1 and "bad.jsonl:3:" in r.stderr, r.stderr
    assert not os.path.exists(out)
    open(p, "w").write("\n# nothing\n")
    r = calibrate("--prompts", p, "--out", out)
    assert r.returncode == 1 and "holds no request" in r.stderr, r.stderr
    open(p, "w").write(json.dumps({"prompt": [1, 2, 3]}) + "\n")
    r = calibrate("--prompts", p, "--out", out)
    assert r.returncode == 1 and "bad.jsonl:1:" in r.stderr, r.stderr
    for args in (["--ws", "65"], ["--ws", "x"], ["--kl-bound", "0"], ["--answer-tokens", "0"],
                 ["--entry-dtype", "f16"], ["--frobnicate", "1"]):
        r = calibrate("--prompts", p, "--out", out, *args)
        assert r.returncode == 2, (args, r.stderr)
    r = calibrate()
    assert r.returncode == 2 and "usage" in r.stderr
    assert not os.path.exists(out)
