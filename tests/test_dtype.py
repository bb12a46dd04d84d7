"""What the transformers backend computes in: chosen by the device's rule (bfloat16 where the
CPU multiplies it natively), named in the trace and the run's figures, overridden with
--dtype; speculation in bfloat16 stays lossless against plain decoding in bfloat16, or its
divergence is explained by the measured batched-vs-single noise."""

from __future__ import annotations

import json

import pytest

from specviz.app.cli.main import main
from specviz.engines import events as ev
from specviz.engines.backends.hf import TransformersBackend
from specviz.engines.bench.compare import check_against_plain
from specviz.engines.cost import profile as prof
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.machine.device_choice import DeviceFacts, model_dtype
from specviz.engines.oracles import make_oracle

CODE = ("def scale(values, factor):\n    return [v * factor for v in values]\n\n"
        "def scale(values, factor):\n    return [v * factor for v in values]\n")


def test_the_dtype_rule_per_backend_with_the_environment_over_it(monkeypatch):
    monkeypatch.delenv("SPECVIZ_DTYPE", raising=False)
    native, plain = DeviceFacts(cpu_bf16=True), DeviceFacts()
    assert model_dtype("transformers", "cpu", None, native) == "bfloat16"
    assert model_dtype("transformers", "cpu", "auto", plain) == "float32"
    assert model_dtype("transformers", "cpu", "float32", native) == "float32"
    assert model_dtype("llama", "cpu", "bfloat16", native) is None  # the GGUF's own types
    monkeypatch.setenv("SPECVIZ_DTYPE", "float32")
    assert model_dtype("transformers", "cpu", None, native) == "float32"
    assert model_dtype("transformers", "cpu", "bfloat16", native) == "bfloat16"  # asked wins


def test_speculation_in_bfloat16_is_lossless_or_explained_by_batch_noise(tiny_model_dir):
    backend = TransformersBackend(tiny_model_dir, device="cpu", dtype="bfloat16")
    assert backend.dtype == "bfloat16"
    settings = RunSettings(CODE, chat=False, k=0, max_tokens=32)
    plain = Session(backend, make_oracle("none"), settings)
    plain_steps = [e for e in plain if isinstance(e, ev.StepEvent)]
    for name in ("prompt-lookup", "lookahead"):
        spec = Session(backend, make_oracle(name), RunSettings(CODE, chat=False, k=4,
                                                               max_tokens=32))
        steps = [e for e in spec if isinstance(e, ev.StepEvent)]
        result = check_against_plain(backend, spec.prompt_ids, steps, plain_steps)
        assert result.identical or result.margin < result.tie_threshold, result.note


def test_run_names_its_dtype_and_takes_dtype_from_the_command_line(capsys, tiny_model_dir,
                                                                    tmp_path):
    trace = tmp_path / "t.jsonl"
    code = main(["run", "--target", str(tiny_model_dir), "--backend", "transformers",
                 "--dtype", "bfloat16", "--oracle", "prompt-lookup", "--k", "3",
                 "--max-tokens", "8", "--prompt", CODE, "--json", "--trace", str(trace)])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["dtype"] == "bfloat16"
    assert json.loads(trace.read_text().splitlines()[0])["dtype"] == "bfloat16"
    with pytest.raises(SystemExit):
        main(["run", "--dtype", "int3", "--prompt", "x"])


def test_a_profile_is_kept_per_dtype_and_fits_only_its_own(tiny_model_dir, monkeypatch,
                                                           tmp_path):
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    table = prof.Profile("m", "transformers", "cpu", 1, [64], [1, 2], [[1.0, 1.5]],
                         dtype="bfloat16")
    path = prof.save(table)
    assert path.name.endswith("--bfloat16.json")
    assert prof.load("m", "transformers", "cpu", 1) is None  # float32's is another file
    assert prof.load("m", "transformers", "cpu", 1, "bfloat16").dtype == "bfloat16"
    backend = TransformersBackend(tiny_model_dir, device="cpu", dtype="float32")
    older = prof.Profile("m", "transformers", "cpu", 1, [64], [1, 2], [[1.0, 1.5]],
                         small_rows=sorted(backend.small_rows))
    assert older.fits(backend)  # written before profiles named a dtype: float32
    assert not table.fits(backend)


def test_a_target_is_the_same_target_in_float32_and_bfloat16(tiny_model_dir):
    import torch

    from specviz.engines.machine.precision import Int8Copy
    from specviz.engines.medusa.heads import _rows_hash, lm_head_of, made_for, target_id

    f32 = TransformersBackend(tiny_model_dir, device="cpu", dtype="float32")
    b16 = TransformersBackend(tiny_model_dir, device="cpu", dtype="bfloat16")
    mine = target_id(f32.model, f32.model_path).fingerprint
    assert target_id(b16.model, b16.model_path).fingerprint == mine
    assert made_for(mine, b16.model) and made_for(mine, f32.model)
    older = _rows_hash(lm_head_of(f32.model).weight.detach(), torch.float16)  # before bf16 loads
    assert made_for(older, f32.model) and not made_for("0" * 16, f32.model)
    # int8 drafting takes float32 activations: a bfloat16 head drafts as it is
    head = lm_head_of(b16.model)
    assert Int8Copy(head).pick(True, "cpu") is head
