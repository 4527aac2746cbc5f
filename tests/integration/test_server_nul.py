"""Generated text containing U+0000 comes back whole from `pic-engine serve`.

cJSON strings stop at the first NUL; the server writes its JSON strings with
an explicit length.  The oracle is `pic-engine generate` on the same model
and prompt (greedy): its output for this prompt holds token 188, which
decodes to U+0000, and the served text must equal it byte for byte.
"""
import os
import subprocess

import openai
import pytest

from tests import harness

MODEL = os.path.join(harness.ROOT, "tests", "fixtures", "models", "tiny-qwen35-moe")
PROMPT, N = "then", 16

pytestmark = pytest.mark.skipif(not os.path.isdir(MODEL), reason="fixture model missing")


def generate(*extra):
    r = subprocess.run([harness.ENGINE_BIN, "generate", "--model", MODEL, "--prompt", PROMPT,
                        "--max-tokens", str(N), "--threads", "1", *extra],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout.decode()


def test_completion_text_with_nul_round_trips(procs):
    ids = [int(x) for x in generate("--ids").replace(",", " ").split()]
    assert 188 in ids, "the fixture no longer generates U+0000 for this prompt"
    want = generate()
    assert want.endswith("\n")
    want = want[:-1]
    nul = want.index("\x00")
    assert nul < len(want) - 1          # text follows the NUL

    eng = procs.engine(model=MODEL, extra=("--threads", "1"))
    c = openai.OpenAI(base_url=eng.url + "/v1", api_key="none", max_retries=0, timeout=30)
    r = c.completions.create(model="m", prompt=PROMPT, max_tokens=N, temperature=0)
    assert r.choices[0].text == want
    chunks = c.completions.create(model="m", prompt=PROMPT, max_tokens=N, temperature=0,
                                  stream=True)
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == want
