"""The window's race of N streams (#84): the streams control, and a lane's total throughput
and its stream picker, fed as the engine process feeds them (started, then batch messages)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from engine_waits import HUNG_MS
from step_factory import make_step
from streams_factory import batch, guesses, header, summary

from specviz.engines import events as ev
from specviz.engines.loop.streams import BatchStep
from specviz.engines.trace import TraceWriter, read_trace

N = 3


def lanes(window) -> tuple[str, str]:
    """The first start's lanes: plain decoding, then prompt lookup."""
    plain, lookup = window.board.lanes
    return plain, lookup


def race(window, steps: int = 4, end: bool = False, header=header) -> None:
    """What the engine sends for a race of N streams: each lane's header, then batch steps
    by turns (and each lane's summary)."""
    plain, lookup = lanes(window)
    window.runner._on_started(plain, header("none", N))
    window.runner._on_started(lookup, header("prompt-lookup", N))
    kept: dict[str, list] = {plain: [], lookup: []}
    for i in range(steps):
        for lane_id, is_plain in ((plain, True), (lookup, False)):
            kept[lane_id].append(batch(i, N, is_plain, 10.0 if is_plain else 20.0))
            window.runner._on_batch(lane_id, kept[lane_id][-1])
    if end:
        for lane_id, steps_ in kept.items():
            window.runner._on_batch(lane_id, summary(steps_))
    window.board.drain()


def test_the_streams_control_is_one_to_sixteen_and_one_is_todays_race(window):
    box = window.prompt.streams
    assert (box.minimum(), box.maximum(), box.value()) == (1, 16, 1)
    assert window.request().streams == 1
    assert not any(lane.streams.isVisibleTo(lane) for lane in window.board.lanes.values())
    box.setValue(4)
    assert window.request().streams == 4


def test_a_lane_of_n_streams_shows_its_total_and_follows_the_stream_picked(window, qtbot):
    race(window)
    lookup = window.board.lanes[lanes(window)[1]]
    assert lookup.streams.isVisibleTo(lookup)
    assert [lookup.streams.combo.itemText(i) for i in range(N)] == [
        "stream 1", "stream 2", "stream 3"]
    # 3 streams x 3 tokens a step, 20 ms a step: 450 tok/s in all, 150 for the one shown
    assert lookup.streams.total.text() == "3 streams · 450.0 tok/s in all · this one 150.0 tok/s"
    assert [e.text for e in lookup.view.events] == ["s0t0", "s0t1", "s0t2", "s0t3"]
    lookup.streams.combo.activated.emit(2)  # the person picks stream 3
    window.board.drain()
    assert [e.text for e in lookup.view.events] == ["s2t0", "s2t1", "s2t2", "s2t3"]
    assert window.board.model.figures(lookup.lane_id)["tokens"] == 12  # its own tokens
    window.runner._on_batch(lookup.lane_id, batch(4, N, False, 20.0))
    window.board.drain()
    assert lookup.view.events[-1].text == "s2t4"  # later steps are the picked stream's too


def test_a_race_that_ended_then_one_of_one_stream_hides_the_picker_again(window):
    race(window, end=True)
    plain, lookup = lanes(window)
    assert window.board.lanes[lookup].view.events[-1].text == "s0t3"
    assert window.board.model.lanes[lookup].summary.text == "text0"  # stream 1's summary
    window.runner._on_started(plain, {"oracle": "none", "prompt": "p"})
    lane = window.board.lanes[plain]
    assert not lane.streams.isVisibleTo(lane)


def test_a_race_of_n_streams_traces_every_streams_steps(window):
    """The lane's trace keeps each batch step whole: every stream's steps and summary can be
    read back (a trace of stream 1 alone lost the others)."""
    race(window, end=True)
    trace = read_trace(window.board.lanes[lanes(window)[1]].trace_path)
    assert trace.problem is None and trace.streams == N
    for s in range(N):
        assert [e.text for e in trace.stream(s).steps] == [f"s{s}t{i}" for i in range(4)]
        assert trace.stream(s).summary.text == f"text{s}"
        assert trace.stream(s).header["prompt"] == f"p{s}"
    assert [e.text for e in trace.steps] == ["s0t0", "s0t1", "s0t2", "s0t3"]  # as before


