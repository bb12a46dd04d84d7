"""Verdicts while the machine changes: `specviz run --baseline` over and over while a busy
process comes and goes, each run's steps kept so that any estimator can be scored again on
the same data (issue #83, point 1).

Each run is a child process doing what `specviz run ... --baseline --json` does (the same
parser, lanes and rounds); the parent starts and stops the busy process around it:
  quiet      nothing else running
  busy       a busy process the whole run
  starts     a busy process started at a random moment of the run
  stops      a busy process running, stopped at a random moment of the run
`--conditions alternate` runs quiet, busy, quiet, busy... then plain against plain, as issue
#83 describes; `--conditions switch` starts or stops a busy process at a random moment of
every run. Busy = `python -c 'while True: pass'`.

    python benchmarks/stall_verdicts.py --runs 40 --conditions alternate --out stalls.jsonl
    python benchmarks/stall_verdicts.py --runs 20 --conditions switch --out switch.jsonl
    python benchmarks/stall_verdicts.py --oracle prompt-lookup --runs 10 --out pl.jsonl
    python benchmarks/stall_verdicts.py --score stalls.jsonl switch.jsonl   # the current rule
    python benchmarks/stall_verdicts.py --oracle prompt-lookup --streams 8 --runs 10 \
        --conditions switch --out streams8.jsonl   # N streams batched, auto K for the batch

With `--streams N` each run is `specviz run --streams N --k auto --baseline --json` on the
quick start's prompts (the batch's verdict; its steps are not kept, so `--score` skips it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

BUSY = [sys.executable, "-c", "while True: pass"]
PROMPT = "assets/prompts/code-edit-logging.txt"
ALTERNATE = ("quiet", "busy")
SWITCH = ("starts", "stops")


def child(oracle: str, max_tokens: int) -> dict:
    """One `specviz run --oracle ORACLE --baseline --json`, with both lanes' step times."""
    from specviz.app.cli import cmd_run
    from specviz.app.cli.main import build_parser
    from specviz.engines.host.model_pool import ModelPool
    from specviz.engines.host.run_builder import build_lane
    from specviz.engines.oracles.registry import PLAIN

    argv = ["run", "--oracle", oracle, "--baseline", "--prompt-file", PROMPT,
            "--max-tokens", str(max_tokens), "--json"]
    args = build_parser().parse_args(argv)
    args.began = time.time()
    request = cmd_run.options.run_request(args, cmd_run.read_prompt(args))
    pool = ModelPool()
    lane = build_lane("run", cmd_run.options.lane_spec(args, oracle), request, pool)
    plain = build_lane("plain", cmd_run.options.lane_spec(args, PLAIN), request, pool)
    try:
        rounds = cmd_run._drive_rounds(args, lane, plain, None)
        result = cmd_run._baseline(lane.session.target, lane.session, rounds)
    finally:
        lane.close()
        plain.close()
        pool.close()
    return {**result, "lane": _times(rounds.lane_steps), "plain": _times(rounds.plain_steps)}


def _times(steps) -> list[list[float]]:
    """Each step: tokens written, positions verified, draft, verify and other ms."""
    return [[len(s.emitted_ids), len(s.tree or s.proposed) + 1, s.timing.draft_ms,
             s.timing.verify_ms, s.timing.other_ms] for s in steps]


def streams_command(oracle: str, max_tokens: int, streams: int,
                    backend: str = "llama") -> list[str]:
    """`specviz run` of N streams batched, auto K for the batch, against plain decoding of
    the same streams (the JSON's last line has the batch's speedup and verdict)."""
    return [sys.executable, "-c", "import sys; from specviz.app.cli.main import main; "
            "sys.exit(main())", "run", "--oracle", oracle, "--k", "auto", "--baseline",
            "--streams", str(streams), "--stream-prompts", "quickstart", "--prompt-file",
            PROMPT, "--max-tokens", str(max_tokens), "--backend", backend, "--json"]


