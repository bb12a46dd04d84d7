"""`specviz bench`: the Spec-Bench-style table for oracles and K on this machine."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from tqdm import tqdm

from ...engines import atomic
from ...engines.bench import spec_bench as bench
from ...engines.errors import SpecvizError
from ...engines.host import run_builder
from ...engines.host.model_pool import ModelPool
from ...engines.host.run_spec import LaneSpec, ServerSpec
from ...engines.host.server_lanes import spawned_problem
from ...engines.oracles import ORACLE_INFO, is_plain
from ...engines.oracles.registry import CORPUS, MEMORY, MODEL, SPAWNED
from ...engines.servers.llama_speculation import ASK_DRAFT
from ...engines.trace import machine_info
from . import bench_tables, options
from . import option_values as values
from .cmd_streams import add_stream_args, bench_streams


def register(sub) -> None:
    p = sub.add_parser("bench", help="Spec-Bench-style table: speedup per category and oracle")
    options.add_model_args(p)
    p.add_argument("--oracles", default="none,prompt-lookup,ngram",
                   help=f"comma-separated, from {', '.join(ORACLE_INFO)}, or {SPAWNED} with "
                        "--streams (default: %(default)s)")
    options.add_input_args(p, kinds=(MODEL,))
    p.add_argument("--k", type=k_list, default=[bench.AUTO_K],
                   help="draft length, or a comma-separated list; auto (the default): "
                        "cost-aware, per step")
    # A bench starts from no memory (its figures must not depend on what ran before); the
    # suffix oracle still remembers the questions it has answered, as an agent loop would.
    options.add_input_args(p, defaults={"suffix_memory": "off"}, kinds=(CORPUS, MEMORY))
    options.add_setting_args(p)
    options.add_head_paths(p)
    p.add_argument("--questions", type=Path, default=None,
                   help="Spec-Bench JSONL file (needed unless --streams is given)")
    p.add_argument("--categories", default=None, help="comma-separated categories or groups")
    p.add_argument("--limit", type=values.positive, default=None,
                   help="questions per category group")
    options.add_sampling_args(p, max_tokens=256)
    p.add_argument("--top-p", type=values.top_p, default=1.0)
    p.add_argument("--seed", type=values.seed, default=0)
    p.add_argument("--repeat", type=values.positive, default=1,
                   help="run every turn N times, interleaved, and take the median time "
                        "(a noisy machine needs it to tell a few percent apart)")
    p.add_argument("--json", type=Path, dest="json_out", help="write every figure here")
    p.add_argument("--markdown", type=Path, help="write the table here")
    add_stream_args(p, many=True)
    g = p.add_argument_group(f"{SPAWNED} lanes (a serving engine under concurrency)")
    g.add_argument("--spec-type", metavar="TYPES", default=None,
                   help=f"with --oracles {SPAWNED} and --streams: llama.cpp's speculation, e.g. "
                        "ngram-simple or ngram-mod, on a llama-server with --parallel N slots "
                        "for N clients at once, against a plain one with as many (--draft: a "
                        "draft type's GGUF; --k: the longest draft)")
    g.add_argument("--spec-options", metavar="OPTIONS", type=spec_options, default=(),
                   help="further options of llama.cpp's speculation for the speculating "
                        "llama-server, passed as they are, each a --spec-... one, e.g. "
                        "\"--spec-ngram-simple-size-n 3\" (ngram-simple looks up 12 tokens "
                        "by default)")
    p.set_defaults(func=run)


def spec_options(text: str) -> tuple[str, ...]:
    """--spec-options: llama-server's own options of its speculation, nothing else (the
    server's address, model and slots are the bench's)."""
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {text!r}: {exc}") from None
    other = next((w for w in words if w.startswith("-") and not w.startswith("--spec-")), None)
    if other is not None:
        raise argparse.ArgumentTypeError(f"{other} is not an option of llama.cpp's "
                                         "speculation (--spec-...)")
    return words


def configs(args: argparse.Namespace) -> list[bench.Config]:
    names = [n.strip() for n in args.oracles.split(",") if n.strip()]
    unknown = [n for n in names if n not in ORACLE_INFO and n != SPAWNED]
    if unknown:
        raise SpecvizError(f"unknown oracle {unknown[0]!r}; choose from "
                           f"{', '.join(ORACLE_INFO)}, {SPAWNED}")
    if SPAWNED in names and getattr(args, "streams", None) is None:
        raise SpecvizError(f"{SPAWNED} is benched under concurrency: give the client counts "
                           "with --streams (e.g. 1,2,4)")
    return [bench.Config(n, 0) if is_plain(n) else bench.Config(n, k) for n in names
            for k in ([0] if is_plain(n) else args.k)]


def k_list(text: str) -> list[int]:
    """--k: auto or a draft length, or several, comma-separated (auto as bench.AUTO_K)."""
    return [bench.AUTO_K if k.strip().lower() == options.AUTO else options.k_value(k)
            for k in text.split(",")]


def lane_specs(args: argparse.Namespace) -> list[LaneSpec]:
    """A lane of each configuration, plain decoding's first, with the oracles' settings and
    inputs of the command line; one line for an input a lane lacks, before anything loads."""
    specs = [_spawned_spec(args, c.k) if c.oracle == SPAWNED else
             options.lane_spec(args, c.oracle, options.AUTO if c.k == bench.AUTO_K else c.k)
             for c in bench.plain_first(configs(args))]
    for spec in specs:
        if spec.oracle != SPAWNED:
            run_builder.check_lane(spec)
    return specs


def _spawned_spec(args: argparse.Namespace, k: int) -> LaneSpec:
    """A llama-server lane of the bench: its speculation types and K (auto: the server's
    own longest draft); one line for what it lacks, before any server starts."""
    if not args.spec_type or args.spec_type.strip() == "none":
        raise SpecvizError(f"--oracles {SPAWNED} needs llama.cpp's speculation: --spec-type "
                           "TYPES (e.g. ngram-simple)")
    spec = LaneSpec(oracle=SPAWNED, k=0 if k == bench.AUTO_K else k,
                    inputs={"draft": args.draft} if args.draft else {},
                    server=ServerSpec(spec=args.spec_type))
    problem = spawned_problem(spec, ASK_DRAFT)
    if problem:
        raise SpecvizError(problem)
    return spec


def _recorded(bar: tqdm, lanes: list[run_builder.LaneParts]) -> None:
    bar.update()
    for lane in lanes:
        notice = lane.oracle.notice()
        if notice:
            bar.write(f"specviz: {notice}", file=sys.stderr)


def _say(text: str) -> None:
    print(f"specviz: {text}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    cats = args.categories.split(",") if args.categories else None
    specs = lane_specs(args)
    if args.questions is None and args.streams is None:
        raise SpecvizError("give the questions with --questions FILE (a Spec-Bench JSONL)")
    questions = (bench.load_questions(args.questions, cats, args.limit) if args.questions
                 else [])
    for out in (args.markdown, args.json_out):  # said now, not after minutes of measuring
        if out is not None and not out.parent.is_dir():
            raise SpecvizError(f"cannot write {out}: no folder {out.parent}")
    if args.streams is not None:
        return bench_streams(args, specs, questions)
    pool = ModelPool()  # one target for every lane; a draft model's weights loaded once
    model = options.model_choice(args)
    target = run_builder.acquire(pool, model, args.target)
    bench.check_fits(target, questions)
    lanes = [run_builder.lane_parts(spec, model, target, pool, _say) for spec in specs]
    runs = sum(len(q.turns) for q in questions) * len(lanes)
    with tqdm(total=runs, unit="run", file=sys.stderr, desc="bench") as bar:
        records = bench.run_bench(lanes, questions, args.max_tokens,
                                  run_builder.sampling_params(options.run_request(args, "")),
                                  on_record=lambda r: _recorded(bar, lanes),
                                  repeat=args.repeat)
    rows = bench.summarise(records)
    table = bench_tables.markdown_table(rows)
    details = bench_tables.detail_table(rows)
    if details:
        table += "\n\nAcceptance per proposal detail:\n\n" + details
    print(table)
    meta = {"target": args.target, "draft": args.draft, "cross_draft": args.cross_draft,
            "backend": target.name, "device": target.device, "max_tokens": args.max_tokens,
            "repeat": args.repeat,
            "questions": str(args.questions), "machine": machine_info()}
    if args.markdown:
        atomic.write_text(args.markdown, table + "\n")
    if args.json_out:
        atomic.write_text(args.json_out, json.dumps(bench.to_json(records, rows, meta), indent=1))
    return 0
