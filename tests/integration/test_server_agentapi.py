"""What agent frameworks expect of the engine's OpenAI endpoints:
honest parameters (unknown or unservable ones are a 400 naming them),
logprobs, penalties and logit_bias, reasoning split at <think>, tool calls
streamed in the OpenAI delta shape, tool_choice and parallel_tool_calls.

Tiny random-weight checkpoints: the text is noise, so oracles are independent
of the engine's sampling code: `pic-engine logits` (the forward pass alone)
and numpy for logprobs and penalised greedy choices, the `tokenizers`
library for token ids, the template's own reading of <think> blocks
(harness.think_split).  Where a model must "decide" to call a tool, a
scripted reply (--script) is generated token by token through the model.
"""
import json
import os
import subprocess
import tempfile

import numpy as np
import openai
import pytest
import tokenizers

from tests import harness
from tests.support.tools import SET_MODE, TOGGLE, args_valid  # noqa: F401

from tests.tools.make_tokenizer import byte_to_unicode  # noqa: E402

MODELS = os.path.join(harness.ROOT, "tests", "fixtures", "models")
TINY = os.path.join(MODELS, "tiny-qwen35")
TINY_NEXT = os.path.join(MODELS, "tiny-qwen3next")

pytestmark = pytest.mark.skipif(not os.path.isdir(TINY), reason="fixture models missing")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
TO_F = {"type": "function", "function": {
    "name": "c_to_f", "description": "Celsius to Fahrenheit",
    "parameters": {"type": "object", "properties": {"c": {"type": "number"}},
                   "required": ["c"]}}}

XML_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            "</function>\n</tool_call>")
JSON_CALL = '<tool_call>\n{"name": "c_to_f", "arguments": {"c": 21}}\n</tool_call>'
SCRIPT = [
    {"when": "weather in Paris", "reply": "I need the weather tool.\n</think>\n\n" + XML_CALL},
    {"when": "both tools", "reply": "Two calls.\n</think>\n\n" + XML_CALL + "\n" + JSON_CALL},
    {"when": "temp_c", "reply": "Now convert.\n</think>\n\n" + JSON_CALL},
    {"when": "temp_f", "reply": "Done.\n</think>\n\nIt is 69.8 F in Paris."},
]


def script_file():
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(SCRIPT, f)
    f.close()
    return f.name


SCRIPT_FILE = script_file()


def engine(procs, model=TINY, script=False, extra=()):
    args = ["--threads", "1"] + list(extra)
    if script:
        args += ["--script", SCRIPT_FILE]
    return procs.engine(model=model, extra=args)


def client(eng):
    return openai.OpenAI(base_url=eng.url + "/v1", api_key="none", max_retries=0, timeout=60)


def post(eng, path, body):
    code, _, raw = harness.http("POST", eng.url + path, json.dumps(body).encode(),
                                {"Content-Type": "application/json"}, timeout=60)
    return code, json.loads(raw)


def msgs(text):
    return [{"role": "user", "content": text}]


# --- operator view ---

def test_models_lists_context_and_pic_settings(procs):
    eng = engine(procs, extra=["--ctx", "4096", "--seam", "4"])
    m = json.loads(harness.http("GET", eng.url + "/v1/models")[2])["data"][0]
    assert m["max_model_len"] == 4096 and m["chat_template"] == "qwen3.5"
    assert m["pic"]["cache_mode"] == "pic" and m["pic"]["seam"] == 4
    assert m["pic"]["entry_dtype"] == "bf16" and m["pic"]["min_segment_bytes"] == 128


# --- honest parameters ---

