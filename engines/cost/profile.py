"""Hardware cost profile: what one forward pass of n tokens costs at a given context length.

Speculative decoding pays off only when verifying K+1 tokens at once costs little more than
one token. On a GPU that holds; on a CPU a batch of 4 can cost three times one token. The
profile measures it on the machine in hand: for a few context lengths, the forward time of
batches of 1..32 tokens, each repeated and reduced to its median.

Three modules, one name: the profile's data and its pricing (profile_data.py), measuring it
(profile_measure.py), storing and reading it (profile_store.py). Callers read all three
through this one (`prof.load`, `prof.measure`, `prof.keep`, `prof.Profile`); a test that
injects timings patches profile_measure, where `measure` looks them up.
"""

from __future__ import annotations

from .profile_data import (
    BATCHES,
    CONTEXTS,
    PROFILE_VERSION,
    REPEATS,
    Profile,
    dtype_key,
    routed_rows,
    table,
)
from .profile_measure import (
    SETTLE,
    estimate_seconds,
    measure,
    progress_lines,
    step_costs,
    time_forward,
    time_in_loop,
    time_left,
)
from .profile_noise import uneven
from .profile_store import (
    Say,
    keep,
    load,
    planned_variant,
    profile_path,
    profiles_dir,
    read,
    save,
    store,
    threads_run,
)

__all__ = [
    "BATCHES", "CONTEXTS", "PROFILE_VERSION", "REPEATS", "SETTLE",
    "Profile", "Say", "dtype_key", "estimate_seconds", "keep", "load", "measure",
    "planned_variant", "profile_path", "profiles_dir", "progress_lines", "read", "routed_rows",
    "save", "step_costs", "store", "table", "threads_run", "time_forward", "time_in_loop",
    "time_left", "uneven",
]
