"""A trace of N streams exported: the page, the anatomy and the video each show the stream
asked for (`--stream I`), stream 1 by default, and a stream the trace does not hold is one
line. Traces come from real sampled runs of the tiny model (each stream its own text)."""

from __future__ import annotations

import re
from pathlib import Path

import browser
import pytest
from test_export_page import embedded, needs_chromium

from specviz.app.cli.main import main
from specviz.app.export.anatomy_export import live_streams, trace_anatomies
from specviz.engines import events as ev
from specviz.engines.batch_events import BatchStep
from specviz.engines.errors import SpecvizError
from specviz.engines.trace import read_trace


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def run(gguf: Path, out: Path, oracle: str, *more: str) -> Path:
    assert main(["run", "--target", str(gguf), "--backend", "llama", "--threads", "1",
                 "--no-chat", "--prompt", "the x the y the x the", "--oracle", oracle,
                 "--k", "3", "--max-tokens", "12", "--temperature", "1", "--streams", "3",
                 "--trace", str(out), "--json", *more]) == 0
    return out


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    from tiny_gguf import write_tiny_gguf

    folder = tmp_path_factory.mktemp("streams-exports")
    gguf = write_tiny_gguf(folder / "tiny.gguf")
    return (run(gguf, folder / "lookup.jsonl", "prompt-lookup"),
            run(gguf, folder / "plain.jsonl", "none"),
            run(gguf, folder / "one.jsonl", "none", "--streams", "1"))


def page_lanes(capsys, out: Path, *args: str) -> list[dict]:
    assert main(["export", *args, str(out)]) == 0
    capsys.readouterr()
    return embedded(out.read_text(encoding="utf-8"))["lanes"]


def ids_of(lane: dict) -> list[int]:
    """The tokens a lane of the page writes: each step's guesses kept, then the target's."""
    return [i for step in lane["steps"] for i in
            [*(p["id"] for p in step["proposed"] if p["accepted"]), step["target"]["id"]]]


def ids(trace) -> list[int]:
    return [i for step in trace.steps for i in step.emitted_ids]


def test_the_page_of_a_batch_shows_the_stream_asked_for(traces, tmp_path, capsys):
    lookup, plain, _ = traces
    whole = read_trace(lookup)
    written = [ids(whole.stream(i)) for i in range(3)]
    assert written[0] != written[1]  # sampled: stream 1 shown thrice would not pass
    first = page_lanes(capsys, tmp_path / "first.html", str(lookup), str(plain))
    assert ids_of(first[0]) == written[0] and first[0]["title"].endswith("stream 1 of 3")
    second = page_lanes(capsys, tmp_path / "second.html", "--stream", "2", str(lookup),
                        str(plain))
    assert ids_of(second[0]) == written[1] and second[0]["title"].endswith("stream 2 of 3")
    assert ids_of(second[1]) == ids(read_trace(plain).stream(1))


def test_a_stream_the_trace_does_not_hold_is_one_line_and_writes_nothing(traces, tmp_path,
                                                                         capsys):
    out = tmp_path / "page.html"
    assert main(["export", "--stream", "4", str(traces[0]), str(out)]) == 2
    assert "holds 3 stream(s), not a stream 4" in one_line(capsys.readouterr().err)
    assert main(["anatomy", "--stream", "0", str(traces[0]), str(tmp_path / "a.html")]) == 2
    assert "not a stream 0" in one_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


def test_the_anatomy_of_a_batch_takes_the_stream_asked_for(traces):
    lookup = traces[0]
    whole = read_trace(lookup)
    made = trace_anatomies(lookup, 0, 1, stream=2)
    assert [a.event for a in made] == whole.stream(2).steps[:2]
    assert {a.batch for a in made} == {"stream 3 of 3"}
    assert "This is stream 3 of 3, decoded together" in made[0].stages[0].caption
    assert trace_anatomies(traces[2], 0, 0)[0].batch == ""  # a run of one stream
    assert live_streams(whole, 2)[0] == 3  # every stream was in the batch at its first step
    assert len(live_streams(whole, 2)) == len(whole.stream(2).steps)


def test_a_profile_prices_a_batchs_plain_step_as_a_token_a_live_stream(traces):
    from specviz.engines.cost.profile import PROFILE_VERSION, Profile

    profile = Profile("tiny", "llama", "cpu", 1, [128, 512], [1, 2, 4, 8],
                      [[10.0, 12.0, 14.0, 18.0], [20.0, 22.0, 24.0, 28.0]],
                      version=PROFILE_VERSION)
    made = trace_anatomies(traces[0], 0, 0, profile, stream=1)[0]
    assert made.plain.ms == pytest.approx(profile.cost_ms(3, made.event.position))
    assert "3 tokens (one a stream)" in made.plain.where


