"""The gateway's request path with real nginx, real pic-engine processes and the
official OpenAI SDK: chat (streaming and not), tools, plans, hits, variables,
pass-through.  A capture peer stands in for an engine only where the test must
see the exact bytes nginx sent (engines do not echo requests)."""
import json
import os
import re
import subprocess

import pytest

from tests import harness
from tests.support.gateway import MARK, client, doc, engines, gw_conf, planned_lines, probed, status, xxh128_key  # noqa: F401


# --- the OpenAI SDK through nginx ------------------------------------------------


def test_sdk_chat_nonstream_through_gateway(procs):
    e1, e2 = engines(procs)
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{e1.port}", f"127.0.0.1:{e2.port}"]))
    r = client(ngx).chat.completions.create(
        model="tiny", max_tokens=2,
        messages=[{"role": "system", "content": doc(1)}, {"role": "user", "content": "hi"}])
    assert r.choices[0].message.role == "assistant"
    assert r.usage.completion_tokens >= 1
    st = status(ngx)
    assert st["requests"]["planned"] == 1 and st["requests"]["errors"] == 0
    assert st["segments"]["total"] >= 3
    line, = planned_lines(ngx, 1)
    assert line["status"] == "200"
    assert line["combine"] in (f"127.0.0.1:{e1.port}", f"127.0.0.1:{e2.port}")
    assert line["up"] == line["combine"], "pic_balancer sends to the combine node"
    assert re.fullmatch(r"[0-9a-f]{16}", line["plan"])


def test_a_request_is_counted_before_its_client_has_the_answer(procs):
    """Each request's numbers (requests.total, errors, TTFT, history, the
    engine's in-flight count) are in the status location as soon as its
    client has the whole answer, JSON, stream or error alike: read at once,
    no wait (a client's next request may go to another worker)."""
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]))
    url = ngx.url + "/v1/chat/completions"
    msgs = [{"role": "system", "content": doc(3)}, {"role": "user", "content": "hi"}]
    for i, (body, code) in enumerate([({"model": "m", "messages": msgs}, 200),
                                      ({"model": "m", "messages": msgs, "stream": True}, 200),
                                      (b"{bad", 400),
                                      ({"model": "m", "messages": msgs}, 200)]):
        got, _, raw = harness.http("POST", url, body=body)
        assert got == code, raw
        st = status(ngx)
        assert st["requests"]["total"] == i + 1
        assert st["requests"]["errors"] == (i >= 2)
        assert st["ttft_ms"]["count"] == i + 1 - (i >= 2)
        assert st["history"]["recorded"] == i + 1 - (i >= 2)
        assert st["engines"][0]["inflight"] == 0


def test_sdk_chat_stream_through_gateway(procs):
    e1, = engines(procs, 1)
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{e1.port}"]))
    chunks = list(client(ngx).chat.completions.create(
        model="tiny", max_tokens=3, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "system", "content": doc(2)}, {"role": "user", "content": "hi"}]))
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] in ("length", "stop")
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1
    # the TTFT sample is recorded before the stream's last byte leaves
    st = status(ngx)
    assert st["requests"]["planned"] == 1
    assert st["ttft_ms"]["count"] == 1


