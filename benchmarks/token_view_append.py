"""Whether a lane's token view keeps its pace as the text grows: its time per step, first
steps against last.

Appends synthetic steps (four emitted tokens and a rejected one each, a line break every
eight steps) to one TokenView and lays it out after every step, the live worst case. Reports
the milliseconds a step took over the first and the last 500 steps, and their ratio (1 is a
steady pace; laying out a growing paragraph, or the whole document, makes it grow with the
text). tests/test_widgets_token_view.py proves the same by counting the characters each
layout touches; this is the time it takes here.

    QT_QPA_PLATFORM=offscreen python benchmarks/token_view_append.py [--steps 2500] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from PySide6.QtWidgets import QApplication

from specviz.engines.events import (
    REJECT_MISMATCH,
    TARGET_CORRECTION,
    ProposedToken,
    StepEvent,
    TargetToken,
    Timing,
    Totals,
)
from specviz.widgets.token_view import TokenView

WINDOW = 500  # steps compared at each end


def token(text: str, source: str = "draft", accepted: bool = True) -> ProposedToken:
    return ProposedToken(id=len(text), text=text, source=source, accepted=accepted,
                         reject_reason=None if accepted else REJECT_MISMATCH)


def step(i: int) -> StepEvent:
    proposed = (token(f" a{i}"), token(" b", "prompt"), token(" c", "ngram"),
                token(" d", accepted=False))
    target = "\n" if i % 8 == 7 else " t"
    return StepEvent(
        step=i, oracle="bench", k=4, position=10 + i, proposed=proposed,
        target=TargetToken(id=1, text=target, kind=TARGET_CORRECTION, p_target=0.8,
                           margin=1.5),
        text="".join(t.text for t in proposed if t.accepted) + target,
        timing=Timing(1.0, 2.0, 0.5),
        totals=Totals(4 * (i + 1), i + 1, 4 * (i + 1), 3 * (i + 1), 1.0, 2.0, 0.5))


def one_round(steps: int) -> tuple[float, float]:
    """(ms a step over the first WINDOW steps, over the last WINDOW)."""
    view = TokenView()
    view.resize(600, 800)
    view.show()
    events = [step(i) for i in range(steps)]
    seconds = []
    for event in events:
        start = time.perf_counter()
        view.append_step(event)
        view.flush()
        seconds.append(time.perf_counter() - start)
    view.close()
    return (1000 * statistics.fmean(seconds[:WINDOW]),
            1000 * statistics.fmean(seconds[-WINDOW:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.steps < 2 * WINDOW:
        parser.error(f"--steps must be at least {2 * WINDOW}")
    QApplication.instance() or QApplication([])
    for n in range(1, args.rounds + 1):
        first, last = one_round(args.steps)
        print(f"round {n}: first {WINDOW} steps {first:.3f} ms a step, last {WINDOW} "
              f"{last:.3f} ms, ratio {last / first:.2f}")


if __name__ == "__main__":
    main()
