"""K, the number of tokens an oracle may propose per step: a slider and a spin box in step,
and an "auto" box: K chosen every step from the cost profile (the slider then rests)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QSlider, QSpinBox, QWidget

K_MIN, K_MAX = 1, 32


class KControl(QWidget):
    """Emits valueChanged(int) once per change, whichever half the user moved."""

    valueChanged = Signal(int)
    autoChanged = Signal(bool)

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
        self.auto = QCheckBox("auto")
        self.auto.setToolTip("choose K every step for the most tokens per second, from this "
                             "machine's cost profile and the acceptance seen so far (0 = plain)")
        self.auto.toggled.connect(self._auto_toggled)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("K"))
        layout.addWidget(self._slider, 1)
        layout.addWidget(self._spin)
        layout.addWidget(self.auto)

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

    def is_auto(self) -> bool:
        return self.auto.isChecked()

    def set_auto(self, on: bool) -> None:
        self.auto.setChecked(on)

    def _auto_toggled(self, on: bool) -> None:
        self._slider.setEnabled(not on)
        self._spin.setEnabled(not on)
        self.autoChanged.emit(on)

    def _changed(self, value: int) -> None:
        # Setting the partner to the same value emits nothing, so this runs once per change.
        if self._slider.value() != value:
            self._slider.setValue(value)
        elif self._spin.value() != value:
            self._spin.setValue(value)
        else:
            self.valueChanged.emit(value)
