"""Lanes on serving engines: llama-server, vLLM, SGLang, or any OpenAI-compatible server.

specviz does not serve here: it streams a completion from the engine and turns what the engine
reveals about speculation into step events (see `steps.py`), so a server lane is drawn,
traced and summed like a local one.
"""

from __future__ import annotations

from types import ModuleType

from . import generic, llama_server, sglang, vllm
from .info import ServerInfo
from .sse import Endpoint, ServerError, get_json

ENGINES = {"llama.cpp": llama_server, "vllm": vllm, "sglang": sglang, "openai": generic}
ENGINE_NAMES = ("auto", *ENGINES)
OWNERS = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llama.cpp"}  # /v1/models owned_by


def connect(endpoint: Endpoint, engine: str = "auto") -> tuple[ModuleType, ServerInfo]:
    """Which engine serves at `endpoint` and what it lets a request change (one line if the
    server cannot be reached or is not a completion server)."""
    if engine not in ENGINE_NAMES:
        raise ServerError(f"unknown server engine {engine!r}; one of {', '.join(ENGINE_NAMES)}")
    models = get_json(endpoint, "/v1/models")
    model, owner = _first_model(models)
    if engine == "auto":
        engine = OWNERS.get(owner, "openai")
    if engine in ("auto", "openai", "llama.cpp"):
        props = llama_server.props(endpoint)
        if llama_server.detect(props):
            return llama_server, llama_server.info(endpoint, props)
        if engine == "llama.cpp":
            raise ServerError(f"{endpoint.url} is not a llama-server (no /props)")
    if models is None:
        raise ServerError(f"{endpoint.url} has no /v1/models: not an OpenAI-compatible server")
    if engine in ("vllm", "sglang"):
        module = ENGINES[engine]
        return module, module.info(model, module.version(endpoint))
    return generic, generic.info(model)


def _first_model(models) -> tuple[str, str]:
    data = (models.get("data") if isinstance(models, dict) else None) or []
    first = data[0] if data and isinstance(data[0], dict) else {}
    return str(first.get("id", "default")), str(first.get("owned_by", ""))


__all__ = ["ENGINES", "ENGINE_NAMES", "Endpoint", "ServerError", "ServerInfo", "connect"]
