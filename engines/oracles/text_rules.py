"""Heuristic rules that guess how a text (mostly code) goes on, without any model.

Each rule is a function of the context's text that returns the text it expects next, or None.
They are deliberately simple and named, so `specviz bench` can report how often each one is
right and a useless rule shows up. `guess` tries them in order and chains them (a closed line
is followed by the next line's indentation), recording which rule wrote which characters.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

PAIRS = {"(": ")", "[": "]", "{": "}"}
QUOTES = ("'", '"', "`")
MAX_CHAIN = 3  # rules applied one after another per guess
MIN_REPEAT = 3  # non-blank characters a line needs before it is matched against earlier lines
PY_BLOCK = re.compile(r"\s*(def|class|if|elif|for|while|with|try|except|async def)\b")
PY_DEDENT = re.compile(r"\s*(return|pass|break|continue|raise)\b")

Rule = Callable[[str, str], "str | None"]


@dataclass(frozen=True)
class Guess:
    """Text the rules expect next, in pieces, each with the rule that wrote it."""

    pieces: tuple[tuple[str, str], ...]  # (rule name, text)

    @property
    def text(self) -> str:
        return "".join(t for _, t in self.pieces)


def guess_language(text: str) -> str:
    """"python", "c-like" or "text", from markers in the text (the prompt)."""
    py = len(re.findall(r"^\s*(def |class |import |from \w+ import|elif )|:\n", text, re.MULTILINE))
    c = len(re.findall(r"[{;]\n|#include|\bfunction\b|\bconst\b|\bpublic\b", text))
    if py == c == 0:
        return "text"
    return "python" if py >= c else "c-like"


def current_line(text: str) -> str:
    return text[text.rfind("\n") + 1 :]


def indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def indent_unit(text: str) -> str:
    """The text's indentation step: a tab, or the smallest increase in spaces between lines."""
    steps = []
    previous = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("\t"):
            return "\t"
        width = len(indentation(line))
        if width > previous:
            steps.append(width - previous)
        previous = width
    return " " * min(steps) if steps else "    "


# ---------------------------------------------------------------- the rules


def repeat_line(text: str, lang: str) -> str | None:
    """The line so far begins like an earlier line: finish it the way that line went."""
    line = current_line(text)
    if len(line.strip()) < MIN_REPEAT:
        return None
    before = text[: len(text) - len(line)]
    for earlier in reversed(before.split("\n")[:-1]):
        if len(earlier) > len(line) and earlier.startswith(line):
            return earlier[len(line) :] + "\n"
    return None


def close_brackets(text: str, lang: str) -> str | None:
    """A bracket or string opened on this line was just closed, others are still open: close
    them too (`f(g(x)` -> `)`), and end the line (a Python block header with ':')."""
    line = current_line(text)
    if not line.strip() or line[-1] not in ")]}'\"`":
        return None
    stack, quote = _open_on_line(line)
    if quote or not stack:
        return None
    closers = "".join(PAIRS[b] for b in reversed(stack))
    if lang == "python" and PY_BLOCK.match(line):
        return closers + ":\n"
    return closers + ("\n" if lang == "python" else "")


def indent(text: str, lang: str) -> str | None:
    """After a newline, the next line's indentation: the last line's, one deeper after a block
    opener (':' '{' '(' '['), one shallower after a Python return/pass/break/continue/raise."""
    if not text.endswith("\n"):
        return None
    lines = [ln for ln in text[:-1].split("\n")[-50:] if ln.strip()]
    if not lines:
        return None
    last = lines[-1]
    unit = indent_unit("\n".join(lines))
    width = indentation(last)
    if last.rstrip().endswith((":", "{", "(", "[")):
        width += unit
    elif lang == "python" and PY_DEDENT.match(last):
        width = width[: max(0, len(width) - len(unit))]
    return width or None


IDIOMS: dict[str, tuple[tuple[str, re.Pattern[str], str], ...]] = {
    "python": (
        ("main-guard", re.compile(r"if __name__\Z"), ' == "__main__":\n'),
        ("self", re.compile(r"^[ \t]+def \w+\(\Z", re.MULTILINE), "self"),
        ("numpy-as", re.compile(r"^import numpy\Z", re.MULTILINE), " as np\n"),
        ("pandas-as", re.compile(r"^import pandas\Z", re.MULTILINE), " as pd\n"),
        ("pyplot-as", re.compile(r"^import matplotlib\.pyplot\Z", re.MULTILINE), " as plt\n"),
        ("kwargs", re.compile(r"\*args, \*\*\Z"), "kwargs"),
        ("super-init", re.compile(r"super\(\)\.\Z"), "__init__("),
        ("colon", re.compile(r"^[ \t]*(else|try|finally)\Z", re.MULTILINE), ":\n"),
        ("except-as", re.compile(r"except Exception\Z"), " as e:\n"),
    ),
    "c-like": (
        ("else-brace", re.compile(r"\} else\Z"), " {\n"),
        ("console-log", re.compile(r"\bconsole\.\Z"), "log("),
        ("println", re.compile(r"\bSystem\.out\.\Z"), "println("),
        ("main-args", re.compile(r"\bstatic void main\(\Z"), "String[] args) {\n"),
    ),
}
FENCE = re.compile(r"(^|\n)```\Z")


def idiom(text: str, lang: str) -> str | None:
    """Common idioms of the prompt's language; a code fence names the language."""
    return next((cont for _, cont in _idiom(text, lang)), None)


def _idiom(text: str, lang: str):
    tail = text[-200:]
    if FENCE.search(tail) and lang != "text":
        yield "fence", ("python" if lang == "python" else "") + "\n"
    for name, pattern, cont in IDIOMS.get(lang, ()):
        if pattern.search(tail):
            yield name, cont


def idiom_name(text: str, lang: str) -> str:
    return next((f"idiom:{name}" for name, _ in _idiom(text, lang)), "idiom")


RULES: tuple[tuple[str, Rule], ...] = (
    ("repeat-line", repeat_line),
    ("idiom", idiom),
    ("close-brackets", close_brackets),
    ("indent", indent),
)
RULE_NAMES = tuple(name for name, _ in RULES)


def guess(text: str, lang: str, max_chars: int = 200) -> Guess:
    """Apply the first rule that fires, then again on the extended text, up to MAX_CHAIN."""
    pieces: list[tuple[str, str]] = []
    for _ in range(MAX_CHAIN):
        for name, rule in RULES:
            cont = rule(text, lang)
            if cont:
                if name == "idiom":
                    name = idiom_name(text, lang)
                pieces.append((name, cont))
                text += cont
                break
        else:
            break
        if sum(len(t) for _, t in pieces) >= max_chars:
            break
    return Guess(tuple(pieces))


def _open_on_line(line: str) -> tuple[list[str], str | None]:
    """Brackets still open on the line, and the quote of a string still open, if any."""
    stack: list[str] = []
    quote: str | None = None
    escaped = False
    for ch in line:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in QUOTES:
            quote = ch
        elif ch == "#" and not stack:
            break  # a comment: nothing after it counts
        elif ch in PAIRS:
            stack.append(ch)
        elif ch in PAIRS.values():
            if stack and PAIRS[stack[-1]] == ch:
                stack.pop()
            else:
                stack.clear()  # closes something opened on an earlier line: start over
    return stack, quote
