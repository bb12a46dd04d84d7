"""Where a token came from is declared once (engines/sources.py): the events' sources, the
window's colour kinds and legend words, the terminal's colours and a server lane's choices
all read that table."""

from __future__ import annotations

import io

import pytest
from step_factory import make_step

from specviz.engines import events as ev
from specviz.engines import sources
from specviz.engines.oracles import ORACLE_INFO


def test_every_source_an_oracle_proposes_is_declared_with_a_kind_the_themes_colour():
    from specviz.board.palette import KIND_LABELS, KINDS, THEMES, source_kind

    assert ev.SOURCES == tuple(s.name for s in sources.SOURCE_TABLE)
    for described in ORACLE_INFO.values():
        assert set(described.sources) <= set(ev.SOURCES), described.name
    for source in sources.SOURCE_TABLE:
        assert source_kind(source.name) == source.kind and source.kind in KINDS
        for theme in THEMES.values():
            assert theme.kind_colour(source.kind).startswith("#")
    assert KIND_LABELS == sources.KIND_WORDS
    assert source_kind("a source of a newer trace") == sources.KIND_OTHER


def test_the_terminal_paints_each_source_in_its_declared_colour():
    from specviz.app.cli.console import RESET, EventPrinter

    printer = EventPrinter(io.StringIO(), colour=True)
    for source in sources.SOURCE_TABLE:
        step = make_step(proposed=(ev.ProposedToken(7, "copied", source.name, True),))
        assert printer.render(step) == f"{source.terminal}copied{RESET}" + step.target.text
    legend = printer.legend()
    for kind in (sources.KIND_DRAFT, sources.KIND_PROMPT, sources.KIND_NGRAM):
        assert f"{sources.terminal_colour(kind)}{sources.KIND_WORDS[kind]}{RESET}" in legend


def test_a_server_lane_colours_its_drafts_as_a_source_a_server_drafts_with():
    from specviz.app.cli.main import build_parser
    from specviz.engines.errors import SpecvizError
    from specviz.engines.host import run_spec as rs
    from specviz.engines.host.server_lanes import build_session
    from specviz.engines.loop.session import RunSettings
    from specviz.engines.sampling import SamplingParams

    run = next(a for a in build_parser()._subparsers._actions if a.choices).choices["run"]
    drafts = next(a for a in run._actions if "--server-drafts" in a.option_strings)
    assert tuple(drafts.choices) == sources.SERVED
    assert set(sources.SERVED) <= set(ev.SOURCES)
    lane = rs.LaneSpec("server", server=rs.ServerSpec("http://127.0.0.1:9", source="rule"))
    with pytest.raises(SpecvizError, match="unknown draft source 'rule'; one of " +
                       ", ".join(sources.SERVED)):
        build_session(lane, RunSettings("x", k=4, params=SamplingParams()))
