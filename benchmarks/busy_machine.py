"""llama.cpp beside other work: plain decoding and a verification of 8, quiet and beside one
and two busy processes, for each way of choosing threads (issue #73, point 1).

Ways (each in a child process of its own, since OpenMP reads its wait policy once):
  auto          threads left to specviz: they follow the cores other work leaves free
  t2, t1        a fixed count (the command line's --threads N)
  t2-passive    two threads, OpenMP's threads sleeping at once when they wait
  WAY-spinN     WAY with libgomp spinning N times (10k: 10000) before a wait sleeps
  server-auto, server-t2, server-t2-passive
                a spawned llama-server (plain) timed by its own clock (/completion)

Conditions rotate quiet -> busy1 -> busy2 within every round, the ways in turn within each,
so a drift of the machine lands on all of them alike. Busy = `python -c 'while True: pass'`.

    python benchmarks/busy_machine.py --ways auto,t2,t1,t2-passive --rounds 2
    python benchmarks/busy_machine.py --ways server-auto,server-t2,server-t2-passive,auto
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BUSY = [sys.executable, "-c", "while True: pass"]
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def child(way: str, target: str, tokens: int) -> dict:
    """One way's figures in this process."""
    from specviz.engines.models.store import resolve

    model = resolve(target)
    if way.startswith("server-"):
        return _server(way.removeprefix("server-"), model, tokens)
    from specviz.engines.backends.llama import LlamaBackend

    backend = LlamaBackend(model, n_ctx=1024, threads=_threads(way))
    try:
        return {**_plain(backend, tokens), **_verify8(backend)}
    finally:
        backend.close()


def _threads(way: str) -> int | None:
    return None if way.startswith("auto") else int(way[1])


def _plain(backend, tokens: int) -> dict:
    from specviz.engines import events as ev
    from specviz.engines.loop.session import RunSettings, Session, warm_up
    from specviz.engines.oracles.none import NoOracle

    session = Session(backend, NoOracle(), RunSettings(PROMPT, k=0, max_tokens=tokens))
    warm_up(backend, session.prompt_ids)
    steps = [e for e in session if isinstance(e, ev.StepEvent)]
    ms = [s.timing.verify_ms for s in steps]
    # The forwards alone (batch filled, llama_decode, the logits row read), as a server's
    # `predicted_per_second` counts its decoding alone: the rest of plain_tok_s is the loop's.
    decode_tok_s = sum(len(s.emitted_ids) for s in steps) / (sum(ms) / 1000)
    return {"plain_tok_s": session.summary.tok_per_s, "decode_tok_s": decode_tok_s,
            "step_ms_max": max(ms),
            "threads_end": getattr(backend, "threads_now", None)}


def _verify8(backend, repeats: int = 20) -> dict:
    ids = backend.tokenize(PROMPT * 10)[:128]
    backend.reset()
    backend.forward(ids[:120])
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        backend.forward(ids[120:128], logits=8)
        times.append((time.perf_counter() - t) * 1000)
        backend.truncate(120)
    return {"verify8_ms": statistics.median(times)}


def _server(way: str, model, tokens: int) -> dict:
    import httpx

    from specviz.engines.machine.cpu_load import start_threads
    from specviz.engines.machine.hardware import compute_threads
    from specviz.engines.servers.spawn import SpawnedServer

    threads = start_threads(compute_threads()) if way == "auto" else int(way[1])
    server = SpawnedServer(model, threads=threads, ctx=1024)
    try:
        body = {"prompt": PROMPT, "n_predict": tokens, "ignore_eos": True, "cache_prompt": False}
        with httpx.Client(timeout=600, trust_env=False) as client:
            client.post(f"{server.url}/completion", json={**body, "n_predict": 8})  # warm
            reply = client.post(f"{server.url}/completion", json=body).json()
        return {"plain_tok_s": reply["timings"]["predicted_per_second"], "threads_end": threads}
    finally:
        server.stop()


def run_way(way: str, target: str, tokens: int) -> dict:
    env = dict(os.environ)
    if way.endswith("-passive"):
        env["OMP_WAIT_POLICY"] = "passive"
    if "-spin" in way:  # OpenMP's spins before a waiting thread sleeps (libgomp: 300000)
        env["GOMP_SPINCOUNT"] = way.rsplit("-spin", 1)[1].replace("k", "000")
    out = subprocess.run([sys.executable, __file__, "--child", way, "--target", target,
                          "--max-tokens", str(tokens)], env=env, capture_output=True,
                         text=True, timeout=900)
    if out.returncode:
        raise SystemExit(f"{way}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def busy(n: int) -> list[subprocess.Popen]:
    procs = [subprocess.Popen(BUSY) for _ in range(n)]
    time.sleep(0.5)  # running before the way starts, as a user's other work would be
    return procs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ways", default="auto,t2,t1,t2-passive")
    p.add_argument("--conditions", default="0,1,2", help="busy processes beside, in turn")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--child")
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.target, args.max_tokens)))
        return
    results: dict[tuple[str, int], list[dict]] = {}
    for r in range(args.rounds):
        for n in map(int, args.conditions.split(",")):
            procs = busy(n)
            try:
                for way in args.ways.split(","):
                    fig = run_way(way, args.target, args.max_tokens)
                    results.setdefault((way, n), []).append(fig)
                    print(json.dumps({"round": r, "busy": n, "way": way, **fig}), flush=True)
            finally:
                for proc in procs:
                    proc.kill()
    _table(results, args.ways.split(","))


def _table(results: dict, ways: list[str]) -> None:
    print("\nway | busy | plain tok/s (each round) | of quiet | verify 8 ms | threads at end")
    for way in ways:
        quiet = statistics.median(f["plain_tok_s"] for f in results.get((way, 0), [{}])
                                  if f) if (way, 0) in results else None
        for (w, n), figs in sorted(results.items()):
            if w != way:
                continue
            speeds = [f["plain_tok_s"] for f in figs]
            share = f"{statistics.median(speeds) / quiet:.0%}" if quiet else "-"
            v8 = [f["verify8_ms"] for f in figs if "verify8_ms" in f]
            print(f"{way} | {n} | {'/'.join(f'{s:.1f}' for s in speeds)} | {share} | "
                  f"{'/'.join(f'{v:.1f}' for v in v8) or '-'} | "
                  f"{'/'.join(str(f.get('threads_end')) for f in figs)}")


if __name__ == "__main__":
    main()
