"""Live runs in the window: lanes in an engine process, K changes, errors, closing mid-run,
and the engine process dying mid-run."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from engine_waits import HUNG_MS, HUNG_S
from step_factory import make_step

from specviz.app.run.preflight import time_left
from specviz.app.state.run_setup import gui_threads, profile_costs, traces_dir
from specviz.engines.host.run_spec import LaneSpec, ModelChoice
from specviz.engines.trace import read_trace

pytestmark = pytest.mark.gui

PROMPT = "def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog."


def set_up(window, model: ModelChoice, oracles: list[LaneSpec], max_tokens: int,
           prompt: str = PROMPT) -> None:
    window.board.remove_all()
    for config in oracles:
        window.add_lane(config)
    window.prompt.set_prompt(prompt)
    window.prompt.set_model_choice(model)
    window.prompt.max_tokens.setValue(max_tokens)


def tiny(path: Path) -> ModelChoice:
    return ModelChoice(str(path), "transformers", "cpu")


def engines_running(window) -> bool:
    return any(engine.running for engine in window.runner.engines.values())


def lane_texts(window) -> list[str]:
    return ["".join(e.text for e in lane.view.events) for lane in window.board.lanes.values()]


def finish(loop, task, timeout: float = HUNG_S) -> None:
    """Run the Qt loop until the run's task ends (a hung run fails instead of hanging)."""
    loop.run_until_complete(asyncio.wait_for(task, timeout))


def run_to_end(window, loop) -> None:
    task = window.start_run()
    assert task is not None
    finish(loop, task)
    window.board.drain()


def test_two_lanes_run_to_the_end_and_are_recorded(window, app_env, tiny_model_dir):
    set_up(window, tiny(tiny_model_dir), [LaneSpec("none"), LaneSpec("prompt-lookup", 4)], 40)
    run_to_end(window, app_env)
    plain, lookup = window.board.lanes.values()
    assert plain.view.token_count == lookup.view.token_count == 40
    assert lane_texts(window)[0] == lane_texts(window)[1]  # greedy: speculation is lossless
    assert lookup.view.events[0].k == 4 and plain.view.events[0].k == 0
    figures = window.board.model.figures(lookup.lane_id)
    assert figures["tokens"] == 40 and figures["speedup"] is not None
    assert "40 tokens" in lookup.figures.text()
    assert "ended: max-tokens" in lookup.message.text()
    for lane in (plain, lookup):
        trace = read_trace(lane.trace_path)
        assert lane.trace_path.parent == traces_dir()
        assert trace.problem is None and trace.summary.reason == "max-tokens"
        assert [e.step for e in trace.steps] == [e.step for e in lane.view.events]
    assert window.menus.run_action.isEnabled() and engines_running(window)  # kept for the next run


def test_lanes_share_one_model_and_the_next_run_loads_nothing(window, app_env, tiny_model_dir):
    set_up(window, tiny(tiny_model_dir), [LaneSpec("none"), LaneSpec("prompt-lookup", 4)], 30)
    run_to_end(window, app_env)
    first = lane_texts(window)
    engine = window.runner.engine.pid
    assert window.runner.stats == {"loads": 1, "idle": 2}  # one copy, two caches, kept
    run_to_end(window, app_env)
    assert lane_texts(window) == first and window.runner.stats["loads"] == 1
    assert window.runner.engine.pid == engine  # the same process, models and all
    other_threads = gui_threads() - 1 or gui_threads() + 1  # within the threads box's range
    window.prompt.set_model_choice(ModelChoice(str(tiny_model_dir), "transformers", "cpu",
                                               other_threads))
    run_to_end(window, app_env)  # other settings: the kept models go, one copy is loaded
    assert lane_texts(window) == first and window.runner.stats == {"loads": 2, "idle": 2}
    old = window.runner.engine
    window.prompt.set_model_choice(ModelChoice(str(tiny_model_dir), "transformers", None))
    run_to_end(window, app_env)  # another device: its own engine; the other one ends
    assert lane_texts(window) == first and window.runner.stats == {"loads": 1, "idle": 2}
    assert window.runner.engine is not old and not old.running


