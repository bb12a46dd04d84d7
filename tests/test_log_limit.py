"""A log a flood cannot fill: five lines a window whole, the rest counted in one line as the
window ends (by the timer given, or at the next line after it)."""

from __future__ import annotations

from specviz.engines.host.log_limit import LimitedLog


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_five_lines_a_window_then_one_line_for_the_rest():
    lines: list[str] = []
    timers: list[tuple[float, object]] = []
    clock = Clock()
    log = LimitedLog(lines.append, "refused", schedule=lambda d, f: timers.append((d, f)),
                     clock=clock)
    for n in range(1000):
        clock.now = n * 0.001
        log(f"refused {n}")
    assert lines == [f"refused {n}" for n in range(5)]
    assert len(timers) == 1 and abs(timers[0][0] - (10.0 - 0.005)) < 1e-9  # once, to the end
    timers[0][1]()
    assert lines[-1] == "995 more refused in the last 10 s (at most 5 are logged each 10 s)"
    clock.now = 10.5  # a new window: whole lines again
    log("refused again")
    assert lines[-1] == "refused again" and log.held == 0


def test_without_a_timer_the_count_is_said_at_the_next_window():
    lines: list[str] = []
    clock = Clock()
    log = LimitedLog(lines.append, "faults", burst=1, window_s=1.0, clock=clock)
    log("a")
    log("b")
    clock.now = 2.0
    log("c")
    assert lines == ["a", "1 more faults in the last 1 s (at most 1 are logged each 1 s)", "c"]