@pytest.mark.parametrize("body,param", [
    ({"frobnicate": 1}, "frobnicate"),
    ({"reasoning_effort": "high"}, "reasoning_effort"),
    ({"functions": [WEATHER["function"]]}, "functions"),
    ({"prediction": {"type": "content", "content": "x"}}, "prediction"),
    ({"store": True}, "store"),
    ({"n": 2}, "n"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "^a"}}}}}},
     "response_format.json_schema.schema.properties.a.pattern"),
    ({"logit_bias": {"999999": 5}}, "logit_bias.999999"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"chat_template_kwargs": {"unknown_kwarg": 1}}, "chat_template_kwargs.unknown_kwarg"),
])
def test_unservable_parameters_are_400_naming_them(procs, body, param):
    eng = engine(procs)
    code, doc = post(eng, "/v1/chat/completions",
                     dict({"model": "m", "messages": msgs("hi"), "max_tokens": 2}, **body))
    assert code == 400, doc
    assert set(doc["error"]) == {"message", "type", "param", "code"}
    assert doc["error"]["param"] == param
    assert doc["error"]["type"] == "invalid_request_error"


def test_completions_refuse_echo_suffix_best_of(procs):
    eng = engine(procs)
    for body, param in [({"echo": True}, "echo"), ({"suffix": "z"}, "suffix"),
                        ({"best_of": 3}, "best_of"), ({"tools": [WEATHER]}, "tools")]:
        code, doc = post(eng, "/v1/completions",
                         dict({"model": "m", "prompt": "hi", "max_tokens": 2}, **body))
        assert code == 400 and doc["error"]["param"] == param, doc


def test_accepted_no_op_fields_do_not_change_output(procs):
    eng = engine(procs)
    base = {"model": "m", "messages": msgs("hello"), "max_tokens": 8, "temperature": 0}
    a = post(eng, "/v1/chat/completions", base)[1]
    b = post(eng, "/v1/chat/completions",
             dict(base, user="u1", metadata={"k": "v"}, store=False, service_tier="auto",
                  prompt_cache_key="pk", parallel_tool_calls=True, n=1))[1]
    assert a["choices"][0]["message"] == b["choices"][0]["message"]


# --- logprobs, penalties, bias against the forward pass ---

B2U = byte_to_unicode()


def byte_level(bs):
    """GPT-2 byte-to-unicode string of token bytes (tokenizer.json's vocab keys)."""
    return "".join(B2U[b] for b in bs)


