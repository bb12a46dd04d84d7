"""`specviz doctor` keeps its backend probes (engines/doctor_probes.py): reused while specviz,
the backend's build, the CPU and the model are the same, probed again with --refresh or when
one changes, and a file that cannot be used is said in one line and replaced."""

from __future__ import annotations

import json

import pytest

from specviz.engines import doctor, doctor_probes
from specviz.engines.backends import probe


class Runner:
    """The child process's probe, counted: each backend's answer as the test sets it."""

    def __init__(self, outcome: str = "ok") -> None:
        self.outcome, self.calls = outcome, []

    def __call__(self, backend: str, model: str, device: str) -> probe.ProbeResult:
        self.calls.append(backend)
        return probe.ProbeResult(backend, device, self.outcome, model=model, stage="done",
                                 load_s=1.5, one_ms=20.0, batch_ms=40.0, batch_agrees=True,
                                 max_logit_diff=0.001, build=probe.build_id(backend))


@pytest.fixture
def facts(tmp_path, monkeypatch):
    """A machine with both backends and the probe model; the probe cache of the tests' own."""
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(probe, "cache_path", lambda: tmp_path / "probes.json")
    model = tmp_path / "smollm2.gguf"
    model.write_bytes(b"GGUF")
    return {"models": [{"name": doctor.PROBE_MODEL, "present": True, "path": str(model)}],
            "llama": {"installed": True}, "torch": {"installed": True}}


def probed(facts, runner, refresh=False) -> tuple[list[dict], list[str]]:
    said: list[str] = []
    return doctor.probe_backends(facts, said.append, refresh, runner=runner), said


def test_a_second_doctor_reuses_the_probes_and_says_from_when(facts):
    runner = Runner()
    first, _ = probed(facts, runner)
    assert runner.calls == ["llama", "transformers"]
    assert all("kept_at" not in r for r in first)
    again, said = probed(facts, runner)
    assert runner.calls == ["llama", "transformers"] and said == []
    assert [r["one_ms"] for r in again] == [20.0, 20.0]
    line = doctor._probe_line(again[0])
    assert "probed " in line and "kept for this build (--refresh probes again)" in line
    assert doctor_probes.when(again[0]["kept_at"]) in line


def test_refresh_probes_again(facts):
    runner = Runner()
    probed(facts, runner)
    fresh, said = probed(facts, runner, refresh=True)
    assert runner.calls == ["llama", "transformers"] * 2
    assert all("kept_at" not in r for r in fresh) and len(said) == 2


def test_a_rebuilt_backend_alone_is_probed_again(facts, monkeypatch):
    runner = Runner()
    probed(facts, runner)
    build = probe.build_id
    monkeypatch.setattr(probe, "build_id", lambda b: build(b) + " rebuilt" if b == "llama"
                        else build(b))
    results, _ = probed(facts, runner)
    assert runner.calls == ["llama", "transformers", "llama"]
    assert "kept_at" not in results[0] and "kept_at" in results[1]


def test_the_key_is_specviz_the_build_the_machine_and_the_model(facts, monkeypatch):
    import specviz

    model = facts["models"][0]["path"]
    key = doctor_probes.probe_key("llama", model)
    assert key["specviz"] == specviz.__version__
    assert key["build"] == probe.build_id("llama")
    assert key["machine"] == probe.current_key("llama", None)
    monkeypatch.setattr(specviz, "__version__", "9.9.9")
    assert doctor_probes.probe_key("llama", model) != key
    monkeypatch.undo()
    with open(model, "ab") as f:
        f.write(b"more")  # the model fetched again, another file
    assert doctor_probes.probe_key("llama", model) != key


@pytest.mark.parametrize("outcome", ["crash", "error", "killed", "timeout"])
def test_only_a_probe_that_worked_is_kept(facts, outcome):
    """A crash is what the user is fixing (its line says doctor probes again); the others
    are the file's or the moment's."""
    runner = Runner(outcome)
    probed(facts, runner)
    probed(facts, runner)
    assert runner.calls == ["llama", "transformers"] * 2


@pytest.mark.parametrize("content", [
    b"{not json",
    b"\xff\xfe",
    b"[1, 2]",
    json.dumps({"llama": {"key": {}, "at": "yesterday", "result": {}}}).encode(),
    json.dumps({"llama": {"key": {}, "at": 1.0, "result": {"backend": "llama",
                                                            "outcome": "ok", "load_s": "x"}}})
    .encode(),
    json.dumps({"llama": {"key": {}, "at": 1.0, "result": {"backend": "llama",
                                                            "outcome": "crash"}}}).encode(),
    b" " * (doctor_probes.MAX_BYTES + 1),
])
def test_a_file_that_cannot_be_used_is_said_once_and_replaced(facts, content):
    path = doctor_probes.cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    runner = Runner()
    _, said = probed(facts, runner)
    assert runner.calls == ["llama", "transformers"]
    assert len([s for s in said if "ignoring the kept probes" in s]) == 1
    assert set(json.loads(path.read_text())) == {"llama", "transformers"}
    probed(facts, runner)
    assert runner.calls == ["llama", "transformers"]  # the replacement serves


def test_a_folder_in_the_files_place_is_said_and_probing_goes_on(facts):
    doctor_probes.cache_path().mkdir(parents=True)
    runner = Runner()
    results, said = probed(facts, runner)
    assert len(results) == 2
    assert "not a regular file" in said[0]
    assert any("cannot keep the probes" in s for s in said)


def test_the_file_is_in_the_specviz_home(facts, tmp_path):
    assert doctor_probes.cache_path() == tmp_path / "home" / doctor_probes.FILE_NAME
