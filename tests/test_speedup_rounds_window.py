"""The window's speedups carry their uncertainty (#73): racing again adds a round of each lane
against plain decoding, the lane's header gives the interval and the verdict, and the speedup
graph shades the interval."""

from __future__ import annotations

from dataclasses import replace

import pytest
from step_factory import make_step

from specviz.board.lanes_model import JOINED, MIXED, OPEN, BoardModel
from specviz.engines import events as ev
from specviz.engines.host.run_spec import LaneSpec
from specviz.engines.speedup import from_ratios

PROMPT = "def log(x):"
PLAIN_TOKENS, PLAIN_MS = 40, 400.0  # plain decoding's every race: 0.1 tokens per ms


def header(oracle: str = "prompt-lookup", k: int = 4, prompt: str = PROMPT) -> dict:
    """A lane's trace header, as the engine sends it when the lane starts."""
    return {"prompt": prompt, "target": {"name": "smollm2-135m", "sha256": "ab"},
            "backend": "llama", "device": "cpu", "oracle": oracle,
            "settings": {"k": k, "auto_k": False, "max_tokens": 64}}


def run(oracle: str, tokens: int, ms: float, k: int = 4, k_later: int | None = None,
        reason: str = "max-tokens", steps: int = 4) -> list[ev.Event]:
    """A lane's events: `steps` steps at K `k` (`k_later` from the third on), `tokens` tokens
    in `ms` of compute in all, then its summary."""
    events = []
    for i in range(steps):
        done = (i + 1) / steps
        totals = ev.Totals(round(tokens * done), i + 1, 0, 0, 0.0, ms * done, 0.0)
        k_now = k if k_later is None or i < 2 else k_later
        events.append(replace(make_step(i, k_now, oracle=oracle), totals=totals))
    return [*events, ev.SummaryEvent(oracle, reason, "", events[-1].totals, 1.0, ms)]


def plain(reason: str = "max-tokens") -> tuple[dict, list[ev.Event]]:
    return header("none", 1), run("none", PLAIN_TOKENS, PLAIN_MS, reason=reason)


def lookup(ratio: float, k: int = 4, prompt: str = PROMPT,
           k_later: int | None = None) -> tuple[dict, list[ev.Event]]:
    """The prompt-lookup lane of a race in which it ran `ratio` times plain decoding's speed."""
    events = run("prompt-lookup", PLAIN_TOKENS, PLAIN_MS / ratio, k, k_later)
    return header(k=k, prompt=prompt), events


def two_lanes() -> BoardModel:
    board = BoardModel()
    board.add(LaneSpec("none"), "plain")
    board.add(LaneSpec("prompt-lookup", 4), "lookup")
    return board


def race(board: BoardModel, **lanes: tuple[dict, list[ev.Event]]) -> None:
    """One race as the window runs it: every lane emptied, each started from its header, then
    their events, lane by lane in the order given."""
    board.clear()
    for lane_id, (lane_header, _events) in lanes.items():
        board.read_header(lane_id, lane_header)
    for lane_id, (_header, events) in lanes.items():
        board.append(lane_id, events)


# ---------------------------------------------------------------- the model


def test_racing_again_adds_a_round_and_two_give_an_interval():
    board = two_lanes()
    race(board, plain=plain(), lookup=lookup(1.2))  # plain decoding ends first
    one = board.rounds("lookup")
    assert one.rounds == 1 and one.ratio == pytest.approx(1.2) and one.low is None
    assert board.figures("lookup")["race"] == JOINED
    race(board, lookup=lookup(1.1), plain=plain())  # the lane ends first
    two, expected = board.rounds("lookup"), from_ratios([1.2, 1.1])
    assert two.ratios == pytest.approx((1.2, 1.1))
    assert (two.low, two.high) == pytest.approx((expected.low, expected.high))
    assert board.rounds("plain") is None  # plain decoding is no rival of itself


def timed(oracle: str, ms: list[float]) -> list[ev.Event]:
    """A lane's events: a token a step, each step taking its `ms`, then its summary."""
    events, total = [], 0.0
    for i, step_ms in enumerate(ms):
        total += step_ms
        totals = ev.Totals(i + 1, i + 1, 0, 0, 0.0, total, 0.0)
        events.append(replace(make_step(i, 4, oracle=oracle), totals=totals,
                              timing=ev.Timing(0.0, step_ms, 0.0)))
    return [*events, ev.SummaryEvent(oracle, "max-tokens", "", events[-1].totals, 1.0, total)]


