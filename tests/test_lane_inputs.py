"""An oracle's inputs (models, heads, corpus and memory files) are declared in its registry
entry. Lanes, window settings and command lines written by the version before inputs were a
mapping (tests/data/lanes_before_inputs.json, written by that version) read as they were
meant, and that version reads the lanes written now; an oracle that is nothing but a module
and a registry entry gets its input from the command line, the run builder, the window's
picker and `specviz serve`'s confinement."""

from __future__ import annotations

import json
import os
import sys
import types
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

from specviz.engines.errors import SpecvizError
from specviz.engines.host import run_spec as rs
from specviz.engines.oracles import INPUTS, ORACLE_INFO, Oracle, Proposal
from specviz.engines.oracles.registry import CORPUS, MODEL, Input, OracleInfo

DATA = Path(__file__).parent / "data"
BEFORE = json.loads((DATA / "lanes_before_inputs.json").read_text(encoding="utf-8"))

# The lanes of the fixture as this version writes them, with inputs by the registry's names.
EXPECTED = {
    "plain": rs.LaneSpec("none", 4),
    "draft": rs.LaneSpec("draft", 7, settings={"p_min": 0.1},
                         inputs={"draft": "/models/draft.gguf"}),
    "tree": rs.LaneSpec("tree", 5, settings={"split": 0.3, "budget": 9},
                        inputs={"draft": "/models/draft.gguf"}),
    # --cross-draft over --draft, as the cross-draft oracle read them then
    "cross": rs.LaneSpec("cross-draft", 3, inputs={"draft": "/models/other.gguf"}),
    "cross-window": rs.LaneSpec("cross-draft", 2, inputs={"draft": "d.gguf"}),
    "ngram": rs.LaneSpec("ngram", 4, settings={"max_ngram": 5},
                         inputs={"ngram_corpus": "/data/corpus.txt"}),
    "suffix": rs.LaneSpec("suffix", 4, auto_k=True,
                          inputs={"suffix_corpus": "/data/s.txt", "suffix_memory": "off"}),
    "medusa": rs.LaneSpec("medusa", 3, auto_k=True, inputs={"medusa_heads": "/heads/m"}),
    "eagle": rs.LaneSpec("eagle", 4, settings={"budget": 12},
                         inputs={"eagle_head": "org/eagle3-head"}),
    # `specviz shot --medusa-heads --eagle-head` gives every lane the heads, to keep
    "shot-none": rs.LaneSpec("none", 4, inputs={"medusa_heads": "/h/m", "eagle_head": "/h/eagle"}),
    "early": rs.LaneSpec("early-exit", 3, settings={"exit_layer": 5}),
    "server": rs.LaneSpec("server", 4, server=rs.ServerSpec(
        "http://127.0.0.1:9", engine="vllm", api_key_env="KEY", source="draft")),
}

# What the version before read of a lane, by oracle: its fields, and the model it loaded
# (cross-draft: cross_draft, else draft).
READ_BEFORE = {"draft": ("draft",), "tree": ("draft",), "ngram": ("ngram_corpus",),
               "suffix": ("suffix_corpus", "suffix_memory"), "medusa": ("medusa_heads",),
               "eagle": ("eagle_head",)}
SHARED = ("oracle", "k", "auto_k", "settings", "server", "server_engine", "api_key_env",
          "server_source")


def read_before(lane: dict) -> dict:
    """A lane dict as the version before read it (its LaneSpec and run builder)."""
    oracle = lane.get("oracle", "none")
    read = {name: lane.get(name) or None for name in READ_BEFORE.get(oracle, ())}
    if oracle == "cross-draft":
        read["draft"] = lane.get("cross_draft") or lane.get("draft")
    defaults = {"oracle": "none", "k": 4, "auto_k": False, "settings": {},
                "server_engine": "auto"}
    return {**{name: lane.get(name, defaults.get(name)) for name in SHARED}, **read}


# ---------------------------------------------------------------- lanes on the wire


