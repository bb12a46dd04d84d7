"""Hidden states entering chosen decoder layers at every position the target's cache holds.

EAGLE-style heads read the target's features at low, middle and high layers for the whole
context (their own attention runs over it). Layer i's feature is the residual stream entering
decoder layer i (the output of layer i-1, no norm), as published EAGLE-3 heads take it. Unlike
Medusa's single row, these rows are kept
for every position: each forward's rows are appended where its tokens sit, a rollback cuts
them, a tree verification keeps only the accepted path's nodes.
"""

from __future__ import annotations

from collections.abc import Sequence


def decoder_layers(model):
    """The decoder's layer list (every causal LM in transformers keeps it as `.layers`)."""
    layers = getattr(model.get_decoder(), "layers", None)
    if layers is None:
        raise AttributeError(f"{type(model).__name__} has no decoder layer list")
    return layers


class LayerInputHooks:
    """Forward pre-hooks on chosen decoder layers: what enters them in each forward, joined
    along the features in the order asked, is handed to `on_forward` (batch, positions,
    features). A layer named twice (a shallow model) is hooked once. Shared by the runtime's
    features (LayerFeatures) and training's answers (training.answers)."""

    def __init__(self, model, layer_ids: Sequence[int], on_forward,
                 armed=lambda: True) -> None:
        layers = decoder_layers(model)
        self.order = tuple(int(i) for i in layer_ids)
        for i in self.order:
            if not 0 <= i < len(layers):
                raise ValueError(f"layer {i} does not exist (the model has {len(layers)})")
        self._on_forward = on_forward
        self._armed = armed  # caught only while this says so (not other lanes' forwards)
        self._parts: dict[int, object] = {}  # layer index -> what entered it in this forward
        self._hooks = [layers[i].register_forward_pre_hook(self._catcher(i), with_kwargs=True)
                       for i in sorted(set(self.order))]

    def _catcher(self, index: int):
        def catch(_module, args, kwargs) -> None:
            if not self._armed():
                return
            self._parts[index] = args[0] if args else kwargs["hidden_states"]
            if len(self._parts) == len(self._hooks):
                import torch

                parts, self._parts = self._parts, {}
                self._on_forward(torch.cat([parts[i] for i in self.order], dim=-1))
        return catch

    def reset(self) -> None:
        """Forget a forward's parts (one that failed midway)."""
        self._parts = {}

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []


class LayerFeatures:
    """Rows of the concatenated inputs of `layer_ids`, one per cached position."""

    def __init__(self) -> None:
        self._hooks: LayerInputHooks | None = None
        self._armed = False
        self._caught = None  # this forward's joined inputs, once every layer has seen it
        self._order: tuple[int, ...] = ()
        self._rows = None  # (positions, features) tensor, position 0 first

    @property
    def layers(self) -> tuple[int, ...]:
        return self._order

    def enable(self, model, layer_ids: Sequence[int] | None) -> None:
        """Hook the given layers (None: unhook); rows kept so far are dropped."""
        if self._hooks is not None:
            self._hooks.close()
        self._hooks, self._rows, self._caught, self._order = None, None, None, ()
        if model is None or not layer_ids:
            return
        self._hooks = LayerInputHooks(model, layer_ids, self._catch, lambda: self._armed)
        self._order = self._hooks.order

    def _catch(self, joined) -> None:
        self._caught = joined

    def arm(self) -> None:
        self._armed, self._caught = self._hooks is not None, None
        if self._hooks is not None:
            self._hooks.reset()

    def took(self, start: int) -> None:
        """A forward ended whose tokens sit at positions start, start+1, ... Rows always
        begin at position 0; a forward after a gap (rows not held) leaves none."""
        self._armed = False
        caught, self._caught = self._caught, None
        if caught is not None:
            self.put(caught[0].detach(), start)

    def put(self, new, start: int) -> None:
        """Rows `new` (n, features) for positions start, start+1, ... after those held."""
        import torch

        if start == 0:
            self._rows = new
        elif self._rows is not None and len(self._rows) >= start:
            self._rows = torch.cat([self._rows[:start], new])
        else:
            self._rows = None

    def cut(self, n: int) -> None:
        """The cache now holds only positions < n."""
        if self._rows is not None:
            self._rows = self._rows[:n] if n > 0 else None

    def select(self, n_past: int, path: Sequence[int]) -> None:
        """A masked forward's rows are tree nodes after `n_past`: keep the accepted chain's."""
        if self._rows is None or len(self._rows) < n_past:
            return
        import torch

        nodes = self._rows[n_past:]
        chain = nodes[list(path)] if path else nodes[:0]
        self._rows = torch.cat([self._rows[:n_past], chain])

    def rows(self, start: int, end: int):
        """Rows for positions [start, end), or None where any of them is not held."""
        if self._rows is None or start < 0 or end > len(self._rows) or start > end:
            return None
        return self._rows[start:end]

    def __len__(self) -> int:
        return 0 if self._rows is None else len(self._rows)
