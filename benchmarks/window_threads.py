"""One engine thread or two in the window: three-lane races (`specviz shot` under Xvfb), the
thread counts alternating, each shot with its own empty traces folder; one JSON line a shot
with the plain lane's tokens/s and each speculating lane's ratio to it, read from the traces
the window wrote.

    python benchmarks/window_threads.py --prompts assets/prompts/code-edit-rename.txt,... \
        --repeat 5 [--target smollm2-135m] [--threads 2,1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from specviz.engines.trace import read_trace

ORACLES = "none,prompt-lookup,suffix"


def shot(prompt: str, threads: int, target: str, out: Path) -> dict:
    home = Path(tempfile.mkdtemp(prefix="window-threads-"))
    env = {**os.environ, "SPECVIZ_SUFFIX_MEMORY": "off", "XDG_DATA_HOME": str(home)}
    subprocess.run(["xvfb-run", "-a", "specviz", "shot", str(out), "--target", target,
                    "--threads", str(threads), "--max-tokens", "96", "--oracles", ORACLES,
                    "--prompt-file", prompt], env=env, check=True, stderr=subprocess.DEVNULL)
    summaries = {}
    for path in sorted(home.rglob("*.jsonl")):
        trace = read_trace(path)
        summaries[trace.header["oracle"]] = trace.events[-1]
    plain = summaries.pop("none")
    return {"plain_tok_s": round(plain.tok_per_s, 1), "tokens": plain.totals.tokens,
            **{name: round(s.tok_per_s / plain.tok_per_s, 3) for name, s in summaries.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", required=True, help="comma-separated prompt files")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--threads", default="2,1")
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "window-threads")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for rep in range(args.repeat):
        for prompt in args.prompts.split(","):
            for threads in map(int, args.threads.split(",")):
                start = time.time()
                png = args.out / f"{Path(prompt).stem}-t{threads}-r{rep}.png"
                row = shot(prompt, threads, args.target, png)
                print(json.dumps({"prompt": Path(prompt).stem, "threads": threads, "rep": rep,
                                  **row, "wall_s": round(time.time() - start, 1)}), flush=True)


if __name__ == "__main__":
    main()
