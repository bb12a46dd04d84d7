"""Spec-Bench-style benchmark: every question with every oracle, in one process.

Questions are in Spec-Bench's format (`question_id`, `category`, `turns`). Every turn of a
question is decoded by every configuration back to back (plain decoding first), so machine
noise hits all of them alike; later turns feed each configuration's own earlier answers back,
as Spec-Bench does. The table follows the Spec-Bench leaderboard: speedup over plain decoding
per category group (total tokens / total generation time, per configuration), mean accepted
tokens, and here also acceptance rate, tokens/s and how many outputs were identical to plain
decoding.

On a noisy machine one run per question is not enough to tell a 3% difference: `repeat`
runs every turn several times, the configurations interleaved, and takes each one's median
generation time (outputs and acceptance come from the first run; a K policy starts every
repeat from the state it had before the turn, so it never learns a question's text twice).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import events as ev
from ..backends.base import Backend
from ..errors import ContextOverflow, SpecvizError
from ..loop.session import KPolicy, RunSettings, Session, starting_k, warm_up
from ..oracles.base import Oracle
from ..oracles.registry import PLAIN, is_plain
from ..sampling import GREEDY, SamplingParams
from ..text_file import read_text
from .compare import check_against_plain

MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem",
            "humanities")
GROUPS = {
    **{c: "Multi-turn Conversation" for c in MT_BENCH},
    "translation": "Translation",
    "summarization": "Summarization",
    "qa": "Question Answering",
    "math_reasoning": "Mathematical Reasoning",
    "rag": "Retrieval-aug. Generation",
    "code_edit": "Code Edit",
    "agent_loop": "Agent Loop",  # benchmarks/agent_loop.py: requests that vary earlier ones
}
GROUP_ORDER = tuple(dict.fromkeys(GROUPS.values()))


@dataclass(frozen=True)
class Question:
    question_id: int
    category: str
    turns: tuple[str, ...]

    @property
    def group(self) -> str:
        return GROUPS.get(self.category, self.category)


AUTO_K = -1  # Config.k for the cost-aware K chosen every step (--k auto)


@dataclass(frozen=True)
class Config:
    oracle: str
    k: int  # a fixed K, or AUTO_K

    @property
    def label(self) -> str:
        if is_plain(self.oracle):
            return "none"
        return f"{self.oracle} k={'auto' if self.k == AUTO_K else self.k}"


@dataclass
class Record:
    """One turn of one question under one configuration."""

    question_id: int
    category: str
    turn: int
    oracle: str
    k: int  # AUTO_K (-1) for the cost-aware K
    tokens: int
    steps: int
    proposed: int
    accepted: int
    compute_ms: float  # the median over repeats
    identical: bool | None = None  # to plain decoding; None for plain decoding itself
    divergence: dict | None = None
    # Per oracle detail (a rule's name, an n-gram size): [proposed, accepted].
    by_detail: dict[str, list[int]] = field(default_factory=dict)
    k_sum: int | None = None  # auto K: the Ks chosen, summed over the steps
    declined: dict[str, int] = field(default_factory=dict)  # declined steps per reason
    compute_ms_runs: list[float] = field(default_factory=list)  # every repeat's time
    # Where the first run's time went: drafting, the target's verification, the rest (the
    # loop's own work), so a backend slower in a run than in its profile shows where.
    split_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class Row:
    """Aggregated figures of one configuration."""

    config: Config
    speedup: dict[str, float] = field(default_factory=dict)  # per group, plus "Overall"
    mean_accepted_tokens: float = 0.0
    acceptance_rate: float | None = None
    tok_per_s: float = 0.0
    identical: int = 0
    compared: int = 0
    unexplained: int = 0  # divergences not explained by the backend's batch noise
    by_detail: dict[str, list[int]] = field(default_factory=dict)  # [proposed, accepted]
    mean_k: float | None = None  # auto K: the average K chosen per step
    declined: dict[str, int] = field(default_factory=dict)  # declined steps per reason
    steps: int = 0

    @property
    def decline_rate(self) -> float | None:
        """Steps that proposed nothing over all steps (None for plain decoding)."""
        if is_plain(self.config.oracle) or not self.steps:
            return None
        return sum(self.declined.values()) / self.steps


def load_questions(path: str | Path, categories: Sequence[str] | None = None,
                   limit: int | None = None) -> list[Question]:
    """Questions from a Spec-Bench JSONL file; `limit` applies per category group."""
    questions, taken = [], {}
    lines = read_text(path, "questions", allow_empty=True).splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            q = Question(int(d["question_id"]), str(d["category"]), tuple(d["turns"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise SpecvizError(
                f"{path}, line {number}: not a Spec-Bench question ({exc})") from None
        if categories and q.category not in categories and q.group not in categories:
            continue
        if limit is not None and taken.get(q.group, 0) >= limit:
            continue
        taken[q.group] = taken.get(q.group, 0) + 1
        questions.append(q)
    if not questions:
        raise SpecvizError(f"no questions selected from {path}")
    return questions


def check_fits(target: Backend, questions: Iterable[Question]) -> None:
    """Stop before the first run on a question whose text alone overflows the context (the
    chat template and earlier turns add more; the session checks those as it goes)."""
    for q in questions:
        for turn in q.turns:
            n = len(target.tokenize(turn, False))
            if n + 1 > target.n_ctx:
                raise ContextOverflow(f"question {q.question_id} is {n} tokens but the model's "
                                      f"context holds {target.n_ctx}; shorten it or leave it out")


def run_bench(
    target: Backend,
    make_oracle: Callable[[str], Oracle],
    questions: Iterable[Question],
    configs: Sequence[Config],
    max_tokens: int = 256,
    params: SamplingParams = GREEDY,
    on_record: Callable[[Record], None] | None = None,
    make_policy: Callable[[Oracle], KPolicy] | None = None,
    repeat: int = 1,
) -> list[Record]:
    """Decode every turn of every question with every configuration (plain decoding first),
    `repeat` times.

    Configurations with k=AUTO_K get a K policy from `make_policy`, one per configuration that
    keeps learning across the questions, as it would in a long-running process.
    """
    if repeat < 1:
        raise SpecvizError(f"repeat must be at least 1, got {repeat}")
    configs = plain_first(configs)
    oracles = {c.oracle: make_oracle(c.oracle) for c in configs}
    if any(c.k == AUTO_K for c in configs) and make_policy is None:
        raise SpecvizError("k=auto needs a K policy (a cost profile)")
    policies = {c: make_policy(oracles[c.oracle]) for c in configs if c.k == AUTO_K}
    records: list[Record] = []
    warmed = False
    for q in questions:
        histories: dict[Config, list[tuple[str, str]]] = {c: [] for c in configs}
        for turn, user in enumerate(q.turns):
            before = {c: p.snapshot() for c, p in policies.items()}
            # An oracle that learns across runs (suffix decoding's memory) answers every
            # repeat, and every K of it, knowing what it knew before the turn (one answer
            # of the turn stays remembered for the next questions).
            learnt = {name: o.snapshot() for name, o in oracles.items()
                      if hasattr(o, "snapshot")}
            runs: dict[Config, list] = {c: [] for c in configs}
            for rep in range(repeat):
                for config in configs:
                    if config in policies and rep:
                        policies[config].restore(before[config])
                    if config.oracle in learnt:
                        oracles[config.oracle].restore(learnt[config.oracle])
                    settings = RunSettings(user, history=tuple(histories[config]),
                                           k=starting_k(config.oracle, config.k,
                                                        config.k == AUTO_K),
                                           max_tokens=max_tokens, params=params)
                    session = Session(target, oracles[config.oracle], settings,
                                      k_policy=policies.get(config))
                    if not warmed:
                        warm_up(target, session.prompt_ids)
                        if not all(is_plain(c.oracle) for c in configs):
                            target.prepare_widths()  # no lane pays a one-time compile
                        warmed = True
                    steps = [e for e in session if isinstance(e, ev.StepEvent)]
                    runs[config].append((session, steps))
            plain_steps: list[ev.StepEvent] = []
            for config in configs:
                session, steps = runs[config][0]
                summary = session.summary
                # After an earlier turn parted from plain decoding, this turn's prompt holds
                # other text: its output cannot be compared with plain decoding's.
                comparable = histories[config] == histories[configs[0]][:turn]
                histories[config].append((user, summary.text))
                record = _record(q, turn, config, summary, steps, plain_steps, target,
                                 session.prompt_ids, comparable)
                _set_times(record, [s.summary.totals.compute_ms for s, _ in runs[config]])
                if is_plain(config.oracle):
                    plain_steps = steps
                records.append(record)
                if on_record:
                    on_record(record)
    return records


def _set_times(record: Record, times: list[float]) -> None:
    record.compute_ms_runs = [round(t, 3) for t in times]
    record.compute_ms = round(statistics.median(times), 3)


def plain_first(configs: Sequence[Config]) -> list[Config]:
    plain = [c for c in configs if is_plain(c.oracle)] or [Config(PLAIN, 0)]
    return plain[:1] + [c for c in configs if not is_plain(c.oracle)]


def _record(q: Question, turn: int, config: Config, summary: ev.SummaryEvent,
            steps: list[ev.StepEvent], plain_steps: list[ev.StepEvent], target: Backend,
            prompt_ids: Sequence[int], comparable: bool = True) -> Record:
    t = summary.totals
    record = Record(q.question_id, q.category, turn, config.oracle, config.k, t.tokens, t.steps,
                    t.proposed, t.accepted, round(t.compute_ms, 3),
                    by_detail=count_by_detail(steps), declined=ev.decline_reasons(steps),
                    split_ms={"draft": round(t.draft_ms, 3), "verify": round(t.verify_ms, 3),
                              "other": round(t.other_ms, 3)})
    if config.k == AUTO_K:
        record.k_sum = sum(s.k for s in steps)
    if not is_plain(config.oracle) and not comparable:
        record.divergence = {"note": "not compared: an earlier turn parted from plain "
                                     "decoding, so this turn's prompt differs"}
    elif not is_plain(config.oracle):
        result = check_against_plain(target, prompt_ids, steps, plain_steps)
        same_length = t.tokens == sum(len(s.emitted_ids) for s in plain_steps)
        record.identical = result.identical and same_length
        if not result.identical:
            record.divergence = result.to_dict()
    return record


def detail_kind(detail: str) -> str:
    """The part of a proposal's detail that names what proposed it ("context 4-gram" of
    "context 4-gram, seen 3x (75%)"): the per-token figures after it would split the table."""
    return detail.split(",")[0].split(" (")[0].strip()


def count_by_detail(steps: Sequence[ev.StepEvent]) -> dict[str, list[int]]:
    """[proposed, accepted] per kind of proposal detail (tokens without one are not counted)."""
    counts: dict[str, list[int]] = {}
    for step in steps:
        for token in step.proposed:
            if token.detail:
                c = counts.setdefault(detail_kind(token.detail), [0, 0])
                c[0] += 1
                c[1] += token.accepted
    return counts


def summarise(records: Sequence[Record]) -> list[Row]:
    """One row per configuration, in the order first seen."""
    configs = list(dict.fromkeys(Config(r.oracle, r.k) for r in records))
    base = _speeds([r for r in records if is_plain(r.oracle)])
    rows = []
    for config in configs:
        mine = [r for r in records if (r.oracle, r.k) == (config.oracle, config.k)]
        speeds = _speeds(mine)
        row = Row(config)
        row.speedup = {g: speeds[g] / base[g] for g in speeds if base.get(g)}
        tokens, steps = sum(r.tokens for r in mine), sum(r.steps for r in mine)
        proposed, accepted = sum(r.proposed for r in mine), sum(r.accepted for r in mine)
        row.mean_accepted_tokens = tokens / steps if steps else 0.0
        row.acceptance_rate = accepted / proposed if proposed else None
        row.tok_per_s = speeds.get("Overall", 0.0)
        judged = [r for r in mine if r.identical is not None]
        row.compared, row.identical = len(judged), sum(1 for r in judged if r.identical)
        row.unexplained = sum(1 for r in judged if _unexplained(r.divergence))
        row.steps = steps
        for r in mine:
            for reason, n in r.declined.items():
                row.declined[reason] = row.declined.get(reason, 0) + n
            for detail, (proposed, accepted) in r.by_detail.items():
                c = row.by_detail.setdefault(detail, [0, 0])
                c[0] += proposed
                c[1] += accepted
        if config.k == AUTO_K and steps:
            row.mean_k = sum(r.k_sum or 0 for r in mine) / steps
        rows.append(row)
    return rows


def _unexplained(divergence: dict | None) -> bool:
    if not divergence:
        return False
    margin, tie = divergence.get("margin"), divergence.get("tie_threshold", 0.0)
    return margin is None or margin >= tie


def _speeds(records: Sequence[Record]) -> dict[str, float]:
    """Tokens per second of generation, per group and overall."""
    totals: dict[str, list[float]] = {}
    for r in records:
        for key in (GROUPS.get(r.category, r.category), "Overall"):
            t = totals.setdefault(key, [0.0, 0.0])
            t[0] += r.tokens
            t[1] += r.compute_ms / 1000
    return {k: tok / s for k, (tok, s) in totals.items() if s > 0}


def to_json(records: Sequence[Record], rows: Sequence[Row], meta: dict) -> dict:
    return {
        **meta,
        "rows": [{"method": r.config.label, "oracle": r.config.oracle,
                  "k": "auto" if r.config.k == AUTO_K else r.config.k, "mean_k": r.mean_k,
                  "speedup": r.speedup, "mean_accepted_tokens": r.mean_accepted_tokens,
                  "acceptance_rate": r.acceptance_rate, "tok_per_s": r.tok_per_s,
                  "decline_rate": r.decline_rate, "declined": r.declined,
                  "identical": r.identical, "compared": r.compared,
                  "unexplained_divergences": r.unexplained,
                  "by_detail": {d: {"proposed": p, "accepted": a,
                                    "acceptance_rate": a / p if p else None}
                                for d, (p, a) in r.by_detail.items()}} for r in rows],
        "records": [asdict(r) for r in records],
    }
