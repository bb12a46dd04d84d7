"""Command-line options shared by `run` and `bench`, and turning them into engine objects."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...engines.backends import BACKENDS, load_backend
from ...engines.backends.base import Backend
from ...engines.host.run_spec import AUTO, LaneSpec, ModelChoice, RunRequest, ServerSpec
from ...engines.loop.session import K_MAX, check_k
from ...engines.machine.device_choice import DTYPES
from ...engines.models import resolve
from ...engines.oracles import ORACLE_INFO
from ...engines.oracles import info as oracle_info
from ...engines.oracles.registry import (
    CORPUS,
    HEADS,
    INPUT_KINDS,
    MEMORY,
    MODEL,
    SERVER,
    SPAWNED,
    Input,
    InputKind,
    Setting,
)
from ..state.run_setup import DEFAULT_TARGET
from . import option_values as values


def add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--target", default=DEFAULT_TARGET,
                   help="registry name, Hub name (org/repo, org/repo:QUANT, "
                        "org/repo/file.gguf), .gguf file or model folder (default: %(default)s)")
    g.add_argument("--backend", choices=BACKENDS, default=None,
                   help="default: llama for a GGUF, transformers for a model folder or a Hub "
                        "repository with a config.json")
    g.add_argument("--device", default=None, help="cpu, cuda, mps (default: best available)")
    g.add_argument("--threads", type=values.threads, default=None,
                   help="CPU threads, at least 1 (default auto: all cores)")
    g.add_argument("--n-ctx", type=values.n_ctx, default=4096,
                   help="context length in tokens, at least the prompt's plus one (llama "
                        "backend; 0: the model's own; default: %(default)s)")
    g.add_argument("--dtype", choices=("auto", *DTYPES), default="auto",
                   help="what the transformers backend computes in (default auto: bfloat16 "
                        "where the device multiplies it natively; on a CPU with AVX-512 BF16 "
                        "or AMX the faster of the two, raced once a model; else float32)")
    g.add_argument("--compile", choices=("on", "off", "auto"), default=None,
                   help="the transformers backend's steps compiled with torch.compile over a "
                        "static cache (on), eager as before (off), or the faster of the two "
                        "here, raced once a model (auto); default: SPECVIZ_COMPILE, else auto on "
                        "CUDA and off elsewhere")
    g.add_argument("--no-fetch", action="store_true",
                   help="stop at a registry model that is not downloaded instead of fetching "
                        "it (also SPECVIZ_NO_FETCH=1)")


def add_prompt_args(p: argparse.ArgumentParser) -> None:
    """--prompt TEXT or --prompt-file F, the same on every command that takes a prompt."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="the prompt text")
    src.add_argument("--prompt-file", type=Path, help="read the prompt from a file")


