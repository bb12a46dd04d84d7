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
from ..oracles import ORACLE_INFO
from ..oracles.registry import HeldOut, Replayed, TeacherForced
from . import answers as kept
from . import copying, heads
from .candidates import DraftModel, draft_models, megabytes, size_reason, weights_size
from .drafts import cannot_pay_line, predict_draft
from .pricing import Costs, drift_line, live_costs, target_profile
from .prompts import PromptSet
from .replay import Record
from .report import ALL, Advice, Candidate, rank

Say = Callable[[str], None]
WAYS = (Replayed, TeacherForced, HeldOut)  # how the registry says an oracle is predicted


def choices() -> tuple[str, ...]:
    """What may be predicted, as --only names it: the oracles whose registry entry says how
    (a teacher-forced oracle's name stands for every draft model here, whatever its
    tokenizer), replays first, then draft models, then trained heads."""
    return tuple(name for way in WAYS for name, described in ORACLE_INFO.items()
                 if isinstance(described.advise, way))


def not_predicted() -> str:
    """The line naming the oracles left to a race ("" where there are none)."""
    stand_in = {d.other_tokenizer for d in ORACLE_INFO.values() if d.advise is not None}
    names = [name for name, described in ORACLE_INFO.items()
             if described.advise is None and not described.plain and name not in stand_in]
    if not names:
        return ""
    return (f"not predicted: {', '.join(names)} (their guesses need the target itself or a "
            "run's trees; race them with `specviz run --oracle NAME --baseline`)")


@dataclass
class Options:
    max_tokens: int = 128
    threads: int | None = None
    n_ctx: int = 4096
    only: Sequence[str] | None = None  # which candidates to consider (None: every choice)
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
                    [line for line in (*options.problems, drift, not_predicted()) if line],
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
    for name in _chosen(Replayed, options):
        say(f"replaying {name} (auto K and fixed K) on the answers")
        out.append(copying.candidate(name, target, records, costs))
    return out


def _chosen(way: type, options: Options) -> list[str]:
    """The oracles predicted this way that were asked for."""
    only = choices() if options.only is None else options.only
    return [name for name, described in ORACLE_INFO.items()
            if isinstance(described.advise, way) and name in only]


def _drafts(target: Backend, target_name: str, answers: dict, costs: Costs, options: Options,
            say: Say) -> list[Candidate]:
    return [row for name in _chosen(TeacherForced, options)
            for row in _draft_rows(name, target, target_name, answers, costs, options, say)]


def _draft_rows(oracle: str, target: Backend, target_name: str, answers: dict, costs: Costs,
                options: Options, say: Say) -> list[Candidate]:
    """A row for each draft model here, as `oracle` would draft with it."""
    target_bytes = weights_size(target.model_path)
    context = next(iter(answers.values()))[0].prompt_ids
    out = []
    for draft in draft_models(target.model_path, options.places):
        row = Candidate(f"{oracle} {draft.label}", oracle, model=draft.name)
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
    return [heads.candidate(target, found[name], name, costs, contexts)
            for name in _chosen(HeldOut, options)]
