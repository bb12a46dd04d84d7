"""Model names as people type them for the Hugging Face Hub, and which files such a name means.

The forms follow what transformers and llama.cpp take:
- `org/repo` and `org/repo@rev`: a repository (a transformers model when it has a config.json,
  otherwise its GGUF of llama.cpp's default quant);
- `org/repo:QUANT` (llama.cpp's `-hf` convention) and `org/repo@rev:QUANT`: the GGUF whose name
  carries that quant tag;
- `org/repo/file.gguf` and `org/repo@rev/sub/file.gguf`: one GGUF file of the repository.
A leading `hf.co/`, `huggingface.co/` or `https://huggingface.co/` is accepted (Ollama's and the
browser's spelling). No network here: this module only reads names and file lists.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import ModelError

DEFAULT_QUANT = "Q4_K_M"  # what llama.cpp's -hf takes when no tag is given
_PREFIX = re.compile(r"^(?:https?://)?(?:www\.)?(?:hf\.co|huggingface\.co)/", re.IGNORECASE)
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_REPO = rf"(?P<repo>{_PART}/{_PART})"
_REV = r"(?:@(?P<rev>[A-Za-z0-9._-]+))?"
_QUANT_NAME = re.compile(rf"^{_REPO}{_REV}(?::(?P<quant>[A-Za-z0-9._-]+))?$")
_FILE_NAME = re.compile(rf"^{_REPO}{_REV}/(?P<file>(?:{_PART}/)*{_PART}\.gguf)$", re.IGNORECASE)
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
# A quant tag inside a file name: Q4_K_M, Q8_0, IQ2_XXS, Q4_0_4_4, TQ1_0, BF16, F16, F32, MXFP4.
_QUANT_IN_NAME = re.compile(
    r"(?<![A-Za-z0-9])((?:I|T)?Q\d(?:_[A-Z0-9]+)*|BF16|F16|FP16|F32|MXFP4(?:_MOE)?)(?![A-Za-z0-9])",
    re.IGNORECASE,
)
WEIGHTS = (".safetensors",)
PICKLED_WEIGHTS = (".bin",)
MODEL_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "tokenizer.model", "special_tokens_map.json", "added_tokens.json", "vocab.json",
    "merges.txt", "chat_template.jinja", "chat_template.json",
    "model.safetensors.index.json", "pytorch_model.bin.index.json",
)  # fmt: skip


@dataclass(frozen=True)
class HubName:
    repo: str
    revision: str | None = None  # None: the default branch
    quant: str | None = None
    file: str | None = None

    @property
    def wants_gguf(self) -> bool:
        return bool(self.quant or self.file)

    def __str__(self) -> str:
        text = self.repo + (f"@{self.revision}" if self.revision else "")
        if self.file:
            return f"{text}/{self.file}"
        return text + (f":{self.quant}" if self.quant else "")


def parse(text: str) -> HubName | None:
    """The Hub name `text` spells, or None when it is not one (a registry name, a path)."""
    text = _PREFIX.sub("", text.strip())
    if text.startswith((".", "/", "~")) or "\\" in text:
        return None
    if match := _FILE_NAME.match(text):
        return HubName(match["repo"], match["rev"], None, match["file"])
    if match := _QUANT_NAME.match(text):
        if match["repo"].lower().endswith(".gguf"):
            return None
        return HubName(match["repo"], match["rev"], match["quant"])
    return None


def quant_of(filename: str) -> str | None:
    """The quant tag a GGUF's name carries (upper case), or None."""
    stem = _SPLIT.sub(".gguf", filename.rsplit("/", 1)[-1])
    found = _QUANT_IN_NAME.findall(stem.removesuffix(".gguf").removesuffix(".GGUF"))
    return found[-1].upper() if found else None


def is_gguf(filename: str) -> bool:
    return filename.lower().endswith(".gguf") and not _is_projector(filename)


def _is_projector(filename: str) -> bool:
    """Vision projectors (mmproj) sit beside the language model and are not one."""
    return "mmproj" in filename.rsplit("/", 1)[-1].lower()


def quants(files: Iterable[str]) -> list[str]:
    """The quant tags of a repository's GGUFs, each once, in file order."""
    seen: dict[str, None] = {}
    for name in files:
        if is_gguf(name) and (tag := quant_of(name)):
            seen.setdefault(tag)
    return list(seen)


def split_parts_index(filename: str) -> int | None:
    """Which part of a split GGUF this file is (1 for `-00001-of-00003`), or None."""
    match = _SPLIT.search(filename)
    return int(match[1]) if match else None


def split_parts(first: str, files: Iterable[str]) -> list[str]:
    """All parts of a split GGUF given any part (`-00001-of-00003`), in order; else [first]."""
    match = _SPLIT.search(first)
    if not match:
        return [first]
    count = int(match[2])
    stem = first[: match.start()]
    wanted = [f"{stem}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    by_lower = {name.lower(): name for name in files}
    missing = [w for w in wanted if w.lower() not in by_lower]
    if missing:
        raise ModelError(f"{first} is part of a split GGUF but {missing[0]} is not there")
    return [by_lower[w.lower()] for w in wanted]


def pick_gguf(name: HubName, files: list[str]) -> list[str]:
    """The GGUF file(s) `name` means among a repository's files: one, or a split's parts."""
    ggufs = [f for f in files if is_gguf(f)]
    if name.file:
        by_lower = {f.lower(): f for f in files}
        if name.file.lower() not in by_lower:
            raise ModelError(f"{name.repo} has no file {name.file}" + _listing(ggufs))
        return split_parts(by_lower[name.file.lower()], files)
    if not ggufs:
        raise ModelError(f"{name.repo} has no GGUF file")
    wanted = (name.quant or DEFAULT_QUANT).upper()
    matching = [f for f in ggufs if quant_of(f) == wanted]
    if not matching and name.quant:
        raise ModelError(f"{name.repo} has no {name.quant} GGUF; its quants: "
                         f"{', '.join(quants(ggufs)) or 'none tagged'}")
    first = sorted(matching or ggufs, key=_part_order)[0]
    return split_parts(first, files)


def _part_order(filename: str) -> tuple[int, str]:
    match = _SPLIT.search(filename)
    return (int(match[1]) if match else 1, filename)


def _listing(ggufs: list[str]) -> str:
    shown = [f for f in ggufs if not _SPLIT.search(f) or _SPLIT.search(f)[1] == "00001"]
    if not shown:
        return ""
    more = f" and {len(shown) - 6} more" if len(shown) > 6 else ""
    return f"; its GGUF files: {', '.join(shown[:6])}{more}"


def transformers_files(files: list[str]) -> list[str]:
    """The files a transformers model (or a heads folder) needs, weights as safetensors where
    the repository has them, its pickled .bin weights otherwise; none from subfolders."""
    top = [f for f in files if "/" not in f]
    weights = [f for f in top if f.endswith(WEIGHTS)]
    if not weights:
        weights = [f for f in top if f.endswith(PICKLED_WEIGHTS) and "training_args" not in f]
    return [f for f in top if f in MODEL_FILES or f in weights]
