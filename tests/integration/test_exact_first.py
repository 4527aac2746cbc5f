"""Exact first (DESIGN §3.4) on real processes: an append-only agent loop
through nginx with two engines and three interleaved sessions is served
from each engine's prefix tree (every turn after the first resumes where
the previous turn's prompt ended) and answers exactly as an engine that
recomputes everything (--cache-mode full, the oracle); usage splits
cached_tokens into exact and PIC tokens, /status counts them; the token
count of a request is the same in every cache mode (the ids of the whole
rendered prompt).  Random weights: the text is noise; equality of greedy
continuations with the oracle and the accounting are what is checked (the
logits themselves are compared within 1e-4 by tests/unit/test_exact_first)."""
import json
import os

import openai
import pytest

from tests import harness
from tests.support.gateway import doc, gw_conf

TINY = os.path.join(harness.ROOT, "tests", "fixtures", "models", "tiny-qwen35")
pytestmark = pytest.mark.skipif(not os.path.isdir(TINY), reason="fixture models missing")

TOOLS = [
    {"type": "function", "function": {"name": "search", "description": doc(31, 1500),
     "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "read", "description": doc(32, 1500),
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
]
SYSTEM = "You are a coding agent. " + doc(33, 2500)


def engine(procs, name, mode=None):
    extra = ["--threads", "1"] + (["--cache-mode", mode] if mode else [])
    return procs.engine(name=name, model=TINY, extra=extra)


def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)


def status(url):
    return json.loads(harness.http("GET", url + "/status")[2])


def turn_messages(session, turns):
    msgs = [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"task {session}: " + doc(100 + session, 300)}]
    for t in range(turns):
        cid = f"call_{session}_{t}"
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": "search", "arguments": json.dumps({"q": f"step {t}"})}}]})
        msgs.append({"role": "tool", "tool_call_id": cid,
                     "content": doc(1000 + 17 * session + t, 400 + 150 * t)})
    return msgs


def ask(c, msgs):
    return c.chat.completions.create(model="m", messages=msgs, tools=TOOLS, max_tokens=5,
                                     temperature=0)


def test_agent_loop_through_gateway_is_exact_and_reuses_the_prefix(procs):
    e1, e2 = engine(procs, "e1"), engine(procs, "e2")
    oracle = client(engine(procs, "full", "full").url)
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{e1.port}", f"127.0.0.1:{e2.port}"]))
    c = client(ngx.url)
    served = exact = 0
    for t in range(4):
        for s in range(3):                  # sessions interleaved
            msgs = turn_messages(s, t)
            r, want = ask(c, msgs), ask(oracle, msgs)
            u = r.usage.model_dump()
            print(f"session {s} turn {t}: {u['prompt_tokens']} tokens, {u['pic']}")
            assert r.choices[0].message.content == want.choices[0].message.content
            assert r.usage.prompt_tokens == want.usage.prompt_tokens
            assert u["pic"]["pic_tokens"] == 0, "nothing composed: all exact or computed"
            assert u["prompt_tokens_details"]["cached_tokens"] == u["pic"]["exact_tokens"]
            if t > 0:
                served += u["prompt_tokens"]
                exact += u["pic"]["exact_tokens"]
    share = exact / served
    print(f"exact share after the first turn: {share:.3f}")
    assert share >= 0.85
    st1, st2 = status(e1.url), status(e2.url)
    total = st1["cache"]["exact_tokens"] + st2["cache"]["exact_tokens"]
    assert total >= exact
    for st in (st1, st2):
        c_ = st["cache"]
        assert c_["mode"] == "exact"
        assert c_["cached_tokens"] == c_["exact_tokens"] + c_["pic_tokens"]
        assert st["prefix"]["bytes"] <= st["prefix"]["budget"]


def test_prompt_tokens_agree_in_every_mode(procs):
    """The served ids are the whole render's: the same count in every mode,
    also when the system prompt ends in the middle of a pre-token run."""
    msgs = [{"role": "system", "content": "Rules:\n\n  " + doc(7, 700) + "   "},
            {"role": "user", "content": "a" + doc(8, 600) + "<|pic_sep|>" + doc(9, 600)},
            {"role": "user", "content": "  and then?"}]
    counts = {}
    for mode in ("full", "prefix", "pic", "exact"):
        c = client(engine(procs, mode, mode).url)
        counts[mode] = [c.chat.completions.create(model="m", messages=msgs, max_tokens=1)
                        .usage.prompt_tokens for _ in range(2)]
    assert len({n for v in counts.values() for n in v}) == 1, counts


