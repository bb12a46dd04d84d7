"""The window with its engine on `specviz serve` (`specviz --engine HOST:PORT`): lanes run
there as here, a wrong token, a refused run and a remote engine killed mid-run are each one
line in the lanes, and the window goes on."""

from __future__ import annotations

import os
import signal
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from test_app_run import PROMPT, lane_texts, run_to_end, set_up, tiny
from test_engine_crash import kill_mid_run
from test_serve import served  # noqa: F401  (a fixture, used by name)

from specviz.engines import events as ev
from specviz.engines.host.run_spec import LaneSpec
from specviz.engines.trace import read_trace

pytestmark = pytest.mark.gui


def remote_window(qtbot, address, token):
    from specviz.app.main_window import MainWindow
    from specviz.app.run.remote_engine import RemoteEngine

    win = MainWindow(remote=RemoteEngine(address, token))
    qtbot.addWidget(win)
    win.show()
    return win


def messages(window) -> list[str]:
    return [lane.message.text() for lane in window.board.lanes.values()]


def test_lanes_run_on_the_remote_engine_as_they_do_here(app_env, qtbot, served,
                                                       tiny_model_dir):
    window = remote_window(qtbot, *served)
    assert window.windowTitle() == f"specviz: engine at {served[0]}"
    set_up(window, tiny(tiny_model_dir), [LaneSpec("none"), LaneSpec("prompt-lookup", 4)], 24)
    run_to_end(window, app_env)
    texts = lane_texts(window)
    assert texts[0] == texts[1] and len(texts[0]) > 0  # lossless, over the wire
    lookup = list(window.board.lanes.values())[1]
    assert lookup.view.token_count == 24 and lookup.view.events[0].k == 4
    trace = read_trace(lookup.trace_path)  # the trace is written here, by the window
    assert trace.summary.reason == "max-tokens"
    pid = window.runner.engine.pid
    run_to_end(window, app_env)  # the connection and its engine are kept between runs
    assert window.runner.engine.pid == pid


def test_a_wrong_token_is_one_line_in_every_lane(app_env, qtbot, served, tiny_model_dir):
    window = remote_window(qtbot, served[0], "not-the-token")
    set_up(window, tiny(tiny_model_dir), [LaneSpec("none"), LaneSpec("prompt-lookup", 4)], 8)
    run_to_end(window, app_env)
    for text in messages(window):
        assert f"the engine at {served[0]} refused this window: wrong token" in text
        assert "SPECVIZ_ENGINE_TOKEN" in text
    assert window.menus.run_action.isEnabled()


def test_an_engine_that_cannot_be_reached_is_one_line(app_env, qtbot, tiny_model_dir):
    import socket

    from specviz.engines.host.relay import Address

    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    window = remote_window(qtbot, Address("127.0.0.1", port), "t")
    set_up(window, tiny(tiny_model_dir), [LaneSpec("none")], 8)
    run_to_end(window, app_env)
    assert "cannot reach the engine at 127.0.0.1:" in messages(window)[0]
    assert "specviz serve" in messages(window)[0]


def test_a_server_lane_is_refused_by_a_remote_engine(app_env, qtbot, served, tiny_model_dir):
    window = remote_window(qtbot, *served)
    set_up(window, tiny(tiny_model_dir),
           [LaneSpec("none"), LaneSpec("server", server="http://127.0.0.1:9")], 8)
    run_to_end(window, app_env)
    for text in messages(window):
        assert "refused the run" in text and "no requests to other hosts" in text
    set_up(window, tiny(tiny_model_dir), [LaneSpec("none")], 8)
    run_to_end(window, app_env)  # the connection stays good
    assert window.board.lanes[next(iter(window.board.lanes))].view.token_count == 8


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_remote_engine_killed_mid_run_keeps_everything(app_env, qtbot, served,
                                                         tiny_model_dir):
    window = remote_window(qtbot, *served)
    set_up(window, tiny(tiny_model_dir), [LaneSpec("none"), LaneSpec("prompt-lookup", 4)],
           400, PROMPT)
    pid = kill_mid_run(window, app_env, qtbot, signal.SIGKILL)
    lanes = list(window.board.lanes.values())
    for lane in lanes:
        assert "engine process killed by SIGKILL" in lane.message.text()
        trace = read_trace(lane.trace_path)
        assert trace.summary.reason == ev.REASON_CRASHED
        assert [e.step for e in trace.steps] == [e.step for e in lane.view.events]
    window.prompt.max_tokens.setValue(12)
    run_to_end(window, app_env)  # a fresh connection, a fresh engine
    assert window.runner.engine.pid != pid
    assert [lane.view.token_count for lane in lanes] == [12, 12]
