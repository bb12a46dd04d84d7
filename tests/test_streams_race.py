"""The board's model of a race of N streams, without Qt: which stream a lane's view follows,
every stream's pace and the lane's total, the speedup measured at each N over the plain lane
of the same race, and the cost profile's prediction with its crossover."""

from __future__ import annotations

import pytest
from streams_factory import batch, header, summary

from specviz.board.streams_race import StreamsRace
from specviz.engines import events as ev


def raced(n: int, steps: int = 12, spec_ms: float = 20.0, plain_ms: float = 10.0,
          race: StreamsRace | None = None, pass_ms=None) -> StreamsRace:
    race = race or StreamsRace()
    race.start("plain", header("none", n))
    race.start("spec", header("prompt-lookup", n, pass_ms))
    for i in range(steps):  # by turns, as the engine steps them
        race.take("plain", batch(i, n, True, plain_ms))
        race.take("spec", batch(i, n, False, spec_ms))
    return race


def test_a_lane_of_one_stream_is_not_a_batch():
    race = StreamsRace()
    assert race.start("a", {"oracle": "none", "prompt": "p"}) is None
    assert race.take("a", batch(0, 1, True, 1.0)) == []  # nothing kept for it


def test_the_view_follows_the_picked_stream_and_a_new_pick_replays_it():
    race = StreamsRace()
    race.start("spec", header("prompt-lookup", 3))
    shown = [e for i in range(4) for e in race.take("spec", batch(i, 3, False, 20.0))]
    assert [e.text for e in shown] == ["s0t0", "s0t1", "s0t2", "s0t3"]  # stream 1 at first
    picks = []
    race.picked.connect(lambda lane, stream: picks.append((lane, stream)))
    replay = race.pick("spec", 2)
    assert [e.text for e in replay] == ["s2t0", "s2t1", "s2t2", "s2t3"] and picks == [("spec", 2)]
    assert [e.text for e in race.take("spec", batch(4, 3, False, 20.0))] == ["s2t4"]
    end = race.take("spec", summary(race.lanes["spec"].batches))
    assert len(end) == 1 and isinstance(end[0], ev.SummaryEvent) and end[0].text == "text2"
    assert isinstance(race.pick("spec", 0)[-1], ev.SummaryEvent)  # an ended stream's summary
    with pytest.raises(ValueError):
        race.pick("spec", 3)


def test_a_pick_is_kept_across_races_clamped_to_each_races_streams():
    race = StreamsRace()
    race.start("spec", header("prompt-lookup", 4))
    race.pick("spec", 2)
    assert race.start("spec", header("prompt-lookup", 4)).picked == 2  # a new race: kept
    assert [e.text for e in race.take("spec", batch(0, 4, False, 20.0))] == ["s2t0"]
    assert race.start("spec", header("prompt-lookup", 2)).picked == 1  # too few: the last
    assert race.start("spec", header("prompt-lookup", 8)).picked == 2  # the pick again
    assert race.start("other", header("none", 4)).picked == 0  # a lane never picked: 1
    race.remove("spec")
    assert race.start("spec", header("prompt-lookup", 4)).picked == 0  # removed: forgotten


def test_total_throughput_is_every_streams_tokens_and_a_pace_is_one_streams():
    lane = raced(4, steps=10).lanes["spec"]
    # 4 streams x 3 tokens a step over 20 ms a step; a stream's own pace is a quarter of it
    assert lane.tok_per_s == pytest.approx(4 * 3 / 0.020)
    assert lane.pace(1) == pytest.approx(3 / 0.020)
    assert lane.per_stream_step() == pytest.approx((3.0, 4.0))


def test_the_speedup_at_each_n_is_measured_over_the_plain_lane_and_kept_between_races():
    # 3 tokens per 20 ms against 1 per 10: 1.5x; then 3 per 60 against 1 per 12: 0.6x (long
    # enough for stretches: a verdict, with an interval)
    race = raced(2, steps=40, spec_ms=20.0, plain_ms=10.0)
    race = raced(8, steps=40, spec_ms=60.0, plain_ms=12.0, race=race)
    points = race.points("spec")
    assert [m.n for m in points] == [2, 8]
    assert [round(m.speedup.ratio, 2) for m in points] == [1.5, 0.6]
    assert [m.speedup.verdict for m in points] == ["faster", "slower"]
    assert points[0].speedup.low is not None  # the interval the graph's error bar draws
    assert race.crossover("spec") == 8
    assert race.points("plain") == []


