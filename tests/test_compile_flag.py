"""`specviz run --compile on|off|auto` reaches the transformers backend: the trace's header
says how the steps ran, the flag wins over SPECVIZ_COMPILE, and auto races and remembers."""

from __future__ import annotations

import os

import pytest

from specviz.app.cli.main import main
from specviz.engines.backends import compile_choice, hf_compiled
from specviz.engines.machine.json_file import read_dict
from specviz.engines.trace import read_trace


@pytest.fixture(autouse=True)
def _compiled_code_kept_between_runs(monkeypatch, tmp_path):
    """Compiled code from the user's specviz cache (as tests/test_hf_compiled.py keeps it),
    races remembered in this test's own home."""
    from specviz.engines.models import home_dir

    real = (home_dir("cache") / "models").resolve().parent
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.environ.get(
        "TORCHINDUCTOR_CACHE_DIR", str(real / "compile")))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "models").symlink_to(home_dir("cache") / "models")
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path / "home"))


def ran_with(tiny_model_dir, tmp_path, *flag: str) -> str:
    trace = tmp_path / f"run{'-'.join(flag)}.jsonl"
    code = main(["run", "--target", str(tiny_model_dir), "--backend", "transformers",
                 "--device", "cpu", "--dtype", "float32", "--no-chat", "--prompt",
                 "def add(a, b):", "--max-tokens", "4", "--k", "2", "--oracle", "prompt-lookup",
                 "--json", "--trace", str(trace), *flag])
    assert code == 0
    return read_trace(trace).header["compile"]


@pytest.mark.parametrize("asked, env", [("on", "off"), ("off", "on")])
def test_on_and_off_are_taken_over_the_environment(asked, env, tiny_model_dir, tmp_path,
                                                   monkeypatch):
    monkeypatch.setenv(hf_compiled.ENV, env)
    assert ran_with(tiny_model_dir, tmp_path, "--compile", asked) == asked


def test_auto_races_and_runs_the_way_it_chose(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(compile_choice, "ROUND_SPREAD", float("inf"))  # a busy machine too
    ran = ran_with(tiny_model_dir, tmp_path, "--compile", "auto")
    [race] = read_dict(compile_choice.store_path()).values()
    assert race["choice"] == ran and ran in ("on", "off")


def test_another_choice_is_argparses_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["run", "--prompt", "x", "--compile", "fast"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1 and "--compile" in err[0], err
