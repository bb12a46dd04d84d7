"""The engine process dies mid-run (a real signal): the window keeps what it received, says
what happened in each lane, keeps it in the traces, and runs again with a fresh process."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from engine_waits import HUNG_MS
from test_app_run import finish, lane_texts, run_to_end, set_up, tiny

from specviz.engines import events as ev
from specviz.engines.host.run_spec import LaneSpec, ModelChoice
from specviz.engines.trace import read_trace

pytestmark = [pytest.mark.gui, pytest.mark.skipif(sys.platform == "win32",
                                                  reason="POSIX signals")]
PROMPT = (Path(__file__).parents[1] / "assets/prompts/code-edit-scale.txt").read_text()


def kill_mid_run(window, app_env, qtbot, sig: signal.Signals) -> int:
    """Start a long run, let every lane show a few steps, pause it, kill the engine."""
    task = window.start_run()
    lanes = list(window.board.lanes.values())

    def some_steps() -> bool:
        window.board.drain()
        return all(len(lane.view.events) >= 3 for lane in lanes)

    qtbot.waitUntil(some_steps, timeout=HUNG_MS)
    window.menus.pause_action.trigger()  # the run cannot end on its own before the signal
    pid = window.runner.engine.pid
    os.kill(pid, sig)
    finish(app_env, task)
    window.board.drain()
    if window.menus.pause_action.isChecked():
        window.menus.pause_action.trigger()
    return pid


def check_after_the_crash(window, sig: signal.Signals) -> None:
    for lane in window.board.lanes.values():
        message = lane.message.text()
        assert f"engine process killed by {sig.name}" in message, message
        assert "Run starts a fresh engine" in message
        shown = lane.view.events
        assert len(shown) >= 3  # what arrived stays on screen
        trace = read_trace(lane.trace_path)
        assert trace.problem is None
        assert [e.step for e in trace.steps] == [e.step for e in shown]
        assert trace.summary.reason == ev.REASON_CRASHED and sig.name in trace.summary.error
        assert trace.summary.text == "".join(e.text for e in shown)
    assert window.menus.run_action.isEnabled() and not window.runner.running


def test_sigkill_mid_run_keeps_everything_and_the_next_run_works(window, app_env, qtbot,
                                                                  tiny_model_dir):
    set_up(window, tiny(tiny_model_dir), [LaneSpec("none"), LaneSpec("prompt-lookup", 4)],
           400, PROMPT)
    pid = kill_mid_run(window, app_env, qtbot, signal.SIGKILL)
    check_after_the_crash(window, signal.SIGKILL)
    first = next(iter(window.board.lanes.values()))
    assert "out of memory, or killed from outside" in first.message.text()
    window.prompt.max_tokens.setValue(20)
    run_to_end(window, app_env)
    assert window.runner.engine.pid != pid and window.runner.crash is None
    assert [lane.view.token_count for lane in window.board.lanes.values()] == [20, 20]
    texts = lane_texts(window)
    assert texts[0] == texts[1]


@pytest.mark.model
def test_sigsegv_in_llama_cpp_is_named_with_the_build(window, app_env, qtbot, smollm2_path):
    model = ModelChoice(str(smollm2_path), "llama", "cpu", 1)
    set_up(window, model, [LaneSpec("none"), LaneSpec("ngram", 4)], 400, PROMPT)
    kill_mid_run(window, app_env, qtbot, signal.SIGSEGV)
    check_after_the_crash(window, signal.SIGSEGV)
    message = next(iter(window.board.lanes.values())).message.text()
    assert "running llama-cpp-python" in message and "CPU :" in message  # build, system info
    window.prompt.max_tokens.setValue(12)
    run_to_end(window, app_env)
    assert [lane.view.token_count for lane in window.board.lanes.values()] == [12, 12]


def test_a_shot_whose_engine_dies_still_saves_the_window(tmp_path, tiny_model_dir, monkeypatch):
    """`specviz shot` in this process; its engine is killed at the third step it reports."""
    from PySide6.QtGui import QImage

    from specviz.app.cli.main import main
    from specviz.app.run import live

    seen = []
    on_event = live.LiveRunner._on_event

    def kill_at_third(self, lane_id, event):
        on_event(self, lane_id, event)
        seen.append(event)
        if len(seen) == 3:
            os.kill(self.engine.pid, signal.SIGKILL)

    monkeypatch.setattr(live.LiveRunner, "_on_event", kill_at_third)
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path / "home"))
    prompt = tmp_path / "p.txt"
    prompt.write_text(PROMPT)
    out = tmp_path / "shot.png"
    code = main(["shot", str(out), "--prompt-file", str(prompt), "--target",
                 str(tiny_model_dir), "--backend", "transformers", "--oracles", "none,ngram",
                 "--max-tokens", "400", "--size", "900x600"])
    assert code == 2
    assert QImage(str(out)).width() == 900
