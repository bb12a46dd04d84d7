"""The suffix memory under faults: nothing it holds is lost, nothing that is not one is touched.

A path given as memory that is not one is refused with one line and left as it was; a torn
or corrupt memory keeps every run it holds (what is dropped is kept in a numbered copy); a
read-only folder or a full disk lets the run go on, said in one line, the file as it was.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from write_faults import files_in, specviz

from specviz.app.cli.main import main
from specviz.engines.errors import SpecvizError
from specviz.engines.oracles import memory_file
from specviz.engines.oracles.suffix_memory import SuffixMemory, memory_path, owner_of


def line(label: str, tokens: list[int]) -> str:
    return json.dumps({"run": label, "tokens": tokens}, separators=(",", ":")) + "\n"


A, B, C = line("a", [1, 2]), line("b", [3, 4]), line("c", [5, 6])


def run_args(target: Path, *extra: object) -> list[str]:
    # A thread count given: stderr holds only what the memory says, never a note that other
    # work (the suite's other worker) took a core while the run decoded. The target is the
    # tiny GGUF (llama.cpp, picked by its format): what the memory does is the same on either
    # backend, and a child on it starts in a second, not the seconds torch takes to import.
    return ["run", "--target", str(target), "--threads", "1", "--no-chat", "--prompt",
            "def add(a, b):", "--max-tokens", "8", "--k", "4", "--oracle", "suffix", "--json",
            *map(str, extra)]


# ---------------------------------------------------------------- not a memory: refused


def _folder(path: Path) -> None:
    path.mkdir()
    (path / "inside.txt").write_text("mine")


@pytest.mark.parametrize("make", [
    _folder,
    lambda p: p.write_text("a person's notes\nsecond line\n"),
    lambda p: p.write_bytes(bytes(range(256)) * 8),
    lambda p: p.write_text(json.dumps({"runs": [{"run": "a", "tokens": [1]}]})),
    lambda p: p.write_text("[1, 2, 3]\n"),
    lambda p: p.write_text(json.dumps({"run": "a", "tokens": [1]}, indent=1)),  # not JSONL
    lambda p: p.write_text('{"run": "a", "tokens": "1 2"}\n'),
    lambda p: (p.write_text(A), __import__("os").truncate(p, memory_file.MAX_BYTES + 1)),
], ids=["folder", "text", "binary", "json-object", "json-array", "json-pretty", "wrong-types",
        "too-large"])
def test_a_path_that_is_not_a_memory_is_refused_untouched(make, capsys, tiny_gguf_path,
                                                          tmp_path):
    path = tmp_path / "given"
    make(path)
    before = files_in(tmp_path)
    code = main(run_args(tiny_gguf_path, "--suffix-memory", path))
    out, err = capsys.readouterr()
    assert code == 2 and out == "", err
    assert err.startswith(f"specviz: {path} cannot be a suffix memory")
    assert len(err.strip().splitlines()) == 1, err
    assert files_in(tmp_path) == before  # not renamed, not written, no lock file beside it


# ---------------------------------------------------------------- a memory: every run kept


@pytest.mark.parametrize("content, runs, after, copies", [
    ("", [], "", 0),
    (A + B + '{"run":"c","tok', ["a", "b"], A + B, 0),  # torn: no newline
    (A + B + '{"run":"c","tokens":[5,\n', ["a", "b"], A + B, 0),  # torn: does not parse
    (A + "\0\0\0\0\n", ["a"], A, 0),  # a crash's zeros at the end
    ('{"run":"a","to', [], "", 0),  # the first run cut off
    (A + "garbage\n" + B + '{"run": 7}\n' + C, ["a", "b", "c"], A + B + C, 1),
    (A + "garbage\n" + B + '{"run":"c"', ["a", "b"], A + B, 1),
    ("garbage\n" + A, ["a"], A, 1),
    (A + "[" * 100_000 + "]" * 100_000 + "\n" + B, ["a", "b"], A + B, 1),
    (A + '{"run":"x","tokens":[' + "9" * 5000 + "]}\n" + B, ["a", "b"], A + B, 1),
], ids=["empty", "torn", "torn-unparsed", "torn-zeros", "torn-first", "corrupt-middle",
        "corrupt-and-torn", "corrupt-first", "nested-deep", "huge-number"])
def test_a_torn_or_corrupt_memory_keeps_every_run(content, runs, after, copies, tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(content.encode())
    memory = SuffixMemory.open(path)
    assert [r.label for r in memory.runs] == runs
    assert path.read_text() == after  # whole lines only: the next append starts a line
    kept = sorted(tmp_path.glob("m.jsonl.corrupt-*"))
    assert len(kept) == copies and all(k.read_bytes() == content.encode() for k in kept)
    assert (memory.problem is None) == (content == after)
    memory.add([7, 8], "d")
    assert [r.label for r in SuffixMemory.open(path).runs] == [*runs, "d"]


def test_each_corruption_is_kept_in_a_copy_of_its_own(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(A + "first damage\n" + B)
    SuffixMemory.open(path)
    path.write_text(A + B + "second damage\n" + C)
    memory = SuffixMemory.open(path)
    assert [r.label for r in memory.runs] == ["a", "b", "c"]
    assert (tmp_path / "m.jsonl.corrupt-1").read_text() == A + "first damage\n" + B
    assert (tmp_path / "m.jsonl.corrupt-2").read_text() == A + B + "second damage\n" + C
    assert "m.jsonl.corrupt-2" in memory.problem
    assert "(line 3: not valid JSON" in memory.problem  # the first unreadable line, named


def test_the_models_own_memory_that_holds_no_run_is_set_aside_not_refused():
    """The cache's file is specviz's: one that is not a memory any more is kept, numbered,
    and a new one begun (a suffix lane is never stopped by it)."""
    path = memory_path("own-test.gguf", 123)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x00" * 100)
    memory = SuffixMemory.open(path)
    assert memory.runs == [] and "begun anew" in memory.problem and not path.exists()
    assert path.with_name(path.name + ".corrupt-1").read_bytes() == b"\x00" * 100


# ---------------------------------------------------------------- read-only, full disk


@pytest.mark.parametrize("where", ["home", "given"])
def test_a_read_only_memory_is_read_and_the_run_goes_on_unsaved(where, tiny_gguf_path,
                                                               tmp_path):
    """A memory in a read-only folder (SPECVIZ_HOME, or a path given): read, one line that
    the run is not saved, exit 0, every file as it was."""
    home = tmp_path / "home"
    home.mkdir()
    given = [] if where == "home" else ["--suffix-memory", home / "m.jsonl"]
    env = {"SPECVIZ_HOME": str(home)}
    first = specviz(*run_args(tiny_gguf_path, *given), env=env)
    assert first.returncode == 0, first.stderr
    for p in [home, *home.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    before = files_in(home)
    try:
        done = specviz(*run_args(tiny_gguf_path, *given), env=env, read_only=True)
        after = files_in(home)
    finally:
        for p in [home, *home.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
    assert done.returncode == 0 and json.loads(done.stdout)["tokens"] == 8, done.stderr
    assert done.stderr.count("specviz:") == 1, done.stderr
    assert "the suffix memory could not be saved: Permission denied" in done.stderr
    assert "Traceback" not in done.stderr and after == before


def test_a_full_disk_while_saving_leaves_whole_runs_and_the_next_run_reads_them(
        tiny_gguf_path, tmp_path):
    from specviz.engines.backends.llama import LlamaBackend

    path = tmp_path / "m.jsonl"
    backend = LlamaBackend(tiny_gguf_path, n_ctx=64, threads=1)
    try:
        named = memory_file.owner_line(owner_of(backend)).decode()  # as a run begins one
    finally:
        backend.close()
    # 3000 tokens of ids the tiny GGUF's vocabulary holds (288: a memory holding a token past
    # it is refused as another model's)
    earlier = named + line("earlier", list(range(250)) * 12)
    path.write_text(earlier)
    done = specviz(*run_args(tiny_gguf_path, "--suffix-memory", path),
                   fsize=len(earlier) + 30)  # the new run's line fits in part only
    assert done.returncode == 0 and json.loads(done.stdout)["tokens"] == 8, done.stderr
    assert done.stderr.count("specviz:") == 1, done.stderr
    assert f"the suffix memory could not be saved: File too large ({path})" in done.stderr
    assert path.read_text() == earlier  # the part written undone
    again = specviz(*run_args(tiny_gguf_path, "--suffix-memory", path))
    assert again.returncode == 0 and again.stderr == "", again.stderr
    runs = SuffixMemory.open(path).runs
    assert [len(r.tokens) for r in runs] == [3000, 8] and runs[0].label == "earlier"


def test_a_memory_of_another_model_is_refused_untouched(tmp_path):
    """Token ids past this model's vocabulary would be drafted into its embedding (a
    traceback in torch, worse in llama.cpp): refused before any lock file is made."""
    path = tmp_path / "m.jsonl"
    path.write_text(A + line("other", [1, 5000]))
    before = files_in(tmp_path)
    with pytest.raises(SpecvizError, match="holds token 5000, past this model's 400"):
        SuffixMemory.open(path, vocab_size=400)
    assert files_in(tmp_path) == before
    assert [r.label for r in SuffixMemory.open(path, vocab_size=5001).runs] == ["a", "other"]
