"""Render a model's Jinja chat template (from GGUF metadata or the tokenizer).

Both backends use this one renderer so that the same model gets the same prompt text
whichever backend runs it. Templates are untrusted input: they run in Jinja's sandbox.
"""

from __future__ import annotations

import datetime
from functools import lru_cache

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import SpecvizError


def _raise(message: str) -> None:
    raise TemplateError(message)


@lru_cache(maxsize=8)
def _compile(template: str):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(template)


def render_chat(
    template: str, messages: list[dict[str, str]], *, bos_token: str = "", eos_token: str = ""
) -> str:
    """The prompt text for `messages`, ending where the assistant's reply begins."""
    try:
        return _compile(template).render(
            messages=messages,
            add_generation_prompt=True,
            bos_token=bos_token,
            eos_token=eos_token,
        )
    except TemplateError as exc:
        raise SpecvizError(f"the model's chat template failed: {exc}; try --no-chat") from None
