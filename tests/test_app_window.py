"""The window without a model: replaying traces, hover and click, settings, the shot command."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtCore import Qt

from specviz.engines import events as ev
from specviz.engines.trace import read_trace

pytestmark = pytest.mark.gui

DATA = Path(__file__).parent / "data"
TRACE = DATA / "small_trace.jsonl"  # smollm2-135m, prompt-lookup, K=4, 64 tokens
PLAIN = DATA / "small_trace_plain.jsonl"  # the same prompt decoded plainly


def test_a_first_start_shows_a_race_that_can_pay(window):
    """No stored settings: the code-edit sample whose answer copies its function, plain
    decoding against prompt lookup with auto K, 256 tokens."""
    from specviz.app.views.prompt_panel import sample_prompts

    assert window.prompt.prompt() == sample_prompts()["code edit logging"]
    assert [(c.oracle, c.auto_k) for c in (lane.config() for lane in
                                            window.board.lanes.values())] == [
        ("none", False), ("prompt-lookup", True)]
    assert window.prompt.max_tokens.value() == 256


def replay_fully(window, paths):
    player = window.open_replay(paths)
    player.finish()
    window.board.drain()
    return player


# ---------------------------------------------------------------- replay


def test_replay_fills_lanes_and_graphs_deterministically(window):
    trace = read_trace(TRACE)
    figures = []
    for _ in range(2):
        replay_fully(window, [PLAIN, TRACE])
        lanes = list(window.board.lanes.values())
        assert [lane.view.token_count for lane in lanes] == [64, 64]
        assert len(lanes[1].view.events) == len(trace.steps)
        figures.append([window.board.model.figures(lane.lane_id) for lane in lanes])
    assert figures[0] == figures[1]
    plain, lookup = figures[0]
    totals = trace.summary.totals
    assert lookup["tokens"] == 64
    assert lookup["acceptance_rate"] == pytest.approx(totals.acceptance_rate)
    assert lookup["mean_accepted_tokens"] == pytest.approx(totals.mean_accepted_tokens)
    assert plain["mean_accepted_tokens"] == 1.0
    base = read_trace(PLAIN).summary.totals
    assert lookup["speedup"] == pytest.approx(totals.tok_per_s / base.tok_per_s)
    assert "64 tokens" in lanes[1].figures.text()


def test_replay_plays_at_recorded_pace(window, qtbot):
    """Each step is shown once the replay's clock has passed its recorded compute time, never
    before (a loaded machine only shows it later, so only the lower bound is asserted)."""
    steps = read_trace(TRACE).steps
    first_s, last_s = (steps[i].totals.compute_ms / 1000 for i in (0, -1))
    assert last_s - first_s > 0.3  # all at once would show the last step far too early
    started = time.monotonic()
    player = window.open_replay([TRACE], speed=1.0)
    shown = []  # per batch: (seconds since the replay opened, the latest compute time in it)
    player.advanced.connect(lambda _lane, events: shown.append(
        (time.monotonic() - started, max(e.totals.compute_ms for e in events) / 1000)))
    with qtbot.waitSignal(player.finished, timeout=int(last_s * 1000) + 60_000):
        pass
    window.board.drain()
    assert next(iter(window.board.lanes.values())).view.token_count == 64
    assert shown and all(due <= at for at, due in shown), shown  # not before its time


def test_replay_step_by_step_with_arrow_keys(window, qtbot):
    player = window.open_replay([PLAIN, TRACE])
    player.pause()  # before its first tick: nothing shown yet
    window.board.lanes[next(iter(window.board.lanes))].setFocus()
    for _ in range(3):
        qtbot.keyClick(window, Qt.Key.Key_Right)
    window.board.drain()
    assert [len(lane.view.events) for lane in window.board.lanes.values()] == [3, 3]
    assert not player.playing
    qtbot.keyClick(window, Qt.Key.Key_Left)
    window.board.drain()
    assert [len(lane.view.events) for lane in window.board.lanes.values()] == [2, 2]
    assert window.board.model.figures(next(iter(window.board.lanes)))["tokens"] == 2


def test_corrupt_trace_shows_error_and_plays_readable_part(window, tmp_path):
    lines = TRACE.read_text(encoding="utf-8").splitlines(keepends=True)
    broken = tmp_path / "broken.jsonl"
    broken.write_text("".join(lines[:6]) + '{"kind": "step", "oops\n', encoding="utf-8")
    missing = tmp_path / "missing.jsonl"
    replay_fully(window, [broken, missing])
    readable, unreadable = window.board.lanes.values()
    assert len(readable.view.events) == 5
    assert "line 7" in readable.message.text() and readable.message.isVisible()
    assert "cannot open trace" in unreadable.message.text()
    assert not unreadable.view.events


def test_leaving_replay_restores_live_lanes(window):
    before = window.board.configs()
    replay_fully(window, [TRACE])
    assert not window.menus.run_action.isEnabled()
    window.leave_replay()
    assert window.board.configs() == before
    assert window.menus.run_action.isEnabled()


# ---------------------------------------------------------------- hover and click


def copied_tokens(events):
    for event in events:
        for i, token in enumerate(event.proposed):
            span = token.span
            if span is not None and span.chr_start is not None and span.chr_end > span.chr_start:
                yield event.step, i, span


def test_hovering_a_copied_token_highlights_its_source_in_the_prompt(window):
    replay_fully(window, [TRACE])
    lane = next(iter(window.board.lanes.values()))
    offset = lane.prompt_text.find(lane.user_prompt)
    assert offset > 0  # the chat template comes first
    inside = [c for c in copied_tokens(lane.view.events) if c[2].chr_start >= offset]
    outside = [c for c in copied_tokens(lane.view.events) if c[2].chr_end <= offset]
    assert inside and outside
    step, token, span = inside[0]
    lane.view.tokenHovered.emit(step, token, span)
    (selection,) = window.prompt.editor.extraSelections()
    assert selection.cursor.selectedText() == lane.prompt_text[span.chr_start:span.chr_end]
    assert selection.cursor.selectionStart() == span.chr_start - offset
    lane.view.tokenHovered.emit(*outside[0])  # copied from the template: nothing to show
    assert window.prompt.editor.extraSelections() == []
    lane.view.tokenHovered.emit(step, token, span)
    lane.view.tokenHovered.emit(-1, -1, None)
    assert window.prompt.editor.extraSelections() == []


def test_span_outside_the_users_text_is_ignored():
    from specviz.app.views.lane_widget import editor_range

    rendered = "<|user|>\nhello world<|end|>"
    assert editor_range(ev.Span(0, 1, 9, 14), rendered, "hello world") == (0, 5)
    assert editor_range(ev.Span(0, 1, 0, 5), rendered, "hello world") is None
    assert editor_range(ev.Span(0, 1, 15, 25), rendered, "hello world") is None
    assert editor_range(ev.Span(0, 1), rendered, "hello world") is None


def test_clicking_a_token_shows_its_step(window):
    replay_fully(window, [TRACE])
    lane = next(iter(window.board.lanes.values()))
    lane.view.tokenClicked.emit(4)
    assert window.inspector.event is lane.view.events[4]


# ---------------------------------------------------------------- K changes on the graphs


def test_k_changes_are_marked_but_end_of_run_cuts_are_not():
    from step_factory import make_step

    from specviz.board.lanes_model import k_changed

    def step(k: int, tokens: int) -> ev.StepEvent:
        return make_step(k=k, tokens=tokens)

    assert not k_changed(None, step(4, 1), 100)
    assert k_changed(step(4, 10), step(8, 15), 100)
    assert k_changed(step(8, 10), step(2, 15), 100)
    assert not k_changed(step(8, 95), step(4, 99), 100)  # 100 - 95 - 1 = 4 tokens of room


def test_auto_k_choices_are_not_marked_but_turning_it_on_or_off_is():
    import dataclasses

    from step_factory import make_step

    from specviz.board.lanes_model import k_changed, k_label

    def step(k: int, tokens: int, auto: bool) -> ev.StepEvent:
        return dataclasses.replace(make_step(k=k, tokens=tokens), auto_k=auto)

    assert not k_changed(step(4, 10, True), step(2, 15, True), 100)  # auto K's own choice
    assert k_changed(step(4, 10, False), step(4, 15, True), 100)  # the person turned it on
    assert k_changed(step(3, 10, True), step(3, 15, False), 100)  # and off again
    assert k_label(step(3, 10, True)) == "K auto"
    assert k_label(step(3, 10, False)) == "K=3"


# ---------------------------------------------------------------- settings


def test_settings_round_trip(app_env, qtbot, tmp_path):
    from specviz.app.main_window import MainWindow
    from specviz.engines.host.run_spec import LaneSpec, ServerSpec
    from specviz.engines.oracles.registry import SERVER

    first = MainWindow()
    qtbot.addWidget(first)
    first.board.remove_all()
    first.add_lane(LaneSpec("none"))
    first.add_lane(LaneSpec("draft", 7, "/models/draft.gguf"))
    # Settings without a control in the lane are kept too (they were lost at restart).
    remembered = [LaneSpec("tree", 5, "/models/draft.gguf", settings={"split": 0.3, "budget": 9}),
                  LaneSpec("medusa", 3, auto_k=True, medusa_heads="/heads/m"),
                  LaneSpec(SERVER, server=ServerSpec("http://127.0.0.1:9", engine="vllm",
                                                    api_key_env="KEY", source="draft"))]
    first.add_lane(remembered[0])
    first.add_lane(remembered[1])
    first.set_theme("light")
    first.prompt.max_tokens.setValue(77)
    first.prompt.threads.setValue(1)
    first.resize(700, 533)  # inside the offscreen screen (800x600)
    first.show()
    size = first.size()
    first.close()

    second = MainWindow()
    qtbot.addWidget(second)
    assert second.board.configs() == [LaneSpec("none", 4),
                                      LaneSpec("draft", 7, "/models/draft.gguf"),
                                      *remembered[:2]]
    second.board.remove_all()
    for config in (LaneSpec("ngram", settings={"max_ngram": 5, "min_ngram": 2}), remembered[2]):
        second.add_lane(config)
    second.close()
    third = MainWindow()
    qtbot.addWidget(third)
    assert third.board.configs() == [LaneSpec("ngram", settings={"max_ngram": 5, "min_ngram": 2}),
                                     remembered[2]]
    assert second.theme.name == "light"
    assert second.prompt.max_tokens.value() == 77
    assert second.prompt.model_choice().threads == 1
    assert second.size() == size and size.height() == 533
    assert Path(second.settings.store.fileName()).is_relative_to(tmp_path)


def test_at_most_four_lanes_and_a_plain_lane_is_the_baseline(window):
    window.board.remove_all()
    window.menus.add_lane_action.trigger()
    window.menus.add_plain_action.trigger()
    for _ in range(4):
        window.menus.add_lane_action.trigger()
    assert len(window.board.lanes) == 4
    assert not window.menus.add_lane_action.isEnabled()
    plain = [lid for lid, lane in window.board.lanes.items() if lane.oracle_name() == "none"]
    assert window.graphs.baseline == plain[0]


# ---------------------------------------------------------------- specviz shot


def test_shot_of_a_replay_writes_a_png_of_the_requested_size(tmp_path):
    from PySide6.QtGui import QImage

    out = tmp_path / "shot.png"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SPECVIZ_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "specviz", "shot", str(out), "--replay", str(PLAIN), str(TRACE),
         "--size", "1000x700", "--theme", "light"],
        env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    image = QImage(str(out))
    assert out.stat().st_size > 10_000
    assert (image.width(), image.height()) == (1000, 700)


def test_shot_lanes_take_k_or_auto_from_the_command_line():
    from specviz.app.cli.main import build_parser
    from specviz.app.cli.shot import lane_configs

    parser = build_parser()
    fixed = lane_configs(parser.parse_args(["shot", "o.png", "--oracles", "none,ngram",
                                            "--k", "6"]))
    assert [(c.oracle, c.k, c.auto_k) for c in fixed] == [("none", 6, False), ("ngram", 6, False)]
    auto = lane_configs(parser.parse_args(["shot", "o.png", "--oracles", "none,prompt-lookup",
                                           "--k", "auto"]))
    assert [(c.oracle, c.auto_k) for c in auto] == [("none", False), ("prompt-lookup", True)]
    with pytest.raises(SystemExit):
        parser.parse_args(["shot", "o.png", "--k", "99"])
    default = lane_configs(parser.parse_args(["shot", "o.png"]))
    assert [(c.oracle, c.auto_k) for c in default] == [("none", False), ("prompt-lookup", True)]
    servers = lane_configs(parser.parse_args(["shot", "o.png", "--server", "http://a:1",
                                              "--server", "http://b:2"]))
    assert [(c.oracle, c.server.url) for c in servers] == [("server", "http://a:1"),
                                                           ("server", "http://b:2")]
    both = lane_configs(parser.parse_args(["shot", "o.png", "--oracles", "none",
                                           "--server", "http://a:1", "--engine", "gpu:7341"]))
    assert [c.oracle for c in both] == ["none", "server"]
    with pytest.raises(SystemExit):
        parser.parse_args(["shot", "o.png", "--engine", "gpu"])  # no port


def test_shot_lanes_use_the_heads_given_and_the_lane_keeps_them(window):
    from specviz.app.cli.main import build_parser
    from specviz.app.cli.shot import lane_configs

    args = build_parser().parse_args(["shot", "o.png", "--oracles", "none,eagle,medusa",
                                      "--eagle-head", "/h/eagle", "--medusa-heads", "/h/m"])
    configs = lane_configs(args)
    assert [(c.inputs["eagle_head"], c.inputs["medusa_heads"]) for c in configs] == [
        ("/h/eagle", "/h/m")] * 3
    lane = window.add_lane(configs[1])
    assert lane.config() == configs[1]
    lane.k.setValue(6)  # a person's change keeps what no control shows
    assert (lane.config().k, lane.config().inputs["eagle_head"]) == (6, "/h/eagle")


# ---------------------------------------------------------------- fetching a model


@pytest.fixture
def fake_fetch(monkeypatch, tmp_path):
    """No network and no question: `ask` says yes, `pull` reports progress from its thread."""
    from specviz.app.run import model_fetch as fetch
    from specviz.engines import models
    from specviz.engines.models.download_process import DownloadCancelled

    async def yes(*_args) -> bool:
        return True

    def pull(name, progress, cancel):
        for done in range(0, 101, 25):
            progress(done, 100, "downloading")
            if cancel.wait(0.05 if done < 100 else 0):
                raise DownloadCancelled("download cancelled")
        return tmp_path / f"{name}.gguf"

    monkeypatch.setattr(fetch, "ask", yes)
    monkeypatch.setattr(models, "pull", pull)
    return fetch


def test_fetching_shows_progress_and_returns_the_path(window, app_env, fake_fetch, tmp_path,
                                                      monkeypatch):
    """Each progress report is on the dialog's bar and label before the next is sent."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from PySide6.QtCore import QTimer

    from specviz.app.run.model_fetch import FetchDialog
    from specviz.engines import models

    total, sent, shown = 80_000_000, [5_000_000, 20_000_000, 60_000_000, 80_000_000], []
    seen = threading.Event()

    def pull(name, progress, cancel):
        for done in sent:
            seen.clear()
            progress(done, total, "downloading")
            assert seen.wait(30), f"the dialog never showed {done}"
        return tmp_path / f"{name}.gguf"

    def look() -> None:
        for dialog in window.findChildren(FetchDialog):
            bar = dialog.bar
            if dialog.isVisible() and bar.value() in sent[len(shown):len(shown) + 1]:
                shown.append((bar.value(), bar.maximum(), dialog.label.text()))
                seen.set()

    monkeypatch.setattr(models, "pull", pull)
    timer = QTimer(interval=1)
    timer.timeout.connect(look)
    timer.start()
    with ThreadPoolExecutor(1) as executor:
        path = app_env.run_until_complete(fake_fetch.fetch(window, "smollm2-135m", executor))
    timer.stop()
    assert path == tmp_path / "smollm2-135m.gguf"
    assert [(value, maximum) for value, maximum, _ in shown] == [(d, total) for d in sent]
    assert shown[2][2].startswith("60.0 MB of 80.0 MB, ") and shown[2][2].endswith(
        "/s: downloading")


