"""Plain decoding on the transformers backend compiled (`--compile on`) against eager, and
against llama.cpp on the same device, in one process, the ways interleaved (issue #64).

Each way is loaded once; every round runs the same plain decoding (a chat-formatted prompt,
greedy, no oracle) through each way in turn, so a busy spell of the machine hits all of them
alike. Reported per way: tokens/s of the generation (prompt processing apart) each round, the
median and the spread (slowest round over the fastest), the median step in ms; and each
round's ratio over eager, with its median. The compiled way's load says what its compile cost
(the first start compiles into the specviz cache; later starts read it). The load average
before and after is kept: other work on the machine shows there.

    python benchmarks/compiled_plain.py --target smollm2-135m --dtype bfloat16 --threads 2 \\
        --ways eager,compiled --rounds 3 --max-tokens 64 --json out.json --markdown out.md
    python benchmarks/compiled_plain.py --device cuda --ways eager,compiled,llama ...

`--ways`: eager, compiled (the transformers backend, --compile off / on), compiled-sdpa
(compiled with transformers' own SDPA attention instead of the packed grouped-query heads:
hf_compiled.py), llama (llama.cpp on the same GGUF; dropped with a line where
llama-cpp-python is not installed or the model is a folder).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import time
from pathlib import Path

from specviz.engines.loop.session import RunSettings, Session
from specviz.engines.models import resolve
from specviz.engines.oracles.none import NoOracle

WAYS = ("eager", "compiled", "compiled-sdpa", "llama")
PROMPT = Path("assets/prompts/code-edit-scale.txt")


def load(way: str, path: Path, args):
    """The backend of one way, and what loading it cost."""
    from specviz.engines.backends import load_backend

    started = time.perf_counter()
    if way == "llama":
        backend = load_backend("llama", path, device=args.device, threads=args.threads,
                               n_ctx=args.n_ctx)
    else:
        from specviz.engines.backends import hf_compiled

        compiled = way.startswith("compiled")
        env = dict(e.split("=", 1) for e in args.compiled_env) if compiled else {}
        with environment(env):
            hf_compiled.PACKED_ATTENTION = way != "compiled-sdpa"
            try:
                backend = load_backend("transformers", path, device=args.device,
                                       threads=args.threads, dtype=args.dtype,
                                       compile="on" if compiled else "off")
            finally:
                hf_compiled.PACKED_ATTENTION = True
    facts = {"load_s": round(time.perf_counter() - started, 2),
             "device": getattr(backend, "device", args.device)}
    if way != "llama":
        facts["dtype"] = backend.dtype
        facts["compiled"] = backend.compiled
        steps = getattr(backend, "_steps", None)
        facts["compile_s"] = dict(steps.compile_seconds) if steps else {}
    return backend, facts


@contextlib.contextmanager
def environment(values: dict[str, str]):
    """These environment variables set for the block (read by a backend's load)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def set_inductor(settings: list[str]) -> None:
    """`torch._inductor.config` settings (NAME=PYTHON, e.g. freezing=True, cpp.threads=1): a
    remedy tried on the compiled way (its graphs compile again: the cache is keyed by them)."""
    import ast

    import torch._inductor.config as config

    for item in settings:
        name, value = item.split("=", 1)
        *parents, leaf = name.split(".")
        target = config
        for part in parents:
            target = getattr(target, part)
        setattr(target, leaf, ast.literal_eval(value))


def usable(ways: list[str], path: Path) -> list[str]:
    kept = []
    for way in ways:
        if way == "llama" and importlib.util.find_spec("llama_cpp") is None:
            print("llama: llama-cpp-python is not installed here, left out", flush=True)
        elif way == "llama" and path.is_dir():
            print("llama: the model is a folder, llama.cpp needs a GGUF: left out", flush=True)
        else:
            kept.append(way)
    return kept


def warm(backend, prompt_ids) -> None:
    """A one-token forward, so the first timed step does not pay for cold caches; one token,
    not session.warm_up's eight: on the compiled path eight would compile the 8-wide graph,
    which plain decoding never uses."""
    backend.reset()
    backend.forward(list(prompt_ids[:1]))
    backend.reset()


def plain(backend, prompt: str, tokens: int):
    session = Session(backend, NoOracle(), RunSettings(prompt, chat=True, k=0,
                                                       max_tokens=tokens))
    warm(backend, session.prompt_ids)
    summary = session.run_to_end()
    totals = summary.totals
    return {"tokens": totals.tokens, "tok_s": round(summary.tok_per_s, 2),
            "step_ms": round(totals.compute_ms / max(totals.steps, 1), 3),
            "text": summary.text}


def step_race(backends: dict, ids: list[int], steps: int) -> dict[str, dict[str, list]]:
    """ms of one-token steps on `len(ids) - 1` cached tokens, the ways alternating step by step
    (each step rolled back): on a shared machine both meet the same moment's load. Each step
    by the wall clock and by this process's CPU time: with one thread the CPU time is the
    step's own work, whatever else the machine runs (with more, threads waiting for each other
    spin and count too)."""
    n_past = len(ids) - 1
    for backend in backends.values():
        backend.reset()
        backend.forward(ids[:n_past])
    times = {"wall": {way: [] for way in backends}, "cpu": {way: [] for way in backends}}
    for i in range(steps + 2):  # two untimed: a CUDA graph is recorded on its second call
        for way, backend in backends.items():
            backend.synchronize()
            wall, cpu = time.perf_counter(), time.process_time()
            backend.forward(ids[n_past:])
            backend.synchronize()
            if i >= 2:
                times["wall"][way].append(1000 * (time.perf_counter() - wall))
                times["cpu"][way].append(1000 * (time.process_time() - cpu))
            backend.truncate(n_past)
    return times


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def race_summary(races: list[dict[str, dict[str, list]]], ways: list[str]) -> dict:
    """Per clock (wall, cpu): each way's step times, medians, p10 and speed over eager."""
    return {clock: clock_summary([r[clock] for r in races], ways) for clock in ("wall", "cpu")}


def clock_summary(races: list[dict[str, list[float]]], ways: list[str]) -> dict:
    out = {}
    for way in ways:
        medians = [statistics.median(r[way]) for r in races]
        every = [t for r in races for t in r[way]]
        out[way] = {"ms": [[round(t, 2) for t in r[way]] for r in races],
                    "min_ms": round(min(every), 3),
                    "median_ms_each_round": [round(m, 3) for m in medians],
                    "median_ms": round(statistics.median(medians), 3),
                    "p10_ms": round(percentile(every, 0.1), 3),
                    "spread": spread(medians)}
        if way != "eager" and "eager" in ways:
            ratios = [statistics.median(r["eager"]) / statistics.median(r[way]) for r in races]
            out[way]["speed_over_eager_each_round"] = [round(x, 3) for x in ratios]
            out[way]["median_speed_over_eager"] = round(statistics.median(ratios), 3)
            out[way]["p10_speed_over_eager"] = round(
                percentile([t for r in races for t in r["eager"]], 0.1) / out[way]["p10_ms"], 3)
    return out


def spread(values: list[float]) -> float:
    return round(max(values) / min(values), 3) if values and min(values) > 0 else float("nan")


def summarise(rounds: list[dict[str, dict]], ways: list[str]) -> dict:
    out = {}
    for way in ways:
        speeds = [r[way]["tok_s"] for r in rounds]
        out[way] = {"tok_s": speeds, "median_tok_s": round(statistics.median(speeds), 2),
                    "spread": spread(speeds),
                    "median_step_ms": round(statistics.median(r[way]["step_ms"]
                                                              for r in rounds), 3),
                    "same_text_as_first": all(r[way]["text"] == rounds[0][ways[0]]["text"]
                                              for r in rounds)}
        if way != "eager" and "eager" in ways:
            ratios = [r[way]["tok_s"] / r["eager"]["tok_s"] for r in rounds]
            out[way]["ratio_over_eager"] = [round(x, 3) for x in ratios]
            out[way]["median_ratio_over_eager"] = round(statistics.median(ratios), 3)
    return out


def markdown(result: dict) -> str:
    tried = ", ".join(result.get("inductor", []) + result.get("compiled_env", []))
    lines = [f"{result['target']} on {result['device']}, {result['dtype']}, "
             f"{result['max_tokens']} tokens, {len(result['rounds'])} rounds interleaved, "
             f"load {result['load_before']} -> {result['load_after']}"
             + (f"; compiled with {tried}" if tried else ""), "",
             "| way | tok/s each round | median | spread | step ms | over eager (median) | "
             "load s | compile s |", "|---|---|---|---|---|---|---|---|"]
    for way, s in result["ways"].items():
        facts = result["loads"][way]
        ratio = (f"{', '.join(f'{x:.2f}' for x in s['ratio_over_eager'])} "
                 f"(**{s['median_ratio_over_eager']:.2f}x**)" if "ratio_over_eager" in s
                 else "")
        compile_s = ", ".join(f"w{w}: {t}" for w, t in facts.get("compile_s", {}).items())
        lines.append(f"| {way} | {', '.join(f'{x:.1f}' for x in s['tok_s'])} | "
                     f"{s['median_tok_s']:.1f} | {s['spread']:.2f} | {s['median_step_ms']:.1f} "
                     f"| {ratio} | {facts['load_s']} | {compile_s} |")
    for clock, race in (result.get("step_race") or {}).items():
        lines += ["", f"One-token steps on {result['race_context']} cached tokens, the ways "
                  f"alternating step by step, {clock} time:", "",
                  "| way | median ms each round | median | p10 | speed over eager: each round "
                  "(median; at p10) |", "|---|---|---|---|---|"]
        for way, r in race.items():
            over = (f"{', '.join(f'{x:.2f}' for x in r['speed_over_eager_each_round'])} "
                    f"(**{r['median_speed_over_eager']:.2f}x**; {r['p10_speed_over_eager']:.2f}x)"
                    if "speed_over_eager_each_round" in r else "")
            lines.append(f"| {way} | {', '.join(f'{x:.1f}' for x in r['median_ms_each_round'])} "
                         f"| {r['median_ms']:.1f} | {r['p10_ms']:.1f} | {over} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, help="transformers: float32, bfloat16 (default "
                   "auto, as the backend chooses)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--ways", default="eager,compiled")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompt-file", type=Path, default=PROMPT)
    p.add_argument("--inductor", action="append", default=[], metavar="NAME=VALUE",
                   help="a torch._inductor.config setting for the compiled way, e.g. "
                        "freezing=True (repeatable)")
    p.add_argument("--compiled-env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable set while the compiled way loads, e.g. "
                        "SPECVIZ_SMALL_ROWS=off (repeatable)")
    p.add_argument("--race-steps", type=int, default=0,
                   help="after each round, this many one-token steps a way, the ways "
                        "alternating step by step (0: none)")
    p.add_argument("--race-context", type=int, default=64,
                   help="tokens of the prompt cached before the race's steps")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--markdown", type=Path, default=None)
    args = p.parse_args(argv)
    ways = [w for w in args.ways.split(",") if w]
    unknown = sorted(set(ways) - set(WAYS))
    if unknown or not ways:
        raise SystemExit(f"--ways takes {', '.join(WAYS)}, not {', '.join(unknown) or 'none'}")
    path = resolve(args.target)
    ways = usable(ways, path)
    set_inductor(args.inductor)
    load_before = round(os.getloadavg()[0], 2)
    backends, loads = {}, {}
    for way in ways:
        backends[way], loads[way] = load(way, path, args)
        print(f"{way}: loaded {loads[way]}", flush=True)
    prompt = args.prompt_file.read_text(encoding="utf-8")
    first = backends[ways[0]]
    ids = first.tokenize(prompt)[:args.race_context + 1]
    rounds, races = [], []
    for i in range(args.rounds):
        rounds.append({way: plain(backends[way], prompt, args.max_tokens) for way in ways})
        print(f"round {i + 1}: " + ", ".join(f"{w} {r['tok_s']:.1f} tok/s ({r['tokens']})"
                                             for w, r in rounds[-1].items()), flush=True)
        if args.race_steps:
            races.append(step_race(backends, ids, args.race_steps))
            print(f"race {i + 1}: " + ", ".join(
                f"{w} {statistics.median(races[-1]['wall'][w]):.1f} ms "
                f"(cpu {statistics.median(races[-1]['cpu'][w]):.1f})" for w in ways), flush=True)
    dtype = next((f["dtype"] for f in loads.values() if "dtype" in f), args.dtype)
    result = {"target": args.target, "device": args.device, "dtype": dtype,
              "threads": args.threads, "max_tokens": args.max_tokens,
              "inductor": args.inductor, "compiled_env": args.compiled_env,
              "prompt": str(args.prompt_file), "load_before": load_before,
              "load_after": round(os.getloadavg()[0], 2), "loads": loads,
              "ways": summarise(rounds, ways),
              "step_race": race_summary(races, ways) if races else None,
              "race_context": len(ids) - 1,
              "rounds": [{w: {k: v for k, v in r.items() if k != "text"}
                          for w, r in rnd.items()} for rnd in rounds]}
    table = markdown(result)
    print(table)
    if args.markdown:
        args.markdown.write_text(table + "\n", encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