def test_a_race_of_n_streams_cut_off_by_the_engine_keeps_every_streams_steps(window):
    race(window)
    window.runner._lane_ids = list(lanes(window))  # as a run's start sets them
    window.runner._on_died("the engine process ended (killed)")
    trace = read_trace(window.board.lanes[lanes(window)[1]].trace_path)
    assert trace.problem is None
    assert "killed" in trace.summary.error and len(trace.steps) == 4  # stream 1's end
    assert [len(trace.stream(s).steps) for s in range(N)] == [4] * N


def recorded(folder, oracle: str, plain: bool, steps: int = 4):
    """A trace of a race of N streams, as the window writes one."""
    path = folder / f"{oracle}.jsonl"
    kept = [batch(i, N, plain, 10.0 if plain else 20.0) for i in range(steps)]
    with TraceWriter(path, header(oracle, N)) as writer:
        for step in kept:
            writer.write(step)
        writer.write(summary(kept))
    return path


def test_a_replayed_batch_step_is_due_when_the_batchs_compute_reaches_it(tmp_path):
    from specviz.app.run.trace_player import due_times

    records = read_trace(recorded(tmp_path, "prompt-lookup", False)).records
    assert due_times(records) == [20.0, 40.0, 60.0, 80.0, 80.0]  # its summary with its last


def test_a_replayed_race_of_n_streams_is_a_batch_again(window, tmp_path):
    """Replayed, a trace of N streams has its picker and total, follows the stream picked,
    steps back a batch step at a time and gives the Streams dock its measured N."""
    player = window.open_replay([recorded(tmp_path, "none", True),
                                 recorded(tmp_path, "prompt-lookup", False)])
    player.finish()
    window.board.drain()
    _plain, lookup = window.board.lanes.values()
    assert lookup.streams.isVisibleTo(lookup)
    assert lookup.streams.total.text() == "3 streams · 450.0 tok/s in all · this one 150.0 tok/s"
    assert [e.text for e in lookup.view.events] == ["s0t0", "s0t1", "s0t2", "s0t3"]
    lookup.streams.combo.activated.emit(2)
    window.board.drain()
    assert [e.text for e in lookup.view.events] == ["s2t0", "s2t1", "s2t2", "s2t3"]
    player.step(-1)  # back a batch step: its summary goes with it, the pick stays
    window.board.drain()
    assert [e.text for e in lookup.view.events] == ["s2t0", "s2t1", "s2t2"]
    assert lookup.streams.total.text() == "3 streams · 450.0 tok/s in all · this one 150.0 tok/s"
    assert window.board.streams.lanes[lookup.lane_id].tokens == 27
    assert window.board.model.figures(lookup.lane_id)["tokens"] == 9  # stream 3's own
    player.step(1)
    window.board.drain()
    assert [m.n for m in window.board.streams.points(lookup.lane_id)] == [N]
    assert window.board.streams.speedup(lookup.lane_id).ratio == pytest.approx(1.5)


def test_an_exported_page_shows_the_stream_the_batchs_lanes_follow(window, tmp_path,
                                                                   monkeypatch):
    """Each stream has its own prompt and a page is of one: lanes following different
    streams are one line in the status bar, not a file; following one, the page shows it."""
    from test_export_page import embedded

    window.open_replay([recorded(tmp_path, "none", True),
                        recorded(tmp_path, "prompt-lookup", False)]).finish()
    window.board.drain()
    out = tmp_path / "race.html"
    monkeypatch.setattr(window.exports, "ask", lambda *_a: str(out))
    for lane in window.board.lanes.values():
        lane.streams.combo.activated.emit(2)
        if lane is not list(window.board.lanes.values())[-1]:
            assert window.exports.page() is None and not out.exists()
            assert "the lanes follow streams 1, 3" in window.status_text.text()
    assert window.exports.page() == out
    lanes = embedded(out.read_text(encoding="utf-8"))["lanes"]
    assert [lane["title"].rsplit(" · ", 1)[1] for lane in lanes] == ["stream 3 of 3"] * 2
    assert [step["target"]["text"] for step in lanes[1]["steps"]] == [
        "s2t0", "s2t1", "s2t2", "s2t3"]  # the factory's stream 3 (its target's tokens)
    assert "stream 3 of each batch" in window.status_text.text()


