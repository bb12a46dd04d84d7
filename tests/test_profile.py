"""`specviz profile`: the table's shape, storage in the cache, reuse; auto K end to end."""

from __future__ import annotations

import dataclasses
import json

import pytest
from steady_timing import steady_forwards
from test_session import CODE_EDIT

from specviz.app.cli.main import main
from specviz.engines import events as ev
from specviz.engines.bench.compare import compare
from specviz.engines.cost import profile as prof
from specviz.engines.cost import profile_measure as measuring
from specviz.engines.cost.auto_k import AutoK
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles import make_oracle


def test_measure_gives_a_median_per_batch_and_context(tiny_backend, monkeypatch):
    """Each cell is the median of its samples (a slow one among them moves it not at all):
    one token's the median of every one-token step timed, a batch's its samples' median less
    the settling steps after it. The forwards run on the model; their times are given."""
    import itertools
    import statistics

    real_forward, real_in_loop = measuring.time_forward, measuring.time_in_loop
    jitter = itertools.cycle([0.0, 0.25, 40.0, 0.5, 0.125, 0.75, 0.375])  # 1 slow sample in 7
    samples: dict[tuple[int, int], list[float]] = {}
    settled: dict[int, list[float]] = {}

    def timed_forward(backend, tokens, ctx):
        real_forward(backend, tokens, ctx)
        return ctx / 8 + len(tokens) + next(jitter)

    def in_loop(backend, tokens, ctx, settled_steps=None):
        ms = real_in_loop(backend, tokens, ctx, settled_steps)
        samples.setdefault((ctx, len(tokens)), []).append(ms)
        settled[ctx] = settled_steps
        return ms

    monkeypatch.setattr(measuring, "time_forward", timed_forward)
    monkeypatch.setattr(measuring, "time_in_loop", in_loop)
    p = prof.measure(tiny_backend, "tiny", batches=[4, 1, 2], contexts=[8, 16, 10_000_000],
                     repeats=5)
    assert p.batches == [1, 2, 4]
    assert p.contexts == [8, 16]  # a context the model cannot hold is left out
    assert tiny_backend.n_past == 0  # the cache is left empty
    for ctx, row in zip(p.contexts, p.ms, strict=True):
        assert all(len(samples[ctx, n]) == 5 for n in p.batches)
        one = statistics.median([*samples[ctx, 1], *settled[ctx]])
        assert one < ctx / 8 + 2  # the slow samples are outvoted
        expected = [one] + [max(statistics.median(samples[ctx, n]) - prof.SETTLE * one, one)
                            for n in p.batches[1:]]
        assert row == pytest.approx(expected, abs=1e-3)
        assert row != pytest.approx([statistics.mean(samples[ctx, n]) for n in p.batches])


def test_the_time_a_profile_would_take_is_costed_from_two_forwards(tiny_backend, monkeypatch):
    """One token costs 2 ms and each more token 1 ms here: the plan is priced on that line,
    the prefill at the largest batch's rate per token."""
    timed = []

    def fake_forward(backend, tokens, ctx):
        timed.append(len(tokens))
        return 2.0 + (len(tokens) - 1)

    monkeypatch.setattr(measuring, "time_forward", fake_forward)
    seconds = prof.estimate_seconds(tiny_backend, batches=[1, 2, 4], contexts=[8, 16],
                                    repeats=2)
    assert timed == [1, 4, 1, 4]  # each shape timed after a first call that sets it up
    # Batches 1, 2 and 4, and the one-token steps before each and after each batch, in each
    # repeat; an untimed first pass of every size per context.
    passes = 2 + 3 + 5
    settling = prof.SETTLE * 2 * (2 * 3 - 1)
    prefill = 5 * 8 / 4 + 5 * 16 / 4
    expected = prefill + 2 * (passes + 2 * (passes + settling))
    assert seconds == pytest.approx(expected / 1000)
    assert tiny_backend.n_past == 0


