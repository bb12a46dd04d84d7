"""`specviz gui` (the default command) opens the window; `specviz shot` screenshots it."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

from ...engines.errors import SpecvizError
from ...engines.host.relay import Address, parse_address
from ..qt_app import freeze_heap, make_app
from . import option_values as values
from . import options


def register(sub) -> None:
    p = sub.add_parser("gui", help="open the window (what `specviz` alone does)")
    p.add_argument("--replay", nargs="+", type=Path, metavar="FILE", help="open traces")
    p.add_argument("--speed", type=float, default=1.0, help="replay speed, 0.1 to 1")
    _add_engine_arg(p)
    p.set_defaults(func=lambda args: open_window(args.replay, args.speed, args.engine))
    _register_shot(sub)


def _register_shot(sub) -> None:
    p = sub.add_parser("shot", help="render the window after a run or replay and save a PNG",
                       description="Render the window without a person at the screen "
                                   "(works with QT_QPA_PLATFORM=offscreen).")
    p.add_argument("out", type=Path, nargs="?", metavar="OUT.png")
    p.add_argument("--replay", nargs="+", type=Path, metavar="FILE",
                   help="traces to replay (OUT.png may come before or after them)")
    options.add_prompt_args(p)  # a live run of this prompt
    p.add_argument("--oracles", default=None,
                   help="lanes for a live run, comma-separated (default: none,prompt-lookup; "
                        "no local lanes where --server is given)")
    p.add_argument("--server", action="append", default=[], metavar="URL",
                   help="add a lane on this OpenAI-compatible server (repeatable); a server "
                        "without speculation is the lanes' baseline")
    p.add_argument("--k", type=options.k_or_auto, default=options.AUTO,
                   help="draft length of every lane, or auto (the default: each lane's "
                        "cost-aware K; measures a missing cost profile first)")
    p.add_argument("--draft", default=None, help="draft model for a draft lane")
    options.add_head_paths(p)
    p.add_argument("--max-tokens", type=values.positive, default=128)
    p.add_argument("--temperature", type=values.temperature, default=0.0)
    p.add_argument("--streams", type=values.streams, default=1,
                   help="prompts every lane decodes at once, batched (1..16; the window's "
                        "streams control)")
    options.add_model_args(p)
    p.add_argument("--size", type=_size, default=(1600, 1000), metavar="WxH")
    p.add_argument("--theme", choices=("dark", "light"), default="dark")
    p.add_argument("--presentation", action="store_true")
    _add_engine_arg(p)

    def run(args: argparse.Namespace) -> int:
        from .shot import take_shot

        return take_shot(args)

    p.set_defaults(func=run)


def _add_engine_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", type=_address, metavar="HOST:PORT",
                   help="run the models on `specviz serve` at HOST:PORT instead of here "
                        "(token from SPECVIZ_ENGINE_TOKEN, else asked)")


def _address(text: str) -> Address:
    try:
        return parse_address(text)
    except SpecvizError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(n) for n in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError("size is WIDTHxHEIGHT, e.g. 1600x1000") from None
    if width < 200 or height < 200:
        raise argparse.ArgumentTypeError("the window needs at least 200x200")
    return width, height


def open_window(replay: list[Path] | None = None, speed: float = 1.0,
                engine: Address | None = None) -> int:
    from ..main_window import MainWindow
    from ..run.remote_engine import remote_engine

    _app, loop = make_app()
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl+C in the terminal ends the app
    window = MainWindow(remote=remote_engine(engine, ask=True))
    window.show()
    freeze_heap()
    if replay:
        window.open_replay(replay, speed)
    with loop:
        loop.run_forever()  # until the last window closes
    return 0