def test_cancelling_a_fetch_returns_none(window, app_env, fake_fetch):
    from concurrent.futures import ThreadPoolExecutor

    from PySide6.QtCore import QTimer

    from specviz.app.run.model_fetch import FetchDialog

    seen = []

    def cancel_once_progress_shows() -> None:
        dialogs = [w for w in window.findChildren(FetchDialog) if w.isVisible()]
        if dialogs and dialogs[0].bar.value() > 0:
            seen.append(dialogs[0].label.text())
            dialogs[0].reject()  # what Cancel and Esc do
            timer.stop()

    timer = QTimer(interval=5)
    timer.timeout.connect(cancel_once_progress_shows)
    timer.start()
    with ThreadPoolExecutor(1) as executor:
        path = app_env.run_until_complete(fake_fetch.fetch(window, "smollm2-135m", executor))
    assert path is None
    assert "MB of" in seen[0] and "/s" in seen[0]


# ---------------------------------------------------------------- exports


def test_file_menu_exports(window, monkeypatch, tmp_path):
    import csv

    from PySide6.QtGui import QImage
    from PySide6.QtWidgets import QFileDialog

    replay_fully(window, [PLAIN, TRACE])
    answers = iter([tmp_path / "window.png", tmp_path / "race.png", tmp_path / "figures.csv"])
    monkeypatch.setattr(window.exports, "ask", lambda *_a: str(next(answers)))
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *_a: str(tmp_path / "copies"))
    window.exports.window_png()
    window.exports.graph_png("race")
    window.exports.figures_csv()
    window.exports.save_traces()
    assert QImage(str(tmp_path / "window.png")).width() == window.width()
    race = QImage(str(tmp_path / "race.png"))  # the plot with the lanes' key above it
    assert race.width() == window.graphs.race_plot.width()
    assert race.height() > window.graphs.race_plot.height()
    rows = list(csv.DictReader((tmp_path / "figures.csv").open(encoding="utf-8")))
    assert [r["oracle"] for r in rows] == ["none", "prompt-lookup"]
    assert [r["tokens"] for r in rows] == ["64", "64"]
    assert sorted(p.name for p in (tmp_path / "copies").iterdir()) == sorted(
        [PLAIN.name, TRACE.name])


