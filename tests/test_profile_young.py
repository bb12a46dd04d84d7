"""A first run's profile sized to the model and the machine (engines/cost/profile_plan.py),
stored at once, and completed in the engine's idle moments (profile_complete.py,
engines/host/young_profiles.py)."""

from __future__ import annotations

import dataclasses

import pytest
from steady_timing import steady_forwards

from specviz.engines.cost import profile as prof
from specviz.engines.cost import profile_measure as measuring
from specviz.engines.cost import profile_store
from specviz.engines.cost.profile_complete import complete_one, missing
from specviz.engines.cost.profile_plan import FIRST_RUN_S, Plan, fit, seconds
from specviz.engines.host.model_pool import ModelPool
from specviz.engines.host.run_spec import ModelChoice
from specviz.engines.host.young_profiles import YoungProfiles

CONTEXTS = [128, 512, 1024]


def test_a_cheap_model_is_timed_whole():
    plan = fit(CONTEXTS, prof.BATCHES, 3, one_ms=0.5, big_ms=1.0, budget_s=FIRST_RUN_S)
    assert plan == Plan(CONTEXTS, list(prof.BATCHES), 3)


def test_a_dearer_model_gives_up_a_repeat_contexts_a_second_repeat_then_wide_batches():
    ones = (5.0, 8.0, 15.0, 30.0, 45.0, 60.0, 400.0)
    plans = [fit(CONTEXTS, prof.BATCHES, 3, one, one * 6, FIRST_RUN_S) for one in ones]
    assert [(p.contexts, p.repeats, p.batches[-1]) for p in plans] == [
        (CONTEXTS, 2, 32), ([128, 512], 2, 32), ([128], 2, 32), ([128], 1, 32), ([128], 1, 9),
        ([128], 1, 9), ([128], 1, 9)]
    assert plans[4].batches == list(range(1, 10)) and plans[5].batches == [1, 2, 3, 5, 9]
    assert all({1, 2, 3, 5, 9} <= set(p.batches) for p in plans)  # never fewer than these
    for plan, one in zip(plans[:6], ones):  # what fits, fitted; the rest take the least
        assert seconds(plan.contexts, plan.batches, plan.repeats, one, one * 6, 32) <= 5
    assert plans[-1].young(CONTEXTS, prof.BATCHES)
    assert not plans[0].young(CONTEXTS, prof.BATCHES)


def test_smollm2_and_the_15b_on_two_cores_fit_the_budget_or_take_the_least():
    # One-token and 32-token forwards as timed on a 2-core EPYC (MODELS.md, cost-profile.md).
    smol = fit(CONTEXTS, prof.BATCHES, 3, 15.0, 90.0, FIRST_RUN_S)
    assert smol.contexts and seconds(smol.contexts, smol.batches, smol.repeats, 15, 90) <= 5
    big = fit(CONTEXTS, prof.BATCHES, 3, 100.0, 1200.0, FIRST_RUN_S)  # the 1.5B, AVX2
    assert big == Plan([128], [1, 2, 3, 5, 9], 1)
    assert seconds(big.contexts, big.batches, 1, 100.0, 1200.0, 32) < 10


def test_a_first_runs_measurement_times_what_its_budget_holds(tiny_backend, monkeypatch):
    steady_forwards(monkeypatch, one_ms=40.0, row_ms=5.0)  # a dear model: one context
    young = prof.measure(tiny_backend, "m", 1, contexts=[16, 32, 48], repeats=3,
                         budget_s=FIRST_RUN_S)
    assert young.young and young.contexts == [16] and young.batches == list(prof.BATCHES)
    steady_forwards(monkeypatch, one_ms=0.1, row_ms=0.01)
    whole = prof.measure(tiny_backend, "m", 1, contexts=[16, 32, 48], repeats=3,
                         budget_s=FIRST_RUN_S)
    assert not whole.young and whole.contexts == [16, 32, 48] and whole.repeats == 3


def young_profile(tiny_backend, monkeypatch, tmp_path) -> prof.Profile:
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    monkeypatch.setattr("specviz.engines.cost.profile_complete.CONTEXTS", (16, 32, 48))
    steady_forwards(monkeypatch, one_ms=40.0, row_ms=5.0)
    young = prof.measure(tiny_backend, "m", 1, contexts=[16, 32, 48], repeats=3,
                         budget_s=FIRST_RUN_S)
    prof.save(young)
    return young


def test_idle_moments_add_the_missing_contexts_one_row_at_a_time(tiny_backend, monkeypatch,
                                                                   tmp_path):
    young = young_profile(tiny_backend, monkeypatch, tmp_path)
    assert missing(young, tiny_backend.n_ctx) == [32, 48]
    grown = complete_one(tiny_backend, young, busy=lambda: False)
    assert grown.contexts == [16, 32] and grown.young and len(grown.ms) == 2
    assert grown.ms[0] == young.ms[0]  # the first row as it was
    stored = prof.load("m", tiny_backend.name, tiny_backend.device, 1)
    assert stored.contexts == [16, 32]
    done = complete_one(tiny_backend, grown, busy=lambda: False)
    assert done.contexts == [16, 32, 48] and not done.young
    assert complete_one(tiny_backend, done, busy=lambda: False) is None
    assert tiny_backend.n_past == 0  # the cache left empty for the next run


def test_work_arriving_gives_the_row_up_and_leaves_the_profile_as_it_was(
        tiny_backend, monkeypatch, tmp_path):
    young = young_profile(tiny_backend, monkeypatch, tmp_path)
    asked = []
    assert complete_one(tiny_backend, young, busy=lambda: asked.append(1) or True) is None
    assert len(asked) == 1  # given up at the first forward timed
    assert prof.load("m", tiny_backend.name, tiny_backend.device, 1).contexts == [16]


