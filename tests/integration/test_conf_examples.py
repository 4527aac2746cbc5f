"""Every nginx configuration in conf-examples/ loads with the module (`nginx -t`),
and the admin example really serves its status only where it says."""
import glob
import json
import os
import re
import subprocess

import pytest

from tests import harness

EXAMPLES = sorted(glob.glob(os.path.join(harness.ROOT, "conf-examples", "*.conf")))


def localise(text, prefix):
    """The example with this build's module and paths under prefix."""
    text = re.sub(r"load_module\s+\S+;", f"load_module {harness.MODULE_SO};", text)
    t = os.path.join(prefix, "tmp")
    return text.replace("http {", "http {\n"
                        f"    client_body_temp_path {t}/body;\n"
                        f"    proxy_temp_path {t}/proxy;\n"
                        f"    fastcgi_temp_path {t}/fastcgi;\n"
                        f"    uwsgi_temp_path {t}/uwsgi;\n"
                        f"    scgi_temp_path {t}/scgi;\n", 1)


def test_there_are_examples():
    names = {os.path.basename(p) for p in EXAMPLES}
    assert {"agent-one-engine.conf", "agent-pool.conf", "pool-with-redis.conf",
            "observe-external-api.conf", "status-admin.conf", "pool-tls.conf",
            "affinity-llama-server.conf"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_example_passes_nginx_t(path, logdir):
    prefix = os.path.join(logdir, "prefix")
    for d in ("logs", "tmp"):
        os.makedirs(os.path.join(prefix, d), exist_ok=True)
    conf = os.path.join(prefix, "nginx.conf")
    harness.pool_secret(prefix, "pool.secret")      # pic_pool_secret_file's file
    if "tls/" in open(path).read():                 # the certificates nginx loads
        from tests.support.pki import Pki
        os.makedirs(os.path.join(prefix, "tls"), exist_ok=True)
        Pki(os.path.join(prefix, "tls")).cert("gateway")
    with open(path) as f, open(conf, "w") as out:
        out.write(localise(f.read(), prefix))
    # nginx -t exits without freeing its configuration: not a leak to report
    env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
    r = subprocess.run([harness.NGINX_BIN, "-t", "-p", prefix + "/", "-c", conf],
                       capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr
    assert "test is successful" in r.stderr


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_example_never_exposes_engine_internals(path):
    """Every location that proxies has pic on, affinity or observe, where the module
    refuses the engine-internal paths (/v1/pic/segments, /v1/pic/prefill)."""
    with open(path) as f:
        text = re.sub(r"#[^\n]*", "", f.read())
    blocks = re.findall(r"location[^{]*\{([^{}]*)\}", text)
    proxying = [b for b in blocks if "proxy_pass" in b]
    assert proxying
    for b in proxying:
        assert re.search(r"\bpic\s+(on|affinity|observe)\s*;", b), b


@pytest.mark.allow_log(r"access forbidden by rule|/html/pic/status\" failed")
def test_status_admin_example_serves_status_on_the_admin_port(procs, logdir):
    with open(os.path.join(harness.ROOT, "conf-examples", "status-admin.conf")) as f:
        text = f.read()
    port, admin = harness.free_port(), harness.free_port()
    fake = procs._add(harness.FakeBackend("capture"))
    os.makedirs(os.path.join(logdir, "nginx"), exist_ok=True)
    harness.pool_secret(os.path.join(logdir, "nginx"))   # pic_pool_secret_file's
    body = text[text.index("http {") + len("http {"):text.rindex("}")]
    body = (body.replace("listen 8080;", f"listen 127.0.0.1:{port};\n"
                         "        location = /__pic_ready { return 204; }")
                .replace("listen 9145;", f"listen 127.0.0.1:{admin};")
                .replace("server 127.0.0.1:8000;", f"server 127.0.0.1:{fake.port};")
                .replace("server 127.0.0.1:8001;", "")
                .replace("access_log logs/access.log;", ""))
    ngx = procs.nginx(body, port=port)
    code, _, _ = harness.http("POST", ngx.url + "/v1/chat/completions", body={
        "model": "m", "messages": [{"role": "user", "content": "hello"}]})
    assert code == 200 and fake.bodies
    code, _, data = harness.http("GET", f"http://127.0.0.1:{admin}/pic/status")
    assert code == 200 and json.loads(data)["requests"]["planned"] == 1
    assert harness.http("GET", f"http://127.0.0.1:{admin}/metrics")[0] == 403
    assert harness.http("GET", ngx.url + "/pic/status")[0] == 404
