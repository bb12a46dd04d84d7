"""The anatomy outside the widget: the window's Anatomy dock on a replayed trace, and
`specviz anatomy TRACE --step N OUT` writing a video, a GIF or a page, whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from video_frames import decoded, gif_frames

from specviz.app.cli.main import main
from specviz.app.export.anatomy_export import (
    AnatomySettings,
    export_anatomy,
    parse_steps,
    trace_anatomies,
)
from specviz.app.export.video import ExportCancelled, VideoSettings
from specviz.engines.errors import SpecvizError
from specviz.engines.trace import read_trace

pytestmark = pytest.mark.gui

DATA = Path(__file__).parent / "data"
TRACE = DATA / "small_trace.jsonl"  # smollm2-135m, prompt-lookup, K=4, greedy
PLAIN = DATA / "small_trace_plain.jsonl"


# ---------------------------------------------------------------- the window


def test_clicking_a_token_of_a_replay_takes_its_step_apart_priced_by_the_plain_lane(window):
    player = window.open_replay([PLAIN, TRACE])
    player.finish()
    window.board.drain()
    lane = next(lane for lane in window.board.lanes.values()
                if lane.view.events and lane.view.events[0].oracle == "prompt-lookup")
    lane.view.tokenClicked.emit(10)
    dock = window.anatomy_dock
    assert dock.view.anatomy.event is lane.view.events[10]
    plain = read_trace(PLAIN).steps[-1].totals
    assert dock.view.anatomy.plain.ms == pytest.approx(plain.compute_ms / plain.steps)
    assert dock.view.index == 0 and dock.where.text() == f"stage 1/{dock.view.stage_count}: context"
    assert not dock.in_front  # the Step dock stays in front


def test_the_anatomy_follows_the_theme_and_presentation(window):
    dock = window.anatomy_dock
    assert not dock.in_front and dock.toggleViewAction().isChecked()  # behind the Step tab
    window.set_presentation(True, fullscreen=False)
    assert dock.view.theme.name == "dark-contrast"
    assert dock.isHidden()  # the race fills the screen, as before
    window.set_presentation(False)
    assert window.inspector_dock.isVisible() and not dock.in_front
    assert dock.toggleViewAction().isChecked()
    window.set_theme("light")
    assert dock.view.theme.name == "light"


def test_presenting_with_the_anatomy_in_front_keeps_it(window):
    dock = window.anatomy_dock
    dock.raise_()
    assert dock.in_front
    window.set_presentation(True, fullscreen=False)
    assert dock.isVisible() and not dock.isHidden() and window.inspector_dock.isHidden()


# ---------------------------------------------------------------- files


def test_an_mp4_holds_each_stage_for_its_time(tmp_path):
    out = tmp_path / "step.mp4"
    assert main(["anatomy", str(TRACE), "--step", "10", str(out), "--size", "640x360",
                 "--fps", "5", "--stage-seconds", "0.4", "--hold", "0"]) == 0
    stages = len(trace_anatomies(TRACE, 10, 10)[0].stages)
    frames = decoded(out)
    assert len(frames) == 2 * stages and frames[0].shape == (360, 640, 3)
    assert abs(frames[0].astype(int) - frames[-1].astype(int)).mean() > 1  # it moved on


def test_a_gif_is_a_frame_a_stage_on_one_palette(tmp_path):
    out = tmp_path / "steps.gif"
    assert main(["anatomy", str(TRACE), "--steps", "0-1", str(out), "--stage-seconds", "1.5",
                 "--hold", "3"]) == 0
    stages = sum(len(a.stages) for a in trace_anatomies(TRACE, 0, 1))
    gif = gif_frames(out)
    assert gif.size == (960, 540) and gif.loop == 0
    assert sum(gif.durations) == pytest.approx((stages + 2) * 1500, abs=100)


def test_a_page_holds_every_stage_offline(tmp_path):
    out = tmp_path / "step.html"
    assert main(["anatomy", str(TRACE), "--step", "1", str(out), "--size", "640x360"]) == 0
    page = out.read_text(encoding="utf-8")
    made = trace_anatomies(TRACE, 1, 1)[0]
    assert page.count("<img src=\"data:image/png;base64,") == len(made.stages)
    assert "http" not in page.replace("<!doctype html>", "")
    assert made.stages[-1].title in page  # each picture's words, for a screen reader


def test_cancelling_leaves_no_file(tmp_path):
    out = tmp_path / "step.mp4"
    settings = AnatomySettings(VideoSettings(size=(640, 360), fps=5), 0.4)
    with pytest.raises(ExportCancelled):
        export_anatomy(trace_anatomies(TRACE, 1, 1), out, settings, lambda done, _all: done < 3)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("extra, message", [
    (["--step", "99"], "there is no step 99"),
    (["--steps", "5-2"], "not after the last"),
    (["--steps", "a-b"], "give A-B"),
    (["--step", "1", "--stage-seconds", "0"], "stage time 0"),
    (["--step", "1", "--size", "641x360"], "must be even"),
    (["--step", "1", "--plain", str(TRACE)], "not a plain-decoding trace"),
    (["--step", "1", "--profile", str(TRACE)], "the cost profile"),
])
def test_bad_requests_are_one_line_and_write_nothing(capsys, tmp_path, extra, message):
    code = main(["anatomy", str(TRACE), str(tmp_path / "step.mp4"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_format_is_refused(capsys, tmp_path):
    assert main(["anatomy", str(TRACE), str(tmp_path / "step.pdf")]) == 2
    assert "give OUT.mp4, OUT.webm, OUT.gif or OUT.html" in capsys.readouterr().err


def test_a_cost_profile_prices_the_plain_step_at_the_steps_context(tmp_path):
    from specviz.engines.cost.profile import PROFILE_VERSION, Profile

    profile = Profile("smollm2-135m", "llama", "cpu", 2, [128, 512], [1, 2, 4, 8],
                      [[10.0, 12.0, 14.0, 18.0], [20.0, 22.0, 24.0, 28.0]],
                      version=PROFILE_VERSION)
    made = trace_anatomies(TRACE, 1, 1, profile)[0]
    position = made.event.position
    assert made.plain.ms == pytest.approx(profile.cost_ms(1, position))
    assert f"1 token at context {position}" in made.plain.where


def test_steps_are_parsed():
    assert parse_steps(None, None) == (0, 0)
    assert parse_steps(4, None) == (4, 4)
    assert parse_steps(None, "2-5") == (2, 5)
    with pytest.raises(SpecvizError):
        parse_steps(None, "-1-3")


def test_a_missing_folder_is_one_line(capsys, tmp_path):
    out = tmp_path / "missing" / "step.gif"
    assert main(["anatomy", str(TRACE), "--step", "1", str(out), "--size", "320x180"]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["missing", "empty", "random", "header only"])
def test_a_bad_trace_is_one_line(capsys, tmp_path, kind):
    trace = tmp_path / "bad.jsonl"
    if kind != "missing":
        data = {"empty": b"", "random": bytes(range(256)) * 4,
                "header only": TRACE.read_bytes().split(b"\n")[0] + b"\n"}[kind]
        trace.write_bytes(data)
    out = tmp_path / "step.gif"
    assert main(["anatomy", str(trace), "--step", "0", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specviz: ") and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
