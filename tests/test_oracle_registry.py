"""The oracle registry says what the oracles are; these tests hold it to the code and docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specviz.engines.errors import SpecvizError
from specviz.engines.oracles import ORACLE_INFO, ORACLES, make_oracle
from specviz.engines.oracles.registry import BOTH

# medusa and eagle need trained heads (test_eagle checks eagle's description with one)
BUILDABLE = [name for name in ORACLES if name not in ("medusa", "eagle")]


@pytest.mark.parametrize("name", BUILDABLE)
def test_the_registry_matches_each_oracles_settings_and_source(name, tiny_backend,
                                                                tiny_draft_backend):
    described = ORACLE_INFO[name]
    oracle = make_oracle(name, target=tiny_backend,
                         draft=tiny_draft_backend if described.needs_draft else None)
    knobs = oracle.knobs()
    assert set(knobs) == {s.name for s in described.settings if s.live}
    for setting in described.settings:
        assert setting.low <= setting.default <= setting.high
        if setting.live:
            assert knobs[setting.name] == setting.default, setting.name
        else:
            assert getattr(oracle, setting.name) == setting.default, setting.name
    if not described.plain:
        assert (oracle.source,) == described.sources


def test_medusa_is_described_as_its_class_sets_itself_up():
    from specviz.engines.oracles.medusa import MedusaOracle

    assert MedusaOracle.source == ORACLE_INFO["medusa"].sources[0]


def test_an_oracle_on_a_backend_it_cannot_run_on_is_one_clear_line(tmp_path):
    from tiny_gguf import write_tiny_gguf

    from specviz.engines.backends.llama import LlamaBackend

    llama = LlamaBackend(write_tiny_gguf(tmp_path / "t.gguf"), n_ctx=128, threads=1)
    with pytest.raises(SpecvizError, match=r"runs on the transformers backend.*--backend "
                                           r"transformers"):
        make_oracle("early-exit", target=llama)
    llama.close()


def test_the_readme_table_lists_every_oracle_with_its_backends():
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z-]+)` \|[^|]*\|[^|]*\| ([a-z ]+) \|", readme, re.MULTILINE)
    table = {name: backends.strip() for name, backends in rows}
    assert set(table) == set(ORACLES)
    for name, backends in table.items():
        expected = "both" if ORACLE_INFO[name].backends == BOTH else "transformers"
        assert backends == expected, name
