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

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

from .. import events as ev
from ..backends.base import Backend
from ..errors import ContextOverflow, SpecvizError
from ..host.run_builder import LaneParts
from ..host.run_spec import LaneSpec
from ..loop.session import RunSettings, Session, starting_k, warm_up
from ..oracles.registry import PLAIN, is_plain
from ..questions import GROUP_ORDER, GROUPS, MT_BENCH, Question, load_questions  # noqa: F401 (named here as before)
from ..sampling import GREEDY, SamplingParams
from ..speedup import Speedup, from_ratios, round_ratio
from ..stalls import of_events, unstalled
from .compare import check_against_plain

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

    @classmethod
    def of(cls, lane: LaneSpec) -> Config:
        """The configuration a lane runs."""
        if is_plain(lane.oracle):
            return cls(lane.oracle, 0)
        return cls(lane.oracle, AUTO_K if lane.auto_k else lane.k)


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
    stalls: int = 0  # steps of its repeats taken at their neighbours' pace (stalls.py)
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
    overall: Speedup | None = None  # the overall speedup with its interval over the repeats

    @property
    def decline_rate(self) -> float | None:
        """Steps that proposed nothing over all steps (None for plain decoding)."""
        if is_plain(self.config.oracle) or not self.steps:
            return None
        return sum(self.declined.values()) / self.steps


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
    lanes: Sequence[LaneParts],
    questions: Iterable[Question],
    max_tokens: int = 256,
    params: SamplingParams = GREEDY,
    on_record: Callable[[Record], None] | None = None,
    repeat: int = 1,
) -> list[Record]:
    """Decode every turn of every question with every lane (plain decoding first), `repeat`
    times. The lanes share one target (engines/host/run_builder.py's `lane_parts` built them);
    an auto-K lane's policy keeps learning across the questions, as it would in a
    long-running process."""
    if repeat < 1:
        raise SpecvizError(f"repeat must be at least 1, got {repeat}")
    by_config = _by_config(lanes)
    questions = list(questions)
    if questions:
        _warm_up(by_config, questions[0].turns[0])
    records: list[Record] = []
    for q in questions:
        histories: dict[Config, list[tuple[str, str]]] = {c: [] for c in by_config}
        for turn, user in enumerate(q.turns):
            runs = _turn(by_config, user, histories, max_tokens, params, repeat)
            for record in _turn_records(q, turn, user, runs, histories):
                records.append(record)
                if on_record:
                    on_record(record)
    return records


def _by_config(lanes: Sequence[LaneParts]) -> dict[Config, LaneParts]:
    """The lanes by their configuration, plain decoding's first: every other lane's output
    is compared with it."""
    by_config = {Config.of(lane.lane): lane for lane in lanes}
    configs = plain_first(list(by_config))
    if configs[0] not in by_config:
        raise SpecvizError("the bench compares every lane with plain decoding: give it a lane "
                           f"of {PLAIN}")
    if any(c.k == AUTO_K and by_config[c].policy is None for c in configs):
        raise SpecvizError("k=auto needs a K policy (a cost profile)")
    return {c: by_config[c] for c in configs}


def _warm_up(by_config: dict[Config, LaneParts], first: str) -> None:
    """Before the first timed step: the target's caches warmed on the first prompt, and a
    compiled backend's widths made where a lane drafts, so that no lane pays a one-time cost
    the lanes after it do not."""
    plain = next(iter(by_config.values()))
    target = plain.target
    warm_up(target, turn_session(plain, first, (), 1, GREEDY).prompt_ids)
    if not all(is_plain(c.oracle) for c in by_config):
        target.prepare_widths()


def turn_session(lane: LaneParts, user: str, history: Sequence[tuple[str, str]],
                 max_tokens: int, params: SamplingParams) -> Session:
    """A session of `lane` on one turn of a question, after the earlier turns (`history`,
    the lane's own answers)."""
    spec = lane.lane
    settings = RunSettings(user, history=tuple(history),
                           k=starting_k(spec.oracle, spec.k, spec.auto_k),
                           max_tokens=max_tokens, params=params)
    return Session(lane.target, lane.oracle, settings, k_policy=lane.policy)


def run_turn(lane: LaneParts, user: str, history: Sequence[tuple[str, str]], max_tokens: int,
             params: SamplingParams) -> tuple[Session, list[ev.StepEvent]]:
    """One lane on one turn of a question, decoded to its end: the session (its summary) and
    its steps."""
    session = turn_session(lane, user, history, max_tokens, params)
    return session, [e for e in session if isinstance(e, ev.StepEvent)]