def forward_logits(model, ids, tmp_path):
    out = os.path.join(tmp_path, "logits.f32")
    r = subprocess.run([harness.ENGINE_BIN, "logits", "--model", model, "--tokens",
                        ",".join(map(str, ids)), "--out", out, "--threads", "1"],
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return np.fromfile(out, dtype=np.float32).reshape(len(ids), -1).astype(np.float64)


def log_softmax(x):
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


RENDERED = ("<|im_start|>user\nTell me about caches.<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n")


def generated_ids(tok, content):
    vocab = tok.get_vocab()
    return [vocab[byte_level(bytes(t["bytes"]))] for t in content]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_logprobs_equal_log_softmax_of_forward(procs, tmp_path, stream):
    eng = engine(procs)
    tok = tokenizers.Tokenizer.from_file(os.path.join(TINY, "tokenizer.json"))
    prompt_ids = tok.encode(RENDERED, add_special_tokens=False).ids
    kw = dict(model="m", messages=msgs("Tell me about caches."), max_tokens=6,
              temperature=0, logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
    if stream:
        content = []
        for ch in client(eng).chat.completions.create(stream=True, **kw):
            if ch.choices and ch.choices[0].logprobs and ch.choices[0].logprobs.content:
                content += [t.model_dump() for t in ch.choices[0].logprobs.content]
    else:
        r = client(eng).chat.completions.create(**kw)
        content = [t.model_dump() for t in r.choices[0].logprobs.content]
    assert len(content) == 6
    gen = generated_ids(tok, content)
    logits = forward_logits(TINY, prompt_ids + gen[:-1], str(tmp_path))
    for i, t in enumerate(content):
        lp = log_softmax(logits[len(prompt_ids) - 1 + i])
        assert abs(t["logprob"] - lp[gen[i]]) < 2e-3
        assert gen[i] == int(np.argmax(lp))                     # greedy
        best = np.argsort(-lp, kind="stable")[:3]
        assert [round(x["logprob"], 3) for x in t["top_logprobs"]] == \
            [round(lp[b], 3) for b in best]


def test_completions_logprobs_shape(procs):
    eng = engine(procs)
    r = client(eng).completions.create(model="m", prompt="Hello", max_tokens=4,
                                       temperature=0, logprobs=2,
                                       extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert "".join(lp.tokens).replace("\ufffd", "") == r.choices[0].text.replace("\ufffd", "")
    for t, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert l <= 0 and 1 <= len(top) <= 2
        assert abs(max(top.values()) - l) < 1e-6                # greedy: the best


def test_logit_bias_forces_a_token(procs):
    eng = engine(procs)
    tok = tokenizers.Tokenizer.from_file(os.path.join(TINY, "tokenizer.json"))
    target = min(i for k, i in tok.get_vocab().items() if k.isalpha() and len(k) >= 3)
    r = client(eng).completions.create(model="m", prompt="Hello", max_tokens=5,
                                       temperature=0, logit_bias={str(target): 100})
    piece = tok.decode([target])
    assert r.choices[0].text == piece * 5


@pytest.mark.parametrize("kind,value", [("presence_penalty", 1.5), ("frequency_penalty", 0.7),
                                        ("repetition_penalty", 1.8)])
def test_penalised_greedy_matches_numpy(procs, tmp_path, kind, value):
    eng = engine(procs)
    tok = tokenizers.Tokenizer.from_file(os.path.join(TINY, "tokenizer.json"))
    prompt_ids = tok.encode(RENDERED, add_special_tokens=False).ids
    extra = {"ignore_eos": True}
    kw = {}
    if kind == "repetition_penalty":
        extra[kind] = value
    else:
        kw[kind] = value
    r = client(eng).chat.completions.create(
        model="m", messages=msgs("Tell me about caches."), max_tokens=12, temperature=0,
        logprobs=True, extra_body=extra, **kw)
    gen = generated_ids(tok, [t.model_dump() for t in r.choices[0].logprobs.content])
    logits = forward_logits(TINY, prompt_ids + gen[:-1], str(tmp_path))
    counts = np.zeros(logits.shape[1])
    for i, g in enumerate(gen):
        x = logits[len(prompt_ids) - 1 + i].copy()
        if kind == "repetition_penalty":
            seen = np.zeros_like(x, dtype=bool)
            seen[prompt_ids] = True
            seen[counts > 0] = True
            x[seen] = np.where(x[seen] > 0, x[seen] / value, x[seen] * value)
        elif kind == "presence_penalty":
            x -= value * (counts > 0)
        else:
            x -= value * counts
        top2 = np.sort(x)[-2:]
        if top2[1] - top2[0] > 1e-3:                            # no near tie
            assert g == int(np.argmax(x)), (i, g, int(np.argmax(x)))
        counts[g] += 1


def test_min_p_one_is_greedy(procs):
    eng = engine(procs)
    c = client(eng)
    base = dict(model="m", prompt="Hello there", max_tokens=8, extra_body={"ignore_eos": True})
    greedy = c.completions.create(temperature=0, **base).choices[0].text
    for seed in (1, 2, 3):
        r = c.completions.create(temperature=1.5, seed=seed,
                                 **dict(base, extra_body={"ignore_eos": True, "min_p": 1.0}))
        assert r.choices[0].text == greedy


# --- reasoning ---

def test_reasoning_content_split_stream_equals_non_stream(procs):
    eng = engine(procs)
    c = client(eng)
    kw = dict(model="m", messages=msgs("Tell me about caches."), max_tokens=24,
              temperature=0)
    full = c.chat.completions.create(**kw).choices[0].message
    raw = c.completions.create(model="m", prompt=RENDERED, max_tokens=24,
                               temperature=0).choices[0].text
    assert (getattr(full, "reasoning_content", None) or "", full.content) == \
        harness.think_split(raw)
    r, t = "", ""
    for ch in c.chat.completions.create(stream=True, **kw):
        if ch.choices:
            d = ch.choices[0].delta
            r += getattr(d, "reasoning_content", None) or ""
            t += d.content or ""
    assert (r, t) == ((getattr(full, "reasoning_content", None) or ""), full.content)


def test_scripted_reasoning_then_content(procs):
    eng = engine(procs, script=True)
    c = client(eng)
    kw = dict(model="m", messages=msgs("it says temp_f=69.8"))
    m = c.chat.completions.create(**kw).choices[0].message
    assert m.reasoning_content == "Done."
    assert m.content == "It is 69.8 F in Paris."
    deltas = [ch.choices[0].delta for ch in c.chat.completions.create(stream=True, **kw)
              if ch.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "Done."
    assert "".join(d.content or "" for d in deltas) == "It is 69.8 F in Paris."
    assert not any("think>" in (d.content or "") for d in deltas)


def test_thinking_off_per_request_gives_content_only(procs):
    eng = engine(procs)
    c = client(eng)
    r = c.chat.completions.create(model="m", messages=msgs("Tell me about caches."),
                                  max_tokens=12, temperature=0,
                                  extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    rendered = ("<|im_start|>user\nTell me about caches.<|im_end|>\n"
                "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    raw = c.completions.create(model="m", prompt=rendered, max_tokens=12,
                               temperature=0).choices[0].text
    m = r.choices[0].message
    assert (getattr(m, "reasoning_content", None) or "", m.content) == \
        harness.think_split(raw, opened=False)


def test_earlier_reasoning_is_dropped_as_the_template_does(procs):
    """reasoning_content on an earlier assistant turn is accepted and, before
    the last user query, rendered as the released template renders it: not
    at all (the prompt is token for token the one without it)."""
    eng = engine(procs)
    c = client(eng)
    hist = [{"role": "user", "content": "Q1"},
            {"role": "assistant", "content": "A1"},
            {"role": "user", "content": "Q2"}]
    with_r = [dict(hist[0]), dict(hist[1], reasoning_content="long private thoughts"),
              dict(hist[2])]
    a = c.chat.completions.create(model="m", messages=hist, max_tokens=4, temperature=0)
    b = c.chat.completions.create(model="m", messages=with_r, max_tokens=4, temperature=0)
    assert a.usage.prompt_tokens == b.usage.prompt_tokens
    assert a.choices[0].message.model_dump() == b.choices[0].message.model_dump()


# --- tool calls ---

def stream_calls(c, **kw):
    """(deltas of tool_calls in order, finish reason) of a streamed answer."""
    out, finish = [], None
    for ch in c.chat.completions.create(stream=True, **kw):
        if not ch.choices:
            continue
        for tc in ch.choices[0].delta.tool_calls or []:
            out.append(tc.model_dump())
        finish = ch.choices[0].finish_reason or finish
    return out, finish


def assemble(deltas):
    calls = {}
    for d in deltas:
        c = calls.setdefault(d["index"], {"id": None, "name": None, "arguments": ""})
        if d.get("id"):
            assert c["id"] is None, "id sent twice"
            c["id"] = d["id"]
        fn = d.get("function") or {}
        if fn.get("name"):
            c["name"] = fn["name"]
        c["arguments"] += fn.get("arguments") or ""
    return [calls[i] for i in sorted(calls)]


@pytest.mark.parametrize("text,calls", [
    ("weather in Paris?", [("get_weather", {"city": "Paris"})]),                 # XML form
    ("it says temp_c=21", [("c_to_f", {"c": 21})]),                             # JSON form
    ("use both tools", [("get_weather", {"city": "Paris"}), ("c_to_f", {"c": 21})]),
])
def test_tool_calls_streamed_in_openai_delta_shape(procs, text, calls):
    eng = engine(procs, script=True)
    c = client(eng)
    kw = dict(model="m", messages=msgs(text), tools=[WEATHER, TO_F])
    full = c.chat.completions.create(**kw).choices[0]
    assert full.finish_reason == "tool_calls"
    assert full.message.content is None
    assert [(t.function.name, json.loads(t.function.arguments))
            for t in full.message.tool_calls] == calls
    deltas, finish = stream_calls(c, **kw)
    assert finish == "tool_calls"
    # per call: the first delta carries id, type and name (and no arguments
    # yet), the following ones only argument fragments
    for idx in range(len(calls)):
        mine = [d for d in deltas if d["index"] == idx]
        assert mine[0]["id"] and mine[0]["type"] == "function"
        assert mine[0]["function"]["name"] == calls[idx][0]
        assert mine[0]["function"]["arguments"] == ""
        assert all(d["id"] is None and d["function"]["name"] is None for d in mine[1:])
    got = assemble(deltas)
    assert [(g["name"], json.loads(g["arguments"])) for g in got] == calls


def test_parallel_tool_calls_false_keeps_one(procs):
    eng = engine(procs, script=True)
    c = client(eng)
    kw = dict(model="m", messages=msgs("use both tools"), tools=[WEATHER, TO_F],
              parallel_tool_calls=False)
    r = c.chat.completions.create(**kw).choices[0]
    assert [t.function.name for t in r.message.tool_calls] == ["get_weather"]
    assert r.finish_reason == "tool_calls"
    deltas, finish = stream_calls(c, **kw)
    assert [g["name"] for g in assemble(deltas)] == ["get_weather"] and finish == "tool_calls"


@pytest.mark.parametrize("model", [TINY, TINY_NEXT])
def test_tool_choice_named_opens_that_call(procs, model):
    """Thinking off: the first generated tokens are the call's opening
    whatever the model says, and the call is completed within max_tokens
    (the grammar's shortest completion when the budget comes near)."""
    eng = engine(procs, model=model)
    c = client(eng)
    r = c.chat.completions.create(model="m", messages=msgs("hi"), tools=[WEATHER, TO_F],
                                  tool_choice={"type": "function",
                                               "function": {"name": "c_to_f"}},
                                  max_tokens=48, temperature=0,
                                  extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    m = r.choices[0].message
    assert not getattr(m, "reasoning_content", None)
    assert [t.function.name for t in m.tool_calls] == ["c_to_f"]
    assert isinstance(json.loads(m.tool_calls[0].function.arguments)["c"], (int, float))


def test_tool_choice_named_reasons_first_when_thinking(procs):
    """Thinking on: the model reasons (bounded), the think block is closed
    for it, then the call of that function follows its schema."""
    eng = engine(procs)
    r = client(eng).chat.completions.create(
        model="m", messages=msgs("hi"), tools=[WEATHER, TO_F], max_tokens=48, temperature=0,
        tool_choice={"type": "function", "function": {"name": "c_to_f"}})
    m = r.choices[0].message
    assert getattr(m, "reasoning_content", None)
    assert r.choices[0].finish_reason == "tool_calls"
    assert [t.function.name for t in m.tool_calls] == ["c_to_f"]


def test_tool_choice_required_opens_a_call(procs):
    eng = engine(procs)
    c = client(eng)
    r = c.chat.completions.create(model="m", messages=msgs("hi"), tools=[WEATHER],
                                  tool_choice="required", max_tokens=24, temperature=0)
    m = r.choices[0].message
    assert m.tool_calls or m.content.startswith("<tool_call>\n")


@pytest.mark.parametrize("model", [TINY, TINY_NEXT])
@pytest.mark.parametrize("seed", [1, 2])
def test_tool_choice_named_arguments_follow_the_schema(procs, model, seed):
    """Forced tool_choice constrains the whole call, not just its opening: a
    random model, sampled, still calls the named function with arguments of
    its schema (XML syntax on Qwen3.5, JSON on Qwen3-Next), then stops."""
    eng = engine(procs, model=model)
    r = client(eng).chat.completions.create(
        model="m", messages=msgs("hi"), tools=[WEATHER, SET_MODE], temperature=1.0, seed=seed,
        tool_choice={"type": "function", "function": {"name": "set_mode"}}, max_tokens=800)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch.message.content
    [call] = ch.message.tool_calls
    assert call.function.name == "set_mode"
    assert args_valid("set_mode", json.loads(call.function.arguments)), call.function.arguments


@pytest.mark.parametrize("model", [TINY, TINY_NEXT])
def test_tool_choice_required_picks_a_tool_and_follows_its_schema(procs, model):
    eng = engine(procs, model=model)
    c = client(eng)
    kw = dict(model="m", messages=msgs("hi"), tools=[SET_MODE, TOGGLE], temperature=1.0,
              seed=3, tool_choice="required", max_tokens=800)
    r = c.chat.completions.create(**kw).choices[0]
    assert r.finish_reason == "tool_calls", r.message.content
    [call] = r.message.tool_calls
    assert args_valid(call.function.name, json.loads(call.function.arguments))
    deltas, finish = stream_calls(c, **kw)
    [g] = assemble(deltas)
    assert finish == "tool_calls" and (g["name"], json.loads(g["arguments"])) == (
        call.function.name, json.loads(call.function.arguments))


def test_tool_choice_none_leaves_calls_as_text(procs):
    eng = engine(procs, script=True)
    c = client(eng)
    r = c.chat.completions.create(model="m", messages=msgs("weather in Paris?"),
                                  tools=[WEATHER], tool_choice="none").choices[0]
    assert r.message.tool_calls is None and r.finish_reason == "stop"
    assert XML_CALL in r.message.content


# --- response_format: constrained decoding ---

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["mood", "ok", "n"],
          "properties": {"mood": {"enum": ["happy", "sad", "meh"]}, "ok": {"type": "boolean"},
                         "n": {"type": "null"}, "tag": {"const": "x"}}}


def valid(doc):
    """SCHEMA checked by hand (the oracle: no validator library needed)."""
    return (isinstance(doc, dict) and set(doc) <= {"mood", "ok", "n", "tag"}
            and {"mood", "ok", "n"} <= set(doc) and doc["mood"] in ("happy", "sad", "meh")
            and isinstance(doc["ok"], bool) and doc["n"] is None and doc.get("tag", "x") == "x")


@pytest.mark.parametrize("model", [TINY, TINY_NEXT])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_json_schema_answers_follow_the_schema(procs, model, seed):
    """A random model, sampled, still answers with a document of the schema
    (every value is bounded, so it must finish)."""
    eng = engine(procs, model=model)
    r = client(eng).chat.completions.create(
        model="m", messages=msgs("How are you?"), temperature=1.0, seed=seed, max_tokens=800,
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}},
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert r.choices[0].finish_reason == "stop"
    assert valid(json.loads(r.choices[0].message.content)), r.choices[0].message.content


def test_json_schema_stream_equals_non_stream(procs):
    eng = engine(procs)
    c = client(eng)
    kw = dict(model="m", messages=msgs("How are you?"), temperature=0, max_tokens=800,
              response_format={"type": "json_schema",
                               "json_schema": {"name": "s", "schema": SCHEMA}},
              extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    full = c.chat.completions.create(**kw).choices[0].message.content
    streamed = "".join(ch.choices[0].delta.content or ""
                       for ch in c.chat.completions.create(stream=True, **kw) if ch.choices)
    assert streamed == full and valid(json.loads(full))


@pytest.mark.parametrize("seed", [4, 5])
def test_json_object_is_a_json_object(procs, seed):
    """Free JSON (strings and numbers are unbounded): when the answer ends by
    itself it is an object; when max_tokens cuts it, it is still a prefix of
    one (it opens with '{' and parses once closed as the parser expects)."""
    eng = engine(procs)
    r = client(eng).chat.completions.create(
        model="m", messages=msgs("Give me JSON."), temperature=0.7, seed=seed, max_tokens=300,
        response_format={"type": "json_object"},
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    text = r.choices[0].message.content
    assert text.lstrip().startswith("{")
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)


def test_json_after_reasoning(procs):
    """With thinking on, the constraint starts after </think>: a logit bias
    makes the random model close its think block at once, then the grammar
    takes over (the bias cannot push </think> into the document)."""
    eng = engine(procs)
    tok = tokenizers.Tokenizer.from_file(os.path.join(TINY, "tokenizer.json"))
    close = tok.token_to_id("</think>")
    r = client(eng).chat.completions.create(
        model="m", messages=msgs("hi"), temperature=0, max_tokens=800,
        logit_bias={str(close): 100},
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}})
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "stop"
    assert not getattr(m, "reasoning_content", None)
    assert valid(json.loads(m.content)), m.content
