"""Every writer killed at every point of a write, as SQLite's crash tests do: a child process
runs the write with `atomic.crash_point` replaced by a function that sends itself SIGKILL at
the Nth point it reaches (no timing: each point is hit exactly), and the file afterwards is
the old one or the new one, never torn, never one save's half with another's. A first run
lists the points, so a writer that gains a stage is crashed there too.

And two processes changing one store of facts 100 times each lose none of the changes."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from specviz.engines import atomic
from specviz.engines.machine.json_file import read_dict, update_dict

# The child's prelude: kill this process at the STOP-th crash point (-1: none, list them).
PRELUDE = """
import os, signal, sys
from specviz.engines import atomic
STOP = int(sys.argv[1])
seen = []
def crash_point(stage):
    seen.append(stage)
    if len(seen) - 1 == STOP:
        os.kill(os.getpid(), signal.SIGKILL)
atomic.crash_point = crash_point
"""


def run_crashes(write: str, least: int, put_old, check) -> set:
    """The old state put back (`put_old`), then a child running `write` killed at each of its
    crash points in turn, `check(point)` after each; at least `least` points (a writer that
    lost its stages must not pass for lack of them). The states `check` saw ("old", "new"),
    so a test can ask that the kills landed on both sides."""
    code = PRELUDE + textwrap.dedent(write) + "\nprint('\\n'.join(seen))\n"
    put_old()
    listed = subprocess.run([sys.executable, "-c", code, "-1"], capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0, listed.stderr
    points = listed.stdout.splitlines()
    assert len(points) >= least, points
    seen = set()
    for index, point in enumerate(points):
        put_old()
        done = subprocess.run([sys.executable, "-c", code, str(index)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == -signal.SIGKILL, (point, done.stderr)
        seen.add(check(point))
    return seen


def test_a_file_replaced_whole_is_old_or_new_wherever_the_writer_dies(tmp_path):
    out = tmp_path / "figure.png"
    old, new = b"old picture " * 1000, b"new picture " * 2000
    write = f"""
        from pathlib import Path
        with atomic.written_atomically(Path({str(out)!r})) as temp:
            with open(temp, "wb") as f:
                f.write({new!r}[:5000])
                f.flush()
                atomic.crash_point("half written")
                f.write({new!r}[5000:])
    """

    def check(point: str) -> str:
        data = out.read_bytes()
        assert data in (old, new), f"torn at {point}: {len(data)} bytes"
        return "new" if data == new else "old"

    seen = run_crashes(write, 4, lambda: out.write_bytes(old), check)
    assert seen == {"old", "new"}


def test_a_store_changed_under_its_lock_is_old_or_new_and_stays_usable(tmp_path):
    store = tmp_path / "facts.json"
    write = f"""
        from pathlib import Path
        from specviz.engines.machine.json_file import update_dict
        update_dict(Path({str(store)!r}), lambda d: {{**d, "new": "x" * 4000}})
    """

    def check(point: str) -> str:
        data = json.loads(store.read_text())  # never torn: always JSON
        assert data in ({"old": 1}, {"old": 1, "new": "x" * 4000}), point
        # The dead writer's lock is the kernel's to release: the next change goes through.
        assert update_dict(store, lambda d: d) == data
        return "new" if "new" in data else "old"

    seen = run_crashes(write, 3, lambda: store.write_text('{"old": 1}'), check)
    assert seen == {"old", "new"}


def _medusa_pair(folder: Path) -> tuple[bytes, bytes]:
    from specviz.engines.medusa.heads import CONFIG_FILE, WEIGHTS_FILE

    return (atomic.committed(folder, CONFIG_FILE).read_bytes(),
            atomic.committed(folder, WEIGHTS_FILE).read_bytes())


MEDUSA_SAVE = """
    import torch
    from pathlib import Path
    from specviz.engines.medusa.heads import HeadsConfig, MedusaHeads, TargetId, save_heads
    def save(folder, value):
        heads = MedusaHeads(8, 2)
        for p in heads.parameters():
            torch.nn.init.constant_(p, value)
        config = HeadsConfig(TargetId("tiny", f"print-{value}", 8, 32), 2, 8,
                             training={"value": value})
        save_heads(heads, config, Path(folder))
