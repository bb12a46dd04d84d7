"""Several prompts at once from the command line: `specviz run --streams N` and
`specviz bench --streams 1,2,4,8` (engines/loop/streams.py, engines/bench/concurrency.py)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path

from ...board.describe import streams_words
from ...engines import atomic
from ...engines.backends.stream_cache import MAX_STREAMS
from ...engines.bench import concurrency as conc
from ...engines.bench import served
from ...engines.host.model_pool import ModelPool
from ...engines.host.run_builder import settings as run_settings
from ...engines.host.run_spec import AUTO
from ...engines.host.server_lanes import spawn_plan
from ...engines.host.stream_builder import PROMPT_SETS, StreamsBuilder, prompt_set
from ...engines.host.stream_lanes import streams_header
from ...engines.loop.streams import BatchEvent, StreamsSession
from ...engines.oracles import is_plain
from ...engines.oracles.registry import PLAIN, SPAWNED
from ...engines.trace import TraceWriter, machine_info
from . import options
from .console import speedup_words


def add_stream_args(p: argparse.ArgumentParser, many: bool = False) -> None:
    g = p.add_argument_group("streams (several prompts decoded at once, batched)")
    if many:
        g.add_argument("--streams", type=stream_list, default=None,
                       help=f"stream counts to measure, comma-separated, each 1..{MAX_STREAMS} "
                            "(e.g. 1,2,4,8): speculation against plain decoding of as many "
                            "streams batched alike, and where it stops paying")
    else:
        g.add_argument("--streams", type=stream_count, default=None,
                       help=f"decode N prompts at once (1..{MAX_STREAMS}), one batched pass "
                            "per step over every stream")
    g.add_argument("--stream-prompts", choices=PROMPT_SETS, default=None,
                   help="what the streams decode, in turn: the prompt given (the default for "
                        "run), the quick start's prompt files, or Spec-Bench's first turns "
                        "(the default for bench without --questions)")


def stream_count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"streams must be a whole number, got {text!r}") \
            from None
    if not 1 <= n <= MAX_STREAMS:
        raise argparse.ArgumentTypeError(f"streams must be between 1 and {MAX_STREAMS}, "
                                         f"got {n}")
    return n


def stream_list(text: str) -> list[int]:
    return sorted({stream_count(t.strip()) for t in text.split(",") if t.strip()})


def _say(text: str) -> None:
    print(f"specviz: {text}", file=sys.stderr)


# ------------------------------------------------------------------ specviz run --streams N


def run_streams(args: argparse.Namespace, prompt: str | None) -> int:
    prompts = prompt_set(args.stream_prompts or "given", prompt)
    request = options.run_request(args, prompts[0])
    pool = ModelPool()
    spec = options.lane_spec(args, args.oracle)
    lane = StreamsBuilder(spec, request, pool, _say)
    plain = (StreamsBuilder(options.lane_spec(args, PLAIN), request, pool, _say)
             if args.baseline else None)
    try:
        traced = partial(_traced, args.trace, spec, request, prompts)
        result = _measured(args, lane, plain, prompts, traced)
    finally:
        for builder in (lane, plain):
            if builder:
                builder.close()
        pool.close()
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        _print_run(result)
    return 0


def _measured(args, lane: StreamsBuilder, plain: StreamsBuilder | None,
              prompts: list[str], traced) -> dict:
    """The run's figures; `traced(session)` steps a session, writing it to --trace."""
    n = args.streams
    if plain is None:
        session = lane.session(prompts, n)
        for _ in traced(session):
            pass
        summary = session.summary
        return {**_run_figures(args, summary), "streams_detail": _streams(summary)}
    kept: list = []

    def lane_run(k: int):
        kept.append(lane.session(prompts, k))
        return traced(kept[-1]) if len(kept) == 1 else kept[-1]  # the first round's

    point = conc.measure(n, lane_run, partial(plain.session, prompts), args.rounds)
    summary = kept[0].summary
    return {**_run_figures(args, summary), **point.to_dict(),
            "streams_detail": _streams(summary)}


