"""The transformers backend's compiled steps (static cache, graphs per width) against eager."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from specviz.engines import events as ev
from specviz.engines.errors import SpecvizError
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles import make_oracle

PROMPT = "def add(a, b):\n    return a + b\nfor i in range(10):\n    print(add(i, i))\n"
CLOSE = 1e-4  # float32 logits of the same sums in another order (eager and compiled differ)
CUDA_CLOSE = 1e-3  # the same on a card: Triton's fused reductions against cuBLAS's


@pytest.fixture(scope="module", autouse=True)
def _compiled_code_kept_between_runs():
    """Compiled code read from the user's specviz cache, as the models are (the tests' home is
    new each session and would compile everything again)."""
    from specviz.engines.models import home_dir

    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    real = (home_dir("cache") / "models").resolve().parent
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(real / "compile")
    yield
    if before is None:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    else:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = before


@pytest.fixture(scope="module")
def compiled(tiny_model_dir):
    from specviz.engines.backends.hf import TransformersBackend

    backend = TransformersBackend(tiny_model_dir, device="cpu", compile="on")
    assert backend.compiled == "on"
    return backend


@pytest.fixture(scope="module")
def eager(tiny_model_dir):
    from specviz.engines.backends.hf import TransformersBackend

    return TransformersBackend(tiny_model_dir, device="cpu", compile="off")


def both(eager, compiled, call, atol=CLOSE):
    """`call` on each backend; their results, which must agree."""
    a, b = call(eager), call(compiled)
    np.testing.assert_allclose(a, b, atol=atol, rtol=0)
    return a


def test_chains_rollbacks_trees_and_early_exit_give_eager_logits(eager, compiled):
    for b in (eager, compiled):
        b.reset()
    prompt = eager.tokenize(PROMPT)
    both(eager, compiled, lambda b: b.forward(prompt, "last"))  # wider than every graph
    for token in (5, 17, 33):
        both(eager, compiled, lambda b, t=token: b.forward([t]))
    both(eager, compiled, lambda b: b.forward([7, 8, 9, 10, 11], "all"))  # 8-wide, padded
    for b in (eager, compiled):
        b.truncate(b.n_past - 3)
    both(eager, compiled, lambda b: b.forward([12, 13], 1))
    both(eager, compiled, lambda b: b.forward_tree([1, 2, 3, 4, 5], [-1, 0, 0, 2, -1]))
    for b in (eager, compiled):
        b.keep_path([0, 2, 3])
    both(eager, compiled, lambda b: b.forward([14]))
    with eager.first_layers(1) as fe, compiled.first_layers(1) as fc:
        for tokens in ([3], [4, 5], [6]):
            np.testing.assert_allclose(fe(tokens), fc(tokens), atol=CLOSE, rtol=0)
    both(eager, compiled, lambda b: b.forward([15]))  # the cache was left as it was
    assert compiled.n_past == eager.n_past


def test_the_cache_grows_past_its_first_size_in_the_same_graphs(eager, compiled,
                                                                monkeypatch):
    from specviz.engines.backends import hf_compiled

    monkeypatch.setattr(hf_compiled, "MIN_CAPACITY", 16)
    grown = compiled.share()  # a static cache of its own, 16 slots at first
    eager.reset()
    widths = set(compiled._steps.compile_seconds)
    both(eager, grown, lambda b: b.forward(list(range(3, 15)), "last"))
    for token in range(12):
        both(eager, grown, lambda b, t=token: b.forward([t + 1, t + 2], 1))
    assert grown._kv.capacity == 64
    assert set(compiled._steps.compile_seconds) <= widths | {2, 16}  # no graph per size
    grown.close()


def test_hidden_rows_for_medusa_are_the_eager_ones(eager, compiled):
    for b in (eager, compiled):
        b.reset()
        b.keep_hidden(True)
    try:
        prompt = eager.tokenize(PROMPT)
        both(eager, compiled, lambda b: b.forward(prompt, "last"))
        both(eager, compiled, lambda b: b.forward([5, 6, 7], "all"))
        for position in range(len(prompt) - 1, len(prompt) + 3):
            a, c = eager.hidden_at(position), compiled.hidden_at(position)
            assert (a is None) == (c is None)
            if a is not None:
                np.testing.assert_allclose(a.numpy(), c.numpy(), atol=CLOSE, rtol=0)
    finally:
        for b in (eager, compiled):
            b.keep_hidden(False)


def run(backend, oracle, k=4, n=40):
    session = Session(backend, oracle, RunSettings(PROMPT, chat=False, k=k, max_tokens=n))
    steps = [e for e in session if isinstance(e, ev.StepEvent)]
    return steps, session.summary


@pytest.mark.parametrize("oracle", ["none", "prompt-lookup", "draft", "early-exit"])
def test_oracles_decode_on_the_compiled_path_what_they_decode_eagerly(
        eager, compiled, tiny_model_dir, oracle):
    from specviz.engines.backends.hf import TransformersBackend

    texts = []
    for target in (eager, compiled):
        target.reset()
        parts = {}
        if oracle == "draft":
            parts["draft"] = TransformersBackend(tiny_model_dir, device="cpu",
                                                 compile=target.compiled)
        if oracle == "early-exit":
            parts = {"target": target, "settings": {"exit_layer": 1}}
        _, summary = run(target, make_oracle(oracle, **parts), k=0 if oracle == "none"
                             else 5)
        if oracle in ("draft", "early-exit"):  # the random model repeats nothing to look up
            assert summary.totals.proposed > 0
        texts.append(summary.text)
    assert texts[0] == texts[1]


def test_a_rollback_far_back_swaps_the_cache_for_a_smaller_one_and_back(eager, compiled,
                                                                         monkeypatch):
    """Attention reads every slot: after a long context, a rollback (a new prompt) goes on in
    a smaller cache with what was kept copied in, and a long context again finds its first
    big cache (the same tensors: CUDA graphs recorded on them replay)."""
    from specviz.engines.backends import hf_compiled

    monkeypatch.setattr(hf_compiled, "MIN_CAPACITY", 16)
    small = compiled.share()
    eager.reset()

    def long_run():
        both(eager, small, lambda b: b.forward(list(range(3, 15)), "last"))
        for token in range(30):
            both(eager, small, lambda b, t=token: b.forward([t + 1, t + 2], 1))

    long_run()
    big, big_cache = small._kv.capacity, small._kv.cache
    assert big == 128
    for b in (eager, small):
        b.truncate(2)
    assert small._kv.capacity == 64  # 2 kept and a widest step (32) after them
    both(eager, small, lambda b: b.forward([5, 6, 7], "all"))  # the 2 kept slots came along
    for b in (eager, small):
        b.reset()
    long_run()
    assert small._kv.capacity == big and small._kv.cache is big_cache
    small.close()


def test_every_width_can_be_compiled_before_a_timed_step(compiled):
    from specviz.engines.backends import hf_compiled

    n_past = compiled.n_past
    compiled.prepare_widths()
    assert set(hf_compiled.WIDTHS) <= set(compiled._steps.compile_seconds)
    assert compiled.n_past == n_past  # on a scratch cache: the backend's own is untouched


@pytest.mark.parametrize("rows", [1, 5, 32])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_packed_grouped_query_attention_is_transformers_sdpa(rows, dtype):
    """Query heads packed into their key/value head's rows attend as transformers' SDPA does
    with the keys and values repeated per head: one row, a padded chain's rows, the widest
    graph's; a tree's mask (rows seeing different slots) included."""
    import types

    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from specviz.engines.backends import hf_compiled

    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    module = types.SimpleNamespace(num_key_value_groups=3, is_causal=True, training=False)
    query = torch.randn(1, 6, rows, 16, dtype=dt)
    key, value = (torch.randn(1, 2, 40, 16, dtype=dt) for _ in range(2))
    allowed = torch.rand(rows, 40) < 0.6
    allowed[:, 0] = True  # every row sees something
    mask = torch.zeros(1, 1, rows, 40, dtype=dt).masked_fill(~allowed, torch.finfo(dt).min)
    want, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
    got, _ = hf_compiled.packed_gqa_attention(module, query, key, value, mask, scaling=0.25)
    assert got.shape == want.shape == (1, rows, 6, 16)
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    torch.testing.assert_close(got, want, atol=tolerance, rtol=0)


@pytest.mark.parametrize("kind", ["cuda", None])
def test_on_cuda_the_graphs_are_captured_and_no_step_keeps_a_replays_buffer(eager, kind,
                                                                           monkeypatch):
    """A CUDA device (its kind given: nothing here runs CUDA) compiles with CUDA graph trees,
    starts a new generation before every step and hands out a copy of the graph's output
    buffer, which the next replay overwrites; the CPU model itself (no kind given) asks for
    neither and hands out what the graph returned (the whole decoder in one graph here: the
    CPU's runs of layers are the next test's)."""
    import torch

    from specviz.engines.backends import hf_compiled

    monkeypatch.setattr(hf_compiled, "RUN_LAYERS", 0)
    asked, steps_begun = [], []
    buffer = torch.arange(24.0).reshape(1, 4, 6)  # the captured graph's own output

    def fake_compile(fn, **options):
        asked.append(options)
        return lambda *args: buffer

    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin",
                        lambda: steps_begun.append(len(steps_begun)))
    steps = hf_compiled.CompiledSteps(eager.model, tell=lambda _: None, device_kind=kind)
    rows = [steps.rows(None, None, None, None, width=4) for _ in range(3)]
    if kind == "cuda":
        assert asked == [{"dynamic": None, "fullgraph": True, "mode": "reduce-overhead"}]
        assert steps_begun == [0, 1, 2]
        assert all(torch.equal(r, buffer) and r.data_ptr() != buffer.data_ptr() for r in rows)
        assert len({r.data_ptr() for r in rows}) == 3
    else:
        assert asked == [{"dynamic": None, "fullgraph": True}] and steps_begun == []
        assert all(r is buffer for r in rows)


def test_on_a_cpu_one_graph_runs_every_run_of_layers(eager, monkeypatch):
    """On a CPU the graph runs a few layers (dynamo traces those, not the decoder, at every
    start); the decoder's runs share it: one graph a width, whichever layer each run starts
    at, giving eager's rows. On CUDA the decoder stays one graph (one CUDA graph a step)."""
    import torch
    from torch._dynamo.utils import counters

    from specviz.engines.backends import hf_compiled

    assert [hf_compiled.run_length(n, "cpu") for n in (30, 24, 32, 7)] == [5, 4, 4, 1]
    assert hf_compiled.run_length(30, "cuda") is None
    monkeypatch.setattr(hf_compiled, "RUN_LAYERS", 1)  # the tiny model's 2 layers: 2 runs
    steps = hf_compiled.CompiledSteps(eager.model, tell=lambda _: None)
    assert steps.run == 1
    compiled_kv, eager_kv = (hf_compiled.StaticKV(eager.model, "cpu", eager.model.dtype, 256)
                             for _ in range(2))
    graphs = counters["stats"]["unique_graphs"]
    with torch.inference_mode():
        for n_past, tokens in ((0, [3]), (1, [4, 5, 6]), (4, [7])):
            got = hf_compiled.run_rows(steps, compiled_kv, tokens, n_past)
            want = hf_compiled.run_rows(steps, eager_kv, tokens, n_past, eager=True)
            np.testing.assert_allclose(got.numpy(), want.numpy(), atol=CLOSE, rtol=0)
    assert counters["stats"]["unique_graphs"] - graphs == 2  # widths 1 and 4, a graph each
    assert steps.ready(1) and steps.ready(4)


