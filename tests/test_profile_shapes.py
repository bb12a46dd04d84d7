"""A stored cost profile of the wrong shape is never used: whoever reads it says in one line
why not, and where a profile is needed it is measured again. A profile measured where it
cannot be stored is still used, with one line saying so. The bad files are made as a person
or an older specviz would leave them; the stores fail for real (a read-only folder, a file
where the folder should be)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from steady_timing import steady_forwards
from write_faults import files_in, specviz

from specviz.app.cli.main import main
from specviz.engines.cost import profile as prof
from specviz.engines.host.k_policy import k_policy
from specviz.engines.host.run_spec import LaneSpec, ModelChoice
from specviz.engines.oracles import make_oracle

GOOD = {"model": "m", "backend": "llama", "device": "cpu", "threads": None,
        "contexts": [16, 64], "batches": [1, 2], "ms": [[1.0, 1.5], [1.2, 1.8]],
        "repeats": 1, "created": 0.0, "machine": {}, "version": prof.PROFILE_VERSION,
        "small_rows": [], "dtype": None}


def changed(**fields) -> dict:
    return {**GOOD, **fields}


def without(key: str) -> dict:
    return {k: v for k, v in GOOD.items() if k != key}


BAD = {  # what is stored -> a word the line must hold
    "string version": (changed(version="3"), "version"),
    "old version": (changed(version=2), "older specviz"),
    "no version": (without("version"), "'version'"),
    "string timing": (changed(ms=[["1.0", 1.5], [1.2, 1.8]]), "'1.0'"),
    "null timing": (changed(ms=[[None, 1.5], [1.2, 1.8]]), "None"),
    "boolean timing": (changed(ms=[[True, 1.5], [1.2, 1.8]]), "True"),
    "NaN timing": (changed(ms=[[math.nan, 1.5], [1.2, 1.8]]), "NaN"),
    "infinite timing": (changed(ms=[[math.inf, 1.5], [1.2, 1.8]]), "Infinity"),
    "negative timing": (changed(ms=[[-1.0, 1.5], [1.2, 1.8]]), "-1.0"),
    "zero timing": (changed(ms=[[0, 1.5], [1.2, 1.8]]), "0"),
    "empty axes": (changed(contexts=[], batches=[], ms=[]), "contexts"),
    "empty batches": (changed(batches=[], ms=[[], []]), "batches"),
    "string axis": (changed(batches=[1, "2"]), "'2'"),
    "unsorted axis": (changed(contexts=[64, 16]), "increasing"),
    "short row": (changed(ms=[[1.0], [1.2, 1.8]]), "batch sizes"),
    "missing row": (changed(ms=[[1.0, 1.5]]), "contexts"),
    "no timings": (without("ms"), "'ms'"),
    "threads text": (changed(threads="4"), "threads"),
    "model null": (changed(model=None), "model"),
    "a list": ([GOOD], "list"),
    "not JSON": ('{"version": 3, "ms": [[1', "not valid JSON"),
    "not UTF-8": (b"\xff\xfe{}", "not UTF-8"),
    "nested deep": ("[" * 2000 + "]" * 2000, "nested more than 64 levels"),
    "a number past a double": ('{"version": 1e999999}', "out of range"),
}


def store(path: Path, content) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A SPECVIZ_HOME of this test's own, the cached models linked into it."""
    from specviz.engines.models import cache_dir

    models = cache_dir().resolve()
    home = tmp_path / "home"
    home.mkdir()
    (home / "models").symlink_to(models, target_is_directory=True)
    monkeypatch.setenv("SPECVIZ_HOME", str(home))
    return home


def test_a_whole_profile_loads(home):
    store(prof.profile_path("m", "llama", "cpu", None), GOOD)
    said: list[str] = []
    profile = prof.load("m", "llama", "cpu", None, say=said.append)
    assert profile is not None and profile.ms == GOOD["ms"] and not said


@pytest.mark.parametrize("case", BAD)
def test_a_profile_of_the_wrong_shape_is_not_used_and_said_once(home, case):
    content, word = BAD[case]
    path = prof.profile_path("m", "llama", "cpu", None)
    store(path, content)
    said: list[str] = []
    assert prof.load("m", "llama", "cpu", None, say=said.append) is None
    assert len(said) == 1 and str(path) in said[0] and word in said[0], said
    assert "\n" not in said[0]


def specviz_lines(stderr: str) -> list[str]:
    """The child's own lines (tqdm's bar redraws with carriage returns in between)."""
    lines = [part.strip() for line in stderr.splitlines() for part in line.split("\r")]
    assert not any(line.startswith("Traceback") for line in lines), stderr
    return [line for line in lines if line.startswith("specviz:")]


PROFILE = ["profile", "--device", "cpu", "--batches", "1,2", "--contexts", "16",
           "--repeats", "1", "--json"]


