"""What a lane costs where its oracle declines, against plain decoding, in one process.

Plain decoding and ORACLE with `--k auto` decode each prompt in turn, ROUNDS times, on the
same loaded models (built as `specviz run` builds a lane: a fresh K policy each run). Per
prompt and lane: the steps' time (what a speedup is taken over), the median one-token
verification (a declined step against a plain one), the prefill (a draft model's prompt
included), the drafting and exploring steps. A second plain lane is the noise floor.

    python benchmarks/declined_step.py --target qwen2.5-coder-1.5b --oracle draft \
        --draft qwen2.5-coder-0.5b --threads 2 --rounds 3 assets/prompts/code-edit-*.txt
    python benchmarks/declined_step.py ... --limit 5 benchmarks/prompts/spec_bench_dev.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from specviz.engines import events as ev
from specviz.engines.host.model_pool import ModelPool
from specviz.engines.host.run_builder import build_lane
from specviz.engines.host.run_spec import LaneSpec, ModelChoice, RunRequest
from specviz.engines.speedup import NOISE, from_ratios, round_ratio


def run_once(lane: LaneSpec, request: RunRequest, pool: ModelPool) -> dict:
    started = time.perf_counter()
    built = build_lane("a", lane, request, pool)
    steps = [e for e in built.steps() if isinstance(e, ev.StepEvent)]
    summary = built.summary
    built.close()
    plain_steps = [s for s in steps if not s.proposed and not s.tree]
    return {"compute_ms": summary.totals.compute_ms, "prefill_ms": summary.prefill_ms,
            "wall_ms": (time.perf_counter() - started) * 1000, "tokens": summary.totals.tokens,
            "one_token_verify_ms": statistics.median(s.timing.verify_ms for s in plain_steps)
            if plain_steps else None,
            "drafting_steps": sum(1 for s in steps if s.proposed or s.tree),
            "draft_ms": summary.totals.draft_ms, "text": summary.text}


def prompts(paths: list[Path], limit: int | None) -> list[tuple[str, str]]:
    """(name, text): a text file is one prompt; a Spec-Bench .jsonl file gives each
    question's first turn (the first `limit`)."""
    found = []
    for path in paths:
        if path.suffix != ".jsonl":
            found.append((path.stem, path.read_text(encoding="utf-8")))
            continue
        lines = path.read_text(encoding="utf-8").splitlines()[:limit]
        for line in map(json.loads, lines):
            found.append((f"{line.get('category', path.stem)} {line['question_id']}",
                          line["turns"][0]))
    return found


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("prompts", nargs="+", type=Path)
    p.add_argument("--target", required=True)
    p.add_argument("--oracle", default="draft")
    p.add_argument("--draft", default=None)
    p.add_argument("--backend", default="llama")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--max-tokens", type=int, default=160)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--limit", type=int, default=None, help="questions of a .jsonl file")
    args = p.parse_args(argv)
    pool = ModelPool()
    model = ModelChoice(args.target, args.backend, None, args.threads)
    lanes = {"plain": LaneSpec("none"), "plain again": LaneSpec("none"),
             args.oracle: LaneSpec(args.oracle, auto_k=True,
                                  inputs={"draft": args.draft} if args.draft else {})}
    print("| prompt | lane | tokens | steps' time ms (x plain) | one-token verify ms "
          "(x plain) | prefill ms | whole run ms (x plain) | drafting steps | speedup over "
          "the rounds (95% interval): verdict |")
    print("|---|---|---|---|---|---|---|---|---|")
    names = list(lanes)
    for number, (label, prompt) in enumerate(prompts(args.prompts, args.limit)):
        request = RunRequest(prompt, model, args.max_tokens)
        if number == 0:  # the models loaded and warm before anything is timed
            for lane in lanes.values():
                run_once(lane, request, pool)
        runs: dict[str, list[dict]] = {name: [] for name in lanes}
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:  # no lane always first
                runs[name].append(run_once(lanes[name], request, pool))
        report(label, runs)
    pool.close()


def report(prompt: str, runs: dict[str, list[dict]]) -> None:
    def med(name: str, key: str) -> float:
        values = [r[key] for r in runs[name] if r[key] is not None]
        return statistics.median(values) if values else float("nan")

    base = {k: med("plain", k) for k in ("compute_ms", "one_token_verify_ms", "wall_ms")}
    for name in runs:
        c, v, w = med(name, "compute_ms"), med(name, "one_token_verify_ms"), med(name, "wall_ms")
        print(f"| {prompt} | {name} | {runs[name][0]['tokens']} | {c:.0f} "
              f"({c / base['compute_ms']:.3f}x) | {v:.2f} ({v / base['one_token_verify_ms']:.3f}x)"
              f" | {med(name, 'prefill_ms'):.0f} | {w:.0f} ({w / base['wall_ms']:.3f}x) | "
              f"{'/'.join(str(r['drafting_steps']) for r in runs[name])} | "
              f"{_verdict(runs[name], runs['plain'], name.startswith('plain'))} |", flush=True)


def _verdict(mine: list[dict], plain: list[dict], is_plain: bool) -> str:
    """The lane against plain decoding round by round (a round's lanes ran in turn): the
    bar a declining lane is judged by is "never slower outside the noise". A lane that
    proposed nothing in any round did plain decoding's work, and reads as `specviz run
    --baseline` reads it: within noise (the second plain lane keeps its own verdict: the
    noise floor)."""
    if mine is plain:
        return "-"
    ratios = [round_ratio(a["tokens"], a["compute_ms"], b["tokens"], b["compute_ms"])
              for a, b in zip(mine, plain)]
    speed = from_ratios(ratios)
    if is_plain or speed.low is None or any(r["drafting_steps"] for r in mine):
        return speed.words()
    return f"{speed.ratio:.2f}x ({speed.low:.2f}-{speed.high:.2f}): {NOISE}, proposed nothing"


if __name__ == "__main__":
    main()