def test_a_run_spec_from_the_version_before_reads_as_it_was_meant():
    spec = rs.from_dict(BEFORE["run_spec"])
    assert spec.lanes == EXPECTED
    assert {lane_id: lane.draft_model for lane_id, lane in spec.lanes.items()} == \
        BEFORE["draft_model"]


def test_the_version_before_reads_the_lanes_written_now_as_they_are_meant():
    """No protocol version between them: an engine or window of either age reads the other's
    lanes (the inputs are keys of the lane under the names they had as fields)."""
    for lane_id, lane in EXPECTED.items():
        written = json.loads(json.dumps(rs.to_dict(rs.RunSpec(
            rs.RunRequest("x", rs.ModelChoice("m")), {lane_id: lane}))))["lanes"][lane_id]
        assert read_before(written) == read_before(BEFORE["run_spec"]["lanes"][lane_id]), lane_id
        assert rs.lane_from_dict(written) == lane


def test_inputs_are_checked_as_a_lane_arrives():
    with pytest.raises(ValueError, match="input draft cannot be 3"):
        rs.lane_from_dict({"oracle": "draft", "draft": 3})
    with pytest.raises(ValueError, match="inputs cannot be"):
        rs.lane_from_dict({"oracle": "draft", "inputs": ["d.gguf"]})
    # a newer sender's input this version does not know is left out, as other unknown keys
    assert rs.lane_from_dict({"oracle": "ngram", "inputs": {"future_file": "f"}}) == \
        rs.LaneSpec("ngram")
    with pytest.raises(TypeError, match="a lane has no input 'heads'"):
        rs.LaneSpec("medusa", heads="/h")


def test_the_window_settings_of_the_version_before_still_load(app_env, qtbot):
    """Lanes stored by the version before (three blobs of at most four lanes, the window's
    most) come back in the window as they were, and are stored again in this version's form."""
    from specviz.app.main_window import MainWindow
    from specviz.app.state.settings import AppSettings

    expected = list(EXPECTED.values())
    for i, blob in enumerate(BEFORE["settings_blobs"]):
        AppSettings().store.setValue("lanes/configs", blob)
        assert AppSettings().lanes() == expected[4 * i:4 * i + 4]
        window = MainWindow()
        qtbot.addWidget(window)
        assert window.board.configs() == expected[4 * i:4 * i + 4]
        window.close()  # stores its lanes
        stored = json.loads(AppSettings().store.value("lanes/configs"))
        assert [read_before(lane) for lane in stored] == [
            read_before(lane) for lane in json.loads(blob)]


def test_the_command_line_makes_the_lanes_it_made_before():
    from specviz.app.cli import options
    from specviz.app.cli.main import build_parser

    parser = build_parser()
    for case in BEFORE["cli"]:
        args = parser.parse_args(case["argv"])
        if "lane" in case:
            made = [(options.lane_spec(args, args.oracle), case["lane"])]
        else:  # bench: each oracle's lane, auto K
            made = [(options.lane_spec(args, lane["oracle"], options.AUTO), lane)
                    for lane in case["lanes"]]
        for lane, before in made:
            assert read_before(rs.lane_to_dict(lane)) == read_before(before), case["argv"]


# ---------------------------------------------------------------- traces

# Written by the version before with a tiny model of tests/tiny_model.py:
# `specviz run --target TINY --backend transformers --device cpu --threads 1 --no-chat
#  --prompt "def add(a, b):" --trace F` with `--oracle ngram --ngram-corpus corpus.txt --k 3
#  --max-tokens 12` (the corpus: CORPUS_TEXT) and `--oracle early-exit --exit-layer 1 --k 2
#  --max-tokens 6`.
TRACES = {"ngram": DATA / "trace_before_inputs_ngram.jsonl",
          "early-exit": DATA / "trace_before_inputs_early_exit.jsonl"}
CORPUS_TEXT = "def add(a, b):\n    return a + b\n"


