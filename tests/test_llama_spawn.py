"""llama.cpp's own speculation on a llama-server that specviz starts itself: the speculation
spec and its one-line refusals, the build's progress and hint, the log's reason for a failed
start; then, against the real llama-server (specviz llama-server build) and smollm2-135m,
plain and ngram-mod servers that start, serve and stop, per-position acceptance from
/metrics equal to the stream's, a chained draft, refusals that leave no server running, and
a server killed mid-run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specviz.app.cli.main import main
from specviz.engines import events as ev
from specviz.engines import llama_build
from specviz.engines.errors import SpecvizError
from specviz.engines.loop.session import RunSettings
from specviz.engines.servers import connect
from specviz.engines.servers.llama_speculation import Speculation
from specviz.engines.servers.server_session import ServerSession
from specviz.engines.servers.spawn import SpawnedServer, log_reason, spawned_session
from specviz.engines.servers.sse import ServerError

KNOWN = ("draft-simple", "draft-eagle3", "draft-mtp", "ngram-simple", "ngram-mod")
REPEATED = "The quick brown fox jumps over the lazy dog. " * 8  # n-grams to draft from

# ------------------------------------------------------------------ no server needed


def test_chained_types_pass_the_draft_length_to_each_types_own_option(tmp_path):
    draft = gguf_file(tmp_path / "d.gguf")
    spec = Speculation.parse("ngram-mod, draft-simple,ngram-mod", draft, draft_max=6,
                             draft_min=1)
    spec.check(KNOWN)
    assert spec.types == ("ngram-mod", "draft-simple")
    assert spec.arguments() == [
        "--spec-type", "ngram-mod,draft-simple", "--spec-draft-model", str(draft),
        "--spec-ngram-mod-n-max", "6", "--spec-ngram-mod-n-min", "1",
        "--spec-draft-n-max", "6", "--spec-draft-n-min", "1"]
    assert spec.longest_draft == 6
    assert Speculation.parse("none").plain and Speculation.parse("").arguments() == []
    # draft-mtp drafts with the target's own MTP layers, or with a head given as a file.
    Speculation.parse("draft-mtp").check(KNOWN)
    Speculation.parse("draft-mtp", draft).check(KNOWN)
    # ngram-cache drafts a fixed 8: the draft length is not its to take.
    assert Speculation.parse("ngram-cache", draft_max=4).longest_draft is None


@pytest.mark.parametrize("types, draft, lengths, expected", [
    ("ngram-fancy", None, {}, "llama.cpp has no speculation type 'ngram-fancy'; this "
                              "llama-server knows draft-simple, draft-eagle3"),
    ("draft-eagle3", None, {}, "draft-eagle3 drafts with an EAGLE-3 head converted for the "
                               "target: give it (--draft FILE.gguf)"),
    ("ngram-mod,draft-simple", None, {}, "draft-simple drafts with a draft model"),
    ("draft-simple", "missing.gguf", {}, "no such draft file: "),
    ("draft-simple", "notes.txt", {}, "notes.txt is not a GGUF file"),
    ("draft-simple,draft-eagle3", "d.gguf", {}, "a llama-server holds one"),
    ("draft-mtp,draft-simple", "d.gguf", {}, "draft-mtp and draft-simple each draft with"),
    ("ngram-mod", "d.gguf", {}, "a draft file (d.gguf) needs a type that drafts with it"),
    ("ngram-mod", None, {"draft_max": 4, "draft_min": 6}, "shortest draft (6) is longer"),
    ("ngram-mod", None, {"draft_max": 0}, "longest draft must be 1 to 1024 tokens"),
    ("none,ngram-mod", None, {}, "'none' means a plain server"),
])
def test_what_llama_cpp_would_refuse_or_ignore_is_one_line(tmp_path, types, draft, lengths,
                                                           expected):
    gguf_file(tmp_path / "d.gguf")
    (tmp_path / "notes.txt").write_text("not a model")
    spec = Speculation.parse(types, tmp_path / draft if draft else None, **lengths)
    with pytest.raises(SpecvizError) as refused:
        spec.check(KNOWN)
    assert expected in str(refused.value) and "\n" not in str(refused.value)


# Lines from real llama-server logs (this build), each with the line a person is shown.
ARGUMENT_LOG = ('error while handling argument "--spec-type": unknown speculative type: foo\n\n'
                "usage:\n-h,    --help, --usage                  print usage and exit\n"
                "--spec-type none,draft-simple  comma-separated list (invalid values fail)\n")
DRAFT_LOG = """\
0.00.015.719 W srv  llama_server: security: no API key is set and CORS allows all origins
0.02.281.543 E gguf_init_from_file: failed to open GGUF file '/x/d.gguf' (No such file)
0.02.281.580 E llama_model_load_from_file_impl: failed to load model
0.02.281.588 E srv    load_model: failed to load draft model, '/x/d.gguf'
0.02.281.600 I srv    operator(): operator(): cleaning up before exit...
0.02.285.175 E srv  llama_server: exiting due to model loading error
"""
CRASH_LOG = ("0.00.012.130 I srv    load_model: loading model '/m.gguf'\n"
             "/src/ggml/ggml.c:1520: GGML_ASSERT(n_dims <= 4) failed\n"
             "/lib/libggml-base.so.0(+0x1a2b)[0x7f]\n")


@pytest.mark.parametrize("log, reason", [
    (ARGUMENT_LOG, 'error while handling argument "--spec-type": unknown speculative type: foo'),
    (DRAFT_LOG, "failed to load draft model, '/x/d.gguf'"),
    (CRASH_LOG, "/src/ggml/ggml.c:1520: GGML_ASSERT(n_dims <= 4) failed"),
    ("0.00.012.130 I srv    load_model: loading model '/m.gguf'\n", "it said nothing about why"),
])
def test_a_logs_reason_is_its_most_telling_line(log, reason):
    assert log_reason(log) == reason


@pytest.mark.parametrize("line, fraction", [
    ("[57/228] Building CXX object common/CMakeFiles/common.dir/arg.cpp.o", 57 / 228),
    ("[ 35%] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o", 0.35),
    ("[100%] Built target llama-server", 1.0),
    ("-- Configuring done (1.2s)", None),
])
def test_the_builds_progress_is_read_from_ninja_and_make(line, fraction):
    assert llama_build.progress_of(line) == pytest.approx(fraction) if fraction else \
        llama_build.progress_of(line) is None


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_a_build_step_reports_progress_and_a_compile_error_in_one_line(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.14)\nproject(tiny C)\n"
        "add_executable(tiny a.c b.c)\n")
    (tmp_path / "a.c").write_text("int b(void);\nint main(void) { return b(); }\n")
    (tmp_path / "b.c").write_text("int b(void) { return 0; }\n")
    said, build = [], tmp_path / "build"
    with open(tmp_path / "build.log", "w") as log:
        llama_build.run_logged(["cmake", "-S", str(tmp_path), "-B", str(build)], log, None)
        llama_build.run_logged(["cmake", "--build", str(build)], log, said.append)
    assert said and said[-1] == "100% built" and (build / "tiny").is_file()
    (tmp_path / "b.c").write_text("int b(void) { return undeclared; }\n")
    with open(tmp_path / "build.log", "w") as log, pytest.raises(SpecvizError) as failed:
        llama_build.run_logged(["cmake", "--build", str(build)], log, said.append)
    message = str(failed.value)
    # The compiler's own line (its quotes follow the locale), not ninja's "FAILED:".
    assert message.startswith("cmake failed (") and "b.c:1:" in message
    assert "error:" in message and "undeclared" in message
    assert "\n" not in message and "undeclared" in (tmp_path / "build.log").read_text()


def test_where_none_is_built_one_line_says_how(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(llama_build.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # an empty cache: nothing built
    with pytest.raises(llama_build.NotBuilt, match="run `specviz llama-server build`"):
        spawned_session(Speculation.parse("ngram-mod"), tmp_path / "m.gguf", 2,
                        RunSettings("x", chat=False))
    assert main(["llama-server", "path"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("specviz: llama-server is not built here; run `specviz llama-server "
                          "build`") and "\n" not in err
    monkeypatch.setenv(llama_build.ENV, str(tmp_path / "nowhere"))
    with pytest.raises(llama_build.NotBuilt, match=r"SPECVIZ_LLAMA_SERVER names .*nowhere"):
        llama_build.require()


# ------------------------------------------------------------------ the real llama-server


@pytest.fixture(scope="module")
def server_binary() -> Path:
    found = llama_build.binary()
    if found is None:
        pytest.skip("llama-server is not built here (specviz llama-server build)")
    return found


def run(speculation: Speculation, model: Path, max_tokens: int = 64, prompt: str = REPEATED):
    session = spawned_session(speculation, model, 2, RunSettings(prompt, chat=False,
                                                                 max_tokens=max_tokens))
    events = list(session)
    return session, [e for e in events if isinstance(e, ev.StepEvent)], events[-1]


@pytest.fixture(scope="module")
def plain(server_binary, smollm2_path):
    return run(Speculation(), smollm2_path)


def test_a_plain_server_starts_serves_and_is_gone_when_its_run_ends(plain):
    session, steps, summary = plain
    assert summary.totals.tokens == 64 and summary.reason == "max-tokens"
    assert all(not s.proposed for s in steps) and session.server.speculation is None
    assert not running(session.process.pid)  # stopped and reaped with the run
    assert not session.process.log_path.exists()  # a clean stop leaves no log behind
    assert session.server_counts.drafts == 0 and session.server_counts.generated == 64


@pytest.fixture(scope="module")
def ngram_server(server_binary, smollm2_path):
    with SpawnedServer(smollm2_path, Speculation.parse("ngram-mod", draft_max=8)) as server:
        SHARED.add(server.pid)
        yield server


def test_ngram_mod_drafts_losslessly_and_metrics_match_the_stream(plain, ngram_server):
    # Asked by URL, as a server a person started: its /metrics are found from its /props.
    engine, info = connect(ngram_server.endpoint)
    session = ServerSession(ngram_server.endpoint, engine, info,
                            RunSettings(REPEATED, chat=False, max_tokens=64))
    events = list(session)
    steps, summary = [e for e in events if isinstance(e, ev.StepEvent)], events[-1]
    assert summary.text == plain[2].text  # greedy: the plain server's text, token for token
    assert summary.totals.accepted > 10 and max(len(s.proposed) for s in steps) <= 8
    assert session.metrics
    counts = session.server_counts
    # The server's own per-position counts are the stream's steps, counted another way.
    drafted = [s for s in steps if s.proposed]
    assert counts.drafts == len(drafted) and counts.accepted == summary.totals.accepted
    assert counts.draft_tokens == summary.totals.proposed
    assert list(counts.accepted_by_position) == [
        sum(1 for s in drafted if s.n_accepted > i) for i in range(8)]


def test_a_chained_draft_model_runs_beside_ngram_mod(plain, smollm2_path):
    spec = Speculation.parse("ngram-mod,draft-simple", smollm2_path, draft_max=4)
    session, _, summary = run(spec, smollm2_path, max_tokens=24)
    assert summary.text == plain[2].text[: len(summary.text)]
    # Its own weights as the draft: the target accepts nearly all; ngram-mod alone could
    # not draft the first sentence's words before they repeat.
    assert summary.totals.acceptance_rate > 0.8 and summary.totals.mean_accepted_tokens > 2.5
    assert session.server.speculation == "ngram-mod,draft-simple" and session.k == 4


def test_a_server_without_metrics_gives_no_counts(server_binary, smollm2_path):
    from llama_server import RunningServer

    server = RunningServer(server_binary, smollm2_path, "--spec-type", "ngram-mod")
    try:
        engine, info = connect(server.endpoint)
        session = ServerSession(server.endpoint, engine, info,
                                RunSettings(REPEATED, chat=False, max_tokens=8))
        assert list(session)[-1].totals.tokens == 8
    finally:
        server.close()
    assert not session.metrics and session.server_counts is None


@pytest.mark.parametrize("types, draft, expected", [
    ("ngram-fancy", None, "llama.cpp has no speculation type 'ngram-fancy'; this llama-server "
                          "knows draft-simple, draft-eagle3, draft-mtp"),
    ("draft-eagle3", None, "draft-eagle3 drafts with an EAGLE-3 head"),
    ("draft-simple", "gone.gguf", "no such draft file: "),
])
def test_refused_before_starting_leaves_no_server(server_binary, smollm2_path, tmp_path, types,
                                                  draft, expected):
    spec = Speculation.parse(types, tmp_path / draft if draft else None)
    with pytest.raises(SpecvizError) as refused:
        spawned_session(spec, smollm2_path, 2, RunSettings("x", chat=False))
    assert expected in str(refused.value) and "\n" not in str(refused.value)
    assert our_servers() == []


def test_a_failed_start_says_the_logs_reason_and_leaves_no_server(server_binary,
                                                                  smollm2_path, tmp_path):
    # smollm2 itself is no EAGLE-3 head: llama-server says so, and would serve unspeculated.
    spec = Speculation.parse("draft-eagle3", smollm2_path)
    with pytest.raises(SpecvizError) as refused:
        spawned_session(spec, smollm2_path, 2, RunSettings("x", chat=False))
    assert str(refused.value).startswith("llama-server could not set up draft-eagle3: draft "
                                         "model is not eagle3 (expected 3 extract layers, "
                                         "got 0) (log: ")
    assert our_servers() == []
    log_named(str(refused.value)).unlink()
    # A file that starts as a GGUF and is not one: the server exits, the log says why.
    broken = gguf_file(tmp_path / "broken.gguf")
    with pytest.raises(SpecvizError) as refused:
        SpawnedServer(broken, Speculation(), binary=server_binary)
    message = str(refused.value)
    assert message.startswith("llama-server did not start: ") and "exit status 1" in message
    assert "failed to load model" in message and "\n" not in message
    log_named(message).unlink()  # kept, since the line names it
    assert our_servers() == []


def test_a_server_killed_midway_is_one_line_and_the_steps_so_far_are_kept(plain,
                                                                          smollm2_path):
    session = spawned_session(Speculation.parse("ngram-mod", draft_max=8), smollm2_path, 2,
                              RunSettings(REPEATED, chat=False, max_tokens=400))
    assert session.server.speculation == "ngram-mod" and session.source == "ngram"
    assert session.k == 8
    pid, steps = session.process.pid, []
    with pytest.raises(ServerError) as died:
        for event in session:
            steps.append(event)
            if len(steps) == 3:
                os.kill(pid, signal.SIGKILL)
    assert str(died.value).startswith(f"llama-server (pid {pid}) died midway (killed by "
                                      "SIGKILL); the tokens so far are kept (log: ")
    assert len(steps) >= 3 and all(isinstance(s, ev.StepEvent) for s in steps)
    assert plain[2].text.startswith("".join(s.text for s in steps))
    assert not running(pid) and our_servers() == []
    log_named(str(died.value)).unlink()


@pytest.mark.parametrize("end", ["exits", "is killed"])
def test_no_server_outlives_the_process_that_started_it(server_binary, smollm2_path, end):
    """Also where nothing stops it: at interpreter exit, or (Linux) when the process that
    started it dies without a word, as a native crash does."""
    code = ("import sys, time\n"
            "from specviz.engines.servers.spawn import SpawnedServer\n"
            f"server = SpawnedServer({str(smollm2_path)!r})\n"
            "print(server.pid, server.log_path, flush=True)\n"
            "time.sleep(600) if sys.argv[1] == 'is killed' else None\n")
    child = subprocess.Popen([sys.executable, "-c", code, end], stdout=subprocess.PIPE,
                             text=True)
    try:
        pid, log = child.stdout.readline().split(maxsplit=1)
        pid, log = int(pid), Path(log.strip())
        if end == "is killed":
            child.kill()
        child.wait(30)
    finally:
        child.kill()
        child.stdout.close()
    deadline = time.monotonic() + 10
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(pid)
    # Stopped at exit, its log goes with it; the kernel's SIGTERM leaves it behind.
    assert log.exists() == (end == "is killed")
    log.unlink(missing_ok=True)


# ------------------------------------------------------------------ helpers


def log_named(message: str) -> Path:
    """The log file a message names (`log: PATH)` at its end); it exists."""
    path = Path(message.rsplit("log: ", 1)[1].removesuffix(")"))
    assert path.is_file(), message
    return path


def gguf_file(path: Path) -> Path:
    """A file that starts as a GGUF does (magic and version) and then is garbage."""
    path.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + b"\xff" * 64)
    return path


def running(pid: int) -> bool:
    """Whether the process is there and not a zombie (a server orphaned by a killed parent
    is reaped by whoever adopts it, maybe later)."""
    stat = Path(f"/proc/{pid}/stat")
    if stat.parent.parent.is_dir():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ------------------------------------------------------------------ as a lane of `specviz run`


def test_run_starts_its_own_llama_server_and_a_plain_one_for_the_baseline(server_binary,
                                                                          smollm2_path, capsys):
    code = main(["run", "--target", str(smollm2_path), "--oracle", "llama-server",
                 "--spec-type", "ngram-mod", "--k", "8", "--threads", "2", "--no-chat",
                 "--prompt", REPEATED, "--max-tokens", "64", "--baseline", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["speculation"] == "ngram-mod"
    assert result["accepted"] > 0 and result["identical_to_baseline"] is True
    assert result["server"].startswith("http://127.0.0.1:") and result["baseline_tok_per_s"] > 0
    counts = result["server_counts"]  # the run's own, from the server's /metrics
    assert counts["accepted"] == result["accepted"] and counts["drafts"] > 0
    assert sum(counts["accepted_by_position"]) == counts["accepted"]


def test_a_type_llama_cpp_does_not_know_is_one_line_from_run(server_binary, smollm2_path,
                                                             capsys):
    code = main(["run", "--target", str(smollm2_path), "--oracle", "llama-server",
                 "--spec-type", "ngram-nonsense", "--prompt", "hi", "--max-tokens", "4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "ngram-nonsense" in err[0]


SHARED: set[int] = set()  # servers of this module's fixtures, shared by its tests


def our_servers() -> list[int]:
    """The llama-server processes this test process started that are still there, except
    the module's shared ones."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        name, fields = text.split("(", 1)[1].rsplit(")", 1)
        state, ppid = fields.split()[:2]
        pid = int(stat.parent.name)
        if int(ppid) == os.getpid() and name.startswith("llama-server") and state != "Z" \
                and pid not in SHARED:
            found.append(pid)
    return found


@pytest.fixture(autouse=True)
def _no_server_outlives_a_test():
    yield
    assert our_servers() == []
