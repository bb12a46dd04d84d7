"""A serving engine under concurrency (engines/bench/served.py): a llama-server of ours with
two slots (`--parallel 2`) and two clients streaming from it at once on smollm2-135m, both
finishing and their tokens adding up to the round's and to what the server counted; the figures
of `specviz bench --oracles llama-server --streams` in the local streams' JSON shape; and the
bench's one-line refusals. Skipped where llama-server is not built (CI=true: failed)."""

from __future__ import annotations

import json

import pytest

from specviz.app.cli.main import main
from specviz.engines import llama_build
from specviz.engines.bench import served
from specviz.engines.loop.session import RunSettings
from specviz.engines.servers import spec_metrics
from specviz.engines.servers.llama_speculation import Speculation
from specviz.engines.servers.spawn import SpawnedServer

PROMPTS = ["The quick brown fox jumps over the lazy dog. " * 4, "def add(a, b):\n    return"]
TOKENS = 12


@pytest.fixture(scope="module")
def server_binary():
    found = llama_build.binary()
    if found is None:
        pytest.skip("llama-server is not built here (specviz llama-server build)")
    return found


def test_two_clients_at_once_on_two_slots_both_finish_and_add_up(server_binary, smollm2_path):
    ctx = 2 * served.slot_context(PROMPTS, TOKENS)
    with SpawnedServer(smollm2_path, Speculation.parse("ngram-simple"), threads=1, ctx=ctx,
                       binary=server_binary, parallel=2) as process:
        assert process.argv_tail[process.argv_tail.index("--parallel") + 1] == "2"
        server = served.Served(process, RunSettings("", chat=False, max_tokens=TOKENS))
        before = spec_metrics.read(process.endpoint)
        round_ = server.round(PROMPTS, 2, TOKENS)
        counted = spec_metrics.read_after(process.endpoint, before, round_.tokens)
    clients = round_.clients
    assert [c.error for c in clients] == [None, None]
    assert [c.tokens for c in clients] == [TOKENS, TOKENS]
    assert all(c.text and c.steps >= 1 and c.pace > 0 for c in clients)
    # The two requests were in flight together, and the round's figures are theirs.
    first, second = sorted(clients, key=lambda c: c.started)
    assert second.started < first.started + first.seconds
    assert round_.tokens == 2 * TOKENS
    assert round_.wall_s == pytest.approx(max(c.started + c.seconds for c in clients)
                                          - first.started)
    assert round_.wall_s >= max(c.seconds for c in clients)
    assert round_.tok_per_s == pytest.approx(2 * TOKENS / round_.wall_s)
    # What the server counted is the two clients' tokens, its drafts theirs.
    assert counted.generated == 2 * TOKENS
    assert sum(c.proposed for c in clients) == counted.draft_tokens
    assert sum(counted.accepted_by_position) == counted.accepted


def test_the_bench_has_the_local_streams_columns_and_json(server_binary, tmp_path, capsys):
    out = tmp_path / "served.json"
    assert main(["bench", "--target", "smollm2-135m", "--threads", "1", "--oracles",
                 "llama-server", "--spec-type", "ngram-simple", "--streams", "2",
                 "--stream-prompts", "quickstart", "--max-tokens", "8", "--no-fetch",
                 "--spec-options", "--spec-ngram-simple-size-n 3", "--json", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("| oracle | K | streams | tokens/s | plain tokens/s |")
    assert "| llama-server ngram-simple | its own | 2 |" in captured.out
    assert "--repeat 2 or more" in captured.err
    lane = json.loads(out.read_text())["lanes"][0]
    assert lane["oracle"] == "llama-server" and lane["spec_type"] == "ngram-simple"
    assert lane["spec_options"] == ["--spec-ngram-simple-size-n", "3"]
    point = lane["points"][0]
    local = {"streams", "tok_per_s", "plain_tok_per_s", "pace", "plain_pace", "speedup",
             "interval", "rounds", "stretches", "verdict", "round_ratios", "stalls",
             "tokens_per_step", "width_per_step", "failures"}  # concurrency.Point.to_dict
    assert set(point) == local | {"server_counts"}
    assert point["streams"] == 2 and point["failures"] == []
    assert point["tok_per_s"] > 0 and point["plain_tok_per_s"] > 0
    assert point["server_counts"]["generated"] == 2 * 8
    assert "crossover" in lane


@pytest.mark.parametrize("more, words", [
    ([], "llama-server is benched under concurrency: give the client counts with --streams"),
    (["--streams", "1,2"], "--oracles llama-server needs llama.cpp's speculation: --spec-type"),
    (["--streams", "1", "--spec-type", "ngram-fancy,draft-simple"], "draft-simple drafts "
                                                                    "with a draft model"),
])
def test_a_llama_server_bench_lacking_what_it_needs_is_one_line(more, words, capsys):
    assert main(["bench", "--oracles", "llama-server", "--max-tokens", "8", *more]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and words in err[0], err


@pytest.mark.parametrize("options", ["--host 0.0.0.0", "--spec-ngram-simple-size-n 3 -m x",
                                     "'--spec-type"])
def test_spec_options_take_only_the_speculations_own(options, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["bench", "--oracles", "llama-server", "--streams", "1", "--spec-type",
              "ngram-simple", "--spec-options", options])
    assert stop.value.code == 2
    assert "--spec-options" in capsys.readouterr().err.splitlines()[-1]
