"""A llama-server that specviz starts itself, for one lane, and stops with it.

It listens on 127.0.0.1 on a free port, runs the run's model with its threads and a context
of its own, one slot (or `parallel` slots, for as many clients at once: llama.cpp splits the
context between them), `/metrics` on, and the lane's speculation (llama_speculation.py); a
plain one (no types) is the lane's baseline. Its output goes to a log file, never to a pipe
(a pipe nobody reads fills up and stalls the server). A server that cannot start is one line
with the log's reason (llama.cpp says why on its last error lines); one that dies while a
lane streams from it is one line too, and the steps already streamed are the lane's.

It is stopped (SIGTERM to its process group, then SIGKILL) when the lane's run ends or is
abandoned, at interpreter exit, and, on Linux, by the kernel when the thread that started it
dies (a native crash or `os._exit` skip the first two), so no server outlives specviz.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx

from .. import events as ev
from .. import llama_build
from ..errors import SpecvizError
from ..loop.session import RunSettings
from . import connect, llama_server
from .llama_speculation import Speculation, known_types
from .server_session import ServerSession
from .sse import Endpoint, ServerError

HOST = "127.0.0.1"
READY_TIMEOUT_S = 180.0  # loading a large GGUF from a cold disk takes a while
STOP_GRACE_S = 5.0
DEFAULT_CTX = 4096
MAX_PARALLEL = 64  # slots: clients served at once
PLAIN = Speculation()  # no speculation: a lane's baseline
# How llama.cpp's log says why it stopped: an argument it refused (printed before its usage
# text), its error lines (level E, after a timestamp), or, from a crash, a line of its own.
_ARGUMENT = re.compile(r"^error while handling argument")
_LEVEL = re.compile(r"^\d+\.\d+\.\d+\.\d+ ([A-Z]) (.*)$")
_CRASH = re.compile(r"error|failed|abort|assert|terminate|what\(\)|exception", re.IGNORECASE)
_SOURCE = re.compile(r"^(?:[a-z_]+\s+)?[A-Za-z_0-9:()]+:\s+")  # `srv    load_model: `
_GENERIC = re.compile(r"exiting due to|cleaning up before exit")
# llama-server logs this and goes on serving without speculation (seen with a draft that is
# not an EAGLE-3 head): for a lane that asked for it, a failure to start.
_SPEC_FAILED = "failed to initialize speculative decoding context"
_BIND = re.compile(r"couldn't bind|address already in use", re.IGNORECASE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class SpawnedServer:
    """A llama-server of ours, from start (ready to serve, or one line why not) to `stop()`."""

    def __init__(self, model: Path, speculation: Speculation = PLAIN, threads: int = 2,
                 ctx: int = DEFAULT_CTX, binary: Path | None = None,
                 ready_timeout_s: float = READY_TIMEOUT_S, metrics: bool = True,
                 parallel: int = 1) -> None:
        self.binary = binary or llama_build.require()
        self.model = Path(model)
        self.speculation = speculation
        self.parallel = parallel
        if not 1 <= parallel <= MAX_PARALLEL:
            raise SpecvizError(f"a llama-server of ours serves 1 to {MAX_PARALLEL} clients at "
                               f"once, not {parallel}")
        if not self.model.is_file():
            raise SpecvizError(f"no such model file: {self.model}")
        speculation.check(known_types(self.binary) if speculation.types else ())
        self.argv_tail = ["-m", str(self.model), "-t", str(threads), "-c", str(ctx),
                          "--parallel", str(parallel), "--no-webui", "--offline",
                          "--log-colors", "off",
                          *(["--metrics"] if metrics else []), *speculation.arguments()]
        fd, name = tempfile.mkstemp(prefix="specviz-llama-server-", suffix=".log")
        os.close(fd)
        self.log_path = Path(name)
        self.proc: subprocess.Popen | None = None
        self._finalizer = None
        self._start(ready_timeout_s)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.url)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # ------------------------------------------------------------ starting

    def _start(self, timeout_s: float) -> None:
        for attempt in range(2):  # another process may take the free port first: once more
            self.port = free_port()
            self.url = f"http://{HOST}:{self.port}"
            self._launch()
            try:
                self._wait_ready(timeout_s)
                self._check_speculation()
                return
            except SpecvizError:
                self.stop(keep_log=True)
                if attempt or not _BIND.search(self.log_text()):
                    raise

    def _launch(self) -> None:
        argv = [str(self.binary), "--host", HOST, "--port", str(self.port), *self.argv_tail]
        # The server runs exactly these arguments: llama.cpp also reads LLAMA_ARG_* variables.
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
        # OpenMP's own waits: sleeping at once (passive) put a futex wake in every one of a
        # step's barriers, a third of the server's quiet speed. A busy machine is met by the
        # thread count instead (server_lanes.spawned: the cores free at its start).
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True,
                                         preexec_fn=_dies_with_parent())
        # Runs once: from stop(), or when the object is dropped, or at interpreter exit.
        self._finalizer = weakref.finalize(self, _terminate, self.proc, self.log_path)

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0, trust_env=False) as client:  # 127.0.0.1: no proxy
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise SpecvizError(f"llama-server did not start: {self.reason()} "
                                       f"({_exit_words(self.proc.returncode)}; log: "
                                       f"{self.log_path})")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(self.url + "/health").status_code == 200:
                        return
                time.sleep(0.1)
        raise SpecvizError(f"llama-server did not become ready within {timeout_s:g} s "
                           f"(log: {self.log_path})")

    def _check_speculation(self) -> None:
        log = self.log_text()
        if not self.speculation.plain and _SPEC_FAILED in log:
            line = next(x for x in log.splitlines() if _SPEC_FAILED in x)
            raise SpecvizError(f"llama-server could not set up {self.speculation.label}: "
                               f"{line.split(_SPEC_FAILED, 1)[1].lstrip(': ')} (log: "
                               f"{self.log_path})")

    # ------------------------------------------------------------ its log

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def reason(self) -> str:
        """The log's last line that says what went wrong, without llama.cpp's prefixes."""
        return log_reason(self.log_text())

    def death_line(self) -> str:
        code = self.proc.returncode if self.proc else None
        why = self.reason()
        return (f"llama-server (pid {self.pid}) died midway ({_exit_words(code)}"
                f"{'; ' + why if why != NO_REASON else ''}); the tokens so far are kept "
                f"(log: {self.log_path})")

    # ------------------------------------------------------------ stopping

    def stop(self, keep_log: bool = False) -> None:
        """Stop the server (its whole process group), once; the log is removed unless a
        message names it (`keep_log`, or the server died by itself)."""
        if self._finalizer is None or not self._finalizer.alive:
            return
        if keep_log:
            _, _, (proc, _), _ = self._finalizer.detach()
            _terminate(proc, None)
        else:
            self._finalizer()

    def __enter__(self) -> SpawnedServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop(keep_log=exc[0] is not None)


NO_REASON = "it said nothing about why"


def log_reason(text: str) -> str:
    """The line of a llama.cpp log that says why it stopped, in one line without llama.cpp's
    prefixes: a refused argument, else its last specific error line, else a crash's line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    found = next((line for line in lines if _ARGUMENT.match(line)), None)
    if found is None:
        errors = [m[2] for m in map(_LEVEL.match, lines) if m and m[1] == "E"]
        specific = [e for e in errors if not _GENERIC.search(e)]
        found = (specific or errors or [None])[-1]
        found = _SOURCE.sub("", found) if found else None
    if found is None:
        # A crash's own line comes first, its backtrace after it.
        found = next((line for line in lines if _CRASH.search(line)
                      and not _LEVEL.match(line)), None)
    if found is None:
        return NO_REASON
    found = " ".join(found.split())
    return found if len(found) <= 200 else found[:199] + "…"


