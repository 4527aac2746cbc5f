"""Agent frameworks as clients, through nginx with the module, to real
engines: the official `openai` SDK, the OpenAI Agents SDK
(`openai-agents`), LangChain (`langchain-openai`) and LiteLLM each run a
two-tool agent loop to completion, streaming on and off:

    user: weather in Paris, in Fahrenheit?
      -> get_weather(city="Paris")   (Qwen3.5 XML call syntax)
      -> c_to_f(c=21)                (JSON call syntax)
      -> "It is 69.8 F in Paris."    (after a reasoning block)

The fixture model has random weights and cannot decide to call a tool, so
the engines run with a scripted reply per step (--script: the reply is
generated token by token through the model and parsed like any output).
The tools themselves are real Python functions the frameworks call; the
oracle is the sequence of tool invocations, their arguments and the final
text.  Every framework must expose the cached prompt tokens in its own
usage object, and the later turns of the loop must report some (the tool
schemas and the system prompt are segments the engines already hold).
"""
import asyncio
import json
import os
import tempfile

import pytest

from tests import harness

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")   # no network at import
from tests.support.gateway import gw_conf

MODEL = os.path.join(harness.ROOT, "tests", "fixtures", "models", "tiny-qwen35")
pytestmark = pytest.mark.skipif(not os.path.isdir(MODEL), reason="fixture models missing")

SYSTEM = ("You are a weather assistant. Use get_weather for the weather of a city and "
          "c_to_f to turn Celsius into Fahrenheit; answer in one sentence. " * 3).strip()
QUESTION = "What is the weather in Paris, in Fahrenheit?"
FINAL = "It is 69.8 F in Paris."
SCRIPT = [
    {"when": "(as json)", "reply": "Done.\n</think>\n\n{\"city\": \"Paris\", \"temp_f\": 69.8}"},
    {"when": "weather in Paris", "reply": "I need the weather first.\n</think>\n\n"
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
     "</function>\n</tool_call>"},
    {"when": "temp_c=21", "reply": "Now convert.\n</think>\n\n"
     '<tool_call>\n{"name": "c_to_f", "arguments": {"c": 21}}\n</tool_call>'},
    {"when": "temp_f=69.8", "reply": "Done.\n</think>\n\n" + FINAL},
]
EXPECTED_CALLS = [("get_weather", {"city": "Paris"}), ("c_to_f", {"c": 21})]


class Tools:
    """The two tools, recording their invocations (the test's oracle)."""

    def __init__(self):
        self.calls = []

    def get_weather(self, city: str) -> str:
        self.calls.append(("get_weather", {"city": city}))
        return "temp_c=21"

    def c_to_f(self, c: float) -> str:
        self.calls.append(("c_to_f", {"c": int(c) if float(c).is_integer() else c}))
        return "temp_f=%.1f" % (float(c) * 9 / 5 + 32) + self.suffix

    suffix = ""


TOOL_SCHEMAS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "c_to_f", "description": "Celsius to Fahrenheit",
        "parameters": {"type": "object", "properties": {"c": {"type": "number"}},
                       "required": ["c"]}}},
]


@pytest.fixture
def gateway(procs):
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(SCRIPT, f)
    f.close()
    engs = [procs.engine(name=f"e{i + 1}", model=MODEL,
                         extra=["--threads", "1", "--script", f.name]) for i in range(2)]
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{e.port}" for e in engs]))
    yield ngx.url + "/v1"
    os.unlink(f.name)


def check(tools, final, cached):
    assert tools.calls == EXPECTED_CALLS
    assert final.strip() == FINAL
    # cached prompt tokens as each framework reports them: present on every
    # turn, and above zero once the engines hold the shared segments
    assert len(cached) == 3 and all(isinstance(x, int) for x in cached), cached
    assert cached[-1] > 0, cached


# --- the official SDK ---

