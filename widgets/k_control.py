"""K, the number of tokens an oracle may propose per step: a slider and a spin box in step."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSlider, QSpinBox, QWidget

K_MIN, K_MAX = 1, 32


class KControl(QWidget):
    """Emits valueChanged(int) once per change, whichever half the user moved."""

    valueChanged = Signal(int)

    def __init__(self, value: int = 4, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._slider = QSlider(Qt.Orientation.Horizontal)
        self._spin = QSpinBox()
        for widget in (self._slider, self._spin):
            widget.setRange(K_MIN, K_MAX)
            widget.setValue(value)
        self._slider.setToolTip("tokens the oracle may propose per step")
        # Report settled values only: a drag or a typed "12" is one change, not several.
        self._slider.setTracking(False)
        self._spin.setKeyboardTracking(False)
        self._slider.valueChanged.connect(self._changed)
        self._spin.valueChanged.connect(self._changed)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("K"))
        layout.addWidget(self._slider, 1)
        layout.addWidget(self._spin)

    @property
    def slider(self) -> QSlider:
        return self._slider

    @property
    def spin_box(self) -> QSpinBox:
        return self._spin

    def value(self) -> int:
        return self._spin.value()

    def setValue(self, value: int) -> None:
        self._spin.setValue(value)  # clamped to the range; the slider follows in _changed

    def _changed(self, value: int) -> None:
        # Setting the partner to the same value emits nothing, so this runs once per change.
        if self._slider.value() != value:
            self._slider.setValue(value)
        elif self._spin.value() != value:
            self._spin.setValue(value)
        else:
            self.valueChanged.emit(value)
