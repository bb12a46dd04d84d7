"""Facts about this machine saved whole or not at all: a full disk leaves the file as it was
and nothing beside it (the callers measure again next time)."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys

from write_faults import files_in

from specviz.engines.machine.json_file import read_dict, write_dict


def test_a_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "new" / "facts.json"
    write_dict(path, {"a": 1})
    write_dict(path, {"b": 2})
    assert read_dict(path) == {"b": 2} and [p.name for p in path.parent.iterdir()] == [
        "facts.json"]


def test_a_full_disk_leaves_the_file_as_it_was_and_nothing_beside_it(tmp_path):
    path = tmp_path / "facts.json"
    write_dict(path, {"old": 1})
    before = files_in(tmp_path)

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))

    code = ("import sys; from pathlib import Path\n"
            "from specviz.engines.machine.json_file import write_dict\n"
            "try:\n"
            f"    write_dict(Path({str(path)!r}), {{'new': 'x' * 1000}})\n"
            "except OSError as exc:\n"
            "    sys.exit(f'OSError {exc.errno}')\n")
    done = subprocess.run([sys.executable, "-c", code], preexec_fn=small_files,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.strip() == "OSError 27", done.stderr
    assert files_in(tmp_path) == before and json.loads(path.read_text()) == {"old": 1}
