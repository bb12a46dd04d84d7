"""The suite survives a native crash: run pytest on a test that dies of SIGSEGV."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

TESTS = '''
import os, signal

def test_before():
    assert True

def test_dies_in_native_code():
    os.kill(os.getpid(), signal.SIGSEGV)

def test_after():
    assert True
'''


def test_a_segfault_fails_its_test_and_the_rest_still_run(tmp_path):
    (tmp_path / "conftest.py").write_text(
        "from crash_report import pytest_handlecrashitem, pytest_report_header  # noqa\n")
    (tmp_path / "test_crash.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "1", "-p", "no:cacheprovider",
                           "-o", "addopts=", str(tmp_path)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "1 failed, 2 passed" in out, out
    assert "crashed while running 'test_crash.py::test_dies_in_native_code'" in out
    assert "died in native code" in out and "llama-cpp-python" in out and "CPU " in out
    assert "specviz machine: CPU" in out  # the header
