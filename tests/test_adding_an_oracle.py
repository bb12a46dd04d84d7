"""Adding an oracle that reads a file and paints its tokens in a colour of its own is its
module, its registry entry and its row of kinds (docs/architecture.md, "Adding an oracle"):
nothing else names it. The oracle here exists only in this test; it runs in `specviz run`,
its trace exports to a page that colours it, and the window's lane offers it, a file picker
for its input, its legend and its colour."""

from __future__ import annotations

import json
import re
import sys
import types
from collections.abc import Sequence
from pathlib import Path

import pytest

from specviz.app.cli.main import main
from specviz.board import kinds
from specviz.board.kinds import Kind
from specviz.engines.host import run_spec as rs
from specviz.engines.oracles import INPUTS, ORACLE_INFO, Oracle, Proposal
from specviz.engines.oracles.registry import CORPUS, Input, OracleInfo
from specviz.engines.trace import read_trace

PROMPT = "def add(a, b):\n"


class MirrorOracle(Oracle):
    """Proposes what followed the context's last two tokens in its text file."""

    name = "mirror"
    source = "mirror"

    def __init__(self, corpus: Sequence[int]) -> None:
        super().__init__()
        self.corpus = list(corpus)

    def propose(self, context: Sequence[int], k: int) -> Proposal:
        tail = list(context[-2:])
        at = next((i for i in range(len(self.corpus) - 1, len(tail) - 1, -1)
                   if self.corpus[i - len(tail):i] == tail), None)
        return Proposal([] if at is None else self.corpus[at:at + k], self.source)


def build(parts):
    return MirrorOracle(parts.inputs["mirror_corpus"])


# 1. The registry entry: its source and its file input.
MIRROR = OracleInfo("mirror", "what followed the last two tokens in a text file", ("mirror",),
                    inputs=(Input("mirror_corpus", CORPUS, "text file the mirror oracle copies "
                                  "from", required=True, label="mirror corpus"),))
# 2. Its row of kinds: the words of its legend and its colour in every theme.
MIRRORED = Kind("mirrored", "mirrored text", ("mirror",),
                "#88ccee", "#00607a", "#a6e4ff", "#004a5e")


@pytest.fixture
def mirror(monkeypatch):
    """The mirror oracle: a module under the oracles' package, a registry entry and a row of
    kinds, nothing else."""
    module = types.ModuleType("specviz.engines.oracles.mirror")
    module.build = build  # 3. its module
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(ORACLE_INFO, "mirror", MIRROR)
    for each in MIRROR.inputs:
        monkeypatch.setitem(INPUTS, each.name, each)
    monkeypatch.setitem(kinds.KINDS, MIRRORED.name, MIRRORED)
    return MIRROR


def run(model_dir: Path, trace: Path, *args: str) -> None:
    assert main(["run", "--target", str(model_dir), "--backend", "transformers", "--no-chat",
                 "--prompt", PROMPT, "--max-tokens", "24", "--k", "4", "--trace", str(trace),
                 *args]) == 0


@pytest.fixture
def mirror_trace(mirror, tiny_model_dir, tmp_path) -> Path:
    """A mirror lane's trace, its file the text plain decoding wrote: some of its guesses hold."""
    plain, corpus = tmp_path / "plain.jsonl", tmp_path / "corpus.txt"
    run(tiny_model_dir, plain, "--oracle", "none")
    corpus.write_text(PROMPT + "".join(step.text for step in read_trace(plain).steps))
    trace = tmp_path / "mirror.jsonl"
    run(tiny_model_dir, trace, "--oracle", "mirror", "--mirror-corpus", str(corpus))
    return trace


def test_it_runs_and_the_page_colours_it(mirror_trace, tmp_path):
    from specviz.app.export.page import write_page
    from specviz.board.legend_kinds import legend_kinds

    proposed = [p for step in read_trace(mirror_trace).steps for p in step.proposed]
    assert {p.source for p in proposed} == {"mirror"}
    assert any(p.accepted for p in proposed) and kinds.kind_of("mirror") == "mirrored"
    assert legend_kinds("mirror") == ("mirrored", "target", "rejected")
    page = write_page([mirror_trace], tmp_path / "race.html").read_text()
    assert ".k-mirrored { color: var(--mirrored); }" in page
    assert f"--mirrored:{MIRRORED.light}" in page and f"--mirrored:{MIRRORED.dark}" in page
    data = json.loads(re.search(r'id="specviz-data">(.*?)</script>', page).group(1))
    assert data["labels"]["mirrored"] == "mirrored text"
    assert data["lanes"][0]["legend"] == ["mirrored", "target", "rejected"]
    painted = {p["c"] for step in data["lanes"][0]["steps"] for p in step["proposed"]}
    assert painted == {"mirrored", "rejected"}


def test_the_window_offers_it_with_a_file_picker_its_legend_and_colour(
        mirror, mirror_trace, app_env, qtbot, monkeypatch):
    from PySide6.QtGui import QTextCursor
    from PySide6.QtWidgets import QFileDialog

    from specviz.app.views.lane_widget import LaneWidget
    from specviz.board.palette import DARK

    lane = LaneWidget("lane1", rs.LaneSpec("none", 4), DARK, "#fff", [])
    qtbot.addWidget(lane)
    lane.show()
    assert lane.oracle.findText("mirror") >= 0
    lane.oracle.setCurrentText("mirror")
    picker = lane.files["mirror_corpus"]
    assert picker.isVisible() and not lane.draft.isVisible()
    chosen = str(mirror_trace.parent / "corpus.txt")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (chosen, ""))
    picker.browse.click()
    assert lane.config() == rs.LaneSpec("mirror", 4, inputs={"mirror_corpus": chosen})
    assert lane.legend.kinds == ("mirrored", "target", "rejected")
    assert "mirrored text" in lane.legend.label("mirrored").text()
    for step in read_trace(mirror_trace).steps:
        lane.view.append_step(step)
    lane.view.flush()
    accepted = next(p.text for s in read_trace(mirror_trace).steps for p in s.proposed
                    if p.accepted and p.text.strip())
    document = lane.view.editor.document()
    cursor = QTextCursor(document)
    cursor.setPosition(document.toPlainText().index(accepted) + 1)
    assert cursor.charFormat().foreground().color().name() == MIRRORED.dark


def test_a_heads_folder_is_browsed_for_as_a_folder(app_env, qtbot, monkeypatch, tmp_path):
    from PySide6.QtWidgets import QFileDialog

    from specviz.app.views.lane_widget import LaneWidget
    from specviz.board.palette import DARK

    lane = LaneWidget("lane1", rs.LaneSpec("medusa", 4), DARK, "#fff", [])
    qtbot.addWidget(lane)
    lane.show()
    heads = lane.files["medusa_heads"]
    assert heads.isVisible() and not lane.files["eagle_head"].isVisible()
    assert heads.path.placeholderText().startswith("default: beside the target")
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(tmp_path))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: pytest.fail("a file"))
    heads.browse.click()
    assert lane.config().inputs == {"medusa_heads": str(tmp_path)}
