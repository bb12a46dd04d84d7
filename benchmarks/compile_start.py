"""What a start of the transformers backend with `--compile on` costs, and where it goes
(issue #64: the second start's compile time, goal at most 10 s).

Each start is a fresh Python process (as a user's next `specviz run` is) that loads the model
with compile="on" and reports: the load's seconds, the
graph of width 1's share (compiled at load: a plain step's), torch's own phase timings
(`torch._dynamo.utils.compilation_time_metrics`: dynamo's tracing, the AOT and FX graph caches'
lookups, inductor's code generation and C++ builds, loading the compiled module), and the
caches' hits and misses. `--fresh` starts the first process on an empty compile cache (a
first start); the others find what it wrote. `--against-eager` starts an eager process
(compile="off") after each compiled one, so the two are measured alternately under the same
load (#77: a second start within eager's + 10 s).

    python benchmarks/compile_start.py --target smollm2-135m --dtype float32 --starts 3 \\
        --threads 2 [--fresh] [--against-eager] [--json out.json]

`--set torch._inductor.config.freezing=True` (repeatable) changes a config in the child
before the load (a remedy tried), `--env NAME=VALUE` its environment. `--variant
LABEL:MODULE.NAME=PYTHON` (repeatable; `;` between settings) adds a compiled start with those
settings to each round, after the plain one and before the eager one, so ways are compared
alternately (#77: `--variant whole:specviz.engines.backends.hf_compiled.RUN_LAYERS=0`, the
decoder in one graph, against runs of layers).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
started = time.perf_counter()
import torch
for item in json.loads(sys.argv[4]):
    path, value = item.split("=", 1)
    module, name = path.rsplit(".", 1)
    import importlib
    setattr(importlib.import_module(module), name, eval(value))
imported = time.perf_counter() - started
from torch._dynamo.utils import compilation_time_metrics, counters
from specviz.engines.backends import load_backend
from specviz.engines.backends import hf_compiled
from specviz.engines.models import resolve
path = resolve(sys.argv[1])
dtype = sys.argv[2] or None
threads = int(sys.argv[3]) if sys.argv[3] else None
t0 = time.perf_counter()
b = load_backend("transformers", path, threads=threads, dtype=dtype, compile=sys.argv[5],
                 probe=False)
load = time.perf_counter() - t0
phases = {k: round(sum(v), 3) for k, v in compilation_time_metrics.items()}
print(json.dumps({"import_torch_s": round(imported, 2), "load_s": round(load, 2),
                  "dtype": b.dtype,
                  "compiled": b.compiled,
                  "width1_s": b._steps.compile_seconds.get(1) if b._steps else None,
                  "widths_read": b._steps.read_from_cache if b._steps else None,
                  "phases_s": dict(sorted(phases.items(), key=lambda kv: -kv[1])),
                  "counters": {k: dict(v) for k, v in counters.items()
                               if k in ("inductor", "aot_autograd", "stats")}}))
"""


def start(args, env: dict, compile: str = "on", settings: list[str] | None = None) -> dict:
    settings = args.set + (settings or [])
    done = subprocess.run([sys.executable, "-c", CHILD, args.target, args.dtype or "",
                           str(args.threads or ""), json.dumps(settings), compile],
                          capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode:
        raise SystemExit(f"the child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def differences(runs: list[dict]) -> str:
    """Each compiled way's load over the eager load of its round, round by round (the first
    round left out where it may have compiled: the later ones read)."""
    rounds, current = [], {}
    for r in runs:
        if r["variant"] in current:
            rounds.append(current)
            current = {}
        current[r["variant"]] = r["load_s"]
    rounds.append(current)
    lines = []
    for way in [w for w in rounds[0] if w != "eager"]:
        diffs = [round(r[way] - r["eager"], 2) for r in rounds if way in r and "eager" in r]
        if diffs:
            lines.append(f"{way}: load minus eager's, round by round: {diffs}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--dtype", default=None)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--starts", type=int, default=2)
    p.add_argument("--fresh", action="store_true",
                   help="the first start on an empty compile cache (a temporary folder)")
    p.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=PYTHON")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--against-eager", action="store_true",
                   help="an eager start after each compiled one, alternately")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--variant", action="append", default=[], metavar="LABEL:MODULE.NAME=PYTHON",
                   help="another compiled start a round, with these settings")
    args = p.parse_args(argv)
    variants = [(v.split(":", 1)[0], v.split(":", 1)[1].split(";")) for v in args.variant]
    env = dict(os.environ, **dict(e.split("=", 1) for e in args.env))
    with tempfile.TemporaryDirectory(prefix="specviz-compile-") as scratch:
        if args.fresh:
            env["TORCHINDUCTOR_CACHE_DIR"] = scratch
        runs = []
        for i in range(args.starts):
            runs.append({"variant": "on", **start(args, env)})
            r = runs[-1]
            top = ", ".join(f"{k} {v}" for k, v in list(r["phases_s"].items())[:6])
            print(f"start {i + 1}: load {r['load_s']} s, of which width 1's graph "
                  f"{r['width1_s']} s (read from the cache: {r['widths_read']}); {top}",
                  flush=True)
            for label, settings in variants:
                runs.append({"variant": label, **start(args, env, settings=settings)})
                print(f"{label} start {i + 1}: load {runs[-1]['load_s']} s, of which width 1's "
                      f"graph {runs[-1]['width1_s']} s", flush=True)
            if args.against_eager:
                runs.append({"variant": "eager", **start(args, env, compile="off")})
                print(f"eager start {i + 1}: load {runs[-1]['load_s']} s", flush=True)
    summary = differences(runs)
    if summary:
        print(summary)
    result = {"target": args.target, "dtype": args.dtype, "threads": args.threads,
              "fresh": args.fresh, "set": args.set, "env": args.env,
              "load_before": os.getloadavg()[0], "starts": runs}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
