"""`specviz run`: decode one prompt headless, streaming coloured tokens or printing JSON."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from ...engines import events as ev
from ...engines.backends.cpu_dtype import raced_since, racing, store_path, trial_line
from ...engines.bench.compare import check_against_plain
from ...engines.bench.rounds import Rounds, run_rounds
from ...engines.errors import SpecvizError
from ...engines.host.lanes import Lane, LocalLane, ServerLane
from ...engines.host.model_pool import ModelPool
from ...engines.host.run_builder import build_lane, build_server_lane
from ...engines.host.run_spec import LaneSpec
from ...engines.loop.session import Session
from ...engines.oracles import is_plain
from ...engines.oracles.registry import PLAIN, SPAWNED
from ...engines.speedup import NOISE, SLOWER
from ...engines.text_file import limit_for, read_text
from ...engines.trace import TraceWriter
from . import options
from .cmd_streams import add_stream_args, run_streams
from .console import EventPrinter, speedup_words, summary_line


def register(sub) -> None:
    p = sub.add_parser("run", help="decode a prompt headless (plainly or speculatively)",
                       description="Decode a prompt, streaming the text as it comes.")
    options.add_model_args(p)
    options.add_prompt_args(p)
    options.add_decoding_args(p)
    options.add_oracle_args(p)
    options.add_acceptance_args(p)
    options.add_server_args(p)
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print one JSON object at the end")
    out.add_argument("--trace", type=Path,
                     help="record every step to this JSONL file (with --streams, every "
                          "stream's)")
    out.add_argument("--baseline", action="store_true",
                     help="also decode plainly in the same process, the two stepped by turns, "
                          "and report the speedup with its interval")
    out.add_argument("--rounds", type=_rounds, default=1,
                     help="with --baseline: rounds of both (default 1: the interval comes "
                          "from stretches of the text; 3 or more: from the rounds' ratios)")
    out.add_argument("--show-rejected", action="store_true",
                     help="print rejected draft tokens struck through")
    add_stream_args(p)
    p.set_defaults(func=run)


def read_prompt(args: argparse.Namespace) -> str:
    if getattr(args, "prompt_file", None):
        # Bounded by the context before anything is tokenized; --n-ctx is llama.cpp's context,
        # a transformers model's own is known only once it loads.
        n_ctx = getattr(args, "n_ctx", 0) if getattr(args, "backend", None) == "llama" else 0
        return read_text(args.prompt_file, "prompt file", limit=limit_for(n_ctx))
    if getattr(args, "prompt", None) is None:
        raise SpecvizError("give a prompt with --prompt TEXT or --prompt-file FILE")
    if not args.prompt and not getattr(args, "chat", True):
        # No chat template around it: nothing at all to decode from.
        raise SpecvizError("the prompt is empty; give some text with --prompt (with "
                           "--no-chat the prompt is all the model sees)")
    return args.prompt


def run(args: argparse.Namespace) -> int:
    args.began = time.time()  # a dtype raced since then (in the probe's child too) is said
    if args.streams is not None:
        if args.server or args.oracle == SPAWNED:
            raise SpecvizError("--streams decodes with a local model, not on a server")
        given = None if args.stream_prompts not in (None, "given") else read_prompt(args)
        return run_streams(args, given)
    request = options.run_request(args, read_prompt(args))
    if args.server or args.oracle == SPAWNED:
        return run_server(args, request)
    pool = ModelPool()
    lanes = [build_lane("run", options.lane_spec(args, args.oracle), request, pool, say=_say)]
    try:
        if args.baseline:
            lanes.append(build_lane("plain", options.lane_spec(args, PLAIN), request, pool,
                                    say=_say))
        return _run(args, *lanes)
    finally:
        for lane in lanes:
            lane.close()
        pool.close()


def _rounds(text: str) -> int:
    n = int(text)
    if not 1 <= n <= 50:
        raise argparse.ArgumentTypeError(f"rounds must be between 1 and 50, got {n}")
    return n


def _run(args: argparse.Namespace, lane: LocalLane, plain: LocalLane | None = None) -> int:
    session = lane.session
    target = session.target
    printer = EventPrinter(show_rejected=args.show_rejected)
    shown = None if args.json else printer
    rounds = _drive_rounds(args, lane, plain, shown) if plain else None
    steps = rounds.lane_steps if rounds else _drive(lane, shown, args.trace)
    notice = lane.notice()
    if notice:
        _say(notice)
    trial = _dtype_trial(args, target)
    if trial:
        _say(trial_line(trial))
    summary = session.summary
    result = _result(args, target, summary)
    if trial:
        result["dtype_trial"] = trial
    if not is_plain(args.oracle):
        result["decline_rate"] = round(summary.totals.decline_rate, 4)
        result["declined"] = ev.decline_reasons(steps)
    if session.k_policy and steps:
        result["mean_k"] = round(sum(s.k for s in steps) / len(steps), 3)
        result["explored_steps"] = sum(1 for s in steps if s.explored)
    if rounds:
        result.update(_baseline(target, session, rounds))
        why = _why_slower(args, target, result)
        if why:
            result["why_slower"] = why
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        _print_footer(printer, summary, result)
    return 0


def _without_speculation(lane: LaneSpec) -> LaneSpec:
    """A llama-server lane's server as plain llama-server: no speculation, no draft."""
    return replace(lane, server=replace(lane.server, spec=None), inputs={})


