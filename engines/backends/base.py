"""The one interface the speculative engine drives.

A backend owns a model and its KV cache. The engine appends tokens with `forward`, reads
logits for the positions it asks for, and rolls the cache back with `truncate` after a
rejection. Everything else (sampling, verification, detokenisation) lives outside the
backend so that both implementations behave identically.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from ..errors import BackendError, ContextOverflow
from .chat import render_chat

# What a backend can offer beyond logits, named in Backend.provides and in the oracles'
# registry (what each oracle needs).
HIDDEN_STATES = "hidden states"  # hidden rows, layer features, the first L layers alone


class Backend(ABC):
    """A causal LM with a rollback-able cache of the tokens it has processed."""

    name: str  # "llama" or "transformers"
    device: str  # "cpu", "cuda", "mps", ...
    model_path: str
    provides: frozenset[str] = frozenset()  # capabilities beyond logits (HIDDEN_STATES)
    # What its products compute in; None: the backend's own (llama.cpp: the file's types).
    dtype: str | None = None
    # Names a cost profile beside model, device, threads and dtype where the same model's
    # steps cost otherwise (llama.cpp's padded widths on a GPU): "" for none.
    profile_variant: str = ""
    # True while a cost profile is timed: the thread count it is named for, throughout.
    threads_held: bool = False
    held_count: int | None = None  # the count held instead of the nominal one

    def __init__(self) -> None:
        self._tokens: list[int] = []  # what the cache holds, in order
        # The last forward_masked's (tokens, depths, visible), held in the cache until kept.
        self._nodes: tuple[list[int], list[int], list[set[int]]] | None = None

    @contextmanager
    def holding_threads(self, count: int | None = None) -> Iterator[None]:
        """Its nominal thread count (or `count`) throughout, however busy the machine (a
        cost profile is timed at the count it is named for, not at what the free cores
        allowed from one moment to the next)."""
        self.threads_held, self.held_count = True, count
        self._hold_threads()
        try:
            yield
        finally:
            self.threads_held, self.held_count = False, None

    @property
    def nominal_threads(self) -> int | None:
        """The CPU threads its forwards run on when the machine is quiet (None: not its
        business, e.g. a GPU's)."""
        return None

    def _hold_threads(self) -> None:
        """Back to the nominal thread count now (backends that follow the free cores)."""

    def busy_note(self) -> str | None:
        """What other work on the machine made it do differently this run, in one line."""
        return None

    # ------------------------------------------------------------ properties

    @property
    @abstractmethod
    def n_ctx(self) -> int:
        """Context length the cache can hold."""

    @property
    @abstractmethod
    def n_vocab(self) -> int:
        """Rows of the logits (may exceed the tokenizer's real vocabulary: padding)."""

    @property
    @abstractmethod
    def bos_id(self) -> int | None: ...

    @property
    @abstractmethod
    def eos_ids(self) -> frozenset[int]:
        """Tokens that end generation (EOS and end-of-turn)."""

    @property
    @abstractmethod
    def chat_template(self) -> str | None:
        """The model's Jinja chat template, if it ships one."""

    @property
    def tokens(self) -> list[int]:
        """A copy of the tokens held in the cache."""
        return list(self._tokens)

    @property
    def n_past(self) -> int:
        return len(self._tokens)

    # ------------------------------------------------------------ text

    @abstractmethod
    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        """Text to token ids; `add_special` adds BOS where the model wants one."""

    @abstractmethod
    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes of one token (may be an incomplete UTF-8 sequence)."""

    @abstractmethod
    def token_text_raw(self, token_id: int) -> str:
        """The token as the vocabulary spells it (for comparing vocabularies)."""

    @property
    def vocab_type(self) -> str:
        """The tokenizer's algorithm as the runtime names it (BPE, SPM, Unigram, ...)."""
        return "unknown"

    @property
    def tokenizer_size(self) -> int:
        """Tokens the tokenizer really has; n_vocab may add padding rows to the logits."""
        return self.n_vocab

    def detokenize(self, ids: Sequence[int]) -> str:
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")

    def detokenize_one(self, token_id: int) -> str:
        """One token's text on its own (a lone byte of a character shows as U+FFFD)."""
        return self.detokenize([token_id])

    def is_special(self, token_id: int) -> bool:
        """Control tokens are not printed as text."""
        return False

    def format_prompt(
        self,
        user_text: str,
        chat: bool,
        system: str | None = None,
        history: Sequence[tuple[str, str]] = (),
    ) -> str:
        """The text the model is fed: the chat template around `user_text`, or it as is.

        `history` holds earlier (user, assistant) turns of a multi-turn conversation.
        """
        if not chat or not self.chat_template:
            return "".join(u + a for u, a in history) + user_text
        messages = [{"role": "system", "content": system}] if system else []
        for user, assistant in history:
            messages += [{"role": "user", "content": user},
                         {"role": "assistant", "content": assistant}]
        messages.append({"role": "user", "content": user_text})
        bos = self.token_text_raw(self.bos_id) if self.bos_id is not None else ""
        eos = self.token_text_raw(min(self.eos_ids)) if self.eos_ids else ""
        return render_chat(self.chat_template, messages, bos_token=bos, eos_token=eos)

    def encode_prompt(self, prompt_text: str, chat: bool) -> list[int]:
        """Token ids of a formatted prompt: with a template the BOS is in the text already."""
        ids = self.tokenize(prompt_text, add_special=True)
        if chat and self.bos_id is not None and ids[:2] == [self.bos_id, self.bos_id]:
            ids = ids[1:]  # templates that write the BOS themselves
        return ids

    # ------------------------------------------------------------ cache

    def forward(self, tokens: Sequence[int], logits: str | int = "last") -> np.ndarray:
        """Append `tokens` to the cache; return float32 logits of shape (rows, n_vocab).

        `logits` is "last" (one row), "all" (a row per token: a verification batch), or an
        int n for the last n tokens.
        """
        if not tokens:
            raise ValueError("forward() needs at least one token")
        if self.n_past + len(tokens) > self.n_ctx:
            raise ContextOverflow(
                f"context full: {self.n_past} + {len(tokens)} tokens exceed the model's "
                f"context of {self.n_ctx}"
            )
        n_rows = {"last": 1, "all": len(tokens)}.get(logits, logits)  # type: ignore[arg-type]
        if not isinstance(n_rows, int) or not 0 < n_rows <= len(tokens):
            raise ValueError(f"bad logits request {logits!r} for {len(tokens)} tokens")
        self.discard_nodes()
        out = self._forward(list(tokens), n_rows)
        self._tokens.extend(tokens)
        return out

    def truncate(self, n: int) -> None:
        """Roll the cache back so it holds only its first `n` tokens."""
        self.discard_nodes()
        if n < self.n_past:
            self._truncate(n)
            del self._tokens[n:]

    def sync(self, context: Sequence[int], logits: str | int = "last") -> np.ndarray | None:
        """Make the cache hold `context`: keep the common prefix, forward the rest.

        Returns the logits asked for, or None when nothing had to be forwarded. Drafters use
        this so they need not track the target's rollbacks.
        """
        common = common_prefix(self._tokens, context)
        if common == len(context) and common == self.n_past:
            return None
        if common == len(context):  # context is a prefix of the cache: re-run its last token
            common -= 1
        self.truncate(common)
        return self.forward(context[common:], logits)

    def reset(self) -> None:
        self.truncate(0)

    def prepare_widths(self) -> None:
        """Set up now what verifications of any width need (compiled steps' graphs), so that
        no timed step pays for it; most backends need nothing."""

    # ------------------------------------------------------------ trees

    def forward_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """`forward_masked` for a token tree: node i follows `parents[i]` (-1: the cache)."""
        return self.forward_masked(tokens, *tree_layout(parents))

    def forward_masked(
        self, tokens: Sequence[int], depths: Sequence[int], visible: Sequence[Sequence[int]]
    ) -> np.ndarray:
        """Score many candidate continuations in one pass; return a logits row per node.

        Node i sits at position n_past + depths[i] and attends to the cache, itself and the
        earlier nodes listed in visible[i]. A tree (each node sees its ancestors) is the
        common case; lookahead's Jacobi window is not a tree, hence the general form.
        The nodes stay in the cache, outside `tokens`, until `keep_path` keeps a chain of
        them (or `discard_nodes`, `forward` or `truncate` drops them all).
        """
        n = len(tokens)
        if not n or len(depths) != n or len(visible) != n:
            raise ValueError("forward_masked needs tokens, depths and visible of one length")
        for i, (d, vis) in enumerate(zip(depths, visible)):
            if d < 0 or any(not 0 <= j < i for j in vis):
                raise ValueError(f"node {i}: bad depth {d} or visible nodes {list(vis)}")
        if self.n_past + max(depths) + 1 > self.n_ctx or self.n_past + n > self.n_ctx:
            raise ContextOverflow(
                f"context full: {self.n_past} + {n} tree nodes exceed the model's context "
                f"of {self.n_ctx}"
            )
        self.discard_nodes()
        out = self._forward_masked(list(tokens), list(depths), [sorted(v) for v in visible])
        self._nodes = (list(tokens), list(depths), [set(v) for v in visible])
        return out

    def keep_path(self, path: Sequence[int]) -> None:
        """Keep nodes `path` (a chain at depths 0, 1, ...) as the cache's continuation."""
        nodes = self._nodes
        if nodes is None:
            raise ValueError("keep_path() needs a forward_masked() before it")
        tokens, depths, visible = nodes
        for d, i in enumerate(path):
            if depths[i] != d or (d and path[d - 1] not in visible[i]):
                raise ValueError(f"nodes {list(path)} are not a chain from depth 0")
        self._keep_path(list(path))
        self._nodes = None
        self._tokens.extend(tokens[i] for i in path)

    def discard_nodes(self) -> None:
        """Drop the nodes of the last `forward_masked` that were not kept."""
        if self._nodes is not None:
            self._keep_path([])
            self._nodes = None

    def reserve_branches(self, n: int) -> None:
        """Get ready for masked batches with up to `n` nodes (llama.cpp: sequence ids)."""

    def _forward_masked(
        self, tokens: list[int], depths: list[int], visible: list[list[int]]
    ) -> np.ndarray:
        raise NotImplementedError(f"the {self.name} backend cannot verify token trees")

    def _keep_path(self, path: list[int]) -> None:
        raise NotImplementedError(f"the {self.name} backend cannot verify token trees")

    @abstractmethod
    def _forward(self, tokens: list[int], n_rows: int) -> np.ndarray: ...

    @abstractmethod
    def _truncate(self, n: int) -> None: ...

    def share(self) -> Backend:
        """Another backend on the same loaded weights, with an empty cache of its own.

        Lanes that run one model then hold one copy of its weights. Each backend is still
        driven by one thread at a time; the weights are freed when the last one is closed.
        """
        raise NotImplementedError(f"the {self.name} backend cannot share its weights")

    # Whether a batch of streams computes every stream at the widest one's width (a padded
    # tensor), not the streams' tokens side by side (llama.cpp's batch): what a pass costs.
    pads_streams = False

    def stream_cache(self, n_streams: int):
        """A batch of `n_streams` prompts decoded together on this model's weights
        (stream_cache.StreamCache), with a cache of its own."""
        raise BackendError(f"the {self.name} backend cannot decode several streams at once "
                           "yet: use --backend llama")

    def stream_targets(self, n_streams: int):
        """The target as a batch of `n_streams` (its session, which calls stream_cache) sees
        it, and as each stream's oracle does: the backend itself where nothing differs."""
        return self, [self] * n_streams

    def close(self) -> None:
        """Free the model (idempotent)."""


def tree_layout(parents: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """Depths and ancestor lists of a tree given by parent indices (-1: the cache end)."""
    depths: list[int] = []
    ancestors: list[list[int]] = []
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"node {i}: parent {parent} must be -1 or an earlier node")
        if parent < 0:
            depths.append(0)
            ancestors.append([])
        else:
            depths.append(depths[parent] + 1)
            ancestors.append([*ancestors[parent], parent])
    return depths, ancestors


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two sequences share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def sync_device(backend: Backend) -> None:
    """Wait for the device (a GPU runs asynchronously), so the timings are the work's."""
    sync = getattr(backend, "synchronize", None)
    if sync:
        sync()
