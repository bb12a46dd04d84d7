"""What the window remembers between sessions, in QSettings (organisation and app "specviz").

Always the INI format in the user scope, so that tests can point `QSettings.setPath` at a
temporary folder and never touch a person's settings.
"""

from __future__ import annotations

import contextlib
import json
import math
import os

from PySide6.QtCore import QByteArray, QSettings

from ...engines.bounded_json import loads
from ...engines.host.run_spec import LaneSpec, ModelChoice, lane_from_dict, lane_to_dict
from .run_setup import MAX_LANES

# The first race: plain decoding against prompt lookup with auto K, which declines to draft
# where drafting cannot pay on this machine (a fixed K loses on most CPUs).
DEFAULT_LANES = (LaneSpec("none", 4), LaneSpec("prompt-lookup", 4, auto_k=True))


def qsettings() -> QSettings:
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, "specviz", "specviz")


class AppSettings:
    """Typed access to the stored values; each read falls back to a default."""

    def __init__(self, store: QSettings | None = None) -> None:
        self.store = store or qsettings()

    # ------------------------------------------------------------ models

    def model(self, default: ModelChoice) -> ModelChoice:
        data = self._json("model/choice", {})
        texts = {k: v for k, v in data.items() if isinstance(v, str)}
        threads = data.get("threads")
        return ModelChoice(texts.get("target", default.target),
                           texts.get("backend", default.backend), texts.get("device"),
                           threads if type(threads) is int and threads > 0 else None)

    def set_model(self, choice: ModelChoice) -> None:
        self._set_json("model/choice", choice.__dict__)

    def recent_models(self) -> list[str]:
        """Model paths picked with Browse…, newest first."""
        return [str(p) for p in self._json("model/recent", [])]

    def add_recent_model(self, path: str) -> None:
        recent = [path, *(p for p in self.recent_models() if p != path)]
        self._set_json("model/recent", recent[:8])

    def model_folders(self) -> list[str]:
        """Folders searched for models besides the tools' own stores."""
        return [str(p) for p in self._json("model/folders", [])]

    def set_model_folders(self, folders: list[str]) -> None:
        self._set_json("model/folders", list(dict.fromkeys(folders)))

    # ------------------------------------------------------------ lanes

    def lanes(self) -> list[LaneSpec]:
        """The lanes as they were left, every setting and input of each (stored and read as
        a run spec's lanes are, so a lane stored by an older specviz reads as it was meant,
        and a field added to LaneSpec is remembered without a change here)."""
        stored = self._json("lanes/configs", None)
        if not stored or not isinstance(stored, list):
            return list(DEFAULT_LANES)
        try:
            return [lane_from_dict(d) for d in stored][:MAX_LANES]
        except (KeyError, TypeError, ValueError, AttributeError):
            return list(DEFAULT_LANES)

    def set_lanes(self, lanes: list[LaneSpec]) -> None:
        self._set_json("lanes/configs", [lane_to_dict(lane) for lane in lanes])

    # ------------------------------------------------------------ view

    def theme(self) -> str:
        return str(self.store.value("view/theme", "dark"))

    def set_theme(self, name: str) -> None:
        self.store.setValue("view/theme", name)

    def prompt(self) -> str:
        return str(self.store.value("run/prompt", ""))

    def set_prompt(self, text: str) -> None:
        self.store.setValue("run/prompt", text)

    def temperature(self) -> float:
        return _number(self.store.value("run/temperature"), float, 0.0)

    def set_temperature(self, value: float) -> None:
        self.store.setValue("run/temperature", value)

    def max_tokens(self) -> int:
        return _number(self.store.value("run/max_tokens"), int, 256)

    def set_max_tokens(self, value: int) -> None:
        self.store.setValue("run/max_tokens", value)

    def window_layout(self) -> tuple[QByteArray | None, QByteArray | None]:
        """The window's geometry and its docks' and toolbars' state, as Qt saved them (None:
        never saved); the window restores them itself, as no widget lives here."""
        return self.store.value("window/geometry"), self.store.value("window/state")

    def set_window_layout(self, geometry: QByteArray, state: QByteArray) -> None:
        self.store.setValue("window/geometry", geometry)
        self.store.setValue("window/state", state)

    def sync(self) -> None:
        self.store.sync()

    # ------------------------------------------------------------ server keys

    def server_key(self, origin: str) -> str | None:
        keys = self._json("servers/keys", {})
        return keys.get(origin) if isinstance(keys, dict) else None

    def set_server_key(self, origin: str, key: str | None) -> None:
        """Store (or, with None, forget) a server's API key; the file becomes readable by
        this user only."""
        keys = self._json("servers/keys", {})
        keys = {k: v for k, v in (keys if isinstance(keys, dict) else {}).items() if k != origin}
        if key:
            keys[origin] = key
        self._set_json("servers/keys", keys)
        self.store.sync()
        with contextlib.suppress(OSError):
            os.chmod(self.store.fileName(), 0o600)

    # ------------------------------------------------------------ helpers

    def _json(self, key: str, default):
        """The value stored as JSON text (INI files keep their types that way); `default`
        where it is not JSON, nested too deep, or not of the default's type (a hand-edited
        file may hold anything)."""
        try:
            value = loads(str(self.store.value(key, "")))
        except ValueError:
            return default
        return value if default is None or type(value) is type(default) else default

    def _set_json(self, key: str, value) -> None:
        self.store.setValue(key, json.dumps(value))


def _number(value, kind, default):
    # INI files give back strings; a hand-edited file may give back anything.
    try:
        number = kind(value)
    except (TypeError, ValueError, OverflowError):
        return default
    return number if math.isfinite(number) else default
