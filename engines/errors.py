"""Errors a user can hit. Each carries one clear line for the person at the screen.

The command line prints `str(error)` on stderr and exits non-zero; the GUI shows it in the
lane or dialog concerned. Anything else escaping is a bug, and shows as a traceback.
"""


class SpecvizError(Exception):
    """Base class: the message is meant for the user, in one line."""


class ModelError(SpecvizError):
    """Unknown model name, missing or corrupt model file, failed download."""


class BackendError(SpecvizError):
    """A backend cannot load or run a model (device unavailable, bad file, ...)."""


class ContextOverflow(SpecvizError):
    """The prompt (plus what is asked for) does not fit the model's context."""


class IncompatibleModels(SpecvizError):
    """A draft model whose vocabulary does not match the target's."""


class TraceError(SpecvizError):
    """A trace file is corrupt or truncated; the message names the line."""


class BackendCrashed(BackendError):
    """A backend's native code died (a signal) when it was tried in a child process."""
