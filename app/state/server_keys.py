"""API keys for server lanes kept in the window's settings.

A key is stored per server origin (scheme://host:port) and reaches the engine process as a
`secret` message just before the run: the engine keeps it in its own environment under a
name of its own (`SPECVIZ_KEY_…`), and the lane names that variable, as `--api-key-env` does
on the command line. So the key never enters a run spec, a trace or a log line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from urllib.parse import urlsplit

from ...engines.host.run_spec import LaneSpec
from ...engines.host.server_lanes import KEY_PREFIX
from ...engines.oracles.registry import SERVER

KeyFor = Callable[[str], str | None]  # an origin's stored key, if any


def origin(url: str) -> str:
    """scheme://host:port of a server URL: the key is the server's, not a path's."""
    parts = urlsplit(url.strip() if "://" in url else f"http://{url.strip()}")
    port = parts.port or {"https": 443}.get(parts.scheme, 80)
    return f"{parts.scheme}://{parts.hostname}:{port}"


def env_name(url: str) -> str:
    return KEY_PREFIX + hashlib.sha256(origin(url).encode()).hexdigest()[:12].upper()


def with_keys(lanes: dict[str, LaneSpec], key_for: KeyFor
              ) -> tuple[dict[str, LaneSpec], dict[str, str]]:
    """The lanes, server lanes naming their stored key's variable; and the secrets to send
    (variable -> key). A lane that already names a variable keeps it."""
    secrets: dict[str, str] = {}
    out = {}
    for lane_id, lane in lanes.items():
        url = lane.server.url if lane.oracle == SERVER else None
        key = key_for(origin(url)) if url else None
        if key and lane.server.api_key_env is None:
            name = env_name(url)
            secrets[name] = key
            lane = replace(lane, server=replace(lane.server, api_key_env=name))
        out[lane_id] = lane
    return out, secrets
