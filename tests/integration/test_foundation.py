"""The foundation's promises: the module loads into nginx and answers its status
location; the engine starts and answers /healthz; the harness catches log errors."""
import json
import subprocess

import pytest

from tests import harness


STATUS_CONF = """
    pic_zone pic 1m;
    server {
        listen 127.0.0.1:$PORT;
        location = /__pic_ready { return 204; }
        location /pic/status { pic_status; }
        location / { pic on; return 200 "ok\\n"; }
    }
"""


def status(ngx):
    return json.loads(harness.http("GET", ngx.url + "/pic/status")[2])


def test_module_loads_and_status_is_json(procs):
    ngx = procs.nginx(STATUS_CONF)
    harness.http("GET", ngx.url + "/v1/anything")
    # requests are counted in the log phase, just after the response is sent
    harness.wait_for(lambda: status(ngx)["requests"]["total"] >= 1, what="counter")
    code, headers, body = harness.http("GET", ngx.url + "/pic/status")
    assert code == 200
    assert headers["Content-Type"].startswith("application/json")
    doc = json.loads(body)
    assert doc["module"] == "ngx_http_pic_module"
    assert doc["zone"]["name"] == "pic"
    assert doc["requests"]["total"] >= 1


def test_status_counts_across_workers(procs):
    ngx = procs.nginx(STATUS_CONF, workers=2)
    for _ in range(20):
        assert harness.http("GET", ngx.url + "/x")[0] == 200
    harness.wait_for(lambda: status(ngx)["requests"]["total"] >= 20, what="counters")
    assert status(ngx)["requests"]["total"] == 20


def test_status_prometheus_format(procs):
    ngx = procs.nginx(STATUS_CONF)
    code, headers, body = harness.http("GET", ngx.url + "/pic/status?format=prometheus")
    assert code == 200
    assert headers["Content-Type"].startswith("text/plain")
    text = body.decode()
    assert "# TYPE pic_requests_total counter" in text
    assert any(line.startswith("pic_requests_total ") for line in text.splitlines())


def test_status_rejects_post(procs):
    ngx = procs.nginx(STATUS_CONF)
    assert harness.http("POST", ngx.url + "/pic/status", body={})[0] == 405


def test_zone_survives_reload(procs):
    ngx = procs.nginx(STATUS_CONF)
    for _ in range(3):
        harness.http("GET", ngx.url + "/x")
    ngx.reload()
    harness.wait_for(lambda: json.loads(harness.http(
        "GET", ngx.url + "/pic/status")[2])["zone"]["generation"] == 1, what="reload")
    doc = json.loads(harness.http("GET", ngx.url + "/pic/status")[2])
    assert doc["requests"]["total"] >= 3


def test_nginx_t_rejects_bad_directive(logdir):
    conf = """
load_module @MODULE_SO@;
error_log stderr;
events {}
http { pic_zone pic 1k; server { listen 127.0.0.1:1; } }
"""
    rc, out = harness.nginx_test_config(conf, logdir)
    assert rc != 0
    assert "is too small" in out


@pytest.mark.parametrize("params, ok", [
    ("fails=2 probe_fails=3 probe_passes=2", True),
    ("probe_fails=0", False), ("probe_passes=x", False), ("fails=", False),
    ("probe_fails", False), ("probe_passes=2 bogus=1", False)])
def test_nginx_t_health_check_counts(logdir, params, ok):
    conf = f"""
load_module @MODULE_SO@;
error_log stderr;
events {{}}
http {{ pic_zone pic 1m; pic_health_check {params}; server {{ listen 127.0.0.1:1; }} }}
"""
    rc, out = harness.nginx_test_config(conf, logdir)
    assert (rc == 0) == ok, out
    if not ok:
        assert "invalid parameter" in out


def test_engine_healthz_status_metrics(procs):
    eng = procs.engine(name="e1")
    code, _, body = harness.http("GET", eng.url + "/healthz")
    assert code == 200 and json.loads(body)["status"] == "ok"
    doc = json.loads(harness.http("GET", eng.url + "/status")[2])
    assert doc["id"] == "e1" and doc["port"] == eng.port
    code, _, body = harness.http("GET", eng.url + "/metrics")
    assert code == 200
    fams = harness.prometheus_families(body.decode())
    assert fams["pic_engine_requests"].type == "counter"
    assert fams["pic_engine_requests"].samples[0].value >= 2


def test_engine_unknown_path_is_openai_error(procs):
    eng = procs.engine()
    code, _, body = harness.http("GET", eng.url + "/nope")
    assert code == 404
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"}


def test_engine_bad_option_fails_cleanly():
    r = subprocess.run([harness.ENGINE_BIN, "serve", "--port", "notanumber"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "invalid number" in r.stderr


def test_redis_fixture_starts(procs):
    r = procs.redis()
    assert r.ping()


def test_log_check_catches_errors(procs, logdir):
    """The harness itself: an [error] line in nginx's log is reported."""
    ngx = procs.nginx(STATUS_CONF)
    harness.http("GET", ngx.url + "/missing/../../etc/passwd")
    ngx.stop()
    with open(ngx.error_log, "a") as f:
        f.write("2026/01/01 00:00:00 [error] 1#1: synthetic\n")
    assert any("synthetic" in line for line in ngx.bad_lines())
    ngx.allowed.append("synthetic")
