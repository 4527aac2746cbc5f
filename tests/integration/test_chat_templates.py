"""test_chat_templates.py — the Llama 3 and Mistral dialects against transformers.

Oracle: tests/fixtures/oracle/chat_templates.json (tests/tools/chat_templates.py):
what apply_chat_template renders for the released templates (Llama 3.0, 3.1, 3.2,
Mistral-7B-Instruct-v0.3, Mistral-Nemo-Instruct-2407; tests/fixtures/templates/) on
OpenAI requests: no system, system, developer, multi-turn, no generation prompt,
whitespace, text parts, tools, tool calls and results, and the shapes a template
raises on.  Each template goes into a checkpoint directory of its own (tiny-llama's
weights and tokenizer, the family's model_type and specials):

* the engine picks the dialect from the template text alone, and refuses a template
  of the family that is none of these by name;
* `pic-engine tokenize --chat` renders every case byte for byte as transformers does,
  or answers the template's own error; the few shapes a dialect refuses on purpose
  (REFUSED: Llama 3.0's template has no place for tools or calls) are refused naming
  what it does not render;
* served, the engine and the gateway render the same bytes: the gateway's prompt bytes
  ($pic_prompt_bytes) are the oracle text's, the engine's prompt tokens its tokens,
  and the engine accepts the gateway's plan (its segment keys are over the same
  bytes) and serves the repeated request's prefix exactly; a shape the template
  refuses gets the same 400 from both;
* the dialect's end-of-turn token ends generation even where config.json names
  another eos.
"""
import datetime
import json
import os
import shutil
import subprocess

import pytest

from tests import harness

ROOT = harness.ROOT
ENGINE = os.path.join(ROOT, os.environ.get("PIC_BUILD", "build"), "pic-engine")
ORACLE = os.path.join(ROOT, "tests", "fixtures", "oracle", "chat_templates.json")
TEMPLATES = os.path.join(ROOT, "tests", "fixtures", "templates")
BASE = os.path.join(ROOT, "tests", "fixtures", "models", "tiny-llama")
DOC = json.load(open(ORACLE, encoding="utf-8"))

# Mistral's specials in the slots of the fixture tokenizer's nine added tokens
MISTRAL_SPECIALS = ["<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                    "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]
# (template, case): refused by the dialect although the template renders something
REFUSED = {("llama-3.0", c): p for c, p in [
    ("tools", "tools"), ("tools_no_system", "tools"), ("tools_multi_turn", "tools"),
    ("tool_call_and_result", "tools"), ("tool_result_then_answer", "tools"),
    ("two_tool_calls", "tools"), ("short_call_id", "tools"), ("tools_no_user", "tools")]}


def _checkpoint(tmp, t):
    """A checkpoint directory for template record t: tiny-llama's weights, the
    family's model_type and specials, t's template."""
    d = os.path.join(tmp, t["name"])
    os.makedirs(d)
    os.symlink(os.path.join(BASE, "model.safetensors"), os.path.join(d, "model.safetensors"))
    cfg = json.load(open(os.path.join(BASE, "config.json")))
    tj = json.load(open(os.path.join(BASE, "tokenizer.json"), encoding="utf-8"))
    if t["model_type"] == "mistral":
        cfg.update({"model_type": "mistral", "architectures": ["MistralForCausalLM"],
                    "sliding_window": None})
        for a, content in zip(tj["added_tokens"], MISTRAL_SPECIALS):
            a["content"] = content
    ids = {a["content"]: a["id"] for a in tj["added_tokens"]}
    # config.json names another token than the turn's end: only the dialect stops
    cfg["eos_token_id"] = ids["[TOOL_CALLS]" if t["model_type"] == "mistral"
                              else "<|python_tag|>"]
    cfg["bos_token_id"] = ids[t["bos_token"]]
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    json.dump(tj, open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8"),
              ensure_ascii=False)
    with open(os.path.join(TEMPLATES, t["file"]), encoding="utf-8") as f:
        tmpl = f.read()
    json.dump({"bos_token": t["bos_token"], "eos_token": t["eos_token"], "chat_template": tmpl,
               "tokenizer_class": "PreTrainedTokenizerFast"},
              open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8"))
    return d


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("templates"))
    return {t["name"]: _checkpoint(tmp, t) for t in DOC["templates"]}


