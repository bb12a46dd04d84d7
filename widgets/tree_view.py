"""The candidate tree of one step (tree and lookahead oracles): every node the target scored,
coloured accepted, rejected or never reached, the accepted path in bold on a shaded row. For
lookahead, the n-gram pool's size and the Jacobi window as a small grid below it."""

from __future__ import annotations

from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..board.describe import node_why, prob, shown, span_text
from ..board.kinds import KIND_OTHER, KIND_REJECTED
from ..board.palette import DARK, Theme
from ..engines.events import NODE_ACCEPTED, NODE_REJECTED, StepEvent, TreeNode

COLUMNS = ("token", "state", "p_draft", "p_target", "why", "detail")


class TreeView(QWidget):
    """Shows the tree of the inspected step; a linear step says it has none."""

    def __init__(self, theme: Theme = DARK, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._theme = theme
        self._event: StepEvent | None = None
        self.header = QLabel()
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.pool = QLabel()
        self.window = QTableWidget(0, 0)
        self.window.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.header, self.tree, self.pool, self.window):
            layout.addWidget(widget)
        self.clear()

    @property
    def event(self) -> StepEvent | None:
        """The step shown."""
        return self._event

    @property
    def items(self) -> list[QTreeWidgetItem]:
        """The node items, in the step's node order."""
        return list(self._items)

    def show_step(self, event: StepEvent) -> None:
        self._event = event
        self.tree.clear()
        self._items: list[QTreeWidgetItem] = []
        if event.tree is None:
            self.header.setText(f"step {event.step} · {event.oracle}: a linear step, no tree")
            self._show_lookahead(event)
            return
        path = set(event.path or ())
        for i, node in enumerate(event.tree):
            parent = self._items[node.parent] if node.parent >= 0 else self.tree
            self._items.append(self._node_item(parent, node, i in path, node_why(event, i)))
        self.tree.expandAll()
        for c in range(len(COLUMNS) - 1):  # deep branches and the why sentences, uncut
            self.tree.resizeColumnToContents(c)
        n_rejected = sum(1 for n in event.tree if n.state == NODE_REJECTED)
        self.header.setText(
            f"step {event.step} · {event.oracle} · {len(event.tree)} nodes in one pass · "
            f"path {len(path)} accepted · {n_rejected} rejected · "
            f"{len(event.tree) - len(path) - n_rejected} never reached"
        )
        self._show_lookahead(event)

    def clear(self) -> None:
        self._event = None
        self._items = []
        self.tree.clear()
        self.header.setText("no step selected")
        self._show_lookahead(None)

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        if self._event is not None:
            self.show_step(self._event)

    def _node_item(self, parent, node: TreeNode, on_path: bool, why: str) -> QTreeWidgetItem:
        item = QTreeWidgetItem(parent, [shown(node.text), node.state, prob(node.p_draft),
                                        prob(node.p_target), why, node.detail or ""])
        if node.span is not None:  # where a copied node came from: the prompt or an earlier run
            for c in range(len(COLUMNS)):
                item.setToolTip(c, span_text(node.span))
        kind = KIND_OTHER if node.state == NODE_ACCEPTED else KIND_REJECTED
        colour = QColor(self._theme.kind_colour(kind))
        if node.state not in (NODE_ACCEPTED, NODE_REJECTED):  # never reached: faded
            colour.setAlpha(110)
        font = item.font(0)
        font.setBold(on_path)
        font.setStrikeOut(node.state == NODE_REJECTED)
        for c in range(len(COLUMNS)):
            item.setForeground(c, QBrush(colour))
            item.setFont(c, font)
            if on_path:
                item.setBackground(c, QBrush(QColor(self._theme.shade)))
        return item

    def _show_lookahead(self, event: StepEvent | None) -> None:
        state = event.lookahead if event is not None else None
        self.pool.setVisible(state is not None)
        self.window.setVisible(state is not None)
        if state is None:
            return
        self.pool.setText(f"n-gram pool: {state.pool_size} · new this step: {state.new_ngrams}"
                          f" · Jacobi window: {len(state.window)} levels")
        width = max((len(row) for row in state.window), default=0)
        self.window.setRowCount(len(state.window))
        self.window.setColumnCount(width)
        for r, row in enumerate(state.window):
            for c, text in enumerate(row):
                self.window.setItem(r, c, QTableWidgetItem(shown(text)))
