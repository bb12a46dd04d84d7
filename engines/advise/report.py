"""What `specviz advise` found: candidates by prompt kind, ranked, with a verdict.

Plain dataclasses, so that a window can draw the same result (candidates by kind, coloured by
predicted speedup; 1.0 is break-even) from `Advice` or from its dict form.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..oracles.registry import info

ALL = "all"  # the column of every kind's answers together
PAYS = 1.02  # a predicted gain smaller than this is within the prediction's noise


@dataclass
class Cell:
    """One candidate on one kind of prompts."""

    speedup: float  # over plain decoding: the better of auto K and the best fixed K
    policy: str  # "auto" or "K=4": the one that speedup is for
    best_k: int  # the best fixed K
    auto_speedup: float | None  # with auto K (None: not replayed)
    fixed_speedup: float  # at the best fixed K
    acceptance: float | None  # share of drafted tokens kept, under `policy` (None: none drafted)
    tokens_per_step: float
    break_even: float | None  # the constant acceptance at which best_k just pays (None: never)
    tokens: int  # answer tokens it was predicted on
    rows_per_step: float = 1.0  # rows a step verifies: its guesses and the target's token
    # The fewest streams decoded at once at which it is predicted to stop paying (None: it
    # pays at every count in concurrency.STREAMS; 1: it does not pay alone either).
    stops_paying_at: int | None = 1


@dataclass
class Candidate:
    name: str  # as the table shows it
    oracle: str  # the registry's name (--oracle)
    model: str | None = None  # what its model input takes (a draft), or the heads' folder
    obtain: str = "nothing"  # what getting it costs: nothing, a download, training
    cells: dict[str, Cell] = field(default_factory=dict)  # by kind, and ALL
    skipped: str = ""  # why it was not predicted
    note: str = ""  # how it was predicted, where that needs saying

    @property
    def predicted(self) -> bool:
        return ALL in self.cells

    @property
    def overall(self) -> float:
        return self.cells[ALL].speedup if self.predicted else 0.0

    def flags(self) -> str:
        """The `specviz run` options that run it as predicted."""
        cell = self.cells.get(ALL)
        k = "auto" if cell is None or cell.policy == "auto" else str(cell.best_k)
        return info(self.oracle).command_line(k, self.model)


@dataclass
class Advice:
    target: str
    backend: str
    kinds: list[str]  # the columns, in order (ALL last where there are several)
    candidates: list[Candidate]  # ranked: predicted ones best first, then the skipped ones
    problems: list[str] = field(default_factory=list)  # one line each
    costs: str = ""  # which profile priced the steps
    answers: str = ""  # where the target's answers came from
    seconds: float = 0.0

    @property
    def predicted(self) -> list[Candidate]:
        return [c for c in self.candidates if c.predicted]

    @property
    def verdict(self) -> str:
        ranked = self.predicted
        if not ranked:
            return "no candidate could be predicted for this target here"
        best = ranked[0]
        if best.overall < PAYS:
            return (f"plain decoding: nothing predicted pays here (the best, {best.name}, "
                    f"{best.overall:.2f}x)")
        line = f"--target {self.target} {best.flags()}: {best.overall:.2f}x predicted"
        others = []
        for kind in self.kinds:
            if kind == ALL:
                continue
            top = max(ranked, key=lambda c: c.cells[kind].speedup if kind in c.cells else 0)
            cell = top.cells.get(kind)
            if cell is None or cell.speedup < PAYS:
                others.append(f"{kind}: plain")
            elif top is not best:
                others.append(f"{kind}: {top.name} {cell.speedup:.2f}x")
        return line + (f" (better for {'; '.join(others)})" if others else "")

    def speedups(self) -> dict[str, dict[str, float]]:
        """Candidate -> kind -> predicted speedup: what a heatmap draws (1.0: break-even)."""
        return {c.name: {k: cell.speedup for k, cell in c.cells.items()} for c in self.predicted}

    def to_dict(self) -> dict:
        return {**asdict(self), "verdict": self.verdict}


def rank(candidates: list[Candidate]) -> list[Candidate]:
    """Predicted candidates by speedup over every kind, best first (a tie goes to the one that
    costs nothing to get, then to the name); the skipped ones after them, as found."""
    predicted = [c for c in candidates if c.predicted]
    predicted.sort(key=lambda c: (-round(c.overall, 6), c.obtain != "nothing", c.name))
    return predicted + [c for c in candidates if not c.predicted]


def render(advice: Advice) -> str:
    """The ranked table, the skipped candidates with their reasons, the verdict and the time
    it took (the problems are the caller's to print, one line each)."""
    header = ["candidate", *advice.kinds, "accepted", "best K", "pays up to", "to get"]
    rows = [header]
    for c in advice.predicted:
        cells = [f"{c.cells[k].speedup:.2f}x" if k in c.cells else "-" for k in advice.kinds]
        cell = c.cells[ALL]
        accepted = "-" if cell.acceptance is None else f"{cell.acceptance:.0%}"
        rows.append([c.name, *cells, accepted, cell.policy.removeprefix("K="),
                     _pays_up_to(cell.stops_paying_at), c.obtain])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [f"target {advice.target} ({advice.backend}); {advice.answers}; priced with "
             f"{advice.costs}", ""]
    for r in rows:
        lines.append("  ".join(cell.ljust(w) if i in (0, len(r) - 1) else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(r, widths))).rstrip())
    skipped = [c for c in advice.candidates if not c.predicted]
    if skipped:
        lines += ["", "not predicted:"]
        lines += [f"  {c.name}: {c.skipped}" + (f"; to get: {c.obtain}"
                                                 if c.obtain != "nothing" else "")
                  for c in skipped]
    notes = [f"  {c.name}: {c.note}" for c in advice.predicted if c.note]
    if notes:
        lines += ["", "notes:", *notes]
    lines += ["", "pays up to: the most streams decoded at once (of 1, 2, 4, 8, 16) at which "
              "it is still predicted to pay, a batch's pass priced by the cost profile",
              "", f"verdict: {advice.verdict}", f"took {advice.seconds:.0f} s"]
    return "\n".join(lines)


def _pays_up_to(stops: int | None) -> str:
    from .concurrency import STREAMS

    if stops is None:
        return f"{STREAMS[-1]}+ streams"
    below = [n for n in STREAMS if n < stops]
    return f"{below[-1]} stream{'s' * (below[-1] > 1)}" if below else "-"
