"""On a CPU that multiplies bfloat16, `--dtype auto` races bfloat16 against float32 once per
model and keeps the faster by a margin (cpu_dtype.py): the flags alone picked bfloat16 where
it made smollm2-135m 0.85-0.93x as fast. The rules get the timings injected; the race itself
runs on the tiny model."""

from __future__ import annotations

import pytest

from specviz.engines.backends import cpu_dtype
from specviz.engines.backends.hf import TransformersBackend
from specviz.engines.machine import device_choice
from specviz.engines.machine.device_choice import DeviceFacts, model_dtype

NATIVE = DeviceFacts(cpu_bf16=True)


def test_bfloat16_is_kept_only_where_it_wins_by_the_margin():
    assert cpu_dtype.pick(32.9, 34.8) == "float32"  # smollm2 on an AVX-512 BF16 EPYC
    assert cpu_dtype.pick(85.0, 80.0) == "float32"  # 6% is not worth bfloat16's rounding
    assert cpu_dtype.pick(62.0, 45.3) == "bfloat16"  # the 0.5B on another: 1.37x
    assert cpu_dtype.pick(10.0, 9.0) == "bfloat16"  # at the margin


def test_a_tokens_cost_at_full_depth_from_two_depths():
    assert cpu_dtype.full_depth_ms({1: 5.0, 5: 9.0}, 30) == pytest.approx(34.0)  # 4 + 30 x 1
    assert cpu_dtype.full_depth_ms({5: 9.0, 1: 5.0}, 1) == pytest.approx(5.0)
    # noise that makes the deeper copy look cheaper prices a layer at nothing, not below
    assert cpu_dtype.full_depth_ms({1: 5.0, 5: 4.0}, 30) == pytest.approx(5.0)



def test_a_large_models_copy_is_kept_shallow():
    assert cpu_dtype.depths(None) == cpu_dtype.DEPTHS
    assert cpu_dtype.depths(3_540_000) == (1, 5)  # a smollm2-135m layer
    assert cpu_dtype.depths(46_800_000) == (1, 5)  # Qwen2.5-1.5B's
    assert cpu_dtype.depths(202_000_000) == (1, 2)  # a Llama-7B layer: two, not five

def test_only_an_unasked_dtype_on_a_native_cpu_is_raced(monkeypatch):
    monkeypatch.delenv("SPECVIZ_DTYPE", raising=False)
    assert cpu_dtype.racing("cpu", None, True)
    assert cpu_dtype.racing("cpu", "auto", True)
    assert not cpu_dtype.racing("cpu", None, False)  # emulated bfloat16: float32 by rule
    assert not cpu_dtype.racing("cpu", "bfloat16", True)
    assert not cpu_dtype.racing("cuda", None, True)
    monkeypatch.setenv("SPECVIZ_DTYPE", "float32")
    assert not cpu_dtype.racing("cpu", None, True)


def test_the_measured_choice_is_the_cpu_rule_and_asked_wins(monkeypatch):
    monkeypatch.delenv("SPECVIZ_DTYPE", raising=False)
    assert model_dtype("transformers", "cpu", None, NATIVE) == "bfloat16"  # not raced yet
    assert model_dtype("transformers", "cpu", None, NATIVE, "float32") == "float32"
    assert model_dtype("transformers", "cpu", "bfloat16", NATIVE, "float32") == "bfloat16"
    assert model_dtype("transformers", "cpu", None, DeviceFacts(), "bfloat16") == "float32"
    cuda = DeviceFacts(cuda=True, cuda_bf16=True)
    assert model_dtype("transformers", "cuda", None, cuda, "float32") == "bfloat16"


def test_a_choice_is_remembered_per_model_and_thread_count(tmp_path):
    store = tmp_path / "cpu-dtype.json"
    model = tmp_path / "model.gguf"
    assert cpu_dtype.remembered(store, model, 2) is None
    cpu_dtype.remember(store, model, 2, {"dtype": "float32", "float32_ms": 1.0,
                                         "bfloat16_ms": 2.0})
    assert cpu_dtype.remembered(store, model, 2) == "float32"
    assert cpu_dtype.remembered(store, model, 4) is None
    assert cpu_dtype.remembered(store, tmp_path / "other.gguf", 2) is None
    store.write_text("{not json")
    assert cpu_dtype.remembered(store, model, 2) is None  # a broken store: raced again


def test_the_backend_races_once_and_loads_the_winner_after(tiny_model_dir, tmp_path,
                                                           monkeypatch):
    monkeypatch.delenv("SPECVIZ_DTYPE", raising=False)
    # A tiny model's steps take a millisecond: beside other tests its rounds may disagree,
    # and whether a race is trusted is the next tests' question.
    monkeypatch.setattr(cpu_dtype, "steady", lambda *rounds: True)
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(device_choice.DeviceFacts, "read", classmethod(lambda cls: NATIVE))
    first = TransformersBackend(tiny_model_dir, device="cpu")
    trial = first.dtype_trial
    assert trial and trial["dtype"] in ("float32", "bfloat16")
    assert first.dtype == trial["dtype"]
    assert trial["float32_ms"] > 0 and trial["bfloat16_ms"] > 0
    assert str(first.model.dtype).removeprefix("torch.") == trial["dtype"]
    assert cpu_dtype.remembered_for(str(tiny_model_dir), None) == trial["dtype"]
    assert cpu_dtype.remembered_for(str(tiny_model_dir), 3) is None  # other threads asked
    again = TransformersBackend(tiny_model_dir, device="cpu")
    assert again.dtype_trial is None and again.dtype == trial["dtype"]
    asked = TransformersBackend(tiny_model_dir, device="cpu", dtype="float32")
    assert asked.dtype_trial is None and asked.dtype == "float32"