def _expected(t, case):
    """The oracle text, the Llama 3.2 date made today's (strftime_now)."""
    text = case["text"]
    if t["dialect"] == "llama3.2":
        today = datetime.datetime.now().strftime("%d %b %Y")
        text = text.replace("Today Date: %s\n" % DOC["date"], "Today Date: %s\n" % today)
    return text


def _render(model, req):
    """(rendered text, None) or (None, the error) from `pic-engine tokenize --chat`."""
    r = subprocess.run([ENGINE, "tokenize", "--model", model, "--chat", json.dumps(req)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return None, r.stderr
    ids = r.stdout.strip()
    d = subprocess.run([ENGINE, "tokenize", "--model", model, "--decode", ids],
                       capture_output=True, timeout=60)
    assert d.returncode == 0, d.stderr
    return d.stdout.decode("utf-8"), None


def _cases():
    return [pytest.param(t, c, id="%s-%s" % (t["name"], c["name"]))
            for t in DOC["templates"] for c in t["cases"]]


@pytest.mark.parametrize("t,case", _cases())
def test_renders_like_transformers(models, t, case):
    """The engine's rendering of each case is transformers' text, or its error."""
    text, err = _render(models[t["name"]], case["request"])
    refused = REFUSED.get((t["name"], case["name"]))
    if refused:
        assert text is None and "no place for %s" % refused in err, (text, err)
    elif "error" in case:
        assert text is None and case["error"] in err, (case["error"], text, err)
    else:
        assert err is None, err
        assert text == _expected(t, case)


@pytest.mark.parametrize("t", [pytest.param(t, id=t["name"]) for t in DOC["templates"]])
def test_dialect_from_template_text(models, procs, t):
    """serve names the dialect the template text says (/v1/models, /status)."""
    e = procs.engine(name="e", model=models[t["name"]], extra=["--threads", "1"])
    _, _, body = harness.http("GET", e.url + "/v1/models")
    assert json.loads(body)["data"][0]["chat_template"] == t["dialect"]


@pytest.mark.parametrize("family,edit", [
    ("Llama 3", lambda s: s.replace("Cutting Knowledge Date: December 2023",
                                    "Cutting Knowledge Date: March 2025")),
    ("Mistral [INST]", lambda s: s.replace("[AVAILABLE_TOOLS] [", "[AVAILABLE_TOOLS]  [")),
])
def test_unknown_variant_refused_by_name(models, tmp_path, family, edit):
    """A template of the family that is none of the released ones is refused,
    naming the family, rather than rendered as something else."""
    name = "llama-3.1" if family == "Llama 3" else "mistral-v0.3"
    d = str(tmp_path / "m")
    shutil.copytree(models[name], d, symlinks=True)
    p = os.path.join(d, "tokenizer_config.json")
    tc = json.load(open(p, encoding="utf-8"))
    tc["chat_template"] = edit(tc["chat_template"])
    json.dump(tc, open(p, "w", encoding="utf-8"))
    text, err = _render(d, {"messages": [{"role": "user", "content": "hi"}]})
    assert text is None
    assert "a %s template" % family in err and "is not one this engine renders" in err, err


def _engine_tokens(model, text):
    r = subprocess.run([ENGINE, "tokenize", "--model", model, "--text", text],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return len(r.stdout.strip().split(","))


SERVED = ["system", "multi_turn", "tool_call_and_result", "text_parts"]


@pytest.mark.parametrize("t", [pytest.param(t, id=t["name"]) for t in DOC["templates"]])
def test_engine_and_gateway_render_the_same_bytes(models, procs, t):
    """Served through nginx: the gateway's rendered prompt is the oracle's bytes,
    the engine reads it as the oracle's tokens under the gateway's plan, and the
    repeated request's prefix comes from the exact prefix cache; a shape the
    template refuses is the same 400 from the gateway and the engine."""
    from tests.support.gateway import access_lines, gw_conf, probed
    model = models[t["name"]]
    e = procs.engine(name="e", model=model, extra=["--threads", "1"])
    ngx = procs.nginx(gw_conf(["127.0.0.1:%d" % e.port], cdc=None, min_segment=None))
    probed(ngx)
    cases = {c["name"]: c for c in t["cases"]}
    n_lines = 0
    for name in SERVED:
        case = cases[name]
        if (t["name"], name) in REFUSED:
            continue
        body = dict(case["request"], max_tokens=2, temperature=0)
        want = _expected(t, case)
        for attempt in range(2):
            st, _, raw = harness.http("POST", ngx.url + "/v1/chat/completions", body=body,
                                      timeout=120)
            assert st == 200, raw
            usage = json.loads(raw)["usage"]
            assert usage["prompt_tokens"] == _engine_tokens(model, want), (name, usage)
            n_lines += 1
            harness.wait_for(lambda: len(access_lines(ngx)) >= n_lines, timeout=5,
                             what="the access log line")
            assert int(access_lines(ngx)[-1]["prompt"]) == len(want.encode()), name
        assert usage["pic"]["exact_tokens"] > 0, (name, usage)
    bad = [c for c in t["cases"] if "error" in c or (t["name"], c["name"]) in REFUSED][:1]
    for case in bad:
        answers = []
        for url in (ngx.url, e.url):
            st, _, raw = harness.http("POST", url + "/v1/chat/completions",
                                      body=dict(case["request"], max_tokens=2), timeout=60)
            assert st == 400, raw
            answers.append(json.loads(raw)["error"])
        assert answers[0] == answers[1], answers
        assert case.get("error", answers[0]["message"]) == answers[0]["message"], answers


@pytest.mark.parametrize("t", [pytest.param(t, id=t["name"]) for t in DOC["templates"]])
def test_end_of_turn_token_ends_generation(models, procs, t):
    """The answer ends at the dialect's end-of-turn token (forced with logit_bias)
    although config.json's eos_token_id names another token."""
    model = models[t["name"]]
    tj = json.load(open(os.path.join(model, "tokenizer.json"), encoding="utf-8"))
    ids = {a["content"]: a["id"] for a in tj["added_tokens"]}
    eot = ids["</s>" if t["model_type"] == "mistral" else "<|eot_id|>"]
    e = procs.engine(name="e", model=model, extra=["--threads", "1"])
    body = {"messages": [{"role": "user", "content": "Hi."}], "max_tokens": 8,
            "temperature": 0, "logit_bias": {str(eot): 100}}
    st, _, raw = harness.http("POST", e.url + "/v1/chat/completions", body=body, timeout=60)
    assert st == 200, raw
    j = json.loads(raw)
    assert j["choices"][0]["finish_reason"] == "stop", j
    assert j["usage"]["completion_tokens"] <= 1, j


def _released(models, t, tmp_path):
    """t's checkpoint as released: its eos is the turn's end, not the call opening
    the shared fixture names to test the dialect's stop."""
    d = tmp_path / "ckpt"
    shutil.copytree(models[t["name"]], d, symlinks=True)
    tj = json.load(open(d / "tokenizer.json", encoding="utf-8"))
    cfg = json.load(open(d / "config.json"))
    cfg["eos_token_id"] = {a["content"]: a["id"] for a in tj["added_tokens"]}[t["eos_token"]]
    json.dump(cfg, open(d / "config.json", "w"))
    return str(d)


# The answer each family writes for a call, scripted (random weights never
# write one); the parser must turn it into the same OpenAI tool_calls.
CALL_REPLIES = {
    "llama": '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}',
    "mistral": '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", '
               '"unit": "c"}}]',
}


@pytest.mark.parametrize("t", [pytest.param(t, id=t["name"]) for t in DOC["templates"]
                               if t["name"] != "llama-3.0"])
def test_family_tool_calls_become_openai_tool_calls(models, procs, tmp_path, t):
    """A call written in the family's own syntax (Llama 3.1/3.2: the JSON object
    as the whole answer; Mistral: [TOOL_CALLS], a special token the detokenizer
    keeps for the parser, then a JSON list) comes back as OpenAI tool_calls through
    the openai client, whole and streamed; its id is one the family's template takes
    back (Mistral: 9 alphanumerics), so the history with the call and its result is
    served on the next turn."""
    import openai
    case = {c["name"]: c for c in t["cases"]}["tool_call_and_result"]["request"]
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"when": "weather", "reply": CALL_REPLIES[t["model_type"]]}]))
    e = procs.engine(name="e", model=_released(models, t, tmp_path),
                     extra=["--threads", "1", "--script", str(script)])
    client = openai.OpenAI(base_url=e.url + "/v1", api_key="none", max_retries=0)
    msgs = case["messages"][:2]
    r = client.chat.completions.create(model="m", messages=msgs, tools=case["tools"],
                                       max_tokens=64, temperature=0)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    assert [(c.function.name, json.loads(c.function.arguments)) for c in ch.message.tool_calls] \
        == [("get_weather", {"city": "Paris", "unit": "c"})], ch
    assert not ch.message.content, ch
    call_id = ch.message.tool_calls[0].id
    if t["model_type"] == "mistral":
        assert len(call_id) == 9 and call_id.isalnum(), call_id

    parts = list(client.chat.completions.create(model="m", messages=msgs, tools=case["tools"],
                                                max_tokens=64, temperature=0, stream=True))
    deltas = [tc for p in parts if p.choices for tc in (p.choices[0].delta.tool_calls or [])]
    assert deltas and deltas[0].function.name == "get_weather", parts
    assert json.loads("".join(d.function.arguments or "" for d in deltas)) == \
        {"city": "Paris", "unit": "c"}, deltas
    assert [p.choices[0].finish_reason for p in parts if p.choices][-1] == "tool_calls"

    history = msgs + [ch.message.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": call_id, "content": "21 C, clear"}]
    r2 = client.chat.completions.create(model="m", messages=history, tools=case["tools"],
                                        max_tokens=4, temperature=0)
    assert r2.choices[0].finish_reason in ("stop", "length"), r2


@pytest.mark.parametrize("t", [pytest.param(t, id=t["name"]) for t in DOC["templates"]
                               if t["name"] != "llama-3.0"])
def test_family_forced_calls_follow_the_schema(models, procs, tmp_path, t):
    """tool_choice "required" and a named function on Llama 3.1/3.2 and Mistral: the
    engine forces the family's own call syntax (Llama: the JSON object as the answer;
    Mistral: [TOOL_CALLS] and a list) and the call grammar keeps a random model,
    sampled, to an offered function with arguments of its schema; the answer ends
    with the call."""
    import openai
    from tests.support.tools import SET_MODE, TOGGLE, args_valid
    e = procs.engine(name="e", model=_released(models, t, tmp_path), extra=["--threads", "1"])
    client = openai.OpenAI(base_url=e.url + "/v1", api_key="none", max_retries=0)
    msgs = [{"role": "user", "content": "hi"}]
    for choice, seed in [("required", 3), ({"type": "function",
                                            "function": {"name": "set_mode"}}, 1)]:
        r = client.chat.completions.create(model="m", messages=msgs, tools=[SET_MODE, TOGGLE],
                                           tool_choice=choice, temperature=1.0, seed=seed,
                                           max_tokens=800)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls", (choice, ch.message.content)
        [call] = ch.message.tool_calls
        assert choice == "required" or call.function.name == "set_mode", call
        assert args_valid(call.function.name, json.loads(call.function.arguments)), call