def test_no_display_is_one_clear_line(monkeypatch, capsys):
    from specviz.app.cli.main import main

    for name in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    assert main(["gui"]) == 2
    assert "no display" in capsys.readouterr().err


def test_lane_knobs_are_remembered(app_env):
    from specviz.app.state.settings import AppSettings
    from specviz.engines.host.run_spec import LaneSpec

    lanes = [LaneSpec("early-exit", 3, settings={"exit_layer": 5}),
             LaneSpec("cross-draft", 2, "d.gguf")]
    AppSettings().set_lanes(lanes)
    assert AppSettings().lanes() == lanes


def test_presentation_mode_is_high_contrast_and_leaves_the_saved_theme(window):
    from specviz.board.palette import DARK_CONTRAST
    from specviz.engines.host.run_spec import LaneSpec

    window.set_theme("dark")
    window.add_lane(LaneSpec("none"))
    window.set_presentation(True, fullscreen=False)
    lane = next(iter(window.board.lanes.values()))
    assert window.board.theme is DARK_CONTRAST and lane.view._theme is DARK_CONTRAST
    assert "font-size:16pt" in window.graphs.key.text()
    lane.show_message("a line the audience must read")
    for widget in (lane.title, lane.figures, lane.message):
        assert "font-size: 15pt" in widget.styleSheet()
    assert "font-size: 15pt" in lane.legend.label("target").styleSheet()
    assert window.graphs.cost_curve.isHidden()
    assert "#e5534b" in lane.message.styleSheet()
    window.set_presentation(False)
    assert "font-size: 10pt" in lane.legend.label("target").styleSheet()
    assert window.board.theme.name == "dark" and window.settings.theme() == "dark"


