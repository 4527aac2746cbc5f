"""The status dashboard: a self-contained HTML page generated into the module,
rendered by headless Chromium against a live nginx: no console messages, and it
shows the numbers the JSON holds."""
import html.parser
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import pytest

from tests import harness
from tests.support.gateway import MARK, doc, gw_conf

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HTML = os.path.join(harness.ROOT, "ngx_pic_module", "dashboard", "pic_dashboard.html")


def test_header_is_generated_from_the_html():
    r = subprocess.run([sys.executable, os.path.join(harness.ROOT, "scripts", "gen_dashboard.py"),
                        "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_page_is_self_contained():
    with open(HTML) as f:
        page = f.read()
    refs = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]*)""", page)
    assert refs and all(r.startswith("data:") for r in refs), refs
    assert "<script src" not in page and "@import" not in page and "url(" not in page


class Ids(html.parser.HTMLParser):
    """Text of every element with an id, and the engine table rows."""

    def __init__(self):
        super().__init__()
        self.text, self.stack, self.rows, self.row = {}, [], [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.stack.append(a.get("id"))
        if tag == "tr" and a.get("class") == "engine":
            self.row = []
        elif tag == "td" and self.row is not None:
            self.row.append("")

    def handle_endtag(self, tag):
        if self.stack:
            self.stack.pop()
        if tag == "tr" and self.row is not None:
            self.rows.append(self.row)
            self.row = None

    def handle_data(self, data):
        for i in self.stack:
            if i:
                self.text[i] = self.text.get(i, "") + data
        if self.row is not None and self.row:
            self.row[-1] += data


def chromium(url, logdir, *extra):
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                        "--enable-logging=stderr", "--v=0", "--virtual-time-budget=4000",
                        f"--user-data-dir={os.path.join(logdir, 'chrome')}",
                        *extra, url], capture_output=True, text=True, timeout=90)
    with open(os.path.join(logdir, "chromium.log"), "w") as f:
        f.write(r.stderr)
    return r


_USABLE = []


def need_chromium(logdir):
    """Skip (with the reason) unless headless Chromium is installed and runs."""
    if not CHROMIUM:
        pytest.skip("chromium is not installed (make deps installs it)")
    if not _USABLE:
        try:
            r = chromium("data:text/html,<p id=x>ok</p>", logdir, "--dump-dom")
            _USABLE.append(r.returncode == 0 and ">ok<" in r.stdout
                           or "cannot run headless: rc %d, %s" % (r.returncode,
                                                                  r.stderr[-300:]))
        except (OSError, subprocess.TimeoutExpired) as e:
            _USABLE.append("cannot run headless: %s" % e)
    if _USABLE[0] is not True:
        pytest.skip("chromium " + _USABLE[0])


def console_lines(stderr):
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def test_console_check_catches_page_errors(logdir):
    """The check below can fail: a page that throws is reported."""
    need_chromium(logdir)
    r = chromium("data:text/html,<script>undefined_function()</script>", logdir, "--dump-dom")
    assert any("undefined_function" in line for line in console_lines(r.stderr))


def num(s):
    return int(s.replace(",", "").strip())


@pytest.mark.allow_log(r"pic: ")
def test_dashboard_shows_the_json_numbers(procs, logdir):
    need_chromium(logdir)
    fake = procs._add(harness.FakeBackend("capture"))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]))
    shared = doc(300, 900)
    for i in range(3):
        assert harness.http("POST", ngx.url + "/v1/completions", body={
            "model": "m", "prompt": f"head {i}{MARK}{shared}{MARK}question {i}"})[0] == 200
    assert harness.http("POST", ngx.url + "/v1/completions", body=b"{bad")[0] == 400
    harness.wait_for(lambda: json.loads(harness.http("GET", ngx.url + "/pic/status")[2])
                     ["requests"]["total"] == 4, timeout=5, what="log phase")
    doc_json = json.loads(harness.http("GET", ngx.url + "/pic/status")[2])

    r = chromium(ngx.url + "/pic/status?format=html", logdir, "--dump-dom")
    assert r.returncode == 0, r.stderr[-2000:]
    assert console_lines(r.stderr) == []
    p = Ids()
    p.feed(r.stdout)
    t = p.text
    assert "cannot load" not in t.get("error", "")
    assert t["zone-name"] == "pic"
    assert num(t["requests-total"]) == doc_json["requests"]["total"] == 4
    assert num(t["requests-planned"]) == doc_json["requests"]["planned"] == 3
    assert num(t["requests-rejected"]) == doc_json["requests"]["rejected"] == 1
    assert num(t["segments-total"]) == doc_json["segments"]["total"]
    assert num(t["segments-hits"]) == doc_json["segments"]["hits"] > 0
    assert num(t["segments-dynamic"]) == doc_json["segments"]["dynamic"] > 0
    assert num(t["bytes-hit"]) == doc_json["bytes"]["hit"] >= 2 * 900
    assert num(t["bytes-above-prefix"]) == doc_json["bytes"]["above_prefix"] > 0
    assert num(t["bytes-prompt"]) == doc_json["bytes"]["prompt"]
    # one story: the plan and the engines' report side by side, the difference said
    served = doc_json["served"]
    assert served["planned_by_gateway"]["above_prefix_bytes"] == doc_json["bytes"]["above_prefix"]
    assert served["planned_by_gateway"]["requests"] == 3
    assert num(t["tokens-pic"]) == served["reported_by_engines"]["pic_tokens"] == 0
    assert t["served-note"] == served["note"] and "after the plan" in served["note"]
    assert t["served-diff"] == "No engine has reported usage yet."
    assert num(t["ttft-count"]) == doc_json["ttft_ms"]["count"] == 3
    assert num(t["cdc-chunks"]) == doc_json["cdc"]["chunks"]
    assert t["redis-address"] == "not configured"
    assert [row[0] for row in p.rows] == [e["name"] for e in doc_json["engines"]]
    assert p.rows[0][2] == "healthy"
    assert p.rows[0][-1] == "-"         # a fake backend says no seam width

    shot = os.path.join(logdir, "dashboard.png")
    r = chromium(ngx.url + "/pic/status?format=html", logdir, f"--screenshot={shot}",
                 "--window-size=1280,1000")
    assert console_lines(r.stderr) == []
    with open(shot, "rb") as f:
        png = f.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000


@pytest.mark.allow_log(r"pic: ")
def test_dashboard_shows_a_failing_probe_streak(procs, logdir):
    """An engine whose probes fail under probe_fails stays in rotation; the
    dashboard says so with the streak."""
    need_chromium(logdir)
    fake = procs._add(harness.FakeBackend("capture"))
    fake.status_code = 503
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"],
                              http="pic_health_check interval=100ms probe_fails=1000;"))
    harness.wait_for(lambda: json.loads(harness.http("GET", ngx.url + "/pic/status")[2])
                     ["engines"][0]["probe_fails"] >= 2, timeout=5, what="two failed probes")
    r = chromium(ngx.url + "/pic/status?format=html", logdir, "--dump-dom")
    assert r.returncode == 0 and console_lines(r.stderr) == [], r.stderr[-2000:]
    p = Ids()
    p.feed(r.stdout)
    assert re.fullmatch(r"healthy, \d+ failed probes", p.rows[0][2]), p.rows
    assert 'class="bad">healthy, ' in r.stdout


def test_browser_accept_header_gets_the_dashboard(procs):
    ngx = procs.nginx(gw_conf(["127.0.0.1:9"]))
    code, hdrs, body = harness.http("GET", ngx.url + "/pic/status",
                                    headers={"Accept": "text/html,application/xhtml+xml"})
    assert code == 200 and hdrs["Content-Type"].startswith("text/html")
    assert body.startswith(b"<!DOCTYPE html>")
    code, hdrs, body = harness.http("GET", ngx.url + "/pic/status",
                                    headers={"Accept": "application/openmetrics-text"})
    assert hdrs["Content-Type"].startswith("text/plain") and b"pic_requests_total" in body


class Cols(html.parser.HTMLParser):
    """The history chart's columns: attributes of each div.col, by chart id."""

    def __init__(self):
        super().__init__()
        self.cols, self.stack = {}, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.stack.append(a["id"])
        elif tag == "div" and "col" in (a.get("class") or "").split() and self.stack:
            self.cols.setdefault(self.stack[-1], []).append(a)

    def handle_endtag(self, tag):
        pass