@pytest.mark.parametrize("case", ["string version", "null timing", "NaN timing"])
def test_specviz_profile_measures_a_bad_profile_again(home, smollm2_path, case, capsys,
                                                      monkeypatch):
    steady_forwards(monkeypatch)  # stored at once, however busy the machine is
    content, word = BAD[case]
    bad = {**content, "batches": [1, 2], "contexts": [16]} if isinstance(content, dict) \
        else content
    if isinstance(bad, dict) and isinstance(bad.get("ms"), list):
        bad["ms"] = bad["ms"][:1]
    path = prof.profile_path(str(smollm2_path), "llama", "cpu", None)
    store(path, bad)
    assert main([*PROFILE, "--target", str(smollm2_path)]) == 0
    out = capsys.readouterr()
    lines = specviz_lines(out.err)
    assert len(lines) == 1 and "measuring it again" in lines[0] and word in lines[0], lines
    measured = json.loads(out.out)[0]
    assert measured["version"] == prof.PROFILE_VERSION
    assert all(math.isfinite(ms) and ms > 0 for row in measured["ms"] for ms in row)
    assert prof.load(str(smollm2_path), "llama", "cpu", None).ms == measured["ms"]


def test_a_profile_measured_into_a_read_only_folder_is_shown_and_not_lost(home,
                                                                            smollm2_path):
    folder = home / "profiles"
    folder.mkdir()
    os.chmod(folder, 0o555)
    before = files_in(folder)
    done = specviz(*PROFILE, "--target", smollm2_path, read_only=True, timeout=180)
    os.chmod(folder, 0o755)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = specviz_lines(done.stderr)
    assert len(lines) == 1 and "not stored" in lines[0] and str(folder) in lines[0], lines
    assert json.loads(done.stdout)[0]["ms"]  # this run's measurement, shown all the same
    assert files_in(folder) == before


def test_auto_k_measures_again_and_goes_on_where_it_cannot_store(home, tiny_backend,
                                                                tiny_model_dir, monkeypatch):
    """The window's and `run --k auto`'s path: a folder stands where the profile should be,
    so it can neither be read nor replaced. It is measured again, said in one line; that the
    measurement cannot be stored is one line more; the run has its policy all the same.
    (Its times given: a busy-looking one would not be stored for that reason first.)"""
    steady_forwards(monkeypatch)
    model = ModelChoice(str(tiny_model_dir), "transformers", "cpu", None)
    path = prof.profile_path(model.target, "transformers", tiny_backend.device, None,
                             tiny_backend.dtype)
    store(path / "kept.txt", "a person's file")
    said: list[str] = []
    policy = k_policy(LaneSpec("prompt-lookup", auto_k=True), model,
                      make_oracle("prompt-lookup"), tiny_backend, None, say=said.append)
    assert policy is not None
    again = [line for line in said if line.startswith("measuring")]
    assert len(again) == 1 and "not usable" in again[0] and str(path) in again[0], said
    kept = [line for line in said if "not stored" in line]
    assert len(kept) == 1 and str(path) in kept[0], said
    assert (path / "kept.txt").read_text() == "a person's file"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


def test_every_core_asked_as_auto_or_by_count_is_one_profile(home):
    """The command line's default (None) and a window asking for every core by count run
    on the same threads: one profile, not one measured for each."""
    from specviz.engines.machine.hardware import compute_threads

    store(prof.profile_path("m", "llama", "cpu", compute_threads()), GOOD)
    assert prof.load("m", "llama", "cpu", None) is not None
    assert prof.profile_path("m", "llama", "cpu", None) == prof.profile_path(
        "m", "llama", "cpu", compute_threads())


def test_a_profile_stored_under_tauto_before_is_read_for_every_core_only(home):
    from specviz.engines.machine.hardware import compute_threads

    every = compute_threads()
    path = prof.profile_path("m", "llama", "cpu", every)
    store(path.with_name(path.name.replace(f"--t{every}", "--tauto")), GOOD)
    assert prof.load("m", "llama", "cpu", None) is not None
    assert prof.load("m", "llama", "cpu", every) is not None
    assert prof.load("m", "llama", "cpu", every + 1) is None


def test_the_windows_cost_curve_names_the_threads_of_a_profile_of_every_core(home):
    """A profile measured with threads as auto (None) is every core's: the window's label
    says how many, never "None threads"."""
    from specviz.app.state.run_setup import gui_threads, profile_costs
    from specviz.engines.host.run_spec import ModelChoice

    store(prof.profile_path("m", "llama", "cpu", gui_threads()), GOOD)
    _, label, found = profile_costs(ModelChoice("m", "llama", "cpu", gui_threads()))
    n = gui_threads()
    assert found and f"{n} thread{'s' if n != 1 else ''}," in label and "None" not in label
