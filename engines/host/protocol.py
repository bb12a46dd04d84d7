"""The messages between the window and an engine process: one JSON object per line.

JSON, not pickle: a message is data, never code, so the same lines can later travel over a
socket to an engine on another machine. Every message carries the protocol version `v` and its
kind `msg`; the rest are the kind's fields. A peer refuses a version it does not speak.

A run spec's lanes carry each oracle input as a key of the lane's own (run_spec.lane_to_dict),
under the name it had when inputs were LaneSpec fields, so this version 1 reads lanes from
older peers and older peers read its lanes (tests/test_protocol.py holds both to fixtures).

To the engine:
  run      {spec}                       a run spec (engines.host.run_spec.to_dict)
  set_k    {lane, k}                    a lane's K from its next step
  set_auto {lane, on, k}                cost-aware K on (the profile measured if missing) or
                                        off, back to the fixed K `k`
  set_knob {lane, name, value}          an oracle setting, from its next proposal
  pause {} | resume {} | stop {}        every lane of the run
  profile  {task, model}                measure the target's cost profile (stored), after
                                        any run in progress
  pair     {task, model, draft,         check a draft for the target (engines.pair.check),
            prompts, max_tokens}        after any run in progress
  advise   {task, model, kinds,         rank every oracle and draft found for the target
            max_tokens}                 (engines.advise), after any run in progress
  shutdown {}                           stop and exit
  secret   {name, value}                an API key for the server lanes that name the
                                        variable `name` (SPECVIZ_KEY_…); never echoed
  auth     {token}                      the first line to `specviz serve` (engines.host.relay),
                                        at most 4 KiB

From the engine:
  hello    {pid, python}                the process is up
  started  {lane, header}               a lane is built; the header opens its trace and holds
                                        what the inspector needs (prompt text, token offsets)
  event    {lane, event}                a step or summary event (engines.events.to_dict)
  batch    {lane, batch}                a lane of N streams (run spec's request.streams > 1):
                                        a batch step or the batch's summary
                                        (engines.host.batch_events.to_dict)
  failed   {lane, message}              the lane ended with this one-line error
  refused  {lane, message}              a control was refused (the lane runs on)
  note     {lane, text}                 what the person should know of a lane that ended
                                        well (its memory of earlier runs not saved)
  status   {text}                       what the engine is doing (loading, measuring)
  done     {loads, idle}                every lane of the run has ended; models loaded so
                                        far and kept idle for the next run
  progress {task, stage, done, total}   a profile or pair task is this far
  finished {task, result}               a task's result (a pair report; the stored profile)
  task_failed {task, message}           a task ended with this one-line error
  error    {message, request}           `specviz serve` refused a request (its kind, or
                                        null for a line that was not one); it stays up
  died     {message}                    `specviz serve`: the engine process ended unasked
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .. import batch_events
from .. import events as ev
from ..bounded_json import loads
from ..errors import SpecvizError

VERSION = 1
TO_ENGINE = ("run", "set_k", "set_auto", "set_knob", "pause", "resume", "stop", "profile",
             "pair", "advise", "shutdown", "secret", "auth")
FROM_ENGINE = ("hello", "started", "event", "batch", "failed", "refused", "note", "status", "done",
               "progress", "finished", "task_failed", "error", "died")
# The fields each request must have, and their types: a peer checks a request before acting
# on it. Extra fields are allowed (a newer sender).
REQUIRED = {
    "run": {"spec": dict},
    "set_k": {"lane": str, "k": int},
    "set_auto": {"lane": str, "on": bool, "k": int},
    "set_knob": {"lane": str, "name": str, "value": (int, float)},
    "profile": {"task": str, "model": dict},
    "pair": {"task": str, "model": dict, "draft": str},
    "advise": {"task": str, "model": dict},
    "secret": {"name": str, "value": str},
    "auth": {"token": str},
}


class ProtocolError(SpecvizError):
    """A line that is not a message of this protocol (a version mismatch included)."""


@dataclass(frozen=True)
class Message:
    kind: str
    fields: dict = field(default_factory=dict)

    def __getitem__(self, name: str):
        return self.fields[name]


def encode(kind: str, **fields) -> bytes:
    if kind not in TO_ENGINE + FROM_ENGINE:
        raise ValueError(f"unknown message kind {kind!r}")
    if "v" in fields or "msg" in fields:
        raise ValueError("'v' and 'msg' are the envelope's")
    if kind == "event":
        fields = {**fields, "event": ev.to_dict(fields["event"])}
    elif kind == "batch":
        fields = {**fields, "batch": batch_events.to_dict(fields["batch"])}
    return (json.dumps({"v": VERSION, "msg": kind, **fields}, ensure_ascii=False,
                       separators=(",", ":")) + "\n").encode("utf-8")


def decode(line: bytes | str) -> Message:
    try:
        data = loads(line)
    except ValueError as exc:
        raise ProtocolError(f"not a message: {exc}") from None
    if not isinstance(data, dict) or "msg" not in data:
        raise ProtocolError("not a message: no kind")
    if data.get("v") != VERSION:
        raise ProtocolError(f"protocol version {data.get('v')!r}; this specviz speaks {VERSION}")
    kind = data.pop("msg")
    data.pop("v")
    if kind not in TO_ENGINE + FROM_ENGINE:
        raise ProtocolError(f"unknown message kind {kind!r}")
    if kind == "event":
        try:
            data["event"] = ev.from_dict(data["event"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"bad event: {exc}") from None
    elif kind == "batch":
        try:
            data["batch"] = batch_events.from_dict(data["batch"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"bad batch: {exc}") from None
    return Message(kind, data)


def check_request(message: Message) -> None:
    """A request's fields have the kinds they must have; ProtocolError says which does not."""
    if message.kind not in TO_ENGINE:
        raise ProtocolError(f"{message.kind!r} is not a request")
    for name, kinds in REQUIRED.get(message.kind, {}).items():
        value = message.fields.get(name)
        wanted = kinds if isinstance(kinds, tuple) else (kinds,)
        if value is None or not isinstance(value, wanted) or (
                isinstance(value, bool) and bool not in wanted):
            names = " or ".join(k.__name__ for k in wanted)
            raise ProtocolError(f"{message.kind}: field {name!r} must be {names}")