def test_traces_of_the_version_before_replay(capsys, app_env, qtbot):
    from specviz.app.cli.main import main
    from specviz.app.main_window import MainWindow
    from specviz.engines.trace import read_trace

    for oracle, path in TRACES.items():
        trace = read_trace(path)
        assert trace.header["oracle"] == oracle and trace.problem is None
        assert main(["replay", "--print", str(path)]) == 0
        assert trace.summary.text in capsys.readouterr().out
    window = MainWindow()
    qtbot.addWidget(window)
    window.open_replay(list(TRACES.values())).finish()
    window.board.drain()
    assert [lane.oracle_name() for lane in window.board.lanes.values()] == list(TRACES)
    assert [lane.view.token_count for lane in window.board.lanes.values()] == [
        read_trace(path).summary.totals.tokens for path in TRACES.values()]


def test_a_trace_header_now_is_the_one_the_version_before_wrote(tiny_model_dir, tmp_path):
    """The same lanes on the same tiny model: every field of the header as before (the
    model's path and the machine aside)."""
    from specviz.engines.host.model_pool import ModelPool
    from specviz.engines.host.run_builder import build_lane
    from specviz.engines.trace import read_trace

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS_TEXT)
    lanes = {"ngram": rs.LaneSpec("ngram", 3, inputs={"ngram_corpus": str(corpus)}),
             "early-exit": rs.LaneSpec("early-exit", 2, settings={"exit_layer": 1})}
    pool = ModelPool()
    try:
        for oracle, lane in lanes.items():
            before = read_trace(TRACES[oracle]).header
            request = rs.RunRequest("def add(a, b):", rs.ModelChoice(
                str(tiny_model_dir), "transformers", "cpu", 1),
                max_tokens=before["settings"]["max_tokens"], chat=False)
            built = build_lane("a", lane, request, pool)
            now = json.loads(json.dumps(built.header))
            built.close()
            for header in (before, now):
                for volatile in ("target", "machine", "kind", "format", "schema"):
                    header.pop(volatile, None)
            assert now == before, oracle
    finally:
        pool.close()


# ---------------------------------------------------------------- an oracle of a test's own


class EchoOracle(Oracle):
    """Proposes what followed the context's last token in its corpus."""

    name = "echo"
    source = "ngram"

    def __init__(self, corpus: Sequence[int] | None, model=None) -> None:
        super().__init__()
        self.corpus, self.model = list(corpus or ()), model

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        at = next((i for i in range(len(self.corpus) - 1, -1, -1)
                   if self.corpus[i] == context[-1]), None)
        return Proposal([] if at is None else self.corpus[at + 1:at + 1 + k], self.source)


def build(parts):
    return EchoOracle(parts.inputs.get("echo_corpus"), parts.inputs.get("echo_model"))


ECHO = OracleInfo("echo", "repeats a corpus", ("ngram",), inputs=(
    Input("echo_corpus", CORPUS, "text file the echo oracle repeats", required=True,
          label="echo corpus"),
    Input("echo_model", MODEL, "a model the echo oracle keeps", label="echo model")))


@pytest.fixture
def echo(monkeypatch):
    """The echo oracle: a module (this one, under the oracles' package) and a registry entry,
    nothing else."""
    module = types.ModuleType("specviz.engines.oracles.echo")
    module.build = build
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(ORACLE_INFO, "echo", ECHO)
    for each in ECHO.inputs:
        monkeypatch.setitem(INPUTS, each.name, each)
    return ECHO


def tiny_request(model_dir) -> rs.RunRequest:
    return rs.RunRequest("def add(a, b):", rs.ModelChoice(str(model_dir), "transformers",
                                                          "cpu", 1), max_tokens=4, chat=False)


def test_its_input_is_a_flag_and_a_lane_input(echo, tmp_path):
    from specviz.app.cli import options
    from specviz.app.cli.main import build_parser

    parser = build_parser()
    run = next(a for a in parser._subparsers._actions if a.choices).choices["run"]
    helps = {flag: action.help for action in run._actions for flag in action.option_strings}
    assert helps["--echo-corpus"] == "text file the echo oracle repeats"
    assert helps["--echo-model"] == "a model the echo oracle keeps"
    args = parser.parse_args(["run", "--prompt", "x", "--echo-corpus", "c.txt"])
    lane = options.lane_spec(args, "echo", 3)
    assert lane == rs.LaneSpec("echo", 3, inputs={"echo_corpus": "c.txt"})
    assert rs.lane_from_dict(json.loads(json.dumps(rs.lane_to_dict(lane)))) == lane


