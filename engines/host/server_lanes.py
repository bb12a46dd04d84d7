"""A server lane built from its spec: connect, learn what the server lets a request change,
and make the session and the trace header."""

from __future__ import annotations

import os

from ..errors import SpecvizError
from ..loop.session import RunSettings
from ..oracles.registry import SERVED, SPAWNED
from ..servers import connect
from ..servers.server_session import ServerSession
from ..servers.sse import Endpoint
from .run_spec import LaneSpec, ModelChoice, RunRequest

ORACLE = "server"
KEY_VARIABLES = ("SPECVIZ_API_KEY", "OPENAI_API_KEY")  # read when no variable is named
SOURCES = SERVED  # the sources a serving engine drafts with (the registry's)
KEY_PREFIX = "SPECVIZ_KEY_"  # variables the window may set in its engine (a stored key)


def api_key(variable: str | None) -> str | None:
    """The key from the named environment variable (or the usual ones); never logged."""
    if variable:
        key = os.environ.get(variable)
        if not key:
            raise SpecvizError(f"the API key variable {variable} is not set")
        return key
    return next((os.environ[v] for v in KEY_VARIABLES if os.environ.get(v)), None)


def remember_key(name: str, value: str) -> None:
    """A key the window sends its engine (app.state.server_keys), kept in this process's
    environment only, where a lane naming `name` finds it."""
    if not name.startswith(KEY_PREFIX) or not name[len(KEY_PREFIX):].isalnum():
        raise SpecvizError(f"a key's variable must be {KEY_PREFIX} and letters or digits")
    os.environ[name] = value


def build_session(lane: LaneSpec, settings: RunSettings,
                  model: ModelChoice | None = None) -> ServerSession:
    if lane.oracle == SPAWNED:
        return spawned(lane, settings, model)
    given = lane.server  # every server lane has one (LaneSpec)
    if not given.url:
        raise SpecvizError("a server lane needs the server's URL (--server URL)")
    if given.source not in (None, *SOURCES):
        raise SpecvizError(f"unknown draft source {given.source!r}; one of "
                           f"{', '.join(SOURCES)}")
    endpoint = Endpoint(given.url, api_key(given.api_key_env))
    engine, server = connect(endpoint, given.engine)
    return ServerSession(endpoint, engine, server, settings, given.source)


def spawned(lane: LaneSpec, settings: RunSettings, model: ModelChoice | None) -> ServerSession:
    """A session on a llama-server started for this lane with the run's model and threads
    and the lane's speculation (one line where either is refused); the run's end stops it."""
    from ..servers.spawn import spawned_session

    target, speculation, threads = spawn_plan(lane, model)
    return spawned_session(speculation, target, threads, settings, ctx=model.n_ctx)


def spawn_plan(lane: LaneSpec, model: ModelChoice | None):
    """What a llama-server of this lane is started with: the model's GGUF, the lane's
    speculation (its draft file found) and the thread count; one line where one is refused."""
    from ..machine.cpu_load import start_threads
    from ..machine.hardware import compute_threads
    from ..models.store import resolve

    if model is None:
        raise SpecvizError("a llama-server lane needs the run's model")
    target = resolve(model.target)
    if target.suffix.lower() != ".gguf":
        raise SpecvizError(f"llama-server runs GGUF files; {model.target} is not one")
    draft = lane.inputs.get("draft")
    speculation = speculation_of(lane, resolve(draft) if draft else None)
    # A server's thread count is fixed when it starts: the cores free then (its threads
    # would stall at every barrier beside work that holds one of theirs).
    threads = model.threads or start_threads(compute_threads())
    return target, speculation, threads


def speculation_of(lane: LaneSpec, draft=None):
    """A llama-server lane's speculation: its types, the draft file (`draft`: where it was
    found) and K as the longest draft (0: the server's own)."""
    from ..servers.llama_speculation import Speculation

    return Speculation.parse(lane.server.spec, draft, draft_max=lane.k or None)


def spawned_problem(lane: LaneSpec, ask: str) -> str | None:
    """What a llama-server lane's speculation lacks before anything starts, in one line (`ask`:
    how a missing draft file is given), or None; the window asks before a run (the types a
    build takes and the files are the engine's to check)."""
    if lane.oracle != SPAWNED:
        return None
    try:
        speculation_of(lane, lane.inputs.get("draft")).check_plan(ask=ask)
    except SpecvizError as exc:
        return str(exc)
    return None


def url_of(lane: LaneSpec, session: ServerSession) -> str:
    """Where the lane's server listens: as given, or where its spawned server was started."""
    return lane.server.url or session.endpoint.url


def spawned_by(lane: LaneSpec) -> dict:
    """What a spawned server was started with, for the trace header (nothing for others)."""
    if lane.oracle != SPAWNED:
        return {}
    return {"spawned": {"spec_type": lane.server.spec, "draft": lane.inputs.get("draft"),
                        "draft_max": lane.k or None}}


def trace_header(lane: LaneSpec, request: RunRequest, session: ServerSession) -> dict:
    """Line 1 of a server lane's trace: the server (never its key), settings, prompt."""
    from ..trace import machine_info

    server = session.server
    return {
        "target": {"name": server.model},
        "draft": None,
        "backend": "server",
        "device": url_of(lane, session),
        "oracle": ORACLE,
        "server": {**server.to_dict(), "url": url_of(lane, session), **spawned_by(lane)},
        "settings": {"k": session.k, "max_tokens": request.max_tokens,
                     "temperature": request.temperature, "top_p": request.top_p,
                     "seed": request.seed, "chat": request.chat},
        "prompt": request.prompt,
        "prompt_text": session.prompt_text,
        "prompt_ids": [],
        "token_chars": [],
        "machine": machine_info(),
    }
