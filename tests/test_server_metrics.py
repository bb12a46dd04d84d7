"""A server's speculation counters from its Prometheus /metrics: the parser on a text captured
from the real llama-server (tests/data/llama_server_metrics.txt: smollm2-135m, ngram-mod,
draft length 8, one 64-token completion of a repeated sentence), a run's share as the
difference of two readings, and vLLM's names under their own prefix."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_server import FakeServer, Reply

from specviz.engines.servers import spec_metrics
from specviz.engines.servers.sse import Endpoint

CAPTURED = Path(__file__).parent / "data" / "llama_server_metrics.txt"

# vLLM's exposition (prometheus_client): labels per engine and model, `_created` samples.
VLLM = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 2.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 36.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 15.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 2.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 120.0
"""


def test_a_captured_llama_server_text_gives_its_counters_by_position():
    counts = spec_metrics.parse(CAPTURED.read_text())
    assert counts.engine == "llamacpp"
    assert (counts.drafts, counts.draft_tokens, counts.accepted, counts.generated) == \
        (5, 36, 34, 64)
    assert counts.accepted_by_position == (5, 5, 5, 5, 4, 4, 3, 3)
    # Every accepted token is counted at exactly one position.
    assert sum(counts.accepted_by_position) == counts.accepted
    assert counts.acceptance_by_position() == [1.0, 1.0, 1.0, 1.0, 0.8, 0.8, 0.6, 0.6]
    data = counts.to_dict()
    assert data["acceptance_rate"] == round(34 / 36, 4)
    assert data["accepted_by_position"] == [5, 5, 5, 5, 4, 4, 3, 3]


def test_a_runs_share_is_the_difference_of_two_readings():
    before = spec_metrics.SpecCounts("llamacpp", 3, 20, 10, 40, (3, 2))
    after = spec_metrics.parse(CAPTURED.read_text())
    run = after.since(before)
    assert (run.drafts, run.draft_tokens, run.accepted, run.generated) == (2, 16, 24, 24)
    assert run.accepted_by_position == (2, 3, 5, 5, 4, 4, 3, 3)
    assert after.since(None) == after
    # A server that has not drafted yet lists no positions: nothing is made up for them.
    assert before.since(spec_metrics.SpecCounts("llamacpp")).accepted_by_position == (3, 2)


def test_vllms_counters_are_summed_over_engines_and_created_samples_left_out():
    counts = spec_metrics.parse(VLLM)
    assert counts.engine == "vllm"
    assert (counts.drafts, counts.draft_tokens, counts.accepted, counts.generated) == \
        (12, 36, 15, 120)
    assert counts.accepted_by_position == (9, 0, 2)
    assert counts.to_dict()["acceptance_by_position"] == [0.75, 0.0, 0.1667]


@pytest.mark.parametrize("text", [
    '{"status": "ok"}',  # not Prometheus text
    "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 7\n",  # no spec
    "",
])
def test_a_text_without_speculation_counters_gives_none(text):
    assert spec_metrics.parse(text) is None


def test_a_server_without_metrics_gives_none_at_once():
    # llama-server without --metrics answers 501; other servers 404.
    with FakeServer({("GET", "/metrics"): lambda _: Reply(501, {"error": "no"})}) as server:
        assert spec_metrics.read(Endpoint(server.url)) is None
        assert spec_metrics.read_after(Endpoint(server.url), None, 10) is None
    with FakeServer({}) as server:
        assert spec_metrics.read(Endpoint(server.url)) is None
    assert spec_metrics.read(Endpoint("http://127.0.0.1:9", connect_timeout=1.0)) is None


def test_a_position_no_accepted_draft_reached_is_a_zero_not_left_out():
    """A draft length of 4 where no draft held its fourth token: the graph shows four
    positions, the last at 0%."""
    text = CAPTURED.read_text()
    for position, count in (("4", "0"), ("5", "0"), ("6", "0"), ("7", "0")):
        text = text.replace(f'per_pos_total{{position="{position}"}} ',
                            f'per_pos_total{{position="{position}"}} {count} #', 1)
    text = "\n".join(line.split(" #")[0] for line in text.splitlines())
    counts = spec_metrics.parse(text)
    assert counts.accepted_by_position[4:] == (0, 0, 0, 0)
    rates = counts.acceptance_by_position()
    assert len(rates) == 8 and rates[4:] == [0.0] * 4
    assert counts.to_dict()["accepted_by_position"][4:] == [0, 0, 0, 0]
