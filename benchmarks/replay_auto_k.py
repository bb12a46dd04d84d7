"""Price K policies on recorded plain outputs, without running the model again.

Greedy speculative decoding emits exactly the plain greedy output, so once the prompt and the
plain output of every question are recorded, what any draft would have had accepted is known:
a step keeps the draft's longest prefix that agrees with the output, plus one token. This
replays fixed K and `--k auto` (the engine's own AutoK and oracles) over such a record, prices
each step from the stored cost profile, and prints the speedup over plain decoding per
Spec-Bench group: a policy change is judged in seconds instead of a 20-minute bench.

Live steps do not cost what the profile says: on this machine single-token steps ran at about
0.82 of it during a bench and batches at 0.95-1.05 (the profile was taken on a quieter
machine). `--single-scale` and `--batch-scale` apply such factors. Replayed figures run below
a real bench's (K=2 on summaries: 1.08x replayed against 1.18x measured); use them to compare
policies, and a real bench to report.

Usage:
  python benchmarks/replay_auto_k.py dump --target qwen2.5-coder-1.5b --threads 2 \\
      --questions FILE.jsonl [--limit N] [--max-tokens N] --out plain.json
  python benchmarks/replay_auto_k.py replay plain.json --target qwen2.5-coder-1.5b \\
      --threads 2 [--oracle ngram] [--k 2,4,8,auto,table,hindsight] [--single-scale 0.82] \\
      [--batch-scale 1] [--monotone] [--set NAME=VALUE ...] [--profile GPU.json]

Every oracle that copies replays, suffix decoding too (with its memory of the earlier records,
as a bench keeps it; its trees as their likeliest chains, `--set tree=0`'s way, since a replay
judges a draft by its longest prefix that holds).
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from specviz.engines import events as ev
from specviz.engines.bench import spec_bench as bench
from specviz.engines.cost.auto_k import MATCH_BUCKETS, AutoK, match_bucket
from specviz.engines.cost.profile import Profile
from specviz.engines.errors import SpecvizError
from specviz.engines.oracles import info, make_oracle
from specviz.engines.oracles.base import RunContext
from specviz.engines.sampling import GREEDY

OTHER_MS = 0.4  # per-step work outside the forward pass (measured: 0.3-0.5 ms)


def dump(args: argparse.Namespace) -> None:
    """Record every question's prompt ids and plain greedy output, turn by turn."""
    from specviz.app.cli import options
    from specviz.engines.loop.session import RunSettings, Session

    target = options.load_target(args)
    plain = make_oracle("none")
    records = []
    for q in bench.load_questions(args.questions, None, args.limit):
        history: list[tuple[str, str]] = []
        for turn, user in enumerate(q.turns):
            session = Session(target, plain, RunSettings(
                user, history=tuple(history), k=0, max_tokens=args.max_tokens))
            steps = [e for e in session if isinstance(e, ev.StepEvent)]
            out = [t for e in steps for t in e.emitted_ids]
            history.append((user, session.summary.text))
            records.append({"qid": q.question_id, "turn": turn, "category": q.category,
                            "prompt": list(session.prompt_ids), "out": out,
                            # the target's confidence in each token it chose
                            "p": [e.target.p_target for e in steps]})
            print(q.question_id, turn, len(out), flush=True)
    with open(args.out, "w") as f:
        json.dump(records, f)


class Pricer:
    """Milliseconds of a verification of n rows, the profile scaled like a live run."""

    def __init__(self, profile: Profile, single: float, batch: float,
                 other: float = OTHER_MS) -> None:
        self.profile, self.single, self.batch = profile, single, batch
        self.other = other  # each step's work outside the forward pass

    def __call__(self, rows: int, context: int) -> float:
        return self.profile.cost_ms(rows, context) * (self.single if rows == 1 else self.batch)


# A step's outcome in a replay: (K asked, tokens drafted, tokens of the draft that held), from
# the context, the output still to come, and the target's probability of the context's last
# token (1.0 where the record has none).
Step = Callable[[list[int], list[int], float], tuple[int, int, int]]


def build(oracle_name: str, settings: dict | None = None) -> object:
    """The oracle, drafting chains where it could draft trees (a replay judges a draft's
    prefix), with `settings` over them."""
    return make_oracle(oracle_name, settings={**info(oracle_name).chain_settings,
                                              **(settings or {})})


def replay(records: list[dict], oracle_name: str, k: int | None, profile: Profile,
           price: Pricer, settings: dict | None = None) -> tuple[dict[str, float], float]:
    """(speedup over plain decoding per group and "Overall", mean K) of fixed K, or of auto K
    when k is None. One oracle and one policy over all records, in order, as the bench runs."""
    oracle = build(oracle_name, settings)
    policy = AutoK(oracle, profile) if k is None else None
    if policy:
        oracle.price_with(policy.verify_ms)

    def step(context: list[int], truth: list[int], confidence: float) -> tuple[int, int, int]:
        step_k = policy.choose(context) if policy else k
        draft = list(oracle.propose(context, step_k).tokens) if step_k else []
        held = accepted_prefix(draft, truth)
        if policy:
            # The target's own token (-1 where the accepted draft ends the record).
            emitted = truth[held] if held < len(truth) else -1
            verify_ms = price(len(draft) + 1, len(context))
            policy.observe(step_event(step_k, draft, held, emitted, len(context), verify_ms,
                                      price.other))
        return step_k, len(draft), held

    return run(records, oracle, price, step)