TINY = os.path.join(harness.ROOT, "tests", "fixtures", "models", "tiny-qwen35")


def sse_usage(raw):
    """usage.pic of a streamed answer: from a data chunk, else the comment line."""
    found = None
    for line in raw.decode().splitlines():
        if line.startswith("data: {"):
            u = json.loads(line[6:]).get("usage")
            found = u["pic"] if u else found
        elif line.startswith(": {"):
            found = json.loads(line[2:])["usage"]["pic"]
    return found


@pytest.mark.skipif(not os.path.isdir(TINY), reason="fixture models missing")
def test_dashboard_history_chart_matches_the_json(procs, logdir):
    """Real requests through nginx to an engine: each answer's usage.pic is
    collected per request (non-streamed JSON, streamed usage chunk, and the
    engine's ': usage' comment when the client asked for no usage); the JSON
    history equals what the clients saw, and the page draws exactly that
    (the page part skips, with its reason, where Chromium cannot run)."""
    eng = procs.engine(model=TINY)
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{eng.port}"]))
    system = {"role": "system", "content": "You answer from the documents. " * 40}
    msgs = [system, {"role": "user", "content": "first question about the documents"}]
    seen = []
    for i, mode in enumerate(["json", "json", "usage", "bare", "json"]):
        body = {"model": "m", "messages": msgs, "max_tokens": 4}
        if mode != "json":
            body["stream"] = True
        if mode == "usage":
            body["stream_options"] = {"include_usage": True}
        code, _, raw = harness.http("POST", ngx.url + "/v1/chat/completions", body=body)
        assert code == 200, raw
        if mode == "json":
            answer = json.loads(raw)
            usage, text = answer["usage"]["pic"], answer["choices"][0]["message"]["content"]
        else:
            usage, text = sse_usage(raw), "streamed"
            assert (mode == "bare") == (b"\n: {" in raw)    # the comment only without usage
        seen.append(usage)
        msgs = msgs + [{"role": "assistant", "content": text or "ok"},
                       {"role": "user", "content": f"question {i + 2}"}]
    harness.wait_for(lambda: json.loads(harness.http("GET", ngx.url + "/pic/status")[2])
                     ["history"]["recorded"] == 5, timeout=5, what="log phase")
    d = json.loads(harness.http("GET", ngx.url + "/pic/status")[2])

    hist = d["history"]["requests"]
    assert [{k: h[k + "_tokens"] for k in ("exact", "pic", "recomputed")} for h in hist] \
        == [{"exact": u["exact_tokens"], "pic": u["pic_tokens"],
             "recomputed": u["recomputed_tokens"]} for u in seen]
    assert all(h["status"] == 200 and h["mode"] == "planned" and h["ttft_ms"] is not None
               and h["engine"] == f"127.0.0.1:{eng.port}" for h in hist)
    for k in ("exact", "pic", "recomputed"):
        assert d["tokens"][k] == sum(u[k + "_tokens"] for u in seen)
    assert d["tokens"]["requests"] == 5 and d["tokens"]["exact"] > 0   # later turns resume
    prom = harness.http("GET", ngx.url + "/pic/status?format=prometheus")[2].decode()
    assert f'pic_prompt_tokens_total{{source="exact"}} {d["tokens"]["exact"]}' in prom

    need_chromium(logdir)
    r = chromium(ngx.url + "/pic/status?format=html", logdir, "--dump-dom")
    assert r.returncode == 0, r.stderr[-2000:]
    assert console_lines(r.stderr) == []
    p = Ids()
    p.feed(r.stdout)
    for k in ("exact", "pic", "recomputed", "requests"):
        assert num(p.text["tokens-" + k]) == d["tokens"][k]
    assert num(p.text["history-shown"]) == len(hist) == 5
    c = Cols()
    c.feed(r.stdout)
    bars, ttft = c.cols["history-tokens"], c.cols["history-ttft"]
    assert [(int(b["data-exact"]), int(b["data-pic"]), int(b["data-recomputed"]),
             int(b["data-status"]), b["data-engine"]) for b in bars] \
        == [(h["exact_tokens"], h["pic_tokens"], h["recomputed_tokens"], h["status"],
             h["engine"]) for h in hist]
    assert [int(t["data-ttft"]) for t in ttft] == [h["ttft_ms"] for h in hist]

    shot = os.path.join(logdir, "dashboard-history.png")
    r = chromium(ngx.url + "/pic/status?format=html", logdir, f"--screenshot={shot}",
                 "--window-size=1280,1400")
    assert console_lines(r.stderr) == []
    with open(shot, "rb") as f:
        png = f.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000
    assert struct.unpack(">II", png[16:24]) == (1280, 1400)     # IHDR width, height


