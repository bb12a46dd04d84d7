"""What the engine process does besides runs: measure a cost profile, check a draft pair,
advise which oracle to run.

All run models, so the engine runs them on its stepping thread between runs, with models
from the same pool the runs use (a profile measured on the target a run keeps loaded costs no
second load). Progress and the result go back as protocol messages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..corpus import pair_prompts
from ..cost import profile as prof
from ..errors import SpecvizError
from . import run_spec as rs
from .model_pool import ModelPool
from .run_builder import acquire

Send = Callable[..., None]


@dataclass(frozen=True)
class Task:
    """A profile or pair request, as it came from the window."""

    kind: str  # one of TASKS
    task: str  # the window's name for it, echoed in every reply
    fields: dict


def run_task(task: Task, pool: ModelPool, send: Send) -> None:
    """Do the task; its result, or its one-line error, goes back to the window."""
    def progress(stage: str, done: int, total: int) -> None:
        send("progress", task=task.task, stage=stage, done=done, total=total)

    try:
        model = rs.model_from_dict(task.fields["model"])
        result = TASKS[task.kind](pool, model, task.fields, progress)
    except SpecvizError as exc:
        send("task_failed", task=task.task, message=str(exc))
        return
    except (KeyError, TypeError, ValueError) as exc:
        send("task_failed", task=task.task, message=f"bad {task.kind} request: {exc}")
        return
    send("finished", task=task.task, result=result)


def _profile(pool: ModelPool, model: rs.ModelChoice, _fields: dict, progress) -> dict:
    target = acquire(pool, model, model.target)
    try:
        measured = prof.measure(target, model.target, model.threads, repeats=3,
                                on_progress=lambda d, t: progress("profile", d, t))
    finally:
        pool.release(target)
    # Kept as a run keeps it: a busy-looking try is counted, not refused (the third is
    # stored smoothed), so the window's "profile this machine" never fails on a busy machine.
    notes: list[str] = []
    path = prof.keep(measured, notes.append)
    return {"path": str(path) if path else None, "model": model.target, "notes": notes}


def _pair(pool: ModelPool, model: rs.ModelChoice, fields: dict, progress) -> dict:
    from ..pair.check import check_pair

    prompts = list(fields.get("prompts") or []) or pair_prompts()
    target = acquire(pool, model, model.target)
    try:
        draft = acquire(pool, model, fields["draft"])
    except SpecvizError:
        pool.release(target)
        raise
    try:
        report = check_pair(target, draft, prompts, target_name=model.target,
                            draft_name=fields["draft"], threads=model.threads,
                            max_tokens=int(fields.get("max_tokens") or 64), k_max=8,
                            progress=progress)
    finally:
        pool.release(draft)
        pool.release(target)
    return report.to_dict()


def _advise(pool: ModelPool, model: rs.ModelChoice, fields: dict, progress) -> dict:
    """`specviz advise` for the window: each line it says is a progress stage."""
    from ..advise import prompts
    from ..advise.advise import Options, advise
    from ..models import local

    kinds = prompts.parse_kinds(",".join(fields.get("kinds") or prompts.KINDS[:2]))
    sets, problems = prompts.bundled_sets(kinds, int(fields.get("per_kind") or prompts.PER_KIND))
    if not sets:
        raise SpecvizError("no prompts to answer: " + ("; ".join(problems) or "none given"))
    # Other tools' stores and the registry only: a folder named by the request could make a
    # served engine list a client's choice of host folders.
    places = local.Places.here()
    options = Options(int(fields.get("max_tokens") or 128), model.threads, model.n_ctx,
                      places=places, problems=problems)
    target = acquire(pool, model, model.target)
    try:
        advice = advise(target, model.target, sets, options, lambda line: progress(line, 0, 0))
    finally:
        pool.release(target)
    return advice.to_dict()


TASKS = {"profile": _profile, "pair": _pair, "advise": _advise}
