"""A run started as a person starts one, by the Run action and by Ctrl+Enter typed in the
prompt, and the lanes' tokens read back in the colours of what happened to them: each
token's colour is its kind's in the window's theme, as the run's step events say."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from engine_waits import HUNG_MS
from PySide6.QtCore import Qt
from test_app_run import finish, set_up, tiny

from specviz.board.kinds import KIND_REJECTED, KIND_TARGET, proposal_kind
from specviz.engines.host.run_spec import LaneSpec

pytestmark = pytest.mark.gui

N = 16


def shown_tokens(view) -> list[tuple[int, int, str]]:
    """(step, token, colour) of each run of text in the lane's document, in order."""
    from PySide6.QtGui import QTextCharFormat

    from specviz.widgets.token_view import STEP_PROPERTY, TOKEN_PROPERTY

    shown = []
    block = view.editor.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            fmt: QTextCharFormat = fragment.charFormat()
            if fragment.isValid() and fmt.hasProperty(STEP_PROPERTY):
                shown.append((fmt.intProperty(STEP_PROPERTY), fmt.intProperty(TOKEN_PROPERTY),
                              fmt.foreground().color().name()))
            it += 1
        block = block.next()
    return shown


def kind_of(event, token: int) -> str:
    if token == len(event.proposed):
        return KIND_TARGET
    proposed = event.proposed[token]
    return proposal_kind(proposed) if proposed.accepted else KIND_REJECTED


def assert_colours_are_the_steps(window, lane) -> set[str]:
    """Every token the lane shows is in its kind's colour, and every token the steps wrote
    with text is shown; the kinds seen are returned."""
    theme, events = window.theme, lane.view.events
    shown = shown_tokens(lane.view)
    seen = set()
    for step, token, colour in shown:
        kind = kind_of(events[step], token)
        seen.add(kind)
        assert colour == theme.kind_colour(kind), (step, token, kind)
    # Qt merges neighbouring fragments of one format; each token is its own (its indices).
    written = {(s, t) for s, e in enumerate(events) for t in range(len(e.proposed) + 1)
               if (e.target.text if t == len(e.proposed) else e.proposed[t].text)
               and (t == len(e.proposed) or e.proposed[t].accepted or lane.view.show_rejected)}
    assert {(s, t) for s, t, _ in shown} == written
    return seen


def run_and_read(window, app_env, qtbot, start) -> None:
    """Start a run by `start`, run it to its end, and read every lane's colours."""
    assert window.run_task is None or window.run_task.done()
    before = window.run_task
    start()
    assert window.run_task is not None and window.run_task is not before, "no run started"
    finish(app_env, window.run_task)
    window.board.drain()
    plain, drafted, lookup = window.board.lanes.values()
    for lane in (plain, drafted, lookup):
        qtbot.waitUntil(lambda lane=lane: lane.view.token_count == N, timeout=HUNG_MS)
    assert assert_colours_are_the_steps(window, plain) == {KIND_TARGET}
    assert {KIND_TARGET, "draft"} <= assert_colours_are_the_steps(window, drafted)
    seen = assert_colours_are_the_steps(window, lookup)
    refused = any(not t.accepted for e in lookup.view.events for t in e.proposed)
    assert (KIND_REJECTED in seen) == (refused and lookup.view.show_rejected)


def test_the_run_action_and_ctrl_enter_start_runs_whose_tokens_show_what_happened(
        window, app_env, qtbot, tiny_model_dir):
    """The Run action, then (the engine kept warm) Ctrl+Enter typed where the prompt is
    written: each starts a run, types nothing into the prompt, and every lane's tokens come
    out in their kinds' colours (the plain lane's all the target's, the draft lane's kept
    guesses the draft's, prompt lookup's refused guesses struck through)."""
    draft = str(tiny_model_dir)  # the target as its own draft: its guesses kept
    set_up(window, tiny(tiny_model_dir), [LaneSpec("none"), LaneSpec("draft", 3, draft),
                                          LaneSpec("prompt-lookup", 4)], N)
    prompt = window.prompt.editor.toPlainText()
    assert window.menus.run_action.isEnabled()
    run_and_read(window, app_env, qtbot, window.menus.run_action.trigger)

    def ctrl_enter() -> None:
        window.activateWindow()
        window.prompt.editor.setFocus()
        qtbot.waitUntil(lambda: window.prompt.editor.hasFocus(), timeout=HUNG_MS)
        qtbot.keyClick(window.prompt.editor, Qt.Key.Key_Return,
                       Qt.KeyboardModifier.ControlModifier)

    run_and_read(window, app_env, qtbot, ctrl_enter)
    assert window.prompt.editor.toPlainText() == prompt  # the keys ran it, typed nothing
