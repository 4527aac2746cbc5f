"""test_trained_model.py — the committed trained model models/pic-qa (issue 11).

Its logits against transformers (fp32 and fp64) are checked by test_oracle.py
(tests/fixtures/oracle/pic-qa.*, written by tests/tools/oracle.py).  Here:

* its config.json / generation_config.json are what the project's checkpoint writer
  (tests/tools/make_models.py through train/ckpt.py) produces for its tokenizer;
* the engine's own chat template (core/prompt/pic_template.c) renders held-out task
  items as train/tasks.py's renderer does (the text the model was trained on): greedy
  ids from `generate --chat` equal those from `generate --tokens` of render()'s ids;
* train_state.json records the training counters and held-out accuracy per task.
"""
import json
import os
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PIC_BUILD", "build")
ENGINE = os.path.join(ROOT, BUILD, "pic-engine") if not os.path.isabs(BUILD) \
    else os.path.join(BUILD, "pic-engine")
MODEL = os.path.join(ROOT, "models", "pic-qa")
sys.path.insert(0, os.path.join(ROOT, "train"))

import tasks  # noqa: E402
import ckpt   # noqa: E402
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
