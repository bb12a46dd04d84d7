"""A lane's controls (K, auto K, an oracle's live setting): taken between steps, or refused
with the reason in one line, never silently dropped."""

from __future__ import annotations

import pytest

from specviz.engines.host import run_spec as rs
from specviz.engines.host.lanes import LocalLane
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles import make_oracle


@pytest.fixture
def lane(tiny_backend):
    def on(oracle: str) -> LocalLane:
        session = Session(tiny_backend, make_oracle(oracle),
                          RunSettings("def add(a, b):", chat=False, k=4, max_tokens=8))
        return LocalLane("lane1", session, {}, rs.LaneSpec(oracle),
                         rs.ModelChoice(str(tiny_backend.name), backend="transformers"))
    return on


def test_a_live_setting_is_taken(lane):
    ngram = lane("ngram")
    assert ngram.control("set_knob", {"name": "min_share", "value": 0.8}) is None
    assert ngram.session.oracle.settings.min_share == 0.8


def test_a_setting_fixed_at_the_start_is_refused_with_the_reason(lane):
    ngram = lane("ngram")
    why = ngram.control("set_knob", {"name": "max_ngram", "value": 2})
    assert why and "max_ngram is fixed when the lane starts" in why
    assert ngram.session.oracle.settings.max_ngram == 4  # as it was


def test_a_setting_the_oracle_lacks_is_refused_with_the_reason(lane):
    why = lane("ngram").control("set_knob", {"name": "split", "value": 0.1})
    assert why and "ngram has no setting split" in why
    assert "none has no setting split" in lane("none").control(
        "set_knob", {"name": "split", "value": 0.1})


def test_an_unknown_control_is_refused_with_its_name(lane):
    for oracle in ("ngram", "none"):
        why = lane(oracle).control("set_temperature", {"value": 0.5})
        assert why and "unknown control 'set_temperature'" in why, oracle


def test_a_plain_lane_refuses_a_k_and_keeps_auto_off(lane):
    plain = lane("none")
    assert "no K to change" in plain.control("set_k", {"k": 6})
    assert "no K to change" in plain.control("set_auto", {"on": True, "k": 4})
    assert plain.control("set_auto", {"on": False, "k": 4}) is None  # already so
    ngram = lane("ngram")
    assert ngram.control("set_k", {"k": 6}) is None and ngram.session.k == 6
