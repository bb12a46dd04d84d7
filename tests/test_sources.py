"""A token's kind is one row (board/kinds.py): its legend words, the sources it paints, its
colour in every theme and on a terminal. The window's themes, the exported page's colour
rules, the terminal's colours and a lane's legend all read that table; the sources a server
lane may colour its drafts as are the registry's."""

from __future__ import annotations

import io

import pytest
from step_factory import make_step

from specviz.board import kinds
from specviz.engines import events as ev
from specviz.engines.oracles import ORACLE_INFO
from specviz.engines.oracles.registry import SERVED


def test_every_source_an_oracle_proposes_is_painted_by_a_kind_every_theme_colours():
    from specviz.board.palette import HIGH_CONTRAST, THEMES

    painted = {source for kind in kinds.KINDS.values() for source in kind.sources}
    for described in ORACLE_INFO.values():
        assert set(described.sources) <= painted, described.name
    assert set(SERVED) <= painted
    for kind in kinds.KINDS:
        for theme in (*THEMES.values(), *HIGH_CONTRAST.values()):
            assert theme.kind_colour(kind).startswith("#"), (kind, theme.name)
    assert kinds.kind_of("a source of a newer trace") == kinds.KIND_OTHER
    assert kinds.kind_of("tree") == kinds.KIND_DRAFT and kinds.kind_of("memory") == "earlier"


def test_no_source_is_painted_by_two_kinds():
    named = [source for kind in kinds.KINDS.values() for source in kind.sources]
    assert len(named) == len(set(named))


def test_the_page_colours_each_kind_as_its_row_says():
    from specviz.app.export.page import kind_css, theme_css

    rules = kind_css()
    for name, kind in kinds.KINDS.items():
        assert f".k-{name} {{ color: var(--{name}); }}" in rules
        assert f"--{name}:{kind.dark}" in theme_css().splitlines()[0]
        assert f"--{name}:{kind.light}" in theme_css().splitlines()[1]


def test_the_terminal_paints_each_source_in_its_kinds_colour():
    from specviz.app.cli.console import RESET, EventPrinter

    printer = EventPrinter(io.StringIO(), colour=True)
    for kind in kinds.KINDS.values():
        for source in kind.sources:
            step = make_step(proposed=(ev.ProposedToken(7, "copied", source, True),))
            assert printer.render(step) == f"{kind.terminal}copied{RESET}" + step.target.text
    legend = printer.legend()
    for name in (kinds.KIND_DRAFT, kinds.KIND_PROMPT, kinds.KIND_NGRAM):
        assert f"{kinds.KINDS[name].terminal}{kinds.words(name)}{RESET}" in legend


def test_a_server_lane_colours_its_drafts_as_a_source_a_server_drafts_with():
    from specviz.app.cli.main import build_parser
    from specviz.engines.errors import SpecvizError
    from specviz.engines.host import run_spec as rs
    from specviz.engines.host.server_lanes import build_session
    from specviz.engines.loop.session import RunSettings
    from specviz.engines.sampling import SamplingParams

    run = next(a for a in build_parser()._subparsers._actions if a.choices).choices["run"]
    drafts = next(a for a in run._actions if "--server-drafts" in a.option_strings)
    assert tuple(drafts.choices) == SERVED
    lane = rs.LaneSpec("server", server=rs.ServerSpec("http://127.0.0.1:9", source="rule"))
    with pytest.raises(SpecvizError, match="unknown draft source 'rule'; one of " +
                       ", ".join(SERVED)):
        build_session(lane, RunSettings("x", k=4, params=SamplingParams()))
