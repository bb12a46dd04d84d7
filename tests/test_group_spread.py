"""benchmarks/group_spread.py: a group's speedup with the interval resampled questions give."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
import group_spread  # benchmarks/ is no package


def record(q: int, oracle: str, ms: float, category: str = "qa", turn: int = 0) -> dict:
    return {"question_id": q, "category": category, "turn": turn, "oracle": oracle, "k": -1,
            "tokens": 100, "compute_ms": ms}


def test_a_question_keeps_its_plain_time_and_the_interval_holds_the_figure():
    rng = random.Random(0)
    records = []
    for q in range(30):
        plain = 1000 * (1 + q % 5)  # questions of very different lengths
        records += [record(q, "none", plain), record(q, "suffix", plain / (1.1 + 0.1 * (q % 3)))]
    groups = group_spread.paired(records)
    rows = groups["suffix k=auto"]["Question Answering"]
    assert len(rows) == 30
    low, high = group_spread.interval(rows, 500, rng)
    assert low < group_spread.ratio(rows) < high
    assert 1.1 <= low and high <= 1.3  # within the per-question speedups


def test_an_oracle_that_changes_nothing_has_an_interval_of_nothing():
    records = [r for q in range(10) for r in (record(q, "none", 500 + q), record(q, "x", 500 + q))]
    rows = group_spread.paired(records)["x k=auto"]["Question Answering"]
    assert group_spread.interval(rows, 200, random.Random(1)) == (1.0, 1.0)