def test_session_continuation_and_status(procs):
    """A finished request leaves its state (prompt + generated ids) in the tree
    and a checkpoint before its generation prompt: the next turn, which
    re-renders that turn (Qwen3.5 drops the "<think>" the generation prompt
    opened), resumes where the ids part."""
    e = engine(procs, "e")
    oracle = client(engine(procs, "full", "full").url)
    c = client(e.url)
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "go"}]
    r = c.chat.completions.create(model="m", messages=msgs, max_tokens=8, temperature=0)
    answer = r.choices[0].message.content
    msgs2 = msgs + [{"role": "assistant", "content": answer},
                    {"role": "user", "content": "and then?"}]
    r2 = c.chat.completions.create(model="m", messages=msgs2, max_tokens=5, temperature=0)
    want = oracle.chat.completions.create(model="m", messages=msgs2, max_tokens=5,
                                          temperature=0)
    assert r2.choices[0].message.content == want.choices[0].message.content
    st = status(e.url)
    assert st["cache"]["sessions_kept"] == 2
    assert r2.usage.model_dump()["pic"]["exact_tokens"] >= r.usage.prompt_tokens - 8
    assert st["prefix"]["hits"] >= 1


def test_checkpoint_stock_fills_while_idle(procs):
    """The keeper maps the checkpoint stock while no request runs (/status
    prefix.spare_checkpoints up to spare_checkpoints_max); a request's checkpoints
    come out of it, and it is full again once the engine is idle."""
    e = engine(procs, "stock")

    def full():
        p = status(e.url)["prefix"]
        return p["spare_checkpoints"] == p["spare_checkpoints_max"]

    harness.wait_for(full, what="the stock filled while idle")
    assert status(e.url)["prefix"]["spare_checkpoints_max"] == 6
    ask(client(e.url), turn_messages(0, 2))
    assert status(e.url)["prefix"]["checkpoints"] >= 1
    harness.wait_for(full, what="the stock filled again after the request")


def test_trace_prints_each_requests_timeline(procs):
    """PIC_TRACE=1: per request, a `pic-trace: request ID` line with its
    wall-clock marks in the order the request passes them (the loop's read,
    parse and render, the hand-off, the worker's steps, the first token, the
    loop's wake-up and reply), each the milliseconds since the one before,
    which add up to the line's total; and the job's phase line."""
    e = procs.engine(name="e", model=TINY, extra=["--threads", "1"],
                     env={"PIC_TRACE": "1"})
    c = client(e.url)
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "go"}]
    ids = [c.chat.completions.create(model="m", messages=msgs, max_tokens=2,
                                     temperature=0).id for _ in range(2)]
    lines = {}
    with open(e.log_path, encoding="utf-8") as f:
        for ln in f:
            if ln.startswith("pic-trace: request "):
                lines[ln.split()[2]] = ln.split()[3:]
    order = ["recv", "parse", "render", "submit", "pickup", "tokenize", "prompt", "token",
             "done", "woken", "replied"]
    for rid in ids:
        fields = lines[rid]
        total = float(fields[0].removeprefix("total=").removesuffix("ms"))
        marks = [(k, float(v)) for k, v in (f.split("=") for f in fields[1:])]
        names = [k for k, _ in marks]
        assert [k for k in names if k != "step"] == order, names
        assert all(v >= 0 for _, v in marks) and marks[0][1] == 0
        assert abs(sum(v for _, v in marks) - total) < 0.01 * len(marks) + 0.01
    with open(e.log_path, encoding="utf-8") as f:
        assert sum(ln.startswith("pic-trace: job ") for ln in f) == 2


def test_keeper_places_checkpoints_off_the_request_path(procs):
    """Shifted documents after a shared system prompt: the first sighting is
    recomputed exactly, the second composes the entry built for it.  The
    engine's keeper thread re-solves the tree's checkpoint placement between
    requests (never inside one) and no edge of the tree (path between branch
    points) holds more than --checkpoints block checkpoints."""
    e = engine(procs, "e")
    c = client(e.url)
    docs = [doc(600 + i, 900) for i in range(2)]

    def ask_docs(order, q):
        content = "<|pic_sep|>".join([docs[i] for i in order] + [f"question {q}?"])
        return c.chat.completions.create(
            model="m", messages=[{"role": "system", "content": SYSTEM},
                                 {"role": "user", "content": content}],
            max_tokens=1, temperature=0).usage.model_dump()

    u0 = ask_docs([0, 1], 0)
    u1 = ask_docs([1, 0], 1)
    print("first sighting:", u0["pic"], "second:", u1["pic"])
    assert u0["pic"]["pic_tokens"] == 0
    assert u1["pic"]["pic_tokens"] > 0 and u1["pic"]["exact_tokens"] > 0
    harness.wait_for(lambda: status(e.url)["prefix"]["resolves"] > 0, timeout=60,
                     what="a re-solve", proc=e)
    p = status(e.url)["prefix"]
    assert p["resolves_in_request"] == 0
    assert p["max_checkpoints_on_an_edge"] <= p["checkpoints_per_edge"]


