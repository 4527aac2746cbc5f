"""test_tasks.py — train/tasks.py, the task generator (training is
not run in CI; its items are what the benchmark and the trained-model tests read).

* an item is a pure function of (task, seed, level), and its answer is in the
  rendered prompt (the task is answerable from the context);
* `hard` (training only): the other facts' attributes are the asked one's
  confusions — its head word ("ticket number" / "badge number") or value kind —
  and the benchmark's tasks do not include it;
* `rounds` (training only): agent conversations whose every question is asked
  with the request, before the tool results that answer it;
* `twin` (training only): hard, and the other values of the answer's kind begin
  as the answer does.
"""
import json
import os

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))

from train import tasks  # noqa: E402


@pytest.mark.parametrize("task", tasks.TRAIN_TASKS)
@pytest.mark.parametrize("level", [0, 1])
def test_items_are_deterministic_and_answerable(task, level):
    for seed in range(20):
        a, b = tasks.item(task, seed, level), tasks.item(task, seed, level)
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
        ctx = tasks.prompt_text(a)
        assert a["answer"] and a["answer"] in ctx, (task, seed)


def _attrs(text):
    return {a for a, _ in tasks.ATTRS if a in text}


def test_hard_items_hold_the_asked_attributes_confusions():
    assert "hard" not in tasks.TASKS        # not a benchmark task
    shared = with_siblings = 0
    for seed in range(200):
        it = tasks.item("hard", seed, 0)
        q = it["messages"][-1]["content"].rsplit("Question: ", 1)[1]
        asked = [a for a, _ in tasks.ATTRS if a in q]
        assert len(asked) == 1, q
        head = asked[0].split()[-1]
        others = _attrs("\n".join(it["docs"])) - set(asked)
        siblings = [a for a, _ in tasks.ATTRS if a != asked[0] and a.split()[-1] == head]
        if siblings:                        # "number" has 5, "code" 2
            with_siblings += 1
            shared += bool(others & set(siblings))
    # a same-head confusion is planted in nearly every item that has one to plant
    # (151 of 153 on these seeds; single, a random sample of attributes: 97 of 147)
    assert with_siblings > 100 and shared >= 0.9 * with_siblings, (shared, with_siblings)


def test_single_items_are_unchanged_by_the_hard_task():
    """`hard` draws its own stream: single's items keep their text (the
    committed held-out figures stay comparable)."""
    it = tasks.item("single", 1003, 0)
    assert it["answer"] == "92228"
    assert "Project Fulo has the ticket number 92228." in it["docs"][0]


def test_twin_items_values_begin_as_the_answer():
    """`twin` (training only): the planted values of the answer's kind (digits,
    codes) other than the answer begin with its first character, so the second
    answer token must come from the asked fact; single's items are unchanged."""
    assert "twin" not in tasks.TASKS and "twin" in tasks.TRAIN_TASKS
    import re
    same = other = 0
    for seed in range(200):
        it = tasks.item("twin", seed, 1)
        a = it["answer"]
        pat = r"\b\d{3,6}\b" if a.isdigit() else r"\b[A-Z]{2}-\d{2,3}\b" if "-" in a else None
        if pat is None:
            continue
        vals = [v for v in re.findall(pat, "\n".join(it["docs"])) if v != a]
        same += sum(v[0] == a[0] for v in vals)
        other += sum(v[0] != a[0] for v in vals)
    # another kind's values (codes beside digits) and the prose's own numbers differ
    assert same > 200 and same > 2 * other, (same, other)
    assert tasks.item("single", 1003, 0)["answer"] == "92228"


def test_rounds_items_ask_with_the_request_and_answer_every_round():
    """`rounds` (training only): every round's question is in its request, before
    the tool results that hold its answer, and the earlier rounds' answers are
    assistant turns whose spans turn_answer_spans finds."""
    assert "rounds" not in tasks.TASKS and "rounds" in tasks.TRAIN_TASKS
    for seed in range(100):
        it = tasks.item("rounds", seed, seed % 3)
        msgs = it["messages"]
        answers = it["turn_answers"] + [it["answer"]]
        users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
        assert len(users) == len(answers) in (2, 3), seed
        ends = [i for i, m in enumerate(msgs) if m["role"] == "assistant"
                and not m.get("tool_calls")] + [len(msgs)]
        for u, end, ans in zip(users, ends, answers):
            assert msgs[u]["content"].startswith("Please ")
            assert msgs[u]["content"].endswith("?") or msgs[u]["content"].endswith(".")
            # the answer is in a tool result after the first request, before its answer
            res = [m["content"] for m in msgs[:end] if m["role"] == "tool"]
            assert any(ans in r for r in res), (seed, ans)
            assert msgs[u + 1].get("tool_calls"), seed      # results follow the question
        text = tasks.prompt_text(it)
        spans = tasks.turn_answer_spans(it, text)
        assert [text[a:b] for a, b in spans] == [a + "<|im_end|>" for a in it["turn_answers"]]
        assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_tool_items_are_unchanged_by_the_rounds_task():
    it = tasks.item("tool", 10, 0)
    assert it["answer"] == "9076"
    assert it["messages"][1]["content"].endswith("What was the station code for Lennape?")


