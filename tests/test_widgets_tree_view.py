"""TreeView: nodes by state, the accepted path marked, lookahead's pool and window."""

from __future__ import annotations

import dataclasses
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

from specviz.engines.events import (
    NODE_ACCEPTED,
    NODE_REJECTED,
    NODE_UNREACHED,
    TARGET_CORRECTION,
    Lookahead,
    Span,
    StepEvent,
    TargetToken,
    Timing,
    Totals,
    TreeNode,
)
from specviz.widgets.tree_view import COLUMNS, TreeView

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


def test_each_node_says_why_its_branch_was_taken_or_not(qtbot):
    view = TreeView()
    qtbot.addWidget(view)
    view.show_step(tree_step())
    why = [it.text(COLUMNS.index("why")) for it in view.items]
    assert why[0] == "taken: the target's argmax"
    assert why[1] == "not taken: the target's argmax here is '␣the'"  # its sibling on the path
    assert why[2] == "not taken: the target's argmax here is '␣cow'"  # the step's own token
    assert why[3] == "never judged: below '␣a', which was not taken"


def test_a_node_from_an_earlier_run_shows_where_it_came_from(qtbot):
    span = Span(40, 41, run="run-7", excerpt="def «scale»(values)")
    step = tree_step()
    tree = (TreeNode(-1, 5, " the", "suffix", NODE_ACCEPTED, 0.6, 0.7, span=span),
            *step.tree[1:])
    view = TreeView()
    qtbot.addWidget(view)
    view.show_step(dataclasses.replace(step, tree=tree))
    tip = view.items[0].toolTip(0)
    assert "earlier run (run-7), its token 40" in tip and "«scale»" in tip
    assert view.items[1].toolTip(0) == ""


def test_lookahead_shows_pool_and_window(qtbot):
    view = TreeView()
    qtbot.addWidget(view)
    view.show_step(tree_step(Lookahead(42, (("a", "b", "c"), ("d", "e", "f")), 3)))
    assert "42" in view.pool.text() and view.window.isVisibleTo(view)
    assert (view.window.rowCount(), view.window.columnCount()) == (2, 3)
    assert view.window.item(1, 2).text() == "f"
    view.clear()
    assert view.items == [] and view.header.text() == "no step selected"
