"""What auto K for a batch costs where nothing pays: a batch step's milliseconds outside its
pass (guessing, choosing K, judging, bookkeeping), auto K against plain decoding of the same
streams, whole runs in turn. Where speculation stays off (16 streams on a 2-core CPU), this
difference is all that can make auto K read slower than plain decoding (issue 84).

    python benchmarks/batch_bookkeeping.py --oracle prompt-lookup --streams 16 --rounds 3

Prints, per side, the mean ms a step spends guessing (choosing K included), in its pass and
after it, the guesses a stream's step, and auto K's extra ms as a share of a plain step.
"""

from __future__ import annotations

import argparse
import json
import statistics

from specviz.engines.host.model_pool import ModelPool
from specviz.engines.host.run_spec import LaneSpec, ModelChoice, RunRequest
from specviz.engines.host.stream_builder import PROMPT_SETS, StreamsBuilder, prompt_set
from specviz.engines.loop.streams import BatchStep


def per_step(builder: StreamsBuilder, prompts: list[str], n: int) -> dict:
    """One whole run's mean ms a step, by part."""
    parts = {"guess": [], "pass": [], "after": []}
    guesses = rows = 0
    for event in builder.session(prompts, n):
        if isinstance(event, BatchStep):
            parts["guess"].append(event.timing.draft_ms)
            parts["pass"].append(event.timing.verify_ms)
            parts["after"].append(event.timing.other_ms)
            guesses += sum(len(e.proposed) for _, e in event.steps)
            rows += len(event.steps)
    return {k: statistics.fmean(v) for k, v in parts.items()} | {"k": guesses / max(rows, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--backend", choices=["llama", "transformers"], default="llama")
    p.add_argument("--oracle", default="prompt-lookup")
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompts", choices=PROMPT_SETS[1:], default="quickstart")
    args = p.parse_args()
    prompts = prompt_set(args.prompts, None)
    model = ModelChoice(args.target, args.backend, threads=args.threads)
    request = RunRequest(prompts[0], model, max_tokens=args.max_tokens)
    pool = ModelPool()
    sides = {"auto": StreamsBuilder(LaneSpec(args.oracle, 0, auto_k=True), request, pool, print),
             "plain": StreamsBuilder(LaneSpec("none", 0), request, pool, print)}
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    try:
        sides["auto"].session(prompts, args.streams)  # auto K's widths timed before any run
        for r in range(args.rounds):
            for side in (sides if r % 2 == 0 else reversed(sides)):
                runs[side].append(per_step(sides[side], prompts, args.streams))
    finally:
        for builder in sides.values():
            builder.close()
        pool.close()
    mean = {side: {k: statistics.fmean(run[k] for run in rs) for k in rs[0]}
            for side, rs in runs.items()}
    extra = {k: mean["auto"][k] - mean["plain"][k] for k in ("guess", "after")}
    step = sum(mean["plain"][k] for k in ("guess", "pass", "after"))
    print(json.dumps({"args": vars(args), "ms_a_step": mean, "auto_extra_ms": extra,
                      "auto_extra_share": sum(extra.values()) / step}, indent=1))


if __name__ == "__main__":
    main()