def test_the_streams_graph_puts_a_dot_per_n_over_the_predicted_curve(window):
    """Races at 3, 2 and 8 streams: a dot at each N (with its interval), the dashed curve
    from the profile's pass prices with its crossover marked, the measured one ringed."""
    pass_ms = [10.0 + 10.0 * max(0, (w - 1) // 8) for w in range(1, 17 * 33)]
    plain, lookup = lanes(window)
    for n in (3, 2):
        window.runner._on_started(plain, header("none", n))
        window.runner._on_started(lookup, header("prompt-lookup", n, pass_ms))
        for i in range(40):
            window.runner._on_batch(plain, batch(i, n, True, 10.0))
            window.runner._on_batch(lookup, batch(i, n, False, 20.0))
        window.board.drain()
    graph = window.streams_dock.graph
    items = graph._lanes[lookup]
    x, y = items.dots.getData()
    assert list(x) == [2.0, 3.0] and list(y) == pytest.approx([1.5, 1.5])  # 3 per 20 ms, 1 per 10
    curve_x, curve_y = items.curve.getData()
    assert list(curve_x) == list(range(1, 17)) and curve_y[0] == 3.0
    assert items.crossover.isVisible() and items.crossover.value() > 1
    assert list(items.ring.getData()[0]) == []  # faster at every N measured: no ring
    assert plain not in graph._lanes  # plain decoding is what the others divide by
    assert "predicted to stop at" in graph.note.text()
    window.runner._on_started(plain, header("none", 8))  # a race at 8 streams: 0.6x, slower
    window.runner._on_started(lookup, header("prompt-lookup", 8, pass_ms))
    for i in range(40):
        window.runner._on_batch(plain, batch(i, 8, True, 12.0))
        window.runner._on_batch(lookup, batch(i, 8, False, 60.0))
    window.board.drain()
    assert list(items.dots.getData()[0]) == [2.0, 3.0, 8.0]
    assert list(items.ring.getData()[0]) == [8.0]  # the measured crossover, ringed
    assert "stops paying at 8 streams (measured)" in graph.note.text()


def test_the_anatomy_of_a_batched_step_is_a_row_per_stream(window):
    race(window)
    anatomy = window.streams_dock.anatomy
    assert anatomy.rows is not None and [r.stream for r in anatomy.rows.rows] == [0, 1, 2]
    assert [r.kept for r in anatomy.rows.rows] == [2, 2, 2]  # each kept 2 of its 3 guesses
    text = anatomy.text()
    assert "batch step 4" in text and "stream 3" in text and "kept 2 of 3" in text
    assert "line-through" in text  # the refused guess, struck through
    lookup = lanes(window)[1]
    alone = batch(4, N, False, 20.0)
    window.runner._on_batch(lookup, replace(alone, steps=alone.steps[:1]))  # 2 streams left
    window.board.drain()
    assert anatomy.rows.index == 3  # still the latest step that held every stream
    window.board.clicked.emit(window.board.lanes[lookup], 1)  # a token of step 2 clicked
    assert anatomy.rows.index == 1 and "batch step 2" in anatomy.text()


def test_the_dock_moves_on_when_the_stream_shown_has_left_and_the_others_go_on(window, qtbot):
    race(window)
    lookup = lanes(window)[1]
    redrawn = []
    window.board.refreshed.connect(lambda: redrawn.append(True))
    later = batch(4, N, False, 20.0)
    window.runner._on_batch(lookup, replace(later, steps=later.steps[1:]))  # stream 1 has left
    qtbot.waitUntil(lambda: bool(redrawn), timeout=HUNG_MS)  # the graphs and the dock redrawn
    # the dock keeps the latest step that held every stream; the others' steps go on
    assert window.streams_dock.anatomy.rows.index == 3
    view = window.board.lanes[lookup]
    view.streams.combo.activated.emit(1)  # stream 2, still in the batch
    window.board.drain()
    assert [e.text for e in view.view.events] == ["s1t0", "s1t1", "s1t2", "s1t3", "s1t4"]


def test_the_stream_picked_is_kept_for_the_next_race(window):
    """Picked once, stream 3 is followed in the races after (its text, its prompt); a race of
    fewer streams follows the last one, and the pick comes back with enough streams."""
    race(window)
    lookup = window.board.lanes[lanes(window)[1]]
    lookup.streams.combo.activated.emit(2)
    window.board.drain()
    race(window)  # the next race, 3 streams again
    assert lookup.streams.combo.currentIndex() == 2
    assert [e.text for e in lookup.view.events] == ["s2t0", "s2t1", "s2t2", "s2t3"]
    assert (lookup.prompt_text, lookup.user_prompt) == ("p2", "p2")
    plain, lookup_id = lanes(window)
    window.runner._on_started(plain, header("none", 2))
    window.runner._on_started(lookup_id, header("prompt-lookup", 2))
    assert lookup.streams.combo.currentIndex() == 1 and lookup.user_prompt == "p1"
    race(window)
    assert lookup.streams.combo.currentIndex() == 2


PROMPTS = ["sort these numbers", "explain recursion", "rename the function"]


def worded(oracle: str, n: int) -> dict:
    """A header whose streams' prompts are words, rendered inside a chat template."""
    given = header(oracle, n)
    given["streams"].update(prompts=PROMPTS[:n],
                            prompt_texts=[f"<user>{p}</user>" for p in PROMPTS[:n]])
    return given


def test_picking_a_stream_shows_its_prompt_and_links_its_copies_into_it(window):
    window.prompt.set_prompt(PROMPTS[0])  # stream 1 decodes the window's prompt
    race(window, header=worded)
    lookup = window.board.lanes[lanes(window)[1]]
    lookup.streams.combo.activated.emit(2)  # the person picks stream 3
    assert window.prompt.editor.toPlainText() == "rename the function"
    assert window.prompt.editor.isReadOnly()  # not the person's: nothing to edit
    assert window.prompt.prompt() == PROMPTS[0]  # the person's, for the next race
    start = "<user>rename the function".index("the")
    lookup.view.tokenHovered.emit(0, 0, ev.Span(0, 1, start, start + 3))  # copied "the"
    (selection,) = window.prompt.editor.extraSelections()
    assert selection.cursor.selectedText() == "the"
    assert selection.cursor.selectionStart() == "rename the function".index("the")
    lookup.streams.combo.activated.emit(0)  # stream 1 again: the person's prompt
    assert window.prompt.editor.toPlainText() == PROMPTS[0]
    assert not window.prompt.editor.isReadOnly()


def test_a_run_starts_on_the_persons_prompt_and_a_kept_pick_shows_its_own(window, monkeypatch):
    window.prompt.set_prompt(PROMPTS[0])
    race(window, header=worded)
    lookup = window.board.lanes[lanes(window)[1]]
    lookup.streams.combo.activated.emit(1)
    window.prompt.stream_note.linkActivated.emit("own")  # "back to yours"
    assert window.prompt.shown() == PROMPTS[0] and not window.prompt.editor.isReadOnly()
    lookup.streams.combo.activated.emit(1)
    requests = []
    ran = asyncio.get_event_loop().create_future()
    ran.set_result(None)
    monkeypatch.setattr(window.runner, "start", lambda request: requests.append(request) or ran)
    window.start_run()  # no engine: what the window does before it sends the run
    assert requests[0].prompt == PROMPTS[0] and window.prompt.shown() == PROMPTS[0]
    race(window, header=worded)  # the lane still follows stream 2: its prompt shown again
    assert window.prompt.shown() == "explain recursion"


def uneven(index: int, plain: bool, kept: tuple[int, ...] = (2, 0, 0)) -> BatchStep:
    """Batch step `index`: plain decoding writes 1 token a stream in 10 ms; prompt lookup, in
    20 ms, keeps `kept` of 3 guesses in each stream (by default 3 tokens in stream 1, 1 in
    the others)."""
    ms = 10.0 if plain else 20.0
    steps = []
    for s in range(N):
        each = 1 if plain else kept[s] + 1
        step = make_step(index, k=0 if plain else 3, tokens=(index + 1) * each,
                         oracle="none" if plain else "prompt-lookup",
                         proposed=() if plain else guesses(each - 1), text=f"s{s}t{index}",
                         timing=ev.Timing(0.0, ms, 0.0))
        totals = replace(step.totals, draft_ms=0.0, verify_ms=(index + 1) * ms, other_ms=0.0,
                         proposed=(index + 1) * step.totals.proposed,
                         accepted=(index + 1) * step.totals.accepted)
        steps.append((s, replace(step, totals=totals)))
    return BatchStep(index, tuple(steps), N if plain else 4 * N, ev.Timing(0.0, ms, 0.0))


def uneven_race(window, kept: tuple[int, ...] = (2, 0, 0), pick: int = 0,
                pass_ms: list[float] | None = None, steps: int = 40) -> tuple[str, str]:
    """A race of `uneven` batch steps to both lanes' ends, prompt lookup following `pick`."""
    plain, lookup = lanes(window)
    window.runner._on_started(plain, header("none", N))
    window.runner._on_started(lookup, header("prompt-lookup", N, pass_ms))
    if pick:
        window.board.lanes[lookup].streams.combo.activated.emit(pick)
    kept_steps: dict[str, list[BatchStep]] = {plain: [], lookup: []}
    for i in range(steps):
        for lane_id, is_plain in ((plain, True), (lookup, False)):
            kept_steps[lane_id].append(uneven(i, is_plain, kept))
            window.runner._on_batch(lane_id, kept_steps[lane_id][-1])
    for lane_id, batches in kept_steps.items():
        window.runner._on_batch(lane_id, summary(batches))
    window.board.drain()
    return plain, lookup


def test_at_n_streams_the_header_gives_the_batchs_speedup_and_the_streams_pace(window):
    """Stream 1 alone reads 3 tokens per 20 ms against 1 per 10 (1.5x); the batch writes 5
    per 20 ms against 3 per 10: 0.83x, as the Streams dock's dot at 3 streams."""
    plain, lookup = lanes(window)
    window.runner._on_started(plain, header("none", N))
    window.runner._on_started(lookup, header("prompt-lookup", N))
    for i in range(40):
        window.runner._on_batch(plain, uneven(i, True))
        window.runner._on_batch(lookup, uneven(i, False))
    window.board.drain()
    text = window.board.lanes[lookup].figures.text()
    assert "pace 150.0 tok/s" in text  # stream 1's own, called a pace
    assert text.endswith("speedup in all 0.83× (0.83-0.83): slower") and "1.50×" not in text
    assert window.streams_dock.graph._lanes[lookup].dots.getData()[1][-1] == pytest.approx(5 / 6)
    assert window.board.lanes[plain].figures.text().endswith("speedup in all 1.00×")
    window.runner._on_started(lookup, {"oracle": "prompt-lookup", "prompt": "p"})  # N = 1
    text = window.board.lanes[lookup].figures.text()
    assert " tok/s" in text and "pace" not in text and "in all" not in text  # as before


def test_a_batchs_speedup_in_words():
    from specviz.app.views.lane_widget import batch_speedup_text
    from specviz.engines.speedup import from_ratios

    assert batch_speedup_text(None) == "speedup in all -"  # before both lanes have tokens
    assert batch_speedup_text(from_ratios([1.2]), mixed=True) == (
        "speedup in all 1.20× (K changed mid-race)")


def test_a_lane_that_fails_to_start_keeps_nothing_of_the_race_before(window):
    """A new run in which plain decoding fails to build and prompt lookup starts: no picker,
    batch or baseline of the race before is left, so prompt lookup's speedup is not taken
    against the race before's plain batch; the speedup measured then stays in the dock."""
    race(window, end=True)
    plain, lookup = lanes(window)
    window.board.reset()  # what a new run does first
    window.runner._on_failed(plain, "no such model")
    window.runner._on_started(lookup, header("prompt-lookup", N))
    for i in range(4):
        window.runner._on_batch(lookup, batch(i, N, False, 20.0))
    window.board.drain()
    streams, failed = window.board.streams, window.board.lanes[plain]
    assert plain not in streams.lanes and not failed.streams.isVisibleTo(failed)
    assert streams.baseline() is None and streams.speedup(lookup) is None
    assert window.board.lanes[lookup].figures.text().endswith("speedup in all -")
    assert [(m.n, m.speedup.ratio) for m in streams.points(lookup)] == [(N, pytest.approx(1.5))]


# A pass of w tokens costs 5 + 5w ms: at 3 streams, 2 tokens a stream cost 1.75 plain passes.
LINEAR_MS = [5.0 + 5.0 * w for w in range(1, 17 * 33)]
CPU = [1.0, 1.63, 2.0, 2.71, 3.3, 4.0, 4.6, 5.2, 6.28]  # one stream's, as test_why_slower's


@pytest.fixture
def profiled(monkeypatch):
    """The target has a stored cost profile (one stream's costs, for a lane of one)."""
    monkeypatch.setattr("specviz.app.main_window.profile_costs",
                        lambda _model: (CPU, "a CPU", True))


def test_a_batch_slower_than_plain_says_why_at_its_n_though_its_stream_was_faster(
        window, profiled):
    """Stream 1 reads 1.5x plain's stream 1, the batch 0.83x plain's batch: the lane says
    why the batch lost, priced at 3 streams, as its header calls it slower."""
    _plain, lookup = uneven_race(window, pass_ms=LINEAR_MS)
    lane = window.board.lanes[lookup]
    assert lane.figures.text().endswith("slower")
    window._explain_losses(window.request().model)
    assert ("0.83× plain decoding at 3 streams: 2 tokens a stream cost 1.8 plain steps of 3 "
            "streams here; prompt-lookup needs 75% acceptance at K = 1 to pay, it reached "
            "22%") in lane.message.text()


def test_a_batch_faster_than_plain_says_no_loss_though_its_stream_was_slower(
        window, profiled):
    """Streams 1 and 2 keep every guess, stream 3 none: the batch reads 1.5x plain's batch,
    the followed stream 3 0.5x plain's stream 3. The header says faster: no loss to explain."""
    _plain, lookup = uneven_race(window, kept=(3, 3, 0), pick=2, pass_ms=LINEAR_MS)
    lane = window.board.lanes[lookup]
    assert window.board.model.rounds(lookup).verdict == "slower"  # stream 3 against plain's
    assert lane.figures.text().endswith("faster")
    window._explain_losses(window.request().model)
    assert "plain decoding" not in lane.message.text()


def test_at_n_streams_the_speedup_graph_and_the_cost_curves_dot_are_the_batchs(window):
    """Stream 1 reads 1.5x plain's stream 1, the batch 0.83x plain's batch: the speedup
    curve, its band and the cost curve's dot give the batch's, as the header does, the dot
    at every stream's K over a curve priced at 3 streams for every stream's acceptance."""
    window.graphs.set_costs(CPU, "a CPU")
    plain, lookup = uneven_race(window, pass_ms=LINEAR_MS)
    graphs = window.graphs
    items = graphs.lane_items(lookup)
    assert items["speedup"].getData()[1][-1] == pytest.approx(5 / 6)
    assert items["band"].isVisible()
    assert items["band"].getRegion() == pytest.approx((5 / 6, 5 / 6), abs=0.01)
    assert len(graphs.lane_items(plain)["speedup"].getData()[0] or []) == 0  # 1x by itself
    (k,), (speedup,) = graphs.cost_curve.dot_data(lookup)
    assert (k, speedup) == (pytest.approx(3.0), pytest.approx(5 / 6))
    alpha = 2 / 9  # stream 1 kept 2 of its 3 guesses a step, the others none
    assert graphs.cost_curve.curve_data(lookup)[1][1] == pytest.approx((1 + alpha) / 1.75)
    race_axis = graphs.race_plot.getAxis("left")
    assert race_axis.labelText == "one stream's tokens"  # its pace, not the lane's
    window.board.reset()  # a new run, of one stream
    window.runner._on_started(lookup, {"oracle": "prompt-lookup", "prompt": "p"})
    assert race_axis.labelText == "tokens"


def test_at_n_streams_the_figures_table_gives_each_lanes_batch(window, monkeypatch, tmp_path):
    """Stream 1 reads 1.5x plain's stream 1, the batch 0.83x: a lane's row is its batch's
    (every stream's tokens and acceptance, its speedup as its header gives it)."""
    import csv

    plain, lookup = uneven_race(window)
    monkeypatch.setattr(window.exports, "ask", lambda *_a: str(tmp_path / "figures.csv"))
    window.exports.figures_csv()
    rows = {r["lane"]: r for r in csv.DictReader((tmp_path / "figures.csv").open())}
    assert float(rows[lookup]["speedup"]) == pytest.approx(5 / 6)  # not stream 1's 1.5
    assert float(rows[plain]["speedup"]) == 1.0
    assert rows[lookup]["tokens"] == str(5 * 40)  # 3 a step in stream 1, 1 in the others
    assert float(rows[lookup]["tok_per_s"]) == pytest.approx(250.0)  # 5 a 20 ms step
    assert float(rows[lookup]["acceptance_rate"]) == pytest.approx(2 / 9)
    assert rows[lookup]["streams"] == rows[plain]["streams"] == "3"
