"""A request's own speculation as vLLM (`metrics.speculative_decoding`, its acceptance
histogram) and SGLang (`spec_correct_drafts_histogram`) say it, read into the per-position
counts the server's /metrics give (spec_metrics.SpecCounts), over real local HTTP servers
speaking each dialect (tests/dialect_servers.py); a hostile or malformed value leaves the counts
out with one line and the run goes on."""

from __future__ import annotations

import json

import pytest
from dialect_servers import SCRIPT, Engine, played_steps
from fake_server import FakeServer

from specviz.app.cli.main import main
from specviz.engines import events as ev
from specviz.engines.host import run_spec as rs
from specviz.engines.host.run_builder import build_lane
from specviz.engines.servers import spec_metrics
from specviz.engines.servers.spec_metrics import CountsProblem, from_histogram

PROMPT = "def mean(values):"
# SCRIPT's steps after the prompt's accept 2, 0, 0 (nothing drafted), 4, 0 and 3 drafts of 4,
# 4, 0, 4, 3, 4: the drafts whose first, second, third and fourth tokens held.
BY_POSITION = (3, 3, 2, 1)
STEPS = {"vllm": 5, "sglang": 6}  # vLLM leaves a step that drafted nothing out; SGLang not
WHERE = {"vllm": ("metrics", "speculative_decoding", "acceptance_histogram"),
         "sglang": ("sglext", "spec_tokens_details", "spec_correct_drafts_histogram")}


def run_lane(url: str):
    spec = rs.LaneSpec("server", server=url)
    request = rs.RunRequest(PROMPT, rs.ModelChoice("smollm2-135m"), max_tokens=64, chat=False)
    lane = build_lane("lane1", spec, request, pool=None)
    events = list(lane.steps())
    return lane, [e for e in events if isinstance(e, ev.StepEvent)], events[-1]


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_a_requests_histogram_is_its_acceptance_by_draft_position(dialect):
    with FakeServer(Engine(dialect, SCRIPT).routes()) as server:
        lane, steps, summary = run_lane(server.url)
    counts = lane.session.server_counts
    assert counts.engine == dialect and counts.accepted_by_position == BY_POSITION
    assert counts.drafts == STEPS[dialect]
    # The same drafts the stream showed, step by step.
    assert counts.accepted == summary.totals.accepted == sum(s.n_accepted for s in steps)
    assert counts.draft_tokens == summary.totals.proposed == 19
    assert sum(counts.accepted_by_position) == counts.accepted
    assert counts.acceptance_by_position() == pytest.approx(
        [a / STEPS[dialect] for a in BY_POSITION])
    assert lane.notice() is None


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_the_run_json_carries_the_engines_own_counts(dialect, capsys):
    with FakeServer(Engine(dialect, SCRIPT).routes()) as server:
        assert main(["run", "--server", server.url, "--no-chat", "--prompt", PROMPT,
                     "--max-tokens", "64", "--json"]) == 0
    captured = capsys.readouterr()
    counts = json.loads(captured.out)["server_counts"]
    assert counts["accepted_by_position"] == list(BY_POSITION)
    assert counts["acceptance_by_position"] == [round(a / STEPS[dialect], 4)
                                                for a in BY_POSITION]
    assert counts["acceptance_rate"] == round(9 / 19, 4)
    assert captured.err == ""


def test_vllms_longest_draft_keeps_positions_no_step_reached():
    """num_spec_tokens = K: a position no accepted draft reached is 0, as /metrics has it."""
    counts = from_histogram("vllm", [39, 1, 0, 3], steps=43, accepted=10, draft_tokens=129,
                            positions=3)  # vLLM's own example
    assert counts.accepted_by_position == (4, 3, 3) and counts.accepted == 10
    assert from_histogram("vllm", [5, 0, 0], positions=5).accepted_by_position == (0,) * 5
    assert from_histogram("sglang", [1, 0, 1, 0], steps=2, accepted=2).accepted_by_position \
        == (1, 1, 0)


def test_counts_of_two_requests_add_up():
    first = from_histogram("vllm", [1, 2], positions=1)
    both = first.plus(from_histogram("vllm", [0, 1, 1], positions=2))
    assert both.drafts == 5 and both.accepted == 5 and both.accepted_by_position == (4, 1)


@pytest.mark.parametrize("histogram", [None, []])
def test_no_histogram_is_no_counts(histogram):
    assert from_histogram("sglang", histogram) is None


HOSTILE = {  # the histogram or a total beside it, and what the line says
    "not a list": ("histogram", "lots", "the histogram is str"),
    "an object": ("histogram", {"0": 3}, "the histogram is dict"),
    "negative": ("histogram", [3, -1, 2], "not a count"),
    "a fraction": ("histogram", [3, 1.5], "not a count"),
    "a boolean": ("histogram", [True, 2], "not a count"),
    "nested": ("histogram", [[1, 2]], "not a count"),
    "huge": ("histogram", [10 ** 30], "not a count"),
    "too long": ("histogram", [1] * 5000, "5000 buckets"),
    "steps disagree": ("steps", 99, "99 steps said beside a histogram of"),
    "accepted disagree": ("accepted", 1, "1 accepted drafts said beside a histogram of 9"),
    "accepted more than drafted": ("drafted", 2, "9 accepted drafts of only 2 drafted"),
}
TOTALS = {"vllm": {"steps": "num_spec_steps", "accepted": "num_accepted_draft_tokens",
                   "drafted": "num_draft_tokens"},
          "sglang": {"steps": "spec_verify_ct", "accepted": "spec_num_correct_drafts",
                     "drafted": "spec_num_proposed_drafts"}}


def spoiled(dialect: str, field: str, value):
    """The stream's lines with the chunk of the request's counts changed."""
    outer, inner, histogram = WHERE[dialect]
    name = histogram if field == "histogram" else TOTALS[dialect][field]

    def edit(lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            body = line.removeprefix("data: ").strip()
            if inner in body:
                data = json.loads(body)
                data[outer][inner][name] = value
                line = f"data: {json.dumps(data)}\n\n"
            out.append(line)
        return out

    return edit


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_counts_are_left_out_with_one_line(dialect, case):
    field, value, words = HOSTILE[case]
    engine = Engine(dialect, SCRIPT)
    with FakeServer(engine.routes(edit=spoiled(dialect, field, value))) as server:
        lane, steps, summary = run_lane(server.url)
    assert isinstance(summary, ev.SummaryEvent) and summary.reason == "eos"
    assert len(steps) == len(played_steps(SCRIPT, 64))
    assert lane.session.server_counts is None
    note = lane.notice()
    assert "\n" not in note and words in note and "left out" in note, note
    assert len(note) < 200


def test_the_command_line_says_the_line_and_finishes(capsys):
    engine = Engine("vllm", SCRIPT)
    with FakeServer(engine.routes(edit=spoiled("vllm", "histogram", [3, -1]))) as server:
        assert main(["run", "--server", server.url, "--no-chat", "--prompt", PROMPT,
                     "--max-tokens", "64", "--json"]) == 0
    captured = capsys.readouterr()
    assert "server_counts" not in json.loads(captured.out)
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("specviz: vLLM's per-request speculation")


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, 10 ** 30])
def test_a_hostile_longest_draft_is_one_problem(bad):
    with pytest.raises(CountsProblem, match="longest draft"):
        from_histogram("vllm", [1, 1], positions=bad)
    with pytest.raises(CountsProblem, match="more than"):
        from_histogram("vllm", [1, 1], positions=spec_metrics.MAX_POSITIONS + 1)
