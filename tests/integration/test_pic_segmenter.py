"""test_pic_segmenter.py — the PIC_SEPARATOR split of `pic-lab segment`
(bench/pic_lab.c), against the `tokenizers` library: a marked
prompt is split at the markers (removed), each segment is tokenized on its
own (the same ids as tokenizers gives for that piece alone), empty pieces
are dropped, a lone marked document is a cache-warming request, a prompt
without markers is one segment, and a bad marker is refused.
"""
import json
import os
import subprocess

import pytest
from tokenizers import Tokenizer

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PIC_BUILD", "build")
PIC_LAB = os.path.join(ROOT, BUILD, "pic-lab")  # bench/pic_lab.c
MODELS = ["tiny-qwen35", "tiny-qwen3next"]
SEP = "<|pic_sep|>"


def model_dir(name):
    return os.path.join(ROOT, "tests", "fixtures", "models", name)


def segment(model, text, marker=None, check=True):
    cmd = [PIC_LAB, "segment", "--model", model_dir(model)]
    if marker is not None:
        cmd += ["--marker", marker]
    p = subprocess.run(cmd, input=text.encode(), capture_output=True, timeout=60)
    if check:
        assert p.returncode == 0, p.stderr.decode()
        return json.loads(p.stdout)
    return p


@pytest.mark.parametrize("model", MODELS)
def test_each_segment_tokenized_alone(model):
    tok = Tokenizer.from_file(os.path.join(model_dir(model), "tokenizer.json"))
    docs = ["System: you answer from the documents.\n",
            "Doc A: Hybrid models mix linear attention with full attention.",
            " Doc B — café résumé 👍, 12.5 ms",
            "\nQuestion: what is cached?"]
    text = SEP.join(docs)
    out = segment(model, text)
    assert out["marked"] and not out["warm_only"]
    assert len(out["segments"]) == len(docs)
    raw = text.encode()
    for d, s in zip(docs, out["segments"]):
        assert raw[s["offset"]:s["offset"] + s["length"]] == d.encode()
        assert s["ids"] == tok.encode(d).ids


def test_empty_pieces_dropped_and_warm_only():
    out = segment("tiny-qwen35", SEP + "the document" + SEP)
    assert out["warm_only"] and len(out["segments"]) == 1
    out = segment("tiny-qwen35", SEP + SEP + "a" + SEP + SEP + "b" + SEP)
    assert not out["warm_only"] and [s["length"] for s in out["segments"]] == [1, 1]
    out = segment("tiny-qwen35", "the document" + SEP)          # not opened by a marker
    assert out["marked"] and not out["warm_only"]


def test_unmarked_prompt_is_one_segment_and_custom_marker():
    tok = Tokenizer.from_file(os.path.join(model_dir("tiny-qwen35"), "tokenizer.json"))
    text = "plain prompt without separators"
    out = segment("tiny-qwen35", text)
    assert not out["marked"] and len(out["segments"]) == 1
    assert out["segments"][0]["ids"] == tok.encode(text).ids
    out = segment("tiny-qwen35", "one#|two#|three", marker="#|")
    assert [s["length"] for s in out["segments"]] == [3, 3, 5]
    assert out["segments"][2]["ids"] == tok.encode("three").ids


def test_bad_marker_and_bad_utf8_refused():
    p = segment("tiny-qwen35", "x", marker="aa", check=False)     # first byte repeats
    assert p.returncode != 0 and b"marker" in p.stderr
    p = subprocess.run([PIC_LAB, "segment", "--model", model_dir("tiny-qwen35")],
                       input=b"ok" + SEP.encode() + b"\xff\xfe", capture_output=True, timeout=60)
    assert p.returncode != 0 and b"UTF-8" in p.stderr
