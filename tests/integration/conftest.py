"""pytest fixtures: real processes per test, logs kept, logs checked at teardown."""
import os
import re
import shutil

import pytest

from tests import harness  # noqa: E402  (tests/harness.py, shared with bench/ and scripts/)


def pytest_configure(config):
    config.addinivalue_line("markers", "allow_log(regex): log lines a test expects")


@pytest.fixture
def logdir(request):
    """Per-test log directory under $PIC_BUILD/test-logs (kept for the report)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid.split("::", 1)[-1])
    mod = os.path.splitext(os.path.basename(request.node.fspath))[0]
    d = os.path.join(harness.BUILD, "test-logs", mod, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d, exist_ok=True)
    return d


@pytest.fixture
def procs(request, logdir):
    """Factory registry: start processes with procs.engine()/redis()/nginx();
    all are stopped at teardown and their logs checked for unexpected errors."""
    started = []
    allowed = [m.args[0] for m in request.node.iter_markers("allow_log")]

    class Factory:
        def engine(self, **kw):
            p = harness.Engine(logdir, **kw)
            return self._add(p)

        def redis(self, **kw):
            return self._add(harness.Redis(logdir, **kw))

        def nginx(self, http_body, **kw):
            return self._add(harness.Nginx(logdir, http_body, **kw))

        def _add(self, p):
            p.allowed += allowed
            started.append(p)
            return p

    yield Factory()
    for p in reversed(started):
        p.stop()
    bad = [line for p in started for line in p.bad_lines()]
    if bad:
        pytest.fail("unexpected lines in logs (%s):\n%s" % (logdir, "\n".join(bad[:30])))
