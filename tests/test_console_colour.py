"""The terminal's conventions for colour: NO_COLOR set to anything means no colour codes at
all, whatever else is set (no-color.org); FORCE_COLOR colours into a pipe
(force-color.org); TERM=dumb means none on a terminal. `NO_COLOR=1 specviz run` on a
terminal wrote colour codes: the printer asked isatty() alone."""

from __future__ import annotations

import io
import os

import pytest

from specviz.app.cli import console


@pytest.fixture
def terminal():
    """A real terminal (a pseudo-terminal's far end), as a text file."""
    ours, theirs = os.openpty()
    out = open(theirs, "w", encoding="utf-8")
    yield out
    out.close()
    os.close(ours)


CASES = {  # environment, on a terminal?, colour?
    "a terminal": ({}, True, True),
    "a pipe": ({}, False, False),
    "NO_COLOR on a terminal": ({"NO_COLOR": "1"}, True, False),
    "NO_COLOR wins over FORCE_COLOR": ({"NO_COLOR": "yes", "FORCE_COLOR": "1"}, True, False),
    "an empty NO_COLOR is not set": ({"NO_COLOR": ""}, True, True),
    "FORCE_COLOR into a pipe": ({"FORCE_COLOR": "1"}, False, True),
    "TERM=dumb": ({"TERM": "dumb"}, True, False),
    "FORCE_COLOR on a dumb terminal": ({"TERM": "dumb", "FORCE_COLOR": "1"}, True, True),
}


@pytest.mark.parametrize("case", CASES)
def test_colour_follows_the_terminals_conventions(case, terminal, monkeypatch):
    env, on_terminal, colour = CASES[case]
    for name in ("NO_COLOR", "FORCE_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = terminal if on_terminal else io.StringIO()
    printer = console.EventPrinter(out=out)
    assert printer.colour is colour
    assert (printer.legend() != "") is colour