def no_abbreviations(parser: argparse.ArgumentParser) -> None:
    """Turn off argparse's prefix matching on a parser and all its subcommands: with it,
    `--prompt` was taken for `--prompt-file` where only the latter existed."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                no_abbreviations(sub)


def add_oracle_args(p: argparse.ArgumentParser, many: bool = False) -> None:
    g = p.add_argument_group("speculation")
    oracles = tuple(ORACLE_INFO)  # the registry as it is when the parser is made
    if many:
        g.add_argument("--oracles", default="none,prompt-lookup,ngram",
                       help=f"comma-separated, from {', '.join(oracles)}")
    else:
        g.add_argument("--oracle", choices=(*oracles, SPAWNED), default="none",
                       help=f"{SPAWNED}: a llama-server started for the run, speculating with "
                            "--spec-type")
    add_input_args(g, kinds=(MODEL,))
    g.add_argument("--k", type=k_or_auto, default=AUTO,
                   help=f"draft length, 0..{K_MAX}, or auto (the default: chosen every step "
                        "from this machine's costs; measures a missing cost profile first)")
    add_input_args(g, kinds=(CORPUS, MEMORY))
    add_setting_args(g)
    add_head_paths(g)


def add_input_args(g, defaults: dict[str, str] | None = None,
                   kinds: tuple[InputKind, ...] = INPUT_KINDS) -> None:
    """A flag for each oracle input the registry declares, kind by kind of `kinds`, once for
    the oracles that share it (--draft; its help is the first's). `defaults` by input name: a
    command's own value where none is given (`specviz bench` starts from no suffix memory)."""
    flags = input_flags()
    for flag, first in ((f, uses[0][1]) for kind in kinds for f, uses in flags.items()
                        if uses[0][1].kind is kind):
        default = (defaults or {}).get(first.name)
        g.add_argument(f"--{flag}", default=default, metavar=first.kind.metavar,
                       type=Path if first.kind is CORPUS else None,
                       help=first.help.replace("{default}", default or first.default))


def input_flags() -> dict[str, list[tuple[str, Input]]]:
    """Each flag of the registry's inputs, with the (oracle, input) pairs it gives."""
    flags: dict[str, list[tuple[str, Input]]] = {}
    for name, described in ORACLE_INFO.items():
        for each in described.inputs:
            flags.setdefault(each.option, []).append((name, each))
    return flags


def oracle_inputs(name: str, args: argparse.Namespace) -> dict[str, str]:
    """The inputs of the oracle `name` given on the command line: each by its own flag, else
    by the flag it falls back to (cross-draft: --cross-draft, else --draft)."""
    given = {}
    for each in oracle_info(name).inputs:
        value = _given(args, each.option) or _given(args, each.fallback)
        if value is not None:
            given[each.name] = str(value)
    return given


def _given(args: argparse.Namespace, flag: str):
    return getattr(args, flag.replace("-", "_"), None) if flag else None


def add_server_args(p: argparse.ArgumentParser) -> None:
    """A lane on a serving engine instead of a local model (`specviz run --server URL`)."""
    from ...engines.host.server_lanes import SOURCES
    from ...engines.servers import ENGINE_NAMES

    g = p.add_argument_group("serving engine")
    g.add_argument("--server", metavar="URL", default=None,
                   help="watch an OpenAI-compatible server speculate (llama-server, vLLM, "
                        "SGLang) instead of running a local model, e.g. http://127.0.0.1:8080")
    g.add_argument("--server-engine", choices=ENGINE_NAMES, default="auto",
                   help="which engine serves there (default: ask it)")
    g.add_argument("--server-baseline", metavar="URL", default=None,
                   help="a server of the same model without speculation: decode there too "
                        "and report the speedup, by the engines' own clocks")
    g.add_argument("--api-key-env", metavar="NAME", default=None,
                   help="environment variable holding the server's API key (default: "
                        "SPECVIZ_API_KEY or OPENAI_API_KEY, when set)")
    g.add_argument("--spec-type", metavar="TYPES", default=None,
                   help=f"with --oracle {SPAWNED}: llama.cpp's speculation, e.g. ngram-mod or "
                        "ngram-simple,draft-simple (--draft: the draft model or EAGLE-3 head "
                        "GGUF; --k: the longest draft); `specviz llama-server path` lists them")
    g.add_argument("--server-drafts", choices=SOURCES, default=None,
                   help="colour the server's accepted drafts as this kind (default: as the "
                        "server says, else draft)")


def server_lane(args: argparse.Namespace, url: str | None) -> LaneSpec:
    """A lane on the server at `url`, or (None) on a llama-server started for the run."""
    k = args.k if isinstance(args.k, int) else 4
    if url is None:
        return LaneSpec(oracle=SPAWNED, k=0 if args.k == AUTO else k,
                        inputs={"draft": getattr(args, "draft", None)},
                        server=ServerSpec(source=args.server_drafts, spec=args.spec_type))
    return LaneSpec(oracle=SERVER, k=k, server=ServerSpec(
        url, engine=args.server_engine, api_key_env=args.api_key_env, source=args.server_drafts))


# Older spellings of a setting's flag, still taken.
FLAG_ALIASES = {"int8": ("--eagle-int8",)}


def add_setting_args(g) -> None:
    """A flag for each oracle setting the registry gives one (None: the oracle's default);
    a flag that several oracles share (--budget) says what it means to each."""
    for flag, uses in setting_flags().items():
        first = uses[0][1]
        meaning = "; ".join(f"{oracle}: {s.help} (default {s.default})" for oracle, s in uses)
        g.add_argument(f"--{flag}", *FLAG_ALIASES.get(flag, ()), type=type(first.default),
                       default=None, dest=flag.replace("-", "_"),
                       metavar=first.name.upper() if len(first.name) == 1 else None,
                       help=meaning)


def setting_flags() -> dict[str, list[tuple[str, Setting]]]:
    """Each flag of the registry's settings, with the (oracle, setting) pairs it sets."""
    flags: dict[str, list[tuple[str, Setting]]] = {}
    for name, described in ORACLE_INFO.items():
        for s in described.settings:
            if s.flag:
                flags.setdefault(s.flag, []).append((name, s))
    return flags


def settle_backend(args: argparse.Namespace) -> None:
    """`--backend` left out: the target's format decides (after it has been fetched)."""
    if hasattr(args, "backend") and args.backend is None:
        from ...engines.models import backend_for

        args.backend = backend_for(getattr(args, "target", None) or DEFAULT_TARGET)


def add_head_paths(g) -> None:
    """Where the medusa and eagle oracles' trained heads are (default: beside the target):
    the flags of the registry's heads inputs."""
    add_input_args(g, kinds=(HEADS,))


def oracle_settings(name: str, args: argparse.Namespace) -> dict:
    """The oracle's settings given on the command line (the ones left out: its defaults)."""
    given = {s.name: getattr(args, s.flag.replace("-", "_"), None)
             for s in oracle_info(name).settings if s.flag}
    return {k: v for k, v in given.items() if v is not None}


def add_acceptance_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("acceptance")
    g.add_argument("--typical-acceptance", action="store_true",
                   help="LOSSY: with sampling, keep proposals the target finds typical "
                        "(Medusa's p > min(epsilon, alpha*exp(-entropy))) instead of exact "
                        "rejection sampling; the output no longer follows the target's "
                        "distribution. Greedy (temperature 0) stays exact")
    g.add_argument("--typical-epsilon", type=values.non_negative, default=0.09,
                   help="typical acceptance's posterior threshold (default: %(default)s)")
    g.add_argument("--typical-alpha", type=values.non_negative, default=0.3,
                   help="typical acceptance's entropy factor (default: %(default)s)")


def add_decoding_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("decoding")
    add_sampling_args(g, max_tokens=256)
    g.add_argument("--top-p", type=values.top_p, default=1.0, help="in (0, 1] (default: 1)")
    g.add_argument("--seed", type=values.seed, default=0,
                   help=f"0..{values.SEED_MAX}, or -1 for a random one (default: 0)")
    g.add_argument("--chat", action=argparse.BooleanOptionalAction, default=True,
                   help="wrap the prompt in the model's chat template (default: on)")
    g.add_argument("--system", default=None, help="system message (with --chat)")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")


def add_sampling_args(g, max_tokens: int, temperature: float = 0.0) -> None:
    """--max-tokens and --temperature, checked alike on every command that takes them."""
    g.add_argument("--max-tokens", type=values.positive, default=max_tokens,
                   help="at least 1 (default: %(default)s)")
    g.add_argument("--temperature", type=values.temperature, default=temperature,
                   help="finite, at least 0; 0 = greedy (default: %(default)s)")


def k_value(text: str) -> int:
    try:
        return check_k(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a whole number between 0 and {K_MAX}, or auto, "
                                         f"got {text!r}") from None


def k_or_auto(text: str) -> int | str:
    return AUTO if text.strip().lower() == AUTO else k_value(text)


def model_choice(args: argparse.Namespace) -> ModelChoice:
    settle_backend(args)
    return ModelChoice(args.target, args.backend, args.device, args.threads,
                       getattr(args, "n_ctx", 4096), dtype_asked(args),
                       getattr(args, "compile", None))


def dtype_asked(args: argparse.Namespace) -> str | None:
    """The transformers dtype the command line asks (None: auto)."""
    dtype = getattr(args, "dtype", "auto")
    return None if dtype in (None, "auto") else dtype


def run_request(args: argparse.Namespace, prompt: str) -> RunRequest:
    """The run-wide settings of a command line, as the run builder takes them."""
    typical = None
    if getattr(args, "typical_acceptance", False):
        typical = (args.typical_epsilon, args.typical_alpha)
    return RunRequest(prompt=prompt, model=model_choice(args), max_tokens=args.max_tokens,
                      temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                      chat=getattr(args, "chat", True), system=getattr(args, "system", None),
                      stop=tuple(getattr(args, "stop", ()) or ()), typical=typical)


def lane_spec(args: argparse.Namespace, oracle: str, k: int | str | None = None) -> LaneSpec:
    """One oracle's lane from the command line's speculation options."""
    k = args.k if k is None else k
    return LaneSpec(oracle=oracle, k=0 if k == AUTO else k, auto_k=k == AUTO,
                    settings=oracle_settings(oracle, args), inputs=oracle_inputs(oracle, args))


def load_target(args: argparse.Namespace) -> Backend:
    settle_backend(args)
    return load_backend(args.backend, resolve(args.target), device=args.device,
                        threads=args.threads, n_ctx=args.n_ctx, dtype=dtype_asked(args),
                        compile=getattr(args, "compile", None))