def test_a_batch_is_priced_with_the_switch_back_to_one_token_steps(tiny_backend, monkeypatch):
    """A backend that pays for a change of batch shape (llama.cpp builds its graph again; on
    CUDA it replays a captured graph only from the second call of a shape): one token costs
    what it costs in a run of one-token steps, a batch its own forward and the dearer steps
    after it. The old profile, timing every size after another, priced one token at 2.5 ms
    here: a batch of 4 looked 1.6x one token, where in a loop it adds 3.1x."""
    last = {"n": None, "same": 0}

    def fake_forward(backend, tokens, ctx):
        n = len(tokens)
        last["same"] = last["same"] + 1 if n == last["n"] else 0
        last["n"] = n
        switch = {0: 1.5, 1: 0.5}.get(last["same"], 0.0)  # rebuilt, then captured, then replayed
        return 1.0 + 0.5 * (n - 1) + switch

    monkeypatch.setattr(measuring, "time_forward", fake_forward)
    p = prof.measure(tiny_backend, "tiny", batches=[2, 4], contexts=[8], repeats=3)
    assert p.batches == [1, 2, 4]  # one token is always measured: it prices the switch back
    one, two, four = p.ms[0]
    assert one == pytest.approx(1.0)  # a settled one-token step
    # Its own forward after a switch (1.5 more), then two one-token steps at 2.5 and 1.5.
    assert two == pytest.approx(1.5 + 1.5 + 1.5 + 0.5)
    assert four == pytest.approx(2.5 + 1.5 + 1.5 + 0.5)


def test_slow_one_token_samples_cannot_price_batches_at_nothing():
    """On the H200 transformers' one-token forward is launch-bound and noisy: the five timed
    one-token samples at 1024 tokens had a median of 31 ms where the settling steps around
    them took 18, and batches of 25 ms less two one-token steps came out at 0 ms. One token
    is priced from every settled step, and no batch below it."""
    times = {1: [31.0, 31.4, 29.0, 18.0, 31.2], 2: [56.0, 57.0, 55.0], 4: [50.0, 51.0, 49.0]}
    settled = [18.0] * 20 + [30.0] * 3
    costs = prof.step_costs(times, settled)
    assert costs[1] == pytest.approx(18.0)
    assert costs[2] == pytest.approx(56.0 - 2 * 18.0)
    assert costs[4] == pytest.approx(18.0)  # 50 - 36 would be 14: less than one token


