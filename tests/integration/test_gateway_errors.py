"""Bad input at the gateway: every case gets an OpenAI-shaped JSON error with the
right status, an error_log line naming the module and the request, and nothing
is forwarded or cached.  The peer is a capture backend because the point is to
see that nothing reaches it."""
import http.client
import json

import pytest

from tests import harness
from tests.support.gateway import MARK, doc, gw_conf


def setup(procs, loc="", name="nginx", **kw):
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"], loc=loc, **kw), name=name)
    return fake, ngx


def post(ngx, body, path="/v1/chat/completions", headers=None):
    return harness.http("POST", ngx.url + path, body=body,
                        headers=headers or {"Content-Type": "application/json"})


def openai_error(code, hdrs, body, status):
    assert code == status, body
    assert hdrs["Content-Type"] == "application/json"
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    return err


def status(ngx):
    return json.loads(harness.http("GET", ngx.url + "/pic/status")[2])


def nothing_cached(ngx, fake):
    st = status(ngx)
    assert fake.bodies == [], "nothing reached the engine"
    assert st["zone"]["index_entries"] == 0, "nothing was cached"
    assert st["segments"]["total"] == 0
    return st


def module_lines(ngx):
    with open(ngx.error_log) as f:
        return [line for line in f if "pic: " in line]


def test_malformed_json_is_400(procs):
    fake, ngx = setup(procs)
    err = openai_error(*post(ngx, b'{"model": "m", "messages": ['), 400)
    assert err["type"] == "invalid_request_error"
    # errors are counted in the log phase, just after the response went out
    harness.wait_for(lambda: status(ngx)["requests"]["errors"] == 1, timeout=5,
                     what="error counted")
    st = nothing_cached(ngx, fake)
    assert st["requests"]["rejected"] == 1 and st["requests"]["errors"] == 1
    lines = module_lines(ngx)
    assert len(lines) == 1 and "[info]" in lines[0]
    assert 'request: "POST /v1/chat/completions' in lines[0]


@pytest.mark.parametrize("body,param", [
    ({"model": "m", "messages": "hello"}, "messages"),
    ({"model": 7, "messages": [{"role": "user", "content": "x"}]}, "model"),
    ({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": "9"},
     "max_tokens"),
])
def test_wrong_types_name_the_field(procs, body, param):
    fake, ngx = setup(procs)
    err = openai_error(*post(ngx, body), 400)
    assert err["param"] == param
    nothing_cached(ngx, fake)


def test_deep_nesting_is_400(procs):
    fake, ngx = setup(procs)
    deep = "[" * 5000 + "]" * 5000
    body = '{"model": "m", "messages": [{"role": "user", "content": "x"}], "x": %s}' % deep
    openai_error(*post(ngx, body.encode()), 400)
    nothing_cached(ngx, fake)


def test_invalid_utf8_is_400(procs):
    fake, ngx = setup(procs)
    body = b'{"model": "m", "messages": [{"role": "user", "content": "caf\xc3\x28"}]}'
    openai_error(*post(ngx, body), 400)
    nothing_cached(ngx, fake)


def test_empty_body_is_400(procs):
    fake, ngx = setup(procs)
    openai_error(*post(ngx, b""), 400)
    nothing_cached(ngx, fake)


@pytest.mark.allow_log(r"client intended to send too large")
def test_huge_body_is_413_before_reading_it(procs):
    fake, ngx = setup(procs, loc="pic_body_max 64k;")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 100000}]})
    err = openai_error(*post(ngx, body.encode()), 413)
    assert err["code"] == "request_too_large"
    nothing_cached(ngx, fake)
    # just under the limit passes
    small = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 60000}]})
    assert post(ngx, small.encode())[0] == 200


@pytest.mark.allow_log(r"client intended to send too large")
def test_huge_chunked_body_is_413(procs):
    fake, ngx = setup(procs, loc="pic_body_max 64k;")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "y" * 100000}]})
    conn = http.client.HTTPConnection("127.0.0.1", ngx.port, timeout=10)
    conn.request("POST", "/v1/chat/completions",
                 body=(body[i:i + 8192].encode() for i in range(0, len(body), 8192)),
                 headers={"Content-Type": "application/json"}, encode_chunked=True)
    r = conn.getresponse()
    err = openai_error(r.status, dict(r.getheaders()), r.read(), 413)
    assert err["code"] == "request_too_large"
    nothing_cached(ngx, fake)


