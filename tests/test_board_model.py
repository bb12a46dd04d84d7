"""The board as plain data, without Qt: lanes, what they received, the baseline."""

from __future__ import annotations

from step_factory import make_step

from specviz.board.lanes_model import BoardModel
from specviz.engines import events as ev
from specviz.engines.host.run_spec import LaneSpec


def step(i: int, k: int, tokens: int) -> ev.StepEvent:
    return make_step(i, k, tokens)


def test_the_baseline_is_the_first_plain_lane_replayed_or_live():
    board = BoardModel()
    lookup = board.add(LaneSpec("prompt-lookup"))
    assert board.baseline() is None
    plain = board.add(LaneSpec("none"))
    board.add(LaneSpec("none"))
    assert board.baseline() == plain.lane_id and lookup.lane_id != plain.lane_id
    lookup.replay_oracle = "none"  # a replayed trace of plain decoding
    assert board.baseline() == lookup.lane_id
    board.remove(lookup.lane_id)
    assert board.baseline() == plain.lane_id


def test_a_lane_keeps_its_steps_and_tells_a_k_change_from_the_end_cut():
    lane = BoardModel().add(LaneSpec("prompt-lookup", 4))
    lane.max_tokens = 20
    assert [lane.append(e) for e in (step(0, 4, 5), step(1, 8, 10), step(2, 8, 15),
                                     step(3, 4, 19))] == [False, True, False, False]
    summary = ev.SummaryEvent("prompt-lookup", "max-tokens", "aaaa", step(3, 4, 19).totals,
                              1.0, 2.0)
    assert lane.append(summary) is False and lane.summary is summary
    assert len(lane.steps) == 4 and lane.last_tree_step() is None
    lane.clear()
    assert lane.steps == [] and lane.summary is None


def test_a_lane_counts_its_declined_steps_by_reason_and_forgets_them_on_clear():
    lane = BoardModel().add(LaneSpec("ngram", 4))
    lane.append(step(0, 4, 1).marked_declined(ev.DECLINE_NO_MATCH))
    lane.append(step(1, 4, 2))
    lane.append(step(2, 4, 3).marked_declined(ev.DECLINE_NO_MATCH))
    lane.append(step(3, 0, 4).marked_declined(ev.DECLINE_AUTO_K))
    assert lane.declined == {ev.DECLINE_NO_MATCH: 2, ev.DECLINE_AUTO_K: 1}
    lane.clear()
    assert lane.declined == {} and lane.steps == []


def test_a_server_lane_marks_k_changes_only_where_the_server_says_its_k():
    board = BoardModel()
    guessed, asked = board.add(LaneSpec("server")), board.add(LaneSpec("server"))
    guessed.read_header({"server": {"speculation": "on", "k": None, "k_per_request": False}})
    asked.read_header({"server": {"speculation": "on", "k": 4, "k_per_request": True}})
    steps = [step(0, 0, 1), step(1, 3, 4), step(2, 6, 8)]
    assert [guessed.append(e) for e in steps] == [False, False, False]
    assert [asked.append(e) for e in steps] == [False, True, True]
    plain = board.add(LaneSpec("server"))
    plain.read_header({"server": {"speculation": None, "k": None}})
    assert board.baseline() == plain.lane_id and not guessed.plain_server
