"""`specviz export TRACE... OUT.html`: one offline page that replays a race.

Traces come from real runs of the tiny random model (three lanes of one prompt). The page is
read back as a browser would: its embedded data parsed, and, where Chromium is installed
(`python tests/browser.py --install`), opened headless and its DOM read after the replay.
"""

from __future__ import annotations

import html
import json
import re
import resource
import signal
import subprocess
import sys
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import browser
import numpy as np
import pytest
from PIL import Image
from race_traces import ORACLES, PROMPT, record_race

from specviz.app.cli.main import main
from specviz.app.export.page import DATA_ID, embed_json, render_page
from specviz.board.lane_title import lane_title
from specviz.engines import events as ev
from specviz.engines.trace import read_trace


@pytest.fixture(scope="module")
def traces(tiny_model_dir, tmp_path_factory) -> list[Path]:
    return record_race(tiny_model_dir, tmp_path_factory.mktemp("page-traces"), max_tokens=32)


@pytest.fixture(scope="module")
def page(traces, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("page") / "race.html"
    assert main(["export", *map(str, traces), str(out)]) == 0
    return out


class _Scripts(HTMLParser):
    """The page's <script> elements and every URL-bearing attribute it carries."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[tuple[dict, str]] = []
        self.urls: list[str] = []
        self._open: dict | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.urls += [v for k, v in attrs.items() if k in ("src", "href") and v]
        if tag == "script":
            self._open = attrs
            self.scripts.append((attrs, ""))

    def handle_data(self, data):
        if self._open is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)

    def handle_endtag(self, tag):
        if tag == "script":
            self._open = None


def embedded(html_text: str) -> dict:
    parser = _Scripts()
    parser.feed(html_text)
    (data,) = [text for attrs, text in parser.scripts if attrs.get("id") == DATA_ID]
    return json.loads(data)


def test_the_page_carries_every_step_and_asks_for_nothing_online(page, traces):
    text = page.read_text(encoding="utf-8")
    parser = _Scripts()
    parser.feed(text)
    assert parser.urls == [] and not re.search(r"https?://", text)  # no CDN, no font, no link
    data = embedded(text)
    assert [lane["oracle"] for lane in data["lanes"]] == list(ORACLES)
    assert data["baseline"] == 0 and data["prompt"] == PROMPT
    for lane, path in zip(data["lanes"], traces):
        steps = read_trace(path).steps
        assert [s["target"]["text"] for s in lane["steps"]] == [s.target.text for s in steps]
        assert [[p["accepted"] for p in s["proposed"]] for s in lane["steps"]] == \
            [[p.accepted for p in s.proposed] for s in steps]


def test_lanes_named_for_their_oracles_say_the_oracle_once(page, traces):
    """`specviz export none.jsonl prompt-lookup.jsonl ngram.jsonl`: each lane's title says its
    oracle and K once, the page's title lists them, and no file name is repeated."""
    text = page.read_text(encoding="utf-8")
    titles = [lane["title"] for lane in embedded(text)["lanes"]]
    assert titles == ["plain decoding", "prompt lookup, K=3", "ngram, K=3"]
    assert "<title>specviz race: plain decoding, prompt lookup, K=3, ngram, K=3</title>" in text


def test_a_lane_of_auto_k_from_a_file_named_otherwise_keeps_the_file_name(traces):
    trace = read_trace(traces[1])
    trace.events = [replace(e, auto_k=True) if isinstance(e, ev.StepEvent) else e
                    for e in trace.events]
    trace.path = trace.path.with_name("monday.jsonl")
    (lane,) = embedded(render_page([trace]))["lanes"]
    assert lane["title"] == "prompt lookup, auto K · monday"


@pytest.mark.parametrize("oracle, k, auto, stem, title", [
    ("none", 4, False, "plain", "plain decoding"),
    ("prompt-lookup", 4, False, "Prompt_Lookup", "prompt lookup, K=4"),
    ("prompt-lookup", 4, False, "prompt", "prompt lookup, K=4 · prompt"),
    ("draft", None, False, "", "draft"),
])
def test_a_title_keeps_a_file_name_only_where_it_says_more(oracle, k, auto, stem, title):
    assert lane_title(oracle, k, auto, stem) == title


def test_no_token_text_can_end_the_data_block(traces):
    trace = read_trace(traces[1])
    hostile = "</script><script>alert(1)</script>"
    first = trace.events.index(trace.steps[0])
    step = trace.events[first]
    trace.events[first] = replace(step, target=replace(step.target, text=hostile))
    text = render_page([trace])
    assert hostile not in text
    assert embedded(text)["lanes"][0]["steps"][0]["target"]["text"] == hostile
    assert "<" not in embed_json({"t": "<!-- </script>"})


def test_the_page_is_sized_by_its_tokens_not_a_framework(page):
    # Script, style and markup take under 40 KB; the rest is the three lanes' steps.
    shell = render_page_shell_size()
    assert shell < 40_000
    assert page.stat().st_size > shell


def render_page_shell_size() -> int:
    from importlib.resources import files

    assets = files("specviz").joinpath("assets/page")
    return sum(len(assets.joinpath(n).read_bytes()) for n in ("page.html", "page.css", "page.js"))


# ---------------------------------------------------------------- bad input


def export_cli(capsys, *argv) -> tuple[int, str]:
    code = main(["export", *map(str, argv)])
    return code, capsys.readouterr().err


def test_an_unknown_format_is_one_line(capsys, traces, tmp_path):
    code, err = export_cli(capsys, traces[0], tmp_path / "race.pdf")
    assert code == 2 and "unknown export format '.pdf'" in err
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("damage, message", [
    (lambda b: b"", "no steps"),
    (lambda b: b[: len(b) // 2], "corrupt trace"),
    (lambda b: b"not a trace\n", "corrupt trace"),
])
def test_a_bad_trace_is_one_line_and_leaves_no_file(capsys, traces, tmp_path, damage, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(damage(traces[1].read_bytes()))
    out = tmp_path / "race.html"
    code, err = export_cli(capsys, traces[0], bad, out)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert message in err or "bad.jsonl" in err, err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


def test_traces_of_different_prompts_are_refused(capsys, traces, tiny_model_dir, tmp_path):
    other = tmp_path / "other.jsonl"
    assert main(["run", "--target", str(tiny_model_dir), "--backend", "transformers",
                 "--no-chat", "--prompt", "something else", "--max-tokens", "4",
                 "--trace", str(other)]) == 0
    capsys.readouterr()
    code, err = export_cli(capsys, traces[0], other, tmp_path / "race.html")
    assert code == 2 and "different prompts" in err and not (tmp_path / "race.html").exists()


def test_a_write_that_fails_midway_leaves_nothing(traces, tmp_path):
    """The file-size limit makes the write fail as a full disk does (EFBIG instead of ENOSPC)."""
    out = tmp_path / "race.html"
    limit = 4096

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the failed write raises, not a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run([sys.executable, "-m", "specviz", "export",
                           *map(str, traces), str(out)], preexec_fn=small_files,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith("specviz: cannot write") or \
        "cannot write" in done.stderr.strip().splitlines()[-1]
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- in a browser

needs_chromium = pytest.mark.skipif(browser.binary() is None,
                                    reason="no chromium (python tests/browser.py --install)")


class _Tokens(HTMLParser):
    """The token spans of each lane in a dumped DOM: (lane, step, index, classes, text)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens: list[list] = []
        self._in = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "span" and "tok" in (attrs.get("class") or "").split():
            self._in = True
            self.tokens.append([int(attrs["data-lane"]), int(attrs["data-step"]),
                                int(attrs["data-tok"]), set(attrs["class"].split()), ""])

    def handle_data(self, data):
        if self._in:
            self.tokens[-1][4] += data

    def handle_endtag(self, tag):
        if tag == "span":
            self._in = False


@needs_chromium
def test_after_the_replay_the_dom_holds_every_token_in_its_colour(page, traces):
    dom = browser.dump_dom(page.as_uri() + "#end")
    parser = _Tokens()
    parser.feed(dom)
    for lane, path in enumerate(traces):
        got = [t for t in parser.tokens if t[0] == lane]
        want = []
        for step in read_trace(path).steps:
            for j, p in enumerate(step.proposed):
                kind = "k-rejected" if not p.accepted else None
                want.append((step.step, j, "accepted" if p.accepted else "rejected", kind,
                             p.text if p.accepted else p.text.replace("\n", "↵")))
            want.append((step.step, len(step.proposed), "target", "k-target", step.target.text))
        assert len(got) == len(want), (lane, len(got), len(want))
        for (_, s, j, classes, text), (ws, wj, verdict, kind, wtext) in zip(got, want):
            assert (s, j, text) == (ws, wj, wtext)
            assert verdict in classes and (kind is None or kind in classes)
    figures = re.findall(r'<p class="figures">(.*?)</p>', dom)
    assert len(figures) == len(traces) and all("ended: " in f for f in figures), figures


@needs_chromium
def test_a_link_to_a_step_opens_it_and_lights_its_prompt_source(page, traces):
    lane = 1  # prompt lookup
    steps = read_trace(traces[lane]).steps
    step = next(s for s in steps if any(p.span and p.span.chr_start is not None
                                        for p in s.proposed))
    copied = next(p for p in step.proposed if p.span and p.span.chr_start is not None)
    dom = browser.dump_dom(f"{page.as_uri()}#step={lane}.{step.step}")
    inspector = dom[dom.index('<aside id="inspector"'):]
    assert f"step {step.step}</h3>" in inspector
    assert inspector.count("<tr>") == 1 + 2 * len(step.proposed)  # a head, two rows a token
    marked = re.search(r'<pre id="prompt">.*?<mark>(.*?)</mark>', dom, re.S)
    assert marked and html.unescape(marked.group(1)) == \
        PROMPT[copied.span.chr_start:copied.span.chr_end]


@needs_chromium
def test_at_the_start_nothing_is_drawn_yet(page):
    parser = _Tokens()
    parser.feed(browser.dump_dom(page.as_uri()))
    assert parser.tokens == []


@needs_chromium
def test_a_screenshot_of_the_finished_race(page, tmp_path):
    png = browser.screenshot(page.as_uri() + "#end", tmp_path / "page.png")
    with Image.open(png) as image:
        assert image.size == (1280, 900)
        pixels = np.asarray(image.convert("RGB")).reshape(-1, 3)
    assert len(np.unique(pixels, axis=0)) > 50  # drawn, not a blank page
