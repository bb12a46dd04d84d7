"""One lane: an oracle's run drawn as coloured text, with its controls and live figures."""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)
from superqt import QElidingLabel

from ...board.kinds import KIND_REJECTED, KIND_TARGET, kind_of
from ...board.lane_title import lane_title
from ...board.lanes_model import JOINED, MIXED
from ...board.legend_kinds import legend_kinds
from ...board.palette import Theme
from ...board.parting import Parting
from ...engines import events as ev
from ...engines.host.run_spec import LaneSpec, ServerSpec
from ...engines.oracles import INPUTS, ORACLE_INFO, ORACLES, is_plain
from ...engines.oracles import info as oracle_info
from ...engines.oracles.registry import (
    MODEL,
    SERVER,
    SERVER_KINDS,
    SPAWNED,
    lane_kinds,
    lane_words,
)
from ...engines.speedup import Speedup
from ...widgets.k_control import KControl
from ...widgets.token_view import Legend, TokenView
from .file_input import FileInput
from .model_combo import ModelCombo
from .spec_types import SpecTypes
from .stream_picker import StreamPicker

# What "auto" K means on a llama-server lane: the server's own draft length (K 0 in the spec).
SPAWNED_AUTO_TIP = ("auto: each type drafts up to llama.cpp's own default length; otherwise K "
                    "is each type's longest draft")


def editor_range(span: ev.Span | None, prompt_text: str,
                 user_prompt: str) -> tuple[int, int] | None:
    """Where a copied token's source lies in the prompt editor, or None when not in it.

    A span's characters index the rendered prompt (chat template around the user's text);
    the editor holds only the user's text, which sits inside at its first occurrence.
    """
    if span is None or span.chr_start is None or span.chr_end is None or not user_prompt:
        return None
    offset = prompt_text.find(user_prompt)
    start, end = span.chr_start - offset, span.chr_end - offset
    if offset < 0 or start < 0 or end > len(user_prompt) or start >= end:
        return None
    return start, end


def figures_text(figures: dict) -> str:
    """The lane's header line. In a race of N streams ("streams" in `figures`) its figures are
    the followed stream's, its tok/s that stream's pace, and its speedup the batch's."""
    rate = figures.get("acceptance_rate")
    return " · ".join([
        f"{figures.get('tokens', 0)} tokens",
        f"{'pace ' if 'streams' in figures else ''}{figures.get('tok_per_s', 0.0):.1f} tok/s",
        f"acceptance {'-' if rate is None else f'{rate:.0%}'}",
        f"{figures.get('mean_accepted_tokens', 0.0):.2f} tok/step",
        *([f"declined {figures.get('decline_rate') or 0.0:.0%}"] if "declined" in figures else []),
        speedup_text(figures),
    ])


def speedup_text(figures: dict) -> str:
    """The lane's speed over plain decoding's: its rounds once this race has joined them
    ("1.18× (1.09-1.27, 3 races): faster"), else this race's figure so far with the rounds
    before it (a race under way, cut short or with K changed in it). A lane of N streams:
    its batch's (batch_speedup_text)."""
    if "streams" in figures:
        return batch_speedup_text(figures.get("batch_speedup"), figures.get("race") == MIXED)
    speedup, rounds, race = figures.get("speedup"), figures.get("rounds"), figures.get("race")
    if rounds is not None and race == JOINED:
        return f"speedup {rounds_words(rounds)}"
    text = f"speedup {'-' if speedup is None else f'{speedup:.2f}×'}"
    if race == MIXED:
        text += " (K or a setting changed mid-race: not a round)"
    return text if rounds is None else f"{text} · before: {rounds_words(rounds, again=False)}"


def batch_speedup_text(speedup: Speedup | None, mixed: bool = False) -> str:
    """A lane of N streams: its batch's tokens/s over the plain lane's at the same N, with
    its interval over stretches where the race is long enough ("speedup in all 1.42×
    (1.30-1.55): faster"). Its followed stream's pace against plain's same stream is not the
    lane's speedup: the batch's streams accept differently."""
    if speedup is None:
        return "speedup in all -"
    text = f"speedup in all {speedup.ratio:.2f}×"
    if speedup.low is not None:
        text += f" ({speedup.low:.2f}-{speedup.high:.2f}): {speedup.verdict}"
    return text + (" (K changed mid-race)" if mixed else "")