@pytest.mark.gpu
def test_on_the_card_the_cuda_graphs_give_eager_logits_and_hidden_rows(tiny_model_dir):
    """On CUDA (SPECVIZ_TEST_DEVICE=cuda; benchmarks/gpu/figures.py runs it there): chains,
    padded widths, a rollback, a tree and Medusa's hidden rows through the captured graphs
    equal eager decoding, and no graph fell back to launching kernels one by one."""
    from torch._dynamo.utils import counters

    from specviz.engines.backends.hf import TransformersBackend

    eager = TransformersBackend(tiny_model_dir, device="cuda", dtype="float32", compile="off")
    compiled = TransformersBackend(tiny_model_dir, device="cuda", dtype="float32",
                                   compile="on")
    assert compiled.compiled == "on" and compiled._steps.cuda_graphs
    skips = counters["inductor"]["cudagraph_skips"]
    for b in (eager, compiled):
        b.keep_hidden(True)
    prompt = eager.tokenize(PROMPT)
    same = functools.partial(both, eager, compiled, atol=CUDA_CLOSE)
    same(lambda b: b.forward(prompt, "last"))
    for _ in range(2):  # a graph is recorded on its second call and replayed after
        for token in (5, 17, 33):
            same(lambda b, t=token: b.forward([t]))
        same(lambda b: b.forward([7, 8, 9, 10, 11], "all"))
        for b in (eager, compiled):
            b.truncate(b.n_past - 3)
    held = [(eager.hidden_at(p), compiled.hidden_at(p)) for p in range(eager.n_past - 2,
                                                                          eager.n_past)]
    same(lambda b: b.forward_tree([1, 2, 3, 4, 5], [-1, 0, 0, 2, -1]))
    for b in (eager, compiled):
        b.keep_path([0, 2, 3])
    same(lambda b: b.forward([14]))
    for a, c in held:  # rows kept from an earlier replay, read after later replays
        assert a is not None and c is not None
        np.testing.assert_allclose(a.float().cpu().numpy(), c.float().cpu().numpy(),
                                   atol=CUDA_CLOSE, rtol=0)
    assert counters["inductor"]["cudagraph_skips"] == skips
    for b in (eager, compiled):
        b.close()


