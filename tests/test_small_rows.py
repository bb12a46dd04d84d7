"""Small-row linear products: the rule that picks the faster way, the product, and the plan
measured once per machine and model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from specviz.engines.backends import small_rows as sr  # noqa: E402


def test_rule_routes_row_counts_only_where_clearly_faster():
    default = {1: 56.0, 2: 91.0, 3: 112.0, 4: 80.0, 8: 60.0}
    routed = {1: 33.0, 2: 32.0, 3: 41.0, 4: 75.0, 8: 70.0}
    assert sr.faster_rows(default, routed) == {1, 2, 3}  # 4 is within the 10% margin
    assert sr.faster_rows(default, default) == frozenset()


def test_a_count_between_measured_ones_follows_the_next_one_up():
    rows = frozenset({1, 2, 3, 4, 5, 6, 8, 16})
    assert sr.covers(rows, 7) and sr.covers(rows, 13)
    assert not sr.covers(rows, 10)  # decided by 12, not routed
    assert not sr.covers(rows, 17)  # above every measured count


@pytest.mark.parametrize("shape", [(1, 24), (2, 24), (3, 24), (1, 5, 24), (2, 3, 24)])
def test_the_routed_product_is_the_linear_layer(shape):
    layer = torch.nn.Linear(24, 40)
    x = torch.randn(*shape)
    got = sr.routed_product(layer.weight, layer.bias, x)
    assert got.shape == (*shape[:-1], 40)
    torch.testing.assert_close(got, layer(x), rtol=1e-5, atol=1e-5)


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(),
                               torch.nn.Linear(32, 16, bias=False))


def test_route_sends_the_chosen_row_counts_the_routed_way(monkeypatch):
    model, calls = _mlp(), []
    real = sr.routed_product
    monkeypatch.setattr(sr, "routed_product", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(2, 16)
    plain = model(x)
    assert sr.route(model, frozenset({1, 2})) == 2
    torch.testing.assert_close(model(x), plain, rtol=1e-5, atol=1e-5)
    assert len(calls) == 2  # both layers, two rows
    model(torch.randn(40, 16))  # a prefill: the default way
    assert len(calls) == 2
    assert sr.route(_mlp(), frozenset()) == 0


def test_a_copy_of_a_routed_layer_computes_with_its_own_weights():
    import copy

    layer = torch.nn.Linear(8, 8)
    sr.route(torch.nn.Sequential(layer), frozenset({1}))
    twin = copy.deepcopy(layer)
    with torch.no_grad():
        twin.weight.mul_(2.0)
    x = torch.randn(1, 8)
    torch.testing.assert_close(twin(x), x @ twin.weight.T + twin.bias)


def test_the_plan_is_measured_once_and_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv(sr.ENV, "auto")
    measured = []

    def fake_times(weights):
        measured.append(len(weights))
        return {1: 10.0, 2: 20.0, 3: 30.0}, {1: 5.0, 2: 19.0, 3: 10.0}

    monkeypatch.setattr(sr, "time_products", fake_times)
    store = tmp_path / "small-rows.json"
    assert sr.plan(_mlp(), 2, store) == {1, 3}
    assert sr.plan(_mlp(), 2, store) == {1, 3}
    assert measured == [2]  # the second plan read the store
    sr.plan(_mlp(), 1, store)  # another thread count is another measurement
    assert measured == [2, 2]
    store.write_text("{not json")
    assert sr.plan(_mlp(), 2, store) == {1, 3}  # a corrupt store is measured again


def test_the_environment_overrides_the_measurement(tmp_path, monkeypatch):
    monkeypatch.setattr(sr, "time_products", lambda w: pytest.fail("measured"))
    monkeypatch.setenv(sr.ENV, "off")
    assert sr.plan(_mlp(), 2, tmp_path / "s.json") == frozenset()
    monkeypatch.setenv(sr.ENV, "on")
    assert sr.plan(_mlp(), 2, tmp_path / "s.json") == frozenset(sr.ROWS)


def test_measuring_times_both_ways_for_every_row_count():
    weights = [layer.weight.detach() for layer in _mlp() if isinstance(layer, torch.nn.Linear)]
    default, routed = sr.time_products(weights, rows=(1, 2), repeats=1)
    assert set(default) == set(routed) == {1, 2}
    assert all(ms > 0 for ms in [*default.values(), *routed.values()])


def test_the_transformers_backend_routes_on_a_cpu(tiny_backend):
    assert tiny_backend.small_rows == frozenset(sr.ROWS)  # SPECVIZ_SMALL_ROWS=on in tests
    layer = tiny_backend.model.lm_head
    assert "forward" in vars(layer)  # its own forward, the routed one