def test_a_recomputed_class_is_never_served_from_entries(procs):
    """--seam-doc off (what a calibration that met its bound at no width
    serves): client-delimited documents are recomputed on every sighting —
    nothing queued or composed for them, the answer full recompute's — while
    the exact prefix is still reused; /status and /v1/models say "off"."""
    e = procs.engine(name="off", model=TINY, extra=["--threads", "1", "--seam-doc", "off"])
    oracle = client(engine(procs, "full", "full").url)
    c = client(e.url)
    docs = [doc(750 + i, 900) for i in range(2)]

    def ask_msgs(cl, order, q):
        content = "<|pic_sep|>".join([docs[i] for i in order] + [f"question {q}?"])
        return cl.chat.completions.create(
            model="m", messages=[{"role": "system", "content": SYSTEM},
                                 {"role": "user", "content": content}],
            max_tokens=5, temperature=0)

    st = status(e.url)["cache"]
    assert (st["seam_doc"], st["seam_doc_source"]) == ("off", "--seam-doc")
    assert st["seam"] == 8
    m = json.loads(harness.http("GET", e.url + "/v1/models")[2])["data"][0]["pic"]
    assert m["seam_doc"] == "off"
    for order, q in (([0, 1], 0), ([1, 0], 1), ([1, 0], 2)):
        r, want = ask_msgs(c, order, q), ask_msgs(oracle, order, q)
        assert r.choices[0].message.content == want.choices[0].message.content
        u = r.usage.model_dump()
        assert u["pic"]["pic_tokens"] == 0, u
    assert u["pic"]["exact_tokens"] > 0, u      # the system prompt, exactly
    assert status(e.url)["prefix"]["deferred_builds"]["queued"] == 0


def test_client_documents_are_built_after_the_request(procs):
    """Documents the client delimited with <|pic_sep|> (declared reusable):
    the first sighting is recomputed exactly (the oracle's answer, nothing
    composed), and the keeper builds their entries after the request; the
    second sighting, reordered, composes them as cached tokens (nothing
    built on its path: cached = exact + PIC).  The newest message is never
    queued; a message of one document ahead of it is (content ahead of the
    newest message, built while the engine is idle)."""
    e = engine(procs, "e")
    oracle = client(engine(procs, "full", "full").url)
    c = client(e.url)
    docs = [doc(700 + i, 900) for i in range(3)]

    def msgs_docs(order, q):
        content = "<|pic_sep|>".join([docs[i] for i in order] + [f"question {q}?"])
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}]

    def ask_msgs(cl, msgs):
        return cl.chat.completions.create(model="m", messages=msgs, max_tokens=5,
                                          temperature=0)

    r0, want = ask_msgs(c, msgs_docs([0, 1], 0)), ask_msgs(oracle, msgs_docs([0, 1], 0))
    u0 = r0.usage.model_dump()
    assert r0.choices[0].message.content == want.choices[0].message.content
    assert u0["pic"]["pic_tokens"] == 0
    queued = status(e.url)["prefix"]["deferred_builds"]["queued"]
    assert queued >= 2

    def built():
        d = status(e.url)["prefix"]["deferred_builds"]
        return d["pending"] == 0 and d["built"] == queued

    harness.wait_for(built, timeout=60, what="the deferred builds", proc=e)
    u1 = ask_msgs(c, msgs_docs([1, 0], 1)).usage.model_dump()
    print("first sighting:", u0["pic"], "second:", u1["pic"], u1["prompt_tokens_details"])
    assert u1["pic"]["pic_tokens"] > 0 and u1["pic"]["exact_tokens"] > 0
    assert (u1["prompt_tokens_details"]["cached_tokens"]
            == u1["pic"]["exact_tokens"] + u1["pic"]["pic_tokens"])
    # the newest message is never queued (an agent loop's fresh tool result:
    # the next turn serves it exactly)
    ask_msgs(c, [{"role": "system", "content": SYSTEM},
                 {"role": "user", "content": docs[2] + " question 2?"}])
    d = status(e.url)["prefix"]["deferred_builds"]
    assert d["queued"] == queued and d["dropped"] == 0
    # a message of one document ahead of the newest one is content that
    # recurs: queued too, and built while the engine is idle
    ask_msgs(c, [{"role": "system", "content": SYSTEM},
                 {"role": "user", "content": doc(703, 900)},
                 {"role": "user", "content": "question 3?"}])
    harness.wait_for(lambda: status(e.url)["prefix"]["deferred_builds"]["built"] == queued + 1,
                     timeout=60, what="the build ahead of the newest message", proc=e)