def test_graphs_redraw_at_most_every_graphs_s_while_steps_come_in_bursts(window, qtbot):
    """Steps every 25 ms, each its own burst: the redraws come GRAPHS_S apart at least (a
    loaded machine only spaces them more), and the last burst is drawn too."""
    from specviz.app.views.board import GRAPHS_S

    steps = [e for e in read_trace(DATA / "small_trace.jsonl").events
             if isinstance(e, ev.StepEvent)]
    window.open_replay([DATA / "small_trace.jsonl"]).finish()
    window.board.drain()
    lane_id = next(iter(window.board.lanes))
    window.board.rewind(lane_id, [])
    redraws = []
    window.board.refreshed.connect(lambda: redraws.append(time.monotonic()))
    pushed = (steps * 4)[:40]
    for step in pushed:
        window.board.push(lane_id, step)
        qtbot.wait(25)
    qtbot.waitUntil(lambda: not window.board._graphs_stale, timeout=30_000)
    gaps = [b - a for a, b in pairwise(redraws)]
    # Qt's coarse timers may fire up to 5% early.
    assert redraws and all(gap >= 0.95 * GRAPHS_S for gap in gaps), gaps


def test_a_lane_given_another_oracle_forgets_the_steps_of_the_last_one(window):
    """Its figures and the speedups of the others would otherwise read the old oracle's run
    as the new one's (a lane turned plain would become the baseline with a speculative run)."""
    from step_factory import make_step

    from specviz.engines.host.run_spec import LaneSpec

    window.board.remove_all()
    lookup = window.add_lane(LaneSpec("prompt-lookup"))
    other = window.add_lane(LaneSpec("ngram"))
    for i in range(3):
        window.board.push(lookup.lane_id, make_step(i, k=4, tokens=2 * (i + 1)))
        window.board.push(other.lane_id, make_step(i, k=4, tokens=i + 1))
    window.board.drain()
    assert window.board.model.figures(lookup.lane_id)["tokens"] == 6
    lookup.oracle.setCurrentText("none")
    model = window.board.model
    assert model.baseline() == lookup.lane_id and model.figures(lookup.lane_id)["tokens"] == 0
    assert not lookup.view.events and model.figures(other.lane_id)["speedup"] is None