def test_a_run_says_the_race_its_probe_ran(tmp_path, monkeypatch):
    """A command's first use of a model races in the probe's child process; the run then
    finds the choice remembered and raced nothing itself, yet it says the race (and its JSON
    carries it, as a race in the run's own process reads). Not a race from before the
    command, nor one whose dtype the run does not compute in (a dtype asked)."""
    import argparse
    import time
    from types import SimpleNamespace

    from specviz.app.cli.cmd_run import _dtype_trial

    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    monkeypatch.delenv("SPECVIZ_DTYPE", raising=False)
    model = tmp_path / "m.gguf"

    def target(dtype="float32", name="transformers"):
        return SimpleNamespace(name=name, model_path=model, dtype_trial=None, device="cpu",
                               dtype=dtype)

    began = time.time() - 1

    def asked(threads=None, dtype="auto", began=began):
        return argparse.Namespace(threads=threads, dtype=dtype, began=began)

    cpu_dtype.remember(cpu_dtype.store_path(), model, None,
                       {"dtype": "float32", "float32_ms": 30.0, "bfloat16_ms": 35.0})
    said = _dtype_trial(asked(), target())
    assert said == {"dtype": "float32", "float32_ms": 30.0, "bfloat16_ms": 35.0, "steady": True}
    assert "35.0 ms in bfloat16" in cpu_dtype.trial_line(said)
    assert _dtype_trial(asked(threads=2), target()) is None
    assert _dtype_trial(asked(began=time.time() + 1), target()) is None
    assert _dtype_trial(asked(dtype="bfloat16"), target("bfloat16")) is None
    assert _dtype_trial(asked(), target("bfloat16")) is None  # not what this run computes in
    monkeypatch.setenv("SPECVIZ_DTYPE", "float32")
    assert _dtype_trial(asked(), target()) is None
    monkeypatch.delenv("SPECVIZ_DTYPE")
    assert _dtype_trial(asked(), target(name="llama")) is None


def test_a_race_beside_other_work_is_not_trusted():
    """A newcomer's first race ran beside a compile: float32 354 ms, bfloat16 81 ms, more
    apart than halving the bytes read can make them."""
    assert cpu_dtype.steady([30.0, 31.0, 29.5], [35.0, 36.0, 34.0])
    assert cpu_dtype.steady([60.0, 61.0, 62.0], [40.0, 42.0, 41.0])  # bfloat16 1.5x faster
    assert not cpu_dtype.steady([354.0, 340.0, 360.0], [81.0, 85.0, 80.0])
    assert not cpu_dtype.steady([30.0, 55.0, 31.0], [35.0, 36.0, 34.0])  # a round disturbed
    assert "not remembered" in cpu_dtype.trial_line(
        {"dtype": "bfloat16", "float32_ms": 354.0, "bfloat16_ms": 81.0, "steady": False})


def test_an_unsteady_race_is_used_but_not_remembered(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("SPECVIZ_DTYPE", raising=False)
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(device_choice.DeviceFacts, "read", classmethod(lambda cls: NATIVE))
    busy = {"dtype": "bfloat16", "float32_ms": 354.0, "bfloat16_ms": 81.0, "steady": False}
    monkeypatch.setattr(cpu_dtype, "measure", lambda *a, **k: dict(busy))
    backend = TransformersBackend(tiny_model_dir, device="cpu")
    assert backend.dtype == "bfloat16" and backend.dtype_trial == busy
    assert cpu_dtype.remembered_for(str(tiny_model_dir), None) is None  # raced again next time


def test_weights_cast_after_loading_are_the_model_loaded_in_that_dtype(tiny_model_dir):
    """The race loads float32 and casts the winner, and a GGUF always loads in float32: the
    rotary embedding's float32 frequencies must stay float32, as from_pretrained keeps them
    (model.to(bfloat16) rounded them: logits 0.004 apart on a one-layer Llama)."""
    import torch
    from transformers import AutoModelForCausalLM

    from specviz.engines.backends.hf_load import cast_weights

    asked = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    cast = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    cast_weights(cast, torch.bfloat16)
    assert dict((n, b.dtype) for n, b in cast.named_buffers()) == dict(
        (n, b.dtype) for n, b in asked.named_buffers())
    ids = torch.arange(1, 200).remainder(asked.config.vocab_size - 1)[None] + 1
    with torch.inference_mode():
        assert torch.equal(asked(ids).logits, cast(ids).logits)


def test_modules_an_architecture_keeps_in_float32_stay_float32(tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    from specviz.engines.backends.hf_load import cast_weights

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model._keep_in_fp32_modules = ["norm"]
    cast_weights(model, torch.bfloat16)
    dtypes = {name: p.dtype for name, p in model.named_parameters()}
    assert dtypes["model.norm.weight"] == torch.float32
    assert dtypes["model.embed_tokens.weight"] == torch.bfloat16
