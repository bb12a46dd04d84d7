"""A compiled start reads its cache, compiles only the widths a lane uses, and says which (#77)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# A plain run in a fresh process: its prompt (under 32 tokens) and the warm-up's 8 tokens
# would each have compiled a width of their own before #77.
PLAIN = """
import json
from torch._dynamo.utils import counters
from specviz.engines.backends.hf import TransformersBackend
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles import make_oracle
b = TransformersBackend({folder!r}, device="cpu", dtype="float32", compile="on")
session = Session(b, make_oracle("none"), RunSettings("def add(a, b):", chat=False, k=0,
                                                       max_tokens=6))
for _ in session:
    pass
print(json.dumps({{"widths": sorted(b._steps.compile_seconds),
                  "read": b._steps.read_from_cache,
                  "misses": counters["inductor"]["fxgraph_cache_miss"],
                  "hits": counters["inductor"]["fxgraph_cache_hit"]}}))
"""


def plain_start(folder, home) -> tuple[dict, list[str]]:
    """One start in a process of its own, in `home`, inductor's cache where specviz puts it;
    what it compiled and read, and the lines it said about compiling."""
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["SPECVIZ_HOME"] = str(home)
    done = subprocess.run([sys.executable, "-c", PLAIN.format(folder=str(folder))],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "transformers step" in line]
    return json.loads(done.stdout.strip().splitlines()[-1]), said


def test_plain_decoding_compiles_width_one_and_a_second_start_reads_it(tiny_model_dir,
                                                                        tmp_path):
    """A home of its own, no TORCHINDUCTOR_CACHE_DIR: the first start compiles width 1 into
    the home's compile/ folder, the second finds every graph there."""
    first, said_first = plain_start(tiny_model_dir, tmp_path)
    second, said_second = plain_start(tiny_model_dir, tmp_path)
    assert first["widths"] == second["widths"] == [1]
    assert first["read"] == {"1": False} and first["misses"] > 0
    assert said_first == ["specviz: compiling the transformers step of width 1 for this "
                          "machine, once (later starts read it from the cache)"]
    assert second["read"] == {"1": True} and second["misses"] == 0 and second["hits"] > 0
    assert said_second == ["specviz: reading the transformers step of width 1 from the "
                           "compile cache"]
    assert any((tmp_path / "compile").iterdir())  # the home's own folder, where it read them


@pytest.fixture
def ledger(tiny_model_dir, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    from specviz.engines.backends import hf_compiled

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    return hf_compiled.StepLedger(model, "cpu")


def test_a_cache_written_by_another_torch_is_named_in_one_line(ledger):
    ledger.after(1, read=False, seconds=30.0)
    assert ledger.before(1).startswith("reading the transformers step of width 1")
    path = ledger._path
    held = json.loads(path.read_text())
    for facts in held.values():
        facts["torch"] = "2.12.0+cpu"
    path.write_text(json.dumps(held))
    line = ledger.before(1)
    assert "cannot serve the transformers step of width 1" in line
    assert f"torch 2.12.0+cpu -> {ledger.machine()['torch']}" in line and "\n" not in line
    assert ledger.before(8).startswith("compiling the transformers step of width 8")


def test_a_read_that_compiled_says_so_and_a_compile_that_read_corrects_the_line(ledger):
    ledger.before(1)
    assert ledger.after(1, read=True, seconds=4.0).startswith("read the transformers step")
    ledger.before(1)  # now the ledger holds it: "reading" was said
    assert "could not serve" in ledger.after(1, read=False, seconds=40.0)
    ledger.before(1)
    assert ledger.after(1, read=True, seconds=4.0) is None


def test_auto_keeps_compiled_steps_only_where_a_run_repays_the_start():
    from specviz.engines.backends import compile_choice

    tokens = compile_choice.EXPECTED_TOKENS
    assert compile_choice.pays(40.0, 30.0, None)  # this start compiled: its cost is spent
    assert not compile_choice.pays(40.0, 39.0, None)  # not MARGIN faster a token
    assert compile_choice.pays(40.0, 30.0, 10.0 * tokens / 1000.0)
    assert not compile_choice.pays(40.0, 30.0, 10.0 * tokens / 1000.0 + 0.5)
    said = compile_choice.trial_line({"choice": "off", "eager_ms": 40.0, "compiled_ms": 38.0,
                                      "start_s": 11.2, "steady": True, "remembered": True})
    assert "a start reading the compiled step 11.2 s against 128 tokens" in said
