"""`specviz train-heads`: train Medusa heads or an EAGLE head for a target by
self-distillation (transformers backend)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tqdm import tqdm

from ...engines.errors import SpecvizError
from ...engines.medusa.head_floor import will_not_pay
from ...engines.models import resolve
from . import option_values as values
from . import options


def register(sub) -> None:
    p = sub.add_parser(
        "train-heads", help="train Medusa heads or an EAGLE head for a target model "
        "(transformers backend)",
        description="Train drafting heads on text the target itself writes from a corpus of "
                    "prompts (the target stays frozen), then report their held-out accuracy "
                    "(Medusa: top-1/top-5 per head; EAGLE: acceptance by draft depth). They "
                    "are saved as safetensors beside the model. EAGLE training resumes where "
                    "a stopped run left off.")
    p.add_argument("--kind", choices=("medusa", "eagle"), default="medusa",
                   help="medusa: a residual block per position ahead; eagle: one decoder "
                        "layer over the target's low, middle and high features, drafting a "
                        "tree (default: %(default)s)")
    m = p.add_argument_group("model")
    m.add_argument("--target", default=options.DEFAULT_TARGET,
                   help="registry name, .gguf file or model folder (default: %(default)s)")
    m.add_argument("--device", default=None, help="cpu, cuda, mps (default: best available)")
    m.add_argument("--threads", type=values.threads, default=None,
                   help="CPU threads (default: all cores)")
    d = p.add_argument_group("data")
    d.add_argument("--corpus", type=Path, action="append", default=[],
                   help="prompts: a .jsonl file (Spec-Bench questions: first turn; or "
                        "\"prompt\"/\"text\" fields), a text file (one prompt) or a folder of "
                        "them; repeatable (default: the sample prompts in assets/prompts and "
                        "requests made from Python's standard library: code to edit, explain "
                        "or test, documentation to summarise)")
    d.add_argument("--tokens", type=int, default=12000,
                   help="tokens the target writes to train on, in all (default: %(default)s)")
    d.add_argument("--max-new", type=int, default=192, help="tokens per answer (%(default)s)")
    d.add_argument("--temperature", type=values.temperature, default=0.0,
                   help="the target's answers: 0 = greedy (default), else sampled")
    d.add_argument("--samples", type=int, default=1,
                   help="answers the target writes to each prompt, sampled (needs "
                        "--temperature above 0; default: %(default)s)")
    d.add_argument("--chat", action=argparse.BooleanOptionalAction, default=True,
                   help="wrap prompts in the model's chat template (default: on)")
    d.add_argument("--prompt-batch", type=int, default=8,
                   help="prompts the target answers together (default: %(default)s)")
    d.add_argument("--read", type=Path, action="append", default=[],
                   help="text files or folders (.py, .md, .rst, .txt) the target also reads: "
                        "one pass per chunk instead of one per token, labelled with the "
                        "target's own next-token choices; repeatable")
    d.add_argument("--read-tokens", type=int, default=100_000,
                   help="tokens of --read text, in all (default: %(default)s)")
    d.add_argument("--read-prompts", action=argparse.BooleanOptionalAction, default=True,
                   help="the target also reads the prompts of the answers it trains on (one "
                        "pass each; the held-out answers' prompts stay unseen) (default: on)")
    d.add_argument("--held-out", type=float, default=0.1,
                   help="share of answers kept out of training for the accuracy figures")
    t = p.add_argument_group("training")
    t.add_argument("--heads", type=int, default=4,
                   help="medusa: number of heads; eagle: rollout steps trained (the "
                        "training-time test's depth) (default: %(default)s)")
    length = t.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, default=None, help="optimiser steps")
    length.add_argument("--epochs", type=float, default=None,
                        help="passes over the training positions (medusa 3, eagle 16)")
    t.add_argument("--batch", type=int, default=None,
                   help="medusa: positions per step (64); eagle: sequences per step (4)")
    t.add_argument("--lr", type=float, default=None,
                   help="learning rate (medusa 1e-3, eagle 3e-4)")
    t.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                   help="of training's matrix products: bf16 (mixed precision, float32 "
                        "weights) where the CPU multiplies bfloat16 natively (AVX-512 BF16, "
                        "AMX), else fp32 (default: %(default)s)")
    t.add_argument("--seed", type=values.seed, default=0)
    p.add_argument("--out", type=Path, default=None,
                   help="folder for the heads (default: beside the model in the cache)")
    p.add_argument("--reuse", action=argparse.BooleanOptionalAction, default=True,
                   help="reuse the target's cached answers (hidden states) from an earlier "
                        "run with the same corpus and data settings (default: on)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ...engines.backends import load_backend

    settings = _settings(args)
    prompts = _prompts(args.corpus, args.seed, args.samples, args.tokens // 48 + 16)
    read_files = _read_files(args.read)
    path = resolve(args.target)
    target = load_backend("transformers", path, device=args.device, threads=args.threads)
    eagle = args.kind == "eagle"
    folder = args.out or _default_folder(path, eagle)
    layers = _layers(target) if eagle else None
    answers, gen_seconds = _answers(target, prompts, settings, folder, args.reuse, layers)
    _say_if_ran_out(answers, len(prompts), settings.tokens)
    reading, read_seconds = _reading(target, read_files, args.read_tokens, folder, args.reuse,
                                     layers, args.seed)
    if args.read_prompts:
        prompts_read, seconds = _prompts_read(target, answers, settings, folder, args.reuse,
                                              layers)
        reading += prompts_read
        read_seconds = seconds if read_seconds is None else read_seconds + (seconds or 0)
    facts = {"corpus": [str(c) for c in args.corpus] or ["assets/prompts", "python stdlib"],
             "prompts_used": len(answers), "tokens": sum(len(a.tokens) for a in answers),
             "generate_seconds": gen_seconds, "read": [str(r) for r in args.read],
             "read_tokens": sum(len(a.tokens) for a in reading),
             "read_seconds": read_seconds, "device": target.device,
             "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with tqdm(desc=f"training {args.kind}", unit="step", file=sys.stderr) as bar:
        def on_step(step: int, steps: int, loss: float) -> None:
            bar.total, bar.n = steps, step + 1
            bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
            bar.refresh()

        if eagle:
            result = _train_eagle(target, answers, settings, on_step, facts, layers, reading,
                                  folder)
        else:
            result = _train_medusa(target, answers, settings, on_step, facts, reading, folder)
    save, accuracy = result
    saved_in = where_to_save(folder, args.out is not None, accuracy,
                             "--eagle-head" if eagle else "--medusa-heads")
    save(saved_in)
    print(f"saved to {saved_in}")
    return 0


def where_to_save(folder: Path, asked: bool, accuracy: dict, flag: str) -> Path:
    """The folder asked for, or the model's own; a head that will not pay goes beside the
    model's folder instead, so no lane takes it for the model's head without being told."""
    why = will_not_pay(accuracy)
    if not why:
        return folder
    more = "more written text and steps help (e.g. --tokens 16000 --steps 1500)"
    if asked:
        print(f"specviz: {why}; {more}", file=sys.stderr)
        return folder
    weak = folder.with_name(f"{folder.name}-below-floor")
    print(f"specviz: {why}; saved apart, not as the model's head (try it with {flag} {weak}); "
          f"{more}", file=sys.stderr)
    return weak


def _say_if_ran_out(answers, n_prompts: int, asked: int) -> None:
    written = sum(len(a.tokens) for a in answers)
    if written < asked:
        print(f"specviz: the corpus ran out: its {n_prompts} prompts gave {written} of the "
              f"{asked} tokens asked; for more, give more prompts with --corpus, or several "
              "sampled answers to each with --temperature 0.8 --samples 3", file=sys.stderr)


def _default_folder(path: Path, eagle: bool) -> Path:
    if eagle:
        from ...engines.eagle.checkpoint import head_dir

        return head_dir(path)
    from ...engines.medusa.heads import heads_dir

    return heads_dir(path)


def _layers(target) -> list[int]:
    from ...engines.eagle.checkpoint import default_layers

    return default_layers(int(target.model.config.num_hidden_layers))


def _train_medusa(target, answers, settings, on_step, facts, reading, folder: Path):
    """Trained heads, reported: how to save them, and their accuracy figures."""
    from ...engines.medusa.heads import save_heads
    from ...engines.training import medusa as tr

    result = tr.train(target, answers, settings, on_step, facts, reading)
    _report(result.config)
    return (lambda out: save_heads(result.heads, result.config, out)), result.config.accuracy


def _train_eagle(target, answers, settings, on_step, facts, layers, reading, folder: Path):
    """A trained head, reported (its training state kept in `folder`): how to save it, and
    its accuracy figures."""
    from ...engines.training import eagle as et

    result = et.train(target, answers, settings, on_step, facts, state_dir=folder,
                      layers=layers, reading=reading)
    _report_eagle(result)
    return (lambda out: et.save(result, target, out)), result.accuracy


def _bar(desc: str, total: int, initial: int = 0):
    return tqdm(total=total, initial=initial, desc=desc, unit="tok", file=sys.stderr)


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def _answers(target, prompts: list[str], settings, folder: Path, reuse: bool, layers=None):
    from ...engines.training import cache

    return cache.answers(target, prompts, settings, folder, reuse, layers, _bar, _say)


def _read_files(paths: list[Path]) -> list[Path]:
    from ...engines.training.reading import text_files

    files = text_files(paths)
    if paths and not files:
        raise SpecvizError("--read holds no .py, .md, .rst or .txt files")
    return files


def _reading(target, files: list[Path], tokens: int, folder: Path, reuse: bool, layers,
             seed: int):
    from ...engines.training import cache

    return cache.reading(target, files, tokens, folder, reuse, layers, seed, _bar, _say)


def _prompts_read(target, answers, settings, folder: Path, reuse: bool, layers):
    from ...engines.training import cache

    return cache.prompts_read(target, answers, settings, folder, reuse, layers, _bar, _say)


def _settings(args: argparse.Namespace):
    from ...engines.training.answers import TrainSettings
    from ...engines.training.eagle import EagleSettings

    kind = EagleSettings if args.kind == "eagle" else TrainSettings
    batch = args.batch if args.batch is not None else kind.batch
    lr = args.lr if args.lr is not None else kind.lr
    epochs = args.epochs if args.epochs is not None else kind.epochs
    for name in ("tokens", "max_new", "heads", "prompt_batch", "read_tokens", "samples"):
        if getattr(args, name) < 1:
            raise SpecvizError(f"--{name.replace('_', '-')} must be at least 1")
    if args.steps is not None and args.steps < 1:
        raise SpecvizError("--steps must be at least 1")
    if not 0 < args.held_out < 1:
        raise SpecvizError("--held-out must be between 0 and 1")
    if args.temperature < 0:
        raise SpecvizError("--temperature must be >= 0")
    if args.samples > 1 and args.temperature == 0:
        raise SpecvizError("--samples above 1 needs --temperature above 0 (greedy answers to "
                           "one prompt are all the same)")
    if batch < 1 or lr <= 0:
        raise SpecvizError("--batch must be at least 1 and --lr above 0")
    common = dict(tokens=args.tokens, max_new=args.max_new, steps=args.steps, batch=batch,
                  lr=lr, held_out=args.held_out, temperature=args.temperature, chat=args.chat,
                  seed=args.seed, prompt_batch=args.prompt_batch, precision=args.precision)
    if args.kind == "eagle":
        return EagleSettings(ttt=args.heads, epochs=epochs, **common)
    return TrainSettings(n_heads=args.heads, epochs=epochs, **common)


def _prompts(corpus: list[Path], seed: int, samples: int = 1, made: int = 0) -> list[str]:
    """The corpus's prompts in a seeded order, each `samples` times in a row (one batch
    answers them together). Without a corpus: the sample prompts and `made` more from
    Python's standard library (engines.training.stdlib_prompts)."""
    import numpy as np

    from ...engines.corpus import bundled_prompts, read_prompts
    from ...engines.training.stdlib_prompts import stdlib_prompts

    for path in corpus:
        if not path.exists():
            raise SpecvizError(f"corpus not found: {path}")
    prompts = read_prompts(corpus or [bundled_prompts()])
    if not corpus:
        prompts += stdlib_prompts(made, seed)
    if len(prompts) < 2:
        raise SpecvizError(f"the corpus holds {len(prompts)} prompt(s); need at least two")
    order = np.random.default_rng(seed).permutation(len(prompts))
    # Mixed, so a token budget samples every kind.
    return [prompts[i] for i in order for _ in range(samples)]