"""


def test_medusa_heads_are_the_old_pair_or_the_new_pair_wherever_the_save_dies(tmp_path):
    """Weights and config are one unit: a kill between them never leaves one save's weights
    beside another's config (the pair read through the journal as the loader reads it)."""
    folder = tmp_path / "medusa"
    subprocess.run([sys.executable, "-c", textwrap.dedent(MEDUSA_SAVE) + "\nsave("
                    f"{str(tmp_path / 'old')!r}, 1.0)\nsave({str(tmp_path / 'new')!r}, 2.0)"],
                   check=True, timeout=120)
    old, new = _medusa_pair(tmp_path / "old"), _medusa_pair(tmp_path / "new")

    def put_old() -> None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(tmp_path / "old", folder)

    def check(point: str) -> str:
        pair = _medusa_pair(folder)
        assert pair in (old, new), f"a mixed or torn pair at {point}"
        return "new" if pair == new else "old"

    write = textwrap.dedent(MEDUSA_SAVE) + f"\nsave({str(folder)!r}, 2.0)"
    seen = run_crashes(write, 6, put_old, check)
    assert seen == {"old", "new"}


def test_a_save_cut_short_after_its_commit_is_finished_by_the_next(tmp_path):
    """A crash after the commit leaves the new pair readable; the next save settles it and
    leaves no journal or temporary beside the files."""
    folder = tmp_path / "head"
    atomic.replace_together(folder, {"a": lambda t: t.write_text("a1"),
                                     "b": lambda t: t.write_text("b1")})
    code = PRELUDE.replace("len(seen) - 1 == STOP", "stage == 'committed'") + textwrap.dedent(f"""
        from pathlib import Path
        atomic.replace_together(Path({str(folder)!r}), {{"a": lambda t: t.write_text("a2"),
                                                         "b": lambda t: t.write_text("b2")}})
    """)
    done = subprocess.run([sys.executable, "-c", code, "0"], capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL
    assert [atomic.committed(folder, n).read_text() for n in "ab"] == ["a2", "b2"]
    assert (folder / "a").read_text() == "a1"  # the rename had not happened
    atomic.replace_together(folder, {"a": lambda t: t.write_text("a3"),
                                     "b": lambda t: t.write_text("b3")})
    assert sorted(p.name for p in folder.iterdir()) == ["a", "b"]
    assert [(folder / n).read_text() for n in "ab"] == ["a3", "b3"]


def test_a_download_is_installed_whole_wherever_it_dies(tmp_path):
    target = tmp_path / "model.gguf"
    candidate = tmp_path / ".model.gguf.pull" / "model.gguf"
    old, new = b"GGUF old " * 5000, b"GGUF new " * 9000

    write = f"""
        from pathlib import Path
        from specviz.engines.models.download import _install
        from specviz.engines.models.registry import HfSource, ModelSpec
        spec = ModelSpec("m", "", "model.gguf", {len(new)}, {hashlib.sha256(new).hexdigest()!r},
                         "x", (), HfSource("r", "model.gguf"))
        _install(spec, Path({str(candidate)!r}), spec.sha256, Path({str(target)!r}), "test")
    """

    def put_old() -> None:
        target.write_bytes(old)
        candidate.parent.mkdir(exist_ok=True)
        candidate.write_bytes(new)

    def check(point: str) -> str:
        data = target.read_bytes()
        assert data in (old, new), f"torn at {point}"
        return "new" if data == new else "old"

    seen = run_crashes(write, 2, put_old, check)
    assert seen == {"old", "new"}


UPDATES = """
import sys
from pathlib import Path
from specviz.engines.machine.json_file import update_dict
who, store = sys.argv[1], Path(sys.argv[2])
for i in range(100):
    update_dict(store, lambda d: {**d, "count": d.get("count", 0) + 1, f"{who}{i}": i})
"""


def test_two_processes_changing_one_store_lose_no_change(tmp_path):
    store = tmp_path / "facts.json"
    children = [subprocess.Popen([sys.executable, "-c", UPDATES, who, str(store)])
                for who in ("a", "b")]
    assert [child.wait(timeout=240) for child in children] == [0, 0]
    data = read_dict(store)
    assert data["count"] == 200 and len(data) == 201


def test_a_new_file_takes_its_mode_from_the_umask(tmp_path):
    """As any new file here: 0666 less the umask (mkstemp's 0600 kept shared figures
    private, a fixed 0644 ignored a private umask)."""
    code = textwrap.dedent(f"""
        import os
        from specviz.engines import atomic
        os.umask(0o027)
        atomic.write_text({str(tmp_path / 'private.md')!r}, "x")
        os.umask(0o002)
        atomic.write_text({str(tmp_path / 'shared.md')!r}, "x")
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert (tmp_path / "private.md").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "shared.md").stat().st_mode & 0o777 == 0o664