def test_k_change_from_the_ui_reaches_the_running_session(window, app_env, qtbot,
                                                           tiny_model_dir):
    set_up(window, tiny(tiny_model_dir), [LaneSpec("prompt-lookup", 4)], 60)
    window.start_run()
    window.menus.pause_action.trigger()  # holds the sessions before their first step
    lane = next(iter(window.board.lanes.values()))
    qtbot.waitUntil(lambda: window.runner.started(lane.lane_id), timeout=HUNG_MS)
    lane.k.setValue(9)
    window.menus.pause_action.trigger()
    finish(app_env, window.run_task)
    window.board.drain()
    steps = lane.view.events
    assert steps[0].k == 9
    assert all(e.k == 9 for e in steps if e.totals.tokens + 9 < 60)  # the end cuts K


def test_k_change_marks_the_graphs(window, monkeypatch):
    marks = []
    window.board.model.k_marked.connect(lambda *a: marks.append(a))
    lane = window.board.add_lane(LaneSpec("prompt-lookup", 4))
    window.board.state(lane.lane_id).max_tokens = 100
    for step, k in enumerate((4, 4, 9, 9)):
        window.board.push(lane.lane_id, make_step(step, k))
    window.board.drain()
    assert marks == [(lane.lane_id, 2, "K=9")]


def close_and_see(window) -> bool:
    """Close the window; whether its engines ended on being asked (else they were killed).

    "Quickly" is what the engine guarantees, not a time: asked mid-run, it stops its lanes at
    their next step boundary (a paused lane at once) and ends without tearing down, instead
    of running the rest of the run; a paused engine asked nothing would never end. How long
    that takes is the machine's (1.4 s quiet, 7 s beside two busy processes, past the window's
    own CLOSE_TIMEOUT_S, after which it kills), so the wait here is the hang guard's."""
    ended = []
    shutdown = window.runner.shutdown
    window.runner.shutdown = lambda _timeout: ended.append(shutdown(HUNG_S)) or ended[-1]
    window.close()
    return ended == [True]


def test_closing_mid_run_ends_the_engine_quickly(window, app_env, qtbot, tiny_model_dir):
    set_up(window, tiny(tiny_model_dir), [LaneSpec("none"), LaneSpec("prompt-lookup")], 400)
    window.start_run()
    window.menus.pause_action.trigger()  # mid-run for sure, however fast the model
    qtbot.waitUntil(lambda: all(window.runner.started(lane) for lane in window.board.lanes),
                    timeout=HUNG_MS)
    assert engines_running(window)
    ended_itself = close_and_see(window)
    assert ended_itself and not engines_running(window)
    for lane in window.board.lanes.values():
        assert read_trace(lane.trace_path).summary.reason == "stopped"


def test_a_failing_lane_leaves_the_others_running(window, app_env, tiny_model_dir, tmp_path):
    lanes = [LaneSpec("none"), LaneSpec("draft", 4, str(tmp_path / "missing.gguf")),
             LaneSpec("prompt-lookup")]
    set_up(window, tiny(tiny_model_dir), lanes, 30)
    run_to_end(window, app_env)
    plain, draft, lookup = window.board.lanes.values()
    assert "no such model file" in draft.message.text() and not draft.view.events
    assert plain.view.token_count == lookup.view.token_count == 30