def test_unknown_model_is_404(procs):
    fake, ngx = setup(procs, loc="pic_model qwen3.5-agent; pic_model other fingerprint=abc;")
    err = openai_error(*post(ngx, {"model": "gpt-9", "messages": [
        {"role": "user", "content": "x"}]}), 404)
    assert err["code"] == "model_not_found" and err["param"] == "model"
    nothing_cached(ngx, fake)
    assert post(ngx, {"model": "qwen3.5-agent", "messages": [
        {"role": "user", "content": "x"}]})[0] == 200


def test_get_on_completions_is_405(procs):
    fake, ngx = setup(procs)
    code, hdrs, body = harness.http("GET", ngx.url + "/v1/chat/completions")
    openai_error(code, hdrs, body, 405)
    nothing_cached(ngx, fake)


def test_marker_in_client_text_cannot_forge_a_boundary(procs):
    """With document splitting off the marker is plain client text: it is
    counted as escaped and no segment boundary falls on it."""
    fake, ngx = setup(procs, loc="pic_split_documents off;")
    a, b = doc(41, 400), doc(42, 400)
    content = a + MARK + b
    assert post(ngx, {"model": "m", "messages": [
        {"role": "system", "content": content}, {"role": "user", "content": "q"}]})[0] == 200
    plan = json.loads(fake.bodies[-1])["pic"]
    st = status(ngx)
    assert st["cdc"]["escapes"] == 1
    # the rendered prompt is <|im_start|>system\n + content + ...; find the
    # marker and check no segment starts right after it
    start = len("<|im_start|>system\n")
    edge = start + len(a) + len(MARK)
    assert edge not in [s["offset"] for s in plan["segments"]]
    # and the same bytes keyed with splitting on are different segments
    fake2, ngx2 = setup(procs, name="nginx2")
    post(ngx2, {"model": "m", "messages": [
        {"role": "system", "content": content}, {"role": "user", "content": "q"}]})
    plan2 = json.loads(fake2.bodies[-1])["pic"]
    assert {s["key"] for s in plan["segments"]} != {s["key"] for s in plan2["segments"]}


@pytest.mark.allow_log(r"connect\(\) failed|no live upstreams|no healthy engine")
def test_no_healthy_engine_is_503(procs):
    dead = harness.free_port()
    conf = f"""
    pic_zone pic 1m;
    pic_health_check interval=100ms timeout=100ms;
    server {{
        listen 127.0.0.1:$PORT;
        location = /__pic_ready {{ return 204; }}
        location /pic/status {{ pic_status; }}
        location /v1/ {{
            pic on;
            pic_engine 127.0.0.1:{dead};
            proxy_pass http://$pic_combine_node;
        }}
    }}
"""
    ngx = procs.nginx(conf)
    harness.wait_for(lambda: not status(ngx)["engines"][0]["healthy"], timeout=5,
                     what="the probe marks the engine down")
    err = openai_error(*post(ngx, {"model": "m", "messages": [
        {"role": "user", "content": "x"}]}), 503)
    assert err["code"] == "no_healthy_engine" and err["type"] == "server_error"
    assert any("no healthy engine" in line and "[error]" in line for line in module_lines(ngx))


@pytest.mark.allow_log(r"connect\(\) failed")
def test_engine_refusing_is_502_json(procs):
    dead = harness.free_port()
    conf = f"""
    pic_zone pic 1m;
    pic_health_check off;
    server {{
        listen 127.0.0.1:$PORT;
        location = /__pic_ready {{ return 204; }}
        location /v1/ {{
            pic on;
            pic_engine 127.0.0.1:{dead};
            proxy_pass http://$pic_combine_node;
        }}
    }}
"""
    ngx = procs.nginx(conf)
    err = openai_error(*post(ngx, {"model": "m", "messages": [
        {"role": "user", "content": "x"}]}), 502)
    assert err["code"] == "engine_unavailable"