def test_file_menu_exports_a_video_and_a_page(window, tmp_path):
    import av

    exports = window.exports
    exports.ask = lambda *_a: "unused"
    assert exports.video() is None  # nothing to export yet
    assert "nothing to export" in window.status_text.text()
    replay_fully(window, [PLAIN, TRACE])
    exports.ask = lambda *_a: str(tmp_path / "race.webm")
    video = exports.video()
    assert video is not None and window.status_text.text() == f"saved {video}"
    with av.open(str(video)) as container:
        frames = list(container.decode(video=0))
    assert frames and (frames[0].width, frames[0].height) == (1920, 1080)
    exports.ask = lambda *_a: str(tmp_path / "race.html")
    page = exports.page()
    assert f'data-theme="{window.theme.name}"' in page.read_text(encoding="utf-8")
    assert not window.presenting and window.isVisible()  # the person's window as it was


def test_a_replayed_auto_k_lane_says_so_in_its_title(window, tmp_path):
    import json

    lines = TRACE.read_text(encoding="utf-8").splitlines()
    auto = []
    for line in lines:  # an older trace: auto K said only in its steps
        record = json.loads(line)
        if record.get("kind") == "step":
            record["auto_k"] = True
        auto.append(json.dumps(record))
    path = tmp_path / "auto.jsonl"
    path.write_text("\n".join(auto) + "\n", encoding="utf-8")
    replay_fully(window, [TRACE, path])
    titles = [lane.title.text() for lane in window.board.lanes.values()]
    assert "K=4" in titles[0] and "auto K" in titles[1], titles