Run = tuple[Session, list[ev.StepEvent]]


def _turn(by_config: dict[Config, LaneParts], user: str,
          histories: dict[Config, list[tuple[str, str]]], max_tokens: int,
          params: SamplingParams, repeat: int) -> dict[Config, list[Run]]:
    """Every lane's `repeat` runs of one turn, the lanes in turn each round. A repeat starts
    from what the lane's K policy and oracle (suffix decoding's memory) knew before the turn,
    so neither learns a question's text twice; the last run's learning stays for the next."""
    before = {c: _learnt(lane) for c, lane in by_config.items()}
    runs: dict[Config, list[Run]] = {c: [] for c in by_config}
    for rep in range(repeat):
        # The order turns round every repeat: no lane always runs first, on a machine still
        # settling from the last turn, or last (a first-lane bias of ~4% was seen).
        order = list(by_config.items())
        for config, lane in order if rep % 2 == 0 else reversed(order):
            if rep:
                _restore(lane, before[config])
            runs[config].append(run_turn(lane, user, histories[config], max_tokens, params))
    return runs


def _learnt(lane: LaneParts) -> tuple:
    oracle = lane.oracle
    return (lane.policy.snapshot() if lane.policy is not None else None,
            oracle.snapshot() if hasattr(oracle, "snapshot") else None)


def _restore(lane: LaneParts, learnt: tuple) -> None:
    policy_state, oracle_state = learnt
    if lane.policy is not None:
        lane.policy.restore(policy_state)
    if oracle_state is not None:
        lane.oracle.restore(oracle_state)


def _turn_records(q: Question, turn: int, user: str, runs: dict[Config, list[Run]],
                  histories: dict[Config, list[tuple[str, str]]]) -> list[Record]:
    """One record per lane of a turn: the first run's figures, the median time."""
    configs = list(runs)
    plain_steps: list[ev.StepEvent] = []
    records = []
    for config in configs:
        session, steps = runs[config][0]
        # After an earlier turn parted from plain decoding, this turn's prompt holds other
        # text: its output cannot be compared with plain decoding's.
        comparable = histories[config] == histories[configs[0]][:turn]
        histories[config].append((user, session.summary.text))
        record = _record(q, turn, config, session.summary, steps, plain_steps, session.target,
                         session.prompt_ids, comparable)
        _set_times(record, [unstalled(of_events(steps)) for _, steps in runs[config]])
        if is_plain(config.oracle):
            plain_steps = steps
        records.append(record)
    return records


def _set_times(record: Record, runs: list[tuple[list[float], int]]) -> None:
    """Every repeat's compute time, its stalled steps set aside (stalls.py)."""
    times = [sum(ms) for ms, _ in runs]
    record.compute_ms_runs = [round(t, 3) for t in times]
    record.compute_ms = round(statistics.median(times), 3)
    record.stalls = sum(n for _, n in runs)


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
    plain = [r for r in records if is_plain(r.oracle)]
    base = _speeds(plain)
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
        row.overall = repeat_speedup(mine, plain)
        rows.append(row)
    return rows


def repeat_speedup(mine: Sequence[Record], plain: Sequence[Record]) -> Speedup | None:
    """The overall speedup of every repeat (all questions' tokens over their time in that
    repeat), and its interval over the repeats."""
    reps = min((len(r.compute_ms_runs) for r in [*mine, *plain]), default=0)
    ratios = [round_ratio(sum(r.tokens for r in mine), sum(r.compute_ms_runs[i] for r in mine),
                          sum(r.tokens for r in plain),
                          sum(r.compute_ms_runs[i] for r in plain)) for i in range(reps)]
    ratios = [x for x in ratios if x > 0]
    stalls = sum(r.stalls for r in [*mine, *plain])
    return from_ratios(ratios, stalls=stalls) if ratios else None


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
                  "overall": r.overall.to_dict() if r.overall else None,
                  "acceptance_rate": r.acceptance_rate, "tok_per_s": r.tok_per_s,
                  "decline_rate": r.decline_rate, "declined": r.declined,
                  "identical": r.identical, "compared": r.compared,
                  "unexplained_divergences": r.unexplained,
                  "by_detail": {d: {"proposed": p, "accepted": a,
                                    "acceptance_rate": a / p if p else None}
                                for d, (p, a) in r.by_detail.items()}} for r in rows],
        "records": [asdict(r) for r in records],
    }
