"""client.py — the one OpenAI client of the benches: a timed request to a
server on loopback (pic-engine serve, llama-server), non-streamed or streamed.
Every bench that posts completions goes through here (agent.py,
checkpoints.py via agent.post, coldpar.py, decode_batch.py, load.py, peer.py)."""
import http.client
import json
import time

CHAT = "/v1/chat/completions"


def post(port, body, timeout=900, path=CHAT):
    """POST body (not streamed) to 127.0.0.1:port: (seconds to the whole answer,
    the decoded JSON answer); RuntimeError on a status other than 200."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.perf_counter()
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    doc = json.loads(r.read())
    dt = time.perf_counter() - t0
    c.close()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status} from port {port}: {str(doc)[:500]}")
    return dt, doc


def stream(port, body, timeout=900, path=CHAT):
    """POST body (stream: true) to 127.0.0.1:port: {status, ttft (s, first bytes
    of a 200 body; None otherwise), total (s; None unless 200), usage (the last
    usage chunk or None), body (the raw bytes)}; never raises on a status."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.perf_counter()
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    out = {"status": r.status, "ttft": None, "total": None, "usage": None, "body": b""}
    if r.status != 200:
        out["body"] = r.read()
        c.close()
        return out
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        if out["ttft"] is None:
            out["ttft"] = time.perf_counter() - t0
        buf += chunk
    out["total"] = time.perf_counter() - t0
    c.close()
    out["body"] = buf
    for ev in buf.split(b"\n\n"):
        if ev.startswith(b"data: {") and b'"usage":{' in ev:
            out["usage"] = json.loads(ev[6:])["usage"]
    return out