@pytest.mark.parametrize("stream", [False, True])
def test_openai_sdk_tool_loop(gateway, stream):
    import openai

    c = openai.OpenAI(base_url=gateway, api_key="none", max_retries=0, timeout=60)
    tools, cached = Tools(), []
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    for _ in range(4):
        if stream:
            content, calls, reasoning = "", {}, ""
            for ch in c.chat.completions.create(model="m", messages=messages,
                                                tools=TOOL_SCHEMAS, stream=True,
                                                stream_options={"include_usage": True}):
                if ch.usage:
                    cached.append(ch.usage.prompt_tokens_details.cached_tokens)
                if not ch.choices:
                    continue
                d = ch.choices[0].delta
                content += d.content or ""
                reasoning += getattr(d, "reasoning_content", None) or ""
                for tc in d.tool_calls or []:
                    e = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    e["id"] += tc.id or ""
                    e["name"] += (tc.function.name or "") if tc.function else ""
                    e["arguments"] += (tc.function.arguments or "") if tc.function else ""
            calls = [calls[i] for i in sorted(calls)]
        else:
            r = c.chat.completions.create(model="m", messages=messages, tools=TOOL_SCHEMAS)
            cached.append(r.usage.prompt_tokens_details.cached_tokens)
            m = r.choices[0].message
            content, reasoning = m.content or "", getattr(m, "reasoning_content", "")
            calls = [{"id": t.id, "name": t.function.name, "arguments": t.function.arguments}
                     for t in m.tool_calls or []]
        assert reasoning
        if not calls:
            break
        messages.append({"role": "assistant", "content": content or None,
                         "reasoning_content": reasoning,
                         "tool_calls": [{"id": k["id"], "type": "function",
                                         "function": {"name": k["name"],
                                                      "arguments": k["arguments"]}}
                                        for k in calls]})
        for k in calls:
            out = getattr(tools, k["name"])(**json.loads(k["arguments"]))
            messages.append({"role": "tool", "tool_call_id": k["id"], "content": out})
    check(tools, content, cached)


# --- OpenAI Agents SDK ---

