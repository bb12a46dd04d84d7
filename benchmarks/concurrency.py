"""Speculation under concurrency: total tokens/s and a stream's pace against the number of
streams decoded at once, with and without speculation, and where speculation stops paying.

At each N, a batch of N streams with ORACLE at K and plain decoding of the same N streams
batched the same way are stepped by turns (one batch step each), ROUNDS times, the first to
step alternating (engines/bench/concurrency.py); the interval is the rounds' (one round:
stretches of the text). The crossover is measured (the first N no longer faster) and
predicted from the stored cost profile (a pass of N x (K+1) tokens against one of N; passes
wider than the profile's largest batch are extrapolated along its last segment, and said).
The streams take the prompt set's prompts in turn.

With several K (`--k auto,1,2,4`), each is measured against plain decoding at each N, and
auto K (chosen for the batch each step: engines/cost/batch_k.py) is scored against the best
fixed K in hindsight: its speedup at least HINDSIGHT of the best fixed K's, and never
"slower" than plain decoding by the run's verdict.

    python benchmarks/concurrency.py --target smollm2-135m --threads 2 --oracle prompt-lookup \
        --k auto,1,2,4 --streams 1,2,4,8,16 --rounds 2 --prompts quickstart --out conc.json
    python benchmarks/concurrency.py ... --prompts spec-bench --max-tokens 96
"""

from __future__ import annotations

import argparse
import json
from functools import partial
from pathlib import Path

from specviz.engines.bench import concurrency as conc
from specviz.engines.cost import profile as prof
from specviz.engines.host.model_pool import ModelPool
from specviz.engines.host.run_spec import LaneSpec, ModelChoice, RunRequest
from specviz.engines.host.stream_builder import PROMPT_SETS, StreamsBuilder, prompt_set
from specviz.engines.trace import machine_info

CONTEXT = 512  # where the prediction prices a pass: a prompt and a few hundred tokens
HINDSIGHT = 0.9  # auto K's speedup against the best fixed K's, at each N (issue 84)
AUTO = "auto"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--n-ctx", type=int, default=8192)
    p.add_argument("--oracle", default="prompt-lookup")
    p.add_argument("--k", default="4", help="a draft length, auto, or several: auto,1,2,4")
    p.add_argument("--streams", default="1,2,4,8,16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--prompts", choices=PROMPT_SETS[1:], default="quickstart")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    ns = sorted({int(n) for n in args.streams.split(",")})
    ks = [k.strip() for k in args.k.split(",")]
    prompts = prompt_set(args.prompts, None)
    model = ModelChoice(args.target, "llama", threads=args.threads, n_ctx=args.n_ctx)
    request = RunRequest(prompts[0], model, max_tokens=args.max_tokens)
    pool = ModelPool()
    lanes = {k: StreamsBuilder(LaneSpec(args.oracle, 0 if k == AUTO else int(k),
                                        auto_k=k == AUTO), request, pool, print) for k in ks}
    plain = StreamsBuilder(LaneSpec("none", 0), request, pool, print)
    try:
        for lane in lanes.values():  # the widest batch must fit (and auto K's widths timed)
            lane.session(prompts, max(ns))
        points: dict[str, list] = {k: [] for k in ks}
        for n in ns:
            for k, lane in lanes.items():
                points[k].append(conc.measure(n, partial(lane.session, prompts),
                                              partial(plain.session, prompts), args.rounds))
                print(json.dumps({"k": k, **points[k][-1].to_dict()}), flush=True)
        target = plain.target
        stored = prof.load(args.target, "llama", target.device, args.threads, target.dtype,
                           say=print, variant=target.profile_variant)
    finally:
        for builder in (*lanes.values(), plain):
            builder.close()
        pool.close()
    result = {"args": vars(args) | {"out": str(args.out)}, "machine": machine_info(),
              "lanes": {k: lane_result(pts, stored, ns) for k, pts in points.items()}}
    if AUTO in points and len(points) > 1:
        result["auto_against_hindsight"] = hindsight(points, ns)
    brief = {k: {key: v for key, v in lane.items() if key != "points"}
             for k, lane in result["lanes"].items()}
    print(json.dumps({**result, "lanes": brief}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


def lane_result(points: list, stored, ns: list[int]) -> dict:
    out = {"points": [pt.to_dict() for pt in points],
           "crossover": conc.measured_crossover(points)}
    if stored is not None:
        first = points[0]
        out["predicted"] = conc.predict(lambda w: stored.cost_ms(w, CONTEXT),
                                        max(stored.batches), first.tokens_per_step,
                                        first.width_per_step, ns).to_dict()
    return out


def hindsight(points: dict[str, list], ns: list[int]) -> list[dict]:
    """At each N: auto K's speedup, the best fixed K's, their ratio, and whether auto K held
    (at least HINDSIGHT of the best, and not slower than plain decoding)."""
    rows = []
    for i, n in enumerate(ns):
        auto = points[AUTO][i].speedup
        fixed = {k: pts[i].speedup for k, pts in points.items() if k != AUTO}
        best = max(fixed, key=lambda k: fixed[k].ratio)
        ratio = auto.ratio / fixed[best].ratio
        rows.append({"streams": n, "auto": round(auto.ratio, 3), "auto_verdict": auto.verdict,
                     "best_fixed_k": best, "best_fixed": round(fixed[best].ratio, 3),
                     "ratio": round(ratio, 3),
                     "held": ratio >= HINDSIGHT and auto.verdict != "slower"})
    return rows


if __name__ == "__main__":
    main()