def _traced(path: Path | None, spec, request, prompts: list[str],
            session: StreamsSession) -> Iterable[BatchEvent]:
    """The session, each batch step and its summary written to `path` as it steps, after a
    header naming every stream's prompt (a trace of N streams: engines/trace.py)."""
    if path is None:
        return session
    return _written(session, TraceWriter(path, streams_header(spec, request, session,
                                                              prompts, _say)))


def _written(session: StreamsSession, writer: TraceWriter) -> Iterator[BatchEvent]:
    with writer:
        for batch in session:
            writer.write(batch)
            yield batch


def _run_figures(args, summary) -> dict:
    totals = [s.totals for s in summary.summaries]
    steps = sum(t.steps for t in totals)
    return {"oracle": args.oracle, "k": 0 if is_plain(args.oracle) else args.k,
            "streams": len(summary.summaries), "tokens": summary.tokens,
            "tok_per_s": round(summary.tok_per_s, 3), "steps": summary.steps,
            "mean_k": round(sum(t.proposed for t in totals) / steps, 3) if steps else 0.0,
            "failures": [line for _, line in summary.failures]}


def _streams(summary) -> list[dict]:
    return [{"stream": i, "tokens": s.totals.tokens, "steps": s.totals.steps,
             "pace": round(pace, 3),
             "reason": s.reason, "accepted": s.totals.accepted, "proposed": s.totals.proposed,
             "text": s.text, **({"error": s.error} if s.error else {})}
            for i, (s, pace) in enumerate(zip(summary.summaries, summary.paces))]


def _print_run(result: dict) -> None:
    for s in result["streams_detail"]:
        print(f"--- stream {s['stream'] + 1} ({s['reason']}, {s['tokens']} tokens, "
              f"{s['pace']:.1f} tokens/s)")
        print(s["text"])
    line = (f"{result['streams']} streams: {result['tokens']} tokens, "
            f"{result['tok_per_s']:.1f} tokens/s in all")
    if "speedup" in result:
        line += (f"; plain decoding of as many streams {result['plain_tok_per_s']:.1f} "
                 f"tokens/s; speedup {speedup_words(result)}")
    if result["k"] == AUTO:
        line += f"; auto K for the batch, {result['mean_k']:.1f} a stream's step on average"
        if not result["mean_k"]:
            line += (f" (no guess paid for its rows at {result['streams']} streams' width "
                     "on this machine: speculation was off)")
    print(line, file=sys.stderr)
    for failure in result["failures"]:
        print(f"note: {failure}", file=sys.stderr)


# ------------------------------------------------------------------ specviz bench --streams


def bench_streams(args: argparse.Namespace, lanes, questions) -> int:
    """Every speculating lane against plain decoding at each stream count, by turns."""
    prompts = ([q.turns[0] for q in questions] if questions
               else prompt_set(args.stream_prompts or "spec-bench", None))
    request = options.run_request(args, prompts[0])
    local = [spec for spec in lanes if not is_plain(spec.oracle) and spec.oracle != SPAWNED]
    results = [_served_result(args, spec, request, prompts) for spec in lanes
               if spec.oracle == SPAWNED]
    results += _local_results(args, local, request, prompts) if local else []
    table = streams_table(results)
    print(table)
    meta = {"target": args.target, "max_tokens": args.max_tokens, "rounds": args.repeat,
            "prompts": len(prompts), "machine": machine_info()}
    if args.markdown:
        atomic.write_text(args.markdown, table + "\n")
    if args.json_out:
        atomic.write_text(args.json_out, json.dumps({"meta": meta, "lanes": results},
                                                    indent=1))
    return 0


def _local_results(args, lanes, request, prompts) -> list[dict]:
    pool = ModelPool()
    builders: list[StreamsBuilder] = []
    results = []
    try:
        plain = StreamsBuilder(options.lane_spec(args, PLAIN), request, pool, _say)
        builders.append(plain)
        for spec in lanes:
            lane = StreamsBuilder(spec, request, pool, _say)
            builders.append(lane)
            lane.session(prompts, max(args.streams))  # the widest must fit: said before any
            points = [conc.measure(n, partial(lane.session, prompts),
                                   partial(plain.session, prompts), args.repeat)
                      for n in args.streams]
            results.append(_lane_result(args, spec, plain.target, points))
    finally:
        for builder in builders:
            builder.close()
        pool.close()
    return results


