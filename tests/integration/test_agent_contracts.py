"""The agent contracts on the served model's own output, through nginx with
the module: no scripted replies, whatever the model would say.

* response_format json_object / json_schema: the content parses as JSON (an
  object; valid for the schema) unless finish_reason is "length";
* tool_choice "required" or a named function: one call of an offered
  function whose arguments validate against its parameters schema, the
  finish "tool_calls";
* thinking on (the Qwen3.5 template opens <think>): the model reasons within
  the reasoning budget (thinking_budget, or the server's --reasoning-budget),
  then the think block is closed for it and the constraint starts; thinking
  off: the constraint holds from the first token;
* max_tokens within reach: the document's shortest completion is generated,
  so the answer still closes (finish "stop" / "tool_calls").

Models: random-weight fixtures (Qwen3.5's XML call syntax, Qwen3-Next's JSON
one), sampled at temperature 1 so that the constraint, not the model, makes
the answer valid; and the default served model, SmolLM2-135M-Instruct (ChatML,
no thinking).  Every answer streamed and not.  Oracles: Python's json and the
jsonschema library, independent of the engine's grammar.
"""
import json
import os

import jsonschema
import pytest

from tests import harness
from tests.support.gateway import gw_conf

MODELS = os.path.join(harness.ROOT, "tests", "fixtures", "models")
TINY = os.path.join(MODELS, "tiny-qwen35")
TINY_NEXT = os.path.join(MODELS, "tiny-qwen3next")

pytestmark = pytest.mark.skipif(not os.path.isdir(TINY), reason="fixture models missing")

FORECAST = {
    "type": "object", "additionalProperties": False,
    "required": ["city", "days", "unit", "hourly", "alerts"],
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "unit": {"enum": ["c", "f"]},
        "hourly": {"type": "boolean"},
        "alerts": {"type": "array", "items": {"type": "string"}},
        "where": {"type": "object", "required": ["lat"],
                  "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}},
    },
}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
FORECAST_TOOL = {"type": "function", "function": {
    "name": "forecast", "description": "A forecast", "strict": True,
    "parameters": FORECAST}}
TOOLS = [WEATHER, FORECAST_TOOL]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

CONTRACTS = {
    "json_object": {"response_format": {"type": "json_object"}},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {
        "name": "forecast", "strict": True, "schema": FORECAST}}},
    "named": {"tools": TOOLS, "tool_choice": {"type": "function",
                                              "function": {"name": "forecast"}}},
    "required": {"tools": TOOLS, "tool_choice": "required"},
}


def sse(raw):
    """(content, reasoning, calls, finish) of a streamed chat completion."""
    content, reasoning, calls, finish = "", "", {}, None
    for line in raw.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for ch in ev.get("choices", []):
            d = ch.get("delta", {})
            content += d.get("content") or ""
            reasoning += d.get("reasoning_content") or ""
            for tc in d.get("tool_calls") or []:
                c = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
                fn = tc.get("function", {})
                c["name"] += fn.get("name") or ""
                c["arguments"] += fn.get("arguments") or ""
            finish = ch.get("finish_reason") or finish
    return content, reasoning, [calls[i] for i in sorted(calls)], finish


def ask(url, body, stream):
    """(content, reasoning, calls, finish, usage) through the gateway."""
    body = dict(body, stream=stream)
    if stream:
        body["stream_options"] = {"include_usage": True}
    code, _, raw = harness.http("POST", url + "/v1/chat/completions", body, timeout=300)
    assert code == 200, raw
    if stream:
        usage = [json.loads(ln[6:]).get("usage") for ln in raw.decode().splitlines()
                 if ln.startswith("data: {")]
        return sse(raw) + ([u for u in usage if u][-1],)
    doc = json.loads(raw)
    ch = doc["choices"][0]
    m = ch["message"]
    calls = [{"name": t["function"]["name"], "arguments": t["function"]["arguments"]}
             for t in m.get("tool_calls") or []]
    return (m.get("content") or "", m.get("reasoning_content") or "", calls,
            ch["finish_reason"], doc["usage"])