def run_server(args: argparse.Namespace, request) -> int:
    """One completion on a serving engine, its steps read from what the engine streams."""
    spawned = not args.server
    if args.baseline and not spawned:
        raise SpecvizError("--baseline decodes with a local model; on a server give "
                           "--server-baseline URL (a server of the same model without "
                           "speculation)")
    lane = build_server_lane("run", options.server_lane(args, args.server), request)
    printer = EventPrinter(show_rejected=args.show_rejected)
    try:
        steps = _drive(lane, None if args.json else printer, args.trace)
    finally:
        lane.close()
    summary = lane.summary
    notice = lane.notice()
    if notice:
        _say(notice)
    result = _server_result(lane, summary, steps)
    if args.server_baseline or (spawned and args.baseline):
        # A spawned lane's baseline: a plain llama-server of the same model, started once the
        # lane's has stopped (two servers at once would share the cores).
        plain_lane = (_without_speculation(options.server_lane(args, None)) if spawned
                      else options.server_lane(args, args.server_baseline))
        plain = build_server_lane("plain", plain_lane, request)
        try:
            base = _drive(plain, None, None) and plain.summary
        finally:
            plain.close()
        result["baseline_tok_per_s"] = round(base.tok_per_s, 3)
        result["speedup"] = round(summary.tok_per_s / base.tok_per_s, 4) if base.tok_per_s \
            else None
        result["identical_to_baseline"] = summary.text == base.text
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        _print_footer(printer, summary, result)
    return 0


def _server_result(lane: ServerLane, summary: ev.SummaryEvent, steps) -> dict:
    t = summary.totals
    server = lane.header["server"]
    return {
        "text": summary.text, "tokens": t.tokens, "wall_s": round(summary.wall_ms / 1000, 4),
        "prefill_s": round(summary.prefill_ms / 1000, 4),
        "tok_per_s": round(summary.tok_per_s, 3), "reason": summary.reason,
        "server": server["url"], "engine": server["engine"], "build": server["build"],
        "model": server["model"], "speculation": server["speculation"], "steps": t.steps,
        "proposed": t.proposed, "accepted": t.accepted,
        "acceptance_rate": None if t.acceptance_rate is None else round(t.acceptance_rate, 4),
        "mean_accepted_tokens": round(t.mean_accepted_tokens, 4),
        "declined": ev.decline_reasons(steps), "lossy": False,
        **server_counts(lane),
    }


def server_counts(lane: ServerLane) -> dict:
    """The run's speculation as the server counted it (/metrics: acceptance by position)."""
    counts = getattr(lane.session, "server_counts", None)
    return {"server_counts": counts.to_dict()} if counts else {}


def _say(text: str) -> None:
    print(f"specviz: {text}", file=sys.stderr)


def _drive(lane: Lane, printer: EventPrinter | None, trace: Path | None) -> list[ev.StepEvent]:
    writer = TraceWriter(trace, lane.header) if trace else None
    steps: list[ev.StepEvent] = []
    try:
        for event in lane.steps():
            if writer:
                writer.write(event)
            if isinstance(event, ev.StepEvent):
                steps.append(event)
                if printer:
                    printer.step(event)
    except KeyboardInterrupt:
        lane.stop()
        raise
    finally:
        if writer:
            writer.close()
    return steps


def _drive_rounds(args: argparse.Namespace, lane: LocalLane, plain: LocalLane,
                  printer: EventPrinter | None) -> Rounds:
    """The lane and plain decoding by turns, `args.rounds` times; the first round's lane is
    the one printed and traced."""
    writer = TraceWriter(args.trace, lane.header) if args.trace else None

    def shown(event: ev.Event) -> None:
        if writer:
            writer.write(event)
        if printer and isinstance(event, ev.StepEvent):
            printer.step(event)

    def more(n: int) -> None:
        if n == 1 and not args.json:
            print(flush=True)  # the streamed text ends its line before the note
            printer.ended_line = True
            _say(f"timing {args.rounds - 1} more round{'s' if args.rounds > 2 else ''} of "
                 "both, for the speedup's interval")

    try:
        return run_rounds(lane.steps(), plain.steps(), lane.session, plain.session,
                          args.rounds, shown, more)
    except KeyboardInterrupt:
        lane.stop()
        plain.stop()
        raise
    finally:
        if writer:
            writer.close()


