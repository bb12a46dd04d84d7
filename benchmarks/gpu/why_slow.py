"""Run a module as `python -m` would, under cProfile, and count the garbage collector's pauses.

On the H200 the bench's plain transformers steps took 35-63 ms where the profile's forward
and the generate() comparison's plain run took 18-19 ms, in the same backend and dtype. A
collection of the oldest generation walks every live object (a bench keeps every run's step
events and its oracles' tables) and lands inside whichever step allocates next: a forward,
which allocates most. This says how much of a run went to the collector, by generation.

    python benchmarks/gpu/why_slow.py OUT_PREFIX -m specviz bench ...

writes OUT_PREFIX.prof (pstats) and OUT_PREFIX-gc.json.
"""

from __future__ import annotations

import cProfile
import gc
import json
import runpy
import sys
import time


def main() -> int:
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        raise SystemExit(__doc__.strip().splitlines()[-3].strip())
    prefix, module, args = sys.argv[1], sys.argv[3], sys.argv[4:]
    pauses = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}  # generation: [collections, seconds]
    full: list[tuple[float, float, int]] = []  # each full walk: (at s, took s, objects then)
    started: list[float] = []
    began = time.perf_counter()

    def timed(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            count = pauses[info["generation"]]
            start = started.pop()
            count[0] += 1
            count[1] += time.perf_counter() - start
            if info["generation"] == 2:  # when: a load's walks are not a step's
                full.append((round(start - began, 2), round(time.perf_counter() - start, 4),
                             len(gc.get_objects())))

    gc.callbacks.append(timed)
    sys.argv = [module, *args]
    profiler = cProfile.Profile()
    wall = time.perf_counter()
    code = 0
    try:
        profiler.runcall(runpy.run_module, module, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 0
    finally:
        wall = time.perf_counter() - wall
        gc.callbacks.remove(timed)
        profiler.dump_stats(prefix + ".prof")
        with open(prefix + "-gc.json", "w") as f:
            json.dump({"wall_s": round(wall, 3), "objects_tracked": len(gc.get_objects()),
                       "by_generation": {g: {"collections": n, "seconds": round(s, 4)}
                                         for g, (n, s) in pauses.items()},
                       "full_walks": full}, f, indent=1)
    return code


if __name__ == "__main__":
    sys.exit(main())
