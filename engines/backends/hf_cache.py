"""The keyword a transformers model takes its KV cache by.

Recent transformers releases renamed `past_key_values` to `cache`: the old name still works
there but prints a deprecation warning on every run and is due to go (5.40); older releases,
which pyproject.toml still admits, know only `past_key_values`. Asking the model's own
signature serves both without pinning a version.
"""

from __future__ import annotations

import inspect


def cache_keyword(model) -> str:
    """`"cache"` where `model.forward` takes that keyword, else `"past_key_values"`."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"