def hindsight(records: list[dict], oracle_name: str, price: Pricer,
              settings: dict | None = None, k_max: int = 31) -> tuple[dict[str, float], float]:
    """What a K policy that knew the future would reach with this oracle at these batch
    costs: every step sends, of the oracle's copy, only the part that will hold, as much of it
    as pays best for that step alone (greedy per step: a ceiling in practice, not a proof).
    Same result as `replay`'s."""
    oracle = build(oracle_name, settings)

    def step(context: list[int], truth: list[int], confidence: float) -> tuple[int, int, int]:
        held = accepted_prefix(list(oracle.propose(context, k_max).tokens), truth)
        step_ms = [price(k + 1, len(context)) for k in range(held + 1)]
        k = max(range(held + 1), key=lambda k: (k + 1) / (step_ms[k] + price.other))
        return k, k, k

    return run(records, oracle, price, step)


TABLE_KS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 31)


def _first_holds(context: list[int], truth: list[int], oracle, confidence: float) -> int:
    return int(accepted_prefix(list(oracle.propose(context, 1).tokens), truth) > 0)


def _holds_4(context: list[int], truth: list[int], oracle, confidence: float) -> int:
    return int(accepted_prefix(list(oracle.propose(context, 4).tokens), truth) >= 4)


def _confident(context: list[int], truth: list[int], oracle, confidence: float) -> int:
    return int(confidence >= 0.99)


# What a table may know besides the match: "first" and "holds4" are foreknowledge (whether the
# copy's first token holds; whether 4 or more do), to measure what the ceiling is made of;
# "confidence" is known before a step (the target's probability of the last token it chose).
TABLE_FEATURES = {"match": lambda *_: 0, "first": _first_holds, "holds4": _holds_4,
                  "confidence": _confident}


def bucket_table(records: list[dict], oracle_name: str, price: Pricer,
                 settings: dict | None = None, sweeps: int = 2,
                 by: str = "match") -> tuple[dict[str, float], float]:
    """The ceiling of policies that know what auto K knows: one K per match bucket (and per
    value of the feature `by`), the table chosen in hindsight over the whole record
    (coordinate descent over TABLE_KS, cell by cell, `sweeps` times; a local optimum, so a
    floor of that ceiling)."""
    feature = TABLE_FEATURES[by]
    table = {(b, f): 0 for b in MATCH_BUCKETS for f in (0, 1)}

    def score(table: dict[tuple[int, int], int]) -> tuple[dict[str, float], float]:
        oracle = build(oracle_name, settings)

        def step(context: list[int], truth: list[int], confidence: float) -> tuple[int, int, int]:
            m = oracle.match_length(context)
            cell = (match_bucket(m), feature(context, truth, oracle, confidence))
            k = table[cell] if m else 0
            draft = list(oracle.propose(context, k).tokens) if k else []
            return k, len(draft), accepted_prefix(draft, truth)

        return run(records, oracle, price, step)

    best = score(table)
    for _ in range(sweeps):
        for cell in list(table):
            if by == "match" and cell[1]:
                continue
            for k in TABLE_KS:
                trial = {**table, cell: k}
                result = score(trial)
                if result[0]["Overall"] > best[0]["Overall"] + 1e-9:
                    table, best = trial, result
    print(f"best K per cell for {oracle_name} by {by}: {({c: k for c, k in table.items() if k})}")
    return best


def run(records: list[dict], oracle, price: Pricer, step: Step) -> tuple[dict[str, float], float]:
    """Every record's output, step by step as `step` decides, priced against plain decoding."""
    spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # [plain ms, policy ms]
    ks = steps = 0
    for rec in records:
        group = bench.GROUPS.get(rec["category"], rec["category"])
        prompt, out = rec["prompt"], rec["out"]
        confidence = rec.get("p") or [1.0] * len(out)
        oracle.start(RunContext(tuple(prompt), "", (), GREEDY, np.random.default_rng(0)))
        done = 0
        while done < len(out):
            context = prompt + out[:done]
            last = confidence[done - 1] if done else 1.0
            step_k, drafted, held = step(context, out[done:], last)
            spent[group][1] += price(drafted + 1, len(context)) + price.other
            done += held + 1
            ks, steps = ks + step_k, steps + 1
        oracle.finish(prompt + out)  # what suffix decoding remembers for the next records
        spent[group][0] += sum(price(1, len(prompt) + i) + price.other
                               for i in range(len(out)))
    speedup = {g: p / t for g, (p, t) in spent.items()}
    speedup["Overall"] = sum(p for p, _ in spent.values()) / sum(t for _, t in spent.values())
    return speedup, ks / max(steps, 1)


