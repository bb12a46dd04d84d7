"""llama.cpp's own speculation, as a spawned llama-server is started with it.

`--spec-type` takes a comma-separated list: every type named is set up, and each round the
first that drafts (llama.cpp's own order: the n-gram types, then the draft models) is
verified (common/speculative.cpp, `common_speculative_init`). The draft types read a second
GGUF (`-md`): draft-simple a smaller model of the target's vocabulary, draft-eagle3 an
EAGLE-3 head, draft-dflash and draft-dspark their drafters; draft-mtp drafts with the
target's own MTP layers. A server holds one draft GGUF, so at most one of those per server.

What llama.cpp knows is read from the binary's own `--help` (the line that lists
`--spec-type`'s values), so a newer build's types are taken as they come.
"""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecvizError

NONE = "none"
# The types that draft with a second GGUF, and what that file is.
DRAFT_FILES = {"draft-simple": "a draft model of the target's vocabulary",
               "draft-eagle3": "an EAGLE-3 head converted for the target",
               "draft-dflash": "a DFlash drafter", "draft-dspark": "a DSpark drafter"}
# draft-mtp drafts with the target's own MTP layers, or with an MTP head given as a GGUF.
MAY_DRAFT_FILE = ("draft-mtp",)
# Each type's own option for its longest and shortest draft (common/arg.cpp); ngram-cache
# drafts a fixed 8 and has neither.
MAX_OPTION = {"draft": "--spec-draft-n-max", "ngram-mod": "--spec-ngram-mod-n-max",
              "ngram-simple": "--spec-ngram-simple-size-m",
              "ngram-map-k": "--spec-ngram-map-k-size-m",
              "ngram-map-k4v": "--spec-ngram-map-k4v-size-m"}