def test_a_memory_that_cannot_be_saved_is_said_in_its_lane_as_the_run_ends(
        window, app_env, tiny_model_dir, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    lanes = [LaneSpec("suffix", suffix_memory=str(blocker / "memory.jsonl"))]
    set_up(window, tiny(tiny_model_dir), lanes, 12)
    run_to_end(window, app_env)
    (lane,) = window.board.lanes.values()
    assert lane.view.token_count == 12
    assert "the suffix memory could not be saved" in lane.message.text()
    assert lane.message.text().startswith("ended: max-tokens, 12 tokens")


def test_a_draft_lane_on_the_same_model_runs(window, app_env, tiny_model_dir):
    lanes = [LaneSpec("none"), LaneSpec("draft", 3, str(tiny_model_dir))]
    set_up(window, tiny(tiny_model_dir), lanes, 24)
    run_to_end(window, app_env)
    _plain, draft = window.board.lanes.values()
    assert draft.view.token_count == 24
    assert lane_texts(window)[0] == lane_texts(window)[1]
    assert window.board.model.figures(draft.lane_id)["acceptance_rate"] > 0.5


def test_a_prompt_too_long_shows_in_the_lanes_and_the_window_keeps_working(
        window, app_env, tiny_model_dir):
    set_up(window, tiny(tiny_model_dir), [LaneSpec("none"), LaneSpec("ngram")], 10,
           prompt="The quick brown fox jumps over the lazy dog. " * 80)
    run_to_end(window, app_env)
    for lane in window.board.lanes.values():
        assert "context" in lane.message.text() and not lane.view.events
    window.prompt.set_prompt(PROMPT)
    run_to_end(window, app_env)
    assert [lane.view.token_count for lane in window.board.lanes.values()] == [10, 10]
    assert not any("context" in lane.message.text() for lane in window.board.lanes.values())


@pytest.mark.model
def test_smollm2_lanes_race_in_step(window, app_env, qtbot, smollm2_path):
    model = ModelChoice(str(smollm2_path), "llama", "cpu")
    prompt = (Path(__file__).parents[1] / "assets/prompts/summarise-meeting.txt").read_text()
    set_up(window, model, [LaneSpec("none"), LaneSpec("prompt-lookup", 4)], 48, prompt)
    run_to_end(window, app_env)
    plain, lookup = window.board.lanes.values()
    assert plain.view.token_count == lookup.view.token_count == 48
    assert lane_texts(window)[0] == lane_texts(window)[1]
    assert window.board.model.figures(lookup.lane_id)["mean_accepted_tokens"] > 1.2
    # Closing mid-run, unpaused: each step is milliseconds, so stopping is prompt.
    window.prompt.max_tokens.setValue(400)
    window.start_run()
    qtbot.waitUntil(lambda: len(lookup.view.events) > 2, timeout=HUNG_MS)
    assert close_and_see(window) and not engines_running(window)


def test_lanes_of_the_layer_and_cross_draft_oracles_run_losslessly(window, app_env,
                                                                    tiny_model_dir):
    lanes = [LaneSpec("none"), LaneSpec("early-exit", 3, settings={"exit_layer": 1}),
             LaneSpec("cross-draft", 3, str(tiny_model_dir))]
    set_up(window, tiny(tiny_model_dir), lanes, 20)
    _plain, early, cross = window.board.lanes.values()
    assert early.exit_layer.isVisible() and not cross.exit_layer.isVisible()
    assert cross.draft.isVisible() and not early.draft.isVisible()
    assert early.config().settings == {"exit_layer": 1}
    run_to_end(window, app_env)
    for lane in (early, cross):  # each guessed, so an equal text says it stayed lossless
        assert any(e.proposed for e in lane.view.events), lane.config().oracle
    texts = lane_texts(window)
    assert texts[1:] == [texts[0]] * 2


@pytest.mark.model
def test_a_rules_lane_guesses_and_runs_losslessly(window, app_env, smollm2_path):
    """On smollm2 (a random model's text gives the rules nothing to go on): the signature
    line is copied from the prompt, and the text is plain decoding's."""
    prompt = ("Add type hints to this Python function. Keep the body exactly as it is.\n\n"
              "def merge_counts(left, right):\n    merged = dict(left)\n"
              "    for key, value in right.items():\n"
              "        merged[key] = merged.get(key, 0) + value\n    return merged\n")
    model = ModelChoice(str(smollm2_path), "llama", "cpu")
    set_up(window, model, [LaneSpec("none"), LaneSpec("rules", 8)], 32, prompt)
    _plain, rules = window.board.lanes.values()
    assert not rules.exit_layer.isVisible() and not rules.draft.isVisible()
    run_to_end(window, app_env)
    assert any(t.accepted for e in rules.view.events for t in e.proposed)
    texts = lane_texts(window)
    assert texts[1] == texts[0]


def test_exit_layer_change_from_the_ui_reaches_the_running_oracle(window, app_env, qtbot,
                                                                   tiny_model_dir):
    lane = LaneSpec("early-exit", 3, settings={"exit_layer": 1})
    set_up(window, tiny(tiny_model_dir), [lane], 30)
    window.start_run()
    window.menus.pause_action.trigger()
    lane = next(iter(window.board.lanes.values()))
    qtbot.waitUntil(lambda: window.runner.started(lane.lane_id), timeout=HUNG_MS)
    lane.exit_layer.setValue(2)
    lane.exit_layer.setValue(7)  # the tiny model has 2 layers: refused, said in the lane
    qtbot.waitUntil(lambda: "outside 1..2" in lane.message.text(), timeout=HUNG_MS)
    window.menus.pause_action.trigger()
    finish(app_env, window.run_task)
    window.board.drain()
    details = {t.detail for e in lane.view.events for t in e.proposed}
    assert details == {"layer 2/2"}


def test_auto_k_lane_runs_losslessly_and_keeps_its_setting(window, app_env, tiny_model_dir,
                                                           monkeypatch):
    set_up(window, tiny(tiny_model_dir),
           [LaneSpec("none"), LaneSpec("prompt-lookup", 4, auto_k=True)], 24)
    _plain, auto = window.board.lanes.values()
    assert auto.config().auto_k and not auto.k.slider.isEnabled()
    assert profile_costs(window.request().model)[0] is None  # none stored yet
    run_to_end(window, app_env)
    assert lane_texts(window)[0] == lane_texts(window)[1]
    assert all(0 <= e.k <= 31 for e in auto.view.events)
    assert auto.message.text().startswith("ended")
    # The lane measured the profile it needed; the curves are now priced with it.
    assert "transformers/cpu" in window.graphs.cost_curve.plot.getAxis("bottom").labelText


def test_tree_dock_follows_the_run_until_a_step_is_clicked(window, app_env, tiny_model_dir):
    set_up(window, tiny(tiny_model_dir), [LaneSpec("lookahead", 4)], 30)
    window.tree_dock.show()
    run_to_end(window, app_env)
    lane = next(iter(window.board.lanes.values()))
    newest = [e for e in lane.view.events if e.tree or e.lookahead][-1]
    assert window.tree_view.event is newest  # followed the run to its end
    window.focus.click(lane, 2)
    window.board.drain()
    assert window.tree_view.event is lane.view.events[2]  # pinned


def test_auto_k_switched_off_mid_run_falls_back_to_the_lanes_k(window, app_env, qtbot,
                                                               tiny_model_dir):
    set_up(window, tiny(tiny_model_dir), [LaneSpec("prompt-lookup", 3, auto_k=True)], 40)
    window.start_run()
    window.menus.pause_action.trigger()
    lane = next(iter(window.board.lanes.values()))
    qtbot.waitUntil(lambda: window.runner.started(lane.lane_id), timeout=HUNG_MS)
    assert lane.k.auto.isEnabled()  # auto K can change while the lane runs
    lane.k.set_auto(False)
    window.menus.pause_action.trigger()
    finish(app_env, window.run_task)
    window.board.drain()
    steps = lane.view.events
    assert {e.k for e in steps[1:] if e.totals.tokens + 3 < 40} == {3}


def test_auto_k_switched_on_mid_run_measures_a_profile_and_stays_lossless(
        window, app_env, qtbot, tiny_model_dir):
    """No profile is stored (a fresh SPECVIZ_HOME): switching auto K on measures one on the
    lane's own target between two steps, which must leave the run's cache as it was."""
    set_up(window, tiny(tiny_model_dir), [LaneSpec("none"), LaneSpec("prompt-lookup", 3)], 60)
    window.start_run()
    plain, lookup = window.board.lanes.values()

    def a_few_steps() -> bool:
        window.board.drain()
        return len(window.board.state(lookup.lane_id).steps) >= 3

    qtbot.waitUntil(a_few_steps, timeout=HUNG_MS)
    window.menus.pause_action.trigger()
    lookup.k.set_auto(True)
    window.menus.pause_action.trigger()
    finish(app_env, window.run_task)
    window.board.drain()
    assert lane_texts(window)[0] == lane_texts(window)[1]
    assert plain.view.token_count == lookup.view.token_count == 60


def test_profile_this_machine_and_a_picked_draft_is_checked(window, app_env, qtbot,
                                                            tiny_model_dir, monkeypatch):
    """No profile: no curves, one click measures it in the engine with progress, the curves
    come back priced by it. Picking a draft model for a draft lane checks the pair."""
    set_up(window, tiny(tiny_model_dir), [LaneSpec("draft", 3, draft=str(tiny_model_dir))], 8)
    window._show_costs()
    curve = window.graphs.cost_curve
    assert not curve.profile_button.isHidden()
    seen = []
    window.checks.tasks.progress.connect(lambda *args: seen.append(args))
    with qtbot.waitSignal(window.checks.tasks.finished, timeout=HUNG_MS):
        curve.profile_button.click()
    assert seen and seen[-1][2] == seen[-1][3]  # progress to the end
    assert curve.profile_button.isHidden()
    assert "transformers/cpu" in curve.plot.getAxis("bottom").labelText
    lane = next(iter(window.board.lanes.values()))
    with qtbot.waitSignal(window.checks.tasks.finished, timeout=HUNG_MS):
        lane.draft.picked.emit(str(tiny_model_dir))
    assert "tokenizers: draft" in lane.message.text()
    assert "guesses right 100%" in lane.message.text()
    assert 'href="details"' in lane.message.text()  # the item-by-item report behind a link
    lane.message.linkActivated.emit("details")
    shown = lane.details_box.text()
    assert lane.details_box.isVisible() and "vocabulary type" in shown and "break-even" in shown


def test_progress_says_how_long_is_left_at_the_rate_so_far():
    assert time_left(10.0, 1, 100) == ""  # one step is no rate yet
    assert time_left(10.0, 10, 100) == ", about 2 min left"
    assert time_left(2.0, 10, 100) == ", about 18 s left"
    assert time_left(5.0, 100, 100) == ""


def test_server_lanes_run_in_the_window_a_plain_server_is_their_baseline(
        window, app_env, qtbot, tiny_model_dir, monkeypatch):
    from fake_server import FakeServer
    from test_server_stream import STEPS, llama_chunks, llama_routes

    from specviz.app.state.server_keys import origin

    for name in ("SPECVIZ_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)

    plain_props = {"default_generation_settings": {"params": {"speculative.types": "none"}},
                   "build_info": "b1-test", "model_path": "/m/smol.gguf"}
    plain_steps = [([t], 0, 0, 10.0) for texts, *_ in STEPS for t in texts]
    with FakeServer(llama_routes()) as spec, \
            FakeServer(llama_routes(llama_chunks(plain_steps), props=plain_props)) as plain:
        set_up(window, tiny(tiny_model_dir), [LaneSpec("server", 4, server=plain.url),
                                             LaneSpec("server", 4, server=spec.url)], 32)
        lane_plain, lane_spec = window.board.lanes.values()
        assert lane_spec.server.isVisible() and not lane_spec.draft.isVisible()
        dialog = window.dialogs.ask_server_key()  # Run > Server API key…, first server lane's URL
        assert dialog.url.text() == plain.url
        dialog.url.setText(spec.url + "/v1")
        dialog.key.setText("sk-window")
        dialog.accept()
        assert window.settings.server_key(origin(spec.url)) == "sk-window"
        assert oct(Path(window.settings.store.fileName()).stat().st_mode & 0o777) == "0o600"
        run_to_end(window, app_env)
    assert spec.requests[-1][2]["Authorization"] == "Bearer sk-window"
    assert "Authorization" not in plain.requests[-1][2]  # a key goes to its own server only
    assert "sk-window" not in lane_spec.trace_path.read_text()
    assert lane_texts(window) == ["def f(x): return x\n"] * 2
    assert window.board.model.baseline() == lane_plain.lane_id
    assert lane_plain.legend._kinds == ("target",)  # a plain server drafts nothing
    assert lane_spec.legend._kinds == ("draft", "target", "rejected")
    figures = window.board.model.figures(lane_spec.lane_id)
    assert figures["speedup"] is not None and figures["tokens"] == 9
    assert read_trace(lane_spec.trace_path).header["server"]["url"] == spec.url