def accepted_prefix(draft: list[int], truth: list[int]) -> int:
    n = 0
    while n < len(draft) and n < len(truth) and draft[n] == truth[n]:
        n += 1
    return n


def step_event(k: int, draft: list[int], held: int, emitted: int, position: int,
               verify_ms: float, other_ms: float = OTHER_MS) -> ev.StepEvent:
    """The parts of a step event that AutoK learns from: judgments and timings."""
    def judged(i: int, token: int) -> ev.ProposedToken:
        reason = None if i < held else ev.REJECT_MISMATCH if i == held else ev.REJECT_AFTER
        return ev.ProposedToken(token, "", "replay", i < held, reject_reason=reason)

    proposed = tuple(judged(i, t) for i, t in enumerate(draft))
    target = ev.TargetToken(emitted, "", ev.TARGET_CORRECTION, 1.0, 1.0)
    timing = ev.Timing(0.0, verify_ms, other_ms)
    return ev.StepEvent(1, "replay", k, position, proposed, target, "", timing,
                        ev.Totals(0, 0, 0, 0, 0.0, 0.0, 0.0))


def print_table(rows: list[tuple[str, dict[str, float], float]]) -> None:
    groups = [g for g in (*bench.GROUP_ORDER, "Overall") if g in rows[0][1]]
    print("| K | " + " | ".join(groups) + " | mean K |")
    print("|" + "---|" * (len(groups) + 2))
    for label, speedup, mean_k in rows:
        cells = " | ".join(f"{speedup[g]:.2f}x" for g in groups)
        print(f"| {label} | {cells} | {mean_k:.2f} |")



def read_json(path: str, what: str):
    """The file's JSON, or a one-line exit naming what it should have been."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"cannot read {path} as {what}: {exc}") from None


def read_profile(path: str) -> Profile:
    data = read_json(path, "a profile (`specviz profile --json`)")
    try:
        return Profile.from_dict(data[0] if isinstance(data, list) else data)
    except (SpecvizError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise SystemExit(f"{path} is not a profile (`specviz profile --json`): {exc}") from None

def main() -> None:
    from specviz.app.cli import options
    from specviz.engines.cost import profile as profiles

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="record plain outputs")
    options.add_model_args(d)
    d.add_argument("--questions", required=True)
    d.add_argument("--limit", type=int, help="questions per category group")
    d.add_argument("--max-tokens", type=int, default=128)
    d.add_argument("--out", required=True)
    r = sub.add_parser("replay", help="price K policies on a record")
    r.add_argument("record")
    options.add_model_args(r)  # the target's stored profile prices the steps
    r.add_argument("--oracle", default="ngram")
    r.add_argument("--k", default="2,4,8,auto",
                   help="fixed Ks, auto, hindsight (the ceiling: only copies that hold) and "
                        "table (the best K per match bucket, in hindsight: a copying oracle)")
    r.add_argument("--table-by", choices=sorted(TABLE_FEATURES), default="match",
                   help="what the table knows besides the match bucket: whether the copy's "
                        "first token holds, whether 4 or more do (both foreknowledge), or the "
                        "target's confidence in its last token (needs a record dumped with it)")
    r.add_argument("--profile", help="price with this profile (`specviz profile --json`'s "
                   "output) instead of the target's stored one")
    r.add_argument("--other-ms", type=float, default=OTHER_MS,
                   help="a step's work outside the forward pass (0.15 on the H200 with llama.cpp)")
    r.add_argument("--single-scale", type=float, default=0.82)
    r.add_argument("--batch-scale", type=float, default=1.0)
    r.add_argument("--monotone", action="store_true",
                   help="price with each profile row made non-decreasing (a dip smoothed "
                        "away, as profiles did before 2026-11-25)")
    r.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="an oracle setting by its registry name (e.g. max_spec_factor=2)")
    args = parser.parse_args()
    options.settle_backend(args)  # --backend left out: the target's format decides
    if args.command == "dump":
        dump(args)
        return
    if args.profile:  # another machine's, e.g. a GPU's: what the steps would cost there
        profile = read_profile(args.profile)
    else:
        profile = profiles.load(args.target, args.backend, args.device or "cpu",
                                args.threads)
    if profile is None:
        raise SystemExit(f"no stored profile for {args.target}: run `specviz profile` first")
    if args.monotone:
        profile.ms = [list(itertools.accumulate(row, max)) for row in profile.ms]
    records = read_json(args.record, "a record of `dump`")
    price = Pricer(profile, args.single_scale, args.batch_scale, args.other_ms)
    settings = {name: float(value) if "." in value else int(value)
                for name, value in (kv.split("=", 1) for kv in args.set)}
    rows = []
    for k in args.k.split(","):
        if k == "hindsight":
            rows.append((k, *hindsight(records, args.oracle, price, settings)))
            continue
        if k == "table":
            rows.append((k, *bucket_table(records, args.oracle, price, settings,
                                          by=args.table_by)))
            continue
        fixed = None if k == "auto" else int(k)
        rows.append((k, *replay(records, args.oracle, fixed, profile, price, settings)))
    print_table(rows)


if __name__ == "__main__":
    main()