def test_races_that_agree_by_chance_are_no_surer_than_their_stretches():
    """Two races with the same ratio: the rounds' interval is as wide as their stretches
    pooled say, not the sliver two equal ratios give."""
    rng = __import__("numpy").random.default_rng(7)
    plain_ms = list(10 * (1 + rng.normal(0, 0.3, 128)))
    lane_ms = list(10.3 * (1 + rng.normal(0, 0.3, 128)))
    board = two_lanes()
    for _ in range(2):
        race(board, plain=(header("none", 1), timed("none", plain_ms)),
             lookup=(header(), timed("prompt-lookup", lane_ms)))
    two = board.rounds("lookup")
    assert two.rounds == 2 and two.ratios[0] == pytest.approx(two.ratios[1])
    assert from_ratios(two.ratios).high - from_ratios(two.ratios).low < 1e-9
    assert two.low < two.ratio * 0.97 and two.high > two.ratio * 1.03


def test_a_replay_stepping_back_over_a_race_s_end_adds_no_round():
    board = two_lanes()
    (plain_header, plain_events), (lane_header, lane_events) = plain(), lookup(1.2)
    race(board, plain=(plain_header, plain_events), lookup=(lane_header, lane_events))
    for lane_id, events in (("lookup", lane_events), ("plain", plain_events)):
        board.clear(lane_id)  # as Left, then Right, step back over the end and on again
        board.append(lane_id, events)
    assert board.rounds("lookup").rounds == 1


def test_a_new_k_or_prompt_starts_rounds_of_its_own_and_an_old_k_keeps_its_own():
    board = two_lanes()
    race(board, plain=plain(), lookup=lookup(1.2))
    race(board, plain=plain(), lookup=lookup(1.1))
    board.reconfigure("lookup", LaneSpec("prompt-lookup", 8))  # between races
    race(board, plain=plain(), lookup=lookup(1.3, k=8))
    assert board.rounds("lookup").ratios == pytest.approx((1.3,))
    race(board, plain=plain(), lookup=lookup(0.9, prompt="another prompt"))
    assert board.rounds("lookup").ratios == pytest.approx((0.9,))
    race(board, plain=plain(), lookup=lookup(1.25))
    assert board.rounds("lookup").ratios == pytest.approx((1.2, 1.1, 1.25))


def test_a_k_changed_mid_race_joins_neither_k_s_rounds():
    board = two_lanes()
    race(board, plain=plain(), lookup=lookup(1.2))
    race(board, plain=plain(), lookup=lookup(1.5, k_later=8))  # as the engine's steps say it
    assert board.figures("lookup")["race"] == MIXED
    assert board.rounds("lookup").ratios == pytest.approx((1.2,))  # K=4's, as before
    race(board, plain=plain(), lookup=lookup(1.3, k=8))
    assert board.rounds("lookup").ratios == pytest.approx((1.3,))


def test_a_setting_changed_mid_race_joins_no_rounds():
    board = two_lanes()
    (plain_header, plain_events), (lane_header, lane_events) = plain(), lookup(1.2)
    board.clear()
    board.read_header("plain", plain_header)
    board.read_header("lookup", lane_header)
    board.append("lookup", lane_events[:2])
    board.reconfigure("lookup", LaneSpec("prompt-lookup", 4, settings={"max_ngram": 5}))
    board.append("lookup", lane_events[2:])
    board.append("plain", plain_events)
    assert board.figures("lookup")["race"] == MIXED and board.rounds("lookup") is None


def test_a_race_cut_short_is_no_round():
    board = two_lanes()
    race(board, lookup=lookup(1.2), plain=plain(reason="stopped"))
    assert board.figures("lookup")["race"] == OPEN and board.rounds("lookup") is None


# ---------------------------------------------------------------- the lane's header


@pytest.fixture
def lane(qtbot):
    from specviz.app.views.lane_widget import LaneWidget
    from specviz.board.palette import DARK

    widget = LaneWidget("lookup", LaneSpec("prompt-lookup", 4), DARK, "#fff", [])
    qtbot.addWidget(widget)
    return widget


def speedup_words(lane, board: BoardModel) -> str:
    """What the lane's figures line says of its speedup: its last part."""
    lane.set_figures(board.figures("lookup"))
    text = lane.figures.text()
    return text[text.index("speedup"):]


