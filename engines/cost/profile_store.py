"""Storing cost profiles: one JSON file per model, backend, device, thread count, dtype and
variant in `<cache>/profiles/`, written whole; one timed while other work had the cores is
stored at once, smoothed and marked busy (profile_noise.py), and refined by later runs."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..atomic import cannot_write, write_text
from ..bounded_json import SMALL_FILE, read_json
from ..errors import SpecvizError
from ..machine.hardware import compute_threads
from ..models import home_dir
from . import profile_shape
from .profile_data import PROFILE_VERSION, Profile, dtype_key
from .profile_noise import cheapest, smoothed, uneven

Say = Callable[[str], None]
WHAT = "the stored cost profile"


def profiles_dir() -> Path:
    """`<cache>/profiles`, beside the models folder (SPECVIZ_HOME respected)."""
    return home_dir("cache") / "profiles"


def profile_path(model: str, backend: str, device: str, threads: int | None,
                 dtype: str | None = None, variant: str = "") -> Path:
    name = Path(model).name if ("/" in model or "\\" in model) else model
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name)
    kind = "" if dtype_key(dtype) == "float32" else f"--{dtype}"  # float32: as ever named
    kind += f"--{variant}" if variant else ""
    return profiles_dir() / f"{stem}--{backend}--{device}--t{threads_run(threads)}{kind}.json"


def planned_variant(backend: str, device: str, target: str, threads: int | None,
                    dtype: str | None, compile: str | None = None) -> str:
    """The `profile_variant` a backend of these settings will have, known before it loads
    (the window's curves, `specviz profile`'s lookup): llama.cpp's padded widths as set; the
    transformers backend's compiled steps where asked, or raced here before and kept."""
    from ..backends import compile_choice, llama_widths
    from ..models import resolve

    if backend == "llama":
        return llama_widths.profile_variant(backend)
    try:
        choice = compile_choice.asked_choice(compile, device)
        if choice == "auto":
            choice = compile_choice.remembered(compile_choice.store_path(), resolve(target),
                                               threads, device, dtype or "float32")
    except SpecvizError:  # a target not here yet, a setting it does not know: said elsewhere
        return ""
    return "compiled" if backend == "transformers" and choice == "on" else ""


def threads_run(threads: int | None) -> int:
    """The threads a profile's steps run on, which name it: None (the command line's "auto")
    runs on every core, so it shares the profile of a window that asks for that many (one
    profile measured twice, 25 s each, for the same 2 cores otherwise)."""
    return threads or compute_threads()


def _before_threads_were_counted(path: Path) -> Path:
    """Where a profile of every core was stored before, named `tauto`."""
    return path.with_name(re.sub(r"--t\d+(--|\.json$)", r"--tauto\1", path.name, count=1))


def save(profile: Profile) -> Path:
    """Store the profile whole (a reader never sees half of one); SpecvizError naming the
    file where it cannot be written."""
    return store(profile)[0]


def store(profile: Profile) -> tuple[Path, Profile]:
    """`save`, and the profile as stored: as measured where the machine was quiet; else, at
    the first try, each cell at its cheapest beside an earlier busy measurement of the same
    sizes where there is one, its noisy cells smoothed (profile_noise.py) and marked `busy`.
    A run never waits for a profile twice: later runs' steps refine it (profile_refine.py),
    and a quiet measurement (`specviz profile --refresh`) replaces it."""
    path = profile_path(profile.model, profile.backend, profile.device, profile.threads,
                        profile.dtype, profile.variant)
    why = uneven(profile.contexts, profile.batches, profile.ms)
    if why:
        earlier = _earlier_busy(profile, path)
        ms = cheapest(profile.ms, earlier) if earlier else profile.ms
        why = uneven(profile.contexts, profile.batches, ms)
        profile = replace(profile, ms=smoothed(profile.contexts, profile.batches, ms) if why
                          else ms, busy=why, timed=ms if why else [])
    _write(path, profile.to_dict())
    return path, profile


def _earlier_busy(profile: Profile, path: Path) -> list[list[float]] | None:
    """The table as timed of a stored busy profile of the same sizes, or None."""
    try:
        data = read_json(path, WHAT, SMALL_FILE)
    except SpecvizError:  # none, or torn: nothing to go by
        return None
    if profile_shape.problem(data, PROFILE_VERSION) or not _alike(data, profile):
        return None
    return (data.get("timed") or data["ms"]) if data.get("busy") else None


