"""How long a GGUF takes to load into the transformers backend, gguf's own reader against the
plain-array reader specviz installs (engines/models/gguf_read.py): each way in a fresh
process with an empty SPECVIZ_HOME, a first load (the tokenizer and config read from the file)
then a later one (read from the kept folder), the ways in turn.

    python benchmarks/gguf_load.py --rounds 2

Prints each load's seconds, then the ways' figures side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

WAYS = ("own", "plain")


def child(way: str, model: str) -> None:
    """Two loads in this process, timed; gguf's own reader kept where `way` says."""
    from specviz.engines.backends import load_backend
    from specviz.engines.models import gguf_read

    if way == "own":
        gguf_read.install = lambda: None
    times = []
    for _ in range(2):
        t = time.perf_counter()
        backend = load_backend("transformers", model, device="cpu")
        times.append(time.perf_counter() - t)
        del backend
    print(json.dumps(times))


def run(way: str, model: str) -> list[float]:
    with tempfile.TemporaryDirectory() as home:
        out = subprocess.run([sys.executable, __file__, "--child", way, "--model", model],
                             env={**os.environ, "SPECVIZ_HOME": home}, check=True,
                             capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--child", choices=WAYS, help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.model)
        return
    from specviz.engines.models.store import resolve

    model = str(resolve(args.target))
    seen: dict[str, list[list[float]]] = {way: [] for way in WAYS}
    for r in range(args.rounds):
        for way in (WAYS if r % 2 == 0 else WAYS[::-1]):
            first, later = run(way, model)
            seen[way].append([first, later])
            print(f"round {r + 1} {way}: first load {first:.1f} s, later load {later:.1f} s",
                  flush=True)
    for way, loads in seen.items():
        firsts = ", ".join(f"{f:.1f}" for f, _ in loads)
        laters = ", ".join(f"{later:.1f}" for _, later in loads)
        print(f"{way}: first {firsts} s; later {laters} s")


if __name__ == "__main__":
    main()
