"""A Mamba2 hybrid (the scalar transition family, DESIGN 3.8) served through
nginx with the module: real pic-engine processes on the committed Granite
4.0-H and Bamba fixtures, the OpenAI SDK as the client.  A document repeated
behind another question hits the engine's PIC pool (entries of one decay per
head and Mamba2 layer), the exact prefix is served from the prefix tree's
checkpoints, and /status reports the family's entry sizes and break-even
length (docs/SIZING.md)."""
import json
import os

import pytest

from tests import harness
from tests.support.gateway import MARK, client, doc, gw_conf, planned_lines, probed

FIXTURES = os.path.join(harness.ROOT, "tests", "fixtures", "models")
GRANITE = os.path.join(FIXTURES, "tiny-granite-h")
BAMBA = os.path.join(FIXTURES, "tiny-bamba")


def engine_status(e):
    return json.loads(harness.http("GET", e.url + "/status")[2])


@pytest.mark.skipif(not os.path.isdir(GRANITE), reason="fixture models missing")
def test_mamba2_hybrid_served_with_pic_entries(procs):
    e1 = procs.engine(name="g1", model=GRANITE, extra=["--threads", "1", "--cache-mode", "pic"])
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{e1.port}"]))
    probed(ngx)
    c = client(ngx)
    big = doc(11, 1500)
    for q in ("first question", "a second, different question"):
        r = c.chat.completions.create(model="tiny", max_tokens=4, messages=[
            {"role": "user", "content": f"header {q}\n\n{MARK}{big}{MARK}{q}"}])
        assert r.choices[0].finish_reason in ("length", "stop")
    a, b = planned_lines(ngx, 2)
    assert int(a["hit"]) == 0
    assert int(b["hit"]) >= 1300, b
    st = engine_status(e1)["cache"]
    assert st["capacity"]["transition_family"] == "scalar"
    assert st["plans_ignored"] == 0
    assert st["segment_hits"] >= 1 and st["pic_tokens"] > 0, st


@pytest.mark.skipif(not os.path.isdir(GRANITE), reason="fixture models missing")
def test_mamba2_exact_prefix_resumes_from_checkpoints(procs):
    """Exact-first engine: the same long conversation twice is served from the
    prefix tree (Mamba2 S and conv windows checkpointed at block edges), and
    the greedy answer is the same both times."""
    e1 = procs.engine(name="g2", model=GRANITE, extra=["--threads", "1"])
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{e1.port}"]))
    probed(ngx)
    c = client(ngx)
    msgs = [{"role": "system", "content": doc(3, 1200)},
            {"role": "user", "content": "what now?"}]
    outs = [c.chat.completions.create(model="tiny", max_tokens=6, temperature=0,
                                      messages=msgs).choices[0].message.content
            for _ in range(2)]
    assert outs[0] == outs[1]
    pc = engine_status(e1)["prefix"]
    assert pc["hits"] >= 1 and pc["checkpoints"] >= 1, pc


@pytest.mark.skipif(not os.path.isdir(BAMBA), reason="fixture models missing")
def test_engine_status_reports_scalar_family_capacity(procs):
    """/status cache.capacity for a Mamba2 hybrid, from config.json: fixed =
    Mamba2 layers x (Hm decays + S|0 (Hm, P, N) in the entry dtype + the fp32
    conv tail over I + 2 G N channels), kv = attention layers x 2 Hkv hd."""
    with open(os.path.join(BAMBA, "config.json")) as f:
        t = json.load(f)
    att = len(t["attn_layer_indices"])
    lin = t["num_hidden_layers"] - att
    Hm, P, N = t["mamba_n_heads"], t["mamba_d_head"], t["mamba_d_state"]
    C = t["mamba_expand"] * t["hidden_size"] + 2 * t["mamba_n_groups"] * N
    hd = t["hidden_size"] // t["num_attention_heads"]
    for dtype, es in (("bf16", 2), ("f32", 4)):
        e = procs.engine(name=f"bcap-{dtype}", model=BAMBA,
                         extra=["--threads", "1", "--entry-dtype", dtype])
        cap = engine_status(e)["cache"]["capacity"]
        fixed = lin * ((Hm + Hm * P * N) * es + C * (t["mamba_d_conv"] - 1) * 4)
        kv = att * 2 * t["num_key_value_heads"] * hd * es
        assert cap["transition_family"] == "scalar"
        assert cap["entry_fixed_bytes"] == fixed and cap["kv_bytes_per_token"] == kv
        assert abs(cap["break_even_tokens"] - fixed / kv) < 1e-9
