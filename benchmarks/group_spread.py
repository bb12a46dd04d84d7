"""How far a group's speedup in a `specviz bench --json` file can be trusted.

A group's speedup is its tokens over its compute time, against plain decoding's on the same
questions. Resampling the questions (a paired bootstrap: a question keeps its plain and its
speculative time together) gives the interval the group's figure would wander in if the same
kind of questions were asked again; an oracle that declines every step shows what that interval
is when nothing changed.

    python benchmarks/group_spread.py BENCH.json [--draws 2000] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path

from specviz.engines.bench.spec_bench import GROUP_ORDER, GROUPS, Config


def paired(records: list[dict]) -> dict[str, dict[str, list[tuple[float, ...]]]]:
    """method -> group -> per question (tokens, ms, plain tokens, plain ms)."""
    def key(r: dict) -> tuple[int, int]:
        return r["question_id"], r["turn"]

    def method(r: dict) -> str:
        return Config(r["oracle"], r["k"]).label  # the bench table's name for it

    plain = {key(r): r for r in records if r["oracle"] == "none"}
    questions: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])))
    for r in records:
        base = plain.get(key(r))
        if r["oracle"] == "none" or base is None:
            continue
        q = questions[method(r)][GROUPS.get(r["category"], r["category"])][r["question_id"]]
        q[0] += r["tokens"]
        q[1] += r["compute_ms"]
        q[2] += base["tokens"]
        q[3] += base["compute_ms"]
    return {m: {g: [tuple(v) for v in qs.values()] for g, qs in groups.items()}
            for m, groups in questions.items()}


def ratio(rows: list[tuple[float, ...]]) -> float:
    tokens, ms, plain_tokens, plain_ms = (sum(col) for col in zip(*rows))
    return (tokens / ms) / (plain_tokens / plain_ms)


def interval(rows: list[tuple[float, ...]], draws: int, rng: random.Random
             ) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of the ratio over resampled questions."""
    samples = sorted(ratio(rng.choices(rows, k=len(rows))) for _ in range(draws))
    return samples[int(0.025 * draws)], samples[int(0.975 * draws) - 1]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench_json", type=Path)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--markdown", action="store_true", help="a table, as docs/results/prose-groups.md has"
    )
    args = ap.parse_args(argv)
    data = json.loads(args.bench_json.read_text(encoding="utf-8"))
    rng = random.Random(args.seed)
    methods = paired(data["records"])
    groups = [g for g in GROUP_ORDER if any(g in m for m in methods.values())]
    if args.markdown:
        print("| oracle | " + " | ".join(groups) + " | overall |")
        print("|---" * (len(groups) + 2) + "|")
    for name, by_group in methods.items():
        every = [q for g in groups for q in by_group.get(g, [])]
        cells = []
        for rows in [*(by_group.get(g, []) for g in groups), every]:
            if not rows:
                cells.append("-")
                continue
            low, high = interval(rows, args.draws, rng)
            cells.append(f"{ratio(rows):.2f}x ({low:.2f}-{high:.2f}, n={len(rows)})")
        if args.markdown:
            print(f"| {name} | " + " | ".join(cells) + " |")
        else:
            print(name)
            for g, c in zip([*groups, "Overall"], cells):
                print(f"  {g:28s} {c}")


if __name__ == "__main__":
    main()
