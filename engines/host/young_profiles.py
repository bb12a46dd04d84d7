"""The young cost profiles of the engine's runs, grown in its idle moments.

A run's auto K times only what fits a first run's budget (cost/profile_plan.py). The window's
engine then has time between races: after IDLE_S with nothing to do it times one missing
context of a young profile on the pooled model, and gives the row up the moment work arrives.
"""

from __future__ import annotations

from collections.abc import Callable

from ..cost.profile_complete import complete_one, missing
from ..cost.profile_data import Profile
from ..errors import SpecvizError
from .run_builder import acquire
from .run_spec import ModelChoice

IDLE_S = 3.0  # the engine's wait with nothing to do before it times a young profile's row

Say = Callable[[str], None]


class YoungProfiles:
    """(model name, its ModelChoice, its profile) of every young profile a run priced with."""

    def __init__(self) -> None:
        self.profiles: list[tuple[str, ModelChoice, Profile]] = []

    def note(self, lanes, model: ModelChoice) -> None:
        """The young profiles the built lanes' auto K priced with (the target's, a draft's)."""
        for lane in lanes:
            policy = getattr(getattr(lane, "session", None), "k_policy", None)
            for profile in (getattr(policy, "profile", None),
                            getattr(policy, "draft_profile", None)):
                if profile is not None and profile.young and not self._has(profile):
                    self.profiles.append((profile.model, model, profile))

    def _has(self, profile: Profile) -> bool:
        return any(p.model == profile.model and p.threads == profile.threads
                   for _, _, p in self.profiles)

    def grow(self, pool, busy: Callable[[], bool], say: Say) -> None:
        """Time the next missing context of the first young profile (or give it up)."""
        name, model, profile = self.profiles[0]
        try:
            backend = acquire(pool, model, name, loaded_only=True)
        except SpecvizError:
            backend = None
        if backend is None:  # the settings changed and it was let go: nothing to time it on
            self.profiles.pop(0)
            return
        reusable = True
        try:
            todo = missing(profile, backend.n_ctx)
            grown = complete_one(backend, profile, busy) if todo else None
        except Exception as exc:  # a folder it cannot write, a failed forward: said in one
            # line and given up; the engine goes on serving the window
            say(f"the cost profile of {name} could not grow: {exc}")
            grown, todo, reusable = None, [], isinstance(exc, SpecvizError)
        finally:
            pool.release(backend, reusable)
        if grown is not None:
            say(f"cost profile of {name}: timed at {todo[0]} cached tokens while idle")
        if not todo or (grown is not None and not grown.young):
            self.profiles.pop(0)
        elif grown is not None:
            self.profiles[0] = (name, model, grown)
