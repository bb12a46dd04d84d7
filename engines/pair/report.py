"""`specviz pair`: will this draft pay for this target on this machine, before any run?

Three answers: whether the tokenizers let the draft draft at all (pair_vocab), how often its
guesses would be accepted (pair_estimate: one teacher-forced pass of each model over the
target's own greedy answers), and what that buys at each K here. The speedup replays greedy
speculative decoding of those answers step by step and prices every step with what this
machine costs now: the target's stored profile for how cost grows with the context, scaled
batch size by batch size to forwards timed now (a shared machine is seldom as idle as when the
profile was taken, and a single token, which mostly reads weights, and a batch, which mostly
computes, drift apart), the draft's one-token forward timed, the verifier's work on K+1 rows
timed. A K pays when its
speedup exceeds 1; its break-even acceptance is the constant rate at which it would just pay.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from ..backends.base import Backend
from ..cost.profile import Profile
from ..cost.step_cost import break_even_acceptance
from ..loop.verify import verify
from ..sampling import GREEDY
from .acceptance import (
    Agreement,
    Answer,
    acceptance_by_position,
    cross_agreement,
    same_vocab_agreement,
    simulate,
    time_forwards,
)
from .vocab import VERDICT_CROSS, VERDICT_DRAFT, VERDICT_UNUSABLE, VocabReport

K_MAX = 16


@dataclass(frozen=True)
class StepCosts:
    """What one step costs here now, in milliseconds, by draft length."""

    profile: Profile
    scales: Sequence[float]  # per batch size (index: tokens - 1): forward now / profiled
    other_ms: Sequence[float]  # per step besides the forward; index: draft length (K+1 rows)
    draft_ms: float  # one draft token: its forward and picking it
    cross: bool = False  # a cross-draft drafts K+1 of its own tokens

    def step_ms(self, drafted: int, context: int) -> float:
        forwards = 0 if drafted == 0 else drafted + 1 if self.cross else drafted
        other = self.other_ms[min(drafted, len(self.other_ms) - 1)]
        scale = self.scales[min(drafted, len(self.scales) - 1)]
        return (scale * self.profile.cost_ms(drafted + 1, context) + other
                + forwards * self.draft_ms)


@dataclass
class KPrediction:
    k: int
    tokens_per_step: float
    speedup: float
    break_even: float | None  # constant acceptance at which this K just pays; None: never


@dataclass
class PairReport:
    target: str
    draft: str
    vocab: VocabReport
    prompts: int = 0
    answer_tokens: int = 0
    greedy_agreement: float | None = None  # share of answer tokens the draft guessed
    alpha: float | None = None  # Leviathan's alpha at `temperature` (same vocabulary only)
    temperature: float = 1.0
    by_position: list[float | None] = field(default_factory=list)
    predictions: list[KPrediction] = field(default_factory=list)
    best_k: int = 0
    best_speedup: float = 1.0
    costs: dict = field(default_factory=dict)
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.vocab.verdict == VERDICT_UNUSABLE:
            return f"not usable: {self.vocab.reason}"
        if not self.predictions:
            return f"{self.vocab.verdict}: no estimate"
        oracle = "draft" if self.vocab.verdict == VERDICT_DRAFT else "cross-draft"
        if self.best_k == 0:
            return f"plain decoding is faster here (the {oracle} oracle loses at every K)"
        return (f"--oracle {oracle} --k {self.best_k}: {self.best_speedup:.2f}x plain "
                f"decoding expected")

    def to_dict(self) -> dict:
        return {**asdict(self), "verdict": self.verdict}


def estimate(target: Backend, draft: Backend, answers: Sequence[Answer], vocab: VocabReport,
             profile: Profile, temperature: float = 1.0, k_max: int = K_MAX,
             report: PairReport | None = None,
             on_progress: Callable[[int, int], None] | None = None) -> PairReport:
    """Fill `report` (or a new one) with the acceptance estimate and the predictions."""
    report = report or PairReport(target.model_path, draft.model_path, vocab)
    report.prompts, report.temperature = len(answers), temperature
    if vocab.verdict == VERDICT_UNUSABLE or not answers:
        return report
    cross = vocab.verdict == VERDICT_CROSS
    agreements = []
    for i, a in enumerate(answers):
        agreements.append(cross_agreement(target, draft, a) if cross
                          else same_vocab_agreement(target, draft, a, temperature))
        if on_progress:
            on_progress(i + 1, len(answers))
    flat = [x for a in agreements for x in a.agree]
    report.answer_tokens = len(flat)
    report.greedy_agreement = sum(flat) / len(flat) if flat else None
    if not cross:
        alphas = [x for a in agreements for x in (a.alpha or [])]
        report.alpha = float(np.mean(alphas)) if alphas else None
    report.by_position = acceptance_by_position(agreements, k_max)
    costs = measure_costs(target, draft, answers, profile, cross, k_max)
    report.costs = {"scales": [round(s, 3) for s in costs.scales],
                    "draft_ms": round(costs.draft_ms, 3),
                    "plain_step_ms": round(costs.step_ms(0, agreements[0].prompt_len), 3),
                    "other_ms": [round(x, 3) for x in costs.other_ms],
                    "profile": f"{profile.backend}/{profile.device}, "
                               f"{profile.threads or 'default'} threads"}
    report.predictions = predict(agreements, costs, k_max)
    best = max(report.predictions, key=lambda p: (p.speedup, -p.k))
    report.best_k, report.best_speedup = (best.k, best.speedup) if best.speedup > 1 else (0, 1.0)
    report.note = ("estimated through text: the draft's tokens were mapped onto the target's"
                   if cross else "greedy: an exact replay of the target's answers")
    return report


def predict(agreements: Sequence[Agreement], costs: StepCosts,
            k_max: int = K_MAX) -> list[KPrediction]:
    """Tokens per step and speedup over plain decoding at every K from 1 to k_max."""
    plain = sum(costs.step_ms(0, a.prompt_len + i) for a in agreements
                for i in range(len(a.agree)))
    mean_context = int(np.mean([a.prompt_len + len(a.agree) / 2 for a in agreements]))
    out = []
    for k in range(1, k_max + 1):
        steps = [(a.prompt_len, s) for a in agreements for s in simulate(a.agree, k)]
        spent = sum(costs.step_ms(s.drafted, p0 + s.position) for p0, s in steps)
        tokens = sum(s.accepted + 1 for _, s in steps)
        out.append(KPrediction(k, tokens / len(steps), plain / spent,
                               break_even(costs, k, mean_context)))
    return out


def break_even(costs: StepCosts, k: int, context: int) -> float | None:
    """The constant acceptance rate at which draft length k just matches plain decoding."""
    alpha = break_even_acceptance(k, costs.step_ms(k, context) / costs.step_ms(0, context))
    return None if alpha is None else round(alpha, 4)


def measure_costs(target: Backend, draft: Backend, answers: Sequence[Answer],
                  profile: Profile, cross: bool, k_max: int = K_MAX) -> StepCosts:
    """This machine's step costs now: the target's forwards of 1..k_max+1 tokens and the
    draft's of one token timed after the first prompt, the verifier's work timed."""
    prompt = answers[0].prompt_ids
    live = time_forwards(target, prompt, k_max + 1)
    context = len(prompt)
    scales = [ms / max(profile.cost_ms(n, context), 1e-9) for n, ms in enumerate(live, 1)]
    other = statistics.median([ms for a in answers for ms in a.other_ms] or [0.0])
    verify_ms = _verify_ms(target, k_max)
    other_by_k = [other + verify_ms[k] - verify_ms[0] for k in range(k_max + 1)]
    prefix = draft.encode_prompt(answers[0].prompt_text, chat=True) if cross else prompt
    draft_ms = time_forwards(draft, prefix, 1)[0] + _pick_ms(draft.n_vocab)
    return StepCosts(profile, scales, other_by_k, draft_ms, cross)


def _verify_ms(target: Backend, k_max: int, repeats: int = 5) -> list[float]:
    """The verifier's own milliseconds on k+1 rows of this vocabulary, k = 0..k_max."""
    rows = np.random.default_rng(0).standard_normal((k_max + 1, target.n_vocab),
                                                    dtype=np.float32)
    tokens = [int(t) for t in np.argmax(rows, axis=1)]  # all accepted: every row is read
    rng = np.random.default_rng(0)
    out = []
    for k in range(k_max + 1):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            verify(tokens[:k], None, rows[: k + 1], GREEDY, rng)
            times.append((time.perf_counter() - t0) * 1000.0)
        out.append(statistics.median(times))
    return out


def _pick_ms(n_vocab: int, repeats: int = 5) -> float:
    """A draft picking its token from one row: argmax and the token's probability."""
    from ..sampling import prob_of

    row = np.random.default_rng(1).standard_normal(n_vocab, dtype=np.float32)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        prob_of(row, int(np.argmax(row)))
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)