def test_lookup_targets_find_the_value_the_answer_copies():
    """train.lookup_targets (the lookup-attention loss, `--att-w`): the position that
    predicts an answer's first token and where its value starts in the context, only
    when the context holds it once; earlier answers do not count as the context; a
    value whose first token differs in the context (" A" "V" vs "AV") is found by its
    other tokens and points at the token before them."""
    from train import train
    E = 99                                          # <|im_end|>
    #         0  1  2  3  4  5  6  7  8   9  10 11 12
    ctx = [5, 1, 2, 3, 9, 4, 6, 7, 8]
    ids = ctx + [1, 2, 3, E]                       # answer "1 2 3" at 9..12
    assert train.lookup_targets(ids, [(9, 13)]) == [(8, 1)]
    # the value twice in the context: no target
    ids2 = [1, 2, 3] + ctx + [1, 2, 3, E]
    assert train.lookup_targets(ids2, [(12, 16)]) == []
    # a follow-up answering 6 7 8: found in the context, not in the first answer's span
    ids3 = ids + [40, 41] + [6, 7, E]
    assert train.lookup_targets(ids3, [(9, 13), (15, 18)]) == [(8, 1), (14, 6)]
    ids4 = ids + [40] + [1, 2, 3, E]                # the first answer's copy is not context
    assert train.lookup_targets(ids4, [(9, 13), (14, 18)]) == [(8, 1), (13, 1)]
    # the answer's first token differs from the context's: matched by the rest
    ids5 = [5, 50, 6, 7, 8, 9] + [51, 6, 7, E]
    assert train.lookup_targets(ids5, [(6, 10)]) == [(5, 1)]


def test_binding_targets_name_each_planted_value_by_its_attribute():
    """train/binding.py (the binding loss, `--bind-w`): from a training sequence's
    token ids alone it finds every fact the generator planted — its value's tokens
    decode to the value, its class is the attribute the fact's question asks — and
    names the final answer's query by the asked attribute; a tool item's JSON
    fields count inside tool results only, never in the tools' schemas."""
    import random
    from tokenizers import Tokenizer
    from train import binding, ckpt, train
    d = os.path.join(ROOT, "models", "pic-qa")
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    eos = ckpt.specials(d)["<|im_end|>"]
    strs = [tok.decode([i], skip_special_tokens=True) for i in range(tok.get_vocab_size())]
    attrs = [a for a, _ in tasks.ATTRS]
    for seed in range(12):
        it = tasks.item("single", seed, 1)
        ids, spans, _ = train.encode_train(tok, it, eos, 0, random.Random(seed))
        facts = {("".join(strs[i] for i in ids[j0:j1]).strip(), binding.CLASSES[k])
                 for j0, j1, k in binding.fact_tokens([strs[i] for i in ids])}
        asked = [a for a in attrs if a in it["messages"][-1]["content"].split("Question:")[-1]]
        planted = [(it["answer"], asked[0])]
        for q, v in it["qa"]:
            planted.append((v, [a for a in attrs if a in q][0]))
        assert set(planted) <= facts, (seed, planted, facts)
        assert len(facts) == len(planted)
        _, queries = binding.targets(ids, spans, [strs[i] for i in ids],
                                     train.lookup_targets(ids, spans))
        assert queries == [(spans[-1][0] - 1, binding.CLASSES.index(asked[0]))]
    for seed in range(12):
        it = tasks.item("tool", seed, 1)
        ids, _, _ = train.encode_train(tok, it, eos, 0, random.Random(seed))
        text = "".join(strs[i] for i in ids)
        first = text.index("<tool_response>")
        at = [len("".join(strs[i] for i in ids[:j0])) for j0, _, _ in
              binding.fact_tokens([strs[i] for i in ids])]
        assert all(c > first for c in at)


def _engine_ids(model, request):
    """The ids of the prompt the engine's chat template renders for request."""
    import subprocess
    engine = os.path.join(ROOT, os.environ.get("PIC_BUILD", "build"), "pic-engine")
    r = subprocess.run([engine, "tokenize", "--model", model, "--chat", json.dumps(request)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.strip().split(",")]


@pytest.mark.parametrize("task", tasks.TRAIN_TASKS)
def test_python_and_engine_render_the_same_prompt(task):
    """render() (the text the model was trained on) and the engine's template
    (core/prompt/pic_template.c, the one source of the template's fixed text)
    give the same token ids, for items with tools, tool calls and results."""
    from tokenizers import Tokenizer
    model = os.path.join(ROOT, "models", "pic-qa")
    tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    for seed in range(3):
        it = tasks.item(task, seed, 1)
        assert _engine_ids(model, tasks.request_json(it)) == \
            tok.encode(tasks.prompt_text(it)).ids, (task, seed)


def test_tool_prompt_text_comes_from_the_engines_template():
    """The tool prompt of render() is the C template's, read from its source."""
    with open(os.path.join(ROOT, "core", "prompt", "pic_template.c"), encoding="utf-8") as f:
        src = f.read()
    assert "You have access to the following functions:" in tasks.QWEN35_TOOLS_HEAD
    assert tasks.QWEN35_TOOLS_TAIL.endswith("</IMPORTANT>")
    for line in ("<IMPORTANT>", "Required parameters MUST be specified"):
        assert line in src and line in tasks.QWEN35_TOOLS_TAIL