TOOLS = [
    {"type": "function", "function": {"name": "search", "description": doc(3, 300),
     "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "fetch", "description": doc(4, 300),
     "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}}},
]


def tool_conversation(tools):
    return dict(model="tiny", max_tokens=2, tools=tools, messages=[
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "find the cache paper"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "search", "arguments": "{\"q\": \"cache\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": doc(5, 900)},
        {"role": "user", "content": "summarise it"}])


def test_sdk_tools_and_tool_results_hit_when_reordered(procs):
    e1, = engines(procs, 1, mode="pic")
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{e1.port}"]))
    probed(ngx)
    c = client(ngx)
    r = c.chat.completions.create(**tool_conversation(TOOLS))
    assert r.choices[0].finish_reason in ("length", "stop", "tool_calls")
    before = status(ngx)
    # the same tools in another order, the same tool result: schemas and the
    # result are recognised although their positions moved
    c.chat.completions.create(**tool_conversation(TOOLS[::-1]))
    after = status(ngx)
    hit = after["bytes"]["hit"] - before["bytes"]["hit"]
    above = after["bytes"]["above_prefix"] - before["bytes"]["above_prefix"]
    assert hit >= 900 + 2 * 300, (before, after)
    assert above > 0


def test_engines_accept_the_gateways_plans(procs):
    """The contract with pic-engine: it decodes the plan, renders the same
    prompt and uses the plan's segments (cache.plans_ignored stays 0)."""
    e1, e2 = engines(procs)
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{e1.port}", f"127.0.0.1:{e2.port}"]))
    c = client(ngx)
    shared = doc(8, 1200)
    for q in ("one", "two", "three"):
        c.chat.completions.create(model="tiny", max_tokens=1, messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": f"{shared}{MARK}question {q}"}])
    docs = [json.loads(harness.http("GET", e.url + "/status")[2]) for e in (e1, e2)]
    if not all("cache" in d for d in docs):
        pytest.skip("this pic-engine has no PIC cache yet")
    assert sum(d["cache"]["plans_received"] for d in docs) == 3
    assert sum(d["cache"]["plans_ignored"] for d in docs) == 0


def test_split_documents_off_on_both_sides_keeps_the_plan(procs):
    """pic_split_documents off makes the marker plain text at the gateway; an engine
    told the same (--split-documents off) renders the request as the gateway did and
    uses its plan, where a splitting engine renders it otherwise and ignores it."""
    from tests.support.gateway import MODEL
    shared = doc(9, 1200)
    body = {"model": "tiny", "max_tokens": 1, "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"{shared}{MARK}question one"}]}
    ignored = {}
    for split in ("off", "on"):
        e = procs.engine(name="e-" + split, model=MODEL,
                         extra=["--threads", "1", "--split-documents", split])
        ngx = procs.nginx(gw_conf([f"127.0.0.1:{e.port}"], loc="pic_split_documents off;"),
                          name="nginx-" + split)
        probed(ngx)
        st, _, raw = harness.http("POST", ngx.url + "/v1/chat/completions", body=body,
                                  timeout=60)
        assert st == 200, raw
        cache = json.loads(harness.http("GET", e.url + "/status")[2])["cache"]
        assert cache["plans_received"] == 1, cache
        ignored[split] = cache["plans_ignored"]
    assert ignored == {"off": 0, "on": 1}, ignored
    r = subprocess.run([harness.ENGINE_BIN, "serve", "--split-documents", "maybe"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--split-documents: on or off" in r.stderr, r.stderr


def test_repeated_document_hits_on_the_same_engine(procs):
    e1, e2 = engines(procs, mode="pic")
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{e1.port}", f"127.0.0.1:{e2.port}"]))
    probed(ngx)
    c = client(ngx)
    big = doc(7, 1500)
    for q in ("first question", "a second, different question"):
        c.chat.completions.create(model="tiny", max_tokens=1, messages=[
            {"role": "user", "content": f"header {q}\n\n{MARK}{big}{MARK}{q}"}])
    a, b = planned_lines(ngx, 2)
    assert int(a["hit"]) == 0
    assert int(b["hit"]) >= 1400, b
    assert b["combine"] == a["combine"], "the document's holder combines"


# --- the plan on the wire ---------------------------------------------------------


def test_plan_rewrites_body_and_keys_match_xxh128(procs, logdir):
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]))
    a, b = doc(11, 700), doc(12, 500)
    body = {"model": "m1", "prompt": f"{a}{MARK}{b}{MARK}tail question", "max_tokens": 1,
            "user": "u-42"}
    code, _, resp = harness.http("POST", ngx.url + "/v1/completions", body=body)
    assert code == 200, resp
    sent = fake.bodies[-1]
    assert int(fake.headers[-1]["Content-Length"]) == len(sent)
    got = json.loads(sent)
    plan = got.pop("pic")
    assert got == body, "the client's fields pass unchanged"
    assert plan["version"] == 1 and plan["combine"] == f"127.0.0.1:{fake.port}"
    segs = plan["segments"]
    assert [s["offset"] for s in segs] == [sum(x["bytes"] for x in segs[:i])
                                          for i in range(len(segs))]
    assert sum(s["bytes"] for s in segs) == len(a) + len(b) + len("tail question")
    text = (a + b + "tail question").encode()
    for s in segs:
        piece = text[s["offset"]:s["offset"] + s["bytes"]]
        assert s["key"] == xxh128_key(b"m1", b"", piece, logdir)
    assert segs[0]["kind"] == "prefix" and segs[-1]["kind"] == "dynamic"


def test_keys_use_the_fingerprint_and_template_engines_report(procs, logdir):
    fake = procs._add(harness.FakeBackend("capture", model={
        "fingerprint": "0123456789abcdef", "template": "qwen3"}))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]))
    harness.wait_for(lambda: json.loads(harness.http("GET", ngx.url + "/pic/status")[2])
                     ["engines"][0]["id"] == "fake-capture", timeout=5, what="probe")
    a = doc(13, 300)
    body = {"model": "any-name", "prompt": f"{a}{MARK}tail", "max_tokens": 1}
    assert harness.http("POST", ngx.url + "/v1/completions", body=body)[0] == 200
    segs = json.loads(fake.bodies[-1])["pic"]["segments"]
    piece = a.encode()[:segs[0]["bytes"]]
    assert segs[0]["key"] == xxh128_key(b"0123456789abcdef", b"", piece, logdir)


