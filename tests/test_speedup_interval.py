"""A speedup with its uncertainty (engines/speedup.py, engines/bench/rounds.py) and `specviz run
--baseline`'s rounds: the interval, the verdict, rounds stepped by turns."""

from __future__ import annotations

import json
import math

import pytest
from steady_timing import jittered_session_clock

from specviz.app.cli.main import main
from specviz.engines import events as ev
from specviz.engines import speedup as sp
from specviz.engines.bench.rounds import by_turns


def test_rounds_far_above_one_are_faster():
    s = sp.from_ratios([1.18, 1.22, 1.20])
    assert s.verdict == sp.FASTER and s.low > 1.0 and s.low < s.ratio < s.high
    assert s.ratio == pytest.approx(math.exp(sum(map(math.log, [1.18, 1.22, 1.20])) / 3))


def test_rounds_below_one_are_slower():
    assert sp.from_ratios([0.80, 0.83, 0.82, 0.81]).verdict == sp.SLOWER


def test_rounds_that_straddle_one_are_within_noise():
    assert sp.from_ratios([0.96, 1.05, 1.01]).verdict == sp.NOISE


def test_a_difference_smaller_than_the_resolution_is_never_called():
    # a tight interval that excludes 1x, by less than the machine can tell apart
    s = sp.from_ratios([1.010, 1.011, 1.012, 1.011, 1.010])
    assert s.low > 1.0 and s.verdict == sp.NOISE


def test_the_interval_is_students_t_on_the_logs():
    ratios = [1.1, 1.3]
    logs = [math.log(r) for r in ratios]
    half = 12.706 * abs(logs[0] - logs[1]) / math.sqrt(2) / math.sqrt(2)
    s = sp.from_ratios(ratios)
    centre = sum(logs) / 2
    assert s.low == pytest.approx(math.exp(centre - half))
    assert s.high == pytest.approx(math.exp(centre + half))


def test_one_round_has_no_interval_and_calls_nothing():
    s = sp.from_ratios([1.4])
    assert s.low is None and s.verdict == sp.NOISE and "too short" in s.words()
    assert s.to_dict()["interval"] is None


def test_a_rounds_ratio_is_of_speeds():
    assert sp.round_ratio(100, 1000.0, 50, 1000.0) == pytest.approx(2.0)
    assert sp.round_ratio(100, 500.0, 100, 1000.0) == pytest.approx(2.0)


def test_one_rounds_interval_comes_from_stretches_of_the_text():
    plain = [10.0] * 64
    lane = [(2, 10.0)] * 32  # two tokens in a plain step's time: 2x everywhere
    s = sp.from_stretches(lane, plain)
    assert s.ratio == pytest.approx(2.0) and s.low == pytest.approx(2.0)
    assert s.stretches == 64 // sp.STRETCH and s.verdict == sp.FASTER


def test_stretches_pair_the_same_positions_and_stop_at_the_shorter_run():
    n = sp.STRETCH
    plain = [10.0] * n + [30.0] * n + [10.0] * 4  # a slow middle in plain decoding
    lane = [(n, 40.0), (n, 40.0), (n, 40.0)]  # the third step reaches past plain's end
    s = sp.from_stretches(lane, plain)
    assert s.stretches == 2 and s.ratio == pytest.approx((10 * n + 30 * n) / 80)


def test_too_few_stretches_give_no_interval():
    s = sp.from_stretches([(1, 10.0)] * 20, [10.0] * 20)
    assert s.low is None and s.verdict == sp.NOISE


def test_noisy_equal_work_stays_within_noise():
    rng = __import__("numpy").random.default_rng(1)
    plain = list(10 + rng.normal(0, 2, 256))
    lane = [(1, t) for t in 10 + rng.normal(0, 2, 256)]
    assert sp.from_stretches(lane, plain).verdict == sp.NOISE


def _round(rng, slower: float, noise: float = 0.04, n: int = 128) -> tuple[list, list]:
    """One round's steps, a token each, the lane `slower` times plain's pace, `noise` each."""
    from specviz.engines.stalls import StepTime

    def steps(scale):
        return [StepTime(1, 1, ms, ms) for ms in scale * 10 * (1 + rng.normal(0, noise, n))]

    return steps(slower), steps(1.0)


def test_rounds_that_agree_by_chance_are_no_surer_than_their_stretches():
    """Two rounds whose ratios agree (here: the same steps twice): Student's t on the two
    alone is a sliver that calls 2.8% "slower"; the rounds' stretches say their mean is
    known to a few per cent only."""
    rng = __import__("numpy").random.default_rng(7)
    times = [_round(rng, 1.03, noise=0.3)] * 2
    ratios = [sp.step_ratio(a, b)[0] for a, b in times]
    sliver = sp.from_ratios(ratios)
    assert sliver.verdict == sp.SLOWER and sliver.high - sliver.low < 1e-9
    found = sp.from_rounds(times)
    assert found.ratio == pytest.approx(sliver.ratio) and found.verdict == sp.NOISE
    one = sp.from_steps(*times[0])  # one round: its stretches' interval
    pooled = math.log(one.high / one.low) / 2 / sp.t95(one.stretches - 1) / math.sqrt(2)
    assert math.log(found.high / found.ratio) == pytest.approx(
        sp.t95(2 * (one.stretches - 1)) * pooled)