def _baseline(target, session: Session, rounds: Rounds) -> dict:
    base = rounds.plain[0]
    cmp = check_against_plain(target, session.prompt_ids, rounds.lane_steps,
                              rounds.plain_steps)
    speed = rounds.speedup()
    drafted = any(s.totals.proposed for s in rounds.lane)
    out = {
        "baseline_tok_per_s": round(_speed(rounds.plain), 3),
        **speed.to_dict(),
        "identical_to_baseline": cmp.identical and rounds.lane[0].text == base.text,
    }
    if not drafted and not is_plain(session.oracle.name):
        out["verdict"] = NOISE  # nothing proposed: plain decoding's own work, never a loss
        out["drafted"] = False
    if not cmp.identical:
        out["divergence"] = cmp.to_dict()
        out["near_tie"] = cmp.near_tie
    return out


def _speed(summaries: list[ev.SummaryEvent]) -> float:
    """Tokens per compute second over every round."""
    ms = sum(s.totals.compute_ms for s in summaries)
    return sum(s.totals.tokens for s in summaries) / (ms / 1000) if ms > 0 else 0.0


def _why_slower(args: argparse.Namespace, target, result: dict) -> str:
    """Why speculation lost to plain decoding here, from this machine's cost profile."""
    from ...engines.cost import profile as prof
    from ...engines.cost.why_slower import loss_reason

    if result.get("verdict") != SLOWER:
        return ""  # a loss within the machine's noise has no cause to explain
    stored = prof.load(args.target, args.backend, target.device, args.threads, target.dtype,
                       say=_say, variant=target.profile_variant)
    if stored is None:
        return ""
    costs = [stored.relative(n, 512) for n in range(1, 34)]
    return loss_reason(args.oracle, result, costs)


def _result(args, target, summary: ev.SummaryEvent) -> dict:
    t = summary.totals
    return {
        "text": summary.text,
        "tokens": t.tokens,
        "wall_s": round(summary.wall_ms / 1000, 4),
        "prefill_s": round(summary.prefill_ms / 1000, 4),
        "tok_per_s": round(summary.tok_per_s, 3),
        "reason": summary.reason,
        "target": args.target,
        "backend": target.name,
        "device": target.device,
        "dtype": target.dtype,
        "compile": getattr(target, "compiled", None),
        "oracle": args.oracle,
        "k": 0 if is_plain(args.oracle) else args.k,
        "seed": args.seed,
        "steps": t.steps,
        "proposed": t.proposed,
        "accepted": t.accepted,
        "acceptance_rate": None if t.acceptance_rate is None else round(t.acceptance_rate, 4),
        "mean_accepted_tokens": round(t.mean_accepted_tokens, 4),
        "lossy": bool(getattr(args, "typical_acceptance", False) and args.temperature > 0),
    }


def _dtype_trial(args: argparse.Namespace, target) -> dict | None:
    """The dtype race this command ran: in this process, or in the first-use probe's child,
    which races before the run loads the model and finds the choice remembered."""
    trial = getattr(target, "dtype_trial", None)
    if trial or target.name != "transformers" or not hasattr(args, "began"):
        return trial
    if target.device != "cpu" or not racing("cpu", options.dtype_asked(args), True):
        return None  # a dtype asked: the probe's race is not what this run computes in
    entry = raced_since(store_path(), target.model_path, args.threads, args.began)
    if not entry or entry.get("dtype") != target.dtype:
        return None
    return {**{name: entry[name] for name in ("dtype", "float32_ms", "bfloat16_ms")},
            "steady": True}  # remembered: a steady race, as one run here would say


def _sameness(result: dict) -> str:
    """A parting inside the backend's measured batched-vs-single noise is a near-tie, said as
    such; one outside it stays loud."""
    if result.get("identical_to_baseline"):
        return "identical"
    if result.get("near_tie"):
        return "identical up to a near-tie (see the note)"
    return "DIFFERENT"


def _print_footer(printer: EventPrinter, summary: ev.SummaryEvent, result: dict) -> None:
    if not printer.ended_line:
        print(file=sys.stdout, flush=True)
    line = summary_line(summary)
    if "mean_k" in result:
        line += f"; auto K, {result['mean_k']:.1f} on average"
    if "speedup" in result:
        line += (f"; plain decoding {result['baseline_tok_per_s']:.1f} tokens/s; speedup "
                 f"{speedup_words(result)}; output {_sameness(result)}")
    print(line, file=sys.stderr)
    if result["lossy"]:
        print("note: LOSSY typical acceptance: this text does not follow the target's "
              "distribution exactly", file=sys.stderr)
    if "divergence" in result:
        print(f"note: {result['divergence'].get('note', '')}", file=sys.stderr)
    if result.get("why_slower"):
        print(f"note: {result['why_slower']}", file=sys.stderr)
    if printer.colour:
        print(printer.legend(), file=sys.stderr)