def test_profile_command_stores_then_reuses(capsys, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    steady_forwards(monkeypatch)  # stored at once, however busy the machine is
    argv = ["profile", "--target", str(tiny_model_dir), "--backend", "transformers",
            "--device", "cpu", "--batches", "1,2,4", "--contexts", "8,16", "--repeats", "1"]
    assert main([*argv, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert [p["batches"] for p in first] == [[1, 2, 4]]
    assert first[0]["contexts"] == [8, 16] and first[0]["backend"] == "transformers"
    stored = list((tmp_path / "profiles").glob("*.json"))
    assert len(stored) == 1

    def no_measuring(*_a, **_k):
        raise AssertionError("a stored profile should have been reused")

    monkeypatch.setattr(prof, "measure", no_measuring)
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "ctx 8" in table and "ctx 16" in table
    assert len([line for line in table.splitlines() if line.strip()[:1].isdigit()]) == 3
    monkeypatch.undo()
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    steady_forwards(monkeypatch)
    assert main([*argv, "--refresh", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["created"] > first[0]["created"]


class ProfilePaced(AutoK):
    """Auto K that sees every step take what the profile says (no drafting or overhead): the
    test then decides the same on any machine, however the tiny model's batches time."""

    def observe(self, event: ev.StepEvent) -> None:
        ms = self.profile.cost_ms(len(event.proposed) + 1, event.position)
        super().observe(dataclasses.replace(event, timing=ev.Timing(0.0, ms, 0.0)))


def test_auto_k_run_is_lossless_and_reports_its_k(tiny_backend):
    p = prof.Profile("tiny", "transformers", "cpu", None, [64], [1, 2, 4, 8, 16],
                     [[10, 10.5, 11, 12, 14]])
    plain = Session(tiny_backend, make_oracle("none"), RunSettings(CODE_EDIT, k=0,
                                                                   max_tokens=40))
    plain_steps = [e for e in plain if isinstance(e, ev.StepEvent)]
    oracle = make_oracle("prompt-lookup")
    session = Session(tiny_backend, oracle, RunSettings(CODE_EDIT, k=4, max_tokens=40),
                      k_policy=ProfilePaced(oracle, p))
    steps = [e for e in session if isinstance(e, ev.StepEvent)]
    assert compare(steps, plain_steps).identical
    assert session.summary.text == plain.summary.text
    assert all(0 <= s.k <= 15 and len(s.proposed) <= s.k for s in steps)
    assert any(s.k > 0 for s in steps)  # it did speculate


@pytest.mark.parametrize("bad, message", [("--batches=0,2", "positive"),
                                          ("--contexts=a", "whole numbers")])
def test_bad_profile_arguments_are_one_line(capsys, tiny_model_dir, bad, message):
    code = main(["profile", "--target", str(tiny_model_dir), "--backend", "transformers", bad])
    assert code == 2
    assert message in capsys.readouterr().err


def test_run_with_auto_k_reports_the_mean_k(capsys, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    code = main(["run", "--target", str(tiny_model_dir), "--backend", "transformers",
                 "--no-chat", "--prompt", CODE_EDIT, "--max-tokens", "16", "--oracle",
                 "prompt-lookup", "--k", "auto", "--baseline", "--json"])
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert code == 0 and result["k"] == "auto" and "mean_k" in result
    assert result["identical_to_baseline"]
    assert "measuring the cost profile" in captured.err


def test_a_profile_measured_with_other_small_row_products_is_measured_again(
        capsys, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    steady_forwards(monkeypatch)  # each measurement stored at once, however busy the machine
    args = ["run", "--target", str(tiny_model_dir), "--backend", "transformers", "--no-chat",
            "--prompt", CODE_EDIT, "--max-tokens", "8", "--oracle", "prompt-lookup", "--k",
            "auto", "--threads", "1"]
    assert main(args) == 0
    stored = prof.load(str(tiny_model_dir), "transformers", "cpu", 1)
    assert stored.small_rows == sorted(prof_rows())  # measured with the routed products
    prof.save(dataclasses.replace(stored, small_rows=[]))  # as measured before routing
    capsys.readouterr()
    assert main(args) == 0
    assert "measuring the cost profile" in capsys.readouterr().err
    assert prof.load(str(tiny_model_dir), "transformers", "cpu", 1).small_rows == stored.small_rows
    assert main(args) == 0
    assert "measuring" not in capsys.readouterr().err  # now it fits


def prof_rows():
    from specviz.engines.backends.small_rows import ROWS

    return ROWS


def test_a_profile_of_an_older_version_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    table = prof.Profile("m", "llama", "cpu", 2, [64], [1, 2], [[1.0, 1.5]])
    prof.save(table)
    assert prof.load("m", "llama", "cpu", 2) == table
    prof.save(dataclasses.replace(table, version=prof.PROFILE_VERSION - 1))  # fewer sizes
    assert prof.load("m", "llama", "cpu", 2) is None


# smollm2-135m on llama.cpp, 2 threads, timed while test workers had both cores (2026-11-27):
# stored, it made auto K decline nearly every draft in every later run.
BUSY_ROW = [23.064, 313.453, 348.882, 149.75, 184.904, 521.641, 419.666, 221.956, 164.911]
QUIET_ROW = [15.63, 20.1, 23.4, 27.0, 30.2, 33.1, 32.5, 27.6, 29.9]  # the 0.5B's dips: 1.2x
BATCHES = [1, 2, 3, 4, 5, 6, 7, 8, 9]


def test_a_table_timed_on_a_busy_machine_is_told_from_a_quiet_ones_dips():
    assert prof.uneven([128], BATCHES, [QUIET_ROW]) == ""
    busy = prof.uneven([128, 512], BATCHES, [QUIET_ROW, BUSY_ROW])
    assert busy.startswith("at 512 cached tokens a batch of 2 took 313.5 ms, 2.1x a batch of 4")
    assert prof.uneven([64], [1, 2, 4], [[0.9, 2.4, 1.0]]) == ""  # 1 ms apart: a tiny model's


def busy_table(row=BUSY_ROW) -> prof.Profile:
    return prof.Profile("m", "llama", "cpu", 2, [128], BATCHES, [list(row)])


def test_a_busy_profile_is_stored_smoothed_at_its_first_try(tmp_path, monkeypatch):
    """A machine that is never quiet: the first measurement is stored at once, smoothed and
    marked, with one line (no run waits for a profile twice); later runs read it silently,
    `specviz profile` shows the mark, and a quiet measurement replaces it."""
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    path = prof.profile_path("m", "llama", "cpu", 2)
    said: list[str] = []
    first = busy_table()
    assert prof.keep(first, said.append) == path
    assert len(said) == 1 and "timed beside other work (at 128 cached tokens" in said[0]
    assert "specviz profile --target m --refresh" in said[0]
    stored = prof.load("m", "llama", "cpu", 2, say=said.append)
    assert len(said) == 1  # read silently by every later run
    assert stored.busy.startswith("at 128 cached tokens a batch of 2 took 313.5 ms")
    assert stored.ms == first.ms != [BUSY_ROW]  # this run prices as the later ones will
    assert stored.ms[0] == sorted(stored.ms[0]) and stored.ms[0][0] == BUSY_ROW[0]
    assert "measured on a busy machine" in prof.table(stored)
    assert [p.name for p in tmp_path.joinpath("profiles").iterdir()] == [path.name]
    quiet = busy_table(QUIET_ROW)
    assert prof.keep(quiet, said.append) == path and len(said) == 1
    assert prof.load("m", "llama", "cpu", 2) == quiet and not quiet.busy  # no mark left
    assert "busy" not in prof.table(quiet)


def test_a_busy_measurement_beside_a_stored_busy_one_keeps_each_cells_cheapest_time(
        tmp_path, monkeypatch):
    """Other work only adds time: two measurements slowed at different batches make a quiet
    table together, stored unmarked."""
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    first, second = list(QUIET_ROW), list(QUIET_ROW)
    first[1], second[5] = 300.0, 400.0
    said: list[str] = []
    assert prof.keep(busy_table(first), said.append) is not None and len(said) == 1
    assert prof.keep(busy_table(second), said.append) is not None and len(said) == 1
    stored = prof.load("m", "llama", "cpu", 2)
    assert stored.ms == [QUIET_ROW] and not stored.busy


def test_a_stored_busy_profile_is_improved_by_a_busy_measurement_and_never_worsened(
        tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    prof.save(busy_table())
    before = prof.load("m", "llama", "cpu", 2)
    assert before.busy and prof.uneven(before.contexts, before.batches, before.ms) == ""
    cheaper = [ms * 0.5 for ms in BUSY_ROW]
    cheaper[0] = BUSY_ROW[0] * 2  # one token slower this time: the earlier time is kept
    prof.save(busy_table(cheaper))
    after = prof.load("m", "llama", "cpu", 2)
    assert after.busy and after.ms[0][0] == BUSY_ROW[0]
    assert all(a <= b for a, b in zip(after.ms[0], before.ms[0]))
    assert after.ms[0] != before.ms[0]


def test_a_busy_table_stored_unsmoothed_before_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    path = prof.profile_path("m", "llama", "cpu", 2)  # one stored by an earlier version
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(busy_table().to_dict()))
    stored, why = prof.read("m", "llama", "cpu", 2)
    assert stored is None and "a batch of 2 took 313.5 ms" in why


def test_a_row_timed_while_the_machine_was_busy_is_timed_again(tiny_backend, monkeypatch):
    """The first pass at one context meets a busy machine (2-token batches at 300 ms among
    5-ms steps): that row alone is timed once more, and the progress counts the extra work."""
    first_pass = 3 * 3  # repeats x batch sizes at context 16

    def in_loop(backend, tokens, ctx, settled_steps=None):
        if ctx == 16:
            in_loop.at_16 += 1
        slow = ctx == 16 and in_loop.at_16 <= first_pass and len(tokens) == 2
        return 300.0 if slow else 5.0 + len(tokens)

    in_loop.at_16 = 0
    monkeypatch.setattr(measuring, "time_forward", lambda backend, tokens, ctx: 5.0)
    monkeypatch.setattr(measuring, "time_in_loop", in_loop)
    ticks: list[tuple[int, int]] = []
    p = prof.measure(tiny_backend, "tiny", batches=[1, 2, 4], contexts=[8, 16], repeats=3,
                     on_progress=lambda done, total: ticks.append((done, total)))
    assert prof.uneven(p.contexts, p.batches, p.ms) == ""
    assert in_loop.at_16 == 2 * first_pass
    assert ticks[-1] == (27, 27)  # two rows of 3 x 3, and the busy one again


def test_the_profile_a_backend_will_use_is_known_before_it_loads(tmp_path, monkeypatch,
                                                                   tiny_model_dir):
    """The window's curves and `specviz profile` look a profile up before any model loads:
    a transformers target's compiled steps where asked, or where a race here kept them."""
    from specviz.engines.backends import compile_choice, hf_compiled, llama_widths

    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    monkeypatch.delenv(hf_compiled.ENV, raising=False)
    monkeypatch.setenv(llama_widths.ENV, "on")
    plan = prof.planned_variant
    folder = str(tiny_model_dir)
    assert plan("llama", "cuda", "m.gguf", 2, None) == "pad8-16-33"
    assert plan("transformers", "cpu", folder, 2, "float32", "on") == "compiled"
    assert plan("transformers", "cpu", folder, 2, "float32", None) == ""  # off on a CPU
    assert plan("transformers", "cuda", folder, 2, "float32", None) == ""  # auto: not raced
    compile_choice.remember(compile_choice.store_path(), tiny_model_dir, 2, "cuda", "float32",
                            {"choice": "on", "eager_ms": 20.0, "compiled_ms": 3.0})
    assert plan("transformers", "cuda", folder, 2, "float32", None) == "compiled"
    assert plan("transformers", "cuda", str(tmp_path / "absent"), 2, "float32", "auto") == ""
