"""chat_templates.py — what transformers' apply_chat_template renders for the
released Llama 3 and Mistral chat templates, written as the oracle of
tests/integration/test_chat_templates.py.

The templates are the models' own texts (tests/fixtures/templates/*.jinja: facts
of those checkpoints, used as test input).  Every conversation is an OpenAI
request (what a client sends the engine or the gateway); it reaches the template
as vLLM hands it over: `developer` as `system`, text parts joined with "\n",
tool-call arguments decoded to objects.  Each case records the rendered text or
the template's error message.  The Llama 3.2 template dates its system turn
with strftime_now: the json records the date it printed (`date`), which the test
replaces with the day it runs.

Runs in the oracle venv (transformers, tokenizers; no torch needed):

    .venv-oracle/bin/python -m tests.tools.chat_templates

writes tests/fixtures/oracle/chat_templates.json.
"""
import argparse
import copy
import datetime
import json
import os
import sys

import tokenizers
import transformers
from transformers import PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TEMPLATES = os.path.join(ROOT, "tests", "fixtures", "templates")
TOKENIZER = os.path.join(ROOT, "tests", "fixtures", "models", "tiny-llama", "tokenizer.json")

# name, file, model_type, the engine's dialect, bos, eos, source
TEMPLATE_LIST = [
    ("llama-3.0", "llama-3.0.jinja", "llama", "llama3", "<|begin_of_text|>", "<|eot_id|>",
     "meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json"),
    ("llama-3.1", "llama-3.1.jinja", "llama", "llama3.1", "<|begin_of_text|>", "<|eot_id|>",
     "meta-llama/Llama-3.1-8B-Instruct tokenizer_config.json (Llama-3.3-70B-Instruct: "
     "the same text)"),
    ("llama-3.2", "llama-3.2.jinja", "llama", "llama3.2", "<|begin_of_text|>", "<|eot_id|>",
     "meta-llama/Llama-3.2-3B-Instruct tokenizer_config.json"),
    ("mistral-v0.3", "mistral-v0.3.jinja", "mistral", "mistral", "<s>", "</s>",
     "mistralai/Mistral-7B-Instruct-v0.3 tokenizer_config.json (the revision that puts "
     "the system message before the last user message)"),
    ("mistral-nemo", "mistral-nemo.jinja", "mistral", "mistral-nemo", "<s>", "</s>",
     "mistralai/Mistral-Nemo-Instruct-2407 tokenizer_config.json"),
]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city"},
        "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "description": "Local time",
                                          "parameters": {"type": "object", "properties": {}}}}


def call(cid, name, args):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


def U(text):
    return {"role": "user", "content": text}


def A(text):
    return {"role": "assistant", "content": text}


SYS = {"role": "system", "content": "You are a terse assistant."}

