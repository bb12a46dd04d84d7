"""A prompt, corpus, memory or trace that is not a regular file, or a text larger than a run
can use, is one line at once, before a byte is tokenized: `--prompt-file /dev/zero` read
until it was killed (12.8 GB in 60 s), a FIFO's open waited for a writer forever, and a 50 MB
prompt was tokenized whole (50 s, 3.6 GB) before it was refused."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time

import pytest
from write_faults import one_line

from specviz.engines import text_file
from specviz.engines.errors import SpecvizError


def _fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _huge(tmp_path):
    path = tmp_path / "huge.txt"
    with open(path, "wb") as f:  # sparse: no disk spent
        f.truncate(50 << 20)
    return path


KINDS = {"/dev/zero": (lambda _: "/dev/zero", "is not a regular file (a device)"),
         "fifo": (_fifo, "is not a regular file (a pipe)"),
         "folder": (lambda p: p, "is not a regular file (a folder)"),
         "50 MB": (_huge, "is 52,428,800 bytes, more than a run can use")}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("option", ["--prompt-file", "--ngram-corpus"])
def test_a_text_that_is_no_file_or_too_large_is_one_line_at_once(option, kind, tiny_model_dir,
                                                                 tmp_path):
    make, said = KINDS[kind]
    path = make(tmp_path)
    prompt = ["--prompt", "def add(a, b):"] if option != "--prompt-file" else []
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "specviz", "run", "--target", str(tiny_model_dir), "--backend",
         "transformers", "--no-chat", "--max-tokens", "8", "--oracle", "ngram", *prompt,
         option, str(path)], preexec_fn=_memory_bounded, capture_output=True, text=True,
        timeout=120)
    assert done.returncode == 2, done.stderr
    assert said in one_line(done.stderr)
    assert time.monotonic() - began < 60


def _memory_bounded() -> None:
    """6 GB of address space: reading /dev/zero whole dies of it (torch takes some)."""
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))


def test_the_limit_follows_the_context():
    assert text_file.limit_for(4096) == 4096 * text_file.BYTES_PER_TOKEN
    assert text_file.limit_for(0) == text_file.limit_for(None) == text_file.MAX_BYTES
    assert text_file.limit_for(10**9) == text_file.MAX_BYTES


def test_the_limit_is_exact(tmp_path):
    path = tmp_path / "prompt.txt"
    path.write_text("x" * 101)
    assert text_file.read_text(path, "prompt file", limit=101) == "x" * 101
    with pytest.raises(SpecvizError, match="is 101 bytes, more than a run can use "
                                           r"\(at most 100\)"):
        text_file.read_text(path, "prompt file", limit=100)


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo"])
def test_a_trace_or_memory_that_is_no_file_is_one_line(kind, tmp_path, tiny_model_dir):
    path = KINDS[kind][0](tmp_path)
    for argv, said in ((["export", str(path), str(tmp_path / "out.html")],
                        "is not a regular file, not a specviz trace"),
                       (["run", "--target", str(tiny_model_dir), "--backend", "transformers",
                         "--no-chat", "--prompt", "x", "--max-tokens", "4", "--oracle",
                         "suffix", "--suffix-memory", str(path)],
                        "cannot be a suffix memory: it is not a regular file")):
        done = subprocess.run([sys.executable, "-m", "specviz", *argv], capture_output=True,
                              text=True, timeout=120, preexec_fn=_memory_bounded)
        assert done.returncode == 2 and said in one_line(done.stderr), done.stderr


@pytest.mark.parametrize("lane, said", [
    ({"oracle": "ngram", "ngram_corpus": "/dev/zero"}, "is not a regular file (a device)"),
    ({"oracle": "suffix", "suffix_corpus": "/dev/zero"}, "is not a regular file (a device)"),
    ({"oracle": "suffix", "suffix_memory": "/dev/zero"}, "cannot be a suffix memory: it is "
                                                         "not a regular file"),
])
def test_a_lanes_files_are_asked_before_any_model_loads(lane, said):
    """A corpus or memory that can never be read is refused by the lane's check, which runs
    before the target loads (7 s of loading a transformers model before it was said)."""
    from specviz.engines.host.run_builder import check_lane
    from specviz.engines.host.run_spec import LaneSpec

    with pytest.raises(SpecvizError, match=re.escape(said)):
        check_lane(LaneSpec(**lane))
    check_lane(LaneSpec(lane["oracle"], suffix_memory="off"))  # nothing given: nothing asked
