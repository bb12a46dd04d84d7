"""`specviz shot`, `specviz replay` and the window's exports under faults, as a user meets them.

Each fault is a real child process: a missing folder, a read-only one, a full disk (the
file-size limit), traces of two prompts, a trace holding one token of megabytes, Ctrl-C in
the middle of a run. Each ends with exit 2 (130 for Ctrl-C) and one `specviz:` line, and the
folder holds what it held before: no picture, no temporary file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from engine_waits import HUNG_S
from write_faults import (
    files_in,
    one_line,
    python,
    specviz,
)

pytestmark = pytest.mark.gui

DATA = Path(__file__).parent / "data"
PLAIN = DATA / "small_trace_plain.jsonl"  # smollm2-135m decoding plainly, 64 tokens
# Qt's offscreen platform warns that it cannot size windows; the rest of stderr is ours.
QUIET = {"QT_QPA_PLATFORM": "offscreen", "QT_LOGGING_RULES": "default.warning=false"}


def retraced(out: Path, prompt: str | None = None, big_token: int = 0) -> Path:
    """PLAIN rewritten: another prompt in its header, or its fourth step's token `big_token`
    characters long (with no space or newline for the layout to break at)."""
    records = [json.loads(line) for line in PLAIN.read_text(encoding="utf-8").splitlines()]
    if prompt is not None:
        records[0]["prompt"] = prompt
    if big_token:
        step = next(r for r in records if r.get("kind") == "step" and r["step"] == 3)
        step["target"]["text"] = step["text"] = "word" * (big_token // 4)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                   encoding="utf-8")
    return out


def env(tmp_path: Path) -> dict[str, str]:
    return {**QUIET, "SPECVIZ_HOME": str(tmp_path / "home")}


# ---------------------------------------------------------------- the picture's file


def _missing(folder: Path) -> Path:
    return folder / "missing"  # not made


def _read_only(folder: Path) -> Path:
    folder.chmod(0o555)
    return folder


def _full(folder: Path) -> Path:
    (folder / "shot.png").write_bytes(b"the shot from before")
    return folder


WRITE_FAULTS = {  # fault -> (set the folder up, child's faults, the reason said)
    "missing folder": (_missing, {}, "No such file or directory"),
    "read-only folder": (_read_only, {"read_only": True}, "Permission denied"),
    "full disk": (_full, {"fsize": 20_000}, "File too large"),
}


@pytest.mark.parametrize("fault", WRITE_FAULTS)
def test_a_shot_that_cannot_be_written_is_one_line_and_leaves_nothing(fault, tmp_path):
    make, faults, reason = WRITE_FAULTS[fault]
    folder = tmp_path / "pictures"
    folder.mkdir()
    out = make(folder) / "shot.png"
    before = files_in(tmp_path / "pictures")
    try:
        done = specviz("shot", out, "--replay", PLAIN, env=env(tmp_path), timeout=HUNG_S,
                       **faults)
    finally:
        folder.chmod(0o755)
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr) == f"specviz: cannot write {out}: {reason}"
    assert files_in(folder) == before  # no picture, no half of one, no temporary file


def test_a_shot_replaces_the_picture_before_it_whole(tmp_path):
    out = tmp_path / "shot.png"
    out.write_bytes(b"the shot from before")
    done = specviz("shot", out, "--replay", PLAIN, "--size", "600x400", env=env(tmp_path),
                   timeout=HUNG_S)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes().startswith(b"\x89PNG")
    assert [p.name for p in tmp_path.iterdir() if p.name != "home"] == ["shot.png"]


# ---------------------------------------------------------------- the window's exports

EXPORT = """
import os
import sys
from pathlib import Path
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import QApplication
from specviz.app.export import files
from specviz.engines.errors import SpecvizError

app = QApplication([])
what, out, trace = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
noise = os.urandom(300 * 300 * 4)  # a picture that does not compress into the room left
picture = QPixmap.fromImage(QImage(noise, 300, 300, QImage.Format.Format_ARGB32))
rows = [{"lane": str(n), "oracle": "none", "tokens": n} for n in range(4000)]
try:
    {"png": lambda: files.save_png(picture, out),
     "csv": lambda: files.write_figures_csv(out, rows),
     "traces": lambda: files.copy_traces([trace], out)}[what]()