def _exit_words(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit status {code}"


def _terminate(proc: subprocess.Popen, log_path: Path | None) -> None:
    """SIGTERM to the server's process group, SIGKILL after a grace; reaped either way. Its
    log is removed where given and the server was still serving (stopped by us: nothing to
    say); one that died by itself keeps it, for the line that names it."""
    if log_path is not None and proc.poll() is None:
        with contextlib.suppress(OSError):
            log_path.unlink()
    if proc.poll() is None:
        for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # what it left behind
            os.killpg(proc.pid, signal.SIGKILL)


def _dies_with_parent():
    """On Linux, a function the child runs before exec that has the kernel send it SIGTERM
    when the thread that started it ends (a crash included). Only from the main thread: a
    server started from a worker thread would die with that thread."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not \
            threading.main_thread():
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    term = int(signal.SIGTERM)
    return lambda: prctl(pr_set_pdeathsig, term)


# ---------------------------------------------------------------- a lane's session on it


class SpawnedSession(ServerSession):
    """A ServerSession on a server of its own, which it stops when its run ends, fails or is
    abandoned, or when it is closed."""

    def __init__(self, process: SpawnedServer, settings: RunSettings) -> None:
        self.process = process
        endpoint = process.endpoint
        engine, server = connect(endpoint, "llama.cpp")
        if server.k is None and process.speculation.longest_draft is not None:
            server = replace(server, k=process.speculation.longest_draft)
        # Its /props may list no types although it speculates: what it was started with.
        spec = process.speculation
        server = replace(server, speculation=None if spec.plain else spec.label,
                         source=llama_server._source(list(spec.types)))
        super().__init__(endpoint, engine, server, settings, metrics=True)

    def __iter__(self) -> Iterator[ev.Event]:
        return self._guarded()

    def _guarded(self) -> Iterator[ev.Event]:
        try:
            yield from self._run()
        except ServerError:
            if self._died():
                raise ServerError(self.process.death_line()) from None
            raise
        finally:
            self.close()

    def _died(self) -> bool:
        """Whether the server is gone (its end may lag the broken connection a little)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.proc.wait(1.0)
        return not self.process.alive()

    def close(self) -> None:
        self.process.stop()


def spawned_session(speculation: Speculation, model: Path, threads: int,
                    settings: RunSettings, ctx: int = DEFAULT_CTX,
                    binary: Path | None = None) -> SpawnedSession:
    """A lane's session on a llama-server started for it; closing the session (or the end
    of its run) stops the server. One line where the speculation is refused, no llama-server
    is built, or the server does not start."""
    process = SpawnedServer(model, speculation, threads=threads, ctx=ctx, binary=binary)
    try:
        return SpawnedSession(process, settings)
    except BaseException:
        process.stop(keep_log=True)
        raise