def test_history_is_in_order_of_arrival(procs):
    """A request that ends after a later one (its answer trickles in) still
    comes first in the history: the ring is ordered by arrival, not by when
    each request's log phase ran."""
    import threading
    fake = procs._add(harness.FakeBackend("slow", delay=0.3, chunks=4))
    ngx = procs.nginx(gw_conf([f"127.0.0.1:{fake.port}"]))
    slow = {"model": "m", "prompt": MARK.join(["slow header", doc(7, 900), "q"]), "stream": True}
    quick = {"model": "m", "prompt": MARK.join(["quick header", doc(8, 300), "q"])}
    done = []
    t = threading.Thread(target=lambda: done.append(
        harness.http("POST", ngx.url + "/v1/completions", body=slow, timeout=30)[0]))
    t.start()
    harness.wait_for(lambda: len(fake.bodies) == 1, timeout=10, what="the slow request upstream")
    fake.mode = "capture"              # the next answer comes at once
    assert harness.http("POST", ngx.url + "/v1/completions", body=quick)[0] == 200
    t.join(30)
    assert done == [200]

    def hist():
        return json.loads(harness.http("GET", ngx.url + "/pic/status")[2])["history"]

    harness.wait_for(lambda: hist()["recorded"] == 2, timeout=5, what="log phase")
    reqs = hist()["requests"]
    assert reqs[0]["prompt_bytes"] > 2 * reqs[1]["prompt_bytes"], reqs   # slow, then quick
    assert reqs[0]["start_ms"] <= reqs[1]["start_ms"] and reqs[0]["at_ms"] > reqs[1]["at_ms"], reqs
