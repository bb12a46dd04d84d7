"""llama-server for the server-lane tests and benchmarks: specviz's own build
(engines/llama_build.py, `specviz llama-server build`) and servers started on it
with raw llama-server arguments (engines/servers/spawn.py). Where it is not built, the live
tests are skipped with the reason.

    python tests/llama_server.py --build     # the same as `specviz llama-server build`
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specviz.engines import llama_build
from specviz.engines.llama_build import ENV, cache_dir, cmake_flags, package_version
from specviz.engines.servers.llama_speculation import Speculation
from specviz.engines.servers.spawn import SpawnedServer, free_port

__all__ = ["ENV", "RunningServer", "binary", "build", "cache_dir", "cmake_flags", "free_port",
           "package_version"]


def binary() -> Path | None:
    return llama_build.binary()


def build() -> Path:
    return llama_build.build(say=lambda text: print(text, file=sys.stderr, flush=True))


class RunningServer(SpawnedServer):
    """A llama-server on 127.0.0.1 and a free port with these raw arguments, until closed;
    without /metrics unless asked (as a server a person starts by hand usually is)."""

    def __init__(self, path: Path, model: Path, *extra: str, threads: int = 2,
                 metrics: bool = False) -> None:
        super().__init__(model, Speculation(extra=extra), threads=threads, ctx=2048,
                         binary=path, ready_timeout_s=60.0, metrics=metrics)

    def last_words(self) -> str:
        return self.log_text()[-400:]

    def close(self) -> None:
        self.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="store_true", help="build it if it is not built")
    args = parser.parse_args()
    found = binary()
    if found is None and args.build:
        found = build()
    print(found or "not built (specviz llama-server build)")
