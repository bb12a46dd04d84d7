"""A stored cost profile that a run's own steps show was timed on a busier machine is
refined by those steps, never measured again (engines/cost/profile_fresh.py)."""

from __future__ import annotations

import json

import pytest
from test_cost import CPU_MS, FakeLookup, profile, step

from specviz.engines.cost import profile as prof
from specviz.engines.cost.auto_k import AutoK
from specviz.engines.cost.profile_fresh import MIN_STEPS, slower_than_run, stale_note
from specviz.engines.cost.profile_store import profile_path


def test_a_profile_is_stale_only_where_many_steps_ran_far_cheaper_than_it_says():
    assert slower_than_run(30.0, 0.4, MIN_STEPS - 1) == ""  # too few steps to tell
    assert slower_than_run(30.0, 0.6, 100) == ""  # a quiet profile's longer contexts
    assert slower_than_run(30.0, 1.6, 100) == ""  # a busier run: other work adds time
    why = slower_than_run(45.9, 18.7 / 45.9, 100)
    assert "45.9 ms then, 18.7 ms in this run" in why


def test_a_quiet_profile_dearer_than_the_runs_steps_at_longer_contexts_is_kept():
    # Live one-token steps at 0.6-0.85x of a quiet profile (its cells at longer contexts timed
    # on a freshly filled cache); 0.41-0.5x of one timed during a build.
    policy = stored(profile(CPU_MS))
    policy.scale_at[1], policy.one_token_ms = (0.6, 100), (18.0, 100)
    assert stale_note(policy) is None
    policy.scale_at[1], policy.one_token_ms = (0.45, 100), (13.5, 100)
    assert "30.0 ms then, 13.5 ms in this run" in stale_note(policy)


def ran(policy: AutoK, live_share: float, steps: int = 40) -> AutoK:
    """`steps` plain steps of a run whose one-token steps cost `live_share` of the profile's."""
    live = profile([ms * live_share for ms in CPU_MS])
    for i in range(steps):
        policy.choose(list(range(512 + i)))
        policy.observe(step(0, 0, position=512 + i, live=live, index=i + 1))
    return policy


def stored(timed) -> AutoK:
    path, _ = prof.store(timed)
    assert path == profile_path(timed.model, timed.backend, timed.device, timed.threads)
    return AutoK(FakeLookup(), timed)


def test_a_run_far_faster_than_its_stored_profile_refines_it_by_its_steps():
    timed = profile(CPU_MS)
    policy = ran(stored(timed), live_share=0.5)
    note = stale_note(policy)
    assert note and "refined by this run's steps" in note and "30.0 ms then, 15.0" in note
    again, why = prof.read(timed.model, timed.backend, timed.device, timed.threads)
    assert why == "" and again.created == timed.created  # kept: never measured again
    # one-token steps as the run saw them; batches it never sent scaled alike, never up
    assert again.ms[0] == pytest.approx([ms * 0.5 for ms in CPU_MS], rel=0.01)
    assert stale_note(policy) is None  # said once: the file holds the refined table


def test_a_profile_stored_as_busy_is_refined_by_a_milder_difference():
    timed = profile(CPU_MS)
    timed.busy = "at 512 cached tokens a batch of 2 took ..."
    assert stale_note(ran(stored(timed), live_share=0.8)) is not None
    quiet = profile(CPU_MS)
    assert stale_note(ran(stored(quiet), live_share=0.8)) is None


def test_a_run_as_fast_as_its_profile_or_slower_leaves_it_alone():
    for share in (0.9, 1.0, 2.0):
        timed = profile(CPU_MS)
        assert stale_note(ran(stored(timed), live_share=share)) is None
        kept, why = prof.read(timed.model, timed.backend, timed.device, timed.threads)
        assert kept is not None and why == "" and kept.created == timed.created


def test_a_profile_measured_again_meanwhile_is_not_condemned_by_an_older_run():
    old = profile(CPU_MS)
    policy = ran(stored(old), live_share=0.5)
    newer = profile(CPU_MS)
    newer.created = old.created + 60
    prof.store(newer)
    assert stale_note(policy) is None
    data = json.loads(profile_path(old.model, "llama", "cpu", 2).read_text())
    assert "refined" not in data


def test_a_lane_whose_run_shows_its_stored_profile_was_timed_busier_says_so(tiny_model_dir):
    """Where it is wired: a lane with auto K, built as the engine builds it, reads the stored
    profile (here ten times dearer than the tiny model's steps), and its notice after the run
    says the profile was refined by the run's steps; the file then holds the refined table."""
    from specviz.engines.cost.profile_data import routed_rows
    from specviz.engines.host.model_pool import ModelPool
    from specviz.engines.host.run_builder import acquire, build_lane
    from specviz.engines.host.run_spec import LaneSpec, ModelChoice, RunRequest

    model = ModelChoice(str(tiny_model_dir), "transformers", "cpu", 1)
    pool = ModelPool()
    try:
        target = acquire(pool, model, model.target)
        dear = prof.Profile(model.target, "transformers", target.device, 1, [128, 512],
                            [1, 2, 3, 4, 6, 8, 12, 16, 24, 32], [CPU_MS, CPU_MS],
                            small_rows=routed_rows(target), dtype=target.dtype,
                            variant=target.profile_variant)
        pool.release(target, reusable=True)
        prof.store(dear)
        request = RunRequest("def add(a, b):\n    return a + b\n\nThe quick brown fox", model,
                             48, chat=False)
        lane = build_lane("a", LaneSpec("prompt-lookup", 4, auto_k=True), request, pool)
        assert lane.session.k_policy.profile.ms[0] == CPU_MS  # the stored profile, read
        ended = list(lane.steps())[-1]
        note = lane.notice()
        lane.close()
    finally:
        pool.close()
    assert ended.reason == "max-tokens"
    assert note and "refined by this run's steps" in note and "30.0 ms then" in note, note
    kept, why = prof.read(model.target, "transformers", "cpu", 1, dear.dtype, dear.variant)
    assert why == "" and kept.ms[0][0] < CPU_MS[0] / 2