def test_the_run_builder_reads_its_input_by_kind(echo, tmp_path, tiny_model_dir, tiny_backend):
    from specviz.engines.host.model_pool import ModelPool
    from specviz.engines.host.run_builder import build_lane

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS_TEXT)
    pool = ModelPool()
    try:
        lane = build_lane("a", rs.LaneSpec("echo", 3, inputs={
            "echo_corpus": str(corpus), "echo_model": str(tiny_model_dir)}),
            tiny_request(tiny_model_dir), pool)
        oracle = lane.session.oracle
        assert oracle.corpus == tiny_backend.tokenize(CORPUS_TEXT, False)
        assert oracle.model is lane.draft and lane.draft is not lane.session.target
        assert lane.header["draft"] is not None  # the model it loaded, in the trace
        lane.close()
        with pytest.raises(SpecvizError, match=r"the echo oracle needs --echo-corpus CORPUS "
                                               r"FILE"):
            build_lane("b", rs.LaneSpec("echo"), tiny_request(tiny_model_dir), pool)
        corpus.write_bytes(b"\xff\xfe binary")
        with pytest.raises(SpecvizError, match=r"echo corpus .* is not UTF-8 text"):
            build_lane("c", rs.LaneSpec("echo", inputs={"echo_corpus": str(corpus)}),
                       tiny_request(tiny_model_dir), pool)
    finally:
        pool.close()


def test_serve_confines_its_file_and_not_its_model(echo, tmp_path):
    from specviz.engines.host.confine import Confinement, OutsideAllowed

    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    (allowed / "c.txt").write_text(CORPUS_TEXT)
    confine = Confinement((allowed.resolve(),))

    def spec(**inputs):
        return rs.RunSpec(rs.RunRequest("x", rs.ModelChoice("m")),
                          {"a": rs.LaneSpec("echo", inputs=inputs)})

    with pytest.raises(OutsideAllowed, match=f"lane 'a' echo_corpus {outside}/c.txt is "
                                             "outside the folders this server allows"):
        confine.run(spec(echo_corpus=str(outside / "c.txt")))
    kept = confine.run(spec(echo_corpus=f"{allowed}/../allowed/c.txt",
                            echo_model=str(outside / "m.gguf")))
    assert kept.lanes["a"].inputs == {"echo_corpus": str((allowed / "c.txt").resolve()),
                                      "echo_model": str(outside / "m.gguf")}


def test_the_lane_shows_a_picker_for_each_of_its_inputs(echo, app_env, qtbot):
    from specviz.app.views.lane_widget import LaneWidget
    from specviz.board.palette import DARK

    lane = LaneWidget("lane1", rs.LaneSpec("echo", 3, inputs={"echo_corpus": "c.txt"}), DARK,
                      "#fff", [])
    qtbot.addWidget(lane)
    lane.show()
    assert lane.pickers["echo_model"].isVisible() and not lane.draft.isVisible()
    corpus = lane.files["echo_corpus"]
    assert corpus.isVisible() and corpus.value() == "c.txt"
    assert not lane.files["ngram_corpus"].isVisible()
    lane.pickers["echo_model"].set_model("/models/m.gguf")
    assert lane.config() == rs.LaneSpec("echo", 3, inputs={
        "echo_corpus": "c.txt", "echo_model": "/models/m.gguf"})
    corpus.set_value("  other.txt ")
    assert lane.config().inputs["echo_corpus"] == "other.txt"
    # ngram reads neither: the picked model is dropped, the file kept for a lane that does
    lane.oracle.setCurrentText("ngram")
    assert not lane.pickers["echo_model"].isVisible() and not corpus.isVisible()
    assert lane.files["ngram_corpus"].isVisible()
    assert lane.config() == rs.LaneSpec("ngram", 3, inputs={"echo_corpus": "other.txt"})
    lane.oracle.setCurrentText("echo")
    assert lane.config().inputs == {"echo_corpus": "other.txt", "echo_model": "/models/m.gguf"}
