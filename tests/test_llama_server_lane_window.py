"""A llama-server lane in the window (#65): the lane picker offers llama.cpp's own speculation
with its types; a draft type without its draft is one line and nothing starts; the lane the
window builds is the one `specviz run --oracle llama-server` builds; such lanes are kept in the
settings, and an older settings file still loads; a missing llama-server build is one line in
the lane, through the engine process; and, where specviz's llama-server is built, the lane
runs in the window on a server of its own that stops with the run."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import Qt
from test_app_run import run_to_end, set_up

from specviz.engines import llama_build
from specviz.engines.host import run_spec as rs
from specviz.engines.host.run_spec import LaneSpec, ModelChoice, ServerSpec
from specviz.engines.oracles import ORACLES
from specviz.engines.oracles.registry import SERVER, SPAWNED
from specviz.engines.servers.llama_speculation import TYPES, known_types

pytestmark = pytest.mark.gui

REPEATED = "The quick brown fox jumps over the lazy dog. " * 6  # n-grams to draft from


def new_lane(qtbot, config: LaneSpec | None = None):
    """A lane as Run > Add lane makes it (or as `config` says)."""
    from specviz.app.views.lane_widget import LaneWidget
    from specviz.board.palette import DARK

    lane = LaneWidget("lane1", config or LaneSpec("prompt-lookup", auto_k=True), DARK, "#fff",
                      [])
    qtbot.addWidget(lane)
    lane.show()
    return lane


def pick(lane, types: list[str], draft: str | None = None, k: int | None = None) -> None:
    """What a person clicks: llama-server in the oracle box, each type in the speculation
    menu, a draft model, and K (or auto)."""
    lane.oracle.setCurrentText(SPAWNED)
    for name in types:
        lane.spec_types.actions_[name].trigger()
    if draft:
        lane.draft.set_model(draft)
    lane.k.set_auto(k is None)
    if k is not None:
        lane.k.setValue(k)


# ------------------------------------------------------------------ the picker


def test_the_lane_picker_offers_llama_cpps_own_speculation_and_its_types(app_env, qtbot):
    from specviz.app.views.spec_types import PLAIN_WORDS
    from specviz.board.legend_kinds import legend_kinds

    lane = new_lane(qtbot)
    names = [lane.oracle.itemText(i) for i in range(lane.oracle.count())]
    assert names == [*ORACLES, SERVER, SPAWNED]  # the registry's lane kinds, in its order
    tip = lane.oracle.itemData(names.index(SPAWNED), Qt.ItemDataRole.ToolTipRole)
    assert tip.startswith("llama.cpp's own speculation (llama-server): a llama-server specviz "
                          "starts on 127.0.0.1 for the lane")
    assert not lane.spec_types.isVisible()

    lane.oracle.setCurrentText(SPAWNED)
    assert lane.spec_types.isVisible() and not lane.server.isVisible()
    assert not lane.draft.isVisible()  # no type chosen yet reads a draft
    assert list(lane.spec_types.actions_) == list(TYPES)
    assert lane.spec_types.text() == PLAIN_WORDS and lane.title.text() == "llama-server: plain"
    assert lane.config() == LaneSpec(SPAWNED, 0)  # a plain llama-server, its own draft length
    lane.spec_types.actions_["ngram-mod"].trigger()
    assert not lane.draft.isVisible() and lane.title.text() == "llama-server: ngram-mod"
    lane.spec_types.actions_["draft-simple"].trigger()  # chained
    assert lane.draft.isVisible() and lane.draft.model() == ""  # none until one is picked
    assert lane.spec_types.text() == "speculation: ngram-mod,draft-simple"
    assert lane.k.isEnabled() and "llama.cpp's own default" in lane.k.auto.toolTip()
    assert legend_kinds(SPAWNED) == legend_kinds(SERVER)
    lane.spec_types.actions_["draft-simple"].trigger()  # unchecked: the draft is not read
    lane.draft.set_model("/m/draft.gguf")
    assert lane.config() == LaneSpec(SPAWNED, 0, server=ServerSpec(spec="ngram-mod"))
    lane.oracle.setCurrentText("prompt-lookup")  # another kind: nothing of the server's kept
    assert lane.config() == LaneSpec("prompt-lookup", 4, auto_k=True)
    assert not lane.spec_types.isVisible()


def test_a_draft_type_without_its_draft_is_one_line_and_nothing_starts(window):
    from specviz.app.state.run_setup import lane_problem

    window.board.remove_all()
    lane = window.add_lane(LaneSpec("prompt-lookup", auto_k=True))  # Run > Add lane
    pick(lane, ["ngram-mod", "draft-eagle3"])
    window.prompt.set_prompt("hello")
    assert window.start_run() is None
    assert not window.runner.running and window.runner.engines == {}  # no engine started
    line = lane.message.text()
    assert lane.message.isVisible() and "\n" not in line
    assert line == ("draft-eagle3 drafts with an EAGLE-3 head converted for the target: give "
                    "it (pick its GGUF in the lane's draft model box)")
    assert window.status_text.text() == line
    lane.draft.set_model("/heads/eagle3.gguf")
    assert lane_problem(lane.config()) is None  # the file itself is the engine's to check


# ------------------------------------------------------------------ the lane it builds


@pytest.mark.parametrize("argv, types, draft, k", [
    (["--spec-type", "ngram-mod"], ["ngram-mod"], None, None),
    (["--spec-type", "ngram-simple,draft-simple", "--draft", "/m/draft.gguf", "--k", "6"],
     ["ngram-simple", "draft-simple"], "/m/draft.gguf", 6),
    (["--spec-type", "draft-eagle3", "--draft", "/heads/eagle3.gguf", "--k", "8"],
     ["draft-eagle3"], "/heads/eagle3.gguf", 8),
    ([], [], None, None),  # no types: a plain llama-server (a baseline)
])
def test_the_window_builds_the_lane_specviz_run_builds(app_env, qtbot, argv, types, draft, k):
    from specviz.app.cli import options
    from specviz.app.cli.main import build_parser

    args = build_parser().parse_args(["run", "--oracle", "llama-server", "--prompt", "x",
                                      *argv])
    from_cli = options.server_lane(args, None)
    lane = new_lane(qtbot)
    pick(lane, types, draft, k)
    assert lane.config() == from_cli
    # What the engine process receives (the protocol's JSON) is that lane too.
    sent = json.loads(json.dumps(rs.to_dict(rs.RunSpec(rs.RunRequest("x", ModelChoice("m")),
                                                       {"lane1": lane.config()}))))
    assert rs.from_dict(sent).lanes["lane1"] == from_cli and from_cli.on_server


# ------------------------------------------------------------------ the settings


def test_llama_server_lanes_are_kept_and_an_older_settings_file_still_loads(app_env, qtbot):
    from specviz.app.main_window import MainWindow
    from specviz.app.state.settings import AppSettings

    # Lanes as the window stored them before it had llama-server lanes (an input as a field
    # of its own, no server_spec, the server's fields the lane's): they load as they were.
    older = [{"oracle": "none", "k": 4, "draft": None, "auto_k": False},
             {"oracle": "draft", "k": 5, "draft": "/m/d.gguf", "auto_k": True,
              "server": None, "server_engine": "auto", "api_key_env": None,
              "server_source": None},
             {"oracle": "server", "k": 4, "server": "http://127.0.0.1:9",
              "server_engine": "vllm"}]
    AppSettings().store.setValue("lanes/configs", json.dumps(older))
    first = MainWindow()
    qtbot.addWidget(first)
    assert first.board.configs() == [
        LaneSpec("none"), LaneSpec("draft", 5, "/m/d.gguf", auto_k=True),
        LaneSpec(SERVER, server=ServerSpec("http://127.0.0.1:9", engine="vllm"))]

    first.board.remove_all()
    pick(first.add_lane(LaneSpec("prompt-lookup", auto_k=True)),
         ["ngram-mod", "draft-simple"], "/m/draft.gguf", 6)
    pick(first.add_lane(LaneSpec("none")), [])
    expected = [LaneSpec(SPAWNED, 6, server=ServerSpec(spec="ngram-mod,draft-simple"),
                         inputs={"draft": "/m/draft.gguf"}),
                LaneSpec(SPAWNED, 0)]
    assert first.board.configs() == expected
    first.close()

    second = MainWindow()
    qtbot.addWidget(second)
    second.show()
    assert second.board.configs() == expected
    chained, plain = second.board.lanes.values()
    assert chained.spec_types.types() == ["ngram-mod", "draft-simple"]
    assert chained.draft.isVisible() and chained.draft.model() == "/m/draft.gguf"
    assert not chained.k.is_auto() and chained.k.value() == 6
    assert plain.k.is_auto() and not plain.draft.isVisible() and plain.spec_types.types() == []
    assert chained.title.text() == "llama-server: ngram-mod,draft-simple"


# ------------------------------------------------------------------ through the engine


def test_a_missing_llama_server_build_is_one_line_in_the_lane(window, app_env, tmp_path,
                                                              monkeypatch):
    """The lane goes the way `specviz run --oracle llama-server` goes, in the window's engine
    process: with no llama-server to start, its line says how to build one."""
    monkeypatch.setenv(llama_build.ENV, str(tmp_path / "no-llama-server"))
    target = tmp_path / "m.gguf"
    target.write_bytes(b"GGUF" + bytes(60))
    set_up(window, ModelChoice(str(target), "llama", "cpu"),
           [LaneSpec(SPAWNED, 0, server=ServerSpec(spec="ngram-mod"))], 8)
    run_to_end(window, app_env)
    lane = next(iter(window.board.lanes.values()))
    line = lane.message.text()
    assert "run `specviz llama-server build`" in line and "no-llama-server" in line
    assert "\n" not in line and lane.view.token_count == 0


def children(pid: int, name: str) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        command, fields = text.split("(", 1)[1].rsplit(")", 1)
        state, ppid = fields.split()[:2]
        if int(ppid) == pid and command.startswith(name) and state != "Z":
            found.append(int(stat.parent.name))
    return found


def test_a_llama_server_lane_runs_in_the_window_and_its_server_stops(window, app_env,
                                                                     smollm2_path):
    from specviz.engines.trace import read_trace

    if llama_build.binary() is None:
        pytest.skip("llama-server is not built here (specviz llama-server build)")
    assert set(TYPES) <= set(known_types(llama_build.binary()))  # what the picker offers
    set_up(window, ModelChoice(str(smollm2_path), "llama", "cpu", threads=2),
           [LaneSpec("prompt-lookup", auto_k=True)], 24, prompt=REPEATED)
    pick(next(iter(window.board.lanes.values())), ["ngram-mod"], k=8)
    run_to_end(window, app_env)
    lane = next(iter(window.board.lanes.values()))
    assert lane.view.token_count == 24, lane.message.text()
    header = read_trace(lane.trace_path).header
    assert header["server"]["url"].startswith("http://127.0.0.1:")
    assert header["server"]["spawned"] == {"spec_type": "ngram-mod", "draft": None,
                                           "draft_max": 8}
    engine = next(iter(window.runner.engines.values()))
    assert engine.pid is not None and children(engine.pid, "llama-server") == []