def one_run(condition: str, oracle: str, max_tokens: int, expect_s: float,
            streams: int | None = None, backend: str = "llama") -> dict:
    busy = subprocess.Popen(BUSY) if condition in ("busy", "stops") else None
    timer = None
    if condition in ("starts", "stops"):
        at = random.uniform(0.1, 0.9) * expect_s
        timer = threading.Timer(at, _switch, (condition, busy, []))
        timer.start()
    cmd = (streams_command(oracle, max_tokens, streams, backend) if streams else
           [sys.executable, __file__, "--child", "--oracle", oracle,
            "--max-tokens", str(max_tokens)])
    began = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    took = time.monotonic() - began
    if timer:
        timer.cancel()
        started = getattr(timer, "started", None)
        if started:
            started.kill()
    if busy and busy.poll() is None:
        busy.kill()
    if out.returncode:
        return {"condition": condition, "error": out.stderr.strip().splitlines()[-1:]}
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result.pop("streams_detail", None)  # each stream's text: not what is scored
    return {"condition": condition, "seconds": round(took, 1), "load": os.getloadavg()[0],
            **result}


def _switch(condition: str, busy, _started: list) -> None:
    if condition == "stops" and busy is not None:
        busy.kill()
    else:
        threading.current_thread().started = subprocess.Popen(BUSY)


def score(paths: list[Path]) -> None:
    """Each run's verdict by today's rule, from its kept steps, beside what it printed."""
    from specviz.engines.speedup import from_steps, from_stretches
    from specviz.engines.stalls import StepTime

    def steps(rows: list[list[float]]) -> list[StepTime]:
        return [StepTime(int(n), int(w), d + v + o, v) for n, w, d, v, o in rows]

    tally: Counter = Counter()
    for path in paths:
        for line in path.read_text().splitlines():
            run = json.loads(line)
            if "lane" not in run:
                continue
            now = from_steps(steps(run["lane"]), steps(run["plain"]))
            # the stretches alone, stalls and all: the rule before stalls were set aside
            old = from_stretches([(s.tokens, s.ms) for s in steps(run["lane"])],
                                 [s.ms for s in steps(run["plain"])])
            tally[(run["condition"], now.verdict)] += 1
            tally[(run["condition"], "old: " + old.verdict)] += 1
            print(f"{run['condition']:7} printed {run['speedup']:.3f} {run.get('verdict'):13} "
                  f"now {now.ratio:.3f} ({now.low:.3f}-{now.high:.3f}) {now.verdict:13} "
                  f"stalls {now.stalls}; stalls kept {old.ratio:.3f} ({old.low:.3f}-"
                  f"{old.high:.3f}) {old.verdict}")
    for (condition, verdict), n in sorted(tally.items()):
        print(f"{condition:7} {verdict:13} {n}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--oracle", default="none")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--conditions", choices=("alternate", "switch"), default="alternate")
    p.add_argument("--out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--score", type=Path, nargs="*")
    p.add_argument("--streams", type=int, default=None,
                   help="N streams batched, auto K for the batch (specviz run --streams N)")
    p.add_argument("--backend", choices=("llama", "transformers"), default="llama",
                   help="the backend of the --streams runs (transformers: heads run there)")
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.oracle, args.max_tokens)))
        return
    if args.score:
        score(args.score)
        return
    random.seed(args.seed)
    kinds = ALTERNATE if args.conditions == "alternate" else SWITCH
    expect_s = 10.0
    with (args.out.open("a") if args.out else sys.stdout) as out:
        for n in range(args.runs):
            condition = kinds[n % 2] if kinds == ALTERNATE else random.choice(kinds)
            run = one_run(condition, args.oracle, args.max_tokens, expect_s, args.streams,
                          args.backend)
            expect_s = run.get("seconds", expect_s)
            print(json.dumps(run), file=out, flush=True)
            print(f"{n + 1}/{args.runs} {condition}: {run.get('speedup')} "
                  f"{run.get('interval')} {run.get('verdict')} {run.get('error', '')}",
                  file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