class _Lane:
    """What YoungProfiles reads of a built lane: its session's auto K and its profiles."""

    def __init__(self, profile):
        policy = type("Policy", (), {"profile": profile, "draft_profile": None})()
        self.session = type("Session", (), {"k_policy": policy})()


def test_the_engine_grows_a_young_profile_on_its_pooled_model_while_idle(
        tiny_model_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    monkeypatch.setattr("specviz.engines.cost.profile_complete.CONTEXTS", (16, 32, 48))
    steady_forwards(monkeypatch, one_ms=40.0, row_ms=5.0)
    model = ModelChoice(str(tiny_model_dir), "transformers", "cpu", 1)
    pool = ModelPool()
    said: list[str] = []
    try:
        young = YoungProfiles()
        backend = pool.acquire("transformers", tiny_model_dir, "cpu", 1, model.n_ctx)
        profile = prof.measure(backend, str(tiny_model_dir), 1, contexts=[16, 32, 48],
                               repeats=3, budget_s=FIRST_RUN_S)
        prof.save(profile)
        pool.release(backend)
        young.note([_Lane(profile), _Lane(None)], model)
        young.note([_Lane(profile)], model)  # noted once
        assert len(young.profiles) == 1
        young.grow(pool, busy=lambda: False, say=said.append)
        assert said == [f"cost profile of {tiny_model_dir}: timed at 32 cached tokens while "
                        "idle"]
        young.grow(pool, busy=lambda: False, say=said.append)
        assert not young.profiles and pool.loads == 1  # grown whole on the loaded model
    finally:
        pool.close()


def test_a_model_let_go_is_not_loaded_again_to_grow_its_profile(tiny_model_dir, monkeypatch,
                                                                 tmp_path):
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    model = ModelChoice(str(tiny_model_dir), "transformers", "cpu", 1)
    young = YoungProfiles()
    profile = prof.Profile(str(tiny_model_dir), "transformers", "cpu", 1, [128],
                           [1, 2], [[1.0, 2.0]], young=True)
    young.note([_Lane(profile)], model)
    pool = ModelPool()
    young.grow(pool, busy=lambda: False, say=pytest.fail)
    assert not young.profiles and pool.loads == 0


def test_a_first_runs_profile_beside_other_work_is_timed_on_the_free_cores(tiny_backend,
                                                                          monkeypatch):
    # Two threads beside a busy process wait on each other at every operation: a first run
    # times its profile on the threads the free cores allow, says so, and is refined later.
    held = []
    monkeypatch.setattr(tiny_backend.cpu_threads, "nominal", 2)
    monkeypatch.setattr("specviz.engines.machine.cpu_load.start_threads", lambda most: 1)
    real = measuring.time_forward

    def timed(backend, tokens, ctx):
        held.append(backend.threads_now)
        real(backend, tokens, ctx)
        return 2.0 + 0.5 * (len(tokens) - 1)

    monkeypatch.setattr(measuring, "time_forward", timed)
    young = prof.measure(tiny_backend, "m", None, contexts=[16], repeats=1,
                         budget_s=FIRST_RUN_S)
    assert set(held) == {1} and young.busy == ("timed on 1 of 2 threads: other work had the "
                                               "other cores")
    held.clear()
    prof.measure(tiny_backend, "m", None, contexts=[16], repeats=1)  # a whole one: nominal
    assert set(held) == {2}


def test_idle_growth_grows_the_stored_profile_and_never_a_newer_one(tiny_backend, monkeypatch,
                                                                      tmp_path):
    young = young_profile(tiny_backend, monkeypatch, tmp_path)
    refined = [round(ms * 0.5, 3) for ms in young.ms[0]]
    assert profile_store.refine(young, [refined])  # a run's steps refined it meanwhile
    grown = complete_one(tiny_backend, young, busy=lambda: False)
    assert grown.ms[0] == refined and grown.contexts == [16, 32]
    newer = dataclasses.replace(grown, created=grown.created + 60, young=False)
    prof.save(newer)  # `specviz profile --refresh` meanwhile
    assert complete_one(tiny_backend, grown, busy=lambda: False) is None
    assert prof.load("m", tiny_backend.name, tiny_backend.device, 1) == newer


def test_a_busy_young_profile_grows_its_table_as_timed_too(tiny_backend, monkeypatch,
                                                           tmp_path):
    young = young_profile(tiny_backend, monkeypatch, tmp_path)
    busy = dataclasses.replace(young, busy="at 16 cached tokens ...", timed=[list(young.ms[0])])
    prof.save(busy)
    grown = complete_one(tiny_backend, busy, busy=lambda: False)
    stored, why = prof.read("m", tiny_backend.name, tiny_backend.device, 1)
    assert why == "" and len(stored.timed) == len(stored.ms) == 2 == len(grown.timed)


def test_a_dear_models_first_profile_gives_up_the_widest_batches_and_idle_time_adds_them(
        tiny_backend, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_HOME", str(tmp_path))
    monkeypatch.setattr("specviz.engines.cost.profile_complete.CONTEXTS", (16, 32))
    steady_forwards(monkeypatch, one_ms=120.0, row_ms=20.0)  # the 1.5B on 2 busy cores
    young = prof.measure(tiny_backend, "m", 1, contexts=[16, 32], repeats=3,
                         budget_s=FIRST_RUN_S)
    assert young.young and young.contexts == [16] and young.batches == [1, 2, 3, 5, 9]
    prof.save(young)
    whole = complete_one(tiny_backend, young, busy=lambda: False)
    assert whole.batches == list(prof.BATCHES) and whole.contexts == [16] and whole.young
    grown = complete_one(tiny_backend, whole, busy=lambda: False)
    assert grown.contexts == [16, 32] and not grown.young
