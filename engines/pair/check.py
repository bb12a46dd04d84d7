"""A pair check from start to end, the same for `specviz pair` and the window: the target's
answers, the vocabularies compared, the cost profile found (or measured), the estimate."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..backends.base import Backend
from ..cost import profile as prof
from ..cost.profile_plan import FIRST_RUN_S
from ..errors import SpecvizError
from . import known
from .acceptance import target_answers
from .report import K_MAX, PairReport, estimate
from .vocab import VERDICT_DRAFT, VERDICT_UNUSABLE, compare_vocabularies

PROFILE_REPEATS = 3  # enough for a pair's verdict; `specviz profile` takes more
# (stage, done, total): "answers", "profile", "estimate"
Progress = Callable[[str, int, int], None]


def check_pair(target: Backend, draft: Backend, prompts: Sequence[str], *, target_name: str,
               draft_name: str, threads: int | None, max_tokens: int = 96,
               temperature: float = 1.0, chat: bool = True, k_max: int = K_MAX,
               measure_profile: bool = True, progress: Progress | None = None,
               say: Callable[[str], None] = lambda _: None) -> PairReport:
    if not prompts:
        raise SpecvizError("no prompts to estimate acceptance on")

    def stage(name: str) -> Callable[[int, int], None] | None:
        return (lambda done, total: progress(name, done, total)) if progress else None

    answers = target_answers(target, prompts, max_tokens, chat, stage("answers"))
    sample = b"".join(a.text for a in answers).decode("utf-8", errors="replace")
    vocab = compare_vocabularies(target, draft, sample)
    report = PairReport(target_name, draft_name, vocab)
    if vocab.verdict == VERDICT_UNUSABLE:
        return report
    profile = prof.load(target_name, target.name, target.device, threads, target.dtype,
                        say=say, variant=target.profile_variant)
    if profile is None or not profile.fits(target):
        if not measure_profile:
            seconds = prof.estimate_seconds(target)  # what `specviz profile` would do
            state = "no cost profile" if profile is None else "an outdated cost profile"
            raise SpecvizError(f"{state} of {target_name} on this machine: `specviz profile "
                               f"--target {target_name} --refresh` measures it (once, about "
                               f"{seconds:.0f} s here)")
        profile = prof.measure(target, target_name, threads, repeats=PROFILE_REPEATS,
                               on_progress=stage("profile"), budget_s=FIRST_RUN_S)
        prof.keep(profile, say)  # used even where it cannot be stored
    report = estimate(target, draft, answers, vocab, profile, temperature, k_max, report,
                      stage("estimate"))
    if vocab.verdict == VERDICT_DRAFT:  # auto K's prior for this draft (same tokenizer)
        problem = known.remember(target_name, draft_name, report.by_position,
                                 report.answer_tokens)
        if problem:
            say(problem)
    return report