def rounds_words(rounds: Speedup, again: bool = True) -> str:
    """A speedup with its interval and verdict; after one race, what gives an interval."""
    if rounds.low is None:
        return f"{rounds.ratio:.2f}× ({'race again for an interval' if again else '1 race'})"
    over = f"{rounds.rounds} races" if rounds.rounds > 1 else "1 race, by stretches"
    return f"{rounds.ratio:.2f}× ({rounds.low:.2f}-{rounds.high:.2f}, {over}): {rounds.verdict}"


def declined_tip(figures: dict) -> str:
    """Why the oracle proposed nothing, reason by reason (the figures line's tooltip)."""
    reasons = figures.get("declined")
    if not reasons:
        return "" if reasons is None else "the oracle proposed something at every step"
    lines = [f"{n} step{'s' if n != 1 else ''}: {ev.DECLINE_WORDS.get(r, r)}"
             for r, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    return "Steps with nothing proposed:\n" + "\n".join(lines)


def exit_layer_box() -> QSpinBox:
    """The early-exit oracle's L: how many of the target's layers draft."""
    box = QSpinBox(minimum=0, maximum=256, prefix="L = ")
    box.setSpecialValueText("L = auto")
    box.setToolTip("early-exit drafts with the target's first L layers, then its norm and LM "
                   "head (transformers backend); auto: three quarters of the layers")
    return box


def picked_inputs() -> tuple[str, ...]:
    """The inputs a lane has a model picker for: the registry's models (one picker per input
    name, shown for the oracles that read it)."""
    return tuple(name for name, each in INPUTS.items() if each.kind is MODEL)


def file_inputs() -> tuple[str, ...]:
    """The inputs a lane has a file picker for: the registry's files and folders (heads,
    corpora, memories; one per input name, shown for the oracles that read it)."""
    return tuple(name for name, each in INPUTS.items() if each.kind.file)


def reads(oracle: str, name: str) -> bool:
    """Whether a lane of this kind (an oracle, or a lane on a serving engine) reads the input."""
    described = ORACLE_INFO.get(oracle) or SERVER_KINDS.get(oracle)
    return described is not None and described.input(name) is not None


class LaneWidget(QFrame):
    """Controls (oracle, its inputs, K) over figures, messages, a legend and the text."""

    kChanged = Signal(str, int)
    autoChanged = Signal(str, bool, int)  # lane id, auto on, the fixed K to fall back to
    knobChanged = Signal(str, str, int)
    removeRequested = Signal(str)
    oracleChanged = Signal(str)
    configChanged = Signal()
    streamPicked = Signal(str, int)  # lane id, the stream its text should follow

    def __init__(self, lane_id: str, config: LaneSpec, theme: Theme, colour: str,
                 recent_models: list[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.lane_id = lane_id
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.prompt_text = ""  # the rendered prompt the run saw, for provenance highlights
        self.user_prompt = ""
        self.trace_path = None  # where this lane's run was recorded or replayed from
        self._replay_title: str | None = None
        self._replay_oracle: str | None = None
        self._given = config  # what config() keeps of the settings without a control here
        self.colour = colour
        # The title gives way to the lane's text: a replayed trace's file name would otherwise
        # set the lane's smallest width, and three such lanes push the window past the screen.
        self.swatch = QLabel()
        self.title = QElidingLabel()
        self.title.setTextFormat(Qt.TextFormat.PlainText)  # a file name, never markup
        bold = self.title.font()
        bold.setBold(True)
        self.title.setFont(bold)
        # Every kind of lane the registry declares: the oracles, then the serving engines (a
        # server at a URL, a llama-server started for the lane), each with its words as a tip.
        self.oracle = QComboBox()
        self.oracle.addItems(list(lane_kinds()))
        for index, name in enumerate(lane_kinds()):
            self.oracle.setItemData(index, lane_words(name), Qt.ItemDataRole.ToolTipRole)
        # A model picker per model input of the registry ("draft": the draft, tree and
        # cross-draft oracles' draft model).
        self.pickers = {name: ModelCombo(recent_models) for name in picked_inputs()}
        self.draft = self.pickers["draft"]  # the window checks a picked draft against the target
        self.draft.setPlaceholderText("pick a draft model")
        self.files = {name: FileInput(INPUTS[name]) for name in file_inputs()}
        self._draft_chosen = False  # given or picked (a llama-server lane has none by default)
        # A llama-server lane's speculation types (llama.cpp's own, chained).
        self.spec_types = SpecTypes()
        self.server = QLineEdit(placeholderText="server URL, e.g. http://127.0.0.1:8080",
                                toolTip="an OpenAI-compatible server (llama-server, vLLM, "
                                        "SGLang) whose speculation this lane shows")
        self.exit_layer = exit_layer_box()
        self.k = KControl()
        self._auto_tip = self.k.auto.toolTip()
        self.remove = QToolButton(text="✕", toolTip="Remove this lane")
        self.figures = QLabel(figures_text({}), wordWrap=True)
        self._text_pt, self._message_error = 10, False
        self.message = QLabel(wordWrap=True, visible=False)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                             | Qt.TextInteractionFlag.LinksAccessibleByMouse)
        self.message.linkActivated.connect(lambda _link: self.show_details())
        self._details = ""
        self.details_box: QMessageBox | None = None
        self.legend = Legend(theme)
        self.streams = StreamPicker()  # a race of N streams: the total, the stream shown
        self.streams.picked.connect(lambda i: self.streamPicked.emit(self.lane_id, i))
        self.view = TokenView(theme)
        self._controls = QWidget()
        self._layout()
        self.set_config(config)
        self.set_colour(colour)
        self.oracle.currentTextChanged.connect(self._on_oracle)
        for picker in self.pickers.values():
            picker.currentIndexChanged.connect(lambda _i: self.configChanged.emit())
        for picker in self.files.values():
            picker.changed.connect(self.configChanged.emit)
        self.server.editingFinished.connect(self.configChanged.emit)
        self.draft.picked.connect(self._on_draft_picked)
        self.spec_types.changed.connect(self._on_types)
        self.exit_layer.valueChanged.connect(self._on_exit_layer)
        self.k.valueChanged.connect(self._on_k)
        self.k.autoChanged.connect(self._on_auto)
        self.remove.clicked.connect(lambda: self.removeRequested.emit(self.lane_id))

    def _layout(self) -> None:
        controls = QGridLayout(self._controls)
        controls.setContentsMargins(0, 0, 0, 0)
        controls.addWidget(self.oracle, 0, 0)
        for picker in self.pickers.values():  # one oracle reads one model at most
            controls.addWidget(picker, 0, 1)
        controls.addWidget(self.exit_layer, 0, 1)  # shares the draft's cell: never both shown
        controls.addWidget(self.server, 0, 1)  # and so does a server lane's URL
        controls.addWidget(self.spec_types, 1, 0, 1, 2)  # a llama-server lane's, under its draft
        for row, picker in enumerate(self.files.values(), 2):  # a row each, shown where read
            controls.addWidget(picker, row, 0, 1, 2)
        controls.addWidget(self.k, 2 + len(self.files), 0, 1, 2)
        controls.setColumnStretch(1, 1)
        top = QHBoxLayout()
        top.addWidget(self.swatch)
        top.addWidget(self.title, 1)
        top.addWidget(self.remove)
        box = QVBoxLayout(self)
        box.setContentsMargins(6, 6, 6, 6)
        box.addLayout(top)
        box.addWidget(self._controls)
        box.addWidget(self.figures)
        box.addWidget(self.streams)
        box.addWidget(self.message)
        box.addWidget(self.legend)
        box.addWidget(self.view, 1)

    # ------------------------------------------------------------ configuration

    def oracle_name(self) -> str:
        return self._replay_oracle or self.oracle.currentText()

    def config(self) -> LaneSpec:
        """The lane's settings: what the controls show over what it was given (the oracle's
        other settings and server details have no control here and are kept, and so are the
        files its pickers hold, whichever oracle reads them; the oracle's settings are dropped
        when the oracle changes, a picked model where the oracle reads none). A llama-server
        lane is the one `specviz run --oracle llama-server --spec-type TYPES [--draft GGUF]
        [--k K]` makes: K auto is K 0, the server's own longest draft."""
        oracle = self.oracle.currentText()
        spawned = oracle == SPAWNED
        # Another oracle's settings are not this one's, even under one name (medusa's budget
        # 0 is its top chain; eagle's starts at 1).
        settings = dict(self._given.settings) if oracle == self._given.oracle else {}
        if _has_exit_layer(oracle):
            settings["exit_layer"] = self.exit_layer.value()
        inputs = {name: value for name, value in self._given.inputs.items()
                  if name not in self.pickers and name not in self.files}
        for name, picker in self.pickers.items():
            if self._reads(oracle, name) and picker.model():
                inputs[name] = picker.model()
        for name, picker in self.files.items():
            if picker.value():
                inputs[name] = picker.value()
        # A server's engine, key and draft colouring are kept (no control here); a lane on no
        # server keeps none (LaneSpec).
        server = replace(self._given.server or ServerSpec(),
                         url=self.server.text().strip() or None if oracle == SERVER else None,
                         spec=self.spec_types.spec() or None if spawned else None)
        return replace(self._given, oracle=oracle,
                       k=0 if spawned and self.k.is_auto() else self.k.value(), inputs=inputs,
                       auto_k=self.k.is_auto() and oracle not in SERVER_KINDS,
                       server=server, settings=settings)

    def set_config(self, config: LaneSpec) -> None:
        self._given = config
        self._draft_chosen = bool(config.inputs.get("draft"))
        server = config.server or ServerSpec()
        self.spec_types.set_types(server.spec)
        self.oracle.setCurrentText(config.oracle)
        server_k = config.oracle == SPAWNED and config.k == 0  # the server's own: auto
        if not server_k:
            self.k.setValue(max(1, config.k))
        self.k.set_auto(config.auto_k or server_k)
        for name, picker in self.pickers.items():
            picker.set_model(config.inputs.get(name))
        for name, picker in self.files.items():
            picker.set_value(config.inputs.get(name))
        self.exit_layer.setValue(int(config.settings.get("exit_layer", 0)))
        self.server.setText(server.url or "")
        self._on_oracle(config.oracle)

    def set_colour(self, colour: str) -> None:
        self.colour = colour
        self.setStyleSheet(f"LaneWidget {{ border-top: 4px solid {colour}; }}")
        self._update_title()

    def set_running(self, running: bool) -> None:
        """While running only K, auto K and L can change (the session takes them at its next
        step)."""
        for widget in (self.oracle, *self.pickers.values(), *self.files.values(),
                       self.spec_types, self.remove):
            widget.setEnabled(not running)

    def set_replay(self, name: str, header: dict) -> None:
        """A lane that plays a trace: no controls, the recorded choices in the title."""
        self._controls.hide()
        settings = header.get("settings", {})
        oracle = self._replay_oracle = header.get("oracle", "?")
        self._replay_title = lane_title(oracle, settings.get("k"), bool(settings.get("auto_k")),
                                        Path(name).stem)
        self.prompt_text = header.get("prompt_text", "")
        self.user_prompt = header.get("prompt", "")
        self.legend.set_kinds(legend_kinds(oracle))
        self._update_title()

    def set_controls_visible(self, visible: bool) -> None:
        self._controls.setVisible(visible and self._replay_title is None)
        self.remove.setVisible(visible)

    def set_theme(self, theme: Theme, colour: str) -> None:
        self.legend.set_theme(theme)
        self.view.set_theme(theme)
        self.set_colour(colour)

    # ------------------------------------------------------------ run

    def show_server(self, server: dict) -> None:
        """A server lane's legend, once its server has said what it does."""
        if server.get("speculation") is None:
            self.legend.set_kinds((KIND_TARGET,))
        else:
            self.legend.set_kinds((kind_of(server.get("source") or "draft"), KIND_TARGET,
                                   KIND_REJECTED))

    def start_run(self, prompt_text: str, user_prompt: str) -> None:
        self.clear()
        self.prompt_text, self.user_prompt = prompt_text, user_prompt

    def clear(self) -> None:
        self.view.clear()
        self.message.hide()
        self.figures.setText(figures_text({}))

    def append(self, event: ev.Event) -> None:
        if isinstance(event, ev.StepEvent):
            self.view.append_step(event)
        else:
            self._finished(event)

    def set_figures(self, figures: dict) -> None:
        self.figures.setText(figures_text(figures))
        self.figures.setToolTip(declined_tip(figures))

    def set_text_size(self, points: int) -> None:
        """The size of the lane's lines: title, figures, message and legend (presenting)."""
        self._text_pt = points
        for widget in (self.figures, self.swatch):
            widget.setStyleSheet(f"font-size: {points}pt;")
        self.title.setStyleSheet(f"font-size: {points}pt; font-weight: bold;")
        self.title.setText(self.title.text())  # elided again in the new size
        self.legend.set_point_size(points)
        self._style_message()

    def _style_message(self) -> None:
        colour = "#e5534b" if self._message_error else "palette(mid)"
        self.message.setStyleSheet(f"color: {colour}; font-size: {self._text_pt}pt;")

    def show_message(self, text: str, error: bool = True, details: str = "") -> None:
        """One line under the figures; `details`, when given, behind a link and in its tip."""
        self._message_error = error
        self._style_message()
        self._details = details
        if details:
            self.message.setTextFormat(Qt.TextFormat.RichText)
            self.message.setText(f'{html.escape(text)} · <a href="details">details</a>')
            self.message.setToolTip(f"<pre>{html.escape(details)}</pre>")
        else:
            self.message.setTextFormat(Qt.TextFormat.PlainText)
            self.message.setText(text)
            self.message.setToolTip("")
        self.message.show()

    def add_note(self, text: str) -> None:
        """Append a sentence to the lane's line (its end and the note read together)."""
        shown = self.message.text() if self.message.isVisible() and not self._details else ""
        self.show_message(f"{shown} · {text}" if shown else text, error=False)

    def show_parting(self, parting: Parting) -> None:
        """Mark the token where the text parted from plain decoding's and say why, once."""
        self.view.mark_parting(parting.step, parting.token, parting.tooltip())
        self.add_note(parting.note())

    def show_details(self) -> None:
        """The message's details in a window of their own (fixed-width: they hold tables)."""
        if not self._details:
            return
        if self.details_box is None:
            self.details_box = QMessageBox(self, windowTitle="Lane details")
            self.details_box.setModal(False)
        self.details_box.setText(f"<pre>{html.escape(self._details)}</pre>")
        self.details_box.show()

    def _finished(self, summary: ev.SummaryEvent) -> None:
        seconds = summary.wall_ms / 1000.0
        text = f"ended: {summary.reason}, {summary.totals.tokens} tokens in {seconds:.2f} s"
        if summary.error:
            self.show_message(f"{text}: {summary.error}")
        elif not self.message.isVisible():
            self.show_message(text, error=False)
        elif not self._message_error and not self._details:  # a note that came first
            self.show_message(f"{text} · {self.message.text()}", error=False)
        # else: a trace problem stays on screen as it is

    def _reads(self, oracle: str, name: str) -> bool:
        """Whether the lane reads the input now: a llama-server lane its draft file only where
        a type it chains drafts with one."""
        return reads(oracle, name) and (oracle != SPAWNED or self.spec_types.takes_draft())

    def _on_oracle(self, oracle: str) -> None:
        if oracle == SPAWNED and not self._draft_chosen:
            self.draft.setCurrentIndex(-1)  # no draft model until one is picked
        self._show_inputs(oracle)
        self.exit_layer.setVisible(_has_exit_layer(oracle))
        self.server.setVisible(oracle == SERVER)
        self.spec_types.setVisible(oracle == SPAWNED)
        self.k.setEnabled(not is_plain(oracle))
        self.k.auto.setToolTip(SPAWNED_AUTO_TIP if oracle == SPAWNED else self._auto_tip)
        self.legend.set_kinds(legend_kinds(oracle))
        self._update_title()
        self.oracleChanged.emit(self.lane_id)
        self.configChanged.emit()

    def _show_inputs(self, oracle: str) -> None:
        for name, picker in (*self.pickers.items(), *self.files.items()):
            picker.setVisible(self._reads(oracle, name))

    def _on_types(self) -> None:
        self._show_inputs(self.oracle.currentText())
        self._update_title()
        self.configChanged.emit()

    def _on_draft_picked(self, _name: str) -> None:
        self._draft_chosen = True

    def _on_exit_layer(self, value: int) -> None:
        self.knobChanged.emit(self.lane_id, "exit_layer", value)
        self.configChanged.emit()

    def _on_k(self, k: int) -> None:
        self.kChanged.emit(self.lane_id, k)
        self.configChanged.emit()

    def _on_auto(self, on: bool) -> None:
        self.autoChanged.emit(self.lane_id, on, self.k.value())
        self.configChanged.emit()

    def _update_title(self) -> None:
        name = self._replay_title or self.oracle_name()
        if self._replay_title is None and name == SPAWNED:
            name = f"{SPAWNED}: {self.spec_types.spec() or 'plain'}"
        self.swatch.setText(f"<b style='color:{self.colour}'>■</b>")
        self.title.setText(name)
        self.title.setToolTip(name)


def _has_exit_layer(oracle: str) -> bool:
    return oracle in ORACLES and oracle_info(oracle).setting("exit_layer") is not None