def test_a_lanes_speedup_now_is_its_batchs_over_the_plain_batch_of_this_race():
    race = raced(2, steps=40, spec_ms=20.0, plain_ms=10.0)
    assert race.speedup("spec").ratio == pytest.approx(1.5)  # the dock's dot at N = 2
    assert race.speedup("spec").ratio == race.points("spec")[-1].speedup.ratio
    assert race.speedup("plain").ratio == 1.0  # plain decoding against itself
    race.start("spec", header("prompt-lookup", 2))  # a new race, nothing stepped yet
    assert race.speedup("spec") is None  # not the race before's
    assert race.speedup("unknown") is None


def test_a_batch_reads_as_one_lane_and_prices_its_passes_at_its_n():
    """Every stream's tokens, acceptance and speedup (the batch's); a pass of w tokens a
    stream priced over plain's pass of one a stream, at this N (5 + 5w ms a pass)."""
    race = raced(3, steps=40, pass_ms=[5.0 + 5.0 * w for w in range(1, 17 * 33)])
    figures = race.figures("spec")
    assert (figures["streams"], figures["tokens"]) == (3, 3 * 3 * 40)
    assert figures["tok_per_s"] == pytest.approx(450.0)  # 9 tokens a 20 ms step
    assert figures["acceptance_rate"] == pytest.approx(2 / 3)  # each stream kept 2 of 3
    assert figures["speedup"] == pytest.approx(1.5) == figures["batch_speedup"].ratio
    relative = race.lanes["spec"].relative_costs()
    assert len(relative) == 33 and relative[:2] == pytest.approx([1.0, 35 / 20])
    assert race.lanes["spec"].relative_costs(widths=2) == pytest.approx([1.0, 35 / 20])
    assert raced(3).lanes["spec"].relative_costs() is None  # no profile stored
    assert race.figures("unknown") is None


def test_the_speedup_over_time_reads_every_streams_tokens_and_a_new_race_is_its_own():
    race = raced(2, steps=40)
    (seconds, tokens), (plain_seconds, plain_tokens) = race.speedup_rows("spec")
    assert seconds[-1] == pytest.approx(0.8) and tokens[-1] == 2 * 3 * 40  # 20 ms, 6 a step
    assert plain_seconds[-1] == pytest.approx(0.4) and plain_tokens[-1] == 2 * 40
    assert race.speedup_rows("plain") is None  # what the others divide by
    assert race.speedup("spec").ratio == pytest.approx(1.5)
    raced(2, steps=40, spec_ms=40.0, race=race)  # as many steps again, twice as slow
    assert race.speedup("spec").ratio == pytest.approx(0.75)  # not the race before's


def test_the_prediction_reads_the_profiles_pass_prices_and_marks_its_crossover():
    # a pass of w tokens costs 10 ms up to 8 tokens wide, then 10 ms more per 8
    pass_ms = [10.0 + 10.0 * max(0, (w - 1) // 8) for w in range(1, 17 * 33)]
    race = raced(2, pass_ms=pass_ms)
    prediction = race.prediction("spec")
    assert prediction is not None
    # a stream writes 3 tokens and verifies 4 positions a step: 3 x cost(N) / cost(4N)
    assert prediction.speedups[1] == pytest.approx(3.0)
    assert prediction.speedups[16] == pytest.approx(3 * 20.0 / 80.0)
    assert prediction.crossover is not None and prediction.speedups[prediction.crossover] <= 1
    assert raced(2).prediction("spec") is None  # no profile stored: measured only
    assert race.prediction("plain") is None


def test_a_race_of_n_streams_is_rounds_of_its_own():
    from specviz.board.lanes_model import race_key
    from specviz.engines.host.run_spec import LaneSpec

    lane = LaneSpec("prompt-lookup", 3)
    one = {"oracle": "prompt-lookup", "prompt": "p0", "settings": {"k": 3}}
    assert race_key(header("prompt-lookup", 4), lane) != race_key(one, lane)
    assert race_key(header("prompt-lookup", 4), lane) != race_key(header("prompt-lookup", 2),
                                                                 lane)
