"""`specviz advise` says at how many streams at once each candidate stops paying
(engines/advise/concurrency.py): anchored at its single-stream figure, priced by the profile."""

from __future__ import annotations

import pytest

from specviz.engines.advise.concurrency import speedups, stops_paying_at
from specviz.engines.advise.pricing import Costs
from specviz.engines.advise.report import Advice, Candidate, Cell, render
from specviz.engines.cost.profile import Profile

WIDTHS = [1, 2, 4, 8, 16, 32, 64, 128]


def costs(per_row: float, one: float = 10.0) -> Costs:
    return Costs(Profile("m", "llama", "cpu", 2, [512], WIDTHS,
                         [[one + per_row * (w - 1) for w in WIDTHS]]), other_ms=0.5)


def alone(c: Costs, tokens: float, rows: int, drafting: float) -> float:
    """The single-stream speedup of a step writing `tokens` over `rows` rows."""
    plain = c.verify_ms(1, 512) + c.other_ms
    return tokens * plain / (c.verify_ms(rows, 512) + c.other_ms + drafting)


@pytest.mark.parametrize("per_row", [0.05, 1.0, 10.0])
def test_one_stream_reads_as_the_table_does(per_row):
    c = costs(per_row)
    s1 = alone(c, 2.0, 5, 1.0)
    assert speedups(c, 512, s1, 2.0, 5.0)[1] == pytest.approx(s1)


def test_where_a_pass_costs_what_one_token_does_it_pays_at_every_count():
    """Each stream drafts on its own (a lookup's 0.1 ms), so what pays is the pass."""
    c = costs(0.02)
    by_n = speedups(c, 512, alone(c, 2.2, 5, 0.1), 2.2, 5.0)
    assert all(s > 1.5 for s in by_n.values())
    assert stops_paying_at(by_n, 1.02) is None


def test_a_drafter_each_stream_runs_in_turn_stops_paying_sooner():
    c = costs(0.02)
    cheap = speedups(c, 512, alone(c, 2.2, 5, 0.1), 2.2, 5.0)
    dear = speedups(c, 512, alone(c, 2.2, 5, 4.0), 2.2, 5.0)
    assert cheap[1] > dear[1] > 1.02
    assert stops_paying_at(dear, 1.02) is not None


def test_where_rows_grow_dear_it_stops_paying_as_streams_are_added():
    """Flat up to a few rows, then every row a token's cost: one stream pays, many do not."""
    knee = Costs(Profile("m", "llama", "cpu", 2, [512], WIDTHS,
                         [[10, 10.2, 10.5, 12, 24, 48, 96, 192]]))
    by_n = speedups(knee, 512, 1.5, 2.0, 4.0)
    assert by_n[1] == pytest.approx(1.5)
    assert by_n == dict(sorted(by_n.items(), key=lambda kv: -kv[1]))  # falls with N
    assert stops_paying_at(by_n, 1.02) == 4


def test_the_table_says_how_far_each_candidate_pays():
    def cell(stops):
        return Cell(1.3, "auto", 3, 1.3, 1.2, 0.6, 1.8, 0.4, 100, 3.0, stops)

    candidates = [Candidate("a", "prompt-lookup", cells={"all": cell(4)}),
                  Candidate("b", "ngram", cells={"all": cell(None)}),
                  Candidate("c", "draft", cells={"all": cell(1)})]
    text = render(Advice("t", "llama", ["all"], candidates))
    rows = {line.split()[0]: line for line in text.splitlines() if line[:2] in ("a ", "b ", "c ")}
    assert "2 streams" in rows["a"] and "16+ streams" in rows["b"] and " - " in rows["c"]
    assert "pays up to" in text
