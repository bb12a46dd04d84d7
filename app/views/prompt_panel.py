"""The prompt panel: the prompt, sample prompts, the target model and decoding settings."""

from __future__ import annotations

import os
from dataclasses import replace
from importlib.resources import files

from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QPlainTextEdit,
    QSpinBox,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from ...engines.backends import BACKENDS
from ...engines.backends.stream_cache import MAX_STREAMS
from ...engines.host.run_spec import ModelChoice
from .model_combo import ModelCombo

DEVICES = ("auto", "cpu", "cuda", "mps")
STREAMS_TIP = ("users at once: every lane, plain decoding's too, decodes this many prompts in "
               "one batched pass per step (the prompt here, then the sample prompts in turn); "
               "1: one prompt, as a single user")


# The prompt a first start shows: a code edit whose answer copies a 25-line function, the
# work where prompt lookup pays even on a 2-core CPU (docs/results/first-run.md).
FIRST_SAMPLE = "code edit logging"


def first_prompt() -> str:
    return sample_prompts().get(FIRST_SAMPLE, "")


def sample_prompts() -> dict[str, str]:
    """Sample prompts shipped in assets/prompts, by title ("code edit rename")."""
    folder = files("specviz").joinpath("assets/prompts")
    entries = sorted((e for e in folder.iterdir() if e.name.endswith(".txt")), key=lambda e: e.name)
    return {e.name[:-4].replace("-", " "): e.read_text(encoding="utf-8") for e in entries}


class PromptPanel(QWidget):
    def __init__(self, recent_models: list[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._given: ModelChoice | None = None  # the last set_model_choice's
        self.samples = QComboBox()
        self.samples.addItem("Sample prompts…")
        self._samples = sample_prompts()
        self.samples.addItems(list(self._samples))
        self.samples.activated.connect(self._load_sample)
        self.editor = QPlainTextEdit()
        self.editor.setPlaceholderText("Type a prompt, or pick a sample above")
        # A lane that follows another stream of a race shows that stream's prompt here (its
        # copied tokens link into it); the person's own prompt is kept aside meanwhile.
        self._own: str | None = None
        self._editable = True
        self.stream_note = QLabel(visible=False, wordWrap=True)
        self.stream_note.linkActivated.connect(lambda _link: self.show_own())
        self.model = ModelCombo(recent_models)
        self.backend = QComboBox()
        self.backend.addItems(list(BACKENDS))
        self.device = QComboBox()
        self.device.addItems(list(DEVICES))
        self.threads = QSpinBox(minimum=0, maximum=os.cpu_count() or 1,
                                specialValueText="auto",
                                toolTip="CPU threads per model (auto: all cores but one, "
                                        "leaving one to draw; both of two)")
        self.temperature = QDoubleSpinBox(minimum=0.0, maximum=2.0, singleStep=0.1, decimals=2)
        self.max_tokens = QSpinBox(minimum=1, maximum=4096, value=128, singleStep=16)
        self.streams = QSpinBox(minimum=1, maximum=MAX_STREAMS, value=1, toolTip=STREAMS_TIP)
        self._layout()

    def _layout(self) -> None:
        form = QFormLayout()
        form.addRow("Target", self.model)
        form.addRow("Backend", self.backend)
        form.addRow("Device", self.device)
        form.addRow("Threads", self.threads)
        form.addRow("Temperature", self.temperature)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow("Streams", self.streams)
        box = QVBoxLayout(self)
        box.addWidget(self.samples)
        box.addWidget(self.stream_note)
        box.addWidget(self.editor, 1)
        box.addLayout(form)

    # ------------------------------------------------------------ values

    def prompt(self) -> str:
        """The person's prompt, what a race decodes (its stream 1), whichever stream's the
        editor shows."""
        return self.editor.toPlainText() if self._own is None else self._own

    def shown(self) -> str:
        """The prompt the editor shows: the one highlights index into."""
        return self.editor.toPlainText()

    def set_prompt(self, text: str) -> None:
        self._own = None
        self._show(text, "")

    def show_stream(self, stream: int, text: str) -> None:
        """Show a race's stream `stream` (0-based) prompt, read-only, the person's kept
        aside; the person's own where it is theirs (stream 1 of the race they typed)."""
        if text == self.prompt():
            self.show_own()
            return
        if self._own is None:
            self._own = self.editor.toPlainText()
        self._show(text, f"Stream {stream + 1}'s prompt, read-only "
                         '(yours is kept for the next race) · <a href="own">back to yours</a>')

    def show_own(self) -> None:
        """The person's prompt again, editable where the panel is."""
        if self._own is not None:
            own, self._own = self._own, None
            self._show(own, "")

    def _show(self, text: str, note: str) -> None:
        self.editor.setPlainText(text)
        self.stream_note.setText(note)
        self.stream_note.setVisible(bool(note))
        self._lock()

    def _lock(self) -> None:
        """The editor takes typing only where the panel is editable and shows the person's."""
        self.editor.setReadOnly(not self._editable or self._own is not None)

    def model_choice(self) -> ModelChoice:
        device = self.device.currentText()
        shown = {"target": self.model.model(), "backend": self.backend.currentText(),
                 "device": None if device == "auto" else device,
                 "threads": self.threads.value() or None}
        # What has no field here (the context length, the dtype) stays as it was given
        # (`specviz shot --n-ctx`), else the defaults.
        return replace(self._given, **shown) if self._given else ModelChoice(**shown)

    def set_model_choice(self, choice: ModelChoice) -> None:
        self._given = choice
        self.model.set_model(choice.target)
        self.backend.setCurrentText(choice.backend)
        self.device.setCurrentText(choice.device or "auto")
        self.threads.setValue(choice.threads or 0)

    def set_editable(self, editable: bool) -> None:
        """Read-only while a run or a replay owns the prompt (highlights index into it)."""
        self._editable = editable
        self._lock()
        for widget in (self.samples, self.model, self.backend, self.device, self.threads,
                       self.temperature, self.max_tokens, self.streams):
            widget.setEnabled(editable)

    # ------------------------------------------------------------ provenance highlight

    def highlight(self, start: int, end: int, colour: QColor) -> None:
        """Mark characters [start, end) of the prompt, and scroll them into view."""
        cursor = QTextCursor(self.editor.document())
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        selection = QTextEdit.ExtraSelection()
        selection.cursor = cursor
        fmt = QTextCharFormat()
        fmt.setBackground(colour)
        selection.format = fmt
        self.editor.setExtraSelections([selection])
        view = QTextCursor(cursor)
        view.clearSelection()
        self.editor.setTextCursor(view)
        self.editor.ensureCursorVisible()

    def clear_highlight(self) -> None:
        self.editor.setExtraSelections([])

    def _load_sample(self, index: int) -> None:
        if index > 0:
            self.set_prompt(self._samples[self.samples.itemText(index)])
        self.samples.setCurrentIndex(0)
