"""SIGTERM ends `specviz run` as Ctrl-C does, with one line and the trace whole (it ended
with status 143 and no word); an export that fails says one line and nothing else, whatever
its format (a GIF onto a full disk said 19 lines of Qt's "This plugin does not support
propagateSizeHints()" first)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from race_traces import record_race
from write_faults import one_line, python, specviz

from specviz.engines.trace import read_trace

# The run paced (each step 20 ms later): the tiny model's whole run is over in a second,
# sooner than a test could be sure to signal it mid-run. Nothing else is changed.
PACED_RUN = """
import sys, time
from specviz.engines.host import lanes
steps = lanes.LocalLane.steps
def paced(self):
    for event in steps(self):
        time.sleep(0.02)
        yield event
lanes.LocalLane.steps = paced
from specviz.app.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(("signum", "word"), [(signal.SIGTERM, "terminated"),
                                              (signal.SIGHUP, "hung up"),
                                              (signal.SIGQUIT, "quit")])
def test_an_ending_signal_ends_a_run_with_one_line_and_its_trace_whole(
        tiny_gguf_path, tmp_path, signum, word):
    """SIGHUP (a closed terminal) and SIGQUIT (Ctrl-\\) as SIGTERM: they ended the run with
    status 129 and 131 and no word. (On the tiny GGUF: how a run ends is not the backend's,
    and the child starts in a second, not the seconds torch takes to import.)"""
    trace = tmp_path / "run.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-c", PACED_RUN, "run", "--target", str(tiny_gguf_path), "--no-chat",
         "--prompt", "def add(a, b):", "--max-tokens", "400", "--k", "2", "--oracle",
         "prompt-lookup", "--json", "--trace", str(trace)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_steps(trace, child)
        child.send_signal(signum)
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 128 + signum, err
    assert one_line(err) == f"specviz: {word}"
    read = read_trace(trace)
    assert read.problem is None and len(read.steps) >= 3


def _wait_for_steps(trace, child: subprocess.Popen, steps: int = 3) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and child.poll() is None:
        if trace.exists() and trace.read_bytes().count(b"\n") > steps:
            return
        time.sleep(0.1)
    raise AssertionError(f"the run never started (exit {child.poll()})")


def test_sigterm_left_as_it_was_once_main_returns():
    """Tests call `main` in their own process: its handler must not outlive it."""
    # As they were, not SIG_DFL: under nohup SIGHUP starts ignored, and stays so.
    code = ("import signal\nfrom specviz.app.cli.main import main\n"
            "SIGS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)\n"
            "before = [signal.getsignal(s) for s in SIGS]\n"
            "main(['run', '--target', '/nowhere/m.gguf', '--prompt', 'x'])\n"
            "main(['models', 'list'])\n"
            "assert [signal.getsignal(s) for s in SIGS] == before\n")
    done = python("-c", code, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def traces(tiny_gguf_path, tmp_path_factory):
    """On the tiny GGUF: what an export onto a full disk says is not the model's."""
    return record_race(tiny_gguf_path, tmp_path_factory.mktemp("ending-traces"),
                       max_tokens=16)


@pytest.mark.parametrize("name", ["race.gif", "race.mp4", "race.html"])
def test_an_export_onto_a_full_disk_is_one_line(name, traces, tmp_path):
    out = tmp_path / name
    done = specviz("export", *traces, out, "--fps", "5", fsize=20_000, timeout=300,
                   env={"QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 2, done.stderr
    assert one_line(done.stderr).startswith(f"specviz: cannot write {out}")
    assert sorted(os.listdir(tmp_path)) == []