def test_a_shared_backend_has_a_static_cache_of_its_own(compiled):
    other = compiled.share()
    compiled.reset()
    compiled.forward([1, 2, 3])
    other.forward([4])
    assert other._kv is not compiled._kv and other.n_past == 1 and compiled.n_past == 3
    other.close()


def test_auto_races_once_and_the_next_load_takes_the_remembered_choice(tiny_model_dir,
                                                                        tmp_path, monkeypatch):
    """The race's choice follows its own times, and a second load of the model here races
    nothing. (Any round spread is taken as steady: this is about the memory, and the machine
    running the tests may be busy.)"""
    from specviz.engines.backends import compile_choice
    from specviz.engines.backends.hf import TransformersBackend

    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    monkeypatch.setattr(compile_choice, "ROUND_SPREAD", float("inf"))
    loads = [TransformersBackend(tiny_model_dir, device="cpu", compile="auto")]
    if not loads[0].compile_trial["remembered"]:  # it compiled: a read's cost is unknown
        assert loads[0].compile_trial["start_s"] is None
        loads.append(TransformersBackend(tiny_model_dir, device="cpu", compile="auto"))
    first = loads[-1]
    trial = first.compile_trial
    assert trial is not None and trial["remembered"] and trial["choice"] == first.compiled
    fast = compile_choice.pays(trial["eager_ms"], trial["compiled_ms"], trial["start_s"])
    assert first.compiled == ("on" if fast else "off")
    assert (first._steps is not None) == fast
    second = TransformersBackend(tiny_model_dir, device="cpu", compile="auto")
    assert second.compile_trial is None and second.compiled == first.compiled
    for b in (*loads, second):
        b.close()