def _alike(data: dict, profile: Profile) -> bool:
    """Whether `data` was measured on the same sizes and products as `profile`."""
    return all(data.get(key) == getattr(profile, key)
               for key in ("contexts", "batches", "small_rows", "dtype", "variant"))


def _write(path: Path, data: dict) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(path, exc) from None
    return write_text(path, json.dumps(data, indent=1))


def keep(profile: Profile, say: Say) -> Path | None:
    """`save`, where a measured profile must not be lost to a folder it cannot be written
    to: the caller goes on with it, and `say` gets one line of why it was not stored (None
    then). A busy-looking profile takes the cells it is stored with (or would be, smoothed),
    so this run prices as later runs will, and `say` is told so, once."""
    try:
        path, stored = store(profile)
    except SpecvizError as exc:
        why = uneven(profile.contexts, profile.batches, profile.ms)
        if why:
            _take(profile, smoothed(profile.contexts, profile.batches, profile.ms), why)
        say(f"the cost profile was measured but not stored ({exc}); it is used for this "
            "run only")
        return None
    _take(profile, stored.ms, stored.busy)
    if stored.busy:
        say(f"the cost profile of {profile.model} was timed beside other work ({stored.busy}): "
            "it is stored with its noisy cells smoothed and marked so; later runs' steps "
            "refine it, and a measurement on a quiet machine replaces it (`specviz profile "
            f"--target {profile.model} --refresh`)")
    return path


def _take(profile: Profile, ms: list[list[float]], busy: str) -> None:
    profile.ms, profile.busy = ms, busy


def read(model: str, backend: str, device: str, threads: int | None,
         dtype: str | None = None, variant: str = "") -> tuple[Profile | None, str]:
    """The stored profile and "", (None, "") where there is none, or (None, why) where
    the file there is not a usable profile (unreadable, corrupt, of the wrong shape): a line
    naming the file."""
    path = profile_path(model, backend, device, threads, dtype, variant)
    if not path.exists() and threads_run(threads) == compute_threads():
        older = _before_threads_were_counted(path)
        path = older if older.exists() else path
    if not path.exists() and not path.is_symlink():
        return None, ""
    try:
        data = read_json(path, WHAT, SMALL_FILE)
    except SpecvizError as exc:  # a folder, no permission, not UTF-8, not JSON
        return None, str(exc)
    wrong = profile_shape.problem(data, PROFILE_VERSION) or uneven(
        data["contexts"], data["batches"], data["ms"]) or _stale(data)
    if wrong:
        return None, f"{WHAT} {path}: {wrong}"
    return Profile.from_dict(data), ""


# Beside a profile's fields in its file: why an older specviz found it stale (then measured
# again), and how many runs' steps refined its table since (profile_fresh.py).
STALE_KEY = "stale"
REFINED_KEY = "refined"


def _stale(data: dict) -> str:
    why = data.get(STALE_KEY)
    return why if isinstance(why, str) else ""


def refine(profile: Profile, ms: list[list[float]]) -> bool:
    """Stores `profile`'s file with the table `ms` (a run's steps showed it cheaper), marked
    as refined; False where the file there is another measurement by now (or none), or
    cannot be written."""
    path = profile_path(profile.model, profile.backend, profile.device, profile.threads,
                        profile.dtype, profile.variant)
    try:
        data = read_json(path, WHAT, SMALL_FILE)
    except SpecvizError:
        return False
    if not isinstance(data, dict) or data.get("created") != profile.created:
        return False
    if data.get("ms") != profile.ms:  # refined by another run meanwhile: once is enough
        return False
    try:
        _write(path, {**data, "ms": ms, REFINED_KEY: data.get(REFINED_KEY, 0) + 1})
    except SpecvizError:  # a folder it cannot write: the next run keeps the old one
        return False
    return True


def load(model: str, backend: str, device: str, threads: int | None,
         dtype: str | None = None, say: Say | None = None, variant: str = "") -> Profile | None:
    """The stored profile, or None when there is none or it is not usable (then `say`,
    where given, gets one line of why it is not used)."""
    profile, problem = read(model, backend, device, threads, dtype, variant)
    if problem and say:
        say(f"{problem}; not using it")
    return profile