def _data(facts: dict) -> str:
    wrote = f"{facts['tokens']} tokens the target wrote"
    return f"{wrote} and {facts['read_tokens']} it read" if facts.get("read_tokens") else wrote


def _report(config) -> None:
    acc, facts = config.accuracy, config.training
    print(f"trained {config.n_heads} heads on {_data(facts)} "
          f"({facts['prompts_used']} answers; {facts['steps']} steps, "
          f"{facts['train_seconds']} s in {facts['precision']}; held out "
          f"{facts['held_out_answers']} answers)")
    print("head  ahead  top-1   top-5   positions")
    for k, (a1, a5, n) in enumerate(zip(acc["top1"], acc["top5"], acc["positions"]), 1):
        print(f"{k:>4}  {k + 1:>5}  {a1:6.1%}  {a5:6.1%}  {n:>9}")


def _report_eagle(result) -> None:
    acc, facts = result.accuracy, result.training
    print(f"trained an EAGLE head on {_data(facts)} "
          f"({facts['prompts_used']} answers; {facts['steps']} steps, "
          f"{facts['train_seconds']} s in {facts['precision']}; held out "
          f"{facts['held_out_answers']} answers)")
    print("depth  accepted  given the depth before  positions")
    for d, (a, c, n) in enumerate(zip(acc["acceptance"], acc["conditional"],
                                      acc["positions"]), 1):
        print(f"{d:>5}  {a:8.1%}  {c:22.1%}  {n:>9}")
    print(f"mean accepted tokens per step, drafting a chain of {len(acc['acceptance'])}: "
          f"{acc['mean_accepted']:.2f}")
