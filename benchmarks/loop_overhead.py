"""The decoding loop's own cost per step with each copying oracle and `--k auto`, the model
taken out: a backend that replays a recorded greedy output (`replay_auto_k.py dump`) answers
each forward at once. Where a step is fast (llama.cpp on an H200: 1.2 ms for smollm2) what the
loop, the oracle and auto K do in Python decides whether a declining oracle costs what plain
decoding costs.

    python benchmarks/loop_overhead.py plain.json [--oracles prompt-lookup,ngram,suffix]
        [--step-ms 1.2] [--limit 12]

Prints, per oracle, microseconds a step: auto K's choice (the oracle's match lookup apart),
auto K's learning after the step, and the oracle's indexing of the new tokens.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import numpy as np

from specviz.engines.backends.base import Backend
from specviz.engines.cost.auto_k import AutoK
from specviz.engines.cost.profile import Profile
from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.oracles import info, make_oracle

EOS = 2


class Replay(Backend):
    """Logits that put the recorded output's next token first; nothing else."""

    name, device = "llama", "cuda"

    def __init__(self, prompt: list[int], out: list[int], vocab: int) -> None:
        super().__init__()
        self.text, self.n_prompt, self.vocab = [*prompt, *out], len(prompt), vocab

    n_ctx = property(lambda self: 32768)
    n_vocab = property(lambda self: self.vocab)
    bos_id = property(lambda self: None)
    eos_ids = property(lambda self: frozenset({EOS}))
    chat_template = property(lambda self: None)

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return self.text[: self.n_prompt]

    def token_bytes(self, token_id: int) -> bytes:
        return b"x"

    def token_text_raw(self, token_id: int) -> str:
        return "x"

    def _forward(self, tokens: list[int], n_rows: int) -> np.ndarray:
        rows = np.zeros((n_rows, self.vocab), np.float32)
        first = self.n_past + len(tokens) - n_rows + 1
        for i in range(n_rows):
            at = first + i
            rows[i, self.text[at] if at < len(self.text) else EOS] = 10.0
        return rows

    def _truncate(self, n: int) -> None:
        pass


class Stopwatch:
    """Microseconds spent in wrapped callables, by name."""

    def __init__(self) -> None:
        self.us: dict[str, float] = {}

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.us[name] = self.us.get(name, 0.0) + (time.perf_counter() - started) * 1e6
        return timed


def measure(records: list[dict], oracle_name: str, profile: Profile, vocab: int) -> dict:
    # a tree needs a backend that verifies trees: its chains, as a replay takes them
    oracle = make_oracle(oracle_name, settings=info(oracle_name).chain_settings)
    policy = AutoK(oracle, profile)
    clock = Stopwatch()
    oracle.match_length = clock.wrap("lookup", oracle.match_length)  # inside choose
    oracle.observe = clock.wrap("indexing", oracle.observe)
    policy.choose = clock.wrap("choose", policy.choose)
    policy.observe = clock.wrap("learning", policy.observe)
    steps = 0
    for record in records:
        backend = Replay(record["prompt"], record["out"], vocab)
        session = Session(backend, oracle, RunSettings("", chat=False, k=4,
                                                       max_tokens=len(record["out"])),
                          k_policy=policy)
        steps += sum(1 for _ in session) - 1  # every event but the summary is a step
    us = {name: total / steps for name, total in clock.us.items()}
    us["choose"] -= us.get("lookup", 0.0)
    return {"steps": steps, **{k: round(v, 1) for k, v in us.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("record")
    p.add_argument("--oracles", default="prompt-lookup,ngram,suffix")
    p.add_argument("--step-ms", type=float, default=1.2,
                   help="a one-token step's price (the profile's shape is llama.cpp's on an H200)")
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--limit", type=int, default=12, help="records (turns) replayed")
    args = p.parse_args()
    with open(args.record) as f:
        records = json.load(f)[: args.limit]
    one = args.step_ms
    profile = Profile("replay", "llama", "cuda", None, [512], [1, 2, 4, 8, 16, 32],
                      [[one, 7.5 * one, 7.75 * one, 7.9 * one, 9.2 * one, 10 * one]])
    print("| oracle | steps | auto K's choice | the oracle's lookup | auto K's learning "
          "| the oracle's indexing |\n|---|---|---|---|---|---|")
    for name in args.oracles.split(","):
        r = measure(records, name, profile, args.vocab)
        print(f"| {name} | {r['steps']} | {r['choose']} us | {r.get('lookup', 0)} us "
              f"| {r['learning']} us | {r.get('indexing', 0)} us |")


if __name__ == "__main__":
    main()
