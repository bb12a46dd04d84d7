"""Shared fixtures: a tiny random model built here, and the real smollm2-135m (fetched once)."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Every small product the routed way: the same on every machine, and nothing measured or stored.
os.environ.setdefault("SPECVIZ_SMALL_ROWS", "on")
# float32 unless a test asks: bfloat16 would be the default only on CPUs that multiply it
# natively, and a test must check the same arithmetic on every machine.
os.environ.setdefault("SPECVIZ_DTYPE", "float32")
sys.path.insert(0, str(Path(__file__).parent))  # helper modules beside the tests

from crash_report import pytest_handlecrashitem, pytest_report_header  # noqa: F401  (hooks)
from model_fixtures import (
    smollm2_path,  # noqa: F401  (a fixture, used by name)
    tiny_target_and_draft,
)
from tiny_model import ARCHITECTURES, build_sibling_model, build_tiny_model

# The device the model fixtures below load on, read here only: cpu unless SPECVIZ_TEST_DEVICE
# names another (cuda on a GPU machine: benchmarks/gpu/gpu_run.py test). Tests that check
# the CPU's own arithmetic build their backends with device="cpu" themselves.
TEST_DEVICE = os.environ.get("SPECVIZ_TEST_DEVICE") or "cpu"


@pytest.fixture(scope="session", autouse=True)
def _a_home_of_the_tests_own(tmp_path_factory):
    """Cost profiles, dtype races, suffix memories and traces go to a home of the tests' own
    (a run with `--k auto` measured the tiny model's profile into the user's cache); the
    models stay where they are, linked, so smollm2-135m is fetched once as before."""
    from specviz.engines.models import home_dir

    models = home_dir("cache") / "models"
    models.mkdir(parents=True, exist_ok=True)
    home = tmp_path_factory.mktemp("home")
    (home / "models").symlink_to(models, target_is_directory=True)
    before = os.environ.get("SPECVIZ_HOME")
    os.environ["SPECVIZ_HOME"] = str(home)
    yield home
    if before is None:
        os.environ.pop("SPECVIZ_HOME", None)
    else:
        os.environ["SPECVIZ_HOME"] = before


def pytest_collection_modifyitems(items):
    """A test that uses the real smollm2 (its fixture, directly or through another) carries the
    `model` mark, so `-m "not model"` leaves out every one of them; one on llama.cpp's smollm2
    also the `llama` mark (for a machine where llama.cpp is not built yet). A `gpu` test is
    skipped, with the reason, where torch sees no CUDA device (torch is imported only when
    one is collected)."""
    for item in items:
        if any(uses(item, f) for f in ("smollm2_path", "smol_llama", "smol_hf")):
            item.add_marker(pytest.mark.model)
        if uses(item, "smol_llama"):
            item.add_marker(pytest.mark.llama)
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    reason = no_cuda_reason() if gpu_tests else None
    for item in gpu_tests if reason else ():
        item.add_marker(pytest.mark.skip(reason=reason))


# Tests that need what CI builds (llama-server and llama.cpp's converter, a browser for the
# page): where it is missing they skip, and under CI=true (set by CI services) they fail
# instead, so a CI run cannot pass with all of them skipped.
CI_MUST_RUN = ("test_server_llama", "test_llama_spawn", "test_served_concurrency",
               "test_eagle_gguf", "test_llama_server_lane_window", "test_export_page",
               "test_export_video")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and os.environ.get("CI", "").lower() == "true"
            and item.nodeid.split("::")[0].rpartition("/")[2].removesuffix(".py")
            in CI_MUST_RUN):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        reason = str(reason).removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where it must run: {reason}"


def uses(item, fixture: str) -> bool:
    """The test asks for `fixture`: directly, through another fixture, or by name in a
    parameter (a test that calls `request.getfixturevalue(name)`)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return fixture in getattr(item, "fixturenames", ()) or fixture in params.values()


def no_cuda_reason() -> str | None:
    """Why CUDA tests cannot run here, or None when they can."""
    import torch

    if not torch.cuda.is_available():
        return f"needs a CUDA GPU (torch {torch.__version__} sees none here)"
    if TEST_DEVICE == "cpu":
        return "runs with SPECVIZ_TEST_DEVICE=cuda (the fixtures load on the CPU now)"
    return None


@pytest.fixture(scope="session", autouse=True)
def _no_collection_off_the_main_thread():
    """Python collects garbage in whichever thread allocates: an engine thread (or tqdm's
    monitor) could free a cycle holding a Qt widget from an earlier test, and a Qt object
    deleted off its thread leaves a timer that crashes the event loop later (seen: a segfault
    in QTimerInfoList::activateTimers between tests). Collect on the main thread only, after
    each test, as the app does (app.qt_app.make_app)."""
    gc.disable()
    yield
    gc.enable()


