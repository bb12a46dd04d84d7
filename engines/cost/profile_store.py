"""Storing cost profiles: one JSON file per model, backend, device, thread count, dtype and
variant in `<cache>/profiles/`, written whole; one timed while other work had the cores is
measured again by the next runs and stored at the last of a few tries all the same, smoothed
and marked busy (profile_noise.py)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..atomic import cannot_write, write_text
from ..errors import SpecvizError
from ..machine.hardware import compute_threads
from ..models import home_dir
from . import profile_shape
from .profile_data import PROFILE_VERSION, Profile, dtype_key
from .profile_noise import cheapest, smoothed, uneven

Say = Callable[[str], None]


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


# Busy-looking measurements of one profile before it is stored all the same: each run until
# then measures it again, in the hope of a quieter moment, and each cell keeps its cheapest.
BUSY_TRIES = 3
TRIES_ENV = "SPECVIZ_PROFILE_TRIES"


def busy_tries() -> int:
    """How many busy-looking measurements of a profile are made before it is stored all the
    same, smoothed (SPECVIZ_PROFILE_TRIES, else BUSY_TRIES; 1 stores the first)."""
    text = os.environ.get(TRIES_ENV, "").strip()
    try:
        return max(1, int(text)) if text else BUSY_TRIES
    except ValueError:
        raise SpecvizError(f"{TRIES_ENV} takes a whole number of tries, got {text!r}") from None


def save(profile: Profile) -> Path:
    """Store the profile whole (a reader never sees half of one); SpecvizError naming the
    file where it cannot be written. One timed on a busy machine is stored only at its
    `busy_tries()`th measurement (`store` says how); before that SpecvizError says why not,
    and the next run measures it again."""
    return store(profile)[0]


def store(profile: Profile) -> tuple[Path, Profile]:
    """`save`, and the profile as stored: as measured where the machine was quiet; else each
    cell at its cheapest over the tries, quiet as that where it is, or else its noisy cells
    smoothed (profile_noise.py) and marked `busy`. A quiet measurement replaces a busy one."""
    path = profile_path(profile.model, profile.backend, profile.device, profile.threads,
                        profile.dtype, profile.variant)
    if uneven(profile.contexts, profile.batches, profile.ms):
        profile = _busy_try(profile, path)
    _write(path, profile.to_dict())
    _forget_tries(path)
    return path, profile


def _busy_try(profile: Profile, path: Path) -> Profile:
    """The profile to store after one more busy-looking measurement; SpecvizError, the try
    counted beside the profile, where tries are left."""
    earlier, tries = _earlier(profile, path)
    ms = cheapest(profile.ms, earlier) if earlier else profile.ms
    why = uneven(profile.contexts, profile.batches, ms)
    if not why:  # the tries' quieter moments make a quiet table together
        return replace(profile, ms=ms, busy="")
    limit, tries = busy_tries(), tries + 1
    if tries >= limit:
        return replace(profile, ms=smoothed(profile.contexts, profile.batches, ms), busy=why)
    _write(_tries_path(path), {**replace(profile, ms=ms).to_dict(), "tries": tries})
    raise SpecvizError(f"{why}; it is measured again on the next run (try {tries} of "
                       f"{limit}; after the last it is stored all the same, smoothed)")


def _earlier(profile: Profile, path: Path) -> tuple[list[list[float]] | None, int]:
    """The table of the earlier busy tries of this profile and how many there were: those
    counted beside it, or a stored busy profile (its tries all spent); (None, 0) for none."""
    for where in (_tries_path(path), path):
        try:
            data = json.loads(where.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # none, or torn: no earlier tries to go by
            continue
        if profile_shape.problem(data, PROFILE_VERSION) or not _alike(data, profile):
            continue
        if where != path:
            return data["ms"], data["tries"] if isinstance(data.get("tries"), int) else 0
        if data.get("busy"):
            return data["ms"], busy_tries() - 1
    return None, 0


def _alike(data: dict, profile: Profile) -> bool:
    """Whether `data` was measured on the same sizes and products as `profile`."""
    return all(data.get(key) == getattr(profile, key)
               for key in ("contexts", "batches", "small_rows", "dtype", "variant"))


def _tries_path(path: Path) -> Path:
    """Beside the profile, not named like one (`specviz doctor` lists `*--*.json`)."""
    return path.with_suffix(".tries")


def _forget_tries(path: Path) -> None:
    try:
        _tries_path(path).unlink(missing_ok=True)
    except OSError:  # a count left behind only merges into the next busy try
        pass


def _write(path: Path, data: dict) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cannot_write(path, exc) from None
    return write_text(path, json.dumps(data, indent=1))


def keep(profile: Profile, say: Say) -> Path | None:
    """`save`, where a profile measured for minutes must not be lost to a folder it cannot
    be written to: the caller goes on with it, and `say` gets one line of why it was not
    stored (None then). A busy-looking profile takes the cells it is stored with (or would
    be, smoothed), so this run prices as later runs will; once it is stored as busy, `say`
    is told so, once."""
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
        say(f"the cost profile of {profile.model} kept looking busy ({stored.busy}): it is "
            "stored with its noisy cells smoothed and marked so, until a measurement on a "
            f"quiet machine replaces it (`specviz profile --target {profile.model} --refresh`)")
    return path


def _take(profile: Profile, ms: list[list[float]], busy: str) -> None:
    profile.ms, profile.busy = ms, busy


def read(model: str, backend: str, device: str, threads: int | None,
         dtype: str | None = None, variant: str = "") -> tuple[Profile | None, str]:
    """The stored profile and "", (None, "") where there is none, or (None, why) where
    the file there is not a usable profile (unreadable, corrupt, of the wrong shape)."""
    path = profile_path(model, backend, device, threads, dtype, variant)
    if not path.exists() and threads_run(threads) == compute_threads():
        older = _before_threads_were_counted(path)
        path = older if older.exists() else path
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError) as exc:  # a folder, no permission, not UTF-8
        return None, f"{path} cannot be read ({getattr(exc, 'strerror', None) or exc})"
    try:
        data = json.loads(text)
    except ValueError as exc:  # json's errors are ValueErrors
        return None, f"{path}: not JSON ({exc})"
    wrong = profile_shape.problem(data, PROFILE_VERSION) or uneven(
        data["contexts"], data["batches"], data["ms"]) or _stale(data)
    if wrong:
        return None, f"{path}: {wrong}"
    return Profile.from_dict(data), ""


# Beside a profile's fields in its file: why a run found it stale (profile_fresh.py).
STALE_KEY = "stale"


def _stale(data: dict) -> str:
    why = data.get(STALE_KEY)
    return why if isinstance(why, str) else ""


def mark_stale(profile: Profile, why: str) -> bool:
    """Marks the stored file of `profile` stale, so the next run measures it again; False
    where the file there is another measurement by now (or none), or cannot be written."""
    path = profile_path(profile.model, profile.backend, profile.device, profile.threads,
                        profile.dtype, profile.variant)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(data, dict) or data.get("created") != profile.created or _stale(data):
        return False
    try:
        _write(path, {**data, STALE_KEY: why})
    except SpecvizError:  # a folder it cannot write: the next run keeps the old one
        return False
    return True


def load(model: str, backend: str, device: str, threads: int | None,
         dtype: str | None = None, say: Say | None = None, variant: str = "") -> Profile | None:
    """The stored profile, or None when there is none or it is not usable (then `say`,
    where given, gets one line of why it is not used)."""
    profile, problem = read(model, backend, device, threads, dtype, variant)
    if problem and say:
        say(f"not using the stored cost profile {problem}")
    return profile
