"""A lane ready to step, on a local model or on a serving engine, behind one protocol: the
engine process and the command line step it, control it and close it without asking which
it is."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Protocol

from .. import events as ev
from ..backends.base import Backend
from ..errors import SpecvizError
from ..loop.session import Session, warm_up
from ..loop.streams import StreamsSession
from ..oracles import is_plain
from ..servers.server_session import ServerSession
from .k_policy import k_policy
from .model_pool import ModelPool
from .run_spec import LaneSpec, ModelChoice

Say = Callable[[str], None]
CONTROLS = ("set_k", "set_auto", "set_knob")  # what a window may change in a running lane


class Lane(Protocol):
    lane_id: str
    header: dict  # line 1 of its trace

    def steps(self) -> Iterator[ev.Event]:
        """Its step events, then its summary (a failure is raised from here)."""

    @property
    def summary(self) -> ev.SummaryEvent | None: ...

    @property
    def build(self) -> str:
        """What runs the lane (backend version and system, or the server's build)."""

    def control(self, kind: str, fields: dict, say: Say = lambda _: None) -> str | None:
        """K (`set_k`), auto K (`set_auto`) or an oracle setting (`set_knob`), taken at the
        next step; the reason in one line where it is refused."""

    def notice(self) -> str | None:
        """What the person should know that arose while it ran (its oracle's memory could
        not be saved), in one line, once; None: nothing."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def stop(self) -> None: ...

    def close(self, reusable: bool = True) -> None:
        """Hand its models back (`reusable=False`: it failed, free them)."""


class Delegated:
    """What every lane hands to its session: its summary, pause, resume and stop."""

    session: Session | ServerSession | StreamsSession

    @property
    def summary(self) -> ev.SummaryEvent | None:
        return self.session.summary

    def pause(self) -> None:
        self.session.pause()

    def resume(self) -> None:
        self.session.resume()

    def stop(self) -> None:
        self.session.stop()

    def control(self, kind: str, fields: dict, say: Say = lambda _: None) -> str | None:
        try:
            return self._take(kind, fields, say)
        except SpecvizError as exc:
            return str(exc)
        except (KeyError, TypeError, ValueError) as exc:
            return f"bad control {kind}: {exc}"

    def _take(self, kind: str, fields: dict, say: Say) -> str | None:
        raise NotImplementedError


@dataclass
class LocalLane(Delegated):
    """An oracle and a target (and a draft) on this machine, stepped by a Session."""

    lane_id: str
    session: Session
    header: dict
    spec: LaneSpec
    model: ModelChoice
    draft: Backend | None = None
    backends: list[Backend] = field(default_factory=list)
    pool: ModelPool | None = None  # where the backends go back to; None: closed

    def steps(self) -> Iterator[ev.Event]:
        # Warming up inside the iterator: a failure there is this lane's, like any step's.
        warm_up(self.session.target, self.session.prompt_ids)
        yield from self.session

    @property
    def build(self) -> str:
        from ..backends.probe import backend_build

        return backend_build(self.session.target.name)

    def notice(self) -> str | None:
        notes = [n for n in (self.session.oracle.notice(), self.session.target.busy_note(),
                             self._profile_note()) if n]
        return "; ".join(notes) or None

    def _profile_note(self) -> str | None:
        """Where this run's steps showed its cost profile was timed on a busier machine."""
        from ..cost.auto_k import AutoK
        from ..cost.profile_fresh import stale_note

        policy = self.session.k_policy
        return stale_note(policy) if isinstance(policy, AutoK) else None

    def _take(self, kind: str, fields: dict, say: Say) -> str | None:
        session = self.session
        if kind not in CONTROLS:
            return _unknown(kind)
        if kind == "set_knob":
            return _set_knob(session.oracle, fields["name"], fields["value"])
        if is_plain(session.oracle.name):
            # Auto K off is how a plain lane is already; anything else would change nothing.
            asks = kind == "set_k" or bool(fields["on"])
            return "plain decoding proposes nothing: it has no K to change" if asks else None
        if kind == "set_k":
            session.set_k(int(fields["k"]))
        else:
            self._set_auto(bool(fields["on"]), int(fields.get("k", session.k)), say)
        return None

    def _set_auto(self, on: bool, k: int, say: Say) -> None:
        session = self.session
        if not on:
            session.k_policy = None
            session.set_k(k)
        elif session.k_policy is None:
            session.k_policy = k_policy(replace(self.spec, auto_k=True), self.model,
                                        session.oracle, session.target, self.draft, say)
            # Measuring a missing profile used the target's cache: put the run back in it.
            if session.context and session.target.tokens != session.context[:-1]:
                session.target.sync(session.context[:-1])

    def close(self, reusable: bool = True) -> None:
        self.session.oracle.close()
        for backend in self.backends:
            if self.pool is None:
                backend.close()
            else:
                self.pool.release(backend, reusable)
        self.backends = []


@dataclass
class ServerLane(Delegated):
    """A completion streamed from a serving engine, its steps read from what it streams."""

    lane_id: str
    session: ServerSession
    header: dict

    def steps(self) -> Iterator[ev.Event]:
        yield from self.session

    @property
    def build(self) -> str:
        return self.header["server"]["build"]

    def notice(self) -> str | None:
        """Why the engine's own count of the run's speculation was left out, where it was."""
        return getattr(self.session, "counts_note", None)

    def _take(self, kind: str, fields: dict, say: Say) -> str | None:
        """K where the engine takes it per request; auto K and oracle settings are local."""
        if kind == "set_k":
            self.session.set_k(int(fields["k"]))
        elif kind == "set_auto":
            if fields["on"]:
                return "auto K prices a local model's steps; a server chooses its own draft length"
        elif kind == "set_knob":
            return f"a server lane has no oracle settings to change ({fields['name']})"
        else:
            return _unknown(kind)
        return None

    def close(self, reusable: bool = True) -> None:
        """The stream ends with the run (or with `stop`); a server started for the lane is
        stopped here too, if its run was abandoned before it ended."""
        self.session.close()


def _set_knob(oracle, name: str, value) -> str | None:
    """A live setting changed; the reason in one line where the oracle has no such setting or
    fixes it when the lane starts."""
    if name not in oracle.knobs():
        if hasattr(oracle.settings, name):
            return f"{oracle.name}'s {name} is fixed when the lane starts; set it before a run"
        return f"{oracle.name} has no setting {name}"
    oracle.set_knob(name, value)
    return None


def _unknown(kind: str) -> str:
    return f"unknown control {kind!r} (a lane takes {', '.join(CONTROLS)})"