def test_a_compile_choice_other_than_on_off_auto_is_one_line(tiny_model_dir):
    from specviz.engines.backends.hf import TransformersBackend

    with pytest.raises(SpecvizError, match="compile takes on, off, auto"):
        TransformersBackend(tiny_model_dir, device="cpu", compile="fast")


def test_unasked_the_steps_are_raced_on_cuda_and_eager_elsewhere(monkeypatch):
    from specviz.engines.backends import compile_choice, hf_compiled

    monkeypatch.delenv(hf_compiled.ENV, raising=False)
    assert compile_choice.asked_choice(None, "cuda") == "auto"
    assert compile_choice.asked_choice(None, "cuda:1") == "auto"
    assert compile_choice.asked_choice(None, "cpu") == "off"
    assert compile_choice.asked_choice(None, "mps") == "off"
    assert compile_choice.asked_choice("off", "cuda") == "off"
    monkeypatch.setenv(hf_compiled.ENV, "on")
    assert compile_choice.asked_choice(None, "cpu") == "on"


def child(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=600)


LOAD = """
import json
from specviz.engines.backends.hf import TransformersBackend
from torch._dynamo.utils import counters
b = TransformersBackend({folder!r}, device="cpu", compile="on")
print(json.dumps({{"compiled": b.compiled, "hits": counters["inductor"]["fxgraph_cache_hit"],
                  "misses": counters["inductor"]["fxgraph_cache_miss"]}}))
"""


def test_without_a_cpp_compiler_it_decodes_eagerly_saying_so_in_one_line(tiny_model_dir):
    code = LOAD.format(folder=str(tiny_model_dir))
    done = child(code, {"CXX": "/nonexistent/g++"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["compiled"] == "off"
    said = [line for line in done.stderr.splitlines() if "compile" in line]
    assert len(said) == 1 and "decoding eagerly" in said[0], done.stderr


def test_smollm2_decodes_compiled_what_it_decodes_eagerly(smollm2_path, smol_hf):
    """The real model (its GGUF, read by transformers) in float32: plain decoding and prompt
    lookup give eager's text (measured: identical over 128 tokens of a code edit)."""
    from specviz.engines.backends.hf import TransformersBackend

    compiled = TransformersBackend(smollm2_path, device="cpu", compile="on")
    prompt = "Rename x to count:\ndef f(x):\n    return x + x * 2\n"
    for oracle, k in (("none", 0), ("prompt-lookup", 3)):
        texts = []
        for backend in (smol_hf, compiled):
            backend.reset()
            session = Session(backend, make_oracle(oracle),
                              RunSettings(prompt, chat=True, k=k, max_tokens=24))
            for _ in session:
                pass
            texts.append(session.summary.text)
        assert texts[0] == texts[1], oracle
    compiled.close()
