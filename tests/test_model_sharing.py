"""Backends that share loaded weights, and the pool that keeps them between runs."""

from __future__ import annotations

import pytest

from specviz.engines import events as ev
from specviz.engines.backends import load_backend
from specviz.engines.host.model_pool import ModelPool
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles.none import NoOracle
from specviz.engines.oracles.prompt_lookup import PromptLookupOracle

PROMPTS = ("def add(a, b):\n    return a + b\n\ndef add(a, b):", "The quick brown fox")


def _session(backend, prompt: str, oracle=None, k: int = 0) -> Session:
    return Session(backend, oracle or NoOracle(),
                   RunSettings(prompt, chat=False, k=k, max_tokens=20))


def _interleaved(sessions: list[Session]) -> list[list[int]]:
    """Step the sessions in turn, as the lanes of one device worker do; their tokens."""
    tokens: list[list[int]] = [[] for _ in sessions]
    runs = [iter(s) for s in sessions]
    live = list(range(len(runs)))
    while live:
        still = []
        for i in live:
            event = next(runs[i])
            if isinstance(event, ev.StepEvent):
                tokens[i] += event.emitted_ids
                still.append(i)
        live = still
    return tokens


def _alone(backend, prompt: str, oracle=None, k: int = 0) -> list[int]:
    session = _session(backend, prompt, oracle, k)
    return [t for e in session if isinstance(e, ev.StepEvent) for t in e.emitted_ids]


def check_sharing(backend) -> None:
    """Interleaved lanes on shared weights give each lane the tokens it gets alone."""
    alone = [_alone(backend, PROMPTS[0], PromptLookupOracle(), 4), _alone(backend, PROMPTS[1])]
    first, second = backend.share(), backend.share()
    try:
        together = _interleaved([_session(first, PROMPTS[0], PromptLookupOracle(), 4),
                                 _session(second, PROMPTS[1])])
    finally:
        first.close()
    assert together == alone
    # Closing one sharer leaves the weights to the others.
    assert _alone(second, PROMPTS[1]) == alone[1]
    second.close()


def test_tiny_shared_backends_keep_their_own_caches(tiny_backend):
    check_sharing(tiny_backend)


@pytest.mark.model
def test_smollm2_llama_shared_backends_keep_their_own_caches(smol_llama):
    check_sharing(smol_llama)


@pytest.mark.model
def test_llama_weights_outlive_the_backend_that_loaded_them(smollm2_path):
    owner = load_backend("llama", smollm2_path, n_ctx=512, threads=1)
    expected = _alone(owner, PROMPTS[1])
    sharer = owner.share()
    owner.close()
    assert _alone(sharer, PROMPTS[1]) == expected
    sharer.close()


def test_pool_shares_weights_between_lanes_and_reuses_them_between_runs(tiny_model_dir):
    pool = ModelPool()
    args = ("transformers", tiny_model_dir, "cpu", 1)
    a, b = pool.acquire(*args), pool.acquire(*args)
    assert a is not b and a.model is b.model  # two caches, one copy of the weights
    assert pool.loads == 1
    pool.release(a)
    pool.release(b)
    again = {id(pool.acquire(*args)), id(pool.acquire(*args))}
    assert again == {id(a), id(b)} and pool.loads == 1  # the next run loads nothing
    pool.close()


def test_pool_frees_what_the_next_run_does_not_use(tiny_model_dir):
    pool = ModelPool()
    backend = pool.acquire("transformers", tiny_model_dir, "cpu", 1)
    pool.release(backend)
    assert pool.idle_count == 1
    pool.keep_only([])  # other settings: the model goes
    assert pool.idle_count == 0 and backend.model is None


def test_pool_closes_a_failed_lanes_backend(tiny_model_dir):
    pool = ModelPool()
    backend = pool.acquire("transformers", tiny_model_dir, "cpu", 1)
    pool.release(backend, reusable=False)  # its cache may be half-written
    assert pool.idle_count == 0 and backend.model is None
    fresh = pool.acquire("transformers", tiny_model_dir, "cpu", 1)
    assert fresh is not backend and pool.loads == 2
    pool.close()
    pool.release(fresh)  # lent out when the pool closed: freed on its return
    assert fresh.model is None


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_load_collects_once_then_freezes_and_leaves_the_collector_as_it_was(tiny_model_dir):
    """A load runs with automatic collection paused (a transformers load walked the growing
    heap 18 times, 3.6 s of 12); its garbage is collected once and what lives on is frozen.
    Dropping a model thaws: what died since in cycles is freed, the rest frozen again. A
    process that collects on its GUI thread only keeps automatic collection off."""
    import gc
    import weakref

    from specviz.engines import heap

    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            gc.unfreeze()
            pool = ModelPool()
            with heap.loading():
                assert not gc.isenabled()
                garbage = weakref.ref(_Cycle())  # made and dropped during the load
            assert garbage() is None and gc.isenabled() is enabled

            gc.unfreeze()
            kept = _Cycle()  # alive when the model loads: frozen with it
            backend = pool.acquire("transformers", tiny_model_dir, "cpu", 1)
            assert gc.get_freeze_count() > 0 and gc.isenabled() is enabled
            dead, kept = weakref.ref(kept), None
            assert dead() is not None  # frozen: no collection reaches it
            gc.collect()
            assert dead() is not None
            pool.release(backend)
            pool.keep_only([])  # the model dropped: thawed, collected, frozen again
            assert dead() is None and gc.get_freeze_count() > 0
            pool.close()
    finally:
        gc.unfreeze()
        (gc.enable if was else gc.disable)()


def test_a_failed_load_is_collected_not_frozen():
    import gc
    import weakref

    from specviz.engines import heap

    gc.unfreeze()
    half = None
    try:
        with heap.loading():
            half = weakref.ref(_Cycle())
            raise RuntimeError("a corrupt file")
    except RuntimeError:
        pass
    assert half() is None and gc.get_freeze_count() == 0


@pytest.mark.parametrize("oracle", ["draft", "cross-draft", "tree"])
def test_a_draft_lane_runs_again_on_the_pools_draft(tiny_model_dir, oracle):
    """The pool lends the draft to the next run: the lane that ends must not have closed it
    (the window's second run of a draft lane failed on a closed model)."""
    from specviz.engines.host.run_builder import build_lane
    from specviz.engines.host.run_spec import LaneSpec, ModelChoice, RunRequest

    pool = ModelPool()
    request = RunRequest("hello there", ModelChoice(str(tiny_model_dir), "transformers", "cpu",
                                                    1), 8, chat=False)
    for _ in range(2):
        lane = build_lane("a", LaneSpec(oracle, 3, draft=str(tiny_model_dir)), request, pool)
        steps = [e for e in lane.steps() if isinstance(e, ev.StepEvent)]
        lane.close()
        assert steps and sum(len(s.proposed) for s in steps) > 0
    pool.close()
