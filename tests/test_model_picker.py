"""The window's model pickers: registry names, this machine's models grouped by tool, a Hub name
typed in, a folder added; a Hub name fetched through the window's progress dialog."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from specviz.app.views import model_combo
from specviz.app.views.model_combo import BROWSE, HUB, ModelCombo
from specviz.engines.models.local import LocalModel
from tests.hub_server import HubServer, Repo

FOUND = [LocalModel("llama3.2:1b", "gguf", 1_300_000_000, "Q4_K_M", "Ollama",
                    Path("/o/blobs/sha256-aaa")),
         LocalModel("org/tiny", "transformers", 500_000, None, "Hugging Face cache",
                    Path("/hf/models--org--tiny/snapshots/abc"))]


@pytest.fixture
def app_env(app_env, tmp_path, monkeypatch):
    """The window's test set-up (settings and specviz home in a temporary folder), and no tool's
    store of this machine: the pickers list only what a test lays out."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "llama"))
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.setattr(model_combo, "_found", None)
    return app_env


def texts(combo: ModelCombo) -> list[str]:
    return [combo.itemText(i) for i in range(combo.count())]


def test_pickers_group_this_machines_models_after_the_registry(app_env, qtbot, monkeypatch):
    monkeypatch.setattr(model_combo, "_found", FOUND)
    combo = ModelCombo(["/models/recent.gguf"])
    qtbot.addWidget(combo)
    shown = [t for t in texts(combo) if t]  # separators have no text
    assert shown[:4] == ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b",
                         "qwen2.5-coder-1.5b"]
    assert shown[4:] == ["Ollama", "llama3.2:1b (Q4_K_M, 1.3 GB)", "Hugging Face cache",
                         "org/tiny (0.0 GB)", "recent.gguf", HUB, BROWSE]
    header = combo.findText("Ollama")
    assert not model_combo.QComboBox.model(combo).item(header).isEnabled()
    combo.setCurrentIndex(combo.findText("llama3.2:1b (Q4_K_M, 1.3 GB)"))
    assert combo.model() == "/o/blobs/sha256-aaa"


def test_a_hub_name_typed_in_is_picked_and_remembered(app_env, qtbot, monkeypatch):
    combo = ModelCombo([])
    qtbot.addWidget(combo)
    picked, browsed = [], []
    combo.picked.connect(picked.append)
    combo.browsed.connect(browsed.append)
    answers = iter([("hf.co/Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M", True),
                    ("not a name", True)])
    monkeypatch.setattr(model_combo.QInputDialog, "getText", lambda *a: next(answers))
    combo.activated.emit(combo.findText(HUB))
    assert combo.model() == "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M"
    assert combo.currentText() == "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M"
    assert picked == browsed == ["Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M"]
    combo.activated.emit(combo.findText(HUB))  # not a Hub name: the choice stays
    assert combo.model() == "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M" and len(picked) == 1


def test_a_folder_added_in_the_window_is_searched_and_remembered(app_env, qtbot, tmp_path):
    from specviz.app.main_window import MainWindow

    folder = tmp_path / "my-models"
    folder.mkdir()
    (folder / "mine-Q8_0.gguf").write_bytes(b"GGUF" + b"\0" * 100)
    window = MainWindow()
    qtbot.addWidget(window)
    window.dialogs.add_model_folder(str(folder))
    assert window.prompt.model.findData(str(folder / "mine-Q8_0.gguf")) >= 0
    assert window.settings.model_folders() == [str(folder)]
    assert window.status_text.text() == f"{folder}: 1 model(s) found there"


def test_a_hub_name_is_fetched_through_the_progress_dialog(app_env, qtbot, tmp_path,
                                                           monkeypatch):
    from specviz.app.main_window import MainWindow
    from specviz.app.run import model_fetch as fetch

    repos = {"org/tiny-GGUF": Repo({"tiny-Q8_0.gguf": b"GGUF" + b"8" * 5000})}
    window = MainWindow()
    qtbot.addWidget(window)
    with HubServer(repos) as server, ThreadPoolExecutor(1) as executor:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        path = app_env.run_until_complete(fetch.fetch(window, "org/tiny-GGUF:Q8_0", executor))
    assert path.read_bytes() == b"GGUF" + b"8" * 5000
    assert path.is_relative_to(tmp_path / "hf")
