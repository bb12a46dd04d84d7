"""Same EAGLE head, two engines: its acceptance by draft position in llama-server's
draft-eagle3 (the head exported by `specviz heads export-gguf`) and in specviz's own eagle
oracle, on the same prompt tokens.

    python benchmarks/eagle_llama_server.py [--target smollm2-135m] [--head DIR] [--gguf FILE]

llama-server gets specviz's prompt ids (the chat template applied by specviz), greedy, K
tokens drafted a step; its acceptance by position comes from /metrics
(`llamacpp:spec_decode_num_accepted_tokens_per_pos_total` over `spec_decode_num_drafts_total`,
read before and after each prompt). specviz runs two lanes on the transformers backend: the
eagle oracle as `specviz run --oracle eagle --k K` runs it (a tree, int8 head), and a chain of
K with the head in the target's dtype (top_k 1, budget K, int8 0), llama.cpp's drafting rule. A
step's position i counts as accepted where at least i + 1 of its drafts were.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from specviz.engines import events as ev
from specviz.engines.eagle import llama_convert
from specviz.engines.eagle.checkpoint import head_dir
from specviz.engines.host.model_pool import ModelPool
from specviz.engines.host.run_builder import build_lane
from specviz.engines.host.run_spec import LaneSpec, ModelChoice, RunRequest
from specviz.engines.models import resolve

ROOT = Path(__file__).resolve().parents[1]
PER_POS = re.compile(r'^llamacpp:spec_decode_num_accepted_tokens_per_pos_total\{position="(\d+)"\}'
                     r" (\S+)$", re.M)
DRAFTS = re.compile(r"^llamacpp:spec_decode_num_drafts_total (\S+)$", re.M)


def specviz_lanes(k: int) -> dict[str, dict]:
    return {"specviz tree (run's defaults)": {},
            "specviz chain (top_k 1, budget K, int8 0)": {"top_k": 1, "budget": k, "int8": 0}}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary: Path, model: Path, head: Path, k: int, threads: int) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [str(binary), "-m", str(model), "-md", str(head), "--spec-type", "draft-eagle3",
             "--spec-draft-n-max", str(k), "--metrics", "-t", str(threads), "-c", "4096",
             "--host", "127.0.0.1", "--port", self.url.rsplit(":", 1)[1], "--no-webui"],
            stdout=subprocess.DEVNULL, stderr=self.log,
            # OpenMP's spinning threads made draft-eagle3 5x slower on a busy 2-core CPU
            env={**os.environ, "OMP_WAIT_POLICY": "passive"})
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise SystemExit(f"llama-server exited: {self.log.read()[-600:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise SystemExit("llama-server did not start")

    def counters(self) -> tuple[float, list[float]]:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        drafts = DRAFTS.search(text)
        per_pos = sorted((int(p), float(v)) for p, v in PER_POS.findall(text))
        return (float(drafts.group(1)) if drafts else 0.0), [v for _, v in per_pos]

    def complete(self, ids: list[int], max_tokens: int) -> dict:
        return httpx.post(self.url + "/completion", timeout=600, json={
            "prompt": ids, "n_predict": max_tokens, "temperature": 0, "top_k": 1,
            "cache_prompt": False, "return_tokens": True}).json()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)
        self.log.close()


def run_specviz(pool, target: str, head: Path, prompt: str, k: int, max_tokens: int,
                settings: dict, threads: int, dtype: str | None):
    request = RunRequest(prompt, ModelChoice(target, backend="transformers", threads=threads,
                                             dtype=dtype), max_tokens=max_tokens)
    lane = build_lane("eagle", LaneSpec(oracle="eagle", k=k, settings=settings,
                                        eagle_head=str(head)), request, pool)
    try:
        steps = [e for e in lane.steps() if isinstance(e, ev.StepEvent)]
        ids = list(lane.session.prompt_ids)
        dtype = getattr(lane.session.target, "dtype", None)
        summary = lane.session.summary
        text = summary.text if summary else ""
    finally:
        lane.close()
    drafted = [s for s in steps if s.proposed]
    per_pos = [sum(1 for s in drafted if s.n_accepted > i) for i in range(k)]
    out_ids = [t for s in steps for t in s.emitted_ids]
    print(f"specviz's target computed in {dtype}", file=sys.stderr)
    return ids, {"drafts": len(drafted), "per_pos": per_pos, "ids": out_ids, "text": text,
                 "tok_per_s": summary.tok_per_s if summary else None}


def common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--head", type=Path, default=None, help="default: the target's own head")
    p.add_argument("--gguf", type=Path, default=None,
                   help="the head exported (default: beside it, HEAD-f16.gguf)")
    p.add_argument("--prompts", nargs="+",
                   default=sorted(glob.glob(str(ROOT / "assets/prompts/code-edit-*.txt"))))
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                   help="specviz's target (and head) dtype (default: as `specviz run` picks "
                        "it on this CPU)")
    args = p.parse_args()
    model = resolve(args.target)
    head = args.head or head_dir(model)
    gguf = args.gguf or head.parent / f"{head.name}-f16.gguf"
    binary = llama_convert.server_binary()
    if binary is None:
        raise SystemExit("llama-server is not built (specviz llama-server build)")

    pool = ModelPool()
    lanes = specviz_lanes(args.k)
    rows: dict[str, dict] = {name: {"drafts": 0, "per_pos": [0] * args.k} for name in
                             ["llama-server draft-eagle3", *lanes]}
    prompts_ids, outputs = [], {name: [] for name in rows}
    for path in args.prompts:
        prompt = Path(path).read_text(encoding="utf-8")
        for name, settings in lanes.items():
            ids, got = run_specviz(pool, args.target, head, prompt, args.k, args.max_tokens,
                                   settings, args.threads, args.dtype)
            _add(rows[name], got)
            outputs[name].append(got["ids"])
        prompts_ids.append(ids)
        print(f"{Path(path).name}: specviz done", file=sys.stderr)
    pool.close()

    server = Server(binary, model, gguf, args.k, args.threads)
    try:
        for ids in prompts_ids:
            before = server.counters()
            reply = server.complete(ids, args.max_tokens)
            after = server.counters()
            per_pos = [a - (before[1][i] if i < len(before[1]) else 0)
                       for i, a in enumerate(after[1])]
            _add(rows["llama-server draft-eagle3"], {
                "drafts": after[0] - before[0], "per_pos": per_pos,
                "tok_per_s": reply["timings"].get("predicted_per_second"),
                "text": reply.get("content", "")})
            outputs["llama-server draft-eagle3"].append(list(reply.get("tokens") or []))
    finally:
        server.close()

    report(rows, outputs, args)
    return 0


def _add(row: dict, got: dict) -> None:
    row.setdefault("by_prompt", []).append({"drafts": got["drafts"],
                                            "per_pos": list(got["per_pos"]),
                                            "text": got["text"]})
    row["drafts"] += got["drafts"]
    row["per_pos"] = [a + b for a, b in zip(row["per_pos"], got["per_pos"], strict=False)]
    row.setdefault("tok_per_s", []).append(got["tok_per_s"])


def report(rows: dict, outputs: dict, args) -> None:
    """The table (each rate with its binomial standard error), how far the engines' greedy
    outputs agree, and the figures as JSON."""
    k = args.k
    print(f"| engine | drafted steps | {' | '.join(f'pos {i + 1}' for i in range(k))} "
          "| accepted / step |")
    print("|---|---:|" + "---:|" * k + "---:|")
    for name, row in rows.items():
        n = max(row["drafts"], 1)
        rates = [c / n for c in row["per_pos"]]
        cells = [f"{r:.1%} ±{(r * (1 - r) / n) ** 0.5:.1%}" for r in rates]
        print(f"| {name} | {row['drafts']:.0f} | " + " | ".join(cells)
              + f" | {sum(rates):.2f} |")
    server = outputs["llama-server draft-eagle3"]
    for name in list(rows)[1:]:
        agree = [common(a, b) for a, b in zip(server, outputs[name], strict=False)]
        print(f"tokens llama-server's and {name}'s outputs share from the start, by prompt: "
              f"{agree} (of {[len(a) for a in server]} and {[len(b) for b in outputs[name]]})")
    print(json.dumps(rows))


if __name__ == "__main__":
    sys.exit(main())