def test_long_trace_names_do_not_widen_the_window(window, tmp_path):
    """A replayed trace's file name is the lane's title: three long ones pushed a 1400-pixel
    window to 1819 pixels, past a laptop's screen. The title gives way (elided, the whole
    name in its tip)."""
    import shutil

    paths = []
    for i in range(3):
        path = tmp_path / f"20261126-232048.331-lane{i}-a-long-name-for-a-talk-{i}.jsonl"
        shutil.copy(TRACE, path)
        paths.append(path)
    replay_fully(window, paths)
    lanes = list(window.board.lanes.values())
    assert all(lane.title.toolTip().endswith(p.stem) for lane, p in zip(lanes, paths))
    assert window.minimumSizeHint().width() <= 1400, window.minimumSizeHint()


def test_a_trace_named_for_its_oracle_is_titled_by_the_oracle_once(window, tmp_path):
    """`specviz export none.jsonl prompt-lookup.jsonl race.mp4` titled its lanes
    "prompt-lookup, K=4 · prompt-lookup.jsonl": the oracle twice."""
    import shutil

    path = tmp_path / "prompt-lookup.jsonl"
    shutil.copy(TRACE, path)
    replay_fully(window, [path])
    (lane,) = window.board.lanes.values()
    assert lane.title.text() == "prompt lookup, K=4"