@pytest.mark.parametrize("stream", [False, True])
def test_openai_agents_tool_loop(gateway, stream):
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    tools = Tools()

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Current weather of a city."""
        return tools.get_weather(city)

    @agents.function_tool
    def c_to_f(c: float) -> str:
        """Celsius to Fahrenheit."""
        return tools.c_to_f(c)

    async def run():
        client = AsyncOpenAI(base_url=gateway, api_key="none", max_retries=0, timeout=60)
        model = agents.OpenAIChatCompletionsModel(model="m", openai_client=client)
        agent = agents.Agent(name="weather", instructions=SYSTEM, model=model,
                             tools=[get_weather, c_to_f],
                             model_settings=agents.ModelSettings(include_usage=True))
        if stream:
            res = agents.Runner.run_streamed(agent, QUESTION)
            async for _ in res.stream_events():
                pass
        else:
            res = await agents.Runner.run(agent, QUESTION)
        return res

    res = asyncio.run(run())
    cached = [r.usage.input_tokens_details.cached_tokens for r in res.raw_responses]
    check(tools, res.final_output, cached)
    assert res.context_wrapper.usage.input_tokens_details.cached_tokens == sum(cached)


# --- LangChain ---

@pytest.mark.parametrize("stream", [False, True])
def test_langchain_tool_loop(gateway, stream):
    lc = pytest.importorskip("langchain_openai")
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

    tools = Tools()
    llm = lc.ChatOpenAI(model="m", base_url=gateway, api_key="none", max_retries=0,
                        timeout=60, stream_usage=True).bind_tools(TOOL_SCHEMAS)
    msgs, cached = [SystemMessage(SYSTEM), HumanMessage(QUESTION)], []
    for _ in range(4):
        if stream:
            ai = None
            for ch in llm.stream(msgs):
                ai = ch if ai is None else ai + ch
        else:
            ai = llm.invoke(msgs)
        cached.append(ai.usage_metadata["input_token_details"].get("cache_read"))
        msgs.append(ai)
        if not ai.tool_calls:
            break
        for tc in ai.tool_calls:
            out = getattr(tools, tc["name"])(**tc["args"])
            msgs.append(ToolMessage(out, tool_call_id=tc["id"]))
    check(tools, ai.content, cached)


# --- LiteLLM as a client ---

@pytest.mark.parametrize("stream", [False, True])
def test_litellm_tool_loop(gateway, stream):
    litellm = pytest.importorskip("litellm")

    tools, cached = Tools(), []
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    for _ in range(4):
        kw = dict(model="openai/m", api_base=gateway, api_key="none", messages=messages,
                  tools=TOOL_SCHEMAS, timeout=60, num_retries=0)
        if stream:
            chunks = list(litellm.completion(stream=True,
                                             stream_options={"include_usage": True}, **kw))
            r = litellm.stream_chunk_builder(chunks, messages=messages)
        else:
            r = litellm.completion(**kw)
        cached.append(r.usage.prompt_tokens_details.cached_tokens)
        m = r.choices[0].message
        if not m.tool_calls:
            break
        messages.append({"role": "assistant", "content": m.content,
                         "tool_calls": [{"id": t.id, "type": "function",
                                         "function": {"name": t.function.name,
                                                      "arguments": t.function.arguments}}
                                        for t in m.tool_calls]})
        for t in m.tool_calls:
            out = getattr(tools, t.function.name)(**json.loads(t.function.arguments))
            messages.append({"role": "tool", "tool_call_id": t.id, "content": out})
    check(tools, m.content, cached)


# --- structured output (response_format json_schema) ---

def test_openai_agents_structured_output_after_tools(gateway):
    """output_type: the SDK sends response_format json_schema (its strict
    pydantic schema is inside the supported subset) and the final answer,
    after the two tool calls, is parsed into the model class."""
    agents = pytest.importorskip("agents")
    import pydantic
    from openai import AsyncOpenAI

    class Weather(pydantic.BaseModel):
        city: str
        temp_f: float

    agents.set_tracing_disabled(True)
    tools = Tools()
    tools.suffix = " (as json)"

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Current weather of a city."""
        return tools.get_weather(city)

    @agents.function_tool
    def c_to_f(c: float) -> str:
        """Celsius to Fahrenheit."""
        return tools.c_to_f(c)

    async def run():
        client = AsyncOpenAI(base_url=gateway, api_key="none", max_retries=0, timeout=60)
        model = agents.OpenAIChatCompletionsModel(model="m", openai_client=client)
        agent = agents.Agent(name="weather", instructions=SYSTEM, model=model,
                             tools=[get_weather, c_to_f], output_type=Weather)
        return await agents.Runner.run(agent, QUESTION)

    res = asyncio.run(run())
    assert tools.calls == EXPECTED_CALLS
    assert res.final_output == Weather(city="Paris", temp_f=69.8)


@pytest.mark.parametrize("thinking", [False, True], ids=["nothink", "think"])
@pytest.mark.parametrize("stream", [False, True])
def test_langchain_structured_output_by_constrained_decoding(gateway, stream, thinking):
    """No script matches: the random model samples, the grammar keeps it
    inside the schema, LangChain parses the answer into the class (with
    thinking on, after the reasoning the budget closes)."""
    lc = pytest.importorskip("langchain_openai")
    import typing

    import pydantic

    class Mood(pydantic.BaseModel):
        mood: typing.Literal["happy", "sad", "meh"]
        ok: bool

    llm = lc.ChatOpenAI(model="m", base_url=gateway, api_key="none", max_retries=0,
                        timeout=60, max_tokens=800, streaming=stream,
                        extra_body={"chat_template_kwargs": {"enable_thinking": thinking},
                                    "thinking_budget": 16})
    for seed in (1, 2):
        out = llm.bind(seed=seed).with_structured_output(Mood, method="json_schema").invoke(
            "How do you feel today?")
        assert isinstance(out, Mood)