def check(contract, content, calls, finish):
    """The contract, by Python's json and jsonschema."""
    if contract.startswith("json"):
        if finish == "length":
            return
        assert finish == "stop", (finish, content)
        doc = json.loads(content)
        assert isinstance(doc, dict), content
        if contract == "json_schema":
            jsonschema.validate(doc, FORECAST)
        return
    assert finish == "tool_calls", (finish, content)
    assert content.strip() == "", content
    [call] = calls
    if contract == "named":
        assert call["name"] == "forecast"
    jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


def stack(procs, model, extra=()):
    eng = procs.engine(model=model, extra=["--threads", "1"] + list(extra))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{eng.port}"], cdc=None, min_segment=None))
    return eng, ngx


@pytest.mark.parametrize("model", [TINY, TINY_NEXT], ids=["qwen3.5-xml", "qwen3next-json"])
@pytest.mark.parametrize("thinking", [True, False], ids=["think", "nothink"])
def test_contracts_hold_on_a_random_model(procs, model, thinking):
    """Every contract, streamed and not, at two seeds: the answer is valid
    whatever the random model would have said; with thinking on, the
    reasoning comes first and stays within its budget."""
    _, ngx = stack(procs, model)
    budget = 12
    for name, extra in CONTRACTS.items():
        for seed in (1, 2):
            for stream in (False, True):
                body = dict(extra, model="m", temperature=1.0, seed=seed, max_tokens=400,
                            messages=[{"role": "user", "content": "Weather in Paris?"}],
                            thinking_budget=budget,
                            chat_template_kwargs={"enable_thinking": thinking})
                content, reasoning, calls, finish, usage = ask(ngx.url, body, stream)
                what = (name, seed, stream)
                assert finish != "length", (what, content, reasoning)
                check(name, content, calls, finish)
                assert usage["completion_tokens"] <= 400
                if not thinking:
                    assert reasoning == "", (what, reasoning)


def test_reasoning_is_bounded_then_closed(procs):
    """A random model rarely closes its think block by itself: the budget
    does, at that many reasoning tokens (counted in the logprobs, one entry
    per generated token, up to the "\n</think>" the engine writes), then the
    JSON.  The same with the server's default budget (--reasoning-budget)."""
    _, ngx = stack(procs, TINY, extra=["--reasoning-budget", "20"])
    for budget in (0, 5, 40, None):
        body = dict(CONTRACTS["json_schema"], model="m", temperature=1.0, seed=7,
                    max_tokens=400, logprobs=True, messages=[{"role": "user", "content": "hi"}])
        if budget is not None:
            body["thinking_budget"] = budget
        code, _, raw = harness.http("POST", ngx.url + "/v1/chat/completions", body,
                                    timeout=300)
        assert code == 200, raw
        ch = json.loads(raw)["choices"][0]
        toks = [t["token"] for t in ch["logprobs"]["content"]]
        want = budget if budget is not None else 20
        n = toks.index("</think>")
        assert toks[n - 1] == "\n" and n - 1 <= want, (budget, toks[:n + 1])
        assert ch["finish_reason"] == "stop"
        jsonschema.validate(json.loads(ch["message"]["content"]), FORECAST)
    code, _, raw = harness.http("POST", ngx.url + "/v1/chat/completions",
                                dict(body, thinking_budget=-1))
    assert code == 400 and json.loads(raw)["error"]["param"] == "thinking_budget"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_max_tokens_within_reach_closes_the_answer(procs, stream):
    """A random model's free strings never end by themselves: max_tokens
    ends them, and the grammar's shortest completion is generated in time
    (here ~90 tokens of FORECAST's required parameters, XML syntax): a
    schema-valid document / call, not a cut one.  Below what the shortest
    answer needs, "length" (the one allowed failure)."""
    _, ngx = stack(procs, TINY)
    for name in ("json_schema", "named", "required", "json_object"):
        for max_tokens in (150, 200):
            body = dict(CONTRACTS[name], model="m", temperature=1.0, seed=3,
                        max_tokens=max_tokens, thinking_budget=8,
                        messages=[{"role": "user", "content": "hi"}])
            content, _, calls, finish, usage = ask(ngx.url, body, stream)
            assert finish != "length", (name, max_tokens, content)
            check(name, content, calls, finish)
            assert usage["completion_tokens"] <= max_tokens
    body = dict(CONTRACTS["json_schema"], model="m", max_tokens=3,
                chat_template_kwargs={"enable_thinking": False},
                messages=[{"role": "user", "content": "hi"}])
    content, _, _, finish, _ = ask(ngx.url, body, stream)
    assert finish == "length" and content.startswith("{")


