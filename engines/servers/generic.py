"""Any other OpenAI-compatible server: tokens as they stream, speculation not reported.

Each chunk is taken as one step; a server that speculates and streams one step per chunk shows
its accepted tokens as drafts, and nothing is known about its rejected ones.
"""

from __future__ import annotations

from .chunks import Chunk, openai_chunk
from .info import ServerInfo

NAME = "OpenAI-compatible server"


def info(model: str) -> ServerInfo:
    return ServerInfo(engine=NAME, model=model, build=NAME, speculation=None)


def request_fields(k: int | None, server: ServerInfo) -> dict:
    return {"stream_options": {"include_usage": True}}


def chunk(data: dict, index: int) -> Chunk | None:
    return openai_chunk(data, index)