except SpecvizError as exc:
    print(f"specviz: {exc}", file=sys.stderr)
    sys.exit(2)
"""


def _child(script: str, *argv: object, fsize: int | None = None,
           read_only: bool = False) -> subprocess.CompletedProcess:
    """`python -c script ARGV` under the faults `write_faults.specviz` makes."""
    return python("-c", script, *argv, fsize=fsize, read_only=read_only, env=QUIET,
                  timeout=HUNG_S)


@pytest.mark.parametrize(("what", "fault"), [
    (what, fault) for what in ("png", "csv", "traces") for fault in WRITE_FAULTS
    if (what, fault) != ("traces", "missing folder")])  # Save traces makes the folder it names
def test_an_export_from_the_window_that_cannot_be_written_leaves_nothing(what, fault,
                                                                         tmp_path):
    make, faults, reason = WRITE_FAULTS[fault]
    trace = tmp_path / "run.jsonl"
    trace.write_bytes(PLAIN.read_bytes() * 3)  # larger than the full disk's room
    folder = tmp_path / "exports"
    folder.mkdir()
    (folder / trace.name).write_bytes(b"the copy from before")
    place = make(folder)
    out = place if what == "traces" else place / f"figures.{what}"
    before = files_in(folder)
    try:
        done = _child(EXPORT, what, out, trace, **faults)
    finally:
        folder.chmod(0o755)
    assert done.returncode == 2, done.stderr
    named = out / trace.name if what == "traces" else out
    assert one_line(done.stderr) == f"specviz: cannot write {named}: {reason}"
    assert files_in(folder) == before


# ---------------------------------------------------------------- traces of two prompts

PROMPT_COMMANDS = {
    "shot": lambda out, a, b: ["shot", out, "--replay", a, b],
    "shot, picture last": lambda out, a, b: ["shot", "--replay", a, b, out],
    "replay": lambda out, a, b: ["replay", a, b],  # the window: refused before it opens
}


@pytest.mark.parametrize("command", PROMPT_COMMANDS)
def test_traces_of_different_prompts_are_refused_as_export_refuses_them(command, tmp_path):
    """A race of two prompts would show a speedup that compares different work."""
    other = retraced(tmp_path / "other.jsonl", prompt="Write a haiku about the sea.")
    out = tmp_path / "shot.png"
    done = specviz(*PROMPT_COMMANDS[command](out, PLAIN, other), env=env(tmp_path),
                   timeout=HUNG_S)
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr) == (f"specviz: {PLAIN} and {other} ran different prompts: a "
                                     "race needs one prompt (replay or export them one at a "
                                     "time)")
    assert not out.exists()


def test_the_window_opens_no_race_of_two_prompts(app_env, qtbot, tmp_path):
    from specviz.app.main_window import MainWindow
    from specviz.engines.errors import SpecvizError

    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    before = [lane.config() for lane in window.board.lanes.values()]
    other = retraced(tmp_path / "other.jsonl", prompt="Write a haiku about the sea.")
    with pytest.raises(SpecvizError, match="ran different prompts"):
        window.open_replay([PLAIN, other])
    assert not window.replaying
    assert [lane.config() for lane in window.board.lanes.values()] == before


def test_export_refuses_two_prompts_by_the_same_rule(tmp_path):
    other = retraced(tmp_path / "other.jsonl", prompt="Write a haiku about the sea.")
    out = tmp_path / "race.html"
    done = specviz("export", PLAIN, other, out, env=env(tmp_path), timeout=HUNG_S)
    assert done.returncode == 2 and not out.exists(), done.stderr
    assert one_line(done.stderr).endswith("(replay or export them one at a time)")


# ---------------------------------------------------------------- one token of megabytes


def test_a_token_of_megabytes_is_shot_in_seconds(tmp_path):
    """Laid out whole, Qt spent 40 s on a token of 1 MB and minutes on one of 4 MB."""
    trace = retraced(tmp_path / "big.jsonl", big_token=4_000_000)
    out = tmp_path / "shot.png"
    done = specviz("shot", out, "--replay", trace, env=env(tmp_path), timeout=HUNG_S)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes().startswith(b"\x89PNG")


def test_the_lane_shows_a_huge_token_cut_with_its_length_and_the_step_dock_whole(qtbot):
    from step_factory import make_step

    from specviz.board.describe import TOKEN_SHOWN_CHARS, target_tooltip, visible
    from specviz.engines import events as ev
    from specviz.widgets.inspector import TOKEN_COLUMN, StepInspector
    from specviz.widgets.token_view import TokenView

    huge = "ab" * 600_000
    short = "x" * TOKEN_SHOWN_CHARS  # as long as a token may be and still be shown whole
    draft = ev.ProposedToken(7, short, "prompt", True)
    event = make_step(proposed=(draft,), target=ev.TargetToken(1, huge, ev.TARGET_BONUS,
                                                               1.0, 1.0))
    view, inspector = TokenView(), StepInspector()
    qtbot.addWidget(view)
    qtbot.addWidget(inspector)
    view.append_step(event)
    view.flush()
    assert view.editor.toPlainText() == f"{short}{huge[:TOKEN_SHOWN_CHARS]}…(1,200,000 chars)"
    assert view.token_at_position(TOKEN_SHOWN_CHARS + 5) == (0, 1)  # still the target token
    assert "…(1,200,000 chars)" in target_tooltip(event)
    assert len(target_tooltip(event)) < 2 * TOKEN_SHOWN_CHARS
    inspector.show_step(event)
    assert inspector.table.item(1, TOKEN_COLUMN).text() == visible(huge)


# ---------------------------------------------------------------- Ctrl-C


@pytest.mark.parametrize("to", ["the shot", "its process group"])
def test_ctrl_c_ends_a_shot_in_the_middle_of_its_run(to, tmp_path, tiny_gguf_path):
    """Qt's loop kept Python's handler from running, and a KeyboardInterrupt raised in a Qt
    callback was printed and dropped: the shot ran on to its end. A terminal's Ctrl-C goes to
    the whole group, the engine process too, which leaves its ending to the window. (On the
    tiny GGUF: the engine starts in a second, not the seconds torch takes to import; it
    decodes thousands of tokens a second, so 4000 keep the run going well past the signal.)"""
    out = tmp_path / "shot.png"
    child = subprocess.Popen(
        [sys.executable, "-m", "specviz", "shot", out, "--prompt", "def add(a, b):",
         "--target", tiny_gguf_path, "--oracles", "none", "--max-tokens", "4000"],
        env={**os.environ, **env(tmp_path)}, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        _wait_for_steps(tmp_path / "home" / "traces", child)
        if to == "the shot":
            child.send_signal(signal.SIGINT)
        else:
            os.killpg(child.pid, signal.SIGINT)
        _, err = child.communicate(timeout=HUNG_S)  # the hang guard: no verdict rests on it
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 130, err
    assert one_line(err) == "specviz: interrupted"
    assert [p.name for p in tmp_path.iterdir() if p.name != "home"] == []


def _wait_for_steps(traces: Path, child: subprocess.Popen, steps: int = 3) -> None:
    """Until the run's trace holds a few steps: the shot is then mid-run."""
    deadline = time.monotonic() + HUNG_S
    while time.monotonic() < deadline and child.poll() is None:
        found = list(traces.glob("*.jsonl"))
        if found and found[0].read_bytes().count(b"\n") > steps:
            return
        time.sleep(0.1)
    raise AssertionError(f"the shot never started its run (exit {child.poll()})")


# ---------------------------------------------------------------- --n-ctx


def test_shot_n_ctx_reaches_the_model(tmp_path):
    """A context of 16 tokens cannot hold this prompt: the lane says so (it was ignored, and
    the run used 4096)."""
    from tiny_gguf import write_tiny_gguf

    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    out = tmp_path / "shot.png"
    argv = ["shot", out, "--prompt", "def add(a, b): return a + b " * 4, "--target", model,
            "--oracles", "none", "--max-tokens", "4", "--k", "2"]
    done = specviz(*argv, "--n-ctx", "16", env=env(tmp_path), timeout=HUNG_S)
    assert done.returncode == 2, done.stderr
    assert "context" in done.stderr and "16" in done.stderr, done.stderr
    assert specviz(*argv, env=env(tmp_path), timeout=HUNG_S).returncode == 0
