"""From a loaded target to the ranked advice: its answers, this machine's costs, then every
candidate predicted (or set aside with the reason), with a progress line at each stage."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..backends import load_backend
from ..backends.base import Backend
from ..cost import profile as prof
from ..errors import SpecvizError
from ..models import backend_for
from ..models import local as local_models
from . import answers as kept
from . import copying, heads
from .candidates import DraftModel, draft_models, megabytes, size_reason, weights_size
from .drafts import cannot_pay_line, predict_draft
from .pricing import Costs, drift_line, live_costs, target_profile
from .prompts import PromptSet
from .replay import Record
from .report import ALL, Advice, Candidate, rank

Say = Callable[[str], None]
DRAFTING = ("draft",)  # --only's name for every draft model, same tokenizer or not
CHOICES = (*copying.COPYING, *DRAFTING, *heads.KINDS)
NOT_PREDICTED = ("lookahead and early-exit are not predicted (their guesses need the target "
                 "itself: race them with `specviz run --oracle lookahead`)")


@dataclass
class Options:
    max_tokens: int = 128
    threads: int | None = None
    n_ctx: int = 4096
    only: Sequence[str] = CHOICES  # which candidates to consider
    places: local_models.Places | None = None  # other tools' stores (None: none searched)
    chat: bool = True
    problems: list[str] = field(default_factory=list)  # found before (empty prompt files)


def advise(target: Backend, target_name: str, sets: Sequence[PromptSet], options: Options,
           say: Say = lambda _: None) -> Advice:
    started = time.perf_counter()
    if not sets:
        raise SpecvizError("no prompts to answer: " + ("; ".join(options.problems) or "none given"))
    answers, from_cache = _all_answers(target, sets, options, say)
    records = {kind: [Record(a.prompt_text, a.prompt_ids, a.ids, options.max_tokens)
                      for a in got] for kind, got in answers.items()}
    profile, which = target_profile(target, target_name, options.threads, say)
    say("timing the target's forwards now, to scale the profile to this moment")
    every = [a for got in answers.values() for a in got]
    costs = live_costs(target, profile, every)
    drift = drift_line(costs, target_name)  # said with the other problems, at the end
    candidates = _copying(target, records, costs, options, say)
    candidates += _drafts(target, target_name, answers, costs, options, say)
    candidates += _heads(target, records, costs, options)
    kinds = [*answers, *([ALL] if len(answers) > 1 else [])]  # one kind: its column is ALL
    advice = Advice(target_name, target.name, kinds, rank(candidates),
                    [*options.problems, *([drift] if drift else []), NOT_PREDICTED],
                    f"{which}, scaled to forwards timed now",
                    _answers_line(answers, from_cache))
    advice.seconds = round(time.perf_counter() - started, 1)
    return advice


def _all_answers(target: Backend, sets: Sequence[PromptSet], options: Options,
                 say: Say) -> tuple[dict[str, list], list[str]]:
    """Each kind's answers, and the kinds whose answers were kept from before."""
    answers, from_cache = {}, []
    for pset in sets:
        def progress(done: int, total: int, kind: str = pset.kind) -> None:
            say(f"the target answers the {kind} prompts: {done}/{total}")

        answers[pset.kind], cached = kept.answers(target, pset.prompts, options.max_tokens,
                                                  options.chat, progress, say)
        if cached:
            from_cache.append(pset.kind)
    return answers, from_cache


def _answers_line(answers: dict, from_cache: list[str]) -> str:
    n = sum(len(a) for a in answers.values())
    tokens = sum(len(a.ids) for got in answers.values() for a in got)
    where = ("all kept from before" if len(from_cache) == len(answers) else
             f"{', '.join(from_cache)} kept from before" if from_cache else "written now")
    return f"{n} answer{'s' * (n != 1)}, {tokens} tokens ({where})"


def _copying(target: Backend, records: dict, costs: Costs, options: Options,
             say: Say) -> list[Candidate]:
    out = []
    for name in copying.COPYING:
        if name in options.only:
            say(f"replaying {name} (auto K and fixed K) on the answers")
            out.append(copying.candidate(name, target, records, costs))
    return out


def _drafts(target: Backend, target_name: str, answers: dict, costs: Costs, options: Options,
            say: Say) -> list[Candidate]:
    if "draft" not in options.only:
        return []
    target_bytes = weights_size(target.model_path)
    context = next(iter(answers.values()))[0].prompt_ids
    out = []
    for draft in draft_models(target.model_path, options.places):
        row = Candidate(f"draft {draft.label}", "draft", model=draft.name)
        row.skipped = size_reason(draft, target_bytes)
        if not row.skipped and draft.path is None:
            row.obtain = f"download {megabytes(draft.size)}"
            row.skipped = f"not downloaded (`specviz models pull {draft.name}`)"
        if not row.skipped:
            row.skipped = _profile_says(draft, target, costs, len(context), options.threads)
        if not row.skipped:
            _predict(target, target_name, draft, row, answers, costs, options, say)
        out.append(row)
    return out


def _profile_says(draft: DraftModel, target: Backend, costs: Costs, context: int,
                  threads: int | None) -> str:
    """Why the draft's stored cost profile rules it out ("" where none is stored, or it
    might pay): auto K's own test, before its teacher-forced pass is paid for."""
    stored, _ = prof.read(draft.name, backend_for(str(draft.path)), target.device, threads)
    if stored is None:
        return ""
    per_token = costs.scale(1) * stored.cost_ms(1, context)
    line = cannot_pay_line(costs, per_token, False, context)
    return line.replace("cannot pay here", "its cost profile says it cannot pay here", 1)


def _predict(target: Backend, target_name: str, draft: DraftModel, row: Candidate,
             answers: dict, costs: Costs, options: Options, say: Say) -> None:
    say(f"loading the draft {draft.label} ({draft.where})")
    try:
        backend = load_backend(backend_for(str(draft.path)), draft.path, device=target.device,
                               threads=options.threads, n_ctx=options.n_ctx)
    except (SpecvizError, OSError, ValueError, RuntimeError) as exc:
        row.skipped = f"cannot load: {str(exc).splitlines()[0] if str(exc) else exc!r}"
        return
    try:
        predict_draft(target, backend, row, answers, costs, target_name, say,
                      options.max_tokens)
    finally:
        backend.close()


def _heads(target: Backend, records: dict, costs: Costs, options: Options) -> list[Candidate]:
    found = heads.find(target.model_path)
    contexts = heads.mean_contexts(records)
    return [heads.candidate(target, found[kind], kind, costs, contexts)
            for kind in heads.KINDS if kind in options.only]