def test_rounds_that_disagree_keep_their_own_wider_interval():
    rng = __import__("numpy").random.default_rng(4)
    times = [_round(rng, 0.8), _round(rng, 1.25)]
    ratios = [sp.step_ratio(a, b)[0] for a, b in times]
    assert sp.from_rounds(times) == sp.from_ratios(ratios)


def test_rounds_whose_lane_is_slower_still_read_slower():
    rng = __import__("numpy").random.default_rng(5)
    found = sp.from_rounds([_round(rng, 1.25) for _ in range(3)])
    assert found.verdict == sp.SLOWER and found.high < 0.85


def test_a_round_that_wrote_nothing_is_left_out_as_before():
    from specviz.engines.stalls import StepTime

    rng = __import__("numpy").random.default_rng(6)
    empty = ([StepTime(0, 1, 10.0, 10.0)], [StepTime(0, 1, 10.0, 10.0)])
    times = [_round(rng, 1.0), _round(rng, 1.1), empty]
    found = sp.from_rounds(times)
    assert found.rounds == 2 and found.ratio == pytest.approx(
        sp.from_ratios([sp.step_ratio(*t)[0] for t in times[:2]]).ratio)


def test_two_runs_step_by_turns_until_both_end():
    def run(name, n):
        for i in range(n):
            yield f"{name}{i}"
        yield ev.SummaryEvent(name, "max-tokens", "", ev.Totals(0, 0, 0, 0, 0.0, 0.0, 0.0),
                              0.0, 0.0)

    order = [(who, e if isinstance(e, str) else "end") for who, e in
             by_turns(run("a", 2), run("b", 4))]
    assert order == [(0, "a0"), (1, "b0"), (0, "a1"), (1, "b1"), (0, "end"), (1, "b2"),
                     (1, "b3"), (1, "end")]


@pytest.mark.parametrize(("oracle", "verdict"), [("none", sp.NOISE), ("draft", sp.FASTER)])
def test_run_baseline_reports_rounds_an_interval_and_a_verdict(capsys, monkeypatch,
                                                              tiny_model_dir, oracle, verdict):
    """Each step costs the same seeded, jittered time: plain decoding against itself is
    within noise, and a draft that is the target itself (every guess kept, a quarter of the
    steps) is faster."""
    jittered_session_clock(monkeypatch)
    argv = ["run", "--target", str(tiny_model_dir), "--backend", "transformers", "--no-chat",
            "--prompt", "def add(a, b):\n    return a + b\n\ndef add(", "--max-tokens", "16",
            "--oracle", oracle, "--k", "3", "--baseline", "--rounds", "4", "--json"]
    if oracle == "draft":
        argv += ["--draft", str(tiny_model_dir)]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["rounds"] == 4 and len(result["round_ratios"]) == 4
    low, high = result["interval"]
    assert low <= result["speedup"] <= high
    assert result["verdict"] == verdict, result
    assert result["identical_to_baseline"] is True


@pytest.mark.parametrize(("rounds", "over"), [("5", "over 5 rounds"),
                                              ("1", "stretches of the text")])
def test_plain_against_plain_reads_within_noise(capsys, monkeypatch, tiny_model_dir, rounds,
                                                over):
    # Each step's time is noise as large as a busy machine's, seeded: the verdict rests on
    # how the rounds and stretches take that noise, not on what else the machine runs.
    jittered_session_clock(monkeypatch)
    argv = ["run", "--target", str(tiny_model_dir), "--backend", "transformers", "--no-chat",
            "--prompt", "def add(a, b):\n    return a + b\n\ndef add(", "--max-tokens", "96",
            "--oracle", "none", "--baseline", "--rounds", rounds]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"{over}): within noise" in err and "output identical" in err


def test_a_lane_that_proposed_nothing_never_reads_as_a_loss(capsys, tiny_model_dir):
    # the prompt has nothing to copy from: prompt lookup declines every step
    argv = ["run", "--target", str(tiny_model_dir), "--backend", "transformers", "--no-chat",
            "--prompt", "xyz", "--max-tokens", "12", "--oracle", "prompt-lookup",
            "--k", "3", "--baseline", "--rounds", "3", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    if result["proposed"]:
        pytest.skip("the tiny model's text repeated the prompt: something was proposed")
    assert result["verdict"] == sp.NOISE and result["drafted"] is False
    assert "why_slower" not in result


def test_the_bench_gives_each_row_an_interval_over_its_repeats():
    from specviz.engines.bench.spec_bench import Record, repeat_speedup

    def record(oracle, times, q=1):
        return Record(q, "coding", 0, oracle, 4, 100, 50, 0, 0, times[0],
                      compute_ms_runs=list(times))

    plain = [record("none", [1000, 1100, 900]), record("none", [500, 520, 480], q=2)]
    mine = [record("ngram", [800, 900, 700]), record("ngram", [400, 420, 380], q=2)]
    s = repeat_speedup(mine, plain)
    expected = [1500 / 1200, 1620 / 1320, 1380 / 1080]
    assert s.rounds == 3 and s.ratios == pytest.approx(expected)
    assert s.verdict == sp.FASTER
    assert repeat_speedup(mine[:1], plain[:1]).rounds == 3