def test_default_model_contracts(procs):
    """make run's default model (SmolLM2-135M-Instruct, ChatML, no thinking)
    through the gateway: JSON answers and forced calls (its JSON call
    syntax) valid, streamed and not (greedy: the same answer both ways)."""
    gguf = harness.smollm2_gguf()
    if gguf is None:
        pytest.fail("SmolLM2 GGUF not found: run make deps")
    _, ngx = stack(procs, gguf)
    ask_ = {"role": "user", "content": "Give me the weather forecast for Paris as JSON."}
    for name, extra in CONTRACTS.items():
        got = []
        for stream in (False, True):
            body = dict(extra, model="m", temperature=0, max_tokens=120, messages=[ask_])
            content, reasoning, calls, finish, _ = ask(ngx.url, body, stream)
            assert reasoning == ""
            assert finish != "length", (name, content)
            check(name, content, calls, finish)
            got.append((content, [(c["name"], json.loads(c["arguments"])) for c in calls]))
        assert got[0] == got[1], name


@pytest.mark.parametrize("model", [TINY, TINY_NEXT], ids=["qwen3.5-xml", "qwen3next-json"])
def test_strict_tools_constrain_the_models_own_calls(procs, model):
    """tool_choice auto with strict tools: a call the model opens itself (a
    logit bias makes the random model write <tool_call>) follows the schema
    of the function it names; without strict, the same request gives no
    valid call at all (the constraint, not the model, made it)."""
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    _, ngx = stack(procs, model)
    strict_weather = {"type": "function", "function": dict(WEATHER["function"], strict=True)}
    for stream in (False, True):
        for seed in (1, 2):
            body = dict(model="m", tools=[strict_weather, FORECAST_TOOL], temperature=1.0,
                        seed=seed, max_tokens=300, parallel_tool_calls=False,
                        logit_bias={str(tok.token_to_id("<tool_call>")): 100},
                        messages=[{"role": "user", "content": "Weather in Paris?"}],
                        chat_template_kwargs={"enable_thinking": False})
            content, _, calls, finish, _ = ask(ngx.url, body, stream)
            check("required", content, calls, finish)
    loose = [{"type": "function", "function": dict(t["function"], strict=False)}
             for t in TOOLS]
    content, _, calls, finish, _ = ask(ngx.url, dict(body, tools=loose), False)
    assert calls == [] and finish == "length"


def test_trained_model_keeps_the_contracts_with_thinking_on(procs):
    """The project's own trained model (models/pic-qa, Qwen3.5 layout, thinking on by
    default), asked as a new user would: JSON of the weather, and a named get_weather
    call.  It may end its reasoning at once or never; either way the answer is JSON /
    a valid call, streamed and not."""
    model = os.path.join(harness.ROOT, "models", "pic-qa")
    if not os.path.isfile(os.path.join(model, "model.safetensors")):
        pytest.fail("models/pic-qa missing")
    _, ngx = stack(procs, model)
    weather = {"role": "user", "content": "Give me the weather in Paris as a JSON object."}
    cases = [("json_object", dict(CONTRACTS["json_object"], messages=[weather])),
             ("named", dict(tools=[WEATHER], messages=[weather],
                            tool_choice={"type": "function",
                                         "function": {"name": "get_weather"}}))]
    for name, body in cases:
        for stream, seed in ((False, 1), (True, 1), (False, 2), (True, 3)):
            content, reasoning, calls, finish, _ = ask(
                ngx.url, dict(body, model="m", max_tokens=200, seed=seed), stream)
            assert finish != "length", (name, stream, content, reasoning)
            if name == "named":
                [call] = calls
                assert call["name"] == "get_weather"
                jsonschema.validate(json.loads(call["arguments"]), SCHEMAS["get_weather"])
            check(name if name != "named" else "required", content, calls, finish)