def test_documents_take_the_document_seam(procs):
    """--seam-doc: a client-delimited document's entry has the documents'
    seam width, so the same reordered second sighting composes 2 x (16 + 16 -
    3) more document tokens at --seam-doc 0 than at --seam 16 (head seam
    max(w, conv kernel - 1) = 3, no tail seam), and the two engines key their
    entries apart."""
    docs = [doc(710 + i, 900) for i in range(2)]
    got = {}
    for name, extra in (("w16", []), ("d0", ["--seam-doc", "0"])):
        e = procs.engine(name=name, model=TINY, extra=["--threads", "1", "--seam", "16"] + extra)
        c = client(e.url)

        def ask(order, q):
            content = "<|pic_sep|>".join([docs[i] for i in order] + [f"question {q}?"])
            return c.chat.completions.create(
                model="m", max_tokens=3, temperature=0,
                messages=[{"role": "system", "content": SYSTEM},
                          {"role": "user", "content": content}]).usage.model_dump()
        ask([0, 1], 0)
        harness.wait_for(lambda: status(e.url)["prefix"]["deferred_builds"]["built"] >= 2
                         and status(e.url)["prefix"]["deferred_builds"]["pending"] == 0,
                         timeout=60, what="the deferred builds", proc=e)
        got[name] = (ask([1, 0], 1)["pic"]["pic_tokens"], status(e.url)["model"]["fingerprint"],
                     status(e.url)["cache"]["seam_doc"])
    print(got)
    assert got["w16"][2] == 16 and got["d0"][2] == 0
    assert got["w16"][0] > 0 and got["d0"][0] - got["w16"][0] == 2 * (16 + 16 - 3)
    assert got["w16"][1] != got["d0"][1]


@pytest.mark.parametrize("policy", ["lru", "cost"])
def test_one_budget_evicts_across_tree_and_pool(procs, policy):
    """--cache-bytes is one budget for the prefix tree, its session ends and
    the PIC entries: under a tight one, eviction goes across them (by
    recency, or by GreedyDual-Size priority with --cache-evict cost),
    nothing stale is served (greedy output equals the oracle's), the memory
    stays in budget, and Redis forgets every evicted entry."""
    rds = procs.redis()
    e = procs.engine(name="e1", model=TINY, extra=[
        "--threads", "1", "--redis", f"127.0.0.1:{rds.port}", "--heartbeat-ms", "100",
        "--cache-bytes", str(1 << 20), "--cache-evict", policy])
    oracle = client(engine(procs, "full", "full").url)
    c = client(e.url)
    harness.wait_for(lambda: status(e.url)["registry"]["connected"], what="registered",
                     proc=e)
    docs = [doc(700 + i, 900) for i in range(4)]
    for r in range(8):
        order = [(r + k) % 4 for k in range(3)][::(1 if r % 2 else -1)]
        msgs = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": "<|pic_sep|>".join(
                    [docs[i] for i in order] + [f"question {r}?"])}]
        got = c.chat.completions.create(model="m", messages=msgs, max_tokens=4,
                                        temperature=0)
        want = oracle.chat.completions.create(model="m", messages=msgs, max_tokens=4,
                                              temperature=0)
        if got.usage.model_dump()["pic"]["pic_tokens"] == 0:
            # all exact or recomputed: must be the oracle's answer
            assert got.choices[0].message.content == want.choices[0].message.content
        assert got.usage.prompt_tokens == want.usage.prompt_tokens
    # the keeper builds deferred entries after the replies; each build holds the
    # budget right after its insert, so read the memory once none is pending
    harness.wait_for(lambda: status(e.url)["prefix"]["deferred_builds"]["pending"] == 0,
                     timeout=60, what="no deferred build pending", proc=e)
    st = status(e.url)
    mem = st["memory"]
    print("memory:", mem, "pool evictions:", st["cache"]["evictions"],
          "tree evictions:", st["prefix"]["evictions"])
    assert mem["budget"] == 1 << 20 and mem["eviction"] == policy
    assert mem["bytes"] <= mem["budget"]
    assert mem["evictions"] > 0
    assert st["prefix"]["bytes"] + st["cache"]["bytes"] <= mem["budget"]

    def index_follows():
        s = status(e.url)
        keys = rds_members(rds.port, "e1")
        return len(keys) == s["cache"]["entries"]
    harness.wait_for(index_follows, timeout=30, what="Redis follows the pool", proc=e)


def rds_members(port, eid):
    from tests.support.pool import engine_segments
    return engine_segments(port, eid)
