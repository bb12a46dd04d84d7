"""`specviz export TRACE... OUT.mp4|webm|gif`: the race drawn frame by frame, decoded back.

Traces come from real runs of the tiny random model; their races last a fraction of a
second, so a low frame rate keeps every video here a few dozen frames.
"""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from race_traces import record_race
from video_frames import decoded, gif_frames

from specviz.app.cli.main import main
from specviz.app.export.video import (
    ExportCancelled,
    VideoSettings,
    export_video,
    frame_times,
)
from specviz.app.main_window import MainWindow
from specviz.engines.trace import read_trace


@pytest.fixture(scope="module")
def traces(tiny_model_dir, tmp_path_factory) -> list[Path]:
    return record_race(tiny_model_dir, tmp_path_factory.mktemp("video-traces"), max_tokens=24)


def expected_frames(traces: list[Path], settings: VideoSettings) -> int:
    end_ms = max(read_trace(p).events[-1].totals.compute_ms for p in traces)
    return len(frame_times(end_ms, settings))


def test_an_mp4_has_every_frame_and_ends_on_the_shot_of_the_same_replay(traces, tmp_path):
    out, shot = tmp_path / "race.mp4", tmp_path / "shot.png"
    assert main(["export", *map(str, traces), str(out), "--fps", "10", "--hold", "0.5",
                 "--theme", "light"]) == 0
    frames = decoded(out)
    settings = VideoSettings(fps=10, hold_s=0.5)
    assert len(frames) == expected_frames(traces, settings)
    assert frames[-1].shape == (1080, 1920, 3)
    assert main(["shot", str(shot), "--replay", *map(str, traces), "--presentation",
                 "--size", "1920x1080", "--theme", "light"]) == 0
    picture = np.asarray(Image.open(shot).convert("RGB"), dtype=np.int16)
    last_gap = np.abs(frames[-1].astype(np.int16) - picture).mean()
    first_gap = np.abs(frames[0].astype(np.int16) - picture).mean()
    # H.264's 4:2:0 colour blurs coloured text a little; an empty board is far off.
    assert last_gap < 2.0 and first_gap > 3 * last_gap, (last_gap, first_gap)


def test_a_webm_at_720p_is_drawn_at_that_size(traces, tmp_path):
    out = tmp_path / "race.webm"
    settings = VideoSettings(size=(1280, 720), fps=5, hold_s=0.2, theme="dark")
    export_video(traces, out, settings, MainWindow)
    frames = decoded(out)
    assert len(frames) == expected_frames(traces, settings)
    assert frames[0].shape == (720, 1280, 3)
    assert frames[-1].mean() < 100  # the dark theme


def test_a_gif_loops_on_one_palette_and_merges_still_frames(traces, tmp_path):
    out = tmp_path / "race.gif"
    assert main(["export", *map(str, traces), str(out), "--hold", "1"]) == 0
    settings = VideoSettings.for_format(".gif", hold_s=1.0)
    gif = gif_frames(out)
    assert gif.size == (960, 540) and gif.loop == 0
    # the held frames are one frame lasting the hold: fewer frames, the same length
    assert len(gif.durations) < expected_frames(traces, settings)
    assert sum(gif.durations) == pytest.approx(expected_frames(traces, settings) * 100, abs=100)


def test_cancelling_leaves_no_file(traces, tmp_path):
    out = tmp_path / "race.mp4"
    seen = []

    def progress(done: int, total: int) -> bool:
        seen.append((done, total))
        return done < 3

    with pytest.raises(ExportCancelled):
        export_video(traces, out, VideoSettings(size=(640, 360), fps=10), MainWindow,
                     progress)
    assert seen[-1][0] == 3 and seen[0][1] > 3
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("extra, message", [
    (["--size", "1281x720"], "must be even"),
    (["--size", "8000x4000"], "too large for a MP4: at most 3840x2160"),
    (["--size", "big"], "give 720p, 1080p or WIDTHxHEIGHT"),
    (["--fps", "0"], "frame rate 0"),
    (["--speed", "-1"], "speed -1"),
    (["--graphs", "race,pie"], "unknown graph 'pie'"),
])
def test_bad_settings_are_one_line(capsys, traces, tmp_path, extra, message):
    code = main(["export", *map(str, traces), str(tmp_path / "race.mp4"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_a_gif_too_large_is_refused(capsys, traces, tmp_path):
    code = main(["export", str(traces[0]), str(tmp_path / "race.gif"), "--size", "1080p",
                 "--hold", "0"])
    assert code == 0  # 1080p is the largest GIF
    code = main(["export", str(traces[0]), str(tmp_path / "big.gif"), "--size", "2560x1440"])
    assert code == 2 and "too large for a GIF" in capsys.readouterr().err
    assert not (tmp_path / "big.gif").exists()


def test_a_write_that_fails_midway_leaves_nothing(traces, tmp_path):
    """The file-size limit makes the encoder's write fail as a full disk does."""
    out = tmp_path / "race.mp4"

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    done = subprocess.run([sys.executable, "-m", "specviz", "export", *map(str, traces),
                           str(out), "--fps", "10"], preexec_fn=small_files,
                          capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "QT_QPA_PLATFORM": "offscreen"})
    lines = [line for line in done.stderr.splitlines() if line.startswith("specviz:")]
    assert done.returncode == 2 and lines and "cannot write" in lines[-1], done.stderr
    assert list(tmp_path.iterdir()) == []