MIN_OPTION = {"draft": "--spec-draft-n-min", "ngram-mod": "--spec-ngram-mod-n-min"}
# The types llama-cpp-python 0.3.36's llama.cpp takes, in its `--help`'s order: what the window
# offers before any server runs (a run checks the build's own `--help`, known_types; a lane
# may name a newer build's type the window does not list).
TYPES = ("draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
         "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
# What each type drafts from, in the window's words (its tooltip).
TYPE_WORDS = {**{name: f"drafts with {what} (a GGUF)" for name, what in DRAFT_FILES.items()},
              "draft-mtp": "drafts with the target's own MTP layers, or an MTP head's GGUF",
              "ngram-simple": "prompt lookup: the context's last tokens matched earlier in it",
              "ngram-map-k": "a map of the context's n-grams to what followed them (keys)",
              "ngram-map-k4v": "that map, keeping up to four continuations per n-gram",
              "ngram-mod": "a hashed table of the context's n-grams",
              "ngram-cache": "n-gram caches of the context (a fixed draft of 8)"}
ASK_DRAFT = "--draft FILE.gguf"  # how the command line asks for a missing draft file
_SPEC_TYPE_LINE = re.compile(r"--spec-type\s+([a-z0-9,-]+)")


@dataclass(frozen=True)
class Speculation:
    """What a spawned llama-server speculates with; no types: a plain server (the baseline)."""

    types: tuple[str, ...] = ()
    draft: Path | None = None  # the GGUF the draft types read
    draft_max: int | None = None  # the longest draft, passed to each type's own option
    draft_min: int | None = None
    extra: tuple[str, ...] = ()  # further llama-server arguments, passed as they are

    @classmethod
    def parse(cls, types: str | None, draft: str | Path | None = None,
              draft_max: int | None = None, draft_min: int | None = None,
              extra: tuple[str, ...] = ()) -> Speculation:
        """From `ngram-mod,draft-simple` as a person writes it; '' or 'none': plain."""
        named = tuple(dict.fromkeys(t.strip() for t in (types or "").split(",") if t.strip()))
        if named == (NONE,):
            named = ()
        return cls(named, Path(draft).expanduser() if draft else None, draft_max, draft_min,
                   tuple(extra))

    @property
    def plain(self) -> bool:
        return not self.types

    @property
    def label(self) -> str:
        return ",".join(self.types) or "plain"

    def check(self, known: tuple[str, ...]) -> None:
        """One line for the first thing llama.cpp would refuse or quietly ignore."""
        self.check_plan(known)
        if self.draft is not None:
            _check_draft_file(self.draft)

    def check_plan(self, known: tuple[str, ...] | None = None, ask: str = ASK_DRAFT) -> None:
        """One line for what is wrong before a server or a file is looked at: a type `known`
        lacks (None: not asked), 'none' among others, two types drafting with GGUFs of their
        own, a type's draft file missing (`ask`: how to give it) or given to none, a length
        out of range. The window asks this before a run starts."""
        for name in self.types:
            if name == NONE:
                raise SpecvizError("'none' means a plain server; name no other type with it")
            if known is not None and name not in known:
                raise SpecvizError(f"llama.cpp has no speculation type {name!r}; this "
                                   f"llama-server knows {', '.join(known)}")
        users = [t for t in self.types if t in DRAFT_FILES
                 or (t in MAY_DRAFT_FILE and self.draft is not None)]
        if len(users) > 1:
            raise SpecvizError(f"{' and '.join(users)} each draft with a GGUF of their own, and "
                               "a llama-server holds one: chain at most one of them")
        if users and self.draft is None:  # only types that must have one are left here
            raise SpecvizError(f"{users[0]} drafts with {DRAFT_FILES[users[0]]}: give it "
                               f"({ask})")
        if self.draft is not None and not users:
            raise SpecvizError(f"a draft file ({self.draft.name}) needs a type that drafts with "
                               f"it: {', '.join((*DRAFT_FILES, *MAY_DRAFT_FILE))}")
        _check_lengths(self.draft_max, self.draft_min)

    def arguments(self) -> list[str]:
        """llama-server's arguments for this speculation (nothing for a plain server)."""
        if self.plain:
            return list(self.extra)
        args = ["--spec-type", ",".join(self.types)]
        if self.draft is not None:
            args += ["--spec-draft-model", str(self.draft)]
        for name in self.types:
            family = "draft" if name.startswith("draft-") else name
            if self.draft_max is not None and family in MAX_OPTION:
                args += [MAX_OPTION[family], str(self.draft_max)]
            if self.draft_min is not None and family in MIN_OPTION:
                args += [MIN_OPTION[family], str(self.draft_min)]
        return _once(args) + list(self.extra)

    @property
    def longest_draft(self) -> int | None:
        """The most one step drafts, where every type takes `draft_max` (else unknown here)."""
        takes = all((("draft" if t.startswith("draft-") else t) in MAX_OPTION)
                    for t in self.types)
        return self.draft_max if takes and not self.plain else None


def known_types(binary: Path) -> tuple[str, ...]:
    """The speculation types this llama-server takes, from its `--help`."""
    stat = binary.stat()
    return _help_types(str(binary), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _help_types(binary: str, _mtime_ns: int, _size: int) -> tuple[str, ...]:
    try:
        result = subprocess.run([binary, "--help"], capture_output=True, text=True,
                                timeout=30, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SpecvizError(f"cannot run {binary} --help: {exc}") from None
    found = _SPEC_TYPE_LINE.search(result.stdout + result.stderr)
    if not found:
        raise SpecvizError(f"{binary} takes no --spec-type (an older llama-server); run "
                           "`specviz llama-server build` for specviz's own")
    return tuple(t for t in found[1].split(",") if t and t != NONE)


def takes_draft(name: str) -> bool:
    """Whether the type drafts with a GGUF of its own (draft-mtp: where one is given)."""
    return name in DRAFT_FILES or name in MAY_DRAFT_FILE


def _check_draft_file(draft: Path) -> None:
    if not draft.is_file():
        raise SpecvizError(f"no such draft file: {draft}")
    with open(draft, "rb") as f:
        if f.read(4) != b"GGUF":
            raise SpecvizError(f"{draft} is not a GGUF file; llama-server drafts with GGUFs")


def _check_lengths(draft_max: int | None, draft_min: int | None) -> None:
    if draft_max is not None and not 1 <= draft_max <= 1024:
        raise SpecvizError(f"the longest draft must be 1 to 1024 tokens, not {draft_max}")
    if draft_min is not None and not 0 <= draft_min <= 1024:
        raise SpecvizError(f"the shortest draft must be 0 to 1024 tokens, not {draft_min}")
    if draft_max is not None and draft_min is not None and draft_min > draft_max:
        raise SpecvizError(f"the shortest draft ({draft_min}) is longer than the longest "
                           f"({draft_max})")


def _once(args: list[str]) -> list[str]:
    """Options in pairs, each option once (chained draft types share theirs)."""
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    return [part for pair in pairs.items() for part in pair]