def test_a_plain_trace_of_another_batch_size_cannot_price_the_step(traces):
    lookup, plain, one = traces
    with pytest.raises(SpecvizError, match="decoded 1 stream at once and the trace 3 streams"):
        trace_anatomies(lookup, 0, 0, baseline=one)
    made = trace_anatomies(lookup, 0, 0, baseline=plain, stream=1)[0]
    totals = read_trace(plain).summary.totals
    assert made.plain.ms == pytest.approx(totals.compute_ms / totals.steps)


def test_the_video_follows_the_stream_asked_for(traces, qapp):
    from specviz.app.export.race_window import race_window, settle
    from specviz.app.main_window import MainWindow

    lookup, plain, _ = traces
    with race_window(MainWindow, [lookup, plain], (1280, 720), "light", on_screen=False,
                     stream=2) as (window, player):
        player.finish()
        settle(window)
        lanes = window.board.streams.lanes
        assert sorted(lane.picked for lane in lanes.values()) == [2, 2]
        shown = {tuple(i for e in lane.view.events if isinstance(e, ev.StepEvent)
                       for i in e.emitted_ids) for lane in window.board.lanes.values()}
        assert shown == {tuple(ids(read_trace(p).stream(2))) for p in (lookup, plain)}



def batch_so_far(trace) -> tuple[list[int], list[float]]:
    """Every stream's tokens and the batch's compute at each batch step."""
    tokens, ms, at = 0, 0.0, ([], [])
    for record in trace.records:
        if isinstance(record, BatchStep):
            tokens += sum(len(e.emitted_ids) for _, e in record.steps)
            ms += record.timing.total_ms
            at[0].append(tokens)
            at[1].append(ms)
    return at


def test_a_batchs_lane_carries_the_batchs_tokens_and_compute_to_its_end(traces, tmp_path,
                                                                       capsys):
    lookup, plain, _ = traces
    lanes = page_lanes(capsys, tmp_path / "page.html", "--stream", "3", str(lookup), str(plain))
    for lane, path in zip(lanes, (lookup, plain)):
        whole = read_trace(path)
        tokens, ms = batch_so_far(whole)
        assert lane["batch"]["n"] == 3 and lane["batch"]["tokens"] == tokens
        assert lane["batch"]["ms"] == pytest.approx(ms, abs=1e-3)
        assert tokens[-1] == whole.batches[-1].tokens  # the batch's summary: every stream's
    assert page_lanes(capsys, tmp_path / "one.html", str(traces[2]))[0]["batch"] is None


@needs_chromium
def test_the_page_gives_a_batchs_throughput_and_compares_batches_as_wholes(traces, tmp_path,
                                                                           capsys):
    lookup, plain, _ = traces
    out = tmp_path / "page.html"
    lanes = page_lanes(capsys, out, "--stream", "2", str(lookup), str(plain))
    figures = re.findall(r'<p class="figures">(.*?)</p>', browser.dump_dom(out.as_uri() + "#end"))
    rates = [lane["batch"]["tokens"][-1] / lane["batch"]["ms"][-1] * 1000 for lane in lanes]
    assert figures[0].startswith(f"3 streams: {rates[0]:.1f} tok/s in all · this one ")
    assert f"batch speedup {rates[0] / rates[1]:.2f}×" in figures[0]
    assert figures[1].startswith(f"3 streams: {rates[1]:.1f} tok/s in all · this one ")
    batch = lanes[0]["batch"]  # mid-race, the batch as far as the clock has come
    at = f"#t={batch['ms'][2]}"
    figures = re.findall(r'<p class="figures">(.*?)</p>', browser.dump_dom(out.as_uri() + at))
    so_far = batch["tokens"][2] / batch["ms"][2] * 1000
    assert figures[0].startswith(f"3 streams: {so_far:.1f} tok/s in all · "), figures[0]
    page_lanes(capsys, out, str(lookup), str(traces[2]))  # beside plain decoding of 1 stream
    figures = re.findall(r'<p class="figures">(.*?)</p>', browser.dump_dom(out.as_uri() + "#end"))
    assert "batch speedup" not in figures[0] and " speedup " in figures[0]
