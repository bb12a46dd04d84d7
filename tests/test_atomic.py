"""engines/atomic.py: a file is replaced whole or left as it was, and a failure is one line."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from specviz.engines import atomic
from specviz.engines.errors import SpecvizError


def test_replaced_whole_with_its_mode(tmp_path):
    out = tmp_path / "figure.png"
    out.write_bytes(b"old")
    atomic.write_bytes(out, b"new picture", mode=0o600)
    assert out.read_bytes() == b"new picture"
    assert out.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["figure.png"]


def test_a_failure_inside_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "profile.json"
    out.write_text("the old profile")
    with pytest.raises(RuntimeError), atomic.written_atomically(out) as temp:
        temp.write_text("half of the new")
        raise RuntimeError("the writer failed midway")
    assert out.read_text() == "the old profile"
    assert [p.name for p in tmp_path.iterdir()] == ["profile.json"]


def test_a_missing_folder_is_one_line_naming_the_file(tmp_path):
    out = tmp_path / "no" / "such" / "trace.png"
    with pytest.raises(SpecvizError, match=r"^cannot write .*trace\.png: No such file"):
        atomic.write_text(out, "x")
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_leaves_the_old_file(tmp_path):
    """RLIMIT_FSIZE in a child: the new bytes do not fit, the old file stays whole."""
    out = tmp_path / "table.md"
    out.write_text("old table\n")
    script = textwrap.dedent(f"""
        import resource, signal
        from specviz.engines import atomic
        from specviz.engines.errors import SpecvizError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
        try:
            atomic.write_text({str(out)!r}, "x" * 5000)
        except SpecvizError as exc:
            print(exc)
    """)
    said = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert said.stdout.startswith(f"cannot write {out}: File too large"), said
    assert out.read_text() == "old table\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.md"]
