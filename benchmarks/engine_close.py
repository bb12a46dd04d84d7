"""How long an engine process takes to end when asked mid-run: the window gives it
CLOSE_TIMEOUT_S (app/main_window.py) before it kills it.

Starts the engine process as the window does (`python -m specviz.engines.host.engine_process`),
sends a run of two lanes (plain decoding and prompt lookup, 400 tokens), waits for a few
steps, pauses it or not, then does what the window's close does (`shutdown`, stdin closed)
and times the exit. tests/test_app_run.py proves that the engine ends on being asked; this
is how long that takes here.

    python benchmarks/engine_close.py [--model smollm2-135m] [--rounds 5] [--paused]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from specviz.app.main_window import CLOSE_TIMEOUT_S
from specviz.engines.host import protocol
from specviz.engines.host import run_spec as rs

PROMPT = "def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog."


def one_close(model: str, paused: bool, steps_first: int = 3) -> float:
    """Seconds from the shutdown request to the process's exit."""
    spec = rs.RunSpec(rs.RunRequest(PROMPT, rs.ModelChoice(model), max_tokens=400, chat=False),
                      {"plain": rs.LaneSpec("none"), "lookup": rs.LaneSpec("prompt-lookup", 4)})
    engine = subprocess.Popen([sys.executable, "-m", "specviz.engines.host.engine_process"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)
    engine.stdin.write(protocol.encode("run", spec=rs.to_dict(spec)))
    engine.stdin.flush()
    seen = 0
    for line in engine.stdout:
        message = protocol.decode(line)
        seen += message.kind == "event"
        if seen >= steps_first or message.kind == "done":
            break
    if paused:
        engine.stdin.write(protocol.encode("pause"))
        engine.stdin.flush()
    start = time.perf_counter()
    engine.stdin.write(protocol.encode("shutdown"))
    engine.stdin.close()
    engine.stdout.close()  # what it still says is not waited for
    engine.wait(timeout=120)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--paused", action="store_true", help="pause the run before closing")
    args = parser.parse_args()
    times = [one_close(args.model, args.paused) for _ in range(args.rounds)]
    print(f"engine exit after shutdown ({'paused' if args.paused else 'running'}), "
          f"{args.rounds} rounds: median {statistics.median(times):.2f} s, max "
          f"{max(times):.2f} s (the window waits {CLOSE_TIMEOUT_S:g} s)")


if __name__ == "__main__":
    main()
