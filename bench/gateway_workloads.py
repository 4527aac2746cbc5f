"""Agentic request sequences (DESIGN §5, the Irminsul patterns) for the gateway.

Each pattern is a deterministic list of OpenAI chat request bodies plus, per
request, its reusable pieces in prompt order, so that an oracle can say how
many bytes were shifted re-use (content seen in an earlier request but not
inside the request's exact prefix) without rendering the template:

  agent_meta     a small per-agent header before a large shared body
  sysvar         a variation deep inside the system prompt
  compact        history compaction: old tool results dropped, a summary
                 inserted, the recent ones kept at shifted positions
  rerank         retrieved documents re-ordered per request
  tool_variants  different subsets and orders of the tool schemas

`marked=True` delimits the client's documents with the marker (the HYPIC
serving interface); `marked=False` joins them with blank lines (unmarked
traffic: only CDC and the S1 fallback can find them).  Bytes stand in for
tokens (the gateway keys bytes, not tokens).
"""
import json

MARK = "<|pic_sep|>"
PATTERNS = ("agent_meta", "sysvar", "compact", "rerank", "tool_variants")

_WORDS = ("agent tool result cache segment prefix engine token state nginx plan worker "
          "index memory document query retrieval schema summary context window budget "
          "latency throughput request response stream model layer attention recurrent "
          "gateway shard replica queue batch kernel vector matrix tensor").split()


def text(seed, n):
    """Deterministic words, about n bytes, no leading/trailing white space."""
    out, size, x = [], 0, (seed * 2654435761 + 97) % 2**32
    while size < n:
        x = (x * 1103515245 + 12345) % 2**31
        w = _WORDS[(x >> 8) % len(_WORDS)]
        if (x >> 4) % 11 == 0:
            w += "."
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def _join(docs, marked):
    return (MARK if marked else "\n\n").join(docs)


def agent_meta(marked=True, n=4, size=2000):
    body = [text(1000 + k, size) for k in range(3)]
    reqs = []
    for i in range(n):
        header = f"You are agent {i % 3} ({['planner', 'coder', 'critic'][i % 3]})."
        system = _join([header] + body, marked)
        q = f"Task {i}: {text(5000 + i, 60)}"
        reqs.append(({"model": "m", "max_tokens": 1, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": q}]},
            [header] + body + [q]))
    return reqs


def sysvar(marked=True, n=4, size=2000):
    p1, p2, p3 = (text(2000 + k, size) for k in range(3))
    reqs = []
    for i in range(n):
        var = f"Today is day {i}; the user is user{i * 7 % 5}."
        system = _join([p1, var, p2, p3], marked)
        q = f"Question {i}: {text(6000 + i, 60)}"
        reqs.append(({"model": "m", "max_tokens": 1, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": q}]},
            [p1, var, p2, p3, q]))
    return reqs


def compact(marked=True, n=4, size=2000):
    system = "You are a coding agent. Use the tools."
    results = [text(3000 + k, size) for k in range(n + 1)]
    reqs = []
    for i in range(n):
        msgs = [{"role": "system", "content": system}]
        pieces = [system]
        if i >= 2:
            s = f"Summary of the work before step {i - 1}: files read, tests run."
            msgs.append({"role": "user", "content": s})
            pieces.append(s)
        for t in range(max(0, i - 1), i + 1):
            call = {"id": f"call_{t}", "type": "function",
                    "function": {"name": "read_file", "arguments": json.dumps({"n": t})}}
            msgs.append({"role": "assistant", "content": None, "tool_calls": [call]})
            msgs.append({"role": "tool", "tool_call_id": f"call_{t}", "content": results[t]})
            pieces += [f"call {t}", results[t]]
        q = f"Next step {i}: {text(7000 + i, 60)}"
        msgs.append({"role": "user", "content": q})
        pieces.append(q)
        reqs.append(({"model": "m", "max_tokens": 1, "messages": msgs}, pieces))
    return reqs


def rerank(marked=True, n=4, size=1500):
    pool = [text(4000 + k, size) for k in range(5)]
    orders = [[0, 1, 2, 3], [2, 0, 4, 1], [1, 4, 0, 2], [3, 2, 1, 0], [4, 3, 2, 1],
              [0, 2, 4, 3]]
    reqs = []
    for i in range(n):
        docs = [pool[k] for k in orders[i % len(orders)]]
        q = f"Using the documents, answer {i}: {text(8000 + i, 60)}"
        system = "Answer from the retrieved documents only."
        reqs.append(({"model": "m", "max_tokens": 1, "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": _join(docs + [q], marked)}]},
            [system] + docs + [q]))
    return reqs


def _tool(k, size):
    return {"type": "function", "function": {
        "name": f"tool_{k}", "description": text(9000 + k, size),
        "parameters": {"type": "object", "properties": {"arg": {"type": "string"}},
                       "required": ["arg"]}}}


def tool_variants(marked=True, n=4, size=800):
    pool = [_tool(k, size) for k in range(6)]
    subsets = [[0, 1, 2, 3], [1, 3, 4], [0, 2, 4, 5], [5, 3, 1], [2, 1, 0, 4], [4, 5, 0]]
    reqs = []
    for i in range(n):
        tools = [pool[k] for k in subsets[i % len(subsets)]]
        system = "You are an agent with tools."
        q = f"Request {i}: {text(9500 + i, 60)}"
        reqs.append(({"model": "m", "max_tokens": 1, "tools": tools, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": q}]},
            [json.dumps(t, ensure_ascii=False) for t in tools] + [system, q]))
    return reqs


def pattern(name, marked=True, n=4, size=None):
    """The (body, pieces) list of one pattern."""
    fn = globals()[name]
    return fn(marked=marked, n=n) if size is None else fn(marked=marked, n=n, size=size)


def oracle(reqs, min_piece=200):
    """Per request: (reusable bytes, exact-prefix bytes, shifted reusable bytes).

    A piece is reusable when an earlier request had it; the exact prefix is
    the longest run of leading pieces equal to some earlier request's leading
    pieces; shifted = reusable pieces after that run.  Pieces shorter than
    min_piece are ignored (not worth caching; the gateway recomputes them)."""
    seen, firsts, out = set(), [], []
    for _, pieces in reqs:
        k = 0
        for prev in firsts:
            j = 0
            while j < min(len(prev), len(pieces)) and prev[j] == pieces[j]:
                j += 1
            k = max(k, j)
        big = [(i, p) for i, p in enumerate(pieces) if len(p) >= min_piece]
        reusable = sum(len(p) for _, p in big if p in seen)
        prefix = sum(len(p) for i, p in big if i < k and p in seen)
        out.append((reusable, prefix, reusable - prefix))
        seen.update(pieces)
        firsts.append(pieces)
    return out
