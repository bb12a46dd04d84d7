"""llama.cpp's own converter, run on an EAGLE-3 head: where its sources are, a target folder
it can read, and the run itself.

The converter (`convert_hf_to_gguf.py`, its `conversion` package and its own gguf-py) comes
with the llama.cpp sources that specviz builds llama-server from (the installed
llama-cpp-python's sdist, kept in specviz's cache), so the GGUF it writes is the one that
llama-server reads. It runs in a child process with the sources' gguf-py (`NO_LOCAL_GGUF`
unset): the gguf package installed beside specviz may predate the EAGLE3 architecture.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path

from ..errors import SpecvizError

CONVERTER = "convert_hf_to_gguf.py"


def sources() -> Path:
    """llama.cpp's source tree the converter runs from (fetched by the llama-server build);
    one line naming the command that fetches it where it is not here."""
    from ..llama_build import BUILD_HINT, source_tree

    tree = source_tree()
    if tree is None or not (tree / CONVERTER).is_file():
        raise SpecvizError("llama.cpp's sources (with its GGUF converter) are not in specviz's "
                           f"cache; {BUILD_HINT} (it fetches them and builds llama-server)")
    return tree


def server_binary() -> Path | None:
    """The llama-server built from those sources (or named by $SPECVIZ_LLAMA_SERVER)."""
    from ..llama_build import binary

    return binary()


def target_folder(model: Path, scratch: Path) -> Path:
    """A folder with the target's config.json and tokenizer, as the converter reads them
    (its layer count, width and vocabulary, and the tokenizer it copies into the head's GGUF):
    a transformers model folder as it is; for a GGUF, written into `scratch` by transformers
    from the tokenizer and config it reads out of the file."""
    if model.is_dir():
        return model
    from ..backends import hf_gguf
    from ..models import home_dir

    try:
        tok, config = hf_gguf.tokenizer_and_config(model.parent, model.name,
                                                   home_dir("cache") / hf_gguf.FOLDER)
    except Exception as exc:  # transformers' GGUF reader fails in many ways, one line here
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecvizError(f"cannot read the tokenizer and config of {model}: {first}") from None
    folder = scratch / "target"
    tok.save_pretrained(folder)
    config.save_pretrained(folder)
    return folder


def convert(head: Path, target: Path, out: Path, outtype: str,
            on_line: Callable[[str], None] | None = None) -> None:
    """Run the converter on the head folder `head` (the published EAGLE-3 layout) with the
    target folder `target`, writing `out`. Each line it logs goes to `on_line`; a failure is
    one line with the converter's own reason."""
    script = sources() / CONVERTER
    _check_needs()
    env = {k: v for k, v in os.environ.items() if k != "NO_LOCAL_GGUF"}
    command = [sys.executable, str(script), str(head), "--target-model-dir", str(target),
               "--outfile", str(out), "--outtype", outtype]
    last: deque[str] = deque(maxlen=40)
    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace", env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            if line:
                last.append(line)
                if on_line:
                    on_line(line)
        code = proc.wait()
    if code != 0:
        raise SpecvizError(f"llama.cpp's converter refused the EAGLE head: {reason(last)}")


# What the converter imports beyond specviz's own needs, as its requirements file pins it
# (it imports sentencepiece before it looks for a SentencePiece tokenizer, for every Llama).
NEEDS = {"sentencepiece": "sentencepiece>=0.1.98,<0.3.0"}


def _check_needs() -> None:
    from importlib.util import find_spec

    missing = [module for module in NEEDS if find_spec(module) is None]
    if missing:
        wanted = " ".join(f"'{NEEDS[m]}'" for m in missing)
        raise SpecvizError(f"llama.cpp's converter needs {', '.join(missing)}: "
                           f"pip install {wanted}")


def reason(lines) -> str:
    """The converter's reason for failing: the last thing it said (a traceback ends with the
    exception's line; its logger's errors read `ERROR:hf-to-gguf:...`)."""
    for line in reversed(list(lines)):
        text = line.strip()
        if text:
            return text.split(":", 2)[2].strip() if text.startswith("ERROR:") \
                and text.count(":") >= 2 else text
    return "it stopped without saying why"