def test_client_cannot_send_its_own_plan(procs):
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]))
    code, hdrs, resp = harness.http("POST", ngx.url + "/v1/chat/completions", body={
        "model": "m", "messages": [{"role": "user", "content": "x"}],
        "pic": {"combine": "evil"}})
    assert code == 400 and hdrs["Content-Type"] == "application/json"
    assert json.loads(resp)["error"]["param"] == "pic"
    assert fake.bodies == []


def test_scope_separates_tenants(procs):
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"], loc="pic_scope $http_authorization;"))
    body = {"model": "m", "messages": [{"role": "system", "content": doc(21)},
                                       {"role": "user", "content": "q"}]}
    keys = {}
    for tenant in ("Bearer alice", "Bearer bob", "Bearer alice"):
        harness.http("POST", ngx.url + "/v1/chat/completions", body=body,
                     headers={"Authorization": tenant, "Content-Type": "application/json"})
        plan = json.loads(fake.bodies[-1])["pic"]
        keys.setdefault(tenant, []).append((plan["scope"], [s["key"] for s in plan["segments"]]))
    (sa, ka), (sa2, ka2) = keys["Bearer alice"]
    (sb, kb), = keys["Bearer bob"]
    assert sa == sa2 and ka == ka2 and sa != sb
    assert not set(ka) & set(kb), "no key is shared across scopes"
    assert "alice" not in sa and re.fullmatch(r"[0-9a-f]{32}", sa)
    lines = planned_lines(ngx, 3)
    assert int(lines[1]["hit"]) == 0 and int(lines[2]["hit"]) > 0


# --- pass-through, variables ------------------------------------------------------


def test_locations_without_pic_are_untouched(procs):
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"], balancer=False))
    raw = b'{"model": "m",  "messages": [{"role":"user","content":"x"}], "pic": 1}'
    code, _, _ = harness.http("POST", ngx.url + "/plain/chat/completions", body=raw)
    assert code == 200 and fake.bodies[-1] == raw
    # a pic location passes what is not a completions request
    code, _, body = harness.http("GET", ngx.url + "/v1/models")
    assert code == 200 and json.loads(body)["data"]
    st = status(ngx)
    assert st["requests"]["passed"] == 1 and st["requests"]["planned"] == 0


def test_proxy_pass_to_combine_node_variable(procs):
    e1, e2 = engines(procs)
    ngx = procs.nginx(harness.gateway_conf([f"127.0.0.1:{e1.port}", f"127.0.0.1:{e2.port}"],
                                           proxy_pass="http://$pic_combine_node"))
    c = client(ngx)
    for i in range(4):
        c.chat.completions.create(model="tiny", max_tokens=1, messages=[
            {"role": "system", "content": doc(30 + i, 400)}, {"role": "user", "content": "q"}])
    harness.wait_for(lambda: sum(1 for _ in open(os.path.join(ngx.prefix, "logs",
                                                              "pic.log"))) >= 5,
                     timeout=5, what="log lines")
    with open(os.path.join(ngx.prefix, "logs", "pic.log")) as f:
        rows = [line for line in f if not line.startswith("204")]
    assert len(rows) == 4
    pairs = [re.match(r"200 combine=(\S+) .* up=(\S+) ", r) for r in rows]
    assert all(m and m[1] == m[2] for m in pairs), rows
    st = status(ngx)
    assert {e["name"] for e in st["engines"]} == {f"127.0.0.1:{e1.port}", f"127.0.0.1:{e2.port}"}
    assert all(e["id"] in ("e1", "e2") for e in st["engines"]), "ids learned from probes"