@pytest.mark.gui
def test_the_header_gives_the_interval_and_the_verdict(lane):
    board = two_lanes()
    race(board, plain=plain(), lookup=lookup(1.2))
    assert speedup_words(lane, board) == "speedup 1.20× (race again for an interval)"
    race(board, plain=plain(), lookup=lookup(1.18))
    race(board, plain=plain(), lookup=lookup(1.22))
    assert speedup_words(lane, board) == "speedup 1.20× (1.15-1.25, 3 races): faster"
    # The next race under way: its figure so far, and the rounds before it.
    board.clear()
    board.read_header("plain", plain()[0])
    board.read_header("lookup", lookup(1.3)[0])
    board.append("plain", plain()[1][:2])
    board.append("lookup", lookup(1.3)[1][:2])
    assert speedup_words(lane, board) == (
        "speedup 1.30× · before: 1.20× (1.15-1.25, 3 races): faster")


@pytest.mark.gui
def test_the_header_says_within_noise_and_when_a_race_is_no_round(lane):
    board = two_lanes()
    for ratio in (1.01, 0.99, 1.0):
        race(board, plain=plain(), lookup=lookup(ratio))
    assert speedup_words(lane, board) == "speedup 1.00× (0.98-1.03, 3 races): within noise"
    race(board, plain=plain(), lookup=lookup(1.5, k_later=8))
    assert speedup_words(lane, board) == (
        "speedup 1.50× (K or a setting changed mid-race: not a round) · before: "
        "1.00× (0.98-1.03, 3 races): within noise")


# ---------------------------------------------------------------- the speedup graph


@pytest.fixture
def graphs(qtbot):
    from specviz.board.palette import DARK
    from specviz.widgets.graphs import LaneGraphs

    widget = LaneGraphs(two_lanes(), DARK)
    qtbot.addWidget(widget)
    widget.show_lane("plain", "none", DARK.lanes[0])
    widget.show_lane("lookup", "prompt-lookup", DARK.lanes[1])
    return widget


@pytest.mark.gui
def test_the_speedup_graph_shades_each_lane_s_interval(graphs):
    from specviz.board.palette import DARK
    from specviz.widgets.graphs import BAND_ALPHA

    band = graphs.lane_items("lookup")["band"]
    assert band in graphs.speedup_plot.getPlotItem().items
    race(graphs.model, plain=plain(), lookup=lookup(1.2))
    graphs.refresh()
    assert not band.isVisible()  # one race: no interval yet
    race(graphs.model, plain=plain(), lookup=lookup(1.1))
    graphs.refresh()
    rounds = graphs.model.rounds("lookup")
    assert band.isVisible() and band.getRegion() == pytest.approx((rounds.low, rounds.high))
    colour = band.brush.color()
    assert (colour.name(), colour.alpha()) == (DARK.lanes[1].lower(), BAND_ALPHA)
    assert not graphs.lane_items("plain")["band"].isVisible()
    assert band.zValue() < graphs.lane_items("lookup")["speedup"].zValue()  # the curve on top
    low, high = graphs.speedup_plot.getPlotItem().getViewBox().viewRange()[1]
    assert low <= rounds.low and rounds.high <= high  # the auto range shows it whole
    graphs.model.reconfigure("plain", LaneSpec("prompt-lookup"))  # no plain lane: no speedups
    graphs.refresh()
    assert not band.isVisible()
    graphs.model.reconfigure("plain", LaneSpec("none"))
    graphs.refresh()
    assert band.isVisible()
    race(graphs.model, plain=plain(), lookup=lookup(1.3, k=8))
    graphs.refresh()
    assert not band.isVisible()  # K=8 has one race: no interval of its own yet


@pytest.mark.gui
def test_the_band_is_one_item_moved_once_a_race(graphs):
    band = graphs.lane_items("lookup")["band"]
    moves = []
    original = band.setRegion
    band.setRegion = lambda region: (moves.append(tuple(region)), original(region))
    (plain_header, plain_events), (lane_header, lane_events) = plain(), lookup(1.1)
    for ratio in (1.2, 1.3):
        race(graphs.model, plain=plain(), lookup=lookup(ratio))
    graphs.refresh()
    assert len(moves) == 1
    graphs.model.clear()
    graphs.model.read_header("plain", plain_header)
    graphs.model.read_header("lookup", lane_header)
    for i in range(len(lane_events)):  # a refresh every step, as the live window draws
        graphs.model.append("plain", plain_events[i:i + 1])
        graphs.model.append("lookup", lane_events[i:i + 1])
        graphs.refresh()
    assert len(moves) == 2 and graphs.lane_items("lookup")["band"] is band
    rounds = graphs.model.rounds("lookup")
    assert rounds.rounds == 3 and moves[-1] == pytest.approx((rounds.low, rounds.high))