# name, OpenAI request (without "model")
CONVERSATIONS = [
    ("user_only", {"messages": [U("What is the capital of France?")]}),
    ("system", {"messages": [SYS, U("Hello there.")]}),
    ("developer", {"messages": [{"role": "developer", "content": "Answer in French."},
                                U("Hello.")]}),
    ("multi_turn", {"messages": [SYS, U("Hi."), A("Hello! How can I help?"),
                                 U("Name a colour.")]}),
    ("multi_turn_no_system", {"messages": [U("Hi."), A("Hello!"), U("Bye.")]}),
    ("no_generation_prompt", {"messages": [SYS, U("Hi."), A("Hello!")],
                              "add_generation_prompt": False}),
    ("whitespace", {"messages": [{"role": "system", "content": "  Be brief.\n"},
                                 U("\n  padded question  \n"), A("  spaced answer \n"),
                                 U("again ")]}),
    ("text_parts", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Document one."}, {"type": "text", "text": "Question?"}]}]}),
    ("unicode", {"messages": [U("Zürich, 東京 and \"quotes\" \\ backslash 👍")]}),
    ("repeated_user", {"messages": [SYS, U("Again."), A("Sure."), U("Again.")]}),
    ("two_users", {"messages": [U("One."), U("Two.")]}),
    ("system_later", {"messages": [U("Hi."), A("Hello."), SYS, U("Go on.")]}),
    ("tools", {"messages": [SYS, U("What is the weather in Paris?")],
               "tools": [WEATHER, CLOCK]}),
    ("tools_no_system", {"messages": [U("What is the weather in Paris?")], "tools": [WEATHER]}),
    ("tools_multi_turn", {"messages": [U("Hi."), A("Hello."), U("Weather in Rome?")],
                          "tools": [WEATHER]}),
    ("tool_call_and_result", {"messages": [
        SYS, U("What is the weather in Paris?"),
        {"role": "assistant", "content": None,
         "tool_calls": [call("call00001", "get_weather", {"city": "Paris", "unit": "c"})]},
        {"role": "tool", "tool_call_id": "call00001",
         "content": "{\"temp\": 21, \"sky\": \"clear\", \"note\": \"Zürich\\nline\"}"}],
        "tools": [WEATHER]}),
    ("tool_result_then_answer", {"messages": [
        U("Weather in Oslo?"),
        {"role": "assistant", "content": None,
         "tool_calls": [call("abcdefghi", "get_weather", {"city": "Oslo"})]},
        {"role": "tool", "tool_call_id": "abcdefghi", "content": "rain, 4 C"},
        A("It rains in Oslo, 4 C."), U("And tomorrow?")], "tools": [WEATHER]}),
    ("two_tool_calls", {"messages": [
        U("Weather and time in Paris?"),
        {"role": "assistant", "content": None,
         "tool_calls": [call("call00001", "get_weather", {"city": "Paris"}),
                        call("call00002", "get_time", {})]},
        {"role": "tool", "tool_call_id": "call00001", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call00002", "content": "12:00"}],
        "tools": [WEATHER, CLOCK]}),
    ("short_call_id", {"messages": [
        U("Weather in Paris?"),
        {"role": "assistant", "content": None,
         "tool_calls": [call("c1", "get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], "tools": [WEATHER]}),
    ("tools_no_user", {"messages": [SYS], "tools": [WEATHER]}),
]


def as_vllm(req):
    """The request's messages and tools as vLLM hands them to the template."""
    msgs = []
    for m in req["messages"]:
        m = copy.deepcopy(m)
        if m["role"] == "developer":
            m["role"] = "system"
        if isinstance(m.get("content"), list):
            m["content"] = "\n".join(p["text"] for p in m["content"])
        for tc in m.get("tool_calls", []):
            tc["function"]["arguments"] = json.loads(tc["function"]["arguments"])
        msgs.append(m)
    return msgs, req.get("tools")


def render(tok, req):
    msgs, tools = as_vllm(req)
    kw = {"tokenize": False, "add_generation_prompt": req.get("add_generation_prompt", True)}
    if tools is not None:
        kw["tools"] = tools
    try:
        return {"text": tok.apply_chat_template(msgs, **kw)}
    except Exception as e:  # noqa: BLE001 - recording what the template does
        return {"error": str(e), "error_type": type(e).__name__}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "oracle",
                                                  "chat_templates.json"))
    args = ap.parse_args(argv)
    today = datetime.datetime.now().strftime("%d %b %Y")
    out = {"object": "pic.chat_template_oracle", "generator": "tests/tools/chat_templates.py",
           "note": __doc__.split("\n\n")[1].replace("\n", " "),
           "versions": {"python": sys.version.split()[0],
                        "transformers": transformers.__version__,
                        "tokenizers": tokenizers.__version__},
           "date": today, "templates": []}
    for name, fname, model_type, dialect, bos, eos, source in TEMPLATE_LIST:
        with open(os.path.join(TEMPLATES, fname), encoding="utf-8") as f:
            template = f.read()
        tok = PreTrainedTokenizerFast(tokenizer_file=TOKENIZER, bos_token=bos, eos_token=eos)
        tok.chat_template = template
        cases = []
        for cname, req in CONVERSATIONS:
            rec = {"name": cname, "request": req}
            rec.update(render(tok, req))
            cases.append(rec)
        out["templates"].append({"name": name, "file": fname, "source": source,
                                 "model_type": model_type, "dialect": dialect,
                                 "bos_token": bos, "eos_token": eos, "cases": cases})
        n_err = sum("error" in c for c in cases)
        print("%s: %d cases (%d template errors)" % (name, len(cases), n_err))
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote", os.path.relpath(args.out, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
