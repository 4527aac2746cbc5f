"""The agentic patterns of DESIGN §5 (agent_meta, sysvar, compact, rerank,
tool_variants) replayed through nginx to real engines: the gateway must
recognise shifted content (seen before, outside the exact prefix) as hits.
The oracle is the generator's own record of which pieces repeat where."""
import importlib.util
import json
import os

import pytest

from tests import harness
from tests.support.gateway import client, doc, engines, gw_conf, planned_lines, probed

_spec = importlib.util.spec_from_file_location(
    "gateway_workloads", os.path.join(harness.ROOT, "bench", "gateway_workloads.py"))
wl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wl)

SIZES = {"agent_meta": 400, "sysvar": 400, "compact": 500, "rerank": 500,
         "tool_variants": 300}


def replay(ngx, reqs):
    """Send every body; return per request (hit bytes, exact-prefix bytes)."""
    c = client(ngx)
    for body, _ in reqs:
        r = c.chat.completions.create(**body)
        assert r.choices
    return [(int(x["hit"]), int(x["prefix"])) for x in planned_lines(ngx, len(reqs))]


@pytest.mark.parametrize("name", wl.PATTERNS)
def test_shifted_content_is_served_from_cache(procs, name):
    # PIC-only engines pool what they see first (an exact-first one from the
    # second sighting on): the gateway recognises what an engine pooled
    e1, e2 = engines(procs, mode="pic")
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{e1.port}", f"127.0.0.1:{e2.port}"]))
    probed(ngx)
    reqs = wl.pattern(name, marked=True, n=4, size=SIZES[name])
    got = replay(ngx, reqs)
    truth = wl.oracle(reqs)
    shifted = sum(t[2] for t in truth)
    served = sum(max(0, h - p) for h, p in got)
    assert shifted > 0, "the pattern shifts reusable content"
    ratio = served / shifted
    print(f"{name}: served {served} of {shifted} shifted bytes, ratio {ratio:.3f}")
    # the oracle knows client content only; repeated template text (the tool
    # instructions, tool-call turns) is served too, so this is a lower bound
    assert ratio >= 0.9, (name, got, truth)
    st = json.loads(harness.http("GET", ngx.url + "/pic/status")[2])
    assert st["bytes"]["above_prefix"] == served <= st["bytes"]["prompt"]
    assert st["requests"]["errors"] == 0 and st["requests"]["planned"] == len(reqs)


def test_s1_windows_find_edited_chunks_in_unmarked_text(procs):
    """Unmarked traffic: one long region; a small edit inside every chunk makes
    every chunk miss, but S1 windows away from the edits still hit."""
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"], cdc="256 1024 4096",
                              min_segment=128))
    base = doc(500, 6000)
    edited = "".join(ch.upper() if i % 700 == 350 else ch for i, ch in enumerate(base))
    for k, text in enumerate((base, edited)):
        body = {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": text},
                                           {"role": "user", "content": f"q{k}"}]}
        assert harness.http("POST", ngx.url + "/v1/chat/completions", body=body)[0] == 200
    st = json.loads(harness.http("GET", ngx.url + "/pic/status")[2])
    assert st["segments"]["s1_hits"] > 0
    assert st["bytes"]["s1"] >= 1000
    plan = json.loads(fake.bodies[-1])["pic"]
    assert not any(s["holders"] for s in plan["segments"] if s["kind"] == "pic"), \
        "every edited chunk missed"


def test_s1_off_finds_nothing(procs):
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"], cdc="256 1024 4096",
                              loc="pic_s1_fallback off;"))
    base = doc(500, 6000)
    edited = "".join(ch.upper() if i % 700 == 350 else ch for i, ch in enumerate(base))
    for text in (base, edited):
        harness.http("POST", ngx.url + "/v1/chat/completions", body={
            "model": "m", "messages": [{"role": "user", "content": text},
                                       {"role": "user", "content": "q"}]})
    st = json.loads(harness.http("GET", ngx.url + "/pic/status")[2])
    assert st["segments"]["s1_hits"] == 0


def test_observe_mode_counts_prefix_pic_and_novel(procs):
    fake = procs._add(harness.FakeBackend("capture"))
    conf = f"""
    pic_zone pic 4m;
    log_format pic '$status plan=- hit=$pic_hit_bytes prefix=$pic_prefix_bytes';
    server {{
        listen 127.0.0.1:$PORT;
        location = /__pic_ready {{ return 204; }}
        location /pic/status {{ pic_status; }}
        location /v1/ {{
            pic observe;
            pic_cdc 64 256 1024;
            pic_min_segment 128;
            proxy_pass http://127.0.0.1:{fake.port};
        }}
    }}
"""
    ngx = procs.nginx(conf)
    reqs = wl.pattern("agent_meta", marked=True, n=4, size=400)
    for body, _ in reqs:
        raw = json.dumps(body).encode()
        assert harness.http("POST", ngx.url + "/v1/chat/completions", body=raw)[0] == 200
        assert fake.bodies[-1] == raw, "observe mode forwards the body unchanged"
    st = json.loads(harness.http("GET", ngx.url + "/pic/status")[2])
    truth = wl.oracle(reqs)
    assert st["requests"]["observed"] == 4 and st["requests"]["planned"] == 0
    assert st["bytes"]["above_prefix"] >= 0.9 * sum(t[2] for t in truth)
    assert st["bytes"]["exact_prefix"] > 0, "agent 0 comes back: an exact prefix"
    assert st["bytes"]["novel"] > 0
    assert (st["bytes"]["exact_prefix"] + st["bytes"]["above_prefix"] + st["bytes"]["novel"]
            == st["bytes"]["prompt"])