def _served_result(args, spec, request, prompts) -> dict:
    """A llama-server lane: its speculation on a server of N slots and N clients at once,
    against a plain server of as many, at each N (engines/bench/served.py)."""
    model_path, speculation, threads = spawn_plan(spec, request.model)
    speculation = replace(speculation, extra=tuple(getattr(args, "spec_options", ())))
    settings = run_settings(spec, request)
    if args.repeat < 2:
        _say("one round at each client count gives no interval: --repeat 2 or more for one")
    points = []
    for n in args.streams:
        _say(f"{SPAWNED} {speculation.label}: {n} client{'s' if n > 1 else ''} at once")
        points.append(served.measure(n, model_path, speculation, settings, prompts,
                                     rounds=args.repeat, threads=threads, say=_say))
    return {"oracle": SPAWNED, "spec_type": speculation.label, "k": spec.k,
            "spec_options": list(speculation.extra), "threads": threads,
            "points": [p.to_dict() for p in points],
            "crossover": conc.measured_crossover(points)}


def _lane_result(args, spec, target, points: list[conc.Point]) -> dict:
    out = {"oracle": spec.oracle, "k": AUTO if spec.auto_k else spec.k,
           "points": [p.to_dict() for p in points],
           "crossover": conc.measured_crossover(points)}
    prediction = _prediction(args, target, points)
    if prediction is not None:
        out["predicted"] = prediction.to_dict()
    return out


def _prediction(args, target, points: list[conc.Point]) -> conc.Prediction | None:
    """From the fewest streams' acceptance and this machine's cost profile (stored only: a
    bench does not stop to measure one; `specviz profile` does)."""
    from ...engines.cost import profile as prof

    stored = prof.load(args.target, target.name, target.device, args.threads, target.dtype,
                       say=_say, variant=target.profile_variant)
    if stored is None:
        _say("no cost profile of this model here: the crossover is measured only "
             "(`specviz profile` stores one for the predicted crossover)")
        return None
    first = points[0]
    return conc.predict(lambda w: stored.cost_ms(w, PREDICT_CONTEXT), max(stored.batches),
                        first.tokens_per_step, first.width_per_step, [p.n for p in points])


PREDICT_CONTEXT = 512  # a prompt and a few hundred tokens of answer


def streams_table(results: list[dict]) -> str:
    head = ("| oracle | K | streams | tokens/s | plain tokens/s | a stream's pace | plain pace "
            "| speedup | verdict |\n|---|---|---|---|---|---|---|---|---|")
    rows, notes = [], []
    for r in results:
        for p in r["points"]:
            interval = (f"{p['speedup']:.2f}x" if p["interval"] is None else
                        f"{p['speedup']:.2f}x ({p['interval'][0]:.2f}-{p['interval'][1]:.2f})")
            rows.append(f"| {_lane_words(r)} | {_k_words(r)} | {p['streams']} | "
                        f"{p['tok_per_s']:.1f} | "
                        f"{p['plain_tok_per_s']:.1f} | {p['pace']:.1f} | {p['plain_pace']:.1f}"
                        f" | {interval} | {p['verdict']} |")
        notes.append(_crossover_words(r))
    return "\n".join([head, *rows, "", *notes])


def _crossover_words(r: dict) -> str:
    measured = r["crossover"]
    words = f"{_lane_words(r)} K={_k_words(r)}: " + (f"stops paying at {streams_words(measured)} "
                                              "(measured)" if measured
                                              else "pays at every stream count measured")
    predicted = r.get("predicted")
    if predicted:
        at = predicted["crossover"]
        words += ("; predicted from the cost profile: "
                  + (f"stops paying at {streams_words(at)}" if at else "pays at every count"))
        if predicted["extrapolated"]:
            words += (f" (passes wider than the profile's {predicted['widest_measured_pass']} "
                      f"tokens extrapolated, at {predicted['extrapolated']} streams)")
    return words


def _lane_words(r: dict) -> str:
    """The lane's name in the table: the oracle, or a serving engine with its speculation."""
    return f"{r['oracle']} {r['spec_type']}" if r.get("spec_type") else r["oracle"]


def _k_words(r: dict) -> str:
    return "its own" if r.get("spec_type") and not r["k"] else str(r["k"])


