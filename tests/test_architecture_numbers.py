"""docs/architecture.md's walk table says what benchmarks/spec_walk.py reads from the code: a
change that lengthens or shortens the spec's way through the rooms changes the script's
numbers, and this test fails until the table is written again from them."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import spec_walk  # noqa: E402  (a script, not a package)

TABLE = "| read from the code | before | now |"
ROWS = {"functions the spec stays in": "stays", "modules they live in": "modules",
        "calls that climb back up the layers": "climbs"}
BEFORE_ROOMS = "6b41a6a"  # the tree the "before" column was read from (#41)


def doc_table() -> dict[str, tuple[int, int]]:
    """The walk table's rows: the script's name for each, its before and now columns."""
    lines = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines()
    start = lines.index(TABLE) + 2  # past the header and its rule
    rows = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        label, before, now = (cell.strip() for cell in line.strip("|").split("|"))
        rows[ROWS[label]] = (int(before), int(now))
    return rows


def test_the_now_column_is_what_the_script_reads_from_the_code():
    assert {name: now for name, (_, now) in doc_table().items()} == spec_walk.numbers()


def test_the_before_column_is_what_the_script_reads_from_the_tree_before_the_rooms(tmp_path):
    tree = tmp_path / "specviz"
    archive = subprocess.run(["git", "archive", BEFORE_ROOMS], cwd=ROOT, capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"{BEFORE_ROOMS} is not in this clone (a shallow one?)")
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    before = {name: old for name, (old, _) in doc_table().items()}
    assert before == spec_walk.numbers(tree)
