"""Speculation under concurrency: total tokens/s and a stream's pace against the number of
streams decoded at once, with and without speculation, and where speculation stops paying.

At each N, a batch of N streams with ORACLE at K and plain decoding of the same N streams
batched the same way are stepped by turns (one batch step each), ROUNDS times, the first to
step alternating (engines/bench/concurrency.py); the interval is the rounds' (one round:
stretches of the text). The crossover is measured (the first N no longer faster) and
predicted from the stored cost profile (a pass of N x (K+1) tokens against one of N; passes
wider than the profile's largest batch are extrapolated along its last segment, and said).
The streams take the prompt set's prompts in turn.

    python benchmarks/concurrency.py --target smollm2-135m --threads 2 --oracle prompt-lookup \
        --k 8 --streams 1,2,4,8,16 --rounds 3 --prompts quickstart --out concurrency.json
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--n-ctx", type=int, default=8192)
    p.add_argument("--oracle", default="prompt-lookup")
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--streams", default="1,2,4,8,16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--prompts", choices=PROMPT_SETS[1:], default="quickstart")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    ns = sorted({int(n) for n in args.streams.split(",")})
    prompts = prompt_set(args.prompts, None)
    model = ModelChoice(args.target, "llama", threads=args.threads, n_ctx=args.n_ctx)
    request = RunRequest(prompts[0], model, max_tokens=args.max_tokens)
    pool = ModelPool()
    lane = StreamsBuilder(LaneSpec(args.oracle, args.k), request, pool, print)
    plain = StreamsBuilder(LaneSpec("none", 0), request, pool, print)
    try:
        lane.session(prompts, max(ns))  # the widest batch must fit: said before any run
        points = []
        for n in ns:
            points.append(conc.measure(n, partial(lane.session, prompts),
                                       partial(plain.session, prompts), args.rounds))
            print(json.dumps(points[-1].to_dict()), flush=True)
        target = lane.target
        stored = prof.load(args.target, "llama", target.device, args.threads, target.dtype,
                           say=print, variant=target.profile_variant)
    finally:
        lane.close()
        plain.close()
        pool.close()
    result = {"args": vars(args) | {"out": str(args.out)}, "machine": machine_info(),
              "points": [pt.to_dict() for pt in points],
              "crossover": conc.measured_crossover(points)}
    if stored is not None:
        first = points[0]
        result["predicted"] = conc.predict(lambda w: stored.cost_ms(w, CONTEXT),
                                           max(stored.batches), first.tokens_per_step,
                                           first.width_per_step, ns).to_dict()
    print(json.dumps({k: v for k, v in result.items() if k != "points"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