@pytest.fixture(autouse=True)
def _collect_after_each_test():
    yield
    collect_when_due()


GC_THRESHOLD = gc.get_threshold()  # automatic collection's own, before it is switched off


def collect_when_due() -> None:
    """What automatic collection would have done by now (a full collection after every test
    would cost minutes with torch loaded)."""
    counts = gc.get_count()
    for generation in range(3):
        if counts[generation] <= GC_THRESHOLD[generation]:
            break
        gc.collect(generation)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer random Llama with a real byte-level BPE tokenizer, saved to a temp folder."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_gguf_path(tmp_path_factory) -> Path:
    """A tiny random llama GGUF (tests/tiny_gguf.py), for a child `specviz` whose test is not
    about the backend: llama.cpp loads it in well under a second and never imports torch,
    where a child on the tiny transformers model spends seconds importing torch first. Its
    context is 4096 tokens, as the command line's default asks: it decodes thousands of
    tokens a second, and a test that stops a run midway needs a run that lasts."""
    from tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("tiny-gguf") / "tiny.gguf", context=4096)


@pytest.fixture(scope="session")
def tiny_backend(tiny_model_dir):
    from specviz.engines.backends.hf import TransformersBackend

    return TransformersBackend(tiny_model_dir, device=TEST_DEVICE)


@pytest.fixture(scope="session")
def tiny_draft_backend(tiny_model_dir):
    """A second instance of the same model: a draft that should agree with the target."""
    from specviz.engines.backends.hf import TransformersBackend

    return TransformersBackend(tiny_model_dir, device=TEST_DEVICE)


@pytest.fixture(scope="session")
def disagreeing_draft_backend(tiny_model_dir, tmp_path_factory):
    """A draft of the target's vocabulary that guesses some of its tokens and misses others:
    lossless checks on it see steps accept part of a draft and roll the rest back."""
    from specviz.engines.backends.hf import TransformersBackend

    folder = build_sibling_model(tmp_path_factory.mktemp("tiny-sibling"), tiny_model_dir)
    return TransformersBackend(folder, device=TEST_DEVICE)


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory) -> Path:
    """The tiny model's Qwen2 twin: the same tokenizer and shape, Qwen2's layers (biased q, k
    and v projections), the architecture of the models specviz's results are measured on."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"), arch="qwen2")


@pytest.fixture(scope="session")
def tiny_qwen2_backend(tiny_qwen2_dir):
    from specviz.engines.backends.hf import TransformersBackend

    return TransformersBackend(tiny_qwen2_dir, device=TEST_DEVICE)


@pytest.fixture(scope="session")
def qwen2_disagreeing_draft_backend(tiny_qwen2_dir, tmp_path_factory):
    """`disagreeing_draft_backend` for the Qwen2 twin."""
    from specviz.engines.backends.hf import TransformersBackend

    folder = build_sibling_model(tmp_path_factory.mktemp("tiny-qwen2-sibling"), tiny_qwen2_dir)
    return TransformersBackend(folder, device=TEST_DEVICE)


@pytest.fixture(params=ARCHITECTURES)
def tiny_pair(request):
    """`tiny_target_and_draft` for each architecture in turn: a test that asks for it runs
    on the Llama and on the Qwen2 tiny model."""
    return tiny_target_and_draft(request, request.param)


@pytest.fixture(scope="session")
def smol_llama(smollm2_path):
    from specviz.engines.backends import load_backend

    # On the CPU llama.cpp picks its device as before (every layer on a Metal build); asked
    # for cuda, a build without CUDA fails here instead of quietly running on the CPU.
    device = None if TEST_DEVICE == "cpu" else TEST_DEVICE
    return load_backend("llama", smollm2_path, n_ctx=2048, device=device)


@pytest.fixture(scope="session")
def smol_hf(smollm2_path):
    from specviz.engines.backends import load_backend

    return load_backend("transformers", smollm2_path, device=TEST_DEVICE)


@pytest.fixture
def window(app_env, qtbot):
    """The real window, shown, settings and traces in a temporary folder."""
    from specviz.app.main_window import MainWindow

    win = MainWindow()
    qtbot.addWidget(win)  # closed at teardown: closing stops any run
    win.show()
    return win


@pytest.fixture
def app_env(qapp, tmp_path, monkeypatch):
    """Settings and traces in a temporary folder; a qasync loop as the asyncio loop."""
    import asyncio

    import qasync
    from PySide6.QtCore import QSettings

    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope,
                      str(tmp_path / "settings"))
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path / "home"))
    loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()
    asyncio.set_event_loop(None)
