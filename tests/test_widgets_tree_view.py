"""TreeView: nodes by state, the accepted path marked, lookahead's pool and window."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

from specviz.engines.events import (
    NODE_ACCEPTED,
    NODE_REJECTED,
    NODE_UNREACHED,
    TARGET_CORRECTION,
    Lookahead,
    StepEvent,
    TargetToken,
    Timing,
    Totals,
    TreeNode,
)
from specviz.widgets.tree_view import TreeView

pytestmark = pytest.mark.gui


def tree_step(lookahead: Lookahead | None = None) -> StepEvent:
    tree = (
        TreeNode(-1, 5, " the", "tree", NODE_ACCEPTED, 0.6, 0.7),
        TreeNode(-1, 6, " a", "tree", NODE_REJECTED, 0.3, 0.2, "mismatch"),
        TreeNode(0, 7, " cat", "tree", NODE_REJECTED, 0.5, 0.1, "mismatch"),
        TreeNode(1, 8, " dog", "tree", NODE_UNREACHED, 0.9, 0.4, "unreached"),
    )
    return StepEvent(3, "tree", 2, 10, (), TargetToken(9, " cow", TARGET_CORRECTION, 0.5, 1.0),
                     " the cow", Timing(1, 2, 0), Totals(2, 1, 4, 1, 1, 2, 0), tree=tree,
                     path=(0,), lookahead=lookahead)


def test_nodes_hang_under_their_parents_with_their_state(qtbot):
    view = TreeView()
    qtbot.addWidget(view)
    view.show_step(tree_step())
    items = view.items
    assert view.tree.topLevelItemCount() == 2
    assert items[2].parent() is items[0] and items[3].parent() is items[1]
    assert [it.text(1) for it in items] == ["accepted", "rejected", "rejected", "unreached"]
    assert items[0].font(0).bold() and not items[1].font(0).bold()
    assert items[1].font(0).strikeOut() and items[0].text(0) == "␣the"
    assert "4 nodes" in view.header.text() and "1 never reached" in view.header.text()
    assert not view.window.isVisibleTo(view)


def test_lookahead_shows_pool_and_window(qtbot):
    view = TreeView()
    qtbot.addWidget(view)
    view.show_step(tree_step(Lookahead(42, (("a", "b", "c"), ("d", "e", "f")), 3)))
    assert "42" in view.pool.text() and view.window.isVisibleTo(view)
    assert (view.window.rowCount(), view.window.columnCount()) == (2, 3)
    assert view.window.item(1, 2).text() == "f"
    view.clear()
    assert view.items == [] and view.header.text() == "no step selected"
