"""A server lane built from its spec: connect, learn what the server lets a request change,
and make the session and the trace header."""

from __future__ import annotations

import os

from ..errors import SpecvizError
from ..loop.session import RunSettings
from ..servers import connect
from ..servers.server_session import ServerSession
from ..servers.sse import Endpoint
from .run_spec import LaneSpec, RunRequest

ORACLE = "server"
KEY_VARIABLES = ("SPECVIZ_API_KEY", "OPENAI_API_KEY")  # read when no variable is named
SOURCES = ("draft", "ngram", "prompt", "eagle", "medusa")
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


def build_session(lane: LaneSpec, settings: RunSettings) -> ServerSession:
    if not lane.server:
        raise SpecvizError("a server lane needs the server's URL (--server URL)")
    if lane.server_source not in (None, *SOURCES):
        raise SpecvizError(f"unknown draft source {lane.server_source!r}; one of "
                           f"{', '.join(SOURCES)}")
    endpoint = Endpoint(lane.server, api_key(lane.api_key_env))
    engine, server = connect(endpoint, lane.server_engine)
    return ServerSession(endpoint, engine, server, settings, lane.server_source)


def trace_header(lane: LaneSpec, request: RunRequest, session: ServerSession) -> dict:
    """Line 1 of a server lane's trace: the server (never its key), settings, prompt."""
    from ..trace import machine_info

    server = session.server
    return {
        "target": {"name": server.model},
        "draft": None,
        "backend": "server",
        "device": lane.server,
        "oracle": ORACLE,
        "server": {**server.to_dict(), "url": lane.server},
        "settings": {"k": session.k, "max_tokens": request.max_tokens,
                     "temperature": request.temperature, "top_p": request.top_p,
                     "seed": request.seed, "chat": request.chat},
        "prompt": request.prompt,
        "prompt_text": session.prompt_text,
        "prompt_ids": [],
        "token_chars": [],
        "machine": machine_info(),
    }
