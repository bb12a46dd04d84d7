"""Faults a child `specviz` meets as on a user's machine: a full disk and a read-only folder.

A full disk is the file-size limit (RLIMIT_FSIZE): a write past it fails with EFBIG, as one
on a full disk fails with ENOSPC, after writing what fits. A read-only folder is its mode
(0555) with, where the tests run as root, root's power to write anyway dropped from the
child's capabilities (CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, out of its bounding set before
it starts), so the folder refuses the child as it would refuse any user.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def specviz(*argv: object, fsize: int | None = None, read_only: bool = False,
            env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m specviz ARGV` in a child: files past `fsize` bytes fail to grow, and with
    `read_only` a folder's mode holds even for root."""
    return python("-m", "specviz", *argv, fsize=fsize, read_only=read_only, env=env,
                  timeout=timeout)


def python(*argv: object, fsize: int | None = None, read_only: bool = False,
           env: dict[str, str] | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess:
    """`python ARGV` in a child under the faults asked (see `specviz`)."""
    def faults() -> None:
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails, no signal kills
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        if read_only and os.geteuid() == 0:
            libc = ctypes.CDLL(None, use_errno=True)
            for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
                if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                    raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    return subprocess.run([sys.executable, *map(str, argv)], preexec_fn=faults,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def files_in(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its bytes (None: a folder): what a fault must not touch."""
    return {p.relative_to(folder).as_posix(): None if p.is_dir() else p.read_bytes()
            for p in sorted(folder.rglob("*"))}


def one_line(stderr: str) -> str:
    """The child's stderr, asserted to be one `specviz:` line and no traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specviz: "), stderr
    return lines[0]
