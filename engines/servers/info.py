"""What a server is and what it lets a request change, learned before a lane starts."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ServerInfo:
    engine: str  # llama.cpp, vLLM, SGLang, or "OpenAI-compatible" when unrecognised
    model: str
    build: str  # the engine's own version line, for the trace and a failure's message
    speculation: str | None  # the speculative method it runs, None: none (or not said)
    source: str = "draft"  # a source (registry.SERVED): how its accepted drafts are coloured
    k: int | None = None  # its draft length, where it says
    k_per_request: bool = False  # a request may set the draft length
    off_per_request: bool = False  # a request may turn speculation off

    def to_dict(self) -> dict:
        return asdict(self)
