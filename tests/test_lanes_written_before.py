"""A lane is its oracle, K or auto K, settings and inputs, and a server lane's server one
ServerSpec; what older versions wrote of lanes is read by run_spec.lane_from_dict. Each
fixture was written by that version's own code:

- tests/data/lanes_before_server_spec.json: the version whose server lanes had five fields of
  the lane's own (server, server_engine, api_key_env, server_source, server_spec), by its
  run_spec.to_dict, the JSON AppSettings.set_lanes stored and options.server_lane;
- tests/data/lanes_settings_as_fields.json: the version whose oracle settings were fields
  (exit_layer, max_ngram, min_ngram, knobs) and whose cross-draft model was cross_draft.

(tests/test_lane_inputs.py holds the version before inputs were a mapping.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

from specviz.engines.host import run_spec as rs
from specviz.engines.host.run_spec import LaneSpec, ServerSpec
from specviz.engines.oracles.registry import SERVER, SPAWNED

DATA = Path(__file__).parent / "data"
BEFORE_SERVER_SPEC = json.loads((DATA / "lanes_before_server_spec.json").read_text("utf-8"))
SETTINGS_AS_FIELDS = json.loads((DATA / "lanes_settings_as_fields.json").read_text("utf-8"))

# The lanes of lanes_before_server_spec.json as this version holds them.
SERVER_LANES = {
    "server": LaneSpec(SERVER, 4, server=ServerSpec(
        "http://127.0.0.1:8080", engine="vllm", api_key_env="SPECVIZ_KEY_LOCAL",
        source="draft")),
    "server-auto": LaneSpec(SERVER, 6, auto_k=True,
                            server=ServerSpec("https://api.example.com/v1")),
    "llama-spec": LaneSpec(SPAWNED, 6, inputs={"draft": "/m/draft.gguf"},
                           server=ServerSpec(source="ngram", spec="ngram-mod,draft-simple")),
    "llama-plain": LaneSpec(SPAWNED, 0, server=ServerSpec()),
    "cross": LaneSpec("cross-draft", 3, inputs={"draft": "/models/other.gguf"}),
    "tree": LaneSpec("tree", 5, settings={"split": 0.3, "budget": 9},
                     inputs={"draft": "/models/d.gguf"}),
}

# The lanes of lanes_settings_as_fields.json as this version holds them.
FIELD_LANES = {
    "early": LaneSpec("early-exit", 3, settings={"exit_layer": 5}),
    "ngram": LaneSpec("ngram", 4, settings={"max_ngram": 5, "min_ngram": 2},
                      inputs={"ngram_corpus": "/data/corpus.txt"}),
    "tree": LaneSpec("tree", 5, settings={"split": 0.3, "budget": 9},
                     inputs={"draft": "/models/d.gguf"}),
    # --cross-draft over --draft, as the cross-draft oracle read them then
    "cross": LaneSpec("cross-draft", 3, inputs={"draft": "/models/other.gguf"}),
    "server": LaneSpec(SERVER, 4, server=ServerSpec("http://127.0.0.1:8080", engine="sglang",
                                                    api_key_env="KEY", source="draft")),
}


def on_the_wire(spec: rs.RunSpec) -> dict:
    return json.loads(json.dumps(rs.to_dict(spec)))


# ---------------------------------------------------------------- the type


def test_a_server_lane_has_a_server_spec_and_no_other_lane_has_one():
    assert LaneSpec(SERVER).server == ServerSpec() and LaneSpec(SPAWNED, 0).on_server
    assert LaneSpec(SERVER, server="http://a:1") == LaneSpec(SERVER, server=ServerSpec("http://a:1"))
    assert LaneSpec("draft", 3, "d.gguf") == LaneSpec("draft", 3, inputs={"draft": "d.gguf"})
    assert LaneSpec("draft", 3, "d.gguf").server is None and not LaneSpec("draft").on_server
    # a server of a lane that is on none is not kept (the window's lane switched away)
    assert LaneSpec("ngram", server=ServerSpec("http://a:1")).server is None
    with pytest.raises(TypeError, match="a ServerSpec or a URL"):
        LaneSpec(SERVER, server={"url": "http://a:1"})


def test_older_names_are_the_loaders_not_the_types():
    with pytest.raises(TypeError, match="a lane has no input 'cross_draft'"):
        LaneSpec("cross-draft", cross_draft="d.gguf")
    with pytest.raises(TypeError):
        LaneSpec(SERVER, server_engine="vllm")
    with pytest.raises(AttributeError):
        LaneSpec("eagle", eagle_head="/h").eagle_head  # noqa: B018 (inputs are in .inputs)


# ---------------------------------------------------------------- server lanes, before


def test_a_run_spec_written_before_server_specs_reads_as_it_was_meant():
    spec = rs.from_dict(BEFORE_SERVER_SPEC["run_spec"])
    assert spec.lanes == SERVER_LANES


def test_lanes_written_now_are_the_json_written_before():
    """No protocol version between them: an engine or window of either age reads the other's
    lanes (an older one refuses a lane whose "server" is not a URL)."""
    before = BEFORE_SERVER_SPEC["run_spec"]
    assert on_the_wire(rs.from_dict(before)) == before
    written = on_the_wire(rs.RunSpec(rs.from_dict(before).request, SERVER_LANES))
    assert written == before


def test_the_command_line_makes_the_server_lanes_it_made_before():
    from specviz.app.cli import options
    from specviz.app.cli.main import build_parser

    parser = build_parser()
    for case in BEFORE_SERVER_SPEC["cli"]:
        args = parser.parse_args(case["argv"])
        made = options.server_lane(args, args.server)
        assert made == rs.lane_from_dict(case["lane"]), case["argv"]
        assert rs.lane_to_dict(made) == case["lane"], case["argv"]


def test_a_trace_header_says_what_a_spawned_server_was_started_with_as_before():
    from specviz.engines.host.server_lanes import spawned_by

    assert spawned_by(SERVER_LANES["llama-spec"]) == {"spawned": {
        "spec_type": "ngram-mod,draft-simple", "draft": "/m/draft.gguf", "draft_max": 6}}
    assert spawned_by(SERVER_LANES["llama-plain"]) == {"spawned": {
        "spec_type": None, "draft": None, "draft_max": None}}
    assert spawned_by(SERVER_LANES["server"]) == {}


def test_server_fields_are_checked_as_a_lane_arrives():
    with pytest.raises(ValueError, match=r"ServerSpec\.url cannot be 3"):
        rs.lane_from_dict({"oracle": SERVER, "server": 3})
    with pytest.raises(ValueError, match=r"ServerSpec\.spec cannot be"):
        rs.lane_from_dict({"oracle": SPAWNED, "server_spec": ["ngram-mod"]})
    with pytest.raises(ValueError, match=r"LaneSpec\.oracle cannot be"):
        rs.lane_from_dict({"oracle": ["server"]})
    # server fields of a lane on no server were never read: left out, whatever they hold
    assert rs.lane_from_dict({"oracle": "none", "server_engine": "vllm"}) == LaneSpec("none")


def test_window_settings_stored_before_server_specs_load_and_are_stored_as_before(
        app_env, qtbot):
    from specviz.app.main_window import MainWindow
    from specviz.app.state.settings import AppSettings

    blob = BEFORE_SERVER_SPEC["settings_blob"]
    expected = [SERVER_LANES[k] for k in ("server", "llama-spec", "llama-plain", "cross")]
    AppSettings().store.setValue("lanes/configs", blob)
    assert AppSettings().lanes() == expected
    window = MainWindow()
    qtbot.addWidget(window)
    assert window.board.configs() == expected
    window.close()  # stores its lanes
    assert json.loads(AppSettings().store.value("lanes/configs")) == json.loads(blob)


# ---------------------------------------------------------------- settings as fields


def test_a_run_spec_with_settings_as_fields_reads_as_it_was_meant():
    assert rs.from_dict(SETTINGS_AS_FIELDS["run_spec"]).lanes == FIELD_LANES


def test_window_settings_with_settings_as_fields_load(app_env, qtbot):
    from specviz.app.main_window import MainWindow
    from specviz.app.state.settings import AppSettings

    AppSettings().store.setValue("lanes/configs", SETTINGS_AS_FIELDS["settings_blob"])
    expected = [FIELD_LANES[k] for k in ("early", "ngram", "tree", "cross")]
    assert AppSettings().lanes() == expected
    window = MainWindow()
    qtbot.addWidget(window)
    assert window.board.configs() == expected
    window.close()
    assert AppSettings().lanes() == expected
